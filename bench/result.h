// What one measured point of a bench run produced: per phase, per operation
// type, counts and latency histograms; the index's and the fabric's counters.
// Results of several compute nodes merge into the cluster's; they convert to
// and from JSON (the --json output, and how nodes send theirs to node 0).
#ifndef DMIDX_BENCH_RESULT_H_
#define DMIDX_BENCH_RESULT_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/histogram.h"
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
  // One-sided ops posted to each memory node over the phase.
  std::vector<uint64_t> memory_node_ops;

  const OpResult& operator[](OpType op) const { return ops[static_cast<size_t>(op)]; }
  OpResult& operator[](OpType op) { return ops[static_cast<size_t>(op)]; }
  double Mops() const { return seconds > 0 ? operations / seconds / 1e6 : 0; }
  // The busiest memory node's share of memory_node_ops, 0..1 (0: none).
  double BusiestMemoryNodeShare() const;
  // All types' latencies together.
  Histogram AllLatencies() const;
  // Adds another compute node's result of the same phase.
  void Merge(const PhaseResult& other);
};

nlohmann::json ToJson(const Histogram& histogram);
nlohmann::json ToJson(const OpCounters& counters);
nlohmann::json ToJson(const PhaseResult& phase);
// The inverse of ToJson(PhaseResult); InvalidArgument for a malformed one.
StatusOr<PhaseResult> PhaseFromJson(const nlohmann::json& json);

// Sums of index counters (IndexStats has only the difference).
IndexStats Sum(const IndexStats& a, const IndexStats& b);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_RESULT_H_
