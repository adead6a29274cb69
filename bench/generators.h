// Random choices of a benchmark context: which operation, which key, how
// long a scan. Each context owns its generators (nothing here is shared or
// locked), seeded from the run seed and the context's position, so a run is
// reproducible op for op.
//
// The key distributions are YCSB's core workload's (CoreWorkload.init, and
// the generators it builds), so that a YCSB property file gives the
// workload YCSB would run:
//   zipfian  ScrambledZipfianGenerator: a zipfian rank among 10^10 items
//            (Gray et al., "Quickly generating billion-record synthetic
//            databases", SIGMOD'94), hashed with FNV-1a onto the keys;
//   latest   SkewedLatestGenerator: a zipfian over recency, the newest key
//            most likely;
//   hotspot  HotspotIntegerGenerator: a share of the operations on a share
//            of the keys;
//   uniform  UniformLongGenerator.
// dmidx.zipfian=exact replaces YCSB's zipfian with a zipfian over the keys
// themselves (Sherman's benchmark's), which is not YCSB's: see KeyChooser.
#ifndef DMIDX_BENCH_GENERATORS_H_
#define DMIDX_BENCH_GENERATORS_H_

#include <cstdint>
#include <memory>
#include <optional>
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

// YCSB's Utils.fnvhash64: FNV-1a 64 over the 8 bytes of `value`, low byte
// first (offset basis 0xCBF29CE484222325, prime 1099511628211), then
// Java's Math.abs of the result read as a signed number. Math.abs leaves
// Long.MIN_VALUE (2^63) negative, and Java's % would then give a negative
// key; no rank YCSB draws (below 2^34) hashes to it (the test
// FnvHash64.NoRankYcsbDrawsHashesToLongMinValue checks all of them), so
// every result a key is made from is below 2^63.
inline uint64_t FnvHash64(uint64_t value) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (int octet = 0; octet < 8; ++octet) {
    hash = (hash ^ (value & 0xff)) * 1099511628211ull;
    value >>= 8;
  }
  // Two's complement negation is Math.abs of a negative long (2^63 stays).
  return hash >> 63 ? 0 - hash : hash;
}

// YCSB's constants for its zipfian keys (ScrambledZipfianGenerator):
// ranks are drawn among kYcsbItemCount + 1 items (its ZipfianGenerator(0,
// ITEM_COUNT) spans 0..ITEM_COUNT), with zeta(kYcsbItemCount, 0.99) =
// kYcsbZetan precomputed (Java's running sum of 10^10 terms, 1.2e-12 above
// the exact sum: tests/bench_generators_test.cc). 0.99 is also the
// constant of every other YCSB zipfian (latest, scan lengths).
inline constexpr uint64_t kYcsbItemCount = 10'000'000'000;
inline constexpr double kYcsbZetan = 26.46902820178302;
inline constexpr double kYcsbZipfianConstant = 0.99;

// Ranks in [0, items): rank r with probability (1/(r+1)^theta) / zeta(items),
// drawn as YCSB's ZipfianGenerator draws them: Gray et al.'s closed form,
// exact for ranks 0 and 1, an approximation of the tail (see
// tests/bench_generators_test.cc for how close), with YCSB's formulas for
// eta and alpha.
class Zipfian {
 public:
  // items >= 1; theta > 0 and != 1. Computes zeta(items).
  Zipfian(uint64_t items, double theta);
  // With zeta given (YCSB's precomputed kYcsbZetan).
  Zipfian(uint64_t items, double theta, double zeta_n);
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
  // Extends the range to `items` (>= items()) as YCSB's ZipfianGenerator
  // does when nextLong is given a larger count (SkewedLatestGenerator's
  // case): zeta grows incrementally (items - items() terms, or a closed
  // form when that is many), but eta keeps the item count the generator
  // was built with, as YCSB's does (it computes eta from the constructor's
  // count, a quirk kept so that latest draws what YCSB draws).
  void Grow(uint64_t items);
  uint64_t items() const { return items_; }
  double theta() const { return theta_; }
  double zeta_n() const { return zeta_n_; }
  double eta() const { return eta_; }
  // The rank Gray's method gives for u in [0, 1).
  uint64_t RankOf(double u) const;
  // sum_{i=1..n} 1/i^theta. Terms are added one by one up to 2^16 of them;
  // beyond, the tail comes from the Euler-Maclaurin formula (see
  // generators.cc), so Zeta(10^10) takes microseconds, not minutes.
  static double Zeta(uint64_t n, double theta);

 private:
  void Derive();
  uint64_t items_;
  uint64_t eta_items_;  // the constructor's count, which eta keeps (see Grow)
  double theta_;
  double zeta_n_;
  double zeta_2_;
  double alpha_;
  double eta_;
  double rank_1_bound_;  // 1 + 0.5^theta: u * zeta_n below it is rank 0 or 1
  // Ranks at u = j / kTableSteps, j = 0..kTableSteps: where two neighbours
  // are equal, every u between them has that rank, and Next needs no pow()
  // (the hot ranks: most draws over a small range, about a quarter over
  // YCSB's 10^10 items). Built by the constructor, dropped by Grow (a
  // growing range would rebuild it often). Shared by copies (every context
  // copies its key chooser): 128 KiB once.
  static constexpr uint32_t kTableSteps = 16384;
  std::shared_ptr<const std::vector<uint64_t>> table_;
};

// Zipfian key numbers in [0, items), the hot ones scattered over the
// numbers rather than clustered at 0. Two kinds:
//   Ycsb   YCSB's ScrambledZipfianGenerator(0, items - 1, theta): a rank
//          among kYcsbItemCount + 1 (zeta kYcsbZetan for theta 0.99,
//          computed otherwise), key FnvHash64(rank) % items. The skew over
//          the keys is not a zipfian over `items`: each key sums the ranks
//          that hash onto it, about 10^10 / items of them.
//   Exact  dmidx.zipfian=exact: a rank among `items` itself (the hottest
//          key gets 1 / zeta(items) of the draws), key Mix64(rank) scaled
//          to items by a multiply-shift (as Sherman's benchmark hashes
//          its zipfian ranks onto its key space).
// Neither is a permutation: ranks whose hashes meet modulo items share a
// key, so some keys get two ranks' shares and others none.
class ScrambledZipfian {
 public:
  enum class Kind : uint8_t { kYcsb, kExact };
  // items >= 1; theta > 0 and != 1.
  ScrambledZipfian(Kind kind, uint64_t items, double theta);
  uint64_t Next(Rng& rng) const { return KeyOfRank(ranks_.Next(rng)); }
  // The key that zipfian rank `rank` lands on. Inline: on every
  // operation's path.
  uint64_t KeyOfRank(uint64_t rank) const {
    if (kind_ == Kind::kYcsb) return FnvHash64(rank) % items_;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Mix64(rank)) * items_) >> 64);
  }
  uint64_t items() const { return items_; }
  const Zipfian& ranks() const { return ranks_; }

 private:
  static Zipfian RanksFor(Kind kind, uint64_t items, double theta);
  Kind kind_;
  uint64_t items_;
  Zipfian ranks_;
};

// Key numbers for one context's operations, as YCSB's CoreWorkload chooses
// them (its keychooser, then nextKeynum). Numbers are positions among the
// keys of the run: 0 .. records - 1 the records it loads (YCSB's key
// numbers insertstart .. recordcount - 1, records = insertcount =
// recordcount - insertstart), then the keys its inserts added, in order;
// `count` is how many of those exist when the operation is chosen (YCSB's
// acknowledged counter). `spec` must pass Validate().
//   zipfian  ScrambledZipfian over records + YCSB's expected new keys + 1
//            numbers (CoreWorkload builds ScrambledZipfianGenerator(
//            insertstart, insertstart + insertcount + expectednewkeys),
//            max inclusive); a number >= count is drawn again
//            (nextKeynum), as YCSB does, up to kMaxRedraws times (YCSB
//            redraws for ever; a run whose keys are a sliver of the range,
//            say one record, would never end), then taken modulo count.
//            YCSB's workloade for 10^6 operations keeps 0.8% of the
//            draws: 120 draws an operation at first, far below the cap. dmidx.zipfian=exact: over
//            records + the inserts the run expects
//            (WorkloadSpec::ExpectedNewKeys), not YCSB's.
//   latest   the newest existing key is zipfian rank 0, over the
//            insertstart + count - 1 keys below it (SkewedLatestGenerator
//            over the acknowledged counter), theta 0.99; a key below
//            insertstart (not loaded by this run) is drawn again.
//   uniform, hotspot  over the records only, not the keys inserted since
//            (YCSB's UniformLongGenerator and HotspotIntegerGenerator over
//            insertstart .. insertstart + insertcount - 1); over the keys
//            present when they are fewer (a run that loaded none).
class KeyChooser {
 public:
  static constexpr int kMaxRedraws = 1 << 20;

  explicit KeyChooser(const WorkloadSpec& spec);
  // count >= 1. Allocates nothing; grows the latest distribution's zeta
  // when count has grown (one term per new key).
  // Inline for zipfian, the common case: it is on every operation's path.
  uint64_t Next(Rng& rng, uint64_t count) {
    if (distribution_ == Distribution::kZipfian && count != 0) return NextZipfian(rng, count);
    return NextOther(rng, count);
  }
  // The zipfian's key numbers (zipfian only).
  const ScrambledZipfian& zipfian() const { return *zipfian_; }

 private:
  uint64_t NextOther(Rng& rng, uint64_t count);
  uint64_t NextZipfian(Rng& rng, uint64_t count) const {
    // Spread over more numbers than exist at first, so that which keys are
    // hot does not change as inserts add keys; a number not inserted yet
    // is drawn again.
    uint64_t number = zipfian_->Next(rng);
    for (int redraw = 0; number >= count && redraw < kMaxRedraws; ++redraw)
      number = zipfian_->Next(rng);
    return number < count ? number : number % count;
  }
  uint64_t NextLatest(Rng& rng, uint64_t count);
  uint64_t NextHotspot(Rng& rng, uint64_t count) const;
  // The numbers uniform and hotspot choose among: the records, or the keys
  // present when there are fewer.
  uint64_t RecordRange(uint64_t count) const {
    return records_ > 0 && records_ < count ? records_ : count;
  }

  Distribution distribution_;
  uint64_t records_;                         // keys the run loads (YCSB insertcount)
  uint64_t insert_start_;                    // YCSB insertstart: the first record's key number
  std::optional<ScrambledZipfian> zipfian_;  // zipfian only
  std::optional<Zipfian> latest_;            // latest only; grown as count grows
  double hot_data_fraction_;
  double hot_operation_fraction_;
};

// Scan lengths in [min_scan_length, max_scan_length]: uniform, or zipfian
// (min most likely) with YCSB's constant 0.99, whatever zipfianconstant
// says: CoreWorkload builds UniformLongGenerator(minscanlength,
// maxscanlength) or ZipfianGenerator(minscanlength, maxscanlength).
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
