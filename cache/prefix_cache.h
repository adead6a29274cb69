// A compute node's cache of remote radix-tree node images, keyed by the key
// prefix each node stands for (SMART §4.3's ART cache): a local radix tree
// (trie over prefix bytes) whose entries may sit at any depth, bounded in
// bytes, least recently used first out, shared by all threads of the node.
// It knows nothing of the radix tree's layout: the index says, when it puts
// an image, the prefix the node branches after and the node's address, and
// interprets the bytes itself (radix/radix_cache.h).
//
// Prefixes are byte strings of any length up to 255; "" (the root's) and
// prefixes that differ only by trailing zero bytes ("\x01" vs "\x01\x00")
// are different entries (SMART's "high-level leaf nodes": entries live on
// internal trie nodes too). A lookup finds the entry with the longest
// prefix of the key (the deepest cached node on the key's path); the
// visitor runs under the cache's lock, on the cached bytes, so nothing is
// copied. Entries can be stale; the index detects it (reverse checks) and
// calls Invalidate().
//
// Budget and eviction are the cache core's (cache/cache_core.h), shared
// with RangeCache: each entry costs its image plus kEntryOverheadBytes.
//
// Thread-safe: one lock, a spin lock (lib/common/spin_lock.h): a lookup
// holds it for a few hundred instructions, and taking it free is one
// exchange where a std::mutex costs about eighty instructions a pair.
#ifndef DMIDX_CACHE_PREFIX_CACHE_H_
#define DMIDX_CACHE_PREFIX_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>  // std::lock_guard
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "lib/common/spin_lock.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::cache {

struct PrefixCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t evictions = 0;
  uint64_t invalidations = 0;  // Invalidate() calls that dropped an entry
  uint64_t replacements = 0;   // Put()s that replaced an entry of the same prefix or address
  uint64_t expirations = 0;    // dropped by HoldEpochs: read too many epochs ago
};

// One cached image as a visitor sees it.
struct CachedNode {
  uint32_t prefix_bytes;  // length of the entry's prefix (a prefix of the key looked up)
  fabric::RemoteAddress address;
  std::span<const uint8_t> bytes;  // 8-byte aligned
  // The epoch its image was read in (cache_core.h): an operation that
  // follows an address from it holds this epoch until it ends (the entry
  // may be dropped meanwhile: runtime/epochs.h).
  uint64_t epoch;
};

class PrefixCache {
 public:
  static constexpr size_t kEntryOverheadBytes = 128;
  static constexpr size_t kMaxPrefixBytes = 255;

  // A capacity below one entry caches nothing.
  explicit PrefixCache(size_t capacity_bytes);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Caches a copy of `image`, the node at `address`, standing for `prefix`
  // (<= kMaxPrefixBytes; longer is ignored). Replaces the entry of the same
  // prefix and the entry of the same address, if any (a node whose prefix
  // changed is cached only under its new one). `epoch`: the epoch the
  // image was read in (cache_core.h).
  void Put(std::string_view prefix, fabric::RemoteAddress address, std::span<const uint8_t> image,
           uint64_t epoch = 0);

  // Calls visit(node) for the cached entry with the longest prefix of `key`
  // no longer than `max_prefix_bytes`, and returns what it returned; nullopt
  // (a miss) when none. Counts a hit or a miss; a hit refreshes recency.
  // `visit` runs under the cache's lock and must not call back into the
  // cache.
  template <typename Visit>
  auto FindDeepest(std::string_view key, size_t max_prefix_bytes, Visit&& visit)
      -> std::optional<std::invoke_result_t<Visit&, const CachedNode&>> {
    std::lock_guard<SpinLock> guard(lock_);
    std::optional<CachedNode> node = FindDeepestLocked(key, max_prefix_bytes);
    if (!node) return std::nullopt;
    return visit(*node);
  }

  // If the entry of `prefix` is the node at `address` and its cached bytes
  // begin with `image`, makes it the most recent and returns true (a Put
  // of the same image would change nothing else, and this allocates
  // nothing); otherwise false. Counts nothing. The entry keeps `epoch`,
  // when the image was read again.
  bool Refresh(std::string_view prefix, fabric::RemoteAddress address,
               std::span<const uint8_t> image, uint64_t epoch = 0);

  // Drops the entries read before epoch `keep_from` and returns the oldest
  // epoch an entry keeps (kNoEpoch: none). For the compute node's keeper
  // (runtime/epochs.h, EpochTable::AddHolder).
  uint64_t HoldEpochs(uint64_t keep_from);

  // Drops the entry of `address` (found stale). No-op if none.
  void Invalidate(fabric::RemoteAddress address);

  PrefixCacheStats stats() const;

  // The number of nodes of the local trie, its root included: at most
  // 2 * entries + 1 (nodes that no longer lead to an entry are pruned).
  size_t TrieNodesForTesting() const;
  // The number of trie nodes that find their children through a 256-entry
  // table (nodes that had 32 children or more).
  size_t DirectTablesForTesting() const;

 private:
  struct Impl;
  std::optional<CachedNode> FindDeepestLocked(std::string_view key, size_t max_prefix_bytes);

  mutable SpinLock lock_;
  std::unique_ptr<Impl> impl_;  // guarded by lock_
};

}  // namespace dmidx::cache

#endif  // DMIDX_CACHE_PREFIX_CACHE_H_
