// Operation traces: --trace-out writes the operations a run generates, one
// line each; --trace-in replays a file of the same format instead of
// generating operations.
//
//   <op> <key> [<scan length>]
//
// op is read, update, insert, scan, rmw or delete (YCSB's upper-case READ,
// UPDATE, INSERT, SCAN, READMODIFYWRITE, DELETE are accepted); the scan length is given for
// scans only. The key is written as text: for integer keys the decimal
// number whose big-endian encoding is the key; for string keys the key's
// bytes up to its zero padding (printable ASCII, no spaces). Blank lines
// and lines starting with '#' are skipped.
#ifndef DMIDX_BENCH_TRACE_H_
#define DMIDX_BENCH_TRACE_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/keys.h"
#include "bench/workload.h"
#include "dmidx/status.h"

namespace dmidx::bench {

struct TraceOp {
  OpType op = OpType::kRead;
  std::string key;           // index key bytes (KeyFormat::bytes long)
  uint32_t scan_length = 0;  // scans only
  friend bool operator==(const TraceOp&, const TraceOp&) = default;
};

class TraceWriter {
 public:
  // Creates (truncates) `path`; IoError naming it on failure.
  static StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path,
                                                     const KeyFormat& format);
  ~TraceWriter();
  // `key` is index key bytes of the format's size; scan_length is written
  // for scans only and must be at least 1 there. InvalidArgument (nothing
  // written) for a key the text form cannot hold: wrong size, an integer key
  // with non-zero bytes before its last 8, a string key that is empty or has
  // a byte that is not printable non-space ASCII before its zero padding.
  // Several threads may append at once (not during Close): each line is
  // written whole, in no particular order between threads.
  Status Append(OpType op, std::string_view key, uint32_t scan_length);
  // Flushes and closes; IoError if any write failed. Append and Close after
  // Close return FailedPrecondition. The destructor closes without a word.
  Status Close();

 private:
  TraceWriter(std::FILE* file, std::string path, const KeyFormat& format);
  std::FILE* file_;
  std::string path_;
  KeyFormat format_;
  std::atomic<bool> failed_{false};  // a write failed; Close reports it
};

// Reads a whole trace. InvalidArgument "PATH:LINE: ..." for an unknown op,
// a key that does not fit the format, a scan without a length (or a length
// of 0), a bad number, a field too many; NotFound/IoError naming the file.
StatusOr<std::vector<TraceOp>> ReadTrace(const std::string& path, const KeyFormat& format);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_TRACE_H_
