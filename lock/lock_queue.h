// The compute-node-local level of every remote lock: one FIFO queue per
// remote lock word (or per hash of it), where a holder that leaves with
// others queued may keep the word for the next one and hand it the object's
// bytes with it; and the one rule by which a context retries a lock word's
// CAS that found it held.
//
// A remote lock word is any 8-byte word taken with CAS from 0 to a hold
// value and given back by a WRITE of 0 (or a CAS from the hold value to 0):
// HOCL's words (lock/hocl.h: a separate word per hashed object, the hold
// value a tag per acquisition) and a radix leaf's rear word (inside the leaf,
// the hold value its compute node's locked word) alike. What differs between
// them is the caller's: where the word is, what it holds while held, and
// what a CAS that found it otherwise means.
//
// Use (a holder of one word at a time per context):
//   DMIDX_ASSIGN_OR_RETURN(LockTurn turn, LockTurn::Take(table, ctx, word, &read));
//   if (!turn.handed_over()) { CAS loop with LockRetry; turn.Took(hold); }
//   ... (turn.image_taken(): `read` was answered from the last holder's image)
//   if (turn.KeepForNext(max_handovers)) post the write-back alone
//   else post the write-back and the release WRITE in one batch
//   turn.Leave(&image);  // or let it go out of scope
#ifndef DMIDX_LOCK_LOCK_QUEUE_H_
#define DMIDX_LOCK_LOCK_QUEUE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "dmidx/status.h"
#include "lib/fabric/op.h"
#include "lib/runtime/context.h"

namespace dmidx::lock {

// A locked object's bytes as they stand once a write-back has landed: what
// a holder that hands the lock over locally gives the next holder, so that
// one needs no READ of the object (LockTurn::Leave).
struct ObjectImage {
  fabric::RemoteAddress object;
  const void* data = nullptr;
  uint32_t bytes = 0;
};

// A compute node's local queues, shared by its contexts (one table per kind
// of word: HOCL's words, radix rear words). Two placements:
//  - per word (the constructor): an entry per word, made on its first use
//    and kept until the table goes. For words of a bounded set (HOCL's lock
//    table). Finding an entry takes no lock: a fixed array of buckets, each
//    the head of a list that only ever grows at its head (by CAS), so a
//    reader walks it with acquire loads alone. Only a word's first use
//    allocates.
//  - hashed (Hashed()): a fixed number of entries made up front, words
//    hashed onto them, never an allocation later. For words without a
//    bound (one per radix leaf). Two words sharing an entry wait for each
//    other locally, and a word kept for the next holder of an entry that
//    wants another word is released by that holder first (LockTurn::Take).
class LocalLockTable {
 public:
  struct Entry;
  // Per word; `buckets` (rounded up to a power of two): lists stay short
  // while the words in use are a few times as many.
  explicit LocalLockTable(size_t buckets = kDefaultBuckets);
  // Hashed onto `queues` entries (rounded up to a power of two).
  static std::shared_ptr<LocalLockTable> Hashed(size_t queues);
  ~LocalLockTable();
  LocalLockTable(const LocalLockTable&) = delete;
  LocalLockTable& operator=(const LocalLockTable&) = delete;

  Entry& EntryFor(fabric::RemoteAddress word);

  // Entries made so far (per word: one per word ever locked through this
  // table; hashed: all of them).
  size_t entries() const { return entries_.load(std::memory_order_relaxed); }

  static constexpr size_t kDefaultBuckets = size_t{1} << 16;

 private:
  struct HashedTag {};
  LocalLockTable(HashedTag, size_t queues);
  Entry* Insert(std::atomic<Entry*>& bucket, uint64_t word);

  const size_t mask_;
  const std::unique_ptr<std::atomic<Entry*>[]> buckets_;  // per word
  std::unique_ptr<Entry[]> hashed_;                       // hashed; null per word
  std::atomic<size_t> entries_{0};
};

// Times a release by CAS is posted in all, by default, before its error is
// returned.
inline constexpr int kReleasePosts = 4;

// Frees `word` if it still holds `hold`: a CAS from `hold` to 0, posted
// again while its batch fails (`posts` times in all). A CAS, never a blind
// WRITE of 0: a failed release may have landed, and another holder may have
// the word since, whose hold the CAS leaves alone. Its result goes to the
// context's discard word, so it never needs the arena.
Status ReleaseHold(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold,
                   int posts = kReleasePosts);

// A context's turn in the local queue of a remote lock word, from its FIFO
// wait to the end of its hold (or of its attempt). While a context has the
// turn, no other context of this compute node holds or takes the word, so
// this compute node's hold value found in the word is this turn's own hold
// (taken by it or handed to it). Move-only; the destructor leaves.
class LockTurn {
 public:
  LockTurn() = default;
  LockTurn(LockTurn&& other) noexcept;
  LockTurn& operator=(LockTurn&& other) noexcept;
  LockTurn(const LockTurn&) = delete;
  LockTurn& operator=(const LockTurn&) = delete;
  ~LockTurn() { Leave(); }

  // Waits, first-come first-served, for `ctx`'s turn at `word` (parks; the
  // scheduler runs the others meanwhile). If the last holder kept the word
  // for this turn (handed_over()), `read` (a READ of the locked object, may
  // be null) is answered from its image when that is of the same object
  // and length (image_taken()), and the handover is counted in ctx's
  // counters. A word of another hashed onto the same entry that is still
  // held is released first (ReleaseHold; its error is returned, with the
  // turn let go). FailedPrecondition when `ctx` has the turn of that entry
  // already (a context holds one lock at a time).
  static StatusOr<LockTurn> Take(LocalLockTable& table, runtime::ContextImpl& ctx,
                                 fabric::RemoteAddress word, const fabric::Op* read = nullptr);

  bool active() const { return entry_ != nullptr; }
  fabric::RemoteAddress word() const { return fabric::RemoteAddress::FromRaw(word_); }
  // This compute node holds the word already (kept for this turn by the
  // last holder), with hold value hold().
  bool handed_over() const { return handed_over_; }
  bool image_taken() const { return image_taken_; }
  uint64_t hold() const;
  // How long Take waited in the queue.
  std::chrono::nanoseconds queued() const { return queued_; }
  // When Take was called: a lock's deadline counts from here, so that the
  // contexts queued behind a dead holder share one timeout instead of
  // each waiting a fresh one.
  std::chrono::nanoseconds start() const { return start_; }
  // Contexts queued behind this turn right now.
  size_t waiters() const;

  // The word's CAS won with `hold`: this turn holds it.
  void Took(uint64_t hold);
  // The hold ends without a handover: the caller has released the word (or
  // will, on its own), or never will (a radix delete's mark replaced it).
  // Nothing once the turn has been left.
  void Dropped();
  // Frees the word by ReleaseHold from `hold` (default: this turn's hold)
  // and drops the hold, landed or not.
  Status Release(runtime::ContextImpl& ctx, uint64_t hold);
  Status Release(runtime::ContextImpl& ctx) { return Release(ctx, hold()); }
  // Before a write-back: whether to keep the word for the next local waiter
  // (one waits, and fewer than `max_handovers` handovers ran in a row).
  // False: the hold is dropped here, and the caller releases the word.
  bool KeepForNext(uint32_t max_handovers);
  // Ends the turn and lets the next waiter have it. `image`, of a word kept
  // for the next holder, is the object as it stands once the write-back has
  // landed (not given when it failed): the next holder's Take answers its
  // READ from it. A hold neither kept, dropped nor released (the turn ended
  // before using a word handed to it) goes to the next waiter if one
  // waits, and is released (best effort) if none does.
  void Leave(const ObjectImage* image = nullptr);

 private:
  LocalLockTable::Entry* entry_ = nullptr;
  runtime::ContextImpl* ctx_ = nullptr;
  uint64_t word_ = 0;
  bool handed_over_ = false;
  bool image_taken_ = false;
  bool kept_ = false;
  std::chrono::nanoseconds start_{0};
  std::chrono::nanoseconds queued_{0};
};

// The one rule for retrying a lock word's CAS that found it held, for every
// index. A context alone waits ctx.Backoff(attempt): exponential, from
// retry_backoff_min to retry_backoff_max (ClientOptions), so a word held long
// (by another compute node's handover chain, or a dead holder) costs the
// memory node few CASes. The head of a local queue with others waiting
// behind it waits ctx.Backoff(0) at most, whatever its attempt: each
// microsecond it sleeps past the holder's release is a microsecond for every
// context behind it, and its short poll costs the memory node one atomic
// per round trip and a half per compute node (docs/design.md, Locks).
// Counts lock_retries in ctx's counters.
class LockRetry {
 public:
  // `turn` may be null (no local queue: always alone). The deadline is
  // turn's start (or now) plus `timeout`.
  LockRetry(runtime::ContextImpl& ctx, const LockTurn* turn, std::chrono::nanoseconds timeout);
  // After a CAS that found the word held: counts the retry; false once the
  // deadline has passed (the caller returns DeadlineExceeded); else waits
  // by the rule above and returns true.
  bool Wait();

 private:
  runtime::ContextImpl& ctx_;
  const LockTurn* const turn_;
  const std::chrono::nanoseconds deadline_;
  uint32_t attempt_ = 0;
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_LOCK_QUEUE_H_
