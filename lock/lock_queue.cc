#include "lock/lock_queue.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

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

LocalLockTable::LocalLockTable(size_t buckets)
    : mask_(RoundUpToPowerOfTwo(std::max<size_t>(buckets, 1)) - 1),
      buckets_(new std::atomic<Entry*>[mask_ + 1]()) {}

LocalLockTable::LocalLockTable(HashedTag, size_t queues)
    : mask_(RoundUpToPowerOfTwo(std::max<size_t>(queues, 1)) - 1), hashed_(new Entry[mask_ + 1]) {
  entries_.store(mask_ + 1, std::memory_order_relaxed);
}

std::shared_ptr<LocalLockTable> LocalLockTable::Hashed(size_t queues) {
  return std::shared_ptr<LocalLockTable>(new LocalLockTable(HashedTag{}, queues));
}

LocalLockTable::~LocalLockTable() {
  if (hashed_) return;
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
  if (hashed_) return hashed_[Mix(raw) & mask_];
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

Status ReleaseHold(runtime::ContextImpl& ctx, RemoteAddress word, uint64_t hold, int posts) {
  // Its result is not needed (a mismatch is not retried: the word is
  // someone else's then), so it goes to the discard word.
  const Op release = Op::CompareSwap(word, ctx.discard_word(), hold, 0);
  Status status;
  for (int post = 0; post < posts; ++post) {
    status = ctx.Execute(word.node(), {&release, 1});
    if (status.ok()) break;
  }
  return status;
}

Status LockTurn::TakenTwice(fabric::RemoteAddress word) {
  return Status::FailedPrecondition("this context already holds the local queue of lock word " +
                                    word.ToString() + " (one lock per context at a time)");
}

// Take, once the queue's entry holds a word: kept for this turn, or for
// another word hashed onto the same entry.
Status LockTurn::TakeHeld(runtime::ContextImpl& ctx, const Op* read) {
  LocalLockTable::Entry& entry = *entry_;
  if (entry.handed_over) {
    ++ctx.counters().handovers;
    if (read != nullptr && entry.image_of == read->remote.raw() &&
        entry.image_bytes == read->length) {
      std::memcpy(read->local, entry.image.data(), entry.image_bytes);
      entry.image_taken = true;
    }
    entry.image_of = 0;
    return Status::Ok();
  }
  // Kept for this entry's next holder, which wants another word (hashed
  // placement): let it go first.
  const RemoteAddress other = RemoteAddress::FromRaw(entry.held);
  entry.held = 0;
  entry.handovers = 0;
  entry.image_of = 0;
  Status released = ReleaseHold(ctx, other, entry.hold);
  if (!released.ok()) Leave();
  return released;
}

Status LockTurn::Release(runtime::ContextImpl& ctx, uint64_t hold) {
  const RemoteAddress released = word();
  Dropped();
  return ReleaseHold(ctx, released, hold);
}

void LockTurn::LeaveHeld(const ObjectImage* image) {
  LocalLockTable::Entry& entry = *std::exchange(entry_, nullptr);
  if (entry.kept) {
    if (image != nullptr && image->bytes > 0) {
      // The write-back has completed: the image is the object's bytes now.
      if (entry.image.size() < image->bytes) entry.image.resize(image->bytes);
      std::memcpy(entry.image.data(), image->data, image->bytes);
      entry.image_of = image->object.raw();
      entry.image_bytes = image->bytes;
    }
  } else if (entry.held != 0 && entry.held == entry.turn_word && entry.lock.waiters() == 0) {
    // Handed to this turn, which ended before it used the word, and nobody
    // else to take it: let the word go (a release that fails every post
    // leaves it held, as a dead holder does).
    entry.held = 0;
    entry.handovers = 0;
    (void)ReleaseHold(*entry.turn_ctx, RemoteAddress::FromRaw(entry.turn_word), entry.hold);
  }
  entry.holder.store(nullptr, std::memory_order_release);
  entry.lock.Unlock();
}

Status LockTimeout(std::string_view message) {
  return Status(StatusCode::kDeadlineExceeded, message, StatusDetail::kLockTimeout);
}

bool LockRetry::Wait(uint32_t poll_step) {
  ++ctx_.counters().lock_retries;
  if (ctx_.Now() > deadline_) return false;
  const bool others_wait = turn_ != nullptr && turn_->active() && turn_->waiters() > 0;
  ctx_.Backoff(others_wait ? std::min(attempt_, poll_step) : attempt_);
  ++attempt_;
  return true;
}

}  // namespace dmidx::lock
