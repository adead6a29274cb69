// IndexChurnSuite: issue 27's churn experiment at CI size. Inserts,
// updates and deletes over a fixed key set until the index has written ten
// times its memory node's pool: the pool does not run out, every key reads
// its model value at the end, and every object the index retired comes
// back; an index that retires more bytes than the pool holds would have run
// out without reuse.
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "dmidx/status.h"
#include "lib/memnode/memory_node.h"
#include "lib/runtime/client.h"
#include "testing/index_factory.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/watchdog.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

constexpr uint64_t kPoolBytes = uint64_t{2} << 20;
constexpr uint64_t kChunkBytes = uint64_t{32} << 10;
constexpr uint64_t kKeys = 1000;

ClusterOptions ChurnCluster() {
  ClusterOptions options = SmallLocalCluster(1, kPoolBytes, false, std::chrono::microseconds(0));
  options.memory_node.chunk_bytes = kChunkBytes;
  // Short leases: epochs move with the renewals.
  options.lease.period = std::chrono::milliseconds(2);
  options.lease.timeout = std::chrono::milliseconds(20);
  return options;
}

// Pool bytes the memory node has handed out, as the public API reports
// them (Cluster::MemoryUsage), checked against the node itself.
uint64_t PoolInUse(Cluster& cluster) {
  memnode::MemoryNode* node =
      static_cast<runtime::ClusterImpl&>(cluster).backend().in_process_memory_node(0);
  const uint64_t in_use = (node->total_chunks() - node->free_chunks()) * node->chunk_bytes();
  const StatusOr<std::vector<PoolUsage>> usage = cluster.MemoryUsage();
  EXPECT_TRUE(usage.ok()) << usage.status().ToString();
  if (usage.ok()) {
    EXPECT_EQ(usage->at(0).bytes_in_use, in_use);
  }
  return in_use;
}

// The public reclamation counters (Client::reclamation_stats) against the
// epoch table's.
void ExpectPublicCountersMatch(Client& client) {
  const runtime::EpochCounters& counters =
      static_cast<runtime::ClientImpl&>(client).epochs().counters();
  const ReclamationStats stats = client.reclamation_stats();
  EXPECT_EQ(stats.retired_objects, counters.retired.load());
  EXPECT_EQ(stats.retired_bytes, counters.retired_bytes.load());
  EXPECT_EQ(stats.reclaimed_objects, counters.reclaimed.load());
  EXPECT_EQ(stats.reclaimed_bytes, counters.reclaimed_bytes.load());
  EXPECT_EQ(stats.epoch_advances, counters.advances.load());
  EXPECT_EQ(stats.held_back, counters.held_back.load());
}

// Waits (a deadline for a hung test, not a bound on speed) until every
// object `client` retired went back to an allocator. A worker frees what
// it retired when it retires more, or, once it goes, its keeper does.
bool EverythingReclaimed(Client& client) {
  const runtime::EpochCounters& counters =
      static_cast<runtime::ClientImpl&>(client).epochs().counters();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (counters.reclaimed.load() != counters.retired.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST_P(IndexChurnSuite, ChurnOfTenPoolsReusesWhatItFrees) {
  Watchdog watchdog(std::chrono::seconds(600));
  const IndexRow& row = GetParam();
  // Ten pools under the sanitizers too: with less, the radix tree
  // retires less than the pool holds.
  const uint64_t to_write = 10 * kPoolBytes;
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(ChurnCluster(), &cluster).ok());
  auto client = NewClient(*cluster);
  auto index = OpenIndexOrFail(row, client.get(), "churn", {});
  ASSERT_NE(index, nullptr);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());

  Model model;
  std::mt19937_64 rng(27);
  uint64_t operations = 0;
  while (client->stats().bytes_written < to_write) {
    const uint64_t key = rng() % kKeys;
    const uint64_t value = rng();
    const std::string encoded = Key(key, 8);
    Status status;
    switch (rng() % 3) {
      case 0:
        status = index->Insert(*ctx, encoded, value);
        model[key] = value;
        break;
      case 1:
        status = index->Update(*ctx, encoded, value);
        if (model.count(key) != 0) model[key] = value;
        if (status.IsNotFound()) status = Status::Ok();
        break;
      default:
        status = index->Delete(*ctx, encoded);
        model.erase(key);
        if (status.IsNotFound()) status = Status::Ok();
        break;
    }
    ASSERT_TRUE(status.ok()) << "operation " << operations << " on key " << key << ": "
                             << status.ToString() << " (pool in use: " << PoolInUse(*cluster)
                             << " of " << kPoolBytes << " bytes)";
    ++operations;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*index, *ctx, model, 8));
  // The context goes: what its worker retired is the keeper's to free.
  ctx.reset();
  ASSERT_TRUE(EverythingReclaimed(*client));
  const runtime::EpochCounters& counters =
      static_cast<runtime::ClientImpl&>(*client).epochs().counters();
  // An index that writes out of place (the radix tree's leaves) retires
  // about what it writes, so the churn must outgrow the pool. The B+tree
  // writes in place and retires only the nodes merges unlink: it must
  // retire some, far less than a pool.
  const bool writes_in_place = row.name.rfind("btree", 0) == 0;
  if (writes_in_place) {
    EXPECT_GT(counters.retired.load(), 0u) << "no merge retired a node";
  } else if (counters.retired.load() != 0) {
    EXPECT_GT(counters.retired_bytes.load(), kPoolBytes)
        << "the churn never needed reuse: make it longer";
  }
  EXPECT_LT(PoolInUse(*cluster), kPoolBytes);
  ExpectPublicCountersMatch(*client);
  const ReclamationStats stats = client->reclamation_stats();
  EXPECT_EQ(stats.reclaimed_bytes, stats.retired_bytes);
  // Whatever was freed went back for reuse: the shared lists took bundles
  // of it (a worker keeps only keep_free_objects of a size).
  if (stats.retired_objects > 1000) {
    EXPECT_GT(stats.shared_objects_pushed, 0u);
  }
  EXPECT_EQ(stats.shared_objects_lost, 0u);
}

// The same churn from Client::Run's worker threads, whose retired objects
// stay on their rings between runs until ReleaseRetired hands them to the
// lease keeper: then everything comes back (the bench's quiesce).
TEST_P(IndexChurnSuite, ReleaseRetiredLetsARunsRetiredObjectsBeReclaimed) {
  Watchdog watchdog(std::chrono::seconds(600));
  const IndexRow& row = GetParam();
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(ChurnCluster(), &cluster).ok());
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({.threads = 2}, &client).ok());
  auto index = OpenIndexOrFail(row, client.get(), "churn", {});
  ASSERT_NE(index, nullptr);
  const Status ran = client->Run([&](Context& ctx) {
    std::mt19937_64 rng(27 + ctx.thread_index());
    while (ctx.stats().bytes_written < 2 * kPoolBytes) {
      const std::string key = Key(rng() % kKeys, 8);
      Status status = rng() % 2 == 0 ? index->Insert(ctx, key, rng()) : index->Delete(ctx, key);
      if (!status.ok() && !status.IsNotFound()) return status;
    }
    return Status::Ok();
  });
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  ASSERT_TRUE(client->ReleaseRetired().ok());
  ASSERT_TRUE(EverythingReclaimed(*client));
  ExpectPublicCountersMatch(*client);
  const ReclamationStats stats = client->reclamation_stats();
  EXPECT_EQ(stats.reclaimed_objects, stats.retired_objects);
  // The radix tree retires deleted leaves (the B+tree nothing yet: it
  // does not merge).
  if (row.kind->name == "radix") {
    EXPECT_GT(stats.retired_objects, 0u);
  }
  // Nothing is left for a second call to hand over.
  EXPECT_TRUE(client->ReleaseRetired().ok());
  EXPECT_EQ(client->reclamation_stats().reclaimed_objects, stats.reclaimed_objects);
}

}  // namespace
}  // namespace dmidx::testing
