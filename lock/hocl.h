// HOCL: the hierarchical lock of the B+tree (Sherman §4.3).
//
// Global level: one 8-byte lock word per hashed object address, on the
// object's memory node (so the release can share a batch with the object's
// write-back): 0 is free, otherwise the tag of the hold, unique per global
// acquisition (the compute node's owner tag in the top 16 bits, then the
// acquiring context's number and its acquisition count; see TagOf in
// hocl.cc for why two live holds never share one). Taken with CAS,
// released with a WRITE of 0 at the end of the write-back batch (a batch
// that fails is posted again; if none surely landed, the word is released
// with a CAS from the hold's tag to 0; see Release). A CAS batch that
// fails is undone with a CAS from its own tag to 0.
//
// Local level (optional): lock/lock_queue.h's queue, in a compute-node-wide
// table (LocalLockTable, one per client, shared by its trees) with one entry
// per global lock word in use. Contexts of this CN queue there in FIFO order
// instead of all hammering the word with CAS; a holder that leaves with
// waiters queued hands the global lock to the oldest one without any remote
// op, at most max_handovers times in a row, then releases it so other CNs
// get a turn. CAS retries follow LockRetry's rule.
//
// Use:
//   DMIDX_ASSIGN_OR_RETURN(LockGrant grant, lock.Acquire(ctx, node_address, &read));
//   ... (grant.read_done says whether `read` already ran under the lock)
//   return lock.Release(ctx, grant, {write-back ops});  // one ordered batch
//
// Every successful Acquire must be followed by exactly one Release, also on
// error paths. A context holds at most one HOCL lock at a time (the B-link
// tree never needs two: it lets go of a child before locking its parent).
// With the local table, asking for a word it already holds is
// FailedPrecondition; without it, the CAS finds the word held and the call
// ends in DeadlineExceeded after acquire_timeout.
#ifndef DMIDX_LOCK_HOCL_H_
#define DMIDX_LOCK_HOCL_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "lib/fabric/op.h"
#include "lib/runtime/context.h"
#include "lock/lock_queue.h"
#include "lock/redo_log.h"

namespace dmidx::lock {

// Where the global lock words are: words_per_node words from bases[node] on
// every memory node (in its lock region for on-chip locks, or in the pool).
struct GlobalLockTable {
  std::vector<fabric::RemoteAddress> bases;  // indexed by memory node id
  uint64_t words_per_node = 0;

  // The lock word of `object`: on the object's node, hashed by address.
  fabric::RemoteAddress WordFor(fabric::RemoteAddress object) const;
};

struct HoclOptions {
  // The CN-wide local table with FIFO queues and handover. Off: every
  // context CASes the global word itself (the FG+ baseline). Default on.
  bool local_table = true;
  // Consecutive local handovers before the global lock is released anyway,
  // so other compute nodes are not starved. Default 4, as in Sherman.
  uint32_t max_handovers = 4;
  // Command combination: a READ given to Acquire rides in the lock CAS's
  // batch, and Release posts the write-back and the release WRITE as one
  // batch. Off: each waits for the one before (one round trip each).
  // Default on.
  bool combine_commands = true;
  // Acquisition attempts give up with DeadlineExceeded after this long
  // (a holder that died never releases). Default 10 s.
  std::chrono::milliseconds acquire_timeout{10000};
  // Times a write-back batch (or release) that failed is posted again at
  // most, and READs of the word before those posts that fail are tried
  // again at most (lock::PostAgainHeld); if no post surely landed, the
  // release by CAS is then posted up to 1 + release_retries times, before
  // Release returns the error (see Release). 0: a failed batch is not
  // posted again, and the CAS is posted once. Default
  // kRetriesAfterFailure (3).
  uint32_t release_retries = kRetriesAfterFailure;
};

struct LockGrant {
  fabric::RemoteAddress word;
  bool handed_over = false;  // came from a local holder
  // The combined READ ran under this lock, or its bytes came with a local
  // handover (the previous holder's image of the object: no remote op).
  bool read_done = false;
  // What the global word holds while this CN has it: the tag of the global
  // acquisition that took it (the same through local handovers: any
  // holder of a chain retries a release with the tag its first one
  // wrote). Unique per acquisition, not per context: the context whose CAS
  // took the word may ask for it again, through a handle without the local
  // table, while a handover chain still keeps this hold, and that
  // request's undo (or release retry) must not free it.
  uint64_t tag = 0;
  // This context's turn in the local table (LockTurn::Detach; null
  // without local_table).
  LocalLockTable::Entry* turn = nullptr;
};

class HierarchicalLock {
 public:
  // `owner_tag` (1..65535) marks this compute node's holds in lock words:
  // its compute-node id + 1 (0 is a free word), so that a word held too
  // long can name the node; the low 48 bits of a lock word name the
  // acquisition (the context's number and count). Contexts passed to this
  // lock must be of that compute node: tags are unique only among one
  // node's contexts. With options.local_table, `local` is the compute
  // node's shared table (null: a table of this lock's own).
  // InvalidArgument unless `owner_tag` is in 1..65535; callers check it
  // before constructing. With `redo` (the compute node's RedoLog::For),
  // every write-back carries its redo record (Release), so that a survivor
  // finishes one this compute node leaves half-placed when it dies; null
  // (tests of the lock alone): none.
  static Status ValidateOwnerTag(uint64_t owner_tag);

  HierarchicalLock(GlobalLockTable table, const HoclOptions& options, uint64_t owner_tag,
                   std::shared_ptr<LocalLockTable> local = nullptr,
                   std::shared_ptr<RedoLog> redo = nullptr);
  ~HierarchicalLock();
  HierarchicalLock(const HierarchicalLock&) = delete;
  HierarchicalLock& operator=(const HierarchicalLock&) = delete;

  // Returns once `ctx` holds the lock of `object`. With `combined_read`, a
  // READ of the object rides in the same batch as the lock CAS (command
  // combination); the grant says whether it ran under the lock (if not,
  // the caller reads after). DeadlineExceeded after acquire_timeout.
  // Counts CAS failures and handovers in ctx.counters() and records its
  // wait with ctx.RecordLockWait(). A CAS that finds the word held is
  // retried after ctx.Backoff(attempt).
  StatusOr<LockGrant> Acquire(runtime::ContextImpl& ctx, fabric::RemoteAddress object,
                              const fabric::Op* combined_read = nullptr);

  // Posts `write_back` (ops on grant.word's node) and, at its end in the
  // same ordered batch, the release WRITE when the global lock is to be
  // released (no local waiter to hand it to, or the handover budget is
  // spent); then hands the lock to the next local waiter or frees it.
  // With a RedoLog, the batch is [linked WRITEs][record][write_back's
  // other ops][clear][release] (lock/redo_log.h; the record's hold value
  // is grant.tag), and its error (no slot, no memory) fails the Release
  // as an InvalidArgument does: nothing posted, the lock released.
  // Returns Ok only when the write-back surely landed in full, its error
  // otherwise. At most kMaxWriteBackOps ops (InvalidArgument otherwise,
  // and the lock is still released); `write_back` is copied, not kept.
  //
  // A batch that fails may have landed in full, in part or not at all (its
  // last WRITE that landed perhaps torn), so it is posted again, the same
  // bytes, up to options.release_retries times (counted in
  // ctx.counters().reposted_batches). That is harmless while this hold
  // still has the word: nobody else changes the object meanwhile. Hence
  // what `write_back` may hold:
  //   - every op does the same when posted twice: WRITEs and READs do, an
  //     atomic would apply twice;
  //   - every op is on the object this hold guards (under grant.word),
  //     except `linked.ops` leading WRITEs of objects nobody can reach
  //     until the guarded WRITE after them lands (LinkedObjects). Any
  //     other object may be locked and changed by someone else between
  //     the failed post and the next, which would overwrite that change.
  // A batch without the release WRITE leaves the word held for sure. After
  // a failed batch with it, the word is read first: if it no longer holds
  // grant.tag, that release landed, and so did every write-back op before
  // it (WRITEs of one queue pair are placed in post order, and the release
  // is fenced behind any other op), so nothing is posted again and Release
  // returns Ok; another holder may have the word and be changing the
  // object by then.
  //
  // With `linked`, the word at linked.link is read too, in the same batch
  // (the one READ when the batch has no release), before each post again.
  // Holding the value the guarded WRITE puts there, that WRITE placed it,
  // so the linked objects' WRITEs before it were placed whole, and they
  // may be reachable now (and locked and changed under their own words):
  // they are left out of every later post. Not holding it, the linked
  // objects are still unreachable, and posting them again is harmless. So
  // this costs nothing unless a batch fails. (Simpler designs fail: never
  // posting them again could publish the link to an object that never
  // landed; a hold of each linked object's word too would cost the happy
  // path a CAS each.) InvalidArgument, nothing posted and the lock still
  // released, for a `linked` that does not fit the write-back.
  //
  // `unlinked` (optional; with `linked`) is set when Release returns an
  // error: true only if the link surely did not land (nothing can reach
  // the linked objects: the caller may free them), false when it may have
  // (keep them: a leak, never a free of something linked).
  // With it, a write-back that did not surely land is decided
  // before the word is let go: the lock word and the link word are read in
  // one batch. The word no longer this hold's (with the release in the
  // batch): the release landed and the whole batch before it, so Release
  // returns Ok. The word still held and the link word without the guarded
  // WRITE's value: the link never landed, *unlinked is set and the caller
  // may free the linked objects. Otherwise (the link landed, the READ
  // failed, or the release went apart from the write-back) they are kept.
  // After the word is let go that READ could tell nothing: another holder
  // may move the link word on and back (a B+tree merge).
  //
  // Without command combination the write-back is posted (and posted
  // again) alone, then the release WRITE, on its own, whether the
  // write-back landed or not.
  //
  // If no post surely landed, the lock is not handed to a local waiter (it
  // would take a possibly torn object for whole, with no image): the word
  // is released (unless a release WRITE surely landed already) by a CAS
  // from grant.tag to 0, posted up to 1 + options.release_retries times,
  // and the error returned. The object is
  // left as the failed posts left it; the B+tree's checksums tell a torn
  // node (under the next holder's lock: DataLoss). The release is a CAS,
  // never a WRITE of 0: a failed batch's release WRITE may have landed, and
  // another holder may have taken the word since (another compute node, or
  // a context of this one through a handle without the local table), which
  // a blind WRITE of 0 would free under it; its tag is another
  // acquisition's, so the CAS leaves it. Over a connection that is gone (a
  // verbs queue pair in the error state after the failure) the CAS fails
  // too: the word stays held with this CN's tag, and every later acquirer
  // of it (on this compute node too) gets DeadlineExceeded after
  // acquire_timeout naming this compute node's tag. Freeing it then needs
  // that node back (or an operator); automatic recovery of a dead holder's
  // words belongs to the crash-tolerance work. With a RedoLog, the batch's
  // record stays whole then, for that recovery: ctx's slot keeps it, and
  // ctx's later recorded changes on that memory node fail with
  // Unavailable until the word is freed (RedoLog::KeepRecord).
  //
  // `image`, if given, is the object as it stands once `write_back` has
  // landed (the caller's copy, verified under this lock, with its changes).
  // When the lock is handed to a local waiter, the image goes with it: if
  // that waiter's Acquire has a combined READ of exactly that object and
  // length, the bytes are copied into the READ's buffer and read_done is
  // set, saving it a round trip. Any later change to the object is made
  // under the lock, so the image stays true until the next holder releases.
  Status Release(runtime::ContextImpl& ctx, LockGrant& grant,
                 std::span<const fabric::Op> write_back, const ObjectImage* image = nullptr,
                 LinkedObjects linked = {}, bool* unlinked = nullptr);
  // For call sites that list the ops in braces: Release(ctx, grant, {a, b}).
  Status Release(runtime::ContextImpl& ctx, LockGrant& grant,
                 std::initializer_list<fabric::Op> write_back, const ObjectImage* image = nullptr,
                 LinkedObjects linked = {}, bool* unlinked = nullptr) {
    return Release(ctx, grant, std::span<const fabric::Op>(write_back.begin(), write_back.size()),
                   image, linked, unlinked);
  }
  static constexpr size_t kMaxWriteBackOps = 15;
  static_assert(kMaxWriteBackOps <= RedoLog::kMaxRecordedWrites);

  // Posts `ops` (on grant.word's node) under `grant`'s hold without
  // releasing it, again while the batch fails, up to
  // options.release_retries times: Ok once a post of it landed in full,
  // the last failure otherwise. For a holder that must know its write
  // landed before it lets go (then Release with no write-back, or
  // KeepHeld). Every op must be on the object the hold guards (Release
  // says why). With a RedoLog, the ops carry their record as Release's
  // do; when every post fails, the record may be whole under a word still
  // held, and ctx's slot keeps it (RedoLog::KeepRecord) whatever the
  // caller does next. InvalidArgument for an op on another node, or more
  // than kMaxWriteBackOps.
  Status WriteBack(runtime::ContextImpl& ctx, const LockGrant& grant,
                   std::span<const fabric::Op> ops) const;

  // With a RedoLog, makes ctx's record slot on grant.word's memory node
  // large enough for the record of a write-back of `writes` WRITEs of
  // `bytes` bytes in all (RedoLog::Reserve), so that such a Release or
  // WriteBack cannot fail for want of memory for it; Ok without one.
  Status ReserveRecord(runtime::ContextImpl& ctx, const LockGrant& grant, uint32_t bytes,
                       uint32_t writes = 1) const {
    return redo_ == nullptr ? Status::Ok() : redo_->Reserve(ctx, grant.word.node(), bytes, writes);
  }

  // Ends `grant`'s hold without releasing the global word and without
  // handing it to a local waiter, for a holder that could not write the
  // object back and must not let anyone change what it left there: the word
  // stays held with grant.tag, as after a release whose retries all failed,
  // and every later acquirer of it (on this compute node too) gets
  // DeadlineExceeded after acquire_timeout naming this compute node's tag.
  // In place of Release.
  void KeepHeld(LockGrant& grant);

  const GlobalLockTable& table() const { return table_; }

  // The tag `ctx`'s next global acquisition through this lock will write
  // (for tests that play a CAS which landed although its batch failed).
  uint64_t NextTagForTesting(const runtime::ContextImpl& ctx) const;

 private:
  // Gives up with DeadlineExceeded once `retry`'s deadline has passed
  // (after at least one CAS).
  Status AcquireGlobal(runtime::ContextImpl& ctx, LockGrant* grant, const fabric::Op* combined_read,
                       LockRetry& retry);
  // The tag of `ctx`'s global acquisition number `acquisition`.
  uint64_t TagOf(const runtime::ContextImpl& ctx, uint64_t acquisition) const;

 public:
  // The compute node a lock word's tag names as its holder (bits 48-63:
  // its id + 1); nullopt for a free word or one without an owner tag.
  static std::optional<uint32_t> HolderOf(uint64_t word) {
    const uint64_t holder_tag = word >> 48;
    return holder_tag == 0 ? std::nullopt : std::optional<uint32_t>(uint32_t(holder_tag - 1));
  }

 private:
  fabric::Op ReleaseOp(runtime::ContextImpl& ctx, fabric::RemoteAddress word, bool fence) const;
  // After `batch` (with the release when `with_release`) did not surely
  // land under `grant`, with `unlinked` given: READs the lock word and
  // the link word in one batch. True when the word is no longer this
  // hold's and the release was in the batch (the whole batch landed);
  // otherwise sets *unlinked when the word is still this hold's and
  // the link word lacks the guarded WRITE's value. A READ that fails
  // decides nothing (false, *unlinked left false).
  bool DecideLink(runtime::ContextImpl& ctx, const LockGrant& grant,
                  std::span<const fabric::Op> batch, const LinkedObjects& linked, bool with_release,
                  bool* unlinked) const;
  // Posts `batch` under `grant`'s hold, and again while it fails (Release
  // says how; `linked` as Release's, checked). With `released`, the batch
  // ends with the release WRITE, and *released says whether it surely
  // landed. Inline, with the rest out of line (PostAgainHeld), so that a batch
  // that lands costs Release no more than its post (tools/cpu-cost.sh).
  Status PostHeld(runtime::ContextImpl& ctx, const LockGrant& grant,
                  std::span<const fabric::Op> batch, const LinkedObjects& linked,
                  bool* released) const {
    Status posted = ctx.Execute(grant.word.node(), batch);
    if (!posted.ok()) [[unlikely]] {
      posted = PostAgainHeld(ctx, grant.word, grant.tag, batch, linked, released != nullptr,
                             options_.release_retries, std::move(posted));
    }
    if (released != nullptr) *released = posted.ok();
    return posted;
  }

  // Release's batch at most: a write-back, its record and clear, the
  // release.
  static constexpr size_t kMaxBatchOps = kMaxWriteBackOps + RedoLog::kMaxAddedOps + 1;

  // `write_back` with its record (RedoLog::Wrap, room for the release
  // after it) into `batch`; its op count, and *recorded says whether the
  // last op is the record's clear. Without a RedoLog, `write_back` as it is.
  // Inline: a write-back's record costs Release little (tools/cpu-cost.sh).
  StatusOr<uint32_t> WithRecord(runtime::ContextImpl& ctx, const LockGrant& grant,
                                std::span<const fabric::Op> write_back, uint32_t linked,
                                fabric::Op* batch, bool clear, bool* recorded) const {
    const auto size = static_cast<uint32_t>(write_back.size());
    *recorded = false;
    if (redo_ == nullptr || size == 0) {
      for (uint32_t i = 0; i < size; ++i)
        batch[i] = write_back[i];
      return size;
    }
    // Room for the release after it (Wrap keeps within a batch the fabric
    // takes).
    StatusOr<uint32_t> wrapped =
        redo_->Wrap(ctx, grant.word, grant.tag, write_back, linked, kMaxBatchOps - 1, batch, clear);
    if (wrapped.ok()) *recorded = *wrapped > size;
    return wrapped;
  }

  const GlobalLockTable table_;
  const HoclOptions options_;
  const uint64_t owner_tag_;
  const std::shared_ptr<RedoLog> redo_;  // null: no records

  std::shared_ptr<LocalLockTable> local_;  // null without options_.local_table
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_HOCL_H_
