#include "lock/hocl.h"

#include <string>

namespace dmidx::lock {

namespace {

using Clock = std::chrono::steady_clock;
using fabric::Op;
using fabric::RemoteAddress;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

void RecordMax(std::atomic<uint64_t>& maximum, uint64_t value) {
  uint64_t seen = maximum.load(std::memory_order_relaxed);
  while (value > seen && !maximum.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

RemoteAddress GlobalLockTable::WordFor(RemoteAddress object) const {
  const uint16_t node = object.node();
  return bases[node] + 8 * (Mix(object.raw()) % words_per_node);
}

// One global lock word's local queue. `global_held` and `handovers` are only
// touched by the context holding `lock`, so the lock orders them.
struct HierarchicalLock::Entry {
  LocalLock lock;
  bool global_held = false;
  uint32_t handovers = 0;
};

HierarchicalLock::HierarchicalLock(GlobalLockTable table, const HoclOptions& options,
                                   uint64_t owner_tag)
    : table_(std::move(table)), options_(options), owner_tag_(owner_tag) {}

HierarchicalLock::~HierarchicalLock() = default;

HierarchicalLock::Entry& HierarchicalLock::EntryFor(RemoteAddress word) {
  Shard& shard = shards_[Mix(word.raw()) % kShards];
  std::lock_guard<std::mutex> guard(shard.mutex);
  std::unique_ptr<Entry>& entry = shard.entries[word.raw()];
  if (!entry) entry = std::make_unique<Entry>();
  return *entry;
}

StatusOr<LockGrant> HierarchicalLock::Acquire(runtime::ContextImpl& ctx, RemoteAddress object,
                                              const Op* combined_read) {
  const Clock::time_point start = Clock::now();
  acquisitions_.fetch_add(1, std::memory_order_relaxed);
  LockGrant grant;
  grant.word = table_.WordFor(object);
  Entry* entry = nullptr;
  if (options_.local_table) {
    entry = &EntryFor(grant.word);
    grant.entry = entry;
    entry->lock.Lock(ctx);
    if (entry->global_held) {
      grant.handed_over = true;
      handovers_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!grant.handed_over) {
    Status status = AcquireGlobal(ctx, &grant, combined_read);
    if (!status.ok()) {
      if (entry) entry->lock.Unlock();
      return status;
    }
    if (entry) {
      entry->global_held = true;
      entry->handovers = 0;
    }
  }
  RecordMax(
      longest_wait_ns_,
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()));
  return grant;
}

Status HierarchicalLock::AcquireGlobal(runtime::ContextImpl& ctx, LockGrant* grant,
                                       const Op* combined_read) {
  uint64_t* old_value = ctx.runtime_words();
  const bool combine = combined_read && combined_read->remote.node() == grant->word.node();
  const Clock::time_point deadline = Clock::now() + options_.acquire_timeout;
  for (;;) {
    // Command combination: the READ rides behind the CAS on the same queue
    // pair. If the CAS lost, the READ's data is simply not used.
    Op ops[2] = {Op::CompareSwap(grant->word, old_value, 0, owner_tag_), {}};
    if (combine) ops[1] = *combined_read;
    DMIDX_RETURN_IF_ERROR(ctx.Execute(grant->word.node(), {ops, combine ? 2u : 1u}));
    if (*old_value == 0) {
      global_acquisitions_.fetch_add(1, std::memory_order_relaxed);
      grant->read_done = combine;
      return Status::Ok();
    }
    cas_failures_.fetch_add(1, std::memory_order_relaxed);
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded("lock word " + grant->word.ToString() + " held by tag " +
                                      std::to_string(*old_value) + " for longer than " +
                                      std::to_string(options_.acquire_timeout.count()) +
                                      " ms (did its holder die?)");
    }
  }
}

void HierarchicalLock::AppendRelease(runtime::ContextImpl& ctx, LockGrant& grant,
                                     std::vector<Op>* batch) {
  if (options_.local_table) {
    auto* entry = static_cast<Entry*>(grant.entry);
    if (entry->lock.waiters() > 0 && entry->handovers < options_.max_handovers) {
      // Keep the global word for the next local waiter: no remote op.
      ++entry->handovers;
      return;
    }
    entry->global_held = false;
    entry->handovers = 0;
  }
  // WRITEs of one queue pair land in post order, so this release lands
  // after the write-back ops before it in the batch.
  uint64_t* zero = ctx.runtime_words() + 1;
  *zero = 0;
  batch->push_back(Op::Write(grant.word, zero, 8, fabric::kInline));
}

void HierarchicalLock::FinishRelease(LockGrant& grant) {
  if (options_.local_table) static_cast<Entry*>(grant.entry)->lock.Unlock();
}

HoclStats HierarchicalLock::stats() const {
  HoclStats stats;
  stats.acquisitions = acquisitions_.load(std::memory_order_relaxed);
  stats.global_acquisitions = global_acquisitions_.load(std::memory_order_relaxed);
  stats.cas_failures = cas_failures_.load(std::memory_order_relaxed);
  stats.handovers = handovers_.load(std::memory_order_relaxed);
  stats.longest_wait_ns = longest_wait_ns_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace dmidx::lock
