// The B+tree's compute-side index cache: verified copies of internal nodes,
// shared by all threads of one compute node, bounded in bytes.
//
// A lookup asks Find() for the lowest cached level whose node covers the key
// and gets the child to read next, skipping the levels above. Entries can be
// stale (the node split or moved since); the tree detects that when the node
// it reads does not cover the key (fence check) and calls Invalidate(), then
// re-traverses. Put() of a newer image of a range drops the cached entries of
// the same level that overlap it, so one range never has two answers.
// Eviction is least recently used.
//
// Thread-safe: one mutex (Find also updates recency). Enough for a first
// version; shard by level if it shows up in profiles.
#ifndef DMIDX_CACHE_TREE_NODE_CACHE_H_
#define DMIDX_CACHE_TREE_NODE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lib/fabric/remote_address.h"
#include "tree/node.h"

namespace dmidx::cache {

struct TreeNodeCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t invalidations = 0;
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

class TreeNodeCache {
 public:
  // Each entry counts as shape.node_bytes() + 128 bytes (the copy and its
  // bookkeeping); a capacity below one entry caches nothing.
  TreeNodeCache(const tree::NodeShape& shape, size_t capacity_bytes);
  ~TreeNodeCache();
  TreeNodeCache(const TreeNodeCache&) = delete;
  TreeNodeCache& operator=(const TreeNodeCache&) = delete;

  // Caches `image` (node_bytes, checksum verified by the caller) of the
  // internal node at `address`. Leaves are not cached.
  void Put(fabric::RemoteAddress address, const uint8_t* image);

  struct Route {
    fabric::RemoteAddress node;   // the cached node used
    fabric::RemoteAddress child;  // where `key` goes from there
    uint8_t level;                // the cached node's level (child is level - 1)
  };
  // The route from the lowest cached level covering `key`, if any.
  std::optional<Route> Find(std::string_view key);

  // Up to `max` children of the cached level-1 node covering `key`: the one
  // whose range holds `key` and those right of it, as far as `to` (empty:
  // no bound). Empty when no such node is cached. For scans, which read
  // several leaves in one round trip.
  std::vector<fabric::RemoteAddress> LeavesFrom(std::string_view key, std::string_view to,
                                                size_t max);

  // Drops the entry of `address` (found stale).
  void Invalidate(fabric::RemoteAddress address);

  TreeNodeCacheStats stats() const;

 private:
  struct Entry;
  using Level = std::map<std::string, Entry*, std::less<>>;  // by low fence

  void EraseLocked(Entry* entry);
  size_t EntryBytes() const { return shape_.node_bytes() + 128; }

  const tree::NodeShape shape_;
  const size_t capacity_bytes_;

  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> by_address_;  // guarded by mutex_
  std::map<uint8_t, Level> levels_;                                  // guarded by mutex_
  std::list<Entry*> recency_;  // most recent first; guarded by mutex_
  TreeNodeCacheStats stats_;   // guarded by mutex_
};

}  // namespace dmidx::cache

#endif  // DMIDX_CACHE_TREE_NODE_CACHE_H_
