#include <atomic>
#include <string>

#include "dmidx/index.h"
#include "lib/common/counter_fields.h"
#include "lib/common/relaxed_counters.h"

namespace dmidx {

const char* IndexOpName(IndexOp op) {
  switch (op) {
    case IndexOp::kLookup:
      return "lookup";
    case IndexOp::kInsert:
      return "insert";
    case IndexOp::kUpdate:
      return "update";
    case IndexOp::kDelete:
      return "delete";
    case IndexOp::kScan:
      return "scan";
    case IndexOp::kBulkLoad:
      return "bulk_load";
  }
  return "unknown";
}

OpCounters& OpCounters::operator+=(const OpCounters& other) {
  counters::Add(*this, other, counters::kOpCounterFields);
  return *this;
}

OpCounters operator-(OpCounters a, const OpCounters& b) {
  counters::Subtract(a, b, counters::kOpCounterFields);
  return a;
}

OpCounters LoadRelaxed(const OpCounters& shared) {
  OpCounters copy;
  counters::kOpCounterFields(copy, shared, [](uint64_t& x, const uint64_t& y, const char*) {
    x = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(y)).load(std::memory_order_relaxed);
  });
  return copy;
}

std::string OpCounters::ToString() const {
  return counters::ToString(*this, counters::kOpCounterFields);
}

OpCounters IndexStats::Total() const {
  OpCounters total;
  for (const OpCounters& kind : by_op)
    total += kind;
  return total;
}

IndexStats operator-(IndexStats a, const IndexStats& before) {
  for (size_t i = 0; i < kIndexOpKinds; ++i)
    a.by_op[i] = a.by_op[i] - before.by_op[i];
  return a;
}

std::string IndexStats::ToString() const {
  std::string out;
  for (size_t i = 0; i < kIndexOpKinds; ++i) {
    if (by_op[i].operations == 0) continue;
    out += IndexOpName(static_cast<IndexOp>(i));
    out += ": ";
    out += by_op[i].ToString();
    out += '\n';
  }
  out += "longest_lock_wait_us=" + std::to_string(longest_lock_wait_ns / 1000) + '\n';
  return out;
}

}  // namespace dmidx
