// The node checksum (lib/common/checksum.h): the fast four-register form
// computes exactly the hash its comment defines (checked against a plain
// implementation of that definition), and changes that a torn READ makes
// (one word changed, words swapped, words of two versions mixed) change it.
#include "lib/common/checksum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dmidx {
namespace {

// The definition, written plainly: words are taken last first, the i-th
// taken goes to lane i % 4; each step is
// state = rotl((state ^ word) * B, 31); the lanes fold in order with a
// multiply by A before each; then an avalanche, and the low bit set.
uint64_t ReferenceChecksum(const std::vector<uint64_t>& words) {
  constexpr uint64_t kA = 0x9e3779b97f4a7c15ull;
  constexpr uint64_t kB = 0xc2b2ae3d27d4eb4full;
  auto mix = [](uint64_t state, uint64_t word) {
    state = (state ^ word) * kB;
    return (state << 31) | (state >> 33);
  };
  uint64_t lane[4] = {0x27d4eb2f165667c5ull ^ (words.size() * kB), 0x165667b19e3779f9ull,
                      0x85ebca77c2b2ae63ull, 0xff51afd7ed558ccdull};
  for (size_t i = 0; i < words.size(); ++i)
    lane[i % 4] = mix(lane[i % 4], words[words.size() - 1 - i]);
  uint64_t state = lane[0];
  for (int l = 1; l < 4; ++l)
    state = mix(state * kA, lane[l]);
  state ^= state >> 29;
  state *= kA;
  state ^= state >> 32;
  return state | 1;
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
