// IndexModelSuite: every index against std::map models, one context at a
// time (100k mixed operations from a bulk load, 20k from empty) and from
// Client::Run coroutines.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "dmidx/status.h"
#include "testing/index_factory.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/sanitizers.h"
#include "testing/watchdog.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

struct ModelCheck {
  uint32_t key_bytes;
  uint64_t key_range;  // most keys are drawn from [0, key_range)
  uint64_t seed;
};

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
// (status, value, scan contents, order and length), on an index that
// starts from a bulk load and splits up several levels.
void RunModelCheck(const IndexRow& row, const ModelCheck& param) {
  Watchdog watchdog(std::chrono::seconds(600));
  const uint32_t kb = param.key_bytes;
  auto key_of = [kb](uint64_t key) { return Key(key, kb); };
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto tree = OpenIndexOrFail(row, client.get(), "model", {.key_bytes = kb});
  ASSERT_NE(tree, nullptr);
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
  ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, model, kb));
  calls[static_cast<size_t>(IndexOp::kScan)] += 2;
  calls[static_cast<size_t>(IndexOp::kLookup)] += model.size();

  // A quarter under a sanitizer: one context, no race to find, and several
  // times slower there (the release build runs all of it).
  constexpr int kOps = kAnySanitizer ? 25000 : 100000;
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
  EXPECT_GT(longest_scan, row.leaf_capacity(kb)) << "no scan crossed a leaf";
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

TEST_P(IndexModelSuite, HundredThousandMixedOpsMatchAModel) {
  RunModelCheck(GetParam(), {.key_bytes = 8, .key_range = 15000, .seed = 20240601});
}

TEST_P(IndexModelSuite, HundredThousandMixedOpsOnDenseSixteenByteKeys) {
  RunModelCheck(GetParam(), {.key_bytes = 16, .key_range = 3000, .seed = 7});
}

// From an empty index: inserts (value 0 among them), updates, deletes and
// lookups of keys below 5000 and the extremes; then every key looked up.
TEST_P(IndexModelSuite, SequentialFromEmptyMatchesAModel) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto tree = OpenIndexOrFail(GetParam(), client.get(), "model");
  ASSERT_NE(tree, nullptr);
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  std::map<uint64_t, uint64_t> model;
  std::mt19937_64 rng(1);
  for (int step = 0; step < 20000; ++step) {
    uint64_t key = rng() % 5000;
    if (step % 1000 == 0) key = step % 2000 == 0 ? 0 : UINT64_MAX;  // the extremes
    const uint64_t dice = rng() % 6;
    if (dice < 3) {
      const uint64_t value = rng() % 4 == 0 ? 0 : rng();  // value 0 is a value
      ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(key), value).ok()) << step;
      model[key] = value;
    } else if (dice == 3) {
      const uint64_t value = rng();
      const Status status = tree->Update(*context, EncodeUint64Key(key), value);
      ASSERT_EQ(status.ok(), model.count(key) == 1) << key << ": " << status.ToString();
      if (status.ok()) model[key] = value;
      ASSERT_TRUE(status.ok() || status.IsNotFound()) << status.ToString();
    } else if (dice == 4) {
      const Status status = tree->Delete(*context, EncodeUint64Key(key));
      ASSERT_EQ(status.ok(), model.erase(key) == 1) << key << ": " << status.ToString();
      ASSERT_TRUE(status.ok() || status.IsNotFound()) << status.ToString();
    } else {
      uint64_t value = 12345;
      const Status status = tree->Lookup(*context, EncodeUint64Key(key), &value);
      if (model.count(key)) {
        ASSERT_TRUE(status.ok()) << step << " " << key << ": " << status.ToString();
        ASSERT_EQ(value, model[key]) << key;
      } else {
        ASSERT_TRUE(status.IsNotFound()) << key << ": " << status.ToString();
      }
    }
  }
  for (const auto& [key, value] : model) {
    uint64_t found = 0;
    ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(key), &found).ok()) << key;
    EXPECT_EQ(found, value);
  }
}

// Every operation from Client::Run coroutines (2 threads x 4 coroutines):
// lookups and scans of a loaded part, writes to ranges of their own, a bulk
// load of a second index; exact per-kind counters.
TEST_P(IndexModelSuite, EveryOperationFromCoroutines) {
  Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint32_t kThreads = 2, kCoroutines = 4;
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster, kThreads, kCoroutines);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  auto tree = OpenIndexOrFail(GetParam(), client.get(), "coroutines");
  auto second = OpenIndexOrFail(GetParam(), client.get(), "coroutines-bulk");
  ASSERT_TRUE(tree && second);
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
  ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*tree, *ctx, all));
  ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*second, *ctx, second_model));
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
}  // namespace dmidx::testing
