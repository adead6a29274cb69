// The checksum that makes lock-free node reads safe against torn READs, for
// every index (the B+tree's nodes, see docs/btree.md; the radix tree's
// leaves): a 64-bit multiply-rotate hash over 8-byte words, in four lanes. An image that
// mixes words of different versions matches the stored checksum only by
// collision (about 2^-63: the low bit is always set).
#ifndef DMIDX_COMMON_CHECKSUM_H_
#define DMIDX_COMMON_CHECKSUM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dmidx {

// Hash of `words` 8-byte words at `data` (8-byte aligned), taken from the
// last word to the first. Every word goes through an xor, a multiply by an
// odd constant and a rotation in one of four lanes (the i-th word taken, so
// word words-1-i, in lane i % 4, so the lanes' dependency chains run in
// parallel), and position enters through each lane's running state, so
// swapping, changing or mixing words changes the result; the lanes are
// folded together and a final avalanche spreads every input bit over the
// output.
//
// Last to first because writers change nodes near their front (a B+tree
// leaf's header and its first entries): the lanes' states can be kept every
// kChecksumCheckpointWords words taken (ChecksumCheckpoints), and after a
// change below some word the hash is taken again only from the last
// checkpoint before it (ChecksumWordsFrom): the same value, for the few
// words at the front.
inline constexpr size_t kChecksumCheckpointWords = 16;
struct ChecksumCheckpoints {
  // Checkpoint k: the four lanes before the (k * kChecksumCheckpointWords)-th
  // word taken, for k < kMax (words beyond resume from the last one: 4 KiB
  // of words are covered, 1 KiB of state).
  static constexpr size_t kMax = 32;
  uint64_t state[kMax * 4];  // checkpoint k at state + 4 * k
};

namespace checksum_internal {

inline constexpr uint64_t kMultiplyA = 0x9e3779b97f4a7c15ull;
inline constexpr uint64_t kMultiplyB = 0xc2b2ae3d27d4eb4full;

// For a fixed state, word -> next state is a bijection (xor, multiply by an
// odd constant, rotate), so changing one word always changes its lane.
inline uint64_t Mix(uint64_t state, uint64_t word) {
  state = (state ^ word) * kMultiplyB;
  return (state << 31) | (state >> 33);
}

inline uint64_t Load(const uint8_t* data, size_t i) {
  uint64_t value;
  std::memcpy(&value, data + 8 * i, 8);
  return value;
}

// The i-th word taken of `words`: the last first.
inline uint64_t Word(const uint8_t* data, size_t words, size_t i) {
  return Load(data, words - 1 - i);
}

// The hash from the i-th word taken (i a multiple of
// kChecksumCheckpointWords) on, with the lanes' states before it; with kRecord, records the states
// before every kChecksumCheckpointWords-th word from there in *checkpoints. The lanes are four
// named variables, not an array, so that they stay in registers: about three and a quarter
// instructions a word (load-xor, multiply, rotate, and the loop's share over sixteen words).
template <bool kRecord>
inline uint64_t ChecksumFrom(const uint8_t* data, size_t words, size_t i, uint64_t lane0,
                             uint64_t lane1, uint64_t lane2, uint64_t lane3,
                             ChecksumCheckpoints* checkpoints) {
  static_assert(kChecksumCheckpointWords == 16, "the loop below hashes 16 words a round");
  // Checkpoints are written in order from state[i / 16] while any is left.
  uint64_t* next = nullptr;
  uint64_t* const last = kRecord ? checkpoints->state + 4 * ChecksumCheckpoints::kMax : nullptr;
  if constexpr (kRecord) {
    next = checkpoints->state + 4 * std::min(i / 16, ChecksumCheckpoints::kMax);
  }
  auto record = [&] {
    if constexpr (kRecord) {
      if (next != last) {
        next[0] = lane0;
        next[1] = lane1;
        next[2] = lane2;
        next[3] = lane3;
        next += 4;
      }
    }
  };
  for (; i + 16 <= words; i += 16) {
    record();
    // Written out, not a loop of four: GCC keeps such a loop rolled. The
    // block's words from its last down, at constant offsets.
    const uint8_t* block = data + 8 * (words - i - 16);
    lane0 = Mix(lane0, Load(block, 15));
    lane1 = Mix(lane1, Load(block, 14));
    lane2 = Mix(lane2, Load(block, 13));
    lane3 = Mix(lane3, Load(block, 12));
    lane0 = Mix(lane0, Load(block, 11));
    lane1 = Mix(lane1, Load(block, 10));
    lane2 = Mix(lane2, Load(block, 9));
    lane3 = Mix(lane3, Load(block, 8));
    lane0 = Mix(lane0, Load(block, 7));
    lane1 = Mix(lane1, Load(block, 6));
    lane2 = Mix(lane2, Load(block, 5));
    lane3 = Mix(lane3, Load(block, 4));
    lane0 = Mix(lane0, Load(block, 3));
    lane1 = Mix(lane1, Load(block, 2));
    lane2 = Mix(lane2, Load(block, 1));
    lane3 = Mix(lane3, Load(block, 0));
  }
  if (i < words) record();
  for (; i + 4 <= words; i += 4) {
    const uint8_t* block = data + 8 * (words - i - 4);
    lane0 = Mix(lane0, Load(block, 3));
    lane1 = Mix(lane1, Load(block, 2));
    lane2 = Mix(lane2, Load(block, 1));
    lane3 = Mix(lane3, Load(block, 0));
  }
  // The last words % 4 words taken go to lanes 0, 1, 2 in turn.
  if (i < words) lane0 = Mix(lane0, Word(data, words, i));
  if (i + 1 < words) lane1 = Mix(lane1, Word(data, words, i + 1));
  if (i + 2 < words) lane2 = Mix(lane2, Word(data, words, i + 2));
  uint64_t state = Mix(lane0 * kMultiplyA, lane1);
  state = Mix(state * kMultiplyA, lane2);
  state = Mix(state * kMultiplyA, lane3);
  state ^= state >> 29;
  state *= kMultiplyA;
  state ^= state >> 32;
  // Never 0, so an all-zero (never written) node cannot pass the check.
  return state | 1;
}

}  // namespace checksum_internal

// With `checkpoints` (null: none kept), also records the lanes' states for
// ChecksumWordsFrom.
inline uint64_t ChecksumWords(const uint8_t* data, size_t words,
                              ChecksumCheckpoints* checkpoints = nullptr) {
  using checksum_internal::ChecksumFrom;
  using checksum_internal::kMultiplyB;
  const uint64_t lane0 = 0x27d4eb2f165667c5ull ^ (words * kMultiplyB);
  constexpr uint64_t lane1 = 0x165667b19e3779f9ull;
  constexpr uint64_t lane2 = 0x85ebca77c2b2ae63ull;
  constexpr uint64_t lane3 = 0xff51afd7ed558ccdull;
  if (checkpoints != nullptr) {
    return ChecksumFrom<true>(data, words, 0, lane0, lane1, lane2, lane3, checkpoints);
  }
  return ChecksumFrom<false>(data, words, 0, lane0, lane1, lane2, lane3, nullptr);
}

// ChecksumWords(data, words) for an image that equals, in its words from
// `changed_below` on, the image `checkpoints` were recorded from (of the
// same length): only the words below that are taken again, from the last
// checkpoint before them.
inline uint64_t ChecksumWordsFrom(const uint8_t* data, size_t words,
                                  const ChecksumCheckpoints& checkpoints, size_t changed_below) {
  if (words == 0) return ChecksumWords(data, words);
  // Words taken before the first changed one; one checkpoint is recorded
  // before every kChecksumCheckpointWords-th word taken below `words`, up to
  // kMax of them.
  const size_t unchanged = words - std::min(changed_below, words);
  size_t k = unchanged / kChecksumCheckpointWords;
  if (k * kChecksumCheckpointWords >= words) k = (words - 1) / kChecksumCheckpointWords;
  k = std::min(k, ChecksumCheckpoints::kMax - 1);
  const uint64_t* saved = checkpoints.state + 4 * k;
  return checksum_internal::ChecksumFrom<false>(data, words, k * kChecksumCheckpointWords, saved[0],
                                                saved[1], saved[2], saved[3], nullptr);
}

}  // namespace dmidx

#endif  // DMIDX_COMMON_CHECKSUM_H_
