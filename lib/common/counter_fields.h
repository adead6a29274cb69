// Arithmetic and printing for structs of uint64_t counters (Stats,
// OpCounters): each struct lists its fields once in a `Fields` function
//   fields(a, b, f) calls f(a.x, b.x, "x") for every counter x,
// and these do the rest.
#ifndef DMIDX_COMMON_COUNTER_FIELDS_H_
#define DMIDX_COMMON_COUNTER_FIELDS_H_

#include <cstdint>
#include <string>

namespace dmidx::counters {

template <typename T, typename Fields>
void Add(T& a, const T& b, Fields fields) {
  fields(a, b, [](uint64_t& x, const uint64_t& y, const char*) { x += y; });
}

template <typename T, typename Fields>
void Subtract(T& a, const T& b, Fields fields) {
  fields(a, b, [](uint64_t& x, const uint64_t& y, const char*) { x -= y; });
}

// "name=value name=value ..." in field order.
template <typename T, typename Fields>
std::string ToString(const T& a, Fields fields) {
  std::string out;
  fields(a, a, [&out](const uint64_t& x, const uint64_t&, const char* name) {
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += std::to_string(x);
  });
  return out;
}

}  // namespace dmidx::counters

#endif  // DMIDX_COMMON_COUNTER_FIELDS_H_
