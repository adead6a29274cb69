// The indexes the bench can drive, by name. The bench sees only RangeIndex
// (dmidx/index.h) and this table: a new index joins the bench, with its
// technique switches and its ladder, by adding one entry in registry.cc.
#ifndef DMIDX_BENCH_REGISTRY_H_
#define DMIDX_BENCH_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/status.h"

namespace dmidx::bench {

// Technique switches and sizes of one index, by the names of its options
// struct's fields ("combine_commands" -> "false"). Values are text, parsed
// by the index's entry.
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

struct IndexKind {
  std::string name;  // "btree", "null"
  std::string description;
  bool scans = true;  // supports both Scan forms
  std::vector<IndexOptionDoc> options;
  // The paper's breakdown: the first step is the baseline, each later one
  // adds a technique (settings accumulate). Empty: no ladder.
  std::string ladder_source;  // "Sherman Figure 5"
  std::vector<LadderStep> ladder;
  // Opens (creating if absent) the index `name` in `client`'s cluster with
  // keys of `key_bytes` and `settings` over the index's defaults.
  // InvalidArgument naming the setting for an unknown name or a bad value.
  std::function<Status(Client* client, std::string_view name, uint32_t key_bytes,
                       const IndexSettings& settings, std::unique_ptr<RangeIndex>* index)>
      open;
  // The longest keys the index takes, in bytes (its options' kMaxKeyBytes),
  // and the largest memory-node pool it addresses.
  uint32_t max_key_bytes = 0;
  uint64_t max_pool_bytes = UINT64_MAX;
  // What open would refuse, without opening anything: InvalidArgument for
  // keys of `key_bytes` out of 1..max_key_bytes, and for an unknown
  // setting, a bad value or one such keys rule out, its message starting
  // with the setting's name ("btree.node_bytes: ...").
  std::function<Status(uint32_t key_bytes, const IndexSettings& settings)> check;
  // Remote memory the index needs for `keys` keys of `key_bytes` loaded at
  // `fill` (a generous estimate, for the pool check before a run).
  std::function<uint64_t(uint64_t keys, uint32_t key_bytes, double fill,
                         const IndexSettings& settings)>
      memory_bytes;
};

std::span<const IndexKind> RegisteredIndexes();
// The entry `name`; InvalidArgument listing the names if none.
StatusOr<const IndexKind*> FindIndex(std::string_view name);
// The settings of ladder steps 0..step together.
IndexSettings LadderSettings(const IndexKind& kind, size_t step);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_REGISTRY_H_
