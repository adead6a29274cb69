// Schedule exploration on the simulated cluster: both indexes run short
// mixed histories under many seeds, each seed choosing the index, the
// techniques (all on, Baseline(), or different switches on different
// compute nodes of one index), skewed or uniform keys and the fabric's
// faults (torn READs and WRITEs, reordering, delays), and the virtual-time
// fabric turning the seed into one exact schedule. Every history, with the
// final contents read back, must be linearizable (testing/linearizability.h).
//
//   sim_schedules_test                    the default number of schedules
//   sim_schedules_test --schedules=20000  more (or --first-seed=S to shift)
//   sim_schedules_test --seed=1234        replay one schedule exactly
//
// A failing schedule prints the command that replays it. A seed that once
// found a bug stays in kRegressionSeeds.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/radix.h"
#include "testing/history.h"
#include "testing/linearizability.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/run_clients.h"
#include "testing/sanitizers.h"
#include "testing/watchdog.h"
#include "testing/zipf.h"

namespace dmidx::testing {
namespace {

// Schedules a plain run explores: many in an optimized build, fewer under a
// sanitizer (the release stage of CI runs the full count; the sim runs on
// one thread, so a sanitizer adds memory checks, not races).
constexpr uint64_t kDefaultSchedules = kAnySanitizer ? 40 : 1000;

// Seeds that found bugs, run on every run (none has yet: add a failing
// seed here when its bug is fixed).
constexpr std::array<uint64_t, 0> kRegressionSeeds = {};

struct Flags {
  uint64_t schedules = kDefaultSchedules;
  uint64_t first_seed = 1;
  std::optional<uint64_t> seed;  // replay only this one
  std::string program = "sim_schedules_test";
};
Flags flags;

constexpr uint32_t kComputeNodes = 3;
constexpr uint32_t kThreads = 2;
constexpr uint32_t kCoroutines = 2;
constexpr int kOpsPerContext = 40;

// What a seed chose, printed with a failure.
struct Choice {
  bool radix = false;
  int techniques = 0;  // 0 all on, 1 Baseline(), 2 mixed per compute node
  bool skewed = false;
  uint64_t keys = 0;
  uint64_t max_delay_us = 0;
  std::string ToString() const {
    static const char* const kTechniques[] = {"all techniques", "Baseline()",
                                              "mixed switches per compute node"};
    return std::string(radix ? "radix" : "btree") + ", " + kTechniques[techniques] + ", " +
           (skewed ? "zipf" : "uniform") + " over " + std::to_string(keys) +
           " keys, delays up to " + std::to_string(max_delay_us) + " us";
  }
};

// Options of compute node `cn`: everything on, everything off, or (mixed)
// node 0 on, node 1 off, node 2 a random pick per switch. Settings fixed
// at creation are the same on every node.
BTreeOptions BTreeFor(const Choice& choice, uint32_t cn, std::mt19937_64& rng) {
  BTreeOptions on;
  on.read_delegation = true;
  on.write_combining = true;
  on.node_bytes = 256;  // 13 keys a leaf: splits within a short history
  BTreeOptions off = BTreeOptions::Baseline();
  off.node_bytes = on.node_bytes;
  off.on_chip_locks = on.on_chip_locks;
  if (choice.techniques == 0) return on;
  if (choice.techniques == 1) {
    off.on_chip_locks = false;
    return off;
  }
  if (cn == 0) return on;
  if (cn == 1) return off;
  BTreeOptions pick = on;
  pick.cache_bytes = rng() % 2 ? on.cache_bytes : 0;
  pick.local_lock_table = rng() % 2;
  pick.combine_commands = rng() % 2;
  pick.entry_level_write_back = rng() % 2;
  pick.read_delegation = rng() % 2;
  pick.write_combining = rng() % 2;
  return pick;
}

RadixOptions RadixFor(const Choice& choice, uint32_t cn, std::mt19937_64& rng) {
  RadixOptions on;
  RadixOptions off = RadixOptions::Baseline();
  if (choice.techniques == 0) return on;
  if (choice.techniques == 1) return off;
  off.homogeneous_nodes = on.homogeneous_nodes;
  if (cn == 0) return on;
  if (cn == 1) return off;
  RadixOptions pick = on;
  pick.cache_bytes = rng() % 2 ? on.cache_bytes : 0;
  pick.in_place_leaves = rng() % 2;
  pick.rear_embedded_lock = rng() % 2;
  pick.read_delegation = rng() % 2;
  pick.write_combining = rng() % 2;
  return pick;
}

// A hash of every logged operation's kind, key, values, ticks, status and
// scan result: two runs with equal prints ran the same history.
uint64_t Fingerprint(const std::vector<std::vector<LoggedOp>>& logs) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](uint64_t value) { hash = (hash ^ value) * 1099511628211ull; };
  for (const auto& log : logs) {
    for (const LoggedOp& op : log) {
      mix(static_cast<uint64_t>(op.kind));
      mix(static_cast<uint64_t>(op.code));
      mix(op.key);
      mix(op.value);
      mix(op.start);
      mix(op.end);
      for (const KeyValue& pair : op.scanned) {
        mix(std::hash<std::string>()(pair.key));
        mix(pair.value);
      }
    }
  }
  return hash;
}

// Runs schedule `seed`; returns what is wrong ("" when linearizable), the
// history's size in *ops and its fingerprint in *print.
std::string RunSchedule(uint64_t seed, size_t* ops, uint64_t* print = nullptr) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 17);
  Choice choice;
  choice.radix = rng() % 2;
  choice.techniques = static_cast<int>(rng() % 3);
  choice.skewed = rng() % 2;
  choice.keys = choice.skewed ? 8 + rng() % 24 : 64 + rng() % 192;
  choice.max_delay_us = rng() % 4;

  ClusterOptions options = SmallLocalCluster(2, uint64_t{16} << 20, true,
                                             std::chrono::microseconds(choice.max_delay_us));
  options.backend = FabricBackend::kSim;
  options.local.seed = seed;
  std::unique_ptr<Cluster> cluster;
  Status status = Cluster::Open(options, &cluster);
  if (!status.ok()) return "cluster: " + status.ToString();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Client*> raw;
  std::vector<std::unique_ptr<RangeIndex>> indexes;
  for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
    clients.push_back(NewClient(*cluster, kThreads, kCoroutines));
    if (!clients.back()) return "client " + std::to_string(cn);
    raw.push_back(clients.back().get());
    if (choice.radix) {
      std::unique_ptr<Radix> tree;
      status = Radix::Open(raw.back(), "explore", RadixFor(choice, cn, rng), &tree);
      indexes.push_back(std::move(tree));
    } else {
      std::unique_ptr<BTree> tree;
      status = BTree::Open(raw.back(), "explore", BTreeFor(choice, cn, rng), &tree);
      indexes.push_back(std::move(tree));
    }
    if (!status.ok())
      return "open on compute node " + std::to_string(cn) + ": " + status.ToString();
  }

  const uint64_t keys = choice.keys;
  const Zipf zipf(keys, 0.99);
  constexpr size_t kContexts = size_t{kComputeNodes} * kThreads * kCoroutines;
  std::vector<std::vector<LoggedOp>> logs(kContexts + 1);
  uint64_t clock = 1;  // one thread runs every context: a plain counter
  const uint64_t run_seed = rng();
  const std::vector<Status> results = RunClients(raw, [&](int cn, Context& ctx) -> Status {
    const int id = ContextIndex(cn, ctx, clients[0]->options());
    RangeIndex& index = *indexes[cn];
    std::vector<LoggedOp>& log = logs[id];
    std::mt19937_64 ops_rng(run_seed ^ (static_cast<uint64_t>(id) << 40));
    uint64_t sequence = 0;
    for (int i = 0; i < kOpsPerContext; ++i) {
      LoggedOp op;
      op.key = choice.skewed ? zipf(ops_rng) : ops_rng() % keys;
      const std::string key = Key(op.key);
      const uint64_t dice = ops_rng() % 100;
      Status done;
      op.start = clock++;
      if (dice < 30) {
        op.kind = OpKind::kInsert;
        op.value = uint64_t(id + 1) << 32 | ++sequence;
        done = index.Insert(ctx, key, op.value);
      } else if (dice < 45) {
        op.kind = OpKind::kUpdate;
        op.value = uint64_t(id + 1) << 32 | ++sequence;
        done = index.Update(ctx, key, op.value);
      } else if (dice < 60) {
        op.kind = OpKind::kDelete;
        done = index.Delete(ctx, key);
      } else if (dice < 94) {
        op.kind = OpKind::kLookup;
        done = index.Lookup(ctx, key, &op.value);
      } else if (dice % 2 == 0) {
        op.kind = OpKind::kScanRange;
        op.value = std::min(op.key + ops_rng() % 16, keys - 1);
        done = index.Scan(ctx, key, Key(op.value), &op.scanned);
      } else {
        op.kind = OpKind::kScanCount;
        op.value = 1 + ops_rng() % 8;
        done = index.Scan(ctx, key, static_cast<size_t>(op.value), &op.scanned);
      }
      op.end = clock++;
      op.code = done.code();
      const bool may_miss =
          op.kind == OpKind::kUpdate || op.kind == OpKind::kDelete || op.kind == OpKind::kLookup;
      if (!done.ok() && !(may_miss && done.IsNotFound())) {
        return done.WithContext("context " + std::to_string(id) + " op " + std::to_string(i));
      }
      log.push_back(std::move(op));
    }
    return Status::Ok();
  });
  for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
    if (!results[cn].ok())
      return "compute node " + std::to_string(cn) + ": " + results[cn].ToString();
  }
  // The final contents, each key read by another compute node, after
  // everything else.
  std::vector<std::unique_ptr<Context>> readers(kComputeNodes);
  for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
    status = clients[cn]->NewBlockingContext(&readers[cn]);
    if (!status.ok()) return "blocking context: " + status.ToString();
  }
  std::vector<LoggedOp>& final_reads = logs.back();
  for (uint64_t key = 0; key < keys; ++key) {
    LoggedOp op;
    op.kind = OpKind::kLookup;
    op.key = key;
    op.start = clock++;
    const uint32_t cn = static_cast<uint32_t>(key % kComputeNodes);
    status = indexes[cn]->Lookup(*readers[cn], Key(key), &op.value);
    op.end = clock++;
    op.code = status.code();
    if (!status.ok() && !status.IsNotFound()) return "final lookup: " + status.ToString();
    final_reads.push_back(std::move(op));
  }
  LinearizabilityOptions check;
  check.max_key = keys - 1;
  const LinearizabilityReport report = CheckLinearizable(logs, check);
  *ops = report.ops;
  if (print != nullptr) *print = Fingerprint(logs);
  if (report.ok) return "";
  std::string error = choice.ToString() + ": " + report.ToString();
  for (const std::string& line : report.errors)
    error += "\n" + line;
  return error;
}

std::string ReplayCommand(uint64_t seed) {
  return flags.program +
         " --gtest_filter=SimSchedules.EverySchedulesHistoryIsLinearizable --seed=" +
         std::to_string(seed);
}

void Explore(const std::vector<uint64_t>& seeds) {
  Watchdog watchdog(std::chrono::seconds(1500));
  size_t ops = 0, failures = 0;
  for (uint64_t seed : seeds) {
    size_t schedule_ops = 0;
    const std::string error = RunSchedule(seed, &schedule_ops);
    ops += schedule_ops;
    if (!error.empty()) {
      ADD_FAILURE() << "schedule " << seed << " failed; replay it with: " << ReplayCommand(seed)
                    << "\n"
                    << error;
      if (++failures >= 5) break;
    }
  }
  std::printf("%zu schedules, %zu operations checked\n", seeds.size(), ops);
}

TEST(SimSchedules, EverySchedulesHistoryIsLinearizable) {
  std::vector<uint64_t> seeds;
  if (flags.seed) {
    seeds.push_back(*flags.seed);
  } else {
    for (uint64_t s = 0; s < flags.schedules; ++s)
      seeds.push_back(flags.first_seed + s);
  }
  Explore(seeds);
}

TEST(SimSchedules, RegressionSeeds) {
  if (kRegressionSeeds.empty()) GTEST_SKIP() << "no schedule has found a bug yet";
  Explore(std::vector<uint64_t>(kRegressionSeeds.begin(), kRegressionSeeds.end()));
}

// One seed is one schedule: running it twice gives the same history, op
// for op; another seed gives another.
TEST(SimSchedules, ASeedReplaysExactly) {
  std::vector<uint64_t> prints;
  for (uint64_t seed : {3, 4}) {
    size_t first = 0, second = 0;
    uint64_t print_first = 0, print_second = 0;
    EXPECT_EQ(RunSchedule(seed, &first, &print_first), "");
    EXPECT_EQ(RunSchedule(seed, &second, &print_second), "");
    EXPECT_EQ(print_first, print_second) << "seed " << seed << " ran two different histories";
    EXPECT_EQ(first, second);
    EXPECT_GT(first, 0u);
    prints.push_back(print_first);
  }
  EXPECT_NE(prints[0], prints[1]);
}

bool ParseFlag(const char* arg, const char* name, uint64_t* value) {
  const size_t length = std::strlen(name);
  if (std::strncmp(arg, name, length) != 0 || arg[length] != '=') return false;
  char* end = nullptr;
  *value = std::strtoull(arg + length + 1, &end, 10);
  if (end == arg + length + 1 || *end != '\0') {
    std::fprintf(stderr, "%s: expected a number\n", arg);
    std::exit(2);
  }
  return true;
}

}  // namespace
}  // namespace dmidx::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto& flags = dmidx::testing::flags;
  flags.program = argv[0];
  for (int i = 1; i < argc; ++i) {
    uint64_t value = 0;
    if (dmidx::testing::ParseFlag(argv[i], "--schedules", &flags.schedules)) continue;
    if (dmidx::testing::ParseFlag(argv[i], "--first-seed", &flags.first_seed)) continue;
    if (dmidx::testing::ParseFlag(argv[i], "--seed", &value)) {
      flags.seed = value;
      continue;
    }
    std::fprintf(stderr,
                 "%s: unknown flag %s\nflags: --schedules=N (default %llu) --first-seed=S "
                 "(default 1) --seed=S (replay one), and GoogleTest's\n",
                 argv[0], argv[i], static_cast<unsigned long long>(flags.schedules));
    return 2;
  }
  return RUN_ALL_TESTS();
}
