// Merges of the B-link tree: an underfull node's right neighbour under the
// same parent moves into it, and a root with one child collapses into it.
// The protocol and why readers, scans and recovery stay right are in
// docs/btree.md, "Merges".
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "btree/btree_impl.h"

namespace dmidx::btree {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// Merge attempts one delete makes at most (levels up, and once more from
// the bottom after a parent merged).
constexpr int kMaxMergeSteps = 16;

// The bytes a dead mark changes: checksum, bitmap, meta (the level byte)
// and sibling (the node merged into). The rest of the node is as it was.
constexpr uint32_t kDeadMarkBytes = kFencesOffset;

// One of the nodes a merge locks.
struct Locked {
  RemoteAddress node;
  uint8_t* image;
  RemoteAddress word;
  std::optional<lock::LockGrant> grant;
};

}  // namespace

void BTreeImpl::RetireNode(ContextImpl& ctx, RemoteAddress node) {
  retired_nodes_.fetch_add(1, std::memory_order_relaxed);
  // As allocated (AllocateNode, GrowRoot, BulkLoad): node bytes, 64-byte
  // aligned.
  ctx.Retire(node, shape_.node_bytes(), 64);
}

void BTreeImpl::MergeAfterDelete(ContextImpl& ctx, std::string_view key, uint8_t* a, uint8_t* b) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint8_t*> c = NodeBuffer(ctx);
  if (!c.ok()) return;
  uint8_t level = 0;
  bool again_from_leaf = false;  // the leaf was its parent's only child
  bool left_pair = false;
  for (int step = 0; step < kMaxMergeSteps; ++step) {
    const StatusOr<MergeStep> merged = MergeAt(ctx, key, level, {a, b, *c}, left_pair);
    if (!merged.ok()) return;
    // Too full with its right neighbour: its left one, once. (Otherwise
    // an emptied node beside a full right neighbour would stay as it is:
    // no delete is left in its range to merge it later.)
    left_pair = *merged == MergeStep::kTryLeft;
    if (left_pair) continue;
    if (*merged == MergeStep::kParentUnderfull) {
      if (level == 0 && step == 0) again_from_leaf = true;
      ++level;
      continue;
    }
    // Done at this level. A leaf that had no sibling under its parent may
    // have one now that the parent merged: try it once more.
    if (level == 0 || !again_from_leaf) return;
    again_from_leaf = false;
    level = 0;
  }
}

StatusOr<BTreeImpl::MergeStep> BTreeImpl::MergeAt(ContextImpl& ctx, std::string_view key,
                                                  uint8_t level, std::array<uint8_t*, 3> images,
                                                  bool left_pair) {
  uint8_t* const parent_image = images[0];
  // The parent as it is now (not from the cache: its children are chosen
  // from this image, and checked again under the locks).
  const StatusOr<RemoteAddress> parent = Descend(ctx, key, level + 1, parent_image, false);
  if (!parent.ok()) {
    if (!parent.status().IsNotFound()) return parent.status();
    // The node at `level` is the root: one with one child collapses.
    if (level > 0) DMIDX_RETURN_IF_ERROR(CollapseRoot(ctx, images[0]));
    return MergeStep::kDone;
  }
  const NodeView seen(shape_, parent_image);
  if (seen.count() == 0) {
    // The node is its parent's only child: the parent is underfull. A
    // root parent collapses into it; another merges a level up first.
    if (!(seen.low_is_min() && seen.high_is_max())) return MergeStep::kParentUnderfull;
    DMIDX_RETURN_IF_ERROR(CollapseRoot(ctx, images[0]));
    return MergeStep::kDone;
  }
  // The pair: the key's node and its right neighbour, or its left one when
  // it is the last child.
  const uint32_t at = seen.ChildIndex(key);
  const uint32_t j = at < seen.count() && !(left_pair && at > 0) ? at : at - 1;
  const std::string separator(seen.internal_key(j));
  std::array<Locked, 3> nodes = {{{*parent, parent_image, {}, {}},
                                  {seen.child(j), images[1], {}, {}},
                                  {seen.child(j + 1), images[2], {}, {}}}};
  // One memory node for all three: the merge is then one batch under one
  // redo record (docs/btree.md says why, and what a wider merge needs).
  for (Locked& n : nodes) {
    if (n.node.node() != parent->node()) return MergeStep::kDone;
    n.word = lock_.table().WordFor(n.node);
  }
  // Locked in the order of their lock words, so two merges never wait
  // for each other in a cycle (every other writer holds one lock at a
  // time). Two nodes hashed to one word: given up (rare).
  std::array<Locked*, 3> order = {&nodes[0], &nodes[1], &nodes[2]};
  std::sort(order.begin(), order.end(),
            [](const Locked* x, const Locked* y) { return x->word.raw() < y->word.raw(); });
  if (order[0]->word == order[1]->word || order[1]->word == order[2]->word) {
    return MergeStep::kDone;
  }
  auto release_all = [&] {
    for (Locked& n : nodes) {
      if (n.grant) (void)lock_.Release(ctx, *n.grant, {});
      n.grant.reset();
    }
  };
  for (Locked* n : order) {
    const Op read = Op::Read(n->node, n->image, shape_.node_bytes());
    StatusOr<lock::LockGrant> grant = LockAndRead(ctx, n->node, read);
    if (!grant.ok()) {
      release_all();
      return grant.status();
    }
    n->grant = std::move(*grant);
  }
  NodeView p(shape_, nodes[0].image), left(shape_, nodes[1].image), right(shape_, nodes[2].image);
  // Under the locks: the parent still names left then right with the
  // separator between them, left's sibling is right and the fences meet,
  // the key's node is still underfull, and the two fit in three quarters
  // of a node (merge_fit_*).
  const uint32_t r = p.level() == level + 1 ? p.ChildIndex(separator) : 0;
  const bool leaves = level == 0;
  const bool fits = leaves ? left.leaf_entries() + right.leaf_entries() <= merge_fit_leaf_
                           : left.count() + right.count() + 1u <= merge_fit_internal_;
  const NodeView& keyed = at == j ? left : right;
  if (r == 0 || p.internal_key(r - 1) != separator || p.child(r - 1) != nodes[1].node ||
      p.child(r) != nodes[2].node || left.level() != level || right.level() != level ||
      left.sibling() != nodes[2].node || left.high_is_max() || left.high_fence() != separator ||
      right.low_is_min() || right.low_fence() != separator || !fits || !Underfull(keyed)) {
    release_all();
    const bool left_too = !fits && at == j && at > 0 && Underfull(keyed);
    return left_too ? MergeStep::kTryLeft : MergeStep::kDone;
  }
  // The record's slot first (a merge's record holds two node images, more
  // than a split's slot has room for): a WriteBack whose record finds no
  // slot posts nothing and fails, and the three words must then be let
  // go, not kept held (below) with no record to finish: a settled client
  // would leave them held for good.
  if (Status reserved =
          lock_.ReserveRecord(ctx, *nodes[1].grant, 2 * shape_.node_bytes() + kDeadMarkBytes, 3);
      !reserved.ok()) {
    release_all();
    return reserved;
  }
  // Left takes right's entries, fences and sibling over; right is marked
  // dead, merged into left; the parent loses the separator and right.
  std::string low = left.low_is_min() ? "" : std::string(left.low_fence());
  std::string high = right.high_is_max() ? "" : std::string(right.high_fence());
  std::vector<Entry> entries;
  if (leaves) {
    for (const NodeView* from : {&left, &right}) {
      for (uint32_t slot : from->SortedLeafSlots()) {
        entries.push_back({std::string(from->leaf_key(slot)), from->leaf_value(slot)});
      }
    }
  } else {
    for (uint32_t i = 0; i < left.count(); ++i) {
      entries.push_back({std::string(left.internal_key(i)), left.child(i + 1).raw()});
    }
    entries.push_back({separator, right.child(0).raw()});
    for (uint32_t i = 0; i < right.count(); ++i) {
      entries.push_back({std::string(right.internal_key(i)), right.child(i + 1).raw()});
    }
  }
  const RemoteAddress first_child = leaves ? RemoteAddress() : left.child(0);
  const RemoteAddress next = right.sibling();
  right.MarkDead(nodes[1].node);
  right.Seal();
  if (leaves) {
    left.InitLeaf(low, high, next);
    for (size_t i = 0; i < entries.size(); ++i) {
      left.SetLeafEntry(static_cast<uint32_t>(i), entries[i].key, entries[i].value_or_child);
    }
  } else {
    left.InitInternal(level, low, high, next, first_child);
    for (const Entry& entry : entries) {
      left.InsertSeparator(entry.key, RemoteAddress::FromRaw(entry.value_or_child));
    }
  }
  left.Seal();
  p.RemoveSeparator(r - 1);
  p.Seal();
  // One batch under one record (lock/redo_log.h), held by the left's
  // lock: [record][left][right's dead mark][parent][clear]. A death before
  // the record is whole changes nothing; after it, recovery writes all
  // three again. The right's and the parent's words, held with no record,
  // are freed as void holds. Every post is under all three holds, so
  // posting it again overwrites nobody's change.
  const Op writes[3] = {Op::Write(nodes[1].node, nodes[1].image, shape_.node_bytes()),
                        Op::Write(nodes[2].node, nodes[2].image, kDeadMarkBytes),
                        Op::Write(nodes[0].node, nodes[0].image, shape_.node_bytes())};
  const Status written = lock_.WriteBack(ctx, *nodes[1].grant, writes);
  if (!written.ok()) {
    // Maybe in part: the three words stay held with the record whole, as
    // a dead holder's, so that only a recovery (this compute node's, once
    // its client closes unsettled or it dies) finishes the merge, and
    // nobody meanwhile sees a left that took right over beside a right
    // still live. WriteBack has kept the record's slot (lock/redo_log.h,
    // KeepRecord): this context's next change cannot write over it.
    for (Locked& n : nodes)
      lock_.KeepHeld(*n.grant);
    return written;
  }
  const lock::ObjectImage left_image{nodes[1].node, nodes[1].image, shape_.node_bytes()};
  const lock::ObjectImage parent_image_after{nodes[0].node, nodes[0].image, shape_.node_bytes()};
  (void)lock_.Release(ctx, *nodes[2].grant, {});
  (void)lock_.Release(ctx, *nodes[1].grant, {}, &left_image);
  (void)lock_.Release(ctx, *nodes[0].grant, {}, &parent_image_after);
  merges_.fetch_add(1, std::memory_order_relaxed);
  RetireNode(ctx, nodes[2].node);
  if (cache_) {
    // A newer image of a range drops the older ones it overlaps (right's).
    cache_->Put(nodes[0].node, nodes[0].image, ctx.epoch());
    if (!leaves) cache_->Put(nodes[1].node, nodes[1].image, ctx.epoch());
  }
  return Underfull(p) ? MergeStep::kParentUnderfull : MergeStep::kDone;
}

Status BTreeImpl::CollapseRoot(ContextImpl& ctx, uint8_t* image) {
  for (index::Restarts restarts; restarts.Next();) {
    DMIDX_ASSIGN_OR_RETURN(const RemoteAddress root, Root(ctx, true));
    const Op read = Op::Read(root, image, shape_.node_bytes());
    DMIDX_ASSIGN_OR_RETURN(lock::LockGrant grant, LockAndRead(ctx, root, read));
    NodeView node(shape_, image);
    // A live internal root with both fences infinite has not split (and
    // cannot while locked), so it is the descriptor's root.
    if (node.dead() || node.is_leaf() || node.count() != 0 || !node.low_is_min() ||
        !node.high_is_max()) {
      return lock_.Release(ctx, grant, {});
    }
    const RemoteAddress child = node.child(0);
    node.MarkDead(child);
    node.Seal();
    // Dead first, under the lock: a separator insert that locks the old
    // root afterwards finds it dead and descends again, so none is added
    // to a node that is no longer the root. Then the descriptor moves
    // down; a descent that meets the dead root first finishes the move
    // for it (HelpCollapse).
    DMIDX_RETURN_IF_ERROR(lock_.Release(ctx, grant, {Op::Write(root, image, kDeadMarkBytes)}));
    if (cache_) cache_->Invalidate(root);
    DMIDX_RETURN_IF_ERROR(HelpCollapse(ctx, root, child));
  }
  return Status::Ok();
}

Status BTreeImpl::HelpCollapse(ContextImpl& ctx, RemoteAddress root, RemoteAddress into) {
  DMIDX_ASSIGN_OR_RETURN(const bool moved, PublishRoot(ctx, root, into));
  if (moved) {
    root_collapses_.fetch_add(1, std::memory_order_relaxed);
    // The descriptor named it last; nothing else does.
    RetireNode(ctx, root);
  } else {
    DMIDX_RETURN_IF_ERROR(Root(ctx, true).status());
  }
  return Status::Ok();
}

}  // namespace dmidx::btree
