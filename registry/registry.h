// The index registry: every index dmidx has, by name, with what opens it
// from textual settings and what its tests and tools need to know about it.
// The bench (dmidx-ycsb), the index suites, schedule exploration and the
// CPU-cost tool take their index list from here and from nowhere else: a
// new index is a new folder, its public header (include/dmidx/) and one
// row, a file registry/<name>_kind.cc whose function RegisteredIndexes()
// lists.
//
// Settings are the index's options struct's fields by name, values as text
// ("combine_commands" -> "false", "node_bytes" -> "4K"), by the rules of
// lib/common/values.h. Errors name the setting as the bench's flags name
// it: "btree.node_bytes: must be >= 256, not 0".
#ifndef DMIDX_REGISTRY_REGISTRY_H_
#define DMIDX_REGISTRY_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/status.h"

namespace dmidx::registry {

// Settings over an index's defaults, by field name.
using IndexSettings = std::map<std::string, std::string>;

struct IndexOptionDoc {
  std::string name;           // the options struct's field name
  std::string default_value;  // as text
  std::string help;
};

// One step of a technique ladder: the settings it adds to the ones before.
struct LadderStep {
  std::string label;  // "FG+", "+combine", ...
  IndexSettings settings;
};

// Costs of single operations on a warm index (one context, no contention,
// default node sizes), where the index documents them as fixed numbers.
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

// A technique configuration the index is tested in (the index suites run
// every one; schedule exploration and the CPU-cost tool use them too).
struct Configuration {
  // "" for the defaults (every technique the index turns on by default);
  // otherwise a suffix of test names: letters, digits and '_'.
  std::string label;
  IndexSettings settings;
  // The warm costs the index documents for this configuration; nullopt
  // where they depend on the index's depth (e.g. no compute-side cache).
  std::optional<WarmCosts> warm;
  // The share of the concurrency suites' operations each context runs: 1
  // for the configurations the suites are sized for; less for one that is
  // slow by design (every technique off), to bound their run time.
  double concurrency_scale = 1.0;
};

struct IndexKind {
  std::string name;  // "btree", "radix"
  std::string description;
  std::vector<IndexOptionDoc> options;
  // The paper's breakdown: the first step is the baseline, each later one
  // adds a technique (settings accumulate). Empty: no ladder.
  std::string ladder_source;  // "Sherman Figure 5"
  std::vector<LadderStep> ladder;
  // The longest keys the index takes, in bytes (its options' kMaxKeyBytes),
  // and the largest memory-node pool it addresses.
  uint32_t max_key_bytes = 0;
  uint64_t max_pool_bytes = UINT64_MAX;

  // What open would refuse, without opening anything: InvalidArgument for
  // keys of `key_bytes` out of 1..max_key_bytes, and for an unknown
  // setting, a bad value or one such keys rule out, its message starting
  // with the setting's name ("btree.node_bytes: ...").
  std::function<Status(uint32_t key_bytes, const IndexSettings& settings)> check;
  // Opens (creating if absent) the index `name` in `client`'s cluster with
  // keys of `key_bytes` and `settings` over the index's defaults; what
  // check refuses, open refuses with the same message.
  std::function<Status(Client* client, std::string_view name, uint32_t key_bytes,
                       const IndexSettings& settings, std::unique_ptr<RangeIndex>* index)>
      open;
  // Pool bytes the index needs for `keys` keys of `key_bytes` loaded at
  // `fill` (a generous estimate, for the pool check before a run). Settings
  // check refuses give the estimate of the defaults.
  std::function<uint64_t(uint64_t keys, uint32_t key_bytes, double fill,
                         const IndexSettings& settings)>
      pool_bytes;

  // What tests need to know about the index.
  //
  // Settings for nodes as small as the index allows, so that a few thousand
  // keys make a deep index (splits, several levels); empty where node sizes
  // are the index's own.
  IndexSettings small_nodes;
  // Keys one leaf holds when a bulk load fills it to 1.0 (the step at
  // which a load writes another leaf), for keys of `key_bytes` and
  // `settings` (small_nodes included, or not).
  std::function<uint32_t(uint32_t key_bytes, const IndexSettings& settings)> keys_per_leaf;
  // The configurations the index is tested in; the first is the defaults.
  std::vector<Configuration> configurations;
};

// Every registered index, in the order the bench and the tests list them.
std::span<const IndexKind> RegisteredIndexes();
// The row `name`; nullptr if none.
const IndexKind* FindIndex(std::string_view name);
// The names of the registered indexes, ", "-separated.
std::string RegisteredNames();
// The settings of ladder steps 0..step together.
IndexSettings LadderSettings(const IndexKind& kind, size_t step);
// `base` with `over`'s settings replacing or adding to it.
IndexSettings Merged(IndexSettings base, const IndexSettings& over);

}  // namespace dmidx::registry

#endif  // DMIDX_REGISTRY_REGISTRY_H_
