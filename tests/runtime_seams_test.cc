// The runtime's seams for the layers above it and for later backends:
// ClusterBackend, compute-node ids and typed shared objects, RunClients,
// Yield, Backoff and the clock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/runtime/client.h"
#include "lib/runtime/cluster_backend.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"
#include "testing/local_cluster.h"

namespace dmidx {
namespace {

using runtime::ComputeNode;
using runtime::ContextImpl;

using testing::NewClient;

// Small in-process clusters without faults (testing/local_cluster.h).
ClusterOptions SmallCluster(uint32_t memory_nodes = 1) {
  return testing::SmallLocalCluster(memory_nodes, uint64_t{4} << 20, false, {});
}
std::unique_ptr<Cluster> Open(uint32_t memory_nodes = 1) {
  return testing::OpenCluster(false, memory_nodes);
}

TEST(ClusterBackendTest, LocalBackendHasInProcessNodesAndAOneProcessBarrier) {
  auto backend = runtime::ClusterBackend::Open(SmallCluster(3));
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  EXPECT_EQ((*backend)->fabric().node_count(), 3);
  ASSERT_EQ((*backend)->controls().size(), 3u);
  for (uint16_t node = 0; node < 3; ++node) {
    EXPECT_EQ((*backend)->controls()[node]->node_id(), node);
    ASSERT_NE((*backend)->in_process_memory_node(node), nullptr);
  }
  EXPECT_EQ((*backend)->in_process_memory_node(3), nullptr);
  EXPECT_TRUE((*backend)->Barrier("start", 5, std::chrono::milliseconds(1)).ok());
  EXPECT_EQ((*backend)->NextComputeNodeId(), 0u);
  EXPECT_EQ((*backend)->NextComputeNodeId(), 1u);
}

TEST(ClusterBackendTest, UnknownBackendIsInvalidArgument) {
  ClusterOptions options = SmallCluster();
  options.backend = static_cast<FabricBackend>(42);
  auto backend = runtime::ClusterBackend::Open(options);
  EXPECT_TRUE(backend.status().IsInvalidArgument()) << backend.status().ToString();
}

TEST(ComputeNodeTest, ClientsOfOneClusterAreDistinctComputeNodes) {
  auto cluster = Open(2);
  auto a = NewClient(*cluster);
  auto b = NewClient(*cluster);
  ComputeNode& node_a = ComputeNode::Of(*a);
  ComputeNode& node_b = ComputeNode::Of(*b);
  EXPECT_NE(node_a.id(), node_b.id());
  EXPECT_EQ(node_a.memory_node_count(), 2u);
  EXPECT_EQ(node_a.layout(1).pool_bytes, cluster->options().memory_node.pool_bytes);
  auto slot_a = node_a.CatalogWord("seams/root", true);
  auto slot_b = node_b.CatalogWord("seams/root", false);
  ASSERT_TRUE(slot_a.ok() && slot_b.ok());
  EXPECT_EQ(*slot_a, *slot_b);
}

TEST(ComputeNodeTest, SharedObjectsAreKeyedByTypeAndNameAndLiveWhileHeld) {
  auto cluster = Open();
  auto client = NewClient(*cluster);
  ComputeNode& node = ComputeNode::Of(*client);
  int made = 0;
  auto first = node.Shared(runtime::SharedKey<std::string>("k"), [&] {
    ++made;
    return std::make_shared<std::string>("text");
  });
  auto again = node.Shared(runtime::SharedKey<std::string>("k"), [&] {
    ++made;
    return std::make_shared<std::string>("other");
  });
  EXPECT_EQ(first, again);
  // The same name for another type is another object, never a bad cast.
  auto number = node.Shared(runtime::SharedKey<int>("k"), [&] {
    ++made;
    return std::make_shared<int>(7);
  });
  EXPECT_EQ(*number, 7);
  EXPECT_EQ(made, 2);
  first.reset();
  again.reset();
  auto remade = node.Shared(runtime::SharedKey<std::string>("k"), [&] {
    ++made;
    return std::make_shared<std::string>("new");
  });
  EXPECT_EQ(*remade, "new");
  EXPECT_EQ(made, 3);
  // Another compute node has its own.
  auto other = NewClient(*cluster);
  auto theirs = ComputeNode::Of(*other).Shared(runtime::SharedKey<std::string>("k"), [&] {
    ++made;
    return std::make_shared<std::string>("theirs");
  });
  EXPECT_EQ(*theirs, "theirs");
}

TEST(RunClientsTest, RunsEveryClientsWorkOnEachOfItsCoroutines) {
  auto cluster = Open();
  auto a = NewClient(*cluster, 2, 3);
  auto b = NewClient(*cluster, 1, 2);
  std::atomic<int> ran_a{0}, ran_b{0};
  Client* clients[] = {a.get(), b.get()};
  const Client::Work work[] = {[&](Context&) {
                                 ran_a.fetch_add(1);
                                 return Status::Ok();
                               },
                               [&](Context&) {
                                 ran_b.fetch_add(1);
                                 return Status::Ok();
                               }};
  ASSERT_TRUE(runtime::RunClients(clients, work).ok());
  EXPECT_EQ(ran_a.load(), 6);
  EXPECT_EQ(ran_b.load(), 2);
}

TEST(RunClientsTest, ReturnsTheFirstErrorInClientOrder) {
  auto cluster = Open();
  auto a = NewClient(*cluster);
  auto b = NewClient(*cluster);
  auto c = NewClient(*cluster);
  Client* clients[] = {a.get(), b.get(), c.get()};
  const Client::Work work[] = {[](Context&) { return Status::Ok(); },
                               [](Context&) { return Status::Aborted("b failed"); },
                               [](Context&) { return Status::Internal("c failed"); }};
  const Status status = runtime::RunClients(clients, work);
  EXPECT_TRUE(status.IsAborted()) << status.ToString();
}

TEST(RunClientsTest, RefusesDuplicatesForeignClustersAndMismatchedSpans) {
  auto cluster = Open();
  auto other_cluster = Open();
  auto a = NewClient(*cluster);
  auto foreign = NewClient(*other_cluster);
  const Client::Work ok = [](Context&) { return Status::Ok(); };
  Client* twice[] = {a.get(), a.get()};
  const Client::Work two[] = {ok, ok};
  EXPECT_EQ(runtime::RunClients(twice, two).code(), StatusCode::kFailedPrecondition);
  Client* mixed[] = {a.get(), foreign.get()};
  EXPECT_EQ(runtime::RunClients(mixed, two).code(), StatusCode::kFailedPrecondition);
  Client* one[] = {a.get()};
  EXPECT_TRUE(runtime::RunClients(one, two).IsInvalidArgument());
  EXPECT_TRUE(runtime::RunClients({}, {}).ok());
  // Nothing was left claimed by the refusals.
  EXPECT_TRUE(a->Run(ok).ok());
  EXPECT_TRUE(foreign->Run(ok).ok());
}

TEST(YieldTest, CoroutinesOfOneThreadInterleaveAtYield) {
  auto cluster = Open();
  auto client = NewClient(*cluster, 1, 2);
  std::vector<int> order;  // one thread: no lock needed
  ASSERT_TRUE(client
                  ->Run([&](Context& context) {
                    ContextImpl& ctx = ContextImpl::From(context);
                    for (int i = 0; i < 3; ++i) {
                      order.push_back(ctx.coroutine_index());
                      ctx.Yield();
                    }
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0, 1, 0, 1}));
}

TEST(BackoffTest, WaitsWithinItsBoundsAndLetsOthersRun) {
  auto cluster = Open();
  std::unique_ptr<Client> client;
  ClientOptions options{.threads = 1, .coroutines_per_thread = 2};
  options.retry_backoff_min = std::chrono::microseconds(200);
  options.retry_backoff_max = std::chrono::microseconds(400);
  ASSERT_TRUE(cluster->NewClient(options, &client).ok());
  std::atomic<int> other_ran{0};
  std::chrono::nanoseconds waited{0};
  ASSERT_TRUE(client
                  ->Run([&](Context& context) {
                    ContextImpl& ctx = ContextImpl::From(context);
                    if (ctx.coroutine_index() == 1) {
                      while (waited.count() == 0) {
                        other_ran.fetch_add(1);
                        ctx.Yield();
                      }
                      return Status::Ok();
                    }
                    const auto start = ctx.Now();
                    ctx.Backoff(5);  // 200 us * 2^5 capped at 400 us: [200, 400] us
                    waited = ctx.Now() - start;
                    return Status::Ok();
                  })
                  .ok());
  // Only the lower bound is exact; the upper one depends on the machine.
  EXPECT_GE(waited, std::chrono::microseconds(200));
  EXPECT_GT(other_ran.load(), 0) << "Backoff must yield, not spin the thread";
}

TEST(BackoffTest, ZeroMinimumRetriesAtOnceWithoutYielding) {
  auto cluster = Open();
  std::unique_ptr<Client> client;
  ClientOptions options{.threads = 1, .coroutines_per_thread = 2};
  options.retry_backoff_min = std::chrono::nanoseconds(0);
  ASSERT_TRUE(cluster->NewClient(options, &client).ok());
  bool other_ran = false;  // one thread: coroutine 0 runs first
  bool other_ran_during_backoff = true;
  ASSERT_TRUE(client
                  ->Run([&](Context& context) {
                    ContextImpl& ctx = ContextImpl::From(context);
                    if (ctx.coroutine_index() == 1) {
                      other_ran = true;
                      return Status::Ok();
                    }
                    ctx.Backoff(10);
                    other_ran_during_backoff = other_ran;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_FALSE(other_ran_during_backoff);
  EXPECT_TRUE(other_ran);
}

}  // namespace
}  // namespace dmidx
