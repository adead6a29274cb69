// IndexConcurrencySuite: every index under concurrency, with torn reads,
// torn writes, delays and reordering injected by the local fabric:
//
// - a history checker: several compute nodes run mixed operations on
//   overlapping keys (a zipf 0.99 hot set among them); every operation is
//   logged with start and end ticks of one global logical clock, and every
//   lookup, scan and the final contents must be explained by some
//   linearization of the logged writes;
// - hot-key contention: no deadlock, exact per-kind operation counters, the
//   longest lock wait reported;
// - concurrent inserts of two compute nodes: owned keys exact, shared keys
//   hold a value written for them;
// - scans under concurrent splits, and under concurrent merges: keys
//   present for a whole scan appear exactly once, in order.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "dmidx/status.h"
#include "testing/history.h"
#include "testing/index_factory.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/run_clients.h"
#include "testing/watchdog.h"
#include "testing/zipf.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

// ---- Sizes ----

// History checker: compute nodes x threads x coroutines, each running
// kHistoryOps operations (scaled by the row's concurrency_scale) on
// kHistoryKeys keys.
constexpr uint32_t kHistoryNodes = 3;
constexpr uint32_t kHistoryThreads = 2;
constexpr uint32_t kHistoryCoroutines = 3;
constexpr uint64_t kHistoryKeys = 400;
constexpr int kHistoryOps = 1500;
constexpr uint64_t kHistoryMaxScanSpan = 24;  // Scan(from, to): to - from < this
constexpr size_t kHistoryMaxScanCount = 16;   // Scan(from, count): count <= this

// Hot keys: 2 compute nodes x threads x coroutines, kHotOps each, zipf
// over kHotKeys keys.
constexpr uint32_t kHotThreads = 2;
constexpr uint32_t kHotCoroutines = 4;
constexpr uint64_t kHotKeys = 16;
constexpr int kHotOps = 1500;

// Scans under splits (merges): kStableKeys stable keys, every 2nd (8th)
// key, bulk loaded (with every other key, for merges); per thread
// coroutine 0 scans and the others insert and delete unstable keys,
// kWriterOps operations each.
constexpr uint64_t kStableKeys = 4000;
constexpr uint32_t kScanThreads = 2;
constexpr uint32_t kScanCoroutines = 3;
constexpr int kWriterOps = 2000;
constexpr int kMinScans = 20;           // per scanner, even if the writers are done
constexpr int kMaxScans = 100000;       // per scanner, a bound in case of a bug
constexpr uint64_t kMaxScanSpan = 150;  // Scan(from, to): to - from < this
constexpr size_t kMaxScanCount = 60;    // Scan(from, count): count <= this

constexpr auto kWatchdogLimit = std::chrono::seconds(240);

// Several compute nodes x threads x coroutines run Insert, Update, Delete,
// Lookup and a few Scans on overlapping keys (half of them drawn from a zipf
// 0.99 hot set), each written value unique. Every lookup and scan result and
// the final contents must be allowed by some linearization of the logged
// operations.
TEST_P(IndexConcurrencySuite, HistoryOfMixedOperationsIsLinearizable) {
  Watchdog watchdog(kWatchdogLimit);
  const uint64_t seed = TestSeed(11);
  auto cluster = OpenCluster(true, 2, seed);
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<RangeIndex>> trees(kHistoryNodes);
  std::vector<Client*> raw_clients;
  for (uint32_t cn = 0; cn < kHistoryNodes; ++cn) {
    clients.push_back(NewClient(*cluster, kHistoryThreads, kHistoryCoroutines));
    raw_clients.push_back(clients.back().get());
    trees[cn] = OpenIndexOrFail(GetParam(), clients.back().get(), "history");
    ASSERT_NE(trees[cn], nullptr);
  }
  constexpr size_t kContexts = size_t{kHistoryNodes} * kHistoryThreads * kHistoryCoroutines;
  std::vector<std::vector<LoggedOp>> logs(kContexts);
  std::atomic<uint64_t> clock{1};
  const Zipf zipf(kHistoryKeys, 0.99);
  const int history_ops = GetParam().Scaled(kHistoryOps);

  const std::vector<Status> results = RunClients(raw_clients, [&](int cn, Context& ctx) {
    const int id = ContextIndex(cn, ctx, clients[0]->options());
    RangeIndex& tree = *trees[cn];
    std::vector<LoggedOp>& log = logs[id];
    log.reserve(history_ops);
    std::mt19937_64 rng(seed << 16 | static_cast<uint64_t>(id));
    const uint64_t writer = static_cast<uint64_t>(id) + 1;
    uint64_t sequence = 0;
    for (int i = 0; i < history_ops; ++i) {
      LoggedOp op;
      op.key = rng() % 2 == 0 ? zipf(rng) : rng() % kHistoryKeys;
      const std::string key = Key(op.key);
      const uint64_t dice = rng() % 100;
      Status status;
      if (dice < 30) {
        op.kind = OpKind::kInsert;
        op.value = writer << 32 | ++sequence;  // unique
        op.start = clock.fetch_add(1);
        status = tree.Insert(ctx, key, op.value);
        op.end = clock.fetch_add(1);
      } else if (dice < 48) {
        op.kind = OpKind::kUpdate;
        op.value = writer << 32 | ++sequence;
        op.start = clock.fetch_add(1);
        status = tree.Update(ctx, key, op.value);
        op.end = clock.fetch_add(1);
      } else if (dice < 63) {
        op.kind = OpKind::kDelete;
        op.start = clock.fetch_add(1);
        status = tree.Delete(ctx, key);
        op.end = clock.fetch_add(1);
      } else if (dice < 97) {
        op.kind = OpKind::kLookup;
        op.value = 0;
        op.start = clock.fetch_add(1);
        status = tree.Lookup(ctx, key, &op.value);
        op.end = clock.fetch_add(1);
      } else {
        std::vector<KeyValue> out;
        if (dice % 2 == 0) {
          op.kind = OpKind::kScanRange;
          op.value = std::min(op.key + rng() % kHistoryMaxScanSpan, kHistoryKeys - 1);
          op.start = clock.fetch_add(1);
          status = tree.Scan(ctx, key, Key(op.value), &out);
          op.end = clock.fetch_add(1);
        } else {
          op.kind = OpKind::kScanCount;
          op.value = 1 + rng() % kHistoryMaxScanCount;
          op.start = clock.fetch_add(1);
          status = tree.Scan(ctx, key, static_cast<size_t>(op.value), &out);
          op.end = clock.fetch_add(1);
        }
        op.scanned = std::move(out);
      }
      op.code = status.code();
      const bool may_miss =
          op.kind == OpKind::kUpdate || op.kind == OpKind::kDelete || op.kind == OpKind::kLookup;
      if (!status.ok() && !(may_miss && status.IsNotFound())) {
        return status.WithContext("context " + std::to_string(id) + " op " + std::to_string(i) +
                                  " on key " + std::to_string(op.key));
      }
      log.push_back(std::move(op));
    }
    return Status::Ok();
  });
  for (uint32_t cn = 0; cn < kHistoryNodes; ++cn) {
    ASSERT_TRUE(results[cn].ok()) << "CN " << cn << ": " << results[cn].ToString();
  }

  // (b) Every lookup, failed update or delete, and scan.
  const History history = BuildHistory(logs);
  const HistoryReport report = CheckReads(history, logs, kHistoryKeys - 1);
  for (const std::string& error : report.errors)
    ADD_FAILURE() << error;

  // (a) The final contents, by Lookup of every key and by one full Scan.
  std::vector<std::unique_ptr<Context>> contexts(kHistoryNodes);
  for (uint32_t cn = 0; cn < kHistoryNodes; ++cn) {
    ASSERT_TRUE(clients[cn]->NewBlockingContext(&contexts[cn]).ok());
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(trees[0]->Scan(*contexts[0], Key(0), Key(kHistoryKeys - 1), &all).ok());
  ASSERT_EQ(CheckScanShape(all, 0, kHistoryKeys - 1), "");
  std::vector<KeyValue> looked_up;
  for (uint64_t key = 0; key < kHistoryKeys; ++key) {
    uint64_t value = 0;
    const uint64_t cn = key % kHistoryNodes;  // every compute node's view
    const Status status = trees[cn]->Lookup(*contexts[cn], Key(key), &value);
    ASSERT_TRUE(status.ok() || status.IsNotFound()) << key << ": " << status.ToString();
    if (status.ok()) looked_up.push_back({Key(key), value});
    const std::string error =
        history.CheckFinal(key, status.ok() ? std::optional<uint64_t>(value) : std::nullopt);
    EXPECT_EQ(error, "") << "final state of key " << key;
  }
  EXPECT_TRUE(all == looked_up) << "the full scan returned " << all.size()
                                << " pairs, lookups found " << looked_up.size();
  EXPECT_EQ(report.error_count, 0u);

  std::printf("history: %s; %zu successful writes; %zu keys at the end\n",
              report.ToString().c_str(), history.writes(), all.size());
  for (uint32_t cn = 0; cn < kHistoryNodes; ++cn) {
    std::printf("CN %u: %s\n", cn, trees[cn]->stats().ToString().c_str());
  }
}

// All contexts of two compute nodes hammer a handful of keys (zipf 0.99
// over kHotKeys) with Insert, Update and Delete. Nothing deadlocks (the
// watchdog), every call is counted exactly once under its kind, and the
// longest lock wait is reported.
TEST_P(IndexConcurrencySuite, HotKeysNoDeadlockAndExactCounters) {
  Watchdog watchdog(kWatchdogLimit);
  const uint64_t seed = TestSeed(23);
  auto cluster = OpenCluster(true, 2, seed);
  std::unique_ptr<Client> clients[2] = {NewClient(*cluster, kHotThreads, kHotCoroutines),
                                        NewClient(*cluster, kHotThreads, kHotCoroutines)};
  std::unique_ptr<RangeIndex> trees[2];
  for (int cn = 0; cn < 2; ++cn) {
    trees[cn] = OpenIndexOrFail(GetParam(), clients[cn].get(), "hot");
    ASSERT_NE(trees[cn], nullptr);
  }
  const Zipf zipf(kHotKeys, 0.99);
  const int hot_ops = GetParam().Scaled(kHotOps);
  std::atomic<uint64_t> calls[2][3] = {};  // per CN: insert, update, delete
  std::atomic<uint64_t> found[2][2] = {};  // per CN: updates, deletes that found the key

  const std::vector<Status> results = RunClients(
      std::vector<Client*>{clients[0].get(), clients[1].get()}, [&](int cn, Context& ctx) {
        const int id = ContextIndex(cn, ctx, clients[0]->options());
        std::mt19937_64 rng(seed << 16 | static_cast<uint64_t>(id));
        uint64_t mine[3] = {}, hits[2] = {};
        Status result;
        for (int i = 0; i < hot_ops && result.ok(); ++i) {
          const uint64_t key = zipf(rng);
          // The key in the top bits: a value read back names its key.
          const uint64_t value = key << 40 | uint64_t(id) << 24 | static_cast<uint64_t>(i);
          const uint64_t dice = rng() % 10;
          Status status;
          if (dice < 5) {
            ++mine[0];
            status = trees[cn]->Insert(ctx, Key(key), value);
          } else if (dice < 8) {
            ++mine[1];
            status = trees[cn]->Update(ctx, Key(key), value);
            if (status.ok()) ++hits[0];
            if (status.IsNotFound()) status = Status::Ok();
          } else {
            ++mine[2];
            status = trees[cn]->Delete(ctx, Key(key));
            if (status.ok()) ++hits[1];
            if (status.IsNotFound()) status = Status::Ok();
          }
          if (!status.ok()) {
            result = status.WithContext("context " + std::to_string(id) + " op " +
                                        std::to_string(i) + " on key " + std::to_string(key));
          }
        }
        for (int k = 0; k < 3; ++k)
          calls[cn][k] += mine[k];
        for (int k = 0; k < 2; ++k)
          found[cn][k] += hits[k];
        return result;
      });
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].ToString();

  uint64_t longest = 0, contended = 0;
  for (int cn = 0; cn < 2; ++cn) {
    const IndexStats stats = trees[cn]->stats();
    EXPECT_EQ(stats[IndexOp::kInsert].operations, calls[cn][0].load()) << "CN " << cn;
    EXPECT_EQ(stats[IndexOp::kUpdate].operations, calls[cn][1].load()) << "CN " << cn;
    EXPECT_EQ(stats[IndexOp::kDelete].operations, calls[cn][2].load()) << "CN " << cn;
    EXPECT_EQ(stats[IndexOp::kLookup].operations, 0u) << "CN " << cn;
    EXPECT_EQ(stats[IndexOp::kScan].operations, 0u) << "CN " << cn;
    EXPECT_EQ(stats[IndexOp::kBulkLoad].operations, 0u) << "CN " << cn;
    EXPECT_EQ(calls[cn][0] + calls[cn][1] + calls[cn][2],
              uint64_t{kHotThreads} * kHotCoroutines * hot_ops);
    longest = std::max(longest, stats.longest_lock_wait_ns);
    std::printf("CN %d: longest lock wait %llu ns; %llu updates and %llu deletes found the key\n",
                cn, static_cast<unsigned long long>(stats.longest_lock_wait_ns),
                static_cast<unsigned long long>(found[cn][0].load()),
                static_cast<unsigned long long>(found[cn][1].load()));
    for (IndexOp op : {IndexOp::kInsert, IndexOp::kUpdate, IndexOp::kDelete}) {
      const OpCounters& counters = stats[op];
      contended += counters.lock_retries + counters.handovers;
      std::printf("  %-7s ops=%llu lock_retries=%llu handovers=%llu round_trips=%llu\n",
                  IndexOpName(op), static_cast<unsigned long long>(counters.operations),
                  static_cast<unsigned long long>(counters.lock_retries),
                  static_cast<unsigned long long>(counters.handovers),
                  static_cast<unsigned long long>(counters.round_trips));
    }
  }
  EXPECT_GT(longest, 0u) << "no handle reports a lock wait";
  // 16 contexts on 16 keys in one or two leaves: locks were fought over.
  EXPECT_GT(contended, 0u) << "neither a lock retry nor a handover in the whole run";

  // Every surviving value was written for its key.
  std::unique_ptr<Context> contexts[2];
  for (int cn = 0; cn < 2; ++cn)
    ASSERT_TRUE(clients[cn]->NewBlockingContext(&contexts[cn]).ok());
  std::vector<KeyValue> all;
  ASSERT_TRUE(trees[1]->Scan(*contexts[1], Key(0), Key(kHotKeys - 1), &all).ok());
  ASSERT_EQ(CheckScanShape(all, 0, kHotKeys - 1), "");
  size_t present = 0;
  for (uint64_t key = 0; key < kHotKeys; ++key) {
    uint64_t value = 0;
    const Status status = trees[key % 2]->Lookup(*contexts[key % 2], Key(key), &value);
    ASSERT_TRUE(status.ok() || status.IsNotFound()) << status.ToString();
    if (!status.ok()) continue;
    EXPECT_EQ(value >> 40, key) << "key " << key << " holds a value written for another key";
    ASSERT_LT(present, all.size()) << "key " << key << " is missing from the scan";
    EXPECT_EQ(all[present], (KeyValue{Key(key), value})) << "key " << key;
    ++present;
  }
  EXPECT_EQ(present, all.size());
  if (HasFailure() && GetParam().dump) GetParam().dump(*trees[0], *contexts[0]);
}

// Two compute nodes x 2 threads x 4 coroutines insert at once with faults
// injected. Each context owns some keys (exact final values) and all share
// a hot range (final value must be one some context wrote for that key).
TEST_P(IndexConcurrencySuite, ConcurrentInsertsFromTwoComputeNodes) {
  Watchdog watchdog(std::chrono::seconds(300));
  auto cluster = OpenCluster(true);
  auto first = NewClient(*cluster, 2, 4), second = NewClient(*cluster, 2, 4);
  std::unique_ptr<RangeIndex> trees[2] = {OpenIndexOrFail(GetParam(), first.get(), "busy"),
                                          OpenIndexOrFail(GetParam(), second.get(), "busy")};
  ASSERT_TRUE(trees[0] && trees[1]);
  const uint64_t owned = GetParam().Scaled(150);
  constexpr uint64_t kHot = 40;
  auto work = [&](int cn, Context& ctx) -> Status {
    const uint64_t writer = uint64_t(cn) * 100 + ctx.thread_index() * 10 + ctx.coroutine_index();
    std::mt19937_64 rng(writer);
    for (uint64_t i = 0; i < owned; ++i) {
      const uint64_t key = 1000000 + writer * 1000 + i;  // owned
      DMIDX_RETURN_IF_ERROR(trees[cn]->Insert(ctx, EncodeUint64Key(key), key ^ writer));
      const uint64_t hot = rng() % kHot;  // shared
      DMIDX_RETURN_IF_ERROR(trees[cn]->Insert(ctx, EncodeUint64Key(hot), hot * 1000 + writer));
    }
    return Status::Ok();
  };
  const std::vector<Status> results =
      RunClients(std::vector<Client*>{first.get(), second.get()}, work);
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].ToString();
  std::unique_ptr<Context> context;
  ASSERT_TRUE(second->NewBlockingContext(&context).ok());
  for (uint64_t cn = 0; cn < 2; ++cn) {
    for (uint64_t t = 0; t < 2; ++t) {
      for (uint64_t c = 0; c < 4; ++c) {
        const uint64_t writer = cn * 100 + t * 10 + c;
        for (uint64_t i = 0; i < owned; ++i) {
          const uint64_t key = 1000000 + writer * 1000 + i;
          uint64_t value = 0;
          ASSERT_TRUE(trees[1]->Lookup(*context, EncodeUint64Key(key), &value).ok()) << key;
          ASSERT_EQ(value, key ^ writer) << key;
        }
      }
    }
  }
  for (uint64_t hot = 0; hot < kHot; ++hot) {
    uint64_t value = 0;
    const Status status = trees[0]->Lookup(*context, EncodeUint64Key(hot), &value);
    if (status.IsNotFound()) continue;  // possible only if no one drew it
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(value / 1000, hot) << "hot key " << hot << " holds a value written for another key";
  }
}

// What a scan race changes under the scanners.
struct ScanRace {
  uint64_t stride;     // stable keys: the multiples of it
  bool load_unstable;  // the bulk load holds every key, not just the stable ones
  int insert_percent;  // of the writers' operations (the rest delete)
};

// Stable keys (the multiples of race.stride) are bulk loaded, with the
// others too if race.load_unstable; writer contexts insert and delete
// unstable keys while scanner contexts scan random ranges with both forms.
// Every stable key of a range appears exactly once with its value, in
// order, nothing outside the range.
void ScansUnder(const IndexRow& row, const ScanRace& race) {
  Watchdog watchdog(kWatchdogLimit);
  const uint64_t seed = TestSeed(37);
  const uint64_t stride = race.stride;
  auto cluster = OpenCluster(true, 2, seed);
  std::unique_ptr<Client> clients[2] = {NewClient(*cluster, kScanThreads, kScanCoroutines),
                                        NewClient(*cluster, kScanThreads, kScanCoroutines)};
  std::unique_ptr<RangeIndex> trees[2];
  for (int cn = 0; cn < 2; ++cn) {
    trees[cn] = OpenIndexOrFail(row, clients[cn].get(), "scans");
    ASSERT_NE(trees[cn], nullptr);
  }
  const uint64_t space = stride * kStableKeys;  // keys 0 .. space - 1
  auto stable_value = [](uint64_t key) { return key * 1000 + 999; };
  std::vector<KeyValue> loaded_keys;
  for (uint64_t key = 0; key < space; ++key) {
    if (key % stride == 0) {
      loaded_keys.push_back({Key(key), stable_value(key)});
    } else if (race.load_unstable) {
      loaded_keys.push_back({Key(key), key * 1000 + 998});
    }
  }
  std::unique_ptr<Context> contexts[2];
  for (int cn = 0; cn < 2; ++cn)
    ASSERT_TRUE(clients[cn]->NewBlockingContext(&contexts[cn]).ok());
  ASSERT_TRUE(trees[0]->BulkLoad(*contexts[0], loaded_keys, /*fill_factor=*/1.0).ok());
  EXPECT_EQ(trees[0]->stats()[IndexOp::kBulkLoad].operations, 1u);
  {
    std::vector<KeyValue> loaded;
    ASSERT_TRUE(trees[1]->Scan(*contexts[1], Key(0), loaded_keys.size() + 10, &loaded).ok());
    ASSERT_TRUE(loaded == loaded_keys) << "after the bulk load a scan returned " << loaded.size()
                                       << " pairs, not the " << loaded_keys.size() << " loaded";
  }

  // Stable keys at or after `from`, and whether `key` is stable.
  auto stable_from = [&](uint64_t from) -> uint64_t {
    const uint64_t first = (from + stride - 1) / stride;  // index of the first stable key >= from
    return first >= kStableKeys ? 0 : kStableKeys - first;
  };
  auto is_stable = [&](uint64_t key) { return key % stride == 0 && key < space; };

  // The checks of one scan result; "" when it is right.
  auto check_scan = [&](const std::vector<KeyValue>& out, uint64_t from, uint64_t to,
                        std::optional<size_t> count) -> std::string {
    std::string error = CheckScanShape(out, from, to);
    if (!error.empty()) return error;
    // At most `count` pairs; exactly `count` when enough stable keys follow.
    if (count && (out.size() > *count || (stable_from(from) >= *count && out.size() != *count))) {
      return "returned " + std::to_string(out.size()) + " pairs for count " +
             std::to_string(*count) + " with " + std::to_string(stable_from(from)) +
             " stable keys from there";
    }
    // The stable keys the scan must contain: all of [from, to], or for the
    // count form up to its last key (all of them if it came back short).
    uint64_t last = to;
    if (count && out.size() == *count && !out.empty()) last = DecodeUint64Key(out.back().key);
    size_t next = 0;
    for (uint64_t key = (from + stride - 1) / stride * stride; key <= last && key < space;
         key += stride) {
      while (next < out.size() && DecodeUint64Key(out[next].key) < key)
        ++next;
      if (next == out.size() || DecodeUint64Key(out[next].key) != key) {
        return "stable key " + std::to_string(key) + " missing (" + std::to_string(out.size()) +
               " pairs returned)";
      }
    }
    for (const KeyValue& kv : out) {
      const uint64_t key = DecodeUint64Key(kv.key);
      if (key >= space) return "key " + std::to_string(key) + " was never written";
      if (kv.value / 1000 != key) {
        return "key " + std::to_string(key) + " holds value " + std::to_string(kv.value) +
               ", written for another key";
      }
      if (is_stable(key) && kv.value != stable_value(key)) {
        return "stable key " + std::to_string(key) + " holds " + std::to_string(kv.value);
      }
    }
    return "";
  };

  constexpr uint32_t kWriters = 2 * kScanThreads * (kScanCoroutines - 1);
  const int writer_ops = row.Scaled(kWriterOps);
  std::atomic<uint32_t> writers_done{0};
  std::atomic<uint64_t> scans_done{0}, pairs_seen{0}, inserts{0}, deletes{0};
  const std::vector<Status> results = RunClients(
      std::vector<Client*>{clients[0].get(), clients[1].get()},
      [&](int cn, Context& ctx) -> Status {
        const int id = ContextIndex(cn, ctx, clients[0]->options());
        std::mt19937_64 rng(seed << 16 | static_cast<uint64_t>(id));
        RangeIndex& tree = *trees[cn];
        if (ctx.coroutine_index() != 0) {  // a writer of unstable keys
          uint64_t mine[2] = {};
          Status result;
          for (int i = 0; i < writer_ops && result.ok(); ++i) {
            const uint64_t key = stride * (rng() % kStableKeys) + 1 + rng() % (stride - 1);
            if (rng() % 100 < static_cast<uint64_t>(race.insert_percent)) {
              result = tree.Insert(ctx, Key(key), key * 1000 + static_cast<uint64_t>(id));
              ++mine[0];
            } else {
              result = tree.Delete(ctx, Key(key));
              if (result.IsNotFound()) result = Status::Ok();
              ++mine[1];
            }
            if (!result.ok()) result = result.WithContext("writer on key " + std::to_string(key));
          }
          inserts += mine[0];
          deletes += mine[1];
          writers_done.fetch_add(1);
          return result;
        }
        std::vector<KeyValue> out;
        for (int n = 0; n < kMaxScans && (n < kMinScans || writers_done.load() < kWriters); ++n) {
          const uint64_t from = rng() % (space + 20);
          std::string error;
          if (n % 2 == 0) {
            const uint64_t to = from + rng() % kMaxScanSpan;
            DMIDX_RETURN_IF_ERROR(tree.Scan(ctx, Key(from), Key(to), &out));
            error = check_scan(out, from, to, std::nullopt);
            if (!error.empty()) {
              return Status::Internal("Scan(" + std::to_string(from) + ", " + std::to_string(to) +
                                      "): " + error);
            }
          } else {
            const size_t count = 1 + rng() % kMaxScanCount;
            DMIDX_RETURN_IF_ERROR(tree.Scan(ctx, Key(from), count, &out));
            error = check_scan(out, from, std::numeric_limits<uint64_t>::max(), count);
            if (!error.empty()) {
              return Status::Internal("Scan(" + std::to_string(from) + ", count " +
                                      std::to_string(count) + "): " + error);
            }
          }
          scans_done.fetch_add(1);
          pairs_seen.fetch_add(out.size());
        }
        return Status::Ok();
      });
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].ToString();
  EXPECT_GE(scans_done.load(), uint64_t{kMinScans} * 2 * kScanThreads);

  // Quiet now: one full scan has every stable key and agrees with lookups
  // (through the other compute node's handle and cache).
  std::vector<KeyValue> all;
  ASSERT_TRUE(trees[1]->Scan(*contexts[1], Key(0), Key(space), &all).ok());
  ASSERT_EQ(check_scan(all, 0, space, std::nullopt), "");
  size_t unstable = 0;
  for (const KeyValue& kv : all) {
    uint64_t value = 0;
    ASSERT_TRUE(trees[0]->Lookup(*contexts[0], kv.key, &value).ok()) << DecodeUint64Key(kv.key);
    EXPECT_EQ(value, kv.value) << DecodeUint64Key(kv.key);
    unstable += DecodeUint64Key(kv.key) % stride != 0;
  }
  for (uint64_t key = 1; key < space; key += 2 * 37) {  // a sample of unstable keys agrees too
    uint64_t value = 0;
    const bool in_scan =
        std::binary_search(all.begin(), all.end(), KeyValue{Key(key), 0},
                           [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
    EXPECT_EQ(trees[0]->Lookup(*contexts[0], Key(key), &value).ok(), in_scan) << key;
  }
  std::printf(
      "scans: %llu scans returned %llu pairs while %llu inserts and %llu deletes ran; "
      "%zu unstable keys at the end\n",
      static_cast<unsigned long long>(scans_done.load()),
      static_cast<unsigned long long>(pairs_seen.load()),
      static_cast<unsigned long long>(inserts.load()),
      static_cast<unsigned long long>(deletes.load()), unstable);
  for (int cn = 0; cn < 2; ++cn) {
    std::printf("CN %d: %s\n", cn, trees[cn]->stats().ToString().c_str());
  }
}

// Odd keys inserted and deleted between bulk-loaded even ones: leaves and
// internal nodes split all the time under the scans.
TEST_P(IndexConcurrencySuite, ScansUnderConcurrentSplits) {
  ScansUnder(GetParam(), {.stride = 2, .load_unstable = false, .insert_percent = 65});
}

// Every key bulk loaded, then most unstable ones deleted (one key in 8 is
// stable): leaves drop below a quarter full and merge, parents merge, all
// under the scans (for the B+tree, docs/btree.md "Merges"; the radix
// tree's nodes shrink).
TEST_P(IndexConcurrencySuite, ScansUnderConcurrentMerges) {
  ScansUnder(GetParam(), {.stride = 8, .load_unstable = true, .insert_percent = 10});
}

}  // namespace
}  // namespace dmidx::testing
