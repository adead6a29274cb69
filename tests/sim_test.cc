// The `sim` backend's own promises (the fabric contract is the conformance
// suite's sim row): exact virtual times on an idle fabric, the client CPU
// model, and one seed giving one run.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/sim_fabric.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"

namespace dmidx {
namespace {

using fabric::Op;
using fabric::RemoteAddress;

ClusterOptions SimCluster(uint64_t seed, bool faults) {
  ClusterOptions options =
      testing::SmallLocalCluster(2, uint64_t{16} << 20, faults, std::chrono::microseconds(3));
  options.backend = FabricBackend::kSim;
  options.local.seed = seed;
  return options;
}

fabric::SimFabric& SimOf(Cluster& cluster) {
  return static_cast<fabric::SimFabric&>(static_cast<runtime::ClusterImpl&>(cluster).fabric());
}

// An 8-byte READ on an idle fabric completes exactly one round trip after
// it left, and it leaves after the CPU time of one post.
TEST(SimTest, IdleReadTakesExactlyTheModelsRoundTrip) {
  for (const int64_t round_trip : {2000, 1500, 3001}) {
    ClusterOptions options = SimCluster(1, false);
    options.sim.round_trip = std::chrono::nanoseconds(round_trip);
    std::unique_ptr<Cluster> cluster;
    ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
    fabric::SimFabric& sim = SimOf(*cluster);
    auto endpoint = sim.Connect().value();
    uint64_t word = 0;
    ASSERT_TRUE(endpoint->RegisterLocal(&word, sizeof(word)).ok());
    const int64_t start = sim.world().now();
    fabric::Completion completion;
    const Op read = Op::Read(RemoteAddress::Pool(0, 4096), &word, 8);
    ASSERT_TRUE(endpoint->Post(0, std::span<const Op>(&read, 1), &completion).ok());
    while (!completion.done())
      endpoint->Poll();
    EXPECT_EQ(sim.world().now() - start, round_trip + options.sim.cpu_per_post.count());
    // Bytes on the wire: one header each way and the 8 bytes read.
    const std::vector<fabric::NicUsage> nics = sim.nic_usage();
    ASSERT_EQ(nics.size(), 3u);  // mn0, mn1, the unnamed compute node
    EXPECT_EQ(nics[0].bytes_in, options.sim.header_bytes);
    EXPECT_EQ(nics[0].bytes_out, options.sim.header_bytes + 8u);
    EXPECT_EQ(nics[1].messages, 0u);
    EXPECT_EQ(nics[2].messages, 2u);  // the doorbell and the READ
  }
}

// A round trip shorter than the model's own parts is refused, naming it.
TEST(SimTest, ImpossibleModelIsInvalidArgument) {
  ClusterOptions options = SimCluster(1, false);
  options.sim.round_trip = std::chrono::nanoseconds(100);
  std::unique_ptr<Cluster> cluster;
  const Status status = Cluster::Open(options, &cluster);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.ToString().find("round_trip"), std::string::npos) << status.ToString();
  options.sim.round_trip = std::chrono::nanoseconds(2000);
  options.sim.nic_messages_per_second = 0;
  EXPECT_TRUE(Cluster::Open(options, &cluster).IsInvalidArgument());
}

// One worker is one CPU: its coroutines' operations run one after another,
// so N coroutines that each charge one operation and do one READ finish no
// sooner than N operations' CPU time; on N workers they overlap.
TEST(SimTest, CoroutinesOfOneWorkerShareItsCpu) {
  for (const uint32_t threads : {1u, 4u}) {
    ClusterOptions options = SimCluster(1, false);
    options.sim.cpu_per_operation = std::chrono::microseconds(10);
    std::unique_ptr<Cluster> cluster;
    ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
    std::unique_ptr<Client> client = testing::NewClient(*cluster, threads, 4 / threads);
    ASSERT_NE(client, nullptr);
    const int64_t start = SimOf(*cluster).world().now();
    ASSERT_TRUE(client
                    ->Run([](Context& context) {
                      runtime::ContextImpl& ctx = runtime::ContextImpl::From(context);
                      ctx.ChargeOperation();
                      uint64_t* word = ctx.discard_word();
                      const Op read = Op::Read(RemoteAddress::Pool(0, 4096), word, 8);
                      return ctx.Execute(0, std::span<const Op>(&read, 1));
                    })
                    .ok());
    const int64_t elapsed = SimOf(*cluster).world().now() - start;
    if (threads == 1) {
      EXPECT_GE(elapsed, 4 * 10000) << "four operations on one CPU overlapped";
    } else {
      EXPECT_LT(elapsed, 2 * 10000) << "four CPUs did not run in parallel";
    }
  }
}

// Many compute nodes, threads and coroutines hammering a few words with
// CAS and FAA, every fault injected: the same seed gives the same virtual
// time, the same counters and the same memory; another seed does not.
struct RunPrint {
  int64_t end_ns = 0;
  Stats stats;
  std::vector<uint64_t> words;
  bool operator==(const RunPrint&) const = default;
};

RunPrint RunContended(uint64_t seed) {
  RunPrint print;
  std::unique_ptr<Cluster> cluster;
  EXPECT_TRUE(Cluster::Open(SimCluster(seed, true), &cluster).ok());
  if (!cluster) return print;
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < 3; ++c)
    clients.push_back(testing::NewClient(*cluster, 2, 3));
  const RemoteAddress base = RemoteAddress::Pool(1, 8192);
  std::vector<Client*> pointers;
  for (auto& client : clients)
    pointers.push_back(client.get());
  std::vector<Status> statuses =
      testing::RunClients(pointers, [&](int client, Context& context) -> Status {
        runtime::ContextImpl& ctx = runtime::ContextImpl::From(context);
        uint64_t* old = ctx.discard_word();
        for (int i = 0; i < 200; ++i) {
          const RemoteAddress word = base + 8 * ((client * 7 + i) % 4);
          const Op add = Op::FetchAdd(word, old, 1);
          DMIDX_RETURN_IF_ERROR(ctx.Execute(1, std::span<const Op>(&add, 1)));
          const Op cas = Op::CompareSwap(word + 32, old, *old, *old + client + 1);
          DMIDX_RETURN_IF_ERROR(ctx.Execute(1, std::span<const Op>(&cas, 1)));
          ctx.Backoff(static_cast<uint32_t>(i % 3));
        }
        return Status::Ok();
      });
  for (const Status& status : statuses)
    EXPECT_TRUE(status.ok()) << status.ToString();
  fabric::SimFabric& sim = SimOf(*cluster);
  print.end_ns = sim.world().now();
  for (auto& client : clients)
    print.stats += client->stats();
  const uint8_t* pool =
      static_cast<runtime::ClusterImpl&>(*cluster).backend().in_process_memory_node(1)->pool_base();
  for (int w = 0; w < 8; ++w)
    print.words.push_back(reinterpret_cast<const uint64_t*>(pool + 8192)[w]);
  return print;
}

TEST(SimTest, SameSeedGivesTheSameRunBitForBit) {
  const RunPrint first = RunContended(11);
  const RunPrint second = RunContended(11);
  EXPECT_EQ(first, second) << "end " << first.end_ns << " vs " << second.end_ns;
  EXPECT_GT(first.stats.compare_swap_failures, 0u) << "no contention: the test proves little";
  uint64_t adds = 0;
  for (int w = 0; w < 4; ++w)
    adds += first.words[w];
  EXPECT_EQ(adds, 3u * 2 * 3 * 200) << "an FAA was lost or doubled";
  const RunPrint other = RunContended(12);
  EXPECT_NE(first.end_ns, other.end_ns) << "seed 12 ran exactly as seed 11";
}

}  // namespace
}  // namespace dmidx
