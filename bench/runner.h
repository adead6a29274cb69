// Runs one measured point of the bench: opens the index on every compute
// node of the point, loads it, then runs the warm-up and run phases of the
// workload from every context (threads x coroutines per compute node), and
// returns what each phase measured. The bench's main() turns flags into
// PointConfigs (one per index x workload x sweep combination x ladder step)
// and prints the results.
//
// Two environments:
//   local  every point opens its own in-process cluster (so its memory goes
//          away with it), with `compute_nodes` clients in this process.
//   verbs  this process is one compute node of a run of `compute_nodes`
//          processes that all run the same command: they meet at barriers
//          between phases, every node sends its results to node 0 through
//          the bootstrap's records, and node 0 returns the cluster's.
#ifndef DMIDX_BENCH_RUNNER_H_
#define DMIDX_BENCH_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/keys.h"
#include "bench/registry.h"
#include "bench/result.h"
#include "bench/trace.h"
#include "bench/workload.h"
#include "dmidx/cluster.h"
#include "dmidx/options.h"

namespace dmidx::bench {

enum class LoadMode : uint8_t {
  kBulk,    // compute node 0 bulk-loads the sorted records
  kInsert,  // every context inserts its share of the records
  kNone,    // nothing is loaded (a trace brings its own keys)
};
const char* LoadModeName(LoadMode mode);  // "bulk", "insert", "none"

// The failure experiment (dmidx-ycsb --kill-compute-node): compute node
// `compute_node` is killed `at` after the run phase began, on the
// cluster's clock, by the first operation of any compute node to end then
// or later; the killed node's contexts stop at their first operation that
// ends then or later, and every other compute node runs the phase out,
// counting failed operations by code instead of stopping at the first.
// Needs a run phase of a duration longer than `at`, at least two compute
// nodes, and a cluster this process can kill a node of
// (Environment::kill_compute_node: local and sim).
struct FailureExperiment {
  uint32_t compute_node = 0;
  nanoseconds at{0};
  // What the recovery time measures (bench/timeline.h, MeasureRecovery):
  // the survivors' throughput over `recovery_span` back to at least
  // `recovery_fraction` of their mean before the kill.
  double recovery_fraction = 0.9;
  nanoseconds recovery_span{std::chrono::milliseconds(50)};
};

struct PointConfig {
  const IndexKind* index = nullptr;
  IndexSettings settings;
  std::string label;  // the ladder step, or empty
  WorkloadSpec workload;
  KeyFormat keys;
  // Compute nodes: clients of the in-process cluster (local), or processes
  // of the run (verbs).
  uint32_t compute_nodes = 1;
  uint32_t threads = 1;     // per compute node
  uint32_t coroutines = 1;  // per thread
  // ClientOptions::retry_backoff_min / max of every compute node.
  std::chrono::nanoseconds retry_backoff_min = ClientOptions{}.retry_backoff_min;
  std::chrono::nanoseconds retry_backoff_max = ClientOptions{}.retry_backoff_max;
  bool pin_threads = false;
  LoadMode load = LoadMode::kBulk;
  double fill_factor = 0.8;  // of a bulk load
  uint64_t warmup_operations = 0;
  // Run for this long instead of workload.operation_count operations.
  std::chrono::milliseconds duration{0};
  // Open loop: operations per second over the whole cluster, each context
  // starting its i-th operation at i / (its share of the rate) and latency
  // counted from that intended start (queueing is not hidden). 0: closed
  // loop.
  double target_rate = 0;
  uint64_t seed = 1;
  // Replay these operations in the run phase instead of generating them
  // (compute node n takes lines n, n + N, ...). Not owned.
  const std::vector<TraceOp>* trace_in = nullptr;
  // Write the run phase's operations here, in the order they were issued.
  std::string trace_out;
  // Each phase's timeline keeps operations per window of this long on the
  // cluster's clock (bench/timeline.h); 0: none.
  nanoseconds timeline_interval{std::chrono::milliseconds(10)};
  std::optional<FailureExperiment> kill;
  // A verbs run whose compute-node processes may die in the run phase
  // (killed by the operator): every process counts failed operations by
  // code instead of stopping at the first, and at the phase's end judges a
  // node whose results do not come through its lease
  // (Client::JudgeComputeNode: dead once its lease stood still for the
  // lease timeout, and then fenced and recovered) and finishes the point
  // without it (PointResult::dead). Without it, such a node fails the run,
  // named. The dead cannot join a later point.
  bool expect_deaths = false;
  // Append every write this process finished to this file
  // (bench/ack_log.h; a verbs run of several processes: FILE.<node>), each
  // write's value unique (a read-modify-write writes it too, not the value
  // read + 1), and after the run phase check that every acknowledged
  // write survived: each process reads every process's log (on a shared
  // filesystem) and looks every key up. Empty: no log.
  std::string ack_log;
  // The churn (dmidx-ycsb --write-bytes-multiple): > 0 runs the run phase
  // until this process's compute nodes have written (Stats::bytes_written)
  // this many times the cluster's pool bytes (a run of several processes:
  // each its share), whatever workload.operation_count says, then
  // quiesces: hands every retired object to the lease keepers and waits
  // (up to Environment::timeout) until each was reclaimed, so that the
  // point's MemoryReport counts what the index holds. Use it with a mix
  // over a fixed key set (the built-in workload "churn"). 0: off.
  double write_bytes_multiple = 0;
};

struct Environment {
  // local: options of each point's own cluster. verbs: unused.
  ClusterOptions cluster_options;
  // verbs: this process's cluster (null for local).
  Cluster* cluster = nullptr;
  // Bound on barriers and on waiting for other nodes' results.
  std::chrono::milliseconds timeout{60000};
  // Names the indexes, barriers and records of this invocation (the same
  // on every node of a run; a run hosts one invocation).
  std::string run_tag = "ycsb";
  // Progress of load and run phases on this stream (null: none); a bar when
  // it is a terminal, a line every few seconds otherwise.
  std::FILE* progress = nullptr;
  bool progress_is_terminal = false;
  // Kills compute node `compute_node` of `cluster` for good, for the
  // failure experiment: its later posts fail and its queued batches are
  // dropped. Null where this process cannot (a verbs run: the operator
  // kills the compute node's process). Must be safe to call from a
  // context of a client of `cluster`.
  std::function<Status(Cluster& cluster, uint32_t compute_node)> kill_compute_node;
};

// Remote memory at the end of a point, as compute node 0 saw it once
// every node finished the run phase: every memory node's pool
// (Cluster::MemoryUsage) and the keys the index holds, counted by a scan.
struct MemoryReport {
  std::vector<PoolUsage> pools;  // by memory node
  uint64_t live_keys = 0;
  // The same after the load phase: the bytes in use then and the records
  // loaded (what a key costs the index when it holds just them).
  uint64_t bytes_in_use_after_load = 0;
  uint64_t loaded_keys = 0;
  // Whether the end waited for every retired object to be reclaimed (the
  // churn), and got there before the timeout.
  bool quiesced = false;
  // What Cluster::MemoryUsage adds up to over the memory nodes.
  uint64_t PoolBytes() const;
  uint64_t BytesInUse() const;
  // BytesInUse() / live_keys; 0 with no live keys.
  double BytesPerLiveKey() const;
  // bytes_in_use_after_load / loaded_keys; 0 with none loaded.
  double BytesPerLoadedKey() const;
};

struct PointResult {
  uint32_t node = 0;    // this process's compute node id
  bool merged = false;  // holds every compute node's results
  std::vector<PhaseResult> phases;
  // This process's own run phase, before any merge: its operations and
  // those that failed.
  uint64_t own_run_operations = 0;
  uint64_t own_run_failed = 0;
  // Compute nodes that died in the run phase: a verbs run's peers judged
  // dead through their leases (PointConfig::expect_deaths), or the failure
  // experiment's killed node.
  std::vector<uint32_t> dead;
  // With PointConfig::ack_log: the keys the final check looked up (every
  // one read a write not known to have been overwritten, or the point
  // failed).
  uint64_t ack_checked_keys = 0;
  // Set where `merged` is (compute node 0, or a local run).
  std::optional<MemoryReport> memory;
};

// InvalidArgument, before anything runs, for a config that cannot run:
// scans on an index without them, a pool too small for the records (the
// message says how big a pool is needed), too many contexts, a bad
// workload or key format, a failure experiment the point or the
// environment cannot run.
Status CheckPoint(const PointConfig& config, const Environment& env);

// Runs `config` as the point numbered `point` of this invocation (every
// node of a run numbers its points alike). InvalidArgument for a config
// that cannot run (scans on an index without them, a pool too small for
// the records: the message says how big a pool is needed); the first
// operation error otherwise, naming the phase.
StatusOr<PointResult> RunPoint(const PointConfig& config, uint64_t point, Environment& env);

// The live keys of `index`: one scan over every key from the lowest of
// `key_bytes` on, `page` pairs at a time. Through `ctx`.
StatusOr<uint64_t> CountKeys(Context& ctx, RangeIndex& index, uint32_t key_bytes, size_t page);

// Remote memory the point's index needs (records plus expected inserts).
uint64_t MemoryNeeded(const PointConfig& config);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_RUNNER_H_
