// What the bench prints: a table per point on stdout, side-by-side
// comparisons (ladders, indexes), a summary, and one JSON object per point.
#ifndef DMIDX_BENCH_REPORT_H_
#define DMIDX_BENCH_REPORT_H_

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/result.h"
#include "bench/runner.h"

namespace dmidx::bench {

// Where the points ran, for the report and the JSON.
struct RunInfo {
  std::string backend;  // "local", "verbs"
  uint32_t memory_nodes = 0;
  uint64_t pool_bytes = 0;         // per memory node (local)
  std::vector<std::string> notes;  // e.g. property notes
  // The compute nodes' leases and reclamation settings: they set how fast
  // retired memory comes back, so a churn's numbers mean nothing without
  // them (and compute nodes given others split the run differently).
  LeaseOptions lease;
  ReclamationOptions reclamation;
};

// One line naming a point: index, label, workload, shape.
std::string PointTitle(const PointConfig& config);

// The point's phases: throughput and latency percentiles per operation
// type, then per index operation kind the counters per operation (round
// trips, bytes, amplification, lock retries, handovers, cache hit ratio,
// read retries), each memory node's share of the one-sided ops, and the
// reclamation counters of phases that retired or reused memory; then the
// point's MemoryReport (PrintMemory).
void PrintPoint(std::FILE* out, const PointConfig& config, const PointResult& result);

// One line: remote bytes in use over the memory nodes' pools, the live
// keys and the bytes per live key.
void PrintMemory(std::FILE* out, const MemoryReport& memory);
// The JSON of a point's "memory": the MemoryReport's numbers, every pool,
// and the reclamation counters summed over the point's phases.
nlohmann::json MemoryJson(const MemoryReport& memory, const PointResult& result);

// Run phases of several points side by side, each with its ratio to the
// first (a ladder's baseline, or the first index).
struct Column {
  std::string label;
  const PointConfig* config;
  const PointResult* result;
};
void PrintComparison(std::FILE* out, const std::string& title, const std::vector<Column>& columns);

// The full configuration and results of one point.
nlohmann::json PointJson(const PointConfig& config, const PointResult& result, const RunInfo& info);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_REPORT_H_
