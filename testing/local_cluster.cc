#include "testing/local_cluster.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "lib/runtime/client.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"
#include "lib/runtime/in_process_backend.h"
#include "lock/redo_log.h"

namespace dmidx::testing {

LocalFabricOptions AllLocalFaults(std::chrono::microseconds max_delay) {
  LocalFabricOptions faults;
  faults.max_apply_delay = max_delay;
  faults.torn_reads = true;
  faults.torn_writes = true;
  faults.reorder_unfenced = true;
  return faults;
}

ClusterOptions SmallLocalCluster(uint32_t memory_nodes, uint64_t pool_bytes, bool faults,
                                 std::chrono::microseconds max_delay) {
  ClusterOptions options;
  options.memory_nodes = memory_nodes;
  options.memory_node.pool_bytes = pool_bytes;
  options.memory_node.chunk_bytes = 1 << 20;
  options.memory_node.huge_pages = false;
  if (faults) options.local = AllLocalFaults(max_delay);
  return options;
}

std::unique_ptr<Cluster> OpenCluster(bool faults, uint32_t memory_nodes,
                                     std::optional<uint64_t> seed) {
  ClusterOptions options =
      SmallLocalCluster(memory_nodes, 64 << 20, faults, std::chrono::microseconds(10));
  if (seed) options.local.seed = *seed;
  std::unique_ptr<Cluster> cluster;
  const Status status = Cluster::Open(options, &cluster);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return cluster;
}

std::unique_ptr<Client> NewClient(Cluster& cluster, uint32_t threads, uint32_t coroutines) {
  std::unique_ptr<Client> client;
  const Status status =
      cluster.NewClient({.threads = threads, .coroutines_per_thread = coroutines}, &client);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return client;
}

void ReopenComputeNodeId(Cluster& cluster, uint32_t id) {
  auto* backend = dynamic_cast<runtime::InProcessBackend*>(
      &static_cast<runtime::ClusterImpl&>(cluster).backend());
  ASSERT_NE(backend, nullptr) << "not an in-process cluster";
  backend->ReopenComputeNodeIdForTesting(id);
}

uint64_t TestSeed(uint64_t base) {
  const char* text = std::getenv("DMIDX_CONCURRENCY_SEED");
  const uint64_t seed = text ? base + 1000 * std::strtoull(text, nullptr, 10) : base;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

void PrepareRedoSlots(Client& client, Context* blocking, uint32_t bytes) {
  const auto log = lock::RedoLog::For(runtime::ComputeNode::Of(client));
  const Status run = client.Run(
      [&](Context& ctx) { return log->Prepare(runtime::ContextImpl::From(ctx), bytes); });
  EXPECT_TRUE(run.ok()) << run.ToString();
  if (blocking != nullptr) {
    const Status prepared = log->Prepare(runtime::ContextImpl::From(*blocking), bytes);
    EXPECT_TRUE(prepared.ok()) << prepared.ToString();
  }
}

}  // namespace dmidx::testing
