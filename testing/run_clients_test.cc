#include "testing/run_clients.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/local_cluster.h"
#include "testing/watchdog.h"

namespace dmidx::testing {
namespace {

constexpr uint32_t kThreads = 2, kCoroutines = 3;

TEST(RunClientsTest, RunsEveryContextOfEveryClientOnceAndTogether) {
  Watchdog watchdog(std::chrono::seconds(60));
  auto cluster = OpenCluster(false, 1);
  std::vector<std::unique_ptr<Client>> owned;
  std::vector<Client*> clients;
  for (int i = 0; i < 3; ++i) {
    owned.push_back(NewClient(*cluster, kThreads, kCoroutines));
    clients.push_back(owned.back().get());
  }
  constexpr int kContexts = 3 * kThreads * kCoroutines;
  std::mutex mutex;
  std::set<int> seen;  // guarded by mutex
  std::atomic<int> arrived{0};
  const std::vector<Status> results = RunClients(clients, [&](int client, Context& ctx) -> Status {
    const int index = ContextIndex(client, ctx, clients[0]->options());
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (!seen.insert(index).second) return Status::Internal("context ran twice");
    }
    // Every client's first context waits for one context of every client:
    // only clients running at once get past (the watchdog catches a hang).
    if (ctx.thread_index() == 0 && ctx.coroutine_index() == 0) {
      arrived.fetch_add(1);
      while (arrived.load() < 3)
        std::this_thread::yield();
    }
    return Status::Ok();
  });
  ASSERT_EQ(results.size(), 3u);
  for (const Status& status : results)
    EXPECT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(seen.size(), size_t{kContexts});
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), kContexts - 1);
}

TEST(RunClientsTest, ReturnsEachClientsStatusInOrder) {
  Watchdog watchdog(std::chrono::seconds(60));
  auto cluster = OpenCluster(false, 1);
  auto a = NewClient(*cluster), b = NewClient(*cluster);
  const std::vector<Status> results =
      RunClients(std::vector<Client*>{a.get(), b.get()}, [](int client, Context&) {
        return client == 1 ? Status::NotFound("client 1") : Status::Ok();
      });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_TRUE(results[1].IsNotFound()) << results[1].ToString();
  EXPECT_TRUE(RunClients({}, [](int, Context&) { return Status::Ok(); }).empty());
}

}  // namespace
}  // namespace dmidx::testing
