#include "btree/btree_cache.h"

namespace dmidx::btree {

void BTreeCache::Put(fabric::RemoteAddress address, const uint8_t* image, uint64_t epoch) {
  const NodeView node(shape_, const_cast<uint8_t*>(image));
  if (node.is_leaf()) return;
  cache::KeyRange range;
  if (!node.low_is_min()) range.low = node.low_fence();
  if (!node.high_is_max()) range.high = node.high_fence();
  cache_.Put(address, node.level(), range, {image, shape_.node_bytes()}, epoch);
}

std::optional<BTreeCache::Route> BTreeCache::Find(std::string_view key,
                                                  std::atomic<uint64_t>& held) {
  return cache_.Find(key, 1, [&](const cache::CachedImage& image) {
    runtime::HoldCacheEpoch(held, image.epoch);  // under the cache's lock
    return Route{image.address, View(image).FindChild(key), image.level};
  });
}

void BTreeCache::LeavesFrom(std::string_view key, std::string_view to, size_t max,
                            std::pmr::vector<fabric::RemoteAddress>* leaves,
                            std::atomic<uint64_t>& held) {
  leaves->clear();
  if (max == 0) return;
  cache_.FindAt(key, 1, [&](const cache::CachedImage& image) {
    runtime::HoldCacheEpoch(held, image.epoch);  // under the cache's lock
    const NodeView node = View(image);
    for (uint32_t i = node.ChildIndex(key); i <= node.count() && leaves->size() < max; ++i) {
      if (i > 0 && !to.empty() && node.internal_key(i - 1) > to) break;
      leaves->push_back(node.child(i));
    }
    return true;
  });
}

}  // namespace dmidx::btree
