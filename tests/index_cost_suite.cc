// IndexCostSuite: what single operations cost on a warm index with default
// node sizes (one context, no contention), for rows whose costs are fixed
// numbers (IndexRow::warm); rows without are skipped.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "dmidx/stats.h"
#include "lib/runtime/context.h"
#include "testing/index_factory.h"
#include "testing/local_cluster.h"
#include "tests/allocation_counter.h"
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
  // Its redo-record slots made: the write counted is the write alone.
  testing::PrepareRedoSlots(*client, context.get());
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

// Warm, no contention: point operations make no heap allocation, on any
// row (every technique or none), and neither do scans into a page that
// already has room. Counted process-wide (tests/allocation_counter.h); a
// blocking context on the local fabric runs no other thread.
TEST_P(IndexCostSuite, WarmOperationsAllocateNothing) {
  const IndexRow& row = GetParam();
  // Leases long enough that no epoch moves during the test: what the
  // measured operations retire is not freed meanwhile (a free may push a
  // bundle to the shared lists, which is reclamation's work, not the
  // operation's; under a sanitizer the test is slow enough to see one).
  ClusterOptions options = SmallLocalCluster(2, 64 << 20, false, std::chrono::microseconds(10));
  options.lease.period = std::chrono::seconds(60);
  options.lease.timeout = std::chrono::seconds(120);
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
  auto client = NewClient(*cluster);
  auto tree = OpenIndexOrFail(row, client.get(), "alloc", {.small_nodes = false});
  ASSERT_NE(tree, nullptr);
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  constexpr uint64_t kKeys = 2000;
  std::vector<std::string> keys;  // made before the meters run
  for (uint64_t key = 0; key < 2 * kKeys; ++key)
    keys.push_back(EncodeUint64Key(key));
  // Even keys present; each updated once, so every leaf's lock word has its
  // compute-node table entry and every cache is warm; odd keys looked up
  // once (the first NotFound makes the index's constant status).
  for (uint64_t key = 0; key < kKeys; ++key)
    ASSERT_TRUE(tree->Insert(*context, keys[2 * key], key).ok());
  uint64_t value = 0;
  for (uint64_t key = 0; key < kKeys; ++key) {
    ASSERT_TRUE(tree->Lookup(*context, keys[2 * key], &value).ok());
    ASSERT_TRUE(tree->Update(*context, keys[2 * key], key).ok());
    ASSERT_TRUE(tree->Lookup(*context, keys[2 * key + 1], &value).IsNotFound());
  }
  std::vector<KeyValue> page;
  page.reserve(64);
  // Scans once over the range the measured ones cover: the context's pools
  // reach their working size. 8-byte keys need no key buffers.
  for (uint64_t key = 0; key < 2 * kKeys - 200; key += 97) {
    ASSERT_TRUE(tree->Scan(*context, keys[key], 50, &page).ok());
    ASSERT_TRUE(tree->Scan(*context, keys[key], keys[key + 99], &page).ok());
  }

  // Room for what the measured deletes and out-of-place updates retire:
  // no grace period ends in this short a test (an engine's list stops
  // growing once it holds a grace period's worth).
  runtime::ContextImpl::From(*context).worker().retired().Reserve(4 * kKeys);

  // Each kind alone, so a failure names it.
  auto count = [&](const char* what, auto&& body) {
    const testing_support::AllocationMeter meter;
    body();
    EXPECT_EQ(meter.allocations(), 0u) << row.name << ": heap allocations in warm " << what;
  };
  count("lookups", [&] {
    for (uint64_t key = 0; key < 2 * kKeys; key += 3) {  // present and absent keys
      const Status status = tree->Lookup(*context, keys[key], &value);
      ASSERT_TRUE(status.ok() || status.IsNotFound()) << status.ToString();
    }
  });
  count("updates", [&] {
    for (uint64_t key = 0; key < kKeys; key += 3)
      ASSERT_TRUE(tree->Update(*context, keys[2 * key], key + 1).ok());
  });
  count("updates of absent keys", [&] {
    for (uint64_t key = 1; key < 2 * kKeys; key += 6)
      ASSERT_TRUE(tree->Update(*context, keys[key], 1).IsNotFound());
  });
  count("inserts of present keys", [&] {
    for (uint64_t key = 0; key < kKeys; key += 5)
      ASSERT_TRUE(tree->Insert(*context, keys[2 * key], key).ok());
  });
  count("deletes and inserts of absent keys", [&] {
    for (uint64_t key = 0; key < kKeys; key += 7) {
      ASSERT_TRUE(tree->Delete(*context, keys[2 * key]).ok());
      ASSERT_TRUE(tree->Insert(*context, keys[2 * key], key).ok());
    }
  });
  count("scans (count form)", [&] {
    for (uint64_t key = 0; key < 2 * kKeys - 200; key += 97)
      ASSERT_TRUE(tree->Scan(*context, keys[key], 50, &page).ok());
  });
  count("scans (range form)", [&] {
    for (uint64_t key = 0; key < 2 * kKeys - 200; key += 97)
      ASSERT_TRUE(tree->Scan(*context, keys[key], keys[key + 99], &page).ok());
  });
}

}  // namespace
}  // namespace dmidx::testing
