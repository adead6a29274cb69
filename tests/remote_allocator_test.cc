#include "lib/runtime/remote_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fault_injector.h"
#include "lib/memnode/memory_node.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"
#include "testing/sanitizers.h"

namespace dmidx::runtime {
namespace {

using fabric::RemoteAddress;
using memnode::LocalMemoryNodeControl;
using memnode::MemoryNode;
using memnode::MemoryNodeControl;

constexpr uint64_t kChunkBytes = 64 * 1024;
// With 16 catalog entries the chunks begin at 8 KiB (see memory_node.h).
constexpr uint64_t kChunksBegin = 8192;

MemoryNodeOptions SmallOptions() {
  MemoryNodeOptions options;
  options.pool_bytes = 1 << 20;
  options.lock_region_bytes = 4096;
  options.chunk_bytes = kChunkBytes;
  options.huge_pages = false;
  options.catalog_entries = 16;
  return options;
}

// A control path that can be told to fail FreeChunk, and counts the calls.
class FlakyControl final : public MemoryNodeControl {
 public:
  explicit FlakyControl(MemoryNode* node) : local_(node) {}
  uint16_t node_id() const override { return local_.node_id(); }
  uint64_t chunk_bytes() const override { return local_.chunk_bytes(); }
  StatusOr<RemoteAddress> AllocateChunk() override { return local_.AllocateChunk(); }
  Status FreeChunk(RemoteAddress chunk) override {
    ++free_calls;
    if (fail_free) return Status::Unavailable("injected failure");
    return local_.FreeChunk(chunk);
  }
  StatusOr<uint64_t> FreeChunks() override { return local_.FreeChunks(); }
  StatusOr<RemoteAddress> CatalogWord(std::string_view name, bool create) override {
    return local_.CatalogWord(name, create);
  }
  StatusOr<PoolUsage> Usage() override { return local_.Usage(); }

  bool fail_free = false;
  int free_calls = 0;

 private:
  LocalMemoryNodeControl local_;
};

class RemoteAllocatorTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 3;

  void SetUp() override {
    for (uint16_t id = 0; id < kNodes; ++id) {
      StatusOr<std::unique_ptr<MemoryNode>> node = MemoryNode::Create(id, SmallOptions());
      ASSERT_TRUE(node.ok()) << node.status().ToString();
      nodes_.push_back(std::move(node).value());
      controls_.push_back(std::make_unique<FlakyControl>(nodes_.back().get()));
    }
    ASSERT_EQ(nodes_[0]->total_chunks(), 15u);
  }

  std::vector<MemoryNodeControl*> Controls() {
    std::vector<MemoryNodeControl*> controls;
    for (auto& control : controls_)
      controls.push_back(control.get());
    return controls;
  }

  uint64_t total_chunks() const { return nodes_[0]->total_chunks(); }

  // Takes every chunk of `node` through pinned chunk-sized allocations.
  void Exhaust(RemoteAllocator& allocator, uint16_t node) {
    for (uint64_t i = 0; i < total_chunks(); ++i) {
      ASSERT_TRUE(allocator.Allocate(kChunkBytes, 4096, node).ok());
    }
    ASSERT_EQ(nodes_[node]->free_chunks(), 0u);
  }

  std::vector<std::unique_ptr<MemoryNode>> nodes_;
  std::vector<std::unique_ptr<FlakyControl>> controls_;
};

TEST_F(RemoteAllocatorTest, HonoursAlignment) {
  RemoteAllocator allocator(Controls());
  for (uint64_t alignment = 1; alignment <= 4096; alignment *= 2) {
    for (uint64_t bytes : {uint64_t{1}, uint64_t{3}, uint64_t{100}, uint64_t{4097}}) {
      // A one-byte object first leaves the bump pointer misaligned.
      ASSERT_TRUE(allocator.Allocate(1, 1, 0).ok());
      StatusOr<RemoteAddress> object = allocator.Allocate(bytes, alignment, 0);
      ASSERT_TRUE(object.ok()) << object.status().ToString();
      EXPECT_EQ(object->offset() % alignment, 0u) << bytes << " bytes at " << object->ToString();
    }
  }
}

// Live objects as [begin, end) over raw addresses (node and region included).
class IntervalSet {
 public:
  // False when [begin, end) overlaps a live interval.
  bool Insert(uint64_t begin, uint64_t end) {
    auto next = live_.lower_bound(begin);
    if (next != live_.end() && next->first < end) return false;
    if (next != live_.begin() && std::prev(next)->second > begin) return false;
    live_[begin] = end;
    return true;
  }
  void Erase(uint64_t begin) { live_.erase(begin); }

 private:
  std::map<uint64_t, uint64_t> live_;
};

TEST_F(RemoteAllocatorTest, ObjectsNeverOverlapOrCrossChunks) {
  RemoteAllocator allocator(Controls());
  std::mt19937_64 random(42);
  struct Live {
    RemoteAddress address;
    uint64_t bytes;
    uint64_t alignment;
  };
  std::vector<Live> live;
  IntervalSet intervals;
  // Half the sizes come from a few tree-node sizes so freed objects get reused.
  const uint64_t common_sizes[] = {64, 100, 256, 1024};
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && random() % 3 == 0) {
      const size_t victim = random() % live.size();
      ASSERT_TRUE(
          allocator.Free(live[victim].address, live[victim].bytes, live[victim].alignment).ok());
      intervals.Erase(live[victim].address.raw());
      live[victim] = live.back();
      live.pop_back();
      continue;
    }
    const uint64_t bytes = random() % 2 ? common_sizes[random() % 4] : 1 + random() % 1500;
    const uint64_t alignment = uint64_t{1} << (random() % 13);
    StatusOr<RemoteAddress> object = allocator.Allocate(bytes, alignment);
    ASSERT_TRUE(object.ok()) << object.status().ToString();
    const uint64_t offset = object->offset();
    EXPECT_EQ(offset % alignment, 0u);
    ASSERT_GE(offset, kChunksBegin);
    EXPECT_EQ((offset - kChunksBegin) / kChunkBytes,
              (offset + bytes - 1 - kChunksBegin) / kChunkBytes)
        << "crosses a chunk boundary: " << object->ToString() << " + " << bytes;
    EXPECT_TRUE(intervals.Insert(object->raw(), object->raw() + bytes))
        << "overlaps: " << object->ToString() << " + " << bytes;
    live.push_back({*object, bytes, alignment});
  }
  EXPECT_GT(allocator.chunks_taken(), static_cast<uint64_t>(kNodes));
}

TEST_F(RemoteAllocatorTest, ReusesFreedObjectsOfTheSameRoundedSize) {
  RemoteAllocator allocator(Controls());
  StatusOr<RemoteAddress> first = allocator.Allocate(200, 64, 1);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(allocator.Free(*first, 200, 64).ok());
  EXPECT_EQ(allocator.free_objects(), 1u);
  // 250 also rounds up to 256, so it takes the freed object.
  StatusOr<RemoteAddress> second = allocator.Allocate(250, 64, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(allocator.free_objects(), 0u);
  // A different rounded size does not.
  ASSERT_TRUE(allocator.Free(*second, 250, 64).ok());
  StatusOr<RemoteAddress> third = allocator.Allocate(100, 64, 1);
  ASSERT_TRUE(third.ok());
  EXPECT_NE(*third, *first);
  EXPECT_EQ(allocator.free_objects(), 1u);
  EXPECT_EQ(allocator.chunks_taken(), 1u);
}

TEST_F(RemoteAllocatorTest, ReusedObjectMustSatisfyTheAlignment) {
  RemoteAllocator allocator(Controls());
  // A fresh chunk: the first object sits at its start, the second 64 bytes in.
  StatusOr<RemoteAddress> head = allocator.Allocate(64, 64, 0);
  StatusOr<RemoteAddress> odd = allocator.Allocate(100, 64, 0);
  ASSERT_TRUE(head.ok() && odd.ok());
  ASSERT_EQ(odd->offset() % 128, 64u);
  ASSERT_TRUE(allocator.Free(*odd, 100, 64).ok());  // 128 bytes on the free list, not 128-aligned
  StatusOr<RemoteAddress> aligned = allocator.Allocate(128, 128, 0);
  ASSERT_TRUE(aligned.ok());
  EXPECT_NE(*aligned, *odd);
  EXPECT_EQ(aligned->offset() % 128, 0u);
  EXPECT_EQ(allocator.free_objects(), 1u);
  // A request the freed object does satisfy still gets it.
  StatusOr<RemoteAddress> reused = allocator.Allocate(128, 64, 0);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, *odd);
}

TEST_F(RemoteAllocatorTest, FreeListsArePerNode) {
  RemoteAllocator allocator(Controls());
  StatusOr<RemoteAddress> on_one = allocator.Allocate(64, 64, 1);
  ASSERT_TRUE(on_one.ok());
  ASSERT_TRUE(allocator.Free(*on_one, 64, 64).ok());
  StatusOr<RemoteAddress> on_zero = allocator.Allocate(64, 64, 0);
  ASSERT_TRUE(on_zero.ok());
  EXPECT_EQ(on_zero->node(), 0);
  EXPECT_EQ(allocator.free_objects(), 1u);
}

TEST_F(RemoteAllocatorTest, SmallObjectsShareAChunk) {
  RemoteAllocator allocator(Controls());
  StatusOr<RemoteAddress> big = allocator.Allocate(40 * 1024, 64, 2);
  StatusOr<RemoteAddress> too_big_for_rest = allocator.Allocate(40 * 1024, 64, 2);
  ASSERT_TRUE(big.ok() && too_big_for_rest.ok());
  EXPECT_EQ(allocator.chunks_taken(), 2u);
  EXPECT_EQ(too_big_for_rest->offset() - big->offset(), kChunkBytes);
  StatusOr<RemoteAddress> small = allocator.Allocate(1024, 64, 2);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->offset(), too_big_for_rest->offset() + 40 * 1024);
  EXPECT_EQ(allocator.chunks_taken(), 2u);
  EXPECT_EQ(nodes_[2]->free_chunks(), total_chunks() - 2);
}

TEST_F(RemoteAllocatorTest, PinnedNodeIsTheOnlyNodeUsed) {
  RemoteAllocator allocator(Controls());
  for (int i = 0; i < 20; ++i) {
    StatusOr<RemoteAddress> object = allocator.Allocate(8192, 64, 2);
    ASSERT_TRUE(object.ok());
    EXPECT_EQ(object->node(), 2);
  }
  EXPECT_EQ(nodes_[0]->free_chunks(), total_chunks());
  EXPECT_EQ(nodes_[1]->free_chunks(), total_chunks());
  EXPECT_LT(nodes_[2]->free_chunks(), total_chunks());
}

TEST_F(RemoteAllocatorTest, PinnedNodeExhaustionDoesNotSpill) {
  RemoteAllocator allocator(Controls());
  Exhaust(allocator, 1);
  StatusOr<RemoteAddress> object = allocator.Allocate(64, 64, 1);
  ASSERT_FALSE(object.ok());
  EXPECT_TRUE(object.status().IsResourceExhausted()) << object.status().ToString();
  EXPECT_EQ(nodes_[0]->free_chunks(), total_chunks());
  EXPECT_EQ(nodes_[2]->free_chunks(), total_chunks());
  EXPECT_TRUE(allocator.Allocate(64, 64).ok());
}

TEST_F(RemoteAllocatorTest, RoundRobinVisitsEveryNode) {
  RemoteAllocator allocator(Controls());
  for (int i = 0; i < 6; ++i) {
    StatusOr<RemoteAddress> object = allocator.Allocate(64);
    ASSERT_TRUE(object.ok());
    EXPECT_EQ(object->node(), i % kNodes);
  }
}

TEST_F(RemoteAllocatorTest, RoundRobinStartsAtFirstNode) {
  RemoteAllocator allocator(Controls(), 1);
  const std::vector<uint16_t> expected = {1, 2, 0, 1};
  for (uint16_t node : expected) {
    StatusOr<RemoteAddress> object = allocator.Allocate(64);
    ASSERT_TRUE(object.ok());
    EXPECT_EQ(object->node(), node);
  }
  RemoteAllocator wrapped(Controls(), 5);  // 5 mod 3
  StatusOr<RemoteAddress> object = wrapped.Allocate(64);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->node(), 2);
}

TEST_F(RemoteAllocatorTest, ExhaustedNodeSpillsToTheOthers) {
  RemoteAllocator allocator(Controls());
  Exhaust(allocator, 0);
  std::set<uint16_t> used;
  for (int i = 0; i < 6; ++i) {
    StatusOr<RemoteAddress> object = allocator.Allocate(kChunkBytes, 64);
    ASSERT_TRUE(object.ok()) << object.status().ToString();
    EXPECT_NE(object->node(), 0);
    used.insert(object->node());
  }
  EXPECT_EQ(used, (std::set<uint16_t>{1, 2}));
}

TEST_F(RemoteAllocatorTest, AllNodesExhaustedIsResourceExhausted) {
  RemoteAllocator allocator(Controls());
  std::set<RemoteAddress> chunks;
  Status status;
  while (status.ok()) {
    StatusOr<RemoteAddress> object = allocator.Allocate(kChunkBytes, 4096);
    status = object.status();
    if (object.ok()) {
      EXPECT_TRUE(chunks.insert(*object).second) << object->ToString();
    }
    ASSERT_LE(chunks.size(), kNodes * total_chunks());
  }
  EXPECT_TRUE(status.IsResourceExhausted()) << status.ToString();
  EXPECT_EQ(chunks.size(), kNodes * total_chunks());
  for (const char* node : {"mn0", "mn1", "mn2"}) {
    EXPECT_NE(status.message().find(node), std::string_view::npos) << status.ToString();
  }
  for (const auto& node : nodes_)
    EXPECT_EQ(node->free_chunks(), 0u);
  // Freed objects are still handed out.
  ASSERT_TRUE(allocator.Free(*chunks.begin(), kChunkBytes, 4096).ok());
  StatusOr<RemoteAddress> reused = allocator.Allocate(kChunkBytes, 4096);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, *chunks.begin());
}

TEST_F(RemoteAllocatorTest, RejectsBadArguments) {
  RemoteAllocator allocator(Controls());
  const struct {
    uint64_t bytes;
    uint64_t alignment;
    std::optional<uint16_t> node;
  } bad[] = {
      {0, 64, std::nullopt},               // empty object
      {64, 0, std::nullopt},               // no alignment
      {64, 48, std::nullopt},              // not a power of two
      {64, 8192, std::nullopt},            // over 4 KiB
      {kChunkBytes + 1, 1, std::nullopt},  // bigger than a chunk
      {kChunkBytes + 1, 1, uint16_t{0}},   // bigger than a chunk, pinned
      {UINT64_MAX, 64, std::nullopt},      // would wrap when rounded
      {64, 64, uint16_t{kNodes}},          // unknown node
  };
  for (const auto& request : bad) {
    StatusOr<RemoteAddress> object =
        allocator.Allocate(request.bytes, request.alignment, request.node);
    EXPECT_TRUE(object.status().IsInvalidArgument())
        << request.bytes << "/" << request.alignment << ": " << object.status().ToString();
  }
  EXPECT_EQ(allocator.chunks_taken(), 0u);
  for (const auto& node : nodes_)
    EXPECT_EQ(node->free_chunks(), total_chunks());
  // A whole chunk, and a size that rounds up to exactly a chunk, are fine.
  EXPECT_TRUE(allocator.Allocate(kChunkBytes, 4096).ok());
  EXPECT_TRUE(allocator.Allocate(kChunkBytes - 1, 4096, 0).ok());
}

TEST_F(RemoteAllocatorTest, FreeRejectsObjectsItCannotHandOut) {
  RemoteAllocator allocator(Controls());
  StatusOr<RemoteAddress> object = allocator.Allocate(128, 64, 1);
  ASSERT_TRUE(object.ok()) << object.status().ToString();
  EXPECT_TRUE(allocator.Free(RemoteAddress(), 128, 64).IsInvalidArgument());
  EXPECT_TRUE(allocator.Free(*object, 0, 64).IsInvalidArgument());
  EXPECT_TRUE(allocator.Free(*object, 128, 48).IsInvalidArgument());
  EXPECT_TRUE(allocator.Free(*object + 8, 128, 64).IsInvalidArgument());
  EXPECT_TRUE(allocator.Free(RemoteAddress::Pool(kNodes, 4096), 128, 64).IsInvalidArgument());
  EXPECT_TRUE(allocator.Free(RemoteAddress::Lock(1, 4096), 128, 64).IsInvalidArgument());
  EXPECT_EQ(allocator.free_objects(), 0u);
  ASSERT_TRUE(allocator.Free(*object, 128, 64).ok());
  EXPECT_EQ(allocator.free_objects(), 1u);
}

TEST(RemoteAllocatorNoNodesTest, AllocateIsInvalidArgument) {
  RemoteAllocator allocator({});
  EXPECT_TRUE(allocator.Allocate(64).status().IsInvalidArgument());
  EXPECT_TRUE(allocator.Allocate(64, 64, 0).status().IsInvalidArgument());
  EXPECT_TRUE(allocator.ReleaseChunks().ok());
}

TEST_F(RemoteAllocatorTest, ReleaseChunksReturnsEveryChunk) {
  RemoteAllocator allocator(Controls());
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(allocator.Allocate(20000).ok());
  ASSERT_TRUE(allocator.Free(allocator.Allocate(64, 64, 0).value(), 64, 64).ok());
  EXPECT_GT(allocator.chunks_taken(), 3u);
  uint64_t held = 0;
  for (const auto& node : nodes_)
    held += total_chunks() - node->free_chunks();
  EXPECT_EQ(held, allocator.chunks_taken());

  ASSERT_TRUE(allocator.ReleaseChunks().ok());
  for (const auto& node : nodes_)
    EXPECT_EQ(node->free_chunks(), total_chunks());
  EXPECT_EQ(allocator.free_objects(), 0u);
  // Nothing is freed twice, and the allocator still works afterwards.
  ASSERT_TRUE(allocator.ReleaseChunks().ok());
  StatusOr<RemoteAddress> object = allocator.Allocate(64, 64, 1);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(nodes_[1]->free_chunks(), total_chunks() - 1);
}

TEST_F(RemoteAllocatorTest, ReleaseChunksReportsTheFirstErrorAndGoesOn) {
  RemoteAllocator allocator(Controls());
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(allocator.Allocate(kChunkBytes).ok());
  controls_[1]->fail_free = true;
  Status status = allocator.ReleaseChunks();
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_EQ(controls_[1]->free_calls, 2);
  EXPECT_EQ(nodes_[0]->free_chunks(), total_chunks());
  EXPECT_EQ(nodes_[2]->free_chunks(), total_chunks());
  EXPECT_EQ(nodes_[1]->free_chunks(), total_chunks() - 2);
}

// ---- The shared lists behind the allocator (remote_free_list.h) ------------
//
// Clients of one cluster, each with its worker's allocator, as the indexes
// use them (Allocate and Free with a context).

constexpr uint64_t kNodeBytes = 1024;
// The objects of the chunk the free-list directory's page went to first.
constexpr uint64_t kDirectoryChunkObjects = (kChunkBytes - kDirectoryPageBytes) / kNodeBytes;
static_assert(kDirectoryChunkObjects == 62);

class SharedAllocatorTest : public ::testing::TestWithParam<FabricBackend> {
 protected:
  // One memory node of `pool_bytes` in 64 KiB chunks.
  void Open(uint64_t pool_bytes = 16 << 20, int clients = 2,
            ReclamationOptions reclamation = ReclamationOptions{}) {
    ClusterOptions options =
        testing::SmallLocalCluster(1, pool_bytes, false, std::chrono::microseconds(0));
    options.backend = GetParam();
    options.memory_node.chunk_bytes = kChunkBytes;
    options.reclamation = reclamation;
    if (lease_period_.count() != 0) {
      options.lease.period = lease_period_;
      options.lease.timeout = 10 * lease_period_;
    }
    ASSERT_TRUE(Cluster::Open(options, &cluster_).ok());
    for (int i = 0; i < clients; ++i)
      AddClient();
  }
  void AddClient() {
    clients_.emplace_back();
    ASSERT_TRUE(cluster_->NewClient({}, &clients_.back()).ok());
    contexts_.emplace_back();
    ASSERT_TRUE(clients_.back()->NewBlockingContext(&contexts_.back()).ok());
  }
  void TearDown() override {
    extra_contexts_.clear();
    contexts_.clear();
    clients_.clear();
  }
  ContextImpl& ctx(int i) { return ContextImpl::From(*contexts_[i]); }
  RemoteAllocator& allocator(int i) { return ctx(i).allocator(); }
  memnode::MemoryNode& node() {
    return *static_cast<ClusterImpl&>(*cluster_).backend().in_process_memory_node(0);
  }
  std::vector<RemoteAddress> AllocateMany(int i, int count) {
    std::vector<RemoteAddress> objects;
    for (int n = 0; n < count; ++n) {
      StatusOr<RemoteAddress> object = allocator(i).Allocate(ctx(i), kNodeBytes, 64, 0);
      EXPECT_TRUE(object.ok()) << object.status().ToString();
      if (object.ok()) objects.push_back(*object);
    }
    return objects;
  }
  void FreeAll(int i, const std::vector<RemoteAddress>& objects) {
    for (RemoteAddress object : objects)
      ASSERT_TRUE(allocator(i).Free(ctx(i), object, kNodeBytes, 64).ok());
  }
  // Puts `objects` straight on the shared list through client `i`, in
  // whole bundles, as frees of many clients would.
  void PushAll(int i, const std::vector<RemoteAddress>& objects) {
    const uint32_t capacity = RemoteFreeLists::BundleCapacity(kNodeBytes);
    for (size_t begin = 0; begin < objects.size(); begin += capacity) {
      const size_t count = std::min<size_t>(capacity, objects.size() - begin);
      const auto [outcome, status] = allocator(i).shared_lists_for_testing().Push(
          ctx(i), 0, kNodeBytes, std::span(objects).subspan(begin, count));
      ASSERT_EQ(outcome, RemoteFreeLists::PushOutcome::kPushed) << status.ToString();
    }
  }
  // The index of the chunk holding `object`.
  uint64_t ChunkOf(RemoteAddress object) {
    return (object.offset() - node().chunks_begin()) / kChunkBytes;
  }
  memnode::ChunkAccount ListSealedAndKillTheCompactorAt(const std::vector<RemoteAddress>& objects,
                                                        RemoteAllocator::CompactionStage stage);
  // How many of `objects` each chunk holds.
  std::map<uint64_t, uint64_t> PerChunk(const std::vector<RemoteAddress>& objects) {
    std::map<uint64_t, uint64_t> per_chunk;
    for (RemoteAddress object : objects)
      ++per_chunk[ChunkOf(object)];
    return per_chunk;
  }

  // A second blocking context of client `i` (its own thread's allocator,
  // the client's hints).
  ContextImpl& AnotherContextOf(int i) {
    extra_contexts_.emplace_back();
    EXPECT_TRUE(clients_[i]->NewBlockingContext(&extra_contexts_.back()).ok());
    return ContextImpl::From(*extra_contexts_.back());
  }
  // The round trips `ctx` makes to allocate one object.
  uint64_t RoundTripsOfOneAllocation(ContextImpl& ctx) {
    const uint64_t before = ctx.counters().round_trips;
    EXPECT_TRUE(ctx.allocator().Allocate(ctx, kNodeBytes, 64, 0).ok());
    return ctx.counters().round_trips - before;
  }

  std::chrono::nanoseconds lease_period_{0};  // 0: the default
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<std::unique_ptr<Context>> extra_contexts_;
};

// Issue 27's reproduction (Sherman's 176 threads over 8 memory nodes):
// every thread's first chunk on every memory node loaded the list
// directory and popped an empty list. The threads of a compute node now
// share what they found.
TEST_P(SharedAllocatorTest, AListOneThreadFoundEmptyIsNotPoppedByTheOthersBeforeTheirFirstChunk) {
  lease_period_ = std::chrono::seconds(10);  // no recheck within the test
  Open(16 << 20, 1);
  ContextImpl& other = AnotherContextOf(0);
  EXPECT_GT(RoundTripsOfOneAllocation(ctx(0)), 0u) << "the first chunk pops the list first";
  EXPECT_EQ(RoundTripsOfOneAllocation(other), 0u) << "its client found the list empty";
  // A push of its client's says the list may hold something again: the
  // other thread's next chunk pops first, and takes what was pushed.
  FreeAll(0, AllocateMany(0, 40));
  ASSERT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
  const uint64_t chunks = other.allocator().chunks_taken();
  const uint64_t per_chunk = kChunkBytes / kNodeBytes;
  for (uint64_t i = 1; i < per_chunk + 40; ++i)
    ASSERT_TRUE(other.allocator().Allocate(other, kNodeBytes, 64, 0).ok());
  EXPECT_EQ(other.allocator().chunks_taken(), chunks);
  EXPECT_EQ(other.allocator().shared_counters().objects_popped, 40u);
}

TEST_P(SharedAllocatorTest, AListAnotherClientPushesToIsPoppedAgainAfterALeasePeriod) {
  lease_period_ = std::chrono::milliseconds(5);
  Open(16 << 20, 2);
  EXPECT_GT(RoundTripsOfOneAllocation(ctx(0)), 0u);
  // 40 of 41 (one stays, and so does the chunk).
  std::vector<RemoteAddress> objects = AllocateMany(1, 41);
  objects.pop_back();
  FreeAll(1, objects);
  ASSERT_TRUE(allocator(1).ReleaseToShared(ctx(1)).ok());
  ctx(0).SleepUntil(ctx(0).Now() + 4 * lease_period_);
  // Client 0's chunk runs out: it pops the list (its hint is old) and
  // takes what client 1 freed instead of a new chunk.
  const uint64_t chunks = allocator(0).chunks_taken();
  const uint64_t per_chunk = kChunkBytes / kNodeBytes;
  for (uint64_t i = 0; i < per_chunk && allocator(0).shared_counters().objects_popped == 0; ++i)
    ASSERT_TRUE(allocator(0).Allocate(ctx(0), kNodeBytes, 64, 0).ok());
  EXPECT_EQ(allocator(0).chunks_taken(), chunks);
  EXPECT_GT(allocator(0).shared_counters().objects_popped, 0u);
}

TEST_P(SharedAllocatorTest, ObjectsOneClientFreedAreAllocatedByAnother) {
  Open();
  const std::vector<RemoteAddress> first = AllocateMany(0, 40);
  FreeAll(0, first);
  EXPECT_EQ(allocator(0).free_objects(), 40u) << "under keep_free_objects: kept";
  ASSERT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
  EXPECT_EQ(allocator(0).free_objects(), 0u);
  // Its 40, and again what its compaction pushed back (none of their
  // chunk went back: the chunk also holds the list directory).
  EXPECT_EQ(allocator(0).compaction_counters().chunks_returned, 0u);
  EXPECT_EQ(allocator(0).shared_counters().objects_pushed,
            40u + allocator(0).compaction_counters().objects_drained);
  EXPECT_EQ(allocator(0).compaction_counters().objects_drained, 40u);
  const std::set<RemoteAddress> freed(first.begin(), first.end());
  const std::vector<RemoteAddress> second = AllocateMany(1, 40);
  for (RemoteAddress object : second)
    EXPECT_TRUE(freed.contains(object)) << object.ToString() << " was carved anew";
  EXPECT_EQ(std::set<RemoteAddress>(second.begin(), second.end()).size(), 40u);
  EXPECT_EQ(allocator(1).chunks_taken(), 0u);
}

TEST_P(SharedAllocatorTest, AWarmAllocateIsLocal) {
  Open();
  const std::vector<RemoteAddress> objects = AllocateMany(0, 10);
  FreeAll(0, objects);
  const uint64_t before = ctx(0).counters().round_trips;
  const std::vector<RemoteAddress> again = AllocateMany(0, 10);
  FreeAll(0, again);
  EXPECT_EQ(ctx(0).counters().round_trips, before) << "local objects: no round trip";
}

TEST_P(SharedAllocatorTest, PassingTheThresholdPushesABundle) {
  Open();
  const uint32_t keep = allocator(0).options().keep_free_objects;
  const std::vector<RemoteAddress> objects = AllocateMany(0, keep + 1);
  FreeAll(0, objects);
  const uint32_t bundle = RemoteFreeLists::BundleCapacity(kNodeBytes);
  EXPECT_EQ(allocator(0).shared_counters().bundles_pushed, 1u);
  EXPECT_EQ(allocator(0).free_objects(), keep + 1 - bundle);
  const std::vector<RemoteAddress> taken = AllocateMany(1, static_cast<int>(bundle));
  EXPECT_EQ(allocator(1).shared_counters().objects_popped, bundle);
  EXPECT_EQ(allocator(1).chunks_taken(), 0u);
}

TEST_P(SharedAllocatorTest, AClosingClientGivesItsFreeObjectsBack) {
  Open();
  const std::vector<RemoteAddress> objects = AllocateMany(0, 20);
  FreeAll(0, objects);
  contexts_[0].reset();  // its blocking context's worker goes
  clients_[0].reset();
  AddClient();
  const std::vector<RemoteAddress> taken = AllocateMany(2, 20);
  EXPECT_EQ(std::set<RemoteAddress>(taken.begin(), taken.end()),
            std::set<RemoteAddress>(objects.begin(), objects.end()));
}

// A client that dies loses the free objects it kept (at most
// keep_free_objects of a size), not those it gave to the list, and none of
// them is handed out twice: its close cannot push them (its posts fail).
TEST_P(SharedAllocatorTest, ADeadClientLosesOnlyWhatItKeptLocally) {
  Open();
  const std::vector<RemoteAddress> objects = AllocateMany(0, 100);
  FreeAll(0, objects);
  const uint64_t pushed = allocator(0).shared_counters().objects_pushed;
  const uint64_t kept = allocator(0).free_objects();
  EXPECT_EQ(pushed + kept, 100u);
  EXPECT_LE(kept, allocator(0).options().keep_free_objects);
  static_cast<ClusterImpl&>(*cluster_).fabric().faults()->KillComputeNode(
      clients_[0]->compute_node_id());
  contexts_[0].reset();
  clients_[0].reset();
  const std::set<RemoteAddress> freed(objects.begin(), objects.end());
  const std::vector<RemoteAddress> taken = AllocateMany(1, static_cast<int>(pushed + 5));
  uint64_t reused = 0;
  for (RemoteAddress object : taken)
    reused += freed.contains(object) ? 1 : 0;
  EXPECT_EQ(reused, pushed) << "what was pushed is reused, what was kept is lost";
  EXPECT_EQ(std::set<RemoteAddress>(taken.begin(), taken.end()).size(), taken.size());
}

// Producers hand what they allocate to consumers, who free it; a ledger
// of live objects counts an object handed out twice.
class Handoff {
 public:
  explicit Handoff(int producers) : producers_left_(producers) {}

  // Allocates `count` objects through `ctx`, each handed over; at most 256
  // wait to be freed.
  Status Produce(ContextImpl& ctx, int count) {
    for (int n = 0; n < count; ++n) {
      while (true) {
        {
          std::lock_guard lock(mutex_);
          if (handed_.size() < 256) break;
        }
        ctx.Yield();
      }
      StatusOr<RemoteAddress> object = ctx.allocator().Allocate(ctx, kNodeBytes, 64, 0);
      if (!object.ok()) {
        producers_left_.fetch_sub(1);
        return object.status();
      }
      std::lock_guard lock(mutex_);
      if (!live_.insert(object->raw()).second) twice_.fetch_add(1);
      handed_.push_back(*object);
    }
    producers_left_.fetch_sub(1);
    return Status::Ok();
  }
  // Frees what is handed over until every producer finished.
  Status Consume(ContextImpl& ctx) {
    while (true) {
      std::optional<RemoteAddress> object;
      {
        std::lock_guard lock(mutex_);
        if (!handed_.empty()) {
          object = handed_.front();
          handed_.pop_front();
          live_.erase(object->raw());
        }
      }
      if (!object) {
        if (producers_left_.load() == 0) return Status::Ok();
        ctx.Yield();
        continue;
      }
      DMIDX_RETURN_IF_ERROR(ctx.allocator().Free(ctx, *object, kNodeBytes, 64));
    }
  }
  bool producing() const { return producers_left_.load() > 0; }
  uint64_t twice() const { return twice_.load(); }

 private:
  std::mutex mutex_;
  std::set<uint64_t> live_;
  std::deque<RemoteAddress> handed_;
  std::atomic<int> producers_left_;
  std::atomic<uint64_t> twice_{0};
};

std::vector<Client*> Raw(const std::vector<std::unique_ptr<Client>>& clients) {
  std::vector<Client*> raw;
  for (const auto& client : clients)
    raw.push_back(client.get());
  return raw;
}

// Producers allocate, consumers on other clients free what they made: far
// more than the pool over the run. Without the shared lists the producers
// would run out of chunks. The ledger of live objects fails the test on an
// object handed out twice.
TEST_P(SharedAllocatorTest, APoolManyTimesTurnedOverIsNeverExhausted) {
  constexpr uint64_t kPool = 2 << 20;
  Open(kPool, 0);
  const ClientOptions shape{.threads = 2, .coroutines_per_thread = 2};
  constexpr int kClients = 4;  // 0 and 1 produce, 2 and 3 consume
  std::vector<std::unique_ptr<Client>> clients(kClients);
  for (auto& client : clients)
    ASSERT_TRUE(cluster_->NewClient(shape, &client).ok());
  const uint64_t turnover = testing::kAnySanitizer ? 2 : 6;
  // 8 producer contexts (2 clients x 2 threads x 2 coroutines).
  const int per_producer = static_cast<int>(turnover * kPool / kNodeBytes / 8);
  Handoff handoff(8);
  const std::vector<Status> results =
      testing::RunClients(Raw(clients), [&](int client, Context& context) -> Status {
        ContextImpl& ctx = ContextImpl::From(context);
        return client < 2 ? handoff.Produce(ctx, per_producer) : handoff.Consume(ctx);
      });
  for (const Status& result : results)
    EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(handoff.twice(), 0u) << "an object was handed out twice";
  uint64_t popped = 0, chunks = 0, returned = 0;
  for (auto& client : clients) {
    auto& impl = static_cast<ClientImpl&>(*client);
    for (const auto& worker : impl.workers()) {
      popped += worker->allocator().shared_counters().objects_popped;
      chunks += worker->allocator().chunks_taken();
      returned += worker->allocator().compaction_counters().chunks_returned;
    }
  }
  EXPECT_GT(popped, 0u);
  EXPECT_LE(chunks, node().total_chunks() + returned);
  // The clients' stats count the compactions of all of their allocators
  // (the lease keepers' too).
  uint64_t stats_returned = 0, stats_passes = 0, keepers_returned = 0;
  for (auto& client : clients) {
    auto& impl = static_cast<ClientImpl&>(*client);
    const ReclamationStats stats = impl.reclamation_stats();
    stats_returned += stats.chunks_returned;
    stats_passes += stats.compaction_passes;
    for (Worker* worker : {&impl.lease().worker(), &impl.lease().recovery_worker()})
      keepers_returned += worker->allocator().compaction_counters().chunks_returned;
  }
  EXPECT_EQ(stats_returned, returned + keepers_returned);
  EXPECT_GE(stats_passes, 1u) << "a 2 MiB pool turned over six times runs low";
}

// ---- Chunks back to the memory node ---------------------------------------
//
// kNodeBytes objects, 64 to a chunk. The first chunk a client takes also
// holds the free-list directory, which is never freed: it never goes back.

// Compaction only when a test or a worker asks (ReleaseToShared), not on
// a low pool.
ReclamationOptions CompactWhenAsked(uint32_t bundles_per_pass = 256) {
  ReclamationOptions reclamation;
  reclamation.compact_below_free_chunks = 0;
  reclamation.compact_bundles_per_pass = bundles_per_pass;
  return reclamation;
}

TEST_P(SharedAllocatorTest, AChunkWhoseObjectsAreAllFreedGoesBackAndIsHandedOutAgain) {
  Open(16 << 20, 2, CompactWhenAsked());
  const std::vector<RemoteAddress> objects = AllocateMany(0, 200);
  const std::map<uint64_t, uint64_t> per_chunk = PerChunk(objects);
  ASSERT_EQ(per_chunk.size(), 4u);
  const uint64_t directory_chunk = ChunkOf(objects.front());
  EXPECT_EQ(per_chunk.at(directory_chunk), kDirectoryChunkObjects) << "the directory came first";
  const memnode::ChunkAccount before = node().chunk_account();
  FreeAll(0, objects);
  ASSERT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
  const CompactionCounters& counters = allocator(0).compaction_counters();
  EXPECT_EQ(counters.chunks_sealed, 4u);
  EXPECT_EQ(counters.objects_drained, 200u);
  EXPECT_EQ(counters.chunks_returned, 3u) << "all but the directory's";
  EXPECT_EQ(counters.objects_returned, 200u - kDirectoryChunkObjects);
  EXPECT_EQ(counters.returns_failed, 0u);
  EXPECT_EQ(counters.objects_lost, 0u);
  const memnode::ChunkAccount after = node().chunk_account();
  EXPECT_EQ(after.chunks_freed, before.chunks_freed + 3);
  EXPECT_EQ(after.chunks_in_use(), before.chunks_in_use() - 3);
  EXPECT_EQ(after.bytes_in_use(), before.bytes_in_use() - 3 * kChunkBytes);

  // The directory chunk's objects went back on the list; the chunks that
  // went back are the memory node's lowest free ones, so they are carved
  // again, and nothing twice.
  const std::vector<RemoteAddress> again = AllocateMany(1, 200);
  EXPECT_EQ(std::set<RemoteAddress>(again.begin(), again.end()).size(), again.size());
  EXPECT_EQ(allocator(1).shared_counters().objects_popped, kDirectoryChunkObjects);
  EXPECT_EQ(allocator(1).chunks_taken(), 3u);
  for (RemoteAddress object : again)
    EXPECT_TRUE(per_chunk.contains(ChunkOf(object))) << object.ToString() << " in a new chunk";
  EXPECT_EQ(node().chunk_account().chunks_in_use(), before.chunks_in_use());
}

TEST_P(SharedAllocatorTest, AChunkWithOneObjectStillLiveStays) {
  Open(16 << 20, 2, CompactWhenAsked());
  std::vector<RemoteAddress> objects = AllocateMany(0, 200);
  const std::map<uint64_t, uint64_t> per_chunk = PerChunk(objects);
  const RemoteAddress live = objects[100];  // a full chunk's
  ASSERT_EQ(per_chunk.at(ChunkOf(live)), 64u);
  objects.erase(objects.begin() + 100);
  FreeAll(0, objects);
  ASSERT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
  EXPECT_EQ(allocator(0).compaction_counters().chunks_returned, 2u)
      << "neither the directory's chunk nor the live object's";
  // The memory node never hands the live object's chunk out: take every
  // chunk it has.
  std::vector<RemoteAddress> chunks;
  for (StatusOr<RemoteAddress> chunk = node().AllocateChunk(); chunk.ok();
       chunk = node().AllocateChunk()) {
    EXPECT_NE(ChunkOf(*chunk), ChunkOf(live));
    chunks.push_back(*chunk);
  }
  EXPECT_EQ(node().free_chunks(), 0u);
  for (RemoteAddress chunk : chunks)
    ASSERT_TRUE(node().FreeChunk(chunk).ok());
  // Its other 63 objects, and the directory chunk's, are on the list.
  const std::vector<RemoteAddress> again = AllocateMany(1, 63 + kDirectoryChunkObjects);
  EXPECT_EQ(allocator(1).shared_counters().objects_popped, 63 + kDirectoryChunkObjects);
  EXPECT_EQ(allocator(1).chunks_taken(), 0u);
  for (RemoteAddress object : again)
    EXPECT_NE(object, live);
}

// ---- Draining -------------------------------------------------------------
//
// Client 0 allocates the directory's chunk (62 objects) and four full
// chunks; Sparse keeps the first object of each full chunk live and
// names the rest to free: every chunk is then at least half free, and a
// pass holds five chunks' worth less five objects, so all five drain.
struct SparseChunks {
  std::vector<RemoteAddress> live;   // the first object of each full chunk
  std::vector<RemoteAddress> freed;  // the others
  std::set<uint64_t> chunks;         // the five chunks' indices
};

SparseChunks Sparse(const std::vector<RemoteAddress>& objects,
                    const std::function<uint64_t(RemoteAddress)>& chunk_of) {
  SparseChunks sparse;
  for (RemoteAddress object : objects) {
    const uint64_t chunk = chunk_of(object);
    sparse.chunks.insert(chunk);
    const bool first_of_full = chunk != chunk_of(objects.front()) &&
                               (sparse.live.empty() || chunk_of(sparse.live.back()) != chunk);
    (first_of_full ? sparse.live : sparse.freed).push_back(object);
  }
  return sparse;
}

ReclamationOptions Draining(uint32_t bundles_per_pass = 256) {
  ReclamationOptions reclamation = CompactWhenAsked(bundles_per_pass);
  reclamation.max_draining_chunks = 16;
  return reclamation;
}

// Client 1's allocator drains, as its lease keeper's recovery worker's
// does; the test calls its Tend (the keepers' own, once an hour, stay out
// of the way). `changed` stands for what compute nodes do to the lists
// meanwhile (Tend runs a full pass only after that, or to mark what a scan
// found).
class DrainingTest : public SharedAllocatorTest {
 protected:
  void OpenDraining(uint32_t bundles_per_pass = 256, uint64_t pool_bytes = 16 << 20) {
    lease_period_ = std::chrono::hours(1);
    Open(pool_bytes, 2, Draining(bundles_per_pass));
    allocator(1).EnableScans(clients_[1]->compute_node_id(), kTakeoverTends);
  }
  static constexpr uint32_t kTakeoverTends = 3;
  DrainingChunks& marks() { return static_cast<ClientImpl&>(*clients_[1]).draining_chunks(); }
  CompactionCounters counters() { return allocator(1).compaction_counters(); }
  void Tend(bool changed = true) {
    if (changed) allocator(1).NoteListsChangedForTesting(0);
    allocator(1).Tend(ctx(1));
  }
  // Nine chunks, the lowest the list directory's: client 0 frees all but
  // the first object of each other chunk, so each holds 63 of its 64
  // objects free, and puts them on the lists (its chunks sealed).
  SparseChunks FreeAllButOneOfEachChunk() {
    const SparseChunks sparse = Sparse(AllocateMany(0, kDirectoryChunkObjects + 8 * 64),
                                       [this](RemoteAddress o) { return ChunkOf(o); });
    EXPECT_EQ(sparse.chunks.size(), 9u);
    EXPECT_EQ(sparse.live.size(), 8u);
    FreeAll(0, sparse.freed);
    EXPECT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
    return sparse;
  }
  // Tends until `done` holds, at most `rounds` times; whether it did.
  bool TendUntil(const std::function<bool()>& done, int rounds = 1000) {
    for (int round = 0; round < rounds && !done(); ++round)
      Tend();
    return done();
  }
  // The highest `count` of the sparse chunks' live objects.
  static std::vector<RemoteAddress> Highest(const SparseChunks& sparse, size_t count) {
    return std::vector<RemoteAddress>(sparse.live.end() - static_cast<ptrdiff_t>(count),
                                      sparse.live.end());
  }
};

// 8 x 63 + 62 KiB are free: two marks leave 440 KiB outside them, at least
// twice theirs; a third would not. The highest chunks go first among
// equals. Their free objects go to the draining list; another compute
// node reuses every other free object and then carves anew rather than
// fill them; once their last objects are freed (on the marking node: to
// the draining list), a pass holds them whole and gives them back.
TEST_P(DrainingTest, TheChunksAScanFoundMostlyFreeDrainAndGoBackOnceTheirLastObjectIsFreed) {
  OpenDraining();
  const SparseChunks sparse = FreeAllButOneOfEachChunk();
  Tend();
  EXPECT_EQ(counters().scans, 1u);
  EXPECT_EQ(marks().count(0), 0u) << "no scan had ended before this pass";
  Tend();
  EXPECT_EQ(counters().scans, 2u);
  ASSERT_EQ(marks().count(0), 2u);
  EXPECT_EQ(counters().chunks_drained, 2u);
  const std::vector<RemoteAddress> marked = Highest(sparse, 2);
  for (RemoteAddress object : marked)
    EXPECT_TRUE(marks().Contains(0, ChunkOf(object))) << object.ToString();
  EXPECT_EQ(counters().objects_to_draining, 2u * 63);

  const uint64_t taken = allocator(0).chunks_taken();
  const std::vector<RemoteAddress> reused = AllocateMany(0, 6 * 63 + kDirectoryChunkObjects + 10);
  EXPECT_EQ(allocator(0).shared_counters().objects_popped, 6 * 63 + kDirectoryChunkObjects);
  EXPECT_EQ(allocator(0).chunks_taken(), taken + 1);
  for (RemoteAddress object : reused) {
    for (RemoteAddress live : marked)
      EXPECT_NE(ChunkOf(object), ChunkOf(live)) << object.ToString() << " of a draining chunk";
  }

  const memnode::ChunkAccount before = node().chunk_account();
  FreeAll(1, marked);
  EXPECT_EQ(counters().objects_freed_to_draining, 2u);
  ASSERT_TRUE(allocator(1).ReleaseToShared(ctx(1)).ok());
  EXPECT_EQ(counters().chunks_returned, 2u);
  EXPECT_EQ(counters().objects_returned, 2u * 64);
  EXPECT_EQ(counters().objects_lost, 0u);
  EXPECT_EQ(node().chunk_account().chunks_in_use(), before.chunks_in_use() - 2);
  EXPECT_EQ(marks().count(0), 0u);
}

// Few free objects drain nothing: a node that has few wants them reused.
TEST_P(DrainingTest, AFewFreeObjectsDrainNothing) {
  OpenDraining();
  const std::vector<RemoteAddress> objects = AllocateMany(0, kDirectoryChunkObjects + 64);
  FreeAll(0, std::vector<RemoteAddress>(objects.begin() + 1, objects.end() - 1));
  ASSERT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
  for (int round = 0; round < 4; ++round)
    Tend();
  EXPECT_GE(counters().scans, 2u);
  EXPECT_EQ(counters().chunks_drained, 0u);
  EXPECT_EQ(marks().count(0), 0u);
}

// One bundle a pass: the objects a chunk had free before its mark lie
// under everything pushed since, and a scan brings them to the draining
// list bundle by bundle, while allocators keep finding the rest on one of
// the size's two lists. Frees of another compute node, which does not
// know the marks, reach the draining list the same way, and the chunks go
// back.
TEST_P(DrainingTest, AScanBringsObjectsFreedBeforeTheMarkAndOtherNodesFreesToTheDrainingList) {
  OpenDraining(/*bundles_per_pass=*/1);
  const SparseChunks sparse = FreeAllButOneOfEachChunk();
  ASSERT_TRUE(TendUntil([&] { return marks().count(0) == 2; }));
  const std::vector<RemoteAddress> marked = Highest(sparse, 2);
  for (RemoteAddress object : marked)
    ASSERT_TRUE(marks().Contains(0, ChunkOf(object))) << object.ToString();
  // Client 0 takes an object while the scan goes on: reused, not carved.
  const uint64_t taken = allocator(0).chunks_taken();
  const uint64_t moved = counters().bundles_moved;
  const uint64_t popped = allocator(0).shared_counters().objects_popped;
  const std::vector<RemoteAddress> one = AllocateMany(0, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(allocator(0).chunks_taken(), taken);
  EXPECT_GT(allocator(0).shared_counters().objects_popped, popped);
  for (RemoteAddress live : marked)
    EXPECT_NE(ChunkOf(one.front()), ChunkOf(live));
  ASSERT_TRUE(TendUntil([&] { return counters().scans >= 4; }));
  EXPECT_GT(counters().bundles_moved, moved);

  const memnode::ChunkAccount before = node().chunk_account();
  FreeAll(0, marked);
  EXPECT_EQ(allocator(0).compaction_counters().objects_freed_to_draining, 0u);
  PushAll(0, marked);
  ASSERT_TRUE(TendUntil([&] { return counters().chunks_returned == 2; }));
  EXPECT_EQ(node().chunk_account().chunks_in_use(), before.chunks_in_use() - 2);
  EXPECT_EQ(counters().objects_lost, 0u);
}

// A chunk whose last object is never freed loses its mark after
// kMarkScans scans, and its free objects go back to the ordinary list.
TEST_P(DrainingTest, AMarkThatNeverEmptiesItsChunkExpires) {
  OpenDraining();
  const SparseChunks sparse = FreeAllButOneOfEachChunk();
  ASSERT_TRUE(TendUntil([&] { return marks().count(0) == 2; }));
  const uint64_t scans = counters().scans;
  ASSERT_TRUE(TendUntil([&] { return counters().marks_expired >= 2; }));
  EXPECT_GE(counters().scans, scans + RemoteAllocator::kMarkScans);
  EXPECT_EQ(counters().chunks_returned, 0u);
  // Expired marks' objects are reused: client 0 takes every free object
  // of the nine chunks less those of chunks marked again meanwhile.
  uint64_t draining_now = 0;
  for (const auto& [chunk, free] : PerChunk(sparse.freed))
    draining_now += marks().Contains(0, chunk) ? free : 0;
  const uint64_t taken = allocator(0).chunks_taken();
  const std::vector<RemoteAddress> reused =
      AllocateMany(0, static_cast<int>(sparse.freed.size() - draining_now));
  EXPECT_EQ(allocator(0).chunks_taken(), taken);
}

// A pool with no chunk left hands the draining chunks' objects out rather
// than fail, and never one twice nor a live one.
TEST_P(DrainingTest, ThePoolRunningOutTakesFromTheDrainingChunks) {
  OpenDraining(256, 24 * kChunkBytes);
  const SparseChunks sparse = FreeAllButOneOfEachChunk();
  ASSERT_TRUE(TendUntil([&] { return marks().count(0) == 2; }));
  const uint64_t left = node().free_chunks();
  ASSERT_GT(left, 0u);
  const std::set<RemoteAddress> live(sparse.live.begin(), sparse.live.end());
  std::set<RemoteAddress> taken;
  for (uint64_t n = 0; n < left * 64 + sparse.freed.size(); ++n) {
    StatusOr<RemoteAddress> object = allocator(0).Allocate(ctx(0), kNodeBytes, 64, 0);
    ASSERT_TRUE(object.ok()) << n << ": " << object.status().ToString();
    ASSERT_TRUE(taken.insert(*object).second) << object->ToString() << " twice";
    ASSERT_FALSE(live.contains(*object)) << object->ToString() << " is live";
  }
  EXPECT_EQ(node().free_chunks(), 0u);
  uint64_t reused = 0;
  for (RemoteAddress object : Highest(sparse, 2)) {
    for (RemoteAddress mine : taken)
      reused += ChunkOf(mine) == ChunkOf(object) ? 1 : 0;
  }
  EXPECT_EQ(reused, 2u * 63) << "the draining objects are handed out once the pool is out";
}

// Two compute nodes whose keepers both drain: the first to Tend claims
// the memory node, the other follows and keeps the drainer's marks, read
// from the memory node's table. The follower's pop never hands a marked
// chunk's object out (one an unaware node pushed to the ordinary list goes
// to the draining list), its compaction puts the marked objects it holds
// back on the draining list, its frees of one go straight there, and the
// chunks go back. While the drainer renews its claim, the other never
// takes over.
TEST_P(DrainingTest, AComputeNodeThatDoesNotDrainFollowsTheDrainersMarks) {
  OpenDraining();
  allocator(0).EnableScans(clients_[0]->compute_node_id(), kTakeoverTends);
  DrainingChunks& followed = static_cast<ClientImpl&>(*clients_[0]).draining_chunks();
  const SparseChunks sparse = FreeAllButOneOfEachChunk();
  Tend();
  allocator(0).Tend(ctx(0));
  EXPECT_TRUE(allocator(1).DrainsForTesting(0));
  EXPECT_FALSE(allocator(0).DrainsForTesting(0));
  for (int round = 0; round < 3 * static_cast<int>(kTakeoverTends) && marks().count(0) < 2;
       ++round) {
    Tend();
    allocator(0).Tend(ctx(0));
  }
  ASSERT_EQ(marks().count(0), 2u);
  EXPECT_EQ(followed.Marked(0), marks().Marked(0)) << "the follower's last Tend read them";
  EXPECT_FALSE(allocator(0).DrainsForTesting(0));
  const std::vector<RemoteAddress> marked = Highest(sparse, 2);

  // An unaware node's push puts marked[0] on top of the ordinary list: the
  // follower's pop keeps it for the draining list and takes the next.
  PushAll(1, {marked[0]});
  const memnode::ChunkAccount before = node().chunk_account();
  const CompactionCounters popped_before = allocator(0).compaction_counters();
  const std::vector<RemoteAddress> one = AllocateMany(0, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(allocator(0).compaction_counters().objects_to_draining,
            popped_before.objects_to_draining + 1);
  for (RemoteAddress live : marked)
    EXPECT_NE(ChunkOf(one.front()), ChunkOf(live));
  // The follower's compaction holds marked[0]'s chunk whole (its 63 on the
  // draining list, its last one kept) and gives it back; the other marked
  // chunk's 63 go back to the draining list, not to the lists allocators
  // take from.
  StatusOr<uint64_t> returned = allocator(0).Compact(ctx(0), 0);
  ASSERT_TRUE(returned.ok()) << returned.status().ToString();
  EXPECT_EQ(*returned, 1u);
  EXPECT_EQ(allocator(0).compaction_counters().objects_to_draining,
            popped_before.objects_to_draining + 1 + 63);
  const std::vector<RemoteAddress> reused = AllocateMany(0, 6 * 63);
  for (RemoteAddress object : reused)
    EXPECT_NE(ChunkOf(object), ChunkOf(marked[1])) << object.ToString() << " of a draining chunk";
  FreeAll(0, {marked[1]});
  EXPECT_EQ(allocator(0).compaction_counters().objects_freed_to_draining, 1u);
  // The follower's release (its compaction) gives the other back; the
  // drainer's next full pass reads both seals 0 and takes the marks off
  // (it may mark others), and the follower takes that from the table.
  ASSERT_TRUE(allocator(0).ReleaseToShared(ctx(0)).ok());
  for (int round = 0; round < 4; ++round) {
    Tend();
    allocator(0).Tend(ctx(0));
  }
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed + 2);
  for (RemoteAddress object : marked)
    EXPECT_FALSE(marks().Contains(0, ChunkOf(object))) << object.ToString();
  EXPECT_EQ(followed.Marked(0), marks().Marked(0));
  EXPECT_FALSE(allocator(0).DrainsForTesting(0));
  EXPECT_TRUE(allocator(1).DrainsForTesting(0));
  EXPECT_EQ(counters().objects_lost + allocator(0).compaction_counters().objects_lost, 0u);
}

// A drainer that stops tending (dead, closed, or stalled) is taken over
// once its claim stood still through kTakeoverTends of the other's Tends
// after the first that saw it, with its marks; the chunks then drain
// through the new drainer's passes. The old one, if it comes back, steps
// down: it scans no more and follows.
TEST_P(DrainingTest, ADrainerThatStopsIsTakenOverWithItsMarks) {
  OpenDraining();
  allocator(0).EnableScans(clients_[0]->compute_node_id(), kTakeoverTends);
  const SparseChunks sparse = FreeAllButOneOfEachChunk();
  ASSERT_TRUE(TendUntil([&] { return marks().count(0) == 2; }));
  const std::vector<uint64_t> marked_chunks = marks().Marked(0);
  for (uint32_t tend = 0; tend < kTakeoverTends; ++tend) {
    allocator(0).Tend(ctx(0));
    EXPECT_FALSE(allocator(0).DrainsForTesting(0)) << tend;
  }
  allocator(0).Tend(ctx(0));
  ASSERT_TRUE(allocator(0).DrainsForTesting(0));
  DrainingChunks& taken = static_cast<ClientImpl&>(*clients_[0]).draining_chunks();
  EXPECT_EQ(taken.Marked(0), marked_chunks);

  // The old drainer comes back: it steps down and scans no more.
  Tend();
  EXPECT_FALSE(allocator(1).DrainsForTesting(0));
  EXPECT_TRUE(allocator(0).DrainsForTesting(0));
  const uint64_t scans = counters().scans;

  // The chunks' last objects reach the ordinary list (an unaware node's
  // push): nothing goes back until the new drainer's scan and passes.
  const memnode::ChunkAccount before = node().chunk_account();
  PushAll(1, Highest(sparse, 2));
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed);
  for (int round = 0; round < 4; ++round) {
    allocator(0).NoteListsChangedForTesting(0);
    allocator(0).Tend(ctx(0));
    Tend();
  }
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed + 2);
  EXPECT_EQ(allocator(0).compaction_counters().chunks_returned, 2u);
  EXPECT_EQ(counters().scans, scans);
  for (uint64_t chunk : marked_chunks)
    EXPECT_FALSE(taken.Contains(0, chunk)) << chunk;
  EXPECT_EQ(marks().Marked(0), taken.Marked(0));
  EXPECT_EQ(allocator(0).compaction_counters().objects_lost +
                allocator(1).compaction_counters().objects_lost,
            0u);
}

// An idle cluster costs its drainer three round trips a lease period (a
// READ of the table, a CAS of the claim, a READ of the directory): a Tend
// that finds the lists as its last pass left them, and no scan's findings
// waiting, moves nothing; every kTakeoverTends of them it runs a pass
// anyway (what changed while its last pass ran), which scans nothing.
TEST_P(DrainingTest, AnIdleDrainerScansNothing) {
  OpenDraining();
  FreeAllButOneOfEachChunk();
  ASSERT_TRUE(TendUntil([&] { return marks().count(0) == 2; }));
  // Whatever the last pass started ends.
  for (int round = 0; round < 4; ++round)
    Tend(/*changed=*/false);
  const CompactionCounters idle = counters();
  uint64_t passes = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t round_trips = ctx(1).stats().round_trips;
    const uint64_t passes_before = counters().passes;
    Tend(/*changed=*/false);
    if (counters().passes != passes_before) {
      ++passes;
    } else {
      EXPECT_EQ(ctx(1).stats().round_trips - round_trips, 3u) << round;
    }
  }
  EXPECT_LE(passes, 10 / kTakeoverTends + 1);
  EXPECT_EQ(counters().scans, idle.scans);
  EXPECT_EQ(counters().bundles_moved, idle.bundles_moved);
  EXPECT_TRUE(allocator(1).DrainsForTesting(0));
}

TEST_P(SharedAllocatorTest, AnUnsealedChunkNeverGoesBack) {
  Open(16 << 20, 2, CompactWhenAsked());
  const std::vector<RemoteAddress> objects = AllocateMany(0, 100);
  // Client 0's current chunk: 38 objects, and it may carve more.
  std::vector<RemoteAddress> current;
  for (RemoteAddress object : objects) {
    if (ChunkOf(object) == ChunkOf(objects.back())) current.push_back(object);
  }
  ASSERT_EQ(current.size(), 100 - kDirectoryChunkObjects);
  PushAll(0, current);
  const memnode::ChunkAccount before = node().chunk_account();
  StatusOr<uint64_t> returned = allocator(1).Compact(ctx(1), 0);
  ASSERT_TRUE(returned.ok()) << returned.status().ToString();
  EXPECT_EQ(*returned, 0u);
  EXPECT_EQ(allocator(1).compaction_counters().objects_drained, current.size());
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed);
  // Pushed back, not lost.
  EXPECT_EQ(allocator(1).free_objects(), 0u);
  EXPECT_EQ(allocator(1).shared_counters().objects_pushed, current.size());

  // Once sealed, the same pass gives it back.
  ASSERT_TRUE(allocator(0).SealChunks(ctx(0)).ok());
  returned = allocator(1).Compact(ctx(1), 0);
  ASSERT_TRUE(returned.ok()) << returned.status().ToString();
  EXPECT_EQ(*returned, 1u);
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed + 1);
  // A sealed chunk is not carved again: client 0 takes a new one.
  const std::vector<RemoteAddress> more = AllocateMany(0, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(allocator(0).chunks_taken(), 3u);
}

// Client 0 puts `objects` (all it carved) on the list and seals its
// chunks; client 1's compute node dies when its next compaction reaches
// `stage`. The memory node's usage before.
memnode::ChunkAccount SharedAllocatorTest::ListSealedAndKillTheCompactorAt(
    const std::vector<RemoteAddress>& objects, RemoteAllocator::CompactionStage stage) {
  PushAll(0, objects);
  EXPECT_TRUE(allocator(0).SealChunks(ctx(0)).ok());
  auto* faults = static_cast<ClusterImpl&>(*cluster_).fabric().faults();
  const uint32_t dying = clients_[1]->compute_node_id();
  allocator(1).SetCompactionHookForTesting([faults, dying, stage](auto reached) {
    if (reached == stage) faults->KillComputeNode(dying);
  });
  return node().chunk_account();
}

// A compactor that dies once it drained the lists loses what it drained,
// at most compact_bundles_per_pass bundles, and nothing else; nothing is
// handed out twice.
TEST_P(SharedAllocatorTest, ACompactorThatDiesAfterDrainingLosesOnlyWhatItDrained) {
  constexpr uint32_t kBundlesPerPass = 2;
  Open(16 << 20, 3, CompactWhenAsked(kBundlesPerPass));
  const std::vector<RemoteAddress> objects = AllocateMany(0, 300);
  const memnode::ChunkAccount before =
      ListSealedAndKillTheCompactorAt(objects, RemoteAllocator::CompactionStage::kDrained);
  EXPECT_FALSE(allocator(1).Compact(ctx(1), 0).ok());
  const CompactionCounters& dead = allocator(1).compaction_counters();
  const uint64_t drained = dead.objects_drained;
  EXPECT_EQ(dead.bundles_drained, kBundlesPerPass);
  EXPECT_LE(drained, kBundlesPerPass * RemoteFreeLists::BundleCapacity(kNodeBytes));
  EXPECT_EQ(dead.chunks_returned, 0u);
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed);
  // The survivor gets every other object of the list, then new chunks.
  const std::vector<RemoteAddress> taken = AllocateMany(2, 300);
  EXPECT_EQ(std::set<RemoteAddress>(taken.begin(), taken.end()).size(), taken.size());
  EXPECT_EQ(allocator(2).shared_counters().objects_popped, 300 - drained);
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed);
}

// One that dies after it gave chunks back gave each back once, and loses
// the rest of what it drained.
TEST_P(SharedAllocatorTest, ACompactorThatDiesAfterReturningGaveEachChunkBackOnce) {
  Open(16 << 20, 3, CompactWhenAsked());
  const std::vector<RemoteAddress> objects = AllocateMany(0, 300);
  const std::map<uint64_t, uint64_t> per_chunk = PerChunk(objects);
  ASSERT_EQ(per_chunk.size(), 5u);
  const memnode::ChunkAccount before =
      ListSealedAndKillTheCompactorAt(objects, RemoteAllocator::CompactionStage::kReturned);
  (void)allocator(1).Compact(ctx(1), 0);
  const CompactionCounters& dead = allocator(1).compaction_counters();
  EXPECT_EQ(dead.objects_drained, 300u);
  EXPECT_EQ(dead.chunks_returned, 4u) << "all but the directory's";
  EXPECT_EQ(dead.returns_failed, 0u);
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed + 4);
  // The directory chunk's objects died with it: the list is empty, and
  // the survivor carves from the chunks that went back, each once.
  const std::vector<RemoteAddress> taken = AllocateMany(2, 300);
  EXPECT_EQ(std::set<RemoteAddress>(taken.begin(), taken.end()).size(), taken.size());
  EXPECT_EQ(allocator(2).shared_counters().objects_popped, 0u);
  EXPECT_EQ(node().chunk_account().chunks_freed, before.chunks_freed + 4);
  EXPECT_EQ(node().chunk_account().chunks_in_use(), before.chunks_in_use() - 4 + 5);
}

// Producers allocate, consumers free, and compactors (two clients' worth,
// besides the producers' own passes on a low pool) run all the time: no
// object is handed out twice, no chunk given back twice, and once every
// worker gave its objects back and sealed its chunks, compaction gives
// back every chunk but those holding the list directory.
TEST_P(SharedAllocatorTest, CompactorsAtOnceNeverReturnAChunkTwiceNorHandOutAnObjectTwice) {
  // The producers turn kTurnoverPool over `turnover` times; the pool has room
  // beside them for every client's own chunks (each worker, keeper and
  // recovery worker carves one), so that two compactors draining the lists
  // all the time (a producer then finds them empty for a while) do not
  // exhaust it.
  constexpr uint64_t kTurnoverPool = 2 << 20;
  constexpr uint64_t kPool = 4 << 20;
  ReclamationOptions reclamation;
  reclamation.compact_below_free_chunks = 8;
  reclamation.compact_bundles_per_pass = 64;
  Open(kPool, 0, reclamation);
  const ClientOptions shape{.threads = 2, .coroutines_per_thread = 2};
  constexpr int kClients = 4;  // 0 produces, 1 consumes, 2 and 3 compact
  std::vector<std::unique_ptr<Client>> clients(kClients);
  for (auto& client : clients)
    ASSERT_TRUE(cluster_->NewClient(shape, &client).ok());
  const memnode::ChunkAccount start = node().chunk_account();
  const uint64_t turnover = testing::kAnySanitizer ? 2 : 6;
  const int per_producer = static_cast<int>(turnover * kTurnoverPool / kNodeBytes / 4);
  Handoff handoff(4);
  std::atomic<int> consumers_left{4};
  const std::vector<Status> results =
      testing::RunClients(Raw(clients), [&](int client, Context& context) -> Status {
        ContextImpl& ctx = ContextImpl::From(context);
        if (client == 0) {
          DMIDX_RETURN_IF_ERROR(handoff.Produce(ctx, per_producer));
        } else if (client == 1) {
          DMIDX_RETURN_IF_ERROR(handoff.Consume(ctx));
          consumers_left.fetch_sub(1);
        } else {
          while (handoff.producing() || consumers_left.load() > 0) {
            (void)ctx.allocator().Compact(ctx, 0);
            ctx.Yield();
          }
        }
        // Every object of the worker goes back, and its chunks are sealed
        // (what a compactor's contended push back kept included).
        return ctx.allocator().ReleaseToShared(ctx);
      });
  for (const Status& result : results)
    EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(handoff.twice(), 0u) << "an object was handed out twice";
  CompactionCounters sum;
  for (auto& client : clients) {
    for (const auto& worker : static_cast<ClientImpl&>(*client).workers()) {
      const CompactionCounters& counters = worker->allocator().compaction_counters();
      sum.chunks_returned += counters.chunks_returned;
      sum.returns_failed += counters.returns_failed;
      sum.passes += counters.passes;
    }
  }
  EXPECT_GT(sum.passes, 0u);
  EXPECT_GT(sum.chunks_returned, 0u);
  EXPECT_EQ(sum.returns_failed, 0u) << "a chunk given back twice is refused";
  // Every object is free and on the list, every chunk sealed: passes from
  // a fresh client give back all but the directory's chunk.
  AddClient();
  for (int pass = 0; pass < 8; ++pass)
    ASSERT_TRUE(allocator(0).Compact(ctx(0), 0).ok());
  EXPECT_LE(node().chunk_account().chunks_in_use(), start.chunks_in_use() + 1);
}

std::string BackendName(const ::testing::TestParamInfo<FabricBackend>& param) {
  return param.param == FabricBackend::kLocal ? "local" : "sim";
}

INSTANTIATE_TEST_SUITE_P(Backends, SharedAllocatorTest,
                         ::testing::Values(FabricBackend::kLocal, FabricBackend::kSim),
                         BackendName);
INSTANTIATE_TEST_SUITE_P(Backends, DrainingTest,
                         ::testing::Values(FabricBackend::kLocal, FabricBackend::kSim),
                         BackendName);

}  // namespace
}  // namespace dmidx::runtime
