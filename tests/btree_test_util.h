// Helpers of the B+tree-only suites: trees with small nodes (many splits,
// several levels from few keys), and a walk of a tree's remote structure.
// Clusters and clients: testing/local_cluster.h.
#ifndef DMIDX_TESTS_BTREE_TEST_UTIL_H_
#define DMIDX_TESTS_BTREE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/index.h"

namespace dmidx::testing {

// 256-byte nodes: 13 entries a leaf with 8-byte keys, so a few thousand
// keys make several levels.
inline constexpr uint32_t kSmallNodeBytes = 256;
inline BTreeOptions SmallNodes(uint32_t key_bytes = 8) {
  BTreeOptions options;
  options.node_bytes = kSmallNodeBytes;
  options.key_bytes = key_bytes;
  return options;
}

}  // namespace dmidx::testing

namespace dmidx::btree {

class BTreeTestPeer {
 public:
  // Walks `index` (a B+tree) level by level from its root with `ctx`'s
  // compute node, and returns the invariants of docs/btree.md that a tree
  // with no change in flight breaks (empty: none): every node passes its
  // checksum and its lock word is free; each level is one sibling chain
  // from the lowest key to the highest, fences meeting; keys ascend within
  // their node's fences; every child a parent names is in the chain below,
  // in order, with the separator as its low fence (the chain may hold more:
  // a split whose separator is not up yet, as a B-link tree allows).
  // A lock word held by one of the compute nodes `dead` (ids) is what it
  // left for the next waiter (which frees it once the node is recovered),
  // not an error.
  // A dead node (merged away) named by a parent or in a chain is an error;
  // a dead root the descriptor still names (a collapse whose CAS has not
  // landed) is followed to the node it collapsed into.
  static std::vector<std::string> Walk(RangeIndex& index, Context& ctx,
                                       std::span<const uint32_t> dead = {});
  // The nodes of each level's chain, from the root's level down to the
  // leaves (its size is the tree's height); empty if the walk found any
  // error (a test asserts Walk first).
  static std::vector<size_t> LevelSizes(RangeIndex& index, Context& ctx);
  // Of the handle `index`: nodes merged away, roots collapsed, and nodes
  // given to RetireNode.
  static uint64_t Merges(RangeIndex& index);
  static uint64_t RootCollapses(RangeIndex& index);
  static uint64_t RetiredNodes(RangeIndex& index);
  // The root the tree's descriptor names now (one READ with `ctx`'s
  // compute node; 0 on an error).
  static uint64_t DescriptorRoot(RangeIndex& index, Context& ctx);
  // The handle's root hint and the epoch it was learned in (root 0: no
  // hint, the next descent asks the descriptor).
  struct RootHint {
    uint64_t root = 0;
    uint64_t epoch = 0;
  };
  static RootHint RootHintOf(RangeIndex& index);
  // The raw address of the leaf covering `key` (a descent from the root,
  // no cache); 0 on an error.
  static uint64_t LeafOf(RangeIndex& index, Context& ctx, std::string_view key);
  // Replays the last step of a split whose separator insert ran late:
  // BTreeImpl::InsertSeparator(level, key, right) as the splitter calls
  // it once its halves are written.
  static Status InsertSeparatorLate(RangeIndex& index, Context& ctx, uint8_t level,
                                    std::string_view key, uint64_t right);
  // Calls `stall` once, on `ctx`'s coroutine, when `ctx` is about to post
  // a CAS that moves the tree's root away from `old_root` (the publish of a
  // root growth or a collapse: a CAS comparing with that address), before
  // the fabric sees it: a compute node that stalls right before its CAS.
  // An empty `stall` takes the hook off.
  static void BeforeRootSwap(Context& ctx, uint64_t old_root, std::function<void()> stall);

 private:
  // Walk, also counting each level's nodes into *sizes.
  static std::vector<std::string> WalkCounting(RangeIndex& index, Context& ctx,
                                               std::span<const uint32_t> dead,
                                               std::vector<size_t>* sizes);
};

}  // namespace dmidx::btree

#endif  // DMIDX_TESTS_BTREE_TEST_UTIL_H_
