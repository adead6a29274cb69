// The row that index suites (tests/index_*_suite.cc) are instantiated
// with: how to open an index of one kind and configuration, its name in
// test names, and what it supports. A new index joins every suite by
// adding a row (see tests/btree_index_suites_test.cc). Every operation of
// RangeIndex, scans and bulk load included, is expected of every index.
#ifndef DMIDX_TESTING_INDEX_FACTORY_H_
#define DMIDX_TESTING_INDEX_FACTORY_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/status.h"

namespace dmidx::testing {

// The shape of an index a suite asks for.
struct IndexSpec {
  uint32_t key_bytes = 8;
  // Nodes as small as the index allows, so that a few thousand keys make a
  // deep index (splits, several levels); false: the index's default sizes
  // (the costs an engine sees).
  bool small_nodes = true;
  // How long a writer waits for a lock before DeadlineExceeded; unset: the
  // index's default (short ones let a test meet a dead holder quickly).
  std::optional<std::chrono::milliseconds> lock_timeout = std::nullopt;
};

// Opens the index `name` of `client`'s cluster, creating it (empty) if it
// does not exist; handles opened on several clients share one index.
using OpenIndex = std::function<Status(Client* client, std::string_view name, const IndexSpec& spec,
                                       std::unique_ptr<RangeIndex>* index)>;

// Costs of single operations on a warm index (one context, no contention,
// default node sizes), where they are fixed numbers for the index.
struct WarmCosts {
  uint64_t lookup_round_trips = 0;
  // An insert of a present key, an update or a delete that splits nothing.
  uint64_t write_round_trips = 0;
  // Bytes such a write sends (atomics count 8).
  uint64_t write_bytes = 0;
  // A scan of 50 neighbouring keys, either form; nullopt where it depends
  // on where the range lies (a radix tree reads every level under the node
  // the whole range shares).
  std::optional<uint64_t> scan_round_trips;
};

struct IndexRow {
  // Display name, a suffix of test names: letters, digits and '_' only.
  std::string name;
  OpenIndex open;
  // Keys one leaf holds when a bulk load fills it to 1.0, by key size, with
  // small nodes (the step at which a load writes another leaf).
  std::function<uint32_t(uint32_t key_bytes)> leaf_capacity;
  // Fixed costs of warm single operations; nullopt where they depend on the
  // index's depth (e.g. no compute-side cache).
  std::optional<WarmCosts> warm;
  // The share of the concurrency suites' operations each context runs: 1
  // for the configurations the suites are sized for; less for one that is
  // slow by design (every technique off), to bound the suites' run time.
  // The checks stay the same.
  double concurrency_scale = 1.0;

  // Prints the index's structure (for a failing test's log); may be unset.
  std::function<void(RangeIndex& index, Context& ctx)> dump;
  // What is wrong with the index's remote structure, walked from its root
  // with no change in flight: every invariant its layout states (nodes that
  // pass their checks, keys in order and on their paths, no lock word held,
  // nothing frozen or claimed). Empty when all hold.
  std::function<std::vector<std::string>(RangeIndex& index, Context& ctx)> walk;
  // Checks of IndexContractSuite this index is known to fail, by test name
  // ("DamagedNodeWithItsLockQuietIsDataLoss"), each with the defect and the
  // issue that tracks it: the suite reports them skipped with that text, so
  // they show in every run until the row drops them.
  std::map<std::string, std::string> known_defects;

  // `ops` scaled by concurrency_scale, at least 1.
  int Scaled(int ops) const {
    const int scaled = static_cast<int>(ops * concurrency_scale);
    return scaled > 0 ? scaled : 1;
  }
};

// For gtest's messages ("btree_baseline").
inline void PrintTo(const IndexRow& row, std::ostream* out) {
  *out << row.name;
}

// Test-name suffix of a row, for INSTANTIATE_TEST_SUITE_P.
inline std::string RowName(const ::testing::TestParamInfo<IndexRow>& info) {
  return info.param.name;
}

// Opens `name` per `spec` through `row` on `client`; null, with a test
// failure recorded, on an error.
std::unique_ptr<RangeIndex> OpenIndexOrFail(const IndexRow& row, Client* client,
                                            std::string_view name, const IndexSpec& spec = {});

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_INDEX_FACTORY_H_
