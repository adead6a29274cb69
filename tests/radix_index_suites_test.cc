// The index suites (tests/index_suites.h) over the radix tree: with every
// technique (RadixOptions{} defaults) and with every technique off
// (RadixOptions::Baseline(): out-of-place leaves, no cache, no RDWC,
// fixed-size nodes).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/radix.h"
#include "testing/index_factory.h"
#include "tests/index_suites.h"
#include "tests/radix_test_util.h"

namespace dmidx::testing {
namespace {

IndexRow RadixRow(std::string name, RadixOptions options, std::optional<WarmCosts> warm,
                  double concurrency_scale) {
  IndexRow row;
  row.name = std::move(name);
  row.open = [options](Client* client, std::string_view index_name, const IndexSpec& spec,
                       std::unique_ptr<RangeIndex>* index) -> Status {
    RadixOptions opened = options;
    opened.key_bytes =
        spec.key_bytes;  // node sizes are the tree's own: small_nodes changes nothing
    if (spec.lock_timeout) opened.lock_timeout = *spec.lock_timeout;
    std::unique_ptr<Radix> tree;
    DMIDX_RETURN_IF_ERROR(Radix::Open(client, index_name, opened, &tree));
    *index = std::move(tree);
    return Status::Ok();
  };
  row.leaf_capacity = [](uint32_t) { return 1u; };  // a leaf per key
  row.dump = [](RangeIndex& index, Context& ctx) {
    setenv("DMIDX_WALK_DEBUG", "1", 1);
    const radix::TreeShape shape = radix::RadixTestPeer::Walk(index, ctx);
    for (const std::string& error : shape.errors)
      std::printf("walk: %s\n", error.c_str());
  };
  row.walk = [](RangeIndex& index, Context& ctx) {
    return radix::RadixTestPeer::Walk(index, ctx).errors;
  };
  if (!options.in_place_leaves) {
    // Found by the contract suite: the old leaf's claim and replaced mark
    // are only ever taken back by their own context.
    row.known_defects.emplace(
        "WaitersBehindADeadHolderShareOneLockTimeout",
        "a compute node that dies between an out-of-place update's claim + replaced-mark batch "
        "and its slot CAS leaves the key unreadable and unwritable for good (lookups and writes "
        "restart until Aborted \"too many restarts\", after ~10 s, not DeadlineExceeded): "
        "nobody takes a dead updater's replaced mark back (issue 25, item 7)");
  }
  row.warm = warm;
  row.concurrency_scale = concurrency_scale;
  return row;
}

// Warm (the node holding the key's slot cached) and uncontended: a lookup
// READs the leaf (1 round trip); a write of a present key CASes the rear
// lock with the leaf READ, then writes checksum and value (16 bytes) with
// the release (2); a delete takes the lock the same way, then marks the
// leaf deleted and CASes its slot to a tombstone in one batch (2). A
// scan's round trips depend on the levels under the node its range shares.
constexpr WarmCosts kAllTechniques = {.lookup_round_trips = 1,
                                      .write_round_trips = 2,
                                      .write_bytes = 8 /*CAS*/ + 16 + 8 /*release*/,
                                      .scan_round_trips = std::nullopt};

DMIDX_INSTANTIATE_INDEX_SUITES(
    Radix,
    ::testing::Values(RadixRow("radix", RadixOptions{}, kAllTechniques, 1.0),
                      RadixRow("radix_baseline", RadixOptions::Baseline(), std::nullopt, 0.25)));

}  // namespace
}  // namespace dmidx::testing
