// The schedules of tests/sim_schedules_test.cc: what a seed chooses
// (Choose: a registered index and its settings, through the index's
// exploration hooks (tests/index_test_hooks.h), the keys, the fabric's
// faults, the batch failures) and running one on the simulated cluster
// (RunSchedule: the contexts' operations, the runs after them, the
// linearizability check, the index at rest). A seed and its kind name one schedule, op for op.
#ifndef DMIDX_TESTS_SIM_SCHEDULE_H_
#define DMIDX_TESTS_SIM_SCHEDULE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lib/fabric/fault_injector.h"
#include "registry/registry.h"

namespace dmidx::testing {

// The kinds of schedule (sim_schedules_test.cc says what each explores).
enum class Kind : uint8_t { kMixed, kMerges, kFailures, kDeaths };
inline constexpr int kKinds = 4;

inline constexpr uint32_t kComputeNodes = 3;
inline constexpr uint32_t kThreads = 2;
inline constexpr uint32_t kCoroutines = 2;
inline constexpr int kOpsPerContext = 40;
inline constexpr size_t kContexts = size_t{kComputeNodes} * kThreads * kCoroutines;
// The size of KeyCodec's keys.
inline constexpr uint32_t kKeyBytes = 8;
// The lock timeout of failures schedules: a leaf or lock word a failed batch
// left held stops every later writer of the key within it, while it is long
// against any real wait. A real wait is not just a few round trips per
// context ahead: a B+tree context without the local lock table backs off
// exponentially (up to retry_backoff_max) on a word that other compute
// nodes' queue heads poll every 8 us and hand over locally, so on a leaf
// every context wants, with 30 us delays and stalls, it may lose the word a
// hundred times in a row. Over the 50126 B+tree schedules of failures seeds
// 1-100000, with the timeout out of the way, live holders kept a waiter
// 28.1 ms at most (one of the local table 12.2 ms); 108 waits passed 15 ms
// (20 ms failed seed 45001). Under the default lease period (100 ms), so a
// waiter never reads a live holder's lease.
inline constexpr std::chrono::milliseconds kShortLockTimeout{50};
// The leases of deaths schedules, in virtual time: short, so that a dead
// compute node is judged and recovered within a schedule.
inline constexpr std::chrono::milliseconds kDeathLeasePeriod{2};
inline constexpr std::chrono::milliseconds kDeathLeaseTimeout{20};
// The lock timeout of deaths schedules: a survivor waiting on a word a dead
// node holds judges its lease for kDeathLeaseTimeout and recovers it
// (a few round trips a record) well within it, so a survivor that times
// out was wedged.
inline constexpr std::chrono::milliseconds kDeathLockTimeout{200};

// Key ids 0 .. count()-1 and the 8-byte keys that stand for them, in the
// same order, so that the checker's integer keys and scans of ids are
// scans of keys. Plain: Key(id). Spread: the id's digits in a mixed radix
// of 2s and 3s, each digit in a byte of its own that takes only that many
// values, the other bytes fixed: keys share short prefixes and radix nodes
// have 2 or 3 children.
class KeyCodec {
 public:
  static KeyCodec Plain(uint64_t count);
  // 3 or 4 digits at random places, 8 to 36 ids.
  static KeyCodec Spread(std::mt19937_64& rng);

  uint64_t count() const { return count_; }
  std::string Encode(uint64_t id) const;
  // The id `key` stands for; nullopt if none.
  std::optional<uint64_t> Decode(const std::string& key) const;
  // An id other than `id` whose key differs from its key in the last
  // digit only (a sibling under the deepest node); `id` itself if plain.
  uint64_t Sibling(uint64_t id, std::mt19937_64& rng) const;
  // "12 keys 5a:{03,1b}:d3:...": the fixed bytes, the values of each digit.
  std::string ToString() const;

 private:
  struct Digit {
    uint32_t place;               // byte of the key
    std::vector<uint8_t> values;  // ascending, one per digit value
  };
  uint64_t count_ = 0;
  std::string fixed_;          // Spread: every byte of a key but its digits
  std::vector<Digit> digits_;  // most significant first; empty: Plain
};

// Everything a schedule runs with, as its seed chose it.
struct Schedule {
  Kind kind = Kind::kMixed;
  std::string shape;                           // the index and its settings: a row of the summary
  std::string details;                         // the rest, printed with a failure
  const registry::IndexKind* index = nullptr;  // the registry's row
  // By compute node, the settings of each of its handles (one or more).
  std::vector<std::vector<registry::IndexSettings>> settings;
  uint64_t max_delay_us = 0;
  // Rare long delays (LocalFabricOptions::stall_probability, stall): they
  // hold one step of an operation back while others race past it.
  double stall_probability = 0;
  uint64_t stall_us = 0;
  KeyCodec keys;
  bool skewed = false;        // mixed: zipf over the ids
  std::vector<bool> preload;  // merges, failures: ids inserted before the run
  // failures: probability > 0, and the compute node whose batches fail
  // (compute_nodes is filled in once the clients exist).
  fabric::RandomBatchFailures failures;
  uint32_t failing_client = 0;
  // deaths: the workload (mixed's or merges'), and which compute node dies
  // when: `kill_delay_ns` of virtual time after it starts its
  // `kill_op`-th operation (counted over its contexts, from 1), at an
  // event boundary, so between two of its posts or with a torn WRITE half
  // landed. With `second_death`, the first survivor whose recovery of it
  // runs its steps dies too, `second_delay_ns` later.
  bool merges_workload = false;
  uint32_t victim = 0;
  uint64_t kill_op = 0;
  uint64_t kill_delay_ns = 0;
  bool second_death = false;
  uint64_t second_delay_ns = 0;
  uint64_t run_seed = 0;  // of the contexts' operations
};

// What seed `seed` of `kind` chose. Deterministic.
Schedule Choose(Kind kind, uint64_t seed);

// What running a schedule gave.
struct Outcome {
  std::string error;  // "" when it passed; else every problem, one a line
  // What failed, each once, in the order first seen: "not linearizable",
  // or a status with its numbers and addresses left out, "Aborted: scan
  // gave up after too many re-reads", ...
  std::vector<std::string> categories;
  // Failures on a key after an operation of it ended Unavailable (an
  // injected batch failure), each once: "Delete Unavailable, then
  // DeadlineExceeded" (the later operation on the key ended so).
  std::vector<std::string> sequels;
  std::string shape;      // Schedule::shape
  size_t ops = 0;         // per-key operations checked
  uint64_t print = 0;     // Fingerprint of the history
  uint64_t injected = 0;  // batches FailBatchesAtRandom failed
  // deaths: compute nodes that died (1 or 2: a victim whose death had not
  // come by the end of the run dies then), and the operations their
  // deaths left pending.
  uint32_t deaths = 0;
  uint64_t pending = 0;
  // Objects the run's compute nodes freed after their grace periods
  // (runtime/epochs.h), to be reused.
  uint64_t reclaimed = 0;
  // deaths: when each died and what its contexts had in flight: "compute
  // node 1 died at 405497 ns, during Update of key 0 17501 ns in, ...".
  std::string died;
};

// Runs `schedule` on a simulated cluster seeded with `seed` and checks its
// history. Deterministic: the same arguments run the same history.
Outcome RunSchedule(Schedule schedule, uint64_t seed);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTS_SIM_SCHEDULE_H_
