// The cluster handle, compute-node clients and per-coroutine contexts.
//
//   ClusterOptions options;
//   options.memory_nodes = 2;
//   std::unique_ptr<dmidx::Cluster> cluster;
//   dmidx::Status s = dmidx::Cluster::Open(options, &cluster);
//   std::unique_ptr<dmidx::Client> client;
//   s = cluster->NewClient({.threads = 4, .coroutines_per_thread = 8}, &client);
//   s = client->Run([&](dmidx::Context& ctx) { return index->Insert(ctx, key, value); });
//
// Index handles (later headers) take a Context& on every call: the context
// says which thread's connections, buffers and counters to use and how to
// wait (yield the coroutine, or block the thread).
#ifndef DMIDX_CLUSTER_H_
#define DMIDX_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "dmidx/options.h"
#include "dmidx/stats.h"
#include "dmidx/status.h"

namespace dmidx {

// What the fabric offers; index layers adapt to it.
struct FabricCapabilities {
  // The lock region lives in NIC device memory (faster atomics, no PCIe).
  bool on_chip_lock_memory = false;
  // Bytes of device memory used for the lock region; 0 when host memory.
  uint64_t on_chip_memory_bytes = 0;
  // Masked CAS/FAA. Always false on upstream rdma-core.
  bool masked_atomics = false;
  // Largest WRITE payload that may be posted inline (copied at post).
  uint32_t max_inline_bytes = 0;
  // Scatter/gather entries per op.
  uint32_t max_sge = 1;
  // Ops one batch (one doorbell) may carry.
  uint32_t max_batch_ops = 0;
  // Largest READ or WRITE.
  uint32_t max_message_bytes = 0;
};

// Per-coroutine (or per blocking caller) execution context. Created only by
// the runtime: Client::Run passes one to each coroutine, and
// Client::NewBlockingContext makes one for the calling thread. A context is
// used by one coroutine or thread at a time and never shared.
class Context {
 public:
  virtual ~Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Worker thread index in [0, threads); blocking contexts report -1.
  virtual int thread_index() const = 0;
  // Coroutine index in [0, coroutines_per_thread); blocking contexts report 0.
  virtual int coroutine_index() const = 0;
  // Counters of this context's thread (shared by its coroutines) so far.
  virtual Stats stats() const = 0;

 protected:
  Context() = default;
};

// One compute node. Owns its worker threads' connections, registered buffers
// and remote allocators. Thread-safe only where stated.
class Client {
 public:
  using Work = std::function<Status(Context&)>;

  virtual ~Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Runs `work` once on each of threads x coroutines_per_thread coroutines
  // and returns when all have returned: OK, or the first non-OK status in
  // (thread, coroutine) order. `work` must be safe to call concurrently.
  // One Run at a time per client.
  virtual Status Run(const Work& work) = 0;

  // Makes a context whose waits block the calling thread (no coroutines).
  // The context must be used only on the thread that created it, and must
  // not outlive this client. ResourceExhausted when the client has 65536
  // contexts alive (its coroutines' included).
  virtual Status NewBlockingContext(std::unique_ptr<Context>* context) = 0;

  // Sum of the counters of all worker threads and blocking contexts. Exact
  // when no operation is in flight.
  virtual Stats stats() const = 0;

  virtual const ClientOptions& options() const = 0;

 protected:
  Client() = default;
};

// A set of memory nodes reachable through one fabric. Thread-safe.
class Cluster {
 public:
  // Opens a cluster as `options` describe. For the local backend this starts
  // options.memory_nodes memory nodes in this process. On error *cluster is
  // left unchanged.
  static Status Open(const ClusterOptions& options, std::unique_ptr<Cluster>* cluster);

  virtual ~Cluster() = default;
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  virtual uint32_t memory_node_count() const = 0;
  virtual const FabricCapabilities& capabilities() const = 0;
  virtual const ClusterOptions& options() const = 0;

  // Makes a compute-node client. Several clients of one cluster behave as
  // separate CN processes (own caches and local lock tables). Clients must
  // not outlive the cluster.
  virtual Status NewClient(const ClientOptions& options, std::unique_ptr<Client>* client) = 0;

 protected:
  Cluster() = default;
};

}  // namespace dmidx

#endif  // DMIDX_CLUSTER_H_
