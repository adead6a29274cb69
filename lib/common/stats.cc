#include "dmidx/stats.h"

namespace dmidx {

namespace {

// Applies `f(field_of_a, field_of_b, name)` to every counter.
template <typename A, typename B, typename F>
void ForEachCounter(A& a, B& b, F f) {
  f(a.round_trips, b.round_trips, "round_trips");
  f(a.batches, b.batches, "batches");
  f(a.reads, b.reads, "reads");
  f(a.writes, b.writes, "writes");
  f(a.compare_swaps, b.compare_swaps, "compare_swaps");
  f(a.fetch_adds, b.fetch_adds, "fetch_adds");
  f(a.bytes_read, b.bytes_read, "bytes_read");
  f(a.bytes_written, b.bytes_written, "bytes_written");
  f(a.compare_swap_failures, b.compare_swap_failures, "compare_swap_failures");
}

}  // namespace

Stats& Stats::operator+=(const Stats& other) {
  ForEachCounter(*this, other, [](uint64_t& x, const uint64_t& y, const char*) { x += y; });
  return *this;
}

Stats operator-(Stats a, const Stats& b) {
  ForEachCounter(a, b, [](uint64_t& x, const uint64_t& y, const char*) { x -= y; });
  return a;
}

std::string Stats::ToString() const {
  std::string out;
  ForEachCounter(*this, *this, [&out](const uint64_t& x, const uint64_t&, const char* name) {
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += std::to_string(x);
  });
  return out;
}

}  // namespace dmidx
