// Failure injection for fabric backends, after LevelDB's
// FaultInjectionTestEnv: switches a test flips while traffic runs, honoured
// by every backend that can (Fabric::faults() is null for one that cannot,
// such as verbs on a real NIC).
//
//   fabric::FaultInjector* faults = fabric.faults();
//   if (faults == nullptr) GTEST_SKIP() << "backend cannot inject faults";
//   ASSERT_TRUE(faults->FailNextBatches(/*node=*/0, 2).ok());
//
//   // Or: each batch compute node 1 posts fails with probability 1/100.
//   fabric::RandomBatchFailures failures;
//   failures.seed = 7;
//   failures.probability = 0.01;
//   failures.compute_nodes = {1};
//   ASSERT_TRUE(faults->FailBatchesAtRandom(failures).ok());
//
// What a backend does with a faulted batch: none of its ops is applied (for a
// batch caught while being applied, none of those not applied yet); a
// signaled batch completes, in order with the connection's other batches,
// with Unavailable naming the memory node or the compute node and saying the
// failure was injected; an unsignaled one makes the first Post() on its
// endpoint after the batch's turn came (a Quiesce() makes sure it came)
// return that status, posting nothing, as any failure of an unsignaled batch
// does. The one exception is FailNextBatchesAfterApplying: its batches are
// applied in full and then report the failure, as a batch whose completion
// was lost after the memory node executed it (verbs: a WRITE or CAS of a
// failed batch may have landed). A compute node's death is final: there is
// no revival (a restarted node connects under a new id).
//
// Fencing (Fabric::FenceComputeNode) is not a test switch but shares the
// machinery of KillComputeNode: a fenced compute node is stopped just as a
// killed one is, for good, and differs only in the status its failed ops
// report (Unavailable with StatusDetail::kFenced, naming the node, not
// "died (injected)"), since its process may be alive and must learn why.
// Whichever of the two comes first decides that status.
//
// SetComputeNodeCutOff models a partitioned link instead: nothing of the
// node is applied or completed while it is cut off, and it all goes on
// when the node is brought back. A stop wins over a cut-off: a node fenced
// or killed while cut off has its held batches dropped, completing with
// the stop's status, as a fenced queue pair flushes what it holds.
//
// Cost: a compute node's own stop and cut-off are read on each post and
// apply through a ComputeNodeFaultsCache, one atomic load while no compute
// node changed; a fence (the normal failure path, not a test switch) costs
// other nodes one reread of their own entry, not the armed path.
//
// Thread safety: every method may be called from any thread at any time.
#ifndef DMIDX_FABRIC_FAULT_INJECTOR_H_
#define DMIDX_FABRIC_FAULT_INJECTOR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dmidx/status.h"

namespace dmidx::fabric {

// Why a batch was not applied.
enum class InjectedFault : uint8_t {
  kNone,
  kFailedBatch,        // FailNextBatches
  kAppliedThenFailed,  // FailNextBatchesAfterApplying: applied, then failed
  kRandomBatch,        // FailBatchesAtRandom
  kUnreachable,        // SetUnreachable
  kDeadComputeNode,    // KillComputeNode
  kFencedComputeNode,  // Fence (Fabric::FenceComputeNode), not a test switch
};

// Whether `fault` stops a compute node for good (killed or fenced): its
// posts fail at once and its queued ops never apply.
inline bool StopsComputeNode(InjectedFault fault) {
  return fault == InjectedFault::kDeadComputeNode || fault == InjectedFault::kFencedComputeNode;
}

// What stops or holds one compute node's traffic now.
struct ComputeNodeFaults {
  InjectedFault stop = InjectedFault::kNone;  // kNone, kDeadComputeNode or kFencedComputeNode
  bool cut_off = false;                       // SetComputeNodeCutOff
  // Whether the node's ops wait: cut off and not stopped (a stop wins).
  bool holds() const { return cut_off && stop == InjectedFault::kNone; }
};

class ComputeNodeFaultsCache;

// Exact counts of what was injected, in batches.
struct FaultCounters {
  // Batches failed by FailNextBatches.
  uint64_t failed_batches = 0;
  // Batches failed because their memory node was unreachable, at post or
  // while queued.
  uint64_t unreachable_batches = 0;
  // Batches of a killed or fenced compute node that were queued when it was
  // stopped and were dropped (never applied, or not all of their ops).
  uint64_t dropped_batches = 0;
  // Posts refused because their endpoint's compute node was dead or fenced.
  uint64_t dead_posts = 0;
  // Batches FailBatchesAtRandom judged (posted by a compute node it names,
  // and not failed for another reason), and those of them it failed.
  uint64_t random_judged_batches = 0;
  uint64_t random_failed_batches = 0;
  // Batches applied and then failed by FailNextBatchesAfterApplying.
  uint64_t applied_then_failed_batches = 0;
};

// What FailBatchesAtRandom fails.
struct RandomBatchFailures {
  // With `probability`, the n-th batch judged (counted from the call, in
  // the order batches are posted) fails iff a hash of (seed, n) says so:
  // the same seed and the same order of posts fail the same batches, so a
  // simulated run replays exactly.
  uint64_t seed = 1;
  // Chance, in [0, 1], that a judged batch fails. 0 judges and fails none.
  double probability = 0;
  // Only batches posted by these compute nodes are judged; empty: every
  // compute node's.
  std::vector<uint32_t> compute_nodes;
  // Once this many failed, no more do (they are still judged).
  uint64_t max_failures = UINT64_MAX;
  // After a failure, this many judged batches pass before the next may
  // fail: failures stay single, so the retries and undo that follow one
  // are not failed too. 0: none.
  uint64_t min_spacing = 0;
};

class FaultInjector {
 public:
  explicit FaultInjector(uint16_t node_count);
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // ---- Switches (tests) --------------------------------------------------

  // The next `count` batches posted to memory node `node`, from any
  // endpoint, fail (adds to any count still pending). Batches refused for
  // another reason (unreachable node, dead compute node) do not use it up.
  // InvalidArgument for an unknown node.
  Status FailNextBatches(uint16_t node, uint64_t count);

  // The next `count` batches posted to memory node `node` (after any
  // FailNextBatches count, which a batch uses up first) are applied in full,
  // every op, and then fail as above: the state a batch leaves whose
  // completion was lost after the memory node executed it, which a caller
  // cannot tell from a batch that applied nothing. For tests of the paths
  // that must hold either way. InvalidArgument for an unknown node.
  Status FailNextBatchesAfterApplying(uint16_t node, uint64_t count);

  // While `unreachable`, every batch to `node` fails: those posted, and
  // those queued earlier that are not applied yet. InvalidArgument for an
  // unknown node.
  Status SetUnreachable(uint16_t node, bool unreachable);

  // From now on, batches to any memory node fail at random as `failures`
  // says, after FailNextBatches' count (which a batch uses up first) and
  // until StopRandomFailures(); replaces an earlier call's choice and
  // restarts its sequence. InvalidArgument for a probability outside
  // [0, 1].
  Status FailBatchesAtRandom(const RandomBatchFailures& failures);
  void StopRandomFailures();

  // Compute node `compute_node` dies (for good): every op of its endpoints'
  // batches not applied yet is dropped, and every later Post() of those
  // endpoints fails. What it did to remote memory before stays, as after a
  // real crash (a lock word it took stays taken).
  void KillComputeNode(uint32_t compute_node);

  // While `cut_off`, compute node `compute_node` is cut off from every
  // memory node, as by a partitioned link: its batches, queued ones and
  // those posted meanwhile (Post() accepts them, as a NIC does), are
  // neither applied nor completed; they wait. Brought back (false), they
  // apply and complete in order. Fenced or killed, cut off or not, the
  // node's held batches complete with its status and none of their ops
  // applies. Other compute nodes are untouched.
  //
  // What a waiter sees: neither in-process fabric times an op out, so a
  // waiter on a cut-off node's completion waits until the node is brought
  // back or stopped. On `local` that is wall-clock time, and
  // Endpoint::Quiesce() (so an endpoint's destructor) blocks as long:
  // bring the node back, or stop it, before its endpoints go. On `sim`
  // virtual time goes on (the held ops are looked at again every
  // SimOptions::round_trip), so other nodes' lock deadlines pass while it
  // waits; Quiesce() runs events until the node is brought back or
  // stopped, which from the quiescing thread itself is never.
  void SetComputeNodeCutOff(uint32_t compute_node, bool cut_off);

  FaultCounters counters() const;

  // ---- Backend side --------------------------------------------------------

  // Whether `compute_node` is stopped (and why) or cut off now.
  ComputeNodeFaults FaultsOf(uint32_t compute_node) const;
  bool IsUnreachable(uint16_t node) const {
    return unreachable_[node].load(std::memory_order_acquire);
  }
  // Changes whenever a compute node is killed, fenced, cut off or brought
  // back; lets a backend cache FaultsOf() (ComputeNodeFaultsCache). 0 until
  // the first such change.
  uint64_t compute_node_generation() const {
    return compute_node_changes_.load(std::memory_order_acquire);
  }

  // Decides the fate of a batch being posted to `node` by the compute node
  // `mine` caches the faults of, and counts it: kNone (post it), or why it
  // fails (a stop: fail the post; kAppliedThenFailed: post and apply it,
  // then complete it with StatusOf that fault). Uses up one
  // FailNextBatches count when that is the reason, and is the next batch
  // FailBatchesAtRandom judges when it names the compute node.
  // Two loads while no compute node changed since `mine` last looked and
  // no other switch was ever flipped (the common case, fences included).
  inline InjectedFault OnPost(uint16_t node, ComputeNodeFaultsCache& mine);

  // Counts a batch that was queued and then found faulted while being
  // applied (kUnreachable, kDeadComputeNode or kFencedComputeNode).
  void CountDroppedWhileQueued(InjectedFault fault);

  // The status a batch faulted by `fault` reports.
  static Status StatusOf(InjectedFault fault, uint16_t node, uint32_t compute_node);

 private:
  // Stops `compute_node` for good as fenced (see the top of this file).
  // Idempotent; a node killed before stays reported as dead. Private: only
  // the fabrics call it, from Fabric::FenceComputeNode, which then waits
  // out an apply in progress; on its own it does not exclude one.
  void Fence(uint32_t compute_node);
  friend class LocalFabric;
  friend class SimFabric;

  const uint16_t node_count_;
  std::unique_ptr<std::atomic<uint64_t>[]> fail_next_;            // by node
  std::unique_ptr<std::atomic<uint64_t>[]> fail_after_applying_;  // by node
  std::unique_ptr<std::atomic<bool>[]> unreachable_;              // by node

  // Compute nodes that were ever stopped or cut off; few, so a vector.
  struct ComputeNodeEntry {
    uint32_t compute_node;
    ComputeNodeFaults faults;
  };
  // Applies `change` to `compute_node`'s entry (made if missing) under the
  // mutex and publishes it (compute_node_changes_; not armed_).
  template <typename Change>
  void ChangeComputeNode(uint32_t compute_node, Change change);
  // `compute_node`'s entry in `entries` (compute_nodes_), or its end().
  template <typename Entries>
  static auto Find(Entries& entries, uint32_t compute_node) {
    return std::find_if(entries.begin(), entries.end(),
                        [compute_node](const ComputeNodeEntry& entry) {
                          return entry.compute_node == compute_node;
                        });
  }
  mutable std::mutex compute_nodes_mutex_;
  std::vector<ComputeNodeEntry> compute_nodes_;  // guarded by compute_nodes_mutex_
  std::atomic<uint64_t> compute_node_changes_{0};

  // Set (release) before any switch of a memory node or FailBatchesAtRandom
  // flips, and never cleared: until then OnPost reads nothing else beyond
  // the compute node's own cached faults. Set before, not after: whoever
  // sees a switch flipped (with acquire) sees armed_ too. Compute-node
  // stops and cut-offs leave it alone: they are read through
  // compute_node_changes_, so a fence does not slow other nodes' posts.
  std::atomic<bool> armed_{false};
  InjectedFault OnArmedPost(uint16_t node, uint32_t compute_node);
  // Counts a post refused because its compute node was stopped; returns `stop`.
  InjectedFault RefusePost(InjectedFault stop) {
    dead_posts_.fetch_add(1, std::memory_order_relaxed);
    return stop;
  }
  static bool TakeOne(std::atomic<uint64_t>& pending);

  std::atomic<uint64_t> failed_batches_{0}, unreachable_batches_{0}, dropped_batches_{0};
  std::atomic<uint64_t> applied_then_failed_batches_{0};
  std::atomic<uint64_t> dead_posts_{0};

  // FailBatchesAtRandom: judged in one order under the mutex (test-only
  // traffic: the mutex is taken only once a switch was flipped).
  InjectedFault JudgeAtRandom(uint32_t compute_node);
  std::atomic<bool> random_on_{false};  // a hint: read again under random_mutex_
  mutable std::mutex random_mutex_;
  RandomBatchFailures random_;       // guarded by random_mutex_
  uint64_t random_threshold_ = 0;    // guarded: fails when the hash is below it
  bool random_always_ = false;       // guarded: probability 1
  uint64_t random_judged_ = 0;       // guarded: since the last FailBatchesAtRandom
  uint64_t random_failed_ = 0;       // guarded: since the last FailBatchesAtRandom
  uint64_t random_quiet_until_ = 0;  // guarded: judged index before which none fails
  std::atomic<uint64_t> random_judged_batches_{0}, random_failed_batches_{0};
};

// FaultInjector::FaultsOf(compute_node), read again only when some compute
// node's faults changed since it last looked (compute_node_generation()):
// one atomic load while none did. Not thread-safe: one per thread, or one
// guarded by a lock. Reading the generation with acquire, then the entry
// under the injector's mutex, a change made before the load is seen.
class ComputeNodeFaultsCache {
 public:
  explicit ComputeNodeFaultsCache(uint32_t compute_node) : compute_node_(compute_node) {}

  uint32_t compute_node() const { return compute_node_; }
  const ComputeNodeFaults& Get(const FaultInjector& injector) {
    const uint64_t generation = injector.compute_node_generation();
    if (generation != generation_) {
      generation_ = generation;
      faults_ = injector.FaultsOf(compute_node_);
    }
    return faults_;
  }

 private:
  const uint32_t compute_node_;
  uint64_t generation_ = 0;  // 0: no change yet, and FaultsOf() is {} then
  ComputeNodeFaults faults_;
};

InjectedFault FaultInjector::OnPost(uint16_t node, ComputeNodeFaultsCache& mine) {
  const InjectedFault stop = mine.Get(*this).stop;
  if (stop != InjectedFault::kNone) return RefusePost(stop);
  if (!armed_.load(std::memory_order_acquire)) return InjectedFault::kNone;
  return OnArmedPost(node, mine.compute_node());
}

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_FAULT_INJECTOR_H_
