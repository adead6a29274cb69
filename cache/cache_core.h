// What every compute-node cache of node images shares (RangeCache,
// PrefixCache): entries that own an 8-byte aligned copy of one remote node's
// image, at most one entry per remote address; a byte budget, each entry
// costing its image plus kCacheEntryOverheadBytes; least-recently-used
// eviction to make room for a new entry; and the counters.
//
// The owning cache keeps its own index over the entries (key ranges per
// level, a trie of prefixes) and gives the core a callback that takes one
// entry out of that index. The core calls it for every entry it drops,
// whichever way the entry goes (evicted, invalidated, replaced), before
// freeing it, so the index never points at a freed entry.
//
// Not thread-safe: the owner's lock guards every call (Admits() excepted).
#ifndef DMIDX_CACHE_CACHE_CORE_H_
#define DMIDX_CACHE_CACHE_CORE_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "lib/fabric/remote_address.h"

namespace dmidx::cache {

// Bookkeeping each entry is charged beyond its image's bytes.
inline constexpr size_t kCacheEntryOverheadBytes = 128;

struct CacheCoreStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t entries = 0;
  uint64_t bytes = 0;  // sum of the entries' charges
  uint64_t evictions = 0;
  uint64_t invalidations = 0;
  uint64_t replacements = 0;
};

// The part of an entry the core owns; a cache's entry type derives from it.
class CacheEntry {
 public:
  // Copies `image`.
  CacheEntry(fabric::RemoteAddress address, std::span<const uint8_t> image);
  CacheEntry(const CacheEntry&) = delete;
  CacheEntry& operator=(const CacheEntry&) = delete;

  fabric::RemoteAddress address() const { return address_; }
  std::span<const uint8_t> bytes() const {  // 8-byte aligned
    return {reinterpret_cast<const uint8_t*>(words_.get()), image_bytes_};
  }
  size_t charge() const { return image_bytes_ + kCacheEntryOverheadBytes; }
  // Copies `image`, of the entry's size, over the entry's bytes (a newer
  // image of the same node: no allocation). Under the owner's lock.
  void Overwrite(std::span<const uint8_t> image) {
    assert(image.size() == image_bytes_);
    if (!image.empty()) std::memcpy(words_.get(), image.data(), image.size());
  }

 private:
  friend class LruBudget;

  const fabric::RemoteAddress address_;
  const size_t image_bytes_;
  const std::unique_ptr<uint64_t[]> words_;  // the image, zero-padded to whole words
  // The recency list: LruBudget's, null at its ends and when not listed.
  CacheEntry* newer_ = nullptr;
  CacheEntry* older_ = nullptr;
};

// The byte budget and the recency list, over entries someone else owns.
class LruBudget {
 public:
  explicit LruBudget(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Whether an image of `image_bytes` fits the budget at all. Reads only
  // the capacity, which never changes.
  bool Admits(size_t image_bytes) const {
    return image_bytes <= capacity_bytes_ &&
           capacity_bytes_ - image_bytes >= kCacheEntryOverheadBytes;
  }
  // Lists `entry` as the most recent and counts its bytes.
  void Add(CacheEntry& entry);
  // Unlists `entry` and uncounts it.
  void Remove(CacheEntry& entry);
  // Makes `entry` the most recent.
  void Touch(CacheEntry& entry);
  // The least recent entry while `charge` more bytes would not fit; null
  // once they fit.
  CacheEntry* VictimFor(size_t charge) const;

  CacheCoreStats& stats() { return stats_; }
  const CacheCoreStats& stats() const { return stats_; }

 private:
  const size_t capacity_bytes_;
  CacheEntry* newest_ = nullptr;
  CacheEntry* oldest_ = nullptr;
  CacheCoreStats stats_;
};

// The entries of one cache, of type Entry (derived from CacheEntry), owned
// by remote address.
template <typename Entry>
class CacheCore {
 public:
  // Takes `entry` out of the owner's index; called before an entry is freed.
  using Unindex = std::function<void(Entry& entry)>;

  // A capacity below one entry caches nothing.
  CacheCore(size_t capacity_bytes, Unindex unindex)
      : budget_(capacity_bytes), unindex_(std::move(unindex)) {}
  CacheCore(const CacheCore&) = delete;
  CacheCore& operator=(const CacheCore&) = delete;

  // Callable without the owner's lock (reads only the fixed capacity).
  bool Admits(size_t image_bytes) const { return budget_.Admits(image_bytes); }

  // The entry of `address`, or null. Counts nothing, leaves recency alone.
  Entry* Find(fabric::RemoteAddress address) const {
    auto it = by_address_.find(address.raw());
    return it == by_address_.end() ? nullptr : it->second.get();
  }

  // Takes `entry` as the most recent one, first evicting the least recently
  // used entries until it fits; the owner indexes it afterwards.
  // Preconditions: Admits(its image size); no entry of its address.
  Entry& Insert(std::unique_ptr<Entry> entry) {
    static_assert(std::is_base_of_v<CacheEntry, Entry>);
    assert(Admits(entry->bytes().size()));
    assert(Find(entry->address()) == nullptr);
    while (CacheEntry* victim = budget_.VictimFor(entry->charge())) {
      // Every entry in the budget's list was inserted here, as an Entry.
      Erase(static_cast<Entry&>(*victim));
      ++budget_.stats().evictions;
    }
    Entry& inserted = *entry;
    budget_.Add(inserted);
    by_address_.emplace(inserted.address().raw(), std::move(entry));
    return inserted;
  }

  // Unindexes and frees `entry`. Counts nothing.
  void Erase(Entry& entry) {
    unindex_(entry);
    budget_.Remove(entry);
    by_address_.erase(entry.address().raw());  // frees entry
  }

  // Erases the entry of `address` and counts an invalidation; false (and
  // no count) when there is none.
  bool Invalidate(fabric::RemoteAddress address) {
    Entry* entry = Find(address);
    if (entry == nullptr) return false;
    Erase(*entry);
    ++budget_.stats().invalidations;
    return true;
  }

  // A lookup found `entry`: counts a hit and makes it the most recent.
  void Hit(Entry& entry) {
    budget_.Touch(entry);
    ++budget_.stats().hits;
  }
  void Miss() { ++budget_.stats().misses; }
  // Makes `entry` the most recent without counting a hit.
  void Touch(Entry& entry) { budget_.Touch(entry); }
  void CountReplacement() { ++budget_.stats().replacements; }

  const CacheCoreStats& stats() const { return budget_.stats(); }

 private:
  LruBudget budget_;
  Unindex unindex_;
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> by_address_;
};

}  // namespace dmidx::cache

#endif  // DMIDX_CACHE_CACHE_CORE_H_
