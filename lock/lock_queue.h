// The compute-node-local level of every remote lock: one FIFO queue per
// remote lock word, where a holder that leaves with others queued may keep
// the word for the next one and hand it the object's bytes with it; and the
// one rule by which a context retries a lock word's CAS that found it held,
// with its deadline and the status it gives up with.
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
//   LockTurn turn;
//   DMIDX_RETURN_IF_ERROR(LockTurn::Take(table, ctx, word, &read, ctx.Now(), &turn));
//   if (!turn.handed_over()) { CAS loop with LockRetry; turn.Took(hold); }
//   ... (turn.image_taken(): `read` was answered from the last holder's image)
//   if (turn.KeepForNext(max_handovers)) post the write-back alone
//   else post the write-back and the release WRITE in one batch
//   turn.Leave(&image);  // or let it go out of scope
#ifndef DMIDX_LOCK_LOCK_QUEUE_H_
#define DMIDX_LOCK_LOCK_QUEUE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/status.h"
#include "lib/common/function_ref.h"
#include "lib/fabric/op.h"
#include "lib/runtime/context.h"
#include "lib/runtime/lease.h"
#include "lock/local_lock.h"

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
// of word: HOCL's words, radix rear words). An entry (a queue) per word, so
// a context only ever waits behind contexts that want its own word: a word
// held long (by a dead or slow compute node) holds up no other word's
// waiters, and a word kept for the next holder is kept for a waiter that
// wants it. Two placements:
//  - kept (the constructor): an entry per word, made on its first use and
//    kept until the table goes. For words of a bounded set (HOCL's lock
//    table). Finding an entry takes no lock: a fixed array of buckets, each
//    the head of a list that only ever grows at its head (by CAS), so a
//    reader walks it with acquire loads alone. Only a word's first use
//    allocates.
//  - recycled (Recycling()): an entry per word while contexts use it (from
//    Take to the end of the turn), then idle, and taken over by the next
//    word of its bucket that finds none of its own. For words without a
//    bound (one per radix leaf): a bucket keeps as many entries as the most
//    of its words ever in use at once (each context uses one at a time), so
//    the table holds about one per bucket however many words pass through
//    it. One per bucket is made with the table; a bucket allocates only
//    when more of its words are in use at once than ever before. Finding an
//    entry walks the bucket's short list under a spin lock (a new entry is
//    made outside it); giving it up is one atomic decrement. (Words hashed
//    onto a fixed number of shared queues, as the radix tree had, made a
//    context wait behind whatever held another word of its queue, up to
//    lock_timeout behind a dead holder, and kept a word for a next holder
//    that wanted another, which then spent a CAS releasing it: at SMART's
//    YCSB A most local waits were such, not for the word.)
class LocalLockTable {
 public:
  struct Entry;
  // Kept; `buckets` (rounded up to a power of two): lists stay short while
  // the words in use are a few times as many.
  explicit LocalLockTable(size_t buckets = kDefaultBuckets);
  // Recycled, in `buckets` buckets (rounded up to a power of two).
  static std::shared_ptr<LocalLockTable> Recycling(size_t buckets);
  ~LocalLockTable();
  LocalLockTable(const LocalLockTable&) = delete;
  LocalLockTable& operator=(const LocalLockTable&) = delete;

  // The entry of `word`. Recycled: in use until LetGo (LockTurn calls
  // both).
  Entry& EntryFor(fabric::RemoteAddress word) {
    return recycled_ ? Use(word.raw()) : Find(word.raw());
  }
  // A recycled entry's user (since EntryFor) is done with it; the entry
  // goes idle when it was the last. Not for kept entries.
  static inline void LetGo(Entry& entry);

  // Entries made so far (kept: one per word ever locked through this
  // table; recycled: one per bucket, and more where more of its words were
  // in use at once).
  size_t entries() const { return entries_.load(std::memory_order_relaxed); }

  static constexpr size_t kDefaultBuckets = size_t{1} << 16;

 private:
  struct RecycledTag {};
  struct Bucket;
  LocalLockTable(RecycledTag, size_t buckets);
  Entry& Find(uint64_t word);
  Entry* Insert(std::atomic<Entry*>& bucket, uint64_t word);
  Entry& Use(uint64_t word);

  const size_t mask_;
  const std::unique_ptr<std::atomic<Entry*>[]> buckets_;  // kept; null recycled
  const std::unique_ptr<Bucket[]> recycled_;              // recycled; null kept
  std::atomic<size_t> entries_{0};
};

// One local queue (an entry of LocalLockTable). Everything but `word`,
// `next`, `bucket`, `users`, `lock` and `holder` is touched only by the
// context holding `lock`, so the lock orders it.
struct LocalLockTable::Entry {
  Entry() = default;
  explicit Entry(uint64_t w) : word(w) {}
  // The word's raw address. Kept: set before the entry is published, never
  // changed. Recycled: guarded by the bucket's flag, changed only while no
  // context uses the entry.
  uint64_t word = 0;
  Entry* next = nullptr;  // the bucket's list; set before the entry is published
  // Recycled: the bucket, and the contexts between EntryFor and LetGo
  // (added to only under the bucket's flag). Kept: null and unused.
  Bucket* bucket = nullptr;
  std::atomic<uint32_t> users{0};
  LocalLock lock;
  // Whether this compute node holds `word` through this entry, kept across
  // handovers, and the value it holds meanwhile. False whenever no context
  // uses a recycled entry.
  bool held = false;
  uint64_t hold = 0;
  uint32_t handovers = 0;  // in a row, since the word was taken by CAS
  // The context holding `lock`, to refuse a second Take by the same one.
  std::atomic<const runtime::ContextImpl*> holder{nullptr};
  // The holder's turn (LockTurn): its context, what Take found, whether the
  // word is kept for the next holder, how long it queued.
  runtime::ContextImpl* turn_ctx = nullptr;
  bool handed_over = false;
  bool image_taken = false;
  bool kept = false;
  std::chrono::nanoseconds queued{0};
  // The image a handover carries (Leave's `image`): of the object at
  // `image_of` (raw; 0: none), image_bytes long. The buffer grows to the
  // largest image handed over and is kept.
  uint64_t image_of = 0;
  uint32_t image_bytes = 0;
  std::vector<uint8_t> image;
};

// Release: whoever finds the entry idle next (LocalLockTable::Use, with an
// acquire load) sees everything this user did to it.
void LocalLockTable::LetGo(Entry& entry) {
  entry.users.fetch_sub(1, std::memory_order_release);
}

// Times a step whose batch failed under a hold is tried again by default
// (a write-back posted again, a release, an undo, a READ that finds out
// what landed) before the error is returned: HOCL's release_retries, the
// radix tree's kBatchRetries.
inline constexpr int kRetriesAfterFailure = 3;
// Times a release by CAS is posted in all, by default, before its error is
// returned.
inline constexpr int kReleasePosts = 1 + kRetriesAfterFailure;

// Frees `word` if it still holds `hold`: a CAS from `hold` to 0, posted
// again while its batch fails (`posts` times in all). A CAS, never a blind
// WRITE of 0: a failed release may have landed, and another holder may have
// the word since, whose hold the CAS leaves alone. Its result goes to the
// context's discard word, so it never needs the arena. With `clear` (the
// last op of a batch RedoLog::Wrap made, which failed), the record is
// cleared in the same batch before the CAS: a record must not outlive its
// hold (lock/redo_log.h).
Status ReleaseHold(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold,
                   int posts = kReleasePosts, const fabric::Op* clear = nullptr);

// Objects a write-back makes that its hold does not guard (see HierarchicalLock::Release):
// the first `ops` ops of the write-back are WRITEs of objects that nobody
// can reach until the 8-byte word at `link` lands, which write_back[ops],
// a WRITE of the object the hold guards, writes with a value that word did
// not hold before. A B+tree split: {the new right node, the left node
// whose sibling word names it, release}, under the left node's lock.
//
// Two words, passed in registers: Release's `unlinked` says after an
// error whether the link surely did not land.
struct LinkedObjects {
  uint32_t ops = 0;            // 0: every op of the write-back is under the hold
  fabric::RemoteAddress link;  // 8-aligned, within write_back[ops]'s range
};

// The value the guarded WRITE of `batch` (the first WRITE after
// linked.ops whose range holds linked.link) puts in the link word; 0 when
// there is none.
uint64_t LinkValue(std::span<const fabric::Op> batch, const LinkedObjects& linked);

// After `batch`, posted under a hold of `word` (the word holds `hold` while
// this context has it, and nobody else of this compute node takes it: the
// caller has the word's turn), failed with `failed`: posts it again, up to
// `retries` times, while it fails. Before each post it READs the word (with
// `with_release`: the batch ends with the word's release, and WRITEs of one
// queue pair land in post order, so a released word means the whole batch
// landed: Ok, nothing posted) and the link word of `linked` (once the link
// landed, its objects may be in use: only the rest of the batch is posted
// again). The READs go to words of the arena, never ctx.discard_word(): an
// unsignaled atomic of this context may put its result there at any time.
// A READ that fails is tried again without spending a post, up to
// `retries` times in all. Ok once a post landed in full (or the release was
// seen); else the last error, with the word still held: the caller
// releases it (ReleaseHold).
// Each post again counts in Counters::reposted_batches.
Status PostAgainHeld(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold,
                     std::span<const fabric::Op> batch, const LinkedObjects& linked,
                     bool with_release, uint32_t retries, Status failed);

// A context's turn in the local queue of a remote lock word, from its FIFO
// wait to the end of its hold (or of its attempt). While a context has the
// turn, no other context of this compute node holds or takes the word, so
// this compute node's hold value found in the word is this turn's own hold
// (taken by it or handed to it). Move-only; the destructor leaves.
class LockTurn {
 public:
  LockTurn() = default;
  // One pointer: the turn's state lives in its entry, guarded by the
  // entry's local lock, so a turn moves as cheaply as a pointer.
  LockTurn(LockTurn&& other) noexcept : entry_(std::exchange(other.entry_, nullptr)) {}
  LockTurn& operator=(LockTurn&& other) noexcept {
    if (this != &other) {
      Leave();
      entry_ = std::exchange(other.entry_, nullptr);
    }
    return *this;
  }
  LockTurn(const LockTurn&) = delete;
  LockTurn& operator=(const LockTurn&) = delete;
  ~LockTurn() { Leave(); }

  // Waits, first-come first-served, for `ctx`'s turn at `word` (parks; the
  // scheduler runs the others meanwhile); `start` is ctx.Now() as the
  // caller began. If the last holder kept the word for this turn
  // (handed_over()), `read` (a READ of the locked object, may be null) is
  // answered from its image when that is of the same object and length
  // (image_taken()), and the handover is counted in ctx's counters.
  // FailedPrecondition when `ctx` has the turn at `word` already (a context
  // holds one lock at a time).
  // The turn goes to *turn (whose own turn, if any, is left first).
  // Inline, with the rest out of line, so that a free queue costs the
  // operation few instructions (tools/cpu-cost.sh).
  static Status Take(LocalLockTable& table, runtime::ContextImpl& ctx, fabric::RemoteAddress word,
                     const fabric::Op* read, std::chrono::nanoseconds start, LockTurn* turn) {
    LocalLockTable::Entry& entry = table.EntryFor(word);
    if (entry.holder.load(std::memory_order_acquire) == &ctx) return TakenTwice(entry);
    entry.lock.Lock(ctx);
    entry.holder.store(&ctx, std::memory_order_release);
    turn->Leave();
    turn->entry_ = &entry;
    entry.turn_ctx = &ctx;
    entry.handed_over = entry.held;
    entry.image_taken = false;
    entry.kept = false;
    entry.queued = ctx.Now() - start;
    if (entry.handed_over) {
      turn->TakeHandedOver(ctx, read);
    } else {
      entry.image_of = 0;  // the new holder's changes would make it stale
    }
    return Status::Ok();
  }

  bool active() const { return entry_ != nullptr; }
  // The turn as a plain pointer, for a holder that keeps it in a trivially
  // copyable record between calls (HOCL's LockGrant): Detach gives it up
  // without leaving; Attached takes it back (the record must not be used
  // for it again once the turn has been left).
  LocalLockTable::Entry* Detach() { return std::exchange(entry_, nullptr); }
  static LockTurn Attached(LocalLockTable::Entry* entry) {
    LockTurn turn;
    turn.entry_ = entry;
    return turn;
  }
  fabric::RemoteAddress word() const { return fabric::RemoteAddress::FromRaw(entry_->word); }
  // This compute node holds the word already (kept for this turn by the
  // last holder), with hold value hold().
  bool handed_over() const { return entry_->handed_over; }
  bool image_taken() const { return entry_->image_taken; }
  uint64_t hold() const { return entry_->hold; }
  // How long Take waited in the queue (0 without a turn).
  std::chrono::nanoseconds queued() const {
    return entry_ != nullptr ? entry_->queued : std::chrono::nanoseconds(0);
  }
  // Contexts queued behind this turn right now.
  size_t waiters() const { return entry_->lock.waiters(); }

  // The word's CAS won with `hold`: this turn holds it.
  void Took(uint64_t hold) {
    entry_->held = true;
    entry_->hold = hold;
    entry_->handovers = 0;
  }
  // The hold ends without a handover: the caller has released the word (or
  // will, on its own), or never will (a radix delete's mark replaced it).
  // Nothing once the turn has been left.
  void Dropped() {
    if (entry_ == nullptr) return;
    entry_->kept = false;
    entry_->held = false;
    entry_->handovers = 0;
  }
  // Frees the word by ReleaseHold from `hold` (default: this turn's hold)
  // and drops the hold, landed or not.
  Status Release(runtime::ContextImpl& ctx, uint64_t hold);
  Status Release(runtime::ContextImpl& ctx) { return Release(ctx, hold()); }
  // Before a write-back: whether to keep the word for the next local waiter
  // (one waits, for this word: every waiter of an entry wants its word; and
  // fewer than `max_handovers` handovers ran in a row).
  // False: the hold is dropped here, and the caller releases the word.
  bool KeepForNext(uint32_t max_handovers) {
    if (entry_->lock.waiters() > 0 && entry_->handovers < max_handovers) {
      ++entry_->handovers;
      entry_->kept = true;
      return true;
    }
    Dropped();
    return false;
  }
  // Ends the turn and lets the next waiter have it. `image`, of a word kept
  // for the next holder, is the object as it stands once the write-back has
  // landed (not given when it failed): the next holder's Take answers its
  // READ from it. A hold neither kept, dropped nor released (the turn ended
  // before using a word handed to it) goes to the next waiter if one
  // waits, and is released (best effort) if none does.
  void Leave(const ObjectImage* image = nullptr) {
    if (entry_ == nullptr) return;
    if (entry_->kept || entry_->held) return LeaveHeld(image);
    entry_->holder.store(nullptr, std::memory_order_release);
    LocalLockTable::Entry& entry = *std::exchange(entry_, nullptr);
    entry.lock.Unlock();
    // Unlock only hands the lock on; the entry lives as long as its table,
    // so it may still be given up after.
    if (entry.bucket != nullptr) LocalLockTable::LetGo(entry);
  }

 private:
  // Gives the entry up and returns FailedPrecondition.
  static Status TakenTwice(LocalLockTable::Entry& entry);
  // Take, when the last holder kept the word for this turn.
  void TakeHandedOver(runtime::ContextImpl& ctx, const fabric::Op* read);
  // Leave when the word is kept for the next holder, or still held.
  void LeaveHeld(const ObjectImage* image);

  LocalLockTable::Entry* entry_ = nullptr;
};

// The one rule for retrying a lock word's CAS that found it held, for every
// index. A context alone waits ctx.Backoff(attempt): exponential, from
// retry_backoff_min to retry_backoff_max (ClientOptions), so a word held long
// (by another compute node's handover chain, or a dead holder) costs the
// memory node few CASes. The head of a local queue with others waiting
// behind it waits at most ctx.Backoff(poll_step), whatever its attempt:
// each microsecond it sleeps past the holder's release is a microsecond for
// every context behind it, while its poll costs the memory node one CAS per
// round trip or so from each compute node waiting (docs/design.md, Locks,
// has the numbers). A poll that carries a READ of the object (HOCL's
// command combination) moves the whole object each time, so such a caller
// passes kPollStepCarryingRead: polling as fast as a bare CAS saturated the
// memory nodes' links on YCSB A at SMART's shape (two memory nodes, 1 KiB
// B+tree leaves: 13.86 -> 12.77 Mops), while 8 us keeps most of the gain.
// Counts lock_retries in ctx's counters.
class LockRetry {
 public:
  // `turn` may be null or not active (no local queue: always alone).
  // Past `deadline` (LockDeadline) it gives up.
  LockRetry(runtime::ContextImpl& ctx, const LockTurn* turn, std::chrono::nanoseconds deadline)
      : ctx_(ctx), turn_(turn), deadline_(deadline) {}
  // After a CAS that found the word held: counts the retry; false once the
  // deadline has passed (the caller returns LockTimeout(...)); else waits
  // by the rule above and returns true.
  bool Wait(uint32_t poll_step = 0);

  // After a CAS on `word` that found it holding `found`, a hold of compute
  // node `holder` (nullopt: the word names none): Wait; and, for a named
  // holder, once this acquisition has waited a lease period since its
  // first WaitHeld (a live holder lets go far sooner), each period it also
  // reads the holder's lease (runtime::Membership::Check), which declares
  // a holder whose lease stood still for the lease timeout dead, fences
  // and recovers it. Once
  // the holder is recovered its hold is void, and this frees the word
  // (FreeVoidHold) before returning. True: CAS again; false: the deadline
  // passed (the caller returns LockTimeout(...)). An error of a recovery
  // this context ran goes up as it is.
  StatusOr<bool> WaitHeld(fabric::RemoteAddress word, uint64_t found,
                          std::optional<uint32_t> holder, uint32_t poll_step = 0);

  // For a change of compute node `owner` in flight (a radix claim or
  // replaced mark), which the owner ends itself: everyone who meets it
  // waits for it to end. Asks `in_flight` (it reads remote memory), and
  // while it says so waits as WaitHeld does, judging the owner's lease the
  // same way, and asks again. True once it ended (look again), or once
  // the owner is recovered and, if `in_flight` still says so, `void_it`
  // has run: it finishes or undoes the dead owner's change from what
  // remote memory shows (the owner is fenced: nothing of it lands any
  // more), by CASes that expect the owner's own values, so that two
  // survivors running it, or one that dies in it and another after, leave
  // the same end. False: the deadline passed.
  StatusOr<bool> WaitOwned(uint32_t owner, FunctionRef<StatusOr<bool>()> in_flight,
                           FunctionRef<Status()> void_it);

  // The polling head's backoff step when each poll carries a READ of the
  // object: at most 2^3 x retry_backoff_min (8 us by default).
  static constexpr uint32_t kPollStepCarryingRead = 3;

 private:
  // Wait without counting the retry.
  bool Pause(uint32_t poll_step);
  // Whether `holder` is known gone (recovered), reading its lease when a
  // period has passed since the first wait and the last read (WaitHeld).
  StatusOr<bool> HolderGone(uint32_t holder);

  runtime::ContextImpl& ctx_;
  const LockTurn* const turn_;
  const std::chrono::nanoseconds deadline_;
  // When the first WaitHeld began (no clock read on an uncontended
  // acquisition); its lease reads start a period later.
  std::optional<std::chrono::nanoseconds> first_wait_;
  uint32_t attempt_ = 0;
  // The holder's lease, read once a period after the first.
  std::optional<runtime::LeaseWatch> watch_;
  std::chrono::nanoseconds next_check_{0};
};

// Frees `word`, found holding `found`, the hold of a dead compute node
// that has been recovered (LockRetry::WaitOn said kHolderGone): a CAS from
// `found` to 0, so that a word someone took meanwhile is left alone.
// Counts dead_holds_freed when it landed. The caller CASes for the word
// again either way.
Status FreeVoidHold(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t found);

// The deadline of a lock acquisition that began at `start` (ctx.Now() as
// the caller began, before its local queue) and may wait `timeout`: one
// deadline for the queue and the CAS retries, so that the contexts queued
// behind a dead holder find it passed when their turn comes instead of
// each waiting `timeout` in turn. An operation that waited for the lock
// before (an RDWC waiter that runs its own body, lock/rdwc.h) counts from
// the start of that wait, which ctx holds (set_lock_wait_origin), in its
// first acquisition; this takes it, so the operation's later locks count
// from their own start.
inline std::chrono::nanoseconds LockDeadline(runtime::ContextImpl& ctx,
                                             std::chrono::nanoseconds start,
                                             std::chrono::nanoseconds timeout) {
  const std::optional<std::chrono::nanoseconds> origin = ctx.TakeLockWaitOrigin();
  return (origin ? std::min(*origin, start) : start) + timeout;
}

// The status of a lock acquisition whose deadline passed with the word
// still held (LockRetry::Wait returned false): DeadlineExceeded marked
// StatusDetail::kLockTimeout, which tells it from any other
// DeadlineExceeded (an op that timed out on the verbs fabric, say) without
// reading the message. `message` names the lock, its holder when known,
// and the timeout. Every lock of every index makes its timeout here.
Status LockTimeout(std::string_view message);
// Whether `status` was made by LockTimeout (WithContext keeps the mark).
inline bool IsLockTimeout(const Status& status) {
  return status.code() == StatusCode::kDeadlineExceeded &&
         status.detail() == StatusDetail::kLockTimeout;
}

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_LOCK_QUEUE_H_
