#include "tests/btree_test_util.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <utility>

#include "btree/btree_impl.h"
#include "btree/node.h"
#include "lib/common/key_compare.h"

namespace dmidx::btree {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// Deep enough for any tree the tests build; a longer chain or descent is
// reported as a cycle.
constexpr int kMaxLevels = 32;
constexpr int kMaxChain = 1 << 20;

struct Walker {
  ContextImpl& ctx;
  const NodeShape& shape;
  const lock::GlobalLockTable& locks;
  uint8_t* image;
  std::vector<std::string> errors;
  std::span<const uint32_t> dead;
  std::vector<size_t> sizes;  // nodes in each level's chain, root first

  // A word held by a dead compute node: left for the next waiter.
  bool HeldByDead(uint64_t word) const {
    const std::optional<uint32_t> holder = lock::HierarchicalLock::HolderOf(word);
    return holder && std::find(dead.begin(), dead.end(), *holder) != dead.end();
  }

  void Error(RemoteAddress where, const std::string& what) {
    errors.push_back("node " + where.ToString() + ": " + what);
  }

  bool Read(RemoteAddress address, void* into, uint32_t length) {
    const Op read = Op::Read(address, into, length);
    const Status status = ctx.Execute(address.node(), {&read, 1});
    if (!status.ok()) errors.push_back("READ " + address.ToString() + ": " + status.ToString());
    return status.ok();
  }

  // Walks the level whose first node is `first`, expecting `children` (in
  // order, with their low fences) among its chain; fills the next level's.
  struct Child {
    RemoteAddress address;
    std::string low;  // empty for the first
  };
  void Level(int depth, std::vector<Child> children, std::vector<Child>* below) {
    sizes.push_back(0);
    size_t expected = 0;
    std::string previous_high;
    RemoteAddress at = children.front().address;
    int level = -1;
    for (int step = 0; !at.is_null(); ++step) {
      if (step == kMaxChain) return Error(at, "sibling chain without end");
      if (!Read(at, image, shape.node_bytes())) return;
      const NodeView node(shape, image);
      if (!node.Verify()) Error(at, "fails its checksum");
      if (node.dead()) return Error(at, "dead (merged into " + node.merged_into().ToString() + ")");
      ++sizes.back();
      uint64_t* word = reinterpret_cast<uint64_t*>(image + shape.node_bytes());
      if (Read(locks.WordFor(at), word, 8) && *word != 0 && !HeldByDead(*word)) {
        Error(at, "lock word " + locks.WordFor(at).ToString() + " held: " + std::to_string(*word));
      }
      if (level < 0) level = node.level();
      if (node.level() != level)
        Error(at, "level " + std::to_string(node.level()) + " in a chain of level " +
                      std::to_string(level));
      if (step == 0 && !node.low_is_min()) Error(at, "first of its level without the lowest fence");
      if (step > 0 && (node.low_is_min() || node.low_fence() != previous_high)) {
        Error(at, "low fence is not its left sibling's high fence");
      }
      if (node.high_is_max() != node.sibling().is_null()) {
        Error(at, "highest fence and sibling disagree");
      }
      if (!node.low_is_min() && !node.high_is_max() &&
          CompareKeys(node.low_fence(), node.high_fence()) >= 0) {
        Error(at, "empty fence range");
      }
      if (expected < children.size() && children[expected].address == at) {
        if (expected > 0 && node.low_fence() != children[expected].low) {
          Error(at, "low fence is not its parent's separator");
        }
        ++expected;
      }
      std::string_view last;
      auto in_order = [&](std::string_view key, bool first) {
        if (!first && CompareKeys(last, key) >= 0) Error(at, "keys out of order");
        if (!node.Covers(key)) Error(at, "key outside its fences");
        last = key;
      };
      if (node.is_leaf()) {
        bool first = true;
        for (const uint8_t slot : node.SortedLeafSlots()) {
          in_order(node.leaf_key(slot), first);
          first = false;
        }
      } else {
        below->push_back({node.child(0), std::string(node.low_fence())});
        for (uint32_t i = 0; i < node.count(); ++i) {
          in_order(node.internal_key(i), i == 0);
          below->push_back({node.child(i + 1), std::string(node.internal_key(i))});
        }
      }
      previous_high = std::string(node.high_fence());
      at = node.sibling();
    }
    if (expected < children.size()) {
      Error(children[expected].address,
            "named by a parent but not in its level's chain (depth " + std::to_string(depth) + ")");
    }
  }
};

}  // namespace

std::vector<std::string> BTreeTestPeer::Walk(RangeIndex& index, Context& ctx,
                                             std::span<const uint32_t> dead) {
  std::vector<size_t> sizes;
  return WalkCounting(index, ctx, dead, &sizes);
}

std::vector<std::string> BTreeTestPeer::WalkCounting(RangeIndex& index, Context& context,
                                                     std::span<const uint32_t> dead,
                                                     std::vector<size_t>* sizes) {
  auto& tree = static_cast<BTreeImpl&>(index);
  auto& ctx = ContextImpl::From(context);
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint8_t*> image = ctx.arena().Bytes(tree.shape_.node_bytes() + 8, 64);
  if (!image.ok()) return {image.status().ToString()};
  Walker walker{ctx, tree.shape_, tree.lock_.table(), *image, {}, dead, {}};
  uint64_t root = 0;
  if (!walker.Read(tree.descriptor_ + offsetof(Descriptor, root), *image, 8)) return walker.errors;
  std::memcpy(&root, *image, 8);
  // A root whose collapse has not reached the descriptor: its child is.
  for (int hop = 0; hop < kMaxLevels; ++hop) {
    if (!walker.Read(RemoteAddress::FromRaw(root), *image, tree.shape_.node_bytes()))
      return walker.errors;
    const NodeView node(tree.shape_, *image);
    if (!node.dead() || !node.low_is_min() || !node.high_is_max()) break;
    root = node.merged_into().raw();
  }
  std::vector<Walker::Child> level = {{RemoteAddress::FromRaw(root), ""}};
  for (int depth = 0; !level.empty(); ++depth) {
    if (depth == kMaxLevels) {
      walker.errors.push_back("more than " + std::to_string(kMaxLevels) + " levels");
      break;
    }
    std::vector<Walker::Child> below;
    walker.Level(depth, std::move(level), &below);
    level = std::move(below);
  }
  *sizes = std::move(walker.sizes);
  return walker.errors;
}

std::vector<size_t> BTreeTestPeer::LevelSizes(RangeIndex& index, Context& ctx) {
  std::vector<size_t> sizes;
  if (!WalkCounting(index, ctx, {}, &sizes).empty()) return {};
  return sizes;
}

uint64_t BTreeTestPeer::Merges(RangeIndex& index) {
  return static_cast<BTreeImpl&>(index).merges_.load();
}
uint64_t BTreeTestPeer::RootCollapses(RangeIndex& index) {
  return static_cast<BTreeImpl&>(index).root_collapses_.load();
}
uint64_t BTreeTestPeer::RetiredNodes(RangeIndex& index) {
  return static_cast<BTreeImpl&>(index).retired_nodes_.load();
}

uint64_t BTreeTestPeer::DescriptorRoot(RangeIndex& index, Context& context) {
  auto& tree = static_cast<BTreeImpl&>(index);
  auto& ctx = ContextImpl::From(context);
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint64_t*> word = ctx.arena().Words(1);
  if (!word.ok()) return 0;
  const Op read = Op::Read(tree.descriptor_ + offsetof(Descriptor, root), *word, 8);
  if (!ctx.Execute(tree.descriptor_.node(), {&read, 1}).ok()) return 0;
  return **word;
}

BTreeTestPeer::RootHint BTreeTestPeer::RootHintOf(RangeIndex& index) {
  auto& tree = static_cast<BTreeImpl&>(index);
  std::lock_guard<std::mutex> guard(tree.root_hint_mutex_);
  return {tree.root_hint_.load(std::memory_order_acquire), tree.root_hint_epoch_.load()};
}

uint64_t BTreeTestPeer::LeafOf(RangeIndex& index, Context& context, std::string_view key) {
  auto& tree = static_cast<BTreeImpl&>(index);
  auto& ctx = ContextImpl::From(context);
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint8_t*> buffer = tree.NodeBuffer(ctx);
  if (!buffer.ok()) return 0;
  const StatusOr<RemoteAddress> leaf = tree.Descend(ctx, key, 0, *buffer, false);
  return leaf.ok() ? leaf->raw() : 0;
}

Status BTreeTestPeer::InsertSeparatorLate(RangeIndex& index, Context& context, uint8_t level,
                                          std::string_view key, uint64_t right) {
  auto& tree = static_cast<BTreeImpl&>(index);
  return tree.InsertSeparator(ContextImpl::From(context), level, std::string(key),
                              RemoteAddress::FromRaw(right));
}

void BTreeTestPeer::BeforeRootSwap(Context& context, uint64_t old_root,
                                   std::function<void()> stall) {
  auto& ctx = ContextImpl::From(context);
  if (!stall) {
    ctx.SetPostHookForTesting({});
    ctx.RecordPostsForTesting(nullptr);
    return;
  }
  // The hook owns the record (posts must be recorded for it to run).
  auto posted = std::make_shared<std::vector<Op>>();
  ctx.RecordPostsForTesting(posted.get());
  ctx.SetPostHookForTesting(
      [posted, old_root, stall = std::move(stall), fired = false](std::span<const Op> ops) mutable {
        posted->clear();
        for (const Op& op : ops) {
          if (!fired && op.code == fabric::OpCode::kCompareSwap && op.compare == old_root) {
            fired = true;
            stall();
          }
        }
      });
}

}  // namespace dmidx::btree
