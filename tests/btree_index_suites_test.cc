// The index suites (tests/index_suites.h) over the B+tree: with every
// technique (BTreeOptions{} defaults) and with every technique off
// (BTreeOptions::Baseline(), the paper's FG+). Another index joins the
// suites with a file like this one.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/btree.h"
#include "testing/index_factory.h"
#include "tests/btree_test_util.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

// Entries of one leaf (docs/btree.md layout): header = 32 + 2 key strides,
// entry = stride + 8, at most 64.
uint32_t LeafSlots(uint32_t node_bytes, uint32_t key_bytes) {
  const uint32_t stride = (key_bytes + 7) & ~7u;
  return std::min<uint32_t>(64, (node_bytes - 32 - 2 * stride) / (stride + 8));
}

IndexRow BTreeRow(std::string name, BTreeOptions options, std::optional<WarmCosts> warm,
                  double concurrency_scale) {
  IndexRow row;
  row.name = std::move(name);
  row.open = [options](Client* client, std::string_view index_name, const IndexSpec& spec,
                       std::unique_ptr<RangeIndex>* index) -> Status {
    BTreeOptions opened = options;
    opened.key_bytes = spec.key_bytes;
    if (spec.small_nodes) opened.node_bytes = kSmallNodeBytes;
    if (spec.lock_timeout) opened.lock_timeout = *spec.lock_timeout;
    std::unique_ptr<BTree> tree;
    DMIDX_RETURN_IF_ERROR(BTree::Open(client, index_name, opened, &tree));
    *index = std::move(tree);
    return Status::Ok();
  };
  row.leaf_capacity = [](uint32_t key_bytes) { return LeafSlots(kSmallNodeBytes, key_bytes); };
  row.walk = [](RangeIndex& index, Context& ctx) { return btree::BTreeTestPeer::Walk(index, ctx); };
  row.warm = warm;
  row.concurrency_scale = concurrency_scale;
  return row;
}

// With the cache and entry-level write-back, warm and uncontended: a
// lookup reads the leaf (1 round trip); a write is lock CAS + leaf READ,
// then entry write + release (2), writing the CAS, the 16 header bytes it
// needs and the 16-byte entry and the release, not the node; a scan reads
// the leaves its cached parent names at once (1).
constexpr WarmCosts kAllTechniques = {.lookup_round_trips = 1,
                                      .write_round_trips = 2,
                                      .write_bytes = 8 /*CAS*/ + 16 + 16 /*entry*/ + 8 /*release*/,
                                      .scan_round_trips = 1};

// Sherman's techniques plus SMART's read delegation and write combining
// (lock/rdwc.h): the same costs for one context alone.
BTreeOptions WithRdwc() {
  BTreeOptions options;
  options.read_delegation = true;
  options.write_combining = true;
  return options;
}

// Every technique off costs several times the round trips, and without the
// local lock table a context waiting for a hot key's lock can lose the CAS
// race for seconds under a sanitizer: its rows run a quarter of the
// concurrency suites' operations.
DMIDX_INSTANTIATE_INDEX_SUITES(
    BTree,
    ::testing::Values(BTreeRow("btree", BTreeOptions{}, kAllTechniques, 1.0),
                      BTreeRow("btree_baseline", BTreeOptions::Baseline(), std::nullopt, 0.25),
                      BTreeRow("btree_rdwc", WithRdwc(), kAllTechniques, 1.0)));

}  // namespace
}  // namespace dmidx::testing
