// The B+tree against std::map models, through the RangeIndex interface: a
// 100k-op sequential model check with scans and deletes on 256-byte nodes
// (several levels) that starts from a bulk load; bulk load at several fill
// factors, sizes and key sizes, its argument checks, and a second compute
// node using a tree another one loaded; scan edge cases; Close; and every
// operation called from Client::Run coroutines.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "tests/btree_test_util.h"
#include "tests/test_util.h"

namespace dmidx {
namespace {

using testing_util::kSmallNodeBytes;
using testing_util::NewClient;
using testing_util::OpenCluster;
using testing_util::SmallNodes;
using testing_util::Watchdog;

constexpr uint64_t kMaxKey = std::numeric_limits<uint64_t>::max();

// Entries of one leaf (docs/btree.md layout): header = 32 + 2 key strides,
// entry = stride + 8, at most 64. 13 for 8-byte keys in 256-byte nodes, 8 for
// 16-byte keys.
uint32_t LeafSlots(uint32_t node_bytes, uint32_t key_bytes) {
  const uint32_t stride = (key_bytes + 7) & ~7u;
  return std::min<uint32_t>(64, (node_bytes - 32 - 2 * stride) / (stride + 8));
}

using Model = std::map<uint64_t, uint64_t>;

std::string Key(uint64_t key, uint32_t key_bytes = 8) {
  return EncodeUint64Key(key, key_bytes);
}

std::vector<KeyValue> ModelRange(const Model& model, uint64_t from, uint64_t to,
                                 uint32_t key_bytes = 8) {
  std::vector<KeyValue> out;
  if (from > to) return out;
  for (auto it = model.lower_bound(from); it != model.end() && it->first <= to; ++it) {
    out.push_back({Key(it->first, key_bytes), it->second});
  }
  return out;
}

std::vector<KeyValue> ModelCount(const Model& model, uint64_t from, size_t count,
                                 uint32_t key_bytes = 8) {
  std::vector<KeyValue> out;
  for (auto it = model.lower_bound(from); it != model.end() && out.size() < count; ++it) {
    out.push_back({Key(it->first, key_bytes), it->second});
  }
  return out;
}

std::vector<KeyValue> Pairs(const Model& model, uint32_t key_bytes = 8) {
  return ModelRange(model, 0, kMaxKey, key_bytes);
}

std::string Describe(const KeyValue& pair) {
  return std::to_string(DecodeUint64Key(pair.key)) + "(" + std::to_string(pair.key.size()) +
         "B)=" + std::to_string(pair.value);
}

// Equal scan results, or where they first differ.
::testing::AssertionResult SameScan(const std::vector<KeyValue>& got,
                                    const std::vector<KeyValue>& want) {
  const size_t common = std::min(got.size(), want.size());
  for (size_t i = 0; i < common; ++i) {
    if (!(got[i] == want[i])) {
      return ::testing::AssertionFailure()
             << "entry " << i << " is " << Describe(got[i]) << ", want " << Describe(want[i])
             << " (got " << got.size() << " entries, want " << want.size() << ")";
    }
  }
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "got " << got.size() << " entries, want " << want.size()
           << "; first extra: " << Describe(got.size() > want.size() ? got[common] : want[common]);
  }
  return ::testing::AssertionSuccess();
}

// Everything in `model` is found by Lookup and by a full Scan, nothing else.
void ExpectTreeMatches(BTree& tree, Context& ctx, const Model& model, uint32_t key_bytes = 8) {
  std::vector<KeyValue> out{{"junk", 1}};
  ASSERT_TRUE(tree.Scan(ctx, Key(0, key_bytes), Key(kMaxKey, key_bytes), &out).ok());
  ASSERT_TRUE(SameScan(out, Pairs(model, key_bytes)));
  ASSERT_TRUE(tree.Scan(ctx, Key(0, key_bytes), model.size() + 5, &out).ok());
  ASSERT_TRUE(SameScan(out, Pairs(model, key_bytes)));
  for (const auto& [key, value] : model) {
    uint64_t found = value + 1;
    const Status status = tree.Lookup(ctx, Key(key, key_bytes), &found);
    ASSERT_TRUE(status.ok()) << key << ": " << status.ToString();
    ASSERT_EQ(found, value) << key;
  }
}

bool IsFailedPrecondition(const Status& status) {
  return status.code() == StatusCode::kFailedPrecondition;
}

// ---------------------------------------------------------------------------
// 1. The 100k-op sequential model check.

struct ModelParam {
  const char* name;
  uint32_t key_bytes;
  bool baseline;       // every technique off (no cache: scans and lookups descend)
  uint64_t key_range;  // most keys are drawn from [0, key_range)
  uint64_t seed;
};

class BTreeModelCheck : public ::testing::TestWithParam<ModelParam> {};

uint64_t DrawKey(std::mt19937_64& rng, uint64_t range) {
  switch (rng() % 64) {
    case 0:
      return 0;
    case 1:
      return kMaxKey;
    case 2:
      return kMaxKey - 1 - rng() % 4;  // next to the maximum
    default:
      return rng() % range;
  }
}

// 100,000 random operations of every kind, each checked against the model
// (status, value, scan contents, order and length), on a tree that starts
// from a bulk load and splits up several levels.
TEST_P(BTreeModelCheck, HundredThousandMixedOpsMatchAModel) {
  Watchdog watchdog(std::chrono::seconds(600));
  const ModelParam param = GetParam();
  const uint32_t kb = param.key_bytes;
  auto key_of = [kb](uint64_t key) { return Key(key, kb); };
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  BTreeOptions options = param.baseline ? BTreeOptions::Baseline() : BTreeOptions();
  options.node_bytes = kSmallNodeBytes;
  options.key_bytes = kb;
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "model", options, &tree).ok());
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::mt19937_64 rng(param.seed);
  std::array<uint64_t, kIndexOpKinds> calls{};
  auto count = [&calls](IndexOp op) { ++calls[static_cast<size_t>(op)]; };

  // Start from a bulk load of a fifth of the key range (every 5th key) and
  // the maximum key; some values 0.
  Model model;
  std::vector<KeyValue> load;
  for (uint64_t key = 0; key < param.key_range; key += 5) {
    const uint64_t value = key % 7 == 0 ? 0 : rng();
    load.push_back({key_of(key), value});
    model[key] = value;
  }
  load.push_back({key_of(kMaxKey), 77});
  model[kMaxKey] = 77;
  ASSERT_TRUE(tree->BulkLoad(*ctx, load, 0.7).ok());
  count(IndexOp::kBulkLoad);
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model, kb));
  calls[static_cast<size_t>(IndexOp::kScan)] += 2;
  calls[static_cast<size_t>(IndexOp::kLookup)] += model.size();

  constexpr int kOps = 100000;
  std::vector<KeyValue> out;
  size_t longest_scan = 0;
  for (int step = 0; step < kOps; ++step) {
    const uint64_t key = DrawKey(rng, param.key_range);
    const uint64_t dice = rng() % 100;
    if (dice < 28) {
      const uint64_t value = rng() % 8 == 0 ? 0 : rng();
      const Status status = tree->Insert(*ctx, key_of(key), value);
      count(IndexOp::kInsert);
      ASSERT_TRUE(status.ok()) << step << " insert " << key << ": " << status.ToString();
      model[key] = value;
    } else if (dice < 43) {
      const uint64_t value = rng() % 8 == 0 ? 0 : rng();
      const Status status = tree->Update(*ctx, key_of(key), value);
      count(IndexOp::kUpdate);
      if (model.count(key)) {
        ASSERT_TRUE(status.ok()) << step << " update " << key << ": " << status.ToString();
        model[key] = value;
      } else {
        ASSERT_TRUE(status.IsNotFound()) << step << " update " << key << ": " << status.ToString();
      }
    } else if (dice < 60) {
      const Status status = tree->Delete(*ctx, key_of(key));
      count(IndexOp::kDelete);
      if (model.erase(key)) {
        ASSERT_TRUE(status.ok()) << step << " delete " << key << ": " << status.ToString();
      } else {
        ASSERT_TRUE(status.IsNotFound()) << step << " delete " << key << ": " << status.ToString();
      }
    } else if (dice < 85) {
      uint64_t value = 0xdeadbeef;
      const Status status = tree->Lookup(*ctx, key_of(key), &value);
      count(IndexOp::kLookup);
      auto it = model.find(key);
      if (it != model.end()) {
        ASSERT_TRUE(status.ok()) << step << " lookup " << key << ": " << status.ToString();
        ASSERT_EQ(value, it->second) << step << " lookup " << key;
      } else {
        ASSERT_TRUE(status.IsNotFound()) << step << " lookup " << key << ": " << status.ToString();
      }
    } else if (dice < 93) {
      // Scan(from, to): mostly short ranges; some with from > to.
      uint64_t to;
      if (rng() % 16 == 0) {
        to = key - std::min<uint64_t>(key, 1 + rng() % 40);  // from > to unless key == 0
      } else {
        const uint64_t width = rng() % 120;
        to = key > kMaxKey - width ? kMaxKey : key + width;
      }
      const Status status = tree->Scan(*ctx, key_of(key), key_of(to), &out);
      count(IndexOp::kScan);
      ASSERT_TRUE(status.ok()) << step << " scan " << key << ".." << to << ": "
                               << status.ToString();
      ASSERT_TRUE(SameScan(out, ModelRange(model, key, to, kb)))
          << step << " scan " << key << ".." << to;
      longest_scan = std::max(longest_scan, out.size());
    } else {
      const size_t n = rng() % 16 == 0 ? 0 : rng() % 30;
      const Status status = tree->Scan(*ctx, key_of(key), n, &out);
      count(IndexOp::kScan);
      ASSERT_TRUE(status.ok()) << step << " scan " << key << " count " << n << ": "
                               << status.ToString();
      ASSERT_TRUE(SameScan(out, ModelCount(model, key, n, kb)))
          << step << " scan " << key << " count " << n;
    }
    if (step % 25000 == 24999) {  // a full scan now and then
      ASSERT_TRUE(tree->Scan(*ctx, key_of(0), key_of(kMaxKey), &out).ok());
      count(IndexOp::kScan);
      ASSERT_TRUE(SameScan(out, Pairs(model, kb))) << "after step " << step;
    }
  }
  EXPECT_GT(longest_scan, 13u) << "no scan crossed a leaf";
  EXPECT_TRUE(model.count(0) || model.count(kMaxKey));

  ASSERT_TRUE(tree->Scan(*ctx, key_of(0), key_of(kMaxKey), &out).ok());
  count(IndexOp::kScan);
  ASSERT_TRUE(SameScan(out, Pairs(model, kb)));
  ASSERT_TRUE(tree->Scan(*ctx, key_of(0), model.size(), &out).ok());
  count(IndexOp::kScan);
  ASSERT_TRUE(SameScan(out, Pairs(model, kb)));

  const IndexStats stats = tree->stats();
  for (size_t kind = 0; kind < kIndexOpKinds; ++kind) {
    EXPECT_EQ(stats.by_op[kind].operations, calls[kind]) << IndexOpName(static_cast<IndexOp>(kind));
  }
}

INSTANTIATE_TEST_SUITE_P(Trees, BTreeModelCheck,
                         ::testing::Values(ModelParam{"key8", 8, false, 15000, 20240601},
                                           ModelParam{"key16_dense", 16, false, 3000, 7},
                                           ModelParam{"key8_baseline", 8, true, 15000, 99}),
                         [](const ::testing::TestParamInfo<ModelParam>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------
// 2. Bulk load.

struct LoadParam {
  uint32_t key_bytes;
  double fill_factor;
};

class BTreeBulkLoadTest : public ::testing::TestWithParam<LoadParam> {};

// Sizes 0, 1, one full leaf, one more than a leaf, and many levels; then
// ordinary inserts (splitting loaded leaves) and deletes on the loaded tree.
TEST_P(BTreeBulkLoadTest, EverythingFoundThenOrdinaryWritesWork) {
  Watchdog watchdog(std::chrono::seconds(600));
  const LoadParam param = GetParam();
  const uint32_t kb = param.key_bytes;
  const uint32_t slots = LeafSlots(kSmallNodeBytes, kb);
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::map<uint64_t, uint64_t> load_bytes;  // bytes a load of that size wrote
  for (const uint64_t size :
       {uint64_t{0}, uint64_t{1}, uint64_t{slots}, uint64_t{slots} + 1, uint64_t{2000}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(
        BTree::Open(client.get(), "load" + std::to_string(size), SmallNodes(kb), &tree).ok());
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
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model, kb));
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
        const uint64_t value = rng();
        ASSERT_TRUE(tree->Insert(*ctx, Key(key, kb), value).ok()) << key;
        model[key] = value;
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
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model, kb));
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

INSTANTIATE_TEST_SUITE_P(FillAndKeySize, BTreeBulkLoadTest,
                         ::testing::Values(LoadParam{8, 0.1}, LoadParam{8, 0.5}, LoadParam{8, 1.0},
                                           LoadParam{16, 0.1}, LoadParam{16, 0.5},
                                           LoadParam{16, 1.0}),
                         [](const ::testing::TestParamInfo<LoadParam>& info) {
                           return "key" + std::to_string(info.param.key_bytes) + "_fill" +
                                  std::to_string(static_cast<int>(info.param.fill_factor * 100));
                         });

// Bad input is InvalidArgument and changes nothing; loading a non-empty tree
// is FailedPrecondition and changes nothing.
TEST(BTreeModelTest, BulkLoadRefusesBadInputAndNonEmptyTrees) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  for (const uint32_t kb : {8u, 16u}) {
    SCOPED_TRACE("key bytes " + std::to_string(kb));
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), "bad" + std::to_string(kb), SmallNodes(kb), &tree).ok());
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
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, {}, kb));
    uint64_t value = 0;
    EXPECT_TRUE(tree->Lookup(*ctx, Key(2, kb), &value).IsNotFound());
    EXPECT_TRUE(tree->Lookup(*ctx, Key(1000, kb), &value).IsNotFound());
    ASSERT_TRUE(tree->BulkLoad(*ctx, good, 1.0).ok());
    ++calls;
    Model model;
    for (uint64_t i = 1; i <= 500; ++i)
      model[i * 2] = i;
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model, kb));

    // Loaded: a second load is FailedPrecondition and changes nothing.
    const std::vector<KeyValue> other{{Key(1, kb), 11}, {Key(3, kb), 33}, {Key(5000, kb), 55}};
    EXPECT_TRUE(IsFailedPrecondition(tree->BulkLoad(*ctx, other, 0.5)));
    ++calls;
    // Bad input to a non-empty tree is refused too (either reason will do).
    const Status both = tree->BulkLoad(*ctx, other, 0.0);
    ++calls;
    EXPECT_TRUE(both.IsInvalidArgument() || IsFailedPrecondition(both)) << both.ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model, kb));

    // One Insert makes a fresh tree non-empty.
    std::unique_ptr<BTree> inserted;
    ASSERT_TRUE(
        BTree::Open(client.get(), "ins" + std::to_string(kb), SmallNodes(kb), &inserted).ok());
    ASSERT_TRUE(inserted->Insert(*ctx, Key(4, kb), 40).ok());
    EXPECT_TRUE(IsFailedPrecondition(inserted->BulkLoad(*ctx, good, 0.5)));
    EXPECT_TRUE(IsFailedPrecondition(inserted->BulkLoad(*ctx, other, 1.0)));
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*inserted, *ctx, {{4, 40}}, kb));
    EXPECT_EQ(inserted->stats()[IndexOp::kBulkLoad].operations, 2u);
    EXPECT_EQ(tree->stats()[IndexOp::kBulkLoad].operations, calls);
  }
}

// Empty means one empty root leaf (docs/btree.md): a tree whose only key was
// deleted takes a load; one that split and was emptied by deletes does not.
TEST(BTreeModelTest, BulkLoadNeedsAnEmptyRootLeaf) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  const std::vector<KeyValue> load{{Key(1), 10}, {Key(2), 20}};
  std::unique_ptr<BTree> emptied, split;
  ASSERT_TRUE(BTree::Open(client.get(), "emptied", SmallNodes(), &emptied).ok());
  ASSERT_TRUE(emptied->Insert(*ctx, Key(7), 7).ok());
  ASSERT_TRUE(emptied->Delete(*ctx, Key(7)).ok());
  ASSERT_TRUE(emptied->BulkLoad(*ctx, load, 1.0).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*emptied, *ctx, {{1, 10}, {2, 20}}));

  ASSERT_TRUE(BTree::Open(client.get(), "split", SmallNodes(), &split).ok());
  for (uint64_t key = 0; key < 100; ++key)
    ASSERT_TRUE(split->Insert(*ctx, Key(key), key).ok());
  for (uint64_t key = 0; key < 100; ++key)
    ASSERT_TRUE(split->Delete(*ctx, Key(key)).ok());
  EXPECT_TRUE(IsFailedPrecondition(split->BulkLoad(*ctx, load, 1.0)));
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*split, *ctx, {}));
}

// A load that runs out of memory midway frees what it made and leaves the
// tree empty, so a smaller load then succeeds.
TEST(BTreeModelTest, BulkLoadOutOfMemoryLeavesTheTreeEmpty) {
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(
                  testing_util::SmallLocalCluster(1, 8 << 20, false, std::chrono::microseconds(0)),
                  &cluster)
                  .ok());
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "big", SmallNodes(), &tree).ok());
  std::vector<KeyValue> load;
  for (uint64_t key = 0; key < 40000; ++key)
    load.push_back({Key(key), key});
  // 40000 leaves of 256 bytes at one key a leaf: more than the 8 MiB pool.
  const Status status = tree->BulkLoad(*ctx, load, 0.01);
  ASSERT_TRUE(status.IsResourceExhausted()) << status.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, {}));
  load.resize(5000);
  Model model;
  for (const KeyValue& pair : load)
    model[DecodeUint64Key(pair.key)] = pair.value;
  const Status again = tree->BulkLoad(*ctx, load, 0.5);
  ASSERT_TRUE(again.ok()) << again.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model));
}

// "Loads `sorted` into the index, which must be empty ... a non-empty index
// is FailedPrecondition": also when `sorted` is empty.
TEST(BTreeModelTest, BulkLoadOfNothingIntoANonEmptyTreeIsFailedPrecondition) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "nothing", SmallNodes(), &tree).ok());
  EXPECT_TRUE(tree->BulkLoad(*ctx, {}, 0.5).ok());  // empty into empty: fine
  ASSERT_TRUE(tree->Insert(*ctx, Key(4), 40).ok());
  const Status status = tree->BulkLoad(*ctx, {}, 0.5);
  EXPECT_TRUE(IsFailedPrecondition(status)) << status.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, {{4, 40}}));
}

// A compute node that used the tree while it was empty (its root hint is
// the old root leaf) sees a bulk load by another one, and writes to it.
TEST(BTreeModelTest, AnotherComputeNodeUsesTheLoadedTree) {
  auto cluster = OpenCluster(false);
  auto loader = NewClient(*cluster), other = NewClient(*cluster);
  std::unique_ptr<Context> lctx, octx;
  ASSERT_TRUE(loader->NewBlockingContext(&lctx).ok());
  ASSERT_TRUE(other->NewBlockingContext(&octx).ok());
  for (const bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "cache on" : "cache off");
    const std::string name = cache ? "shared-cache" : "shared-nocache";
    BTreeOptions options = SmallNodes();
    if (!cache) options.cache_bytes = 0;
    std::unique_ptr<BTree> a, b;
    ASSERT_TRUE(BTree::Open(loader.get(), name, options, &a).ok());
    ASSERT_TRUE(BTree::Open(other.get(), name, options, &b).ok());
    uint64_t value = 0;
    EXPECT_TRUE(b->Lookup(*octx, Key(10), &value).IsNotFound());
    std::vector<KeyValue> out;
    ASSERT_TRUE(b->Scan(*octx, Key(0), Key(kMaxKey), &out).ok());
    EXPECT_TRUE(out.empty());
    Model model;
    std::vector<KeyValue> load;
    for (uint64_t key = 10; key <= 30000; key += 10) {
      load.push_back({Key(key), key / 10});
      model[key] = key / 10;
    }
    ASSERT_TRUE(a->BulkLoad(*lctx, load, 0.9).ok());
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*b, *octx, model));
    // The other node writes: inserts that split loaded leaves, updates, deletes.
    for (uint64_t key = 5; key <= 30000; key += 20) {
      ASSERT_TRUE(b->Insert(*octx, Key(key), key).ok()) << key;
      model[key] = key;
    }
    for (uint64_t key = 10; key <= 30000; key += 70) {
      ASSERT_TRUE(b->Update(*octx, Key(key), 1).ok()) << key;
      model[key] = 1;
    }
    for (uint64_t key = 20; key <= 30000; key += 110) {
      ASSERT_TRUE(b->Delete(*octx, Key(key)).ok()) << key;
      model.erase(key);
    }
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*b, *octx, model));
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*a, *lctx, model));
  }
}

// The same, counting: once warmed up, an operation of the node that first
// saw the tree empty costs what it costs the node that filled it (docs: the
// root hint is refreshed on restarts; a hint that is no longer the root must
// not leave every descent walking the leaf chain from the leftmost leaf).
TEST(BTreeModelTest, AComputeNodeThatSawTheTreeSmallDescendsItOnceGrown) {
  auto cluster = OpenCluster(false);
  auto filler = NewClient(*cluster), other = NewClient(*cluster);
  std::unique_ptr<Context> fctx, octx;
  ASSERT_TRUE(filler->NewBlockingContext(&fctx).ok());
  ASSERT_TRUE(other->NewBlockingContext(&octx).ok());
  int trees = 0;
  for (const bool bulk : {true, false}) {
    for (const bool cache : {true, false}) {
      SCOPED_TRACE(std::string(bulk ? "bulk load" : "inserts") +
                   (cache ? ", cache" : ", no cache"));
      const std::string name = "grown" + std::to_string(trees++);
      BTreeOptions options = SmallNodes();
      if (!cache) options.cache_bytes = 0;
      std::unique_ptr<BTree> a, b;
      ASSERT_TRUE(BTree::Open(filler.get(), name, options, &a).ok());
      ASSERT_TRUE(BTree::Open(other.get(), name, options, &b).ok());
      uint64_t value = 0;
      EXPECT_TRUE(b->Lookup(*octx, Key(3000), &value).IsNotFound());  // b's hint: the root leaf
      std::vector<KeyValue> load;
      for (uint64_t key = 1; key <= 3000; ++key)
        load.push_back({Key(key), key});
      if (bulk) {
        ASSERT_TRUE(a->BulkLoad(*fctx, load, 0.9).ok());
      } else {
        for (const KeyValue& pair : load)
          ASSERT_TRUE(a->Insert(*fctx, pair.key, pair.value).ok());
      }
      // Warm both up on the last key, then compare one more of each kind.
      for (BTree* tree : {a.get(), b.get()}) {
        Context& ctx = tree == a.get() ? *fctx : *octx;
        for (int i = 0; i < 3; ++i) {
          ASSERT_TRUE(tree->Lookup(ctx, Key(3000), &value).ok());
          ASSERT_TRUE(tree->Update(ctx, Key(3000), 3000).ok());
        }
      }
      OpCounters lookup[2], update[2];
      for (int i = 0; i < 2; ++i) {
        BTree& tree = i == 0 ? *a : *b;
        Context& ctx = i == 0 ? *fctx : *octx;
        IndexStats before = tree.stats();
        ASSERT_TRUE(tree.Lookup(ctx, Key(3000), &value).ok());
        lookup[i] = (tree.stats() - before)[IndexOp::kLookup];
        before = tree.stats();
        ASSERT_TRUE(tree.Update(ctx, Key(3000), 3000).ok());
        update[i] = (tree.stats() - before)[IndexOp::kUpdate];
      }
      EXPECT_EQ(lookup[1].round_trips, lookup[0].round_trips)
          << "filler: " << lookup[0].ToString() << "\nother:  " << lookup[1].ToString();
      EXPECT_EQ(update[1].round_trips, update[0].round_trips)
          << "filler: " << update[0].ToString() << "\nother:  " << update[1].ToString();
      EXPECT_EQ(update[1].bytes_written, update[0].bytes_written);
    }
  }
}

// A lower fill factor needs more leaves, so writes more bytes.
TEST(BTreeModelTest, LowerFillFactorWritesMoreNodes) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::vector<KeyValue> load;
  Model model;
  for (uint64_t i = 0; i < 3000; ++i) {
    load.push_back({Key(i * 3 + 1), i});
    model[i * 3 + 1] = i;
  }
  uint64_t written[2] = {0, 0};
  const double fills[2] = {0.5, 1.0};
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), "fill" + std::to_string(i), SmallNodes(), &tree).ok());
    ASSERT_TRUE(tree->BulkLoad(*ctx, load, fills[i]).ok());
    const OpCounters load_counters = tree->stats()[IndexOp::kBulkLoad];
    EXPECT_EQ(load_counters.operations, 1u);
    written[i] = load_counters.bytes_written;
    // At least the leaves: 3000 keys, at most 13 a leaf, 256 bytes each.
    EXPECT_GE(written[i], (3000 / 13) * kSmallNodeBytes) << "fill " << fills[i];
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model));
  }
  EXPECT_GT(written[0], written[1]) << "fill 0.5 should need more leaves than fill 1.0";
  // About twice the leaves; allow for rounding and internal nodes.
  EXPECT_GT(written[0], written[1] * 3 / 2);
}

// The smallest valid fill factors still put at least one key in a leaf and
// two children in an internal node.
TEST(BTreeModelTest, TinyFillFactorsAreValid) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  int i = 0;
  for (const double fill : {std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::min(), 1e-9, 0.01}) {
    SCOPED_TRACE("fill " + std::to_string(fill));
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), "tiny" + std::to_string(i++), SmallNodes(), &tree).ok());
    Model model;
    std::vector<KeyValue> load;
    for (uint64_t key = 1; key <= 300; ++key) {
      load.push_back({Key(key * 2), key});
      model[key * 2] = key;
    }
    const Status status = tree->BulkLoad(*ctx, load, fill);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model));
    for (uint64_t key = 1; key <= 601; key += 4) {
      ASSERT_TRUE(tree->Insert(*ctx, Key(key), key).ok()) << key;
      model[key] = key;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, model));
  }
}

// ---------------------------------------------------------------------------
// 3. Scan edge cases.

TEST(BTreeModelTest, ScanEdgeCases) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "edges", SmallNodes(), &tree).ok());
  const std::vector<KeyValue> junk{{Key(424242), 1}, {Key(434343), 2}};
  std::vector<KeyValue> out = junk;
  Model model;

  // An empty tree: every scan is empty, and replaces what *out held.
  ASSERT_TRUE(tree->Scan(*ctx, Key(0), Key(kMaxKey), &out).ok());
  EXPECT_TRUE(out.empty());
  out = junk;
  ASSERT_TRUE(tree->Scan(*ctx, Key(0), 10, &out).ok());
  EXPECT_TRUE(out.empty());
  out = junk;
  ASSERT_TRUE(tree->Scan(*ctx, Key(kMaxKey), Key(kMaxKey), &out).ok());
  EXPECT_TRUE(out.empty());

  for (uint64_t key = 100; key <= 1000; key += 10) {
    ASSERT_TRUE(tree->Insert(*ctx, Key(key), key * 7).ok());
    model[key] = key * 7;
  }
  // Each case: (from, to) and the expected result from the model.
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {500, 400},       // from > to
      {kMaxKey, 0},     // from > to, extremes
      {501, 500},       // from just above to
      {101, 109},       // between two keys
      {95, 125},        // ends outside keys
      {0, 50},          // below every key
      {0, 100},         // up to exactly the smallest key
      {1000, kMaxKey},  // from exactly the largest key
      {1001, kMaxKey},  // above every key
      {500, 500},       // exactly one key
      {505, 505},       // exactly one absent key
      {0, kMaxKey},     // everything
      {100, 1000},      // exactly the smallest to the largest
  };
  for (const auto& [from, to] : ranges) {
    out = junk;
    ASSERT_TRUE(tree->Scan(*ctx, Key(from), Key(to), &out).ok()) << from << ".." << to;
    EXPECT_TRUE(SameScan(out, ModelRange(model, from, to))) << from << ".." << to;
  }
  const std::vector<std::pair<uint64_t, size_t>> counted = {
      {0, 0},       {500, 0}, {0, 3},    {95, 3},           {1000, 5},     {1001, 5},
      {kMaxKey, 3}, {995, 1}, {0, 1000}, {0, model.size()}, {0, SIZE_MAX},
  };
  for (const auto& [from, n] : counted) {
    out = junk;
    ASSERT_TRUE(tree->Scan(*ctx, Key(from), n, &out).ok()) << from << " count " << n;
    EXPECT_TRUE(SameScan(out, ModelCount(model, from, n))) << from << " count " << n;
  }

  // The minimum and maximum keys.
  ASSERT_TRUE(tree->Insert(*ctx, Key(0), 0).ok());
  ASSERT_TRUE(tree->Insert(*ctx, Key(kMaxKey), 0).ok());
  model[0] = 0;
  model[kMaxKey] = 0;
  for (const auto& [from, to] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 0},
                                                                           {kMaxKey, kMaxKey},
                                                                           {0, kMaxKey},
                                                                           {kMaxKey - 1, kMaxKey},
                                                                           {0, 99},
                                                                           {1001, kMaxKey - 1},
                                                                           {1, kMaxKey - 1},
                                                                           {kMaxKey, 0}}) {
    out = junk;
    ASSERT_TRUE(tree->Scan(*ctx, Key(from), Key(to), &out).ok()) << from << ".." << to;
    EXPECT_TRUE(SameScan(out, ModelRange(model, from, to))) << from << ".." << to;
  }
  for (const auto& [from, n] : std::vector<std::pair<uint64_t, size_t>>{
           {0, 1}, {0, 2}, {kMaxKey, 1}, {kMaxKey, 10}, {1001, 1}, {kMaxKey - 1, 2}, {0, 0}}) {
    out = junk;
    ASSERT_TRUE(tree->Scan(*ctx, Key(from), n, &out).ok()) << from << " count " << n;
    EXPECT_TRUE(SameScan(out, ModelCount(model, from, n))) << from << " count " << n;
  }

  // Wrong key sizes: InvalidArgument, and *out emptied (index.h: empty on
  // any error), not left holding the caller's old pairs.
  auto expect_refused = [&](auto scan, const char* what) {
    out = junk;
    EXPECT_TRUE(scan().IsInvalidArgument()) << what;
    EXPECT_TRUE(out.empty()) << what << ": *out kept " << out.size() << " old pairs";
  };
  expect_refused([&] { return tree->Scan(*ctx, Key(1, 16), Key(2), &out); }, "long from");
  expect_refused([&] { return tree->Scan(*ctx, Key(1), Key(2, 16), &out); }, "long to");
  expect_refused([&] { return tree->Scan(*ctx, Key(1).substr(1), Key(2), &out); }, "short from");
  expect_refused([&] { return tree->Scan(*ctx, "", Key(2), &out); }, "empty from");
  expect_refused([&] { return tree->Scan(*ctx, Key(1, 16), 5, &out); }, "long from, count");
  expect_refused([&] { return tree->Scan(*ctx, "", 5, &out); }, "empty from, count");
  // From > to with a wrong size is still a wrong size.
  expect_refused([&] { return tree->Scan(*ctx, Key(9, 16), Key(1), &out); }, "from > to");
  // 16-byte trees check too.
  std::unique_ptr<BTree> wide;
  ASSERT_TRUE(BTree::Open(client.get(), "edges16", SmallNodes(16), &wide).ok());
  ASSERT_TRUE(wide->Insert(*ctx, Key(3, 16), 3).ok());
  expect_refused([&] { return wide->Scan(*ctx, Key(1), Key(5), &out); },
                 "8-byte keys, 16-byte tree");
  expect_refused([&] { return wide->Scan(*ctx, Key(1), 5, &out); },
                 "8-byte key, 16-byte tree, count");
  out = junk;
  ASSERT_TRUE(wide->Scan(*ctx, Key(1, 16), Key(5, 16), &out).ok());
  EXPECT_TRUE(SameScan(out, {{Key(3, 16), 3}}));
}

// Deleting most keys leaves empty leaves in the chain; scans step over them.
TEST(BTreeModelTest, ScanAcrossEmptyLeaves) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "holes", SmallNodes(), &tree).ok());
  Model model;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 3000; ++key)
    keys.push_back(key);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (const uint64_t key : keys) {
    ASSERT_TRUE(tree->Insert(*ctx, Key(key), key + 1).ok());
    model[key] = key + 1;
  }
  for (uint64_t key = 500; key < 2500; ++key) {
    ASSERT_TRUE(tree->Delete(*ctx, Key(key)).ok()) << key;
    model.erase(key);
  }
  std::vector<KeyValue> out;
  for (const auto& [from, to] : std::vector<std::pair<uint64_t, uint64_t>>{
           {400, 2600}, {600, 2400}, {499, 2500}, {500, 2499}, {0, kMaxKey}}) {
    out = {{Key(1), 1}};
    ASSERT_TRUE(tree->Scan(*ctx, Key(from), Key(to), &out).ok());
    EXPECT_TRUE(SameScan(out, ModelRange(model, from, to))) << from << ".." << to;
  }
  for (const auto& [from, n] : std::vector<std::pair<uint64_t, size_t>>{
           {600, 10}, {499, 3}, {500, 1}, {2400, 2}, {0, 600}, {2999, 5}}) {
    out = {{Key(1), 1}};
    ASSERT_TRUE(tree->Scan(*ctx, Key(from), n, &out).ok());
    EXPECT_TRUE(SameScan(out, ModelCount(model, from, n))) << from << " count " << n;
  }
  // Everything deleted: a chain of empty leaves.
  for (const auto& [key, value] : Model(model)) {
    ASSERT_TRUE(tree->Delete(*ctx, Key(key)).ok()) << key;
    model.erase(key);
  }
  out = {{Key(1), 1}};
  ASSERT_TRUE(tree->Scan(*ctx, Key(0), Key(kMaxKey), &out).ok());
  EXPECT_TRUE(out.empty()) << out.size();
  out = {{Key(1), 1}};
  ASSERT_TRUE(tree->Scan(*ctx, Key(0), 5, &out).ok());
  EXPECT_TRUE(out.empty()) << out.size();
  // And filled again.
  ASSERT_TRUE(tree->Insert(*ctx, Key(2999), 1).ok());
  ASSERT_TRUE(tree->Insert(*ctx, Key(1), 2).ok());
  ASSERT_TRUE(tree->Scan(*ctx, Key(0), 5, &out).ok());
  EXPECT_TRUE(SameScan(out, {{Key(1), 2}, {Key(2999), 1}}));
}

// ---------------------------------------------------------------------------
// 4. Close.

TEST(BTreeModelTest, CloseEndsTheHandleNotTheTree) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto other_client = NewClient(*cluster);
  std::unique_ptr<Context> ctx, other_ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  ASSERT_TRUE(other_client->NewBlockingContext(&other_ctx).ok());
  std::unique_ptr<BTree> tree, empty;
  ASSERT_TRUE(BTree::Open(client.get(), "closing", SmallNodes(), &tree).ok());
  ASSERT_TRUE(BTree::Open(client.get(), "closing-empty", SmallNodes(), &empty).ok());
  Model model;
  for (uint64_t key = 0; key < 200; ++key) {
    ASSERT_TRUE(tree->Insert(*ctx, Key(key * 3), key).ok());
    model[key * 3] = key;
  }
  tree->Close();
  empty->Close();
  const std::vector<KeyValue> load{{Key(1), 1}, {Key(2), 2}};
  std::vector<KeyValue> out = {{Key(5), 5}};
  uint64_t value = 0;
  for (BTree* closed : {tree.get(), empty.get()}) {
    EXPECT_TRUE(closed->Insert(*ctx, Key(1000), 1).IsInvalidArgument());
    EXPECT_TRUE(closed->Insert(*ctx, Key(3), 1).IsInvalidArgument());
    EXPECT_TRUE(closed->Update(*ctx, Key(3), 1).IsInvalidArgument());
    EXPECT_TRUE(closed->Delete(*ctx, Key(3)).IsInvalidArgument());
    EXPECT_TRUE(closed->Lookup(*ctx, Key(3), &value).IsInvalidArgument());
    // A refused scan empties *out too (index.h: empty on any error).
    out = {{Key(5), 5}};
    EXPECT_TRUE(closed->Scan(*ctx, Key(0), Key(kMaxKey), &out).IsInvalidArgument());
    EXPECT_TRUE(out.empty()) << "a closed handle's range scan kept the old pairs";
    out = {{Key(5), 5}};
    EXPECT_TRUE(closed->Scan(*ctx, Key(0), 10, &out).IsInvalidArgument());
    EXPECT_TRUE(out.empty()) << "a closed handle's counted scan kept the old pairs";
    EXPECT_TRUE(closed->BulkLoad(*ctx, load, 0.5).IsInvalidArgument());
    // A bad argument to a closed handle is still InvalidArgument.
    EXPECT_TRUE(closed->Lookup(*ctx, "short", &value).IsInvalidArgument());
  }

  // Open again, here and on another compute node: the data is there, and
  // nothing the closed handles were asked to do happened.
  std::unique_ptr<BTree> again, elsewhere, empty_again;
  ASSERT_TRUE(BTree::Open(client.get(), "closing", SmallNodes(), &again).ok());
  ASSERT_TRUE(BTree::Open(other_client.get(), "closing", SmallNodes(), &elsewhere).ok());
  ASSERT_TRUE(BTree::Open(client.get(), "closing-empty", SmallNodes(), &empty_again).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*again, *ctx, model));
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*elsewhere, *other_ctx, model));
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*empty_again, *ctx, {}));
  ASSERT_TRUE(again->Insert(*ctx, Key(1000), 1).ok());
  model[1000] = 1;
  ASSERT_TRUE(elsewhere->Delete(*other_ctx, Key(3)).ok());
  model.erase(3);
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*again, *ctx, model));
  ASSERT_TRUE(empty_again->BulkLoad(*ctx, load, 0.5).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*empty_again, *ctx, {{1, 1}, {2, 2}}));
  // The old handle stays closed.
  EXPECT_TRUE(tree->Lookup(*ctx, Key(1000), &value).IsInvalidArgument());
  again->Close();
  elsewhere->Close();
  empty_again->Close();
}

// ---------------------------------------------------------------------------
// 5. Every operation from Client::Run coroutines (2 threads x 4 coroutines).

TEST(BTreeModelTest, EveryOperationFromCoroutines) {
  Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint32_t kThreads = 2, kCoroutines = 4;
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster, kThreads, kCoroutines);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::unique_ptr<BTree> tree, second;
  ASSERT_TRUE(BTree::Open(client.get(), "coroutines", SmallNodes(), &tree).ok());
  ASSERT_TRUE(BTree::Open(client.get(), "coroutines-bulk", SmallNodes(), &second).ok());
  // Read-only part: even keys below 8000, loaded. Each coroutine writes only
  // its own range above 1,000,000.
  constexpr uint64_t kLoaded = 4000, kOwnBase = 1000000, kOwnSpan = 10000, kOwnKeys = 60;
  Model loaded;
  std::vector<KeyValue> load;
  for (uint64_t i = 0; i < kLoaded; ++i) {
    load.push_back({Key(i * 2), i * 11});
    loaded[i * 2] = i * 11;
  }
  ASSERT_TRUE(tree->BulkLoad(*ctx, load, 0.8).ok());
  std::vector<KeyValue> second_load;
  Model second_model;
  for (uint64_t i = 0; i < 500; ++i) {
    second_load.push_back({Key(i * 7), i});
    second_model[i * 7] = i;
  }
  const IndexStats before = tree->stats();

  auto fail = [](const std::string& what) { return Status::Internal(what); };  // a mismatch
  const Status run = client->Run([&](Context& c) -> Status {
    const uint64_t id = static_cast<uint64_t>(c.thread_index()) * kCoroutines +
                        static_cast<uint64_t>(c.coroutine_index());
    const std::string me = "coroutine " + std::to_string(id) + ": ";
    // Lookups of every 8th loaded key, and of absent odd keys.
    for (uint64_t i = id; i < kLoaded; i += kThreads * kCoroutines) {
      uint64_t value = 0;
      DMIDX_RETURN_IF_ERROR(tree->Lookup(c, Key(i * 2), &value));
      if (value != i * 11) return fail(me + "lookup " + std::to_string(i * 2));
      if (!tree->Lookup(c, Key(i * 2 + 1), &value).IsNotFound()) {
        return fail(me + "absent key " + std::to_string(i * 2 + 1) + " found");
      }
    }
    // Scans of the loaded part.
    std::vector<KeyValue> out;
    const uint64_t from = id * 900 + 1;
    DMIDX_RETURN_IF_ERROR(tree->Scan(c, Key(from), Key(from + 400), &out));
    if (auto same = SameScan(out, ModelRange(loaded, from, from + 400)); !same) {
      return fail(me + "range scan: " + same.message());
    }
    DMIDX_RETURN_IF_ERROR(tree->Scan(c, Key(from), 77, &out));
    if (auto same = SameScan(out, ModelCount(loaded, from, 77)); !same) {
      return fail(me + "count scan: " + same.message());
    }
    // Writes to its own range: insert, update half, delete a quarter.
    Model own;
    const uint64_t base = kOwnBase + id * kOwnSpan;
    for (uint64_t j = 0; j < kOwnKeys; ++j) {
      DMIDX_RETURN_IF_ERROR(tree->Insert(c, Key(base + j * 5), j));
      own[base + j * 5] = j;
    }
    for (uint64_t j = 0; j < kOwnKeys; j += 2) {
      DMIDX_RETURN_IF_ERROR(tree->Update(c, Key(base + j * 5), j + 1000));
      own[base + j * 5] = j + 1000;
    }
    for (uint64_t j = 0; j < kOwnKeys; j += 4) {
      DMIDX_RETURN_IF_ERROR(tree->Delete(c, Key(base + j * 5)));
      own.erase(base + j * 5);
    }
    if (!tree->Update(c, Key(base + 1), 1).IsNotFound()) return fail(me + "update of absent");
    if (!tree->Delete(c, Key(base)).IsNotFound()) return fail(me + "delete of a deleted key");
    DMIDX_RETURN_IF_ERROR(tree->Scan(c, Key(base), Key(base + kOwnSpan - 1), &out));
    if (auto same = SameScan(out, ModelRange(own, base, base + kOwnSpan - 1)); !same) {
      return fail(me + "own scan: " + same.message());
    }
    DMIDX_RETURN_IF_ERROR(tree->Scan(c, Key(base + 7), 10, &out));
    if (auto same = SameScan(out, ModelCount(own, base + 7, 10)); !same) {
      return fail(me + "own count scan: " + same.message());
    }
    // One coroutine bulk-loads the second tree.
    if (id == 0) {
      DMIDX_RETURN_IF_ERROR(second->BulkLoad(c, second_load, 0.6));
      DMIDX_RETURN_IF_ERROR(second->Scan(c, Key(0), Key(kMaxKey), &out));
      if (auto same = SameScan(out, Pairs(second_model)); !same) {
        return fail(me + "second tree scan: " + same.message());
      }
    }
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  const IndexStats used = tree->stats() - before;
  const IndexStats second_used = second->stats();

  // Every write landed; the loaded part is untouched.
  Model all = loaded;
  for (uint64_t id = 0; id < kThreads * kCoroutines; ++id) {
    const uint64_t base = kOwnBase + id * kOwnSpan;
    for (uint64_t j = 0; j < kOwnKeys; ++j) {
      if (j % 4 == 0) continue;
      all[base + j * 5] = j % 2 == 0 ? j + 1000 : j;
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*tree, *ctx, all));
  ASSERT_NO_FATAL_FAILURE(ExpectTreeMatches(*second, *ctx, second_model));
  // Per-kind operation counts cover every coroutine's calls.
  constexpr uint64_t kContexts = kThreads * kCoroutines;
  EXPECT_EQ(used[IndexOp::kLookup].operations, 2 * kLoaded);
  EXPECT_EQ(used[IndexOp::kInsert].operations, kContexts * kOwnKeys);
  EXPECT_EQ(used[IndexOp::kUpdate].operations, kContexts * (kOwnKeys / 2 + 1));
  EXPECT_EQ(used[IndexOp::kDelete].operations, kContexts * (kOwnKeys / 4 + 1));
  EXPECT_EQ(used[IndexOp::kScan].operations, kContexts * 4);
  EXPECT_EQ(used[IndexOp::kBulkLoad].operations, 0u);
  EXPECT_EQ(second_used[IndexOp::kBulkLoad].operations, 1u);
  EXPECT_EQ(second_used[IndexOp::kScan].operations, 1u);
}

}  // namespace
}  // namespace dmidx
