// dmidx-cpu-cost: runs one kind of operation many times on a warm,
// uncontended index of the in-process cluster, inside MeasuredOperations(),
// so that callgrind can count the instructions one operation costs
// (tools/cpu-cost.sh runs it under valgrind and prints the table; see
// docs/cpu-cost.md). Without valgrind it runs just the same and prints the
// operation's counters per operation (round trips, bytes), which tell an
// insert that split a leaf from one that did not.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dmidx/keys.h"
#include "lib/runtime/scheduler.h"
#include "registry/registry.h"
#include "tools/cli.h"

namespace dmidx {
namespace {

constexpr char kDescription[] =
    "Runs one kind of index operation many times on a warm, uncontended index of the\n"
    "in-process cluster (one blocking context, 8-byte keys, B+tree nodes of 1 KiB), inside\n"
    "the function MeasuredOperations, for callgrind to count its instructions:\n"
    "\n"
    "  valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*MeasuredOperations*' \\\n"
    "    dmidx-cpu-cost --index=btree --op=lookup\n"
    "\n"
    "tools/cpu-cost.sh does this for every index, technique set and operation and prints\n"
    "instructions per operation, the client's own apart from the local fabric's.";

constexpr char kFooter[] =
    "Prints one line: the operation, the count measured and the index's counters per\n"
    "operation. Exits 1 if an operation fails.";

struct Config {
  std::string index = "btree";
  bool baseline = false;
  std::string op = "lookup";
  uint64_t keys = 20000;
  uint64_t operations = 2000;
  uint64_t scan_length = 100;
  uint64_t seed = 1;
};

// Key i of the loaded tree: every fourth number, so that the numbers
// between them are absent keys to insert (into leaves and radix nodes that
// have room).
std::string LoadedKey(uint64_t i) {
  return EncodeUint64Key(4 * i);
}

struct Setup {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> context;
  std::unique_ptr<RangeIndex> index;
};

Status Open(const Config& config, Setup* setup) {
  ClusterOptions options;
  options.memory_nodes = 1;
  // Room for every key --keys and --operations allow: a radix tree of
  // fixed 256-slot nodes (the baseline) takes under 128 bytes a key, the
  // B+tree less; pages are touched only when used.
  options.memory_node.pool_bytes = (uint64_t{64} << 20) + 256 * (config.keys + config.operations);
  options.memory_node.huge_pages = false;
  DMIDX_RETURN_IF_ERROR(Cluster::Open(options, &setup->cluster));
  DMIDX_RETURN_IF_ERROR(setup->cluster->NewClient({}, &setup->client));
  DMIDX_RETURN_IF_ERROR(setup->client->NewBlockingContext(&setup->context));
  // The registry's configuration: its defaults, or the one labelled
  // "baseline" (every technique off; each index has one).
  const registry::IndexKind& kind = *registry::FindIndex(config.index);
  const std::string label = config.baseline ? "baseline" : "";
  const auto configuration =
      std::find_if(kind.configurations.begin(), kind.configurations.end(),
                   [&](const registry::Configuration& c) { return c.label == label; });
  if (configuration == kind.configurations.end()) {
    return Status::InvalidArgument(kind.name + " has no configuration '" + label + "'");
  }
  DMIDX_RETURN_IF_ERROR(
      kind.open(setup->client.get(), "cost", 8, configuration->settings, &setup->index));
  std::vector<KeyValue> rows;
  rows.reserve(config.keys);
  for (uint64_t i = 0; i < config.keys; ++i)
    rows.push_back({LoadedKey(i), i});
  return setup->index->BulkLoad(*setup->context, rows, 0.7);
}

// One operation's arguments, made before the measured loop.
struct Call {
  std::string key;
  uint64_t value = 0;
};

enum class Kind { kLookup, kUpdate, kInsert, kDelete, kScan };

// The measured loop: only index calls. Not inlined, so that callgrind's
// --toggle-collect finds it by name.
[[gnu::noinline]] uint64_t MeasuredOperations(RangeIndex& index, Context& ctx, Kind kind,
                                              const std::vector<Call>& calls, size_t scan_length,
                                              std::vector<KeyValue>* scan) {
  uint64_t failures = 0;
  uint64_t found = 0;
  for (const Call& call : calls) {
    Status status;
    switch (kind) {
      case Kind::kLookup:
        status = index.Lookup(ctx, call.key, &found);
        break;
      case Kind::kUpdate:
        status = index.Update(ctx, call.key, call.value);
        break;
      case Kind::kInsert:
        status = index.Insert(ctx, call.key, call.value);
        break;
      case Kind::kDelete:
        status = index.Delete(ctx, call.key);
        break;
      case Kind::kScan:
        status = index.Scan(ctx, call.key, scan_length, scan);
        if (status.ok() && scan->size() != scan_length) ++failures;
        break;
    }
    if (!status.ok()) ++failures;
  }
  return failures;
}

// Two coroutines of one scheduler that yield to each other `yields` times
// in all: what one coroutine switch costs (a Yield into the scheduler and
// the resumption of the next coroutine).
[[gnu::noinline]] void MeasuredSwitches(runtime::Scheduler& scheduler) {
  scheduler.Run();
}

int RunSwitches(const Config& config) {
  runtime::Scheduler scheduler(64 << 10, [] {});
  runtime::Parker parkers[2];
  const uint64_t each = config.operations / 2;
  for (runtime::Parker& parker : parkers) {
    scheduler.Spawn(&parker, [&scheduler, each] {
      for (uint64_t i = 0; i < each; ++i)
        scheduler.Yield();
    });
  }
  MeasuredSwitches(scheduler);
  std::printf("switch: %llu yields, %llu switches into coroutines\n",
              static_cast<unsigned long long>(2 * each),
              static_cast<unsigned long long>(scheduler.switches()));
  return 0;
}

int Run(const Config& config) {
  if (config.op == "switch") return RunSwitches(config);
  Setup setup;
  Status status = Open(config, &setup);
  if (!status.ok()) {
    std::fprintf(stderr, "dmidx-cpu-cost: %s\n", status.ToString().c_str());
    return 1;
  }
  const Kind kind = config.op == "lookup"   ? Kind::kLookup
                    : config.op == "update" ? Kind::kUpdate
                    : config.op == "insert" ? Kind::kInsert
                    : config.op == "delete" ? Kind::kDelete
                                            : Kind::kScan;
  // Distinct loaded keys in random order; inserts take the number after
  // each (absent, in the same leaf or node); scans start low enough to find
  // scan_length keys.
  std::mt19937_64 rng(config.seed);
  std::vector<uint64_t> picks(config.keys);
  for (uint64_t i = 0; i < config.keys; ++i)
    picks[i] = i;
  std::shuffle(picks.begin(), picks.end(), rng);
  std::vector<Call> calls;
  std::vector<Call> warm;
  for (uint64_t i = 0; i < config.operations; ++i) {
    uint64_t pick = picks[i];
    if (kind == Kind::kScan) pick %= config.keys - config.scan_length;
    Call call{kind == Kind::kInsert ? EncodeUint64Key(4 * pick + 1) : LoadedKey(pick), rng()};
    calls.push_back(std::move(call));
  }
  // Warm: every loaded key looked up once (the caches hold every inner
  // node); for the rows that write, also updated to its own value once (the
  // compute node's local lock table has an entry for every leaf's lock).
  uint64_t value = 0;
  for (uint64_t i = 0; i < config.keys && status.ok(); ++i) {
    status = setup.index->Lookup(*setup.context, LoadedKey(i), &value);
    if (status.ok() && kind != Kind::kLookup && kind != Kind::kScan) {
      status = setup.index->Update(*setup.context, LoadedKey(i), value);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "dmidx-cpu-cost: warming up: %s\n", status.ToString().c_str());
    return 1;
  }
  std::vector<KeyValue> scan;
  scan.reserve(config.scan_length);
  const IndexStats before = setup.index->stats();
  const uint64_t failures =
      MeasuredOperations(*setup.index, *setup.context, kind, calls, config.scan_length, &scan);
  if (failures != 0) {
    std::fprintf(stderr, "dmidx-cpu-cost: %llu of %llu %s operations failed\n",
                 static_cast<unsigned long long>(failures),
                 static_cast<unsigned long long>(calls.size()), config.op.c_str());
    return 1;
  }
  const IndexOp op = kind == Kind::kLookup   ? IndexOp::kLookup
                     : kind == Kind::kUpdate ? IndexOp::kUpdate
                     : kind == Kind::kInsert ? IndexOp::kInsert
                     : kind == Kind::kDelete ? IndexOp::kDelete
                                             : IndexOp::kScan;
  const OpCounters spent = (setup.index->stats() - before)[op];
  const double n = static_cast<double>(calls.size());
  std::printf(
      "%s: %zu operations, per operation: %.2f round trips, %.1f bytes read, "
      "%.1f bytes written, %.3f read retries\n",
      config.op.c_str(), calls.size(), static_cast<double>(spent.round_trips) / n,
      static_cast<double>(spent.bytes_read) / n, static_cast<double>(spent.bytes_written) / n,
      static_cast<double>(spent.read_retries) / n);
  return 0;
}

}  // namespace
}  // namespace dmidx

int main(int argc, char** argv) {
  dmidx::Config config;
  CLI::App app(dmidx::kDescription, "dmidx-cpu-cost");
  dmidx::tools::SetUpTool(app, dmidx::kFooter);
  std::vector<std::string> indexes;
  for (const dmidx::registry::IndexKind& kind : dmidx::registry::RegisteredIndexes())
    indexes.push_back(kind.name);
  dmidx::tools::AddChoiceFlag(
      app, "--index", indexes, [&](const std::string& v) { config.index = v; },
      "a registered index: " + dmidx::registry::RegisteredNames() + " (default btree)")
      ->group("Measurement");
  dmidx::tools::AddChoiceFlag(
      app, "--techniques", {"all", "baseline"},
      [&](const std::string& v) { config.baseline = v == "baseline"; },
      "every technique on (the options' defaults), or the registry's baseline configuration, "
      "every technique off (default all)")
      ->group("Measurement");
  bool list_indexes = false;
  dmidx::tools::AddSwitch(app, "--list-indexes", &list_indexes,
                          "print the registered indexes, one a line, and exit")
      ->group("Measurement");
  dmidx::tools::AddChoiceFlag(
      app, "--op", {"lookup", "update", "insert", "delete", "scan", "switch"},
      [&](const std::string& v) { config.op = v; },
      "the operation measured; insert adds absent keys to leaves with room (no split); "
      "scan reads --scan-length keys; switch is a coroutine switch, no index (default lookup)")
      ->group("Measurement");
  dmidx::tools::AddIntegerFlag(app, "--keys", &config.keys, 1000, 10000000,
                               "keys bulk loaded at 70% fill (default 20000)")
      ->group("Measurement");
  dmidx::tools::AddIntegerFlag(app, "--operations", &config.operations, 2, 10000000,
                               "operations measured, at most --keys (default 2000)")
      ->group("Measurement");
  dmidx::tools::AddIntegerFlag(app, "--scan-length", &config.scan_length, 1, 100000,
                               "keys per scan (default 100)")
      ->group("Measurement");
  dmidx::tools::AddIntegerFlag(app, "--seed", &config.seed, 0, UINT64_MAX,
                               "picks the keys and values (default 1)")
      ->group("Measurement");
  dmidx::tools::AddHelpFlag(app, "Measurement");
  if (std::optional<int> exit_code = dmidx::tools::ParseCommandLine(app, argc, argv)) {
    return *exit_code;
  }
  if (list_indexes) {
    for (const std::string& index : indexes)
      std::printf("%s\n", index.c_str());
    return 0;
  }
  if (config.operations > config.keys) {
    return dmidx::tools::BadFlag(
        app, "--operations: must be <= --keys=" + std::to_string(config.keys) + ", not " +
                 std::to_string(config.operations));
  }
  if (config.scan_length >= config.keys) {
    return dmidx::tools::BadFlag(
        app, "--scan-length: must be < --keys=" + std::to_string(config.keys) + ", not " +
                 std::to_string(config.scan_length));
  }
  return dmidx::Run(config);
}
