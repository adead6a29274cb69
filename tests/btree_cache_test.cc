// The B+tree index cache: routes like the cached nodes, prefers the lowest
// level, never keeps two answers for one range, stays within its byte
// budget (LRU), and is safe to share between threads.
#include "btree/btree_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "dmidx/keys.h"

namespace dmidx::btree {
namespace {

// The epoch table the caches register with (nothing asks it here).
runtime::EpochTable& TestEpochs() {
  static runtime::EpochTable table;
  return table;
}

// Where lookups hold the epochs of the entries they use (an operation's
// ContextImpl::cache_slot).
std::atomic<uint64_t> held{runtime::kUnpinned};

using fabric::RemoteAddress;

NodeShape Shape() {
  return *NodeShape::Make(512, 8);
}

// An internal node image over [low, high) with separators every `step`.
std::vector<uint64_t> Internal(uint8_t level, uint64_t low, uint64_t high, uint64_t step,
                               uint16_t tag, bool low_min = false, bool high_max = false) {
  const NodeShape shape = Shape();
  std::vector<uint64_t> words(shape.node_bytes() / 8);
  NodeView node(shape, reinterpret_cast<uint8_t*>(words.data()));
  node.InitInternal(level, low_min ? "" : EncodeUint64Key(low),
                    high_max ? "" : EncodeUint64Key(high), RemoteAddress(),
                    RemoteAddress::Pool(tag, 1 << 20));
  for (uint64_t k = low + step, i = 1; k < high && i < shape.internal_slots(); k += step, ++i) {
    EXPECT_TRUE(
        node.InsertSeparator(EncodeUint64Key(k), RemoteAddress::Pool(tag, (1 << 20) + 4096 * i)));
  }
  node.Seal();
  return words;
}

const uint8_t* Bytes(const std::vector<uint64_t>& words) {
  return reinterpret_cast<const uint8_t*>(words.data());
}

// Review (issue 27): an entry dropped while an operation still follows an
// address it routed to let the cache floor rise past the entry's epoch.
// The lookup holds the entry's epoch in the operation's slot, under the
// cache's lock, before anything can drop it.
TEST(BTreeCacheTest, ALookupHoldsTheEpochOfTheEntryItUses) {
  BTreeCache cache(Shape(), 1 << 20, TestEpochs());
  const auto root = Internal(2, 0, 0, 1000, 1, /*low_min=*/true, /*high_max=*/true);
  const auto left = Internal(1, 0, 500, 100, 2, /*low_min=*/true);
  cache.Put(RemoteAddress::Pool(0, 4096), Bytes(root), /*epoch=*/7);
  cache.Put(RemoteAddress::Pool(0, 8192), Bytes(left), /*epoch=*/5);
  std::atomic<uint64_t> slot{runtime::kUnpinned};
  ASSERT_TRUE(cache.Find(EncodeUint64Key(700), slot).has_value());
  EXPECT_EQ(slot.load(), 7u);
  ASSERT_TRUE(cache.Find(EncodeUint64Key(100), slot).has_value());
  EXPECT_EQ(slot.load(), 5u);
  ASSERT_TRUE(cache.Find(EncodeUint64Key(700), slot).has_value());
  EXPECT_EQ(slot.load(), 5u) << "the oldest entry used is held";
  std::pmr::vector<RemoteAddress> leaves;
  std::atomic<uint64_t> scan_slot{runtime::kUnpinned};
  cache.LeavesFrom(EncodeUint64Key(100), "", 4, &leaves, scan_slot);
  EXPECT_FALSE(leaves.empty());
  EXPECT_EQ(scan_slot.load(), 5u);
}

TEST(BTreeCacheTest, RoutesLikeTheCachedNodeAndPrefersTheLowestLevel) {
  BTreeCache cache(Shape(), 1 << 20, TestEpochs());
  const auto root = Internal(2, 0, 0, 1000, 1, /*low_min=*/true, /*high_max=*/true);
  const auto left = Internal(1, 0, 500, 100, 2, /*low_min=*/true);
  cache.Put(RemoteAddress::Pool(0, 4096), Bytes(root), /*epoch=*/0);
  cache.Put(RemoteAddress::Pool(0, 8192), Bytes(left), /*epoch=*/0);
  auto copy = left;
  const NodeView left_view(Shape(), reinterpret_cast<uint8_t*>(copy.data()));
  for (uint64_t key : {0ull, 99ull, 100ull, 250ull, 499ull}) {
    auto route = cache.Find(EncodeUint64Key(key), held);
    ASSERT_TRUE(route.has_value()) << key;
    EXPECT_EQ(route->level, 1);
    EXPECT_EQ(route->node, RemoteAddress::Pool(0, 8192));
    EXPECT_EQ(route->child, left_view.FindChild(EncodeUint64Key(key)));
  }
  auto high = cache.Find(EncodeUint64Key(700), held);  // only the root covers it
  ASSERT_TRUE(high.has_value());
  EXPECT_EQ(high->level, 2);
  EXPECT_EQ(cache.stats().hits, 6u);
}

TEST(BTreeCacheTest, LeavesAreNotCachedAndMissesCount) {
  BTreeCache cache(Shape(), 1 << 20, TestEpochs());
  const NodeShape shape = Shape();
  std::vector<uint64_t> leaf(shape.node_bytes() / 8);
  NodeView(shape, reinterpret_cast<uint8_t*>(leaf.data())).InitLeaf("", "", RemoteAddress());
  cache.Put(RemoteAddress::Pool(0, 4096), Bytes(leaf), /*epoch=*/0);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_FALSE(cache.Find(EncodeUint64Key(1), held).has_value());
  EXPECT_EQ(cache.stats().misses, 1u);
}

// After a split the node's new, narrower image replaces the old one, and
// the new sibling covers the rest: no key is answered from the old shape.
TEST(BTreeCacheTest, NewerImageReplacesOverlappingEntries) {
  BTreeCache cache(Shape(), 1 << 20, TestEpochs());
  cache.Put(RemoteAddress::Pool(0, 4096), Bytes(Internal(1, 0, 1000, 100, 1, true)), /*epoch=*/0);
  cache.Put(RemoteAddress::Pool(0, 4096), Bytes(Internal(1, 0, 500, 100, 2, true)), /*epoch=*/0);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_FALSE(cache.Find(EncodeUint64Key(700), held).has_value()) << "old shape answered";
  cache.Put(RemoteAddress::Pool(0, 8192), Bytes(Internal(1, 500, 1000, 100, 3)), /*epoch=*/0);
  auto right = cache.Find(EncodeUint64Key(700), held);
  ASSERT_TRUE(right.has_value());
  EXPECT_EQ(right->node, RemoteAddress::Pool(0, 8192));
  // A different node whose range overlaps both drops both.
  cache.Put(RemoteAddress::Pool(0, 12288), Bytes(Internal(1, 400, 600, 50, 4)), /*epoch=*/0);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_FALSE(cache.Find(EncodeUint64Key(100), held).has_value());
  EXPECT_EQ(cache.Find(EncodeUint64Key(450), held)->node, RemoteAddress::Pool(0, 12288));
}

TEST(BTreeCacheTest, StaysWithinBudgetEvictingTheLeastRecentlyUsed) {
  const size_t per_entry = Shape().node_bytes() + cache::RangeCache::kEntryOverheadBytes;
  BTreeCache cache(Shape(), 3 * per_entry, TestEpochs());
  for (uint64_t i = 0; i < 3; ++i) {
    cache.Put(RemoteAddress::Pool(0, 4096 * (i + 1)),
              Bytes(Internal(1, i * 100, i * 100 + 100, 10, 1)), /*epoch=*/0);
  }
  ASSERT_TRUE(cache.Find(EncodeUint64Key(5), held).has_value());  // touch the first
  cache.Put(RemoteAddress::Pool(0, 4096 * 4), Bytes(Internal(1, 300, 400, 10, 1)), /*epoch=*/0);
  const cache::RangeCacheStats stats = cache.stats();
  EXPECT_EQ(stats.entries, 3u);
  EXPECT_LE(stats.bytes, 3 * per_entry);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_TRUE(cache.Find(EncodeUint64Key(5), held).has_value());     // recently used: kept
  EXPECT_FALSE(cache.Find(EncodeUint64Key(105), held).has_value());  // least recent: evicted
  EXPECT_TRUE(cache.Find(EncodeUint64Key(350), held).has_value());
  BTreeCache none(Shape(), per_entry - 1, TestEpochs());
  none.Put(RemoteAddress::Pool(0, 4096), Bytes(Internal(1, 0, 100, 10, 1)), /*epoch=*/0);
  EXPECT_EQ(none.stats().entries, 0u);
}

TEST(BTreeCacheTest, InvalidateDropsTheEntry) {
  BTreeCache cache(Shape(), 1 << 20, TestEpochs());
  cache.Put(RemoteAddress::Pool(0, 4096), Bytes(Internal(1, 0, 100, 10, 1, true)), /*epoch=*/0);
  cache.Invalidate(RemoteAddress::Pool(0, 4096));
  cache.Invalidate(RemoteAddress::Pool(0, 4096));  // absent: no effect
  EXPECT_FALSE(cache.Find(EncodeUint64Key(5), held).has_value());
  EXPECT_EQ(cache.stats().invalidations, 1u);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

// Threads putting, finding and invalidating at once: every route returned
// comes from a node that covers the key (each node's children are tagged
// with the node's range), and the budget holds throughout.
TEST(BTreeCacheTest, SharedBetweenThreads) {
  const size_t per_entry = Shape().node_bytes() + cache::RangeCache::kEntryOverheadBytes;
  BTreeCache cache(Shape(), 20 * per_entry, TestEpochs());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 3000; ++i) {
        const uint64_t slot = rng() % 40;  // node covering [slot*100, slot*100+100)
        const RemoteAddress address = RemoteAddress::Pool(0, 4096 * (slot + 1));
        switch (rng() % 4) {
          case 0:
            cache.Put(address,
                      Bytes(Internal(1, slot * 100, slot * 100 + 100, 10,
                                     static_cast<uint16_t>(slot + 1))),
                      /*epoch=*/0);
            break;
          case 1:
            cache.Invalidate(address);
            break;
          default: {
            const uint64_t key = slot * 100 + rng() % 100;
            if (auto route = cache.Find(EncodeUint64Key(key), held)) {
              wrong += route->child.node() != slot + 1 || route->node != address;
            }
          }
        }
        if (cache.stats().bytes > 20 * per_entry) ++wrong;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace dmidx::btree
