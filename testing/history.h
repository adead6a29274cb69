// A linearizability checker for histories of single-key operations and
// scans on an index with integer keys.
//
// Clients log every operation with the ticks of one global logical clock
// taken right before the call and right after it returned, and write
// values unique across the run (so a value read names the write it came
// from). A read is allowed when some linearization of the logged writes
// explains it: the value was written by a write that started before the
// read ended and was not certainly overwritten before the read began; an
// absence needs a delete in that window, or no write completed before.
#ifndef DMIDX_TESTING_HISTORY_H_
#define DMIDX_TESTING_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/status.h"

namespace dmidx::testing {

enum class OpKind : uint8_t { kInsert, kUpdate, kDelete, kLookup, kScanRange, kScanCount };

// "Insert", "ScanRange", ...
const char* OpKindName(OpKind kind);

// One logged operation.
struct LoggedOp {
  OpKind kind = OpKind::kLookup;
  StatusCode code = StatusCode::kOk;
  uint64_t key = 0;    // Scan: from
  uint64_t value = 0;  // written or read value; Scan: to (kScanRange) or count (kScanCount)
  uint64_t start = 0, end = 0;      // clock ticks before the call and after it returned
  std::vector<KeyValue> scanned{};  // Scan: its result (8-byte keys)
  // No response: its caller died during it (a killed compute node's
  // operation in flight). `code`, `end` and a read's result are whatever
  // the dead caller's call returned, which no one saw: CheckLinearizable
  // treats a pending mutation as one of unknown outcome that may take
  // effect at any point after its start, and drops a pending read or scan.
  bool pending = false;
};

// The successful writes and deletes of each key, and which linearizations
// they allow. A mutation m "is overwritten before t" when another mutation
// of its key started after m ended and ended before t: every linearization
// then puts that one between m and t.
class History {
 public:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  // Ok Insert or Update (`value`, unique across the history), or Ok Delete.
  void AddMutation(uint64_t key, bool is_delete, uint64_t value, uint64_t start, uint64_t end);
  // Call once after the last AddMutation, before any check.
  void Finish();

  // Whether a read of `key` running over [start, end] may have returned
  // `value` (nullopt: NotFound). Returns what is wrong, or "".
  std::string CheckRead(uint64_t key, std::optional<uint64_t> value, uint64_t start,
                        uint64_t end) const;
  // Whether the key may end as `value` (nullopt: absent).
  std::string CheckFinal(uint64_t key, std::optional<uint64_t> value) const;

  size_t writes() const { return by_value_.size(); }

 private:
  struct Mutation {
    uint64_t start, end;
    bool is_delete;
    uint64_t value;
    uint64_t first_overwrite_start, first_overwrite_end;
  };

  static std::string Describe(std::vector<Mutation> list);

  std::unordered_map<uint64_t, std::vector<Mutation>> by_key_;
  std::unordered_map<uint64_t, std::pair<uint64_t, size_t>> by_value_;  // -> key, index
};

// The history of the successful writes and deletes in `logs` (finished).
History BuildHistory(std::span<const std::vector<LoggedOp>> logs);

// What CheckReads found.
struct HistoryReport {
  size_t ops = 0;
  size_t lookups = 0;
  size_t absences = 0;  // NotFound updates and deletes
  size_t scans = 0;
  size_t scanned_keys = 0;          // keys whose presence or absence a scan vouched for
  std::vector<std::string> errors;  // the first `max_errors`
  size_t error_count = 0;
  std::string ToString() const;  // the counts on one line
};

// Checks every lookup, every NotFound update or delete, and every scan of
// `logs` against `history`: keys lie in [0, max_key]; a scan vouches for
// every key of its range (the count form: up to its last key when it
// returned `count` pairs, to max_key otherwise).
HistoryReport CheckReads(const History& history, std::span<const std::vector<LoggedOp>> logs,
                         uint64_t max_key, size_t max_errors = 20);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_HISTORY_H_
