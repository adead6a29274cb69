#include "lock/lock_queue.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "lock/local_lock.h"
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

// One local queue. Everything but `word`, `next`, `lock` and `holder` is
// touched only by the context holding `lock`, so the lock orders it.
struct LocalLockTable::Entry {
  Entry() = default;
  explicit Entry(uint64_t w) : word(w) {}
  uint64_t word = 0;      // per word: the word's raw address; hashed: 0
  Entry* next = nullptr;  // the bucket's list; set before the entry is published
  LocalLock lock;
  // The word this compute node holds through this entry (raw; 0: none),
  // kept across handovers, and the value it holds meanwhile.
  uint64_t held = 0;
  uint64_t hold = 0;
  uint32_t handovers = 0;  // in a row, since the word was taken by CAS
  // The context holding `lock`, to refuse a second Take by the same one.
  std::atomic<const runtime::ContextImpl*> holder{nullptr};
  // The image a handover carries (Leave's `image`): of the object at
  // `image_of` (raw; 0: none), image_bytes long. The buffer grows to the
  // largest image handed over and is kept.
  uint64_t image_of = 0;
  uint32_t image_bytes = 0;
  std::vector<uint8_t> image;
};

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

LockTurn::LockTurn(LockTurn&& other) noexcept {
  *this = std::move(other);
}

LockTurn& LockTurn::operator=(LockTurn&& other) noexcept {
  if (this != &other) {
    Leave();
    entry_ = std::exchange(other.entry_, nullptr);
    ctx_ = other.ctx_;
    word_ = other.word_;
    handed_over_ = other.handed_over_;
    image_taken_ = other.image_taken_;
    kept_ = other.kept_;
    start_ = other.start_;
    queued_ = other.queued_;
  }
  return *this;
}

StatusOr<LockTurn> LockTurn::Take(LocalLockTable& table, runtime::ContextImpl& ctx,
                                  RemoteAddress word, const Op* read) {
  LockTurn turn;
  turn.start_ = ctx.Now();
  LocalLockTable::Entry& entry = table.EntryFor(word);
  if (entry.holder.load(std::memory_order_acquire) == &ctx) {
    return Status::FailedPrecondition("this context already holds the local queue of lock word " +
                                      word.ToString() + " (one lock per context at a time)");
  }
  entry.lock.Lock(ctx);
  turn.queued_ = ctx.Now() - turn.start_;
  entry.holder.store(&ctx, std::memory_order_release);
  turn.entry_ = &entry;
  turn.ctx_ = &ctx;
  turn.word_ = word.raw();
  if (entry.held == word.raw()) {
    turn.handed_over_ = true;
    ++ctx.counters().handovers;
    if (read != nullptr && entry.image_of == read->remote.raw() &&
        entry.image_bytes == read->length) {
      std::memcpy(read->local, entry.image.data(), entry.image_bytes);
      turn.image_taken_ = true;
    }
  } else if (entry.held != 0) {
    // Kept for this entry's next holder, which wants another word (hashed
    // placement): let it go first.
    const RemoteAddress other = RemoteAddress::FromRaw(entry.held);
    entry.held = 0;
    entry.handovers = 0;
    DMIDX_RETURN_IF_ERROR(ReleaseHold(ctx, other, entry.hold));  // leaves the turn
  }
  entry.image_of = 0;  // the new holder's changes would make it stale
  return turn;
}

uint64_t LockTurn::hold() const {
  return entry_->hold;
}

size_t LockTurn::waiters() const {
  return entry_->lock.waiters();
}

void LockTurn::Took(uint64_t hold) {
  entry_->held = word_;
  entry_->hold = hold;
  entry_->handovers = 0;
}

void LockTurn::Dropped() {
  kept_ = false;
  if (entry_ != nullptr && entry_->held == word_) {
    entry_->held = 0;
    entry_->handovers = 0;
  }
}

Status LockTurn::Release(runtime::ContextImpl& ctx, uint64_t hold) {
  Dropped();
  return ReleaseHold(ctx, word(), hold);
}

bool LockTurn::KeepForNext(uint32_t max_handovers) {
  if (entry_->lock.waiters() > 0 && entry_->handovers < max_handovers) {
    ++entry_->handovers;
    kept_ = true;
    return true;
  }
  Dropped();
  return false;
}

void LockTurn::Leave(const ObjectImage* image) {
  if (entry_ == nullptr) return;
  LocalLockTable::Entry& entry = *std::exchange(entry_, nullptr);
  if (kept_) {
    if (image != nullptr && image->bytes > 0) {
      // The write-back has completed: the image is the object's bytes now.
      if (entry.image.size() < image->bytes) entry.image.resize(image->bytes);
      std::memcpy(entry.image.data(), image->data, image->bytes);
      entry.image_of = image->object.raw();
      entry.image_bytes = image->bytes;
    }
  } else if (entry.held == word_ && entry.lock.waiters() == 0) {
    // Handed to this turn, which ended before it used the word, and nobody
    // else to take it: let the word go (a release that fails every post
    // leaves it held, as a dead holder does).
    entry.held = 0;
    entry.handovers = 0;
    (void)ReleaseHold(*ctx_, word(), entry.hold);
  }
  entry.holder.store(nullptr, std::memory_order_release);
  entry.lock.Unlock();
}

LockRetry::LockRetry(runtime::ContextImpl& ctx, const LockTurn* turn,
                     std::chrono::nanoseconds timeout)
    : ctx_(ctx),
      turn_(turn),
      deadline_((turn != nullptr && turn->active() ? turn->start() : ctx.Now()) + timeout) {}

bool LockRetry::Wait() {
  ++ctx_.counters().lock_retries;
  if (ctx_.Now() > deadline_) return false;
  const bool others_wait = turn_ != nullptr && turn_->active() && turn_->waiters() > 0;
  ctx_.Backoff(others_wait ? 0 : attempt_);
  ++attempt_;
  return true;
}

}  // namespace dmidx::lock
