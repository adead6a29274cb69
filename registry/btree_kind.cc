// The B+tree's registry row (dmidx/btree.h, docs/btree.md).
#include <algorithm>
#include <memory>
#include <utility>

#include "btree/node.h"
#include "dmidx/btree.h"
#include "registry/kinds.h"
#include "registry/settings.h"

namespace dmidx::registry {
namespace {

constexpr Switch<BTreeOptions> kSwitches[] = {
    {"local_lock_table", &BTreeOptions::local_lock_table},
    {"combine_commands", &BTreeOptions::combine_commands},
    {"on_chip_locks", &BTreeOptions::on_chip_locks},
    {"entry_level_write_back", &BTreeOptions::entry_level_write_back},
    {"read_delegation", &BTreeOptions::read_delegation},
    {"write_combining", &BTreeOptions::write_combining},
};

StatusOr<BTreeOptions> OptionsFrom(const IndexSettings& settings) {
  BTreeOptions options;
  for (const auto& [name, value] : settings) {
    std::string problem;
    if (name == "cache_bytes") {
      problem = TakeSize(value, {.max = SIZE_MAX}, &options.cache_bytes);
    } else if (name == "node_bytes") {
      problem = TakeSize(value,
                         {.min = BTreeOptions::kMinNodeBytes,
                          .max = BTreeOptions::kMaxNodeBytes,
                          .multiple = BTreeOptions::kNodeBytesMultiple},
                         &options.node_bytes);
    } else if (name == "max_handovers") {
      problem = TakeInteger(value, 0, UINT32_MAX, &options.max_handovers);
    } else if (name == "lock_timeout_ms") {
      problem = TakeMilliseconds(value, &options.lock_timeout);
    } else if (name == "merge_below_percent") {
      problem =
          TakeInteger(value, 0, BTreeOptions::kMaxMergeBelowPercent, &options.merge_below_percent);
    } else if (name == "rdwc_table_entries") {
      problem =
          TakeInteger(value, 1, BTreeOptions::kMaxRdwcTableEntries, &options.rdwc_table_entries);
    } else if (bool BTreeOptions::*field = SwitchNamed(kSwitches, name)) {
      problem = TakeOnOff(value, &(options.*field));
    } else {
      return NoSuchOption("btree", name);
    }
    if (!problem.empty()) return BadSetting("btree", name, problem);
  }
  return options;
}

std::vector<IndexOptionDoc> OptionDocs() {
  const BTreeOptions defaults;
  return {
      {"cache_bytes", std::to_string(defaults.cache_bytes),
       "bytes of internal nodes each compute node caches (0: no cache)"},
      {"node_bytes", std::to_string(defaults.node_bytes),
       "node size of a new tree: a multiple of " +
           std::to_string(BTreeOptions::kNodeBytesMultiple) + " in [" +
           FormatSize(BTreeOptions::kMinNodeBytes) + ", " +
           FormatSize(BTreeOptions::kMaxNodeBytes) + "] that holds four keys"},
      {"local_lock_table", Bool(defaults.local_lock_table),
       "HOCL's local lock table (queues, handover)"},
      {"max_handovers", std::to_string(defaults.max_handovers), "handovers of a lock in a row"},
      {"combine_commands", Bool(defaults.combine_commands),
       "command combination (lock CAS + READ, write-back + release in one batch)"},
      {"on_chip_locks", Bool(defaults.on_chip_locks),
       "global lock words in the lock region (NIC device memory) instead of pool memory"},
      {"entry_level_write_back", Bool(defaults.entry_level_write_back),
       "write back only the changed entry (two-level versions) instead of the node"},
      {"read_delegation", Bool(defaults.read_delegation),
       "SMART's read delegation: lookups of one key on a compute node share one READ"},
      {"write_combining", Bool(defaults.write_combining),
       "SMART's write combining: writes of one key on a compute node fold into one"},
      {"rdwc_table_entries", std::to_string(defaults.rdwc_table_entries),
       "entries of the compute node's RDWC table (1 to " +
           std::to_string(BTreeOptions::kMaxRdwcTableEntries) + ")"},
      {"lock_timeout_ms", std::to_string(defaults.lock_timeout.count()),
       "how long an operation waits for a node lock"},
      {"merge_below_percent", std::to_string(defaults.merge_below_percent),
       "a delete leaving a leaf below this percentage full merges it with a sibling (0: never)"},
  };
}

// With the cache and entry-level write-back, warm and uncontended: a
// lookup reads the leaf (1 round trip); a write is lock CAS + leaf READ,
// then entry write + release (2), writing the CAS, the 16 header bytes it
// needs and the 16-byte entry and the release, not the node, and the redo
// record of the two WRITEs (lock/redo_log.h: a 32-byte header, their
// addresses and lengths, their 32 bytes; no clear, the release ends it); a scan reads
// the leaves its cached parent names at once (1). Read delegation and
// write combining (lock/rdwc.h) cost the same for one context alone.
constexpr WarmCosts kWarmCosts = {
    .lookup_round_trips = 1,
    .write_round_trips = 2,
    .write_bytes = 8 /*CAS*/ + 16 + 16 /*entry*/ + 8 /*release*/ + 96 /*redo record*/,
    .scan_round_trips = 1};

}  // namespace

IndexKind BTreeKind() {
  IndexKind kind;
  kind.name = "btree";
  kind.description = "B+tree after Sherman (dmidx/btree.h)";
  kind.options = OptionDocs();
  // Sherman §5.1.1, Figure 5: FG+ (FG with an index cache and WRITE lock
  // release), then each technique added in the paper's order; the cache
  // stays as configured throughout, as in the paper.
  kind.ladder_source = "Sherman Figure 5";
  kind.ladder = {
      {"FG+",
       {{"combine_commands", "false"},
        {"on_chip_locks", "false"},
        {"local_lock_table", "false"},
        {"entry_level_write_back", "false"}}},
      {"+combine", {{"combine_commands", "true"}}},
      {"+on-chip", {{"on_chip_locks", "true"}}},
      {"+hierarchical", {{"local_lock_table", "true"}}},
      {"+2-level ver", {{"entry_level_write_back", "true"}}},
  };
  kind.max_key_bytes = BTreeOptions::kMaxKeyBytes;
  kind.check = [](uint32_t key_bytes, const IndexSettings& settings) -> Status {
    DMIDX_RETURN_IF_ERROR(CheckKeyBytes("btree", key_bytes, BTreeOptions::kMaxKeyBytes));
    DMIDX_ASSIGN_OR_RETURN(BTreeOptions options, OptionsFrom(settings));
    options.key_bytes = key_bytes;
    // What is left for BTree::CheckOptions to refuse is a node too small
    // for four such keys.
    const Status status = BTree::CheckOptions(options);
    if (!status.ok()) return BadSetting("btree", "node_bytes", status.message());
    return Status::Ok();
  };
  kind.open = [](Client* client, std::string_view name, uint32_t key_bytes,
                 const IndexSettings& settings, std::unique_ptr<RangeIndex>* index) {
    return OpenWith<BTree>(client, name, key_bytes, OptionsFrom(settings), index);
  };
  kind.pool_bytes = [](uint64_t keys, uint32_t key_bytes, double fill,
                       const IndexSettings& settings) -> uint64_t {
    const StatusOr<BTreeOptions> options = OptionsFrom(settings);
    const uint64_t node = options.ok() ? options->node_bytes : BTreeOptions().node_bytes;
    // A leaf entry is the key, the value and a few bytes of version and
    // bitmap; leaves are `fill` full after a bulk load and half full at
    // worst after splits. Internal levels add under 2 %.
    const uint64_t entry = key_bytes + 8 + 2;
    const double per_leaf =
        std::max(1.0, static_cast<double>(node - 64) / entry * std::min(fill, 0.5));
    return static_cast<uint64_t>(static_cast<double>(keys) / per_leaf * node * 1.05) + (node << 10);
  };
  // 256-byte nodes: 13 entries a leaf with 8-byte keys, so a few thousand
  // keys make several levels.
  kind.small_nodes = {{"node_bytes", std::to_string(BTreeOptions::kMinNodeBytes)}};
  kind.keys_per_leaf = [](uint32_t key_bytes, const IndexSettings& settings) -> uint32_t {
    const StatusOr<BTreeOptions> options = OptionsFrom(settings);
    if (!options.ok()) return 0;
    const StatusOr<btree::NodeShape> shape = btree::NodeShape::Make(options->node_bytes, key_bytes);
    return shape.ok() ? shape->leaf_slots() : 0;
  };
  // Every technique off costs several times the round trips, and without
  // the local lock table a context waiting for a hot key's lock can lose
  // the CAS race for seconds under a sanitizer: the baseline runs a
  // quarter of the concurrency suites' operations.
  kind.configurations = {
      {.label = "", .settings = {}, .warm = kWarmCosts, .concurrency_scale = 1.0},
      {.label = "baseline",
       .settings = SettingsOf(BTreeOptions::Baseline(), kSwitches),
       .warm = std::nullopt,
       .concurrency_scale = 0.25},
      {.label = "rdwc",
       .settings = {{"read_delegation", "true"}, {"write_combining", "true"}},
       .warm = kWarmCosts,
       .concurrency_scale = 1.0},
  };
  return kind;
}

}  // namespace dmidx::registry
