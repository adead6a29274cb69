// The workload specs of dmidx-ycsb: names, validation, the built-in mixes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "bench/workload.h"

namespace dmidx::bench {
namespace {

TEST(OpType, NamesRoundTripAndYcsbNamesParse) {
  for (size_t i = 0; i < kOpTypes; ++i) {
    const auto op = static_cast<OpType>(i);
    EXPECT_EQ(ParseOpType(OpTypeName(op)), op) << OpTypeName(op);
  }
  EXPECT_STREQ(OpTypeName(OpType::kReadModifyWrite), "rmw");
  EXPECT_EQ(ParseOpType("READ"), OpType::kRead);
  EXPECT_EQ(ParseOpType("UPDATE"), OpType::kUpdate);
  EXPECT_EQ(ParseOpType("INSERT"), OpType::kInsert);
  EXPECT_EQ(ParseOpType("SCAN"), OpType::kScan);
  EXPECT_EQ(ParseOpType("READMODIFYWRITE"), OpType::kReadModifyWrite);
  EXPECT_STREQ(OpTypeName(OpType::kDelete), "delete");
  EXPECT_EQ(ParseOpType("DELETE"), OpType::kDelete);
  EXPECT_EQ(ParseOpType("Read"), std::nullopt);
  EXPECT_EQ(ParseOpType(""), std::nullopt);
}

TEST(ZipfianKind, NamesRoundTrip) {
  for (ZipfianKind kind : {ZipfianKind::kYcsb, ZipfianKind::kExact})
    EXPECT_EQ(ParseZipfianKind(ZipfianKindName(kind)), kind);
  EXPECT_STREQ(ZipfianKindName(ZipfianKind::kExact), "exact");
  EXPECT_EQ(ParseZipfianKind("YCSB"), std::nullopt);
}

TEST(Distribution, NamesRoundTrip) {
  for (Distribution distribution : {Distribution::kUniform, Distribution::kZipfian,
                                    Distribution::kLatest, Distribution::kHotspot}) {
    EXPECT_EQ(ParseDistribution(DistributionName(distribution)), distribution);
  }
  EXPECT_STREQ(DistributionName(Distribution::kHotspot), "hotspot");
  EXPECT_EQ(ParseDistribution("exponential"), std::nullopt);
}

WorkloadSpec ReadOnly() {
  WorkloadSpec spec;
  spec.read_proportion = 1;
  return spec;
}

// Expects `spec` to fail Validate() with a message containing `field`.
void ExpectInvalid(const WorkloadSpec& spec, const std::string& field) {
  const Status status = spec.Validate();
  EXPECT_TRUE(status.IsInvalidArgument()) << field << ": " << status.ToString();
  EXPECT_NE(status.message().find(field), std::string_view::npos) << status.ToString();
}

TEST(WorkloadSpec, ProportionsAreNormalizedByTheirTotal) {
  WorkloadSpec spec;
  spec.read_proportion = 3;
  spec.scan_proportion = 1;
  EXPECT_DOUBLE_EQ(spec.TotalProportion(), 4);
  EXPECT_DOUBLE_EQ(spec.Proportion(OpType::kRead), 3);
  EXPECT_DOUBLE_EQ(spec.Proportion(OpType::kScan), 1);
  EXPECT_DOUBLE_EQ(spec.Proportion(OpType::kInsert), 0);
  EXPECT_TRUE(spec.Validate().ok());
}

TEST(WorkloadSpec, ValidateNamesTheBadField) {
  EXPECT_TRUE(ReadOnly().Validate().ok());

  WorkloadSpec spec = ReadOnly();
  spec.update_proportion = -0.1;
  ExpectInvalid(spec, "update_proportion");
  spec = ReadOnly();
  spec.scan_proportion = std::nan("");
  ExpectInvalid(spec, "scan_proportion");
  spec = ReadOnly();
  spec.read_proportion = 0;
  ExpectInvalid(spec, "all 0");
  spec = ReadOnly();
  spec.min_scan_length = 0;
  ExpectInvalid(spec, "min_scan_length");
  spec = ReadOnly();
  spec.min_scan_length = 101;
  spec.max_scan_length = 100;
  ExpectInvalid(spec, "min_scan_length");
  for (double theta : {0.0, -1.0, 1.0, std::numeric_limits<double>::infinity()}) {
    spec = ReadOnly();
    spec.zipfian_constant = theta;
    ExpectInvalid(spec, "zipfian_constant");
  }
  spec = ReadOnly();
  spec.hotspot_data_fraction = 1.5;
  ExpectInvalid(spec, "hotspot_data_fraction");
  spec = ReadOnly();
  spec.hotspot_operation_fraction = -0.5;
  ExpectInvalid(spec, "hotspot_operation_fraction");
  spec = ReadOnly();
  spec.scan_length_distribution = Distribution::kLatest;
  ExpectInvalid(spec, "scan_length_distribution");
  spec = ReadOnly();
  spec.insert_existing_proportion = 1.01;
  ExpectInvalid(spec, "insert_existing_proportion");
  spec = ReadOnly();
  // Counts whose key range (records + twice the operations + 1) or key
  // numbers would wrap, or whose load could never be held.
  spec.record_count = std::numeric_limits<uint64_t>::max() - 10;
  spec.operation_count = 11;
  ExpectInvalid(spec, "record_count");
  spec = ReadOnly();
  spec.record_count = (uint64_t{1} << 48) + 1;
  ExpectInvalid(spec, "at most 2^48");
  spec = ReadOnly();
  spec.operation_count = uint64_t{1} << 63;
  ExpectInvalid(spec, "operation_count");
  spec = ReadOnly();
  spec.record_count = spec.operation_count = uint64_t{1} << 48;
  EXPECT_TRUE(spec.Validate().ok()) << spec.Validate().ToString();
  spec = ReadOnly();
  spec.record_count = 0;
  ExpectInvalid(spec, "record_count");
  spec = ReadOnly();
  spec.insert_start = spec.record_count;  // no record left to read
  ExpectInvalid(spec, "insert_start");
  spec.insert_start = spec.record_count + 1;
  ExpectInvalid(spec, "insert_start");
  spec = ReadOnly();
  spec.insert_start = 10;
  spec.insert_count = spec.record_count - 20;  // a slice: other clients load the rest
  ExpectInvalid(spec, "insert_count");
  ExpectInvalid(spec, "--compute-nodes");
}

TEST(WorkloadSpec, InsertStartAndCountAreYcsbs) {
  WorkloadSpec spec = ReadOnly();
  spec.record_count = 1000;
  spec.insert_start = 300;
  EXPECT_EQ(spec.LoadedRecords(), 700u);
  EXPECT_TRUE(spec.Validate().ok());
  spec.insert_count = 700;  // YCSB's default, recordcount - insertstart
  EXPECT_TRUE(spec.Validate().ok()) << spec.Validate().ToString();
}

TEST(WorkloadSpec, ExpectedNewKeys) {
  WorkloadSpec spec;
  spec.operation_count = 1'000'000;
  spec.read_proportion = 0.95;
  spec.insert_proportion = 0.05;
  // YCSB: (int) (operationcount * insertproportion * 2.0), the proportion
  // as given.
  EXPECT_EQ(spec.YcsbExpectedNewKeys(), 100'000u);
  spec.read_proportion = 1.95;  // not normalized
  EXPECT_EQ(spec.YcsbExpectedNewKeys(), 100'000u);
  spec.insert_proportion = 2;
  spec.operation_count = 1'000'000'000;  // Java's int saturates
  EXPECT_EQ(spec.YcsbExpectedNewKeys(), uint64_t{std::numeric_limits<int32_t>::max()});
  // dmidx's sizing: the normalized share of new inserts, 20% more, + 16.
  spec.operation_count = 1'000'000;
  spec.read_proportion = 0.5;
  spec.insert_proportion = 0.5;
  spec.insert_existing_proportion = 0.5;
  EXPECT_EQ(spec.ExpectedNewKeys(), 300'016u);
}

TEST(WorkloadSpec, BoundaryValuesAreValid) {
  WorkloadSpec spec = ReadOnly();
  spec.zipfian_constant = 1.2;  // theta > 1 is a valid (steeper) zipfian
  spec.hotspot_data_fraction = 0;
  spec.hotspot_operation_fraction = 1;
  spec.insert_existing_proportion = 1;
  spec.min_scan_length = spec.max_scan_length = 7;
  spec.record_count = uint64_t{1} << 48;
  spec.operation_count = uint64_t{1} << 48;
  EXPECT_TRUE(spec.Validate().ok()) << spec.Validate().ToString();
  // Only new inserts need no loaded keys.
  WorkloadSpec inserts;
  inserts.insert_proportion = 1;
  inserts.record_count = 0;
  EXPECT_TRUE(inserts.Validate().ok());
}

struct ExpectedMix {
  const char* name;
  double read, update, insert, scan, rmw;
  Distribution distribution;
};

// YCSB's workloads/workloada..f, the load phase, and Sherman's Table 2.
constexpr ExpectedMix kExpectedMixes[] = {
    {"a", 0.5, 0.5, 0, 0, 0, Distribution::kZipfian},
    {"b", 0.95, 0.05, 0, 0, 0, Distribution::kZipfian},
    {"c", 1, 0, 0, 0, 0, Distribution::kZipfian},
    {"d", 0.95, 0, 0.05, 0, 0, Distribution::kLatest},
    {"e", 0, 0, 0.05, 0.95, 0, Distribution::kZipfian},
    {"f", 0.5, 0, 0, 0, 0.5, Distribution::kZipfian},
    {"load", 0, 0, 1, 0, 0, Distribution::kZipfian},
    {"write-only", 0, 0, 1, 0, 0, Distribution::kZipfian},
    {"write-intensive", 0.5, 0, 0.5, 0, 0, Distribution::kZipfian},
    {"read-intensive", 0.95, 0, 0.05, 0, 0, Distribution::kZipfian},
    {"range-only", 0, 0, 0, 1, 0, Distribution::kZipfian},
    {"range-write", 0, 0, 0.5, 0.5, 0, Distribution::kZipfian},
};

TEST(BuiltinWorkloads, MixesAreYcsbsAndShermansInOrder) {
  const auto builtins = BuiltinWorkloads();
  // Then the churn (below).
  ASSERT_EQ(builtins.size(), std::size(kExpectedMixes) + 1);
  for (size_t i = 0; i < std::size(kExpectedMixes); ++i) {
    const ExpectedMix& expected = kExpectedMixes[i];
    SCOPED_TRACE(expected.name);
    EXPECT_EQ(builtins[i].name, expected.name);
    const WorkloadSpec spec = builtins[i].make();
    EXPECT_EQ(spec.name, expected.name);
    EXPECT_EQ(spec.description, builtins[i].description);
    EXPECT_FALSE(spec.description.empty());
    EXPECT_EQ(spec.description.find('\n'), std::string::npos);
    EXPECT_DOUBLE_EQ(spec.read_proportion, expected.read);
    EXPECT_DOUBLE_EQ(spec.update_proportion, expected.update);
    EXPECT_DOUBLE_EQ(spec.insert_proportion, expected.insert);
    EXPECT_DOUBLE_EQ(spec.scan_proportion, expected.scan);
    EXPECT_DOUBLE_EQ(spec.read_modify_write_proportion, expected.rmw);
    EXPECT_EQ(spec.request_distribution, expected.distribution);
    EXPECT_DOUBLE_EQ(spec.zipfian_constant, 0.99);
    EXPECT_EQ(spec.record_count, 1'000'000u);
    EXPECT_EQ(spec.operation_count, 1'000'000u);
    EXPECT_TRUE(spec.Validate().ok()) << spec.Validate().ToString();
    const bool sherman = i >= 7;
    EXPECT_DOUBLE_EQ(spec.insert_existing_proportion, sherman ? 2.0 / 3 : 0);
    // Sherman's benchmark draws a zipfian over its keys; YCSB's workloads
    // are YCSB's.
    EXPECT_EQ(spec.zipfian, sherman ? ZipfianKind::kExact : ZipfianKind::kYcsb);
    EXPECT_EQ(spec.insert_start, 0u);
    EXPECT_FALSE(spec.insert_count.has_value());
    if (sherman) {
      EXPECT_EQ(spec.min_scan_length, 100u);
      EXPECT_EQ(spec.max_scan_length, 100u);
    }
  }
}

// Issue 27's churn: inserts, updates and deletes in equal shares over the
// loaded keys only (every insert an upsert), uniform; nothing new is
// inserted, so the key set stays fixed.
TEST(BuiltinWorkloads, TheChurnMixesWritesOverTheLoadedKeysOnly) {
  const auto builtins = BuiltinWorkloads();
  EXPECT_EQ(builtins.back().name, "churn");
  const StatusOr<WorkloadSpec> churn = FindWorkload("churn");
  ASSERT_TRUE(churn.ok());
  EXPECT_TRUE(churn->Validate().ok());
  EXPECT_EQ(churn->read_proportion + churn->scan_proportion + churn->read_modify_write_proportion,
            0);
  for (const OpType op : {OpType::kInsert, OpType::kUpdate, OpType::kDelete}) {
    EXPECT_DOUBLE_EQ(churn->Proportion(op) / churn->TotalProportion(), 1.0 / 3);
  }
  EXPECT_DOUBLE_EQ(churn->insert_existing_proportion, 1);
  EXPECT_EQ(churn->request_distribution, Distribution::kUniform);
  // No new keys, only the margin every workload's sizing adds.
  WorkloadSpec reads;
  reads.read_proportion = 1;
  EXPECT_EQ(churn->ExpectedNewKeys(), reads.ExpectedNewKeys());
}

TEST(BuiltinWorkloads, WorkloadEScansOneToAHundredUniformly) {
  const StatusOr<WorkloadSpec> e = FindWorkload("e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->min_scan_length, 1u);
  EXPECT_EQ(e->max_scan_length, 100u);
  EXPECT_EQ(e->scan_length_distribution, Distribution::kUniform);
  EXPECT_FALSE(e->ordered_inserts);  // YCSB E's insertorder is hashed
}

TEST(FindWorkload, FindsEveryBuiltinAndListsThemWhenUnknown) {
  for (const BuiltinWorkload& builtin : BuiltinWorkloads()) {
    const StatusOr<WorkloadSpec> spec = FindWorkload(builtin.name);
    ASSERT_TRUE(spec.ok()) << builtin.name;
    EXPECT_EQ(spec->name, builtin.name);
  }
  const StatusOr<WorkloadSpec> unknown = FindWorkload("g");
  ASSERT_TRUE(unknown.status().IsInvalidArgument());
  const std::string message(unknown.status().message());
  EXPECT_NE(message.find("'g'"), std::string::npos) << message;
  for (const BuiltinWorkload& builtin : BuiltinWorkloads()) {
    EXPECT_NE(message.find(builtin.name), std::string::npos) << message;
  }
  EXPECT_FALSE(FindWorkload("A").ok());
  EXPECT_FALSE(FindWorkload("").ok());
}

}  // namespace
}  // namespace dmidx::bench
