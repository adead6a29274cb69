// The bench end to end on the local fabric: every built-in workload with
// small counts, checked for exact operation counts, no errors and no lost
// loaded keys; insert loading; traces through the runner; the pool check;
// results through JSON and back; the registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/trace.h"
#include "bench/workload.h"
#include "dmidx/btree.h"
#include "dmidx/radix.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/sanitizers.h"

namespace dmidx::bench {
namespace {

RunInfo LocalRunInfo(uint32_t memory_nodes, uint64_t pool_bytes) {
  RunInfo info;
  info.backend = "local";
  info.memory_nodes = memory_nodes;
  info.pool_bytes = pool_bytes;
  return info;
}

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
    // (The churn deletes: its updates may find their key gone.)
    EXPECT_EQ(run[OpType::kRead].not_found, 0u);
    if (config.workload.delete_proportion == 0) {
      EXPECT_EQ(run[OpType::kUpdate].not_found, 0u);
    }
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

TEST(BenchRunner, InsertStartNumbersTheRecordsFromIt) {
  // YCSB's insertstart: the records are key numbers 500 .. 1999, new keys
  // are numbered from recordcount (2000) on, and no operation touches a
  // number below 500.
  const std::string path = ::testing::TempDir() + "/bench_insert_start_trace.txt";
  for (const auto& [workload, load] :
       {std::pair{"a", LoadMode::kBulk}, std::pair{"d", LoadMode::kInsert}}) {
    SCOPED_TRACE(workload);
    Environment env = SmallEnvironment();
    PointConfig config = SmallPoint("btree", workload);
    config.load = load;
    config.workload.insert_start = 500;
    config.trace_out = path;
    StatusOr<PointResult> result = RunPoint(config, 0, env);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(PhaseNamed(*result, "load").operations, 1500u);
    const PhaseResult& run = PhaseNamed(*result, "run");
    EXPECT_EQ(run[OpType::kRead].not_found, 0u);
    EXPECT_EQ(run[OpType::kRead].missing_loaded, 0u);
    StatusOr<std::vector<TraceOp>> trace = ReadTrace(path, config.keys);
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    std::map<std::string, uint64_t> numbers;
    for (uint64_t n = 0; n < 2000 + config.workload.operation_count; ++n)
      numbers[config.keys.Format(n)] = n;
    uint64_t records_read = 0;
    for (const TraceOp& op : *trace) {
      const auto it = numbers.find(op.key);
      ASSERT_NE(it, numbers.end()) << OpTypeName(op.op);
      ASSERT_GE(it->second, 500u) << OpTypeName(op.op);
      records_read += op.op != OpType::kInsert && it->second < 2000;
    }
    EXPECT_GT(records_read, 0u);
    std::filesystem::remove(path);
  }
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

// deleteproportion (dmidx's extension): deletes of existing keys, chosen
// like reads, on every index. A read of a key this run deleted finds
// nothing without counting as a lost key; upserts put some back.
TEST(BenchRunner, ADeleteMixRunsOnEveryIndexAndCountsItsDeletes) {
  for (const IndexKind& kind : RegisteredIndexes()) {
    SCOPED_TRACE(kind.name);
    Environment env = SmallEnvironment();
    PointConfig config = SmallPoint(kind.name, "a");
    config.workload.read_proportion = 0.4;
    config.workload.update_proportion = 0.1;
    config.workload.insert_proportion = 0.2;
    config.workload.insert_existing_proportion = 0.5;
    config.workload.delete_proportion = 0.3;
    StatusOr<PointResult> result = RunPoint(config, 0, env);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const PhaseResult& run = PhaseNamed(*result, "run");
    EXPECT_EQ(run.operations, config.workload.operation_count);
    EXPECT_EQ(SumOps(run), run.operations);
    const OpResult& deletes = run[OpType::kDelete];
    EXPECT_NEAR(static_cast<double>(deletes.operations) / run.operations, 0.3, 0.06);
    EXPECT_EQ(deletes.latency.count(), deletes.operations);
    for (const OpResult& op : run.ops)
      EXPECT_EQ(op.missing_loaded, 0u);
    if (kind.name == "null") continue;  // keeps no keys: nothing is ever missing
    EXPECT_EQ(run.index[IndexOp::kDelete].operations, deletes.operations);
    // Zipfian picks the hot keys again: some deletes find their key gone,
    // and so do some reads, yet most keys are still there.
    EXPECT_GT(deletes.not_found, 0u);
    EXPECT_LT(deletes.not_found, deletes.operations);
    EXPECT_GT(run[OpType::kRead].not_found, 0u);
    EXPECT_LT(run[OpType::kRead].not_found, run[OpType::kRead].operations);
  }
}

// An index that loses every tenth record of its bulk load: what the bench's
// lost-key check is for.
class LosingIndex : public RangeIndex {
 public:
  explicit LosingIndex(std::unique_ptr<RangeIndex> index) : index_(std::move(index)) {}
  Status Insert(Context& ctx, std::string_view key, uint64_t value) override {
    return index_->Insert(ctx, key, value);
  }
  Status Update(Context& ctx, std::string_view key, uint64_t value) override {
    return index_->Update(ctx, key, value);
  }
  Status Delete(Context& ctx, std::string_view key) override { return index_->Delete(ctx, key); }
  Status Lookup(Context& ctx, std::string_view key, uint64_t* value) override {
    return index_->Lookup(ctx, key, value);
  }
  Status Scan(Context& ctx, std::string_view from, std::string_view to,
              std::vector<KeyValue>* out) override {
    return index_->Scan(ctx, from, to, out);
  }
  Status Scan(Context& ctx, std::string_view from, size_t count,
              std::vector<KeyValue>* out) override {
    return index_->Scan(ctx, from, count, out);
  }
  Status BulkLoad(Context& ctx, std::span<const KeyValue> sorted, double fill_factor) override {
    std::vector<KeyValue> kept;
    for (const KeyValue& row : sorted)
      if (row.value % 10 != 3) kept.push_back(row);  // values are the record numbers
    return index_->BulkLoad(ctx, kept, fill_factor);
  }
  void Close() override { index_->Close(); }
  uint32_t key_bytes() const override { return index_->key_bytes(); }
  IndexStats stats() const override { return index_->stats(); }

 private:
  std::unique_ptr<RangeIndex> index_;
};

// A lost key is counted whichever operation finds it missing first: a
// delete that is the first of its key and finds nothing has found a loss
// (and so has a later read of that key), while a key this run deleted is
// never counted.
TEST(BenchRunner, ALostKeyIsCountedEvenWhenADeleteFindsItFirst) {
  IndexKind losing = **FindIndex("btree");
  const auto open = losing.open;
  losing.name = "losing-btree";
  losing.open = [open](Client* client, std::string_view name, uint32_t key_bytes,
                       const IndexSettings& settings, std::unique_ptr<RangeIndex>* index) {
    std::unique_ptr<RangeIndex> inner;
    DMIDX_RETURN_IF_ERROR(open(client, name, key_bytes, settings, &inner));
    *index = std::make_unique<LosingIndex>(std::move(inner));
    return Status::Ok();
  };
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "c");
  config.index = &losing;
  config.workload.request_distribution = Distribution::kUniform;  // touches many keys
  config.workload.delete_proportion = 1;                          // half reads, half deletes
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const PhaseResult& run = PhaseNamed(*result, "run");
  EXPECT_GT(run[OpType::kDelete].missing_loaded, 0u);
  EXPECT_GT(run[OpType::kRead].missing_loaded, 0u);
  // Every loss is a NotFound, but not every NotFound is a loss: keys
  // deleted before are found missing too.
  EXPECT_LT(run[OpType::kRead].missing_loaded, run[OpType::kRead].not_found);
}

TEST(BenchRunner, DeletesAreTracedAndReplayed) {
  const std::string path = ::testing::TempDir() + "/bench_trace_deletes.txt";
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("radix", "c");
  config.compute_nodes = 1;
  config.threads = 1;
  config.coroutines = 1;
  config.workload.operation_count = 400;
  config.workload.delete_proportion = 1;  // half reads, half deletes
  config.trace_out = path;
  StatusOr<PointResult> first = RunPoint(config, 0, env);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<std::vector<TraceOp>> written = ReadTrace(path, config.keys);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  ASSERT_EQ(written->size(), 400u);
  uint64_t traced_deletes = 0;
  for (const TraceOp& op : *written)
    traced_deletes += op.op == OpType::kDelete;
  EXPECT_EQ(traced_deletes, PhaseNamed(*first, "run")[OpType::kDelete].operations);
  EXPECT_GT(traced_deletes, 100u);

  // The replay issues the same deletes on a freshly loaded index: they
  // find (and miss) the same keys, in the same order, on one context.
  config.trace_in = &*written;
  config.trace_out.clear();
  StatusOr<PointResult> replayed = RunPoint(config, 1, env);
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  const PhaseResult& run = PhaseNamed(*replayed, "run");
  EXPECT_EQ(run[OpType::kDelete].operations, traced_deletes);
  EXPECT_EQ(run.index[IndexOp::kDelete].operations, traced_deletes);
  EXPECT_EQ(run[OpType::kDelete].not_found, PhaseNamed(*first, "run")[OpType::kDelete].not_found);
  EXPECT_EQ(run[OpType::kRead].not_found, PhaseNamed(*first, "run")[OpType::kRead].not_found);
  std::filesystem::remove(path);
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
  EXPECT_EQ(back->reclamation, run.reclamation);
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

  const nlohmann::json point = PointJson(config, *result, LocalRunInfo(2, 64 << 20));
  EXPECT_EQ(point["index"], "btree");
  EXPECT_EQ(point["workload"]["name"], "e");
  EXPECT_EQ(point["phases"].size(), result->phases.size());
  EXPECT_FALSE(PhaseFromJson(nlohmann::json::parse(R"({"phase":"run"})")).ok());
  // The memory report: compute node 0's, after the run.
  ASSERT_TRUE(result->memory.has_value());
  const nlohmann::json& memory = point["memory"];
  EXPECT_EQ(memory["live_keys"], config.workload.record_count + run[OpType::kInsert].operations);
  EXPECT_EQ(memory["bytes_in_use"], result->memory->BytesInUse());
  EXPECT_EQ(memory["pool_bytes"], uint64_t{2} * (64 << 20));
  EXPECT_EQ(memory["pools"].size(), 2u);
  EXPECT_FALSE(memory["quiesced"]);
  EXPECT_TRUE(memory["reclamation"].contains("shared_objects_lost"));
  EXPECT_EQ(point["phases"][1]["reclamation"]["retired_objects"], run.reclamation.retired_objects);
}

// The live-key count at a point's end: one scan over the index, a page at
// a time, the page's last key not counted twice.
TEST(BenchRunner, CountKeysCountsEveryKeyOnceWhateverThePage) {
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(SmallEnvironment().cluster_options, &cluster).ok());
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({}, &client).ok());
  std::unique_ptr<RangeIndex> index;
  ASSERT_TRUE((*FindIndex("radix"))->open(client.get(), "count", 8, {}, &index).ok());
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  KeyFormat keys;
  std::string key;
  for (uint64_t n = 0; n < 100; ++n) {
    keys.Format(n, &key);
    ASSERT_TRUE(index->Insert(*ctx, key, n).ok());
  }
  for (size_t page : {size_t{1}, size_t{2}, size_t{7}, size_t{99}, size_t{100}, size_t{1024}}) {
    StatusOr<uint64_t> count = CountKeys(*ctx, *index, 8, page);
    ASSERT_TRUE(count.ok()) << count.status().ToString();
    EXPECT_EQ(*count, 100u) << "page " << page;
  }
  EXPECT_TRUE(CountKeys(*ctx, *index, 8, 0).status().IsInvalidArgument());
  index->Close();
}

// The churn (--write-bytes-multiple): the run phase writes its pools'
// worth, then quiesces: everything retired was reclaimed, the memory
// report counts the keys left, and the pool holds them with room to spare.
TEST(BenchRunner, TheChurnWritesItsPoolsThenReportsQuiescedMemory) {
  constexpr uint64_t kPool = uint64_t{16} << 20;
  // One pool under the sanitizers: the bench's logic is the same.
  constexpr uint64_t kMultiple = dmidx::testing::kAnySanitizer ? 1 : 2;
  for (const std::string index : {"radix", "btree"}) {
    SCOPED_TRACE(index);
    Environment env = SmallEnvironment();
    env.cluster_options.memory_nodes = 1;
    env.cluster_options.memory_node.pool_bytes = kPool;
    env.cluster_options.memory_node.chunk_bytes = uint64_t{64} << 10;
    env.cluster_options.lease.period = std::chrono::milliseconds(2);
    env.cluster_options.lease.timeout = std::chrono::milliseconds(20);
    PointConfig config = SmallPoint(index, "churn");
    config.compute_nodes = 1;
    config.write_bytes_multiple = kMultiple;
    StatusOr<PointResult> result = RunPoint(config, 0, env);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const PhaseResult& run = PhaseNamed(*result, "run");
    // It ran to its bytes, not to operation_count.
    EXPECT_GE(run.fabric.bytes_written, kMultiple * kPool);
    EXPECT_GT(run.operations, config.workload.operation_count);
    EXPECT_EQ(run[OpType::kRead].operations, 0u);
    EXPECT_GT(run[OpType::kDelete].operations, 0u);
    for (const OpResult& op : run.ops)
      EXPECT_EQ(op.missing_loaded, 0u);
    ASSERT_TRUE(result->memory.has_value());
    const MemoryReport& memory = *result->memory;
    EXPECT_TRUE(memory.quiesced);
    EXPECT_EQ(run.reclamation.reclaimed_objects, run.reclamation.retired_objects);
    EXPECT_EQ(run.reclamation.reclaimed_bytes, run.reclamation.retired_bytes);
    if (index == "radix") {
      // Deletes and out-of-place updates retire leaves.
      EXPECT_GT(run.reclamation.retired_objects, 0u);
      EXPECT_GT(run.reclamation.epoch_advances, 0u);
    }
    // About half the keys are present at the end (as many inserts as
    // deletes over a uniform choice), and never more than the key set.
    EXPECT_GT(memory.live_keys, config.workload.record_count / 4);
    EXPECT_LE(memory.live_keys, config.workload.record_count);
    ASSERT_EQ(memory.pools.size(), 1u);
    EXPECT_EQ(memory.PoolBytes(), kPool);
    EXPECT_GT(memory.BytesInUse(), 0u);
    EXPECT_LT(memory.BytesInUse(), memory.PoolBytes());
    EXPECT_DOUBLE_EQ(memory.BytesPerLiveKey(), static_cast<double>(memory.BytesInUse()) /
                                                   static_cast<double>(memory.live_keys));
    const nlohmann::json point = PointJson(config, *result, LocalRunInfo(1, kPool));
    EXPECT_EQ(point["run"]["write_bytes_multiple"], kMultiple);
    EXPECT_TRUE(point["memory"]["quiesced"]);
    EXPECT_EQ(point["memory"]["reclamation"]["retired_bytes"], run.reclamation.retired_bytes);
    // The text report says it too.
    char buffer[16384] = {};
    std::FILE* out = fmemopen(buffer, sizeof(buffer) - 1, "w");
    ASSERT_NE(out, nullptr);
    PrintPoint(out, config, *result);
    std::fclose(out);
    const std::string text(buffer);
    EXPECT_NE(text.find("remote memory (quiesced): "), std::string::npos) << text;
    EXPECT_NE(text.find(std::to_string(memory.live_keys) + " live keys"), std::string::npos)
        << text;
    if (index == "radix") {
      EXPECT_NE(text.find("reclamation: retired "), std::string::npos) << text;
    }
  }
}

TEST(BenchRunner, AChurnThatCannotEndIsRefusedBeforeItRuns) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("radix", "churn");
  config.write_bytes_multiple = 1;
  EXPECT_TRUE(CheckPoint(config, env).ok());
  for (const double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    config.write_bytes_multiple = bad;
    EXPECT_TRUE(CheckPoint(config, env).IsInvalidArgument()) << bad;
  }
  config.write_bytes_multiple = 1;
  config.duration = std::chrono::milliseconds(100);
  EXPECT_TRUE(CheckPoint(config, env).IsInvalidArgument());
  config.duration = std::chrono::milliseconds(0);
  config.timeline_interval = std::chrono::nanoseconds(0);
  const Status no_timeline = CheckPoint(config, env);
  EXPECT_TRUE(no_timeline.IsInvalidArgument());
  EXPECT_NE(no_timeline.message().find("timeline"), std::string::npos) << no_timeline.ToString();
}

// The failure experiment on the local fabric (threads in real time; the
// sim run is tests/ycsb_sim_test.sh): compute node 2 of 3 is killed 100 ms
// into a 300 ms read-only run; its operations fail or stop, and the others
// read on, the phase's timeline counting both.
TEST(BenchRunner, AKilledComputeNodeStopsAndTheOthersRunThePhaseOut) {
  Environment env = SmallEnvironment();
  PointConfig config = SmallPoint("btree", "c");
  config.compute_nodes = 3;
  config.duration = std::chrono::milliseconds(300);
  config.timeline_interval = std::chrono::milliseconds(10);
  config.kill = FailureExperiment{.compute_node = 2, .at = std::chrono::milliseconds(100)};
  EXPECT_TRUE(CheckPoint(config, env).IsInvalidArgument()) << "no way to kill a node given";
  env.kill_compute_node = [](Cluster& cluster, uint32_t node) {
    dmidx::testing::Faults(cluster).KillComputeNode(node);
    return Status::Ok();
  };
  StatusOr<PointResult> result = RunPoint(config, 0, env);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const PhaseResult& run = PhaseNamed(*result, "run");
  ASSERT_TRUE(run.kill.has_value());
  const KillResult& kill = *run.kill;
  EXPECT_EQ(kill.compute_node, 2u);
  EXPECT_GE(kill.killed_at, config.kill->at);
  EXPECT_GT(kill.operations, 0u);
  // The survivors (two nodes, three times as long) did far more.
  EXPECT_LT(kill.operations, (run.operations - kill.operations) / 2)
      << kill.operations << " of " << run.operations;
  // Lock-free reads: only the killed node's operations fail.
  EXPECT_EQ(Total(run.failed), Total(kill.failed)) << FailedText(run.failed);
  // Every operation is in the timeline; the survivors read after the kill.
  uint64_t in_timeline = 0, survivors_after = 0;
  const Timeline survivors = run.timeline.Minus(kill.timeline);
  for (size_t w = 0; w < run.timeline.windows.size(); ++w) {
    in_timeline += run.timeline.windows[w].ops + Total(run.timeline.windows[w].failed);
    if (survivors.interval * static_cast<int64_t>(w) > kill.killed_at) {
      survivors_after += survivors.windows[w].ops;
    }
  }
  EXPECT_EQ(in_timeline, run.operations);
  EXPECT_GT(survivors_after, 0u);
  EXPECT_TRUE(run.KillRecovery().measurable);
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

// An index's check refuses what its open would, naming the setting in the
// words of dmidx-ycsb's flags, and keys longer than the index takes; a
// point with such keys is refused before its pool is sized for them.
TEST(BenchRegistry, ChecksNameTheSettingAndTheKeyLimit) {
  const IndexKind& btree = **FindIndex("btree");
  const IndexKind& radix = **FindIndex("radix");
  const IndexKind& null = **FindIndex("null");
  EXPECT_EQ(btree.max_key_bytes, BTreeOptions::kMaxKeyBytes);
  EXPECT_EQ(radix.max_key_bytes, RadixOptions::kMaxKeyBytes);
  EXPECT_EQ(radix.max_pool_bytes, RadixOptions::kMaxPoolBytes);
  auto refusal = [](const IndexKind& kind, uint32_t key_bytes, const IndexSettings& settings) {
    return std::string(kind.check(key_bytes, settings).message());
  };
  EXPECT_EQ(refusal(btree, 8, {}), "");
  EXPECT_EQ(refusal(btree, 8, {{"node_bytes", "0"}}), "btree.node_bytes: must be >= 256, not 0");
  EXPECT_EQ(refusal(btree, 8, {{"node_bytes", "1000"}}),
            "btree.node_bytes: must be a multiple of 64, not 1000");
  EXPECT_EQ(refusal(btree, 200, {}),
            "btree.node_bytes: a node of 1024 bytes holds fewer than 4 keys of 200 bytes; use "
            "larger nodes");
  EXPECT_EQ(refusal(btree, 200, {{"node_bytes", "4K"}}), "");
  EXPECT_EQ(refusal(btree, 300, {}), "btree takes keys of 1 to 256 bytes, not 300");
  EXPECT_EQ(refusal(btree, 8, {{"max_handovers", "99999999999"}}),
            "btree.max_handovers: must be <= 4294967295, not 99999999999");
  EXPECT_EQ(refusal(radix, 8, {{"rdwc_table_entries", "0"}}),
            "radix.rdwc_table_entries: must be >= 1, not 0");
  EXPECT_EQ(refusal(radix, 8, {{"max_handovers", "99999999999"}}),
            "radix.max_handovers: must be <= 4294967295, not 99999999999");
  EXPECT_EQ(refusal(radix, 8, {{"leaf_queue_buckets", "0"}}),
            "radix.leaf_queue_buckets: must be >= 1, not 0");
  EXPECT_EQ(refusal(radix, 8, {{"leaf_queue_buckets", "65537"}}),
            "radix.leaf_queue_buckets: must be <= 65536, not 65537");
  EXPECT_EQ(refusal(radix, 8, {{"leaf_queue_buckets", "1"}}), "");
  EXPECT_EQ(refusal(radix, 8, {{"lock_timeout_ms", "-1"}}),
            "radix.lock_timeout_ms: must be >= 1, not -1");
  EXPECT_EQ(refusal(radix, 8, {{"in_place_leaves", "maybe"}}),
            "radix.in_place_leaves: 'maybe' is not on or off (nor true/false, yes/no, 1/0)");
  EXPECT_EQ(refusal(radix, 129, {}), "radix takes keys of 1 to 128 bytes, not 129");
  EXPECT_EQ(refusal(null, 8, {{"x", "1"}}),
            "null has no option 'x' (see dmidx-ycsb --help for the index options)");

  Environment env = SmallEnvironment();
  env.cluster_options.memory_node.pool_bytes = uint64_t{1} << 20;
  PointConfig config = SmallPoint("radix", "c");
  config.workload.record_count = 1'000'000;
  config.keys.bytes = 300;
  EXPECT_EQ(std::string(CheckPoint(config, env).message()),
            "radix takes keys of 1 to 128 bytes, not 300");
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
