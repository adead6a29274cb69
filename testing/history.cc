#include "testing/history.h"

#include <algorithm>
#include <cstdio>

#include "dmidx/keys.h"
#include "testing/model.h"

namespace dmidx::testing {
namespace {

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "%#llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kInsert:
      return "Insert";
    case OpKind::kUpdate:
      return "Update";
    case OpKind::kDelete:
      return "Delete";
    case OpKind::kLookup:
      return "Lookup";
    case OpKind::kScanRange:
      return "ScanRange";
    case OpKind::kScanCount:
      return "ScanCount";
  }
  return "?";
}

void History::AddMutation(uint64_t key, bool is_delete, uint64_t value, uint64_t start,
                          uint64_t end) {
  auto& list = by_key_[key];
  if (!is_delete) by_value_[value] = {key, list.size()};
  list.push_back({start, end, is_delete, value, 0, kNever});
}

// For each mutation, the earliest end of a mutation of its key that started
// after it ended.
void History::Finish() {
  for (auto& [key, list] : by_key_) {
    for (Mutation& m : list) {
      for (const Mutation& x : list) {
        if (x.start > m.end && x.end < m.first_overwrite_end) {
          m.first_overwrite_start = x.start;
          m.first_overwrite_end = x.end;
        }
      }
    }
  }
}

std::string History::CheckRead(uint64_t key, std::optional<uint64_t> value, uint64_t start,
                               uint64_t end) const {
  const auto list = by_key_.find(key);
  if (value) {
    const auto writer = by_value_.find(*value);
    if (writer == by_value_.end()) return "read value " + Hex(*value) + " that nobody wrote";
    if (writer->second.first != key) {
      return "read value " + Hex(*value) + " written to key " +
             std::to_string(writer->second.first);
    }
    const Mutation& m = by_key_.at(key)[writer->second.second];
    if (m.start >= end) {
      return "read value " + Hex(*value) + " whose write started at " + std::to_string(m.start) +
             ", after the read ended at " + std::to_string(end);
    }
    if (m.first_overwrite_end < start) {
      return (start == kNever ? "ends with value " : "read value ") + Hex(*value) +
             " (written over [" + std::to_string(m.start) + ", " + std::to_string(m.end) +
             "]) though a mutation over [" + std::to_string(m.first_overwrite_start) + ", " +
             std::to_string(m.first_overwrite_end) + "] followed it" +
             (start == kNever ? "" : ", before the read began at " + std::to_string(start));
    }
    return "";
  }
  if (list == by_key_.end()) return "";  // never written
  bool completed_before = false;
  for (const Mutation& m : list->second) {
    if (m.end < start) completed_before = true;
    if (m.is_delete && m.start < end && m.first_overwrite_end >= start) return "";
  }
  if (!completed_before) return "";  // may still be initially absent
  return (start == kNever
              ? std::string("absent at the end")
              : "NotFound over [" + std::to_string(start) + ", " + std::to_string(end) + "]") +
         ", but every linearization has the key present then (" + Describe(list->second) + ")";
}

std::string History::CheckFinal(uint64_t key, std::optional<uint64_t> value) const {
  return CheckRead(key, value, kNever, kNever);
}

// The key's mutations, the 6 that ended last.
std::string History::Describe(std::vector<Mutation> list) {
  std::sort(list.begin(), list.end(),
            [](const Mutation& a, const Mutation& b) { return a.end < b.end; });
  std::string text = std::to_string(list.size()) + " mutations, the last to end:";
  const size_t first = list.size() > 6 ? list.size() - 6 : 0;
  for (size_t i = first; i < list.size(); ++i) {
    const Mutation& m = list[i];
    text += std::string(" ") + (m.is_delete ? "delete" : "write " + Hex(m.value)) + "[" +
            std::to_string(m.start) + "," + std::to_string(m.end) + "]";
  }
  return text;
}

History BuildHistory(std::span<const std::vector<LoggedOp>> logs) {
  History history;
  for (const auto& log : logs) {
    for (const LoggedOp& op : log) {
      if (op.code != StatusCode::kOk) continue;
      if (op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate) {
        history.AddMutation(op.key, false, op.value, op.start, op.end);
      } else if (op.kind == OpKind::kDelete) {
        history.AddMutation(op.key, true, 0, op.start, op.end);
      }
    }
  }
  history.Finish();
  return history;
}

namespace {

// Adds the checks of one operation to `report`.
class ReadChecker {
 public:
  ReadChecker(const History& history, uint64_t max_key, size_t max_errors, HistoryReport* report)
      : history_(history), max_key_(max_key), max_errors_(max_errors), report_(*report) {}

  void Check(const LoggedOp& op) {
    switch (op.kind) {
      case OpKind::kLookup:
        ++report_.lookups;
        Read(op, op.key, op.code == StatusCode::kOk ? std::optional(op.value) : std::nullopt,
             "Lookup");
        break;
      case OpKind::kUpdate:
      case OpKind::kDelete:
        // A NotFound update or delete saw the key absent under its lock.
        if (op.code == StatusCode::kNotFound) {
          ++report_.absences;
          Read(op, op.key, std::nullopt, op.kind == OpKind::kUpdate ? "Update" : "Delete");
        }
        break;
      case OpKind::kScanRange:
      case OpKind::kScanCount:
        ++report_.scans;
        Scan(op);
        break;
      default:
        break;
    }
  }

 private:
  void Fail(std::string error) {
    if (++report_.error_count <= max_errors_) report_.errors.push_back(std::move(error));
  }

  void Read(const LoggedOp& op, uint64_t key, std::optional<uint64_t> value, const char* what) {
    const std::string error = history_.CheckRead(key, value, op.start, op.end);
    if (!error.empty()) {
      Fail(std::string(what) + " of key " + std::to_string(key) + " over [" +
           std::to_string(op.start) + ", " + std::to_string(op.end) + "]: " + error);
    }
  }

  void Scan(const LoggedOp& op) {
    const std::vector<KeyValue>& out = op.scanned;
    const bool range = op.kind == OpKind::kScanRange;
    const uint64_t to = range ? op.value : max_key_;
    const std::string shape = CheckScanShape(out, op.key, to);
    if (!shape.empty()) return Fail("Scan from " + std::to_string(op.key) + ": " + shape);
    if (!range && out.size() > op.value) {
      return Fail("Scan(" + std::to_string(op.key) + ", count " + std::to_string(op.value) +
                  ") returned " + std::to_string(out.size()) + " pairs");
    }
    // The keys the scan vouches for: all of [from, to], or for the count
    // form up to its last key when it returned `count` pairs.
    uint64_t last = to;
    if (!range && out.size() == op.value && !out.empty()) last = DecodeUint64Key(out.back().key);
    size_t next = 0;
    for (uint64_t key = op.key; key <= last; ++key) {
      ++report_.scanned_keys;
      if (next < out.size() && DecodeUint64Key(out[next].key) == key) {
        Read(op, key, out[next].value, "Scan");
        ++next;
      } else {
        Read(op, key, std::nullopt, "Scan");
      }
      if (key == max_key_) break;
    }
  }

  const History& history_;
  const uint64_t max_key_;
  const size_t max_errors_;
  HistoryReport& report_;
};

}  // namespace

HistoryReport CheckReads(const History& history, std::span<const std::vector<LoggedOp>> logs,
                         uint64_t max_key, size_t max_errors) {
  HistoryReport report;
  ReadChecker checker(history, max_key, max_errors, &report);
  for (const auto& log : logs) {
    report.ops += log.size();
    for (const LoggedOp& op : log)
      checker.Check(op);
  }
  return report;
}

std::string HistoryReport::ToString() const {
  return std::to_string(ops) + " ops, " + std::to_string(lookups) + " lookups, " +
         std::to_string(absences) + " NotFound updates/deletes, " + std::to_string(scans) +
         " scans covering " + std::to_string(scanned_keys) + " keys checked, " +
         std::to_string(error_count) + " errors";
}

}  // namespace dmidx::testing
