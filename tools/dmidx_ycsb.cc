// dmidx-ycsb: the YCSB bench of dmidx's indexes. See bench/README.md and
// `dmidx-ycsb --help`.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/keys.h"
#include "bench/properties.h"
#include "bench/registry.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/trace.h"
#include "bench/workload.h"
#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/radix.h"
#include "tools/cli.h"
#include "tools/fault_switch.h"

namespace {

using dmidx::Status;
using dmidx::StatusOr;
namespace bench = dmidx::bench;

constexpr char kProgram[] = "dmidx-ycsb";
constexpr int kBadUsage = 2;
constexpr int kRunFailed = 1;

struct Flags {
  std::vector<std::string> property_files;  // -P
  std::vector<std::string> properties;      // -p
  std::string workloads = "ycsb";
  std::string indexes = "all";
  uint64_t records = 0;     // used when given
  uint64_t operations = 0;  // used when given
  double duration_seconds = 0;
  double write_bytes_multiple = 0;  // the churn: run until this many pools are written
  uint64_t warmup = 0;
  double target_rate = 0;
  std::string key_type = "integer";
  uint32_t key_bytes = 0;  // 0: the kind's smallest
  std::string load = "bulk";
  double fill_factor = 0.8;
  std::vector<uint32_t> compute_nodes = {1};
  std::vector<uint32_t> threads = {2};
  std::vector<uint32_t> coroutines = {4};
  double backoff_min_ns = static_cast<double>(dmidx::ClientOptions{}.retry_backoff_min.count());
  double backoff_max_ns = static_cast<double>(dmidx::ClientOptions{}.retry_backoff_max.count());
  std::vector<std::string> cache_bytes;  // sizes as text
  bool pin = false;
  bool ladder = false;
  std::string backend = "local";
  std::string preset;                     // "", "sherman", "smart"
  std::vector<std::string> sim_settings;  // --sim NAME=VALUE
  uint32_t memory_nodes = 2;
  uint64_t pool_bytes = uint64_t{1} << 30;
  uint64_t chunk_bytes = dmidx::MemoryNodeOptions{}.chunk_bytes;
  uint64_t seed = 1;
  std::string json;
  std::string trace_out;
  std::string trace_in;
  bool quiet = false;
  double timeout_seconds = 60;
  double timeline_interval_seconds = 0.01;
  std::string kill;  // --kill-compute-node ID@SECONDS
  bool expect_deaths = false;
  std::string ack_log;
  double recovery_fraction = 0.9;
  double recovery_window_seconds = 0.05;
  double lease_period_seconds = 0.1;
  double lease_timeout_seconds = 1;
  double exhausted_wait_seconds =
      std::chrono::duration<double>(dmidx::ReclamationOptions{}.exhausted_wait).count();
  // "<index>.<option>" -> value
  std::map<std::string, std::string> index_options;
  // --backend=verbs: memcached, cluster name, device.
  dmidx::ClusterOptions cluster;
};

// What the flags turn into.
struct Plan {
  std::vector<const bench::IndexKind*> indexes;
  std::vector<dmidx::bench::WorkloadSpec> workloads;
  bench::KeyFormat keys;
  bench::LoadMode load = bench::LoadMode::kBulk;
  std::vector<std::string> notes;
  std::vector<bench::TraceOp> trace;
  bool replay = false;
  std::optional<bench::FailureExperiment> kill;
};

int Fail(int code, const std::string& message) {
  if (code == kBadUsage) {
    std::fprintf(stderr, "%s: %s (run with --help)\n", kProgram, message.c_str());
  } else {
    std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
  }
  return code;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    if (end > start) items.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

std::string Padded(std::string_view text, size_t width) {
  std::string out(text);
  out.resize(std::max(width, text.size() + 1), ' ');
  return out;
}

std::string PropertiesHelp() {
  std::string help = "\nYCSB properties (-P FILE, -p NAME=VALUE; flags override them):\n";
  for (const bench::PropertyDoc& doc : bench::KnownProperties()) {
    help += "  " + Padded(doc.name, 28) + std::string(doc.help) + "\n";
  }
  return help;
}

std::string WorkloadList() {
  std::string list =
      "\nWorkloads (--workload, a comma list; 'ycsb' = load,a,b,c,d,e,f; 'sherman' = the five "
      "Sherman mixes):\n";
  for (const bench::BuiltinWorkload& workload : bench::BuiltinWorkloads()) {
    list += "  " + Padded(workload.name, 18) + std::string(workload.description) + "\n";
  }
  return list;
}

std::string IndexList() {
  std::string list = "\nIndexes (--index, a comma list, or all):\n";
  for (const bench::IndexKind& kind : bench::RegisteredIndexes()) {
    list += "  " + Padded(kind.name, 10) + kind.description + "\n";
    if (!kind.ladder.empty()) {
      list += "            --ladder (" + kind.ladder_source + "):";
      for (const bench::LadderStep& step : kind.ladder)
        list += " " + step.label + ",";
      list.back() = '\n';
    }
  }
  return list;
}

constexpr char kDescription[] =
    R"(dmidx-ycsb: YCSB and the papers' workloads against dmidx's indexes.

With no flags it runs every registered index through YCSB's core workloads
(load, a-f) on an in-process cluster (the local fabric: memory nodes and
compute-node threads in this process) and prints a table per point. For a
cluster over RDMA, start dmidx-memnode daemons and run the same command on
every compute node with --backend=verbs (see bench/README.md).

Lists (--threads 1,2,4 --cache-bytes 1M,16M) run one point per combination.
Exit status: 0 done, 1 a run failed (the error names the phase and node),
2 bad flags or an impossible configuration.)";

void AddFlags(CLI::App& app, Flags* f) {
  app.add_option("-P", f->property_files, "load a YCSB property file (several allowed; later win)")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("-p", f->properties, "set one YCSB property (overrides the files)")
      ->type_name("NAME=VALUE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--workload", f->workloads,
                 "workloads, a comma list of names; 'list' prints them. Default ycsb; with -P or "
                 "-p and no --workload, the properties' own mix")
      ->type_name("NAMES");
  app.add_option("--index", f->indexes, "indexes, a comma list of names, or all (default)")
      ->type_name("NAMES");
  using dmidx::tools::AddIntegerFlag;
  using dmidx::tools::AddIntegerListFlag;
  using dmidx::tools::AddNumberFlag;
  AddIntegerFlag(app, "--records", &f->records, 0, UINT64_MAX, "records loaded (YCSB recordcount)");
  AddIntegerFlag(app, "--operations", &f->operations, 0, UINT64_MAX,
                 "operations of the run phase (operationcount)");
  // The upper bound keeps the conversion to integer milliseconds defined.
  AddNumberFlag(app, "--duration", &f->duration_seconds, {.min = 0, .max = 1e9},
                "run for this many seconds (0.001 to 1e9) instead of a number of operations")
      ->type_name("SECONDS");
  AddNumberFlag(app, "--write-bytes-multiple", &f->write_bytes_multiple, {.min = 0, .max = 1e6},
                "the churn: run until the compute nodes have written this many times the "
                "memory nodes' pool bytes, instead of a number of operations, then quiesce (wait "
                "until every retired object was reclaimed, up to --timeout) before the memory "
                "report; with --workload churn (inserts, updates and deletes over the loaded "
                "keys). Progress says the bytes written. 0 = off (default)")
      ->type_name("N");
  AddIntegerFlag(app, "--warmup", &f->warmup, 0, UINT64_MAX,
                 "operations of a warm-up phase before the run, reported apart (default 0)");
  AddNumberFlag(app, "--target-rate", &f->target_rate, {.min = 0},
                "open loop: operations per second over the cluster, latency counted from each "
                "operation's intended start; 0 = closed loop (default)")
      ->type_name("OPS");
  dmidx::tools::AddChoiceFlag(
      app, "--key-type", {"integer", "string"},
      [f](const std::string& value) { f->key_type = value; },
      "integer (8-byte big-endian hashed key numbers) or string (e-mail-like text); "
      "default integer");
  AddIntegerFlag(app, "--key-bytes", &f->key_bytes, 1, UINT32_MAX,
                 "key size; default 8 for integers, 41 for strings (the smallest they allow); "
                 "at most " +
                     std::to_string(dmidx::BTreeOptions::kMaxKeyBytes) +
                     " for btree (whose nodes must hold four keys: see --btree.node_bytes), " +
                     std::to_string(dmidx::RadixOptions::kMaxKeyBytes) + " for radix");
  dmidx::tools::AddChoiceFlag(
      app, "--load", {"bulk", "insert", "none"}, [f](const std::string& value) { f->load = value; },
      "bulk (compute node 0 bulk-loads the sorted records; default), insert (every "
      "context inserts its share) or none");
  AddNumberFlag(app, "--fill-factor", &f->fill_factor, {.min = 0, .max = 1, .min_excluded = true},
                "how full a bulk load fills nodes, in (0, 1] (default 0.8, as Sherman)");
  AddIntegerListFlag(app, "--compute-nodes", &f->compute_nodes, 1, UINT32_MAX,
                     "compute nodes (local: clients in this process; verbs: the processes of the "
                     "run, one value); default 1");
  AddIntegerListFlag(app, "--threads", &f->threads, 1, UINT32_MAX,
                     "worker threads per compute node (default 2)");
  AddIntegerListFlag(app, "--coroutines", &f->coroutines, 1, UINT32_MAX,
                     "coroutines per thread (default 4)");
  AddNumberFlag(app, "--retry-backoff-min", &f->backoff_min_ns, {.min = 0, .max = 1e9},
                "ns a contended step (a lock CAS that found the lock held) first waits before "
                "its retry; doubles each retry up to --retry-backoff-max. 0 retries back to "
                "back, as the paper's FG baseline does (default 1000)")
      ->type_name("NS");
  AddNumberFlag(app, "--retry-backoff-max", &f->backoff_max_ns, {.min = 0, .max = 1e9},
                "ns a retry waits at most (default 64000)")
      ->type_name("NS");
  dmidx::tools::AddSizeListFlag(
      app, "--cache-bytes", &f->cache_bytes, {.max = SIZE_MAX},
      "compute-side cache of each index that has one (its cache_bytes option), e.g. "
      "1M,16M,128M; default the index's own");
  dmidx::tools::AddSwitch(app, "--pin", &f->pin, "pin worker threads to CPUs, round robin");
  dmidx::tools::AddSwitch(
      app, "--ladder", &f->ladder,
      "run each index's technique ladder: the baseline, then one technique added per "
      "step, side by side with ratios (default workload write-intensive)");
  dmidx::tools::AddChoiceFlag(
      app, "--backend,--fabric", {"local", "verbs", "sim"},
      [f](const std::string& value) { f->backend = value; },
      "local (in-process cluster; default), verbs (RDMA cluster) or sim (a simulated "
      "cluster in virtual time on one thread: throughput and latency are the model's, see "
      "docs/sim.md)");
  dmidx::tools::AddChoiceFlag(
      app, "--preset", {"sherman", "smart"}, [f](const std::string& value) { f->preset = value; },
      "a paper's cluster shape on --fabric sim (implied): sherman = 8 memory nodes, 8 compute "
      "nodes x 22 threads x 4 coroutines, the B+tree with 1 KiB nodes, 8-byte keys; smart = 2 "
      "memory nodes, 16 compute nodes x 4 threads x 8 coroutines, the radix tree (and "
      "--key-bytes 32 for the papers' long keys); pools of 4 GiB per memory node (mapped "
      "lazily) and on-chip lock memory on every NIC, as the papers' ConnectX NICs have. Flags "
      "given explicitly win");
  app.add_option(
         "--sim", f->sim_settings,
         "set one parameter of the sim cost model, NAME=VALUE (repeatable): round_trip_ns, "
         "pcie_ns, nic_mops, link_gbytes, read_request_bytes, read_response_header_bytes, "
         "write_header_bytes, ack_bytes, atomic_request_bytes, atomic_response_bytes, mtu, "
         "max_rd_atomic, atomic_buckets, atomic_bucket_shift, host_atomic_ns, "
         "device_atomic_mops, cpu_per_post_ns, cpu_per_wakeup_ns, cpu_per_operation_ns, "
         "tear_lines (1 or 0); VALUE in [0, 1e12]; or model=uncalibrated, the model before its "
         "calibration (issue 24), which the other settings then change (defaults in docs/sim.md)")
      ->type_name("NAME=VALUE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  // ClusterOptions::memory_nodes' bounds.
  AddIntegerFlag(app, "--memory-nodes", &f->memory_nodes, 1, 65535,
                 "memory nodes (local: started in this process; verbs: daemons to wait for); "
                 "default 2");
  dmidx::tools::AddSizeFlag(app, "--pool-bytes", &f->pool_bytes,
                            {.max = dmidx::MemoryNodeOptions::kMaxRegionBytes},
                            "local and sim: pool of each memory node, mapped lazily (default 1G; "
                            "at most 256G with radix)");
  dmidx::tools::AddSizeFlag(
      app, "--chunk-bytes", &f->chunk_bytes,
      {.min = dmidx::MemoryNodeOptions::kChunkAlignment,
       .max = dmidx::MemoryNodeOptions::kMaxRegionBytes,
       .multiple = dmidx::MemoryNodeOptions::kChunkAlignment},
      "local and sim: what a memory node hands a worker thread at a time, a multiple of 4K "
      "(default 8M); the memory report counts whole chunks, so smaller ones show an index's "
      "own bytes closer");
  AddIntegerFlag(
      app, "--seed", &f->seed, 0, UINT64_MAX,
      "seed of every generator (default 1): with one context (--threads 1 --coroutines 1) a "
      "run repeats op for op; with more, their interleaving (and with inserts, which "
      "keys reads see) varies");
  app.add_option("--json", f->json, "write one JSON object per point, one per line")
      ->type_name("FILE");
  app.add_option("--trace-out", f->trace_out,
                 "write the run phase's operations (op key [scan length] per line)")
      ->type_name("FILE");
  app.add_option("--trace-in", f->trace_in,
                 "replay this trace as the run phase instead of generating operations")
      ->type_name("FILE");
  dmidx::tools::AddSwitch(app, "--quiet", &f->quiet, "no progress on stderr");
  AddNumberFlag(app, "--timeout", &f->timeout_seconds, {.min = 0.001, .max = 1e9},
                "bound on every wait for other compute nodes (barriers, results), in seconds "
                "(default 60)");
  AddNumberFlag(app, "--timeline-interval", &f->timeline_interval_seconds, {.min = 0, .max = 1e9},
                "each phase's timeline (in the JSON: operations and failures per window) counts "
                "in windows of this many seconds of the cluster's clock, virtual under sim "
                "(default 0.01; 0: no timeline)")
      ->type_name("SECONDS");
  app.add_option(
         "--kill-compute-node", f->kill,
         "failure experiment, on --backend local or sim only (on a verbs cluster, kill a "
         "compute-node process yourself, with --expect-deaths): kill compute node ID SECONDS "
         "into the run phase, on "
         "the cluster's clock (under sim in virtual time: a run repeats exactly). Needs "
         "--duration and 2 or more compute nodes. The survivors run the phase out, failures "
         "are counted by status code, the killed node's apart, and the report gives the "
         "survivors' recovery time (see --recovery-fraction)")
      ->type_name("ID@SECONDS");
  dmidx::tools::AddSwitch(
      app, "--expect-deaths", &f->expect_deaths,
      "--backend verbs: compute-node processes of the run may die in the run phase (the "
      "operator kills one, e.g. kill -9). Every process counts failed operations by code "
      "instead of stopping at the first; at the phase's end a node whose results do not come "
      "is judged through its lease (dead once it stood still for --lease-timeout; it is then "
      "fenced and recovered), reported ('compute node N died during the run phase') and left "
      "out of the results. Each process prints its own run operations and failures, and exits "
      "0 only when none of its operations failed. One point per invocation (the dead cannot "
      "join another). Without it, a dead peer fails the run, named");
  app.add_option(
         "--ack-log", f->ack_log,
         "append every write this process finishes to FILE (a verbs run of several processes: "
         "FILE.<node>; format in bench/ack_log.h), each written value unique, and after the run "
         "phase check that no acknowledged write was lost: every key with one must read its "
         "last acknowledged write, one concurrent with it, or a write a dead node had pending; "
         "a missing key or an older value fails the run (exit 1). Every process reads every "
         "process's log, so on several machines FILE must be on a shared filesystem. One point "
         "per invocation")
      ->type_name("FILE");
  AddNumberFlag(app, "--recovery-fraction", &f->recovery_fraction,
                {.min = 0, .max = 1, .min_excluded = true},
                "with --kill-compute-node: the survivors have recovered once their throughput "
                "over --recovery-window is back to this fraction of their mean before the kill "
                "(default 0.9)");
  AddNumberFlag(app, "--recovery-window", &f->recovery_window_seconds,
                {.min = 0, .max = 1e9, .min_excluded = true},
                "with --kill-compute-node: seconds over which the survivors' throughput must be "
                "back, rounded up to whole --timeline-interval windows (default 0.05)")
      ->type_name("SECONDS");
  AddNumberFlag(app, "--lease-period", &f->lease_period_seconds,
                {.min = 0, .max = 1e6, .min_excluded = true},
                "every compute node renews its lease this often, in seconds of the cluster's "
                "clock (default 0.1); give every process of a run the same")
      ->type_name("SECONDS");
  AddNumberFlag(app, "--lease-timeout", &f->lease_timeout_seconds,
                {.min = 0, .max = 1e6, .min_excluded = true},
                "a compute node whose lease stood still this long is judged dead by the ones "
                "waiting on its locks, fenced and recovered; at least 2 x --lease-period "
                "(default 1)")
      ->type_name("SECONDS");
  // ReclamationOptions (include/dmidx/options.h), with its bounds.
  dmidx::ReclamationOptions& reclamation = f->cluster.reclamation;
  AddIntegerFlag(app, "--cache-window-epochs", &reclamation.cache_window_epochs, 0,
                 dmidx::ReclamationOptions::kMaxCacheWindowEpochs,
                 "epochs a compute-side cache keeps an entry, which holds back the memory its "
                 "image reaches (default " +
                     std::to_string(reclamation.cache_window_epochs) + ")");
  AddIntegerFlag(app, "--compact-below-free-chunks", &reclamation.compact_below_free_chunks, 0,
                 UINT64_MAX,
                 "a worker compacts a memory node (its emptied chunks go back) when it has fewer "
                 "free chunks than this; 0: only when it has none (default " +
                     std::to_string(reclamation.compact_below_free_chunks) + ")");
  AddIntegerFlag(app, "--compact-bundles-per-pass", &reclamation.compact_bundles_per_pass, 0,
                 dmidx::ReclamationOptions::kMaxCompactBundlesPerPass,
                 "bundles of free objects one compaction takes off a memory node's lists; 0: no "
                 "compaction, chunks never go back (default " +
                     std::to_string(reclamation.compact_bundles_per_pass) + ")");
  AddIntegerFlag(app, "--max-draining-chunks", &reclamation.max_draining_chunks, 0,
                 dmidx::ReclamationOptions::kMaxDrainingChunks,
                 "chunks of a memory node drained at once, by one compute node's lease keeper "
                 "for the cluster (their free objects kept off the lists until the chunk empties "
                 "and goes back); 0: no draining (default " +
                     std::to_string(reclamation.max_draining_chunks) + ")");
  AddNumberFlag(app, "--exhausted-wait", &f->exhausted_wait_seconds, {.min = 0, .max = 1e6},
                "seconds an allocation that finds every memory node out waits for what its "
                "compute node retired before it fails; 0: no wait (default " +
                    dmidx::FormatNumber(f->exhausted_wait_seconds) + ")")
      ->type_name("SECONDS");
  dmidx::tools::AddClusterFlags(app, &f->cluster.bootstrap, &f->cluster.verbs,
                                "Cluster mode (--backend=verbs)");
  for (const bench::IndexKind& kind : bench::RegisteredIndexes()) {
    for (const bench::IndexOptionDoc& option : kind.options) {
      const std::string name = kind.name + "." + option.name;
      app.add_option_function<std::string>(
             "--" + name, [f, name](const std::string& value) { f->index_options[name] = value; },
             option.help + " (default " + option.default_value + ")")
          ->type_name("VALUE")
          ->group("Index options (the fields of each index's options struct)");
    }
  }
  dmidx::tools::AddHelpFlag(app, "Index options (the fields of each index's options struct)");
}

// The YCSB defaults a property file's mix starts from (CoreWorkload's).
bench::WorkloadSpec YcsbDefaults() {
  bench::WorkloadSpec spec;
  spec.name = "custom";
  spec.description = "from YCSB properties";
  spec.read_proportion = 0.95;
  spec.update_proportion = 0.05;
  spec.request_distribution = bench::Distribution::kUniform;
  spec.max_scan_length = 1000;
  return spec;
}

// A replayed trace's spec without --workload: it only shapes the load (and
// a warm-up), and needs no loaded key (-p recordcount=0 --load none).
bench::WorkloadSpec TraceDefaults() {
  bench::WorkloadSpec spec = YcsbDefaults();
  spec.read_proportion = 0;
  spec.update_proportion = 0;
  spec.insert_proportion = 1;
  return spec;
}

// The sim cost model's parameters that are counts (bytes, packets,
// buckets), by their --sim names.
constexpr std::pair<const char*, uint32_t dmidx::SimOptions::*> kSimCounts[] = {
    {"read_request_bytes", &dmidx::SimOptions::read_request_bytes},
    {"read_response_header_bytes", &dmidx::SimOptions::read_response_header_bytes},
    {"write_header_bytes", &dmidx::SimOptions::write_header_bytes},
    {"ack_bytes", &dmidx::SimOptions::ack_bytes},
    {"atomic_request_bytes", &dmidx::SimOptions::atomic_request_bytes},
    {"atomic_response_bytes", &dmidx::SimOptions::atomic_response_bytes},
    {"mtu", &dmidx::SimOptions::mtu},
    {"max_rd_atomic", &dmidx::SimOptions::max_rd_atomic},
    {"atomic_buckets", &dmidx::SimOptions::atomic_buckets},
    {"atomic_bucket_shift", &dmidx::SimOptions::atomic_bucket_shift},
};

// --preset: a paper's cluster shape, for what the command line left open;
// --sim: the cost model's parameters.
int ApplyPreset(const CLI::App& app, Flags* f) {
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  if (!f->preset.empty()) {
    if (f->backend != "sim" && (given("--backend") || given("--fabric"))) {
      return Fail(kBadUsage, "--preset shapes a simulated cluster: use it with --fabric sim");
    }
    f->backend = "sim";
    const bool sherman = f->preset == "sherman";
    if (!given("--memory-nodes")) f->memory_nodes = sherman ? 8 : 2;
    if (!given("--compute-nodes")) f->compute_nodes = {sherman ? 8u : 16u};
    if (!given("--threads")) f->threads = {sherman ? 22u : 4u};
    if (!given("--coroutines")) f->coroutines = {sherman ? 4u : 8u};
    if (!given("--index")) f->indexes = sherman ? "btree" : "radix";
    // Room for every worker thread's chunk on every memory node (the
    // bench checks it); pools are mapped lazily, so only what the index
    // touches costs memory.
    if (!given("--pool-bytes")) f->pool_bytes = uint64_t{4} << 30;
    // Both papers' NICs (ConnectX-5 and -6) have on-chip memory for lock
    // words, at the model's device_atomic_mops.
    f->cluster.local.on_chip_lock_region = true;
    if (sherman && !f->index_options.contains("btree.node_bytes")) {
      f->index_options["btree.node_bytes"] = "1024";
    }
  }
  dmidx::SimOptions& sim = f->cluster.sim;
  // The model first, whatever the order: the other settings change it.
  // The last model= wins; it applies before every other setting.
  for (const std::string& setting : f->sim_settings) {
    if (setting == "model=uncalibrated") sim = dmidx::SimOptions::Uncalibrated();
    if (setting == "model=calibrated") sim = dmidx::SimOptions{};
    if (setting.starts_with("model=") && setting != "model=uncalibrated" &&
        setting != "model=calibrated") {
      return Fail(kBadUsage, "--sim " + setting + ": the model is calibrated or uncalibrated");
    }
  }
  for (const std::string& setting : f->sim_settings) {
    if (setting.starts_with("model=")) continue;
    const size_t equals = setting.find('=');
    if (equals == std::string::npos) {
      return Fail(kBadUsage, "--sim: '" + setting + "' is not NAME=VALUE");
    }
    const std::string name = setting.substr(0, equals);
    const std::string text = setting.substr(equals + 1);
    const std::string problem = dmidx::NumberProblem(text, {.min = 0, .max = 1e12});
    if (!problem.empty()) return Fail(kBadUsage, "--sim " + name + ": " + problem);
    const double value = *dmidx::ParseNumber(text);
    const auto ns = std::chrono::nanoseconds(static_cast<int64_t>(value));
    const auto count = std::find_if(std::begin(kSimCounts), std::end(kSimCounts),
                                    [&name](const auto& field) { return name == field.first; });
    if (count != std::end(kSimCounts)) {
      if (value > std::numeric_limits<uint32_t>::max()) {
        return Fail(kBadUsage, "--sim " + setting + ": at most 4294967295");
      }
      if (value != std::floor(value)) {
        return Fail(kBadUsage, "--sim " + name + ": must be a whole number, not " + text);
      }
      sim.*(count->second) = static_cast<uint32_t>(value);
    } else if (name == "round_trip_ns") {
      sim.round_trip = ns;
    } else if (name == "pcie_ns") {
      sim.pcie = ns;
    } else if (name == "nic_mops") {
      sim.nic_messages_per_second = value * 1e6;
    } else if (name == "link_gbytes") {
      sim.link_bytes_per_second = value * 1e9;
    } else if (name == "host_atomic_ns") {
      sim.host_atomic = ns;
    } else if (name == "device_atomic_mops") {
      sim.device_atomics_per_second = value * 1e6;
    } else if (name == "cpu_per_post_ns") {
      sim.cpu_per_post = ns;
    } else if (name == "cpu_per_wakeup_ns") {
      sim.cpu_per_wakeup = ns;
    } else if (name == "cpu_per_operation_ns") {
      sim.cpu_per_operation = ns;
    } else if (name == "tear_lines" && (value == 0 || value == 1)) {
      sim.tear_lines = value == 1;
    } else if (name == "tear_lines") {
      return Fail(kBadUsage, "--sim tear_lines: must be 1 (on) or 0 (off), not " + text);
    } else {
      return Fail(kBadUsage, "--sim: unknown parameter '" + name + "' (see --help)");
    }
  }
  if (!f->sim_settings.empty() && f->backend != "sim") {
    return Fail(kBadUsage, "--sim sets the simulated fabric's model: use it with --fabric sim");
  }
  if (f->backend == "sim") {
    // What the fabric would refuse at the first point, refused now (a zero
    // rate, a round trip shorter than its parts).
    const Status model = sim.Check();
    if (!model.ok()) return Fail(kBadUsage, "--sim: " + std::string(model.message()));
  }
  return 0;
}

std::vector<bench::PointConfig> Points(const Flags& f, const Plan& plan);

std::chrono::nanoseconds Nanoseconds(double seconds) {
  return std::chrono::nanoseconds(std::llround(seconds * 1e9));
}

// --kill-compute-node ID@SECONDS and the recovery flags, checked against
// the backend, the compute nodes, the run's duration and the timeline.
int PlanKill(const Flags& f, const CLI::App& app, Plan* plan) {
  if (f.kill.empty()) {
    for (const char* flag : {"--recovery-fraction", "--recovery-window"}) {
      if (app.count(flag) > 0) {
        plan->notes.push_back(std::string(flag) + " ignored: no --kill-compute-node");
      }
    }
    return 0;
  }
  const size_t at = f.kill.find('@');
  if (at == std::string::npos) {
    return Fail(kBadUsage, "--kill-compute-node: '" + f.kill + "' is not ID@SECONDS, e.g. 1@0.5");
  }
  const std::string id_text = f.kill.substr(0, at);
  const std::string time_text = f.kill.substr(at + 1);
  if (const std::string problem = dmidx::IntegerProblem(id_text, 0, UINT32_MAX); !problem.empty()) {
    return Fail(kBadUsage, "--kill-compute-node ID: " + problem);
  }
  if (const std::string problem =
          dmidx::NumberProblem(time_text, {.min = 0, .max = 1e9, .min_excluded = true});
      !problem.empty()) {
    return Fail(kBadUsage, "--kill-compute-node SECONDS: " + problem);
  }
  const auto id = static_cast<uint32_t>(*dmidx::ParseInteger(id_text, UINT32_MAX));
  const double seconds = *dmidx::ParseNumber(time_text);
  if (f.backend == "verbs") {
    return Fail(kBadUsage,
                "--kill-compute-node: only with --backend local or sim; on a verbs cluster, kill "
                "the compute node's process (kill -9) and give every process --expect-deaths");
  }
  for (uint32_t nodes : f.compute_nodes) {
    if (nodes < 2) {
      return Fail(kBadUsage,
                  "--kill-compute-node: needs 2 or more compute nodes (the survivors), not "
                  "--compute-nodes=" +
                      std::to_string(nodes));
    }
    if (id >= nodes) {
      return Fail(kBadUsage, "--kill-compute-node: compute node " + std::to_string(id) +
                                 " is not in the run: --compute-nodes=" + std::to_string(nodes) +
                                 " has ids 0 to " + std::to_string(nodes - 1));
    }
  }
  if (f.duration_seconds == 0) {
    return Fail(kBadUsage,
                "--kill-compute-node: needs --duration (the kill falls inside the run phase)");
  }
  if (seconds >= f.duration_seconds) {
    return Fail(kBadUsage,
                "--kill-compute-node: the time must be inside the run phase, below "
                "--duration=" +
                    dmidx::FormatNumber(f.duration_seconds) + ", not " + time_text);
  }
  if (f.timeline_interval_seconds == 0) {
    return Fail(kBadUsage,
                "--kill-compute-node: needs a timeline (--timeline-interval above 0) to measure "
                "the recovery on");
  }
  if (seconds < f.timeline_interval_seconds) {
    return Fail(kBadUsage, "--kill-compute-node: the time must be >= --timeline-interval=" +
                               dmidx::FormatNumber(f.timeline_interval_seconds) +
                               " (a window before the kill to compare with), not " + time_text);
  }
  bench::FailureExperiment& kill = plan->kill.emplace();
  kill.compute_node = id;
  kill.at = Nanoseconds(seconds);
  kill.recovery_fraction = f.recovery_fraction;
  kill.recovery_span = Nanoseconds(f.recovery_window_seconds);
  return 0;
}

int MakePlan(const Flags& f, const CLI::App& app, Plan* plan) {
  bench::Properties properties;
  for (const std::string& file : f.property_files) {
    const Status s = properties.LoadFile(file);
    if (!s.ok()) return Fail(kBadUsage, std::string(s.message()));
  }
  for (const std::string& assignment : f.properties) {
    const Status s = properties.Set(assignment);
    if (!s.ok()) return Fail(kBadUsage, "-p " + std::string(s.message()));
  }
  const bool properties_given = !properties.values().empty();
  // Flags override the properties before the mix is validated.
  if (app.count("--records") > 0) properties.Set("recordcount", std::to_string(f.records));
  if (app.count("--operations") > 0) properties.Set("operationcount", std::to_string(f.operations));
  const bool workload_given = app.count("--workload") > 0;
  if (workload_given && SplitList(f.workloads).empty()) {
    return Fail(kBadUsage, "--workload names no workload");
  }
  std::vector<std::string> names;
  if (workload_given || !properties_given) {
    for (const std::string& name :
         SplitList(workload_given || !f.ladder ? f.workloads : "write-intensive")) {
      if (name == "ycsb") {
        for (const char* n : {"load", "a", "b", "c", "d", "e", "f"})
          names.push_back(n);
      } else if (name == "sherman") {
        for (const char* n :
             {"write-only", "write-intensive", "read-intensive", "range-only", "range-write"})
          names.push_back(n);
      } else {
        names.push_back(name);
      }
    }
  }
  // A replayed trace is its own mix: the spec only shapes the load.
  if (!f.trace_in.empty() && !workload_given) names.clear();
  std::vector<bench::WorkloadSpec> bases;
  if (names.empty()) {
    bases.push_back(f.trace_in.empty() ? YcsbDefaults() : TraceDefaults());
    // A mix from property files is named after the last file, as YCSB's are
    // ("workloada"; "mix.properties" gives "mix"), in tables, JSON and plots.
    if (!f.property_files.empty()) {
      bases.back().name = std::filesystem::path(f.property_files.back()).stem().string();
    }
  }
  for (const std::string& name : names) {
    StatusOr<bench::WorkloadSpec> spec = bench::FindWorkload(name);
    if (!spec.ok()) return Fail(kBadUsage, std::string(spec.status().message()));
    bases.push_back(*spec);
  }
  for (bench::WorkloadSpec& spec : bases) {
    std::vector<std::string> notes;
    const Status s = bench::ApplyProperties(properties, &spec, &notes);
    if (!s.ok()) return Fail(kBadUsage, std::string(s.message()));
    if (app.count("--records") > 0) spec.record_count = f.records;
    if (app.count("--operations") > 0) spec.operation_count = f.operations;
    const Status valid = spec.Validate();
    if (!valid.ok())
      return Fail(kBadUsage, "workload " + spec.name + ": " + std::string(valid.message()));
    if (plan->notes.empty()) plan->notes = notes;
    plan->workloads.push_back(spec);
  }

  const std::vector<std::string> indexes = SplitList(f.indexes);
  for (const std::string& name : indexes) {
    if (name == "all") {
      for (const bench::IndexKind& kind : bench::RegisteredIndexes())
        plan->indexes.push_back(&kind);
      continue;
    }
    StatusOr<const bench::IndexKind*> kind = bench::FindIndex(name);
    if (!kind.ok()) return Fail(kBadUsage, std::string(kind.status().message()));
    plan->indexes.push_back(*kind);
  }
  if (plan->indexes.empty()) return Fail(kBadUsage, "--index names no index");
  for (const auto& [name, value] : f.index_options) {
    (void)value;
    const std::string index = name.substr(0, name.find('.'));
    bool used = false;
    for (const bench::IndexKind* kind : plan->indexes)
      used |= kind->name == index;
    if (!used) plan->notes.push_back("--" + name + " ignored: index " + index + " does not run");
    for (const bench::IndexKind* kind : plan->indexes) {
      if (!f.ladder || kind->name != index) continue;
      const std::string option = name.substr(index.size() + 1);
      if (bench::LadderSettings(*kind, kind->ladder.size()).contains(option)) {
        plan->notes.push_back("--" + name + " ignored: --ladder sets " + option + " at each step");
      }
    }
  }

  plan->keys.kind = f.key_type == "string" ? bench::KeyKind::kString : bench::KeyKind::kInteger;
  plan->keys.bytes = f.key_bytes;
  if (plan->keys.bytes == 0) plan->keys.bytes = plan->keys.MinBytes();
  plan->keys.ordered = !plan->workloads.empty() && plan->workloads.front().ordered_inserts;
  const Status keys = plan->keys.Validate();
  if (!keys.ok()) return Fail(kBadUsage, "--key-bytes: " + std::string(keys.message()));
  // The tightest key-size limit of the indexes that run (RadixOptions' and
  // BTreeOptions' kMaxKeyBytes), named, before anything counts pool bytes.
  const bench::IndexKind* tightest = plan->indexes.front();
  for (const bench::IndexKind* kind : plan->indexes) {
    if (kind->max_key_bytes < tightest->max_key_bytes) tightest = kind;
  }
  if (plan->keys.bytes > tightest->max_key_bytes) {
    return Fail(kBadUsage, "--key-bytes: must be <= " + std::to_string(tightest->max_key_bytes) +
                               " (the key-size limit of index " + tightest->name + "), not " +
                               std::to_string(plan->keys.bytes));
  }
  plan->load = f.load == "insert" ? bench::LoadMode::kInsert
               : f.load == "none" ? bench::LoadMode::kNone
                                  : bench::LoadMode::kBulk;
  if (f.backoff_min_ns > f.backoff_max_ns) {
    return Fail(kBadUsage, "--retry-backoff-min: must be <= --retry-backoff-max=" +
                               dmidx::FormatNumber(f.backoff_max_ns) + ", not " +
                               dmidx::FormatNumber(f.backoff_min_ns));
  }
  if (f.backend == "verbs" && f.compute_nodes.size() != 1) {
    return Fail(kBadUsage,
                "--compute-nodes takes one value with --backend=verbs: the number of "
                "compute-node processes in the run");
  }
  if (f.duration_seconds > 0 && f.duration_seconds < 0.001) {
    return Fail(kBadUsage,
                "--duration: must be 0 (not given) or >= 0.001 (it counts "
                "milliseconds), not " +
                    dmidx::FormatNumber(f.duration_seconds));
  }
  if (f.write_bytes_multiple > 0) {
    for (const auto& [flag, given] : {std::pair{"--duration", f.duration_seconds > 0},
                                      {"--trace-in", !f.trace_in.empty()},
                                      {"--kill-compute-node", !f.kill.empty()}}) {
      if (given) {
        return Fail(kBadUsage, std::string("--write-bytes-multiple: the churn runs until it wrote "
                                           "its bytes; it does not go with ") +
                                   flag);
      }
    }
    if (f.timeline_interval_seconds == 0) {
      return Fail(kBadUsage,
                  "--write-bytes-multiple: needs a timeline (--timeline-interval above 0): the "
                  "churn looks at the bytes written once a window");
    }
  }
  if (f.duration_seconds == 0 && f.trace_in.empty() && f.write_bytes_multiple == 0) {
    for (const bench::WorkloadSpec& spec : plan->workloads) {
      if (spec.operation_count == 0) {
        return Fail(kBadUsage, "workload " + spec.name +
                                   " has no operations (operationcount 0): give --operations N "
                                   "or --duration SECONDS");
      }
    }
  }
  if (f.timeline_interval_seconds > 0 && f.timeline_interval_seconds < 1e-6) {
    return Fail(kBadUsage,
                "--timeline-interval: must be 0 (no timeline) or >= 0.000001 (a microsecond), "
                "not " +
                    dmidx::FormatNumber(f.timeline_interval_seconds));
  }
  if (const int code = PlanKill(f, app, plan); code != 0) return code;
  if (f.lease_timeout_seconds < 2 * f.lease_period_seconds) {
    return Fail(kBadUsage, "--lease-timeout: must be at least 2 x --lease-period=" +
                               dmidx::FormatNumber(f.lease_period_seconds) +
                               " (one late "
                               "renewal must not get a compute node judged dead), not " +
                               dmidx::FormatNumber(f.lease_timeout_seconds));
  }
  if (!f.trace_in.empty()) {
    if (f.ladder || plan->workloads.size() != 1) {
      return Fail(kBadUsage, "--trace-in replays one trace: give at most one workload, no ladder");
    }
    StatusOr<std::vector<bench::TraceOp>> trace = bench::ReadTrace(f.trace_in, plan->keys);
    if (!trace.ok()) return Fail(kBadUsage, "--trace-in: " + std::string(trace.status().message()));
    plan->trace = std::move(*trace);
    plan->replay = true;
    plan->workloads.front().name = "trace:" + f.trace_in;
  }
  if (!f.trace_out.empty() && plan->workloads.size() * plan->indexes.size() != 1) {
    return Fail(kBadUsage,
                "--trace-out writes one run's operations: give one workload and one index");
  }
  // Found now, not after the run: the trace is written when it ends, the
  // JSON after each point. Asked of the file, or of its folder when it does
  // not exist yet, without creating it: a flag refused later must not leave
  // an empty file behind.
  for (const auto& [flag, file] :
       {std::pair{"--trace-out", &f.trace_out}, {"--json", &f.json}, {"--ack-log", &f.ack_log}}) {
    if (file->empty()) continue;
    const std::filesystem::path path(*file);
    std::error_code error;
    const bool exists = std::filesystem::exists(path, error);
    std::string folder = path.parent_path().string();
    if (folder.empty()) folder = ".";
    const bool writable = exists ? access(file->c_str(), W_OK) == 0
                                 : !std::filesystem::is_directory(path, error) &&
                                       access(folder.c_str(), W_OK | X_OK) == 0;
    if (!writable) return Fail(kBadUsage, std::string(flag) + ": cannot write " + *file);
  }
  // Every index setting as the points use it (--btree.*, --radix.*, the
  // cache sizes, the ladder's steps), with the keys.
  const std::vector<bench::PointConfig> points = Points(f, *plan);
  for (const bench::PointConfig& point : points) {
    const Status s = point.index->check(point.keys.bytes, point.settings);
    if (!s.ok()) return Fail(kBadUsage, "--" + std::string(s.message()));
  }
  if (f.expect_deaths && f.backend != "verbs") {
    return Fail(kBadUsage,
                "--expect-deaths: only with --backend verbs (on local or sim, "
                "--kill-compute-node runs the failure experiment)");
  }
  for (const auto& [flag, given] :
       {std::pair{"--expect-deaths", f.expect_deaths}, {"--ack-log", !f.ack_log.empty()}}) {
    if (given && points.size() != 1) {
      return Fail(kBadUsage, std::string(flag) + " runs one point, not " +
                                 std::to_string(points.size()) +
                                 ": give one index, one workload and one value of each list");
    }
  }
  return 0;
}

// Every point of the plan, in order: index, workload, compute nodes,
// threads, coroutines, cache size, ladder step.
std::vector<bench::PointConfig> Points(const Flags& f, const Plan& plan) {
  std::vector<bench::PointConfig> points;
  const std::vector<std::string> caches =
      f.cache_bytes.empty() ? std::vector<std::string>{""} : f.cache_bytes;
  for (const bench::IndexKind* kind : plan.indexes) {
    bench::IndexSettings settings;
    for (const auto& [name, value] : f.index_options) {
      if (name.rfind(kind->name + ".", 0) == 0)
        settings[name.substr(kind->name.size() + 1)] = value;
    }
    const bool has_cache = std::any_of(kind->options.begin(), kind->options.end(),
                                       [](const auto& o) { return o.name == "cache_bytes"; });
    const size_t steps = f.ladder ? std::max<size_t>(kind->ladder.size(), 1) : 1;
    for (const bench::WorkloadSpec& workload : plan.workloads) {
      for (uint32_t nodes : f.compute_nodes) {
        for (uint32_t threads : f.threads) {
          for (uint32_t coroutines : f.coroutines) {
            for (const std::string& cache : caches) {
              if (!cache.empty() && !has_cache && &cache != &caches.front()) continue;
              for (size_t step = 0; step < steps; ++step) {
                bench::PointConfig point;
                point.index = kind;
                point.settings = settings;
                if (!cache.empty() && has_cache) point.settings["cache_bytes"] = cache;
                if (f.ladder && !kind->ladder.empty()) {
                  for (const auto& [name, value] : bench::LadderSettings(*kind, step))
                    point.settings[name] = value;
                  point.label = kind->ladder[step].label;
                }
                point.workload = workload;
                point.keys = plan.keys;
                point.compute_nodes = nodes;
                point.threads = threads;
                point.coroutines = coroutines;
                point.retry_backoff_min =
                    std::chrono::nanoseconds(static_cast<int64_t>(f.backoff_min_ns));
                point.retry_backoff_max =
                    std::chrono::nanoseconds(static_cast<int64_t>(f.backoff_max_ns));
                point.pin_threads = f.pin;
                point.load = plan.load;
                point.fill_factor = f.fill_factor;
                point.warmup_operations = f.warmup;
                point.duration =
                    std::chrono::milliseconds(static_cast<int64_t>(f.duration_seconds * 1000));
                point.target_rate = f.target_rate;
                point.seed = f.seed;
                point.trace_in = plan.replay ? &plan.trace : nullptr;
                point.trace_out = f.trace_out;
                point.timeline_interval = Nanoseconds(f.timeline_interval_seconds);
                point.kill = plan.kill;
                point.expect_deaths = f.expect_deaths;
                point.ack_log = f.ack_log;
                point.write_bytes_multiple = f.write_bytes_multiple;
                points.push_back(std::move(point));
              }
            }
          }
        }
      }
    }
  }
  return points;
}

// Points that differ only in `differ` (a ladder's steps, or the indexes)
// side by side.
void PrintComparisons(const std::vector<bench::PointConfig>& points,
                      const std::vector<bench::PointResult>& results, bool ladder) {
  std::map<std::string, std::vector<bench::Column>> groups;
  std::vector<std::string> order;
  for (size_t i = 0; i < results.size(); ++i) {
    const bench::PointConfig& p = points[i];
    std::string key = "workload " + p.workload.name + " | " + std::to_string(p.compute_nodes) +
                      " CN x " + std::to_string(p.threads) + " thr x " +
                      std::to_string(p.coroutines) + " coro";
    if (ladder) key = p.index->name + " ladder (" + p.index->ladder_source + ") | " + key;
    const auto cache = p.settings.find("cache_bytes");
    if (cache != p.settings.end()) key += " | cache " + cache->second;
    if (!groups.contains(key)) order.push_back(key);
    groups[key].push_back({ladder ? p.label : p.index->name, &p, &results[i]});
  }
  for (const std::string& key : order) {
    if (groups[key].size() > 1) bench::PrintComparison(stdout, key, groups[key]);
  }
}

void PrintSummary(const std::vector<bench::PointConfig>& points,
                  const std::vector<bench::PointResult>& results) {
  std::printf("\n== summary ==\n  %-44s %10s %9s %9s %12s %12s\n", "point", "run Mops/s", "p50 us",
              "p99 us", "load Mkeys/s", "busiest MN %");
  for (size_t i = 0; i < results.size(); ++i) {
    double run = 0, load = 0, p50 = 0, p99 = 0, busiest = 0;
    for (const bench::PhaseResult& phase : results[i].phases) {
      if (phase.name == "load") load = phase.Mops();
      if (phase.name != "run") continue;
      run = phase.Mops();
      busiest = 100 * phase.BusiestMemoryNodeShare();
      const bench::Histogram all = phase.AllLatencies();
      p50 = all.Percentile(50) / 1000.0;
      p99 = all.Percentile(99) / 1000.0;
    }
    std::string name = points[i].index->name;
    if (!points[i].label.empty()) name += " [" + points[i].label + "]";
    name += " " + points[i].workload.name + " " + std::to_string(points[i].compute_nodes) + "x" +
            std::to_string(points[i].threads) + "x" + std::to_string(points[i].coroutines);
    const auto cache = points[i].settings.find("cache_bytes");
    if (cache != points[i].settings.end()) name += " cache " + cache->second;
    std::printf("  %-44s %10.3f %9.2f %9.2f %12.2f %12.1f\n", name.c_str(), run, p50, p99, load,
                busiest);
  }
}

// A verbs run's compute-node processes are this invocation's: their ids
// (from the bootstrap, never reused within a run) must be 0..N-1, and they
// meet once before the first point.
// The points' configuration as text, the same on every node that was given
// the same flags (apart from which device it uses).
std::string PlanText(const std::vector<bench::PointConfig>& points, const bench::RunInfo& info) {
  std::string text;
  for (const bench::PointConfig& point : points) {
    nlohmann::json json = bench::PointJson(point, bench::PointResult{}, info);
    json.erase("phases");
    json["run"].erase("node");
    json["run"].erase("merged");
    text += json.dump() + "\n";
  }
  return text;
}

Status JoinRun(dmidx::Cluster& cluster, uint32_t compute_nodes, const std::string& plan,
               const bench::Environment& env) {
  const uint32_t node = cluster.NextComputeNodeId();
  if (node >= compute_nodes) {
    return Status::InvalidArgument(
        "this process registered as compute node " + std::to_string(node) +
        " of its run, but --compute-nodes=" + std::to_string(compute_nodes) +
        ": give every process the number of compute nodes, and start each bench invocation "
        "in a new run (compute-node ids are never reused within a run: restart the memory "
        "nodes, the first with --new-run, or use another --cluster name)");
  }
  // Node 0 publishes its plan (by hash: records are small); a node given
  // other flags would split the work differently, so it stops here.
  const std::string digest = std::to_string(std::hash<std::string>{}(plan));
  if (node == 0) DMIDX_RETURN_IF_ERROR(cluster.PutRecord("ycsb.plan", digest));
  std::fprintf(stderr, "compute node %u of %u: waiting for the others at barrier 'ycsb.start'\n",
               node, compute_nodes);
  DMIDX_RETURN_IF_ERROR(cluster.Barrier("ycsb.start", compute_nodes, env.timeout));
  DMIDX_ASSIGN_OR_RETURN(const std::string node0, cluster.GetRecord("ycsb.plan", env.timeout));
  if (node0 != digest) {
    return Status::InvalidArgument(
        "compute node " + std::to_string(node) +
        " was given other workload, index or shape flags than compute node 0; every compute "
        "node of a run must run the same command (only --device, --port and --gid-index may "
        "differ)");
  }
  return Status::Ok();
}

int Run(const Flags& f, const Plan& plan) {
  bench::Environment env;
  env.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_seconds * 1000));
  env.progress = f.quiet ? nullptr : stderr;
  env.progress_is_terminal = isatty(STDERR_FILENO) != 0;
  dmidx::ClusterOptions& options = env.cluster_options;
  options = f.cluster;
  options.memory_nodes = f.memory_nodes;
  options.memory_node.pool_bytes = f.pool_bytes;
  options.memory_node.chunk_bytes = f.chunk_bytes;
  options.memory_node.huge_pages = false;  // mapped lazily: only what the index uses is touched
  if (f.backend == "sim") options.backend = dmidx::FabricBackend::kSim;
  if (f.backend == "verbs") {
    options.backend = dmidx::FabricBackend::kVerbs;
    options.bootstrap.wait_timeout = env.timeout;
  }
  options.lease.period = Nanoseconds(f.lease_period_seconds);
  options.lease.timeout = Nanoseconds(f.lease_timeout_seconds);
  options.reclamation.exhausted_wait = Nanoseconds(f.exhausted_wait_seconds);
  // Checked whatever the backend: a flag given is a flag checked.
  if (const std::string problem = dmidx::tools::PoolBytesProblem(options.memory_node);
      !problem.empty()) {
    return Fail(kBadUsage, "--pool-bytes: " + problem);
  }
  for (const bench::IndexKind* kind : plan.indexes) {
    if (f.backend != "verbs" && f.pool_bytes > kind->max_pool_bytes) {
      return Fail(kBadUsage, "--pool-bytes: must be <= " + dmidx::FormatSize(kind->max_pool_bytes) +
                                 " (the pool limit of index " + kind->name + "), not " +
                                 dmidx::FormatSize(f.pool_bytes));
    }
  }
  if (f.backend != "verbs") env.kill_compute_node = dmidx::tools::KillComputeNode;
  bench::RunInfo info;
  info.backend = f.backend;
  info.memory_nodes = f.memory_nodes;
  info.pool_bytes = f.pool_bytes;
  info.notes = plan.notes;
  info.lease = options.lease;
  info.reclamation = options.reclamation;
  const std::vector<bench::PointConfig> points = Points(f, plan);
  // Every point is checked before the first runs, and before a cluster over
  // RDMA is joined: an impossible one is a usage error (2), not a failed
  // run found an hour in.
  for (const bench::PointConfig& point : points) {
    const Status s = bench::CheckPoint(point, env);
    if (!s.ok()) return Fail(kBadUsage, bench::PointTitle(point) + ": " + std::string(s.message()));
  }

  std::unique_ptr<dmidx::Cluster> cluster;
  if (f.backend == "verbs") {
    const Status s = dmidx::Cluster::Open(options, &cluster);
    if (!s.ok()) return Fail(kRunFailed, "opening the cluster: " + s.ToString());
    env.cluster = cluster.get();
    const Status tagged = JoinRun(*cluster, f.compute_nodes.front(), PlanText(points, info), env);
    if (!tagged.ok()) {
      return Fail(tagged.code() == dmidx::StatusCode::kInvalidArgument ? kBadUsage : kRunFailed,
                  tagged.ToString());
    }
  }
  for (const std::string& note : plan.notes)
    std::printf("note: %s\n", note.c_str());

  std::unique_ptr<std::ofstream> json;
  if (!f.json.empty()) {
    json = std::make_unique<std::ofstream>(f.json, std::ios::trunc);
    if (!*json) return Fail(kRunFailed, "--json: cannot write " + f.json);
  }
  std::vector<bench::PointResult> results;
  for (size_t i = 0; i < points.size(); ++i) {
    if (env.progress != nullptr) {
      std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, points.size(),
                   bench::PointTitle(points[i]).c_str());
    }
    StatusOr<bench::PointResult> result = bench::RunPoint(points[i], i, env);
    if (!result.ok()) {
      return Fail(kRunFailed, bench::PointTitle(points[i]) + ": " + result.status().ToString());
    }
    bench::PrintPoint(stdout, points[i], *result);
    // (The failure experiment's kill has its own line in the table.)
    for (uint32_t dead : f.expect_deaths ? result->dead : std::vector<uint32_t>{}) {
      std::fprintf(stderr,
                   "%s: compute node %u died during the run phase of %s; it was fenced and "
                   "recovered, and the results above are the survivors'\n",
                   kProgram, dead, bench::PointTitle(points[i]).c_str());
    }
    if (f.expect_deaths) {
      std::printf("compute node %u: %" PRIu64 " run operations, %" PRIu64 " failed\n", result->node,
                  result->own_run_operations, result->own_run_failed);
    }
    if (!f.ack_log.empty()) {
      std::printf("ack-log check: %" PRIu64
                  " keys with an acknowledged write; each reads its last acknowledged write or "
                  "one not known to be older\n",
                  result->ack_checked_keys);
    }
    std::fflush(stdout);
    if (f.expect_deaths && result->own_run_failed > 0) {
      return Fail(kRunFailed, "compute node " + std::to_string(result->node) + ": " +
                                  std::to_string(result->own_run_failed) + " of " +
                                  std::to_string(result->own_run_operations) +
                                  " run operations failed");
    }
    if (f.backend == "sim") {
      // On stderr: wall time varies from run to run; stdout does not.
      for (const bench::PhaseResult& phase : result->phases) {
        std::fprintf(stderr,
                     "simulation speed: %s phase, %" PRIu64
                     " ops simulated in %.2f s of wall time: %.2f M simulated ops per "
                     "wall-clock second (%.2f M per CPU second; lower wall figures mean other "
                     "programs shared the core)\n",
                     phase.name.c_str(), phase.operations, phase.wall_seconds,
                     phase.wall_seconds > 0 ? phase.operations / phase.wall_seconds / 1e6 : 0,
                     phase.cpu_seconds > 0 ? phase.operations / phase.cpu_seconds / 1e6 : 0);
      }
    }
    if (json && result->merged) {
      *json << bench::PointJson(points[i], *result, info).dump() << "\n";
      json->flush();
    }
    results.push_back(std::move(*result));
  }
  if (json && !*json) return Fail(kRunFailed, "--json: writing " + f.json + " failed");
  if (f.ladder) PrintComparisons(points, results, /*ladder=*/true);
  if (plan.indexes.size() > 1 && !f.ladder) PrintComparisons(points, results, /*ladder=*/false);
  PrintSummary(points, results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, kProgram);
  dmidx::tools::SetUpTool(app, PropertiesHelp() + WorkloadList() + IndexList());
  Flags flags;
  AddFlags(app, &flags);
  if (std::optional<int> exit_code = dmidx::tools::ParseCommandLine(app, argc, argv)) {
    return *exit_code;
  }
  if (flags.workloads == "list") {
    std::printf("%s%s", WorkloadList().c_str() + 1, IndexList().c_str());
    return 0;
  }
  if (const int code = ApplyPreset(app, &flags); code != 0) return code;
  Plan plan;
  if (const int code = MakePlan(flags, app, &plan); code != 0) return code;
  return Run(flags, plan);
}
