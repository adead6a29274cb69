// Helpers of the B+tree-only suites: trees with small nodes (many splits,
// several levels from few keys). Clusters and clients: testing/local_cluster.h.
#ifndef DMIDX_TESTS_BTREE_TEST_UTIL_H_
#define DMIDX_TESTS_BTREE_TEST_UTIL_H_

#include <cstdint>

#include "dmidx/btree.h"

namespace dmidx::testing {

// 256-byte nodes: 13 entries a leaf with 8-byte keys, so a few thousand
// keys make several levels.
inline constexpr uint32_t kSmallNodeBytes = 256;
inline BTreeOptions SmallNodes(uint32_t key_bytes = 8) {
  BTreeOptions options;
  options.node_bytes = kSmallNodeBytes;
  options.key_bytes = key_bytes;
  return options;
}

}  // namespace dmidx::testing

#endif  // DMIDX_TESTS_BTREE_TEST_UTIL_H_
