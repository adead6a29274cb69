#include "testing/linearizability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dmidx/keys.h"
#include "testing/history.h"
#include "testing/model.h"
#include "testing/register_search.h"

namespace dmidx::testing {
namespace {

using Logs = std::vector<std::vector<LoggedOp>>;

LoggedOp Put(uint64_t key, uint64_t value, uint64_t start, uint64_t end,
             StatusCode code = StatusCode::kOk) {
  return {.kind = OpKind::kInsert,
          .code = code,
          .key = key,
          .value = value,
          .start = start,
          .end = end};
}
LoggedOp Replace(uint64_t key, uint64_t value, uint64_t start, uint64_t end,
                 StatusCode code = StatusCode::kOk) {
  return {.kind = OpKind::kUpdate,
          .code = code,
          .key = key,
          .value = value,
          .start = start,
          .end = end};
}
LoggedOp Erase(uint64_t key, uint64_t start, uint64_t end, StatusCode code = StatusCode::kOk) {
  return {.kind = OpKind::kDelete, .code = code, .key = key, .start = start, .end = end};
}
LoggedOp Get(uint64_t key, std::optional<uint64_t> value, uint64_t start, uint64_t end) {
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
LoggedOp ScanCount(uint64_t from, uint64_t count, std::vector<KeyValue> out, uint64_t start,
                   uint64_t end) {
  return {.kind = OpKind::kScanCount,
          .key = from,
          .value = count,
          .start = start,
          .end = end,
          .scanned = std::move(out)};
}

LinearizabilityReport Check(const Logs& logs, LinearizabilityOptions options = {}) {
  return CheckLinearizable(logs, options);
}

::testing::AssertionResult Linearizable(const Logs& logs, LinearizabilityOptions options = {}) {
  const LinearizabilityReport report = Check(logs, options);
  if (report.ok && report.errors.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << report.ToString() << "\n"
         << (report.errors.empty() ? "(no error text)" : report.errors[0]);
}

// Not linearizable, and the first error names `key` with `what`.
::testing::AssertionResult Rejected(const Logs& logs, uint64_t key,
                                    const std::string& what = "not linearizable",
                                    LinearizabilityOptions options = {}) {
  const LinearizabilityReport report = Check(logs, options);
  if (report.ok) return ::testing::AssertionFailure() << "accepted: " << report.ToString();
  if (report.errors.empty()) return ::testing::AssertionFailure() << "no error text";
  const std::string prefix = "key " + std::to_string(key) + ": ";
  if (report.errors[0].rfind(prefix, 0) != 0 || report.errors[0].find(what) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "wanted \"" << prefix << "..." << what << "\", got: " << report.errors[0];
  }
  return ::testing::AssertionSuccess() << report.errors[0];
}

// --- Linearizable histories ----------------------------------------------

TEST(LinearizabilityTest, AcceptsSequentialHistories) {
  const Logs logs = {{Get(1, std::nullopt, 1, 2), Replace(1, 5, 3, 4, StatusCode::kNotFound),
                      Erase(1, 5, 6, StatusCode::kNotFound), Put(1, 10, 7, 8), Get(1, 10, 9, 10),
                      Put(1, 11, 11, 12), Replace(1, 12, 13, 14), Get(1, 12, 15, 16),
                      Erase(1, 17, 18), Get(1, std::nullopt, 19, 20), Put(2, 10, 21, 22)}};
  const LinearizabilityReport report = Check(logs);
  EXPECT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_EQ(report.keys, 2u);
  EXPECT_EQ(report.ops, 11u);
  EXPECT_GE(report.states, 11u);
  EXPECT_EQ(report.error_count, 0u);
  EXPECT_NE(report.ToString().find("2 keys, 11 per-key ops"), std::string::npos)
      << report.ToString();
  // Values need not be unique: writing 10 twice is fine.
  EXPECT_TRUE(
      Linearizable({{Put(1, 10, 1, 2), Put(1, 20, 3, 4), Put(1, 10, 5, 6), Get(1, 10, 7, 8)}}));
}

TEST(LinearizabilityTest, AcceptsAReadOfEitherOverlappingWrite) {
  const std::vector<LoggedOp> writes = {Put(1, 10, 1, 10), Put(1, 20, 2, 9)};
  EXPECT_TRUE(Linearizable({writes, {Get(1, 10, 3, 8)}}));
  EXPECT_TRUE(Linearizable({writes, {Get(1, 20, 3, 8)}}));
  EXPECT_TRUE(Linearizable({writes, {Get(1, std::nullopt, 3, 8)}}));  // before both
  // After both: either may be last, but two reads must agree on which.
  EXPECT_TRUE(Linearizable({writes, {Get(1, 10, 11, 12), Get(1, 10, 13, 14)}}));
  EXPECT_TRUE(Linearizable({writes, {Get(1, 20, 11, 12), Get(1, 20, 13, 14)}}));
  EXPECT_TRUE(Linearizable({writes, {Get(1, 20, 3, 8), Get(1, 10, 11, 12)}}));
  EXPECT_TRUE(Rejected({writes, {Get(1, 20, 11, 12), Get(1, 10, 13, 14)}}, 1));
}

TEST(LinearizabilityTest, AcceptsAReadConcurrentWithADeleteSeeingEither) {
  const std::vector<LoggedOp> writes = {Put(4, 10, 1, 2), Erase(4, 3, 6)};
  EXPECT_TRUE(Linearizable({writes, {Get(4, 10, 4, 5)}}));
  EXPECT_TRUE(Linearizable({writes, {Get(4, std::nullopt, 4, 5)}}));
  // Equal ticks overlap: a read starting at the delete's end may still see 10.
  EXPECT_TRUE(Linearizable({writes, {Get(4, 10, 6, 7)}}));
  EXPECT_TRUE(Rejected({writes, {Get(4, 10, 7, 8)}}, 4));
}

TEST(LinearizabilityTest, AcceptsUnknownOutcomesThatDidAndDidNotTakeEffect) {
  const StatusCode unavailable = StatusCode::kUnavailable;
  // Took effect, late: NotFound first, then the value.
  EXPECT_TRUE(Linearizable(
      {{Put(1, 10, 1, 2, unavailable), Get(1, std::nullopt, 3, 4), Get(1, 10, 5, 6)}}));
  // Never took effect.
  EXPECT_TRUE(Linearizable(
      {{Put(1, 10, 1, 2, StatusCode::kDeadlineExceeded), Get(1, std::nullopt, 3, 4)}}));
  // A delete and an update of unknown outcome, each way.
  const std::vector<LoggedOp> present = {Put(2, 10, 1, 2)};
  EXPECT_TRUE(Linearizable(
      {present,
       {Erase(2, 3, 4, StatusCode::kIoError), Get(2, 10, 5, 6), Get(2, std::nullopt, 7, 8)}}));
  EXPECT_TRUE(Linearizable({present, {Erase(2, 3, 4, StatusCode::kIoError), Get(2, 10, 5, 6)}}));
  EXPECT_TRUE(Linearizable(
      {present,
       {Replace(2, 20, 3, 4, StatusCode::kInternal), Get(2, 10, 5, 6), Get(2, 20, 7, 8)}}));
  // An unknown update of an absent key cannot take effect.
  EXPECT_TRUE(Rejected({{Replace(3, 20, 1, 2, unavailable), Get(3, 20, 3, 4)}}, 3));
  // And an unknown outcome takes effect once: 10 cannot come back.
  EXPECT_TRUE(Rejected(
      {{Put(5, 10, 1, 2, unavailable), Get(5, 10, 3, 4), Put(5, 20, 5, 6), Get(5, 10, 7, 8)}}, 5));
  const LinearizabilityReport report = Check({{Put(1, 10, 1, 2, unavailable)}});
  EXPECT_TRUE(report.ok);
  EXPECT_EQ(report.ops, 1u);
}

// An operation whose caller died during it (LoggedOp::pending) has no
// response: a mutation may take effect at any point after its start, even
// after operations that started once the caller was gone, or never; a read
// or scan says nothing, whatever it returned.
LoggedOp Pending(LoggedOp op) {
  op.pending = true;
  return op;
}

TEST(LinearizabilityTest, AcceptsPendingOperationsThatDidAndDidNotTakeEffect) {
  // Whatever the dead call returned, Ok included: took effect late, after
  // a read that started when the caller was long gone.
  for (const StatusCode code :
       {StatusCode::kOk, StatusCode::kUnavailable, StatusCode::kAborted, StatusCode::kDataLoss}) {
    SCOPED_TRACE(StatusCodeName(code));
    EXPECT_TRUE(Linearizable(
        {{Pending(Put(1, 10, 1, 2, code))}, {Get(1, std::nullopt, 5, 6), Get(1, 10, 7, 8)}}));
    // Or never.
    EXPECT_TRUE(Linearizable(
        {{Pending(Put(1, 10, 1, 2, code))}, {Get(1, std::nullopt, 5, 6), Put(1, 20, 7, 8)}}));
  }
  // A pending delete and update, each way.
  const std::vector<LoggedOp> present = {Put(2, 10, 1, 2)};
  EXPECT_TRUE(Linearizable(
      {present, {Pending(Erase(2, 3, 4))}, {Get(2, 10, 5, 6), Get(2, std::nullopt, 7, 8)}}));
  EXPECT_TRUE(Linearizable({present, {Pending(Erase(2, 3, 4))}, {Get(2, 10, 5, 6)}}));
  EXPECT_TRUE(Linearizable({present,
                            {Pending(Replace(2, 20, 3, 4, StatusCode::kNotFound))},
                            {Get(2, 10, 5, 6), Get(2, 20, 7, 8)}}));
  // A pending end that precedes its start is no malformed interval.
  EXPECT_TRUE(Linearizable({{Pending(Put(3, 10, 5, 0))}, {Get(3, 10, 7, 8)}}));
  const LinearizabilityReport report = Check({{Pending(Put(1, 10, 1, 2))}});
  EXPECT_TRUE(report.ok);
  EXPECT_EQ(report.ops, 1u);
}

TEST(LinearizabilityTest, DropsPendingReads) {
  // A pending lookup or scan that "saw" a value never written, or missed a
  // key present throughout, constrains nothing.
  const LoggedOp wrong_lookup = Pending(Get(1, 99, 3, 4));
  const LoggedOp wrong_scan = Pending(ScanRange(0, 5, {{Key(1), 98}}, 3, 4));
  const LoggedOp empty_scan = Pending(ScanCount(0, 4, {}, 3, 4));
  const LinearizabilityReport report =
      Check({{Put(1, 10, 1, 2)}, {wrong_lookup, wrong_scan, empty_scan}, {Get(1, 10, 5, 6)}});
  EXPECT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_EQ(report.ops, 2u);
}

TEST(LinearizabilityTest, RejectsWhatNoPendingOperationExplains) {
  // A pending update of a key absent throughout cannot take effect.
  EXPECT_TRUE(Rejected({{Pending(Replace(3, 20, 1, 2))}, {Get(3, 20, 3, 4)}}, 3));
  // A pending mutation takes effect once, and not before its start.
  EXPECT_TRUE(Rejected({{Put(5, 10, 1, 2), Pending(Put(5, 20, 3, 4))},
                        {Get(5, 20, 5, 6), Get(5, 10, 7, 8), Get(5, 20, 9, 10)}},
                       5));
  EXPECT_TRUE(Rejected({{Get(6, 10, 1, 2)}, {Pending(Put(6, 10, 3, 4))}}, 6));
  // The dead caller's completed operations count in full: its acknowledged
  // insert is there, whatever its pending one did.
  EXPECT_TRUE(
      Rejected({{Put(7, 10, 1, 2), Pending(Put(7, 20, 3, 4))}, {Get(7, std::nullopt, 5, 6)}}, 7));
  // The failure names the pending operation as such.
  const LinearizabilityReport report = Check({{Pending(Replace(3, 20, 1, 2))}, {Get(3, 20, 3, 4)}});
  ASSERT_FALSE(report.errors.empty());
  EXPECT_NE(report.errors[0].find("(pending: its caller died)"), std::string::npos)
      << report.errors[0];
}

TEST(LinearizabilityTest, DropsOperationsThatChangedNothing) {
  // A rejected insert wrote nothing; a failed lookup read nothing.
  LoggedOp failed_lookup = Get(1, 77, 5, 6);
  failed_lookup.code = StatusCode::kUnavailable;
  const Logs logs = {{Put(1, 10, 1, 2), Put(1, 20, 3, 4, StatusCode::kAborted), failed_lookup,
                      Put(1, 30, 7, 8, StatusCode::kDataLoss), Get(1, 10, 9, 10)}};
  const LinearizabilityReport report = Check(logs);
  EXPECT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_EQ(report.ops, 2u);
  EXPECT_TRUE(Rejected({{Put(1, 20, 3, 4, StatusCode::kInvalidArgument), Get(1, 20, 5, 6)}}, 1));
}

TEST(LinearizabilityTest, AcceptsScans) {
  const std::vector<LoggedOp> writes = {Put(1, 10, 1, 2), Put(3, 30, 1, 2), Put(5, 50, 3, 8)};
  // Key 5 is being inserted during the scans: either way.
  EXPECT_TRUE(Linearizable({writes, {ScanRange(0, 9, {{Key(1), 10}, {Key(3), 30}}, 4, 5)}}));
  EXPECT_TRUE(
      Linearizable({writes, {ScanRange(0, 9, {{Key(1), 10}, {Key(3), 30}, {Key(5), 50}}, 4, 5)}}));
  // A count scan that returned `count` pairs vouches up to its last key only.
  EXPECT_TRUE(Linearizable({writes, {ScanCount(0, 1, {{Key(1), 10}}, 9, 10)}}));
  EXPECT_TRUE(Rejected({writes, {ScanCount(0, 2, {{Key(1), 10}}, 9, 10)}}, 3));
  // A short one vouches up to max_key.
  EXPECT_TRUE(Linearizable({writes, {ScanCount(4, 5, {{Key(5), 50}}, 9, 10)}}, {.max_key = 99}));
  EXPECT_TRUE(Rejected({writes, {ScanCount(4, 5, {}, 9, 10)}}, 5));
  // Count 0 vouches for nothing; a range from > to neither.
  EXPECT_TRUE(Linearizable({writes, {ScanCount(0, 0, {}, 9, 10)}}));
  EXPECT_TRUE(Linearizable({writes, {ScanRange(9, 0, {}, 9, 10)}}));
  // One scan contributes a read per key it returned or that some mutation
  // touched: keys 1, 3, 5.
  const LinearizabilityReport report =
      Check({writes, {ScanRange(0, 9, {{Key(1), 10}, {Key(3), 30}}, 4, 5)}});
  EXPECT_EQ(report.keys, 3u);
  EXPECT_EQ(report.ops, 6u);
  // A scan alone returning a key nobody wrote is still wrong.
  EXPECT_TRUE(Rejected({{ScanRange(0, 9, {{Key(7), 70}}, 4, 5)}}, 7));
}

// --- Histories that are not linearizable --------------------------------

TEST(LinearizabilityTest, RejectsAStaleReadAfterACompletedOverwrite) {
  EXPECT_TRUE(Rejected({{Put(7, 10, 1, 2), Put(7, 20, 3, 4)}, {Get(7, 10, 5, 6)}}, 7));
}

TEST(LinearizabilityTest, RejectsAValueNeverWritten) {
  EXPECT_TRUE(Rejected({{Put(7, 10, 1, 2), Put(8, 77, 1, 2)}, {Get(7, 77, 3, 4)}}, 7));
}

TEST(LinearizabilityTest, RejectsAReadOfAWriteThatStartedAfterItReturned) {
  EXPECT_TRUE(Rejected({{Put(7, 10, 5, 6)}, {Get(7, 10, 3, 4)}}, 7));
}

TEST(LinearizabilityTest, RejectsNotFoundWhileCertainlyPresent) {
  EXPECT_TRUE(Rejected({{Put(7, 10, 1, 2)}, {Get(7, std::nullopt, 3, 4)}}, 7));
  EXPECT_TRUE(Rejected({{Put(7, 10, 1, 2)}, {Erase(7, 3, 4, StatusCode::kNotFound)}}, 7));
  EXPECT_TRUE(Rejected({{Put(7, 10, 1, 2)}, {Replace(7, 20, 3, 4, StatusCode::kNotFound)}}, 7));
}

TEST(LinearizabilityTest, RejectsALostUpdateFlippingBack) {
  // 10 and 20 are written once each, concurrently with sequential lookups
  // that see 10, then 20, then 10 again.
  EXPECT_TRUE(Rejected({{Put(2, 10, 1, 100)},
                        {Put(2, 20, 1, 100)},
                        {Get(2, 10, 10, 11), Get(2, 20, 12, 13), Get(2, 10, 14, 15)}},
                       2));
}

TEST(LinearizabilityTest, RejectsAnUpdateOfACertainlyAbsentKey) {
  EXPECT_TRUE(Rejected({{Replace(3, 20, 1, 2)}}, 3));
  EXPECT_TRUE(Rejected({{Put(3, 10, 1, 2), Erase(3, 3, 4), Replace(3, 20, 5, 6)}}, 3));
}

TEST(LinearizabilityTest, RejectsTwoDeletesInSequence) {
  EXPECT_TRUE(Rejected({{Put(3, 10, 1, 2)}, {Erase(3, 3, 4), Erase(3, 5, 6)}}, 3));
  // An insert between them, or overlapping both, explains it.
  EXPECT_TRUE(
      Linearizable({{Put(3, 10, 1, 2), Put(3, 11, 3, 6)}, {Erase(3, 3, 4), Erase(3, 5, 6)}}));
}

TEST(LinearizabilityTest, RejectsAScanMissingAKeyPresentThroughout) {
  const std::vector<LoggedOp> writes = {Put(1, 10, 1, 2), Put(3, 30, 1, 2)};
  EXPECT_TRUE(Rejected({writes, {ScanRange(0, 9, {{Key(1), 10}}, 4, 5)}}, 3));
  EXPECT_TRUE(Rejected({writes, {ScanRange(0, 9, {{Key(1), 10}, {Key(3), 31}}, 4, 5)}}, 3));
}

TEST(LinearizabilityTest, RejectsMalformedScans) {
  const std::vector<LoggedOp> writes = {Put(1, 10, 1, 2), Put(3, 30, 1, 2)};
  EXPECT_TRUE(Rejected({writes, {ScanRange(0, 9, {{Key(3), 30}, {Key(1), 10}}, 4, 5)}}, 0,
                       "not strictly ascending"));
  EXPECT_TRUE(Rejected({writes, {ScanRange(1, 9, {{Key(1), 10}, {Key(1), 10}}, 4, 5)}}, 1,
                       "not strictly ascending"));
  EXPECT_TRUE(Rejected({writes, {ScanRange(2, 9, {{Key(1), 10}, {Key(3), 30}}, 4, 5)}}, 2,
                       "outside [2, 9]"));
  EXPECT_TRUE(Rejected({writes, {ScanCount(0, 1, {{Key(1), 10}, {Key(3), 30}}, 4, 5)}}, 0,
                       "returned 2 pairs"));
  EXPECT_TRUE(Rejected({writes, {ScanRange(0, 9, {{Key(1, 4), 10}}, 4, 5)}}, 0, "4 bytes"));
}

TEST(LinearizabilityTest, RejectsNewThenOldReadsOfAConcurrentWrite) {
  // The classic: while 20 overwrites 10, one read sees 20 and returns, and
  // a later read sees 10.
  const Logs logs = {
      {Put(9, 10, 1, 2), Put(9, 20, 3, 100)}, {Get(9, 20, 10, 11)}, {Get(9, 10, 12, 13)}};
  EXPECT_TRUE(Rejected(logs, 9));
  // Overlapping reads may see them either way round.
  EXPECT_TRUE(Linearizable(
      {{Put(9, 10, 1, 2), Put(9, 20, 3, 100)}, {Get(9, 20, 10, 12)}, {Get(9, 10, 12, 13)}}));
}

TEST(LinearizabilityTest, RejectsRegardlessOfOtherKeys) {
  // Key 1's history is fine, key 2's is not; only key 2 is named.
  const LinearizabilityReport report =
      Check({{Put(1, 10, 1, 2), Get(1, 10, 3, 4), Put(2, 10, 1, 2), Get(2, 11, 3, 4)}});
  EXPECT_FALSE(report.ok);
  ASSERT_EQ(report.error_count, 1u);
  EXPECT_EQ(report.errors[0].rfind("key 2: not linearizable", 0), 0u) << report.errors[0];
}

// The interval checker of history.h judges each read alone: it allows every
// read here, since the writes of 10 and 20 overlap. No one order explains
// 20, then 10, then 20.
TEST(LinearizabilityTest, RejectsWhatTheIntervalCheckerAllows) {
  const Logs logs = {{Put(5, 10, 1, 100)},
                     {Put(5, 20, 2, 100)},
                     {Get(5, 20, 10, 11), Get(5, 10, 12, 13), Get(5, 20, 14, 15)}};
  const HistoryReport intervals = CheckReads(BuildHistory(logs), logs, /*max_key=*/99);
  EXPECT_EQ(intervals.error_count, 0u) << (intervals.errors.empty() ? "" : intervals.errors[0]);
  EXPECT_EQ(intervals.lookups, 3u);
  EXPECT_TRUE(Rejected(logs, 5));

  // So is the new-then-old history.
  const Logs new_then_old = {
      {Put(9, 10, 1, 2), Put(9, 20, 3, 100)}, {Get(9, 20, 10, 11)}, {Get(9, 10, 12, 13)}};
  EXPECT_EQ(CheckReads(BuildHistory(new_then_old), new_then_old, 99).error_count, 0u);
  EXPECT_FALSE(Check(new_then_old).ok);
}

TEST(LinearizabilityTest, ErrorListsTheKeysOperations) {
  const LinearizabilityReport report =
      Check({{Put(7, 0x10, 1, 2), Put(7, 0x20, 3, 4)}, {Get(7, 0x10, 5, 6)}});
  ASSERT_EQ(report.errors.size(), 1u);
  const std::string& error = report.errors[0];
  EXPECT_NE(error.find("[1, 2] Insert 0x10: OK  #1"), std::string::npos) << error;
  EXPECT_NE(error.find("[3, 4] Insert 0x20: OK  #2"), std::string::npos) << error;
  EXPECT_NE(error.find("[5, 6] Lookup: OK 0x10  <-"), std::string::npos) << error;

  // A value nobody wrote is named as such.
  const LinearizabilityReport unwritten = Check({{Put(7, 0x10, 1, 2)}, {Get(7, 0x30, 5, 6)}});
  ASSERT_EQ(unwritten.errors.size(), 1u);
  EXPECT_NE(unwritten.errors[0].find("the op marked <- reads a value no op of the key writes"),
            std::string::npos)
      << unwritten.errors[0];
  EXPECT_NE(unwritten.errors[0].find("[5, 6] Lookup: OK 0x30  <-"), std::string::npos)
      << unwritten.errors[0];

  // A long history: at most 40 operations, around the one that failed.
  std::vector<LoggedOp> log;
  for (uint64_t i = 0; i < 200; ++i)
    log.push_back(Put(1, i, 10 * i + 1, 10 * i + 2));
  log.push_back(Get(1, 3, 10 * 150 + 5, 10 * 150 + 6));  // long overwritten
  const LinearizabilityReport long_report = Check({log});
  ASSERT_FALSE(long_report.ok);
  const std::string& long_error = long_report.errors[0];
  EXPECT_LE(std::count(long_error.begin(), long_error.end(), '\n'), 42) << long_error;
  EXPECT_NE(long_error.find("Lookup: OK 0x3  <-"), std::string::npos) << long_error;
  EXPECT_NE(long_error.find("earlier ops"), std::string::npos) << long_error;
  EXPECT_NE(long_error.find("later ops"), std::string::npos) << long_error;
}

TEST(LinearizabilityTest, KeepsTheFirstTenErrorsAndCountsAll) {
  std::vector<LoggedOp> log;
  for (uint64_t key = 0; key < 15; ++key)
    log.push_back(Get(key, 1, 1, 2));
  const LinearizabilityReport report = Check({log});
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.error_count, 15u);
  EXPECT_EQ(report.errors.size(), 10u);
}

TEST(LinearizabilityTest, ReportsAnExhaustedBudgetAsAnError) {
  // After 50 is certainly written, twelve concurrent writes and twelve
  // concurrent reads of their values, and a NotFound that nothing explains:
  // proving that takes every order of the writes.
  std::vector<LoggedOp> log = {Put(6, 50, 1, 2)};
  for (uint64_t i = 1; i <= 12; ++i) {
    log.push_back(Put(6, i, 10 + i, 1000));
    log.push_back(Get(6, i, 10 + i, 1000));
  }
  log.push_back(Get(6, std::nullopt, 500, 1000));
  const LinearizabilityReport report = Check({log}, {.max_states_per_key = 1000});
  EXPECT_FALSE(report.ok);
  EXPECT_TRUE(
      Rejected({log}, 6, "search budget of 1000 states exceeded", {.max_states_per_key = 1000}));
  EXPECT_EQ(report.states, 1001u);
  // With room, the search proves it.
  EXPECT_TRUE(Rejected({log}, 6, "not linearizable"));
  // Without the impossible read, the first orders tried succeed.
  log.pop_back();
  EXPECT_TRUE(Linearizable({log}, {.max_states_per_key = 1000}));
}

// --- Random histories -----------------------------------------------------

struct RandomShape {
  int contexts = 18;
  int ops_per_context = 300;
  uint64_t keys = 64;
  uint64_t values = 1'000'000;  // written values are 1 + rng() % values
  uint64_t max_duration = 20;   // ticks
};

// A history linearizable by construction: every context runs its operations
// one after another over random intervals; each operation takes effect at a
// random tick of its interval, and the results come from applying them to a
// std::map in the order of those ticks.
Logs RandomHistory(uint64_t seed, const RandomShape& shape) {
  std::mt19937_64 rng(seed);
  struct Planned {
    uint64_t point, tiebreak;
    int context;
    LoggedOp op;
    bool unknown_applies;
  };
  std::vector<Planned> plan;
  for (int context = 0; context < shape.contexts; ++context) {
    uint64_t now = 1;
    for (int i = 0; i < shape.ops_per_context; ++i) {
      LoggedOp op;
      op.start = now + rng() % 3;
      op.end = op.start + rng() % shape.max_duration;
      now = op.end + 1;
      op.key = rng() % shape.keys;
      const uint64_t dice = rng() % 100;
      op.kind = dice < 30   ? OpKind::kInsert
                : dice < 45 ? OpKind::kUpdate
                : dice < 58 ? OpKind::kDelete
                : dice < 92 ? OpKind::kLookup
                : dice < 96 ? OpKind::kScanRange
                            : OpKind::kScanCount;
      if (op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate) {
        op.value = 1 + rng() % shape.values;
      } else if (op.kind == OpKind::kScanRange) {
        op.value = op.key + rng() % 8;
      } else if (op.kind == OpKind::kScanCount) {
        op.value = rng() % 6;
      }
      const bool mutation =
          op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate || op.kind == OpKind::kDelete;
      // 4% of mutations have an unknown outcome, half of which apply.
      op.code = mutation && rng() % 25 == 0 ? StatusCode::kUnavailable : StatusCode::kOk;
      const bool applies = rng() % 2 == 0;
      const uint64_t point = op.start + rng() % (op.end - op.start + 1);
      plan.push_back({point, rng(), context, std::move(op), applies});
    }
  }
  std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    return a.point != b.point ? a.point < b.point : a.tiebreak < b.tiebreak;
  });
  Model model;
  Logs logs(shape.contexts);
  for (Planned& planned : plan) {
    LoggedOp& op = planned.op;
    const bool present = model.contains(op.key);
    const bool unknown = op.code == StatusCode::kUnavailable;
    switch (op.kind) {
      case OpKind::kInsert:
        if (!unknown || planned.unknown_applies) model[op.key] = op.value;
        break;
      case OpKind::kUpdate:
      case OpKind::kDelete:
        if (!present) {
          if (!unknown) op.code = StatusCode::kNotFound;
        } else if (!unknown || planned.unknown_applies) {
          if (op.kind == OpKind::kUpdate) {
            model[op.key] = op.value;
          } else {
            model.erase(op.key);
          }
        }
        break;
      case OpKind::kLookup:
        op.code = present ? StatusCode::kOk : StatusCode::kNotFound;
        op.value = present ? model[op.key] : 0;
        break;
      case OpKind::kScanRange:
        op.scanned = ModelRange(model, op.key, op.value);
        break;
      case OpKind::kScanCount:
        op.scanned = ModelCount(model, op.key, op.value);
        break;
    }
    logs[planned.context].push_back(std::move(op));
  }
  return logs;
}

bool IsMutation(const LoggedOp& op) {
  return op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate || op.kind == OpKind::kDelete;
}

// A value `read` (a Lookup) returns in no linearization, though its key was
// written with it: every write of it either began after the read ended, or
// was followed by an Ok mutation that ended before the read began. Values
// need not be unique.
std::optional<uint64_t> StaleValue(const Logs& logs, const LoggedOp& read) {
  std::vector<const LoggedOp*> ops;  // of the read's key
  for (const auto& log : logs) {
    for (const LoggedOp& op : log) {
      if (IsMutation(op) && op.key == read.key) ops.push_back(&op);
    }
  }
  const auto overwritten = [&](const LoggedOp& write) {
    if (write.start > read.end) return true;
    if (write.code != StatusCode::kOk) return false;  // unknown outcome: any time after its call
    return std::any_of(ops.begin(), ops.end(), [&](const LoggedOp* m) {
      return m->code == StatusCode::kOk && write.end < m->start && m->end < read.start;
    });
  };
  for (const LoggedOp* candidate : ops) {
    if (candidate->kind == OpKind::kDelete || candidate->value == read.value) continue;
    const bool stale = std::all_of(ops.begin(), ops.end(), [&](const LoggedOp* write) {
      return write->kind == OpKind::kDelete || write->value != candidate->value ||
             overwritten(*write);
    });
    if (stale) return candidate->value;
  }
  return std::nullopt;
}

enum class Corruption { kUnwrittenInLookup, kUnwrittenInScan, kStaleLookup };

// Makes one read of `logs` return what it cannot have; returns its key.
std::optional<uint64_t> CorruptOneRead(Logs& logs, uint64_t seed, Corruption corruption) {
  std::vector<LoggedOp*> lookups;
  std::vector<KeyValue*> scanned;
  for (auto& log : logs) {
    for (LoggedOp& op : log) {
      if (op.kind == OpKind::kLookup && op.code == StatusCode::kOk) lookups.push_back(&op);
      for (KeyValue& pair : op.scanned)
        scanned.push_back(&pair);
    }
  }
  std::mt19937_64 rng(seed);
  std::shuffle(lookups.begin(), lookups.end(), rng);
  constexpr uint64_t kNeverWritten = uint64_t{1} << 62;
  switch (corruption) {
    case Corruption::kUnwrittenInLookup:
      if (lookups.empty()) return std::nullopt;
      lookups[0]->value = kNeverWritten;
      return lookups[0]->key;
    case Corruption::kUnwrittenInScan: {
      if (scanned.empty()) return std::nullopt;
      KeyValue& pair = *scanned[rng() % scanned.size()];
      pair.value = kNeverWritten;
      return DecodeUint64Key(pair.key);
    }
    case Corruption::kStaleLookup:
      for (LoggedOp* lookup : lookups) {
        if (const std::optional<uint64_t> value = StaleValue(logs, *lookup)) {
          lookup->value = *value;
          return lookup->key;
        }
      }
      return std::nullopt;
  }
  return std::nullopt;
}

double Milliseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

void CheckRandomHistories(const RandomShape& shape, uint64_t first_seed, int seeds) {
  double clean_ms = 0, corrupt_ms = 0;
  size_t ops = 0, states = 0;
  for (uint64_t seed = first_seed; seed < first_seed + seeds; ++seed) {
    Logs logs = RandomHistory(seed, shape);
    const auto t0 = std::chrono::steady_clock::now();
    const LinearizabilityReport clean = Check(logs);
    const auto t1 = std::chrono::steady_clock::now();
    clean_ms += Milliseconds(t1 - t0);
    ops += clean.ops;
    states += clean.states;
    ASSERT_TRUE(clean.ok) << "seed " << seed << ": " << clean.ToString() << "\n"
                          << (clean.errors.empty() ? "" : clean.errors[0]);
    ASSERT_GT(clean.ops, 0u);

    const auto corruption = static_cast<Corruption>(seed % 3);
    const std::optional<uint64_t> key = CorruptOneRead(logs, seed, corruption);
    ASSERT_TRUE(key.has_value()) << "seed " << seed << ": no read to corrupt that way";
    const auto t2 = std::chrono::steady_clock::now();
    const LinearizabilityReport corrupt = Check(logs);
    corrupt_ms += Milliseconds(std::chrono::steady_clock::now() - t2);
    ASSERT_FALSE(corrupt.ok) << "seed " << seed << ": corrupted read of key " << *key
                             << " accepted";
    ASSERT_EQ(corrupt.error_count, 1u) << "seed " << seed << ": " << corrupt.errors[0];
    EXPECT_EQ(corrupt.errors[0].rfind("key " + std::to_string(*key) + ": not linearizable", 0), 0u)
        << "seed " << seed << ": " << corrupt.errors[0];
  }
  std::printf(
      "%d histories of %d x %d ops over %llu keys: %zu per-key ops, %zu states; "
      "%.2f ms per clean check, %.2f ms per corrupted one\n",
      seeds, shape.contexts, shape.ops_per_context, static_cast<unsigned long long>(shape.keys),
      ops, states, clean_ms / seeds, corrupt_ms / seeds);
}

// 3 clients x 6 coroutines x 300 operations over 64 keys.
TEST(LinearizabilityTest, RandomHistoriesOfTheConcurrencySuitesShape) {
  CheckRandomHistories({}, 1, 12);
}

// Few keys, few values, long operations: many overlapping operations per key,
// and values repeat.
TEST(LinearizabilityTest, RandomContendedHistories) {
  CheckRandomHistories(
      {.contexts = 8, .ops_per_context = 60, .keys = 3, .values = 4, .max_duration = 12}, 100, 200);
}

// --- The search against brute force ----------------------------------------

struct Value {
  bool present = false;
  uint64_t value = 0;
};

// Whether `state` allows `op`; applies it.
bool Apply(const RegisterOp& op, Value* state) {
  switch (op.effect) {
    case RegisterEffect::kPut:
      *state = {true, op.value};
      return true;
    case RegisterEffect::kReplace:
      if (!state->present) return false;
      *state = {true, op.value};
      return true;
    case RegisterEffect::kRemove:
      if (!state->present) return false;
      *state = {};
      return true;
    case RegisterEffect::kReadValue:
      return state->present && state->value == op.value;
    case RegisterEffect::kReadAbsent:
      return !state->present;
  }
  return false;
}

// Whether some order of the operations not in `used` extends a run that
// left the register in `state`: tries every order that respects real time,
// with operations of unknown outcome in it or left out.
bool BruteForce(const std::vector<RegisterOp>& ops, uint32_t used, Value state) {
  bool done = true;
  for (uint32_t i = 0; i < ops.size(); ++i) {
    if (!(used >> i & 1) && ops[i].ret != kUnknownReturn) done = false;
  }
  if (done) return true;
  for (uint32_t i = 0; i < ops.size(); ++i) {
    if (used >> i & 1) continue;
    bool ready = true;  // everything that precedes it is in the run
    for (uint32_t j = 0; j < ops.size(); ++j) {
      if (!(used >> j & 1) && ops[j].ret < ops[i].call) ready = false;
    }
    Value after = state;
    if (ready && Apply(ops[i], &after) && BruteForce(ops, used | 1u << i, after)) return true;
  }
  return false;
}

TEST(RegisterSearchTest, AgreesWithBruteForceOnSmallHistories) {
  std::mt19937_64 rng(5);
  int linearizable = 0, not_linearizable = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<RegisterOp> ops(1 + rng() % 8);
    for (RegisterOp& op : ops) {
      op.effect = static_cast<RegisterEffect>(rng() % 5);
      op.value = 1 + rng() % 3;
      op.call = rng() % 10;
      op.ret = rng() % 3 == 0 && op.effect <= RegisterEffect::kRemove ? kUnknownReturn
                                                                      : op.call + rng() % 5;
    }
    std::sort(ops.begin(), ops.end(),
              [](const RegisterOp& a, const RegisterOp& b) { return a.call < b.call; });
    const bool expected = BruteForce(ops, 0, Value{});
    (expected ? linearizable : not_linearizable)++;
    for (const bool prune : {true, false}) {
      const RegisterSearchResult result = SearchRegister(ops, 1'000'000, prune);
      ASSERT_EQ(result.outcome == RegisterSearchResult::Outcome::kLinearizable, expected)
          << "round " << round << (prune ? " pruned" : " plain");
      if (!expected && !result.unwritten_value) {
        // The prefix is a valid run.
        Value state;
        for (const uint32_t op : result.longest_prefix)
          ASSERT_TRUE(Apply(ops[op], &state)) << "round " << round;
        ASSERT_GE(result.blocked, 0) << "round " << round;
      }
    }
  }
  // Both answers came up often.
  EXPECT_GT(linearizable, 4000);
  EXPECT_GT(not_linearizable, 4000);
}

}  // namespace
}  // namespace dmidx::testing
