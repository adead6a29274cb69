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

// Which zipfian requestdistribution=zipfian draws (property dmidx.zipfian):
//   kYcsb   YCSB's ScrambledZipfianGenerator: ranks among 10^10 items
//           hashed onto the keys (bench/generators.h).
//   kExact  a zipfian over the keys themselves, each rank hashed to a key:
//           what Sherman's benchmark draws, not YCSB's (its hottest key is
//           about twice as hot at 200,000 keys).
enum class ZipfianKind : uint8_t { kYcsb, kExact };
// "ycsb", "exact".
const char* ZipfianKindName(ZipfianKind kind);
std::optional<ZipfianKind> ParseZipfianKind(std::string_view name);

struct WorkloadSpec {
  // "a" ... "f", "load", one of Sherman's names, the stem of the last
  // property file a mix came from ("workloada"), or "custom".
  std::string name = "custom";
  std::string description;
  // Keys loaded before the run (YCSB recordcount) are numbered
  // insert_start .. record_count - 1; at least one unless every operation
  // inserts a new key. New keys are numbered from record_count on.
  uint64_t record_count = 1'000'000;
  // YCSB insertstart: the first record's key number, <= record_count.
  uint64_t insert_start = 0;
  // YCSB insertcount: the records loaded from insert_start. Unset, or
  // record_count - insert_start, the only count a run can honour: it loads
  // every record its operations may choose (YCSB runs one client per slice
  // of the records for a parallel load; --compute-nodes splits it here).
  std::optional<uint64_t> insert_count;
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
  // Skew of requestdistribution=zipfian (property zipfianconstant, which
  // upstream YCSB does not have: it fixes 0.99); > 0 and != 1. latest and
  // zipfian scan lengths keep YCSB's 0.99.
  double zipfian_constant = 0.99;
  // YCSB's zipfian, or a zipfian over the keys (property dmidx.zipfian).
  ZipfianKind zipfian = ZipfianKind::kYcsb;
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
  // Records the run loads: record_count - insert_start (after Validate()).
  uint64_t LoadedRecords() const { return record_count - insert_start; }
  // New keys the run inserts, on average, plus a margin: what the remote
  // memory and dmidx.zipfian=exact's key range are sized for.
  uint64_t ExpectedNewKeys() const;
  // YCSB's expectednewkeys, which widens its zipfian's key range:
  // (int) (operationcount * insertproportion * 2.0), with the proportion
  // as given (not normalized, upserts not deducted), Java's cast
  // saturating at 2^31 - 1.
  uint64_t YcsbExpectedNewKeys() const;
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
