#include "lib/memnode/memory_node.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/memnode/control_protocol.h"
#include "testing/run_clients.h"

namespace dmidx::memnode {
namespace {

using fabric::RemoteAddress;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// 1 MiB pool of 64 KiB chunks: the catalog of 16 entries fits in the first
// page after the header, so chunks begin at 8 KiB and there are 15 of them.
MemoryNodeOptions SmallOptions() {
  MemoryNodeOptions options;
  options.pool_bytes = 1 * kMiB;
  options.lock_region_bytes = 4 * kKiB;
  options.chunk_bytes = 64 * kKiB;
  options.huge_pages = false;
  options.catalog_entries = 16;
  return options;
}

// The documented layout: the catalog follows the 4 KiB header, and chunks
// start at its end rounded up to 4 KiB.
uint64_t ExpectedChunksBegin(const MemoryNodeOptions& options) {
  const uint64_t catalog_end = kHeaderBytes + uint64_t{options.catalog_entries} * 64;
  return (catalog_end + kChunkAlignment - 1) / kChunkAlignment * kChunkAlignment;
}

uint64_t CatalogEntryOffset(uint32_t entry) {
  return kHeaderBytes + uint64_t{entry} * 64;
}

std::unique_ptr<MemoryNode> MakeNode(uint16_t id, const MemoryNodeOptions& options) {
  StatusOr<std::unique_ptr<MemoryNode>> node = MemoryNode::Create(id, options);
  EXPECT_TRUE(node.ok()) << node.status().ToString();
  return node.ok() ? std::move(node).value() : nullptr;
}

// Expects InvalidArgument whose message names `field`.
void ExpectInvalidOption(const MemoryNodeOptions& options, const std::string& field) {
  StatusOr<std::unique_ptr<MemoryNode>> node = MemoryNode::Create(0, options);
  ASSERT_FALSE(node.ok());
  EXPECT_TRUE(node.status().IsInvalidArgument()) << node.status().ToString();
  EXPECT_NE(node.status().message().find(field), std::string_view::npos)
      << node.status().ToString();
}

TEST(MappingTest, MapsZeroedWritableMemory) {
  StatusOr<Mapping> mapping = Mapping::Create(3 * 4096 + 8, false);
  ASSERT_TRUE(mapping.ok()) << mapping.status().ToString();
  EXPECT_EQ(mapping->size(), 3 * 4096 + 8u);
  EXPECT_FALSE(mapping->huge_pages());
  ASSERT_NE(mapping->data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mapping->data()) % 4096, 0u);
  const uint8_t* data = mapping->data();
  EXPECT_TRUE(std::all_of(data, data + mapping->size(), [](uint8_t b) { return b == 0; }));
  mapping->data()[mapping->size() - 1] = 0xab;
  EXPECT_EQ(mapping->data()[mapping->size() - 1], 0xab);
}

TEST(MappingTest, HugePagesFallBackOrSucceed) {
  // Whether 2 MiB pages are reserved depends on the machine; either way the
  // mapping must exist, have the requested size and be zeroed.
  StatusOr<Mapping> mapping = Mapping::Create(3 * kMiB, true);
  ASSERT_TRUE(mapping.ok()) << mapping.status().ToString();
  EXPECT_EQ(mapping->size(), 3 * kMiB);
  EXPECT_EQ(mapping->data()[3 * kMiB - 1], 0);
  mapping->data()[3 * kMiB - 1] = 1;
  EXPECT_EQ(mapping->data()[3 * kMiB - 1], 1);
}

TEST(MappingTest, ZeroBytesIsInvalid) {
  StatusOr<Mapping> mapping = Mapping::Create(0, false);
  ASSERT_FALSE(mapping.ok());
  EXPECT_TRUE(mapping.status().IsInvalidArgument());
}

TEST(MappingTest, ImpossibleSizeIsAnError) {
  StatusOr<Mapping> mapping = Mapping::Create(uint64_t{1} << 62, true);
  ASSERT_FALSE(mapping.ok());
  EXPECT_TRUE(mapping.status().IsResourceExhausted()) << mapping.status().ToString();
}

TEST(MappingTest, MoveTransfersOwnership) {
  StatusOr<Mapping> created = Mapping::Create(4096, false);
  ASSERT_TRUE(created.ok());
  Mapping first = std::move(created).value();
  uint8_t* data = first.data();
  Mapping second(std::move(first));
  EXPECT_EQ(first.data(), nullptr);
  EXPECT_EQ(first.size(), 0u);
  EXPECT_EQ(second.data(), data);
  EXPECT_EQ(second.size(), 4096u);

  StatusOr<Mapping> other = Mapping::Create(8192, false);
  ASSERT_TRUE(other.ok());
  second = std::move(other).value();  // unmaps the first region
  EXPECT_EQ(second.size(), 8192u);
  second.data()[8191] = 7;
  EXPECT_EQ(second.data()[8191], 7);
}

TEST(MemoryNodeOptionsTest, RejectsBadChunkBytes) {
  MemoryNodeOptions options = SmallOptions();
  options.chunk_bytes = 0;
  ExpectInvalidOption(options, "chunk_bytes");
  options.chunk_bytes = 64 * kKiB + 8;
  ExpectInvalidOption(options, "chunk_bytes");
}

TEST(MemoryNodeOptionsTest, RejectsBadLockRegionBytes) {
  MemoryNodeOptions options = SmallOptions();
  options.lock_region_bytes = 0;
  ExpectInvalidOption(options, "lock_region_bytes");
  options.lock_region_bytes = 4 * kKiB + 4;
  ExpectInvalidOption(options, "lock_region_bytes");
  options.lock_region_bytes = RemoteAddress::kMaxOffset + 1 + 8;
  ExpectInvalidOption(options, "lock_region_bytes");
}

TEST(MemoryNodeOptionsTest, RejectsZeroCatalogEntries) {
  MemoryNodeOptions options = SmallOptions();
  options.catalog_entries = 0;
  ExpectInvalidOption(options, "catalog_entries");
}

TEST(MemoryNodeOptionsTest, RejectsPoolTooSmallForOneChunk) {
  MemoryNodeOptions options = SmallOptions();
  options.pool_bytes = ExpectedChunksBegin(options) + options.chunk_bytes - 1;
  ExpectInvalidOption(options, "pool_bytes");
  options.pool_bytes = 100;  // smaller than the header alone
  ExpectInvalidOption(options, "pool_bytes");
}

// MinPoolBytes (what the tools check --pool-bytes against before they start
// anything) is exactly the smallest pool Create accepts.
TEST(MemoryNodeOptionsTest, MinPoolBytesIsTheSmallestPoolCreateAccepts) {
  MemoryNodeOptions options = SmallOptions();
  options.pool_bytes = MinPoolBytes(options);
  EXPECT_EQ(options.pool_bytes,
            ExpectedChunksBegin(options) + options.chunk_bytes + kChunkAlignment);
  std::unique_ptr<MemoryNode> node = MakeNode(0, options);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->total_chunks(), 1u);
  options.pool_bytes -= 1;
  ExpectInvalidOption(options, "pool_bytes");
  options.chunk_bytes = ~uint64_t{4095};  // the sum would overflow
  EXPECT_EQ(MinPoolBytes(options), UINT64_MAX);
}

TEST(MemoryNodeOptionsTest, RejectsChunkBytesLargerThanPool) {
  MemoryNodeOptions options = SmallOptions();
  // A huge multiple of 4 KiB must not overflow the size check.
  options.chunk_bytes = ~uint64_t{4095};
  ExpectInvalidOption(options, "pool_bytes");
}

TEST(MemoryNodeOptionsTest, RejectsPoolBeyondAddressRange) {
  MemoryNodeOptions options = SmallOptions();
  options.pool_bytes = RemoteAddress::kMaxOffset + 1 + 4096;
  ExpectInvalidOption(options, "pool_bytes");
}

TEST(MemoryNodeTest, ReportsLayoutAndRegions) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(5, options);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->id(), 5);
  EXPECT_EQ(node->pool_bytes(), options.pool_bytes);
  EXPECT_EQ(node->lock_region_bytes(), options.lock_region_bytes);
  EXPECT_EQ(node->chunk_bytes(), options.chunk_bytes);
  EXPECT_FALSE(node->huge_pages_in_use());
  const uint64_t expected_chunks =
      (options.pool_bytes - ExpectedChunksBegin(options)) / options.chunk_bytes;
  EXPECT_EQ(expected_chunks, 15u);
  EXPECT_EQ(node->total_chunks(), expected_chunks);
  EXPECT_EQ(node->free_chunks(), expected_chunks);
  ASSERT_NE(node->lock_base(), nullptr);
  const uint8_t* lock = node->lock_base();
  EXPECT_TRUE(
      std::all_of(lock, lock + node->lock_region_bytes(), [](uint8_t b) { return b == 0; }));
  // The header is written: offset 0 must not look like a fresh page.
  const uint8_t* pool = node->pool_base();
  EXPECT_FALSE(std::all_of(pool, pool + 64, [](uint8_t b) { return b == 0; }));
}

TEST(MemoryNodeTest, LargeCatalogPushesChunksToNextPage) {
  MemoryNodeOptions options = SmallOptions();
  options.catalog_entries = 65;  // 4160 bytes of catalog: two pages
  std::unique_ptr<MemoryNode> node = MakeNode(0, options);
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> chunk = node->AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->offset(), kHeaderBytes + 2 * 4096);
}

TEST(MemoryNodeTest, HugePagesOptionStillGivesAWorkingPool) {
  MemoryNodeOptions options = SmallOptions();
  options.huge_pages = true;
  std::unique_ptr<MemoryNode> node = MakeNode(1, options);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->pool_bytes(), options.pool_bytes);
  StatusOr<RemoteAddress> chunk = node->AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  node->pool_base()[chunk->offset() + options.chunk_bytes - 1] = 9;
  EXPECT_EQ(node->pool_base()[chunk->offset() + options.chunk_bytes - 1], 9);
}

TEST(MemoryNodeTest, AllocatesEveryChunkOnceThenIsExhausted) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(3, options);
  ASSERT_NE(node, nullptr);
  const uint64_t chunks_begin = ExpectedChunksBegin(options);
  std::set<uint64_t> offsets;
  for (uint64_t i = 0; i < node->total_chunks(); ++i) {
    StatusOr<RemoteAddress> chunk = node->AllocateChunk();
    ASSERT_TRUE(chunk.ok()) << "chunk " << i << ": " << chunk.status().ToString();
    EXPECT_EQ(chunk->node(), 3);
    EXPECT_EQ(chunk->region(), fabric::Region::kPool);
    EXPECT_GE(chunk->offset(), chunks_begin);
    EXPECT_LE(chunk->offset() + options.chunk_bytes, options.pool_bytes);
    EXPECT_EQ((chunk->offset() - chunks_begin) % options.chunk_bytes, 0u);
    EXPECT_EQ(chunk->offset() % kChunkAlignment, 0u);
    EXPECT_TRUE(offsets.insert(chunk->offset()).second)
        << "handed out twice: " << chunk->ToString();
    // Every byte of the chunk must be mapped and writable.
    node->pool_base()[chunk->offset()] = 1;
    node->pool_base()[chunk->offset() + options.chunk_bytes - 1] = 1;
  }
  EXPECT_EQ(node->free_chunks(), 0u);
  StatusOr<RemoteAddress> extra = node->AllocateChunk();
  ASSERT_FALSE(extra.ok());
  EXPECT_TRUE(extra.status().IsResourceExhausted());
  EXPECT_NE(extra.status().message().find("memory node 3"), std::string_view::npos);
  EXPECT_NE(extra.status().message().find("15 chunks"), std::string_view::npos)
      << extra.status().ToString();
}

TEST(MemoryNodeTest, HandsOutLowestChunkFirst) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(0, options);
  ASSERT_NE(node, nullptr);
  const uint64_t chunks_begin = ExpectedChunksBegin(options);
  for (uint64_t i = 0; i < 4; ++i) {
    StatusOr<RemoteAddress> chunk = node->AllocateChunk();
    ASSERT_TRUE(chunk.ok());
    EXPECT_EQ(chunk->offset(), chunks_begin + i * options.chunk_bytes);
  }
}

TEST(MemoryNodeTest, FreedChunkComesBackWithItsContents) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(2, options);
  ASSERT_NE(node, nullptr);
  std::vector<RemoteAddress> chunks;
  for (int i = 0; i < 3; ++i) {
    StatusOr<RemoteAddress> chunk = node->AllocateChunk();
    ASSERT_TRUE(chunk.ok());
    chunks.push_back(*chunk);
  }
  node->pool_base()[chunks[1].offset() + 10] = 0x5a;
  ASSERT_TRUE(node->FreeChunk(chunks[1]).ok());
  EXPECT_EQ(node->free_chunks(), node->total_chunks() - 2);
  StatusOr<RemoteAddress> again = node->AllocateChunk();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, chunks[1]);
  EXPECT_EQ(node->pool_base()[again->offset() + 10], 0x5a);
}

// Each chunk's seal word lies after the last chunk, in no chunk; FreeChunk
// zeroes it, so the chunk's next holder starts unsealed; chunk_account() counts
// what was handed out and given back.
TEST(MemoryNodeTest, FreeChunkZeroesTheSealWordAndUsageCountsChunks) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(2, options);
  ASSERT_NE(node, nullptr);
  const uint64_t total = node->total_chunks();
  const uint64_t seals = SealWordOffset(node->chunks_begin(), options.chunk_bytes, total, 0);
  EXPECT_GE(seals, node->chunks_begin() + total * options.chunk_bytes);
  EXPECT_LE(seals + total * kSealWordBytes, options.pool_bytes);
  // The header a compute node READs names the same layout.
  uint64_t header[kPoolHeaderWords];
  std::memcpy(header, node->pool_base(), sizeof(header));
  EXPECT_EQ(header[0], kPoolMagic);
  EXPECT_EQ(header[kPoolHeaderChunkBytesWord], options.chunk_bytes);
  EXPECT_EQ(header[kPoolHeaderChunksBeginWord], node->chunks_begin());
  EXPECT_EQ(header[kPoolHeaderTotalChunksWord], total);

  StatusOr<RemoteAddress> first = node->AllocateChunk();
  StatusOr<RemoteAddress> second = node->AllocateChunk();
  ASSERT_TRUE(first.ok() && second.ok());
  const auto seal_of = [&](RemoteAddress chunk) -> uint64_t& {
    const uint64_t index = (chunk.offset() - node->chunks_begin()) / options.chunk_bytes;
    return *reinterpret_cast<uint64_t*>(node->pool_base() + SealWordOffset(node->chunks_begin(),
                                                                           options.chunk_bytes,
                                                                           total, index));
  };
  seal_of(*first) = 17;
  seal_of(*second) = 5;
  memnode::ChunkAccount usage = node->chunk_account();
  EXPECT_EQ(usage.chunks_allocated, 2u);
  EXPECT_EQ(usage.chunks_freed, 0u);
  EXPECT_EQ(usage.bytes_in_use(), 2 * options.chunk_bytes);
  ASSERT_TRUE(node->FreeChunk(*first).ok());
  EXPECT_EQ(seal_of(*first), 0u);
  EXPECT_EQ(seal_of(*second), 5u) << "only the freed chunk's word";
  EXPECT_TRUE(node->FreeChunk(*first).IsInvalidArgument());
  usage = node->chunk_account();
  EXPECT_EQ(usage.chunks_freed, 1u) << "a refused free counts nothing";
  EXPECT_EQ(usage.chunks_in_use(), 1u);
  StatusOr<RemoteAddress> again = node->AllocateChunk();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(node->chunk_account().chunks_allocated, 3u);
  EXPECT_EQ(node->chunk_account().total_chunks, total);
}

TEST(MemoryNodeTest, FreeAfterExhaustionAllowsOneMoreAllocation) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  RemoteAddress last;
  while (true) {
    StatusOr<RemoteAddress> chunk = node->AllocateChunk();
    if (!chunk.ok()) break;
    last = *chunk;
  }
  ASSERT_TRUE(node->FreeChunk(last).ok());
  StatusOr<RemoteAddress> chunk = node->AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(*chunk, last);
  EXPECT_TRUE(node->AllocateChunk().status().IsResourceExhausted());
}

TEST(MemoryNodeTest, FreeChunkRejectsBadAddresses) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(4, options);
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> chunk = node->AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  const uint64_t offset = chunk->offset();
  const uint64_t chunks_begin = ExpectedChunksBegin(options);
  const uint64_t past_end = chunks_begin + node->total_chunks() * options.chunk_bytes;
  const std::vector<RemoteAddress> bad = {
      RemoteAddress(),                                       // null
      RemoteAddress::Pool(5, offset),                        // another node
      RemoteAddress::Lock(4, offset),                        // the lock region
      RemoteAddress::Pool(4, offset + 64),                   // inside a chunk
      RemoteAddress::Pool(4, 0),                             // the header
      RemoteAddress::Pool(4, CatalogEntryOffset(0)),         // the catalog
      RemoteAddress::Pool(4, past_end),                      // past the last chunk
      RemoteAddress::Pool(4, offset + options.chunk_bytes),  // never handed out
  };
  for (RemoteAddress address : bad) {
    Status status = node->FreeChunk(address);
    EXPECT_TRUE(status.IsInvalidArgument()) << address.ToString() << ": " << status.ToString();
  }
  EXPECT_EQ(node->free_chunks(), node->total_chunks() - 1);
  EXPECT_TRUE(node->FreeChunk(*chunk).ok());
}

TEST(MemoryNodeTest, DoubleFreeIsRejected) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> chunk = node->AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  ASSERT_TRUE(node->FreeChunk(*chunk).ok());
  Status second = node->FreeChunk(*chunk);
  EXPECT_TRUE(second.IsInvalidArgument()) << second.ToString();
  EXPECT_EQ(node->free_chunks(), node->total_chunks());
}

TEST(MemoryNodeTest, PoolOfExactlyOneChunk) {
  MemoryNodeOptions options = SmallOptions();
  options.pool_bytes = MinPoolBytes(options);
  std::unique_ptr<MemoryNode> node = MakeNode(0, options);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->total_chunks(), 1u);
  StatusOr<RemoteAddress> chunk = node->AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->offset(), ExpectedChunksBegin(options));
  // The chunk's last byte, then its seal word: the pool's last bytes.
  node->pool_base()[ExpectedChunksBegin(options) + options.chunk_bytes - 1] = 1;
  EXPECT_EQ(SealWordOffset(node->chunks_begin(), options.chunk_bytes, 1, 0),
            ExpectedChunksBegin(options) + options.chunk_bytes);
  EXPECT_TRUE(node->AllocateChunk().status().IsResourceExhausted());
  ASSERT_TRUE(node->FreeChunk(*chunk).ok());
  EXPECT_TRUE(node->AllocateChunk().ok());
}

TEST(MemoryNodeTest, ConcurrentAllocationNeverSharesAChunk) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  constexpr int kThreads = 4;
  std::vector<std::vector<RemoteAddress>> taken(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&node, &taken, t] {
      // Free half of what we get to churn the free list while others allocate.
      for (int round = 0; round < 200; ++round) {
        StatusOr<RemoteAddress> chunk = node->AllocateChunk();
        if (!chunk.ok()) continue;
        if (round % 2 == 0) {
          EXPECT_TRUE(node->FreeChunk(*chunk).ok());
          continue;
        }
        taken[t].push_back(*chunk);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  std::set<RemoteAddress> all;
  for (const auto& chunks : taken) {
    for (RemoteAddress chunk : chunks)
      EXPECT_TRUE(all.insert(chunk).second) << chunk.ToString();
  }
  EXPECT_EQ(all.size() + node->free_chunks(), node->total_chunks());
}

TEST(MemoryNodeCatalogTest, CreateThenLookUp) {
  std::unique_ptr<MemoryNode> node = MakeNode(7, SmallOptions());
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> created = node->CatalogWord("btree", true);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->node(), 7);
  EXPECT_EQ(created->region(), fabric::Region::kPool);
  EXPECT_EQ(created->offset(), CatalogEntryOffset(0) + offsetof(CatalogEntry, root));
  EXPECT_EQ(created->offset() % 8, 0u);

  StatusOr<RemoteAddress> found = node->CatalogWord("btree", false);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, *created);
  StatusOr<RemoteAddress> again = node->CatalogWord("btree", true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *created);

  StatusOr<RemoteAddress> other = node->CatalogWord("radix", true);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->offset(), CatalogEntryOffset(1) + offsetof(CatalogEntry, root));
  // A prefix of an existing name is a different name.
  EXPECT_TRUE(node->CatalogWord("btre", false).status().IsNotFound());
}

TEST(MemoryNodeCatalogTest, NameIsStoredInThePoolAndSlotStartsNull) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> slot = node->CatalogWord("users", true);
  ASSERT_TRUE(slot.ok());
  const char* entry = reinterpret_cast<const char*>(node->pool_base() + CatalogEntryOffset(0));
  EXPECT_EQ(std::string(entry, 6), std::string("users\0", 6));
  uint64_t& root = *reinterpret_cast<uint64_t*>(node->pool_base() + slot->offset());
  EXPECT_EQ(std::atomic_ref<uint64_t>(root).load(), 0u);
}

TEST(MemoryNodeCatalogTest, RootWordSurvivesLaterCatalogWrites) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> slot = node->CatalogWord("a", true);
  ASSERT_TRUE(slot.ok());
  uint64_t& root = *reinterpret_cast<uint64_t*>(node->pool_base() + slot->offset());
  std::atomic_ref<uint64_t>(root).store(0x1234'5678'9abc'def0);
  ASSERT_TRUE(node->CatalogWord("b", true).ok());
  ASSERT_TRUE(node->CatalogWord("a", true).ok());
  EXPECT_EQ(std::atomic_ref<uint64_t>(root).load(), 0x1234'5678'9abc'def0u);
}

TEST(MemoryNodeCatalogTest, MissingNameIsNotFound) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  StatusOr<RemoteAddress> slot = node->CatalogWord("nothing", false);
  ASSERT_FALSE(slot.ok());
  EXPECT_TRUE(slot.status().IsNotFound()) << slot.status().ToString();
  // A failed look-up must not have created the entry.
  EXPECT_TRUE(node->CatalogWord("nothing", false).status().IsNotFound());
}

TEST(MemoryNodeCatalogTest, RejectsBadNames) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->CatalogWord("", true).status().IsInvalidArgument());
  const std::string too_long(CatalogEntry::kMaxNameBytes + 1, 'x');
  EXPECT_TRUE(node->CatalogWord(too_long, true).status().IsInvalidArgument());
  EXPECT_TRUE(node->CatalogWord(std::string("a\0b", 3), true).status().IsInvalidArgument());

  const std::string longest(CatalogEntry::kMaxNameBytes, 'y');
  StatusOr<RemoteAddress> slot = node->CatalogWord(longest, true);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  StatusOr<RemoteAddress> found = node->CatalogWord(longest, false);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, *slot);
}

TEST(MemoryNodeCatalogTest, FullCatalogIsResourceExhausted) {
  MemoryNodeOptions options = SmallOptions();
  options.catalog_entries = 3;
  std::unique_ptr<MemoryNode> node = MakeNode(0, options);
  ASSERT_NE(node, nullptr);
  std::set<RemoteAddress> slots;
  for (const char* name : {"one", "two", "three"}) {
    StatusOr<RemoteAddress> slot = node->CatalogWord(name, true);
    ASSERT_TRUE(slot.ok()) << name << ": " << slot.status().ToString();
    EXPECT_TRUE(slots.insert(*slot).second);
  }
  StatusOr<RemoteAddress> full = node->CatalogWord("four", true);
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(full.status().IsResourceExhausted()) << full.status().ToString();
  // Existing names still resolve, and a look-up of a missing one is NotFound.
  StatusOr<RemoteAddress> two = node->CatalogWord("two", true);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(slots.count(*two), 1u);
  EXPECT_TRUE(node->CatalogWord("four", false).status().IsNotFound());
}

TEST(MemoryNodeCatalogTest, ConcurrentCreatesOfOneNameShareASlot) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  constexpr int kThreads = 8;
  std::vector<StatusOr<RemoteAddress>> results(kThreads, Status::Internal("not run"));
  testing::RunThreadsTogether(kThreads,
                              [&](int t) { results[t] = node->CatalogWord("shared-root", true); });
  for (const StatusOr<RemoteAddress>& result : results) {
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(*result, *results[0]);
  }
  // Only one entry was used: the next name gets the second entry.
  StatusOr<RemoteAddress> next = node->CatalogWord("next", true);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->offset(), CatalogEntryOffset(1) + offsetof(CatalogEntry, root));
}

TEST(MemoryNodeCatalogTest, ConcurrentCreatesOfDistinctNamesGetDistinctSlots) {
  std::unique_ptr<MemoryNode> node = MakeNode(0, SmallOptions());
  ASSERT_NE(node, nullptr);
  constexpr int kThreads = 8;
  std::vector<StatusOr<RemoteAddress>> results(kThreads, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(
        [&, t] { results[t] = node->CatalogWord("root-" + std::to_string(t), true); });
  }
  for (std::thread& thread : threads)
    thread.join();
  std::set<RemoteAddress> slots;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].ok());
    EXPECT_TRUE(slots.insert(*results[t]).second);
    StatusOr<RemoteAddress> found = node->CatalogWord("root-" + std::to_string(t), false);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found, *results[t]);
  }
}

TEST(LocalMemoryNodeControlTest, ForwardsToTheNode) {
  std::unique_ptr<MemoryNode> node = MakeNode(9, SmallOptions());
  ASSERT_NE(node, nullptr);
  LocalMemoryNodeControl control(node.get());
  EXPECT_EQ(control.node_id(), 9);
  EXPECT_EQ(control.chunk_bytes(), 64 * kKiB);
  StatusOr<RemoteAddress> chunk = control.AllocateChunk();
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(node->free_chunks(), node->total_chunks() - 1);
  EXPECT_EQ(*control.FreeChunks(), node->total_chunks() - 1);
  EXPECT_TRUE(control.FreeChunk(*chunk).ok());
  EXPECT_EQ(node->free_chunks(), node->total_chunks());
  EXPECT_EQ(*control.FreeChunks(), node->total_chunks());
  StatusOr<RemoteAddress> slot = control.CatalogWord("x", true);
  ASSERT_TRUE(slot.ok());
  StatusOr<RemoteAddress> direct = node->CatalogWord("x", false);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*slot, *direct);
}

// The pool usage (ControlType::kPoolUsage): what the node handed out and
// got back, straight and through the local control path.
TEST(MemoryNodeTest, UsageCountsTheChunksHandedOutAndNotReturned) {
  const MemoryNodeOptions options = SmallOptions();
  std::unique_ptr<MemoryNode> node = MakeNode(3, options);
  ASSERT_NE(node, nullptr);
  const uint64_t chunks = (options.pool_bytes - ExpectedChunksBegin(options)) / options.chunk_bytes;
  const PoolUsage empty{.memory_node = 3,
                        .pool_bytes = 1 * kMiB,
                        .chunk_bytes = 64 * kKiB,
                        .total_chunks = chunks,
                        .free_chunks = chunks,
                        .bytes_in_use = 0};
  EXPECT_EQ(node->Usage(), empty) << node->Usage().ToString();
  std::vector<RemoteAddress> taken;
  for (int i = 0; i < 3; ++i) {
    StatusOr<RemoteAddress> chunk = node->AllocateChunk();
    ASSERT_TRUE(chunk.ok());
    taken.push_back(*chunk);
  }
  LocalMemoryNodeControl control(node.get());
  StatusOr<PoolUsage> three = control.Usage();
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ(three->free_chunks, chunks - 3);
  EXPECT_EQ(three->bytes_in_use, 3 * 64 * kKiB);
  // A catalog entry is no chunk.
  ASSERT_TRUE(node->CatalogWord("root", true).ok());
  ASSERT_TRUE(node->FreeChunk(taken[1]).ok());
  EXPECT_EQ(node->Usage().bytes_in_use, 2 * 64 * kKiB);
  EXPECT_EQ(node->Usage().free_chunks, chunks - 2);
  // A failed free changes nothing.
  EXPECT_FALSE(node->FreeChunk(taken[1]).ok());
  EXPECT_EQ(node->Usage().bytes_in_use, 2 * 64 * kKiB);
}

}  // namespace
}  // namespace dmidx::memnode
