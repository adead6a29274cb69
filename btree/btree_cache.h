// The B+tree's use of the compute node's range cache (cache/range_cache.h):
// what to tell it when an internal node is cached, and routing inside a
// cached image, which only the tree knows how to do.
#ifndef DMIDX_TREE_BTREE_CACHE_H_
#define DMIDX_TREE_BTREE_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string_view>
#include <vector>

#include "btree/node.h"
#include "cache/range_cache.h"
#include "lib/runtime/epochs.h"

namespace dmidx::btree {

class BTreeCache {
 public:
  // Holds epochs in `epochs` (the compute node's: runtime/epochs.h) while
  // it lives.
  BTreeCache(const NodeShape& shape, size_t capacity_bytes, runtime::EpochTable& epochs)
      : shape_(shape), cache_(capacity_bytes), holder_(epochs.AddHolder([this](uint64_t keep_from) {
          return cache_.HoldEpochs(keep_from);
        })) {}

  // Caches the verified image of the node at `address`, read in `epoch`
  // (ContextImpl::epoch()); leaves are not cached.
  void Put(fabric::RemoteAddress address, const uint8_t* image, uint64_t epoch);

  struct Route {
    fabric::RemoteAddress node;   // the cached node used
    fabric::RemoteAddress child;  // where `key` goes from there
    uint8_t level;                // the cached node's level (child is level - 1)
  };
  // The route from the lowest cached level covering `key`, if any. Its
  // entry's epoch is held in `held` (the operation's
  // ContextImpl::cache_slot: runtime::HoldCacheEpoch).
  std::optional<Route> Find(std::string_view key, std::atomic<uint64_t>& held);

  // Up to `max` children of the cached level-1 node covering `key`: the one
  // whose range holds `key` and those right of it, as far as `to` (empty:
  // no bound), into *leaves (cleared first). Empty when no such node is
  // cached. For scans, which read several leaves in one round trip. The
  // entry's epoch is held in `held`, as Find's.
  void LeavesFrom(std::string_view key, std::string_view to, size_t max,
                  std::pmr::vector<fabric::RemoteAddress>* leaves, std::atomic<uint64_t>& held);

  void Invalidate(fabric::RemoteAddress address) { cache_.Invalidate(address); }
  cache::RangeCacheStats stats() const { return cache_.stats(); }

 private:
  // A read-only view of a cached image (NodeView reads through a mutable
  // pointer but these calls only read).
  NodeView View(const cache::CachedImage& image) const {
    return NodeView(shape_, const_cast<uint8_t*>(image.bytes.data()));
  }

  const NodeShape shape_;
  cache::RangeCache cache_;
  const std::unique_ptr<runtime::EpochTable::HolderHandle> holder_;  // after cache_: goes first
};

}  // namespace dmidx::btree

#endif  // DMIDX_TREE_BTREE_CACHE_H_
