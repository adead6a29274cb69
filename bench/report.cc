#include "bench/report.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <string>
#include <utility>

namespace dmidx::bench {
namespace {

double Micros(uint64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

double PerOp(uint64_t count, uint64_t operations) {
  return operations == 0 ? 0 : static_cast<double>(count) / static_cast<double>(operations);
}

// The bytes a caller asked an index operation for: the key and the value,
// times the pairs a scan returned.
double AskedBytes(IndexOp kind, const PhaseResult& phase, uint32_t key_bytes) {
  const double pair = key_bytes + 8.0;
  const OpCounters& counters = phase.index[kind];
  if (kind == IndexOp::kScan) {
    return pair * static_cast<double>(phase[OpType::kScan].scan_items);
  }
  return pair * static_cast<double>(counters.operations);
}

const char* IndexOpLabel(IndexOp kind) {
  return IndexOpName(kind);
}

void PrintLatencyRow(std::FILE* out, const char* name, uint64_t operations, double seconds,
                     const Histogram& latency, uint64_t not_found) {
  std::fprintf(out, "  %-8s %10" PRIu64 " %8.3f %8.2f %8.2f %8.2f %9.2f %10.2f %9" PRIu64 "\n",
               name, operations, seconds > 0 ? operations / seconds / 1e6 : 0.0,
               Micros(latency.Percentile(50)), Micros(latency.Percentile(90)),
               Micros(latency.Percentile(99)), Micros(latency.Percentile(99.9)),
               Micros(latency.max()), not_found);
}

void PrintCounters(std::FILE* out, const PhaseResult& phase, uint32_t key_bytes) {
  bool header = false;
  for (size_t k = 0; k < kIndexOpKinds; ++k) {
    const auto kind = static_cast<IndexOp>(k);
    const OpCounters& c = phase.index[kind];
    if (c.operations == 0) continue;
    if (!header) {
      std::fprintf(out, "  %-9s %7s %9s %9s %8s %8s %8s %8s %7s %8s\n", "index op", "RT/op",
                   "rd B/op", "wr B/op", "rd amp", "wr amp", "lockretr", "handover", "cache%",
                   "rdretry");
      header = true;
    }
    const double asked = AskedBytes(kind, phase, key_bytes);
    const bool writes =
        kind == IndexOp::kInsert || kind == IndexOp::kUpdate || kind == IndexOp::kDelete;
    const uint64_t lookups = c.cache_hits + c.cache_misses;
    char read_amp[16] = "-", write_amp[16] = "-", cache[16] = "-";
    if (asked > 0) std::snprintf(read_amp, sizeof(read_amp), "%.1f", c.bytes_read / asked);
    if (asked > 0 && writes) {
      std::snprintf(write_amp, sizeof(write_amp), "%.1f", c.bytes_written / asked);
    }
    if (lookups > 0) {
      std::snprintf(cache, sizeof(cache), "%.1f", 100.0 * c.cache_hits / lookups);
    }
    std::fprintf(out, "  %-9s %7.2f %9.0f %9.0f %8s %8s %8.3f %8.3f %7s %8.4f\n",
                 IndexOpLabel(kind), PerOp(c.round_trips, c.operations),
                 PerOp(c.bytes_read, c.operations), PerOp(c.bytes_written, c.operations), read_amp,
                 write_amp, PerOp(c.lock_retries, c.operations), PerOp(c.handovers, c.operations),
                 cache, PerOp(c.read_retries, c.operations));
  }
  // The radix tree's and RDWC's events, and HOCL's write-backs posted
  // again after a failure, where any happened: per operation of each kind.
  const std::pair<const char*, uint64_t OpCounters::*> extras[] = {
      {"delegated reads", &OpCounters::delegated_reads},
      {"combined writes", &OpCounters::combined_writes},
      {"CAS retries", &OpCounters::cas_retries},
      {"re-posted batches", &OpCounters::reposted_batches}};
  for (const auto& [name, field] : extras) {
    std::string line;
    for (size_t k = 0; k < kIndexOpKinds; ++k) {
      const auto kind = static_cast<IndexOp>(k);
      const OpCounters& c = phase.index[kind];
      if (c.*field == 0) continue;
      char part[64];
      std::snprintf(part, sizeof(part), " %s %.3f", IndexOpLabel(kind),
                    PerOp(c.*field, c.operations));
      line += part;
    }
    if (!line.empty()) std::fprintf(out, "  %s/op:%s\n", name, line.c_str());
  }
  // Lock waits, in us per operation of each kind with any (averaged over
  // all its operations), and the part spent in a local queue (HOCL).
  std::string waits;
  for (size_t k = 0; k < kIndexOpKinds; ++k) {
    const auto kind = static_cast<IndexOp>(k);
    const OpCounters& c = phase.index[kind];
    if (c.lock_wait_ns == 0) continue;
    char part[96];
    std::snprintf(part, sizeof(part), " %s %.2f (local queue %.2f)", IndexOpLabel(kind),
                  PerOp(c.lock_wait_ns, c.operations) / 1000,
                  PerOp(c.local_lock_wait_ns, c.operations) / 1000);
    waits += part;
  }
  if (!waits.empty()) std::fprintf(out, "  lock wait us/op:%s\n", waits.c_str());
  if (phase.index.longest_lock_wait_ns > 0) {
    // The index keeps one maximum since it was opened, not one per phase.
    std::fprintf(out, "  longest lock wait since the index opened %.1f us\n",
                 Micros(phase.index.longest_lock_wait_ns));
  }
  uint64_t node_total = 0;
  for (uint64_t ops : phase.memory_node_ops)
    node_total += ops;
  if (node_total > 0) {
    std::fprintf(out, "  memory-node share of one-sided ops:");
    for (size_t node = 0; node < phase.memory_node_ops.size(); ++node) {
      std::fprintf(out, " MN%zu %.1f%%", node, 100.0 * phase.memory_node_ops[node] / node_total);
    }
    std::fputc('\n', out);
  }
  if (!phase.nics.empty()) {
    // Memory nodes one by one; compute nodes as the highest of each column
    // over them.
    std::fprintf(out, "  NIC utilisation (engine/link out/link in):");
    NicLoad busiest{"CN max", 0, 0, 0};
    for (const NicLoad& nic : phase.nics) {
      if (nic.name.rfind("mn", 0) == 0) {
        std::fprintf(out, " %s %.0f/%.0f/%.0f%%", nic.name.c_str(), 100 * nic.engine,
                     100 * nic.link_out, 100 * nic.link_in);
        continue;
      }
      busiest.engine = std::max(busiest.engine, nic.engine);
      busiest.link_out = std::max(busiest.link_out, nic.link_out);
      busiest.link_in = std::max(busiest.link_in, nic.link_in);
    }
    std::fprintf(out, " | %s %.0f/%.0f/%.0f%%\n", busiest.name.c_str(), 100 * busiest.engine,
                 100 * busiest.link_out, 100 * busiest.link_in);
  }
}

double Mebibytes(uint64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

double Millis(nanoseconds time) {
  return std::chrono::duration<double, std::milli>(time).count();
}

// Failures, the kill and the survivors' recovery (the failure experiment).
void PrintFailures(std::FILE* out, const PhaseResult& phase) {
  if (Total(phase.failed) > 0) {
    std::fprintf(out, "  failed: %s\n", FailedText(phase.failed).c_str());
  }
  if (!phase.kill) return;
  const KillResult& kill = *phase.kill;
  if (kill.killed_at.count() < 0) {
    std::fprintf(out, "  kill: compute node %u was not killed: the phase ended before %.3f ms\n",
                 kill.compute_node, Millis(kill.at));
    return;
  }
  FailedByCode survivors = phase.failed;
  for (size_t code = 0; code < kStatusCodes; ++code)
    survivors[code] -= std::min(survivors[code], kill.failed[code]);
  std::fprintf(out,
               "  kill: compute node %u at %.3f ms (asked for %.3f ms); it issued %" PRIu64
               " ops, %" PRIu64 " failed; the survivors %" PRIu64 ", %" PRIu64 " failed\n",
               kill.compute_node, Millis(kill.killed_at), Millis(kill.at), kill.operations,
               Total(kill.failed), phase.operations - kill.operations, Total(survivors));
  const Recovery recovery = phase.KillRecovery();
  if (!recovery.measurable) {
    std::fprintf(out, "  recovery: not measurable (no survivor throughput before the kill)\n");
    return;
  }
  char goal[160];
  std::snprintf(
      goal, sizeof(goal), "back to >= %g%% of %.3f Mops/s (their mean before the kill) over %g ms",
      100 * recovery.fraction, recovery.baseline_ops_per_second / 1e6, Millis(recovery.span));
  if (recovery.recovered) {
    std::fprintf(out, "  recovery: %.1f ms after the kill the survivors were %s; lowest %.0f%%\n",
                 Millis(recovery.time), goal, 100 * recovery.lowest_fraction);
  } else {
    std::fprintf(out, "  recovery: not recovered within the phase (never %s); lowest %.0f%%\n",
                 goal, 100 * recovery.lowest_fraction);
  }
}

// The compute nodes' reclamation over a phase, where any happened.
void PrintReclamation(std::FILE* out, const ReclamationStats& r) {
  if (r == ReclamationStats{}) return;
  std::fprintf(out,
               "  reclamation: retired %" PRIu64 " objects (%.1f MiB), reclaimed %" PRIu64
               " (%.1f MiB); epoch advances %" PRIu64 ", held back %" PRIu64 "\n",
               r.retired_objects, Mebibytes(r.retired_bytes), r.reclaimed_objects,
               Mebibytes(r.reclaimed_bytes), r.epoch_advances, r.held_back);
  std::fprintf(out,
               "  shared free lists: popped %" PRIu64 " objects (%" PRIu64
               " bundles), pushed %" PRIu64 " (%" PRIu64 " bundles), lost %" PRIu64
               ", failed pops/pushes %" PRIu64 "\n",
               r.shared_objects_popped, r.shared_bundles_popped, r.shared_objects_pushed,
               r.shared_bundles_pushed, r.shared_objects_lost, r.shared_failures);
  std::fprintf(out,
               "  compaction: %" PRIu64 " passes, %" PRIu64 " chunks drained, %" PRIu64
               " chunks returned to the memory nodes\n",
               r.compaction_passes, r.chunks_drained, r.chunks_returned);
}

}  // namespace

void PrintMemory(std::FILE* out, const MemoryReport& memory) {
  std::fprintf(out, "remote memory%s: %.1f MiB in use of %.1f MiB over %zu memory node%s",
               memory.quiesced ? " (quiesced)" : "", Mebibytes(memory.BytesInUse()),
               Mebibytes(memory.PoolBytes()), memory.pools.size(),
               memory.pools.size() == 1 ? "" : "s");
  if (memory.live_keys > 0) {
    std::fprintf(out, "; %" PRIu64 " live keys, %.1f bytes per live key", memory.live_keys,
                 memory.BytesPerLiveKey());
  } else {
    std::fprintf(out, "; no live keys");
  }
  if (memory.loaded_keys > 0) {
    std::fprintf(out, " (after the load: %.1f MiB, %.1f bytes per loaded key)",
                 Mebibytes(memory.bytes_in_use_after_load), memory.BytesPerLoadedKey());
  }
  std::fputc('\n', out);
}

nlohmann::json MemoryJson(const MemoryReport& memory, const PointResult& result) {
  nlohmann::json pools = nlohmann::json::array();
  for (const PoolUsage& pool : memory.pools)
    pools.push_back(ToJson(pool));
  ReclamationStats reclamation;
  for (const PhaseResult& phase : result.phases)
    reclamation += phase.reclamation;
  return {{"pool_bytes", memory.PoolBytes()},
          {"bytes_in_use", memory.BytesInUse()},
          {"live_keys", memory.live_keys},
          {"bytes_per_live_key",
           memory.live_keys > 0 ? nlohmann::json(memory.BytesPerLiveKey()) : nlohmann::json()},
          {"quiesced", memory.quiesced},
          {"bytes_in_use_after_load", memory.bytes_in_use_after_load},
          {"loaded_keys", memory.loaded_keys},
          {"pools", std::move(pools)},
          {"reclamation", ToJson(reclamation)}};
}

std::string PointTitle(const PointConfig& config) {
  std::string title = config.index->name;
  if (!config.label.empty()) title += " [" + config.label + "]";
  title += " | workload " + config.workload.name;
  title += " | " + std::to_string(config.compute_nodes) + " CN x " +
           std::to_string(config.threads) + " thr x " + std::to_string(config.coroutines) + " coro";
  const auto cache = config.settings.find("cache_bytes");
  if (cache != config.settings.end()) title += " | cache " + cache->second;
  return title;
}

void PrintPoint(std::FILE* out, const PointConfig& config, const PointResult& result) {
  std::fprintf(out, "\n== %s ==\n", PointTitle(config).c_str());
  for (const PhaseResult& phase : result.phases) {
    if (phase.name == "load" && config.load == LoadMode::kBulk) {
      std::fprintf(out, "load: bulk load of %" PRIu64 " keys in %.2f s (%.2f M keys/s)\n",
                   phase.operations, phase.seconds, phase.Mops());
      continue;
    }
    std::fprintf(out, "%s: %" PRIu64 " ops in %.2f s, %.3f Mops/s\n", phase.name.c_str(),
                 phase.operations, phase.seconds, phase.Mops());
    if (phase.name == "warmup") continue;
    std::fprintf(out, "  %-8s %10s %8s %8s %8s %8s %9s %10s %9s\n", "op", "count", "Mops/s",
                 "p50 us", "p90 us", "p99 us", "p99.9 us", "max us", "notfound");
    for (size_t t = 0; t < kOpTypes; ++t) {
      const OpResult& op = phase.ops[t];
      if (op.operations == 0) continue;
      PrintLatencyRow(out, OpTypeName(static_cast<OpType>(t)), op.operations, phase.seconds,
                      op.latency, op.not_found);
    }
    uint64_t not_found = 0;
    for (const OpResult& op : phase.ops)
      not_found += op.not_found;
    PrintLatencyRow(out, "all", phase.operations, phase.seconds, phase.AllLatencies(), not_found);
    PrintFailures(out, phase);
    PrintCounters(out, phase, config.keys.bytes);
    PrintReclamation(out, phase.reclamation);
  }
  if (result.memory) PrintMemory(out, *result.memory);
  if (!result.merged) {
    std::fprintf(out, "(compute node %u's share; node 0 prints the cluster's)\n", result.node);
  }
}

void PrintComparison(std::FILE* out, const std::string& title, const std::vector<Column>& columns) {
  if (columns.empty()) return;
  std::fprintf(out, "\n== %s ==\n", title.c_str());
  std::fprintf(out, "  %-16s", "");
  for (const Column& column : columns)
    std::fprintf(out, " %14s", column.label.c_str());
  std::fputc('\n', out);
  auto run_of = [](const Column& column) -> const PhaseResult* {
    for (const PhaseResult& phase : column.result->phases)
      if (phase.name == "run") return &phase;
    return nullptr;
  };
  const PhaseResult* base = run_of(columns.front());
  auto row = [&](const char* name, auto value, bool ratio) {
    std::fprintf(out, "  %-16s", name);
    for (const Column& column : columns) {
      const PhaseResult* run = run_of(column);
      const double v = run != nullptr ? value(*run) : 0;
      const double b = base != nullptr ? value(*base) : 0;
      // Three significant digits, without an exponent.
      const int decimals = v >= 100 || v == 0 ? 0 : v >= 10 ? 1 : v >= 1 ? 2 : 3;
      char cell[48];
      if (ratio && b > 0) {
        std::snprintf(cell, sizeof(cell), "%.*f (%.2fx)", decimals, v, v / b);
      } else {
        std::snprintf(cell, sizeof(cell), "%.*f", decimals, v);
      }
      std::fprintf(out, " %15s", cell);
    }
    std::fputc('\n', out);
  };
  row(
      "Mops/s", [](const PhaseResult& p) { return p.Mops(); }, true);
  row(
      "p50 us", [](const PhaseResult& p) { return Micros(p.AllLatencies().Percentile(50)); }, true);
  row(
      "p99 us", [](const PhaseResult& p) { return Micros(p.AllLatencies().Percentile(99)); }, true);
  row(
      "round trips/op",
      [](const PhaseResult& p) { return PerOp(p.index.Total().round_trips, p.operations); }, true);
  row(
      "bytes/op",
      [](const PhaseResult& p) {
        const OpCounters total = p.index.Total();
        return PerOp(total.bytes_read + total.bytes_written, p.operations);
      },
      true);
  row(
      "busiest MN %", [](const PhaseResult& p) { return 100 * p.BusiestMemoryNodeShare(); }, false);
  row(
      "lock retries/op",
      [](const PhaseResult& p) { return PerOp(p.index.Total().lock_retries, p.operations); },
      false);
  row(
      "handovers/op",
      [](const PhaseResult& p) { return PerOp(p.index.Total().handovers, p.operations); }, false);
  row(
      "cache hit %",
      [](const PhaseResult& p) {
        const OpCounters total = p.index.Total();
        const uint64_t lookups = total.cache_hits + total.cache_misses;
        return lookups == 0 ? 0.0 : 100.0 * total.cache_hits / lookups;
      },
      false);
}

nlohmann::json PointJson(const PointConfig& config, const PointResult& result,
                         const RunInfo& info) {
  const WorkloadSpec& w = config.workload;
  nlohmann::json workload = {
      {"name", w.name},
      {"recordcount", w.record_count},
      {"insertstart", w.insert_start},
      {"insertcount", w.LoadedRecords()},
      {"operationcount", w.operation_count},
      {"readproportion", w.read_proportion},
      {"updateproportion", w.update_proportion},
      {"insertproportion", w.insert_proportion},
      {"scanproportion", w.scan_proportion},
      {"readmodifywriteproportion", w.read_modify_write_proportion},
      {"deleteproportion", w.delete_proportion},
      {"insertexistingproportion", w.insert_existing_proportion},
      {"requestdistribution", DistributionName(w.request_distribution)},
      {"zipfianconstant", w.zipfian_constant},
      {"dmidx.zipfian", ZipfianKindName(w.zipfian)},
      {"minscanlength", w.min_scan_length},
      {"maxscanlength", w.max_scan_length},
      {"scanlengthdistribution", DistributionName(w.scan_length_distribution)},
      {"insertorder", w.ordered_inserts ? "ordered" : "hashed"},
      {"value_bytes", 8},
  };
  nlohmann::json phases = nlohmann::json::array();
  for (const PhaseResult& phase : result.phases)
    phases.push_back(ToJson(phase));
  return {
      {"index", config.index->name},
      {"label", config.label},
      {"settings", config.settings},
      {"workload", std::move(workload)},
      {"keys",
       {{"kind", KeyKindName(config.keys.kind)},
        {"bytes", config.keys.bytes},
        {"ordered", config.keys.ordered}}},
      {"cluster",
       {{"backend", info.backend},
        {"memory_nodes", info.memory_nodes},
        {"pool_bytes", info.pool_bytes},
        {"compute_nodes", config.compute_nodes},
        {"threads", config.threads},
        {"coroutines", config.coroutines},
        {"retry_backoff_min_ns", config.retry_backoff_min.count()},
        {"retry_backoff_max_ns", config.retry_backoff_max.count()},
        {"pin_threads", config.pin_threads},
        {"lease",
         {{"period_ns", info.lease.period.count()}, {"timeout_ns", info.lease.timeout.count()}}},
        {"reclamation",
         {{"cache_window_epochs", info.reclamation.cache_window_epochs},
          {"compact_below_free_chunks", info.reclamation.compact_below_free_chunks},
          {"compact_bundles_per_pass", info.reclamation.compact_bundles_per_pass},
          {"max_draining_chunks", info.reclamation.max_draining_chunks},
          {"exhausted_wait_ns", info.reclamation.exhausted_wait.count()}}}}},
      {"load", {{"mode", LoadModeName(config.load)}, {"fill_factor", config.fill_factor}}},
      {"run",
       {{"warmup_operations", config.warmup_operations},
        {"duration_ms", config.duration.count()},
        {"write_bytes_multiple", config.write_bytes_multiple},
        {"target_rate", config.target_rate},
        {"seed", config.seed},
        {"trace_in", config.trace_in != nullptr},
        {"timeline_interval_ns", config.timeline_interval.count()},
        {"kill", config.kill
                     ? nlohmann::json{{"compute_node", config.kill->compute_node},
                                      {"at_ns", config.kill->at.count()},
                                      {"recovery_fraction", config.kill->recovery_fraction},
                                      {"recovery_span_ns", config.kill->recovery_span.count()}}
                     : nlohmann::json()},
        {"merged", result.merged},
        {"node", result.node}}},
      {"notes", info.notes},
      {"phases", std::move(phases)},
      {"memory", result.memory ? MemoryJson(*result.memory, result) : nlohmann::json()},
  };
}

}  // namespace dmidx::bench
