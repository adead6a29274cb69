// The node checksum (lib/common/checksum.h): the fast four-register form
// computes exactly the hash its comment defines (checked against a plain
// implementation of that definition), changes that a torn READ makes
// (one word changed, words swapped, words of two versions mixed) change it,
// and the one other value of a word that still matches (the stored checksum
// drops the hash's low bit) is found by undoing the hash.
#include "lib/common/checksum.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace dmidx {
namespace {

// The definition, written plainly: words are taken last first, the i-th
// taken goes to lane i % 4; each step is
// state = rotl((state ^ word) * B, 31); the lanes fold in order with a
// multiply by A before each; then an avalanche, and the low bit set.
constexpr uint64_t kA = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kB = 0xc2b2ae3d27d4eb4full;

uint64_t Mix(uint64_t state, uint64_t word) {
  state = (state ^ word) * kB;
  return (state << 31) | (state >> 33);
}

std::array<uint64_t, 4> InitialLanes(size_t words) {
  return {0x27d4eb2f165667c5ull ^ (words * kB), 0x165667b19e3779f9ull, 0x85ebca77c2b2ae63ull,
          0xff51afd7ed558ccdull};
}

// The word taken i-th (the last word first).
uint64_t Taken(const std::vector<uint64_t>& words, size_t i) {
  return words[words.size() - 1 - i];
}

std::array<uint64_t, 4> Lanes(const std::vector<uint64_t>& words) {
  std::array<uint64_t, 4> lane = InitialLanes(words.size());
  for (size_t i = 0; i < words.size(); ++i)
    lane[i % 4] = Mix(lane[i % 4], Taken(words, i));
  return lane;
}

// The folds of the lanes: fold 0 is lane 0, fold k = Mix(fold k-1 * A, lane k).
std::array<uint64_t, 4> Folds(const std::array<uint64_t, 4>& lane) {
  std::array<uint64_t, 4> fold = {lane[0]};
  for (int l = 1; l < 4; ++l)
    fold[l] = Mix(fold[l - 1] * kA, lane[l]);
  return fold;
}

// The 64-bit hash before its low bit is set.
uint64_t FullHash(const std::vector<uint64_t>& words) {
  uint64_t state = Folds(Lanes(words))[3];
  state ^= state >> 29;
  state *= kA;
  state ^= state >> 32;
  return state;
}

uint64_t ReferenceChecksum(const std::vector<uint64_t>& words) {
  return FullHash(words) | 1;
}

uint64_t Checksum(const std::vector<uint64_t>& words) {
  return ChecksumWords(reinterpret_cast<const uint8_t*>(words.data()), words.size());
}

std::vector<uint64_t> RandomWords(std::mt19937_64& rng, size_t count) {
  std::vector<uint64_t> words(count);
  for (uint64_t& word : words)
    word = rng();
  return words;
}

TEST(ChecksumTest, MatchesItsDefinitionAtEverySize) {
  std::mt19937_64 rng(1);
  for (size_t count = 0; count <= 300; ++count) {
    const std::vector<uint64_t> words = RandomWords(rng, count);
    EXPECT_EQ(Checksum(words), ReferenceChecksum(words)) << count << " words";
  }
}

TEST(ChecksumTest, IsNeverZero) {
  std::mt19937_64 rng(2);
  for (size_t count : {0, 1, 127, 128}) {
    EXPECT_NE(Checksum(std::vector<uint64_t>(count, 0)), 0u);
    EXPECT_NE(Checksum(RandomWords(rng, count)), 0u);
  }
}

TEST(ChecksumTest, OneChangedWordChangesIt) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint64_t> words = RandomWords(rng, 127);
    const uint64_t before = Checksum(words);
    const size_t i = rng() % words.size();
    // A single flipped bit, or a whole new word.
    words[i] ^= trial % 2 == 0 ? uint64_t{1} << (rng() % 64) : rng() | 1;
    ASSERT_NE(Checksum(words), before) << "trial " << trial << " word " << i;
  }
}

TEST(ChecksumTest, SwappedWordsChangeIt) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint64_t> words = RandomWords(rng, 127);
    const uint64_t before = Checksum(words);
    const size_t i = rng() % words.size();
    size_t j = rng() % words.size();
    if (j == i) j = (i + 1) % words.size();
    std::swap(words[i], words[j]);
    ASSERT_NE(Checksum(words), before) << "trial " << trial << " words " << i << ", " << j;
  }
}

// A torn READ: some words from the old version, the rest from the new one
// (which differs from the old in a few words, as an entry write does).
TEST(ChecksumTest, MixesOfTwoVersionsMatchNeither) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20000; ++trial) {
    const std::vector<uint64_t> old_words = RandomWords(rng, 127);
    std::vector<uint64_t> new_words = old_words;
    const size_t changed = 1 + rng() % 4;
    for (size_t c = 0; c < changed; ++c)
      new_words[rng() % new_words.size()] = rng();
    std::vector<uint64_t> mixed = old_words;
    bool any_new = false, any_old = false;
    for (size_t i = 0; i < mixed.size(); ++i) {
      if (old_words[i] == new_words[i]) continue;
      if (rng() % 2 == 0) {
        mixed[i] = new_words[i];
        any_new = true;
      } else {
        any_old = true;
      }
    }
    if (!any_new || !any_old) continue;  // not a mix
    const uint64_t sum = Checksum(mixed);
    ASSERT_NE(sum, Checksum(old_words)) << "trial " << trial;
    ASSERT_NE(sum, Checksum(new_words)) << "trial " << trial;
  }
}

// The inverse of the odd `a` modulo 2^64 (Newton's iteration doubles the
// bits that are right; an odd number is its own inverse to 3 bits).
uint64_t InverseOf(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; ++i)
    x *= 2 - a * x;
  return x;
}

// Mix(state, word) == out: given out and one of state and word, the other.
uint64_t Unmix(uint64_t out, uint64_t known) {
  return (((out >> 31) | (out << 33)) * InverseOf(kB)) ^ known;
}

// The value of words[index] that makes the full hash of `words` its own
// with the low bit flipped: every step from that word to the hash is
// undone in turn.
uint64_t ValueFlippingTheLowBit(const std::vector<uint64_t>& words, size_t index) {
  const size_t taken = words.size() - 1 - index;
  const size_t lane = taken % 4;
  const std::array<uint64_t, 4> lanes = Lanes(words);
  const std::array<uint64_t, 4> folds = Folds(lanes);
  // The avalanche, undone.
  uint64_t state = FullHash(words) ^ 1;
  state ^= state >> 32;
  state *= InverseOf(kA);
  state ^= (state >> 29) ^ (state >> 58);
  // The folds after this lane's, then its own.
  for (size_t l = 3; l > lane; --l)
    state = Unmix(state, lanes[l]) * InverseOf(kA);
  if (lane > 0) state = Unmix(state, folds[lane - 1] * kA);
  // The lane's steps after the word, last first.
  size_t last = taken;
  while (last + 4 < words.size())
    last += 4;
  for (size_t i = last; i > taken; i -= 4)
    state = Unmix(state, Taken(words, i));
  // The word itself, from the lane's state before it.
  uint64_t before = InitialLanes(words.size())[lane];
  for (size_t i = lane; i < taken; i += 4)
    before = Mix(before, Taken(words, i));
  return Unmix(state, before);
}

// A changed word always changes the 64-bit hash (each step from it to the
// hash is a bijection), but the stored checksum sets the low bit: exactly
// one other value of any word matches, the one whose hash differs from the
// image's in that bit alone (docs/btree.md).
TEST(ChecksumTest, OneOtherValueOfAWordMatchesThroughTheDroppedBit) {
  std::mt19937_64 rng(6);
  for (size_t count : {1, 2, 5, 16, 17, 127, 128}) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<uint64_t> words = RandomWords(rng, count);
      const size_t index = rng() % count;
      std::vector<uint64_t> changed = words;
      changed[index] = ValueFlippingTheLowBit(words, index);
      ASSERT_NE(changed[index], words[index]) << count << " words, word " << index;
      EXPECT_EQ(FullHash(changed), FullHash(words) ^ 1) << count << " words, word " << index;
      EXPECT_EQ(Checksum(changed), Checksum(words)) << count << " words, word " << index;
    }
  }
}

// Resuming from the checkpoints of an image that agrees with the changed
// one from some word on gives the full hash, for every length around the
// checkpoint spacing and beyond the checkpoints kept, and every bound of
// the changed words (none changed and all changed included).
TEST(ChecksumTest, ResumedFromCheckpointsEqualsTheFullHash) {
  std::mt19937_64 rng(7);
  const size_t limit = kChecksumCheckpointWords * ChecksumCheckpoints::kMax + 40;
  for (size_t words :
       {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17},
        size_t{31}, size_t{33}, size_t{127}, size_t{511}, size_t{512}, size_t{513}, limit}) {
    std::vector<uint64_t> before(words);
    for (uint64_t& word : before)
      word = rng();
    ChecksumCheckpoints checkpoints;
    const uint64_t full_before =
        ChecksumWords(reinterpret_cast<const uint8_t*>(before.data()), words, &checkpoints);
    ASSERT_EQ(full_before, Checksum(before)) << words;
    std::vector<size_t> bounds;
    for (size_t below = 0; below <= words; below += (words > 64 ? 7 : 1))
      bounds.push_back(below);
    bounds.push_back(words);  // all changed
    for (size_t below : bounds) {
      std::vector<uint64_t> after = before;
      for (size_t i = 0; i < below; i += 3)
        after[below - 1 - i] ^= rng() | 1;
      const uint64_t resumed = ChecksumWordsFrom(reinterpret_cast<const uint8_t*>(after.data()),
                                                 words, checkpoints, below);
      ASSERT_EQ(resumed, ReferenceChecksum(after)) << words << " words, changed below " << below;
    }
    // A bound past the end means all may have changed.
    std::vector<uint64_t> all = before;
    for (uint64_t& word : all)
      word ^= rng() | 1;
    EXPECT_EQ(ChecksumWordsFrom(reinterpret_cast<const uint8_t*>(all.data()), words, checkpoints,
                                words + 5),
              ReferenceChecksum(all))
        << words;
  }
}

}  // namespace
}  // namespace dmidx
