// Counters of one client thread. Each thread counts its own; a bench or test
// sums them. Counts are exact and deterministic for a given sequence of ops.
#ifndef DMIDX_STATS_H_
#define DMIDX_STATS_H_

#include <cstdint>
#include <string>

namespace dmidx {

struct Stats {
  // Sequential network waits: one per wait that had to wait for at least one
  // posted batch, however many memory nodes the batches went to. This is the
  // latency-relevant count ("round trips" in the Sherman and SMART papers).
  uint64_t round_trips = 0;
  // Batches posted (doorbells rung), signaled or not.
  uint64_t batches = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t compare_swaps = 0;
  uint64_t fetch_adds = 0;
  uint64_t bytes_read = 0;     // payload bytes of READs (atomics count 8)
  uint64_t bytes_written = 0;  // payload bytes of WRITEs (atomics count 8)
  // CAS ops that completed with an old value different from the expected one.
  uint64_t compare_swap_failures = 0;

  Stats& operator+=(const Stats& other);
  friend Stats operator+(Stats a, const Stats& b) { return a += b; }
  friend Stats operator-(Stats a, const Stats& b);
  friend bool operator==(const Stats&, const Stats&) = default;
  // One line, "round_trips=3 batches=3 reads=2 ...".
  std::string ToString() const;
};

}  // namespace dmidx

#endif  // DMIDX_STATS_H_
