// Delete (SMART Algorithm 3, which SMART's public code lacks): take the
// leaf's rear lock, mark the leaf deleted (its rear word: the delete's
// linearization point), turn its slot into a tombstone, and undo path
// compression when that leaves the node with at most one live child.
// docs/radix.md argues each step.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "radix/radix_impl.h"

namespace dmidx::radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

Status RadixImpl::DeleteIn(ContextImpl& ctx, std::string_view key) {
  return EachDescent(
      ctx, key, "delete", [&](const Landing& landing, LeafImage& leaf) -> std::optional<Status> {
        if (landing.kind != Landing::kLeaf) return NotInTree();
        const Cursor& cursor = landing.cursor;
        // Scratch first: nothing may fail between taking the lock and
        // marking the leaf (the lock is released only by the mark).
        DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(3));
        DMIDX_ASSIGN_OR_RETURN(uint8_t * holder_image, ctx.arena().Bytes(kNodeBytes, 64));
        lock::LockTurn turn;
        DMIDX_ASSIGN_OR_RETURN(const LeafLock lock, LockLeaf(ctx, cursor, key, &leaf, &turn));
        if (lock == LeafLock::kDeleted || lock == LeafLock::kOtherKey) {
          return NotInTree();
        }
        if (lock == LeafLock::kRestart) return std::nullopt;
        if (cursor.from_cache && leaf.reverse() != cursor.parent) {
          // The leaf is ours to delete, but its slot is no
          // longer where the cached image says: let go and
          // find it afresh.
          DMIDX_RETURN_IF_ERROR(turn.Release(ctx));
          Invalidate(ctx, cursor);
          return std::nullopt;
        }
        return Unlink(ctx, landing, key, words, holder_image, turn);
      });
}

// The locked leaf of `key` at landing.cursor: marked deleted (the lock is
// never released), its slot a tombstone, the node around it merged away
// when it keeps at most one live child.
Status RadixImpl::Unlink(ContextImpl& ctx, const Landing& landing, std::string_view key,
                         uint64_t* words, uint8_t* holder_image, lock::LockTurn& turn) {
  const Cursor& cursor = landing.cursor;
  const RemoteAddress address = cursor.slot.child();
  const RemoteAddress rear = address + shape_.rear_offset();
  // Deleted for good (the lock is never released), then the tombstone and,
  // in the same batch, the node around it (for the merge check).
  words[1] = kDeletedLeaf;
  const Op mark = Op::Write(rear, &words[1], 8);
  const Slot tombstone = Slot::Tombstone(cursor.slot.partial());
  const RemoteAddress holder = cursor.parent;
  const bool in_node = holder != descriptor_;
  const uint8_t holder_type = landing.node.header.type;
  uint8_t* image = nullptr;
  std::array<Op, 3> ops;
  size_t count = 0;
  // A batch with the mark that fails is posted again (with the lock held,
  // the rear word is this node's locked word or already the mark, so the
  // mark is harmless to repeat, and the tombstone is a CAS); one that keeps
  // failing releases the lock (a CAS: the mark, if it landed, stays).
  auto with_mark = [&](uint16_t node, std::span<const Op> batch) -> Status {
    Status status;
    for (int attempt = 0; attempt <= kBatchRetries; ++attempt) {
      status = ctx.Execute(node, batch);
      if (status.ok()) return status;
    }
    (void)turn.Release(ctx);
    return status;
  };
  const bool marked_apart = address.node() != cursor.slot_address.node();
  if (marked_apart) {
    DMIDX_RETURN_IF_ERROR(with_mark(address.node(), {&mark, 1}));
    // The mark landed (the word is never released): waiters of this node
    // find the leaf deleted.
    turn.Dropped();
    turn.Leave();
  } else {
    ops[count++] = mark;
  }
  ops[count++] =
      Op::CompareSwap(cursor.slot_address, &words[2], cursor.slot.word(), tombstone.word());
  if (in_node && holder_type != kDeletedType && holder_type <= kMaxType) {
    image = holder_image;
    ops[count++] = Op::Read(holder, image, NodeReadBytes(holder_type));
  }
  if (marked_apart) {
    // The delete has taken effect; a tombstone that did not land only
    // costs readers a look at the leaf's rear word.
    if (!ctx.Execute(cursor.slot_address.node(), {ops.data(), count}).ok()) return Status::Ok();
  } else {
    DMIDX_RETURN_IF_ERROR(with_mark(cursor.slot_address.node(), {ops.data(), count}));
  }
  turn.Dropped();
  turn.Leave();
  Header holder_now;
  if (image != nullptr) {
    uint64_t word;
    std::memcpy(&word, image + kHeaderOffset, 8);
    holder_now = Header::Unpack(word);
  }
  if (words[2] != cursor.slot.word() || (image != nullptr && holder_now.deleted())) {
    // The leaf moved under a new node (a leaf split) or up (a merge of a
    // node that froze meanwhile): its slot there gets the tombstone.
    // (Left undone, the deleted leaf would only cost readers a look at
    // its rear word.)
    // Each try READs the node holding the slot behind its CAS, as the
    // first did: a merge of that node meanwhile moves the leaf up again.
    // (The delete took effect all the same, whatever fails here.)
    ++ctx.counters().cas_retries;
    for (index::Restarts again; again.NextAfterBackoff(ctx);) {
      runtime::ScratchArena::Scope again_scope(ctx.arena());
      const StatusOr<Landing> found = Descend(ctx, key, false);
      if (!found.ok()) return Status::Ok();
      const Cursor& at = found->cursor;
      if (found->kind != Landing::kLeaf || at.slot.child() != address) return Status::Ok();
      StatusOr<uint64_t*> seen = ctx.arena().Words(2);
      if (!seen.ok()) return Status::Ok();
      const bool at_node = at.parent != descriptor_;
      const Op tries[2] = {Op::CompareSwap(at.slot_address, &(*seen)[0], at.slot.word(),
                                           Slot::Tombstone(at.slot.partial()).word()),
                           Op::Read(at.parent + kHeaderOffset, &(*seen)[1], 8)};
      if (!ctx.Execute(at.slot_address.node(), std::span<const Op>(tries, at_node ? 2 : 1)).ok()) {
        return Status::Ok();
      }
      const bool landed = (*seen)[0] == at.slot.word();
      if (landed && !(at_node && Header::Unpack((*seen)[1]).deleted())) {
        RetireLeaf(ctx, address);  // its one slot holds the tombstone now
        return Status::Ok();
      }
      ++ctx.counters().cas_retries;
    }
    return Status::Ok();
  }
  // The tombstone landed where the leaf was, in the root slot or in a node
  // no merge had frozen (one that had would move the leaf up: the retry
  // above): nothing leads to the leaf any more.
  if (!in_node || image != nullptr) RetireLeaf(ctx, address);
  if (image == nullptr) return Status::Ok();
  const NodeImage node{holder, image, holder_now};
  if (node.header.type != holder_type) return Status::Ok();
  // Our own cache learns the tombstone (a later lookup would otherwise
  // find the deleted leaf through it and look again).
  if (cache_) cache_->Put(key.substr(0, node.header.branch()), holder, image, ctx.epoch());
  if (node.LiveCount() > 1) return Status::Ok();
  // At most one live child left: find the node's parent slot afresh and
  // merge; a merge can leave the parent with one child in turn (a chain
  // node above a leaf that moved up), so go on up the key's path. A
  // failed merge leaves a valid tree; the delete succeeded.
  for (uint32_t level = 0; level < shape_.key_bytes(); ++level) {
    runtime::ScratchArena::Scope merge_scope(ctx.arena());
    StatusOr<Landing> fresh = Descend(ctx, key, false);
    if (!fresh.ok() || fresh->node.bytes == nullptr || fresh->holder.slot_address.is_null() ||
        fresh->node.LiveCount() > 1) {
      break;
    }
    // Reached before its header split's trim: Merge leaves it alone, and
    // the descent just posted the trim (HelpTrim); look again.
    if (fresh->node.header.depth < fresh->holder.depth) continue;
    const StatusOr<bool> merged = Merge(ctx, *fresh);
    if (!merged.ok() || !*merged) break;  // the delete took effect all the same
  }
  return Status::Ok();
}

// Removes landing.node (N) when it has at most one live child, so the
// tree keeps no node with a single child: its parent's slot then points at
// the remaining child (a leaf merge, or a header merge that prepends N's
// header bytes and branch byte to the child's header when they fit) or
// becomes a tombstone (no child left).
//
// 1. Claim N: CAS its reverse pointer from its parent to this context's
//    claim (ClaimBy). No split can move N now, and no other merge takes it.
//    Alone in its batch, so a merge that did not win the claim changes
//    nothing of N, and one whose batch failed can take back its own claim.
// 2. Freeze N, in one batch: CAS its header to type 0 (deleted: readers
//    look again from the parent) and every slot an insert could still take
//    — its tombstones and its first empty slot (within the type, or the
//    first behind it) — to a frozen slot, and READ N. Every CAS must win,
//    and the READ must show no tombstone left open, or all is given back.
//    Only the claim's holder freezes, so every frozen word of N is its own
//    (a failed freeze batch is undone word by word).
// 3. The slots READ then are final: an insert needs a tombstone or the
//    first empty slot, and each is either frozen (its CAS fails and it
//    descends again) or was taken before the merger's CAS (which then
//    failed). A live slot is not frozen: its child moves up by its reverse
//    pointer, which an insert taking a deleted leaf's slot claims first.
// 4. Leaf merge: claim the leaf's reverse pointer (from N), CAS the
//    parent's slot from N to the leaf, then give the claim to the parent.
//    Header merge: the same with the child's header made to start at N's
//    depth before the parent's slot. (A reverse pointer never names a
//    parent whose slot does not lead to it, except a new node's before it
//    is published, which nobody has a route to.)
//
// N is merged only at rest: reached at the depth its header starts at (a
// header split's node not yet trimmed is not taken; HelpTrim finishes it).
namespace {

// Whether `child`, an internal child of a node with header `parent` under
// partial key byte `partial`, starts above the parent's branch byte + 1
// with header bytes that agree with the parent's path there (the leftover
// of a header split whose trim never landed).
bool UntrimmedUnder(const Header& parent, uint8_t partial, const Header& child) {
  const uint32_t depth = parent.branch() + 1;
  if (child.depth < parent.depth || child.depth >= depth || child.branch() < depth) return false;
  for (uint32_t pos = child.depth; pos < depth; ++pos) {
    const uint8_t path = pos < parent.branch() ? parent.partial[pos - parent.depth] : partial;
    if (child.partial[pos - child.depth] != path) return false;
  }
  return true;
}

}  // namespace

StatusOr<bool> RadixImpl::Merge(ContextImpl& ctx, const Landing& landing) {
  const NodeImage& seen = landing.node;
  const Cursor& holder = landing.holder;
  const RemoteAddress node = seen.address;
  const RemoteAddress parent = holder.parent;
  const Header header = seen.header;
  if (header.deleted() || header.depth != holder.depth) return false;
  Header frozen = header;
  frozen.type = kFrozenType | header.type;
  // Every slot an insert could still take: the tombstones, and the first
  // empty slot (within the type, or the first behind it).
  std::vector<std::pair<uint32_t, Slot>> closable;
  for (uint32_t i = 0; i < seen.capacity(); ++i) {
    const Slot slot = seen.slot(i);
    if (slot.tombstone()) closable.emplace_back(i, slot);
    if (slot.empty()) {
      closable.emplace_back(i, slot);
      break;
    }
  }
  if ((closable.empty() || !closable.back().second.empty()) && seen.capacity() < kMaxSlots) {
    closable.emplace_back(seen.capacity(), Slot());  // full: the first slot behind the type
  }
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2 + closable.size()));
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(NodeReadBytes(header.type), 64));
  const uint64_t claim = Claim(ctx);
  // 1. The claim.
  {
    const StatusOr<uint64_t> found = CompareSwap(ctx, node + kReverseOffset, parent.raw(), claim);
    if (!found.ok()) {
      (void)CompareSwapRetrying(ctx, node + kReverseOffset, claim, parent.raw());
      return found.status();
    }
    if (*found != parent.raw()) {
      // Another change holds N (waited for while it does; a dead one's
      // ended for it: AwaitClaim), or the route was stale.
      ++ctx.counters().cas_retries;
      DMIDX_RETURN_IF_ERROR(AwaitClaim(ctx, node, *found, holder, /*node=*/true));
      return false;
    }
  }
  // 2. The freeze.
  std::vector<Op> freeze = {
      Op::CompareSwap(node + kHeaderOffset, &words[1], header.Pack(), frozen.Pack())};
  for (size_t k = 0; k < closable.size(); ++k) {
    const auto& [index, slot] = closable[k];
    freeze.push_back(Op::CompareSwap(node + kSlotsOffset + 8 * index, &words[2 + k], slot.word(),
                                     Slot::Frozen(slot).word()));
  }
  freeze.push_back(Op::Read(node, image, NodeReadBytes(header.type)));
  const Status frozen_status = ctx.Execute(node.node(), freeze);
  // Which freezes won: all of them may have, when the batch failed (the
  // undo then finds out, one CAS each).
  const bool unknown = !frozen_status.ok();
  const bool have_header = unknown || words[1] == header.Pack();
  bool have_slots = !unknown;
  for (size_t k = 0; k < closable.size() && !unknown; ++k) {
    have_slots = have_slots && words[2 + k] == closable[k].second.word();
  }
  // What the merge has taken so far, given back by rollback() when it
  // loses a race or an op fails (each undo tried again while its batch
  // fails; one that never lands leaves N frozen, as a dead merger does).
  bool child_reverse = false;  // the child's reverse pointer holds `claim` (or may)
  std::optional<std::pair<Header, Header>> child_header;  // merged, original
  RemoteAddress target;
  auto rollback = [&]() -> bool {
    ++ctx.counters().cas_retries;
    // An undo that never lands leaves N frozen; N then keeps the claim too,
    // so no other merge takes a node it cannot finish.
    bool undone = true;
    auto undo = [&](RemoteAddress word, uint64_t expected, uint64_t desired) {
      undone = CompareSwapRetrying(ctx, word, expected, desired).ok() && undone;
    };
    if (child_header) {
      // A type switch of the child may have raised the merged header
      // meanwhile: give back the original bytes with the new type.
      auto [merged, original] = *child_header;
      for (int attempt = 0; attempt < index::kMaxRestarts; ++attempt) {
        const StatusOr<uint64_t> found =
            CompareSwapRetrying(ctx, target + kHeaderOffset, merged.Pack(), original.Pack());
        if (!found.ok()) undone = false;
        if (!found.ok() || *found == merged.Pack()) break;
        const Header now = Header::Unpack(*found);
        if (now.deleted() || now.depth != merged.depth || now.count != merged.count) break;
        merged.type = original.type = now.type;
      }
    }
    // The child's claim is this merge's own (a no-op where it did not land).
    if (child_reverse) undo(target + kReverseOffset, claim, node.raw());
    for (size_t k = 0; k < closable.size(); ++k) {
      const auto& [index, slot] = closable[k];
      if (!unknown && words[2 + k] != slot.word()) continue;
      undo(node + kSlotsOffset + 8 * index, Slot::Frozen(slot).word(), slot.word());
    }
    if (have_header) undo(node + kHeaderOffset, frozen.Pack(), header.Pack());
    if (undone) (void)CompareSwapRetrying(ctx, node + kReverseOffset, claim, parent.raw());
    return false;
  };
  if (unknown) {
    rollback();
    return frozen_status;
  }
  // One CAS of the merge; on an error, everything is given back first.
  Status failure;
  auto cas = [&](RemoteAddress word, uint64_t expected,
                 uint64_t desired) -> std::optional<uint64_t> {
    StatusOr<uint64_t> found = CompareSwap(ctx, word, expected, desired);
    if (found.ok()) return *found;
    failure = found.status();
    rollback();
    return std::nullopt;
  };
  if (!have_header || !have_slots) return rollback();
  // A slot that became a tombstone after `seen` was read is still open to
  // an insert: give up rather than freeze it too.
  const NodeImage frozen_node{node, image, header};
  for (uint32_t i = 0; i < frozen_node.capacity(); ++i) {
    if (frozen_node.slot(i).tombstone()) return rollback();
  }
  if (frozen_node.LiveCount() > 1) return rollback();
  Slot child;
  uint32_t child_index = 0;
  for (uint32_t i = 0; i < frozen_node.capacity(); ++i) {
    if (frozen_node.slot(i).live()) {
      child = frozen_node.slot(i);
      child_index = i;
    }
  }
  const Slot parent_slot = holder.slot;
  Slot desired = Slot::Tombstone(parent_slot.partial());  // nothing left under N
  if (child.live()) {
    // The child's reverse pointer is claimed (this merge's claim, as N's),
    // not set to the parent yet: until the parent's slot leads to the
    // child, a route that reaches the child from the parent (a stale
    // cached image of it) must not pass a reverse check there, or a split
    // or update through it takes the child while the parent's slot still
    // leads to N. The claim goes to the parent once the slot does.
    target = child.child();
    child_reverse = true;  // first: a CAS whose batch failed may have landed
    const std::optional<uint64_t> reverse = cas(target + kReverseOffset, node.raw(), claim);
    if (!reverse) return failure;
    if (*reverse != node.raw()) {
      child_reverse = false;
      rollback();
      // Another change holds the child: with N given back, waited for
      // while it does, or ended for a dead one (AwaitClaim), as any mover
      // does; the merge is tried again by the next delete through N.
      const Cursor via{node + kSlotsOffset + 8 * child_index,
                       child,
                       node,
                       header.branch() + 1,
                       false,
                       RemoteAddress()};
      DMIDX_RETURN_IF_ERROR(AwaitClaim(ctx, target, *reverse, via, !child.leaf()));
      return false;
    }
    desired = Slot::ToLeaf(parent_slot.partial(), target);
  }
  if (child.live() && !child.leaf()) {
    // Header merge: N's header bytes, the child's branch byte in N, then
    // the child's own header bytes, if all fit in one header.
    StatusOr<uint64_t*> child_word = ctx.arena().Words(1);
    Status read_status = child_word.status();
    if (read_status.ok()) {
      const Op read = Op::Read(target + kHeaderOffset, *child_word, 8);
      read_status = ctx.Execute(target.node(), {&read, 1});
    }
    if (!read_status.ok()) {
      rollback();
      return read_status;
    }
    Header original = Header::Unpack(**child_word);
    const uint32_t child_depth = header.branch() + 1;
    for (int attempt = 0;; ++attempt) {
      if (attempt < kBatchRetries && !original.deleted() && original.type <= kMaxType &&
          original.depth < child_depth && UntrimmedUnder(header, child.partial(), original)) {
        // The child still holds bytes N matched: its header split's trim
        // never landed, and a descent through N may never come to trim it
        // (a merge's does not read it). Trim it here, holding its reverse
        // pointer as any trim does (given back to N meanwhile), and look
        // again.
        const StatusOr<uint64_t> back =
            CompareSwapRetrying(ctx, target + kReverseOffset, claim, node.raw());
        if (!back.ok() || *back != claim) return rollback();
        child_reverse = false;
        (void)TrimHeader(ctx, target, node, &original, child_depth);
        child_reverse = true;
        const std::optional<uint64_t> again = cas(target + kReverseOffset, node.raw(), claim);
        if (!again) return failure;
        if (*again != node.raw()) {
          child_reverse = false;
          return rollback();
        }
        const Op read = Op::Read(target + kHeaderOffset, *child_word, 8);
        const Status reread = ctx.Execute(target.node(), {&read, 1});
        if (!reread.ok()) {
          rollback();
          return reread;
        }
        original = Header::Unpack(**child_word);
        continue;
      }
      if (attempt >= index::kMaxRestarts || original.deleted() || original.depth != child_depth ||
          header.count + 1u + original.count > kMaxHeaderBytes) {
        return rollback();
      }
      Header merged = original;
      merged.depth = header.depth;
      merged.count = static_cast<uint8_t>(header.count + 1 + original.count);
      merged.partial = {};
      // (Bounds checked above; the loop conditions say so to the compiler.)
      uint32_t at = 0;
      for (uint32_t i = 0; i < header.count && at < kMaxHeaderBytes; ++i) {
        merged.partial[at++] = header.partial[i];
      }
      if (at < kMaxHeaderBytes) merged.partial[at++] = child.partial();
      for (uint32_t i = 0; i < original.count && at < kMaxHeaderBytes; ++i) {
        merged.partial[at++] = original.partial[i];
      }
      child_header.emplace(merged, original);  // first, as child_reverse
      const std::optional<uint64_t> found =
          cas(target + kHeaderOffset, original.Pack(), merged.Pack());
      if (!found) return failure;
      if (*found == original.Pack()) {
        desired = Slot::ToNode(parent_slot.partial(), merged.type, target);
        break;
      }
      child_header.reset();
      // Only a type switch can change it meanwhile (its reverse pointer is
      // ours): keep the new type.
      original = Header::Unpack(*found);
    }
  }
  // 5. The parent's slot. Its CAS failing with an error may have landed:
  // the slot says. Still leading to N (claimed by this merge, so nothing
  // else takes it out of the slot): not landed, give all back; otherwise
  // the merge is done.
  const StatusOr<uint64_t> found =
      CompareSwap(ctx, holder.slot_address, parent_slot.word(), desired.word());
  if (!found.ok()) {
    const StatusOr<uint64_t> now = ReadWordRetrying(ctx, holder.slot_address);
    if (!now.ok()) return found.status();  // unknown: N stays frozen and claimed
    const Slot slot(*now);
    if (slot.live() && !slot.leaf() && slot.child() == node) {
      rollback();
      return found.status();
    }
  } else if (*found != parent_slot.word()) {
    return rollback();
  }
  // 6. Done: the child's reverse pointer names the parent. (Its CAS failing
  // for good leaves the child claimed, as a merger that died there does,
  // and N kept: whoever recovers that claim reads N.)
  if (child.live()) {
    DMIDX_RETURN_IF_ERROR(
        CompareSwapRetrying(ctx, target + kReverseOffset, claim, parent.raw()).status());
  }
  ctx.Retire(node, kNodeBytes, kObjectAlignment);
  return true;
}

// Undoes what the merge took, from the child up to the claim, as its own
// rollback does: the child's merged header (told by its depth, which only
// this merge sets to the node's), the child's claim, the frozen slots
// (each gives back what it held: Slot::Unfrozen), the frozen header (its
// type kept under kFrozenType), and the node's claim, given back to
// `parent`, whose slot still leads to the node. A step whose CAS finds
// anything but the merge's value was not the merge's to undo, or was
// undone already.
Status RadixImpl::UndoMerge(ContextImpl& ctx, RemoteAddress node, uint64_t claim,
                            RemoteAddress parent) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(kNodeBytes, 64));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * child_words, ctx.arena().Words(2));
  const Op read = Op::Read(node, image, kNodeBytes);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(node.node(), {&read, 1}));
  const NodeImage seen{node, image, Header()};
  if (seen.reverse().raw() != claim) return Status::Ok();  // undone, or not this merge's
  // The undo is this context's alone: it takes the claim over first, so
  // that a slower survivor's undo of the same merge never thaws the
  // identical freeze of a later merge. (Dying in it leaves the node
  // frozen under this context's claim: the next survivor undoes it so,
  // and a child claimed by the first merger is given back by whoever
  // meets it, AwaitClaim.)
  const uint64_t own = Claim(ctx);
  DMIDX_ASSIGN_OR_RETURN(const uint64_t taken,
                         CompareSwapRetrying(ctx, node + kReverseOffset, claim, own));
  if (taken != claim) return Status::Ok();
  // From here on the node is held by this context's claim, which nobody
  // ends while this compute node lives: an undo that fails part-way gives
  // the node back to the dead merge's claim, for the next survivor to
  // undo the rest (each step expects the merge's own values).
  const Status undone = UndoTakenMerge(ctx, node, claim, own, parent, image, child_words);
  if (!undone.ok()) (void)CompareSwapRetrying(ctx, node + kReverseOffset, own, claim);
  return undone;
}

Status RadixImpl::UndoTakenMerge(ContextImpl& ctx, RemoteAddress node, uint64_t claim, uint64_t own,
                                 RemoteAddress parent, uint8_t* image, uint64_t* child_words) {
  const NodeImage seen{node, image, Header()};
  uint64_t header_word;
  std::memcpy(&header_word, image + kHeaderOffset, 8);
  const Header header = Header::Unpack(header_word);
  Header given = header;
  if (header.type > kMaxType) given.type = header.type & ~kFrozenType;
  // The live child (at most one, or the freeze did not land whole and the
  // merge never went on to a child).
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot slot = seen.slot(i);
    if (!slot.live()) continue;
    const RemoteAddress child = slot.child();
    DMIDX_RETURN_IF_ERROR(
        ReadWordsRetrying(ctx, child + kReverseOffset, slot.leaf() ? 1 : 2, child_words));
    // The merge's claim only: a child's claim may be its own merge's (or
    // trim's), which a merge of this node lost to. (After an undoer of
    // this merge died holding the node, the child keeps the first
    // merger's claim: AwaitClaim gives it back when a change meets it.)
    const uint64_t child_claim = child_words[0];
    if (child_claim != claim) continue;
    if (!slot.leaf()) {
      const Header merged = Header::Unpack(child_words[1]);
      const uint32_t child_depth = given.branch() + 1;
      // Merged by this merge: N's header bytes, then the child's partial
      // key, then its own.
      bool ours = !merged.deleted() && merged.depth == header.depth &&
                  header.count < kMaxHeaderBytes && merged.count >= header.count + 1 &&
                  merged.partial[header.count] == slot.partial();
      for (uint32_t k = 0; ours && k < header.count; ++k) {
        ours = merged.partial[k] == header.partial[k];
      }
      if (ours) {
        Header original = merged;
        original.depth = static_cast<uint8_t>(child_depth);
        original.count = static_cast<uint8_t>(merged.count - header.count - 1);
        original.partial = {};
        for (uint32_t k = 0; k < original.count; ++k) {
          original.partial[k] = merged.partial[header.count + 1 + k];
        }
        DMIDX_RETURN_IF_ERROR(
            CompareSwapRetrying(ctx, child + kHeaderOffset, merged.Pack(), original.Pack())
                .status());
      }
    }
    DMIDX_RETURN_IF_ERROR(
        CompareSwapRetrying(ctx, child + kReverseOffset, child_claim, node.raw()).status());
  }
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot slot = seen.slot(i);
    if (!slot.frozen()) continue;
    DMIDX_RETURN_IF_ERROR(
        CompareSwapRetrying(ctx, node + kSlotsOffset + 8 * i, slot.word(), slot.Unfrozen().word())
            .status());
  }
  if (header.type > kMaxType) {
    DMIDX_RETURN_IF_ERROR(
        CompareSwapRetrying(ctx, node + kHeaderOffset, header.Pack(), given.Pack()).status());
  }
  ++ctx.counters().dead_holds_freed;
  return CompareSwapRetrying(ctx, node + kReverseOffset, own, parent.raw()).status();
}

}  // namespace dmidx::radix
