#include "dmidx/stats.h"

#include "lib/common/counter_fields.h"

namespace dmidx {

namespace {

// Applies `f(field_of_a, field_of_b, name)` to every counter.
constexpr auto kFields = [](auto& a, auto& b, auto f) {
  f(a.round_trips, b.round_trips, "round_trips");
  f(a.batches, b.batches, "batches");
  f(a.reads, b.reads, "reads");
  f(a.writes, b.writes, "writes");
  f(a.compare_swaps, b.compare_swaps, "compare_swaps");
  f(a.fetch_adds, b.fetch_adds, "fetch_adds");
  f(a.bytes_read, b.bytes_read, "bytes_read");
  f(a.bytes_written, b.bytes_written, "bytes_written");
  f(a.compare_swap_failures, b.compare_swap_failures, "compare_swap_failures");
};

}  // namespace

Stats& Stats::operator+=(const Stats& other) {
  counters::Add(*this, other, kFields);
  return *this;
}

Stats operator-(Stats a, const Stats& b) {
  counters::Subtract(a, b, kFields);
  return a;
}

std::string Stats::ToString() const {
  return counters::ToString(*this, kFields);
}

}  // namespace dmidx
