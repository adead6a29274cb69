// RadixCache::Find picks the key's slot in a cached node image: the first
// live slot holding the key's branch byte, found through the byte index the
// cache keeps for nodes of 32 slots and more (slot 255 included, which the
// index cannot name) or by scanning smaller ones; tombstones and frozen
// slots are never routes; a byte no slot holds gives index -1.
#include "radix/radix_cache.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace dmidx::radix {
namespace {

// The epoch table the caches register with (nothing asks it here).
runtime::EpochTable& TestEpochs() {
  static runtime::EpochTable table;
  return table;
}

// Where lookups hold the epochs of the entries they use (an operation's
// ContextImpl::cache_slot).
std::atomic<uint64_t> held{runtime::kUnpinned};

using fabric::RemoteAddress;

// A node of `type` at depth 1 with no header bytes: it branches on key
// byte 1, so it is cached under the one-byte prefix "a".
std::array<uint8_t, kNodeBytes> Image(uint8_t type) {
  std::array<uint8_t, kNodeBytes> image;
  Header header;
  header.depth = 1;
  header.type = type;
  InitNodeImage(image.data(), RemoteAddress::Pool(0, 64), header);
  return image;
}

RemoteAddress Child(uint32_t i) {
  return RemoteAddress::Pool(0, 4096 + 64 * i);
}

// The slot index Find gives for key "a" + byte.
int Found(RadixCache& cache, uint8_t byte) {
  const std::string key = std::string("a") + static_cast<char>(byte) + "xyz";
  const auto route = cache.Find(key, held);
  EXPECT_TRUE(route.has_value());
  if (!route) return -2;
  EXPECT_EQ(route->node, RemoteAddress::Pool(0, 128));
  EXPECT_EQ(route->branch, 1u);
  if (route->index >= 0) {
    EXPECT_EQ(route->slot.partial(), byte);
    EXPECT_TRUE(route->slot.live());
  }
  return route->index;
}

class RadixCacheTest : public ::testing::TestWithParam<uint8_t> {};

// Every node type: full of distinct bytes (slot i holds byte 255 - i), with
// a tombstone and a frozen slot among them.
TEST_P(RadixCacheTest, FindsEveryLiveSlotAndNothingElse) {
  const uint8_t type = GetParam();
  const uint32_t slots = Capacity(type);
  auto image = Image(type);
  for (uint32_t i = 0; i < slots; ++i) {
    const auto byte = static_cast<uint8_t>(255 - i);
    Slot slot = Slot::ToLeaf(byte, Child(i));
    if (i == 1) slot = Slot::Tombstone(byte);
    if (i == 2 && slots > 4) slot = Slot::Frozen(Slot::Tombstone(byte));
    SetSlotInImage(image.data(), i, slot);
  }
  RadixCache cache(1 << 20, TestEpochs());
  cache.Put("a", RemoteAddress::Pool(0, 128), image.data(), /*epoch=*/0);
  for (uint32_t i = 0; i < slots; ++i) {
    const auto byte = static_cast<uint8_t>(255 - i);
    const bool dead = i == 1 || (i == 2 && slots > 4);
    EXPECT_EQ(Found(cache, byte), dead ? -1 : static_cast<int>(i)) << "slot " << i;
  }
  if (slots < 256) {
    EXPECT_EQ(Found(cache, static_cast<uint8_t>(255 - slots)), -1);  // a byte no slot holds
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RadixCacheTest, ::testing::Range<uint8_t>(1, kMaxType + 1));

// The index cannot name slot 255 apart from "none": a byte held only there
// is found, and one held nowhere is not.
TEST(RadixCacheSlotTest, SlotTwoFiftyFiveOfAFullNode) {
  auto image = Image(kMaxType);
  for (uint32_t i = 0; i < 255; ++i)
    SetSlotInImage(image.data(), i, Slot::ToLeaf(static_cast<uint8_t>(i + 1), Child(i)));
  SetSlotInImage(image.data(), 255, Slot::ToLeaf(0, Child(255)));
  RadixCache cache(1 << 20, TestEpochs());
  cache.Put("a", RemoteAddress::Pool(0, 128), image.data(), /*epoch=*/0);
  EXPECT_EQ(Found(cache, 0), 255);
  EXPECT_EQ(Found(cache, 1), 0);
  EXPECT_EQ(Found(cache, 255), 254);

  auto half = Image(kMaxType);
  for (uint32_t i = 0; i < 100; ++i)
    SetSlotInImage(half.data(), i, Slot::ToLeaf(static_cast<uint8_t>(2 * i), Child(i)));
  RadixCache other(1 << 20, TestEpochs());
  other.Put("a", RemoteAddress::Pool(0, 128), half.data(), /*epoch=*/0);
  EXPECT_EQ(Found(other, 0), 0);
  EXPECT_EQ(Found(other, 198), 99);
  EXPECT_EQ(Found(other, 1), -1);
  EXPECT_EQ(Found(other, 255), -1);
}

}  // namespace
}  // namespace dmidx::radix
