// Test access to a radix tree's remote structure: a walk from the root
// slot that checks every invariant docs/radix.md states for a quiescent
// tree (no change in flight) and counts what it saw.
#ifndef DMIDX_TESTS_RADIX_TEST_UTIL_H_
#define DMIDX_TESTS_RADIX_TEST_UTIL_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/index.h"
#include "radix/radix_impl.h"

namespace dmidx::radix {

struct TreeShape {
  std::array<uint64_t, kMaxType + 1> nodes_by_type{};  // internal nodes by type
  uint64_t nodes = 0;
  uint64_t leaves = 0;
  std::vector<uint64_t> leaves_on;  // live leaves by memory node
  uint64_t tombstones = 0;
  uint64_t levels = 0;              // internal nodes on the longest path
  uint64_t longest_header = 0;      // partial key bytes in one header
  uint64_t full_headers = 0;        // headers holding kMaxHeaderBytes bytes
  uint64_t single_child_nodes = 0;  // internal nodes with fewer than 2 live children
  uint64_t lagging_slot_types = 0;  // slots whose type is below their child header's
  uint64_t untrimmed_headers = 0;   // headers still holding bytes the path matched above
  // What a dead compute node left for the next change that meets it
  // (docs/radix.md, "Resting states"): a reverse pointer holding its claim
  // or naming a node its split never published, a deleted leaf in a live
  // slot. Counted, not errors, only for the dead nodes the walk is given.
  uint64_t dead_leftovers = 0;
  std::vector<std::string> keys;    // every live leaf's key, in order
  std::vector<std::string> errors;  // broken invariants
};

// `key` zero-padded (or cut) to `key_bytes`, as fixed-size keys are.
inline std::string Padded(std::string key, uint32_t key_bytes) {
  key.resize(key_bytes, '\0');
  return key;
}

class RadixTestPeer {
 public:
  // Walks `index` (a radix tree) with `ctx`'s compute node; what the
  // compute nodes `dead` (ids) left is counted in dead_leftovers.
  static TreeShape Walk(RangeIndex& index, Context& ctx, std::span<const uint32_t> dead = {});
  // The tree's leaf size.
  static uint32_t LeafBytes(RangeIndex& index);
  // The internal node on `key`'s path whose branch byte is key byte
  // `branch` (null if none).
  static fabric::RemoteAddress NodeOnPath(RangeIndex& index, Context& ctx, std::string_view key,
                                          uint32_t branch);
  // The leaf `key`'s path ends at (null when it ends at no leaf), read
  // afresh.
  static fabric::RemoteAddress LeafOf(RangeIndex& index, Context& ctx, std::string_view key);
  // One remote word, read and written raw (to stage a dead peer's state).
  static uint64_t ReadWord(Context& ctx, fabric::RemoteAddress at);
  static void WriteWord(Context& ctx, fabric::RemoteAddress at, uint64_t word);
  // The tree's local queues of leaf rear words (the compute node's), and
  // a new hold of `ctx`'s (RadixImpl::NewHold) to write into a rear word:
  // to hold a leaf's lock as a writer of the tree would.
  static lock::LocalLockTable& LeafQueues(RangeIndex& index);
  static uint64_t LockedWord(RangeIndex& index, runtime::ContextImpl& ctx);
};

}  // namespace dmidx::radix

#endif  // DMIDX_TESTS_RADIX_TEST_UTIL_H_
