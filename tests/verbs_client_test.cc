// Clients of a verbs cluster, on a real RDMA device (skipped without one:
// run it under tools/softroce-vm.sh, as CI's softroce stage does).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/radix.h"
#include "dmidx/status.h"

namespace dmidx {
namespace {

// A cluster served by this process over the first RDMA device, or why
// there is none here.
Status OpenVerbsCluster(std::unique_ptr<Cluster>* cluster) {
  ClusterOptions options;
  options.backend = FabricBackend::kVerbs;
  options.memory_nodes = 1;
  options.memory_node.pool_bytes = uint64_t{2} << 20;
  options.memory_node.lock_region_bytes = uint64_t{64} << 10;
  options.memory_node.chunk_bytes = uint64_t{64} << 10;
  options.memory_node.huge_pages = false;
  options.verbs_in_process_memory_nodes = true;
  options.verbs.op_timeout = std::chrono::seconds(20);
  options.verbs.ack_timeout = 18;  // as the conformance suite: emulated links ACK late
  return Cluster::Open(options, cluster);
}

// A verbs process is one compute node of its run, so it has one client
// open at a time: a second would write the same compute-node id into lock
// words (a radix leaf's rear word, HOCL's tags) and take the first's holds
// for its own. Once the first is gone the next opens, as the same node.
TEST(VerbsClientTest, OneClientOpenAtATime) {
  std::unique_ptr<Cluster> cluster;
  const Status opened = OpenVerbsCluster(&cluster);
  if (opened.IsUnavailable()) GTEST_SKIP() << opened.ToString();
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  std::unique_ptr<Client> first, second;
  ASSERT_TRUE(cluster->NewClient({.threads = 1}, &first).ok());
  const Status refused = cluster->NewClient({.threads = 1}, &second);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("one client at a time"), std::string::npos)
      << refused.ToString();
  EXPECT_EQ(second, nullptr);
  const uint32_t id = first->compute_node_id();
  first.reset();
  const Status reopened = cluster->NewClient({.threads = 1}, &second);
  ASSERT_TRUE(reopened.ok()) << reopened.ToString();
  EXPECT_EQ(second->compute_node_id(), id);
  std::unique_ptr<Context> context;
  EXPECT_TRUE(second->NewBlockingContext(&context).ok());
}

// Cluster::MemoryUsage over the control QP (ControlType::kPoolUsage):
// the pool as the options shaped it, and the chunks an index took from it
// (a radix tree's descriptor and root, the lease records).
TEST(VerbsClientTest, MemoryUsageReportsThePool) {
  std::unique_ptr<Cluster> cluster;
  const Status opened = OpenVerbsCluster(&cluster);
  if (opened.IsUnavailable()) GTEST_SKIP() << opened.ToString();
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  const StatusOr<std::vector<PoolUsage>> before = cluster->MemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->size(), 1u);
  EXPECT_EQ((*before)[0].pool_bytes, uint64_t{2} << 20);
  EXPECT_EQ((*before)[0].chunk_bytes, uint64_t{64} << 10);
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({.threads = 1}, &client).ok());
  std::unique_ptr<Radix> index;
  ASSERT_TRUE(Radix::Open(client.get(), "usage", RadixOptions{}, &index).ok());
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  ASSERT_TRUE(index->Insert(*context, "12345678", 1).ok());
  const StatusOr<std::vector<PoolUsage>> after = cluster->MemoryUsage();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  const PoolUsage& pool = (*after)[0];
  EXPECT_GT(pool.bytes_in_use, (*before)[0].bytes_in_use);
  EXPECT_EQ(pool.bytes_in_use, (pool.total_chunks - pool.free_chunks) * pool.chunk_bytes);
  index->Close();
}

}  // namespace
}  // namespace dmidx
