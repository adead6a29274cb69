// Every technique switch of BTreeOptions flipped, alone and all at once
// (Baseline()): one deterministic sequential workload gives identical
// results under every configuration, and the per-operation counters move
// the way each switch says (exact round trips and bytes for single
// operations without contention). A contended run shows local handovers
// only with the local lock table. on_chip_locks is fixed at creation.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"
#include "tests/btree_test_util.h"

namespace dmidx {
namespace {

using testing::NewClient;
using testing::OpenCluster;
using testing::Watchdog;

constexpr uint64_t kMaxKey = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kNodeBytes = 256;  // 13 entries a leaf: several levels
constexpr uint64_t kEntryBytes = 16;  // 8-byte key + 8-byte value
// The redo record of a write-back (lock/redo_log.h): a 32-byte header and
// each WRITE's address and length (16), then its bytes. No clear: the
// release in the same batch ends it (a word kept for a local handover
// would clear it too, 8 more).
constexpr uint64_t kRecordBytes = 32;
constexpr uint64_t kRecordWriteBytes = 16;
// An entry-level write-back: lock CAS + checksum and bitmap + entry +
// release, and their record (both WRITEs copied into it).
constexpr uint64_t kEntryWriteBytes =
    8 + 16 + kEntryBytes + 8 + kRecordBytes + 2 * kRecordWriteBytes + 16 + kEntryBytes;
// A whole-node write-back: lock CAS + node + release, and its record.
constexpr uint64_t kNodeWriteBytes =
    8 + kNodeBytes + 8 + kRecordBytes + kRecordWriteBytes + kNodeBytes;

std::string Key(uint64_t key) {
  return EncodeUint64Key(key);
}

struct Config {
  std::string name;
  BTreeOptions options;
};

std::vector<Config> Configs() {
  auto with = [](const std::function<void(BTreeOptions&)>& change) {
    BTreeOptions options;
    change(options);
    options.node_bytes = kNodeBytes;
    return options;
  };
  return {
      {"defaults", with([](BTreeOptions&) {})},
      {"no_combine", with([](BTreeOptions& o) { o.combine_commands = false; })},
      {"no_on_chip_locks", with([](BTreeOptions& o) { o.on_chip_locks = false; })},
      {"no_entry_write_back", with([](BTreeOptions& o) { o.entry_level_write_back = false; })},
      {"no_local_lock_table", with([](BTreeOptions& o) { o.local_lock_table = false; })},
      {"no_cache", with([](BTreeOptions& o) { o.cache_bytes = 0; })},
      {"baseline", with([](BTreeOptions& o) { o = BTreeOptions::Baseline(); })},
  };
}

TEST(BTreeSwitchesTest, BaselineTurnsEverythingOff) {
  const BTreeOptions baseline = BTreeOptions::Baseline();
  EXPECT_EQ(baseline.cache_bytes, 0u);
  EXPECT_FALSE(baseline.local_lock_table);
  EXPECT_FALSE(baseline.combine_commands);
  EXPECT_FALSE(baseline.on_chip_locks);
  EXPECT_FALSE(baseline.entry_level_write_back);
  const BTreeOptions defaults;
  EXPECT_GT(defaults.cache_bytes, 0u);
  EXPECT_TRUE(defaults.local_lock_table);
  EXPECT_TRUE(defaults.combine_commands);
  EXPECT_TRUE(defaults.on_chip_locks);
  EXPECT_TRUE(defaults.entry_level_write_back);
}

// What one configuration did with the workload.
struct Outcome {
  std::vector<std::string> results;  // one line per operation, in order
  std::array<uint64_t, kIndexOpKinds> calls{};
  IndexStats workload;  // the stats after the workload, before the single ops
  IndexStats final_stats;
  // Single operations on a warm tree, no split, no contention: the index's
  // counters and the context's runtime counters around each.
  std::vector<OpCounters> lookups;
  std::vector<Stats> lookups_runtime;
  OpCounters update, upsert, erase;
  Stats update_runtime;
};

std::string Line(const char* op, uint64_t key, const Status& status) {
  return std::string(op) + " " + std::to_string(key) + " -> " +
         std::string(StatusCodeName(status.code()));
}

// The deterministic workload: a bulk load, inserts in random order
// (splits), a fixed mix of every operation, single measured operations, a
// full scan. Checked against a std::map as it goes.
void RunWorkload(BTree& tree, Context& ctx, Outcome* outcome) {
  std::map<uint64_t, uint64_t> model;
  auto& results = outcome->results;
  auto& calls = outcome->calls;
  auto count = [&calls](IndexOp op) { ++calls[static_cast<size_t>(op)]; };

  auto lookup = [&](uint64_t key) {
    uint64_t value = 0xabcdef;
    const Status status = tree.Lookup(ctx, Key(key), &value);
    count(IndexOp::kLookup);
    auto it = model.find(key);
    if (it == model.end()) {
      EXPECT_TRUE(status.IsNotFound()) << "lookup " << key << ": " << status.ToString();
    } else {
      EXPECT_TRUE(status.ok()) << "lookup " << key << ": " << status.ToString();
      EXPECT_EQ(value, it->second) << "lookup " << key;
    }
    std::string line = Line("lookup", key, status);
    if (status.ok()) line.append(" ").append(std::to_string(value));
    results.push_back(line);
  };
  auto insert = [&](uint64_t key, uint64_t value) {
    const Status status = tree.Insert(ctx, Key(key), value);
    count(IndexOp::kInsert);
    EXPECT_TRUE(status.ok()) << "insert " << key << ": " << status.ToString();
    model[key] = value;
    results.push_back(Line("insert", key, status));
  };
  auto update = [&](uint64_t key, uint64_t value) {
    const Status status = tree.Update(ctx, Key(key), value);
    count(IndexOp::kUpdate);
    if (model.count(key)) {
      EXPECT_TRUE(status.ok()) << "update " << key << ": " << status.ToString();
      model[key] = value;
    } else {
      EXPECT_TRUE(status.IsNotFound()) << "update " << key << ": " << status.ToString();
    }
    results.push_back(Line("update", key, status));
  };
  auto erase = [&](uint64_t key) {
    const Status status = tree.Delete(ctx, Key(key));
    count(IndexOp::kDelete);
    if (model.erase(key)) {
      EXPECT_TRUE(status.ok()) << "delete " << key << ": " << status.ToString();
    } else {
      EXPECT_TRUE(status.IsNotFound()) << "delete " << key << ": " << status.ToString();
    }
    results.push_back(Line("delete", key, status));
  };
  auto record_scan = [&](std::string line, const Status& status, const std::vector<KeyValue>& out,
                         const std::vector<std::pair<uint64_t, uint64_t>>& want) {
    EXPECT_TRUE(status.ok()) << line << ": " << status.ToString();
    line += " -> " + std::string(StatusCodeName(status.code()));
    bool same = out.size() == want.size();
    for (size_t i = 0; i < out.size(); ++i) {
      const uint64_t key = DecodeUint64Key(out[i].key);
      line.append(" ").append(std::to_string(key)).append("=").append(std::to_string(out[i].value));
      if (same) same = out[i].key == Key(want[i].first) && out[i].value == want[i].second;
    }
    EXPECT_TRUE(same) << line << " (want " << want.size() << " entries)";
    results.push_back(line);
  };
  auto scan_range = [&](uint64_t from, uint64_t to) {
    std::vector<KeyValue> out{{Key(1), 1}};
    const Status status = tree.Scan(ctx, Key(from), Key(to), &out);
    count(IndexOp::kScan);
    std::vector<std::pair<uint64_t, uint64_t>> want;
    for (auto it = model.lower_bound(from); from <= to && it != model.end() && it->first <= to;
         ++it) {
      want.push_back(*it);
    }
    record_scan("scan " + std::to_string(from) + ".." + std::to_string(to), status, out, want);
  };
  auto scan_count = [&](uint64_t from, size_t n) {
    std::vector<KeyValue> out{{Key(1), 1}};
    const Status status = tree.Scan(ctx, Key(from), n, &out);
    count(IndexOp::kScan);
    std::vector<std::pair<uint64_t, uint64_t>> want;
    for (auto it = model.lower_bound(from); it != model.end() && want.size() < n; ++it) {
      want.push_back(*it);
    }
    record_scan("scan " + std::to_string(from) + " count " + std::to_string(n), status, out, want);
  };

  // 1. Bulk load keys 0, 4, 8, ... at fill 0.7.
  std::vector<KeyValue> load;
  for (uint64_t i = 0; i < 2000; ++i) {
    load.push_back({Key(i * 4), i});
    model[i * 4] = i;
  }
  const Status loaded = tree.BulkLoad(ctx, load, 0.7);
  count(IndexOp::kBulkLoad);
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
  results.push_back("bulk load -> " + std::string(StatusCodeName(loaded.code())));

  // 2. Inserts between them in random order: leaf and internal splits.
  std::mt19937_64 rng(42);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 2000; ++i)
    keys.push_back(i * 4 + 2);
  std::shuffle(keys.begin(), keys.end(), rng);
  keys.resize(1500);
  for (const uint64_t key : keys)
    insert(key, key * 10);
  insert(kMaxKey, 0);

  // 3. A fixed mix of every operation.
  for (int step = 0; step < 4000; ++step) {
    const uint64_t key = rng() % 8100;
    const uint64_t dice = rng() % 100;
    if (dice < 35) {
      lookup(key);
    } else if (dice < 50) {
      update(key, rng() % 4 == 0 ? 0 : rng());
    } else if (dice < 65) {
      insert(key, rng());
    } else if (dice < 80) {
      erase(key);
    } else if (dice < 90) {
      scan_range(key, rng() % 16 == 0 ? key / 2 : key + rng() % 60);
    } else {
      scan_count(key, rng() % 25);
    }
  }
  scan_range(0, kMaxKey);
  outcome->workload = tree.stats();

  // 4. Single operations, each on a key whose route was just used (warm
  // cache); updates of present keys never split.
  std::vector<uint64_t> present;
  for (const auto& [key, value] : model)
    present.push_back(key);
  auto measure = [&](const std::function<void()>& op, Stats* runtime) {
    const IndexStats before = tree.stats();
    const Stats runtime_before = ctx.stats();
    op();
    if (runtime) *runtime = ctx.stats() - runtime_before;
    return (tree.stats() - before).Total();
  };
  for (int i = 1; i <= 6; ++i) {
    const uint64_t key = present[present.size() * i / 7];
    lookup(key);  // warms the route
    Stats runtime;
    outcome->lookups.push_back(measure([&] { lookup(key); }, &runtime));
    outcome->lookups_runtime.push_back(runtime);
  }
  const uint64_t key = present[present.size() / 2];
  lookup(key);
  outcome->update = measure([&] { update(key, 123); }, &outcome->update_runtime);
  lookup(key);
  outcome->upsert = measure([&] { insert(key, 0); }, nullptr);
  lookup(key);
  outcome->erase = measure([&] { erase(key); }, nullptr);
  lookup(key);
  scan_range(0, kMaxKey);
  outcome->final_stats = tree.stats();
}

uint64_t RoundTrips(const IndexStats& stats, IndexOp op) {
  return stats[op].round_trips;
}

TEST(BTreeSwitchesTest, EverySwitchFlippedSameResultsCountersMoveAsDocumented) {
  Watchdog watchdog(std::chrono::seconds(600));
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  // Its redo-record slots made on every memory node: which configuration's
  // operation made one (where its lock words sit) changes no count.
  testing::PrepareRedoSlots(*client, ctx.get());
  const std::vector<Config> configs = Configs();
  std::map<std::string, Outcome> outcomes;
  for (const Config& config : configs) {
    SCOPED_TRACE(config.name);
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), "switch-" + config.name, config.options, &tree).ok());
    Outcome& outcome = outcomes[config.name];
    ASSERT_NO_FATAL_FAILURE(RunWorkload(*tree, *ctx, &outcome));
    ASSERT_FALSE(HasFailure()) << "results differ from the model";
  }

  const Outcome& base = outcomes.at("defaults");
  uint64_t levels = 0;  // learned from the first configuration without the cache
  for (const Config& config : configs) {
    SCOPED_TRACE(config.name);
    const Outcome& outcome = outcomes.at(config.name);
    const BTreeOptions& o = config.options;

    // Identical results, op for op.
    ASSERT_EQ(outcome.results.size(), base.results.size());
    for (size_t i = 0; i < base.results.size(); ++i) {
      ASSERT_EQ(outcome.results[i], base.results[i]) << "operation " << i;
    }
    // Operation counts are calls; nothing contended, so no lock retries,
    // handovers or torn reads.
    const IndexStats& stats = outcome.final_stats;
    for (size_t kind = 0; kind < kIndexOpKinds; ++kind) {
      const char* name = IndexOpName(static_cast<IndexOp>(kind));
      EXPECT_EQ(stats.by_op[kind].operations, outcome.calls[kind]) << name;
      EXPECT_EQ(stats.by_op[kind].lock_retries, 0u) << name;
      EXPECT_EQ(stats.by_op[kind].handovers, 0u) << name;
      EXPECT_EQ(stats.by_op[kind].read_retries, 0u) << name;
    }
    EXPECT_EQ(stats[IndexOp::kBulkLoad].operations, 1u);

    // Single operations: the index's counters agree with the runtime's.
    for (size_t i = 0; i < outcome.lookups.size(); ++i) {
      EXPECT_EQ(outcome.lookups[i].operations, 1u);
      EXPECT_EQ(outcome.lookups[i].round_trips, outcome.lookups_runtime[i].round_trips);
      EXPECT_EQ(outcome.lookups[i].bytes_read, outcome.lookups_runtime[i].bytes_read);
      EXPECT_EQ(outcome.lookups[i].bytes_written, 0u);
    }
    EXPECT_EQ(outcome.update.operations, 1u);
    EXPECT_EQ(outcome.update.round_trips, outcome.update_runtime.round_trips);
    EXPECT_EQ(outcome.update.bytes_read, outcome.update_runtime.bytes_read);
    EXPECT_EQ(outcome.update.bytes_written, outcome.update_runtime.bytes_written);

    // Lookups: 1 round trip with the cache (the leaf), one per level without.
    for (const OpCounters& lookup : outcome.lookups) {
      if (o.cache_bytes > 0) {
        EXPECT_EQ(lookup.round_trips, 1u);
        EXPECT_EQ(lookup.bytes_read, kNodeBytes);
        EXPECT_EQ(lookup.cache_hits, 1u);
        EXPECT_EQ(lookup.cache_misses, 0u);
      } else {
        if (levels == 0) levels = lookup.round_trips;
        // 3500 keys, at most 13 a node: at least 4 levels.
        EXPECT_GE(lookup.round_trips, 4u);
        EXPECT_LE(lookup.round_trips, 8u);
        EXPECT_EQ(lookup.round_trips, levels) << "every leaf is as deep; the shape is the same";
        EXPECT_EQ(lookup.bytes_read, lookup.round_trips * kNodeBytes);
      }
    }

    // An update, an insert of a present key and a delete, without a split:
    // lock CAS + leaf READ, write-back + release; more without combination,
    // plus the descent to level 1 without the cache.
    const uint64_t descent = o.cache_bytes > 0 ? 0 : levels - 1;
    const uint64_t lock_and_write = o.combine_commands ? 2 : 4;  // CAS, READ, write, release
    const uint64_t written = o.entry_level_write_back ? kEntryWriteBytes : kNodeWriteBytes;
    for (const auto& [what, op] :
         {std::pair<const char*, const OpCounters*>{"update", &outcome.update},
          {"insert of a present key", &outcome.upsert},
          {"delete", &outcome.erase}}) {
      SCOPED_TRACE(what);
      EXPECT_EQ(op->operations, 1u);
      EXPECT_EQ(op->round_trips, descent + lock_and_write) << op->ToString();
      EXPECT_EQ(op->bytes_written, written) << op->ToString();
      // The CAS (atomics count 8) and the leaf, plus the nodes of the descent.
      EXPECT_EQ(op->bytes_read, 8 + kNodeBytes + descent * kNodeBytes) << op->ToString();
      EXPECT_EQ(op->lock_retries, 0u);
      EXPECT_EQ(op->handovers, 0u);
      if (o.cache_bytes > 0) {
        EXPECT_GE(op->cache_hits, 1u) << op->ToString();
      }
    }

    // The cache: off means no hits and no misses of any kind.
    const OpCounters total = stats.Total();
    if (o.cache_bytes == 0) {
      EXPECT_EQ(total.cache_hits, 0u);
      EXPECT_EQ(total.cache_misses, 0u);
      EXPECT_EQ(total.cache_stale, 0u);
    } else {
      EXPECT_GT(stats[IndexOp::kLookup].cache_hits, 0u);
    }

    // Workload totals against the defaults.
    const IndexStats& w = outcome.workload;
    const IndexStats& d = base.workload;
    const bool lookups_as_defaults = o.cache_bytes > 0;
    if (lookups_as_defaults) {
      EXPECT_EQ(RoundTrips(w, IndexOp::kLookup), RoundTrips(d, IndexOp::kLookup));
      EXPECT_EQ(w[IndexOp::kLookup].bytes_read, d[IndexOp::kLookup].bytes_read);
      EXPECT_EQ(RoundTrips(w, IndexOp::kScan), RoundTrips(d, IndexOp::kScan));
      EXPECT_EQ(w[IndexOp::kScan].bytes_read, d[IndexOp::kScan].bytes_read);
    } else {
      EXPECT_GT(RoundTrips(w, IndexOp::kLookup), RoundTrips(d, IndexOp::kLookup));
      EXPECT_GT(w.Total().round_trips, d.Total().round_trips);
    }
    if (!o.combine_commands) {
      for (const IndexOp op : {IndexOp::kInsert, IndexOp::kUpdate, IndexOp::kDelete}) {
        EXPECT_GT(RoundTrips(w, op), RoundTrips(d, op)) << IndexOpName(op);
      }
      EXPECT_GT(w.Total().round_trips, d.Total().round_trips);
    }
    if (!o.entry_level_write_back) {
      for (const IndexOp op : {IndexOp::kInsert, IndexOp::kUpdate, IndexOp::kDelete}) {
        EXPECT_GT(w[op].bytes_written, d[op].bytes_written) << IndexOpName(op);
      }
    }
    if (o.cache_bytes > 0 && o.combine_commands) {
      // Switches that change no round trip: local table, lock placement,
      // write-back size.
      for (size_t kind = 0; kind < kIndexOpKinds; ++kind) {
        const char* name = IndexOpName(static_cast<IndexOp>(kind));
        EXPECT_EQ(w.by_op[kind].round_trips, d.by_op[kind].round_trips) << name;
        EXPECT_EQ(w.by_op[kind].bytes_read, d.by_op[kind].bytes_read) << name;
        EXPECT_EQ(w.by_op[kind].cache_hits, d.by_op[kind].cache_hits) << name;
        EXPECT_EQ(w.by_op[kind].cache_misses, d.by_op[kind].cache_misses) << name;
        if (o.entry_level_write_back) {
          EXPECT_EQ(w.by_op[kind].bytes_written, d.by_op[kind].bytes_written) << name;
        }
      }
    }
  }
  ASSERT_GT(levels, 0u);

  // The baseline costs the most round trips of all.
  const uint64_t baseline_total = outcomes.at("baseline").final_stats.Total().round_trips;
  for (const Config& config : configs) {
    if (config.name == "baseline") continue;
    EXPECT_GT(baseline_total, outcomes.at(config.name).final_stats.Total().round_trips)
        << config.name;
  }
}

// on_chip_locks picks the lock words, so it is fixed when the tree is made;
// the other switches are this compute node's business.
TEST(BTreeSwitchesTest, OnChipLocksFixedAtCreation) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster), other = NewClient(*cluster);
  std::unique_ptr<Context> ctx, other_ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  ASSERT_TRUE(other->NewBlockingContext(&other_ctx).ok());
  for (const bool on_chip : {true, false}) {
    SCOPED_TRACE(on_chip ? "created on chip" : "created in pool memory");
    const std::string name = on_chip ? "chip" : "pool";
    BTreeOptions created;
    created.on_chip_locks = on_chip;
    std::unique_ptr<BTree> tree, wrong, same, relaxed;
    ASSERT_TRUE(BTree::Open(client.get(), name, created, &tree).ok());
    ASSERT_TRUE(tree->Insert(*ctx, Key(5), 50).ok());
    BTreeOptions flipped = created;
    flipped.on_chip_locks = !on_chip;
    EXPECT_TRUE(BTree::Open(client.get(), name, flipped, &wrong).IsInvalidArgument());
    EXPECT_TRUE(BTree::Open(other.get(), name, flipped, &wrong).IsInvalidArgument());
    // The same setting, from another compute node: shares the tree.
    ASSERT_TRUE(BTree::Open(other.get(), name, created, &same).ok());
    uint64_t value = 0;
    ASSERT_TRUE(same->Lookup(*other_ctx, Key(5), &value).ok());
    EXPECT_EQ(value, 50u);
    ASSERT_TRUE(same->Update(*other_ctx, Key(5), 51).ok());
    // Every other switch may differ per handle.
    BTreeOptions others = BTreeOptions::Baseline();
    others.on_chip_locks = on_chip;
    ASSERT_TRUE(BTree::Open(other.get(), name, others, &relaxed).ok());
    ASSERT_TRUE(relaxed->Lookup(*other_ctx, Key(5), &value).ok());
    EXPECT_EQ(value, 51u);
    ASSERT_TRUE(relaxed->Insert(*other_ctx, Key(6), 60).ok());
    ASSERT_TRUE(tree->Lookup(*ctx, Key(6), &value).ok());
    EXPECT_EQ(value, 60u);
  }
}

// 2 threads x 8 coroutines update the same 3 keys: with the local lock table
// contexts of this compute node get the lock handed over; without it never.
TEST(BTreeSwitchesTest, ContendedUpdatesHandOverOnlyWithTheLocalTable) {
  Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint32_t kThreads = 2, kCoroutines = 8;
  constexpr uint64_t kUpdates = 40;
  const std::vector<uint64_t> hot = {1000, 1001, 1003};
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster, kThreads, kCoroutines);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  for (const Config& config : Configs()) {
    SCOPED_TRACE(config.name);
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), "hot-" + config.name, config.options, &tree).ok());
    for (uint64_t key = 0; key < 2000; key += 2) {
      ASSERT_TRUE(tree->Insert(*ctx, Key(key), key).ok());
    }
    for (const uint64_t key : hot)
      ASSERT_TRUE(tree->Insert(*ctx, Key(key), 0).ok());
    const IndexStats before = tree->stats();
    const Status run = client->Run([&](Context& c) -> Status {
      const uint64_t writer = static_cast<uint64_t>(c.thread_index()) * kCoroutines +
                              static_cast<uint64_t>(c.coroutine_index());
      for (uint64_t i = 0; i < kUpdates; ++i) {
        const uint64_t key = hot[(i + writer) % hot.size()];
        // key, writer and step, so the final value names its writer.
        DMIDX_RETURN_IF_ERROR(tree->Update(c, Key(key), (key << 32) | (writer << 16) | (i + 1))
                                  .WithContext("update of " + std::to_string(key)));
      }
      return Status::Ok();
    });
    ASSERT_TRUE(run.ok()) << run.ToString();
    const IndexStats used = tree->stats() - before;
    const uint64_t contexts = kThreads * kCoroutines;
    EXPECT_EQ(used[IndexOp::kUpdate].operations, contexts * kUpdates);
    EXPECT_EQ(used.Total().operations, contexts * kUpdates);
    if (config.options.local_lock_table) {
      EXPECT_GT(used[IndexOp::kUpdate].handovers, 0u) << used.ToString();
    } else {
      EXPECT_EQ(used.Total().handovers, 0u) << used.ToString();
    }
    // Every hot key holds a value some context wrote for it; the rest is intact.
    for (const uint64_t key : hot) {
      uint64_t value = 0;
      ASSERT_TRUE(tree->Lookup(*ctx, Key(key), &value).ok()) << key;
      EXPECT_EQ(value >> 32, key) << "value " << value << " was written for another key";
      EXPECT_LT((value >> 16) & 0xffff, contexts) << value;
      EXPECT_GE(value & 0xffff, 1u) << value;
      EXPECT_LE(value & 0xffff, kUpdates) << value;
    }
    std::vector<KeyValue> out;
    ASSERT_TRUE(tree->Scan(*ctx, Key(0), Key(kMaxKey), &out).ok());
    ASSERT_EQ(out.size(), 1000u + hot.size() - 1);  // 1000 is both even and hot
    for (const KeyValue& pair : out) {
      const uint64_t key = DecodeUint64Key(pair.key);
      if (std::find(hot.begin(), hot.end(), key) == hot.end()) {
        EXPECT_EQ(pair.value, key);
      }
    }
  }
}

}  // namespace
}  // namespace dmidx
