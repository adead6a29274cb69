#include "lock/lock_queue.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/spin_lock.h"
#include "lib/runtime/membership.h"
#include "lock/mix.h"

namespace dmidx::lock {

namespace {

using fabric::Op;
using fabric::RemoteAddress;

size_t RoundUpToPowerOfTwo(size_t n) {
  size_t power = 1;
  while (power < n)
    power <<= 1;
  return power;
}

}  // namespace

// A bucket of the recycled placement: its entries, in use or idle, newest
// first (one made with the table). Entries are never unlinked (only
// re-keyed while idle), so one lives as long as the table. A line of its
// own: threads use different buckets at once.
struct alignas(64) LocalLockTable::Bucket {
  // Held for Use's walk of `entries` and its change to them or to an
  // entry's word: a few dozen instructions that never suspend or allocate,
  // so a spin lock. (With a std::mutex, and LetGo under it too, a radix
  // update cost 166 more client instructions than with hashed queues, 5%;
  // with this, 34: tools/cpu-cost.sh.)
  SpinLock busy;
  Entry* entries = nullptr;  // guarded by busy
};

LocalLockTable::LocalLockTable(size_t buckets)
    : mask_(RoundUpToPowerOfTwo(std::max<size_t>(buckets, 1)) - 1),
      buckets_(new std::atomic<Entry*>[mask_ + 1]()) {}

LocalLockTable::LocalLockTable(RecycledTag, size_t buckets)
    : mask_(RoundUpToPowerOfTwo(std::max<size_t>(buckets, 1)) - 1),
      recycled_(new Bucket[mask_ + 1]) {
  for (size_t i = 0; i <= mask_; ++i) {
    Entry* entry = new Entry();
    entry->bucket = &recycled_[i];
    recycled_[i].entries = entry;
  }
  entries_.store(mask_ + 1, std::memory_order_relaxed);
}

std::shared_ptr<LocalLockTable> LocalLockTable::Recycling(size_t buckets) {
  return std::shared_ptr<LocalLockTable>(new LocalLockTable(RecycledTag{}, buckets));
}

LocalLockTable::~LocalLockTable() {
  for (size_t i = 0; i <= mask_; ++i) {
    Entry* entry = recycled_ ? recycled_[i].entries : buckets_[i].load(std::memory_order_relaxed);
    while (entry != nullptr)
      delete std::exchange(entry, entry->next);
  }
}

LocalLockTable::Entry& LocalLockTable::Find(uint64_t word) {
  std::atomic<Entry*>& bucket = buckets_[Mix(word) & mask_];
  for (Entry* entry = bucket.load(std::memory_order_acquire); entry != nullptr;
       entry = entry->next) {
    if (entry->word == word) return *entry;
  }
  return *Insert(bucket, word);
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

// The word's entry (in use, or idle and still keyed to it), else an idle
// entry of the bucket re-keyed to it, else a new one. Users are added only
// here, under the bucket's flag, so an entry found idle (no users) stays
// idle until this returns it; the acquire load of `users` pairs with the
// last user's release in LetGo, so whoever takes the entry next sees all
// that user did, whatever word it comes for.
LocalLockTable::Entry& LocalLockTable::Use(uint64_t word) {
  Bucket& bucket = recycled_[Mix(word) & mask_];
  // A new entry is made outside the lock (an allocation may take long, or
  // throw), then the bucket walked again: another context may have made
  // or freed one meanwhile.
  std::unique_ptr<Entry> fresh;
  for (;;) {
    {
      std::lock_guard<SpinLock> guard(bucket.busy);
      Entry* found = nullptr;
      Entry* idle = nullptr;
      for (Entry* entry = bucket.entries; entry != nullptr; entry = entry->next) {
        if (entry->word == word) {
          found = entry;
          break;
        }
        if (idle == nullptr && entry->users.load(std::memory_order_acquire) == 0) idle = entry;
      }
      if (found == nullptr && idle == nullptr && fresh != nullptr) {
        idle = fresh.release();
        idle->bucket = &bucket;
        idle->next = bucket.entries;
        bucket.entries = idle;
        entries_.fetch_add(1, std::memory_order_relaxed);
      }
      if (found == nullptr && idle != nullptr) {
        // Idle: its lock is free, nobody waits, and no word is held through
        // it (a turn leaves a held word to a waiter, or releases it).
        assert(!idle->held && !idle->kept && idle->lock.waiters() == 0);
        idle->word = word;
        found = idle;
      }
      if (found != nullptr) {
        found->users.fetch_add(1, std::memory_order_acquire);
        return *found;  // `fresh`, if made and not needed, is freed after the lock
      }
    }
    fresh = std::make_unique<Entry>();
  }
}

Status ReleaseHold(runtime::ContextImpl& ctx, RemoteAddress word, uint64_t hold, int posts,
                   const Op* clear) {
  // Its result is not needed (a mismatch is not retried: the word is
  // someone else's then), so it goes to the discard word. A CAS after a
  // WRITE of its queue pair runs after the WRITE was placed.
  const Op ops[2] = {clear != nullptr ? *clear : Op{},
                     Op::CompareSwap(word, ctx.discard_word(), hold, 0)};
  const std::span<const Op> batch =
      clear != nullptr ? std::span<const Op>(ops, 2) : std::span<const Op>(ops + 1, 1);
  Status status;
  for (int post = 0; post < posts; ++post) {
    status = ctx.Execute(word.node(), batch);
    if (status.ok()) break;
  }
  return status;
}

uint64_t LinkValue(std::span<const Op> batch, const LinkedObjects& linked) {
  // The guarded WRITE: the first after the linked ones whose range holds
  // the link word (a redo record's WRITEs, aimed at its slot, may come
  // between: lock/redo_log.h).
  for (const Op& guarded : batch.subspan(linked.ops)) {
    if (guarded.code == fabric::OpCode::kWrite && guarded.remote.node() == linked.link.node() &&
        guarded.remote.region() == linked.link.region() &&
        linked.link.offset() >= guarded.remote.offset() &&
        linked.link.offset() + 8 <= guarded.remote.offset() + guarded.length) {
      uint64_t value = 0;
      std::memcpy(&value,
                  static_cast<const uint8_t*>(guarded.local) +
                      (linked.link.offset() - guarded.remote.offset()),
                  8);
      return value;
    }
  }
  return 0;
}

Status PostAgainHeld(runtime::ContextImpl& ctx, RemoteAddress word, uint64_t hold,
                     std::span<const Op> batch, const LinkedObjects& linked, bool with_release,
                     uint32_t retries, Status failed) {
  const uint16_t node = word.node();
  // Before each post: has this hold still the word, or did the release
  // land? And did the guarded WRITE place the link to the linked objects?
  // Read into words of this call's own, never ctx.discard_word(): an
  // unsignaled atomic of this context (a radix tree's repair CAS) may put
  // its result there at any time, and pass for another holder's hold.
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint64_t* seen = nullptr;  // [0]: the lock word, [1]: the link word
  Op reads[2];
  std::span<const Op> checks;
  if (with_release || linked.ops > 0) {
    StatusOr<uint64_t*> words = ctx.arena().Words(2);
    if (!words.ok()) return failed;  // nothing can tell what landed
    seen = *words;
    reads[0] = Op::Read(word, &seen[0], 8);
    reads[1] = Op::Read(linked.link, &seen[1], 8);
    const size_t first = with_release ? 0 : 1, end = linked.ops > 0 ? 2 : 1;
    checks = std::span<const Op>(reads + first, end - first);
  }
  // What the guarded WRITE puts in the link word.
  const uint64_t link_value = linked.ops > 0 ? LinkValue(batch, linked) : 0;
  std::span<const Op> post = batch;
  // Up to `retries` posts again, and as many READs that fail (each READ
  // that fails is tried again without spending a post).
  uint32_t reposts = 0, failed_checks = 0;
  while (reposts < retries) {
    if (!checks.empty()) {
      if (!ctx.Execute(node, checks).ok()) {
        if (++failed_checks > retries) break;
        continue;
      }
      // The release landed, after the whole batch.
      if (with_release && seen[0] != hold) return Status::Ok();
      // The link landed, after the linked objects: they may be in use.
      if (linked.ops > 0 && seen[1] == link_value) post = batch.subspan(linked.ops);
    }
    ++reposts;
    ++ctx.counters().reposted_batches;
    failed = ctx.Execute(node, post);
    if (failed.ok()) return failed;
  }
  return failed;
}

Status LockTurn::TakenTwice(LocalLockTable::Entry& entry) {
  const std::string word = RemoteAddress::FromRaw(entry.word).ToString();
  if (entry.bucket != nullptr) LocalLockTable::LetGo(entry);
  return Status::FailedPrecondition("this context already holds the local queue of lock word " +
                                    word + " (one lock per context at a time)");
}

void LockTurn::TakeHandedOver(runtime::ContextImpl& ctx, const Op* read) {
  LocalLockTable::Entry& entry = *entry_;
  ++ctx.counters().handovers;
  if (read != nullptr && entry.image_of == read->remote.raw() &&
      entry.image_bytes == read->length) {
    std::memcpy(read->local, entry.image.data(), entry.image_bytes);
    entry.image_taken = true;
  }
  entry.image_of = 0;
}

Status LockTurn::Release(runtime::ContextImpl& ctx, uint64_t hold) {
  const RemoteAddress released = word();
  Dropped();
  return ReleaseHold(ctx, released, hold);
}

void LockTurn::LeaveHeld(const ObjectImage* image) {
  LocalLockTable::Entry& entry = *std::exchange(entry_, nullptr);
  if (entry.kept && entry.lock.waiters() > 0) {
    if (image != nullptr && image->bytes > 0) {
      // The write-back has completed: the image is the object's bytes now.
      if (entry.image.size() < image->bytes) entry.image.resize(image->bytes);
      std::memcpy(entry.image.data(), image->data, image->bytes);
      entry.image_of = image->object.raw();
      entry.image_bytes = image->bytes;
    }
  } else if (entry.lock.waiters() == 0) {
    // Handed to this turn, which ended before it used the word, and nobody
    // else to take it: let the word go (a release that fails every post
    // leaves it held, as a dead holder does). Likewise a word kept for a
    // next holder that no longer waits (KeepForNext keeps one only while a
    // waiter waits, and a LocalLock waiter never gives up; this keeps a
    // recycled entry from going idle with a word held, whatever changes).
    entry.kept = false;
    entry.held = false;
    entry.handovers = 0;
    (void)ReleaseHold(*entry.turn_ctx, RemoteAddress::FromRaw(entry.word), entry.hold);
  }
  entry.holder.store(nullptr, std::memory_order_release);
  entry.lock.Unlock();
  if (entry.bucket != nullptr) LocalLockTable::LetGo(entry);
}

Status LockTimeout(std::string_view message) {
  return Status(StatusCode::kDeadlineExceeded, message, StatusDetail::kLockTimeout);
}

bool LockRetry::Wait(uint32_t poll_step) {
  ++ctx_.counters().lock_retries;
  return Pause(poll_step);
}

bool LockRetry::Pause(uint32_t poll_step) {
  if (ctx_.Now() > deadline_) return false;
  const bool others_wait = turn_ != nullptr && turn_->active() && turn_->waiters() > 0;
  ctx_.Backoff(others_wait ? std::min(attempt_, poll_step) : attempt_);
  ++attempt_;
  return true;
}

Status FreeVoidHold(runtime::ContextImpl& ctx, RemoteAddress word, uint64_t found) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  const Op free = Op::CompareSwap(word, old, found, 0);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&free, 1}));
  if (*old == found) ++ctx.counters().dead_holds_freed;
  return Status::Ok();
}

StatusOr<bool> LockRetry::HolderGone(uint32_t holder) {
  runtime::Membership& membership = ctx_.compute_node().membership();
  if (membership.KnownGone(holder)) return true;
  const std::chrono::nanoseconds now = ctx_.Now();
  const std::chrono::nanoseconds period = membership.options().period;
  if (!first_wait_) first_wait_ = now;
  if (now - *first_wait_ < period || now < next_check_ || !membership.MayJudge(ctx_)) return false;
  if (!watch_) watch_.emplace(membership.options().timeout);
  next_check_ = now + period;
  StatusOr<bool> checked = membership.Check(ctx_, holder, *watch_);
  if (checked.ok()) return *checked;
  // A lease that could not be read, or a recovery of ours cut short by a
  // lost link, is tried again next period (a recovery goes on from the
  // record's state); anything else goes up.
  const StatusCode code = checked.status().code();
  if (IsFenced(checked.status()) ||
      (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded))
    return checked.status();
  return false;
}

StatusOr<bool> LockRetry::WaitHeld(RemoteAddress word, uint64_t found,
                                   std::optional<uint32_t> holder, uint32_t poll_step) {
  ++ctx_.counters().lock_retries;
  if (!holder) return Pause(poll_step);
  DMIDX_ASSIGN_OR_RETURN(const bool gone, HolderGone(*holder));
  if (gone) {
    DMIDX_RETURN_IF_ERROR(FreeVoidHold(ctx_, word, found));
    return true;
  }
  return Pause(poll_step);
}

StatusOr<bool> LockRetry::WaitOwned(uint32_t owner, FunctionRef<StatusOr<bool>()> in_flight,
                                    FunctionRef<Status()> void_it) {
  for (;;) {
    DMIDX_ASSIGN_OR_RETURN(const bool waits, in_flight());
    if (!waits) return true;
    ++ctx_.counters().lock_retries;
    DMIDX_ASSIGN_OR_RETURN(const bool gone, HolderGone(owner));
    if (gone) {
      // Read again: the change may have ended between the last look and
      // the fence.
      DMIDX_ASSIGN_OR_RETURN(const bool still, in_flight());
      if (still) DMIDX_RETURN_IF_ERROR(void_it());
      return true;
    }
    if (!Pause(0)) return false;
  }
}

}  // namespace dmidx::lock
