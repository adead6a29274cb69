#include "testing/history.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "testing/model.h"

namespace dmidx::testing {
namespace {

LoggedOp Write(uint64_t key, uint64_t value, uint64_t start, uint64_t end) {
  return {.kind = OpKind::kInsert, .key = key, .value = value, .start = start, .end = end};
}
LoggedOp Erase(uint64_t key, uint64_t start, uint64_t end) {
  return {.kind = OpKind::kDelete, .key = key, .start = start, .end = end};
}
LoggedOp Read(uint64_t key, std::optional<uint64_t> value, uint64_t start, uint64_t end) {
  return {.kind = OpKind::kLookup,
          .code = value ? StatusCode::kOk : StatusCode::kNotFound,
          .key = key,
          .value = value.value_or(0),
          .start = start,
          .end = end};
}
LoggedOp ScanRange(uint64_t from, uint64_t to, std::vector<KeyValue> out, uint64_t start,
                   uint64_t end) {
  return {.kind = OpKind::kScanRange,
          .key = from,
          .value = to,
          .start = start,
          .end = end,
          .scanned = std::move(out)};
}

HistoryReport Check(const std::vector<std::vector<LoggedOp>>& logs) {
  return CheckReads(BuildHistory(logs), logs, /*max_key=*/99);
}

// Key 1 is written 10 over [1, 2] and 20 over [5, 6].
std::vector<LoggedOp> Writer() {
  return {Write(1, 10, 1, 2), Write(1, 20, 5, 6)};
}

TEST(HistoryTest, AcceptsReadsSomeLinearizationExplains) {
  const std::vector<std::vector<LoggedOp>> logs = {
      Writer(),
      {Read(1, std::nullopt, 0, 1),  // before any write ended
       Read(1, 10, 3, 4),            // between the writes
       Read(1, 10, 4, 7),            // overlaps the second write: old value
       Read(1, 20, 4, 7),            // or new
       Read(1, 20, 8, 9),            // after both
       Read(2, std::nullopt, 3, 4)}  // never written
  };
  const HistoryReport report = Check(logs);
  EXPECT_EQ(report.error_count, 0u) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_EQ(report.lookups, 6u);
  EXPECT_EQ(report.ops, 8u);
}

TEST(HistoryTest, RejectsAStaleRead) {
  // 10 was overwritten by 20 (ended at 6) before this read began at 8.
  const HistoryReport report = Check({Writer(), {Read(1, 10, 8, 9)}});
  ASSERT_EQ(report.error_count, 1u);
  EXPECT_NE(report.errors[0].find("followed it"), std::string::npos) << report.errors[0];
}

TEST(HistoryTest, RejectsAReadOfTheFuture) {
  // 20's write started at 5, after this read ended at 4.
  const HistoryReport report = Check({Writer(), {Read(1, 20, 3, 4)}});
  ASSERT_EQ(report.error_count, 1u);
  EXPECT_NE(report.errors[0].find("after the read ended"), std::string::npos) << report.errors[0];
}

TEST(HistoryTest, RejectsValuesNobodyWroteOrWroteElsewhere) {
  EXPECT_EQ(Check({Writer(), {Read(1, 77, 3, 4)}}).error_count, 1u);
  EXPECT_EQ(Check({Writer(), {Read(2, 10, 3, 4)}}).error_count, 1u);
}

TEST(HistoryTest, RejectsAnAbsenceNoDeleteExplains) {
  EXPECT_EQ(Check({Writer(), {Read(1, std::nullopt, 3, 4)}}).error_count, 1u);
  // A delete overlapping or preceding the read explains it.
  EXPECT_EQ(Check({Writer(), {Erase(1, 3, 7), Read(1, std::nullopt, 4, 5)}}).error_count, 0u);
  EXPECT_EQ(Check({Writer(), {Erase(1, 7, 8), Read(1, std::nullopt, 9, 10)}}).error_count, 0u);
  // Not one that a later write certainly followed.
  EXPECT_EQ(Check({{Write(1, 10, 1, 2), Erase(1, 3, 4), Write(1, 20, 5, 6)},
                   {Read(1, std::nullopt, 7, 8)}})
                .error_count,
            1u);
}

TEST(HistoryTest, ChecksTheFinalState) {
  const std::vector<std::vector<LoggedOp>> logs = {Writer(), {Write(1, 30, 5, 7)}};
  const History history = BuildHistory(logs);
  EXPECT_EQ(history.writes(), 3u);
  EXPECT_EQ(history.CheckFinal(1, 20), "");  // the two last writes overlap
  EXPECT_EQ(history.CheckFinal(1, 30), "");
  EXPECT_NE(history.CheckFinal(1, 10), "");
  EXPECT_NE(history.CheckFinal(1, std::nullopt), "");
  EXPECT_EQ(history.CheckFinal(2, std::nullopt), "");
}

TEST(HistoryTest, ScansVouchForEveryKeyOfTheirRange) {
  const std::vector<LoggedOp> writes = {Write(1, 10, 1, 2), Write(3, 30, 1, 2)};
  // Both keys, right values: fine; the absent keys 0, 2 and 4 are fine too.
  HistoryReport report = Check({writes, {ScanRange(0, 4, {{Key(1), 10}, {Key(3), 30}}, 3, 4)}});
  EXPECT_EQ(report.error_count, 0u) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_EQ(report.scans, 1u);
  EXPECT_EQ(report.scanned_keys, 5u);
  // Key 3 missing: present for the whole scan.
  report = Check({writes, {ScanRange(0, 4, {{Key(1), 10}}, 3, 4)}});
  EXPECT_EQ(report.error_count, 1u);
  // Out of order, or outside the range: the shape is wrong.
  EXPECT_EQ(Check({writes, {ScanRange(0, 4, {{Key(3), 30}, {Key(1), 10}}, 3, 4)}}).error_count, 1u);
  EXPECT_EQ(Check({writes, {ScanRange(2, 4, {{Key(1), 10}, {Key(3), 30}}, 3, 4)}}).error_count, 1u);
}

TEST(HistoryTest, KeepsTheFirstErrorsAndCountsAll) {
  std::vector<LoggedOp> reads;
  for (int i = 0; i < 30; ++i)
    reads.push_back(Read(1, 77, 10, 11));
  const std::vector<std::vector<LoggedOp>> logs = {Writer(), reads};
  const HistoryReport report = CheckReads(BuildHistory(logs), logs, 99, /*max_errors=*/5);
  EXPECT_EQ(report.error_count, 30u);
  EXPECT_EQ(report.errors.size(), 5u);
}

}  // namespace
}  // namespace dmidx::testing
