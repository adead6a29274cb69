// What a benchmark run does: the operation mix, how keys and scan lengths
// are chosen, how many records and operations. The fields mirror YCSB's core
// workload properties (see properties.h for the property names); the
// built-in mixes are YCSB's core workloads and Sherman's (Table 2).
#ifndef DMIDX_BENCH_WORKLOAD_H_
#define DMIDX_BENCH_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "dmidx/status.h"

namespace dmidx::bench {

enum class OpType : uint8_t { kRead, kUpdate, kInsert, kScan, kReadModifyWrite, kDelete };
inline constexpr size_t kOpTypes = 6;
// "read", "update", "insert", "scan", "rmw", "delete".
const char* OpTypeName(OpType op);
// The inverse of OpTypeName; also accepts YCSB's upper-case names ("READ",
// "UPDATE", "INSERT", "SCAN", "READMODIFYWRITE").
std::optional<OpType> ParseOpType(std::string_view name);

enum class Distribution : uint8_t { kUniform, kZipfian, kLatest, kHotspot };
// "uniform", "zipfian", "latest", "hotspot".
const char* DistributionName(Distribution distribution);
std::optional<Distribution> ParseDistribution(std::string_view name);

struct WorkloadSpec {
  // "a" ... "f", "load", one of Sherman's names, the stem of the last
  // property file a mix came from ("workloada"), or "custom".
  std::string name = "custom";
  std::string description;
  // Keys loaded before the run (YCSB recordcount); >= 1 unless every
  // operation inserts a new key.
  uint64_t record_count = 1'000'000;
  // Operations of the run phase, over all contexts (YCSB operationcount).
  uint64_t operation_count = 1'000'000;
  // Operation mix; need not sum to 1 (normalized), must not all be 0.
  double read_proportion = 0;
  double update_proportion = 0;
  double insert_proportion = 0;
  double scan_proportion = 0;
  double read_modify_write_proportion = 0;
  // dmidx's extension (property deleteproportion): deletes of an existing
  // key, chosen like a read. YCSB's core workload has no deletes.
  double delete_proportion = 0;
  // Share of inserts that upsert an existing key (chosen like a read)
  // instead of adding a new one. Sherman's mixes use 2/3 ("insert
  // operations include updating existing keys (about 2/3)"); YCSB's 0.
  double insert_existing_proportion = 0;
  // How reads, updates, scans' start keys and existing-key inserts choose
  // among the keys present.
  Distribution request_distribution = Distribution::kZipfian;
  // Zipfian skew (YCSB zipfianconstant); > 0 and != 1.
  double zipfian_constant = 0.99;
  // Hotspot: this fraction of the keys gets hotspot_operation_fraction of
  // the operations.
  double hotspot_data_fraction = 0.2;
  double hotspot_operation_fraction = 0.8;
  // Scan lengths in [min, max], uniform or zipfian (shorter more likely).
  uint32_t min_scan_length = 1;
  uint32_t max_scan_length = 100;
  Distribution scan_length_distribution = Distribution::kUniform;
  // YCSB insertorder: false = "hashed" (key numbers are hashed into the key
  // space, so inserts spread), true = "ordered".
  bool ordered_inserts = false;
  // YCSB fieldcount/fieldlength: recorded, but every value is 8 bytes.
  uint32_t field_count = 10;
  uint32_t field_length = 100;

  double TotalProportion() const;
  double Proportion(OpType op) const;
  // InvalidArgument naming the field when a value is out of range.
  Status Validate() const;
};

struct BuiltinWorkload {
  std::string_view name;
  std::string_view description;
  WorkloadSpec (*make)();
};
// YCSB's a..f and load, then Sherman's write-only, write-intensive,
// read-intensive, range-only, range-write.
std::span<const BuiltinWorkload> BuiltinWorkloads();
// The built-in workload `name`; InvalidArgument listing the names if none.
StatusOr<WorkloadSpec> FindWorkload(std::string_view name);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_WORKLOAD_H_
