// The public Cluster / Client / Context API on the local fabric: option
// validation, Client::Run, blocking contexts, exact counters, and several
// clients (compute nodes) sharing the memory nodes.
#include "dmidx/cluster.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "testing/watchdog.h"

namespace dmidx {
namespace {

using fabric::Op;
using fabric::OpCode;
using fabric::RemoteAddress;
using runtime::ContextImpl;

using testing::Watchdog;

ClusterOptions SmallClusterOptions(uint32_t memory_nodes = 1) {
  ClusterOptions options;
  options.memory_nodes = memory_nodes;
  options.memory_node.pool_bytes = uint64_t{4} << 20;
  options.memory_node.chunk_bytes = uint64_t{64} << 10;
  options.memory_node.huge_pages = false;
  options.memory_node.catalog_entries = 256;
  return options;
}

ClientOptions SmallClientOptions(uint32_t threads = 1, uint32_t coroutines = 1) {
  ClientOptions options;
  options.threads = threads;
  options.coroutines_per_thread = coroutines;
  options.scratch_bytes_per_context = 8192;
  return options;
}

std::unique_ptr<Cluster> OpenCluster(const ClusterOptions& options = SmallClusterOptions()) {
  std::unique_ptr<Cluster> cluster;
  const Status status = Cluster::Open(options, &cluster);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return cluster;
}

std::unique_ptr<Client> NewClient(Cluster& cluster, const ClientOptions& options) {
  std::unique_ptr<Client> client;
  const Status status = cluster.NewClient(options, &client);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return client;
}

std::unique_ptr<Context> NewBlockingContext(Client& client) {
  std::unique_ptr<Context> context;
  const Status status = client.NewBlockingContext(&context);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return context;
}

uint64_t* ScratchWords(ContextImpl& ctx) {
  return reinterpret_cast<uint64_t*>(ctx.scratch().data());
}

Status Check(bool condition, const std::string& what) {
  return condition ? Status::Ok() : Status::Internal(what);
}

// ---- Cluster::Open ------------------------------------------------------------

TEST(ClusterOpenTest, OpensSmallCluster) {
  std::unique_ptr<Cluster> cluster = OpenCluster(SmallClusterOptions(2));
  ASSERT_NE(cluster, nullptr);
  EXPECT_EQ(cluster->memory_node_count(), 2u);
  EXPECT_EQ(cluster->options().memory_nodes, 2u);
  EXPECT_EQ(cluster->options().memory_node.chunk_bytes, uint64_t{64} << 10);
  const FabricCapabilities& capabilities = cluster->capabilities();
  EXPECT_FALSE(capabilities.masked_atomics);
  EXPECT_FALSE(capabilities.on_chip_lock_memory);
  EXPECT_GT(capabilities.max_batch_ops, 0u);
  EXPECT_GT(capabilities.max_message_bytes, 0u);
  EXPECT_GE(capabilities.max_sge, 1u);
}

TEST(ClusterOpenTest, NullOutputIsInvalidArgument) {
  EXPECT_TRUE(Cluster::Open(SmallClusterOptions(), nullptr).IsInvalidArgument());
}

struct BadClusterOptions {
  const char* what;
  void (*spoil)(ClusterOptions*);
};

TEST(ClusterOpenTest, BadOptionsAreInvalidArgumentAndLeaveOutputUnchanged) {
  const BadClusterOptions cases[] = {
      {"no memory nodes", [](ClusterOptions* o) { o->memory_nodes = 0; }},
      {"65536 memory nodes", [](ClusterOptions* o) { o->memory_nodes = 65536; }},
      {"pool smaller than header, catalog and one chunk",
       [](ClusterOptions* o) { o->memory_node.pool_bytes = 8192; }},
      {"pool holds the catalog but no chunk",
       [](ClusterOptions* o) {
         o->memory_node.pool_bytes = (uint64_t{64} << 10) + 4096;
         o->memory_node.chunk_bytes = uint64_t{64} << 10;
       }},
      {"pool beyond a remote address",
       [](ClusterOptions* o) { o->memory_node.pool_bytes = (uint64_t{1} << 47) + 4096; }},
      {"chunk not a multiple of 4 KiB",
       [](ClusterOptions* o) { o->memory_node.chunk_bytes = (uint64_t{64} << 10) + 8; }},
      {"zero chunk", [](ClusterOptions* o) { o->memory_node.chunk_bytes = 0; }},
      {"zero lock region", [](ClusterOptions* o) { o->memory_node.lock_region_bytes = 0; }},
      {"lock region not a multiple of 8",
       [](ClusterOptions* o) { o->memory_node.lock_region_bytes = 4100; }},
      {"empty catalog", [](ClusterOptions* o) { o->memory_node.catalog_entries = 0; }},
  };
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  const Cluster* const original = cluster.get();
  for (const BadClusterOptions& bad : cases) {
    SCOPED_TRACE(bad.what);
    ClusterOptions options = SmallClusterOptions();
    bad.spoil(&options);
    const Status status = Cluster::Open(options, &cluster);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_EQ(cluster.get(), original);
  }
}

// ---- Cluster::NewClient ---------------------------------------------------------

struct BadClientOptions {
  const char* what;
  void (*spoil)(ClientOptions*);
};

TEST(NewClientTest, BadOptionsAreInvalidArgument) {
  const BadClientOptions cases[] = {
      {"no threads", [](ClientOptions* o) { o->threads = 0; }},
      {"no coroutines", [](ClientOptions* o) { o->coroutines_per_thread = 0; }},
      {"tiny stack", [](ClientOptions* o) { o->coroutine_stack_bytes = 4096; }},
      {"no scratch", [](ClientOptions* o) { o->scratch_bytes_per_context = 0; }},
      {"scratch below a page", [](ClientOptions* o) { o->scratch_bytes_per_context = 1000; }},
      {"scratch not a page multiple",
       [](ClientOptions* o) { o->scratch_bytes_per_context = 4096 + 8; }},
      {"more contexts than a compute node may have",
       [](ClientOptions* o) {
         o->threads = 256;
         o->coroutines_per_thread = 257;
       }},
  };
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  for (const BadClientOptions& bad : cases) {
    SCOPED_TRACE(bad.what);
    ClientOptions options = SmallClientOptions();
    bad.spoil(&options);
    std::unique_ptr<Client> client;
    const Status status = cluster->NewClient(options, &client);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_EQ(client, nullptr);
  }
  EXPECT_TRUE(cluster->NewClient(SmallClientOptions(), nullptr).IsInvalidArgument());
}

TEST(NewClientTest, KeepsItsOptions) {
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(3, 5));
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->options().threads, 3u);
  EXPECT_EQ(client->options().coroutines_per_thread, 5u);
  EXPECT_EQ(client->options().scratch_bytes_per_context, 8192u);
  EXPECT_EQ(client->stats(), Stats{});
  EXPECT_TRUE(client->NewBlockingContext(nullptr).IsInvalidArgument());
}

// ---- Client::Run ------------------------------------------------------------------

TEST(ClientRunTest, RunsWorkOncePerThreadAndCoroutine) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 3;
  constexpr uint32_t kCoroutines = 5;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(kThreads, kCoroutines));
  ASSERT_NE(client, nullptr);

  std::mutex mutex;
  std::vector<std::pair<int, int>> calls;                // guarded by mutex
  std::vector<std::set<std::thread::id>> ids(kThreads);  // guarded by mutex
  std::set<const uint8_t*> scratch_regions;              // guarded by mutex
  bool scratch_ok = true;                                // guarded by mutex
  const Status status = client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    std::lock_guard<std::mutex> guard(mutex);
    calls.emplace_back(context.thread_index(), context.coroutine_index());
    if (context.thread_index() >= 0 && context.thread_index() < static_cast<int>(kThreads)) {
      ids[context.thread_index()].insert(std::this_thread::get_id());
    }
    scratch_regions.insert(ctx.scratch().data());
    scratch_ok = scratch_ok && ctx.scratch().size() == 8192 - ContextImpl::kRuntimeScratchBytes &&
                 reinterpret_cast<uintptr_t>(ctx.scratch().data()) % 4096 == 0;
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(calls.size(), size_t{kThreads} * kCoroutines);
  const std::set<std::pair<int, int>> distinct(calls.begin(), calls.end());
  EXPECT_EQ(distinct.size(), calls.size());
  for (const auto& [thread, coroutine] : calls) {
    EXPECT_GE(thread, 0);
    EXPECT_LT(thread, static_cast<int>(kThreads));
    EXPECT_GE(coroutine, 0);
    EXPECT_LT(coroutine, static_cast<int>(kCoroutines));
  }
  // Every coroutine of a thread index ran on one OS thread, not the caller's.
  std::set<std::thread::id> all_ids;
  for (const auto& thread_ids : ids) {
    EXPECT_EQ(thread_ids.size(), 1u);
    all_ids.insert(thread_ids.begin(), thread_ids.end());
  }
  EXPECT_EQ(all_ids.size(), kThreads);
  EXPECT_EQ(all_ids.count(std::this_thread::get_id()), 0u);
  // Each context has its own scratch slot.
  EXPECT_EQ(scratch_regions.size(), size_t{kThreads} * kCoroutines);
  EXPECT_TRUE(scratch_ok);
}

TEST(ClientRunTest, ReturnsFirstErrorInThreadCoroutineOrder) {
  Watchdog watchdog;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(3, 4));
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  const Status status = client->Run([&](Context& context) -> Status {
    calls.fetch_add(1);
    const int t = context.thread_index();
    const int c = context.coroutine_index();
    const std::string name = std::to_string(t) + "," + std::to_string(c);
    if (t == 2 && c == 0) return Status::Unavailable(name);
    if (t == 1 && c == 3) return Status::Aborted(name);
    if (t == 1 && c == 2) return Status::NotFound(name);
    return Status::Ok();
  });
  EXPECT_EQ(status, Status::NotFound("1,2"));
  EXPECT_EQ(calls.load(), 12);  // an error does not stop the other coroutines

  // The client is usable again after a failed Run.
  calls = 0;
  EXPECT_TRUE(client
                  ->Run([&](Context&) {
                    calls.fetch_add(1);
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(calls.load(), 12);
}

TEST(ClientRunTest, RunInsideRunIsFailedPrecondition) {
  Watchdog watchdog;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(2, 2));
  ASSERT_NE(client, nullptr);
  std::atomic<int> inner_calls{0};
  const Status status = client->Run([&](Context&) -> Status {
    return client->Run([&](Context&) {
      inner_calls.fetch_add(1);
      return Status::Ok();
    });
  });
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_EQ(inner_calls.load(), 0);
  EXPECT_TRUE(client->Run([](Context&) { return Status::Ok(); }).ok());
}

TEST(ClientRunTest, RunFromAnotherThreadWhileRunningIsFailedPrecondition) {
  Watchdog watchdog;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(1, 1));
  ASSERT_NE(client, nullptr);
  std::atomic<bool> started{false}, release{false};
  Status outer;
  std::thread runner([&] {
    outer = client->Run([&](Context&) {
      started.store(true);
      // Holds its worker thread on purpose: nothing else runs on it.
      while (!release.load())
        std::this_thread::yield();
      return Status::Ok();
    });
  });
  while (!started.load())
    std::this_thread::yield();
  const Status second = client->Run([](Context&) { return Status::Ok(); });
  release.store(true);
  runner.join();
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second.ToString();
  EXPECT_TRUE(outer.ok()) << outer.ToString();
}

// A coroutine context's stats() are its thread's counters.
TEST(ClientRunTest, CoroutineContextStatsAreItsThreads) {
  Watchdog watchdog;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(1, 1));
  ASSERT_NE(client, nullptr);
  Stats seen;
  const Status status = client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    DMIDX_ASSIGN_OR_RETURN(const RemoteAddress address, ctx.allocator().Allocate(128));
    const Op read = Op::Read(address, ctx.scratch().data(), 128);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(address.node(), {&read, 1}));
    seen = context.stats();
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  Stats expected;
  expected.round_trips = 1;
  expected.batches = 1;
  expected.reads = 1;
  expected.bytes_read = 128;
  EXPECT_EQ(seen, expected) << seen.ToString();
  EXPECT_EQ(client->stats(), expected);
}

// ---- Blocking contexts and stats ------------------------------------------------------

TEST(BlockingContextTest, WriteThenReadWithExactStats) {
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(2, 2));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<Context> context = NewBlockingContext(*client);
  ASSERT_NE(context, nullptr);
  auto& ctx = ContextImpl::From(*context);
  EXPECT_EQ(context->thread_index(), -1);
  EXPECT_EQ(context->coroutine_index(), 0);
  EXPECT_EQ(ctx.scratch().size(), 8192u - ContextImpl::kRuntimeScratchBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ctx.scratch().data()) % 4096, 0u);

  auto chunk = ctx.allocator().Allocate(4096);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  uint8_t* source = ctx.scratch().data();
  uint8_t* destination = ctx.scratch().data() + 4096;
  for (int i = 0; i < 100; ++i)
    source[i] = static_cast<uint8_t>(i * 7 + 1);
  std::memset(destination, 0, 100);

  const Op write = Op::Write(*chunk + 24, source, 100);
  ASSERT_TRUE(ctx.Execute(chunk->node(), {&write, 1}).ok());
  const Op read = Op::Read(*chunk + 24, destination, 100);
  ASSERT_TRUE(ctx.Execute(chunk->node(), {&read, 1}).ok());
  EXPECT_EQ(std::memcmp(source, destination, 100), 0);

  Stats expected;
  expected.round_trips = 2;
  expected.batches = 2;
  expected.reads = 1;
  expected.writes = 1;
  expected.bytes_read = 100;
  expected.bytes_written = 100;
  EXPECT_EQ(context->stats(), expected) << context->stats().ToString();
  EXPECT_EQ(client->stats(), expected) << client->stats().ToString();

  // One batch of a CAS that wins, a CAS that loses and an FAA: one round trip.
  auto* words = reinterpret_cast<uint64_t*>(ctx.scratch().data() + 1024);
  const Op atomics[] = {
      Op::CompareSwap(*chunk, &words[0], 0, 5),
      Op::CompareSwap(*chunk, &words[1], 0, 6, fabric::kFence),
      Op::FetchAdd(*chunk, &words[2], 10, fabric::kFence),
  };
  ASSERT_TRUE(ctx.Execute(chunk->node(), atomics).ok());
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(words[1], 5u);
  EXPECT_EQ(words[2], 5u);
  expected.round_trips += 1;
  expected.batches += 1;
  expected.compare_swaps += 2;
  expected.fetch_adds += 1;
  expected.compare_swap_failures += 1;
  expected.bytes_read += 24;
  expected.bytes_written += 24;
  EXPECT_EQ(client->stats(), expected) << client->stats().ToString();
}

TEST(BlockingContextTest, InvalidBatchIsRejectedAndNotCounted) {
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions());
  ASSERT_NE(client, nullptr);
  std::unique_ptr<Context> context = NewBlockingContext(*client);
  ASSERT_NE(context, nullptr);
  auto& ctx = ContextImpl::From(*context);
  auto chunk = ctx.allocator().Allocate(64);
  ASSERT_TRUE(chunk.ok());
  uint64_t unregistered = 0;
  const Op outside = Op::Read(*chunk, &unregistered, 8);
  EXPECT_TRUE(ctx.Execute(chunk->node(), {&outside, 1}).IsInvalidArgument());
  const Op unknown_node = Op::Read(RemoteAddress::Pool(7, 4096), ctx.scratch().data(), 8);
  EXPECT_TRUE(ctx.Execute(7, {&unknown_node, 1}).IsInvalidArgument());
  EXPECT_EQ(client->stats().batches, 0u);
}

// Client::stats() = worker threads + live blocking contexts + retired ones.
// Lock words name their holder by context number and acquisition count
// (lock/hocl.h), so no two live contexts of a compute node share a number
// (blocking ones, whose thread and coroutine indexes are all -1 and 0,
// included), and a number taken over from a context that went keeps
// counting where that context stopped.
TEST(BlockingContextTest, ContextNumbersAreUniqueAndKeepTheirCounts) {
  Watchdog watchdog;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(2, 3));
  ASSERT_NE(client, nullptr);
  std::mutex mutex;
  std::set<uint32_t> numbers;  // guarded by mutex
  ASSERT_TRUE(client
                  ->Run([&](Context& context) {
                    std::lock_guard<std::mutex> guard(mutex);
                    numbers.insert(ContextImpl::From(context).number());
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(numbers.size(), 6u);
  std::vector<std::unique_ptr<Context>> blocking;
  for (int i = 0; i < 3; ++i) {
    blocking.push_back(NewBlockingContext(*client));
    ASSERT_NE(blocking.back(), nullptr);
    numbers.insert(ContextImpl::From(*blocking.back()).number());
  }
  EXPECT_EQ(numbers.size(), 9u) << "two live contexts share a number";
  for (uint32_t number : numbers)
    EXPECT_LT(number, runtime::kMaxContextsPerComputeNode);

  ContextImpl& going = ContextImpl::From(*blocking[1]);
  const uint32_t number = going.number();
  EXPECT_EQ(going.lock_acquisitions(), 0u);
  EXPECT_EQ(going.NextLockAcquisition(), 1u);
  EXPECT_EQ(going.NextLockAcquisition(), 2u);
  blocking[1].reset();
  std::unique_ptr<Context> next = NewBlockingContext(*client);
  ASSERT_NE(next, nullptr);
  ContextImpl& next_ctx = ContextImpl::From(*next);
  EXPECT_EQ(next_ctx.number(), number) << "a number given back was not taken again";
  EXPECT_EQ(next_ctx.lock_acquisitions(), 2u) << "the number's count started over";
  EXPECT_EQ(next_ctx.NextLockAcquisition(), 3u);
}

TEST(BlockingContextTest, ClientStatsSumThreadsAndBlockingContexts) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 2;
  constexpr uint32_t kCoroutines = 3;
  constexpr uint64_t kContexts = kThreads * kCoroutines;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(kThreads, kCoroutines));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<Context> first = NewBlockingContext(*client);
  std::unique_ptr<Context> second = NewBlockingContext(*client);
  ASSERT_TRUE(first && second);
  auto& first_ctx = ContextImpl::From(*first);
  auto& second_ctx = ContextImpl::From(*second);
  auto area = first_ctx.allocator().Allocate(kContexts * 64);
  ASSERT_TRUE(area.ok());

  // Each coroutine: one 64-byte WRITE and one 64-byte READ of its own line.
  const Status status = client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const RemoteAddress line =
        *area + (ctx.thread_index() * kCoroutines + ctx.coroutine_index()) * 64;
    std::memset(ctx.scratch().data(), ctx.coroutine_index() + 1, 64);
    const Op write = Op::Write(line, ctx.scratch().data(), 64);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(line.node(), {&write, 1}));
    const Op read = Op::Read(line, ctx.scratch().data() + 64, 64);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(line.node(), {&read, 1}));
    return Check(std::memcmp(ctx.scratch().data(), ctx.scratch().data() + 64, 64) == 0,
                 "read back different bytes");
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  Stats threads;
  threads.round_trips = 2 * kContexts;
  threads.batches = 2 * kContexts;
  threads.reads = kContexts;
  threads.writes = kContexts;
  threads.bytes_read = 64 * kContexts;
  threads.bytes_written = 64 * kContexts;
  EXPECT_EQ(client->stats(), threads) << client->stats().ToString();

  // First blocking context: one 256-byte READ.
  const Op read = Op::Read(*area, first_ctx.scratch().data(), 256);
  ASSERT_TRUE(first_ctx.Execute(area->node(), {&read, 1}).ok());
  Stats first_stats;
  first_stats.round_trips = 1;
  first_stats.batches = 1;
  first_stats.reads = 1;
  first_stats.bytes_read = 256;
  EXPECT_EQ(first->stats(), first_stats);

  // Second: one FAA.
  const Op faa = Op::FetchAdd(*area, ScratchWords(second_ctx), 1);
  ASSERT_TRUE(second_ctx.Execute(area->node(), {&faa, 1}).ok());
  Stats second_stats;
  second_stats.round_trips = 1;
  second_stats.batches = 1;
  second_stats.fetch_adds = 1;
  second_stats.bytes_read = 8;
  second_stats.bytes_written = 8;
  EXPECT_EQ(second->stats(), second_stats);

  EXPECT_EQ(client->stats(), threads + first_stats + second_stats);
  first.reset();  // its counters are kept after it is gone
  EXPECT_EQ(client->stats(), threads + first_stats + second_stats);
  second.reset();
  EXPECT_EQ(client->stats(), threads + first_stats + second_stats);

  std::unique_ptr<Context> third = NewBlockingContext(*client);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->stats(), Stats{});
  EXPECT_EQ(client->stats(), threads + first_stats + second_stats);
}

// Cluster::MemoryUsage on the in-process backends (local and sim; verbs:
// tests/verbs_client_test.cc): every memory node's pool, and the chunks
// an allocation takes from one of them, through the control path.
class MemoryUsageTest : public ::testing::TestWithParam<FabricBackend> {};

TEST_P(MemoryUsageTest, CountsTheChunksAClientTakes) {
  ClusterOptions options = SmallClusterOptions(2);
  options.backend = GetParam();
  std::unique_ptr<Cluster> cluster = OpenCluster(options);
  ASSERT_NE(cluster, nullptr);
  const StatusOr<std::vector<PoolUsage>> before = cluster->MemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->size(), 2u);
  for (uint32_t node = 0; node < 2; ++node) {
    const PoolUsage& pool = (*before)[node];
    EXPECT_EQ(pool.memory_node, node);
    EXPECT_EQ(pool.pool_bytes, options.memory_node.pool_bytes);
    EXPECT_EQ(pool.chunk_bytes, options.memory_node.chunk_bytes);
    EXPECT_GT(pool.total_chunks, 0u);
    EXPECT_LE(pool.total_chunks * pool.chunk_bytes, pool.pool_bytes);
    EXPECT_EQ(pool.bytes_in_use, (pool.total_chunks - pool.free_chunks) * pool.chunk_bytes);
  }
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions());
  ASSERT_NE(client, nullptr);
  std::unique_ptr<Context> context = NewBlockingContext(*client);
  ASSERT_NE(context, nullptr);
  const StatusOr<std::vector<PoolUsage>> opened = cluster->MemoryUsage();
  ASSERT_TRUE(opened.ok());
  // An object on node 1 takes a chunk there (the context's allocator has
  // none yet); a second fits in it.
  ASSERT_TRUE(ContextImpl::From(*context).allocator().Allocate(64, 64, 1).ok());
  ASSERT_TRUE(ContextImpl::From(*context).allocator().Allocate(64, 64, 1).ok());
  const StatusOr<std::vector<PoolUsage>> after = cluster->MemoryUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)[0], (*opened)[0]);
  EXPECT_EQ((*after)[1].bytes_in_use, (*opened)[1].bytes_in_use + options.memory_node.chunk_bytes);
  EXPECT_EQ((*after)[1].free_chunks, (*opened)[1].free_chunks - 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, MemoryUsageTest,
                         ::testing::Values(FabricBackend::kLocal, FabricBackend::kSim),
                         [](const ::testing::TestParamInfo<FabricBackend>& param) {
                           return std::string(param.param == FabricBackend::kLocal ? "local"
                                                                                   : "sim");
                         });

// A blocking context on a cluster of three memory nodes, with a 64-byte
// object allocated on each.
class ThreeNodeContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = OpenCluster(SmallClusterOptions(3));
    ASSERT_NE(cluster_, nullptr);
    client_ = NewClient(*cluster_, SmallClientOptions());
    ASSERT_NE(client_, nullptr);
    context_ = NewBlockingContext(*client_);
    ASSERT_NE(context_, nullptr);
    ctx_ = &ContextImpl::From(*context_);
    for (uint16_t node = 0; node < 3; ++node) {
      auto object = ctx_->allocator().Allocate(64, 64, node);
      ASSERT_TRUE(object.ok()) << object.status().ToString();
      object_[node] = *object;
    }
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Context> context_;
  ContextImpl* ctx_ = nullptr;
  RemoteAddress object_[3];
};

TEST_F(ThreeNodeContextTest, AllocatesAndAccessesEveryMemoryNode) {
  uint64_t* words = ScratchWords(*ctx_);
  for (uint16_t node = 0; node < 3; ++node) {
    SCOPED_TRACE(node);
    EXPECT_EQ(object_[node].node(), node);
    words[0] = 0x1000 + node;
    words[1] = 0;
    const Op ops[] = {Op::Write(object_[node], &words[0], 8),
                      Op::Read(object_[node], &words[1], 8)};
    ASSERT_TRUE(ctx_->Execute(node, ops).ok());
    EXPECT_EQ(words[1], 0x1000u + node);
  }
}

// ExecuteAll regroups ops by memory node, lowest first, keeping each node's
// order (so a node's WRITE, CAS and READ of one word apply in the order
// given), and posts them as one round trip.
TEST_F(ThreeNodeContextTest, ExecuteAllGroupsByNodeKeepingOrder) {
  uint64_t* words = ScratchWords(*ctx_);
  // Per node n: WRITE 10+n, CAS 10+n -> 20+n, READ. Interleaved 2, 0, 1.
  std::vector<Op> ops;
  for (int step = 0; step < 3; ++step) {
    for (uint16_t node : {2, 0, 1}) {
      uint64_t* w = &words[4 * node];
      if (step == 0) {
        w[0] = 10 + node;
        ops.push_back(Op::Write(object_[node], &w[0], 8));
      } else if (step == 1) {
        ops.push_back(Op::CompareSwap(object_[node], &w[1], 10 + node, 20 + node));
      } else {
        ops.push_back(Op::Read(object_[node], &w[2], 8));
      }
    }
  }
  const Stats before = context_->stats();
  ASSERT_TRUE(ctx_->ExecuteAll(ops).ok());
  EXPECT_EQ((context_->stats() - before).round_trips, 1u);
  for (uint16_t node = 0; node < 3; ++node) {
    SCOPED_TRACE(node);
    EXPECT_EQ(words[4 * node + 1], 10u + node);  // the CAS saw the WRITE
    EXPECT_EQ(words[4 * node + 2], 20u + node);  // the READ saw the CAS
    for (int step = 0; step < 3; ++step) {       // regrouped: node 0's three, then 1's, then 2's
      EXPECT_EQ(ops[3 * node + step].remote.node(), node);
    }
    EXPECT_EQ(ops[3 * node].code, OpCode::kWrite);
    EXPECT_EQ(ops[3 * node + 1].code, OpCode::kCompareSwap);
    EXPECT_EQ(ops[3 * node + 2].code, OpCode::kRead);
  }
}

// ---- Several clients (compute nodes) ---------------------------------------------------

TEST(MultiClientTest, ClientsSeeEachOthersWrites) {
  Watchdog watchdog;
  std::unique_ptr<Cluster> cluster = OpenCluster(SmallClusterOptions(2));
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> writer = NewClient(*cluster, SmallClientOptions(2, 4));
  std::unique_ptr<Client> reader = NewClient(*cluster, SmallClientOptions(2, 4));
  ASSERT_TRUE(writer && reader);
  std::unique_ptr<Context> writer_context = NewBlockingContext(*writer);
  std::unique_ptr<Context> reader_context = NewBlockingContext(*reader);
  ASSERT_TRUE(writer_context && reader_context);
  auto& writer_ctx = ContextImpl::From(*writer_context);
  auto& reader_ctx = ContextImpl::From(*reader_context);

  // Blocking context to blocking context, on the second memory node.
  auto word = writer_ctx.allocator().Allocate(8, 8, 1);
  ASSERT_TRUE(word.ok());
  ScratchWords(writer_ctx)[0] = 0xfeedfacecafebeefull;
  const Op write = Op::Write(*word, ScratchWords(writer_ctx), 8);
  ASSERT_TRUE(writer_ctx.Execute(1, {&write, 1}).ok());
  ScratchWords(reader_ctx)[0] = 0;
  const Op read = Op::Read(*word, ScratchWords(reader_ctx), 8);
  ASSERT_TRUE(reader_ctx.Execute(1, {&read, 1}).ok());
  EXPECT_EQ(ScratchWords(reader_ctx)[0], 0xfeedfacecafebeefull);

  // One client's Run writes a line per coroutine; the other's Run reads them.
  constexpr uint32_t kLines = 8;
  auto lines = writer_ctx.allocator().Allocate(kLines * 64, 64, 0);
  ASSERT_TRUE(lines.ok());
  Status status = writer->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const uint32_t me = ctx.thread_index() * 4 + ctx.coroutine_index();
    uint64_t* words = ScratchWords(ctx);
    for (int i = 0; i < 8; ++i)
      words[i] = (uint64_t{me} << 32) | i;
    const Op line_write = Op::Write(*lines + me * 64, words, 64);
    return ctx.Execute(0, {&line_write, 1});
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  status = reader->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    uint64_t* words = ScratchWords(ctx);
    const Op all = Op::Read(*lines, words, kLines * 64);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&all, 1}));
    for (uint32_t line = 0; line < kLines; ++line) {
      for (uint64_t i = 0; i < 8; ++i) {
        DMIDX_RETURN_IF_ERROR(Check(words[line * 8 + i] == ((uint64_t{line} << 32) | i),
                                    "line " + std::to_string(line) + " word " + std::to_string(i)));
      }
    }
    return Status::Ok();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST(MultiClientTest, CatalogSlotsAreSharedByName) {
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> a = NewClient(*cluster, SmallClientOptions());
  std::unique_ptr<Client> b = NewClient(*cluster, SmallClientOptions());
  ASSERT_TRUE(a && b);
  auto& a_impl = static_cast<runtime::ClientImpl&>(*a);
  auto& b_impl = static_cast<runtime::ClientImpl&>(*b);
  EXPECT_TRUE(a_impl.CatalogWord("tree", false).status().IsNotFound());
  auto created = a_impl.CatalogWord("tree", true);
  ASSERT_TRUE(created.ok());
  auto found = b_impl.CatalogWord("tree", false);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*created, *found);
  EXPECT_EQ(created->node(), runtime::ClusterImpl::kCatalogNode);
  EXPECT_EQ(created->offset() % 8, 0u);
  auto other = b_impl.CatalogWord("radix", true);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *created);
  EXPECT_TRUE(a_impl.CatalogWord("", true).status().IsInvalidArgument());
}

// Two clients, each from its own thread, create the same catalog names at
// once (both must get the same slots) and then, through a blocking context,
// CAS every slot from 0 to their id. Exactly one wins each slot, and the
// loser reads the winner's id.
TEST(MultiClientTest, CatalogSlotCasRaceHasOneWinner) {
  Watchdog watchdog;
  constexpr int kSlots = 200;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> clients[2] = {NewClient(*cluster, SmallClientOptions()),
                                        NewClient(*cluster, SmallClientOptions())};
  ASSERT_TRUE(clients[0] && clients[1]);
  std::vector<RemoteAddress> slots[2];
  std::vector<uint64_t> old_values[2];
  Status results[2];
  std::atomic<int> ready{0};
  auto start_together = [&ready] {  // a two-party barrier, reusable
    const int target = (ready.fetch_add(1) / 2 + 1) * 2;
    while (ready.load() < target) {
      std::this_thread::yield();
    }
  };
  auto racer = [&](int me) {
    auto& impl = static_cast<runtime::ClientImpl&>(*clients[me]);
    std::unique_ptr<Context> context;
    results[me] = clients[me]->NewBlockingContext(&context);
    start_together();
    for (int i = 0; i < kSlots && results[me].ok(); ++i) {
      auto slot = impl.CatalogWord("race-" + std::to_string(i), true);
      results[me] = slot.status();
      if (slot.ok()) slots[me].push_back(*slot);
    }
    start_together();
    if (!results[me].ok()) return;
    auto& ctx = ContextImpl::From(*context);
    uint64_t* old_value = ScratchWords(ctx);
    for (const RemoteAddress& slot : slots[me]) {
      const Op cas = Op::CompareSwap(slot, old_value, 0, 100 + me);
      results[me] = ctx.Execute(slot.node(), {&cas, 1});
      if (!results[me].ok()) return;
      old_values[me].push_back(*old_value);
    }
  };
  std::thread first(racer, 0);
  std::thread second(racer, 1);
  first.join();
  second.join();
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].ToString();
  EXPECT_EQ(slots[0], slots[1]);
  EXPECT_EQ(std::set<RemoteAddress>(slots[0].begin(), slots[0].end()).size(), size_t{kSlots});
  ASSERT_EQ(old_values[0].size(), size_t{kSlots});
  ASSERT_EQ(old_values[1].size(), size_t{kSlots});
  int wins[2] = {0, 0};
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t a = old_values[0][i];
    const uint64_t b = old_values[1][i];
    const bool a_won = a == 0 && b == 100;
    const bool b_won = b == 0 && a == 101;
    EXPECT_TRUE(a_won != b_won) << "slot " << i << ": " << a << " " << b;
    wins[0] += a_won;
    wins[1] += b_won;
  }
  EXPECT_EQ(wins[0] + wins[1], kSlots);
  // The counters agree: every CAS counted, every loss a failure.
  const Stats a_stats = clients[0]->stats();
  const Stats b_stats = clients[1]->stats();
  EXPECT_EQ(a_stats.compare_swaps, uint64_t{kSlots});
  EXPECT_EQ(b_stats.compare_swaps, uint64_t{kSlots});
  EXPECT_EQ(a_stats.compare_swap_failures, uint64_t(kSlots - wins[0]));
  EXPECT_EQ(b_stats.compare_swap_failures, uint64_t(kSlots - wins[1]));
  EXPECT_EQ(a_stats.round_trips + b_stats.round_trips, uint64_t{2 * kSlots});
}

// Blocking contexts are made, used for one round trip and destroyed at once,
// while another client's threads poll and so help apply (and complete) this
// thread's ops. A completion delivered after the context is gone would be a
// use after free (AddressSanitizer) or a race (ThreadSanitizer).
TEST(MultiClientTest, BlockingContextDestroyedRightAfterItsWaitWhileOthersHelp) {
  Watchdog watchdog;
  constexpr int kContexts = 300;
  std::unique_ptr<Cluster> cluster = OpenCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> helper = NewClient(*cluster, SmallClientOptions(2, 2));
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions());
  ASSERT_TRUE(helper && client);
  std::unique_ptr<Context> setup = NewBlockingContext(*client);
  ASSERT_NE(setup, nullptr);
  auto word = ContextImpl::From(*setup).allocator().Allocate(8);
  ASSERT_TRUE(word.ok());

  std::atomic<bool> stop{false};
  Status helper_status;
  std::thread helping([&] {
    helper_status = helper->Run([&](Context& context) -> Status {
      auto& ctx = ContextImpl::From(context);
      while (!stop.load(std::memory_order_relaxed)) {
        const Op read = Op::Read(*word, ctx.scratch().data(), 8);
        DMIDX_RETURN_IF_ERROR(ctx.Execute(word->node(), {&read, 1}));
      }
      return Status::Ok();
    });
  });
  for (int i = 0; i < kContexts; ++i) {
    std::unique_ptr<Context> context = NewBlockingContext(*client);
    if (context == nullptr) break;
    auto& ctx = ContextImpl::From(*context);
    const Op faa = Op::FetchAdd(*word, ScratchWords(ctx), 1);
    const Status status = ctx.Execute(word->node(), {&faa, 1});
    if (!status.ok()) {
      ADD_FAILURE() << status.ToString();
      break;
    }
  }
  stop.store(true);
  helping.join();
  EXPECT_TRUE(helper_status.ok()) << helper_status.ToString();
  auto& ctx = ContextImpl::From(*setup);
  const Op read = Op::Read(*word, ScratchWords(ctx), 8);
  ASSERT_TRUE(ctx.Execute(word->node(), {&read, 1}).ok());
  EXPECT_EQ(ScratchWords(ctx)[0], uint64_t{kContexts});
  EXPECT_EQ(client->stats().fetch_adds, uint64_t{kContexts});
}

// ---- Run quiesces ------------------------------------------------------------

// Each coroutine's last act is an unsignaled WRITE (as a lock release would
// be). With apply delays the WRITEs are still in flight when the work
// returns; Run must wait for them, so a READ issued right after sees them.
TEST(ClientRunTest, UnsignaledWriteAtEndOfWorkIsVisibleAfterRun) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 2;
  constexpr uint32_t kCoroutines = 4;
  constexpr uint32_t kContexts = kThreads * kCoroutines;
  ClusterOptions options = SmallClusterOptions();
  options.local.max_apply_delay = std::chrono::milliseconds(2);
  options.local.seed = 7;
  std::unique_ptr<Cluster> cluster = OpenCluster(options);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(*cluster, SmallClientOptions(kThreads, kCoroutines));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<Context> context = NewBlockingContext(*client);
  ASSERT_NE(context, nullptr);
  auto& checker = ContextImpl::From(*context);
  auto area = checker.allocator().Allocate(kContexts * 64);
  ASSERT_TRUE(area.ok());

  for (uint64_t round = 1; round <= 3; ++round) {
    SCOPED_TRACE(round);
    const Status status = client->Run([&](Context& work_context) -> Status {
      auto& ctx = ContextImpl::From(work_context);
      const uint32_t me = ctx.thread_index() * kCoroutines + ctx.coroutine_index();
      uint64_t* words = ScratchWords(ctx);
      for (int i = 0; i < 8; ++i)
        words[i] = (round << 32) | (me << 8) | i;
      // Not inline: the source stays in scratch, which Run keeps valid.
      const Op write = Op::Write(*area + me * 64, words, 64);
      return ctx.Post(area->node(), {&write, 1}, nullptr);
    });
    ASSERT_TRUE(status.ok()) << status.ToString();

    uint64_t* seen = ScratchWords(checker);
    std::memset(seen, 0, kContexts * 64);
    const Op read = Op::Read(*area, seen, kContexts * 64);
    ASSERT_TRUE(checker.Execute(area->node(), {&read, 1}).ok());
    for (uint64_t me = 0; me < kContexts; ++me) {
      for (uint64_t i = 0; i < 8; ++i) {
        ASSERT_EQ(seen[me * 8 + i], (round << 32) | (me << 8) | i)
            << "context " << me << " word " << i;
      }
    }
  }
  // Unsignaled batches count as batches, not as round trips.
  const Stats stats = client->stats();
  EXPECT_EQ(stats.batches, 3u * (kContexts + 1));
  EXPECT_EQ(stats.writes, 3u * kContexts);
  EXPECT_EQ(stats.round_trips, 3u);
}

}  // namespace
}  // namespace dmidx
