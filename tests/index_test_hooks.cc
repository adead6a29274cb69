// Each registered index's test hooks (tests/index_test_hooks.h): the index
// suites' (what a failing suite prints of the structure, the structure
// walk, the contract checks known to fail) and schedule exploration's.
#include "tests/index_test_hooks.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dmidx/btree.h"
#include "testing/model.h"
#include "tests/btree_test_util.h"
#include "tests/radix_test_util.h"

namespace dmidx::testing {
namespace {

// The keys a full scan returns, in order, marking any out of order or
// repeated: the structure as the leaf level shows it to a reader.
void DumpByScan(RangeIndex& index, Context& ctx) {
  std::vector<KeyValue> all;
  const Status status = index.Scan(ctx, std::string(index.key_bytes(), '\0'), SIZE_MAX, &all);
  std::printf("scan: %s, %zu keys\n", status.ToString().c_str(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const bool disorder = i > 0 && all[i].key <= all[i - 1].key;
    std::printf("  %zu %s %llu%s\n", i, Hex(all[i].key).c_str(),
                static_cast<unsigned long long>(all[i].value),
                disorder ? "  <- not after the key before" : "");
  }
}

// Whether `settings` turn the B+tree's local lock table on.
bool LocalLockTable(const registry::IndexSettings& settings) {
  const auto found = settings.find("local_lock_table");
  return found == settings.end() ? BTreeOptions().local_lock_table : found->second == "true";
}

}  // namespace

const std::map<std::string, IndexTestHooks>& IndexHooks() {
  static const std::map<std::string, IndexTestHooks> hooks = {
      {"btree",
       {.dump =
            [](RangeIndex& index, Context& ctx) {
              for (const std::string& error : btree::BTreeTestPeer::Walk(index, ctx))
                std::printf("walk: %s\n", error.c_str());
              DumpByScan(index, ctx);
            },
        .walk = [](RangeIndex& index,
                   Context& ctx) { return btree::BTreeTestPeer::Walk(index, ctx); },
        .known_defects = nullptr}},
      {"radix",
       {.dump =
            [](RangeIndex& index, Context& ctx) {
              setenv("DMIDX_WALK_DEBUG", "1", 1);
              const radix::TreeShape shape = radix::RadixTestPeer::Walk(index, ctx);
              for (const std::string& error : shape.errors)
                std::printf("walk: %s\n", error.c_str());
            },
        .walk = [](RangeIndex& index,
                   Context& ctx) { return radix::RadixTestPeer::Walk(index, ctx).errors; },
        .known_defects = nullptr}},
  };
  return hooks;
}

const std::map<std::string, ExploreHooks>& IndexExploreHooks() {
  static const std::map<std::string, ExploreHooks> hooks = {
      {"btree",
       {// 256-byte nodes, 13 keys a leaf: splits within a short history.
        .all_on = {{"node_bytes", "256"}, {"read_delegation", "true"}, {"write_combining", "true"}},
        .fixed_at_creation = {"on_chip_locks"},
        .mixed_picks = {"cache_bytes", "local_lock_table", "combine_commands",
                        "entry_level_write_back", "read_delegation", "write_combining"},
        // The B+tree has no merges: a quarter of merges schedules.
        .merges_weight = 1,
        // One handle per compute node, or two: one with the local lock
        // table and one without, so that one context can ask for a lock
        // word through both.
        .shaped =
            [](uint32_t compute_nodes, const TechniquesOf& techniques, std::mt19937_64& rng) {
              const bool two_handles = rng() % 3 != 0;
              ExploreShape shape;
              shape.shape = two_handles ? "two handles per compute node (local lock table on, off)"
                                        : "one handle per compute node";
              for (uint32_t cn = 0; cn < compute_nodes; ++cn) {
                registry::IndexSettings settings = techniques(cn);
                shape.handles.push_back({settings});
                if (!two_handles) continue;
                settings["local_lock_table"] = LocalLockTable(settings) ? "false" : "true";
                shape.handles.back().push_back(std::move(settings));
              }
              return shape;
            },
        // Its undo or release retries come within a few batches of the
        // context.
        .failure_spacing = 10,
        // After a failed batch its undo and retries leave every node as
        // the walk wants it, as IndexContractSuite checks for a batch
        // failing in each step of a change (the 2982 B+tree failures
        // schedules of seeds 0-5999 walked clean).
        .walk_after_failures = true,
        .settled = nullptr,
        .walk_after_deaths =
            [](RangeIndex& index, Context& ctx, std::span<const uint32_t> dead) {
              return btree::BTreeTestPeer::Walk(index, ctx, dead);
            }}},
      {"radix",
       {.all_on = {},
        .fixed_at_creation = {"homogeneous_nodes"},
        .mixed_picks = {"cache_bytes", "in_place_leaves", "rear_embedded_lock", "read_delegation",
                        "write_combining"},
        // Merges are the radix tree's: three quarters of merges schedules.
        .merges_weight = 3,
        // Adaptive or fixed-size nodes, on every compute node; the ART
        // cache on, off or chosen per compute node.
        .shaped =
            [](uint32_t compute_nodes, const TechniquesOf& techniques, std::mt19937_64& rng) {
              const bool adaptive = rng() % 2;
              const int cache = static_cast<int>(rng() % 3);  // on, off, per compute node
              static const char* const kCache[] = {"cache on", "cache off",
                                                   "cache per compute node"};
              ExploreShape shape;
              shape.shape =
                  std::string(adaptive ? "adaptive" : "fixed-size") + " nodes, " + kCache[cache];
              for (uint32_t cn = 0; cn < compute_nodes; ++cn) {
                registry::IndexSettings settings = techniques(cn);
                settings["homogeneous_nodes"] = adaptive ? "true" : "false";
                const bool cached = cache == 0 || (cache == 2 && rng() % 2);
                // Cached: the default. (A std::string: GCC 12 -O3 warns a
                // false -Wrestrict when a 1-byte literal is assigned here.)
                if (cached) {
                  settings.erase("cache_bytes");
                } else {
                  settings["cache_bytes"] = std::string("0");
                }
                shape.handles.push_back({std::move(settings)});
              }
              return shape;
            },
        // A merge's rollback is up to one CAS per slot it froze, each a
        // round trip, while the compute node's other contexts post too.
        .failure_spacing = 40,
        // A step whose retries all failed may leave a state docs/radix.md
        // ("Resting states") allows only after a compute node died: a
        // deleted leaf in a live slot (rear word 2), in failures seeds 237,
        // 518, 594 and 903 among others.
        .walk_after_failures = false,
        // No header left untrimmed (docs/radix.md, "Resting states"): only
        // a compute node that dies, or a step whose retries all failed,
        // leaves one.
        .settled =
            [](RangeIndex& index, Context& ctx) {
              std::vector<std::string> errors;
              const radix::TreeShape shape = radix::RadixTestPeer::Walk(index, ctx);
              if (shape.untrimmed_headers > 0) {
                errors.push_back(std::to_string(shape.untrimmed_headers) +
                                 " headers left untrimmed");
              }
              return errors;
            },
        .walk_after_deaths =
            [](RangeIndex& index, Context& ctx, std::span<const uint32_t> dead) {
              return radix::RadixTestPeer::Walk(index, ctx, dead).errors;
            }}},
  };
  return hooks;
}

}  // namespace dmidx::testing
