// The radix tree's use of the compute node's ART cache
// (cache/prefix_cache.h): internal node images keyed by the key prefix up
// to their branch byte, and finding the slot a key takes in the deepest
// cached node on its path. Only the tree knows how to read an image.
#ifndef DMIDX_RADIX_RADIX_CACHE_H_
#define DMIDX_RADIX_RADIX_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "cache/prefix_cache.h"
#include "lib/runtime/epochs.h"
#include "radix/layout.h"

namespace dmidx::radix {

class RadixCache {
 public:
  // Holds epochs in `epochs` (the compute node's: runtime/epochs.h) while
  // it lives.
  RadixCache(size_t capacity_bytes, runtime::EpochTable& epochs)
      : cache_(capacity_bytes), holder_(epochs.AddHolder([this](uint64_t keep_from) {
          return cache_.HoldEpochs(keep_from);
        })) {}

  // Caches the image (reverse pointer, header, its type's slots) of the
  // node at `address`, whose branch byte is key byte `prefix.size()`. A
  // node of 32 slots or more is cached with a 256-byte index from branch
  // byte to slot after its image, so that Find need not scan its slots.
  // The cache's byte budget counts the index. An image the entry already
  // holds only refreshes it (nothing is allocated). `epoch`: the epoch the
  // image was read in (ContextImpl::epoch()).
  void Put(std::string_view prefix, fabric::RemoteAddress address, const uint8_t* image,
           uint64_t epoch);

  struct Route {
    fabric::RemoteAddress node;  // the cached node
    Header header;               // as cached
    uint32_t branch = 0;         // its branch byte: key bytes before it matched
    int index = -1;              // the key's live slot in the image, or -1
    Slot slot;                   // that slot
  };
  // The deepest cached node on `key`'s path (branch byte < key size). Its
  // entry's epoch is held in `held` (the operation's
  // ContextImpl::cache_slot: runtime::HoldCacheEpoch).
  std::optional<Route> Find(std::string_view key, std::atomic<uint64_t>& held);

  void Invalidate(fabric::RemoteAddress address) { cache_.Invalidate(address); }
  cache::PrefixCacheStats stats() const { return cache_.stats(); }

 private:
  cache::PrefixCache cache_;
  const std::unique_ptr<runtime::EpochTable::HolderHandle> holder_;  // after cache_: goes first
};

}  // namespace dmidx::radix

#endif  // DMIDX_RADIX_RADIX_CACHE_H_
