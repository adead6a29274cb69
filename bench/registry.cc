#include "bench/registry.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <utility>

#include "dmidx/btree.h"
#include "dmidx/radix.h"
#include "tools/values.h"

namespace dmidx::bench {
namespace {

// An index that does nothing: Lookup finds every key (value 0), writes
// succeed, scans return nothing. Its throughput is the bench's own ceiling
// on this machine (generating operations, timing and recording them).
class NullIndex final : public RangeIndex {
 public:
  explicit NullIndex(uint32_t key_bytes) : key_bytes_(key_bytes) {}
  Status Insert(Context&, std::string_view, uint64_t) override { return Status::Ok(); }
  Status Update(Context&, std::string_view, uint64_t) override { return Status::Ok(); }
  Status Delete(Context&, std::string_view) override { return Status::Ok(); }
  Status Lookup(Context&, std::string_view, uint64_t* value) override {
    *value = 0;
    return Status::Ok();
  }
  Status Scan(Context&, std::string_view, std::string_view, std::vector<KeyValue>* out) override {
    out->clear();
    return Status::Ok();
  }
  Status Scan(Context&, std::string_view, size_t, std::vector<KeyValue>* out) override {
    out->clear();
    return Status::Ok();
  }
  Status BulkLoad(Context&, std::span<const KeyValue>, double) override { return Status::Ok(); }
  void Close() override {}
  uint32_t key_bytes() const override { return key_bytes_; }
  IndexStats stats() const override { return {}; }

 private:
  const uint32_t key_bytes_;
};

Status BadSetting(std::string_view index, const std::string& name, const std::string& value,
                  std::string_view expected) {
  return Status::InvalidArgument(std::string(index) + "." + name + ": '" + value + "' is not " +
                                 std::string(expected));
}

StatusOr<BTreeOptions> BTreeOptionsFrom(const IndexSettings& settings) {
  BTreeOptions options;
  for (const auto& [name, value] : settings) {
    const auto size = tools::ParseSize(value);
    const auto flag = tools::ParseOnOff(value);
    if (name == "cache_bytes") {
      if (!size) return BadSetting("btree", name, value, "a size (e.g. 16M, 0 = no cache)");
      options.cache_bytes = *size;
    } else if (name == "node_bytes") {
      if (!size || *size > UINT32_MAX) return BadSetting("btree", name, value, "a size");
      options.node_bytes = static_cast<uint32_t>(*size);
    } else if (name == "max_handovers") {
      const auto n = tools::ParseInteger(value, UINT32_MAX);
      if (!n) return BadSetting("btree", name, value, "a non-negative integer");
      options.max_handovers = static_cast<uint32_t>(*n);
    } else if (name == "lock_timeout_ms") {
      const auto n = tools::ParseInteger(value, UINT32_MAX);
      if (!n || *n == 0) return BadSetting("btree", name, value, "a positive integer");
      options.lock_timeout = std::chrono::milliseconds(*n);
    } else if (name == "rdwc_table_entries") {
      const auto n = tools::ParseInteger(value, UINT32_MAX);
      if (!n || *n == 0) return BadSetting("btree", name, value, "a positive integer");
      options.rdwc_table_entries = static_cast<size_t>(*n);
    } else if (name == "local_lock_table" || name == "combine_commands" ||
               name == "on_chip_locks" || name == "entry_level_write_back" ||
               name == "read_delegation" || name == "write_combining") {
      if (!flag) return BadSetting("btree", name, value, "true or false");
      bool BTreeOptions::*field = name == "local_lock_table"   ? &BTreeOptions::local_lock_table
                                  : name == "combine_commands" ? &BTreeOptions::combine_commands
                                  : name == "on_chip_locks"    ? &BTreeOptions::on_chip_locks
                                  : name == "read_delegation"  ? &BTreeOptions::read_delegation
                                  : name == "write_combining"
                                      ? &BTreeOptions::write_combining
                                      : &BTreeOptions::entry_level_write_back;
      options.*field = *flag;
    } else {
      return Status::InvalidArgument("btree has no option '" + name +
                                     "' (see dmidx-ycsb --help for the index options)");
    }
  }
  return options;
}

std::string Bool(bool value) {
  return value ? "true" : "false";
}

IndexKind BTreeKind() {
  const BTreeOptions defaults;
  IndexKind kind;
  kind.name = "btree";
  kind.description = "B+tree after Sherman (dmidx/btree.h)";
  kind.options = {
      {"cache_bytes", std::to_string(defaults.cache_bytes),
       "bytes of internal nodes each compute node caches (0: no cache)"},
      {"node_bytes", std::to_string(defaults.node_bytes), "node size of a new tree"},
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
       "slots of the compute node's RDWC table"},
      {"lock_timeout_ms", std::to_string(defaults.lock_timeout.count()),
       "how long an operation waits for a node lock"},
  };
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
  kind.check = [](const IndexSettings& settings) { return BTreeOptionsFrom(settings).status(); };
  kind.open = [](Client* client, std::string_view name, uint32_t key_bytes,
                 const IndexSettings& settings, std::unique_ptr<RangeIndex>* index) -> Status {
    DMIDX_ASSIGN_OR_RETURN(BTreeOptions options, BTreeOptionsFrom(settings));
    options.key_bytes = key_bytes;
    std::unique_ptr<BTree> tree;
    DMIDX_RETURN_IF_ERROR(BTree::Open(client, name, options, &tree));
    *index = std::move(tree);
    return Status::Ok();
  };
  kind.memory_bytes = [](uint64_t keys, uint32_t key_bytes, double fill,
                         const IndexSettings& settings) -> uint64_t {
    const StatusOr<BTreeOptions> options = BTreeOptionsFrom(settings);
    const uint64_t node = options.ok() ? options->node_bytes : 1024;
    // A leaf entry is the key, the value and a few bytes of version and
    // bitmap; leaves are `fill` full after a bulk load and half full at
    // worst after splits. Internal levels add under 2 %.
    const uint64_t entry = key_bytes + 8 + 2;
    const double per_leaf =
        std::max(1.0, static_cast<double>(node - 64) / entry * std::min(fill, 0.5));
    return static_cast<uint64_t>(static_cast<double>(keys) / per_leaf * node * 1.05) + (node << 10);
  };
  return kind;
}

StatusOr<RadixOptions> RadixOptionsFrom(const IndexSettings& settings) {
  RadixOptions options;
  for (const auto& [name, value] : settings) {
    const auto size = tools::ParseSize(value);
    const auto flag = tools::ParseOnOff(value);
    if (name == "cache_bytes") {
      if (!size) return BadSetting("radix", name, value, "a size (e.g. 16M, 0 = no cache)");
      options.cache_bytes = *size;
    } else if (name == "rdwc_table_entries") {
      const auto n = tools::ParseInteger(value, UINT32_MAX);
      if (!n || *n == 0) return BadSetting("radix", name, value, "a positive integer");
      options.rdwc_table_entries = static_cast<size_t>(*n);
    } else if (name == "lock_timeout_ms") {
      const auto n = tools::ParseInteger(value, UINT32_MAX);
      if (!n || *n == 0) return BadSetting("radix", name, value, "a positive integer");
      options.lock_timeout = std::chrono::milliseconds(*n);
    } else if (name == "in_place_leaves" || name == "rear_embedded_lock" ||
               name == "read_delegation" || name == "write_combining" ||
               name == "homogeneous_nodes") {
      if (!flag) return BadSetting("radix", name, value, "true or false");
      bool RadixOptions::*field = name == "in_place_leaves"      ? &RadixOptions::in_place_leaves
                                  : name == "rear_embedded_lock" ? &RadixOptions::rear_embedded_lock
                                  : name == "read_delegation"    ? &RadixOptions::read_delegation
                                  : name == "write_combining"    ? &RadixOptions::write_combining
                                                                 : &RadixOptions::homogeneous_nodes;
      options.*field = *flag;
    } else {
      return Status::InvalidArgument("radix has no option '" + name +
                                     "' (see dmidx-ycsb --help for the index options)");
    }
  }
  return options;
}

IndexKind RadixKind() {
  const RadixOptions defaults;
  IndexKind kind;
  kind.name = "radix";
  kind.description = "adaptive radix tree after SMART (dmidx/radix.h)";
  kind.options = {
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
       "slots of the compute node's RDWC table"},
      {"homogeneous_nodes", Bool(defaults.homogeneous_nodes),
       "adaptive node types, 4 to 256 slots (false: every node 256 slots, read whole)"},
      {"lock_timeout_ms", std::to_string(defaults.lock_timeout.count()),
       "how long an update waits for a leaf lock"},
  };
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
  kind.check = [](const IndexSettings& settings) { return RadixOptionsFrom(settings).status(); };
  kind.open = [](Client* client, std::string_view name, uint32_t key_bytes,
                 const IndexSettings& settings, std::unique_ptr<RangeIndex>* index) -> Status {
    DMIDX_ASSIGN_OR_RETURN(RadixOptions options, RadixOptionsFrom(settings));
    options.key_bytes = key_bytes;
    std::unique_ptr<Radix> tree;
    DMIDX_RETURN_IF_ERROR(Radix::Open(client, name, options, &tree));
    *index = std::move(tree);
    return Status::Ok();
  };
  kind.memory_bytes = [](uint64_t keys, uint32_t key_bytes, double,
                         const IndexSettings&) -> uint64_t {
    // A 64-byte-aligned leaf per key, and internal nodes of 2064 bytes
    // (space for 256 slots is reserved in each): hashed keys fill the
    // first two levels (up to 65536 nodes) and then branch a few ways, about
    // one node per 4-8 keys at most (ordered integer keys need about one
    // per 256). Written objects are never reused.
    const uint64_t leaf = (32 + ((key_bytes + 7) / 8) * 8 + 63) / 64 * 64;
    const uint64_t nodes = std::min<uint64_t>(keys, 65536 + keys / 4);
    return keys * leaf + nodes * 2064 + (uint64_t{2064} << 10);
  };
  return kind;
}

IndexKind NullKind() {
  IndexKind kind;
  kind.name = "null";
  kind.description = "does nothing: the bench's own ceiling on this machine";
  kind.check = [](const IndexSettings& settings) {
    if (settings.empty()) return Status::Ok();
    return Status::InvalidArgument("null has no option '" + settings.begin()->first + "'");
  };
  kind.open = [check = kind.check](Client*, std::string_view, uint32_t key_bytes,
                                   const IndexSettings& settings,
                                   std::unique_ptr<RangeIndex>* index) -> Status {
    DMIDX_RETURN_IF_ERROR(check(settings));
    *index = std::make_unique<NullIndex>(key_bytes);
    return Status::Ok();
  };
  kind.memory_bytes = [](uint64_t, uint32_t, double, const IndexSettings&) -> uint64_t {
    return 0;
  };
  return kind;
}

}  // namespace

std::span<const IndexKind> RegisteredIndexes() {
  static const std::vector<IndexKind> kinds = {NullKind(), BTreeKind(), RadixKind()};
  return kinds;
}

StatusOr<const IndexKind*> FindIndex(std::string_view name) {
  std::string names;
  for (const IndexKind& kind : RegisteredIndexes()) {
    if (kind.name == name) return &kind;
    names += (names.empty() ? "" : ", ") + kind.name;
  }
  return Status::InvalidArgument("unknown index '" + std::string(name) + "' (registered: " + names +
                                 ", or all)");
}

IndexSettings LadderSettings(const IndexKind& kind, size_t step) {
  IndexSettings settings;
  for (size_t i = 0; i <= step && i < kind.ladder.size(); ++i) {
    for (const auto& [name, value] : kind.ladder[i].settings)
      settings[name] = value;
  }
  return settings;
}

}  // namespace dmidx::bench
