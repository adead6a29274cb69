#include "cache/tree_node_cache.h"

#include <cstring>

namespace dmidx::cache {

struct TreeNodeCache::Entry {
  fabric::RemoteAddress address;
  uint8_t level = 0;
  std::string low;  // "" when minus infinity: sorts before every key
  std::string high;
  bool high_is_max = false;
  std::vector<uint64_t> image;  // 8-byte aligned copy of the node
  std::list<Entry*>::iterator recency;

  bool Covers(std::string_view key) const {
    return key.compare(low) >= 0 && (high_is_max || key.compare(high) < 0);
  }
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(image.data()); }
};

TreeNodeCache::TreeNodeCache(const tree::NodeShape& shape, size_t capacity_bytes)
    : shape_(shape), capacity_bytes_(capacity_bytes) {}

TreeNodeCache::~TreeNodeCache() = default;

void TreeNodeCache::EraseLocked(Entry* entry) {
  Level& level = levels_[entry->level];
  auto it = level.find(entry->low);
  if (it != level.end() && it->second == entry) level.erase(it);
  recency_.erase(entry->recency);
  stats_.bytes -= EntryBytes();
  --stats_.entries;
  by_address_.erase(entry->address.raw());  // frees entry
}

void TreeNodeCache::Put(fabric::RemoteAddress address, const uint8_t* image) {
  if (capacity_bytes_ < EntryBytes()) return;
  auto entry = std::make_unique<Entry>();
  entry->image.resize(shape_.node_bytes() / 8);
  std::memcpy(entry->bytes(), image, shape_.node_bytes());
  const tree::NodeView node(shape_, entry->bytes());
  if (node.is_leaf()) return;
  entry->address = address;
  entry->level = node.level();
  if (!node.low_is_min()) entry->low = std::string(node.low_fence());
  entry->high_is_max = node.high_is_max();
  if (!entry->high_is_max) entry->high = std::string(node.high_fence());

  std::lock_guard<std::mutex> guard(mutex_);
  if (auto old = by_address_.find(address.raw()); old != by_address_.end()) {
    EraseLocked(old->second.get());
  }
  // Same-level entries overlapping the new range describe an older shape of
  // the tree there: drop them.
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
  levels_[raw->level][raw->low] = raw;
  by_address_[address.raw()] = std::move(entry);
  stats_.bytes += EntryBytes();
  ++stats_.entries;
  while (stats_.bytes > capacity_bytes_ && recency_.size() > 1) {
    EraseLocked(recency_.back());
    ++stats_.evictions;
  }
}

std::optional<TreeNodeCache::Route> TreeNodeCache::Find(std::string_view key) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto& [level_number, level] : levels_) {  // lowest level first
    auto it = level.upper_bound(key);
    if (it == level.begin()) continue;
    Entry* entry = std::prev(it)->second;
    if (!entry->Covers(key)) continue;
    recency_.splice(recency_.begin(), recency_, entry->recency);
    ++stats_.hits;
    const tree::NodeView node(shape_, entry->bytes());
    return Route{entry->address, node.FindChild(key), level_number};
  }
  ++stats_.misses;
  return std::nullopt;
}

std::vector<fabric::RemoteAddress> TreeNodeCache::LeavesFrom(std::string_view key,
                                                             std::string_view to, size_t max) {
  std::vector<fabric::RemoteAddress> leaves;
  std::lock_guard<std::mutex> guard(mutex_);
  auto level = levels_.find(1);
  if (level == levels_.end() || max == 0) return leaves;
  auto it = level->second.upper_bound(key);
  if (it == level->second.begin()) return leaves;
  Entry* entry = std::prev(it)->second;
  if (!entry->Covers(key)) return leaves;
  recency_.splice(recency_.begin(), recency_, entry->recency);
  const tree::NodeView node(shape_, entry->bytes());
  for (uint32_t i = node.ChildIndex(key); i <= node.count() && leaves.size() < max; ++i) {
    if (i > 0 && !to.empty() && node.internal_key(i - 1) > to) break;
    leaves.push_back(node.child(i));
  }
  return leaves;
}

void TreeNodeCache::Invalidate(fabric::RemoteAddress address) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = by_address_.find(address.raw());
  if (it == by_address_.end()) return;
  EraseLocked(it->second.get());
  ++stats_.invalidations;
}

TreeNodeCacheStats TreeNodeCache::stats() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return stats_;
}

}  // namespace dmidx::cache
