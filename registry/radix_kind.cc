// The radix tree's registry row (dmidx/radix.h, docs/radix.md).
#include <algorithm>
#include <memory>
#include <utility>

#include "dmidx/radix.h"
#include "radix/layout.h"
#include "registry/kinds.h"
#include "registry/settings.h"

namespace dmidx::registry {
namespace {

constexpr Switch<RadixOptions> kSwitches[] = {
    {"in_place_leaves", &RadixOptions::in_place_leaves},
    {"rear_embedded_lock", &RadixOptions::rear_embedded_lock},
    {"read_delegation", &RadixOptions::read_delegation},
    {"write_combining", &RadixOptions::write_combining},
    {"homogeneous_nodes", &RadixOptions::homogeneous_nodes},
};

StatusOr<RadixOptions> OptionsFrom(const IndexSettings& settings) {
  RadixOptions options;
  for (const auto& [name, value] : settings) {
    std::string problem;
    if (name == "cache_bytes") {
      problem = TakeSize(value, {.max = SIZE_MAX}, &options.cache_bytes);
    } else if (name == "rdwc_table_entries") {
      problem =
          TakeInteger(value, 1, RadixOptions::kMaxRdwcTableEntries, &options.rdwc_table_entries);
    } else if (name == "max_handovers") {
      problem = TakeInteger(value, 0, UINT32_MAX, &options.max_handovers);
    } else if (name == "leaf_queue_buckets") {
      problem =
          TakeInteger(value, 1, RadixOptions::kMaxLeafQueueBuckets, &options.leaf_queue_buckets);
    } else if (name == "lock_timeout_ms") {
      problem = TakeMilliseconds(value, &options.lock_timeout);
    } else if (bool RadixOptions::*field = SwitchNamed(kSwitches, name)) {
      problem = TakeOnOff(value, &(options.*field));
    } else {
      return NoSuchOption("radix", name);
    }
    if (!problem.empty()) return BadSetting("radix", name, problem);
  }
  return options;
}

std::vector<IndexOptionDoc> OptionDocs() {
  const RadixOptions defaults;
  return {
      {"cache_bytes", std::to_string(defaults.cache_bytes),
       "bytes of internal nodes each compute node caches (the ART cache; 0: none)"},
      {"in_place_leaves", Bool(defaults.in_place_leaves),
       "update leaves in place under their rear lock (false: write a new leaf, CAS the slot)"},
      {"rear_embedded_lock", Bool(defaults.rear_embedded_lock),
       "release the leaf lock in the write-back's batch (false: after it completes)"},
      {"read_delegation", Bool(defaults.read_delegation),
       "lookups of one key on a compute node share one READ"},
      {"write_combining", Bool(defaults.write_combining),
       "writes of one key on a compute node fold into one write-back"},
      {"rdwc_table_entries", std::to_string(defaults.rdwc_table_entries),
       "entries of the compute node's RDWC table (1 to " +
           std::to_string(RadixOptions::kMaxRdwcTableEntries) + ")"},
      {"homogeneous_nodes", Bool(defaults.homogeneous_nodes),
       "adaptive node types, 4 to 256 slots (false: every node 256 slots, read whole)"},
      {"max_handovers", std::to_string(defaults.max_handovers),
       "handovers of a leaf lock in a row"},
      {"leaf_queue_buckets", std::to_string(defaults.leaf_queue_buckets),
       "buckets of the compute node's leaf-lock queues (1 to " +
           std::to_string(RadixOptions::kMaxLeafQueueBuckets) +
           "; the first radix tree opened there sizes them)"},
      {"lock_timeout_ms", std::to_string(defaults.lock_timeout.count()),
       "how long an update waits for a leaf lock"},
  };
}

// Warm (the node holding the key's slot cached) and uncontended: a lookup
// READs the leaf (1 round trip); a write of a present key CASes the rear
// lock with the leaf READ, then writes checksum and value (16 bytes) after
// their redo record (lock/redo_log.h: a 32-byte header, the WRITE's address
// and length, its 16 bytes) and with the release, which ends the record
// (2); a delete takes the lock the same way, then marks the
// leaf deleted and CASes its slot to a tombstone in one batch (2). A
// scan's round trips depend on the levels under the node its range shares.
constexpr WarmCosts kWarmCosts = {
    .lookup_round_trips = 1,
    .write_round_trips = 2,
    .write_bytes = 8 /*CAS*/ + 16 + 8 /*release*/ + 64 /*redo record*/,
    .scan_round_trips = std::nullopt};

}  // namespace

IndexKind RadixKind() {
  IndexKind kind;
  kind.name = "radix";
  kind.description = "adaptive radix tree after SMART (dmidx/radix.h)";
  kind.options = OptionDocs();
  // SMART §5.3.1, Figure 18: the ART with lock-free internal nodes (ours
  // always are) and out-of-place leaves, then each technique in the
  // paper's order; the cache and node types stay as configured.
  kind.ladder_source = "SMART Figure 18";
  kind.ladder = {
      {"ART",
       {{"in_place_leaves", "false"},
        {"rear_embedded_lock", "false"},
        {"read_delegation", "false"},
        {"write_combining", "false"}}},
      {"+in-place", {{"in_place_leaves", "true"}}},
      {"+rear lock", {{"rear_embedded_lock", "true"}}},
      {"+read deleg", {{"read_delegation", "true"}}},
      {"+write comb", {{"write_combining", "true"}}},
  };
  kind.max_key_bytes = RadixOptions::kMaxKeyBytes;
  kind.max_pool_bytes = RadixOptions::kMaxPoolBytes;
  kind.check = [](uint32_t key_bytes, const IndexSettings& settings) -> Status {
    DMIDX_RETURN_IF_ERROR(CheckKeyBytes("radix", key_bytes, RadixOptions::kMaxKeyBytes));
    return OptionsFrom(settings).status();
  };
  kind.open = [](Client* client, std::string_view name, uint32_t key_bytes,
                 const IndexSettings& settings, std::unique_ptr<RangeIndex>* index) {
    return OpenWith<Radix>(client, name, key_bytes, OptionsFrom(settings), index);
  };
  kind.pool_bytes = [](uint64_t keys, uint32_t key_bytes, double,
                       const IndexSettings&) -> uint64_t {
    // A 64-byte-aligned leaf per key, and internal nodes of kNodeBytes
    // (space for 256 slots is reserved in each): hashed keys fill the
    // first two levels (up to 65536 nodes) and then branch a few ways,
    // about one node per 4-8 keys at most (ordered integer keys need about
    // one per 256). Written objects are never reused.
    const uint64_t leaf = (radix::LeafShape(key_bytes).bytes() + 63) / 64 * 64;
    const uint64_t nodes = std::min<uint64_t>(keys, 65536 + keys / 4);
    return keys * leaf + nodes * radix::kNodeBytes + (uint64_t{radix::kNodeBytes} << 10);
  };
  // Node sizes are the tree's own; a leaf holds one key.
  kind.keys_per_leaf = [](uint32_t, const IndexSettings&) -> uint32_t { return 1; };
  kind.configurations = {
      {.label = "", .settings = {}, .warm = kWarmCosts, .concurrency_scale = 1.0},
      {.label = "baseline",
       .settings = SettingsOf(RadixOptions::Baseline(), kSwitches),
       .warm = std::nullopt,
       .concurrency_scale = 0.25},
  };
  return kind;
}

}  // namespace dmidx::registry
