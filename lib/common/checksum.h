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
  auto word = [data](size_t i) {
    uint64_t value;
    std::memcpy(&value, data + 8 * i, 8);
    return value;
  };
  // The lanes are four named variables, not an array, so that they stay in
  // registers: about four instructions a word (load-xor, multiply, rotate,
  // and the loop's share).
  uint64_t lane0 = 0x27d4eb2f165667c5ull ^ (words * kMultiplyB);
  uint64_t lane1 = 0x165667b19e3779f9ull;
  uint64_t lane2 = 0x85ebca77c2b2ae63ull;
  uint64_t lane3 = 0xff51afd7ed558ccdull;
  size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    lane0 = mix(lane0, word(i));
    lane1 = mix(lane1, word(i + 1));
    lane2 = mix(lane2, word(i + 2));
    lane3 = mix(lane3, word(i + 3));
  }
  // The last words % 4 words go to lanes 0, 1, 2 in turn.
  if (i < words) lane0 = mix(lane0, word(i));
  if (i + 1 < words) lane1 = mix(lane1, word(i + 1));
  if (i + 2 < words) lane2 = mix(lane2, word(i + 2));
  uint64_t state = mix(lane0 * kMultiplyA, lane1);
  state = mix(state * kMultiplyA, lane2);
  state = mix(state * kMultiplyA, lane3);
  state ^= state >> 29;
  state *= kMultiplyA;
  state ^= state >> 32;
  // Never 0, so an all-zero (never written) node cannot pass the check.
  return state | 1;
}

}  // namespace dmidx

#endif  // DMIDX_COMMON_CHECKSUM_H_
