#include "radix/radix_cache.h"

#include <array>
#include <cstring>
#include <span>

namespace dmidx::radix {

namespace {

// Nodes with at least this many slots are cached with a byte index after
// the image: kIndexBytes bytes, entry b the first live slot holding partial
// byte b, or kNoSlot. Smaller nodes are scanned.
constexpr uint32_t kIndexedSlots = 32;
constexpr uint32_t kIndexBytes = 256;
constexpr uint8_t kNoSlot = 0xff;  // also slot 255's index: Find checks that slot itself
constexpr uint32_t kMaxNodeBytesWithIndex = kNodeBytes + kIndexBytes;

uint32_t SlotCount(size_t image_bytes) {
  return static_cast<uint32_t>((image_bytes - kSlotsOffset) / 8);
}

uint64_t SlotWord(const uint8_t* image, uint32_t i) {
  uint64_t word;
  std::memcpy(&word, image + kSlotsOffset + 8 * i, 8);
  return word;
}

}  // namespace

void RadixCache::Put(std::string_view prefix, fabric::RemoteAddress address, const uint8_t* image,
                     uint64_t epoch) {
  uint64_t word;
  std::memcpy(&word, image + kHeaderOffset, 8);
  const Header header = Header::Unpack(word);
  if (header.deleted() || header.branch() != prefix.size()) return;
  const uint32_t image_bytes = NodeReadBytes(header.type);
  // The same image again (a lookup of a key the cached node has no slot
  // for reads the node itself): keep the entry, and its index.
  if (cache_.Refresh(prefix, address, std::span<const uint8_t>(image, image_bytes), epoch)) return;
  const uint32_t slots = SlotCount(image_bytes);
  if (slots < kIndexedSlots) {
    cache_.Put(prefix, address, std::span<const uint8_t>(image, image_bytes), epoch);
    return;
  }
  std::array<uint8_t, kMaxNodeBytesWithIndex> stored;
  std::memcpy(stored.data(), image, image_bytes);
  uint8_t* index = stored.data() + image_bytes;
  std::memset(index, kNoSlot, kIndexBytes);
  for (uint32_t i = slots; i-- > 0;) {  // backwards: the first live slot wins
    const Slot slot(SlotWord(image, i));
    if (slot.live()) index[slot.partial()] = static_cast<uint8_t>(i);
  }
  cache_.Put(prefix, address, std::span<const uint8_t>(stored.data(), image_bytes + kIndexBytes),
             epoch);
}

std::optional<RadixCache::Route> RadixCache::Find(std::string_view key,
                                                  std::atomic<uint64_t>& held) {
  if (key.empty()) return std::nullopt;
  return cache_.FindDeepest(key, key.size() - 1, [&](const cache::CachedNode& node) {
    runtime::HoldCacheEpoch(held, node.epoch);  // under the cache's lock
    Route route;
    route.node = node.address;
    const uint8_t* image = node.bytes.data();
    uint64_t word;
    std::memcpy(&word, image + kHeaderOffset, 8);
    route.header = Header::Unpack(word);
    route.branch = node.prefix_bytes;
    const auto partial = static_cast<uint8_t>(key[route.branch]);
    const uint32_t image_bytes = NodeReadBytes(route.header.type);
    const uint32_t slots = SlotCount(image_bytes);
    auto take = [&](uint32_t i) {
      const Slot slot(SlotWord(image, i));
      if (!slot.live() || slot.partial() != partial) return false;
      route.index = static_cast<int>(i);
      route.slot = slot;
      return true;
    };
    if (node.bytes.size() == image_bytes + kIndexBytes) {
      const uint8_t i = image[image_bytes + partial];
      if (i != kNoSlot) {
        take(i);
      } else if (slots > kNoSlot) {
        take(kNoSlot);  // slot 255, which the index cannot name apart from "none"
      }
      return route;
    }
    // Slots fill in index order and never become empty again
    // (docs/radix.md), so the first empty slot ends the search.
    for (uint32_t i = 0; i < slots; ++i) {
      const uint64_t slot_word = SlotWord(image, i);
      if (slot_word == 0) break;
      if (static_cast<uint8_t>(slot_word >> 48) != partial) continue;  // the cheap test first
      if (take(i)) break;
    }
    return route;
  });
}

}  // namespace dmidx::radix
