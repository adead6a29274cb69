#include "bench/result.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "lib/common/counter_fields.h"

namespace dmidx::bench {

namespace {

// Counters as a JSON object, one key per field of the struct's list
// (lib/common/counter_fields.h).
template <typename T, typename Fields>
nlohmann::json CountersToJson(const T& counters, Fields fields) {
  nlohmann::json json = nlohmann::json::object();
  fields(counters, counters,
         [&json](const uint64_t& x, const uint64_t&, const char* name) { json[name] = x; });
  return json;
}

}  // namespace

void OpResult::Merge(const OpResult& other) {
  operations += other.operations;
  not_found += other.not_found;
  missing_loaded += other.missing_loaded;
  scan_items += other.scan_items;
  latency.Merge(other.latency);
}

Histogram PhaseResult::AllLatencies() const {
  Histogram all;
  for (const OpResult& op : ops)
    all.Merge(op.latency);
  return all;
}

double PhaseResult::BusiestMemoryNodeShare() const {
  uint64_t total = 0, busiest = 0;
  for (uint64_t node_ops : memory_node_ops) {
    total += node_ops;
    busiest = std::max(busiest, node_ops);
  }
  return total == 0 ? 0 : static_cast<double>(busiest) / static_cast<double>(total);
}

IndexStats Sum(const IndexStats& a, const IndexStats& b) {
  IndexStats sum = a;
  for (size_t kind = 0; kind < kIndexOpKinds; ++kind)
    sum.by_op[kind] += b.by_op[kind];
  sum.longest_lock_wait_ns = std::max(a.longest_lock_wait_ns, b.longest_lock_wait_ns);
  return sum;
}

void PhaseResult::Merge(const PhaseResult& other) {
  seconds = std::max(seconds, other.seconds);
  wall_seconds = std::max(wall_seconds, other.wall_seconds);
  cpu_seconds = std::max(cpu_seconds, other.cpu_seconds);
  if (nics.empty()) nics = other.nics;
  operations += other.operations;
  for (size_t i = 0; i < kOpTypes; ++i)
    ops[i].Merge(other.ops[i]);
  index = Sum(index, other.index);
  fabric += other.fabric;
  reclamation += other.reclamation;
  if (memory_node_ops.size() < other.memory_node_ops.size()) {
    memory_node_ops.resize(other.memory_node_ops.size());
  }
  for (size_t node = 0; node < other.memory_node_ops.size(); ++node) {
    memory_node_ops[node] += other.memory_node_ops[node];
  }
  Add(&failed, other.failed);
  timeline.Merge(other.timeline);
  if (other.kill && !kill) {
    kill = other.kill;
  } else if (other.kill) {
    if (kill->killed_at.count() < 0) kill->killed_at = other.kill->killed_at;
    kill->operations += other.kill->operations;
    Add(&kill->failed, other.kill->failed);
    kill->timeline.Merge(other.kill->timeline);
  }
}

Recovery PhaseResult::KillRecovery() const {
  const auto end = nanoseconds(static_cast<int64_t>(std::llround(seconds * 1e9)));
  return MeasureRecovery(timeline.Minus(kill->timeline), kill->killed_at, end,
                         kill->recovery_fraction, kill->recovery_span);
}

nlohmann::json ToJson(const Histogram& histogram) {
  const Histogram::Sparse sparse = histogram.ToSparse();
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& [bucket, count] : sparse.buckets)
    buckets.push_back({bucket, count});
  return {{"count", histogram.count()},
          {"min_ns", histogram.min()},
          {"mean_ns", histogram.mean()},
          {"p50_ns", histogram.Percentile(50)},
          {"p90_ns", histogram.Percentile(90)},
          {"p99_ns", histogram.Percentile(99)},
          {"p999_ns", histogram.Percentile(99.9)},
          {"max_ns", histogram.max()},
          {"sum_ns", sparse.sum},
          {"buckets", std::move(buckets)}};
}

nlohmann::json ToJson(const OpCounters& counters) {
  return CountersToJson(counters, counters::kOpCounterFields);
}

nlohmann::json ToJson(const ReclamationStats& stats) {
  return CountersToJson(stats, counters::kReclamationFields);
}

nlohmann::json ToJson(const PoolUsage& usage) {
  nlohmann::json json = CountersToJson(usage, counters::kPoolUsageFields);
  json["memory_node"] = usage.memory_node;
  return json;
}

namespace {

nlohmann::json ToJson(const Stats& stats) {
  return CountersToJson(stats, counters::kStatsFields);
}

// Reads the fields CountersToJson wrote; nlohmann's at() throws on a
// missing one, which PhaseFromJson turns into InvalidArgument.
template <typename T, typename Fields>
T CountersFromJson(const nlohmann::json& json, Fields fields) {
  T counters;
  fields(counters, counters,
         [&json](uint64_t& x, uint64_t&, const char* name) { x = json.at(name).get<uint64_t>(); });
  return counters;
}

StatusOr<Histogram> HistogramFromJson(const nlohmann::json& j) {
  Histogram::Sparse sparse;
  sparse.min = j.at("min_ns");
  sparse.max = j.at("max_ns");
  sparse.sum = j.at("sum_ns");
  for (const auto& pair : j.at("buckets")) {
    sparse.buckets.emplace_back(pair.at(0).get<uint32_t>(), pair.at(1).get<uint64_t>());
  }
  Histogram histogram;
  DMIDX_RETURN_IF_ERROR(histogram.Add(sparse));
  if (histogram.count() != j.at("count").get<uint64_t>()) {
    return Status::InvalidArgument("histogram buckets do not add up to its count");
  }
  return histogram;
}

nlohmann::json KillJson(const PhaseResult& phase) {
  const KillResult& kill = *phase.kill;
  FailedByCode survivors_failed = phase.failed;
  for (size_t code = 0; code < kStatusCodes; ++code)
    survivors_failed[code] -= std::min(survivors_failed[code], kill.failed[code]);
  const Recovery recovery = phase.KillRecovery();
  return {
      {"compute_node", kill.compute_node},
      {"at_ns", kill.at.count()},
      {"killed_at_ns",
       kill.killed_at.count() < 0 ? nlohmann::json() : nlohmann::json(kill.killed_at.count())},
      {"killed",
       {{"operations", kill.operations},
        {"failed", FailedJson(kill.failed)},
        {"timeline_interval_ns", kill.timeline.interval.count()},
        {"timeline", TimelineJson(kill.timeline)}}},
      {"survivors",
       {{"operations", phase.operations - std::min(phase.operations, kill.operations)},
        {"failed", FailedJson(survivors_failed)}}},
      {"recovery",
       {{"fraction", recovery.fraction},
        {"span_ns", recovery.span.count()},
        {"measurable", recovery.measurable},
        {"baseline_ops_per_second", recovery.baseline_ops_per_second},
        {"recovered", recovery.recovered},
        {"time_ns", recovery.recovered ? nlohmann::json(recovery.time.count()) : nlohmann::json()},
        {"lowest_fraction", recovery.lowest_fraction}}},
  };
}

StatusOr<KillResult> KillFromJson(const nlohmann::json& json) {
  KillResult kill;
  kill.compute_node = json.at("compute_node");
  kill.at = nanoseconds(json.at("at_ns").get<int64_t>());
  if (!json.at("killed_at_ns").is_null()) {
    kill.killed_at = nanoseconds(json.at("killed_at_ns").get<int64_t>());
  }
  kill.recovery_fraction = json.at("recovery").at("fraction");
  kill.recovery_span = nanoseconds(json.at("recovery").at("span_ns").get<int64_t>());
  const nlohmann::json& killed = json.at("killed");
  kill.operations = killed.at("operations");
  kill.failed = FailedFromJson(killed.at("failed"));
  DMIDX_ASSIGN_OR_RETURN(
      kill.timeline,
      TimelineFromJson(killed.at("timeline"),
                       nanoseconds(killed.at("timeline_interval_ns").get<int64_t>())));
  return kill;
}

}  // namespace

nlohmann::json ToJson(const PhaseResult& phase) {
  nlohmann::json ops = nlohmann::json::object();
  for (size_t i = 0; i < kOpTypes; ++i) {
    const OpResult& op = phase.ops[i];
    if (op.operations == 0) continue;
    ops[OpTypeName(static_cast<OpType>(i))] = {{"operations", op.operations},
                                               {"not_found", op.not_found},
                                               {"missing_loaded", op.missing_loaded},
                                               {"scan_items", op.scan_items},
                                               {"latency", ToJson(op.latency)}};
  }
  nlohmann::json index = nlohmann::json::object();
  for (size_t kind = 0; kind < kIndexOpKinds; ++kind) {
    if (phase.index.by_op[kind].operations == 0) continue;
    index[IndexOpName(static_cast<IndexOp>(kind))] = ToJson(phase.index.by_op[kind]);
  }
  nlohmann::json nics = nlohmann::json::array();
  for (const NicLoad& nic : phase.nics) {
    nics.push_back({{"name", nic.name},
                    {"engine", nic.engine},
                    {"link_in", nic.link_in},
                    {"link_out", nic.link_out}});
  }
  nlohmann::json json = {{"phase", phase.name},
                         {"seconds", phase.seconds},
                         {"wall_seconds", phase.wall_seconds},
                         {"cpu_seconds", phase.cpu_seconds},
                         {"nics", std::move(nics)},
                         {"operations", phase.operations},
                         {"mops", phase.Mops()},
                         {"ops", std::move(ops)},
                         {"latency", ToJson(phase.AllLatencies())},
                         {"index", std::move(index)},
                         {"longest_lock_wait_since_open_ns", phase.index.longest_lock_wait_ns},
                         {"fabric", ToJson(phase.fabric)},
                         {"reclamation", ToJson(phase.reclamation)},
                         {"memory_node_ops", phase.memory_node_ops},
                         {"busiest_memory_node_share", phase.BusiestMemoryNodeShare()},
                         {"failed", FailedJson(phase.failed)},
                         {"timeline_interval_ns", phase.timeline.interval.count()},
                         {"timeline", TimelineJson(phase.timeline)}};
  if (phase.kill) json["kill"] = KillJson(phase);
  return json;
}

StatusOr<PhaseResult> PhaseFromJson(const nlohmann::json& json) {
  try {
    PhaseResult phase;
    phase.name = json.at("phase");
    phase.seconds = json.at("seconds");
    phase.wall_seconds = json.value("wall_seconds", 0.0);
    phase.cpu_seconds = json.value("cpu_seconds", 0.0);
    if (json.contains("nics")) {
      for (const auto& nic : json.at("nics")) {
        phase.nics.push_back(
            {nic.at("name"), nic.at("engine"), nic.at("link_in"), nic.at("link_out")});
      }
    }
    phase.operations = json.at("operations");
    for (const auto& [name, value] : json.at("ops").items()) {
      const std::optional<OpType> op = ParseOpType(name);
      if (!op) return Status::InvalidArgument("unknown operation '" + name + "' in a result");
      OpResult& result = phase[*op];
      result.operations = value.at("operations");
      result.not_found = value.at("not_found");
      result.missing_loaded = value.at("missing_loaded");
      result.scan_items = value.at("scan_items");
      DMIDX_ASSIGN_OR_RETURN(result.latency, HistogramFromJson(value.at("latency")));
    }
    for (const auto& [name, value] : json.at("index").items()) {
      size_t kind = 0;
      while (kind < kIndexOpKinds && name != IndexOpName(static_cast<IndexOp>(kind)))
        ++kind;
      if (kind == kIndexOpKinds) {
        return Status::InvalidArgument("unknown index operation '" + name + "' in a result");
      }
      phase.index.by_op[kind] = CountersFromJson<OpCounters>(value, counters::kOpCounterFields);
    }
    phase.index.longest_lock_wait_ns = json.at("longest_lock_wait_since_open_ns");
    phase.fabric = CountersFromJson<Stats>(json.at("fabric"), counters::kStatsFields);
    phase.memory_node_ops = json.at("memory_node_ops").get<std::vector<uint64_t>>();
    // Absent from results written before reclamation was counted.
    if (json.contains("reclamation")) {
      phase.reclamation =
          CountersFromJson<ReclamationStats>(json.at("reclamation"), counters::kReclamationFields);
    }
    // Absent from results written before timelines were kept.
    if (json.contains("failed")) phase.failed = FailedFromJson(json.at("failed"));
    if (json.contains("timeline")) {
      DMIDX_ASSIGN_OR_RETURN(
          phase.timeline,
          TimelineFromJson(json.at("timeline"),
                           nanoseconds(json.at("timeline_interval_ns").get<int64_t>())));
    }
    if (json.contains("kill")) {
      DMIDX_ASSIGN_OR_RETURN(phase.kill, KillFromJson(json.at("kill")));
    }
    return phase;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("malformed phase result: ") + e.what());
  }
}

}  // namespace dmidx::bench
