// What B+tree operations cost on the in-process cluster, with every
// technique on (Arg 0) and with all off (Arg 1, the paper's FG+ baseline):
// time per operation on this machine, and the counts that carry over to a
// real fabric: round trips, bytes read and written per operation.
//
// One blocking context, no contention, a tree of kKeys keys in 1 KiB nodes
// bulk loaded at 70% fill; keys drawn uniformly.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/keys.h"

namespace dmidx {
namespace {

constexpr uint64_t kKeys = 200000;

struct Setup {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> context;
  std::unique_ptr<BTree> tree;
};

// Builds (once per configuration) a loaded tree; Arg 0: defaults, 1: Baseline().
Setup& TreeFor(benchmark::State& state) {
  static Setup setups[2];
  const auto config = static_cast<size_t>(state.range(0));
  Setup& setup = setups[config];
  if (setup.tree) return setup;
  ClusterOptions options;
  options.memory_nodes = 2;
  options.memory_node.pool_bytes = uint64_t{512} << 20;
  options.memory_node.huge_pages = false;
  Status status = Cluster::Open(options, &setup.cluster);
  if (status.ok()) status = setup.cluster->NewClient({}, &setup.client);
  if (status.ok()) status = setup.client->NewBlockingContext(&setup.context);
  const BTreeOptions tree_options = config == 0 ? BTreeOptions() : BTreeOptions::Baseline();
  if (status.ok()) status = BTree::Open(setup.client.get(), "bench", tree_options, &setup.tree);
  std::vector<KeyValue> rows;
  for (uint64_t key = 0; key < kKeys; ++key)
    rows.push_back({EncodeUint64Key(2 * key), key});
  if (status.ok()) status = setup.tree->BulkLoad(*setup.context, rows, 0.7);
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    setup.tree.reset();
  }
  return setup;
}

// Runs `op(setup, rng)` once per iteration and reports the counters of
// operation kind `kind` per iteration.
template <typename Op>
void Measure(benchmark::State& state, IndexOp kind, Op op) {
  Setup& setup = TreeFor(state);
  if (!setup.tree) return;
  std::mt19937_64 rng(static_cast<uint64_t>(kind));
  const IndexStats before = setup.tree->stats();
  for (auto _ : state) {
    const Status status = op(setup, EncodeUint64Key(2 * (rng() % kKeys)), rng);
    if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  }
  const OpCounters used = (setup.tree->stats() - before)[kind];
  const auto per_op = benchmark::Counter::kAvgIterations;
  state.counters["round_trips"] = benchmark::Counter(double(used.round_trips), per_op);
  state.counters["bytes_read"] = benchmark::Counter(double(used.bytes_read), per_op);
  state.counters["bytes_written"] = benchmark::Counter(double(used.bytes_written), per_op);
  state.SetLabel(state.range(0) == 0 ? "all techniques" : "baseline (FG+)");
}

void BM_Lookup(benchmark::State& state) {
  uint64_t value = 0;
  Measure(state, IndexOp::kLookup, [&](Setup& setup, const std::string& key, std::mt19937_64&) {
    return setup.tree->Lookup(*setup.context, key, &value);
  });
}
BENCHMARK(BM_Lookup)->Arg(0)->Arg(1);

void BM_Update(benchmark::State& state) {
  Measure(state, IndexOp::kUpdate, [](Setup& setup, const std::string& key, std::mt19937_64& rng) {
    return setup.tree->Update(*setup.context, key, rng());
  });
}
BENCHMARK(BM_Update)->Arg(0)->Arg(1);

// Scans of 100 keys (YCSB E's longest), by count.
void BM_Scan100(benchmark::State& state) {
  std::vector<KeyValue> page;
  Measure(state, IndexOp::kScan, [&](Setup& setup, const std::string& key, std::mt19937_64&) {
    return setup.tree->Scan(*setup.context, key, 100, &page);
  });
}
BENCHMARK(BM_Scan100)->Arg(0)->Arg(1);

}  // namespace
}  // namespace dmidx
