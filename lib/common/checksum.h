// The checksum that makes lock-free node reads safe against torn READs, for
// every index (the B+tree's nodes, see docs/btree.md; the radix tree's
// leaves): a 64-bit multiply-rotate hash over 8-byte words. An image that
// mixes words of different versions matches the stored checksum only by
// collision (about 2^-63: the low bit is always set).
#ifndef DMIDX_COMMON_CHECKSUM_H_
#define DMIDX_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dmidx {

// Hash of `words` 8-byte words at `data` (8-byte aligned). Every word goes
// through a multiply by an odd constant and a rotation, and position enters
// through the running state, so swapping, changing or mixing words changes
// the result; the final avalanche spreads every input bit over the output.
inline uint64_t ChecksumWords(const uint8_t* data, size_t words) {
  constexpr uint64_t kMultiplyA = 0x9e3779b97f4a7c15ull;
  constexpr uint64_t kMultiplyB = 0xc2b2ae3d27d4eb4full;
  uint64_t state = 0x27d4eb2f165667c5ull ^ (words * kMultiplyB);
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, data + 8 * i, 8);
    state ^= word * kMultiplyA;
    state = ((state << 31) | (state >> 33)) * kMultiplyB;
  }
  state ^= state >> 29;
  state *= kMultiplyA;
  state ^= state >> 32;
  // Never 0, so an all-zero (never written) node cannot pass the check.
  return state | 1;
}

}  // namespace dmidx

#endif  // DMIDX_COMMON_CHECKSUM_H_
