// IndexBulkLoadSuite: bulk loads of every size, fill factor and key size
// into every index, then ordinary writes on the loaded index; bad input and
// non-empty indexes refused without a change.
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "testing/index_factory.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/watchdog.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

bool IsFailedPrecondition(const Status& status) {
  return status.code() == StatusCode::kFailedPrecondition;
}

struct LoadParam {
  uint32_t key_bytes;
  double fill_factor;
};

// Sizes 0, 1, one full leaf, one more than a leaf, and many levels; then
// ordinary inserts (splitting loaded leaves) and deletes on the loaded tree.
void LoadEverySize(const IndexRow& row, const LoadParam& param) {
  const uint32_t kb = param.key_bytes;
  const uint32_t slots = row.leaf_capacity(kb);
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  // Its redo-record slots made: no load's bytes count their making.
  testing::PrepareRedoSlots(*client, ctx.get());
  std::map<uint64_t, uint64_t> load_bytes;  // bytes a load of that size wrote
  // (A set: with a leaf per key, as in a radix tree, one leaf's worth is 1.)
  for (const uint64_t size : std::set<uint64_t>{0, 1, slots, uint64_t{slots} + 1, 2000}) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto tree =
        OpenIndexOrFail(row, client.get(), "load" + std::to_string(size), {.key_bytes = kb});
    ASSERT_NE(tree, nullptr);
    ASSERT_EQ(tree->key_bytes(), kb);
    // Keys 10, 20, ...: room for inserts before, between and after them.
    Model model;
    std::vector<KeyValue> load;
    for (uint64_t i = 0; i < size; ++i) {
      const uint64_t key = (i + 1) * 10;
      load.push_back({Key(key, kb), i * 3});  // the first value is 0
      model[key] = i * 3;
    }
    const Status loaded = tree->BulkLoad(*ctx, load, param.fill_factor);
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    load_bytes[size] = tree->stats()[IndexOp::kBulkLoad].bytes_written;
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model, kb));
    uint64_t value = 0;
    EXPECT_TRUE(tree->Lookup(*ctx, Key(5, kb), &value).IsNotFound());
    EXPECT_TRUE(tree->Lookup(*ctx, Key(size * 10 + 5, kb), &value).IsNotFound());
    std::vector<KeyValue> out;
    ASSERT_TRUE(tree->Scan(*ctx, Key(15, kb), Key(55, kb), &out).ok());
    EXPECT_TRUE(SameScan(out, ModelRange(model, 15, 55, kb)));
    ASSERT_TRUE(tree->Scan(*ctx, Key(size * 5, kb), 7, &out).ok());
    EXPECT_TRUE(SameScan(out, ModelCount(model, size * 5, 7, kb)));
    // A second load of a non-empty tree is refused.
    if (size > 0) {
      const std::vector<KeyValue> more{{Key(size * 10 + 10, kb), 1}};
      EXPECT_TRUE(IsFailedPrecondition(tree->BulkLoad(*ctx, more, param.fill_factor)));
    }

    // Inserts between loaded keys (full loaded leaves split at fill 1.0),
    // at both ends, updates and deletes.
    std::mt19937_64 rng(size * 31 + kb);
    for (uint64_t i = 0; i <= size; ++i) {
      if (size > 100 && i % 3 != 0) continue;
      for (uint64_t j = 1; j <= (size > 100 ? 2 : 4); ++j) {
        const uint64_t key = i * 10 + j;
        const uint64_t written = rng();
        ASSERT_TRUE(tree->Insert(*ctx, Key(key, kb), written).ok()) << key;
        model[key] = written;
      }
    }
    ASSERT_TRUE(tree->Insert(*ctx, Key(0, kb), 0).ok());
    model[0] = 0;
    ASSERT_TRUE(tree->Insert(*ctx, Key(kMaxKey, kb), 9).ok());
    model[kMaxKey] = 9;
    for (uint64_t i = 0; i < size; i += 2) {
      const uint64_t key = (i + 1) * 10;
      ASSERT_TRUE(tree->Update(*ctx, Key(key, kb), key + 1).ok()) << key;
      model[key] = key + 1;
    }
    for (uint64_t i = 0; i < size; i += 3) {
      const uint64_t key = (i + 1) * 10;
      ASSERT_TRUE(tree->Delete(*ctx, Key(key, kb)).ok()) << key;
      model.erase(key);
      EXPECT_TRUE(tree->Delete(*ctx, Key(key, kb)).IsNotFound()) << key;
      EXPECT_TRUE(tree->Update(*ctx, Key(key, kb), 1).IsNotFound()) << key;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model, kb));
    EXPECT_EQ(tree->stats()[IndexOp::kBulkLoad].operations, size > 0 ? 2u : 1u);
  }
  // More keys, never fewer nodes; at fill 1.0 a leaf's worth of keys is one
  // leaf, as a single key is, and one more key needs more.
  EXPECT_GE(load_bytes[slots], load_bytes[1]);
  EXPECT_GE(load_bytes[slots + 1], load_bytes[slots]);
  EXPECT_GT(load_bytes[2000], load_bytes[slots + 1]);
  if (param.fill_factor == 1.0) {
    EXPECT_EQ(load_bytes[slots], load_bytes[1]);
    EXPECT_GT(load_bytes[slots + 1], load_bytes[slots]);
  }
}

TEST_P(IndexBulkLoadSuite, EverythingFoundThenOrdinaryWritesWorkWithEightByteKeys) {
  Watchdog watchdog(std::chrono::seconds(600));
  for (const double fill : {0.1, 0.5, 1.0}) {
    SCOPED_TRACE("fill " + std::to_string(fill));
    ASSERT_NO_FATAL_FAILURE(LoadEverySize(GetParam(), {8, fill}));
  }
}

TEST_P(IndexBulkLoadSuite, EverythingFoundThenOrdinaryWritesWorkWithSixteenByteKeys) {
  Watchdog watchdog(std::chrono::seconds(600));
  for (const double fill : {0.1, 0.5, 1.0}) {
    SCOPED_TRACE("fill " + std::to_string(fill));
    ASSERT_NO_FATAL_FAILURE(LoadEverySize(GetParam(), {16, fill}));
  }
}

// Bad input is InvalidArgument and changes nothing; loading a non-empty tree
// is FailedPrecondition and changes nothing.
TEST_P(IndexBulkLoadSuite, RefusesBadInputAndNonEmptyIndexes) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  for (const uint32_t kb : {8u, 16u}) {
    SCOPED_TRACE("key bytes " + std::to_string(kb));
    auto tree =
        OpenIndexOrFail(GetParam(), client.get(), "bad" + std::to_string(kb), {.key_bytes = kb});
    ASSERT_NE(tree, nullptr);
    std::vector<KeyValue> good;
    for (uint64_t i = 1; i <= 500; ++i)
      good.push_back({Key(i * 2, kb), i});
    uint64_t calls = 0;

    std::vector<std::pair<std::string, std::vector<KeyValue>>> bad_inputs;
    bad_inputs.push_back({"unsorted", {{Key(2, kb), 1}, {Key(1, kb), 2}, {Key(3, kb), 3}}});
    bad_inputs.push_back({"unsorted at the end", good});
    bad_inputs.back().second.push_back({Key(5, kb), 5});
    bad_inputs.push_back({"duplicate", {{Key(1, kb), 1}, {Key(1, kb), 2}, {Key(3, kb), 3}}});
    bad_inputs.push_back({"duplicate at the end", good});
    bad_inputs.back().second.push_back(good.back());
    bad_inputs.push_back({"short key", {{Key(1, kb), 1}, {Key(2, kb).substr(1), 2}}});
    bad_inputs.push_back({"long key", {{Key(1, kb), 1}, {Key(2, kb) + "x", 2}}});
    bad_inputs.push_back({"empty key", {{"", 1}}});
    bad_inputs.push_back({"wrong key size at the end", good});
    bad_inputs.back().second.push_back({Key(5000, kb == 8 ? 16 : 8), 5});
    for (const auto& [what, input] : bad_inputs) {
      const Status status = tree->BulkLoad(*ctx, input, 0.5);
      ++calls;
      EXPECT_TRUE(status.IsInvalidArgument()) << what << ": " << status.ToString();
    }
    for (const double fill :
         {0.0, -0.0, -0.5, -1.0, 1.0000001, 2.0, std::numeric_limits<double>::quiet_NaN(),
          std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
      const Status status = tree->BulkLoad(*ctx, good, fill);
      ++calls;
      EXPECT_TRUE(status.IsInvalidArgument())
          << "fill factor " << fill << ": " << status.ToString();
    }
    // Nothing changed: the tree is empty and still takes a load.
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, {}, kb));
    uint64_t value = 0;
    EXPECT_TRUE(tree->Lookup(*ctx, Key(2, kb), &value).IsNotFound());
    EXPECT_TRUE(tree->Lookup(*ctx, Key(1000, kb), &value).IsNotFound());
    ASSERT_TRUE(tree->BulkLoad(*ctx, good, 1.0).ok());
    ++calls;
    Model model;
    for (uint64_t i = 1; i <= 500; ++i)
      model[i * 2] = i;
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model, kb));

    // Loaded: a second load is FailedPrecondition and changes nothing.
    const std::vector<KeyValue> other{{Key(1, kb), 11}, {Key(3, kb), 33}, {Key(5000, kb), 55}};
    EXPECT_TRUE(IsFailedPrecondition(tree->BulkLoad(*ctx, other, 0.5)));
    ++calls;
    // Bad input to a non-empty tree is refused too (either reason will do).
    const Status both = tree->BulkLoad(*ctx, other, 0.0);
    ++calls;
    EXPECT_TRUE(both.IsInvalidArgument() || IsFailedPrecondition(both)) << both.ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model, kb));

    // One Insert makes a fresh tree non-empty.
    auto inserted =
        OpenIndexOrFail(GetParam(), client.get(), "ins" + std::to_string(kb), {.key_bytes = kb});
    ASSERT_NE(inserted, nullptr);
    ASSERT_TRUE(inserted->Insert(*ctx, Key(4, kb), 40).ok());
    EXPECT_TRUE(IsFailedPrecondition(inserted->BulkLoad(*ctx, good, 0.5)));
    EXPECT_TRUE(IsFailedPrecondition(inserted->BulkLoad(*ctx, other, 1.0)));
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*inserted, *ctx, {{4, 40}}, kb));
    EXPECT_EQ(inserted->stats()[IndexOp::kBulkLoad].operations, 2u);
    EXPECT_EQ(tree->stats()[IndexOp::kBulkLoad].operations, calls);
  }
}

// "Loads `sorted` into the index, which must be empty ... a non-empty index
// is FailedPrecondition": also when `sorted` is empty.
TEST_P(IndexBulkLoadSuite, LoadOfNothingIntoANonEmptyIndexIsFailedPrecondition) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  auto tree = OpenIndexOrFail(GetParam(), client.get(), "nothing");
  ASSERT_NE(tree, nullptr);
  EXPECT_TRUE(tree->BulkLoad(*ctx, {}, 0.5).ok());  // empty into empty: fine
  ASSERT_TRUE(tree->Insert(*ctx, Key(4), 40).ok());
  const Status status = tree->BulkLoad(*ctx, {}, 0.5);
  EXPECT_TRUE(IsFailedPrecondition(status)) << status.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, {{4, 40}}));
}

// The smallest valid fill factors still put at least one key in a leaf and
// two children in an internal node.
TEST_P(IndexBulkLoadSuite, TinyFillFactorsAreValid) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  int i = 0;
  for (const double fill : {std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::min(), 1e-9, 0.01}) {
    SCOPED_TRACE("fill " + std::to_string(fill));
    auto tree = OpenIndexOrFail(GetParam(), client.get(), "tiny" + std::to_string(i++));
    ASSERT_NE(tree, nullptr);
    Model model;
    std::vector<KeyValue> load;
    for (uint64_t key = 1; key <= 300; ++key) {
      load.push_back({Key(key * 2), key});
      model[key * 2] = key;
    }
    const Status status = tree->BulkLoad(*ctx, load, fill);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model));
    for (uint64_t key = 1; key <= 601; key += 4) {
      ASSERT_TRUE(tree->Insert(*ctx, Key(key), key).ok()) << key;
      model[key] = key;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model));
  }
}

}  // namespace
}  // namespace dmidx::testing
