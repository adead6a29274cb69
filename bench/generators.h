// Random choices of a benchmark context: which operation, which key, how
// long a scan. Each context owns its generators (nothing here is shared or
// locked), seeded from the run seed and the context's position, so a run is
// reproducible op for op.
//
// The key distributions follow YCSB's core workload: zipfian draws ranks by
// Gray et al.'s method ("Quickly generating billion-record synthetic
// databases", SIGMOD'94) and scrambles them with a 64-bit mixer (YCSB uses
// FNV-1a, which costs three times as much per operation) so that hot keys are
// spread over the key space, not clustered; latest favours the newest keys;
// hotspot sends a share of operations to a share of the keys.
#ifndef DMIDX_BENCH_GENERATORS_H_
#define DMIDX_BENCH_GENERATORS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/workload.h"

namespace dmidx::bench {

// xoshiro256** seeded through splitmix64: fast, and good enough for
// workload generation.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  // xoshiro256**; inline, as every generated operation draws a few.
  uint64_t Next() {
    const uint64_t result = RotateLeft(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = RotateLeft(state_[3], 45);
    return result;
  }
  // Uniform in [0, 1): the top 53 bits, scaled (every double in [0, 1)
  // with step 2^-53).
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n); n >= 1.
  uint64_t Below(uint64_t n);

 private:
  static uint64_t RotateLeft(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

// A bijection of 64-bit numbers that scatters them (splitmix64's
// finalizer): distinct inputs always give distinct outputs, in a few
// cycles. The bench's hashed keys use it.
inline uint64_t Mix64(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;  // so that 0 does not map to 0
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

// Ranks in [0, items): rank r with probability (1/(r+1)^theta) / zeta(items).
// Gray et al.'s closed form: exact for ranks 0 and 1, an approximation of
// the tail (see tests/bench_generators_test.cc for how close).
class Zipfian {
 public:
  // items >= 1; theta > 0 and != 1.
  Zipfian(uint64_t items, double theta);
  // Inline: on every operation's path.
  uint64_t Next(Rng& rng) const {
    const double u = rng.NextDouble();
    if (table_ != nullptr) {
      // RankOf is non-decreasing in u, so equal ranks at both ends of u's
      // step are its rank (the same answer RankOf(u) gives, without pow()).
      const auto step = static_cast<uint32_t>(u * kTableSteps);
      const uint64_t* table = table_->data();
      if (table[step] == table[step + 1]) return table[step];
    }
    return RankOf(u);
  }
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
  // Ranks at u = j / kTableSteps, j = 0..kTableSteps: where two neighbours
  // are equal, every u between them has that rank, and Next needs no pow()
  // (most draws: the hot ranks hold most of the mass). Built by the
  // constructor, dropped by Grow (a growing range would rebuild it often).
  // Shared by copies (every context copies its key chooser): 128 KiB once.
  static constexpr uint32_t kTableSteps = 16384;
  std::shared_ptr<const std::vector<uint64_t>> table_;
  uint64_t RankOf(double u) const;
};

// Zipfian ranks hashed over [0, items): Mix64(rank) scaled to items, so the
// hottest keys are scattered (as YCSB's ScrambledZipfianGenerator, with
// Mix64 for its FNV hash and a multiply-shift for its modulo).
class ScrambledZipfian {
 public:
  ScrambledZipfian(uint64_t items, double theta);
  // Not a permutation: ranks whose hashes meet modulo items share a key (as
  // in YCSB), so some keys get two ranks' shares and others none.
  uint64_t Next(Rng& rng) const { return KeyOfRank(zipfian_.Next(rng), zipfian_.items()); }
  // The key that zipfian rank `rank` lands on among `items`.
  static uint64_t KeyOfRank(uint64_t rank, uint64_t items) {
    // Multiply-shift maps the 64-bit hash onto [0, items) without a
    // division (this is on every operation's path).
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Mix64(rank)) * items) >> 64);
  }

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
  // Inline for zipfian, the common case: it is on every operation's path.
  uint64_t Next(Rng& rng, uint64_t count) {
    if (distribution_ == Distribution::kZipfian && count != 0) return NextZipfian(rng, count);
    return NextOther(rng, count);
  }

 private:
  uint64_t NextOther(Rng& rng, uint64_t count);
  uint64_t NextZipfian(Rng& rng, uint64_t count) const {
    // Scrambled over the expected keys so that which keys are hot does not
    // change as inserts add keys; a number not inserted yet is drawn again.
    uint64_t number = scrambled_.Next(rng);
    for (int redraw = 0; number >= count && redraw < kMaxRedraws; ++redraw)
      number = scrambled_.Next(rng);
    return number < count ? number : number % count;
  }
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
  int only_ = -1;                // the one type with a share, when there is one
};

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_GENERATORS_H_
