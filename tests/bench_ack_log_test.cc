// dmidx-ycsb --ack-log (bench/ack_log.h): the unique values, the log's
// lines, and the final check that finds a lost acknowledged write.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "bench/ack_log.h"

namespace dmidx::bench {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/ack_log_test_" + std::to_string(getpid()) + "_" + name;
}

AckRecord Write(std::string key, uint64_t value, int64_t start, int64_t end, char kind = 'W') {
  return AckRecord{kind, std::move(key), value, start, end};
}

TEST(AckLogTest, UniqueValuesNameTheirWrite) {
  const uint64_t value = UniqueWriteValue(2, 70000, 123456789);
  const std::optional<WriteOrigin> origin = OriginOf(value);
  ASSERT_TRUE(origin.has_value());
  EXPECT_EQ(origin->phase, 2u);
  EXPECT_EQ(origin->context, 70000u);
  EXPECT_EQ(origin->ordinal, 123456789u);
  EXPECT_NE(UniqueWriteValue(2, 1, 5), UniqueWriteValue(2, 2, 5));
  EXPECT_NE(UniqueWriteValue(1, 1, 5), UniqueWriteValue(2, 1, 5));
  // A bulk load's value (a key number) is no write's.
  EXPECT_FALSE(OriginOf(1999).has_value());
}

TEST(AckLogTest, RecordsRoundTripThroughTheFile) {
  const std::string path = TempPath("roundtrip");
  {
    StatusOr<std::unique_ptr<AckLogWriter>> log = AckLogWriter::Open(path);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    ASSERT_TRUE((*log)->Append(Write(std::string("\0\x01\xff k", 5), 42, 10, 20)).ok());
    ASSERT_TRUE((*log)->Append(Write("b", 0, 30, 40, 'D')).ok());
  }
  StatusOr<std::vector<AckRecord>> records = ReadAckLog(path);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].key, std::string("\0\x01\xff k", 5));
  EXPECT_EQ((*records)[0].value, 42u);
  EXPECT_EQ((*records)[0].start_ns, 10);
  EXPECT_EQ((*records)[0].end_ns, 20);
  EXPECT_EQ((*records)[1].kind, 'D');
  std::remove(path.c_str());
}

TEST(AckLogTest, BadFilesAreNamed) {
  EXPECT_EQ(AckLogWriter::Open("/nonexistent-dir/x").status().code(), StatusCode::kIoError);
  EXPECT_EQ(ReadAckLog(TempPath("absent")).status().code(), StatusCode::kNotFound);
  const std::string path = TempPath("malformed");
  std::ofstream(path) << "W 6b 1 2 3\nW 6 1 2 3\n";
  const Status bad = ReadAckLog(path).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(path + ":2:"), std::string_view::npos) << bad.ToString();
  std::remove(path.c_str());
}

// Two compute nodes of 2 contexts each: contexts 0-1 are node 0's.
TEST(AckCheckTest, TheLastOrAConcurrentWritePassesAnOlderOneOrNoneFails) {
  AckCheck check(2);
  const uint64_t first = UniqueWriteValue(2, 0, 1);
  const uint64_t second = UniqueWriteValue(2, 2, 1);
  const uint64_t overlapping = UniqueWriteValue(2, 1, 3);
  check.Add(Write("k", first, 100, 200));
  check.Add(Write("k", second, 300, 400));
  check.Add(Write("k", overlapping, 350, 500));
  EXPECT_EQ(check.Keys(), std::vector<std::string>{"k"});
  const std::set<uint32_t> none;
  EXPECT_EQ(check.Verify("k", second, none), "");
  EXPECT_EQ(check.Verify("k", overlapping, none), "");
  const std::string older = check.Verify("k", first, none);
  EXPECT_NE(older.find("overwritten by a later acknowledged change"), std::string::npos) << older;
  EXPECT_NE(check.Verify("k", std::nullopt, none).find("not found"), std::string::npos);
  EXPECT_NE(check.Verify("k", 7, none).find("no logged write wrote"), std::string::npos);
}

TEST(AckCheckTest, APendingWriteOfADeadNodePassesOnlyPastItsContextsLastLine) {
  AckCheck check(2);
  check.Add(Write("k", UniqueWriteValue(2, 0, 5), 100, 200));
  check.Add(Write("j", UniqueWriteValue(2, 2, 9), 100, 200));
  const uint64_t pending = UniqueWriteValue(2, 0, 6);   // node 0, after its last line
  const uint64_t unlogged = UniqueWriteValue(2, 0, 4);  // node 0, before it: never acked
  const uint64_t living = UniqueWriteValue(2, 2, 10);   // node 1, which lives
  EXPECT_EQ(check.Verify("k", pending, {0}), "");
  EXPECT_NE(check.Verify("k", pending, {}), "") << "no node died, so nothing was pending";
  EXPECT_NE(check.Verify("k", unlogged, {0}), "");
  EXPECT_NE(check.Verify("k", living, {0}), "");
}

TEST(AckCheckTest, DeletesAndFailedWrites) {
  AckCheck check(1);
  check.Add(Write("k", UniqueWriteValue(2, 0, 1), 100, 200));
  check.Add(Write("k", 0, 300, 400, 'D'));
  check.Add(Write("f", UniqueWriteValue(2, 0, 3), 500, 600, 'F'));
  EXPECT_EQ(check.Verify("k", std::nullopt, {}), "");
  EXPECT_NE(check.Verify("k", UniqueWriteValue(2, 0, 1), {}), "");
  // A failed write alone acknowledges nothing: its key is not checked.
  EXPECT_EQ(check.Keys(), std::vector<std::string>{"k"});
}

}  // namespace
}  // namespace dmidx::bench
