#include "cache/range_cache.h"

#include <cstring>
#include <iterator>
#include <vector>

namespace dmidx::cache {

struct RangeCache::Entry {
  fabric::RemoteAddress address;
  uint8_t level = 0;
  std::string low;  // "" when minus infinity: sorts before every key
  std::string high;
  bool high_is_max = false;
  std::vector<uint64_t> image;  // 8-byte aligned copy
  size_t image_bytes = 0;
  std::list<Entry*>::iterator recency;

  bool Covers(std::string_view key) const {
    return key.compare(low) >= 0 && (high_is_max || key.compare(high) < 0);
  }
  size_t charge() const { return image_bytes + kEntryOverheadBytes; }
};

RangeCache::RangeCache(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

RangeCache::~RangeCache() = default;

CachedImage RangeCache::ImageOf(const Entry& entry) {
  return {entry.address,
          entry.level,
          {reinterpret_cast<const uint8_t*>(entry.image.data()), entry.image_bytes}};
}

void RangeCache::EraseLocked(Entry* entry) {
  Level& level = levels_[entry->level];
  auto it = level.find(entry->low);
  if (it != level.end() && it->second == entry) level.erase(it);
  recency_.erase(entry->recency);
  stats_.bytes -= entry->charge();
  --stats_.entries;
  by_address_.erase(entry->address.raw());  // frees entry
}

void RangeCache::Put(fabric::RemoteAddress address, uint8_t level_number, const KeyRange& range,
                     std::span<const uint8_t> image) {
  if (capacity_bytes_ < image.size() + kEntryOverheadBytes) return;
  auto entry = std::make_unique<Entry>();
  entry->image.resize((image.size() + 7) / 8);
  std::memcpy(entry->image.data(), image.data(), image.size());
  entry->image_bytes = image.size();
  entry->address = address;
  entry->level = level_number;
  entry->low = std::string(range.low);
  entry->high_is_max = !range.high.has_value();
  if (range.high) entry->high = std::string(*range.high);

  std::lock_guard<std::mutex> guard(mutex_);
  if (auto old = by_address_.find(address.raw()); old != by_address_.end()) {
    EraseLocked(old->second.get());
  }
  // Same-level entries overlapping the new range describe an older shape of
  // the index there: drop them.
  Level& level = levels_[entry->level];
  auto it = level.upper_bound(entry->low);
  if (it != level.begin()) --it;
  while (it != level.end()) {
    Entry* other = it->second;
    ++it;
    const bool starts_before_new_ends = entry->high_is_max || other->low < entry->high;
    const bool ends_after_new_starts = other->high_is_max || other->high > entry->low;
    if (!starts_before_new_ends) break;
    if (ends_after_new_starts) EraseLocked(other);
  }
  Entry* raw = entry.get();
  recency_.push_front(raw);
  raw->recency = recency_.begin();
  level[raw->low] = raw;
  by_address_[address.raw()] = std::move(entry);
  stats_.bytes += raw->charge();
  ++stats_.entries;
  while (stats_.bytes > capacity_bytes_ && recency_.size() > 1) {
    EraseLocked(recency_.back());
    ++stats_.evictions;
  }
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
    recency_.splice(recency_.begin(), recency_, entry->recency);
    ++stats_.hits;
    return entry;
  }
  ++stats_.misses;
  return nullptr;
}

void RangeCache::Invalidate(fabric::RemoteAddress address) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = by_address_.find(address.raw());
  if (it == by_address_.end()) return;
  EraseLocked(it->second.get());
  ++stats_.invalidations;
}

RangeCacheStats RangeCache::stats() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return stats_;
}

}  // namespace dmidx::cache
