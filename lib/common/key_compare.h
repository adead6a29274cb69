// Key comparison on every index's hot path: keys are byte strings ordered
// as memcmp orders them (then by length). A key of 8, 16, 24 or 32 bytes
// -- every fixed key size the indexes are used with in practice -- is
// compared as big-endian 64-bit words, a few instructions instead of a call
// into memcmp.
#ifndef DMIDX_COMMON_KEY_COMPARE_H_
#define DMIDX_COMMON_KEY_COMPARE_H_

#include <cstdint>
#include <cstring>
#include <string_view>

namespace dmidx {

// <0, 0 or >0 as a.compare(b).
inline int CompareKeys(std::string_view a, std::string_view b) {
  if (a.size() == b.size() && a.size() % 8 == 0 && a.size() <= 32) {
    for (size_t i = 0; i < a.size(); i += 8) {
      uint64_t x, y;
      std::memcpy(&x, a.data() + i, 8);
      std::memcpy(&y, b.data() + i, 8);
      if (x != y) return __builtin_bswap64(x) < __builtin_bswap64(y) ? -1 : 1;
    }
    return 0;
  }
  return a.compare(b);
}

// A transparent ordering by CompareKeys, for ordered containers keyed by
// std::string and searched with std::string_view.
struct KeyLess {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return CompareKeys(a, b) < 0; }
};

}  // namespace dmidx

#endif  // DMIDX_COMMON_KEY_COMPARE_H_
