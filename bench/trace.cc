#include "bench/trace.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "dmidx/keys.h"

namespace dmidx::bench {
namespace {

constexpr size_t kIntegerBytes = 8;

bool IsKeyChar(char c) {
  return c > ' ' && c < 0x7f;
}

std::string ErrnoMessage(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// An integer key as the decimal number it encodes. Keys longer than 8 bytes
// are zero-extended on the left (keys.h), so anything else there would be
// lost by the decimal form.
StatusOr<std::string> IntegerKeyText(std::string_view key) {
  const size_t leading = key.size() > kIntegerBytes ? key.size() - kIntegerBytes : 0;
  for (size_t i = 0; i < leading; ++i) {
    if (key[i] != '\0') {
      return Status::InvalidArgument("integer key has non-zero bytes before its last 8");
    }
  }
  return std::to_string(DecodeUint64Key(std::string(key)));
}

// A string key as its bytes up to the zero padding; each must be printable
// non-space ASCII so that the line splits back into the same fields.
StatusOr<std::string> StringKeyText(std::string_view key) {
  const size_t end = std::min(key.find('\0'), key.size());
  if (end == 0) return Status::InvalidArgument("empty string key");
  for (size_t i = 0; i < end; ++i) {
    if (!IsKeyChar(key[i])) {
      return Status::InvalidArgument("string key byte " + std::to_string(i) + " (" +
                                     std::to_string(static_cast<uint8_t>(key[i])) +
                                     ") is not printable non-space ASCII");
    }
  }
  if (key.find_first_not_of('\0', end) != std::string_view::npos) {
    return Status::InvalidArgument("string key has non-zero bytes after its zero padding");
  }
  return std::string(key.substr(0, end));
}

StatusOr<std::string> KeyText(const KeyFormat& format, std::string_view key) {
  if (key.size() != format.bytes) {
    return Status::InvalidArgument("key of " + std::to_string(key.size()) +
                                   " bytes, the format's are " + std::to_string(format.bytes));
  }
  return format.kind == KeyKind::kInteger ? IntegerKeyText(key) : StringKeyText(key);
}

template <typename T>
bool ParseUnsigned(std::string_view text, T* value) {
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, *value);
  return error == std::errc() && ptr == end;
}

// The inverse of KeyText; messages say what is wrong with `text`.
StatusOr<std::string> ParseIntegerKey(const KeyFormat& format, std::string_view text) {
  uint64_t number = 0;
  if (!ParseUnsigned(text, &number)) {
    return Status::InvalidArgument("bad integer key '" + std::string(text) + "'");
  }
  if (format.bytes < kIntegerBytes && (number >> (8 * format.bytes)) != 0) {
    return Status::InvalidArgument("integer key " + std::string(text) + " does not fit in " +
                                   std::to_string(format.bytes) + " bytes");
  }
  return EncodeUint64Key(number, format.bytes);
}

StatusOr<std::string> ParseStringKey(const KeyFormat& format, std::string_view text) {
  if (text.size() > format.bytes) {
    return Status::InvalidArgument("key '" + std::string(text) + "' is longer than the format's " +
                                   std::to_string(format.bytes) + " bytes");
  }
  for (char c : text) {
    if (!IsKeyChar(c)) return Status::InvalidArgument("key has a byte that is not printable ASCII");
  }
  std::string key(text);
  key.resize(format.bytes, '\0');
  return key;
}

// The whitespace-separated fields of a line.
std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  constexpr std::string_view kSpace = " \t\r\n";
  size_t start = line.find_first_not_of(kSpace);
  while (start != std::string_view::npos) {
    const size_t end = std::min(line.find_first_of(kSpace, start), line.size());
    fields.push_back(line.substr(start, end - start));
    start = line.find_first_not_of(kSpace, end);
  }
  return fields;
}

// One non-blank, non-comment line; errors without the "PATH:LINE: " prefix.
StatusOr<TraceOp> ParseLine(const KeyFormat& format, const std::vector<std::string_view>& fields) {
  const std::optional<OpType> op = ParseOpType(fields[0]);
  if (!op) {
    return Status::InvalidArgument("unknown operation '" + std::string(fields[0]) +
                                   "' (expected read, update, insert, scan or rmw)");
  }
  if (fields.size() < 2) return Status::InvalidArgument("missing key");
  TraceOp trace_op;
  trace_op.op = *op;
  StatusOr<std::string> key = format.kind == KeyKind::kInteger ? ParseIntegerKey(format, fields[1])
                                                               : ParseStringKey(format, fields[1]);
  if (!key.ok()) return key.status();
  trace_op.key = std::move(*key);
  size_t used = 2;
  if (*op == OpType::kScan) {
    if (fields.size() < 3) return Status::InvalidArgument("scan without a length");
    if (!ParseUnsigned(fields[2], &trace_op.scan_length)) {
      return Status::InvalidArgument("bad scan length '" + std::string(fields[2]) + "'");
    }
    if (trace_op.scan_length == 0) return Status::InvalidArgument("scan length 0");
    used = 3;
  }
  if (fields.size() > used) {
    return Status::InvalidArgument("extra field '" + std::string(fields[used]) + "'");
  }
  return trace_op;
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

// getline()'s buffer, which it grows with realloc.
struct LineBuffer {
  char* data = nullptr;
  size_t capacity = 0;
  LineBuffer() = default;
  LineBuffer(const LineBuffer&) = delete;
  LineBuffer& operator=(const LineBuffer&) = delete;
  ~LineBuffer() { std::free(data); }
};

}  // namespace

StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path,
                                                         const KeyFormat& format) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return Status::IoError(ErrnoMessage("cannot create trace", path));
  return std::unique_ptr<TraceWriter>(new TraceWriter(file, path, format));
}

TraceWriter::TraceWriter(std::FILE* file, std::string path, const KeyFormat& format)
    : file_(file), path_(std::move(path)), format_(format) {}

TraceWriter::~TraceWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status TraceWriter::Append(OpType op, std::string_view key, uint32_t scan_length) {
  if (file_ == nullptr) return Status::FailedPrecondition("trace " + path_ + " is closed");
  if (op == OpType::kScan && scan_length == 0) {
    return Status::InvalidArgument("scan of length 0 in trace " + path_);
  }
  StatusOr<std::string> text = KeyText(format_, key);
  if (!text.ok()) return text.status().WithContext("trace " + path_);
  std::string line = OpTypeName(op);
  line += ' ';
  line += *text;
  if (op == OpType::kScan) {
    line += ' ';
    line += std::to_string(scan_length);
  }
  line += '\n';
  // One fwrite per line: stdio locks the stream for the call, so lines from
  // several threads never interleave.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    failed_.store(true, std::memory_order_relaxed);
    return Status::IoError(ErrnoMessage("cannot write trace", path_));
  }
  return Status::Ok();
}

Status TraceWriter::Close() {
  if (file_ == nullptr) return Status::FailedPrecondition("trace " + path_ + " is closed");
  // Relaxed is enough for failed_: the caller joins the appending threads
  // before Close, which orders their stores before this load.
  bool failed = failed_.load(std::memory_order_relaxed);
  if (std::fflush(file_) != 0) failed = true;
  if (std::fclose(file_) != 0) failed = true;
  file_ = nullptr;
  if (failed) return Status::IoError("cannot write trace " + path_);
  return Status::Ok();
}

StatusOr<std::vector<TraceOp>> ReadTrace(const std::string& path, const KeyFormat& format) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "r"));
  if (!file) {
    const bool missing = errno == ENOENT;  // before anything else can change errno
    const std::string message = ErrnoMessage("cannot open trace", path);
    return missing ? Status::NotFound(message) : Status::IoError(message);
  }
  std::vector<TraceOp> ops;
  LineBuffer buffer;
  size_t line_number = 0;
  ssize_t length;
  while ((length = ::getline(&buffer.data, &buffer.capacity, file.get())) >= 0) {
    ++line_number;
    std::string_view line(buffer.data, static_cast<size_t>(length));
    const std::vector<std::string_view> fields = SplitFields(line);
    if (fields.empty() || fields[0].front() == '#') continue;
    StatusOr<TraceOp> op = ParseLine(format, fields);
    if (!op.ok()) return op.status().WithContext(path + ":" + std::to_string(line_number));
    ops.push_back(std::move(*op));
  }
  if (std::ferror(file.get())) return Status::IoError(ErrnoMessage("cannot read trace", path));
  return ops;
}

}  // namespace dmidx::bench
