// Helpers shared by the B+tree suites: small in-process clusters, clients,
// and trees with small nodes (many splits, several levels from few keys).
#ifndef DMIDX_TESTS_BTREE_TEST_UTIL_H_
#define DMIDX_TESTS_BTREE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "tests/test_util.h"

namespace dmidx::testing_util {

// `memory_nodes` local MNs of 64 MiB; with every fault injected (delays up
// to 10 us, torn READs and WRITEs, reordering) when `faults`, seeded with
// `seed` when given.
inline std::unique_ptr<Cluster> OpenCluster(bool faults, uint32_t memory_nodes = 2,
                                            std::optional<uint64_t> seed = std::nullopt) {
  ClusterOptions options =
      SmallLocalCluster(memory_nodes, 64 << 20, faults, std::chrono::microseconds(10));
  if (seed) options.local.seed = *seed;
  std::unique_ptr<Cluster> cluster;
  EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
  return cluster;
}

inline std::unique_ptr<Client> NewClient(Cluster& cluster, uint32_t threads = 1,
                                         uint32_t coroutines = 1) {
  std::unique_ptr<Client> client;
  EXPECT_TRUE(
      cluster.NewClient({.threads = threads, .coroutines_per_thread = coroutines}, &client).ok());
  return client;
}

// 256-byte nodes: 13 entries a leaf with 8-byte keys, so a few thousand
// keys make several levels.
inline constexpr uint32_t kSmallNodeBytes = 256;
inline BTreeOptions SmallNodes(uint32_t key_bytes = 8) {
  BTreeOptions options;
  options.node_bytes = kSmallNodeBytes;
  options.key_bytes = key_bytes;
  return options;
}

}  // namespace dmidx::testing_util

#endif  // DMIDX_TESTS_BTREE_TEST_UTIL_H_
