// What the tests know of each registered index (registry/registry.h)
// beyond its registry row, by kind name: the index suites' hooks
// (IndexTestHooks: dump, structure walk, known defects) and schedule
// exploration's (ExploreHooks, tests/sim_schedule.h). A new index adds
// both in tests/index_test_hooks.cc; index_registry_test.cc fails until it
// has them.
#ifndef DMIDX_TESTS_INDEX_TEST_HOOKS_H_
#define DMIDX_TESTS_INDEX_TEST_HOOKS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dmidx/index.h"
#include "registry/registry.h"
#include "testing/index_factory.h"

namespace dmidx::testing {

// The index suites' hooks of each registered index, by kind name.
const std::map<std::string, IndexTestHooks>& IndexHooks();

// The technique settings of compute node `cn` (ExploreHooks::shaped).
using TechniquesOf = std::function<registry::IndexSettings(uint32_t cn)>;

// What a merges or failures schedule runs an index with: its shape (a row
// of the exploration's summary, "radix, adaptive nodes, cache on") and the
// settings of each compute node's handles, one or more each.
struct ExploreShape {
  std::string shape;  // after the index's name and ", "
  std::vector<std::vector<registry::IndexSettings>> handles;
};

// What schedule exploration needs of an index. A schedule's seed chooses
// everything through one random stream, so the order in which these draw
// from it is part of every seed: changing it changes which schedule each
// seed (the regression seeds of sim_schedules_test.cc among them) runs.
struct ExploreHooks {
  // Every technique on: settings over the index's defaults. "Every
  // technique off" is the registry's "baseline" configuration over these.
  registry::IndexSettings all_on;
  // Baseline settings fixed when the index is created: compute nodes of a
  // "mixed switches" schedule all keep them as all_on has them.
  std::vector<std::string> fixed_at_creation;
  // The settings the third compute node of a "mixed switches" schedule
  // picks, each as all_on or baseline has it by one draw, in draw order.
  std::vector<std::string> mixed_picks;
  // The index's share of merges schedules, against the other indexes'
  // (the other schedule kinds give every index the same share).
  uint32_t merges_weight = 1;
  // A merges or failures schedule's handles on `compute_nodes` compute
  // nodes: `techniques(cn)` gives compute node `cn`'s technique settings
  // (drawing for a mixed pick); the hook draws what else the index varies.
  std::function<ExploreShape(uint32_t compute_nodes, const TechniquesOf& techniques,
                             std::mt19937_64& rng)>
      shaped;
  // Failures schedules: the fewest batches between two injected failures
  // (fabric::RandomBatchFailures::min_spacing), so that the undo or
  // rollback after one is not failed too.
  uint64_t failure_spacing = 0;
  // Whether IndexTestHooks::walk holds at rest after a failures schedule
  // too: single batches of one compute node failed, and it lived on.
  bool walk_after_failures = false;
  // What an index at rest keeps after a history without injected failures,
  // beyond what IndexTestHooks::walk checks; may be unset (nothing more).
  std::function<std::vector<std::string>(RangeIndex& index, Context& ctx)> settled;
  // The walk after a deaths schedule, told the ids of the compute nodes
  // that died (what they left for the next change that meets it is
  // allowed, docs/radix.md "Resting states"); unset: IndexTestHooks::walk.
  std::function<std::vector<std::string>(RangeIndex& index, Context& ctx,
                                         std::span<const uint32_t> dead)>
      walk_after_deaths;
};

// Exploration's hooks of each registered index, by kind name.
const std::map<std::string, ExploreHooks>& IndexExploreHooks();

}  // namespace dmidx::testing

#endif  // DMIDX_TESTS_INDEX_TEST_HOOKS_H_
