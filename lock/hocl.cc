#include "lock/hocl.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "lock/mix.h"

namespace dmidx::lock {

namespace {

using fabric::Op;
using fabric::RemoteAddress;

// InvalidArgument naming the first of `ops` that is not on `word`'s memory
// node (a batch goes to one node).
Status CheckOnWordsNode(std::span<const Op> ops, RemoteAddress word) {
  for (const Op& op : ops) {
    if (op.remote.node() != word.node()) {
      return Status::InvalidArgument("write-back " + op.remote.ToString() +
                                     " is not on the lock word's memory node");
    }
  }
  return Status::Ok();
}

// InvalidArgument unless `linked` fits `write_back` (LinkedObjects): its
// leading ops and the guarded op after them are WRITEs, and the link word
// lies within the guarded one.
Status CheckLinked(std::span<const Op> write_back, const LinkedObjects& linked) {
  if (linked.ops == 0) return Status::Ok();
  if (linked.ops >= write_back.size()) {
    return Status::InvalidArgument(
        std::to_string(linked.ops) + " linked objects in a write-back of " +
        std::to_string(write_back.size()) + " ops (the WRITE that links them must follow)");
  }
  for (const Op& op : write_back.first(linked.ops + 1)) {
    if (op.code != fabric::OpCode::kWrite) {
      return Status::InvalidArgument("linked write-back op " + op.remote.ToString() +
                                     " is not a WRITE");
    }
  }
  const Op& guarded = write_back[linked.ops];
  const uint64_t at = linked.link.offset() - guarded.remote.offset();
  if (linked.link.node() != guarded.remote.node() ||
      linked.link.region() != guarded.remote.region() ||
      linked.link.offset() < guarded.remote.offset() || at + 8 > guarded.length ||
      linked.link.offset() % 8 != 0) {
    return Status::InvalidArgument("link word " + linked.link.ToString() +
                                   " is not an aligned word of the WRITE of " +
                                   guarded.remote.ToString() + " that follows the linked objects");
  }
  return Status::Ok();
}

}  // namespace

RemoteAddress GlobalLockTable::WordFor(RemoteAddress object) const {
  const uint16_t node = object.node();
  return bases[node] + 8 * (Mix(object.raw()) % words_per_node);
}

HierarchicalLock::HierarchicalLock(GlobalLockTable table, const HoclOptions& options,
                                   uint64_t owner_tag, std::shared_ptr<LocalLockTable> local,
                                   std::shared_ptr<RedoLog> redo)
    : table_(std::move(table)),
      options_(options),
      owner_tag_(owner_tag & 0xffff),
      redo_(std::move(redo)),
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

HierarchicalLock::~HierarchicalLock() = default;

StatusOr<LockGrant> HierarchicalLock::Acquire(runtime::ContextImpl& ctx, RemoteAddress object,
                                              const Op* combined_read) {
  const std::chrono::nanoseconds start = ctx.Now();
  // One deadline for the whole Acquire, the local queue's wait included,
  // so N local waiters behind a dead holder do not take N timeouts.
  const std::chrono::nanoseconds deadline = LockDeadline(ctx, start, options_.acquire_timeout);
  LockGrant grant;
  grant.word = table_.WordFor(object);
  LockTurn turn;  // kept in the grant (Detach) until Release
  if (options_.local_table) {
    DMIDX_RETURN_IF_ERROR(LockTurn::Take(*local_, ctx, grant.word, combined_read, start, &turn));
    if (turn.handed_over()) {
      grant.handed_over = true;
      grant.tag = turn.hold();
      grant.read_done = turn.image_taken();
    }
  }
  if (!grant.handed_over) {
    LockRetry retry(ctx, &turn, deadline);
    Status status = AcquireGlobal(ctx, &grant, combined_read, retry);
    if (!status.ok()) {
      // The longest waits end here. The turn is let go on return.
      ctx.RecordLockWait(ctx.Now() - start, turn.queued());
      return status;
    }
    if (options_.local_table) turn.Took(grant.tag);
  }
  ctx.RecordLockWait(ctx.Now() - start, turn.queued());
  grant.turn = turn.Detach();
  return grant;
}

Status HierarchicalLock::AcquireGlobal(runtime::ContextImpl& ctx, LockGrant* grant,
                                       const Op* combined_read, LockRetry& retry) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old_value, ctx.arena().Words(1));
  const bool combine = options_.combine_commands && combined_read &&
                       combined_read->remote.node() == grant->word.node();
  // One tag for every attempt: at most one of them takes the word (the
  // first that finds it free returns), and an undone attempt ends the call.
  // The tag carries the acquisition's low 32 bits: this acquisition's
  // alone while a redo record may name it (RedoLog::NextAcquisition).
  static_assert(32 >= RedoLog::kHoldAcquisitionBits);
  uint64_t acquisition;
  if (redo_ != nullptr) {
    DMIDX_ASSIGN_OR_RETURN(acquisition, redo_->NextAcquisition(ctx));
  } else {
    acquisition = ctx.NextLockAcquisition();
  }
  const uint64_t tag = TagOf(ctx, acquisition);
  for (;;) {
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
    const uint64_t found = *old_value;
    const uint64_t holder_tag = found >> 48;  // the holder's node id + 1
    DMIDX_ASSIGN_OR_RETURN(const bool again,
                           retry.WaitHeld(grant->word, found, HolderOf(found),
                                          combine ? LockRetry::kPollStepCarryingRead : 0));
    if (!again) {
      const std::string holder = holder_tag == 0
                                     ? "a holder without an owner tag"
                                     : "compute node " + std::to_string(holder_tag - 1) +
                                           " (owner tag " + std::to_string(holder_tag) + ")";
      return LockTimeout("lock word " + grant->word.ToString() + " held by " + holder +
                         " for longer than " + std::to_string(options_.acquire_timeout.count()) +
                         " ms (did its holder die?)");
    }
  }
}

Status HierarchicalLock::Release(runtime::ContextImpl& ctx, LockGrant& grant,
                                 std::span<const Op> write_back, const ObjectImage* image,
                                 LinkedObjects linked, bool* unlinked) {
  LockTurn turn = LockTurn::Attached(std::exchange(grant.turn, nullptr));
  Status status;
  // The batch: the write-back with its record, then (below) the release
  // WRITE. Storage only: the ops are copied in (Op is trivially copyable),
  // not first default-constructed all of them.
  union OpStorage {
    OpStorage() {}
    Op ops[kMaxBatchOps];
  } storage;
  Op* const batch = storage.ops;
  size_t batch_size = write_back.size();
  if (write_back.size() > kMaxWriteBackOps) {
    status = Status::InvalidArgument("write-back of " + std::to_string(write_back.size()) +
                                     " ops; at most " + std::to_string(kMaxWriteBackOps));
  } else {
    status = CheckOnWordsNode(write_back, grant.word);
    if (status.ok()) status = CheckLinked(write_back, linked);
  }
  // With the local table, the global word is kept for the next local
  // waiter when one waits and the handover budget allows: no remote op.
  // Its tag goes on, so then the record is cleared in the batch; so it is
  // when the tag is not this context's own acquisition's but a handover
  // chain's, whose first holder's wrap (RedoLog::NextAcquisition) clears
  // only its own slots (lock/redo_log.h, Wrap).
  const bool keep = options_.local_table && turn.KeepForNext(options_.max_handovers);
  const bool clear = keep || grant.handed_over;
  // The record's head lives in the arena until the batch has ended.
  runtime::ScratchArena::Scope scope(ctx.arena());
  bool recorded = false;
  if (status.ok()) {
    StatusOr<uint32_t> wrapped =
        WithRecord(ctx, grant, write_back, linked.ops, batch, clear, &recorded);
    status = wrapped.status();
    if (wrapped.ok()) batch_size = *wrapped;
  }
  // Whether the write-back is in the batch: only then can a landed
  // release vouch for it (DecideLink).
  const bool write_back_posted = status.ok();
  if (!status.ok()) [[unlikely]] {
    if (unlinked != nullptr) *unlinked = true;  // nothing of it is posted
    batch_size = 0;                             // post nothing of it, but still release
    linked = {};
  }
  // Before a release by CAS, a cleared record is cleared again.
  const Op* const cleared = recorded && clear ? batch + batch_size - 1 : nullptr;
  bool released = false;  // the release surely landed
  Status posted;          // the write-back's (and a release's of its own)
  const bool release_in_batch = !keep && (options_.combine_commands || batch_size == 0);
  if (release_in_batch) {
    // WRITEs of one queue pair land in post order, so the release lands
    // after the write-back WRITEs before it; a READ or atomic before it
    // could be overtaken, so then it is fenced (a record's ops are WRITEs:
    // only the write-back's own tell).
    const bool fence = batch_size > 0 &&
                       std::any_of(write_back.begin(), write_back.end(),
                                   [](const Op& op) { return op.code != fabric::OpCode::kWrite; });
    std::construct_at(batch + batch_size++, ReleaseOp(ctx, grant.word, fence));
    posted = PostHeld(ctx, grant, std::span<const Op>(batch, batch_size), linked, &released);
  } else {
    if (batch_size > 0)
      posted = PostHeld(ctx, grant, std::span<const Op>(batch, batch_size), linked, nullptr);
    if (!keep) {
      // Without combination the write-back completes before the release.
      const Op release = ReleaseOp(ctx, grant.word, false);
      const Status post = PostHeld(ctx, grant, {&release, 1}, {}, &released);
      if (posted.ok()) posted = post;
    }
  }
  if (status.ok()) status = posted;
  if (!status.ok() && !released && unlinked != nullptr && write_back_posted) [[unlikely]] {
    released = DecideLink(ctx, grant, std::span<const Op>(batch, batch_size), linked,
                          release_in_batch, unlinked);
    if (released) status = Status::Ok();
  }
  // A write-back that never surely landed is not handed over with the
  // word: the word is released, by CAS from this hold's own tag (the
  // header says why), posted once and then up to release_retries times
  // more while it fails.
  if (!(keep && posted.ok()) && !released) {
    turn.Dropped();
    const int posts = 1 + static_cast<int>(options_.release_retries);
    // A batch with a record whose release fails too leaves the record to
    // a recovery: the slot keeps it (RedoLog::KeepRecord).
    if (recorded) {
      (void)redo_->ReleaseHold(ctx, grant.word, grant.tag, posts, cleared);
    } else {
      (void)ReleaseHold(ctx, grant.word, grant.tag, posts, cleared);
    }
  }
  // Once the write-back has completed, the image is the object's bytes.
  turn.Leave(status.ok() ? image : nullptr);
  return status;
}

bool HierarchicalLock::DecideLink(runtime::ContextImpl& ctx, const LockGrant& grant,
                                  std::span<const Op> batch, const LinkedObjects& linked,
                                  bool with_release, bool* unlinked) const {
  // Before the word is let go, while this hold may still have it: once
  // another holder has the word, the link word may move on (a merge can
  // bring it back to its old value), and it would tell nothing. One
  // batch, [lock word, link word], into words of the arena (never the
  // discard word: PostAgainHeld says why).
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint64_t*> seen = ctx.arena().Words(2);
  if (!seen.ok()) return false;  // undecided: keep the objects
  const Op reads[2] = {Op::Read(grant.word, &(*seen)[0], 8), Op::Read(linked.link, &(*seen)[1], 8)};
  if (!ctx.Execute(grant.word.node(), reads).ok()) return false;  // undecided: keep them
  if ((*seen)[0] != grant.tag) {
    // The word is no longer this hold's: with the release in the batch
    // (combined), it landed, and with it the whole batch before it
    // (WRITEs of one queue pair land in post order). Without, the release
    // went on its own whatever the batch did: undecided.
    return with_release;
  }
  // Still held by this hold: nobody else changed the linking object, so
  // a link word without the guarded WRITE's value means that WRITE never
  // placed it.
  *unlinked = (*seen)[1] != LinkValue(batch, linked);
  return false;
}

Status HierarchicalLock::WriteBack(runtime::ContextImpl& ctx, const LockGrant& grant,
                                   std::span<const Op> ops) const {
  DMIDX_RETURN_IF_ERROR(CheckOnWordsNode(ops, grant.word));
  if (ops.size() > kMaxWriteBackOps) {
    return Status::InvalidArgument("write-back of " + std::to_string(ops.size()) +
                                   " ops; at most " + std::to_string(kMaxWriteBackOps));
  }
  runtime::ScratchArena::Scope scope(ctx.arena());
  union OpStorage {
    OpStorage() {}
    Op ops[kMaxBatchOps];
  } storage;
  bool recorded = false;
  DMIDX_ASSIGN_OR_RETURN(const uint32_t size,
                         WithRecord(ctx, grant, ops, 0, storage.ops, /*clear=*/true, &recorded));
  Status posted = PostHeld(ctx, grant, std::span<const Op>(storage.ops, size), {}, nullptr);
  // The word stays held (the caller keeps it or releases it), and the
  // record may be whole: the slot keeps it until the word is freed
  // (RedoLog::KeepRecord), whatever the caller does next.
  if (!posted.ok() && recorded) redo_->KeepRecord(ctx, grant.word, grant.tag);
  return posted;
}

void HierarchicalLock::KeepHeld(LockGrant& grant) {
  LockTurn turn = LockTurn::Attached(std::exchange(grant.turn, nullptr));
  // Not kept for the next local holder: the next one CASes the word and
  // finds it held, like any other compute node's context.
  turn.Dropped();
}  // the turn leaves here

}  // namespace dmidx::lock
