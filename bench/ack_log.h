// Acknowledged-write logs (dmidx-ycsb --ack-log) and the final check that
// every acknowledged write survived, whatever compute node died.
//
// Each compute-node process appends one line per write it finished (an
// insert, update or read-modify-write's update, or a delete), whole, with
// one write(2) as soon as the index returned, so a process killed with
// SIGKILL loses no line the kernel took:
//
//   <kind> <key as hex> <value> <start ns> <end ns>
//
// kind W: an acknowledged write of <value>; D: an acknowledged delete
// (value 0); F: a write that failed, which may or may not have landed.
// Start and end are CLOCK_REALTIME around the index call, so logs of
// processes on one machine compare (across machines only as well as their
// clocks agree).
//
// With a log, every write's value is unique (UniqueWriteValue: the phase,
// the context and the operation's ordinal in it), so a value read back
// names the one write that wrote it. The check (AckCheck) takes every
// log's records and, per key with an acknowledged write or delete, the
// value read at the end, and accepts it only if it is a write not known to
// have been overwritten: an acknowledged write to the key that ended no
// earlier than the latest start of any acknowledged write to it (the last
// one, or one concurrent with it); a write to it that failed (F); or a
// write of a compute node that died that was still pending (its context's
// ordinal past every line that context logged). NotFound passes only an
// acknowledged delete so placed (or, with a dead node that deleted, a
// pending delete). Anything else, a missing key or an older value, is a
// lost acknowledged write.
#ifndef DMIDX_BENCH_ACK_LOG_H_
#define DMIDX_BENCH_ACK_LOG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dmidx/status.h"

namespace dmidx::bench {

// Bits of a unique value: phase + 1 in bits 60-63 (0: not a unique value,
// e.g. a bulk load's key number), the context in bits 40-59, the
// operation's ordinal in the context's phase in bits 0-39.
inline constexpr uint64_t kMaxWriteContexts = uint64_t{1} << 20;
inline constexpr uint64_t kMaxWriteOrdinal = (uint64_t{1} << 40) - 1;
uint64_t UniqueWriteValue(uint32_t phase, uint64_t context, uint64_t ordinal);
struct WriteOrigin {
  uint32_t phase = 0;
  uint64_t context = 0;
  uint64_t ordinal = 0;
};
// The write a unique value came from; none for any other value.
std::optional<WriteOrigin> OriginOf(uint64_t value);

struct AckRecord {
  char kind = 'W';  // W, D or F (above)
  std::string key;  // the key's bytes
  uint64_t value = 0;
  int64_t start_ns = 0;  // CLOCK_REALTIME
  int64_t end_ns = 0;
};

// Nanoseconds on CLOCK_REALTIME.
int64_t RealtimeNanoseconds();

// One process's log. Thread-safe: each record is one write(2).
class AckLogWriter {
 public:
  // Creates (truncates) `path`; IoError naming it on failure.
  static StatusOr<std::unique_ptr<AckLogWriter>> Open(const std::string& path);
  ~AckLogWriter();
  AckLogWriter(const AckLogWriter&) = delete;
  AckLogWriter& operator=(const AckLogWriter&) = delete;
  // IoError naming the file when the write fails or falls short.
  Status Append(const AckRecord& record);

 private:
  AckLogWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;
};

// Every record of `path`, in order. NotFound when it does not exist;
// InvalidArgument naming the file and line of a malformed one.
StatusOr<std::vector<AckRecord>> ReadAckLog(const std::string& path);

class AckCheck {
 public:
  // `contexts_per_node`: how a context number maps to its compute node.
  explicit AckCheck(uint64_t contexts_per_node) : contexts_per_node_(contexts_per_node) {}
  void Add(const AckRecord& record);
  // The keys with an acknowledged write or delete, sorted.
  std::vector<std::string> Keys() const;
  // What is wrong with `read` (none: NotFound) as `key`'s final value;
  // empty when it is consistent. `dead`: the compute nodes that died.
  std::string Verify(const std::string& key, std::optional<uint64_t> read,
                     const std::set<uint32_t>& dead) const;

 private:
  // Whether `value` may be a write of a dead node that was still pending.
  bool PendingOfDead(uint64_t value, const std::set<uint32_t>& dead) const;

  const uint64_t contexts_per_node_;
  std::map<std::string, std::vector<AckRecord>> by_key_;
  // Per (phase, context): the highest ordinal it logged.
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> last_logged_;
  bool deletes_ = false;  // any delete logged
};

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_ACK_LOG_H_
