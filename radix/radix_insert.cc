// Inserting a key that is not in the tree, all lock-free (SMART §4.1.2):
// a normal insert CASes the first empty slot; a leaf split and a header
// split build the new nodes first, take the moved child's reverse pointer
// with a CAS (which keeps two changes from moving one child at once) and
// then CAS the parent's slot; a type switch CASes slots behind the node's
// type and then raises the type in the header and in the parent's slot.
// docs/radix.md argues each step.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "radix/radix_impl.h"

namespace dmidx::radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// The slot word's partial key byte for a child at `depth` (the parent
// branched on key byte depth - 1; the root slot has none).
uint8_t PartialFor(std::string_view key, uint32_t depth) {
  return depth == 0 ? 0 : static_cast<uint8_t>(key[depth - 1]);
}

}  // namespace

// Internal nodes go round-robin over the memory nodes (the tree spreads
// over them); a leaf goes next to the node holding its slot, so that its
// WRITE and the slot's CAS share a batch.
StatusOr<RemoteAddress> RadixImpl::AllocateNode(ContextImpl& ctx) {
  return ctx.allocator().Allocate(ctx, kNodeBytes, kObjectAlignment);
}

StatusOr<Op> RadixImpl::NewLeaf(ContextImpl& ctx, std::string_view key, uint64_t value,
                                RemoteAddress parent, uint16_t near, uint8_t* buffer) {
  StatusOr<RemoteAddress> address =
      ctx.allocator().Allocate(ctx, shape_.bytes(), kObjectAlignment, near);
  if (!address.ok() && address.status().IsResourceExhausted()) {
    address = ctx.allocator().Allocate(ctx, shape_.bytes(), kObjectAlignment);
  }
  DMIDX_RETURN_IF_ERROR(address.status());
  InitLeafImage(shape_, buffer, parent, key, value);
  return Op::Write(*address, buffer, shape_.bytes());
}

// The leaf goes into an empty root slot, a tombstone, or the live slot of
// a deleted leaf (its delete's tombstone CAS has not landed, or never
// will): WRITE the leaf and CAS the slot, one batch when the leaf is on
// the slot's memory node.
//
// A merge freezes a node's tombstones and its first empty slot, so an
// insert into those fails once the merge has begun. It does not freeze a
// live slot: it moves the child up, taking the child's reverse pointer
// first. So the slot of a deleted leaf is taken the way an out-of-place
// update takes a leaf's: its reverse pointer is claimed first (CAS from
// the node to this context's claim, ClaimBy: one round trip), so that no merge
// can move the leaf up from under the slot CAS (its reverse CAS fails, and
// it gives the node back). Without the claim, a merge that froze the node
// after this insert's descent read it moves the deleted leaf up, the slot
// CAS then lands in the removed node, and the insert returns Ok and is
// lost. A slot CAS that loses gives the claim back.
StatusOr<RadixImpl::Outcome> RadixImpl::InsertIntoSlot(ContextImpl& ctx, const Landing& landing,
                                                       std::string_view key, uint64_t value) {
  const Cursor& cursor = landing.cursor;
  if (cursor.slot.leaf() && cursor.from_cache) {
    Invalidate(ctx, cursor);  // a deleted leaf seen through the cache: look fresh
    return Outcome::kRestart;
  }
  // Scratch and the new leaf first: nothing may fail with the claim held
  // but a remote op.
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(shape_.bytes(), 64));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  DMIDX_ASSIGN_OR_RETURN(
      const Op write, NewLeaf(ctx, key, value, cursor.parent, cursor.slot_address.node(), image));
  const bool deleted_leaf = cursor.slot.live();
  const RemoteAddress reverse = cursor.slot.child() + kLeafReverseOffset;
  const uint64_t claim = Claim(ctx);
  if (deleted_leaf) {
    StatusOr<uint64_t> found = CompareSwap(ctx, reverse, cursor.parent.raw(), claim);
    if (!found.ok()) {
      // The claim may have landed: give it back (it is this context's own).
      (void)CompareSwapRetrying(ctx, reverse, claim, cursor.parent.raw());
      (void)ctx.allocator().Free(ctx, write.remote, shape_.bytes());
      return found.status();
    }
    if (*found != cursor.parent.raw()) {
      // Moved by a merge, or claimed by another insert of the key (waited
      // for while it holds the leaf claimed).
      ++ctx.counters().cas_retries;
      (void)ctx.allocator().Free(ctx, write.remote, shape_.bytes());
      DMIDX_RETURN_IF_ERROR(AwaitClaim(ctx, cursor.slot.child(), *found, cursor, /*node=*/false));
      return Outcome::kRestart;
    }
  }
  const Slot desired = Slot::ToLeaf(PartialFor(key, cursor.depth), write.remote);
  std::array<Op, 2> ops;
  size_t count = 0;
  Status status;
  if (write.remote.node() != cursor.slot_address.node()) {
    status = ctx.Execute(write.remote.node(), {&write, 1});
  } else {
    ops[count++] = write;
  }
  ops[count++] = Op::CompareSwap(cursor.slot_address, old, cursor.slot.word(), desired.word());
  if (status.ok()) status = ctx.Execute(cursor.slot_address.node(), {ops.data(), count});
  if (!status.ok()) {
    // Whether the slot CAS landed is unknown: the slot says (only this
    // insert writes its new leaf's address).
    StatusOr<uint64_t> now = ReadWordRetrying(ctx, cursor.slot_address);
    if (now.ok() && *now == desired.word()) {
      if (deleted_leaf) RetireLeaf(ctx, cursor.slot.child());
      return Outcome::kDone;
    }
    // Still the deleted leaf (which never comes back once replaced): the
    // CAS did not land, and the new leaf was never reachable. (A tombstone
    // or an empty slot found again may have held the new leaf meanwhile:
    // the leaf is left where it is.)
    if (deleted_leaf && now.ok() && *now == cursor.slot.word()) {
      (void)CompareSwapRetrying(ctx, reverse, claim, cursor.parent.raw());
      (void)ctx.allocator().Free(ctx, write.remote, shape_.bytes());
    }
    return status;
  }
  if (*old == cursor.slot.word()) {
    // The deleted leaf's last slot now leads to the new leaf.
    if (deleted_leaf) RetireLeaf(ctx, cursor.slot.child());
    return Outcome::kDone;
  }
  ++ctx.counters().cas_retries;
  // Lost: the delete's tombstone landed (the leaf is unreachable now), or
  // the slot was a stale one whose node the leaf's reverse pointer names
  // only for a moment (a merge moving the leaf up holds it). Either way
  // the claim goes back: left on a leaf that such a merge then publishes,
  // it would keep every later insert of the key from the slot.
  if (deleted_leaf) (void)CompareSwapRetrying(ctx, reverse, claim, cursor.parent.raw());
  (void)ctx.allocator().Free(ctx, write.remote, shape_.bytes());
  return Outcome::kRestart;
}

// The node has no slot for the key's branch byte: CAS the first empty
// slot; past the type's slots (a full node) the type switch CASes the
// slots behind it, then raises the type.
StatusOr<RadixImpl::Outcome> RadixImpl::InsertIntoNode(ContextImpl& ctx, const Landing& landing,
                                                       std::string_view key, uint64_t value) {
  const NodeImage& node = landing.node;
  const uint8_t partial = static_cast<uint8_t>(key[node.header.branch()]);
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(shape_.bytes(), 64));
  DMIDX_ASSIGN_OR_RETURN(const Op write,
                         NewLeaf(ctx, key, value, node.address, node.address.node(), image));
  const bool same_node = write.remote.node() == node.address.node();
  if (!same_node) DMIDX_RETURN_IF_ERROR(ctx.Execute(write.remote.node(), {&write, 1}));
  const Slot desired = Slot::ToLeaf(partial, write.remote);
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  auto give_up = [&] {
    (void)ctx.allocator().Free(ctx, write.remote, shape_.bytes());
    return Outcome::kRestart;
  };
  // A frozen slot: a merge is removing the node (its header may not show
  // it yet in this image): waited for, or undone for a dead merger.
  auto await_merge = [&]() -> StatusOr<Outcome> {
    const Outcome outcome = give_up();
    DMIDX_RETURN_IF_ERROR(AwaitMerge(ctx, node.address, node.reverse().raw(), landing.holder));
    return outcome;
  };
  const uint32_t slots = node.capacity();
  for (uint32_t i = 0; i < slots; ++i) {
    if (node.slot(i).frozen()) return await_merge();
  }
  const int first = node.FirstEmpty();
  // A type switch raises the parent's slot too: find it afresh.
  if (first < 0 && landing.cursor.slot_address.is_null()) return give_up();
  uint32_t index = first >= 0 ? static_cast<uint32_t>(first) : node.capacity();
  for (; index < kMaxSlots; ++index) {
    std::vector<Op> ops;
    if (same_node) ops.push_back(write);  // again after a lost CAS: no harm, nothing points at it
    ops.push_back(Op::CompareSwap(node.address + kSlotsOffset + 8 * index, old, 0, desired.word()));
    if (Status cas = ctx.Execute(node.address.node(), ops); !cas.ok()) {
      // Behind the type the CAS may have landed all the same: raise the
      // type now, or readers (who read by type) miss the key until another
      // insert raises it, a key appearing with no write. Harmless if it did
      // not land: an empty slot in a larger type.
      if (index >= node.capacity()) (void)RaiseType(ctx, landing, TypeHolding(index));
      return cas;
    }
    if (*old == 0) {
      if (index < node.capacity()) return Outcome::kDone;
      DMIDX_RETURN_IF_ERROR(RaiseType(ctx, landing, TypeHolding(index)));
      return Outcome::kDone;
    }
    ++ctx.counters().cas_retries;
    const Slot found(*old);
    if (found.frozen()) return await_merge();
    if (found.partial() == partial) {
      // Another insert of this branch byte won the slot. Behind the type,
      // make its slot visible first (its inserter may have stopped before
      // raising the type).
      if (index >= node.capacity()) {
        DMIDX_RETURN_IF_ERROR(RaiseType(ctx, landing, TypeHolding(index)));
      }
      return give_up();
    }
  }
  return Status::Internal("node " + node.address.ToString() + " of " + core_.label() +
                          " has no slot left for branch byte " + std::to_string(partial));
}

// Header first (the linearization point: a reader whose slot says a
// smaller type reads the rest when the header says more), then the
// parent's slot (saves that second READ). False when the node was found
// deleted: the caller descends again.
Status RadixImpl::RaiseType(ContextImpl& ctx, const Landing& landing, uint8_t type) {
  const NodeImage& node = landing.node;
  if (fixed_size_) type = kMaxType;
  Header expected = node.header;
  for (int attempt = 0; attempt < index::kMaxRestarts; ++attempt) {
    if (expected.deleted()) {
      // A merge froze the node after the slot CAS landed; it finds that
      // slot taken and gives the node back. Wait for that (for a dead
      // merger, until the merge is undone: AwaitMerge).
      index::BackoffCapped(ctx, attempt);
      runtime::ScratchArena::Scope scope(ctx.arena());
      DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
      const Op read = Op::Read(node.address + kReverseOffset, words, 16);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(node.address.node(), {&read, 1}));
      expected = Header::Unpack(words[1]);
      if (expected.deleted()) {
        DMIDX_RETURN_IF_ERROR(AwaitMerge(ctx, node.address, words[0], landing.holder));
      }
      continue;
    }
    if (expected.type >= type) break;
    Header desired = expected;
    desired.type = type;
    // Retried when its batch fails: the slot behind the type has landed,
    // and until the type covers it the key is invisible, to appear later
    // when another insert raises the type (after a reader learned it
    // absent).
    DMIDX_ASSIGN_OR_RETURN(
        const uint64_t found,
        CompareSwapRetrying(ctx, node.address + kHeaderOffset, expected.Pack(), desired.Pack()));
    if (found == expected.Pack()) break;
    ++ctx.counters().cas_retries;
    expected = Header::Unpack(found);
  }
  const Cursor& holder = landing.cursor;
  if (holder.slot_address.is_null()) return Status::Ok();
  Slot slot = holder.slot;
  for (int attempt = 0; attempt < index::kMaxRestarts; ++attempt) {
    if (slot.child() != node.address || slot.leaf() || slot.type() >= type) break;
    DMIDX_ASSIGN_OR_RETURN(const uint64_t found, CompareSwap(ctx, holder.slot_address, slot.word(),
                                                             slot.WithType(type).word()));
    if (found == slot.word()) break;
    ++ctx.counters().cas_retries;
    slot = Slot(found);
  }
  return Status::Ok();
}

// The key's path ends at a leaf of another key: a chain of new nodes holds
// the bytes both keys share past the slot (6 in a header, 1 as a branch
// byte, per node), the last branching to both leaves. Written before the
// old leaf's reverse pointer is CASed to its new parent (so cached routes
// to it fail their reverse check from then on) and the slot is CASed to
// the chain.
StatusOr<RadixImpl::Outcome> RadixImpl::SplitLeaf(ContextImpl& ctx, const Landing& landing,
                                                  const LeafImage& leaf, std::string_view key,
                                                  uint64_t value) {
  const Cursor& cursor = landing.cursor;
  const std::string_view other = leaf.key(shape_);
  const RemoteAddress old_leaf = cursor.slot.child();
  uint32_t differ = cursor.depth;
  while (differ < key.size() && key[differ] == other[differ])
    ++differ;
  if (differ >= key.size()) return Outcome::kRestart;  // the same key: look again
  std::vector<RemoteAddress> nodes;
  std::vector<Header> headers;
  for (uint32_t start = cursor.depth;;) {
    Header header;
    header.depth = static_cast<uint8_t>(start);
    header.count = static_cast<uint8_t>(std::min<uint32_t>(differ - start, kMaxHeaderBytes));
    header.type = NewNodeType(header.branch() == differ ? 2 : 1);
    for (uint32_t i = 0; i < header.count; ++i) {
      header.partial[i] = static_cast<uint8_t>(key[start + i]);
    }
    headers.push_back(header);
    if (header.branch() == differ) break;
    start = header.branch() + 1;
  }
  // The chain and the new leaf: given back wherever this split ends
  // before the slot CAS, unless a CAS on a live object may keep them
  // reachable (below).
  index::MadeObjects made;
  for (size_t i = 0; i < headers.size(); ++i) {
    StatusOr<RemoteAddress> node = AllocateNode(ctx);
    if (!node.ok()) {
      made.FreeAll(ctx);
      return node.status();
    }
    made.Add(*node, kNodeBytes);
    nodes.push_back(*node);
  }
  DMIDX_ASSIGN_OR_RETURN(uint8_t * leaf_image, ctx.arena().Bytes(shape_.bytes(), 64));
  StatusOr<Op> write_leaf = NewLeaf(ctx, key, value, nodes.back(), nodes.back().node(), leaf_image);
  if (!write_leaf.ok()) {
    made.FreeAll(ctx);
    return write_leaf.status();
  }
  const RemoteAddress new_leaf = write_leaf->remote;
  made.Add(new_leaf, shape_.bytes());
  // The chain, as many nodes per round trip as the arena holds; the last
  // round trip also WRITEs the new leaf and CASes the old leaf's reverse
  // pointer.
  for (size_t i = 0; i < nodes.size();) {
    runtime::ScratchArena::Scope group(ctx.arena());
    std::vector<Op> ops;
    while (i < nodes.size() &&
           (ops.empty() || ctx.arena().Fits(kNodeBytes, 64, index::kScratchReserveBytes) > 0)) {
      StatusOr<uint8_t*> image = ctx.arena().Bytes(kNodeBytes, 64);
      if (!image.ok()) {
        made.FreeAll(ctx);
        return image.status();
      }
      const Header& header = headers[i];
      InitNodeImage(*image, i == 0 ? cursor.parent : nodes[i - 1], header, Claim(ctx));
      const auto branch_byte = static_cast<uint8_t>(key[header.branch()]);
      if (i + 1 < nodes.size()) {
        SetSlotInImage(*image, 0, Slot::ToNode(branch_byte, headers[i + 1].type, nodes[i + 1]));
      } else {
        SetSlotInImage(*image, 0, Slot::ToLeaf(static_cast<uint8_t>(other[differ]), old_leaf));
        SetSlotInImage(*image, 1, Slot::ToLeaf(branch_byte, new_leaf));
      }
      ops.push_back(Op::Write(nodes[i], *image, kNodeBytes));
      ++i;
    }
    uint64_t* old_reverse = nullptr;
    if (i == nodes.size()) {
      StatusOr<uint64_t*> word = ctx.arena().Words(1);
      if (!word.ok()) {
        made.FreeAll(ctx);
        return word.status();
      }
      old_reverse = *word;
      ops.push_back(*write_leaf);
      // Claimed, not yet moved to the chain's last node: the chain's
      // WRITEs may land after the CAS (another memory node), and a leaf
      // must never name a node not wholly written (PublishSplit moves it).
      ops.push_back(Op::CompareSwap(old_leaf + kLeafReverseOffset, old_reverse, cursor.parent.raw(),
                                    Claim(ctx)));
    }
    const Status status = ctx.ExecuteAll(ops);
    if (!status.ok()) {
      // The claim, if in this batch, may have landed: give it back before
      // the chain goes.
      if (old_reverse != nullptr &&
          !CompareSwapRetrying(ctx, old_leaf + kLeafReverseOffset, Claim(ctx), cursor.parent.raw())
               .ok()) {
        return status;  // unknown: nothing freed
      }
      made.FreeAll(ctx);
      return status;
    }
    if (old_reverse != nullptr && *old_reverse != cursor.parent.raw()) {
      // Another change is moving this leaf (or the route was stale):
      // waited for while it holds the leaf claimed.
      made.FreeAll(ctx);
      ++ctx.counters().cas_retries;
      if (cursor.from_cache) Invalidate(ctx, cursor);
      DMIDX_RETURN_IF_ERROR(AwaitClaim(ctx, old_leaf, *old_reverse, cursor, /*node=*/false));
      return Outcome::kRestart;
    }
  }
  const Slot desired = Slot::ToNode(cursor.slot.partial(), headers.front().type, nodes.front());
  DMIDX_ASSIGN_OR_RETURN(const bool published,
                         PublishSplit(ctx, cursor, old_leaf, nodes.back(), desired, made));
  return published ? Outcome::kDone : Outcome::kRestart;
}

StatusOr<bool> RadixImpl::PublishSplit(ContextImpl& ctx, const Cursor& cursor, RemoteAddress moved,
                                       RemoteAddress named, Slot desired,
                                       index::MadeObjects& made) {
  static_assert(kReverseOffset == kLeafReverseOffset);
  const uint64_t claim = Claim(ctx);
  const RemoteAddress reverse = moved + kReverseOffset;
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  // One batch, the slot first, when both words are on one memory node.
  Op ops[2] = {Op::CompareSwap(cursor.slot_address, &words[0], cursor.slot.word(), desired.word()),
               Op::CompareSwap(reverse, &words[1], claim, named.raw())};
  const Status status = ctx.ExecuteAll(ops);
  // Gives the reverse pointer back to the parent, from whichever this
  // split left in it; true once the new objects are known unreachable.
  auto give_back = [&]() -> StatusOr<bool> {
    DMIDX_ASSIGN_OR_RETURN(const uint64_t claimed,
                           CompareSwapRetrying(ctx, reverse, claim, cursor.parent.raw()));
    if (claimed == claim) return true;
    DMIDX_ASSIGN_OR_RETURN(const uint64_t moved_to,
                           CompareSwapRetrying(ctx, reverse, named.raw(), cursor.parent.raw()));
    return moved_to == named.raw();
  };
  if (status.ok()) {
    if (words[0] == cursor.slot.word()) return true;
    // The slot changed: the moved object was deleted or replaced
    // meanwhile. Give its reverse pointer back and look again.
    ++ctx.counters().cas_retries;
    DMIDX_ASSIGN_OR_RETURN(const bool unpublished, give_back());
    if (unpublished) made.FreeAll(ctx);
    return false;
  }
  // Landed or not: the slot says. Still leading to the moved object (which
  // only this split moves while it holds it), not landed: given back; the
  // new objects were never reachable once that wins.
  DMIDX_ASSIGN_OR_RETURN(const uint64_t now, ReadWordRetrying(ctx, cursor.slot_address));
  const Slot slot(now);
  const bool still_moved = slot.live() && slot.child() == moved;
  // Landed: the slot leads to the new chain (whose type a type switch may
  // have raised since; only this split writes its address), or, for a
  // node, anywhere but the node (the claim keeps every other change from
  // moving it: the new chain was split or merged since).
  const bool is_node = !cursor.slot.leaf();
  if ((slot.live() && !slot.leaf() && slot.child() == desired.child()) ||
      (is_node && !still_moved)) {
    DMIDX_RETURN_IF_ERROR(CompareSwapRetrying(ctx, reverse, claim, named.raw()).status());
    return true;
  }
  if (!still_moved) {
    // A leaf the slot no longer leads to: the split may have landed and
    // its chain changed since, or the leaf was deleted first. Either way
    // the leaf names the new node (harmless if the leaf is unreachable),
    // and the outcome is unknown: nothing is freed.
    (void)CompareSwapRetrying(ctx, reverse, claim, named.raw());
    return status;
  }
  const StatusOr<bool> unpublished = give_back();
  if (unpublished.ok() && *unpublished) made.FreeAll(ctx);
  return status;
}

// The key leaves the node's header at key byte `mismatch`: a new node
// above it holds the header bytes before the mismatch and branches to the
// node and to the new leaf. The node's reverse pointer is CASed to the new
// node, the parent's slot is CASed to it, and then the node's header drops
// the bytes the new node took (readers coming through the new node before
// that skip them: the header's depth says they were matched).
StatusOr<RadixImpl::Outcome> RadixImpl::SplitHeader(ContextImpl& ctx, const Landing& landing,
                                                    std::string_view key, uint64_t value) {
  const Cursor& cursor = landing.cursor;
  const NodeImage& node = landing.node;
  if (cursor.slot_address.is_null()) return Outcome::kRestart;  // parent unknown: look fresh
  const Header& old_header = node.header;
  const uint32_t mismatch = landing.mismatch;
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress split, AllocateNode(ctx));
  DMIDX_ASSIGN_OR_RETURN(uint8_t * leaf_image, ctx.arena().Bytes(shape_.bytes(), 64));
  StatusOr<Op> write_leaf = NewLeaf(ctx, key, value, split, split.node(), leaf_image);
  // The new node and leaf: given back wherever this split ends before the
  // slot CAS, unless a CAS on a live object may keep them reachable.
  index::MadeObjects made;
  made.Add(split, kNodeBytes);
  if (!write_leaf.ok()) {
    made.FreeAll(ctx);
    return write_leaf.status();
  }
  made.Add(write_leaf->remote, shape_.bytes());
  Header header;
  header.depth = static_cast<uint8_t>(cursor.depth);
  header.count = static_cast<uint8_t>(mismatch - cursor.depth);
  header.type = NewNodeType(2);
  for (uint32_t i = 0; i < header.count; ++i) {
    header.partial[i] = static_cast<uint8_t>(key[cursor.depth + i]);
  }
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(kNodeBytes, 64));
  InitNodeImage(image, cursor.parent, header, Claim(ctx));
  const uint8_t node_type = std::max(old_header.type, cursor.slot.type());
  SetSlotInImage(
      image, 0,
      Slot::ToNode(old_header.partial[mismatch - old_header.depth], node_type, node.address));
  SetSlotInImage(image, 1, Slot::ToLeaf(static_cast<uint8_t>(key[mismatch]), write_leaf->remote));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old_reverse, ctx.arena().Words(1));
  // The node claimed, moved to the new node once that is written
  // (PublishSplit), as a leaf split does.
  std::vector<Op> ops = {
      Op::Write(split, image, kNodeBytes), *write_leaf,
      Op::CompareSwap(node.address + kReverseOffset, old_reverse, cursor.parent.raw(), Claim(ctx))};
  Status status = ctx.ExecuteAll(ops);
  if (!status.ok()) {
    // The claim may have landed: give it back first.
    if (!CompareSwapRetrying(ctx, node.address + kReverseOffset, Claim(ctx), cursor.parent.raw())
             .ok()) {
      return status;  // unknown: nothing freed
    }
    made.FreeAll(ctx);
    return status;
  }
  if (*old_reverse != cursor.parent.raw()) {
    made.FreeAll(ctx);
    ++ctx.counters().cas_retries;
    DMIDX_RETURN_IF_ERROR(AwaitClaim(ctx, node.address, *old_reverse, cursor, /*node=*/true));
    return Outcome::kRestart;
  }
  const Slot desired = Slot::ToNode(cursor.slot.partial(), header.type, split);
  DMIDX_ASSIGN_OR_RETURN(const bool published,
                         PublishSplit(ctx, cursor, node.address, split, desired, made));
  if (!published) return Outcome::kRestart;
  // Round trip 3: trim the node's header to start after the new branch
  // byte (TrimHeader: under a claim of its reverse pointer, so that a late
  // trim never lands on a header a merge gave back the same bytes). Others
  // may hold that pointer for a moment (a descent trimming the node on this
  // split's behalf, a merge of the new node trying to take it), and a merge
  // of the node may have frozen its header; each gives it back: wait for
  // that, as RaiseType does, rather than leave the node untrimmed for good.
  // Done once the header starts at `depth` or deeper (trimmed by a helper,
  // or further by a later header split of the node), or once the reverse
  // pointer names another node unclaimed (such a later split, which trims
  // it itself). A trim that fails with an error is left to the next
  // descent through the new node (HelpTrim); the key is in.
  const uint32_t depth = mismatch + 1;
  Header current = old_header;
  uint64_t reverse = split.raw();
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  for (int attempt = 0; attempt < index::kMaxRestarts; ++attempt) {
    if (current.depth >= depth) break;
    if (reverse == split.raw() && !current.deleted() && current.type <= kMaxType) {
      const StatusOr<Trim> trim = TrimHeader(ctx, node.address, split, &current, depth);
      if (!trim.ok() || *trim == Trim::kDone) break;
      ++ctx.counters().cas_retries;
      if (*trim == Trim::kHeaderChanged) continue;
    } else if (reverse != split.raw() && (reverse & kClaimedBit) == 0) {
      break;
    }
    index::BackoffCapped(ctx, attempt);
    const Op read = Op::Read(node.address + kReverseOffset, words, 16);
    if (!ctx.Execute(node.address.node(), {&read, 1}).ok()) break;
    static_assert(kHeaderOffset == kReverseOffset + 8);
    reverse = words[0];
    current = Header::Unpack(words[1]);
  }
  return Outcome::kDone;
}

}  // namespace dmidx::radix
