#include "lib/fabric/fault_injector.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dmidx::fabric {

// Memory ordering: a switch is a release store (or RMW) and backends read it
// with acquire (or an RMW), so a batch posted or applied after the flip, in
// happens-before order, sees it. A batch racing with the flip may see either
// state, as a packet on the wire would.

FaultInjector::FaultInjector(uint16_t node_count)
    : node_count_(node_count),
      fail_next_(new std::atomic<uint64_t>[node_count]),
      fail_after_applying_(new std::atomic<uint64_t>[node_count]),
      unreachable_(new std::atomic<bool>[node_count]) {
  for (uint16_t node = 0; node < node_count; ++node) {
    fail_next_[node].store(0, std::memory_order_relaxed);
    fail_after_applying_[node].store(0, std::memory_order_relaxed);
    unreachable_[node].store(false, std::memory_order_relaxed);
  }
}

namespace {

Status UnknownNode(uint16_t node, uint16_t node_count) {
  return Status::InvalidArgument("fault injection: memory node " + std::to_string(node) +
                                 " does not exist; the fabric has " + std::to_string(node_count));
}

}  // namespace

Status FaultInjector::FailNextBatches(uint16_t node, uint64_t count) {
  if (node >= node_count_) return UnknownNode(node, node_count_);
  armed_.store(true, std::memory_order_release);  // before the switch: see armed_
  fail_next_[node].fetch_add(count, std::memory_order_acq_rel);
  return Status::Ok();
}

Status FaultInjector::FailNextBatchesAfterApplying(uint16_t node, uint64_t count) {
  if (node >= node_count_) return UnknownNode(node, node_count_);
  armed_.store(true, std::memory_order_release);  // before the switch: see armed_
  fail_after_applying_[node].fetch_add(count, std::memory_order_acq_rel);
  return Status::Ok();
}

Status FaultInjector::FailBatchesAtRandom(const RandomBatchFailures& failures) {
  if (!(failures.probability >= 0 && failures.probability <= 1)) {
    return Status::InvalidArgument("fault injection: probability " +
                                   std::to_string(failures.probability) + " is not in [0, 1]");
  }
  std::lock_guard<std::mutex> guard(random_mutex_);
  random_ = failures;
  // The hash is uniform over 2^64 values: below p * 2^64 with probability
  // p (2^64 itself does not fit, so 1 is a flag).
  random_always_ = failures.probability == 1;
  random_threshold_ =
      random_always_ ? 0 : static_cast<uint64_t>(std::ldexp(failures.probability, 64));
  random_judged_ = 0;
  random_failed_ = 0;
  random_quiet_until_ = 0;
  armed_.store(true, std::memory_order_release);  // before the switch: see armed_
  random_on_.store(true, std::memory_order_release);
  return Status::Ok();
}

void FaultInjector::StopRandomFailures() {
  std::lock_guard<std::mutex> guard(random_mutex_);
  random_on_.store(false, std::memory_order_release);
}

Status FaultInjector::SetUnreachable(uint16_t node, bool unreachable) {
  if (node >= node_count_) return UnknownNode(node, node_count_);
  armed_.store(true, std::memory_order_release);  // before the switch: see armed_
  unreachable_[node].store(unreachable, std::memory_order_release);
  return Status::Ok();
}

template <typename Change>
void FaultInjector::ChangeComputeNode(uint32_t compute_node, Change change) {
  std::lock_guard<std::mutex> guard(compute_nodes_mutex_);
  auto entry = Find(compute_nodes_, compute_node);
  if (entry == compute_nodes_.end()) {
    entry = compute_nodes_.insert(compute_nodes_.end(), {compute_node, {}});
  }
  change(entry->faults);
  // Published under the mutex: a reader that sees the new generation and
  // then takes the mutex finds the change. Not armed_: posts read their
  // compute node's faults through the generation (ComputeNodeFaultsCache).
  compute_node_changes_.fetch_add(1, std::memory_order_acq_rel);
}

void FaultInjector::KillComputeNode(uint32_t compute_node) {
  ChangeComputeNode(compute_node, [](ComputeNodeFaults& faults) {
    if (faults.stop == InjectedFault::kNone) faults.stop = InjectedFault::kDeadComputeNode;
  });
}

void FaultInjector::Fence(uint32_t compute_node) {
  ChangeComputeNode(compute_node, [](ComputeNodeFaults& faults) {
    if (faults.stop == InjectedFault::kNone) faults.stop = InjectedFault::kFencedComputeNode;
  });
}

void FaultInjector::SetComputeNodeCutOff(uint32_t compute_node, bool cut_off) {
  ChangeComputeNode(compute_node,
                    [cut_off](ComputeNodeFaults& faults) { faults.cut_off = cut_off; });
}

ComputeNodeFaults FaultInjector::FaultsOf(uint32_t compute_node) const {
  if (compute_node_changes_.load(std::memory_order_acquire) == 0) return {};
  std::lock_guard<std::mutex> guard(compute_nodes_mutex_);
  const auto entry = Find(compute_nodes_, compute_node);
  return entry == compute_nodes_.end() ? ComputeNodeFaults() : entry->faults;
}

FaultCounters FaultInjector::counters() const {
  FaultCounters counters;
  counters.failed_batches = failed_batches_.load(std::memory_order_relaxed);
  counters.applied_then_failed_batches =
      applied_then_failed_batches_.load(std::memory_order_relaxed);
  counters.unreachable_batches = unreachable_batches_.load(std::memory_order_relaxed);
  counters.dropped_batches = dropped_batches_.load(std::memory_order_relaxed);
  counters.dead_posts = dead_posts_.load(std::memory_order_relaxed);
  counters.random_judged_batches = random_judged_batches_.load(std::memory_order_relaxed);
  counters.random_failed_batches = random_failed_batches_.load(std::memory_order_relaxed);
  return counters;
}

// Takes one pending failure of `pending` if there is one; concurrent
// posters each take their own, so exactly the count asked for fail.
bool FaultInjector::TakeOne(std::atomic<uint64_t>& pending) {
  uint64_t left = pending.load(std::memory_order_acquire);
  while (left > 0 && !pending.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel,
                                                    std::memory_order_acquire)) {
  }
  return left > 0;
}

// OnPost looked at the compute node's stop already.
InjectedFault FaultInjector::OnArmedPost(uint16_t node, uint32_t compute_node) {
  if (IsUnreachable(node)) {
    unreachable_batches_.fetch_add(1, std::memory_order_relaxed);
    return InjectedFault::kUnreachable;
  }
  if (TakeOne(fail_next_[node])) {
    failed_batches_.fetch_add(1, std::memory_order_relaxed);
    return InjectedFault::kFailedBatch;
  }
  if (TakeOne(fail_after_applying_[node])) {
    applied_then_failed_batches_.fetch_add(1, std::memory_order_relaxed);
    return InjectedFault::kAppliedThenFailed;
  }
  if (!random_on_.load(std::memory_order_acquire)) return InjectedFault::kNone;
  return JudgeAtRandom(compute_node);
}

namespace {

// SplitMix64's finalizer: consecutive inputs give independent-looking,
// uniform outputs.
uint64_t Mix(uint64_t value) {
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

}  // namespace

InjectedFault FaultInjector::JudgeAtRandom(uint32_t compute_node) {
  std::lock_guard<std::mutex> guard(random_mutex_);
  if (!random_on_.load(std::memory_order_relaxed)) return InjectedFault::kNone;
  const std::vector<uint32_t>& only = random_.compute_nodes;
  if (!only.empty() && std::find(only.begin(), only.end(), compute_node) == only.end()) {
    return InjectedFault::kNone;
  }
  const uint64_t n = random_judged_++;
  random_judged_batches_.fetch_add(1, std::memory_order_relaxed);
  if (random_failed_ >= random_.max_failures || n < random_quiet_until_) {
    return InjectedFault::kNone;
  }
  const bool fail =
      random_always_ || Mix(random_.seed + (n + 1) * 0x9e3779b97f4a7c15ull) < random_threshold_;
  if (!fail) return InjectedFault::kNone;
  ++random_failed_;
  random_quiet_until_ = n + 1 + random_.min_spacing;
  random_failed_batches_.fetch_add(1, std::memory_order_relaxed);
  return InjectedFault::kRandomBatch;
}

void FaultInjector::CountDroppedWhileQueued(InjectedFault fault) {
  if (fault == InjectedFault::kUnreachable) {
    unreachable_batches_.fetch_add(1, std::memory_order_relaxed);
  } else if (StopsComputeNode(fault)) {
    dropped_batches_.fetch_add(1, std::memory_order_relaxed);
  }
}

Status FaultInjector::StatusOf(InjectedFault fault, uint16_t node, uint32_t compute_node) {
  switch (fault) {
    case InjectedFault::kNone:
      return Status::Ok();
    case InjectedFault::kFailedBatch:
      return Status::Unavailable("memory node " + std::to_string(node) +
                                 ": batch failed (injected)");
    case InjectedFault::kAppliedThenFailed:
      return Status::Unavailable("memory node " + std::to_string(node) +
                                 ": batch applied, then failed (injected)");
    case InjectedFault::kRandomBatch:
      return Status::Unavailable("memory node " + std::to_string(node) +
                                 ": batch failed (injected at random)");
    case InjectedFault::kUnreachable:
      return Status::Unavailable("memory node " + std::to_string(node) + " unreachable (injected)");
    case InjectedFault::kDeadComputeNode:
      return Status::Unavailable("compute node " + std::to_string(compute_node) +
                                 " died (injected)");
    case InjectedFault::kFencedComputeNode:
      return Status(StatusCode::kUnavailable,
                    "compute node " + std::to_string(compute_node) +
                        " was fenced: nothing it posts reaches memory any more",
                    StatusDetail::kFenced);
  }
  return Status::Internal("unknown injected fault");
}

}  // namespace dmidx::fabric
