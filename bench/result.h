// What one measured point of a bench run produced: per phase, per operation
// type, counts and latency histograms; the index's and the fabric's counters.
// Results of several compute nodes merge into the cluster's; they convert to
// and from JSON (the --json output, and how nodes send theirs to node 0).
#ifndef DMIDX_BENCH_RESULT_H_
#define DMIDX_BENCH_RESULT_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/histogram.h"
#include "bench/timeline.h"
#include "bench/workload.h"
#include "dmidx/index.h"
#include "dmidx/stats.h"
#include "dmidx/status.h"

namespace dmidx::bench {

struct OpResult {
  uint64_t operations = 0;  // issued, whatever their outcome
  uint64_t not_found = 0;   // NotFound (reads, updates, read-modify-writes, deletes)
  // NotFound for a key the load phase put in and no delete of this process
  // was issued for (must be 0: a lost key). Not counted in a run of several
  // processes whose mix deletes (another process's delete is not known).
  uint64_t missing_loaded = 0;
  uint64_t scan_items = 0;  // pairs returned by scans
  Histogram latency;        // ns, from the intended start with a target rate

  void Merge(const OpResult& other);
};

// How busy one modelled NIC (sim) was over a phase: each part's busy time
// over the phase's time, 0..1.
struct NicLoad {
  std::string name;  // "mn0", "cn3"
  double engine = 0, link_in = 0, link_out = 0;
};

// The failure experiment's kill of a compute node in the run phase
// (PointConfig::kill): when it happened and what the killed node did.
struct KillResult {
  uint32_t compute_node = 0;
  nanoseconds at{0};  // asked for, from the phase's start
  // When the first operation to end at or after `at`, on any compute node,
  // killed it, from the phase's start; -1 ns: the phase ended before `at`.
  nanoseconds killed_at{-1};
  // What MeasureRecovery is asked (PointConfig's FailureExperiment).
  double recovery_fraction = 0.9;
  nanoseconds recovery_span{0};
  // The killed node's own share of the phase: operations issued (whatever
  // their outcome), those that failed, and its timeline.
  uint64_t operations = 0;
  FailedByCode failed{};
  Timeline timeline;
};

struct PhaseResult {
  std::string name;  // "load", "warmup", "run"
  // Time of the phase (longest node) on the cluster's clock: wall time, or
  // virtual time under sim.
  double seconds = 0;
  // Wall time the phase took here (under sim: how long simulating it took).
  double wall_seconds = 0;
  // CPU time this process used over the phase (the simulation's cost on a
  // shared machine, where wall time also counts other programs).
  double cpu_seconds = 0;
  std::vector<NicLoad> nics;  // sim only
  uint64_t operations = 0;    // all types; for a bulk load, the keys loaded
  std::array<OpResult, kOpTypes> ops{};
  IndexStats index;  // the index's counters over the phase
  Stats fabric;      // the clients' fabric counters over the phase
  // The compute nodes' reclamation of remote memory over the phase (the
  // churn's run phase: its quiesce included).
  ReclamationStats reclamation;
  // One-sided ops posted to each memory node over the phase.
  std::vector<uint64_t> memory_node_ops;
  // Operations that failed, by code, among `operations`. Only a run with
  // the failure experiment goes on after a failure: otherwise the first
  // failed operation ends the run with its error.
  FailedByCode failed{};
  // Every compute node's operations per window (Timeline::interval 0: none
  // kept).
  Timeline timeline;
  // The run phase of the failure experiment.
  std::optional<KillResult> kill;

  const OpResult& operator[](OpType op) const { return ops[static_cast<size_t>(op)]; }
  OpResult& operator[](OpType op) { return ops[static_cast<size_t>(op)]; }
  double Mops() const { return seconds > 0 ? operations / seconds / 1e6 : 0; }
  // The busiest memory node's share of memory_node_ops, 0..1 (0: none).
  double BusiestMemoryNodeShare() const;
  // All types' latencies together.
  Histogram AllLatencies() const;
  // Adds another compute node's result of the same phase.
  void Merge(const PhaseResult& other);
  // The survivors' recovery from the kill (kill must be set).
  Recovery KillRecovery() const;
};

nlohmann::json ToJson(const Histogram& histogram);
nlohmann::json ToJson(const OpCounters& counters);
nlohmann::json ToJson(const ReclamationStats& stats);
// A memory node's pool usage: {"memory_node": 0, "pool_bytes": ..., ...}.
nlohmann::json ToJson(const PoolUsage& usage);
nlohmann::json ToJson(const PhaseResult& phase);
// The inverse of ToJson(PhaseResult); InvalidArgument for a malformed one.
StatusOr<PhaseResult> PhaseFromJson(const nlohmann::json& json);

// Sums of index counters (IndexStats has only the difference).
IndexStats Sum(const IndexStats& a, const IndexStats& b);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_RESULT_H_
