#include "radix/radix_cache.h"

#include <cstring>
#include <span>

namespace dmidx::radix {

void RadixCache::Put(std::string_view prefix, fabric::RemoteAddress address, const uint8_t* image) {
  uint64_t word;
  std::memcpy(&word, image + kHeaderOffset, 8);
  const Header header = Header::Unpack(word);
  if (header.deleted() || header.branch() != prefix.size()) return;
  cache_.Put(prefix, address, std::span<const uint8_t>(image, NodeReadBytes(header.type)));
}

std::optional<RadixCache::Route> RadixCache::Find(std::string_view key) {
  if (key.empty()) return std::nullopt;
  return cache_.FindDeepest(key, key.size() - 1, [&](const cache::CachedNode& node) {
    Route route;
    route.node = node.address;
    uint64_t word;
    std::memcpy(&word, node.bytes.data() + kHeaderOffset, 8);
    route.header = Header::Unpack(word);
    route.branch = node.prefix_bytes;
    const auto partial = static_cast<uint8_t>(key[route.branch]);
    const uint32_t slots = (node.bytes.size() - kSlotsOffset) / 8;
    for (uint32_t i = 0; i < slots; ++i) {
      std::memcpy(&word, node.bytes.data() + kSlotsOffset + 8 * i, 8);
      const Slot slot(word);
      if (slot.live() && slot.partial() == partial) {
        route.index = static_cast<int>(i);
        route.slot = slot;
        break;
      }
    }
    return route;
  });
}

}  // namespace dmidx::radix
