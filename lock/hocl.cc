#include "lock/hocl.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <string>

#include "lib/runtime/client.h"

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
struct LocalLockTable::Entry {
  LocalLock lock;
  bool global_held = false;
  uint32_t handovers = 0;
  // The context holding `lock`, to refuse a second Acquire by the same one.
  std::atomic<const runtime::ContextImpl*> holder{nullptr};
};

LocalLockTable::LocalLockTable() = default;
LocalLockTable::~LocalLockTable() = default;

LocalLockTable::Entry& LocalLockTable::EntryFor(RemoteAddress word) {
  Shard& shard = shards_[Mix(word.raw()) % kShards];
  std::lock_guard<std::mutex> guard(shard.mutex);
  std::unique_ptr<Entry>& entry = shard.entries[word.raw()];
  if (!entry) entry = std::make_unique<Entry>();
  return *entry;
}

HierarchicalLock::HierarchicalLock(GlobalLockTable table, const HoclOptions& options,
                                   uint64_t owner_tag, std::shared_ptr<LocalLockTable> local)
    : table_(std::move(table)),
      options_(options),
      owner_tag_(owner_tag & 0xffff),
      local_(!options.local_table ? nullptr
             : local              ? std::move(local)
                                  : std::make_shared<LocalLockTable>()) {
  assert(owner_tag_ != 0 && "HOCL owner tags are 1..65535");
}

// Unique per context in the cluster: the compute node's tag and the
// context's address. Knowing its own tag lets a context undo a CAS whose
// outcome it could not learn.
uint64_t HierarchicalLock::TagOf(const runtime::ContextImpl& ctx) const {
  return (owner_tag_ << 48) | (reinterpret_cast<uintptr_t>(&ctx) & ((uint64_t{1} << 48) - 1));
}

Op HierarchicalLock::ReleaseOp(runtime::ContextImpl& ctx, RemoteAddress word, bool fence) const {
  uint64_t* zero = ctx.runtime_words() + runtime::ContextImpl::kReleaseWord;
  *zero = 0;
  uint8_t flags = fence ? fabric::kFence : 0;
  if (ctx.client().cluster().capabilities().max_inline_bytes >= 8) flags |= fabric::kInline;
  return Op::Write(word, zero, 8, flags);
}

HierarchicalLock::~HierarchicalLock() = default;

StatusOr<LockGrant> HierarchicalLock::Acquire(runtime::ContextImpl& ctx, RemoteAddress object,
                                              const Op* combined_read) {
  const Clock::time_point start = Clock::now();
  acquisitions_.fetch_add(1, std::memory_order_relaxed);
  LockGrant grant;
  grant.word = table_.WordFor(object);
  Entry* entry = nullptr;
  if (options_.local_table) {
    entry = &local_->EntryFor(grant.word);
    grant.entry = entry;
    if (entry->holder.load(std::memory_order_acquire) == &ctx) {
      return Status::FailedPrecondition("this context already holds lock word " +
                                        grant.word.ToString() +
                                        " (one HOCL lock per context at a time)");
    }
    entry->lock.Lock(ctx);
    entry->holder.store(&ctx, std::memory_order_release);
    if (entry->global_held) {
      grant.handed_over = true;
      handovers_.fetch_add(1, std::memory_order_relaxed);
      ++ctx.counters().handovers;
    }
  }
  if (!grant.handed_over) {
    Status status = AcquireGlobal(ctx, &grant, combined_read);
    if (!status.ok()) {
      if (entry) {
        entry->holder.store(nullptr, std::memory_order_release);
        entry->lock.Unlock();
      }
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
  uint64_t* old_value = ctx.runtime_words() + runtime::ContextImpl::kLockWord;
  const bool combine = options_.combine_commands && combined_read &&
                       combined_read->remote.node() == grant->word.node();
  const Clock::time_point deadline = Clock::now() + options_.acquire_timeout;
  for (;;) {
    // Command combination: the READ rides behind the CAS on the same queue
    // pair. If the CAS lost, the READ's data is simply not used.
    const uint64_t tag = TagOf(ctx);
    Op ops[2] = {Op::CompareSwap(grant->word, old_value, 0, tag), {}};
    if (combine) ops[1] = *combined_read;
    Status status = ctx.Execute(grant->word.node(), {ops, combine ? 2u : 1u});
    if (!status.ok()) {
      // The CAS may have run even though the batch failed: take the word
      // back if it is ours (best effort; the node may be gone).
      Op undo = Op::CompareSwap(grant->word, old_value, tag, 0);
      (void)ctx.Execute(grant->word.node(), {&undo, 1});
      return status;
    }
    if (*old_value == 0) {
      global_acquisitions_.fetch_add(1, std::memory_order_relaxed);
      grant->read_done = combine;
      return Status::Ok();
    }
    cas_failures_.fetch_add(1, std::memory_order_relaxed);
    ++ctx.counters().lock_retries;
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded(
          "lock word " + grant->word.ToString() + " held by compute node tag " +
          std::to_string(*old_value >> 48) + " for longer than " +
          std::to_string(options_.acquire_timeout.count()) + " ms (did its holder die?)");
    }
  }
}

Status HierarchicalLock::Release(runtime::ContextImpl& ctx, LockGrant& grant,
                                 std::span<const Op> write_back) {
  Status status;
  // The batch: the write-back, then (below) the release WRITE.
  std::array<Op, kMaxWriteBackOps + 1> batch;
  size_t batch_size = write_back.size();
  if (write_back.size() > kMaxWriteBackOps) {
    status = Status::InvalidArgument("write-back of " + std::to_string(write_back.size()) +
                                     " ops; at most " + std::to_string(kMaxWriteBackOps));
    batch_size = 0;  // post nothing of it, but still release
  }
  for (size_t i = 0; i < batch_size; ++i) {
    if (write_back[i].remote.node() != grant.word.node()) {
      status = Status::InvalidArgument("write-back " + write_back[i].remote.ToString() +
                                       " is not on the lock word's memory node");
      batch_size = 0;  // post nothing of it, but still release
      break;
    }
  }
  std::copy_n(write_back.begin(), batch_size, batch.begin());
  bool release_global = true;
  if (options_.local_table) {
    auto* entry = static_cast<Entry*>(grant.entry);
    if (entry->lock.waiters() > 0 && entry->handovers < options_.max_handovers) {
      // Keep the global word for the next local waiter: no remote op.
      ++entry->handovers;
      release_global = false;
    } else {
      entry->global_held = false;
      entry->handovers = 0;
    }
  }
  if (release_global) {
    // WRITEs of one queue pair land in post order, so the release lands
    // after the write-back WRITEs before it; a READ or atomic before it
    // could be overtaken, so then it is fenced.
    const bool fence = std::any_of(batch.begin(), batch.begin() + batch_size,
                                   [](const Op& op) { return op.code != fabric::OpCode::kWrite; });
    batch[batch_size++] = ReleaseOp(ctx, grant.word, fence);
  }
  if (!options_.combine_commands && release_global && batch_size > 1) {
    // Without combination the write-back completes before the release.
    Status posted =
        ctx.Execute(grant.word.node(), std::span<const Op>(batch.data(), batch_size - 1));
    if (status.ok()) status = posted;
    batch[0] = ReleaseOp(ctx, grant.word, false);
    batch_size = 1;
  }
  if (batch_size > 0) {
    Status posted = ctx.Execute(grant.word.node(), std::span<const Op>(batch.data(), batch_size));
    if (status.ok()) status = posted;
    // The release must not be lost with a failed write-back: retry it alone.
    for (int attempt = 0; !posted.ok() && release_global && attempt < 3; ++attempt) {
      const Op release = ReleaseOp(ctx, grant.word, false);
      posted = ctx.Execute(grant.word.node(), {&release, 1});
    }
  }
  if (options_.local_table) {
    auto* entry = static_cast<Entry*>(grant.entry);
    entry->holder.store(nullptr, std::memory_order_release);
    entry->lock.Unlock();
  }
  return status;
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
