// The fabric: one-sided operations on memory-node regions.
//
// A Fabric is one backend instance (the in-process `local` fabric, or rdma-core
// `verbs`). Each client thread gets its own Endpoint from Connect(): a
// connection (queue pair) to each memory node, created when first used. An
// endpoint is used by one thread at a time.
//
// Ordering (what every backend guarantees, and nothing more):
//  - The ops of one batch, and the batches posted on one endpoint to one node,
//    execute at the node in post order, with one exception: a WRITE may be
//    executed before the READ or atomic posted ahead of it, unless the WRITE
//    carries kFence. (So a lock CAS followed by a READ of the locked data in
//    one batch is safe; a READ followed by a WRITE of the same word is not.)
//  - A single READ or WRITE is not atomic: its 8-byte words may be read or
//    written in any order, interleaved with other connections' ops.
//  - CAS and FAA are atomic on their 8-byte word.
#ifndef DMIDX_FABRIC_FABRIC_H_
#define DMIDX_FABRIC_FABRIC_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/stats.h"
#include "dmidx/status.h"
#include "lib/fabric/fault_injector.h"
#include "lib/fabric/op.h"
#include "lib/fabric/registered_memory.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::fabric {

// Sizes of one memory node's two regions.
struct NodeLayout {
  uint64_t pool_bytes = 0;
  uint64_t lock_region_bytes = 0;
};

class Fabric;

// What one NIC of a modelled fabric (sim) did: the bench reports each NIC's
// utilisation from it. Real backends report none.
using NicUsage = ::dmidx::NicUsage;  // dmidx/cluster.h

// Counters of one endpoint. Each endpoint has its own, so nothing is
// contended or global. Every counter but compare_swap_failures is written
// only by the endpoint's owner thread (in Post), with a relaxed load and
// store rather than a read-modify-write; other threads only read them
// (AddTo). compare_swap_failures is written by whichever thread learns a
// CAS result: on `local` any thread that applies the op, on `verbs` the
// owner's Poll(); so it alone is a relaxed fetch_add.
class EndpointCounters {
 public:
  explicit EndpointCounters(uint16_t memory_nodes)
      : memory_nodes_(memory_nodes), ops_to_node_(new std::atomic<uint64_t>[memory_nodes]()) {}
  // What one batch adds to the counters.
  struct Tally {
    uint64_t ops[4] = {};  // by OpCode
    OpBytes bytes;
  };
  // Owner thread only: one batch of `ops` ops to `node`. Relaxed loads and
  // stores, no read-modify-write: nobody else writes these.
  void CountPost(uint16_t node, size_t ops, const Tally& tally) {
    Bump(batches_, 1);
    Bump(reads_, tally.ops[static_cast<int>(OpCode::kRead)]);
    Bump(writes_, tally.ops[static_cast<int>(OpCode::kWrite)]);
    Bump(compare_swaps_, tally.ops[static_cast<int>(OpCode::kCompareSwap)]);
    Bump(fetch_adds_, tally.ops[static_cast<int>(OpCode::kFetchAdd)]);
    Bump(bytes_read_, tally.bytes.read);
    Bump(bytes_written_, tally.bytes.written);
    if (node < memory_nodes_) Bump(ops_to_node_[node], ops);
  }
  // Any thread.
  void CountCompareSwapResult(uint64_t expected, uint64_t old_value) {
    if (expected != old_value) compare_swap_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  // Fills the fabric fields of `stats` (everything but round_trips).
  void AddTo(Stats* stats) const;
  // Adds the ops posted to each memory node to (*ops)[node], growing *ops
  // to the node count.
  void AddOpsPerNode(std::vector<uint64_t>* ops) const;

 private:
  static void Bump(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::atomic<uint64_t> batches_{0}, reads_{0}, writes_{0}, compare_swaps_{0}, fetch_adds_{0};
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0}, compare_swap_failures_{0};
  const uint16_t memory_nodes_;
  const std::unique_ptr<std::atomic<uint64_t>[]> ops_to_node_;
};

// One client thread's connections to every memory node. Not thread-safe: one
// thread uses it at a time (the backend itself may touch it from others).
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Registers [base, base + bytes) as memory that ops posted here may use as
  // local buffers. Registrations live as long as the endpoint.
  Status RegisterLocal(void* base, size_t bytes);

  // Posts `ops` to memory node `node` as one ordered batch (one doorbell).
  // With a completion, the batch is signaled: Post() calls
  // completion->Expect() and the backend calls Finish() exactly once, after
  // every op executed, or with the error that stopped the batch. One
  // completion may track several batches (to several nodes). Without one,
  // the batch is unsignaled: a failure is reported by a later Post(), which
  // then posts nothing.
  // Returns InvalidArgument, and posts nothing, for a malformed batch: empty;
  // more than max_batch_ops ops; unknown node or an op addressed to another
  // node; a remote range outside its region; a zero length or one over
  // max_message_bytes; an atomic that is not 8 bytes, 8-byte aligned at both
  // ends; kInline on anything but a WRITE of at most max_inline_bytes; a null
  // or unregistered local buffer. Never blocks.
  //
  // When a signaled batch completes, every op posted earlier on this endpoint
  // to the same node has executed too (RC completions arrive in order).
  //
  // With `bytes`, adds the batch's payload bytes (BytesOf) to it once posted.
  Status Post(uint16_t node, std::span<const Op> ops, Completion* completion,
              OpBytes* bytes = nullptr);

  // Makes progress and delivers completions. Cheap when nothing is pending.
  virtual void Poll() = 0;

  // Returns once every op posted here has executed and no other thread is
  // touching this endpoint's buffers or completions.
  virtual void Quiesce() = 0;

  // The compute node that opened this endpoint (Fabric::Connect).
  uint32_t compute_node() const { return compute_node_; }
  const EndpointCounters& counters() const { return counters_; }
  // The fabric's limits, copied at construction (no virtual call).
  const FabricCapabilities& capabilities() const { return capabilities_; }

 protected:
  Endpoint(const Fabric& fabric, uint32_t compute_node);
  // Makes [base, base + bytes) usable by the backend; returns its key
  // (RegisteredMemory::Range::key). Arguments are checked already.
  virtual StatusOr<uint32_t> DoRegister(void* base, size_t bytes) = 0;
  // Called with a validated batch whose local buffers are registered; the
  // completion (if any) expects this batch. On error nothing was posted, and
  // Post() finishes the completion with the error. A backend reports an
  // earlier unsignaled batch's failure here.
  virtual Status DoPost(uint16_t node, std::span<const Op> ops, Completion* completion) = 0;

  const RegisteredMemory& registered() const { return registered_; }

 private:
  // Post()'s checks in one pass that also tallies the batch: true if it
  // passes them all. On false, Post() asks ValidateBatch and the
  // registrations for the error.
  bool Admit(uint16_t node, std::span<const Op> ops, EndpointCounters::Tally* tally) const;
  Status Reject(uint16_t node, std::span<const Op> ops) const;

 protected:
  EndpointCounters counters_;

 private:
  const uint32_t compute_node_;
  // The fabric's limits and every node's layout, copied at construction
  // (they never change): Post checks each batch against them without a
  // virtual call.
  const FabricCapabilities capabilities_;
  const std::vector<NodeLayout> layouts_;
  RegisteredMemory registered_;
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  virtual const FabricCapabilities& capabilities() const = 0;
  virtual uint16_t node_count() const = 0;
  virtual NodeLayout layout(uint16_t node) const = 0;

  // A new endpoint for one client thread of compute node `compute_node`
  // (the id fault injection kills it by; any value the caller uses
  // consistently). Endpoints must not outlive the fabric. Thread-safe.
  StatusOr<std::unique_ptr<Endpoint>> Connect(uint32_t compute_node) {
    return DoConnect(compute_node);
  }
  // An endpoint that belongs to no compute node (fabric tests and tools
  // that drive the fabric directly); KillComputeNode never reaches it. On
  // `verbs` it is the process's compute node's (verbs_fabric.h:
  // ProcessComputeNode), so that a fence of that node reaches it.
  StatusOr<std::unique_ptr<Endpoint>> Connect() { return DoConnect(kUnnamedComputeNode); }
  static constexpr uint32_t kUnnamedComputeNode = UINT32_MAX;

  // Fences compute node `compute_node`, as a survivor does before it
  // touches what a node it judged dead held. When this returns OK, nothing
  // posted by that node's endpoints is applied any more: an apply already
  // in progress has finished (what it placed stays, as after a crash; on
  // `sim`, a WRITE landing in pieces keeps the pieces placed, possibly
  // torn, and drops the rest), ops posted and not applied, held ones of a
  // cut-off node included, complete with Unavailable marked
  // StatusDetail::kFenced (IsFenced) and naming the node, and every later
  // Post() of its endpoints fails so at once. Other compute nodes are
  // untouched. Idempotent; a node killed by fault injection keeps
  // reporting its death. Thread-safe, and may be called from an endpoint
  // of another compute node between its posts (never from inside a
  // completion's notification).
  //
  // InvalidArgument for kUnnamedComputeNode.
  //
  // On `verbs` the fence is the memory nodes': the fabric asks each
  // memory-node daemon over the control path its cluster backend gives it
  // (verbs_fabric.h: FenceRequest) to move the node's queue pairs to the
  // error state, and returns OK once each acknowledged; an unreachable
  // memory node gives Unavailable naming it (the fence may be retried).
  // Nothing of the node lands after that, but the node learns of it only
  // where a memory node refuses it (a new connection, a control request:
  // Unavailable marked kFenced naming it); ops on its queue pairs already
  // connected fail as on a lost link (Unavailable or DeadlineExceeded,
  // unmarked). NotSupported on a verbs fabric made without that path.
  Status FenceComputeNode(uint32_t compute_node);

  // The fault switches of this fabric (fault_injector.h), or nullptr when the
  // backend cannot inject faults. Lives as long as the fabric.
  virtual FaultInjector* faults() { return nullptr; }

  // Per-NIC usage since the fabric started, memory nodes first; empty
  // unless the backend models its NICs (sim).
  virtual std::vector<NicUsage> nic_usage() const { return {}; }

 protected:
  Fabric() = default;
  virtual StatusOr<std::unique_ptr<Endpoint>> DoConnect(uint32_t compute_node) = 0;
  // FenceComputeNode for a named compute node.
  virtual Status DoFenceComputeNode(uint32_t compute_node) = 0;
};

// Checks `ops` against the rules Post() documents; used by every backend.
Status ValidateBatch(uint16_t node, std::span<const Op> ops, uint16_t node_count,
                     const NodeLayout& layout, const FabricCapabilities& capabilities);

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_FABRIC_H_
