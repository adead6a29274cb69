#include "bench/registry.h"

#include <algorithm>
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

// `problem` with a setting's value (tools/values.h's words), named as the
// bench's flags name it: "btree.node_bytes: must be >= 256, not 0".
Status BadSetting(std::string_view index, const std::string& name, const std::string& problem) {
  return Status::InvalidArgument(std::string(index) + "." + name + ": " + problem);
}

// The settings' values by the rules of tools/values.h, each into *field:
// what is wrong with the value, "" when nothing is (and *field is set).
template <typename T>
std::string TakeInteger(const std::string& value, uint64_t min, uint64_t max, T* field) {
  std::string problem = tools::IntegerProblem(value, min, max);
  if (problem.empty()) *field = static_cast<T>(*tools::ParseInteger(value, max));
  return problem;
}
template <typename T>
std::string TakeSize(const std::string& value, const tools::SizeRule& rule, T* field) {
  std::string problem = tools::SizeProblem(value, rule);
  if (problem.empty()) *field = static_cast<T>(*tools::ParseSize(value));
  return problem;
}
std::string TakeMilliseconds(const std::string& value, std::chrono::milliseconds* field) {
  uint64_t ms = 0;
  std::string problem = TakeInteger(value, 1, UINT32_MAX, &ms);
  *field = std::chrono::milliseconds(ms);
  return problem;
}
std::string TakeOnOff(const std::string& value, bool* field) {
  std::string problem = tools::OnOffProblem(value);
  if (problem.empty()) *field = *tools::ParseOnOff(value);
  return problem;
}

// InvalidArgument unless index `index` takes keys of `key_bytes` (1..max).
Status CheckKeyBytes(std::string_view index, uint32_t key_bytes, uint32_t max) {
  if (key_bytes >= 1 && key_bytes <= max) return Status::Ok();
  return Status::InvalidArgument(std::string(index) + " takes keys of 1 to " + std::to_string(max) +
                                 " bytes, not " + std::to_string(key_bytes));
}

// The on/off settings of an options struct: the field of each name.
template <typename Options>
using Switch = std::pair<std::string_view, bool Options::*>;
constexpr Switch<BTreeOptions> kBTreeSwitches[] = {
    {"local_lock_table", &BTreeOptions::local_lock_table},
    {"combine_commands", &BTreeOptions::combine_commands},
    {"on_chip_locks", &BTreeOptions::on_chip_locks},
    {"entry_level_write_back", &BTreeOptions::entry_level_write_back},
    {"read_delegation", &BTreeOptions::read_delegation},
    {"write_combining", &BTreeOptions::write_combining},
};
constexpr Switch<RadixOptions> kRadixSwitches[] = {
    {"in_place_leaves", &RadixOptions::in_place_leaves},
    {"rear_embedded_lock", &RadixOptions::rear_embedded_lock},
    {"read_delegation", &RadixOptions::read_delegation},
    {"write_combining", &RadixOptions::write_combining},
    {"homogeneous_nodes", &RadixOptions::homogeneous_nodes},
};
// The field of the switch `name`; nullptr if there is none.
template <typename Options, size_t N>
bool Options::*SwitchNamed(const Switch<Options> (&switches)[N], std::string_view name) {
  for (const auto& [switch_name, field] : switches) {
    if (switch_name == name) return field;
  }
  return nullptr;
}

Status NoSuchOption(std::string_view index, const std::string& name) {
  return Status::InvalidArgument(std::string(index) + " has no option '" + name +
                                 "' (see dmidx-ycsb --help for the index options)");
}

StatusOr<BTreeOptions> BTreeOptionsFrom(const IndexSettings& settings) {
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
    } else if (name == "rdwc_table_entries") {
      problem =
          TakeInteger(value, 1, BTreeOptions::kMaxRdwcTableEntries, &options.rdwc_table_entries);
    } else if (bool BTreeOptions::*field = SwitchNamed(kBTreeSwitches, name)) {
      problem = TakeOnOff(value, &(options.*field));
    } else {
      return NoSuchOption("btree", name);
    }
    if (!problem.empty()) return BadSetting("btree", name, problem);
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
      {"node_bytes", std::to_string(defaults.node_bytes),
       "node size of a new tree: a multiple of " +
           std::to_string(BTreeOptions::kNodeBytesMultiple) + " in [" +
           tools::FormatSize(BTreeOptions::kMinNodeBytes) + ", " +
           tools::FormatSize(BTreeOptions::kMaxNodeBytes) + "] that holds four keys"},
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
       "slots of the compute node's RDWC table (1 to " +
           std::to_string(BTreeOptions::kMaxRdwcTableEntries) + ")"},
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
  kind.max_key_bytes = BTreeOptions::kMaxKeyBytes;
  kind.check = [](uint32_t key_bytes, const IndexSettings& settings) -> Status {
    DMIDX_RETURN_IF_ERROR(CheckKeyBytes("btree", key_bytes, BTreeOptions::kMaxKeyBytes));
    DMIDX_ASSIGN_OR_RETURN(BTreeOptions options, BTreeOptionsFrom(settings));
    options.key_bytes = key_bytes;
    // What is left for BTree::CheckOptions to refuse is a node too small
    // for four such keys.
    const Status status = BTree::CheckOptions(options);
    if (!status.ok()) return BadSetting("btree", "node_bytes", std::string(status.message()));
    return Status::Ok();
  };
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
    std::string problem;
    if (name == "cache_bytes") {
      problem = TakeSize(value, {.max = SIZE_MAX}, &options.cache_bytes);
    } else if (name == "rdwc_table_entries") {
      problem =
          TakeInteger(value, 1, RadixOptions::kMaxRdwcTableEntries, &options.rdwc_table_entries);
    } else if (name == "max_handovers") {
      problem = TakeInteger(value, 0, UINT32_MAX, &options.max_handovers);
    } else if (name == "lock_timeout_ms") {
      problem = TakeMilliseconds(value, &options.lock_timeout);
    } else if (bool RadixOptions::*field = SwitchNamed(kRadixSwitches, name)) {
      problem = TakeOnOff(value, &(options.*field));
    } else {
      return NoSuchOption("radix", name);
    }
    if (!problem.empty()) return BadSetting("radix", name, problem);
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
       "slots of the compute node's RDWC table (1 to " +
           std::to_string(RadixOptions::kMaxRdwcTableEntries) + ")"},
      {"homogeneous_nodes", Bool(defaults.homogeneous_nodes),
       "adaptive node types, 4 to 256 slots (false: every node 256 slots, read whole)"},
      {"max_handovers", std::to_string(defaults.max_handovers),
       "handovers of a leaf lock in a row"},
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
  kind.max_key_bytes = RadixOptions::kMaxKeyBytes;
  kind.max_pool_bytes = RadixOptions::kMaxPoolBytes;
  kind.check = [](uint32_t key_bytes, const IndexSettings& settings) -> Status {
    DMIDX_RETURN_IF_ERROR(CheckKeyBytes("radix", key_bytes, RadixOptions::kMaxKeyBytes));
    return RadixOptionsFrom(settings).status();
  };
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
  // As long as the longest any index takes: the null index measures the
  // bench's own cost of the keys an index could have.
  kind.max_key_bytes = std::max(BTreeOptions::kMaxKeyBytes, RadixOptions::kMaxKeyBytes);
  kind.check = [max = kind.max_key_bytes](uint32_t key_bytes, const IndexSettings& settings) {
    DMIDX_RETURN_IF_ERROR(CheckKeyBytes("null", key_bytes, max));
    if (settings.empty()) return Status::Ok();
    return NoSuchOption("null", settings.begin()->first);
  };
  kind.open = [check = kind.check](Client*, std::string_view, uint32_t key_bytes,
                                   const IndexSettings& settings,
                                   std::unique_ptr<RangeIndex>* index) -> Status {
    DMIDX_RETURN_IF_ERROR(check(key_bytes, settings));
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
