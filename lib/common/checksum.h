// The checksum that makes lock-free node reads safe against torn READs, for
// every index (the B+tree's nodes, see docs/btree.md; the radix tree's
// leaves): a 64-bit multiply-rotate hash over 8-byte words, in four lanes. An image that
// mixes words of different versions matches the stored checksum only by
// collision (about 2^-63: the low bit is always set).
#ifndef DMIDX_COMMON_CHECKSUM_H_
#define DMIDX_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dmidx {

// Hash of `words` 8-byte words at `data` (8-byte aligned). Every word goes
// through an xor, a multiply by an odd constant and a rotation in one of four
// lanes (word i in lane i % 4, so the lanes' dependency chains run in
// parallel), and position enters through each lane's running state, so
// swapping, changing or mixing words changes the result; the lanes are
// folded together and a final avalanche spreads every input bit over the
// output.
inline uint64_t ChecksumWords(const uint8_t* data, size_t words) {
  constexpr uint64_t kMultiplyA = 0x9e3779b97f4a7c15ull;
  constexpr uint64_t kMultiplyB = 0xc2b2ae3d27d4eb4full;
  // For a fixed state, word -> next state is a bijection (xor, multiply by
  // an odd constant, rotate), so changing one word always changes its lane.
  auto mix = [](uint64_t state, uint64_t word) {
    state = (state ^ word) * kMultiplyB;
    return (state << 31) | (state >> 33);
  };
  uint64_t lane[4] = {0x27d4eb2f165667c5ull ^ (words * kMultiplyB), 0x165667b19e3779f9ull,
                      0x85ebca77c2b2ae63ull, 0xff51afd7ed558ccdull};
  size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    uint64_t w[4];
    std::memcpy(w, data + 8 * i, 32);
    for (int l = 0; l < 4; ++l)
      lane[l] = mix(lane[l], w[l]);
  }
  for (; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, data + 8 * i, 8);
    lane[i % 4] = mix(lane[i % 4], word);
  }
  uint64_t state = lane[0];
  for (int l = 1; l < 4; ++l)
    state = mix(state * kMultiplyA, lane[l]);
  state ^= state >> 29;
  state *= kMultiplyA;
  state ^= state >> 32;
  // Never 0, so an all-zero (never written) node cannot pass the check.
  return state | 1;
}

}  // namespace dmidx

#endif  // DMIDX_COMMON_CHECKSUM_H_
