#include <cstdio>
#include <string>
#include <vector>

#include "tests/index_test_hooks.h"
#include "tests/sim_schedule.h"

namespace dmidx::testing {
namespace {

// Which techniques a schedule's compute nodes run with.
enum class Techniques : uint8_t { kAllOn, kBaseline, kMixed };

// What a seed chose, printed with a failure.
struct Choice {
  const registry::IndexKind* index = nullptr;
  const ExploreHooks* hooks = nullptr;  // the index's
  Techniques techniques = Techniques::kAllOn;
  bool skewed = false;  // mixed
  uint64_t keys = 0;    // mixed
  uint64_t max_delay_us = 0;
  std::string Shape() const {
    static const char* const kTechniques[] = {"all techniques", "Baseline()",
                                              "mixed switches per compute node"};
    return index->name + ", " + kTechniques[static_cast<int>(techniques)];
  }
  std::string ToString() const {
    return Shape() + ", " + (skewed ? "zipf" : "uniform") + " over " + std::to_string(keys) +
           " keys, delays up to " + std::to_string(max_delay_us) + " us";
  }
};

// A registered index, each by its share: the same for every index, but
// for merges schedules (ExploreHooks::merges_weight).
void ChooseIndex(Kind kind, std::mt19937_64& rng, Choice* choice) {
  const auto weight = [kind](const registry::IndexKind& index) -> uint64_t {
    return kind == Kind::kMerges ? IndexExploreHooks().at(index.name).merges_weight : 1;
  };
  uint64_t total = 0;
  for (const registry::IndexKind& index : registry::RegisteredIndexes())
    total += weight(index);
  uint64_t draw = rng() % total;
  for (const registry::IndexKind& index : registry::RegisteredIndexes()) {
    if (draw < weight(index)) {
      choice->index = &index;
      choice->hooks = &IndexExploreHooks().at(index.name);
      return;
    }
    draw -= weight(index);
  }
}

// `settings` with `name` as `from` has it (absent: the default).
void SetAs(const registry::IndexSettings& from, const std::string& name,
           registry::IndexSettings* settings) {
  const auto found = from.find(name);
  if (found == from.end()) {
    settings->erase(name);
  } else {
    (*settings)[name] = found->second;
  }
}

// Settings of compute node `cn`: everything on, everything off (the
// registry's baseline configuration), or (mixed) node 0 on, node 1 off,
// node 2 a random pick per setting. Settings fixed at creation are the
// same on every node.
registry::IndexSettings TechniquesFor(const Choice& choice, uint32_t cn, std::mt19937_64& rng) {
  const registry::IndexSettings& on = choice.hooks->all_on;
  registry::IndexSettings off = on;
  for (const registry::Configuration& configuration : choice.index->configurations) {
    if (configuration.label == "baseline") off = registry::Merged(on, configuration.settings);
  }
  if (choice.techniques == Techniques::kAllOn) return on;
  if (choice.techniques == Techniques::kBaseline) return off;
  for (const std::string& name : choice.hooks->fixed_at_creation)
    SetAs(on, name, &off);
  if (cn == 0) return on;
  if (cn == 1) return off;
  registry::IndexSettings pick = on;
  for (const std::string& name : choice.hooks->mixed_picks) {
    if (rng() % 2 == 0) SetAs(off, name, &pick);
  }
  return pick;
}

std::mt19937_64 ScheduleRng(Kind kind, uint64_t seed) {
  return std::mt19937_64(seed * 0x9e3779b97f4a7c15ull + 17 + (static_cast<uint64_t>(kind) << 32));
}

// The deaths kind's settings: every handle's lock timeout kDeathLockTimeout.
void LongLockTimeouts(Schedule* schedule) {
  for (auto& handles : schedule->settings) {
    for (registry::IndexSettings& settings : handles)
      settings["lock_timeout_ms"] = std::to_string(kDeathLockTimeout.count());
  }
}

// The mixed kind, and the deaths kind's mixed workload.
Schedule ChooseMixed(Kind kind, uint64_t seed) {
  std::mt19937_64 rng = ScheduleRng(kind, seed);
  Choice choice;
  ChooseIndex(Kind::kMixed, rng, &choice);
  choice.techniques = static_cast<Techniques>(rng() % 3);
  choice.skewed = rng() % 2;
  choice.keys = choice.skewed ? 8 + rng() % 24 : 64 + rng() % 192;
  choice.max_delay_us = rng() % 4;
  Schedule schedule;
  schedule.kind = kind;
  schedule.shape = choice.Shape();
  schedule.details = choice.ToString();
  schedule.index = choice.index;
  schedule.max_delay_us = choice.max_delay_us;
  schedule.keys = KeyCodec::Plain(choice.keys);
  schedule.skewed = choice.skewed;
  for (uint32_t cn = 0; cn < kComputeNodes; ++cn)
    schedule.settings.push_back({TechniquesFor(choice, cn, rng)});
  schedule.run_seed = rng();
  return schedule;
}

// The merges and failures kinds, and the deaths kind's merges workload.
Schedule ChooseShaped(Kind kind, uint64_t seed) {
  std::mt19937_64 rng = ScheduleRng(kind, seed);
  const bool failures = kind == Kind::kFailures;
  Schedule schedule;
  schedule.kind = kind;
  Choice choice;
  ChooseIndex(kind, rng, &choice);
  choice.techniques = static_cast<Techniques>(rng() % 3);
  schedule.index = choice.index;
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
  ExploreShape shaped = choice.hooks->shaped(
      kComputeNodes, [&](uint32_t cn) { return TechniquesFor(choice, cn, rng); }, rng);
  schedule.shape = choice.index->name + ", " + shaped.shape;
  schedule.settings = std::move(shaped.handles);
  if (failures) {
    for (auto& handles : schedule.settings) {
      for (registry::IndexSettings& settings : handles)
        settings["lock_timeout_ms"] = std::to_string(kShortLockTimeout.count());
    }
  }
  for (uint64_t id = 0; id < schedule.keys.count(); ++id)
    schedule.preload.push_back(rng() % 4 != 0);
  schedule.details = choice.Shape() + ", " + schedule.keys.ToString() + ", delays up to " +
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
    // Spaced so that what follows a failure is not failed too.
    schedule.failures.min_spacing = choice.hooks->failure_spacing;
    schedule.failing_client = static_cast<uint32_t>(rng() % kComputeNodes);
    schedule.details += ", compute node " + std::to_string(schedule.failing_client) +
                        "'s batches fail one in " + std::to_string(one_in) + ", at least " +
                        std::to_string(schedule.failures.min_spacing) + " apart";
  }
  schedule.run_seed = rng();
  return schedule;
}

// The deaths kind: the mixed or the merges workload (each index as
// often), and a death or two (Schedule::victim and what follows it).
Schedule ChooseDeaths(uint64_t seed) {
  // Its own stream, so that the workload's choices are drawn as its kind
  // draws them.
  std::mt19937_64 rng(ScheduleRng(Kind::kDeaths, seed)() ^ 0xdead5eedull);
  const bool merges = rng() % 2 == 0;
  Schedule schedule = merges ? ChooseShaped(Kind::kDeaths, seed) : ChooseMixed(Kind::kDeaths, seed);
  schedule.merges_workload = merges;
  schedule.shape += merges ? ", merges workload" : ", mixed workload";
  LongLockTimeouts(&schedule);
  // Half of the seeds with the index's smallest nodes (IndexKind::small_nodes;
  // none for the radix tree), so that B+tree leaves and parents split all
  // the time and a death often falls inside a split.
  if (!schedule.index->small_nodes.empty() && rng() % 2 == 0) {
    for (auto& handles : schedule.settings) {
      for (registry::IndexSettings& settings : handles)
        settings = registry::Merged(settings, schedule.index->small_nodes);
    }
    schedule.shape += ", small nodes";
    schedule.details += ", small nodes";
  }
  schedule.victim = static_cast<uint32_t>(rng() % kComputeNodes);
  schedule.kill_op = 1 + rng() % (uint64_t{kThreads} * kCoroutines * kOpsPerContext);
  // Up to a few round trips (2 us each) into the operation, often less:
  // most deaths land in the operation started, some in a later one of
  // another context of the node.
  schedule.kill_delay_ns = rng() % 2 == 0 ? rng() % 4'000 : rng() % 20'000;
  schedule.second_death = rng() % 3 == 0;
  schedule.second_delay_ns = rng() % 30'000;
  schedule.details += ", compute node " + std::to_string(schedule.victim) + " dies " +
                      std::to_string(schedule.kill_delay_ns) + " ns after it starts its op " +
                      std::to_string(schedule.kill_op);
  if (schedule.second_death) {
    schedule.details +=
        ", and its recoverer " + std::to_string(schedule.second_delay_ns) + " ns into the recovery";
  }
  return schedule;
}

}  // namespace

Schedule Choose(Kind kind, uint64_t seed) {
  switch (kind) {
    case Kind::kMixed:
      return ChooseMixed(kind, seed);
    case Kind::kDeaths:
      return ChooseDeaths(seed);
    default:
      return ChooseShaped(kind, seed);
  }
}

}  // namespace dmidx::testing
