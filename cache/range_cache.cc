#include "cache/range_cache.h"

#include <iterator>
#include <memory>
#include <utility>

namespace dmidx::cache {

struct RangeCache::Entry : CacheEntry {
  Entry(fabric::RemoteAddress address, uint8_t level_number, const KeyRange& range,
        std::span<const uint8_t> image)
      : CacheEntry(address, image),
        level(level_number),
        low(range.low),
        high(range.high.value_or("")),
        high_is_max(!range.high.has_value()) {}

  bool Covers(std::string_view key) const {
    return CompareKeys(key, low) >= 0 && (high_is_max || CompareKeys(key, high) < 0);
  }

  const uint8_t level;
  const std::string low;  // "" when minus infinity: sorts before every key
  const std::string high;
  const bool high_is_max;
};

RangeCache::RangeCache(size_t capacity_bytes)
    : core_(capacity_bytes, [this](Entry& entry) { Unindex(entry); }) {}

RangeCache::~RangeCache() = default;

CachedImage RangeCache::ImageOf(const Entry& entry) {
  return {entry.address(), entry.level, entry.bytes(), entry.epoch()};
}

void RangeCache::Unindex(Entry& entry) {
  auto level = levels_.find(entry.level);
  if (level == levels_.end()) return;
  auto it = level->second.find(entry.low);
  if (it != level->second.end() && it->second == &entry) level->second.erase(it);
}

void RangeCache::Put(fabric::RemoteAddress address, uint8_t level_number, const KeyRange& range,
                     std::span<const uint8_t> image, uint64_t epoch) {
  if (!core_.Admits(image.size())) return;
  auto entry = std::make_unique<Entry>(address, level_number, range, image);

  std::lock_guard<SpinLock> guard(lock_);
  if (Entry* old = core_.Find(address)) core_.Erase(*old);
  // Same-level entries overlapping the new range describe an older shape of
  // the index there: drop them.
  Level& level = levels_[level_number];
  auto it = level.upper_bound(entry->low);
  if (it != level.begin()) --it;
  while (it != level.end()) {
    Entry* other = it->second;
    ++it;  // erasing `other` unindexes it
    const bool starts_before_new_ends = entry->high_is_max || other->low < entry->high;
    const bool ends_after_new_starts = other->high_is_max || other->high > entry->low;
    if (!starts_before_new_ends) break;
    if (ends_after_new_starts) core_.Erase(*other);
  }
  Entry& inserted = core_.Insert(std::move(entry), epoch);  // may evict; Unindex keeps `level`
  level[inserted.low] = &inserted;
}

const RangeCache::Entry* RangeCache::FindLocked(std::string_view key, uint8_t level_number,
                                                bool exact_level) {
  for (auto it = levels_.lower_bound(level_number); it != levels_.end(); ++it) {  // lowest first
    if (exact_level && it->first != level_number) break;
    Level& level = it->second;
    auto at = level.upper_bound(key);
    if (at == level.begin()) continue;
    Entry* entry = std::prev(at)->second;
    if (!entry->Covers(key)) continue;
    core_.Hit(*entry);
    return entry;
  }
  core_.Miss();
  return nullptr;
}

void RangeCache::Invalidate(fabric::RemoteAddress address) {
  std::lock_guard<SpinLock> guard(lock_);
  core_.Invalidate(address);
}

RangeCacheStats RangeCache::stats() const {
  std::lock_guard<SpinLock> guard(lock_);
  const CacheCoreStats& core = core_.stats();
  return {.hits = core.hits,
          .misses = core.misses,
          .entries = core.entries,
          .bytes = core.bytes,
          .evictions = core.evictions,
          .invalidations = core.invalidations,
          .expirations = core.expirations};
}

uint64_t RangeCache::HoldEpochs(uint64_t keep_from) {
  std::lock_guard<SpinLock> guard(lock_);
  core_.DropOlderThan(keep_from);
  return core_.OldestEpoch();
}

}  // namespace dmidx::cache
