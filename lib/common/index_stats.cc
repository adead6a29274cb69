#include <atomic>
#include <string>

#include "dmidx/index.h"
#include "lib/common/counter_fields.h"
#include "lib/common/relaxed_counters.h"

namespace dmidx {

namespace {

// Applies `f(field_of_a, field_of_b, name)` to every counter.
constexpr auto kFields = [](auto& a, auto& b, auto f) {
  f(a.operations, b.operations, "ops");
  f(a.round_trips, b.round_trips, "round_trips");
  f(a.bytes_read, b.bytes_read, "bytes_read");
  f(a.bytes_written, b.bytes_written, "bytes_written");
  f(a.lock_retries, b.lock_retries, "lock_retries");
  f(a.handovers, b.handovers, "handovers");
  f(a.cache_hits, b.cache_hits, "cache_hits");
  f(a.cache_misses, b.cache_misses, "cache_misses");
  f(a.cache_stale, b.cache_stale, "cache_stale");
  f(a.read_retries, b.read_retries, "read_retries");
};

}  // namespace

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
  counters::Add(*this, other, kFields);
  return *this;
}

OpCounters operator-(OpCounters a, const OpCounters& b) {
  counters::Subtract(a, b, kFields);
  return a;
}

void AddOwnedRelaxed(OpCounters* owned, const OpCounters& delta) {
  kFields(*owned, delta, [](uint64_t& x, const uint64_t& y, const char*) {
    std::atomic_ref<uint64_t>(x).store(x + y, std::memory_order_relaxed);
  });
}

OpCounters LoadRelaxed(const OpCounters& shared) {
  OpCounters copy;
  kFields(copy, shared, [](uint64_t& x, const uint64_t& y, const char*) {
    x = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(y)).load(std::memory_order_relaxed);
  });
  return copy;
}

std::string OpCounters::ToString() const {
  return counters::ToString(*this, kFields);
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
