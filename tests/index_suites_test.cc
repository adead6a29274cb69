// The index suites (tests/index_suites.h) over every registered index
// (registry/registry.h) in each of its configurations (its defaults, every
// technique off, ...), and each index's dump hook: what a failing suite
// prints of the index's structure. A new index joins with its registry
// row and a hook here; index_registry_test.cc fails until it has both.
#include "tests/index_suites.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tests/btree_test_util.h"
#include "tests/radix_test_util.h"

namespace dmidx::testing {

// `key` in hex.
std::string Hex(std::string_view key) {
  std::string hex;
  char byte[3];
  for (const char c : key) {
    std::snprintf(byte, sizeof(byte), "%02x", static_cast<unsigned char>(c));
    hex += byte;
  }
  return hex;
}

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
        .known_defects =
            [](const registry::IndexSettings& settings) {
              std::map<std::string, std::string> defects;
              const auto in_place = settings.find("in_place_leaves");
              if (in_place != settings.end() && in_place->second == "false") {
                // Found by the contract suite: the old leaf's claim and
                // replaced mark are only ever taken back by their own context.
                defects.emplace(
                    "WaitersBehindADeadHolderShareOneLockTimeout",
                    "a compute node that dies between an out-of-place update's claim + "
                    "replaced-mark batch and its slot CAS leaves the key unreadable and "
                    "unwritable for good (lookups and writes restart until Aborted \"too many "
                    "restarts\", not DeadlineExceeded): nobody takes a dead updater's replaced "
                    "mark back; recovering a dead node's half-done operations is issue 26");
              }
              return defects;
            }}},
  };
  return hooks;
}

namespace {

DMIDX_INSTANTIATE_INDEX_SUITES(Registry, ::testing::ValuesIn(RegistryRows(IndexHooks())));

}  // namespace
}  // namespace dmidx::testing
