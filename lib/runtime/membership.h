// Which compute nodes of a run are alive, as one compute node learns it,
// and what it does about one that died (docs/design.md, "Compute-node
// failures"). Nothing here runs on the fast path: a context asks only once
// it has waited a lease period on a word another compute node holds.
//
// A waiter reads the holder's lease each period (Check). Once the holder's
// lease word has stood unchanged for lease.timeout on the waiter's clock,
// the waiter declares it dead (one CAS from the word it judged: of all the
// survivors that judge it, one wins), and the winner recovers it:
//   1. notes in its own lease record whom it recovers;
//   2. fences the dead node on every memory node (Fabric::FenceComputeNode),
//      so that nothing it posted can land afterwards;
//   3. takes over whatever the dead node was itself recovering, and
//      recovers that first;
//   4. runs the recovery steps layers registered (AddRecoveryStep: redo
//      records, index repairs), each of which must be idempotent;
//   5. marks the dead node recovered, and clears its note.
// Every other waiter reads the dead node's word until it reads recovered,
// and watches the recoverer's own lease meanwhile: a recoverer that dies
// is declared dead in its turn, and its recoverer takes the unfinished
// recovery over (the lease record's note says which), so a second death
// during a recovery wedges nobody.
//
// Once a node reads recovered, whatever its lock words still hold is void:
// it is fenced, and what it left half-done was finished or undone, so the
// next waiter frees such a word by a CAS from the dead node's value
// (lock::LockRetry::WaitOn says when).
#ifndef DMIDX_RUNTIME_MEMBERSHIP_H_
#define DMIDX_RUNTIME_MEMBERSHIP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>

#include "dmidx/options.h"
#include "dmidx/status.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/lease.h"

namespace dmidx::runtime {

class ContextImpl;

class Membership {
 public:
  // `self`: this compute node's id; `fence`: stops a compute node's traffic
  // on every memory node (Fabric::FenceComputeNode); `virtual_time`: the
  // cluster's clock moves only while an executor runs (sim), so only a
  // context the executor runs may judge a lease (a blocking context's wait
  // moves virtual time while no lease is renewed).
  Membership(uint32_t self, const LeaseOptions& options,
             std::function<Status(uint32_t compute_node)> fence, bool virtual_time);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  const LeaseOptions& options() const { return options_; }
  uint32_t self() const { return self_; }

  // Whether this compute node has seen `node` recovered: its holds are
  // void. A relaxed load; false for an id past the last one. Ids are never
  // reused and a recovered lease never lives again, so it stays true.
  bool KnownGone(uint32_t node) const {
    return node < kMaxComputeNodes && gone_[node].load(std::memory_order_relaxed) != 0;
  }
  // Whether `ctx` may judge others' leases (see the constructor).
  bool MayJudge(const ContextImpl& ctx) const;

  // One reading of `holder`'s lease by a context that has waited on a word
  // `holder` holds, judged with `watch` (the caller's, kept across its
  // readings). True when `holder` is gone for good (recovered); false when
  // it is alive as far as anyone can tell, or its recovery is still under
  // way: wait on. When the holder is dead, it follows the chain of
  // declarers (the holder's, that one's, ...) to the first link that needs
  // this node: a declarer whose lease stood still for the timeout is
  // declared dead and recovered, a declarer already recovered has the link
  // before it taken over, and a recovery of this node's own that was cut
  // short is resumed. A recovery this context runs is finished before it
  // returns, unless an error goes up (it is then resumed by the node's
  // lease keeper, ResumeUnfinished). Fenced, naming why, once this node
  // lost its own lease.
  StatusOr<bool> Check(ContextImpl& ctx, uint32_t holder, LeaseWatch& watch);

  // Judges compute node `node` through its lease on `ctx`, as a waiter on
  // a word it holds does, but with no word to wait on (Client::
  // JudgeComputeNode): reads the lease every period until it moves while
  // alive (false: the node lives) or Check finds the node gone for good
  // (true: declared dead after its lease stood still for the timeout,
  // fenced and recovered, by this node or another). DeadlineExceeded when
  // neither happened by `deadline` on the cluster's clock;
  // InvalidArgument for this node's own id or one past the last;
  // FailedPrecondition for a context that may not judge (MayJudge).
  StatusOr<bool> Judge(ContextImpl& ctx, uint32_t node, std::chrono::nanoseconds deadline);

  // Finishes the recoveries this node began and did not finish (an error
  // went up in the context that ran them): its lease keeper calls it every
  // period, so a dead node's recovery never hangs on whether the context
  // that declared it waits again.
  Status ResumeUnfinished(ContextImpl& ctx);

  // This node's lease is lost (its keeper found it declared dead): every
  // later Check fails with `why`, and nothing more is declared.
  void Lost(Status why);

  // A step every recovery of a dead node runs, after the fence: it must be
  // idempotent (a recovery cut short by the recoverer's death is run again
  // whole by the next). Steps run in the order added. Destroying the handle
  // removes the step and waits for any recovery running it. A step must
  // not destroy a handle itself.
  using RecoveryStep = std::function<Status(ContextImpl& ctx, uint32_t dead)>;
  class StepHandle;
  std::unique_ptr<StepHandle> AddRecoveryStep(std::string name, RecoveryStep step);
  // The same for a step that holds no state of its own (it finds what it
  // needs in remote memory): added unless a step of `name` was added this
  // way before, and kept as long as this membership, so that a recovery
  // runs it even after the objects of the layer that added it are gone
  // (a recovery the lease keeper resumes once every index is closed).
  // Returns whether it was added now.
  bool AddPermanentRecoveryStep(const std::string& name, RecoveryStep step);

  // The lease record of compute node `node`; NotFound when no node of its
  // page ever joined (it has no record, and nothing to recover).
  StatusOr<fabric::RemoteAddress> LeaseRecordOf(ContextImpl& ctx, uint32_t node) {
    return LeaseRecord(ctx, pages_, node, /*create=*/false);
  }
  // `record` is the lease record of `node` (found by its lease keeper):
  // its page is known from now on.
  void KnowRecord(uint32_t node, fabric::RemoteAddress record) {
    const uint64_t offset = uint64_t{node % kLeasesPerPage} * kLeaseRecordBytes;
    pages_.Set(node / kLeasesPerPage, fabric::RemoteAddress::FromRaw(record.raw() - offset));
  }

  // Tests: remember `dead` as a recovery of this node's that may be
  // unfinished, as a declaration or takeover whose answer was lost does.
  void RememberForTesting(uint32_t dead) {
    std::lock_guard<std::mutex> guard(mutex_);
    unfinished_.insert(dead);
  }

  // Whether a recovery this node began is still unfinished (its client
  // closing then goes unsettled: ClientImpl::Settled).
  bool HasUnfinished() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return !unfinished_.empty();
  }

  // Recoveries this compute node has finished (declared or taken over).
  uint64_t recoveries() const { return recoveries_.load(std::memory_order_relaxed); }

 private:
  struct Step {
    std::string name;
    RecoveryStep run;
  };
  // The record of `node`, made when its page is missing (a lock word may
  // name a node that never joined).
  StatusOr<fabric::RemoteAddress> Record(ContextImpl& ctx, uint32_t node);
  // `dead` is dead by this node (declared or taken over): fence it, take
  // over what it recovered, run the steps, mark it recovered. `chain`: the
  // dead recoverers whose work this recovery inherits (a takeover from any
  // of them is ours). Ok(false), doing nothing, while another context of
  // this node recovers `dead`.
  StatusOr<bool> Recover(ContextImpl& ctx, uint32_t dead, std::set<uint32_t> chain);
  Status RecoverBody(ContextImpl& ctx, uint32_t dead, std::set<uint32_t>& chain);
  // `prev` is dead by `from`, which is recovered (it never took `prev`
  // over): take it over and recover it.
  StatusOr<bool> TakeOver(ContextImpl& ctx, uint32_t prev, uint32_t from);
  // ResumeUnfinished for one node.
  Status ResumeOne(ContextImpl& ctx, uint32_t dead);
  // The status every action returns once this node lost its lease.
  Status LostStatus() const;
  void MarkGone(uint32_t node) { gone_[node].store(1, std::memory_order_relaxed); }

  const uint32_t self_;
  const LeaseOptions options_;
  const std::function<Status(uint32_t)> fence_;
  const bool virtual_time_;
  LeasePages pages_;
  std::unique_ptr<std::atomic<uint8_t>[]> gone_;
  std::atomic<uint64_t> recoveries_{0};
  std::atomic<bool> lost_{false};

  mutable std::mutex mutex_;
  Status lost_status_;               // guarded by mutex_
  std::set<uint32_t> in_progress_;   // guarded by mutex_: recoveries running here
  std::set<uint32_t> unfinished_;    // guarded by mutex_: begun, not finished
  std::list<Step> steps_;            // guarded by mutex_
  std::set<std::string> permanent_;  // guarded by mutex_: AddPermanentRecoveryStep's names
  // Held shared while a recovery runs its steps (copies of steps_), and
  // exclusively by a StepHandle going, after it removed its step.
  std::shared_mutex steps_running_;
};

// Removes its step when it goes.
class Membership::StepHandle {
 public:
  ~StepHandle();

 private:
  friend class Membership;
  StepHandle(Membership* membership, std::list<Step>::iterator step)
      : membership_(membership), step_(step) {}
  Membership* const membership_;
  const std::list<Step>::iterator step_;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_MEMBERSHIP_H_
