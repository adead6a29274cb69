#include "lock/hocl.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <string>

namespace dmidx::lock {

namespace {

using fabric::Op;
using fabric::RemoteAddress;

// Times a release is retried on its own after its batch failed.
constexpr int kReleaseRetries = 3;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

RemoteAddress GlobalLockTable::WordFor(RemoteAddress object) const {
  const uint16_t node = object.node();
  return bases[node] + 8 * (Mix(object.raw()) % words_per_node);
}

// One global lock word's local queue. `global_held` and `handovers` are only
// touched by the context holding `lock`, so the lock orders them.
struct LocalLockTable::Entry {
  explicit Entry(uint64_t w) : word(w) {}
  const uint64_t word;    // the global lock word's raw address
  Entry* next = nullptr;  // the bucket's list; set before the entry is published
  LocalLock lock;
  bool global_held = false;
  uint32_t handovers = 0;
  // The value the global word holds while this CN has it: the tag of the
  // global acquisition that took it (handovers keep it).
  uint64_t global_tag = 0;
  // The context holding `lock`, to refuse a second Acquire by the same one.
  std::atomic<const runtime::ContextImpl*> holder{nullptr};
  // The image a handover carries (Release's `image`): of the object at
  // `image_of` (raw; 0: none), image_bytes long. The buffer grows to the
  // largest image handed over and is kept.
  uint64_t image_of = 0;
  uint32_t image_bytes = 0;
  std::vector<uint8_t> image;
};

namespace {

size_t RoundUpToPowerOfTwo(size_t n) {
  size_t power = 1;
  while (power < n)
    power <<= 1;
  return power;
}

}  // namespace

LocalLockTable::LocalLockTable(size_t buckets)
    : mask_(RoundUpToPowerOfTwo(std::max<size_t>(buckets, 1)) - 1),
      buckets_(new std::atomic<Entry*>[mask_ + 1]()) {}

LocalLockTable::~LocalLockTable() {
  for (size_t i = 0; i <= mask_; ++i) {
    for (Entry* entry = buckets_[i].load(std::memory_order_relaxed); entry != nullptr;) {
      Entry* next = entry->next;
      delete entry;
      entry = next;
    }
  }
}

LocalLockTable::Entry& LocalLockTable::EntryFor(RemoteAddress word) {
  const uint64_t raw = word.raw();
  std::atomic<Entry*>& bucket = buckets_[Mix(raw) & mask_];
  for (Entry* entry = bucket.load(std::memory_order_acquire); entry != nullptr;
       entry = entry->next) {
    if (entry->word == raw) return *entry;
  }
  return *Insert(bucket, raw);
}

// A word's first use: publish a new entry at the bucket's head, unless
// another context published one for the same word first.
LocalLockTable::Entry* LocalLockTable::Insert(std::atomic<Entry*>& bucket, uint64_t word) {
  auto fresh = std::make_unique<Entry>(word);
  Entry* head = bucket.load(std::memory_order_acquire);
  Entry* checked_to = nullptr;  // entries from here on were checked already
  for (;;) {
    for (Entry* entry = head; entry != checked_to; entry = entry->next) {
      if (entry->word == word) return entry;
    }
    checked_to = head;
    fresh->next = head;
    if (bucket.compare_exchange_weak(head, fresh.get(), std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      entries_.fetch_add(1, std::memory_order_relaxed);
      return fresh.release();
    }
  }
}

HierarchicalLock::HierarchicalLock(GlobalLockTable table, const HoclOptions& options,
                                   uint64_t owner_tag, std::shared_ptr<LocalLockTable> local)
    : table_(std::move(table)),
      options_(options),
      owner_tag_(owner_tag & 0xffff),
      local_(!options.local_table ? nullptr
             : local              ? std::move(local)
                                  : std::make_shared<LocalLockTable>()) {
  assert(ValidateOwnerTag(owner_tag).ok());
}

Status HierarchicalLock::ValidateOwnerTag(uint64_t owner_tag) {
  if (owner_tag == 0 || owner_tag > 0xffff) {
    return Status::InvalidArgument("HOCL owner tag " + std::to_string(owner_tag) +
                                   " is outside 1..65535 (compute node ids 0..65534)");
  }
  return Status::Ok();
}

// The tag of a global acquisition: the owner tag (this compute node's id
// + 1, which DeadlineExceeded messages decode) in bits 48-63, the
// acquiring context's number in bits 32-47 and the low 32 bits of its
// acquisition count in bits 0-31. Never 0, since the owner tag is not.
//
// Why two live holds never share a tag. A hold is live from the CAS that
// takes the word until the WRITE or CAS that frees it lands, across any
// local handovers (they keep the tag). Holds of two compute nodes differ in
// the owner tag (each node's HierarchicalLocks carry its own). On one
// compute node, contexts alive at the same time have different numbers, and
// a context that goes hands its number and its count on to the next one
// made (runtime::ContextNumber), so under one number the count only ever
// grows: a tag comes back only after 2^32 more global acquisitions under
// that number. Those are sequential (a context waits for each CAS before
// the next, and holds one lock at a time), a completed round trip each (at
// least about 1 us on any NIC, 2 us in the performance model), so the hold
// that took the tag would have to be live for over an hour (2^32 us is 72
// minutes) -- a hold lasts one handover chain, at most max_handovers + 1
// critical sections of a few round trips each, and one kept that long has
// made every other acquirer of its word give up (acquire_timeout) hundreds
// of times over.
//
// Knowing the tag of its own hold lets a holder undo a CAS whose outcome
// it could not learn, and retry a release, without freeing anyone else's
// hold: not another compute node's, and not this compute node's own
// earlier hold of the same word that a local handover chain still keeps
// (the context whose CAS took it may since have asked for the word again
// through a handle without the local table; a tag per context, rather
// than per acquisition, let that request's undo free the chain's word).
uint64_t HierarchicalLock::TagOf(const runtime::ContextImpl& ctx, uint64_t acquisition) const {
  static_assert(runtime::kMaxContextsPerComputeNode <= uint32_t{1} << 16,
                "a context number fits bits 32-47 of a tag");
  return (owner_tag_ << 48) | (uint64_t{ctx.number()} << 32) | (acquisition & 0xffffffffu);
}

uint64_t HierarchicalLock::NextTagForTesting(const runtime::ContextImpl& ctx) const {
  return TagOf(ctx, ctx.lock_acquisitions() + 1);
}

Op HierarchicalLock::ReleaseOp(runtime::ContextImpl& ctx, RemoteAddress word, bool fence) const {
  uint8_t flags = fence ? fabric::kFence : 0;
  if (ctx.endpoint().capabilities().max_inline_bytes >= 8) flags |= fabric::kInline;
  return Op::Write(word, const_cast<uint64_t*>(ctx.zero_word()), 8, flags);
}

// A CAS from grant.tag to 0. Its result is not needed (the retry is not
// repeated on a mismatch: the word is someone else's then), so it goes to
// the context's discard word and the release never depends on the arena.
Op HierarchicalLock::RetryReleaseOp(runtime::ContextImpl& ctx, const LockGrant& grant) const {
  return Op::CompareSwap(grant.word, ctx.discard_word(), grant.tag, 0);
}

HierarchicalLock::~HierarchicalLock() = default;

StatusOr<LockGrant> HierarchicalLock::Acquire(runtime::ContextImpl& ctx, RemoteAddress object,
                                              const Op* combined_read) {
  const std::chrono::nanoseconds start = ctx.Now();
  LockGrant grant;
  grant.word = table_.WordFor(object);
  Entry* entry = nullptr;
  std::chrono::nanoseconds queued{0};  // in the local queue
  if (options_.local_table) {
    entry = &local_->EntryFor(grant.word);
    grant.entry = entry;
    if (entry->holder.load(std::memory_order_acquire) == &ctx) {
      return Status::FailedPrecondition("this context already holds lock word " +
                                        grant.word.ToString() +
                                        " (one HOCL lock per context at a time)");
    }
    entry->lock.Lock(ctx);
    queued = ctx.Now() - start;
    entry->holder.store(&ctx, std::memory_order_release);
    if (entry->global_held) {
      grant.handed_over = true;
      grant.tag = entry->global_tag;
      ++ctx.counters().handovers;
      if (combined_read != nullptr && entry->image_of == combined_read->remote.raw() &&
          entry->image_bytes == combined_read->length) {
        std::memcpy(combined_read->local, entry->image.data(), entry->image_bytes);
        grant.read_done = true;
      }
    }
    entry->image_of = 0;  // the new holder's changes would make it stale
  }
  if (!grant.handed_over) {
    // One deadline for the whole Acquire, the local queue's wait included,
    // so N local waiters behind a dead holder do not take N timeouts.
    Status status = AcquireGlobal(ctx, &grant, combined_read, start + options_.acquire_timeout);
    if (!status.ok()) {
      ctx.RecordLockWait(ctx.Now() - start, queued);  // the longest waits end here
      if (entry) {
        entry->holder.store(nullptr, std::memory_order_release);
        entry->lock.Unlock();
      }
      return status;
    }
    if (entry) {
      entry->global_held = true;
      entry->global_tag = grant.tag;
      entry->handovers = 0;
    }
  }
  ctx.RecordLockWait(ctx.Now() - start, queued);
  return grant;
}

Status HierarchicalLock::AcquireGlobal(runtime::ContextImpl& ctx, LockGrant* grant,
                                       const Op* combined_read, std::chrono::nanoseconds deadline) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old_value, ctx.arena().Words(1));
  const bool combine = options_.combine_commands && combined_read &&
                       combined_read->remote.node() == grant->word.node();
  // One tag for every attempt: at most one of them takes the word (the
  // first that finds it free returns), and an undone attempt ends the call.
  const uint64_t tag = TagOf(ctx, ctx.NextLockAcquisition());
  for (uint32_t attempt = 0;; ++attempt) {
    // Command combination: the READ rides behind the CAS on the same queue
    // pair. If the CAS lost, the READ's data is simply not used.
    const Op ops[2] = {Op::CompareSwap(grant->word, old_value, 0, tag),
                       combine ? *combined_read : Op{}};
    Status status = ctx.Execute(grant->word.node(), {ops, combine ? 2u : 1u});
    if (!status.ok()) {
      // The CAS may have run even though the batch failed: take the word
      // back if this acquisition took it (best effort; the node may be
      // gone). The tag is this acquisition's alone, so a hold of this word
      // by an earlier acquisition of this context, which a local handover
      // chain may still keep, is left alone.
      Op undo = Op::CompareSwap(grant->word, old_value, tag, 0);
      (void)ctx.Execute(grant->word.node(), {&undo, 1});
      return status;
    }
    if (*old_value == 0) {
      grant->tag = tag;
      grant->read_done = combine;
      return Status::Ok();
    }
    ++ctx.counters().lock_retries;
    if (ctx.Now() > deadline) {
      const uint64_t holder_tag = *old_value >> 48;  // the holder's node id + 1
      const std::string holder = holder_tag == 0
                                     ? "a holder without an owner tag"
                                     : "compute node " + std::to_string(holder_tag - 1) +
                                           " (owner tag " + std::to_string(holder_tag) + ")";
      return Status::DeadlineExceeded(
          "lock word " + grant->word.ToString() + " held by " + holder + " for longer than " +
          std::to_string(options_.acquire_timeout.count()) + " ms (did its holder die?)");
    }
    // Give the holder room instead of hammering the word (and the memory
    // node's NIC) with CASes back to back.
    ctx.Backoff(attempt);
  }
}

Status HierarchicalLock::Release(runtime::ContextImpl& ctx, LockGrant& grant,
                                 std::span<const Op> write_back, const ObjectImage* image) {
  Status status;
  // The batch: the write-back, then (below) the release WRITE. Storage
  // only: the ops are copied in (Op is trivially copyable), not first
  // default-constructed all sixteen.
  union OpStorage {
    OpStorage() {}
    Op ops[kMaxWriteBackOps + 1];
  } storage;
  Op* const batch = storage.ops;
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
  std::uninitialized_copy_n(write_back.begin(), batch_size, batch);
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
    const bool fence = std::any_of(batch, batch + batch_size,
                                   [](const Op& op) { return op.code != fabric::OpCode::kWrite; });
    std::construct_at(batch + batch_size++, ReleaseOp(ctx, grant.word, fence));
  }
  if (!options_.combine_commands && release_global && batch_size > 1) {
    // Without combination the write-back completes before the release.
    Status posted = ctx.Execute(grant.word.node(), std::span<const Op>(batch, batch_size - 1));
    if (status.ok()) status = posted;
    batch[0] = ReleaseOp(ctx, grant.word, false);
    batch_size = 1;
  }
  if (batch_size > 0) {
    Status posted = ctx.Execute(grant.word.node(), std::span<const Op>(batch, batch_size));
    if (status.ok()) status = posted;
    // The release must not be lost with a failed write-back: retry it
    // alone. The failed batch's release may have landed all the same, and
    // another holder may have the word since (another compute node, or a
    // context of this one through a handle without the local table), so
    // the retry is a CAS from this hold's own tag, never a blind WRITE of
    // 0: it frees the word only while this hold still has it.
    for (int attempt = 0; !posted.ok() && release_global && attempt < kReleaseRetries; ++attempt) {
      const Op release = RetryReleaseOp(ctx, grant);
      posted = ctx.Execute(grant.word.node(), {&release, 1});
    }
  }
  if (options_.local_table) {
    auto* entry = static_cast<Entry*>(grant.entry);
    if (!release_global && status.ok() && image != nullptr && image->bytes > 0) {
      // The write-back has completed: the image is the object's bytes now.
      if (entry->image.size() < image->bytes) entry->image.resize(image->bytes);
      std::memcpy(entry->image.data(), image->data, image->bytes);
      entry->image_of = image->object.raw();
      entry->image_bytes = image->bytes;
    }
    entry->holder.store(nullptr, std::memory_order_release);
    entry->lock.Unlock();
  }
  return status;
}

}  // namespace dmidx::lock
