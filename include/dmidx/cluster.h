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

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// What one modelled NIC did since its cluster opened (the sim backend
// models NICs; other backends report none). Busy times are in the
// cluster's clock's nanoseconds.
struct NicUsage {
  std::string name;            // "mn0", "cn3"
  uint64_t messages = 0;       // ops and doorbells its engine handled
  uint64_t bytes_in = 0;       // wire bytes received, headers included
  uint64_t bytes_out = 0;      // wire bytes sent
  double engine_busy_ns = 0;   // time its engine was busy
  double link_in_busy_ns = 0;  // time its links were busy, each way
  double link_out_busy_ns = 0;
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

  // Time on the cluster's clock (Cluster::Now): real time, or virtual
  // time under the sim backend.
  virtual std::chrono::nanoseconds Now() const = 0;
  // Waits until Now() reads `deadline`, letting the other coroutines of
  // this thread run meanwhile (a blocking context sleeps). Returns at once
  // for a deadline already past.
  virtual void SleepUntil(std::chrono::nanoseconds deadline) = 0;

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

  // This compute node's id in its cluster: 0, 1, 2, ... for the clients of
  // an in-process cluster in the order they were made; the id the
  // bootstrap gave this process on a verbs cluster.
  virtual uint32_t compute_node_id() const = 0;
  // Compute-node failures (docs/design.md): judges compute node `node` of
  // this cluster through its lease, as a context waiting on a lock the
  // node holds does, waiting on `ctx` (a context of this client). Reads
  // the node's lease every LeaseOptions::period: false as soon as it moves
  // (the node renews: it lives, as far as its lease tells); true once the
  // node is gone for good: its lease stood still for LeaseOptions::timeout
  // and it was declared dead, fenced on every memory node (nothing it
  // posted lands any more) and recovered, by this call or by another
  // compute node. A node that is alive is known within a period or two; a
  // dead one after the timeout and its recovery. DeadlineExceeded when
  // neither happened by `deadline` on the cluster's clock; InvalidArgument
  // for this node's own id; FailedPrecondition under the sim backend from
  // a blocking context (virtual time moves while no lease is renewed).
  virtual StatusOr<bool> JudgeComputeNode(Context& ctx, uint32_t node,
                                          std::chrono::nanoseconds deadline) = 0;
  // One-sided ops posted to each memory node so far (indexed by node id)
  // by the worker threads and the live blocking contexts. Exact when no
  // operation is in flight.
  virtual std::vector<uint64_t> OpsPerMemoryNode() const = 0;

  // What this compute node's reclamation of remote memory did so far: its
  // worker threads', blocking contexts' and lease keeper's. Exact when no
  // operation is in flight.
  virtual ReclamationStats reclamation_stats() const = 0;
  // Hands every object the worker threads of Run retired and have not
  // freed yet to this compute node's lease keeper, which frees each once
  // its grace period ends (a worker otherwise frees what it retired only
  // when it retires more). Call between runs, before waiting for
  // reclamation_stats() to show everything reclaimed (a quiesce); objects
  // retired by blocking contexts still open stay theirs. FailedPrecondition
  // while a Run is in progress.
  virtual Status ReleaseRetired() = 0;

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

  // Makes a compute-node client. On the in-process backends (local, sim)
  // several clients of one cluster behave as separate CN processes (own
  // ids, caches and local lock tables). A verbs process is one compute node
  // of its run and has one client open at a time: NewClient returns
  // FailedPrecondition while another is open (two would write the same
  // compute-node id into lock words). Clients must not outlive the cluster.
  virtual Status NewClient(const ClientOptions& options, std::unique_ptr<Client>* client) = 0;

  // The clock every layer takes time from: real time since an arbitrary
  // origin fixed for the cluster's life, or virtual time under the sim
  // backend. Never goes back.
  virtual std::chrono::nanoseconds Now() const = 0;
  // What each modelled NIC did so far (the sim backend); empty otherwise.
  virtual std::vector<NicUsage> nic_usage() const = 0;
  // What every memory node's pool holds now, indexed by node id: one
  // control request to each (the memory nodes' CPUs answer; nothing on
  // the data path). The first memory node's error, naming it, otherwise.
  virtual StatusOr<std::vector<PoolUsage>> MemoryUsage() = 0;

  // Coordination of the compute-node processes of one run (a benchmark's
  // phases). On the in-process backends the run is this process: barriers
  // return at once and records live in its memory.
  //
  // The id of the next client this process makes (Client::compute_node_id).
  virtual uint32_t NextComputeNodeId() = 0;
  // Returns once `participants` compute-node processes of this run have
  // reached the barrier `name` (DeadlineExceeded after `timeout`, naming
  // who is missing).
  virtual Status Barrier(std::string_view name, uint32_t participants,
                         std::chrono::milliseconds timeout) = 0;
  // Small records shared by the processes of this run (memcached on a
  // bootstrapped verbs run: 1 MiB each at most, names of printable ASCII
  // without spaces). PutRecord replaces an earlier value; GetRecord waits
  // up to `timeout` for `name` to appear (DeadlineExceeded naming it).
  virtual Status PutRecord(std::string_view name, std::string_view bytes) = 0;
  virtual StatusOr<std::string> GetRecord(std::string_view name,
                                          std::chrono::milliseconds timeout) = 0;

 protected:
  Cluster() = default;
};

// Runs several clients of one cluster together: work[i] runs once on every
// coroutine of clients[i], all started at once (one OS thread per worker;
// one thread for everything under the sim backend's virtual time), and
// returns when all have returned: OK, or the first non-OK status in
// (client, thread, coroutine) order. FailedPrecondition, running nothing,
// if a client is already running, appears twice, or belongs to another
// cluster; InvalidArgument if the spans differ in length. No clients: OK
// at once. Client::Run is RunClients of one client.
Status RunClients(std::span<Client* const> clients, std::span<const Client::Work> work);

}  // namespace dmidx

#endif  // DMIDX_CLUSTER_H_
