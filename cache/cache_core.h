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
// Each entry keeps an epoch (the epoch of the operation whose READ its
// image came from: runtime/epochs.h), and the core counts entries by epoch,
// so that the compute node's keeper can ask for the oldest (OldestEpoch)
// and drop entries older than its window (DropOlderThan): a cached image
// holds back the reuse of every object it reaches.
//
// Not thread-safe: the owner's lock guards every call (Admits() excepted).
#ifndef DMIDX_CACHE_CACHE_CORE_H_
#define DMIDX_CACHE_CACHE_CORE_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lib/fabric/remote_address.h"

namespace dmidx::cache {

// Bookkeeping each entry is charged beyond its image's bytes.
inline constexpr size_t kCacheEntryOverheadBytes = 128;
// The oldest epoch of a cache without entries.
inline constexpr uint64_t kNoEpoch = ~uint64_t{0};

struct CacheCoreStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t entries = 0;
  uint64_t bytes = 0;  // sum of the entries' charges
  uint64_t evictions = 0;
  uint64_t invalidations = 0;
  uint64_t replacements = 0;
  // Entries dropped because their epoch fell behind the reclamation window.
  uint64_t expirations = 0;
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
  // The epoch its image was read in (CacheCore::Insert, Restamp).
  uint64_t epoch() const { return epoch_; }
  // Copies `image`, of the entry's size, over the entry's bytes (a newer
  // image of the same node: no allocation). Under the owner's lock.
  void Overwrite(std::span<const uint8_t> image) {
    assert(image.size() == image_bytes_);
    if (!image.empty()) std::memcpy(words_.get(), image.data(), image.size());
  }

 private:
  friend class LruBudget;
  template <typename Entry>
  friend class CacheCore;

  const fabric::RemoteAddress address_;
  uint64_t epoch_ = 0;
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

  // Takes `entry`, whose image was read in `epoch`, as the most recent
  // one, first evicting the least recently used entries until it fits; the
  // owner indexes it afterwards. Preconditions: Admits(its image size); no
  // entry of its address.
  Entry& Insert(std::unique_ptr<Entry> entry, uint64_t epoch) {
    static_assert(std::is_base_of_v<CacheEntry, Entry>);
    assert(Admits(entry->bytes().size()));
    assert(Find(entry->address()) == nullptr);
    while (CacheEntry* victim = budget_.VictimFor(entry->charge())) {
      // Every entry in the budget's list was inserted here, as an Entry.
      Erase(static_cast<Entry&>(*victim));
      ++budget_.stats().evictions;
    }
    Entry& inserted = *entry;
    inserted.epoch_ = epoch;
    ++by_epoch_[epoch];
    budget_.Add(inserted);
    by_address_.emplace(inserted.address().raw(), std::move(entry));
    return inserted;
  }

  // Unindexes and frees `entry`. Counts nothing.
  void Erase(Entry& entry) {
    unindex_(entry);
    Uncount(entry.epoch_);
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

  // `entry`'s image was read again (or replaced by a newer one) in
  // `epoch`.
  void Restamp(Entry& entry, uint64_t epoch) {
    if (entry.epoch_ == epoch) return;  // the common case: no map to touch
    Uncount(entry.epoch_);
    entry.epoch_ = epoch;
    ++by_epoch_[epoch];
  }
  // The oldest epoch an entry keeps; kNoEpoch without entries.
  uint64_t OldestEpoch() const { return by_epoch_.empty() ? kNoEpoch : by_epoch_.begin()->first; }
  // Erases every entry older than `keep_from` (counted as expirations).
  void DropOlderThan(uint64_t keep_from) {
    if (OldestEpoch() >= keep_from) return;
    std::vector<Entry*> old;
    for (const auto& [raw, entry] : by_address_) {
      if (entry->epoch_ < keep_from) old.push_back(entry.get());
    }
    for (Entry* entry : old) {
      // Erasing one entry may take others out of the owner's index, never
      // out of the core: each is still owned until erased here.
      Erase(*entry);
      ++budget_.stats().expirations;
    }
  }

 private:
  void Uncount(uint64_t epoch) {
    auto it = by_epoch_.find(epoch);
    assert(it != by_epoch_.end());
    if (--it->second == 0) by_epoch_.erase(it);
  }

  LruBudget budget_;
  std::map<uint64_t, uint64_t> by_epoch_;  // entries per epoch
  Unindex unindex_;
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> by_address_;
};

}  // namespace dmidx::cache

#endif  // DMIDX_CACHE_CACHE_CORE_H_
