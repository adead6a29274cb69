#include "lib/runtime/membership.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"

namespace dmidx::runtime {

namespace {

// Links of a chain of declarers followed in one Check: each is a compute
// node that died while recovering the one before it.
constexpr int kMaxChain = 64;

}  // namespace

Membership::Membership(uint32_t self, const LeaseOptions& options,
                       std::function<Status(uint32_t)> fence, bool virtual_time)
    : self_(self),
      options_(options),
      fence_(std::move(fence)),
      virtual_time_(virtual_time),
      gone_(new std::atomic<uint8_t>[kMaxComputeNodes]()) {}

std::unique_ptr<Membership::StepHandle> Membership::AddRecoveryStep(std::string name,
                                                                    RecoveryStep step) {
  std::lock_guard<std::mutex> guard(mutex_);
  steps_.push_back({std::move(name), std::move(step)});
  return std::unique_ptr<StepHandle>(new StepHandle(this, std::prev(steps_.end())));
}

bool Membership::AddPermanentRecoveryStep(const std::string& name, RecoveryStep step) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!permanent_.insert(name).second) return false;
  steps_.push_back({name, std::move(step)});
  return true;
}

Membership::StepHandle::~StepHandle() {
  {
    std::lock_guard<std::mutex> guard(membership_->mutex_);
    membership_->steps_.erase(step_);
  }
  // A recovery that copied the step may be running it: wait for it.
  std::unique_lock<std::shared_mutex> drained(membership_->steps_running_);
}

bool Membership::MayJudge(const ContextImpl& ctx) const {
  return !virtual_time_ || ctx.scheduled();
}

void Membership::Lost(Status why) {
  std::lock_guard<std::mutex> guard(mutex_);
  lost_status_ = std::move(why);
  lost_.store(true, std::memory_order_relaxed);
}

Status Membership::LostStatus() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return lost_status_;
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
  if (lost_.load(std::memory_order_relaxed)) return LostStatus();
  // Follow the declarers from the holder to the first link that needs us.
  std::vector<uint32_t> chain;
  uint32_t node = holder;
  for (int depth = 0; depth < kMaxChain; ++depth) {
    if (node == self_) {
      // A node in the chain was declared dead by one that this node's own
      // recovery of it did not finish: handled where it is dead by self.
      return false;
    }
    DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress record, Record(ctx, node));
    DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView view, ReadLease(ctx, record));
    const Lease& lease = view.lease;
    switch (lease.state) {
      case LeaseState::kRecovered:
        MarkGone(node);
        if (chain.empty()) return true;
        // The link before it is still dead by it: it died before taking
        // that one over. Ours now.
        DMIDX_RETURN_IF_ERROR(TakeOver(ctx, chain.back(), node).status());
        return KnownGone(holder);
      case LeaseState::kAlive:
      case LeaseState::kAbsent: {
        if (!watch.Expired(node, lease.word(), ctx.Now())) return false;
        const StatusOr<Lease> declared = DeclareDead(ctx, record, lease, self_);
        if (!declared.ok()) {
          // The CAS may have landed: the keeper looks (ResumeUnfinished).
          std::lock_guard<std::mutex> guard(mutex_);
          unfinished_.insert(node);
          return declared.status();
        }
        if (declared->word() != lease.word()) return false;  // renewed, or declared: next period
        DMIDX_RETURN_IF_ERROR(Recover(ctx, node, {}).status());
        if (!chain.empty() && !KnownGone(chain.back())) {
          // Its recovery took over what it had noted; the link before it,
          // if it had not noted that, is still dead by it.
          DMIDX_RETURN_IF_ERROR(TakeOver(ctx, chain.back(), node).status());
        }
        return KnownGone(holder);
      }
      case LeaseState::kDead: {
        const uint32_t declarer = *lease.declared_by;
        if (declarer == self_) {
          // This node's own recovery of it, cut short: resume it (unless
          // another context of this node is running it).
          DMIDX_RETURN_IF_ERROR(Recover(ctx, node, {}).status());
          return KnownGone(holder);
        }
        for (uint32_t seen : chain) {
          if (seen == declarer) {
            // A cycle: each declared the one before dead, and each died
            // before recovering it (a stalled node declared its own
            // declarer). All of them are dead; take this one over.
            DMIDX_RETURN_IF_ERROR(TakeOver(ctx, node, declarer).status());
            return KnownGone(holder);
          }
        }
        chain.push_back(node);
        node = declarer;
        break;
      }
    }
  }
  return false;
}

StatusOr<bool> Membership::Judge(ContextImpl& ctx, uint32_t node,
                                 std::chrono::nanoseconds deadline) {
  if (node == self_ || node >= kMaxComputeNodes) {
    return Status::InvalidArgument("compute node " + std::to_string(node) +
                                   " cannot be judged by compute node " + std::to_string(self_) +
                                   (node == self_ ? " (itself)" : " (past the last id)"));
  }
  if (!MayJudge(ctx)) {
    return Status::FailedPrecondition(
        "a blocking context cannot judge a lease in virtual time (sim): judge from a context "
        "Client::Run runs");
  }
  LeaseWatch watch(options_.timeout);
  std::optional<uint64_t> first;  // the first alive word seen
  for (;;) {
    DMIDX_ASSIGN_OR_RETURN(const bool gone, Check(ctx, node, watch));
    if (gone) return true;
    // Check hides whether the word moved: read it again, and call a node
    // alive once its alive word moved (it renewed since the first read).
    DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress record, Record(ctx, node));
    DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView view, ReadLease(ctx, record));
    if (view.lease.state == LeaseState::kAlive) {
      if (first && *first != view.lease.word()) return false;
      if (!first) first = view.lease.word();
    }
    const std::chrono::nanoseconds now = ctx.Now();
    if (now >= deadline) {
      return Status::DeadlineExceeded("compute node " + std::to_string(node) +
                                      " neither renewed its lease nor was recovered in time; its "
                                      "lease reads " +
                                      view.lease.ToString());
    }
    ctx.SleepUntil(std::min(now + options_.period, deadline));
  }
}

StatusOr<bool> Membership::TakeOver(ContextImpl& ctx, uint32_t prev, uint32_t from) {
  {
    // Before the CAS: if it lands and its answer is lost, the keeper finds
    // `prev` dead by this node and finishes it (ResumeUnfinished).
    std::lock_guard<std::mutex> guard(mutex_);
    unfinished_.insert(prev);
  }
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress record, Record(ctx, prev));
  // `from` is dead (declared, or recovered) but perhaps not yet fenced:
  // fenced first, it cannot go on with the recovery taken from it.
  DMIDX_RETURN_IF_ERROR(fence_(from));
  DMIDX_ASSIGN_OR_RETURN(const Lease found, TakeOverRecovery(ctx, record, from, self_));
  if (found.state != LeaseState::kDead || found.declared_by != from) return false;
  return Recover(ctx, prev, {from});
}

StatusOr<bool> Membership::Recover(ContextImpl& ctx, uint32_t dead, std::set<uint32_t> chain) {
  if (dead == self_) {
    return Status(StatusCode::kUnavailable,
                  "compute node " + std::to_string(self_) +
                      " found itself to recover: it was judged dead, and is fenced",
                  StatusDetail::kFenced);
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (lost_.load(std::memory_order_relaxed)) return lost_status_;
    // One context of this node at a time recovers a given node; the others
    // wait for it as for any recoverer.
    if (!in_progress_.insert(dead).second) return false;
    unfinished_.insert(dead);
  }
  const Status status = RecoverBody(ctx, dead, chain);
  std::lock_guard<std::mutex> guard(mutex_);
  in_progress_.erase(dead);
  if (!status.ok()) return status;
  unfinished_.erase(dead);
  return true;
}

Status Membership::RecoverBody(ContextImpl& ctx, uint32_t dead, std::set<uint32_t>& chain) {
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
    if (target == self_) {
      // The dead node was recovering this one: this node was judged dead.
      return Status(StatusCode::kUnavailable,
                    "compute node " + std::to_string(self_) + " was judged dead by compute node " +
                        std::to_string(dead) + ", and is fenced",
                    StatusDetail::kFenced);
    }
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
      // Another context of this node recovering it already finishes it.
      DMIDX_RETURN_IF_ERROR(Recover(ctx, target, chain).status());
    }
  }
  // Held while the steps run: a step's handle going waits for it.
  std::shared_lock<std::shared_mutex> running(steps_running_);
  std::vector<Step> steps;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    steps.assign(steps_.begin(), steps_.end());
  }
  for (const Step& step : steps) {
    const Status status = step.run(ctx, dead);
    if (!status.ok()) {
      return status.WithContext("recovering compute node " + std::to_string(dead) + " (" +
                                step.name + ")");
    }
  }
  const Status marked = MarkRecovered(ctx, record, self_);
  if (!marked.ok()) {
    // Marked by this node's earlier attempt, whose answer was lost?
    DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView after, ReadLease(ctx, record));
    if (after.lease.state != LeaseState::kRecovered || after.lease.declared_by != self_) {
      if (after.lease.state == LeaseState::kDead && after.lease.declared_by != self_) {
        // Another took it over: it judged this node dead meanwhile.
        return Status(StatusCode::kUnavailable,
                      "compute node " + std::to_string(self_) + "'s recovery of compute node " +
                          std::to_string(dead) + " was taken over (" + after.lease.ToString() +
                          "): this node was judged dead",
                      StatusDetail::kFenced);
      }
      return marked;
    }
  }
  MarkGone(dead);
  recoveries_.fetch_add(1, std::memory_order_relaxed);
  ++ctx.counters().recoveries;
  if (own_recovery) DMIDX_RETURN_IF_ERROR(NoteRecovering(ctx, own, std::nullopt));
  return Status::Ok();
}

Status Membership::ResumeUnfinished(ContextImpl& ctx) {
  std::set<uint32_t> unfinished;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (unfinished_.empty() || lost_.load(std::memory_order_relaxed)) return Status::Ok();
    unfinished = unfinished_;
  }
  // Each on its own: one that keeps failing holds no other up.
  Status first;
  for (uint32_t dead : unfinished) {
    Status status = ResumeOne(ctx, dead);
    if (!status.ok() && first.ok()) first = std::move(status);
  }
  return first;
}

Status Membership::ResumeOne(ContextImpl& ctx, uint32_t dead) {
  // Dead by this node (a declaration or a takeover whose answer was lost
  // included), or not ours after all.
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress record, Record(ctx, dead));
  DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView view, ReadLease(ctx, record));
  if (view.lease.state == LeaseState::kDead && view.lease.declared_by == self_) {
    return Recover(ctx, dead, {}).status();
  }
  if (view.lease.state == LeaseState::kRecovered) MarkGone(dead);
  std::lock_guard<std::mutex> guard(mutex_);
  if (in_progress_.count(dead) == 0) unfinished_.erase(dead);
  return Status::Ok();
}

}  // namespace dmidx::runtime
