// Random choices of a benchmark context: which operation, which key, how
// long a scan. Each context owns its generators (nothing here is shared or
// locked), seeded from the run seed and the context's position, so a run is
// reproducible op for op.
//
// The key distributions follow YCSB's core workload: zipfian draws ranks by
// Gray et al.'s method ("Quickly generating billion-record synthetic
// databases", SIGMOD'94) and scrambles them with FNV-1a so that hot keys are
// spread over the key space, not clustered; latest favours the newest keys;
// hotspot sends a share of operations to a share of the keys.
#ifndef DMIDX_BENCH_GENERATORS_H_
#define DMIDX_BENCH_GENERATORS_H_

#include <cstdint>

#include "bench/workload.h"

namespace dmidx::bench {

// xoshiro256** seeded through splitmix64: fast, and good enough for
// workload generation.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1).
  double NextDouble();
  // Uniform in [0, n); n >= 1.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_[4];
};

// FNV-1a over the 8 bytes of `value` (YCSB's fnvhash64).
uint64_t FnvHash64(uint64_t value);

// Ranks in [0, items): rank r with probability (1/(r+1)^theta) / zeta(items).
// Gray et al.'s closed form: exact for ranks 0 and 1, an approximation of
// the tail (see tests/bench_generators_test.cc for how close).
class Zipfian {
 public:
  // items >= 1; theta > 0 and != 1.
  Zipfian(uint64_t items, double theta);
  uint64_t Next(Rng& rng) const;
  // Extends the range to `items` (>= items()), updating zeta incrementally
  // (cost: items - items() terms, or a closed form when that is many).
  void Grow(uint64_t items);
  uint64_t items() const { return items_; }
  double theta() const { return theta_; }
  // sum_{i=1..n} 1/i^theta. Terms are added one by one up to 2^16 of them;
  // beyond, the tail comes from the Euler-Maclaurin formula (see
  // generators.cc), so Zeta(10^9) takes microseconds, not seconds.
  static double Zeta(uint64_t n, double theta);

 private:
  void Derive();
  uint64_t items_;
  double theta_;
  double zeta_n_;
  double zeta_2_;
  double alpha_;
  double eta_;
  double rank_1_bound_;  // 1 + 0.5^theta: u * zeta_n below it is rank 0 or 1
};

// Zipfian ranks hashed over [0, items): FnvHash64(rank) % items, so the
// hottest keys are scattered (YCSB's ScrambledZipfianGenerator).
class ScrambledZipfian {
 public:
  ScrambledZipfian(uint64_t items, double theta);
  uint64_t Next(Rng& rng) const;

 private:
  Zipfian zipfian_;
};

// Key numbers for one context's operations, in [0, count) where count is
// how many keys exist when the operation is chosen. Built for `expected`
// keys (records plus the inserts the run is expected to make); zipfian
// redraws a number >= count, as YCSB does (at most kMaxRedraws times, then
// takes it modulo count). `spec` must pass Validate().
class KeyChooser {
 public:
  static constexpr int kMaxRedraws = 64;

  KeyChooser(const WorkloadSpec& spec, uint64_t expected);
  // count >= 1. Allocates nothing; grows the latest distribution's zeta
  // when count has grown (one term per new key).
  uint64_t Next(Rng& rng, uint64_t count);

 private:
  uint64_t NextZipfian(Rng& rng, uint64_t count) const;
  uint64_t NextLatest(Rng& rng, uint64_t count);
  uint64_t NextHotspot(Rng& rng, uint64_t count) const;

  Distribution distribution_;
  ScrambledZipfian scrambled_;
  Zipfian latest_;  // grown as count grows
  double hot_data_fraction_;
  double hot_operation_fraction_;
};

// Scan lengths in [min_scan_length, max_scan_length]: uniform, or zipfian
// with the spec's zipfian_constant (min most likely).
class ScanLengthChooser {
 public:
  explicit ScanLengthChooser(const WorkloadSpec& spec);
  uint32_t Next(Rng& rng) const;

 private:
  uint32_t min_;
  uint32_t max_;
  bool zipfian_;
  Zipfian lengths_;
};

// Operation types in the spec's proportions.
class OperationChooser {
 public:
  explicit OperationChooser(const WorkloadSpec& spec);
  OpType Next(Rng& rng) const;

 private:
  double cumulative_[kOpTypes];  // normalized, last = 1
};

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_GENERATORS_H_
