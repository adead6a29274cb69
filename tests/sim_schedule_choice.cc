#include <cstdio>
#include <string>
#include <vector>

#include "tests/sim_schedule.h"

namespace dmidx::testing {
namespace {

// What a seed of the mixed kind chose, printed with a failure.
struct Choice {
  bool radix = false;
  int techniques = 0;  // 0 all on, 1 Baseline(), 2 mixed per compute node
  bool skewed = false;
  uint64_t keys = 0;
  uint64_t max_delay_us = 0;
  std::string Techniques() const {
    static const char* const kTechniques[] = {"all techniques", "Baseline()",
                                              "mixed switches per compute node"};
    return std::string(radix ? "radix" : "btree") + ", " + kTechniques[techniques];
  }
  std::string ToString() const {
    return Techniques() + ", " + (skewed ? "zipf" : "uniform") + " over " + std::to_string(keys) +
           " keys, delays up to " + std::to_string(max_delay_us) + " us";
  }
};

// Options of compute node `cn`: everything on, everything off, or (mixed)
// node 0 on, node 1 off, node 2 a random pick per switch. Settings fixed
// at creation are the same on every node.
BTreeOptions BTreeFor(const Choice& choice, uint32_t cn, std::mt19937_64& rng) {
  BTreeOptions on;
  on.read_delegation = true;
  on.write_combining = true;
  on.node_bytes = 256;  // 13 keys a leaf: splits within a short history
  BTreeOptions off = BTreeOptions::Baseline();
  off.node_bytes = on.node_bytes;
  off.on_chip_locks = on.on_chip_locks;
  if (choice.techniques == 0) return on;
  if (choice.techniques == 1) {
    off.on_chip_locks = false;
    return off;
  }
  if (cn == 0) return on;
  if (cn == 1) return off;
  BTreeOptions pick = on;
  pick.cache_bytes = rng() % 2 ? on.cache_bytes : 0;
  pick.local_lock_table = rng() % 2;
  pick.combine_commands = rng() % 2;
  pick.entry_level_write_back = rng() % 2;
  pick.read_delegation = rng() % 2;
  pick.write_combining = rng() % 2;
  return pick;
}

RadixOptions RadixFor(const Choice& choice, uint32_t cn, std::mt19937_64& rng) {
  RadixOptions on;
  RadixOptions off = RadixOptions::Baseline();
  if (choice.techniques == 0) return on;
  if (choice.techniques == 1) return off;
  off.homogeneous_nodes = on.homogeneous_nodes;
  if (cn == 0) return on;
  if (cn == 1) return off;
  RadixOptions pick = on;
  pick.cache_bytes = rng() % 2 ? on.cache_bytes : 0;
  pick.in_place_leaves = rng() % 2;
  pick.rear_embedded_lock = rng() % 2;
  pick.read_delegation = rng() % 2;
  pick.write_combining = rng() % 2;
  return pick;
}

std::mt19937_64 ScheduleRng(Kind kind, uint64_t seed) {
  return std::mt19937_64(seed * 0x9e3779b97f4a7c15ull + 17 + (static_cast<uint64_t>(kind) << 32));
}

Schedule ChooseMixed(uint64_t seed) {
  std::mt19937_64 rng = ScheduleRng(Kind::kMixed, seed);
  Choice choice;
  choice.radix = rng() % 2;
  choice.techniques = static_cast<int>(rng() % 3);
  choice.skewed = rng() % 2;
  choice.keys = choice.skewed ? 8 + rng() % 24 : 64 + rng() % 192;
  choice.max_delay_us = rng() % 4;
  Schedule schedule;
  schedule.shape = choice.Techniques();
  schedule.details = choice.ToString();
  schedule.radix = choice.radix;
  schedule.max_delay_us = choice.max_delay_us;
  schedule.keys = KeyCodec::Plain(choice.keys);
  schedule.skewed = choice.skewed;
  for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
    if (choice.radix) {
      schedule.radix_options.push_back(RadixFor(choice, cn, rng));
    } else {
      schedule.btree_options.push_back({BTreeFor(choice, cn, rng)});
    }
  }
  schedule.run_seed = rng();
  return schedule;
}

// The merges and failures kinds.
Schedule ChooseShaped(Kind kind, uint64_t seed) {
  std::mt19937_64 rng = ScheduleRng(kind, seed);
  const bool failures = kind == Kind::kFailures;
  Schedule schedule;
  schedule.kind = kind;
  Choice choice;
  // The B+tree: a quarter of merges schedules (it has no merges), half of
  // failures schedules.
  choice.radix = rng() % (failures ? 2 : 4) != 0;
  choice.techniques = static_cast<int>(rng() % 3);
  schedule.radix = choice.radix;
  static const uint64_t kDelaysUs[] = {0, 3, 10, 30};
  schedule.max_delay_us = kDelaysUs[rng() % 4];
  // A third of the seeds without stalls, two thirds with rare ones: a
  // stalled step (a delete's tombstone CAS after its mark, a scan's READ of
  // a child) lets many operations, merges among them, run past it.
  static const struct {
    double probability;
    uint64_t us;
  } kStalls[] = {{0, 0}, {0.003, 500}, {0.01, 200}};
  const auto& stalls = kStalls[rng() % 3];
  schedule.stall_probability = stalls.probability;
  schedule.stall_us = stalls.us;
  schedule.keys = KeyCodec::Spread(rng);
  if (choice.radix) {
    const bool adaptive = rng() % 2;
    const int cache = static_cast<int>(rng() % 3);  // on, off, per compute node
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      RadixOptions options = RadixFor(choice, cn, rng);
      options.homogeneous_nodes = adaptive;
      const bool cached = cache == 0 || (cache == 2 && rng() % 2);
      options.cache_bytes = cached ? RadixOptions().cache_bytes : 0;
      if (failures) options.lock_timeout = kShortLockTimeout;
      schedule.radix_options.push_back(options);
    }
    static const char* const kCache[] = {"cache on", "cache off", "cache per compute node"};
    schedule.shape = std::string("radix, ") + (adaptive ? "adaptive" : "fixed-size") + " nodes, " +
                     kCache[cache];
  } else {
    // Two handles: one with the local lock table and one without, so that
    // one context can ask for a lock word through both.
    const bool two_handles = rng() % 3 != 0;
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      BTreeOptions options = BTreeFor(choice, cn, rng);
      if (failures) options.lock_timeout = kShortLockTimeout;
      schedule.btree_options.push_back({options});
      if (!two_handles) continue;
      options.local_lock_table = !options.local_lock_table;
      schedule.btree_options.back().push_back(options);
    }
    schedule.shape = two_handles ? "btree, two handles per compute node (local lock table on, off)"
                                 : "btree, one handle per compute node";
  }
  for (uint64_t id = 0; id < schedule.keys.count(); ++id)
    schedule.preload.push_back(rng() % 4 != 0);
  schedule.details = choice.Techniques() + ", " + schedule.keys.ToString() + ", delays up to " +
                     std::to_string(schedule.max_delay_us) + " us";
  if (stalls.probability > 0) {
    char text[64];
    std::snprintf(text, sizeof(text), ", %g%% of ops stalled %llu us", stalls.probability * 100,
                  static_cast<unsigned long long>(stalls.us));
    schedule.details += text;
  }
  if (failures) {
    static const uint64_t kOneIn[] = {10, 20, 40};
    const uint64_t one_in = kOneIn[rng() % 3];
    schedule.failures.seed = rng();
    schedule.failures.probability = 1.0 / static_cast<double>(one_in);
    // Spaced so that what follows a failure is not failed too: a B+tree's
    // undo or release retries come within a few batches of the context; a
    // radix merge's rollback is up to one CAS per slot it froze, each a
    // round trip, while the compute node's other contexts post too.
    schedule.failures.min_spacing = choice.radix ? 40 : 10;
    schedule.failing_client = static_cast<uint32_t>(rng() % kComputeNodes);
    schedule.details += ", compute node " + std::to_string(schedule.failing_client) +
                        "'s batches fail one in " + std::to_string(one_in) + ", at least " +
                        std::to_string(schedule.failures.min_spacing) + " apart";
  }
  schedule.run_seed = rng();
  return schedule;
}

}  // namespace

Schedule Choose(Kind kind, uint64_t seed) {
  return kind == Kind::kMixed ? ChooseMixed(seed) : ChooseShaped(kind, seed);
}

}  // namespace dmidx::testing
