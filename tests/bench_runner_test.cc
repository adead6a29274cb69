// The bench end to end on the local fabric: every built-in workload with
// small counts, checked for exact operation counts, no errors and no lost
// loaded keys; insert loading; traces through the runner; the pool check;
// results through JSON and back; the registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/trace.h"
#include "bench/workload.h"
#include "testing/local_cluster.h"

namespace dmidx::bench {
namespace {

Environment SmallEnvironment() {
  Environment env;
  env.cluster_options = dmidx::testing::SmallLocalCluster(2, uint64_t{64} << 20, /*faults=*/false,
                                                          std::chrono::microseconds(0));
  return env;
}

PointConfig SmallPoint(const std::string& index, const std::string& workload) {
  PointConfig config;
  config.index = *FindIndex(index);
  config.workload = *FindWorkload(workload);
  config.workload.record_count = 2000;
  config.workload.operation_count = 3000;
  config.compute_nodes = 2;
  config.threads = 2;
  config.coroutines = 2;
  config.seed = dmidx::testing::TestSeed(1);
  // Small nodes and a small cache: splits and cache misses happen.
  if (index == "btree") {
    config.settings = {{"node_bytes", "256"}, {"cache_bytes", "64K"}};
  }
  return config;
}

const PhaseResult& PhaseNamed(const PointResult& result, const std::string& name) {
  for (const PhaseResult& phase : result.phases)
    if (phase.name == name) return phase;
  ADD_FAILURE() << "no phase " << name;
  return result.phases.front();
}

uint64_t SumOps(const PhaseResult& phase) {
  uint64_t sum = 0;
  for (const OpResult& op : phase.ops)
    sum += op.operations;
  return sum;
}

TEST(BenchRunner, EveryBuiltinWorkloadRunsExactCountsAndLosesNoKey) {
  for (const BuiltinWorkload& builtin : BuiltinWorkloads()) {
    SCOPED_TRACE(builtin.name);
    Environment env = SmallEnvironment();
    const PointConfig config = SmallPoint("btree", std::string(builtin.name));
    StatusOr<PointResult> result = RunPoint(config, 0, env);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_TRUE(result->merged);
    const PhaseResult& load = PhaseNamed(*result, "load");
    EXPECT_EQ(load.operations, config.workload.record_count);
    const PhaseResult& run = PhaseNamed(*result, "run");
    EXPECT_EQ(run.operations, config.workload.operation_count);
    EXPECT_EQ(SumOps(run), run.operations);
    EXPECT_EQ(run.AllLatencies().count(), run.operations);
    for (size_t t = 0; t < kOpTypes; ++t) {
      const auto type = static_cast<OpType>(t);
      SCOPED_TRACE(OpTypeName(type));
      EXPECT_EQ(run[type].missing_loaded, 0u);
      // Each type ran about as often as the mix says (3000 ops: within 6
      // percentage points).
      const double share = static_cast<double>(run[type].operations) / run.operations;
      EXPECT_NEAR(share, config.workload.Proportion(type) / config.workload.TotalProportion(),
                  0.06);
    }
    // Reads only ever choose loaded keys or keys whose insert finished (the
    // in-process compute nodes share one insert sequence): every one finds
    // its key, inserted ones included (workload d reads the latest).
    EXPECT_EQ(run[OpType::kRead].not_found, 0u);
    EXPECT_EQ(run[OpType::kUpdate].not_found, 0u);
    EXPECT_EQ(run[OpType::kReadModifyWrite].not_found, 0u);
    // The index counted what the bench issued.
    EXPECT_EQ(run.index[IndexOp::kLookup].operations,
              run[OpType::kRead].operations + run[OpType::kReadModifyWrite].operations);
    EXPECT_EQ(run.index[IndexOp::kInsert].operations, run[OpType::kInsert].operations);
    EXPECT_EQ(run.index[IndexOp::kScan].operations, run[OpType::kScan].operations);
    if (run[OpType::kScan].operations > 0) {
      EXPECT_GT(run[OpType::kScan].scan_items, run[OpType::kScan].operations);
    }
    // Ops reached both memory nodes and add up to the fabric's count.
    ASSERT_EQ(run.memory_node_ops.size(), 2u);
    EXPECT_EQ(
        run.memory_node_ops[0] + run.memory_node_ops[1],
        run.fabric.reads + run.fabric.writes + run.fabric.compare_swaps + run.fabric.fetch_adds);
    EXPECT_EQ(run.BusiestMemoryNodeShare(),
              static_cast<double>(std::max(run.memory_node_ops[0], run.memory_node_ops[1])) /
                  static_cast<double>(run.memory_node_ops[0] + run.memory_node_ops[1]));
  }
}

TEST(BenchRunner, InsertLoadPutsInEveryRecordOnce) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "c");
  config.load = LoadMode::kInsert;
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const PhaseResult& load = PhaseNamed(*result, "load");
  EXPECT_EQ(load[OpType::kInsert].operations, config.workload.record_count);
  EXPECT_EQ(load.index[IndexOp::kInsert].operations, config.workload.record_count);
  const PhaseResult& run = PhaseNamed(*result, "run");
  EXPECT_EQ(run[OpType::kRead].operations, config.workload.operation_count);
  EXPECT_EQ(run[OpType::kRead].not_found, 0u);
}

TEST(BenchRunner, WarmupAndOpenLoopCountEveryOperation) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "b");
  config.warmup_operations = 500;
  config.workload.operation_count = 400;
  config.target_rate = 20000;  // ops/s over the cluster: a 20 ms run
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(PhaseNamed(*result, "warmup").operations, 500u);
  EXPECT_EQ(PhaseNamed(*result, "run").operations, 400u);
  EXPECT_EQ(PhaseNamed(*result, "run").AllLatencies().count(), 400u);
}

TEST(BenchRunner, ATraceWrittenThenReplayedGivesTheSameOperations) {
  const std::string first = ::testing::TempDir() + "/bench_trace_first.txt";
  const std::string second = ::testing::TempDir() + "/bench_trace_second.txt";
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "e");  // scans and inserts
  config.compute_nodes = 1;
  config.threads = 1;
  config.coroutines = 1;
  config.workload.operation_count = 500;
  config.trace_out = first;
  ASSERT_TRUE(RunPoint(config, 0, env).ok());
  StatusOr<std::vector<TraceOp>> written = ReadTrace(first, config.keys);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  ASSERT_EQ(written->size(), 500u);

  config.trace_in = &*written;
  config.trace_out = second;
  StatusOr<PointResult> replayed = RunPoint(config, 1, env);
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  EXPECT_EQ(PhaseNamed(*replayed, "run").operations, 500u);
  StatusOr<std::vector<TraceOp>> again = ReadTrace(second, config.keys);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *written);
  std::filesystem::remove(first);
  std::filesystem::remove(second);
}

TEST(BenchRunner, AReplayedTraceIsSharedAmongContexts) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "a");
  std::vector<TraceOp> trace;
  for (uint64_t i = 0; i < 300; ++i) {
    trace.push_back({i % 3 == 0 ? OpType::kInsert : OpType::kRead, config.keys.Format(i * 7), 0});
  }
  config.trace_in = &trace;
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const PhaseResult& run = PhaseNamed(*result, "run");
  EXPECT_EQ(run.operations, 300u);
  EXPECT_EQ(run[OpType::kInsert].operations, 100u);
  EXPECT_EQ(run[OpType::kRead].operations, 200u);
}

TEST(BenchRunner, APoolTooSmallForTheRecordsSaysHowBigAPoolIsNeeded) {
  Environment env = SmallEnvironment();
  env.cluster_options.memory_node.pool_bytes = uint64_t{1} << 20;
  PointConfig config = SmallPoint("btree", "c");
  config.workload.record_count = 1'000'000;
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("--pool-bytes="), std::string::npos)
      << result.status().ToString();
}

// Every worker thread may hold a partly used chunk on every memory node, so
// many threads on small pools are refused up front, naming the chunks,
// rather than running out of memory halfway (Sherman's preset did at 1 GiB).
TEST(BenchRunner, ChunksTheWorkerThreadsMayHoldCountAgainstThePool) {
  Environment env = SmallEnvironment();  // 2 memory nodes of 64 MiB, 1 MiB chunks
  PointConfig config = SmallPoint("btree", "c");
  config.threads = 32;  // 2 compute nodes x 32 threads x 2 memory nodes x 1 MiB = 128 MiB
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("64 worker threads"), std::string::npos)
      << result.status().ToString();
  EXPECT_NE(result.status().message().find("--pool-bytes="), std::string::npos);
  // The null index allocates nothing: no chunks to hold.
  config = SmallPoint("null", "c");
  config.threads = 32;
  const Status null_check = CheckPoint(config, env);
  EXPECT_TRUE(null_check.ok()) << null_check.ToString();
}

TEST(BenchRunner, NullIndexRunsEveryOperationAndTouchesNoMemory) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("null", "a");
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const PhaseResult& run = PhaseNamed(*result, "run");
  EXPECT_EQ(run.operations, config.workload.operation_count);
  EXPECT_EQ(run.fabric.reads + run.fabric.writes, 0u);
}

TEST(BenchRunner, ResultsSurviveJson) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "e");
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const PhaseResult& run = PhaseNamed(*result, "run");
  StatusOr<PhaseResult> back = PhaseFromJson(nlohmann::json::parse(ToJson(run).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->operations, run.operations);
  EXPECT_EQ(back->index.Total(), run.index.Total());
  EXPECT_EQ(back->fabric, run.fabric);
  EXPECT_EQ(back->memory_node_ops, run.memory_node_ops);
  for (size_t t = 0; t < kOpTypes; ++t) {
    EXPECT_EQ(back->ops[t].operations, run.ops[t].operations);
    EXPECT_EQ(back->ops[t].scan_items, run.ops[t].scan_items);
    EXPECT_EQ(back->ops[t].latency.Percentile(99), run.ops[t].latency.Percentile(99));
    EXPECT_EQ(back->ops[t].latency.max(), run.ops[t].latency.max());
  }
  // Merging a node's result into an empty one gives it back.
  PhaseResult merged;
  merged.Merge(*back);
  EXPECT_EQ(merged.operations, run.operations);
  EXPECT_EQ(merged.AllLatencies().count(), run.AllLatencies().count());

  const nlohmann::json point = PointJson(config, *result, RunInfo{"local", 2, 64 << 20, {}});
  EXPECT_EQ(point["index"], "btree");
  EXPECT_EQ(point["workload"]["name"], "e");
  EXPECT_EQ(point["phases"].size(), result->phases.size());
  EXPECT_FALSE(PhaseFromJson(nlohmann::json::parse(R"({"phase":"run"})")).ok());
}

// Review regressions (branch review-ycsb). Each fails on 64ab9de.

// --duration bounds the run phase even when operations never yield (the
// null index, an all-cache-hit path): each context used to start its own
// clock when first scheduled, so coroutines of one thread ran one duration
// each, one after another (4 coroutines: 4x the duration).
TEST(BenchReview, DurationBoundsTheRunWhenOperationsDoNotYield) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("null", "c");
  config.compute_nodes = 1;
  config.threads = 1;
  config.coroutines = 4;
  config.duration = std::chrono::milliseconds(300);
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_LT(PhaseNamed(*result, "run").seconds, 0.6)
      << "a 0.3 s run took " << PhaseNamed(*result, "run").seconds << " s";
}

// --trace-out writes the operations the run executed: in duration mode the
// last operation each context generated (and traced) before seeing the
// deadline was never executed, yet it was written.
TEST(BenchReview, ATraceOfADurationRunHoldsExactlyTheExecutedOperations) {
  const std::string path = ::testing::TempDir() + "/bench_review_duration_trace.txt";
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "a");
  config.duration = std::chrono::milliseconds(200);
  config.trace_out = path;
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  StatusOr<std::vector<TraceOp>> trace = ReadTrace(path, config.keys);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->size(), PhaseNamed(*result, "run").operations);
  std::filesystem::remove(path);
}

// A phase's longest lock wait is the phase's: IndexStats' operator- leaves
// the handle's all-time maximum in place, so a read-only run reported the
// load's longest wait.
// The index keeps one longest wait since it opened (IndexStats' difference
// keeps the maximum), and the report says so: a later phase never shows
// less than an earlier one.
TEST(BenchReview, LongestLockWaitIsSinceTheIndexOpened) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "c");  // the run takes no lock
  config.load = LoadMode::kInsert;                // the load does
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_GE(PhaseNamed(*result, "run").index.longest_lock_wait_ns,
            PhaseNamed(*result, "load").index.longest_lock_wait_ns);
  const nlohmann::json run = ToJson(PhaseNamed(*result, "run"));
  EXPECT_TRUE(run.contains("longest_lock_wait_since_open_ns"));
}

TEST(BenchRegistry, IndexesByNameWithTheirOptionsAndLadders) {
  EXPECT_FALSE(FindIndex("nope").ok());
  EXPECT_NE(FindIndex("nope").status().message().find("btree"), std::string::npos);
  const IndexKind& btree = **FindIndex("btree");
  ASSERT_EQ(btree.ladder.size(), 5u);
  EXPECT_EQ(btree.ladder.front().label, "FG+");
  const IndexSettings baseline = LadderSettings(btree, 0);
  EXPECT_EQ(baseline.at("combine_commands"), "false");
  EXPECT_EQ(baseline.at("entry_level_write_back"), "false");
  const IndexSettings all = LadderSettings(btree, btree.ladder.size() - 1);
  for (const char* name :
       {"combine_commands", "on_chip_locks", "local_lock_table", "entry_level_write_back"}) {
    EXPECT_EQ(all.at(name), "true") << name;
  }
  // Bad settings are named.
  auto cluster = dmidx::testing::OpenCluster(/*faults=*/false);
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({}, &client).ok());
  std::unique_ptr<RangeIndex> index;
  Status bad = btree.open(client.get(), "t", 8, {{"combine_commands", "maybe"}}, &index);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("combine_commands"), std::string::npos);
  bad = btree.open(client.get(), "t", 8, {{"no_such_option", "1"}}, &index);
  EXPECT_NE(bad.message().find("no_such_option"), std::string::npos);
  EXPECT_TRUE(btree.open(client.get(), "t", 8, {{"cache_bytes", "1M"}}, &index).ok());
}

}  // namespace
}  // namespace dmidx::bench
