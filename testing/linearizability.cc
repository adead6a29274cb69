#include "testing/linearizability.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "dmidx/keys.h"
#include "testing/model.h"
#include "testing/register_search.h"

namespace dmidx::testing {
namespace {

constexpr size_t kMaxErrors = 10;
constexpr size_t kMaxOpsPerError = 40;
constexpr uint64_t kMaxStatesToDescribe = 100'000;

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "%#llx", static_cast<unsigned long long>(value));
  return text;
}

// One operation on one key, and the logged operation it comes from (the
// reads of one scan share their scan).
struct KeyOp {
  RegisterOp op;
  const LoggedOp* source;
};

bool OutcomeUnknown(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded ||
         code == StatusCode::kIoError || code == StatusCode::kInternal;
}

// "[3, 8]".
std::string Interval(const LoggedOp& op) {
  char text[48];
  std::snprintf(text, sizeof(text), "[%llu, %llu]", static_cast<unsigned long long>(op.start),
                static_cast<unsigned long long>(op.end));
  return text;
}

// "[3, 8] Insert 0x10: OK", "[4, 9] ScanRange [0, 99]: saw absent". (Built
// by appending: GCC 12's -Wrestrict misfires on " " + std::string.)
std::string Describe(const KeyOp& op) {
  const LoggedOp& source = *op.source;
  std::string text = Interval(source);
  text.append(" ").append(OpKindName(source.kind));
  if (source.kind == OpKind::kScanRange) {
    text.append(" [").append(std::to_string(source.key)).append(", ");
    text.append(std::to_string(source.value)).append("]");
  } else if (source.kind == OpKind::kScanCount) {
    text.append(" from ").append(std::to_string(source.key));
    text.append(" count ").append(std::to_string(source.value));
  }
  if (source.kind == OpKind::kScanRange || source.kind == OpKind::kScanCount) {
    text.append(": saw ");
    text.append(op.op.effect == RegisterEffect::kReadValue ? Hex(op.op.value) : "absent");
    return text;
  }
  if (source.kind == OpKind::kInsert || source.kind == OpKind::kUpdate) {
    text.append(" ").append(Hex(source.value));
  }
  text.append(": ").append(StatusCodeName(source.code));
  if (source.kind == OpKind::kLookup && source.code == StatusCode::kOk) {
    text.append(" ").append(Hex(source.value));
  }
  if (source.pending) {
    text.append(" (pending: its caller died)");
  } else if (op.op.ret == kUnknownReturn) {
    text.append(" (outcome unknown)");
  }
  return text;
}

// Splits a history into per-key operations and checks scans' shapes.
class Splitter {
 public:
  Splitter(const LinearizabilityOptions& options, LinearizabilityReport* report)
      : options_(options), report_(*report) {}

  void Split(std::span<const std::vector<LoggedOp>> logs) {
    std::vector<const LoggedOp*> scans;
    for (const auto& log : logs) {
      for (const LoggedOp& op : log) {
        if (op.pending) {
          AddPending(op);
        } else if (op.end < op.start) {
          Fail("key " + std::to_string(op.key) + ": " + OpKindName(op.kind) + " " + Interval(op) +
               " ends before it starts");
        } else if (op.kind == OpKind::kScanRange || op.kind == OpKind::kScanCount) {
          if (op.code == StatusCode::kOk) scans.push_back(&op);
        } else {
          AddSingleKey(op);
        }
      }
    }
    for (const auto& [key, ops] : by_key_) {
      const bool mutated = std::any_of(ops.begin(), ops.end(), [](const KeyOp& op) {
        return op.op.effect == RegisterEffect::kPut || op.op.effect == RegisterEffect::kReplace ||
               op.op.effect == RegisterEffect::kRemove;
      });
      if (mutated) mutated_keys_.push_back(key);  // ascending: by_key_ is ordered
    }
    for (const LoggedOp* scan : scans)
      AddScan(*scan);
  }

  void Fail(std::string error) {
    report_.ok = false;
    if (++report_.error_count <= kMaxErrors) report_.errors.push_back(std::move(error));
  }

  std::map<uint64_t, std::vector<KeyOp>>& by_key() { return by_key_; }

 private:
  void Add(uint64_t key, RegisterEffect effect, uint64_t value, const LoggedOp& op, bool unknown) {
    by_key_[key].push_back({{effect, value, op.start, unknown ? kUnknownReturn : op.end}, &op});
  }

  // An operation with no response: a mutation may take effect at any point
  // after its start, or never; a read or scan constrains nothing.
  void AddPending(const LoggedOp& op) {
    switch (op.kind) {
      case OpKind::kInsert:
        Add(op.key, RegisterEffect::kPut, op.value, op, true);
        break;
      case OpKind::kUpdate:
        Add(op.key, RegisterEffect::kReplace, op.value, op, true);
        break;
      case OpKind::kDelete:
        Add(op.key, RegisterEffect::kRemove, 0, op, true);
        break;
      default:
        break;
    }
  }

  void AddSingleKey(const LoggedOp& op) {
    const bool ok = op.code == StatusCode::kOk;
    const bool not_found = op.code == StatusCode::kNotFound;
    const bool unknown = OutcomeUnknown(op.code);
    switch (op.kind) {
      case OpKind::kInsert:
        if (ok || unknown) Add(op.key, RegisterEffect::kPut, op.value, op, unknown);
        break;
      case OpKind::kUpdate:
        if (ok || unknown) Add(op.key, RegisterEffect::kReplace, op.value, op, unknown);
        if (not_found) Add(op.key, RegisterEffect::kReadAbsent, 0, op, false);
        break;
      case OpKind::kDelete:
        if (ok || unknown) Add(op.key, RegisterEffect::kRemove, 0, op, unknown);
        if (not_found) Add(op.key, RegisterEffect::kReadAbsent, 0, op, false);
        break;
      case OpKind::kLookup:
        if (ok) Add(op.key, RegisterEffect::kReadValue, op.value, op, false);
        if (not_found) Add(op.key, RegisterEffect::kReadAbsent, 0, op, false);
        break;
      default:
        break;
    }
  }

  // A read of every key the scan vouches for. Keys no mutation touched are
  // absent throughout, so reads of their absence are left out.
  void AddScan(const LoggedOp& op) {
    const std::vector<KeyValue>& out = op.scanned;
    const bool range = op.kind == OpKind::kScanRange;
    const uint64_t to = range ? op.value : options_.max_key;
    const std::string name = std::string(OpKindName(op.kind)) + "(" + std::to_string(op.key) +
                             ", " + std::to_string(op.value) + ") over " + Interval(op);
    const std::string shape = CheckScanShape(out, op.key, to);
    if (!shape.empty()) return Fail("key " + std::to_string(op.key) + ": " + name + ": " + shape);
    if (!range && out.size() > op.value) {
      return Fail("key " + std::to_string(op.key) + ": " + name + " returned " +
                  std::to_string(out.size()) + " pairs");
    }
    for (const KeyValue& pair : out)
      Add(DecodeUint64Key(pair.key), RegisterEffect::kReadValue, pair.value, op, false);
    // The keys it vouches for: [from, to], or for the count form up to its
    // last key when it returned `count` pairs (none when `count` is 0).
    uint64_t last = to;
    if (!range && out.size() == op.value) {
      if (out.empty()) return;
      last = DecodeUint64Key(out.back().key);
    }
    size_t next = 0;  // in out
    for (auto it = std::lower_bound(mutated_keys_.begin(), mutated_keys_.end(), op.key);
         it != mutated_keys_.end() && *it <= last; ++it) {
      while (next < out.size() && DecodeUint64Key(out[next].key) < *it)
        ++next;
      if (next < out.size() && DecodeUint64Key(out[next].key) == *it) continue;
      Add(*it, RegisterEffect::kReadAbsent, 0, op, false);
    }
  }

  const LinearizabilityOptions& options_;
  LinearizabilityReport& report_;
  std::map<uint64_t, std::vector<KeyOp>> by_key_;
  std::vector<uint64_t> mutated_keys_;
};

// The key's operations (sorted by call), at most kMaxOpsPerError around
// the one the search could not linearize, marked with their place in the
// longest linearizable prefix.
std::string DescribeFailure(uint64_t key, const std::vector<KeyOp>& ops,
                            const RegisterSearchResult& result) {
  std::vector<size_t> place(ops.size(), 0);  // 1-based place in the prefix
  for (size_t i = 0; i < result.longest_prefix.size(); ++i)
    place[result.longest_prefix[i]] = i + 1;
  const size_t at = result.blocked < 0 ? 0 : static_cast<size_t>(result.blocked);
  size_t first = at > kMaxOpsPerError * 3 / 4 ? at - kMaxOpsPerError * 3 / 4 : 0;
  if (ops.size() > kMaxOpsPerError) first = std::min(first, ops.size() - kMaxOpsPerError);
  const size_t last = std::min(ops.size(), first + kMaxOpsPerError);

  std::string text = "key " + std::to_string(key) +
                     ": not linearizable: " + std::to_string(ops.size()) + " ops by call; ";
  if (result.unwritten_value) {
    text += "the op marked <- reads a value no op of the key writes";
  } else {
    text += "a longest linearizable prefix orders " + std::to_string(result.longest_prefix.size()) +
            " of them (#n), and then the op marked <- cannot be linearized";
  }
  if (first > 0) text += "\n  ... " + std::to_string(first) + " earlier ops";
  for (size_t i = first; i < last; ++i) {
    text += "\n  " + Describe(ops[i]);
    if (place[i] > 0) text += "  #" + std::to_string(place[i]);
    if (result.blocked >= 0 && i == at) text += "  <-";
  }
  if (last < ops.size()) text += "\n  ... " + std::to_string(ops.size() - last) + " later ops";
  return text;
}

}  // namespace

LinearizabilityReport CheckLinearizable(std::span<const std::vector<LoggedOp>> logs,
                                        const LinearizabilityOptions& options) {
  LinearizabilityReport report;
  Splitter splitter(options, &report);
  splitter.Split(logs);
  std::vector<RegisterOp> register_ops;
  for (auto& [key, ops] : splitter.by_key()) {
    std::sort(ops.begin(), ops.end(), [](const KeyOp& a, const KeyOp& b) {
      return a.op.call != b.op.call ? a.op.call < b.op.call : a.op.ret < b.op.ret;
    });
    register_ops.clear();
    for (const KeyOp& op : ops)
      register_ops.push_back(op.op);
    RegisterSearchResult result = SearchRegister(register_ops, options.max_states_per_key);
    if (result.outcome == RegisterSearchResult::Outcome::kNotLinearizable &&
        !result.unwritten_value) {
      // Pruning cuts the longest prefix short: a plain search shows more.
      RegisterSearchResult plain = SearchRegister(
          register_ops, std::min(options.max_states_per_key, kMaxStatesToDescribe), false);
      if (plain.outcome == RegisterSearchResult::Outcome::kNotLinearizable) {
        result.longest_prefix = std::move(plain.longest_prefix);
        result.blocked = plain.blocked;
      }
    }
    ++report.keys;
    report.ops += ops.size();
    report.states += result.states;
    if (result.outcome == RegisterSearchResult::Outcome::kNotLinearizable) {
      splitter.Fail(DescribeFailure(key, ops, result));
    } else if (result.outcome == RegisterSearchResult::Outcome::kBudgetExceeded) {
      splitter.Fail("key " + std::to_string(key) + ": search budget of " +
                    std::to_string(options.max_states_per_key) + " states exceeded (" +
                    std::to_string(ops.size()) + " ops)");
    }
  }
  return report;
}

std::string LinearizabilityReport::ToString() const {
  return std::string(ok ? "linearizable: " : "NOT linearizable: ") + std::to_string(keys) +
         " keys, " + std::to_string(ops) + " per-key ops, " + std::to_string(states) +
         " search states, " + std::to_string(error_count) + " errors";
}

}  // namespace dmidx::testing
