// IndexCostSuite: what single operations cost on a warm index with default
// node sizes (one context, no contention), for rows whose costs are fixed
// numbers (IndexRow::warm); rows without are skipped.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "dmidx/stats.h"
#include "testing/index_factory.h"
#include "testing/local_cluster.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

// Warm, no contention: a lookup, an insert of a present key, an update and
// a delete (no split), and scans of 50 keys in either form cost the row's
// round trips; the insert writes only the row's bytes.
TEST_P(IndexCostSuite, WarmSingleOperationsCostTheirFloor) {
  const IndexRow& row = GetParam();
  if (!row.warm) GTEST_SKIP() << row.name << ": costs depend on the index's depth";
  const WarmCosts& warm = *row.warm;
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto tree = OpenIndexOrFail(row, client.get(), "rt", {.small_nodes = false});
  ASSERT_NE(tree, nullptr);
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  for (uint64_t key = 0; key < 2000; ++key) {  // a few levels, cache warmed
    ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(key * 2), key).ok());
  }
  uint64_t value;
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(1000), &value).ok());
  Stats before = context->stats();
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(1000), &value).ok());
  EXPECT_EQ((context->stats() - before).round_trips, warm.lookup_round_trips);
  // An update of a present key: no split.
  before = context->stats();
  ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(1000), 99).ok());
  const Stats used = context->stats() - before;
  EXPECT_EQ(used.round_trips, warm.write_round_trips);
  EXPECT_EQ(used.bytes_written, warm.write_bytes);
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(1000), &value).ok());
  EXPECT_EQ(value, 99u);
  // Delete and update of a present key: the same round trips.
  for (int which = 0; which < 2; ++which) {
    before = context->stats();
    ASSERT_TRUE((which == 0 ? tree->Update(*context, EncodeUint64Key(1002), 5)
                            : tree->Delete(*context, EncodeUint64Key(1002)))
                    .ok());
    EXPECT_EQ((context->stats() - before).round_trips, warm.write_round_trips);
  }
  EXPECT_TRUE(tree->Lookup(*context, EncodeUint64Key(1002), &value).IsNotFound());
  EXPECT_TRUE(tree->Update(*context, EncodeUint64Key(1002), 1).IsNotFound());
  // Scans of 50 neighbouring keys.
  std::vector<KeyValue> page;
  for (uint64_t from : {0u, 1000u, 2500u, 3900u}) {
    before = context->stats();
    ASSERT_TRUE(
        tree->Scan(*context, EncodeUint64Key(from), EncodeUint64Key(from + 99), &page).ok());
    EXPECT_EQ(page.size(), from == 1000 ? 49u : 50u);  // 1002 is gone
    if (warm.scan_round_trips) {
      EXPECT_EQ((context->stats() - before).round_trips, *warm.scan_round_trips) << from;
    }
    // The count form too, from anywhere in a leaf.
    for (uint64_t start = from; start < from + 60; start += 2) {
      before = context->stats();
      ASSERT_TRUE(tree->Scan(*context, EncodeUint64Key(start), 50, &page).ok());
      ASSERT_EQ(page.size(), std::min<uint64_t>(50, (3998 - start) / 2 + 1));  // keys 0..3998
      if (warm.scan_round_trips) {
        EXPECT_EQ((context->stats() - before).round_trips, *warm.scan_round_trips) << start;
      }
    }
  }
  EXPECT_TRUE(tree->Delete(*context, EncodeUint64Key(1002)).IsNotFound());
}

}  // namespace
}  // namespace dmidx::testing
