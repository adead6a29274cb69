// The scratch arena: alignment, scopes freeing in stack order, exact fit,
// and clear errors for requests that cannot be met.
#include "lib/runtime/arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace dmidx::runtime {
namespace {

struct AlignedMemory {
  explicit AlignedMemory(size_t bytes)
      : data(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes))), size(bytes) {}
  ~AlignedMemory() { std::free(data); }
  std::span<uint8_t> span() const { return {data, size}; }
  uint8_t* data;
  size_t size;
};

TEST(ScratchArenaTest, AllocationsAreAlignedAndDisjoint) {
  AlignedMemory memory(4096);
  ScratchArena arena(memory.span());
  auto a = arena.Bytes(3, 1);
  auto b = arena.Words(2);
  auto c = arena.Bytes(100, 64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, memory.data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % 8, 0u);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(*b), memory.data + 8);
  EXPECT_EQ(*c, memory.data + 64);
  EXPECT_EQ(arena.used(), 164u);
}

TEST(ScratchArenaTest, ScopesFreeInStackOrder) {
  AlignedMemory memory(4096);
  ScratchArena arena(memory.span());
  ASSERT_TRUE(arena.Bytes(16).ok());
  {
    ScratchArena::Scope outer(arena);
    ASSERT_TRUE(arena.Bytes(100).ok());
    {
      ScratchArena::Scope inner(arena);
      ASSERT_TRUE(arena.Bytes(1000).ok());
      EXPECT_EQ(arena.used(), 1120u);
    }
    EXPECT_EQ(arena.used(), 116u);
  }
  EXPECT_EQ(arena.used(), 16u);
  auto again = arena.Bytes(8);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, memory.data + 16);
}

TEST(ScratchArenaTest, ExactFitSucceedsAndOneMoreByteIsResourceExhausted) {
  AlignedMemory memory(4096);
  ScratchArena arena(memory.span());
  ASSERT_TRUE(arena.Bytes(4000).ok());
  EXPECT_EQ(arena.Fits(96, 1), 1u);
  EXPECT_EQ(arena.Fits(97, 1), 0u);
  Status too_big = arena.Bytes(97, 1).status();
  EXPECT_TRUE(too_big.IsResourceExhausted()) << too_big.ToString();
  EXPECT_NE(too_big.ToString().find("97 bytes asked, 96 of 4096 left"), std::string::npos)
      << too_big.ToString();
  EXPECT_EQ(arena.used(), 4000u) << "a failed request must not move the arena";
  EXPECT_TRUE(arena.Bytes(96, 1).ok());
}

TEST(ScratchArenaTest, AlignmentPastTheEndIsResourceExhaustedNotOverflow) {
  AlignedMemory memory(4096);
  ScratchArena arena(memory.span());
  ASSERT_TRUE(arena.Bytes(4090, 1).ok());
  EXPECT_TRUE(arena.Bytes(1, 4096).status().IsResourceExhausted());
  EXPECT_EQ(arena.Fits(1, 4096), 0u);
}

TEST(ScratchArenaTest, FitsCountsWholeAlignedBuffers) {
  AlignedMemory memory(4096);
  ScratchArena arena(memory.span());
  EXPECT_EQ(arena.Fits(1024, 64), 4u);
  EXPECT_EQ(arena.Fits(1000, 64), 4u);  // stride 1024, the last needs only 1000
  EXPECT_EQ(arena.Fits(1024, 64, /*leave=*/1), 3u);
  EXPECT_EQ(arena.Fits(1024, 64, /*leave=*/1024), 3u);
  EXPECT_EQ(arena.Fits(1024, 64, /*leave=*/4096), 0u);
  ASSERT_TRUE(arena.Bytes(1, 1).ok());
  EXPECT_EQ(arena.Fits(1024, 64), 3u);
}

TEST(ScratchArenaTest, BadRequestsAreInvalidArgument) {
  AlignedMemory memory(4096);
  ScratchArena arena(memory.span());
  EXPECT_TRUE(arena.Bytes(0).status().IsInvalidArgument());
  EXPECT_TRUE(arena.Bytes(8, 3).status().IsInvalidArgument());
  EXPECT_TRUE(arena.Bytes(8, 8192).status().IsInvalidArgument());
  EXPECT_EQ(arena.used(), 0u);
}

}  // namespace
}  // namespace dmidx::runtime
