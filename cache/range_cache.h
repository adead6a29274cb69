// A compute node's cache of remote node images, keyed by the key range each
// image covers at its level: bounded in bytes, least recently used first
// out, shared by all threads of the node. It knows nothing of any index's
// layout: the index says, when it puts an image, its level and its range
// [low, high), and routes inside an image itself (the B+tree's use is in
// btree/btree_cache.h).
//
// A lookup visits the lowest cached level whose range covers the key; the
// visitor runs under the cache's lock, on the cached bytes, so nothing is
// copied. Entries can be stale (the node split or moved since); the index
// detects that when the node it reads next does not fit and calls
// Invalidate(). Put() of a newer image of a range drops the entries of the
// same level that overlap it, so one range never has two answers.
//
// The byte budget, least-recently-used eviction and the one-entry-per-address
// rule are the cache core's (cache/cache_core.h), shared with PrefixCache.
//
// Thread-safe: one lock (a visit also updates recency), a spin lock
// (lib/common/spin_lock.h) since a lookup holds it for a few hundred
// instructions. Shard by level if it shows up in profiles.
#ifndef DMIDX_CACHE_RANGE_CACHE_H_
#define DMIDX_CACHE_RANGE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>  // std::lock_guard
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "cache/cache_core.h"
#include "lib/common/key_compare.h"
#include "lib/common/spin_lock.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::cache {

struct RangeCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t evictions = 0;
  uint64_t invalidations = 0;
  uint64_t expirations = 0;  // dropped by HoldEpochs: read too many epochs ago
};

// The range an image covers: [low, high); low "" is minus infinity, and no
// high is plus infinity.
struct KeyRange {
  std::string_view low;
  std::optional<std::string_view> high;
};

// One cached image as a visitor sees it.
struct CachedImage {
  fabric::RemoteAddress address;
  uint8_t level;
  std::span<const uint8_t> bytes;  // 8-byte aligned
  // The epoch its image was read in (cache_core.h): an operation that
  // follows an address from it holds this epoch until it ends (the entry
  // may be dropped meanwhile: runtime/epochs.h).
  uint64_t epoch;
};

class RangeCache {
 public:
  // Bookkeeping each entry is charged beyond its image's bytes.
  static constexpr size_t kEntryOverheadBytes = kCacheEntryOverheadBytes;

  // A capacity below one entry caches nothing.
  explicit RangeCache(size_t capacity_bytes);
  ~RangeCache();
  RangeCache(const RangeCache&) = delete;
  RangeCache& operator=(const RangeCache&) = delete;

  // Caches a copy of `image`, the node at `address`, which covers `range`
  // at `level` (the caller verified it). Replaces the address's old entry.
  // `epoch`: the epoch the image was read in (cache_core.h).
  void Put(fabric::RemoteAddress address, uint8_t level, const KeyRange& range,
           std::span<const uint8_t> image, uint64_t epoch = 0);

  // Drops the entries read before epoch `keep_from` and returns the oldest
  // epoch an entry keeps (kNoEpoch: none). For the compute node's keeper
  // (runtime/epochs.h, EpochTable::AddHolder).
  uint64_t HoldEpochs(uint64_t keep_from);

  // Calls visit(image) for the lowest cached level at or above `min_level`
  // whose range covers `key`, and returns what it returned; nullopt when no
  // such entry is cached. `visit` runs under the cache's lock and must not
  // call back into the cache.
  template <typename Visit>
  auto Find(std::string_view key, uint8_t min_level, Visit&& visit) {
    return VisitEntry(key, min_level, /*exact_level=*/false, visit);
  }
  // The same, for level `level` only.
  template <typename Visit>
  auto FindAt(std::string_view key, uint8_t level, Visit&& visit) {
    return VisitEntry(key, level, /*exact_level=*/true, visit);
  }

  // Drops the entry of `address` (found stale). No-op if none.
  void Invalidate(fabric::RemoteAddress address);

  RangeCacheStats stats() const;

 private:
  struct Entry;
  using Level = std::map<std::string, Entry*, KeyLess>;  // by low bound

  template <typename Visit>
  auto VisitEntry(std::string_view key, uint8_t level, bool exact_level, Visit& visit)
      -> std::optional<std::invoke_result_t<Visit&, const CachedImage&>> {
    std::lock_guard<SpinLock> guard(lock_);
    const Entry* entry = FindLocked(key, level, exact_level);
    if (entry == nullptr) return std::nullopt;
    return visit(ImageOf(*entry));
  }
  // Also makes the entry found the most recent, and counts the hit or miss.
  const Entry* FindLocked(std::string_view key, uint8_t level, bool exact_level);
  static CachedImage ImageOf(const Entry& entry);
  // The core's callback: takes `entry` out of levels_.
  void Unindex(Entry& entry);

  mutable SpinLock lock_;
  CacheCore<Entry> core_;            // guarded by lock_
  std::map<uint8_t, Level> levels_;  // guarded by lock_
};

}  // namespace dmidx::cache

#endif  // DMIDX_CACHE_RANGE_CACHE_H_
