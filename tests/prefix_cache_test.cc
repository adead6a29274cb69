// The radix tree's ART cache store: the deepest cached prefix of a key
// answers, prefixes are exact byte strings (trailing zeros count), one entry
// per prefix and per address, byte budget with least-recently-used eviction,
// checked against a brute-force model, and safe to share between threads.
#include "cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dmidx::cache {
namespace {

using fabric::RemoteAddress;

constexpr size_t kOverhead = PrefixCache::kEntryOverheadBytes;

RemoteAddress Address(uint64_t n) {
  return RemoteAddress::Pool(1, 64 * n);
}

// An image of `size` bytes (at least 16) that names its address and a
// version; the rest is a pattern of both.
std::vector<uint8_t> Image(RemoteAddress address, uint64_t version, size_t size) {
  std::vector<uint8_t> image(std::max<size_t>(size, 16));
  const uint64_t raw = address.raw();
  std::memcpy(image.data(), &raw, 8);
  std::memcpy(image.data() + 8, &version, 8);
  for (size_t i = 16; i < image.size(); ++i)
    image[i] = static_cast<uint8_t>(raw * 31 + version + i);
  return image;
}

RemoteAddress AddressIn(std::span<const uint8_t> image) {
  uint64_t raw = 0;
  std::memcpy(&raw, image.data(), 8);
  return RemoteAddress::FromRaw(raw);
}

struct Found {
  uint32_t prefix_bytes;
  RemoteAddress address;
  std::vector<uint8_t> bytes;
  bool aligned;
};

std::optional<Found> Find(PrefixCache& cache, std::string_view key,
                          size_t max_prefix_bytes = PrefixCache::kMaxPrefixBytes) {
  return cache.FindDeepest(key, max_prefix_bytes, [](const CachedNode& node) {
    return Found{node.prefix_bytes, node.address,
                 std::vector<uint8_t>(node.bytes.begin(), node.bytes.end()),
                 reinterpret_cast<uintptr_t>(node.bytes.data()) % 8 == 0};
  });
}

// The address of the entry answering `key`, null on a miss.
RemoteAddress AnsweringAddress(PrefixCache& cache, std::string_view key) {
  auto found = Find(cache, key);
  return found ? found->address : RemoteAddress();
}

// The prefix length of the entry answering `key`, or -1 on a miss.
int DeepestLength(PrefixCache& cache, std::string_view key,
                  size_t max_prefix_bytes = PrefixCache::kMaxPrefixBytes) {
  auto found = Find(cache, key, max_prefix_bytes);
  return found ? static_cast<int>(found->prefix_bytes) : -1;
}

std::string Bytes(std::initializer_list<uint8_t> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

TEST(PrefixCacheTest, DeepestOfNestedPrefixesAnswers) {
  PrefixCache cache(1 << 20);
  // "abc" first, so "ab" and "a" split its path later.
  const std::vector<std::string> prefixes = {"abc", "", "a", "ab"};
  for (size_t i = 0; i < prefixes.size(); ++i) {
    cache.Put(prefixes[i], Address(i + 1), Image(Address(i + 1), 0, 64));
  }
  const std::map<std::string, std::string> want = {
      {"", ""},          {"x", ""},    {"b", ""},     {"a", "a"},    {"az", "a"},
      {"aa", "a"},       {"ab", "ab"}, {"abd", "ab"}, {"abb", "ab"}, {"abc", "abc"},
      {"abcdef", "abc"}, {"ba", ""},   {"zabc", ""}};
  for (const auto& [key, prefix] : want) {
    auto found = Find(cache, key);
    ASSERT_TRUE(found.has_value()) << key;
    EXPECT_EQ(found->prefix_bytes, prefix.size()) << key;
    const size_t index = std::find(prefixes.begin(), prefixes.end(), prefix) - prefixes.begin();
    EXPECT_EQ(found->address, Address(index + 1)) << key;
  }
  EXPECT_EQ(cache.stats().hits, want.size());
  EXPECT_EQ(cache.stats().misses, 0u);
  EXPECT_EQ(cache.stats().entries, 4u);

  cache.Invalidate(Address(2));  // ""
  EXPECT_EQ(DeepestLength(cache, "x"), -1);
  EXPECT_EQ(DeepestLength(cache, "abx"), 2);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TEST(PrefixCacheTest, TrailingZeroBytesMakeDistinctPrefixes) {
  PrefixCache cache(1 << 20);
  const std::string one = Bytes({1});
  const std::string one_zero = Bytes({1, 0});
  const std::string one_zero_zero = Bytes({1, 0, 0});
  const std::string zero_one = Bytes({0, 1});
  cache.Put(one, Address(1), Image(Address(1), 0, 32));
  cache.Put(one_zero_zero, Address(3), Image(Address(3), 0, 32));
  cache.Put(one_zero, Address(2), Image(Address(2), 0, 32));
  cache.Put(zero_one, Address(4), Image(Address(4), 0, 32));
  EXPECT_EQ(cache.stats().entries, 4u);
  EXPECT_EQ(AnsweringAddress(cache, Bytes({1, 5})), Address(1));
  EXPECT_EQ(AnsweringAddress(cache, Bytes({1, 0, 5})), Address(2));
  EXPECT_EQ(AnsweringAddress(cache, Bytes({1, 0, 0})), Address(3));
  EXPECT_EQ(AnsweringAddress(cache, Bytes({1, 0, 0, 0})), Address(3));
  EXPECT_EQ(AnsweringAddress(cache, Bytes({0, 1, 0})), Address(4));
  EXPECT_EQ(DeepestLength(cache, Bytes({0, 0, 1})), -1);
  EXPECT_EQ(DeepestLength(cache, Bytes({0})), -1);
  cache.Invalidate(Address(2));
  EXPECT_EQ(AnsweringAddress(cache, Bytes({1, 0, 5})), Address(1));
  EXPECT_EQ(AnsweringAddress(cache, Bytes({1, 0, 0, 7})), Address(3));
}

TEST(PrefixCacheTest, MaxPrefixBytesBoundsTheAnswer) {
  PrefixCache cache(1 << 20);
  cache.Put("ab", Address(1), Image(Address(1), 0, 32));
  cache.Put("abcd", Address(2), Image(Address(2), 0, 32));
  EXPECT_EQ(DeepestLength(cache, "abcdef"), 4);
  EXPECT_EQ(DeepestLength(cache, "abcdef", 5), 4);
  EXPECT_EQ(DeepestLength(cache, "abcdef", 4), 4);
  EXPECT_EQ(DeepestLength(cache, "abcdef", 3), 2);  // "abcd"'s segment crosses the bound
  EXPECT_EQ(DeepestLength(cache, "abcdef", 2), 2);
  EXPECT_EQ(DeepestLength(cache, "abcdef", 1), -1);
  EXPECT_EQ(DeepestLength(cache, "abcdef", 0), -1);
  cache.Put("", Address(3), Image(Address(3), 0, 32));
  EXPECT_EQ(DeepestLength(cache, "abcdef", 0), 0);
  EXPECT_EQ(DeepestLength(cache, "abcdef", 1), 0);
}

TEST(PrefixCacheTest, PrefixesUpToTheMaximumLengthOnly) {
  PrefixCache cache(1 << 20);
  const std::string longest(PrefixCache::kMaxPrefixBytes, 'x');
  cache.Put(longest + "x", Address(1), Image(Address(1), 0, 32));
  EXPECT_EQ(cache.stats().entries, 0u);
  cache.Put(longest, Address(2), Image(Address(2), 0, 32));
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(DeepestLength(cache, longest + "yz"), static_cast<int>(longest.size()));
  EXPECT_EQ(DeepestLength(cache, longest.substr(1)), -1);
}

TEST(PrefixCacheTest, PutReplacesTheEntryOfTheSamePrefix) {
  PrefixCache cache(1 << 20);
  const auto old_image = Image(Address(1), 1, 40);
  const auto new_image = Image(Address(2), 2, 96);
  cache.Put("ab", Address(1), old_image);
  cache.Put("ab", Address(2), new_image);
  auto found = Find(cache, "abz");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->address, Address(2));
  EXPECT_EQ(found->bytes, new_image);
  PrefixCacheStats stats = cache.stats();
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_EQ(stats.bytes, new_image.size() + kOverhead);
  EXPECT_EQ(stats.replacements, 1u);
  cache.Invalidate(Address(1));  // gone with the replacement
  EXPECT_EQ(cache.stats().invalidations, 0u);
  EXPECT_TRUE(Find(cache, "abz").has_value());
  // The same node's newer image at the same prefix.
  const auto newer_image = Image(Address(2), 3, 96);
  cache.Put("ab", Address(2), newer_image);
  ASSERT_TRUE(Find(cache, "ab").has_value());
  EXPECT_EQ(Find(cache, "ab")->bytes, newer_image);
  stats = cache.stats();
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_EQ(stats.replacements, 2u);
}

TEST(PrefixCacheTest, PutReplacesTheEntryOfTheSameAddress) {
  PrefixCache cache(1 << 20);
  cache.Put("a", Address(9), Image(Address(9), 0, 32));
  cache.Put("ab", Address(1), Image(Address(1), 0, 32));
  cache.Put("abc", Address(1), Image(Address(1), 1, 32));  // the node's prefix grew
  EXPECT_EQ(AnsweringAddress(cache, "abz"), Address(9)) << "old prefix still answers";
  EXPECT_EQ(AnsweringAddress(cache, "abcd"), Address(1));
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().replacements, 1u);
  // One Put replacing both an entry of its prefix and one of its address.
  cache.Put("a", Address(1), Image(Address(1), 2, 32));
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().replacements, 2u);
  EXPECT_EQ(cache.stats().bytes, 32 + kOverhead);
  EXPECT_EQ(DeepestLength(cache, "abcd"), 1);
  EXPECT_EQ(cache.TrieNodesForTesting(), 2u);  // root and "a"
}

TEST(PrefixCacheTest, InvalidateDropsTheEntryOfTheAddress) {
  PrefixCache cache(1 << 20);
  cache.Put("a", Address(1), Image(Address(1), 0, 32));
  cache.Put("ab", Address(2), Image(Address(2), 0, 64));
  cache.Put("abc", Address(3), Image(Address(3), 0, 32));
  cache.Invalidate(Address(2));
  cache.Invalidate(Address(2));  // absent: no effect
  cache.Invalidate(Address(7));
  EXPECT_EQ(DeepestLength(cache, "abz"), 1);
  EXPECT_EQ(DeepestLength(cache, "abcz"), 3);
  EXPECT_EQ(cache.TrieNodesForTesting(), 3u);  // root, "a", "a" + "bc": "b" merged away
  PrefixCacheStats stats = cache.stats();
  EXPECT_EQ(stats.invalidations, 1u);
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.bytes, 2 * (32 + kOverhead));
  cache.Invalidate(Address(1));
  cache.Invalidate(Address(3));
  stats = cache.stats();
  EXPECT_EQ(stats.entries, 0u);
  EXPECT_EQ(stats.bytes, 0u);
  EXPECT_EQ(stats.invalidations, 3u);
  EXPECT_EQ(cache.TrieNodesForTesting(), 1u) << "empty trie nodes were kept";
  EXPECT_EQ(DeepestLength(cache, "abc"), -1);
}

TEST(PrefixCacheTest, EvictsTheLeastRecentlyUsedWithExactAccounting) {
  const size_t charge = 64 + kOverhead;
  PrefixCache cache(3 * charge + 10);
  cache.Put("a", Address(1), Image(Address(1), 0, 64));
  cache.Put("b", Address(2), Image(Address(2), 0, 64));
  cache.Put("c", Address(3), Image(Address(3), 0, 64));
  EXPECT_EQ(cache.stats().bytes, 3 * charge);
  ASSERT_EQ(DeepestLength(cache, "a"), 1);  // recency now, most recent first: a, c, b
  cache.Put("d", Address(4), Image(Address(4), 0, 64));
  PrefixCacheStats stats = cache.stats();
  EXPECT_EQ(stats.entries, 3u);
  EXPECT_EQ(stats.bytes, 3 * charge);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(DeepestLength(cache, "b"), -1);  // the least recent: evicted
  ASSERT_EQ(DeepestLength(cache, "a"), 1);
  // Recency: a, d, c. An image larger than one entry needs two entries' room.
  cache.Put("e", Address(5), Image(Address(5), 0, 64 + charge));
  stats = cache.stats();
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.bytes, charge + (64 + charge + kOverhead));
  EXPECT_EQ(stats.evictions, 3u);
  EXPECT_EQ(DeepestLength(cache, "c"), -1);
  EXPECT_EQ(DeepestLength(cache, "d"), -1);
  EXPECT_EQ(DeepestLength(cache, "a"), 1);
  EXPECT_EQ(DeepestLength(cache, "e"), 1);
  // A replacement frees its bytes before anything is evicted.
  cache.Put("a", Address(1), Image(Address(1), 1, 64));
  stats = cache.stats();
  EXPECT_EQ(stats.evictions, 3u);
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(cache.TrieNodesForTesting(), 3u);  // evicted prefixes' nodes are gone
}

TEST(PrefixCacheTest, CapacityBelowOneEntryCachesNothing) {
  PrefixCache none(0);
  none.Put("", Address(1), Image(Address(1), 0, 16));
  none.Put("a", Address(2), Image(Address(2), 0, 16));
  EXPECT_EQ(none.stats().entries, 0u);
  EXPECT_EQ(none.stats().bytes, 0u);
  EXPECT_EQ(DeepestLength(none, "a"), -1);
  EXPECT_EQ(none.stats().misses, 1u);
  EXPECT_EQ(none.TrieNodesForTesting(), 1u);

  PrefixCache exact(kOverhead + 64);
  exact.Put("a", Address(1), Image(Address(1), 0, 65));  // one byte too many
  EXPECT_EQ(exact.stats().entries, 0u);
  exact.Put("a", Address(1), Image(Address(1), 0, 64));
  EXPECT_EQ(exact.stats().entries, 1u);
  EXPECT_EQ(exact.stats().bytes, kOverhead + 64);
  exact.Put("b", Address(2), Image(Address(2), 0, 64));
  EXPECT_EQ(exact.stats().entries, 1u);
  EXPECT_EQ(exact.stats().evictions, 1u);
  EXPECT_EQ(DeepestLength(exact, "b"), 1);
}

TEST(PrefixCacheTest, VisitorSeesTheExactBytesEightByteAligned) {
  PrefixCache cache(1 << 20);
  for (size_t size : {0, 1, 7, 8, 9, 63, 100, 1000, 2056}) {
    std::vector<uint8_t> image(size);
    for (size_t i = 0; i < size; ++i)
      image[i] = static_cast<uint8_t>(size * 7 + i * 13);
    // Copy from an odd address: the cache's copy must still be aligned.
    std::vector<uint8_t> unaligned(size + 1);
    if (size > 0) std::memcpy(unaligned.data() + 1, image.data(), size);
    const std::string prefix = std::to_string(size) + "p";
    cache.Put(prefix, Address(size + 1), std::span<const uint8_t>(unaligned).subspan(1));
    const size_t visited = *cache.FindDeepest(prefix + "!", 255, [&](const CachedNode& node) {
      EXPECT_EQ(node.prefix_bytes, prefix.size());
      EXPECT_EQ(node.address, Address(size + 1));
      EXPECT_EQ(std::vector<uint8_t>(node.bytes.begin(), node.bytes.end()), image);
      if (size > 0) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(node.bytes.data()) % 8, 0u);
      }
      return node.bytes.size();
    });
    EXPECT_EQ(visited, size);
  }
  EXPECT_EQ(cache.stats().hits, 9u);
}

// The reference: a map of prefix -> entry, the deepest prefix by trying
// every length, and (when bounded) least-recently-used eviction over a list.
class Model {
 public:
  explicit Model(size_t capacity) : capacity_(capacity) {}

  struct Entry {
    RemoteAddress address;
    std::vector<uint8_t> image;
    std::list<std::string>::iterator recency;
  };

  void Put(const std::string& prefix, RemoteAddress address, std::vector<uint8_t> image) {
    const size_t charge = image.size() + kOverhead;
    if (prefix.size() > PrefixCache::kMaxPrefixBytes || charge > capacity_) return;
    bool replaced = Erase(prefix);
    for (const auto& [other, entry] : entries_) {
      if (entry.address == address) {
        replaced = Erase(std::string(other));
        break;
      }
    }
    if (replaced) ++stats.replacements;
    while (stats.bytes + charge > capacity_) {
      Erase(std::string(recency_.back()));
      ++stats.evictions;
    }
    recency_.push_front(prefix);
    entries_[prefix] = Entry{address, std::move(image), recency_.begin()};
    stats.bytes += charge;
    ++stats.entries;
  }

  const std::pair<const std::string, Entry>* FindDeepest(const std::string& key, size_t max) {
    for (size_t length = std::min(key.size(), max) + 1; length-- > 0;) {
      auto it = entries_.find(key.substr(0, length));
      if (it == entries_.end()) continue;
      recency_.splice(recency_.begin(), recency_, it->second.recency);
      ++stats.hits;
      return &*it;
    }
    ++stats.misses;
    return nullptr;
  }

  void Invalidate(RemoteAddress address) {
    for (const auto& [prefix, entry] : entries_) {
      if (entry.address == address) {
        Erase(std::string(prefix));
        ++stats.invalidations;
        return;
      }
    }
  }

  const std::map<std::string, Entry>& entries() const { return entries_; }

  // The nodes a path-compressed trie of the prefixes has: the root, and
  // each prefix of an entry's prefix that is an entry's or where two
  // entries' prefixes part.
  size_t TrieNodes() const {
    std::set<std::string> nodes = {""};
    for (const auto& [prefix, entry] : entries_) {
      for (size_t length = 1; length <= prefix.size(); ++length) {
        const std::string node = prefix.substr(0, length);
        std::set<char> next_bytes;
        for (auto it = entries_.upper_bound(node);
             it != entries_.end() && it->first.starts_with(node); ++it) {
          next_bytes.insert(it->first[length]);
        }
        if (entries_.contains(node) || next_bytes.size() >= 2) nodes.insert(node);
      }
    }
    return nodes.size();
  }

  PrefixCacheStats stats;

 private:
  bool Erase(const std::string& prefix) {
    auto it = entries_.find(prefix);
    if (it == entries_.end()) return false;
    stats.bytes -= it->second.image.size() + kOverhead;
    --stats.entries;
    recency_.erase(it->second.recency);
    entries_.erase(it);
    return true;
  }

  const size_t capacity_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> recency_;  // most recent first
};

void ExpectSameStats(const PrefixCacheStats& got, const PrefixCacheStats& want) {
  EXPECT_EQ(got.hits, want.hits);
  EXPECT_EQ(got.misses, want.misses);
  EXPECT_EQ(got.entries, want.entries);
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(got.evictions, want.evictions);
  EXPECT_EQ(got.invalidations, want.invalidations);
  EXPECT_EQ(got.replacements, want.replacements);
}

// Short strings over {0, 1, 2, 'a'} (so prefixes nest, share segments and
// differ by trailing zeros), now and then a long one. With `wide_at` set,
// the byte at that position is any of the 256, so the trie nodes there
// have dozens of children (and find them through a direct table).
std::string RandomString(std::mt19937_64& rng, size_t max_length,
                         std::optional<size_t> wide_at = std::nullopt) {
  const size_t length = rng() % 50 == 0 ? rng() % 300 : rng() % (max_length + 1);
  std::string bytes(length, '\0');
  for (char& byte : bytes)
    byte = "\0\1\2a"[rng() % 4];
  if (wide_at && *wide_at < bytes.size()) bytes[*wide_at] = static_cast<char>(rng() % 256);
  return bytes;
}

// Runs `operations` random Puts, Invalidates and FindDeepests on a cache and
// the model, and checks every answer and the counters. With `exact` false
// only the weaker property is checked: an answer is a miss or the entry the
// model holds for that prefix of the key.
// With `wide_at`, prefixes and keys spread that byte over all 256 values
// (RandomString), addresses range over 400 instead of 60 (room for wide
// nodes), and *most_direct gets the most trie nodes that had a direct
// table at once.
void RunAgainstModel(size_t capacity, uint64_t seed, int operations, bool exact,
                     std::optional<size_t> wide_at = std::nullopt, size_t* most_direct = nullptr) {
  const uint64_t addresses = wide_at ? 400 : 60;
  PrefixCache cache(capacity);
  // Checking only the weaker property, the model never evicts: what the
  // cache answers must be held there.
  Model model(exact ? capacity : SIZE_MAX);
  std::mt19937_64 rng(seed);
  uint64_t version = 0;
  for (int op = 0; op < operations; ++op) {
    const RemoteAddress address = Address(1 + rng() % addresses);
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 4) {
      const std::string prefix = RandomString(rng, 6, wide_at);
      auto image = Image(address, ++version, 16 + 8 * (rng() % 40) + rng() % 8);
      cache.Put(prefix, address, image);
      model.Put(prefix, address, std::move(image));
    } else if (kind < 5) {
      cache.Invalidate(address);
      model.Invalidate(address);
    } else {
      const std::string key = RandomString(rng, 9, wide_at);
      const size_t max = rng() % 4 == 0 ? rng() % 8 : PrefixCache::kMaxPrefixBytes;
      auto found = Find(cache, key, max);
      auto want = model.FindDeepest(key, max);
      if (exact) {
        ASSERT_EQ(found.has_value(), want != nullptr) << "op " << op;
        if (!found) continue;
        EXPECT_EQ(found->prefix_bytes, want->first.size()) << "op " << op;
        EXPECT_EQ(found->address, want->second.address) << "op " << op;
        EXPECT_EQ(found->bytes, want->second.image) << "op " << op;
      } else if (found) {
        ASSERT_LE(found->prefix_bytes, std::min(key.size(), max)) << "op " << op;
        auto held = model.entries().find(key.substr(0, found->prefix_bytes));
        ASSERT_NE(held, model.entries().end()) << "op " << op << ": answered a dropped prefix";
        EXPECT_EQ(found->address, held->second.address) << "op " << op;
        EXPECT_EQ(found->bytes, held->second.image) << "op " << op;
      }
      if (found) {
        EXPECT_TRUE(found->aligned);
      }
    }
    const PrefixCacheStats stats = cache.stats();
    ASSERT_LE(stats.bytes, capacity);
    ASSERT_LE(cache.TrieNodesForTesting(), 2 * stats.entries + 1) << "op " << op;
    if (most_direct != nullptr) {
      *most_direct = std::max(*most_direct, cache.DirectTablesForTesting());
    }
    if (op % 50 == 0 && exact) {
      ASSERT_EQ(cache.TrieNodesForTesting(), model.TrieNodes()) << "op " << op;
    }
    if (exact) {
      ExpectSameStats(stats, model.stats);
      ASSERT_FALSE(::testing::Test::HasFailure()) << "op " << op;
    }
  }
  // Every entry the model holds is still cached, under its prefix.
  for (const auto& [prefix, entry] : model.entries()) {
    if (!exact) break;
    auto found = Find(cache, prefix);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->prefix_bytes, prefix.size());
    EXPECT_EQ(found->address, entry.address);
  }
  for (uint64_t n = 1; n <= addresses; ++n)
    cache.Invalidate(Address(n));
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.TrieNodesForTesting(), 1u);
}

TEST(PrefixCacheTest, MatchesTheModelWithoutEviction) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    RunAgainstModel(size_t{1} << 30, seed, 5000, /*exact=*/true);
  }
}

// Nodes of 32 children or more find them through a 256-entry table, kept
// in step as children come and go. Wide at byte 0: the root has the table.
// Wide at byte 1: the nodes below the root do, and they lose children, drop
// their tables, merge into their last child and are pruned as entries go
// (evictions, invalidations).
TEST(PrefixCacheTest, MatchesTheModelWithWideNodes) {
  for (size_t wide_at : {0, 1}) {
    const uint64_t seed = 11 + wide_at;
    SCOPED_TRACE(::testing::Message() << "wide at " << wide_at << ", seed " << seed);
    size_t most_direct = 0;
    RunAgainstModel(size_t{1} << 30, seed, 8000, /*exact=*/true, wide_at, &most_direct);
    EXPECT_GE(most_direct, wide_at == 0 ? 1u : 2u);
    most_direct = 0;
    RunAgainstModel(300 * (kOverhead + 200), seed, 8000, /*exact=*/true, wide_at, &most_direct);
    EXPECT_GE(most_direct, 1u);
  }
}

TEST(PrefixCacheTest, AnswersAreMissesOrCurrentEntriesUnderEviction) {
  for (uint64_t seed : {4, 5, 6}) {
    SCOPED_TRACE(seed);
    RunAgainstModel(12 * (kOverhead + 200), seed, 5000, /*exact=*/false);
  }
}

TEST(PrefixCacheTest, EvictsExactlyLikeTheModel) {
  for (uint64_t seed : {7, 8}) {
    SCOPED_TRACE(seed);
    RunAgainstModel(12 * (kOverhead + 200), seed, 5000, /*exact=*/true);
  }
}

uint64_t Hash(std::string_view bytes) {  // FNV-1a
  uint64_t hash = 14695981039346656037ull;
  for (char byte : bytes)
    hash = (hash ^ static_cast<uint8_t>(byte)) * 1099511628211ull;
  return hash;
}

// Threads putting, finding and invalidating at once over shared prefixes:
// every answer is an image of the address it is cached under, put for the
// prefix of the key it answers with (the image names its address and its
// prefix's hash), and the budget holds throughout.
TEST(PrefixCacheTest, SharedBetweenThreads) {
  const size_t capacity = 40 * (kOverhead + 64);
  PrefixCache cache(capacity);
  std::atomic<int> wrong{0};
  std::atomic<uint64_t> finds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 20000; ++i) {
        const std::string key = RandomString(rng, 6);
        switch (rng() % 4) {
          case 0: {
            const std::string prefix = key.substr(0, rng() % (key.size() + 1));
            // The address is a function of the prefix (several prefixes
            // share one), the image names the prefix by its hash.
            const uint64_t hash = Hash(prefix);
            const RemoteAddress address = Address(1 + hash % 500);
            cache.Put(prefix, address, Image(address, hash, 64));
            break;
          }
          case 1:
            cache.Invalidate(Address(1 + rng() % 500));
            break;
          default: {
            finds.fetch_add(1, std::memory_order_relaxed);
            const size_t max = rng() % 8;
            cache.FindDeepest(key, max, [&](const CachedNode& node) {
              uint64_t hash = 0;
              std::memcpy(&hash, node.bytes.data() + 8, 8);
              if (node.bytes.size() != 64 || AddressIn(node.bytes) != node.address ||
                  node.prefix_bytes > std::min(key.size(), max) ||
                  hash != Hash(key.substr(0, node.prefix_bytes))) {
                wrong.fetch_add(1, std::memory_order_relaxed);
              }
              return 0;
            });
            break;
          }
        }
        if (i % 1000 == 0 && cache.stats().bytes > capacity) {
          wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(wrong.load(), 0);
  const PrefixCacheStats stats = cache.stats();
  EXPECT_EQ(stats.hits + stats.misses, finds.load());
  EXPECT_GT(stats.hits, 0u);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_EQ(stats.bytes, stats.entries * (64 + kOverhead));
  EXPECT_LE(stats.bytes, capacity);
  EXPECT_LE(cache.TrieNodesForTesting(), 2 * stats.entries + 1);
}

}  // namespace
}  // namespace dmidx::cache
