#include "lib/runtime/membership.h"

#include <utility>
#include <vector>

#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"

namespace dmidx::runtime {

Membership::Membership(uint32_t self, const LeaseOptions& options,
                       std::function<Status(uint32_t)> fence)
    : self_(self),
      options_(options),
      fence_(std::move(fence)),
      gone_(new std::atomic<uint8_t>[kMaxComputeNodes]()) {}

std::unique_ptr<Membership::StepHandle> Membership::AddRecoveryStep(std::string name,
                                                                    RecoveryStep step) {
  std::lock_guard<std::mutex> guard(steps_mutex_);
  steps_.push_back({std::move(name), std::move(step)});
  return std::unique_ptr<StepHandle>(new StepHandle(this, std::prev(steps_.end())));
}

Membership::StepHandle::~StepHandle() {
  std::lock_guard<std::mutex> guard(membership_->steps_mutex_);
  membership_->steps_.erase(step_);
}

StatusOr<fabric::RemoteAddress> Membership::Record(ContextImpl& ctx, uint32_t node) {
  return LeaseRecord(ctx, pages_, node, /*create=*/true);
}

StatusOr<bool> Membership::Check(ContextImpl& ctx, uint32_t holder, LeaseWatch& watch) {
  if (holder >= kMaxComputeNodes) {
    return Status::DataLoss("a lock word names compute node " + std::to_string(holder) +
                            ", past the last id the runtime hands out");
  }
  if (KnownGone(holder)) return true;
  if (holder == self_) return false;  // its own hold: alive while this runs
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress record, Record(ctx, holder));
  DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView view, ReadLease(ctx, record));
  Lease lease = view.lease;
  if (lease.state == LeaseState::kAlive || lease.state == LeaseState::kAbsent) {
    if (!watch.Expired(holder, lease.word(), ctx.Now())) return false;
    DMIDX_ASSIGN_OR_RETURN(const Lease found, DeclareDead(ctx, record, lease, self_));
    if (found.word() == lease.word()) {
      DMIDX_RETURN_IF_ERROR(Recover(ctx, holder, {}));
      return true;
    }
    lease = found;  // renewed (wait on), or declared by another
  }
  switch (lease.state) {
    case LeaseState::kRecovered:
      MarkGone(holder);
      return true;
    case LeaseState::kDead:
      break;
    default:
      return false;
  }
  // Dead, and being recovered by its declarer.
  const uint32_t recoverer = *lease.declared_by;
  if (recoverer == self_) {
    // This node's own recovery of it was cut short (an error went up):
    // finish it.
    DMIDX_RETURN_IF_ERROR(Recover(ctx, holder, {}));
    return true;
  }
  // Watch the recoverer instead: if it dies, recovering it takes over.
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress recoverer_record, Record(ctx, recoverer));
  DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView recoverer_view, ReadLease(ctx, recoverer_record));
  const Lease& theirs = recoverer_view.lease;
  if (theirs.state == LeaseState::kDead) return false;  // its recoverer takes ours over
  if (theirs.state == LeaseState::kRecovered) {
    MarkGone(recoverer);
    // Recovered, and the holder is still dead by it: it died before noting
    // the holder in its record, so its recovery did not take it over. Ours.
    DMIDX_ASSIGN_OR_RETURN(const Lease taken, TakeOverRecovery(ctx, record, recoverer, self_));
    if (taken.state != LeaseState::kDead || taken.declared_by != recoverer) return false;
    DMIDX_RETURN_IF_ERROR(Recover(ctx, holder, {recoverer}));
    return true;
  }
  if (!watch.Expired(recoverer, theirs.word(), ctx.Now())) return false;
  DMIDX_ASSIGN_OR_RETURN(const Lease found, DeclareDead(ctx, recoverer_record, theirs, self_));
  if (found.word() != theirs.word()) return false;
  DMIDX_RETURN_IF_ERROR(Recover(ctx, recoverer, {}));
  // Recovering the recoverer took the holder's recovery over and finished
  // it, unless the recoverer had not noted it yet: then it is still dead by
  // the recoverer, and ours to take over.
  DMIDX_ASSIGN_OR_RETURN(const Lease taken, TakeOverRecovery(ctx, record, recoverer, self_));
  if (taken.state == LeaseState::kDead && taken.declared_by == recoverer) {
    DMIDX_RETURN_IF_ERROR(Recover(ctx, holder, {recoverer}));
  }
  return true;
}

Status Membership::Recover(ContextImpl& ctx, uint32_t dead, std::set<uint32_t> chain) {
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress own, Record(ctx, self_));
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress record, Record(ctx, dead));
  // The recovery this node took on itself (not one it inherited inside
  // another): noted in its own record, so that its own recoverer finds it.
  const bool own_recovery = chain.empty();
  if (own_recovery) DMIDX_RETURN_IF_ERROR(NoteRecovering(ctx, own, dead));
  // Nothing the dead node posted may land once the steps begin.
  DMIDX_RETURN_IF_ERROR(fence_(dead));
  // What it was recovering when it died is ours now.
  DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView view, ReadLease(ctx, record));
  if (view.recovering && *view.recovering != dead && *view.recovering < kMaxComputeNodes) {
    const uint32_t target = *view.recovering;
    chain.insert(dead);
    DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress target_record, Record(ctx, target));
    DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView target_view, ReadLease(ctx, target_record));
    const Lease& lease = target_view.lease;
    if (lease.state == LeaseState::kDead && lease.declared_by && *lease.declared_by != self_ &&
        chain.count(*lease.declared_by) > 0) {
      DMIDX_RETURN_IF_ERROR(
          TakeOverRecovery(ctx, target_record, *lease.declared_by, self_).status());
    }
    DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView now, ReadLease(ctx, target_record));
    if (now.lease.state == LeaseState::kDead && now.lease.declared_by == self_) {
      DMIDX_RETURN_IF_ERROR(Recover(ctx, target, chain));
    }
  }
  DMIDX_RETURN_IF_ERROR(RunSteps(ctx, dead));
  const Status marked = MarkRecovered(ctx, record, self_);
  if (!marked.ok()) {
    // Marked by this node's earlier attempt, whose answer was lost?
    DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView after, ReadLease(ctx, record));
    if (after.lease.state != LeaseState::kRecovered || after.lease.declared_by != self_)
      return marked;
  }
  MarkGone(dead);
  recoveries_.fetch_add(1, std::memory_order_relaxed);
  ++ctx.counters().recoveries;
  if (own_recovery) DMIDX_RETURN_IF_ERROR(NoteRecovering(ctx, own, std::nullopt));
  return Status::Ok();
}

Status Membership::RunSteps(ContextImpl& ctx, uint32_t dead) {
  std::vector<Step> steps;
  {
    std::lock_guard<std::mutex> guard(steps_mutex_);
    steps.assign(steps_.begin(), steps_.end());
  }
  for (const Step& step : steps) {
    const Status status = step.run(ctx, dead);
    if (!status.ok()) {
      return status.WithContext("recovering compute node " + std::to_string(dead) + " (" +
                                step.name + ")");
    }
  }
  return Status::Ok();
}

}  // namespace dmidx::runtime
