// Operation traces: what TraceWriter writes, ReadTrace reads back; bad lines
// are reported with their file and line.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/trace.h"
#include "dmidx/keys.h"

namespace dmidx::bench {
namespace {

// A file in the test's temporary directory, removed at the end.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_(::testing::TempDir() + "dmidx_trace_test_" + name) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

  void Write(const std::string& text) const { std::ofstream(path_) << text; }
  std::string Read() const {
    std::ostringstream text;
    text << std::ifstream(path_).rdbuf();
    return text.str();
  }

 private:
  std::string path_;
};

KeyFormat IntegerKeys(uint32_t bytes) {
  return KeyFormat{KeyKind::kInteger, bytes, false};
}
KeyFormat StringKeys(uint32_t bytes) {
  return KeyFormat{KeyKind::kString, bytes, false};
}

std::string StringKey(std::string text, uint32_t bytes) {
  text.resize(bytes, '\0');
  return text;
}

void WriteTrace(const TempFile& file, const KeyFormat& format, const std::vector<TraceOp>& ops) {
  StatusOr<std::unique_ptr<TraceWriter>> writer = TraceWriter::Open(file.path(), format);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (const TraceOp& op : ops) {
    const Status status = (*writer)->Append(op.op, op.key, op.scan_length);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  const Status status = (*writer)->Close();
  ASSERT_TRUE(status.ok()) << status.ToString();
}

std::vector<TraceOp> ReadBack(const TempFile& file, const KeyFormat& format) {
  StatusOr<std::vector<TraceOp>> ops = ReadTrace(file.path(), format);
  EXPECT_TRUE(ops.ok()) << ops.status().ToString();
  return ops.ok() ? *ops : std::vector<TraceOp>();
}

TEST(BenchTraceTest, IntegerKeysRoundTrip) {
  for (uint32_t bytes : {8u, 16u}) {
    SCOPED_TRACE(bytes);
    const KeyFormat format = IntegerKeys(bytes);
    const std::vector<TraceOp> ops = {
        {OpType::kRead, EncodeUint64Key(0, bytes), 0},
        {OpType::kUpdate, EncodeUint64Key(42, bytes), 0},
        {OpType::kInsert, EncodeUint64Key(UINT64_MAX, bytes), 0},
        {OpType::kScan, EncodeUint64Key(1234567890123, bytes), 100},
        {OpType::kReadModifyWrite, EncodeUint64Key(uint64_t{1} << 63, bytes), 0},
        {OpType::kScan, EncodeUint64Key(7, bytes), UINT32_MAX},
    };
    TempFile file("integer");
    WriteTrace(file, format, ops);
    EXPECT_EQ(ReadBack(file, format), ops);
    if (bytes == 8) {
      EXPECT_EQ(file.Read(),
                "read 0\nupdate 42\ninsert 18446744073709551615\nscan 1234567890123 100\n"
                "rmw 9223372036854775808\nscan 7 4294967295\n");
    }
  }
}

TEST(BenchTraceTest, StringKeysRoundTrip) {
  const KeyFormat format = StringKeys(24);
  const std::vector<TraceOp> ops = {
      {OpType::kRead, StringKey("com.gmail/user1", 24), 0},
      {OpType::kUpdate, StringKey("a", 24), 0},
      {OpType::kInsert, StringKey("exactly-twenty-four-byte", 24), 0},
      {OpType::kScan, StringKey("org.example/~!#$%", 24), 5},
      {OpType::kReadModifyWrite, StringKey("net.x/9", 24), 0},
  };
  TempFile file("string");
  WriteTrace(file, format, ops);
  EXPECT_EQ(ReadBack(file, format), ops);
  EXPECT_EQ(file.Read().substr(0, 22), "read com.gmail/user1\nu");
}

TEST(BenchTraceTest, ReadsYcsbNamesCommentsAndBlankLines) {
  TempFile file("ycsb");
  file.Write(
      "# a YCSB-style trace\n"
      "\n"
      "READ 1\n"
      "  UPDATE\t2  \n"
      "INSERT 3\r\n"
      "SCAN 4 10\n"
      "READMODIFYWRITE 5\n"
      "   \n"
      "rmw 6");  // no final newline
  const std::vector<TraceOp> expected = {
      {OpType::kRead, EncodeUint64Key(1), 0},
      {OpType::kUpdate, EncodeUint64Key(2), 0},
      {OpType::kInsert, EncodeUint64Key(3), 0},
      {OpType::kScan, EncodeUint64Key(4), 10},
      {OpType::kReadModifyWrite, EncodeUint64Key(5), 0},
      {OpType::kReadModifyWrite, EncodeUint64Key(6), 0},
  };
  EXPECT_EQ(ReadBack(file, IntegerKeys(8)), expected);
}

struct BadLine {
  KeyFormat format;
  std::string line;
  std::string expected_message;  // after "PATH:3: "
};

TEST(BenchTraceTest, BadLinesNameTheFileAndLine) {
  const std::vector<BadLine> cases = {
      {IntegerKeys(8), "fetch 1", "unknown operation 'fetch'"},
      {IntegerKeys(8), "Read 1", "unknown operation 'Read'"},
      {IntegerKeys(8), "read", "missing key"},
      {IntegerKeys(8), "read 12x", "bad integer key '12x'"},
      {IntegerKeys(8), "read -1", "bad integer key '-1'"},
      {IntegerKeys(8), "read 18446744073709551616", "bad integer key"},
      {IntegerKeys(8), "scan 1", "scan without a length"},
      {IntegerKeys(8), "scan 1 0", "scan length 0"},
      {IntegerKeys(8), "scan 1 ten", "bad scan length 'ten'"},
      {IntegerKeys(8), "scan 1 4294967296", "bad scan length"},
      {IntegerKeys(8), "scan 1 10 20", "extra field '20'"},
      {IntegerKeys(8), "read 1 10", "extra field '10'"},
      {StringKeys(8), "read abcdefghi", "key 'abcdefghi' is longer than the format's 8 bytes"},
      {StringKeys(8), "read ab\x01", "not printable"},
  };
  for (const BadLine& bad : cases) {
    SCOPED_TRACE(bad.line);
    TempFile file("bad");
    file.Write("# comment\nread 1\n" + bad.line + "\nread 2\n");
    StatusOr<std::vector<TraceOp>> ops = ReadTrace(file.path(), bad.format);
    ASSERT_FALSE(ops.ok());
    EXPECT_TRUE(ops.status().IsInvalidArgument()) << ops.status().ToString();
    const std::string prefix = file.path() + ":3: ";
    EXPECT_EQ(std::string(ops.status().message()).substr(0, prefix.size()), prefix)
        << ops.status().ToString();
    EXPECT_NE(ops.status().message().find(bad.expected_message), std::string_view::npos)
        << ops.status().ToString();
  }
}

TEST(BenchTraceTest, MissingFileIsNamed) {
  const std::string path = ::testing::TempDir() + "dmidx_trace_test_does_not_exist";
  StatusOr<std::vector<TraceOp>> ops = ReadTrace(path, IntegerKeys(8));
  ASSERT_FALSE(ops.ok());
  EXPECT_TRUE(ops.status().IsNotFound()) << ops.status().ToString();
  EXPECT_NE(ops.status().message().find(path), std::string_view::npos);

  StatusOr<std::unique_ptr<TraceWriter>> writer =
      TraceWriter::Open(::testing::TempDir() + "no/such/dir/trace", IntegerKeys(8));
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kIoError);
  EXPECT_NE(writer.status().message().find("no/such/dir/trace"), std::string_view::npos);
}

TEST(BenchTraceTest, AppendRejectsKeysTheTextCannotHold) {
  TempFile file("reject");
  const KeyFormat strings = StringKeys(8);
  StatusOr<std::unique_ptr<TraceWriter>> writer = TraceWriter::Open(file.path(), strings);
  ASSERT_TRUE(writer.ok());
  TraceWriter& trace = **writer;
  const std::vector<std::string> bad_keys = {
      StringKey("ab\x01", 8),          // unprintable
      StringKey("a b", 8),             // a space would split the line
      StringKey("caf\xc3\xa9", 8),     // not ASCII
      StringKey("", 8),                // empty
      std::string("ab\0cd\0\0\0", 8),  // bytes after the padding
      "short",                         // not the format's size
  };
  for (const std::string& key : bad_keys) {
    EXPECT_TRUE(trace.Append(OpType::kRead, key, 0).IsInvalidArgument()) << key;
  }
  EXPECT_TRUE(trace.Append(OpType::kScan, StringKey("ok", 8), 0).IsInvalidArgument());
  ASSERT_TRUE(trace.Append(OpType::kRead, StringKey("ok", 8), 0).ok());
  ASSERT_TRUE(trace.Close().ok());
  EXPECT_EQ(trace.Close().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(file.Read(), "read ok\n");  // nothing of the rejected keys

  TempFile integers("reject_integer");
  writer = TraceWriter::Open(integers.path(), IntegerKeys(16));
  ASSERT_TRUE(writer.ok());
  std::string wide = EncodeUint64Key(5, 16);
  wide[0] = 1;  // would be lost by the decimal form
  EXPECT_TRUE((*writer)->Append(OpType::kRead, wide, 0).IsInvalidArgument());
  EXPECT_TRUE((*writer)->Append(OpType::kRead, EncodeUint64Key(5, 8), 0).IsInvalidArgument());
}

}  // namespace
}  // namespace dmidx::bench
