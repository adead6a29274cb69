// The row that index suites (tests/index_*_suite.cc) are instantiated
// with: one index of the registry (registry/registry.h) in one of its
// technique configurations, how to open it, and its name in test names.
// RegistryRows() makes a row of every registered index and configuration,
// so a new index joins every suite with its registry row. Every operation
// of RangeIndex, scans and bulk load included, is expected of every index.
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
#include "registry/registry.h"

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
  // Passed as the setting `lock_timeout_ms`, which every index has.
  std::optional<std::chrono::milliseconds> lock_timeout = std::nullopt;
};

// Opens the index `name` of `client`'s cluster, creating it (empty) if it
// does not exist; handles opened on several clients share one index.
using OpenIndex = std::function<Status(Client* client, std::string_view name, const IndexSpec& spec,
                                       std::unique_ptr<RangeIndex>* index)>;

// Fixed costs of warm single operations, as the registry's rows document
// them.
using WarmCosts = registry::WarmCosts;

// What the suites know of an index beyond its registry row: test hooks,
// one set per registered index (tests/index_test_hooks.cc).
struct IndexTestHooks {
  // Prints the index's structure, for a failing test's log.
  std::function<void(RangeIndex& index, Context& ctx)> dump;
  // What is wrong with the index's remote structure, walked from its root
  // with no change in flight: every invariant its layout states (nodes that
  // pass their checks, keys in order and on their paths, no lock word held,
  // nothing frozen or claimed). Empty when all hold.
  std::function<std::vector<std::string>(RangeIndex& index, Context& ctx)> walk;
  // Checks of IndexContractSuite the index in a configuration (its
  // settings) is known to fail, by test name, each with the defect and the
  // issue that tracks it; may be unset (none).
  std::function<std::map<std::string, std::string>(const registry::IndexSettings& settings)>
      known_defects;
};

struct IndexRow {
  // The index and its configuration (the registry's, never null).
  const registry::IndexKind* kind = nullptr;
  const registry::Configuration* configuration = nullptr;
  // Display name, a suffix of test names: the kind's name, then '_' and
  // the configuration's label unless it is the defaults ("btree_baseline").
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

  // The index's test hooks (IndexTestHooks).
  std::function<void(RangeIndex& index, Context& ctx)> dump;
  std::function<std::vector<std::string>(RangeIndex& index, Context& ctx)> walk;
  // Checks of IndexContractSuite this row is known to fail, by test name
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

// A row for every registered index in each of its configurations, in the
// registry's order, each with the test hooks `hooks` holds for its kind
// (unset if none: the registry test checks every kind has them).
std::vector<IndexRow> RegistryRows(const std::map<std::string, IndexTestHooks>& hooks);

// Opens `name` per `spec` through `row` on `client`; null, with a test
// failure recorded, on an error.
std::unique_ptr<RangeIndex> OpenIndexOrFail(const IndexRow& row, Client* client,
                                            std::string_view name, const IndexSpec& spec = {});

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_INDEX_FACTORY_H_
