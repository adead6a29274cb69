// The fabric conformance suite: what every backend guarantees (fabric.h, op.h),
// written once and instantiated per backend (fabric_test_backends.h). Tests
// that need fault injection skip, with the reason, on backends without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dmidx/stats.h"
#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/op.h"
#include "lib/fabric/remote_address.h"
#include "lib/memnode/memory_node.h"
#include "tests/fabric_test_backends.h"
#include "tests/fabric_test_client.h"

namespace dmidx::fabric_test {
namespace {

using fabric::Completion;
using fabric::Endpoint;
using fabric::kFence;
using fabric::kInline;
using fabric::Op;
using fabric::RemoteAddress;
using Clock = std::chrono::steady_clock;

#if defined(DMIDX_TSAN) || defined(__SANITIZE_THREAD__)
constexpr int kSlowdown = 8;
#elif defined(DMIDX_ASAN) || defined(__SANITIZE_ADDRESS__)
constexpr int kSlowdown = 2;
#else
constexpr int kSlowdown = 1;
#endif

// Iteration counts are chosen for a Release build; sanitizers run fewer.
constexpr int Scaled(int release_count) {
  return std::max(1, release_count / kSlowdown);
}

// How long a test may hunt for an injected fault before it gives up.
constexpr auto kProbeBudget = std::chrono::seconds(4) * kSlowdown;

// Spins, yielding, until `done()`; false after kHangTimeout.
template <typename Predicate>
bool SpinUntil(Predicate done) {
  const Clock::time_point deadline = Clock::now() + kHangTimeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Deterministic bytes that differ between seeds and positions.
uint8_t PatternByte(uint64_t seed, size_t index) {
  uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + index * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

void FillPattern(uint8_t* bytes, size_t count, uint64_t seed) {
  for (size_t i = 0; i < count; ++i)
    bytes[i] = PatternByte(seed, i);
}

// "" when equal, else where and how they first differ.
std::string CompareBytes(const uint8_t* got, const uint8_t* want, size_t count) {
  const auto [g, w] = std::mismatch(got, got + count, want);
  if (g == got + count) return "";
  char message[96];
  std::snprintf(message, sizeof(message), "byte %zu of %zu is 0x%02x, expected 0x%02x",
                static_cast<size_t>(g - got), count, *g, *w);
  return message;
}

std::string CompareToFill(const uint8_t* got, size_t count, uint8_t fill) {
  const std::vector<uint8_t> want(count, fill);
  return CompareBytes(got, want.data(), count);
}

void RunThreads(int count, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i)
    threads.emplace_back(body, i);
  for (std::thread& thread : threads)
    thread.join();
}

// Every fault `traits` says the backend can inject, switched on.
LocalFabricOptions EveryInjectableFault(const TestBackendTraits& traits) {
  LocalFabricOptions faults;
  faults.seed = 42;
  faults.torn_reads = traits.can_tear_reads;
  faults.torn_writes = traits.can_tear_writes;
  faults.reorder_unfenced = traits.can_reorder_unfenced;
  if (traits.can_delay) faults.max_apply_delay = std::chrono::microseconds(20);
  return faults;
}

class FabricConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Replaces the backend (every client of the old one must be gone). Returns
  // the reason to skip, or "" (then backend_ is set unless a failure was
  // recorded).
  std::string Build(const TestBackendOptions& options) {
    backend_.reset();
    TestBackendOrSkip made = MakeTestBackend(GetParam(), options);
    if (!made.skip_reason.empty()) return made.skip_reason;
    if (!made.status.ok()) ADD_FAILURE() << "starting the backend: " << made.status.ToString();
    backend_ = std::move(made.backend);
    return "";
  }

  fabric::Fabric& fabric() { return backend_->fabric(); }

  std::unique_ptr<TestClient> Connect(size_t buffer_bytes = kDefaultBufferBytes) {
    return TestClient::Connect(fabric(), buffer_bytes);
  }

  // A fresh chunk of `node`'s pool; null (and a recorded failure) on error.
  RemoteAddress Chunk(uint16_t node = 0) {
    auto chunk = backend_->control(node).AllocateChunk();
    if (!chunk.ok()) {
      ADD_FAILURE() << "AllocateChunk: " << chunk.status().ToString();
      return RemoteAddress();
    }
    return *chunk;
  }

  void ExpectDelaysKeepOrderAndCompletions(const LocalFabricOptions& faults);

  std::unique_ptr<TestBackend> backend_;
};

#define BUILD_OR_SKIP(options)                                           \
  do {                                                                   \
    const std::string build_skip_reason_ = Build(options);               \
    if (!build_skip_reason_.empty()) GTEST_SKIP() << build_skip_reason_; \
    ASSERT_NE(backend_, nullptr);                                        \
  } while (false)

// ---------------------------------------------------------------------------
// Shape and capabilities

TEST_P(FabricConformanceTest, CapabilitiesAndLayoutAreConsistent) {
  TestBackendOptions options;
  options.memory_nodes = 3;
  BUILD_OR_SKIP(options);
  const FabricCapabilities& capabilities = fabric().capabilities();
  EXPECT_GE(capabilities.max_batch_ops, 2u) << "command combination needs two ops per batch";
  EXPECT_GE(capabilities.max_sge, 1u);
  EXPECT_GE(capabilities.max_message_bytes, 8192u);
  EXPECT_FALSE(capabilities.masked_atomics) << "upstream rdma-core has no masked atomics";
  EXPECT_EQ(capabilities.on_chip_lock_memory, capabilities.on_chip_memory_bytes != 0);
  ASSERT_EQ(fabric().node_count(), 3);
  for (uint16_t node = 0; node < 3; ++node) {
    const fabric::NodeLayout layout = fabric().layout(node);
    EXPECT_GE(layout.pool_bytes, options.memory_node.pool_bytes) << "node " << node;
    EXPECT_GE(layout.lock_region_bytes, options.memory_node.lock_region_bytes) << "node " << node;
    if (memnode::MemoryNode* memory_node = backend_->memory_node(node)) {
      EXPECT_EQ(layout.pool_bytes, memory_node->pool_bytes());
      EXPECT_EQ(layout.lock_region_bytes, memory_node->lock_region_bytes());
    }
    EXPECT_EQ(backend_->control(node).node_id(), node);
  }
}

// ---------------------------------------------------------------------------
// READ and WRITE

std::vector<uint32_t> RoundTripSizes() {
  std::vector<uint32_t> sizes;
  for (uint32_t size = 1; size <= 64; ++size)
    sizes.push_back(size);
  for (uint32_t power = 128; power <= 4096; power *= 2) {
    sizes.push_back(power - 1);
    sizes.push_back(power);
    if (power < 4096) sizes.push_back(power + 1);
  }
  for (uint32_t size : {100u, 333u, 1000u, 1531u, 2222u, 3001u, 4093u})
    sizes.push_back(size);
  return sizes;
}

// Every size at every remote misalignment (and varied local misalignments):
// the READ returns what the WRITE wrote, and neither touches a byte outside
// its range, remote or local.
TEST_P(FabricConformanceTest, ReadWriteRoundTripAtAnySizeAndAlignment) {
  BUILD_OR_SKIP(TestBackendOptions{});
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());

  // Remote: [0, kArea) of the chunk, mirrored in `shadow`. Local: source,
  // destination and guard window buffers.
  constexpr uint32_t kArea = 8192, kBase = 128, kGuard = 64;
  constexpr uint8_t kSentinel = 0xee;
  uint8_t* source = client->bytes();
  uint8_t* destination = source + kArea;
  uint8_t* window = source + 2 * kArea;
  std::vector<uint8_t> shadow(kArea);
  FillPattern(shadow.data(), kArea, /*seed=*/7);
  std::memcpy(source, shadow.data(), kArea);
  ASSERT_OK(client->Run(0, {Op::Write(chunk, source, kArea)}));

  uint64_t seed = 100;
  for (uint32_t size : RoundTripSizes()) {
    for (uint32_t remote_misalignment = 0; remote_misalignment < 8; ++remote_misalignment) {
      // 3 is odd, so each size meets all 8 local misalignments too.
      const uint32_t local_misalignment = (remote_misalignment * 3 + size) % 8;
      const uint32_t offset = kBase + remote_misalignment;
      const std::string where = "size " + std::to_string(size) +
                                ", remote offset % 8 = " + std::to_string(remote_misalignment) +
                                ", local offset % 8 = " + std::to_string(local_misalignment);
      uint8_t* written = source + local_misalignment;
      FillPattern(written, size, ++seed);
      ASSERT_OK(client->Run(0, {Op::Write(chunk + offset, written, size)})) << where;
      std::memcpy(shadow.data() + offset, written, size);

      std::memset(destination, kSentinel, size + 16);
      uint8_t* read = destination + local_misalignment;
      const uint32_t window_bytes = size + 2 * kGuard;
      ASSERT_OK(client->Run(0, {Op::Read(chunk + offset, read, size),
                                Op::Read(chunk + (offset - kGuard), window, window_bytes)}))
          << where;
      ASSERT_EQ(CompareBytes(read, written, size), "") << where;
      ASSERT_EQ(CompareToFill(destination, local_misalignment, kSentinel), "")
          << "READ wrote before its local buffer; " << where;
      ASSERT_EQ(CompareToFill(read + size, 16 - local_misalignment, kSentinel), "")
          << "READ wrote past its local buffer; " << where;
      ASSERT_EQ(CompareBytes(window, shadow.data() + offset - kGuard, window_bytes), "")
          << "remote bytes around the WRITE (window starts " << kGuard << " bytes before it); "
          << where;
    }
  }
}

TEST_P(FabricConformanceTest, LargeReadWriteRoundTrip) {
  BUILD_OR_SKIP(TestBackendOptions{});
  constexpr uint32_t kBytes = 60 << 10;
  auto client = Connect(2 * kBytes + 4096);
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  ASSERT_LE(kBytes, fabric().capabilities().max_message_bytes);
  uint8_t* source = client->bytes() + 5;
  uint8_t* destination = client->bytes() + kBytes + 64;
  FillPattern(source, kBytes, 3);
  ASSERT_OK(client->Run(0, {Op::Write(chunk + 3, source, kBytes)}));
  ASSERT_OK(client->Run(0, {Op::Read(chunk + 3, destination, kBytes)}));
  EXPECT_EQ(CompareBytes(destination, source, kBytes), "");
}

// Same offset on three nodes: each node keeps its own bytes. One completion
// tracks batches to several nodes.
TEST_P(FabricConformanceTest, MemoryNodesAreSeparate) {
  TestBackendOptions options;
  options.memory_nodes = 3;
  BUILD_OR_SKIP(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk(1);
  ASSERT_FALSE(chunk.is_null());
  ASSERT_EQ(chunk.node(), 1);
  constexpr uint32_t kBytes = 256;
  auto at = [&](uint16_t node) { return RemoteAddress::Pool(node, chunk.offset()); };
  uint8_t* source = client->bytes();
  uint8_t* read[3] = {source + 1024, source + 2048, source + 3072};

  FillPattern(source, kBytes, 11);
  ASSERT_OK(client->Run(1, {Op::Write(at(1), source, kBytes)}));
  {
    Completion completion;
    for (uint16_t node = 0; node < 3; ++node) {
      std::memset(read[node], 0xaa, kBytes);
      ASSERT_OK(client->Post(node, {Op::Read(at(node), read[node], kBytes)}, &completion));
    }
    client->Wait(completion);
    ASSERT_OK(completion.status());
  }
  EXPECT_EQ(CompareToFill(read[0], kBytes, 0), "") << "node 0 sees node 1's WRITE";
  EXPECT_EQ(CompareBytes(read[1], source, kBytes), "");
  EXPECT_EQ(CompareToFill(read[2], kBytes, 0), "") << "node 2 sees node 1's WRITE";

  // Now a different pattern on each node, written and read back with one
  // completion per phase.
  uint8_t* pattern[3] = {source + 4096, source + 5120, source + 6144};
  {
    Completion completion;
    for (uint16_t node = 0; node < 3; ++node) {
      FillPattern(pattern[node], kBytes, 20 + node);
      ASSERT_OK(client->Post(node, {Op::Write(at(node), pattern[node], kBytes)}, &completion));
    }
    client->Wait(completion);
    ASSERT_OK(completion.status());
  }
  for (uint16_t node = 0; node < 3; ++node) {
    ASSERT_OK(client->Run(node, {Op::Read(at(node), read[node], kBytes)}));
    EXPECT_EQ(CompareBytes(read[node], pattern[node], kBytes), "") << "node " << node;
    if (memnode::MemoryNode* memory_node = backend_->memory_node(node)) {
      EXPECT_EQ(CompareBytes(memory_node->pool_base() + chunk.offset(), pattern[node], kBytes), "")
          << "pool offset does not map to pool_base() + offset on node " << node;
    }
  }
}

// ---------------------------------------------------------------------------
// Atomics

TEST_P(FabricConformanceTest, CompareSwapSwapsOnlyOnMatch) {
  BUILD_OR_SKIP(TestBackendOptions{});
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress word = chunk + 8;
  uint64_t* local = client->words();
  // Neighbours of the CASed word, to show they stay untouched.
  ASSERT_OK(client->WriteWord(chunk, 0x1111111111111111));
  ASSERT_OK(client->WriteWord(chunk + 16, 0x2222222222222222));

  constexpr uint64_t kFirst = 0xfedcba9876543210, kSecond = 0x8000000000000001;
  ASSERT_OK(client->Run(0, {Op::CompareSwap(word, &local[0], 0, kFirst)}));
  EXPECT_EQ(local[0], 0u) << "a successful CAS returns the old value";
  EXPECT_EQ(client->ReadWord(word), kFirst);

  ASSERT_OK(client->Run(0, {Op::CompareSwap(word, &local[1], 0, kSecond)}));
  EXPECT_EQ(local[1], kFirst) << "a failed CAS returns the current value";
  EXPECT_EQ(client->ReadWord(word), kFirst) << "a failed CAS changed memory";

  // Full-width compare values; the second CAS is fenced so it sees the first.
  ASSERT_OK(client->Run(0, {Op::CompareSwap(word, &local[2], kFirst, kSecond),
                            Op::CompareSwap(word, &local[3], kSecond, ~kSecond, kFence)}));
  EXPECT_EQ(local[2], kFirst);
  EXPECT_EQ(local[3], kSecond);
  EXPECT_EQ(client->ReadWord(word), ~kSecond);
  EXPECT_EQ(client->ReadWord(chunk), 0x1111111111111111u);
  EXPECT_EQ(client->ReadWord(chunk + 16), 0x2222222222222222u);

  const Stats stats = client->stats();
  EXPECT_EQ(stats.compare_swaps, 4u);
  EXPECT_EQ(stats.compare_swap_failures, 1u);
}

TEST_P(FabricConformanceTest, FetchAddReturnsOldValueAndWrapsAround) {
  BUILD_OR_SKIP(TestBackendOptions{});
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress word = chunk + 8;
  uint64_t* local = client->words();
  ASSERT_OK(client->WriteWord(chunk, 0x1111111111111111));
  ASSERT_OK(client->WriteWord(chunk + 16, 0x2222222222222222));

  ASSERT_OK(
      client->Run(0, {Op::FetchAdd(word, &local[0], 5), Op::FetchAdd(word, &local[1], 7, kFence)}));
  EXPECT_EQ(local[0], 0u);
  EXPECT_EQ(local[1], 5u);
  EXPECT_EQ(client->ReadWord(word), 12u);

  ASSERT_OK(client->WriteWord(word, ~uint64_t{0} - 1));
  ASSERT_OK(client->Run(0, {Op::FetchAdd(word, &local[2], 3)}));
  EXPECT_EQ(local[2], ~uint64_t{0} - 1);
  EXPECT_EQ(client->ReadWord(word), 1u) << "FAA must wrap around modulo 2^64";
  ASSERT_OK(client->Run(0, {Op::FetchAdd(word, &local[3], ~uint64_t{0})}));  // adds -1
  EXPECT_EQ(local[3], 1u);
  EXPECT_EQ(client->ReadWord(word), 0u);
  // A carry must not spill into the neighbouring word.
  ASSERT_OK(client->WriteWord(word, 0xffffffffffffffff));
  ASSERT_OK(client->Run(0, {Op::FetchAdd(word, &local[4], 1)}));
  EXPECT_EQ(client->ReadWord(word), 0u);
  EXPECT_EQ(client->ReadWord(chunk), 0x1111111111111111u);
  EXPECT_EQ(client->ReadWord(chunk + 16), 0x2222222222222222u);
}

// ---------------------------------------------------------------------------
// Validation

struct InvalidBatch {
  std::string what;
  uint16_t node;
  std::vector<Op> ops;
};

// Every malformed batch is refused with InvalidArgument before anything is
// posted: no counter moves, no completion is expected, and a valid WRITE
// placed first in the batch never lands.
TEST_P(FabricConformanceTest, MalformedBatchIsRejectedAndNothingPosted) {
  TestBackendOptions options;
  options.memory_nodes = 2;
  BUILD_OR_SKIP(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const FabricCapabilities& capabilities = fabric().capabilities();
  const fabric::NodeLayout layout = fabric().layout(0);
  const uint64_t pool_end = layout.pool_bytes, lock_end = layout.lock_region_bytes;

  constexpr uint64_t kOld = 0x0123456789abcdef, kNew = 0x5555555555555555;
  const RemoteAddress target = chunk + 64;
  ASSERT_OK(client->WriteWord(target, kOld));
  uint8_t* buffer = client->bytes();
  uint64_t* words = client->words();
  words[0] = kNew;
  const Op write_new = Op::Write(target, &words[0], 8);
  uint64_t* result = &words[1];
  uint64_t unregistered = 0;

  std::vector<InvalidBatch> cases = {
      {"empty batch", 0, {}},
      {"unknown node", 2, {Op::Read(RemoteAddress::Pool(2, 4096), result, 8)}},
      {"address on another node than the batch",
       0,
       {write_new, Op::Read(RemoteAddress::Pool(1, chunk.offset()), result, 8)}},
      {"misaligned CAS", 0, {write_new, Op::CompareSwap(chunk + 4, result, 0, 1)}},
      {"misaligned FAA", 0, {write_new, Op::FetchAdd(chunk + 1, result, 1)}},
      {"misaligned lock-region CAS",
       0,
       {write_new, Op::CompareSwap(RemoteAddress::Lock(0, 12), result, 0, 1)}},
      {"misaligned atomic result buffer",
       0,
       {write_new, Op::FetchAdd(chunk, reinterpret_cast<uint64_t*>(buffer + 17), 1)}},
      {"READ across the pool end",
       0,
       {write_new, Op::Read(RemoteAddress::Pool(0, pool_end - 4), result, 8)}},
      {"WRITE at the pool end",
       0,
       {write_new, Op::Write(RemoteAddress::Pool(0, pool_end), result, 1)}},
      {"READ far past the pool",
       0,
       {write_new, Op::Read(RemoteAddress::Pool(0, RemoteAddress::kMaxOffset - 3), result, 8)}},
      {"READ across the lock region end",
       0,
       {write_new, Op::Read(RemoteAddress::Lock(0, lock_end - 4), result, 8)}},
      {"FAA at the lock region end",
       0,
       {write_new, Op::FetchAdd(RemoteAddress::Lock(0, lock_end), result, 1)}},
      {"zero-length READ", 0, {write_new, Op::Read(chunk, result, 0)}},
      {"null local buffer", 0, {write_new, Op::Read(chunk, nullptr, 8)}},
      {"unregistered local buffer", 0, {write_new, Op::Read(chunk, &unregistered, 8)}},
      {"local buffer running past its registration",
       0,
       {write_new, Op::Read(chunk, buffer + client->buffer_bytes() - 4, 8)}},
      {"inline READ", 0, {write_new, Op::Read(chunk, result, 8, kInline)}},
      {"inline WRITE over max_inline_bytes",
       0,
       {write_new,
        Op::Write(chunk + 256, buffer + 1024, capabilities.max_inline_bytes + 1, kInline)}},
      {"READ over max_message_bytes",
       0,
       {write_new, Op::Read(chunk, buffer, capabilities.max_message_bytes + 1)}},
  };
  {
    InvalidBatch too_many{"more than max_batch_ops ops", 0, {write_new}};
    while (too_many.ops.size() <= capabilities.max_batch_ops) {
      too_many.ops.push_back(Op::Read(chunk, result, 8));
    }
    cases.push_back(std::move(too_many));
  }

  const Stats before = client->stats();
  for (const InvalidBatch& batch : cases) {
    SCOPED_TRACE(batch.what);
    Completion completion;
    const Status signaled = client->Post(batch.node, batch.ops, &completion);
    EXPECT_TRUE(signaled.IsInvalidArgument()) << signaled.ToString();
    EXPECT_TRUE(completion.done()) << "a rejected batch left the completion expecting it";
    const Status unsignaled = client->Post(batch.node, batch.ops, nullptr);
    EXPECT_TRUE(unsignaled.IsInvalidArgument()) << unsignaled.ToString();
    EXPECT_EQ(client->stats().ToString(), before.ToString()) << "a rejected batch was counted";
  }
  // Give any wrongly posted op every chance to land before looking.
  for (int i = 0; i < 1000; ++i)
    client->endpoint().Poll();
  EXPECT_EQ(client->ReadWord(target), kOld) << "part of a rejected batch was executed";
  EXPECT_EQ(client->ReadWord(RemoteAddress::Pool(0, pool_end - 8)), 0u);
}

TEST_P(FabricConformanceTest, FullBatchAndRegionEndsAreAccepted) {
  BUILD_OR_SKIP(TestBackendOptions{});
  const uint32_t max_ops = fabric().capabilities().max_batch_ops;
  ASSERT_LE(max_ops, 4096u) << "test buffers sized for at most 4096 ops";
  auto client = Connect(size_t{16} * max_ops + 4096);
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  uint64_t* source = client->words();
  uint64_t* destination = client->words() + max_ops;
  std::vector<Op> writes, reads;
  for (uint32_t i = 0; i < max_ops; ++i) {
    source[i] = 1000 + i;
    writes.push_back(Op::Write(chunk + 8 * i, &source[i], 8));
    reads.push_back(Op::Read(chunk + 8 * i, &destination[i], 8));
  }
  ASSERT_OK(client->Run(0, writes));
  ASSERT_OK(client->Run(0, reads));
  for (uint32_t i = 0; i < max_ops; ++i)
    ASSERT_EQ(destination[i], 1000 + i) << "op " << i;

  // The last bytes of each region are reachable.
  const fabric::NodeLayout layout = fabric().layout(0);
  const RemoteAddress pool_last = RemoteAddress::Pool(0, layout.pool_bytes - 8);
  const RemoteAddress lock_last = RemoteAddress::Lock(0, layout.lock_region_bytes - 8);
  ASSERT_OK(client->WriteWord(pool_last, 77));
  EXPECT_EQ(client->ReadWord(pool_last), 77u);
  ASSERT_OK(client->Run(0, {Op::FetchAdd(lock_last, &source[0], 9)}));
  EXPECT_EQ(client->ReadWord(lock_last), 9u);
  ASSERT_OK(client->Run(
      0, {Op::Read(RemoteAddress::Pool(0, layout.pool_bytes - 1), client->bytes(), 1)}));
}

// ---------------------------------------------------------------------------
// Ordering

// A writer posts [WRITE data=i, WRITE flag=i] (two WRITEs, the flag after the
// data); a reader on another endpoint READs the flag, then in a later batch
// the data. WRITEs of one connection land in post order, so once the flag
// reads i every data word reads at least i. Values are also monotonic in
// time for the reader.
void CheckWriteOrderSeenByConcurrentReader(TestBackend& backend, RemoteAddress data,
                                           RemoteAddress flag, uint64_t iterations) {
  constexpr int kDataWords = 8, kSlots = 16;
  std::atomic<bool> writer_done{false};
  std::atomic<uint64_t> reads_between{0};
  std::thread writer([&] {
    auto client = TestClient::Connect(backend.fabric());
    if (client == nullptr) return writer_done.store(true);
    // Sources are reused only after a signaled batch completed every earlier
    // batch of the connection (every kSlots batches).
    for (uint64_t i = 1; i <= iterations; ++i) {
      uint64_t* slot = client->words() + (i % kSlots) * (kDataWords + 1);
      std::fill(slot, slot + kDataWords + 1, i);
      const bool signaled = i % kSlots == kSlots - 1 || i == iterations;
      Completion completion;
      const Status posted = client->Post(
          0, {Op::Write(data, slot, 8 * kDataWords), Op::Write(flag, slot + kDataWords, 8)},
          signaled ? &completion : nullptr);
      if (!posted.ok()) {
        ADD_FAILURE() << "writer: " << posted.ToString();
        break;
      }
      if (signaled) {
        client->Wait(completion);
        EXPECT_OK(completion.status());
      }
    }
    writer_done.store(true);
  });
  std::thread reader([&] {
    auto client = TestClient::Connect(backend.fabric());
    if (client == nullptr) return;
    uint64_t* seen_flag = client->words();
    uint64_t* seen_data = client->words() + 1;
    uint64_t last_flag = 0, last_data = 0;
    for (;;) {
      const bool writer_finished = writer_done.load();
      Status status = client->Run(0, {Op::Read(flag, seen_flag, 8)});
      if (status.ok()) status = client->Run(0, {Op::Read(data, seen_data, 8 * kDataWords)});
      if (!status.ok()) {
        ADD_FAILURE() << "reader: " << status.ToString();
        return;
      }
      const uint64_t f = *seen_flag;
      ASSERT_GE(f, last_flag) << "the flag went back in time";
      ASSERT_LE(f, iterations);
      for (int w = 0; w < kDataWords; ++w) {
        ASSERT_GE(seen_data[w], f) << "data word " << w << " older than the flag after it";
        ASSERT_GE(seen_data[w], last_data) << "data word " << w << " went back in time";
      }
      last_flag = f;
      last_data = *std::min_element(seen_data, seen_data + kDataWords);
      if (f > 0 && f < iterations) reads_between.fetch_add(1, std::memory_order_relaxed);
      if (writer_finished) {
        EXPECT_EQ(f, iterations) << "the last flag is missing after the writer finished";
        return;
      }
    }
  });
  writer.join();
  reader.join();
  ::testing::Test::RecordProperty("reads_while_writing", std::to_string(reads_between.load()));
}

TEST_P(FabricConformanceTest, WriteOrderSeenByConcurrentReader) {
  BUILD_OR_SKIP(TestBackendOptions{});
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  CheckWriteOrderSeenByConcurrentReader(*backend_, chunk, chunk + 4096, Scaled(100000));
}

TEST_P(FabricConformanceTest, WriteOrderSeenByConcurrentReaderUnderInjectedFaults) {
  TestBackendOptions options;
  options.faults = EveryInjectableFault(TraitsOf(GetParam()));
  if (options.faults.max_apply_delay.count() == 0 && !options.faults.torn_writes) {
    GTEST_SKIP() << "fabric backend '" << GetParam() << "' injects no delays or torn WRITEs";
  }
  BUILD_OR_SKIP(options);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  CheckWriteOrderSeenByConcurrentReader(*backend_, chunk + 8, chunk + 4096, Scaled(20000));
}

// Threads WRITE disjoint bytes of the same 8-byte words at once: a WRITE
// changes exactly its own bytes, so nobody's bytes are ever lost (a backend
// that merges a partial word with a plain read-modify-write would lose them).
TEST_P(FabricConformanceTest, WritesToNeighbouringBytesNeverClobberEachOther) {
  BUILD_OR_SKIP(TestBackendOptions{});
  const RemoteAddress block = Chunk();
  ASSERT_FALSE(block.is_null());
  // Thread t owns bytes [2t, 2t + 2) of each of kWords words.
  constexpr int kThreads = 4, kWords = 16;
  const int iterations = Scaled(20000);
  RunThreads(kThreads, [&](int thread) {
    auto client = TestClient::Connect(fabric());
    if (client == nullptr) return;
    uint8_t* lane = client->bytes();
    uint8_t* seen = client->bytes() + 64;
    std::vector<Op> ops;
    for (int i = 1; i <= iterations; ++i) {
      const uint16_t value = static_cast<uint16_t>(i);
      std::memcpy(lane, &value, 2);
      ops.clear();
      for (int w = 0; w < kWords; ++w)
        ops.push_back(Op::Write(block + (8 * w + 2 * thread), lane, 2));
      ops.push_back(Op::Read(block, seen, 8 * kWords));
      const Status status = client->Run(0, ops);
      if (!status.ok()) {
        ADD_FAILURE() << "thread " << thread << ": " << status.ToString();
        return;
      }
      for (int w = 0; w < kWords; ++w) {
        uint16_t got;
        std::memcpy(&got, seen + 8 * w + 2 * thread, 2);
        if (got != value) {
          ADD_FAILURE() << "thread " << thread << " wrote " << value << " to word " << w
                        << " and read back " << got << ": another WRITE clobbered it";
          return;
        }
      }
    }
  });
}

// An unsignaled batch followed by a signaled one on the same endpoint: when
// the signaled one completes, the unsignaled one has executed too, and another
// endpoint sees its effect. With kInline the source may be reused as soon as
// Post() returns.
TEST_P(FabricConformanceTest, SignaledCompletionCoversEarlierUnsignaledBatches) {
  BUILD_OR_SKIP(TestBackendOptions{.faults = EveryInjectableFault(TraitsOf(GetParam()))});
  auto poster = Connect();
  auto observer = Connect();
  ASSERT_NE(poster, nullptr);
  ASSERT_NE(observer, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress x = chunk, y = chunk + 64, z = chunk + 128;
  uint64_t* words = poster->words();
  const bool inline_ok = fabric().capabilities().max_inline_bytes >= 8;
  for (uint64_t k = 1; k <= static_cast<uint64_t>(Scaled(2000)); ++k) {
    words[0] = k;
    ASSERT_OK(poster->Post(0, {Op::Write(x, &words[0], 8)}, nullptr));
    if (inline_ok) {
      words[1] = k * 3;
      ASSERT_OK(poster->Post(0, {Op::Write(z, &words[1], 8, kInline)}, nullptr));
      words[1] = 0xbad;  // allowed: the payload was copied at post
    }
    words[2] = k;
    ASSERT_OK(poster->Run(0, {Op::Write(y, &words[2], 8)}));
    ASSERT_EQ(observer->ReadWord(x), k) << "unsignaled WRITE not done when a later batch was";
    if (inline_ok) {
      ASSERT_EQ(observer->ReadWord(z), k * 3) << "inline payload not copied at post";
    }
  }
}

// On one endpoint a READ after a WRITE (same batch, or a later batch) sees
// the whole WRITE: WRITEs are never overtaken, and tearing only shows against
// a concurrent writer.
TEST_P(FabricConformanceTest, ReadAfterWriteOnOneEndpointSeesWholeWrite) {
  BUILD_OR_SKIP(TestBackendOptions{.faults = EveryInjectableFault(TraitsOf(GetParam()))});
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress block = Chunk();
  ASSERT_FALSE(block.is_null());
  constexpr int kWords = 64;
  uint64_t* source = client->words();
  uint64_t* destination = client->words() + kWords;
  for (uint64_t i = 1; i <= static_cast<uint64_t>(Scaled(4000)); ++i) {
    std::fill(source, source + kWords, i);
    ASSERT_OK(client->Run(
        0, {Op::Write(block, source, 8 * kWords), Op::Read(block, destination, 8 * kWords)}));
    for (int w = 0; w < kWords; ++w)
      ASSERT_EQ(destination[w], i) << "same batch, word " << w;
    std::fill(source, source + kWords, i + 1000000);
    ASSERT_OK(client->Post(0, {Op::Write(block, source, 8 * kWords)}, nullptr));
    ASSERT_OK(client->Run(0, {Op::Read(block, destination, 8 * kWords)}));
    for (int w = 0; w < kWords; ++w) {
      ASSERT_EQ(destination[w], i + 1000000) << "later batch, word " << w;
    }
  }
}

// An unsignaled batch executes even if its poster never polls again: another
// endpoint's Poll() (or the NIC) drives it.
TEST_P(FabricConformanceTest, UnsignaledBatchLandsWithoutPosterPolling) {
  BUILD_OR_SKIP(TestBackendOptions{});
  auto poster = Connect();
  auto observer = Connect();
  ASSERT_NE(poster, nullptr);
  ASSERT_NE(observer, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  uint64_t* words = poster->words();
  words[0] = 0xabcdef;
  ASSERT_OK(poster->Post(0, {Op::Write(chunk, &words[0], 8), Op::FetchAdd(chunk + 8, &words[1], 5)},
                         nullptr));
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  uint64_t seen_write = 0, seen_add = 0;
  while ((seen_write != 0xabcdef || seen_add != 5) && Clock::now() < deadline) {
    seen_write = observer->ReadWord(chunk);
    seen_add = observer->ReadWord(chunk + 8);
  }
  EXPECT_EQ(seen_write, 0xabcdefu) << "unsignaled WRITE never landed without its poster polling";
  EXPECT_EQ(seen_add, 5u) << "unsignaled FAA never landed without its poster polling";
}

// With reorder_unfenced, [READ x, WRITE x=new] without a fence sometimes
// returns the new value in the READ (the WRITE overtook it).
TEST_P(FabricConformanceTest, UnfencedReadIsSometimesOvertakenWhenInjected) {
  TestBackendOptions options;
  options.faults.reorder_unfenced = true;
  BUILD_OR_SKIP(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress x = Chunk();
  ASSERT_FALSE(x.is_null());
  uint64_t* read = client->words();
  uint64_t* source = client->words() + 1;
  const uint64_t tries = Scaled(20000);
  uint64_t overtaken = 0, t = 0;
  for (; t < tries && overtaken == 0; ++t) {
    *source = t + 1;
    ASSERT_OK(client->Run(0, {Op::Read(x, read, 8), Op::Write(x, source, 8)}));
    ASSERT_TRUE(*read == t || *read == t + 1) << "READ returned " << *read << " in try " << t;
    overtaken += *read == t + 1;
  }
  EXPECT_GT(overtaken, 0u) << "no WRITE overtook the unfenced READ before it in " << t
                           << " batches";
}

// A fenced op starts after every earlier READ and atomic completed, so none
// of these batches ever sees a later op's effect early. Runs with reordering
// injected where the backend can.
TEST_P(FabricConformanceTest, FencedOpsNeverOvertakeEarlierReadsAndAtomics) {
  TestBackendOptions options;
  options.faults.reorder_unfenced = TraitsOf(GetParam()).can_reorder_unfenced;
  BUILD_OR_SKIP(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress x = chunk, y = chunk + 64, z = chunk + 128;
  uint64_t* w = client->words();
  for (uint64_t t = 0; t < static_cast<uint64_t>(Scaled(20000)); ++t) {
    w[0] = t + 1;
    ASSERT_OK(client->Run(0, {Op::Read(x, &w[1], 8), Op::Write(x, &w[0], 8, kFence),
                              Op::FetchAdd(y, &w[2], 1), Op::Read(y, &w[3], 8, kFence),
                              Op::CompareSwap(z, &w[4], t, t + 1), Op::Read(z, &w[5], 8, kFence)}));
    ASSERT_EQ(w[1], t) << "a fenced WRITE overtook the READ before it";
    ASSERT_EQ(w[2], t);
    ASSERT_EQ(w[3], t + 1) << "a fenced READ overtook the FAA before it";
    ASSERT_EQ(w[4], t);
    ASSERT_EQ(w[5], t + 1) << "a fenced READ overtook the CAS before it";
  }
}

// READs and atomics of one connection run in order without any fence (RC
// executes them in order; only a later WRITE may pass them). HOCL relies on
// it: the node READ behind the lock CAS runs under the lock. Checked with
// unfenced-reordering injection on where the backend has it, so the knob is
// shown not to break this rule.
TEST_P(FabricConformanceTest, UnfencedReadsAndAtomicsStayInOrder) {
  TestBackendOptions options;
  options.faults.reorder_unfenced = TraitsOf(GetParam()).can_reorder_unfenced;
  BUILD_OR_SKIP(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress x = chunk, y = chunk + 64;
  uint64_t* w = client->words();
  for (uint64_t t = 0; t < static_cast<uint64_t>(Scaled(20000)); ++t) {
    ASSERT_OK(client->Run(
        0, {Op::CompareSwap(x, &w[0], t, t + 1), Op::Read(x, &w[1], 8), Op::FetchAdd(y, &w[2], 1),
            Op::Read(y, &w[3], 8), Op::CompareSwap(x, &w[4], t + 1, t + 1)}));
    ASSERT_EQ(w[0], t);
    ASSERT_EQ(w[1], t + 1) << "an unfenced READ overtook the CAS before it";
    ASSERT_EQ(w[2], t);
    ASSERT_EQ(w[3], t + 1) << "an unfenced READ overtook the FAA before it";
    ASSERT_EQ(w[4], t + 1) << "the second CAS ran before the first";
  }
}

// With max_apply_delay, batches still complete, one completion tracks several
// batches, and WRITEs land in post order.
// Batches of [WRITE x, FAA y], some signaled, under `faults`' delays: a
// signaled completion covers every earlier batch, WRITEs land in post
// order, and every FAA lands once.
void FabricConformanceTest::ExpectDelaysKeepOrderAndCompletions(const LocalFabricOptions& faults) {
  TestBackendOptions options;
  options.faults = faults;
  BUILD_OR_SKIP(options);
  auto client = Connect();
  auto observer = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_NE(observer, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress x = chunk, y = chunk + 64;
  constexpr int kBatches = 64, kSignalEvery = 8;
  uint64_t* source = client->words();
  uint64_t* old = client->words() + kBatches;
  for (int round = 0; round < Scaled(100); ++round) {
    Completion completion;
    for (int i = 0; i < kBatches; ++i) {
      source[i] = uint64_t(round) * kBatches + i + 1;
      const bool signaled = i % kSignalEvery == kSignalEvery - 1;
      ASSERT_OK(client->Post(0, {Op::Write(x, &source[i], 8), Op::FetchAdd(y, &old[i], 1)},
                             signaled ? &completion : nullptr));
    }
    client->Wait(completion);
    ASSERT_OK(completion.status());
    // The last batch was signaled: every WRITE has landed, the last one last.
    ASSERT_EQ(observer->ReadWord(x), uint64_t(round + 1) * kBatches);
    client->endpoint().Quiesce();
    std::vector<uint64_t> olds(old, old + kBatches);
    std::sort(olds.begin(), olds.end());
    for (int i = 0; i < kBatches; ++i)
      ASSERT_EQ(olds[i], uint64_t(round) * kBatches + i);
    ASSERT_EQ(observer->ReadWord(y), uint64_t(round + 1) * kBatches);
  }
}

TEST_P(FabricConformanceTest, ApplyDelayKeepsOrderAndCompletions) {
  LocalFabricOptions faults;
  faults.max_apply_delay = std::chrono::microseconds(50);
  ExpectDelaysKeepOrderAndCompletions(faults);
}

// A few ops much later than the rest (LocalFabricOptions::stall_probability)
// hold up their connection's later ops: the same order and completions.
TEST_P(FabricConformanceTest, StallsKeepOrderAndCompletions) {
  LocalFabricOptions faults;
  faults.max_apply_delay = std::chrono::microseconds(5);
  faults.stall_probability = 0.02;
  faults.stall = std::chrono::microseconds(200);
  ExpectDelaysKeepOrderAndCompletions(faults);
}

// ---------------------------------------------------------------------------
// Torn READs and WRITEs
//
// What is guaranteed, and so what is tested:
//  - A READ racing a WRITE of another connection may return any mix of old
//    and new words on every backend, torn or not (fabric.h). So "mixed" alone
//    proves nothing about the tearing switches.
//  - A READ posted after a WRITE completed (and no WRITE in flight) returns
//    the whole WRITE, tearing on or off: CompletedWriteIsReadWhole.
//  - Which mixes are possible depends on word order. Word stores of a WRITE
//    are release and word loads of a READ are acquire (local_fabric.h). If a
//    backend copies words in ascending order when not torn (the trait
//    copies_words_in_ascending_order_when_not_torn; not a fabric promise):
//      * Probe kTornWrites: one WRITE of all-i over the block, read by 64
//        one-word READs from the highest word down, each fenced so they run
//        in that order. A READ of word k+1 that sees WRITE i also sees its
//        earlier store to word k, and word k is read after word k+1, so word
//        k is at least as new: values never increase with the address. An
//        increase shows a WRITE that landed its words out of order.
//      * Probe kTornReads: 64 one-word WRITEs from the highest word down (one
//        batch, executed in order), read by one READ. By the same argument the
//        values never decrease with the address; a decrease shows a READ that
//        copied its words out of order.
//    TornReads/TornWritesAreObservableWhenInjected require those signatures
//    to appear with tearing on, and NoTearSignatureWithTearingOff that they
//    never do with tearing off, which shows that the switches do something.

enum class TearProbe { kTornWrites, kTornReads };

struct TearProbeResult {
  uint64_t reads = 0;
  uint64_t signatures = 0;
  std::string first_signature;  // the words of the first torn-looking read
};

std::string DescribeWords(const uint64_t* words, int count) {
  std::string out;
  for (int w = 0; w < count; ++w) {
    if (w > 0) out += ' ';
    out += std::to_string(words[w]);
  }
  return out;
}

// Runs a writer thread and a reader thread over a 64-word block, which must
// start zeroed (the writer writes 1, 2, ...), until `max_reads` reads,
// `budget` elapsed, or (with `stop_at_first`) the first signature.
TearProbeResult RunTearProbe(TestBackend& backend, RemoteAddress block, TearProbe probe,
                             uint64_t max_reads, Clock::duration budget, bool stop_at_first) {
  constexpr int kWords = 64;
  std::atomic<bool> stop{false};
  TearProbeResult result;
  std::thread writer([&] {
    auto client = TestClient::Connect(backend.fabric());
    if (client == nullptr) return;
    uint64_t* slot = client->words();
    std::vector<Op> ops;
    for (uint64_t i = 1; !stop.load(std::memory_order_relaxed); ++i) {
      std::fill(slot, slot + kWords, i);  // the previous batch completed
      ops.clear();
      if (probe == TearProbe::kTornWrites) {
        ops.push_back(Op::Write(block, slot, 8 * kWords));
      } else {
        for (int w = kWords - 1; w >= 0; --w)
          ops.push_back(Op::Write(block + 8 * w, slot + w, 8));
      }
      const Status status = client->Run(0, ops);
      if (!status.ok()) {
        ADD_FAILURE() << "writer: " << status.ToString();
        return;
      }
      if (i % 16 == 0) std::this_thread::yield();
    }
  });
  std::thread reader([&] {
    auto client = TestClient::Connect(backend.fabric());
    if (client != nullptr) {
      uint64_t* seen = client->words();
      std::vector<Op> ops;
      if (probe == TearProbe::kTornWrites) {
        for (int w = kWords - 1; w >= 0; --w) {
          ops.push_back(Op::Read(block + 8 * w, seen + w, 8, w == kWords - 1 ? 0 : kFence));
        }
      } else {
        ops.push_back(Op::Read(block, seen, 8 * kWords));
      }
      const Clock::time_point deadline = Clock::now() + budget;
      while (result.reads < max_reads && Clock::now() < deadline &&
             !(stop_at_first && result.signatures > 0)) {
        const Status status = client->Run(0, ops);
        if (!status.ok()) {
          ADD_FAILURE() << "reader: " << status.ToString();
          break;
        }
        ++result.reads;
        for (int w = 0; w + 1 < kWords; ++w) {
          const bool torn =
              probe == TearProbe::kTornWrites ? seen[w] < seen[w + 1] : seen[w] > seen[w + 1];
          if (torn) {
            if (result.signatures++ == 0) {
              result.first_signature = "word " + std::to_string(w) + " vs the next, in: ";
              result.first_signature += DescribeWords(seen, kWords);
            }
            break;
          }
        }
      }
    }
    stop.store(true, std::memory_order_relaxed);
  });
  reader.join();
  writer.join();
  return result;
}

// A WRITE that completed before the READ was posted is read whole, with every
// fault the backend can inject switched on and with all of them off. The
// writer and reader take turns through a handshake, so no WRITE is in flight
// while a READ runs.
TEST_P(FabricConformanceTest, CompletedWriteIsReadWhole) {
  for (const bool faults : {false, true}) {
    SCOPED_TRACE(faults ? "faults injected" : "no faults");
    TestBackendOptions options;
    if (faults) options.faults = EveryInjectableFault(TraitsOf(GetParam()));
    BUILD_OR_SKIP(options);
    const RemoteAddress block = Chunk();
    ASSERT_FALSE(block.is_null());
    constexpr int kWords = 64;
    const uint64_t rounds = Scaled(5000);
    std::atomic<uint64_t> published{0}, acknowledged{0};
    std::atomic<bool> failed{false};
    std::thread writer([&] {
      auto client = TestClient::Connect(fabric());
      if (client == nullptr) return failed.store(true);
      for (uint64_t i = 1; i <= rounds && !failed.load(); ++i) {
        std::fill(client->words(), client->words() + kWords, i);
        const Status status = client->Run(0, {Op::Write(block, client->words(), 8 * kWords)});
        if (!status.ok()) {
          ADD_FAILURE() << "writer: " << status.ToString();
          return failed.store(true);
        }
        // Release: the reader's acquire load orders its READ after our WRITE.
        published.store(i, std::memory_order_release);
        if (!SpinUntil([&] { return acknowledged.load() == i || failed.load(); })) {
          ADD_FAILURE() << "writer: reader stopped answering";
          return failed.store(true);
        }
      }
    });
    std::thread reader([&] {
      auto client = TestClient::Connect(fabric());
      if (client == nullptr) return failed.store(true);
      uint64_t* seen = client->words();
      for (uint64_t i = 1; i <= rounds && !failed.load(); ++i) {
        if (!SpinUntil(
                [&] { return published.load(std::memory_order_acquire) == i || failed.load(); })) {
          ADD_FAILURE() << "reader: writer stopped publishing";
          return failed.store(true);
        }
        const Status status = client->Run(0, {Op::Read(block, seen, 8 * kWords)});
        if (!status.ok()) {
          ADD_FAILURE() << "reader: " << status.ToString();
          return failed.store(true);
        }
        for (int w = 0; w < kWords; ++w) {
          if (seen[w] != i) {
            ADD_FAILURE() << "round " << i << ": word " << w << " reads " << seen[w];
            return failed.store(true);
          }
        }
        acknowledged.store(i);
      }
    });
    writer.join();
    reader.join();
    if (failed.load()) return;
  }
}

TEST_P(FabricConformanceTest, TornWritesAreObservableWhenInjected) {
  TestBackendOptions options;
  options.faults.torn_writes = true;
  BUILD_OR_SKIP(options);
  const RemoteAddress block = Chunk();
  ASSERT_FALSE(block.is_null());
  const TearProbeResult result =
      RunTearProbe(*backend_, block, TearProbe::kTornWrites, 200000, kProbeBudget, true);
  EXPECT_GT(result.signatures, 0u) << "no torn WRITE seen in " << result.reads << " reads";
}

TEST_P(FabricConformanceTest, TornReadsAreObservableWhenInjected) {
  TestBackendOptions options;
  options.faults.torn_reads = true;
  BUILD_OR_SKIP(options);
  const RemoteAddress block = Chunk();
  ASSERT_FALSE(block.is_null());
  const TearProbeResult result =
      RunTearProbe(*backend_, block, TearProbe::kTornReads, 200000, kProbeBudget, true);
  EXPECT_GT(result.signatures, 0u) << "no torn READ seen in " << result.reads << " reads";
}

TEST_P(FabricConformanceTest, NoTearSignatureWithTearingOff) {
  if (!TraitsOf(GetParam()).copies_words_in_ascending_order_when_not_torn) {
    GTEST_SKIP() << "fabric backend '" << GetParam()
                 << "' does not promise a word order within one op";
  }
  BUILD_OR_SKIP(TestBackendOptions{});
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  for (const TearProbe probe : {TearProbe::kTornWrites, TearProbe::kTornReads}) {
    // A fresh block per probe: each probe's values start again at 1.
    const RemoteAddress block = chunk + (probe == TearProbe::kTornWrites ? 0 : 4096);
    const TearProbeResult result =
        RunTearProbe(*backend_, block, probe, Scaled(20000), kProbeBudget, false);
    EXPECT_EQ(result.signatures, 0u)
        << (probe == TearProbe::kTornWrites ? "WRITE" : "READ") << " torn with tearing off, in "
        << result.reads << " reads; first: " << result.first_signature;
  }
}

// ---------------------------------------------------------------------------
// Counters

TEST_P(FabricConformanceTest, CountersAreExact) {
  BUILD_OR_SKIP(TestBackendOptions{});
  auto client = Connect();
  auto other = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_NE(other, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  const RemoteAddress x = chunk, y = chunk + 8, data = chunk + 64;
  uint8_t* buffer = client->bytes();
  uint64_t* w = client->words();
  Stats expected;
  EXPECT_EQ(client->stats().ToString(), expected.ToString());

  ASSERT_OK(
      client->Run(0, {Op::Write(data, buffer + 1024, 100), Op::Read(data + 3, buffer + 2048, 37)}));
  expected.batches = 1;
  expected.writes = 1;
  expected.reads = 1;
  expected.bytes_written = 100;
  expected.bytes_read = 37;
  EXPECT_EQ(client->stats().ToString(), expected.ToString());

  ASSERT_OK(
      client->Run(0, {Op::CompareSwap(x, &w[0], 0, 5), Op::CompareSwap(x, &w[1], 0, 6, kFence),
                      Op::FetchAdd(y, &w[2], 3, kFence)}));
  ASSERT_EQ(w[1], 5u);
  expected.batches = 2;
  expected.compare_swaps = 2;
  expected.fetch_adds = 1;
  expected.bytes_read += 3 * 8;
  expected.bytes_written += 3 * 8;
  expected.compare_swap_failures = 1;
  EXPECT_EQ(client->stats().ToString(), expected.ToString())
      << "counters must be exact once the batch completed";

  w[3] = 99;
  ASSERT_OK(client->Post(0, {Op::CompareSwap(x, &w[4], 0, 7)}, nullptr));  // fails
  ASSERT_OK(client->Post(0, {Op::Write(data, &w[3], 8, 0)}, nullptr));
  EXPECT_TRUE(client->Post(0, {Op::CompareSwap(x + 4, &w[5], 0, 1)}, nullptr).IsInvalidArgument());
  client->endpoint().Quiesce();
  expected.batches = 4;
  expected.compare_swaps = 3;
  expected.writes = 2;
  expected.bytes_read += 8;
  expected.bytes_written += 8 + 8;
  expected.compare_swap_failures = 2;
  EXPECT_EQ(client->stats().ToString(), expected.ToString());

  ASSERT_OK(client->Run(0, {Op::Read(chunk, buffer + 4096, 4096)}));
  expected.batches = 5;
  expected.reads = 2;
  expected.bytes_read += 4096;
  EXPECT_EQ(client->stats().ToString(), expected.ToString());
  EXPECT_EQ(client->stats().round_trips, 0u) << "the fabric does not count round trips";
  EXPECT_EQ(other->stats().ToString(), Stats().ToString()) << "counters leak across endpoints";
}

// ---------------------------------------------------------------------------
// Lock region

TEST_P(FabricConformanceTest, LockRegionSupportsEveryOp) {
  BUILD_OR_SKIP(TestBackendOptions{});
  const uint64_t lock_bytes = fabric().layout(0).lock_region_bytes;
  ASSERT_GE(lock_bytes, 4096u);
  ASSERT_LE(lock_bytes, uint64_t{1} << 20) << "lock region larger than this test reads";
  auto client = Connect(lock_bytes + 4096);
  ASSERT_NE(client, nullptr);
  uint64_t* w = client->words();
  auto lock = [](uint64_t offset) { return RemoteAddress::Lock(0, offset); };

  ASSERT_OK(client->Run(0, {Op::Read(lock(0), client->bytes(), lock_bytes)}));
  EXPECT_EQ(CompareToFill(client->bytes(), lock_bytes, 0), "") << "lock region starts zeroed";

  ASSERT_OK(client->Run(
      0, {Op::CompareSwap(lock(64), &w[0], 0, 1), Op::FetchAdd(lock(64), &w[1], 10, kFence),
          Op::Read(lock(64), &w[2], 8, kFence)}));
  EXPECT_EQ(w[0], 0u);
  EXPECT_EQ(w[1], 1u);
  EXPECT_EQ(w[2], 11u);
  ASSERT_OK(client->Run(0, {Op::CompareSwap(lock(64), &w[3], 5, 6)}));
  EXPECT_EQ(w[3], 11u) << "failed CAS on the lock region";
  ASSERT_OK(client->WriteWord(lock(72), 0xfeed));
  EXPECT_EQ(client->ReadWord(lock(72)), 0xfeedu);

  uint8_t* bytes = client->bytes();
  std::memcpy(bytes, "abc", 3);
  ASSERT_OK(client->Run(0, {Op::Write(lock(101), bytes, 3)}));
  ASSERT_OK(client->Run(0, {Op::Read(lock(96), bytes + 64, 16)}));
  const uint8_t want[16] = {0, 0, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(CompareBytes(bytes + 64, want, 16), "") << "unaligned WRITE on the lock region";

  // The lock region and the pool are different memory.
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  if (chunk.offset() + 8 <= lock_bytes) {
    ASSERT_OK(client->WriteWord(lock(chunk.offset()), 0x77));
    EXPECT_EQ(client->ReadWord(chunk), 0u) << "a lock-region WRITE landed in the pool";
    ASSERT_OK(client->WriteWord(chunk, 0x99));
    EXPECT_EQ(client->ReadWord(lock(chunk.offset())), 0x77u)
        << "a pool WRITE landed in the lock region";
  }
  if (memnode::MemoryNode* memory_node = backend_->memory_node(0)) {
    uint64_t raw;
    std::memcpy(&raw, memory_node->lock_base() + 64, 8);
    EXPECT_EQ(raw, 11u) << "lock offset does not map to lock_base() + offset";
  }
}

TEST_P(FabricConformanceTest, OnChipLockRegionFollowsOption) {
  if (!TraitsOf(GetParam()).emulates_on_chip_lock_region) {
    GTEST_SKIP() << "fabric backend '" << GetParam()
                 << "' reports the lock memory its device has, whatever the option says";
  }
  for (const bool on_chip : {false, true}) {
    SCOPED_TRACE(on_chip ? "on_chip_lock_region" : "host lock region");
    TestBackendOptions options;
    options.memory_node.lock_region_bytes = 128 << 10;
    options.faults.on_chip_lock_region = on_chip;
    BUILD_OR_SKIP(options);
    const FabricCapabilities& capabilities = fabric().capabilities();
    EXPECT_EQ(capabilities.on_chip_lock_memory, on_chip);
    EXPECT_EQ(capabilities.on_chip_memory_bytes,
              on_chip ? fabric().layout(0).lock_region_bytes : 0);
    EXPECT_EQ(fabric().layout(0).lock_region_bytes, uint64_t{128} << 10);
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_OK(client->Run(0, {Op::FetchAdd(RemoteAddress::Lock(0, 8), client->words(), 2)}));
    EXPECT_EQ(client->ReadWord(RemoteAddress::Lock(0, 8)), 2u);
  }
}

// ---------------------------------------------------------------------------
// Memory-node control path: chunks and catalog

TEST_P(FabricConformanceTest, ChunkExhaustionIsResourceExhaustedAndNoChunkRepeats) {
  TestBackendOptions options;
  options.memory_nodes = 2;
  options.memory_node.pool_bytes = 1 << 20;
  BUILD_OR_SKIP(options);
  memnode::MemoryNodeControl& control = backend_->control(0);
  const uint64_t chunk_bytes = control.chunk_bytes();
  ASSERT_EQ(chunk_bytes, options.memory_node.chunk_bytes);
  const uint64_t pool_bytes = fabric().layout(0).pool_bytes;
  std::vector<RemoteAddress> chunks;
  Status last;
  for (uint64_t i = 0; i <= pool_bytes / chunk_bytes; ++i) {
    auto chunk = control.AllocateChunk();
    if (!chunk.ok()) {
      last = chunk.status();
      break;
    }
    chunks.push_back(*chunk);
  }
  EXPECT_TRUE(last.IsResourceExhausted()) << last.ToString();
  ASSERT_FALSE(chunks.empty());
  EXPECT_GE(chunks.size(), (pool_bytes - (64 << 10)) / chunk_bytes - 1)
      << "far fewer chunks than the pool holds";
  if (memnode::MemoryNode* memory_node = backend_->memory_node(0)) {
    EXPECT_EQ(chunks.size(), memory_node->total_chunks());
    EXPECT_EQ(memory_node->free_chunks(), 0u);
  }
  std::sort(chunks.begin(), chunks.end());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const RemoteAddress chunk = chunks[i];
    EXPECT_EQ(chunk.node(), 0);
    EXPECT_EQ(chunk.region(), fabric::Region::kPool);
    EXPECT_EQ(chunk.offset() % memnode::kChunkAlignment, 0u);
    EXPECT_GE(chunk.offset(), memnode::kHeaderBytes);
    EXPECT_LE(chunk.offset() + chunk_bytes, pool_bytes);
    if (i > 0) {
      EXPECT_GE(chunk.offset() - chunks[i - 1].offset(), chunk_bytes) << "chunks overlap";
    }
  }
  EXPECT_TRUE(control.AllocateChunk().status().IsResourceExhausted()) << "exhaustion not sticky";

  // The last byte of every chunk is usable through the fabric.
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (const RemoteAddress chunk : chunks) {
    ASSERT_OK(client->Run(0, {Op::Write(chunk + (chunk_bytes - 8), client->words(), 8)}));
  }

  // A freed chunk comes back, and only it, with its seal word (found from
  // the pool header, after the last chunk) zeroed.
  const RemoteAddress freed = chunks[chunks.size() / 2];
  uint64_t* words = client->words();
  ASSERT_OK(
      client->Run(0, {Op::Read(RemoteAddress::Pool(0, 0), words, 8 * memnode::kPoolHeaderWords)}));
  ASSERT_EQ(words[0], memnode::kPoolMagic);
  ASSERT_EQ(words[memnode::kPoolHeaderChunkBytesWord], chunk_bytes);
  const uint64_t chunks_begin = words[memnode::kPoolHeaderChunksBeginWord];
  ASSERT_EQ(words[memnode::kPoolHeaderTotalChunksWord], chunks.size());
  const RemoteAddress seal = RemoteAddress::Pool(
      0, memnode::SealWordOffset(chunks_begin, chunk_bytes, chunks.size(),
                                 (freed.offset() - chunks_begin) / chunk_bytes));
  words[0] = 42;
  ASSERT_OK(client->Run(0, {Op::Write(seal, words, 8)}));
  EXPECT_EQ(control.FreeChunks().value(), 0u);
  ASSERT_OK(control.FreeChunk(freed));
  EXPECT_EQ(control.FreeChunks().value(), 1u);
  EXPECT_TRUE(control.FreeChunk(freed).IsInvalidArgument()) << "double free accepted";
  EXPECT_TRUE(control.FreeChunk(freed + 8).IsInvalidArgument()) << "mid-chunk free accepted";
  auto again = control.AllocateChunk();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, freed);
  EXPECT_TRUE(control.AllocateChunk().status().IsResourceExhausted());
  words[0] = 1;
  ASSERT_OK(client->Run(0, {Op::Read(seal, words, 8)}));
  EXPECT_EQ(words[0], 0u) << "the seal word of a chunk given back";

  // Node 1 is unaffected by node 0 running out.
  auto other = backend_->control(1).AllocateChunk();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->node(), 1);
}

TEST_P(FabricConformanceTest, ConcurrentChunkAllocationNeverRepeats) {
  TestBackendOptions options;
  options.memory_node.pool_bytes = 4 << 20;
  options.memory_node.chunk_bytes = 16 << 10;
  BUILD_OR_SKIP(options);
  constexpr int kThreads = 4;
  std::vector<std::vector<RemoteAddress>> taken(kThreads);
  RunThreads(kThreads, [&](int thread) {
    for (;;) {
      auto chunk = backend_->control(0).AllocateChunk();
      if (!chunk.ok()) {
        EXPECT_TRUE(chunk.status().IsResourceExhausted()) << chunk.status().ToString();
        return;
      }
      taken[thread].push_back(*chunk);
    }
  });
  std::set<RemoteAddress> distinct;
  size_t total = 0;
  for (const auto& list : taken) {
    total += list.size();
    distinct.insert(list.begin(), list.end());
  }
  EXPECT_EQ(distinct.size(), total) << "a chunk was handed out twice";
  if (memnode::MemoryNode* memory_node = backend_->memory_node(0)) {
    EXPECT_EQ(total, memory_node->total_chunks());
  }
}

// Threads race to install their id in one catalog word with CAS: every
// thread gets the same slot, exactly one CAS wins, and everyone then reads the
// winner's id.
TEST_P(FabricConformanceTest, CatalogSlotRaceHasExactlyOneWinner) {
  BUILD_OR_SKIP(TestBackendOptions{});
  constexpr int kThreads = 8, kRounds = 4;
  struct Seen {
    RemoteAddress slot;
    uint64_t old_value = 0, read_back = 0, failures = 0;
  };
  std::vector<std::vector<Seen>> seen(kRounds, std::vector<Seen>(kThreads));
  std::barrier sync(kThreads);
  RunThreads(kThreads, [&](int thread) {
    auto client = TestClient::Connect(fabric());
    const uint64_t id = thread + 1;  // 0 is the empty slot
    // Every thread arrives twice per round, whatever fails, so none blocks.
    for (int round = 0; round < kRounds; ++round) {
      Seen& mine = seen[round][thread];
      sync.arrive_and_wait();
      if (client != nullptr) {
        auto slot = backend_->control(0).CatalogWord("race-" + std::to_string(round), true);
        EXPECT_TRUE(slot.ok()) << "CatalogWord: " << slot.status().ToString();
        if (slot.ok()) {
          mine.slot = *slot;
          const uint64_t failures_before = client->stats().compare_swap_failures;
          EXPECT_OK(client->Run(0, {Op::CompareSwap(mine.slot, client->words(), 0, id)}));
          mine.old_value = client->words()[0];
          mine.failures = client->stats().compare_swap_failures - failures_before;
        }
      }
      sync.arrive_and_wait();
      if (client != nullptr && !mine.slot.is_null()) mine.read_back = client->ReadWord(mine.slot);
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int winners = 0;
    uint64_t winner = 0;
    for (int thread = 0; thread < kThreads; ++thread) {
      const Seen& s = seen[round][thread];
      EXPECT_EQ(s.slot, seen[round][0].slot) << "threads got different slots for one name";
      EXPECT_EQ(s.slot.offset() % 8, 0u);
      if (s.old_value == 0) {
        ++winners;
        winner = thread + 1;
      }
      EXPECT_EQ(s.failures, s.old_value == 0 ? 0u : 1u);
    }
    ASSERT_EQ(winners, 1);
    for (int thread = 0; thread < kThreads; ++thread) {
      const Seen& s = seen[round][thread];
      if (s.old_value != 0) {
        EXPECT_EQ(s.old_value, winner) << "a losing CAS saw another value than the winner's";
      }
      EXPECT_EQ(s.read_back, winner) << "thread " << thread;
    }
    auto existing = backend_->control(0).CatalogWord("race-" + std::to_string(round), false);
    ASSERT_TRUE(existing.ok()) << existing.status().ToString();
    EXPECT_EQ(*existing, seen[round][0].slot);
  }
  EXPECT_TRUE(backend_->control(0).CatalogWord("never-created", false).status().IsNotFound());
}

TEST_P(FabricConformanceTest, ConcurrentFetchAddTotalIsExact) {
  BUILD_OR_SKIP(TestBackendOptions{});
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  constexpr int kThreads = 4, kPerBatch = 16;
  const int per_thread = Scaled(32768) / kPerBatch * kPerBatch;
  const RemoteAddress counter = chunk + 64;
  std::vector<std::vector<uint64_t>> olds(kThreads);
  RunThreads(kThreads, [&](int thread) {
    auto client = TestClient::Connect(fabric());
    if (client == nullptr) return;
    std::vector<Op> ops;
    for (int done = 0; done < per_thread; done += kPerBatch) {
      ops.clear();
      for (int i = 0; i < kPerBatch; ++i)
        ops.push_back(Op::FetchAdd(counter, client->words() + i, 1));
      const Status status = client->Run(0, ops);
      if (!status.ok()) {
        ADD_FAILURE() << status.ToString();
        return;
      }
      olds[thread].insert(olds[thread].end(), client->words(), client->words() + kPerBatch);
    }
    EXPECT_EQ(client->stats().fetch_adds, uint64_t(per_thread));
  });
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const uint64_t total = uint64_t(kThreads) * per_thread;
  EXPECT_EQ(client->ReadWord(counter), total);
  std::vector<uint64_t> all;
  for (const auto& list : olds)
    all.insert(all.end(), list.begin(), list.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), total);
  for (uint64_t i = 0; i < total; ++i)
    ASSERT_EQ(all[i], i) << "FAA old values must be 0..n-1";
}

// ---------------------------------------------------------------------------
// Backend-specific behaviour the traits promise

// The local fabric queues ops at Post() and applies them only in a Poll().
TEST_P(FabricConformanceTest, OpsApplyOnlyInPollWhereTheBackendSaysSo) {
  if (!TraitsOf(GetParam()).applies_ops_only_in_poll) {
    GTEST_SKIP() << "fabric backend '" << GetParam() << "' may apply ops at any time";
  }
  BUILD_OR_SKIP(TestBackendOptions{});
  memnode::MemoryNode* memory_node = backend_->memory_node(0);
  ASSERT_NE(memory_node, nullptr);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress chunk = Chunk();
  ASSERT_FALSE(chunk.is_null());
  std::atomic_ref<uint64_t> raw(
      *reinterpret_cast<uint64_t*>(memory_node->pool_base() + chunk.offset()));
  client->words()[0] = 0x55;
  Completion completion;
  ASSERT_OK(client->Post(0, {Op::Write(chunk, client->words(), 8)}, &completion));
  EXPECT_FALSE(completion.done()) << "completed at Post()";
  EXPECT_EQ(raw.load(std::memory_order_acquire), 0u) << "applied at Post()";
  client->Wait(completion);
  ASSERT_OK(completion.status());
  EXPECT_EQ(raw.load(std::memory_order_acquire), 0x55u);
}

INSTANTIATE_TEST_SUITE_P(Backends, FabricConformanceTest,
                         ::testing::ValuesIn(ConformanceBackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace dmidx::fabric_test
