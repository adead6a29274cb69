// The random choices of dmidx-ycsb: the Rng, YCSB's hash, the key, scan
// length and operation distributions, checked against YCSB's definitions
// (CoreWorkload and its generators), which the tests compute on their own.
// Every test draws from a fixed seed, so each is deterministic; the
// tolerances still leave room for other seeds (stated with each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>
#include <vector>

#include "bench/generators.h"
#include "testing/sanitizers.h"

namespace dmidx::bench {
namespace {

constexpr uint64_t kSeed = 20240601;

// Frequencies of `draws` values of next() over [0, n).
template <typename Next>
std::vector<double> Frequencies(uint64_t n, int draws, Next next) {
  std::vector<uint64_t> counts(n, 0);
  for (int i = 0; i < draws; ++i) {
    const uint64_t value = next();
    EXPECT_LT(value, n);
    if (value < n) ++counts[value];
  }
  std::vector<double> frequencies(n);
  for (uint64_t i = 0; i < n; ++i)
    frequencies[i] = static_cast<double>(counts[i]) / draws;
  return frequencies;
}

// The exact zipfian probabilities 1/(r+1)^theta / zeta(n).
std::vector<double> ExactZipfian(uint64_t n, double theta) {
  std::vector<double> p(n);
  double zeta = 0;
  for (uint64_t r = n; r > 0; --r)
    zeta += std::pow(static_cast<double>(r), -theta);
  for (uint64_t r = 0; r < n; ++r)
    p[r] = std::pow(static_cast<double>(r + 1), -theta) / zeta;
  return p;
}

double TotalVariation(const std::vector<double>& p, const std::vector<double>& q) {
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i)
    sum += std::abs(p[i] - q[i]);
  return sum / 2;
}

// ---------------------------------------------------------------------------
// Rng and hash

TEST(Rng, SameSeedSameSequenceOtherSeedOther) {
  Rng a(kSeed), b(kSeed), c(kSeed + 1);
  int differing = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differing += x != c.Next();
  }
  EXPECT_EQ(differing, 1000);
}

TEST(Rng, DoublesAndBoundsStayInRange) {
  Rng rng(kSeed);
  double sum = 0;
  for (int i = 0; i < 100'000; ++i) {
    const double u = rng.NextDouble();
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 1);
    sum += u;
  }
  EXPECT_NEAR(sum / 100'000, 0.5, 0.005);  // sd of the mean 0.0009
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1} << 63,
                     (uint64_t{1} << 63) + 1, ~uint64_t{0}}) {
    for (int i = 0; i < 1000; ++i)
      ASSERT_LT(rng.Below(n), n) << n;
  }
  // A bound just above 2^63 is where a plain modulo would be most biased:
  // x % n would fall below 2^63 - 1 two times in three.
  const uint64_t n = (uint64_t{1} << 63) + (uint64_t{1} << 62);
  int low_half = 0;
  for (int i = 0; i < 100'000; ++i)
    low_half += rng.Below(n) < n / 2;
  EXPECT_NEAR(low_half / 100'000.0, 0.5, 0.01);
}

TEST(Rng, BelowIsFlat) {
  // Chi-square over 100 values from 1M draws: 99 degrees of freedom, mean
  // 99, sd 14; 180 is 5.8 sd above the mean (chance about 1e-7 per seed).
  Rng rng(kSeed);
  constexpr int kDraws = 1'000'000;
  const std::vector<double> f = Frequencies(100, kDraws, [&] { return rng.Below(100); });
  double chi_square = 0;
  for (double frequency : f) {
    const double expected = kDraws / 100.0;
    chi_square += std::pow(frequency * kDraws - expected, 2) / expected;
  }
  EXPECT_LT(chi_square, 180);
  RecordProperty("chi_square", std::to_string(chi_square));
}

TEST(Mix64, IsABijectionOnASampleAndScatters) {
  std::set<uint64_t> seen;
  for (uint64_t n = 0; n < 100000; ++n)
    seen.insert(Mix64(n));
  EXPECT_EQ(seen.size(), 100000u);
  // Neighbours land far apart: the top bit is set about half the time.
  int high = 0;
  for (uint64_t n = 0; n < 10000; ++n)
    high += static_cast<int>(Mix64(n) >> 63);
  EXPECT_NEAR(high, 5000, 300);
}

// YCSB's Utils.fnvhash64, pinned to values worked out from its definition
// apart from the code: FNV-1a over the 8 octets of the value, low first,
// then Java's Math.abs.
TEST(FnvHash64, IsYcsbsFnvhash64) {
  constexpr uint64_t kBasis = 0xCBF29CE484222325ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t prime_8 = 1;
  for (int i = 0; i < 8; ++i)
    prime_8 *= kPrime;
  // Every octet of 0 is 0: the basis times the prime eight times. 1 has
  // only its first octet, xored in before the first multiplication.
  const uint64_t raw_0 = kBasis * prime_8;
  const uint64_t raw_1 = (kBasis ^ 1) * prime_8;
  // The same products with Python's arbitrary-precision integers.
  EXPECT_EQ(raw_0, 0xa8c7f832281a39c5ull);
  EXPECT_EQ(raw_1, 0x89cd31291d2aefa4ull);
  // Both are negative as Java longs: Math.abs negates them.
  EXPECT_EQ(FnvHash64(0), 0 - raw_0);
  EXPECT_EQ(FnvHash64(0), 6284781860667377211ull);
  EXPECT_EQ(FnvHash64(1), 8517097267634966620ull);
  // Python again: 4 hashes to a positive long (0x2cdcdc0dfc5d1141), kept
  // as it is; 256 and 10^10 reach the later octets.
  EXPECT_EQ(FnvHash64(4), 0x2cdcdc0dfc5d1141ull);
  EXPECT_EQ(FnvHash64(256), 2056600594528442646ull);
  EXPECT_EQ(FnvHash64(10'000'000'000), 1201321332300452516ull);
}

// The ranks below 2^34 (every rank YCSB draws: at most kYcsbItemCount + 1)
// whose FNV-1a hash, before Math.abs, is `raw`. Meet in the middle: octets
// 5..7 are 0 and octet 4 is 0..3; undoing the multiplications by the prime
// from `raw` over octets 4, 3 and 2 gives 4 x 256 x 256 candidates for the
// hash after octets 0 and 1, which are looked up among the 2^16 that
// hashing those two octets forward gives.
std::vector<uint64_t> RanksHashingTo(uint64_t raw) {
  constexpr uint64_t kBasis = 0xCBF29CE484222325ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t inverse = kPrime;  // Newton's iteration doubles the bits right
  for (int i = 0; i < 6; ++i)
    inverse *= 2 - kPrime * inverse;
  std::unordered_map<uint64_t, uint64_t> after_two;  // hash -> octets 0, 1
  for (uint64_t low = 0; low < 65536; ++low)
    after_two[(((kBasis ^ (low & 0xff)) * kPrime) ^ (low >> 8)) * kPrime] = low;
  std::vector<uint64_t> ranks;
  const uint64_t after_five = raw * inverse * inverse * inverse;  // octets 7..5 are 0
  for (uint64_t octet_4 = 0; octet_4 < 4; ++octet_4) {
    const uint64_t after_four = (after_five * inverse) ^ octet_4;
    for (uint64_t octet_3 = 0; octet_3 < 256; ++octet_3) {
      const uint64_t after_three = (after_four * inverse) ^ octet_3;
      for (uint64_t octet_2 = 0; octet_2 < 256; ++octet_2) {
        const auto it = after_two.find((after_three * inverse) ^ octet_2);
        if (it == after_two.end()) continue;
        ranks.push_back(it->second | octet_2 << 16 | octet_3 << 24 | octet_4 << 32);
      }
    }
  }
  return ranks;
}

TEST(FnvHash64, NoRankYcsbDrawsHashesToLongMinValue) {
  // The search finds the ranks it should: FnvHash64 is the hash or its
  // negation.
  for (uint64_t rank : {uint64_t{4}, uint64_t{123'456}, uint64_t{9'876'543'210}}) {
    std::vector<uint64_t> found = RanksHashingTo(FnvHash64(rank));
    const std::vector<uint64_t> negated = RanksHashingTo(0 - FnvHash64(rank));
    found.insert(found.end(), negated.begin(), negated.end());
    EXPECT_NE(std::find(found.begin(), found.end(), rank), found.end()) << rank;
  }
  // Math.abs(Long.MIN_VALUE) stays negative, and Java's % would make a key
  // below the range from it: no rank YCSB draws hashes to 2^63.
  EXPECT_TRUE(RanksHashingTo(uint64_t{1} << 63).empty());
}

// ---------------------------------------------------------------------------
// Zipfian

TEST(Zipfian, ZetaClosedFormTailMatchesTheSum) {
  for (double theta : {0.2, 0.5, 0.99, 1.01, 1.5, 3.0}) {
    for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{70'000}, uint64_t{1'000'000}}) {
      double direct = 0;
      for (uint64_t i = n; i > 0; --i)
        direct += std::pow(static_cast<double>(i), -theta);
      EXPECT_NEAR(Zipfian::Zeta(n, theta) / direct, 1, 1e-12) << theta << " " << n;
    }
  }
}

TEST(Zipfian, ZetaMatchesAnExtendedPrecisionSum) {
  // long double (64-bit mantissa here) summed smallest first: its own
  // error is around 1e-18. Zeta's (a double head, the Euler-Maclaurin
  // tail) was measured at 5e-16 at most, two ulps; 1e-14 leaves room for
  // other libms.
  const uint64_t n = dmidx::testing::kAnySanitizer ? 100'000 : 1'000'000;
  for (double theta : {0.5, 0.99, 1.5}) {
    long double sum = 0;
    for (uint64_t i = n; i > 0; --i)
      sum += std::pow(static_cast<long double>(i), -static_cast<long double>(theta));
    EXPECT_NEAR(Zipfian::Zeta(n, theta) / static_cast<double>(sum), 1, 1e-14) << theta;
  }
}

TEST(Zipfian, ZetaOfYcsbsItemsIsYcsbsZetan) {
  // zeta(10^10) at 0.99 with 30 digits (mpmath: zeta(0.99) - the Hurwitz
  // zeta(0.99, 10^10 + 1)) is 26.4690282017514818...
  const double zeta = Zipfian::Zeta(kYcsbItemCount, kYcsbZipfianConstant);
  EXPECT_NEAR(zeta / 26.4690282017514818, 1, 1e-14);
  // YCSB's ZETAN is Java's running sum of the 10^10 terms, largest first:
  // its rounding leaves it 1.19e-12 above.
  EXPECT_NEAR(kYcsbZetan / zeta - 1, 1.19e-12, 0.01e-12);
}

TEST(Zipfian, ZetaOfManyItemsIsFastAndRight) {
  // 10^12 terms would take hours one by one. For theta near 1,
  //   zeta(n) = (n^(1-theta) - 1) / (1-theta) + gamma + gamma_1 (1-theta)
  //             + O((1-theta)^2) + O(n^-theta),
  // gamma = 0.5772 the Euler-Mascheroni constant and gamma_1 = -0.0728 the
  // first Stieltjes constant; the omitted terms are below 1e-5 here.
  const double n = 1e12;
  const double theta = 0.99;
  const double expected =
      (std::pow(n, 1 - theta) - 1) / (1 - theta) + 0.5772156649 - 0.0728158455 * (1 - theta);
  EXPECT_NEAR(Zipfian::Zeta(1'000'000'000'000, theta), expected, 1e-4);
}

// YCSB's ZipfianGenerator: eta = (1 - (2/items)^(1-theta)) / (1 - zeta(2) /
// zeta_n).
double YcsbEta(double items, double theta, double zeta_n) {
  return (1 - std::pow(2.0 / items, 1 - theta)) / (1 - Zipfian::Zeta(2, theta) / zeta_n);
}

TEST(Zipfian, GrowExtendsZetaButKeepsTheConstructorsEta) {
  Zipfian grown(1000, 0.99);
  for (uint64_t items = 1001; items <= 3000; ++items)
    grown.Grow(items);
  grown.Grow(2'000'000);
  EXPECT_EQ(grown.items(), 2'000'000u);
  EXPECT_NEAR(grown.zeta_n() / Zipfian::Zeta(2'000'000, 0.99), 1, 1e-13);
  // YCSB's nextLong recomputes eta for the new zeta, but with the item
  // count of its constructor.
  EXPECT_NEAR(grown.eta() / YcsbEta(1000, 0.99, grown.zeta_n()), 1, 1e-12);
  // Which a generator built for 2M items does not share.
  const Zipfian fresh(2'000'000, 0.99);
  EXPECT_NEAR(fresh.eta() / YcsbEta(2'000'000, 0.99, fresh.zeta_n()), 1, 1e-12);
  EXPECT_GT(std::abs(fresh.eta() / grown.eta() - 1), 0.1);
  // Ranks 0 and 1 do not depend on eta: both draw them alike.
  Rng a(kSeed), b(kSeed);
  for (int i = 0; i < 10'000; ++i) {
    const uint64_t x = grown.Next(a), y = fresh.Next(b);
    ASSERT_LT(x, 2'000'000u);
    if (x < 2 || y < 2) {
      ASSERT_EQ(x, y) << i;
    }
  }
}

// Draws 2M ranks over 1000 items and compares with the exact distribution.
// Ranks 0 and 1 are exact in Gray's method; their frequencies have a
// sampling sd of 0.2% and 0.3% (relative) at theta 0.99, so 2% is ~8 sd.
// The tail is approximated. Integrating the method over u gives the total
// variation distance (TV) between what it draws and the exact distribution:
// 0.0161 at theta 0.99 (rank 2 comes 17% too often, rank 10 1%), 0.0034 at
// theta 0.5. Sampling 2M draws adds about 0.0064 and 0.0085 of TV on its
// own. Measured with kSeed: 0.0173 and 0.0099. The bounds are about the sum
// of both plus margin, and far below what a wrong skew gives (theta 0.9 vs
// 0.99 is a TV of 0.083, 0.4 vs 0.5 of 0.060).
void CheckZipfian(double theta, double max_total_variation) {
  SCOPED_TRACE(theta);
  constexpr uint64_t kItems = 1000;
  Zipfian zipfian(kItems, theta);
  Rng rng(kSeed);
  const std::vector<double> observed =
      Frequencies(kItems, 2'000'000, [&] { return zipfian.Next(rng); });
  const std::vector<double> exact = ExactZipfian(kItems, theta);
  EXPECT_NEAR(observed[0] / exact[0], 1, 0.02);
  EXPECT_NEAR(observed[1] / exact[1], 1, 0.02);
  EXPECT_LT(TotalVariation(observed, exact), max_total_variation);
}

TEST(Zipfian, MatchesTheExactDistribution) {
  CheckZipfian(0.99, 0.025);
  CheckZipfian(0.5, 0.015);
}

TEST(Zipfian, TheBoundsTellSkewsApart) {
  // The check above would notice a generator with the wrong skew.
  EXPECT_GT(TotalVariation(ExactZipfian(1000, 0.9), ExactZipfian(1000, 0.99)), 0.05);
  EXPECT_GT(TotalVariation(ExactZipfian(1000, 0.4), ExactZipfian(1000, 0.5)), 0.03);
}

TEST(Zipfian, DegenerateRanges) {
  Rng rng(kSeed);
  Zipfian one(1, 0.99);
  Zipfian two(2, 0.99);
  int ones = 0;
  for (int i = 0; i < 10'000; ++i) {
    ASSERT_EQ(one.Next(rng), 0u);
    const uint64_t rank = two.Next(rng);
    ASSERT_LT(rank, 2u);
    ones += rank == 1;
  }
  // P(1) = 2^-0.99 / (1 + 2^-0.99) = 0.3349.
  EXPECT_NEAR(ones / 10'000.0, 0.3349, 0.02);
}

// ---------------------------------------------------------------------------
// YCSB's distributions from their definitions, apart from bench/generators.*

// What YCSB's ZipfianGenerator.nextLong(itemcount) gives each rank, for u
// uniform in [0, 1): rank 0 if u * zetan < 1, rank 1 if u * zetan < 1 +
// 2^-theta, else floor(itemcount * x^alpha) with x = eta u - eta + 1,
// alpha = 1 / (1 - theta). Rank r >= 1 of that formula is
//   u in [U(r), U(r+1)),  U(r) = 1 - (1 - (r / itemcount)^(1-theta)) / eta,
// so its mass is U(r+1) - U(r) where above the bound of the first two.
struct GrayRanks {
  double itemcount;
  double theta;
  double zetan;
  double eta;

  double Bound() const { return std::min(1.0, (1 + std::pow(0.5, theta)) / zetan); }
  // (r / itemcount)^(1-theta), and its step to r + 1 without cancellation.
  double Power(double r) const { return std::pow(r / itemcount, 1 - theta); }
  double Step(double r) const {
    return r == 0 ? Power(1) : Power(r) * std::expm1((1 - theta) * std::log1p(1 / r));
  }
  double U(double r) const { return 1 - (1 - Power(r)) / eta; }
  double Mass(uint64_t rank) const {
    const auto r = static_cast<double>(rank);
    double mass = 0;
    if (rank == 0) mass = std::min(1.0, 1 / zetan);
    if (rank == 1) mass = Bound() - std::min(1.0, 1 / zetan);
    const double low = U(r), high = U(r + 1), bound = Bound();
    if (high <= bound) return mass;
    return mass + (low >= bound ? Step(r) / eta : high - bound);
  }
  // The mass of every rank >= `rank` (which must be above the bound's).
  double TailMass(uint64_t rank) const { return 1 - U(static_cast<double>(rank)); }
  // About sum over ranks >= `rank` of Mass^2, from Mass(r) ~ c r^-theta.
  double TailSquares(uint64_t rank) const {
    const double c = (1 - theta) / eta * std::pow(itemcount, theta - 1);
    return c * c * std::pow(static_cast<double>(rank), 1 - 2 * theta) / (2 * theta - 1);
  }
};

// YCSB's keychooser over `numbers` key numbers (ScrambledZipfianGenerator
// (insertstart, insertstart + insertcount + expectednewkeys): records +
// expected new keys + 1) when `count` keys exist: FNV of a rank among
// 10^10 + 1 modulo `numbers`, a number >= count drawn again (nextKeynum).
// The share of each existing key: ranks below `ranks` exactly, the rest
// spread evenly, whose error per key has a standard deviation of about
// *tail_sd (set here).
std::vector<double> YcsbZipfianShares(uint64_t numbers, uint64_t count, uint64_t ranks,
                                      double* tail_sd) {
  const double items = static_cast<double>(kYcsbItemCount) + 1;
  const GrayRanks gray{items, 0.99, kYcsbZetan, YcsbEta(items, 0.99, kYcsbZetan)};
  std::vector<double> mass(numbers, gray.TailMass(ranks) / static_cast<double>(numbers));
  for (uint64_t rank = 0; rank < ranks; ++rank)
    mass[FnvHash64(rank) % numbers] += gray.Mass(rank);
  mass.resize(count);
  double kept = 0;
  for (const double share : mass)
    kept += share;
  for (double& share : mass)
    share /= kept;
  *tail_sd = std::sqrt(gray.TailSquares(ranks) / static_cast<double>(numbers)) / kept;
  return mass;
}

// How far an observed share of `draws` may be from an expected share p:
// 5 standard deviations of sampling, plus 5 of the expectation's own error
// (`reference_sd`).
double Tolerance(double p, int draws, double reference_sd) {
  return 5 * std::sqrt(p * (1 - p) / draws + reference_sd * reference_sd);
}

// ---------------------------------------------------------------------------
// ScrambledZipfian

TEST(ScrambledZipfian, YcsbsRanksAmongTenBillionHashedWithFnv) {
  const ScrambledZipfian keys(ScrambledZipfian::Kind::kYcsb, 200'001, 0.99);
  EXPECT_EQ(keys.items(), 200'001u);
  EXPECT_EQ(keys.ranks().items(), kYcsbItemCount + 1);
  EXPECT_EQ(keys.ranks().zeta_n(), kYcsbZetan);
  EXPECT_NEAR(keys.ranks().eta() / YcsbEta(kYcsbItemCount + 1.0, 0.99, kYcsbZetan), 1, 1e-12);
  for (uint64_t rank : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{123'456}, kYcsbItemCount})
    EXPECT_EQ(keys.KeyOfRank(rank), FnvHash64(rank) % 200'001) << rank;
  // Another skew: zeta over the 10^10 + 1 items, as YCSB computes it then.
  const ScrambledZipfian other(ScrambledZipfian::Kind::kYcsb, 1000, 0.5);
  EXPECT_EQ(other.ranks().items(), kYcsbItemCount + 1);
  EXPECT_EQ(other.ranks().zeta_n(), Zipfian::Zeta(kYcsbItemCount + 1, 0.5));
  EXPECT_EQ(other.ranks().theta(), 0.5);
}

TEST(ScrambledZipfian, ExactSpreadsTheHotKeysWithAZipfiansProfile) {
  constexpr uint64_t kItems = 10'000;
  constexpr int kDraws = 2'000'000;
  ScrambledZipfian scrambled(ScrambledZipfian::Kind::kExact, kItems, 0.99);
  EXPECT_EQ(scrambled.ranks().items(), kItems);
  Zipfian plain(kItems, 0.99);
  Rng rng(kSeed);
  std::vector<double> s = Frequencies(kItems, kDraws, [&] { return scrambled.Next(rng); });
  std::vector<double> p = Frequencies(kItems, kDraws, [&] { return plain.Next(rng); });

  std::vector<uint64_t> keys(kItems);
  std::iota(keys.begin(), keys.end(), 0);
  std::partial_sort(keys.begin(), keys.begin() + 10, keys.end(),
                    [&](uint64_t x, uint64_t y) { return s[x] > s[y]; });
  const std::set<uint64_t> top(keys.begin(), keys.begin() + 10);
  const uint64_t span = *top.rbegin() - *top.begin();
  EXPECT_GT(span, kItems / 2);
  int adjacent = 0;
  for (uint64_t key : top)
    adjacent += top.count(key + 1);
  EXPECT_EQ(adjacent, 0);
  // The hottest key is rank 0's.
  EXPECT_EQ(keys[0], scrambled.KeyOfRank(0));

  // The same profile: sorting the frequencies undoes the scrambling. The
  // 10 hottest differ from plain zipfian's by under 1% (sampling sd about
  // 1% for the 10th), checked at 5%. Over all keys, TV 0.035 was measured:
  // sampling noise over 10000 keys, plus ranks whose hashes meet modulo
  // items sharing one key. A uniform generator gives 0.5.
  std::sort(s.rbegin(), s.rend());
  std::sort(p.rbegin(), p.rend());
  for (int i = 0; i < 10; ++i)
    EXPECT_NEAR(s[i] / p[i], 1, 0.05) << i;
  EXPECT_LT(TotalVariation(s, p), 0.06);
}

// ---------------------------------------------------------------------------
// KeyChooser

WorkloadSpec SpecWith(Distribution distribution, uint64_t records) {
  WorkloadSpec spec;
  spec.read_proportion = 1;
  spec.record_count = records;
  spec.request_distribution = distribution;
  return spec;
}

TEST(KeyChooser, ZipfianSharesAreYcsbs) {
  // YCSB's workloadc with recordcount=200000: what share of the operations
  // the hottest keys get. Expected from YCSB's definition (above), with
  // the first 4M ranks (1M under a sanitizer) exact.
  constexpr uint64_t kRecords = 200'000;
  const bool sanitizer = dmidx::testing::kAnySanitizer;
  const uint64_t ranks = sanitizer ? 1'000'000 : 4'000'000;
  const int draws = sanitizer ? 200'000 : 2'000'000;
  double tail_sd = 0;
  const std::vector<double> expected = YcsbZipfianShares(kRecords + 1, kRecords, ranks, &tail_sd);
  std::vector<uint64_t> hottest(kRecords);
  std::iota(hottest.begin(), hottest.end(), 0);
  std::partial_sort(hottest.begin(), hottest.begin() + 1000, hottest.end(),
                    [&](uint64_t a, uint64_t b) { return expected[a] > expected[b]; });
  // Rank 0's key is the hottest (its 1/zetan = 3.8% dwarfs any other).
  EXPECT_EQ(hottest[0], FnvHash64(0) % (kRecords + 1));

  WorkloadSpec spec = SpecWith(Distribution::kZipfian, kRecords);
  spec.operation_count = 2'000'000;
  KeyChooser chooser(spec);
  EXPECT_EQ(chooser.zipfian().items(), kRecords + 1);
  Rng rng(kSeed);
  const std::vector<double> observed =
      Frequencies(kRecords, draws, [&] { return chooser.Next(rng, kRecords); });

  for (int i = 0; i < 10; ++i) {
    const uint64_t key = hottest[i];
    EXPECT_NEAR(observed[key], expected[key], Tolerance(expected[key], draws, tail_sd))
        << "the " << i << "th hottest key, " << key;
  }
  double expected_outside = 1, observed_outside = 1;
  for (int i = 0; i < 1000; ++i) {
    expected_outside -= expected[hottest[i]];
    observed_outside -= observed[hottest[i]];
  }
  EXPECT_NEAR(observed_outside, expected_outside,
              Tolerance(expected_outside, draws, std::sqrt(1000.0) * tail_sd));
  RecordProperty("hottest_key_expected", std::to_string(expected[hottest[0]]));
  RecordProperty("hottest_key_observed", std::to_string(observed[hottest[0]]));
  RecordProperty("outside_hottest_1000_expected", std::to_string(expected_outside));
  RecordProperty("outside_hottest_1000_observed", std::to_string(observed_outside));
}

// YCSB's own workloade file (recordcount=1000, insertproportion=0.05) run
// for 10^6 operations: the zipfian spans 101,001 numbers, of which the
// 1000 records catch under 1% of the draws. YCSB draws again until a
// number exists, however often that takes; so does the bench (a cap of 64
// redraws once sent most draws to `number % count` instead).
TEST(KeyChooser, ZipfianDrawsAgainAsOftenAsYcsbDoes) {
  constexpr uint64_t kRecords = 1000;
  const bool sanitizer = dmidx::testing::kAnySanitizer;
  const int draws = sanitizer ? 20'000 : 200'000;
  WorkloadSpec spec = SpecWith(Distribution::kZipfian, kRecords);
  spec.read_proportion = 0;
  spec.scan_proportion = 0.95;
  spec.insert_proportion = 0.05;
  spec.operation_count = 1'000'000;
  KeyChooser chooser(spec);
  const uint64_t numbers = kRecords + 100'000 + 1;
  ASSERT_EQ(chooser.zipfian().items(), numbers);
  double tail_sd = 0;
  const std::vector<double> expected =
      YcsbZipfianShares(numbers, kRecords, sanitizer ? 1'000'000 : 4'000'000, &tail_sd);
  Rng rng(kSeed);
  const std::vector<double> observed =
      Frequencies(kRecords, draws, [&] { return chooser.Next(rng, kRecords); });
  std::vector<uint64_t> hottest(kRecords);
  std::iota(hottest.begin(), hottest.end(), 0);
  std::sort(hottest.begin(), hottest.end(),
            [&](uint64_t a, uint64_t b) { return expected[a] > expected[b]; });
  for (int i = 0; i < 5; ++i) {
    const uint64_t key = hottest[i];
    EXPECT_NEAR(observed[key], expected[key], Tolerance(expected[key], draws, tail_sd))
        << "the " << i << "th hottest key, " << key;
  }
  EXPECT_EQ(std::max_element(observed.begin(), observed.end()) - observed.begin(),
            static_cast<std::ptrdiff_t>(hottest[0]));
}

TEST(KeyChooser, ZipfianKeyRangeIsYcsbsOrTheExpectedKeys) {
  WorkloadSpec spec = SpecWith(Distribution::kZipfian, 1'000'000);
  spec.read_proportion = 0.95;
  spec.insert_proportion = 0.05;
  spec.operation_count = 3'000'000;
  // insertstart + insertcount + expectednewkeys, both ends in: 10^6 +
  // (int) (3 * 10^6 * 0.05 * 2.0) + 1.
  EXPECT_EQ(KeyChooser(spec).zipfian().items(), 1'000'000u + 300'000 + 1);
  spec.insert_start = 400'000;
  EXPECT_EQ(KeyChooser(spec).zipfian().items(), 600'000u + 300'000 + 1);
  spec.zipfian = ZipfianKind::kExact;
  EXPECT_EQ(KeyChooser(spec).zipfian().items(), spec.LoadedRecords() + spec.ExpectedNewKeys());
  EXPECT_EQ(KeyChooser(spec).zipfian().ranks().items(), 600'000u + spec.ExpectedNewKeys());
}

TEST(KeyChooser, ZipfianStaysBelowCountAndKeepsItsHotKeys) {
  // 10000 records, and YCSB's zipfian spread over 20001 numbers (10000
  // expected new keys: 10000 operations, half inserts, times 2): numbers
  // >= count are drawn again, so which keys are hot does not depend on
  // count.
  for (ZipfianKind kind : {ZipfianKind::kYcsb, ZipfianKind::kExact}) {
    SCOPED_TRACE(ZipfianKindName(kind));
    WorkloadSpec spec = SpecWith(Distribution::kZipfian, 10'000);
    spec.operation_count = 10'000;
    spec.read_proportion = spec.insert_proportion = 0.5;
    spec.zipfian = kind;
    KeyChooser chooser(spec);
    Rng rng(kSeed);
    const std::vector<double> f =
        Frequencies(10'000, 500'000, [&] { return chooser.Next(rng, 10'000); });
    // Rank 0's key may not exist yet; the hottest existing key is that of
    // the first rank whose key is below 10000.
    uint64_t rank = 0;
    while (chooser.zipfian().KeyOfRank(rank) >= 10'000)
      ++rank;
    const uint64_t hottest = std::max_element(f.begin(), f.end()) - f.begin();
    EXPECT_EQ(hottest, chooser.zipfian().KeyOfRank(rank)) << "rank " << rank;
    // One existing key: every draw is it, however many redraws that takes
    // (YCSB's range here is 20001 numbers: thousands of draws each).
    for (int i = 0; i < 50; ++i)
      ASSERT_EQ(chooser.Next(rng, 1), 0u);
  }
}

TEST(KeyChooser, LatestIsYcsbsSkewedLatest) {
  // SkewedLatestGenerator over the acknowledged counter: with the newest
  // key numbered last = count - 1, a zipfian over `last` ranks (zeta of
  // last items) and key last - rank; eta keeps the count the zipfian was
  // built with (recordcount - 1 = 9999) as the counter grows.
  KeyChooser chooser(SpecWith(Distribution::kLatest, 10'000));
  const int draws = dmidx::testing::kAnySanitizer ? 100'000 : 500'000;
  Rng rng(kSeed);
  for (uint64_t count : {uint64_t{10'000}, uint64_t{20'000}}) {
    SCOPED_TRACE(count);
    const double last = static_cast<double>(count - 1);
    const double zetan = Zipfian::Zeta(count - 1, 0.99);
    const GrayRanks gray{last, 0.99, zetan, YcsbEta(9999, 0.99, zetan)};
    const std::vector<double> f =
        Frequencies(count, draws, [&] { return chooser.Next(rng, count); });
    // Ranks stay below last: YCSB never draws key 0.
    EXPECT_EQ(f[0], 0);
    EXPECT_EQ(std::max_element(f.begin(), f.end()) - f.begin(), static_cast<long>(count - 1));
    for (uint64_t newest : {1, 2, 10, 1000}) {
      double expected = 0;
      for (uint64_t rank = 0; rank < newest; ++rank)
        expected += gray.Mass(rank);
      const double observed = std::accumulate(f.end() - static_cast<long>(newest), f.end(), 0.0);
      EXPECT_NEAR(observed, expected, Tolerance(expected, draws, 0)) << "newest " << newest;
    }
  }
  // With eta from 19999 items instead, the newest 10 keys would get 0.289
  // of the draws, not 0.233: the check above tells the two apart.
  const double zetan = Zipfian::Zeta(19'999, 0.99);
  const GrayRanks kept{19'999, 0.99, zetan, YcsbEta(9999, 0.99, zetan)};
  const GrayRanks fresh{19'999, 0.99, zetan, YcsbEta(19'999, 0.99, zetan)};
  EXPECT_GT(fresh.U(10) - kept.U(10), 0.05);
}

TEST(KeyChooser, LatestBelowInsertStartIsDrawnAgain) {
  // Records 5000..9999 (insertstart 5000): YCSB's zipfian spans 9999 ranks
  // below the newest key, half of them below insertstart, which this run
  // did not load: those are drawn again, the rest keep their shares.
  WorkloadSpec spec = SpecWith(Distribution::kLatest, 10'000);
  spec.insert_start = 5000;
  KeyChooser chooser(spec);
  Rng rng(kSeed);
  const std::vector<double> f = Frequencies(5000, 200'000, [&] { return chooser.Next(rng, 5000); });
  EXPECT_EQ(std::max_element(f.begin(), f.end()) - f.begin(), 4999);
  // Rank 0 over 9999 items, renormalized to the ranks below 5000.
  const double zetan = Zipfian::Zeta(9999, 0.99);
  const GrayRanks gray{9999, 0.99, zetan, YcsbEta(9999, 0.99, zetan)};
  const double kept = gray.U(5000);
  EXPECT_NEAR(f[4999], gray.Mass(0) / kept, Tolerance(gray.Mass(0) / kept, 200'000, 0));
}

TEST(KeyChooser, HotspotIsYcsbsOverTheRecords) {
  WorkloadSpec spec = SpecWith(Distribution::kHotspot, 10'000);
  spec.hotspot_data_fraction = 0.2;
  spec.hotspot_operation_fraction = 0.8;
  KeyChooser chooser(spec);
  Rng rng(kSeed);
  // 10000 keys inserted since: YCSB's HotspotIntegerGenerator spans the
  // records (insertstart .. insertstart + insertcount - 1) only.
  const std::vector<double> f =
      Frequencies(20'000, 1'000'000, [&] { return chooser.Next(rng, 20'000); });
  EXPECT_EQ(std::accumulate(f.begin() + 10'000, f.end(), 0.0), 0);
  // The first 2000 keys get 80% (sd 0.0004), each about 0.8/2000.
  EXPECT_NEAR(std::accumulate(f.begin(), f.begin() + 2'000, 0.0), 0.8, 0.005);
  EXPECT_NEAR(*std::max_element(f.begin(), f.begin() + 2'000), 0.0004, 0.0001);
  EXPECT_NEAR(*std::min_element(f.begin() + 2'000, f.begin() + 10'000), 0.2 / 8'000, 0.0001);
}

TEST(KeyChooser, HotspotsHotSetIsAJavaInt) {
  // (int) (interval * hotsetfraction) saturates at 2^31 - 1: of 2^33
  // records at a fraction of 0.5, the hot set is 2^31 - 1 keys, not 2^32.
  WorkloadSpec spec = SpecWith(Distribution::kHotspot, uint64_t{1} << 33);
  spec.hotspot_data_fraction = 0.5;
  spec.hotspot_operation_fraction = 1;
  KeyChooser chooser(spec);
  Rng rng(kSeed);
  uint64_t highest = 0;
  for (int i = 0; i < 10'000; ++i)
    highest = std::max(highest, chooser.Next(rng, uint64_t{1} << 33));
  EXPECT_LT(highest, uint64_t{std::numeric_limits<int32_t>::max()});
  EXPECT_GT(highest, uint64_t{std::numeric_limits<int32_t>::max()} / 10 * 9);
}

TEST(KeyChooser, HotspotEdgeFractions) {
  Rng rng(kSeed);
  struct Case {
    double data, operations;
    uint64_t count;
    double expected_below_half;  // share of draws in the first half of [0, count)
  };
  // Where one set is empty YCSB divides by zero; every draw goes to the
  // other set instead.
  for (const Case& c : {Case{0, 0.8, 1000, 0.5},  // no hot keys: all uniform
                        Case{1, 0.3, 1000, 0.5},  // all keys hot
                        Case{0.5, 1, 1000, 1},    // every operation hot
                        Case{0.5, 0, 1000, 0},    // none hot
                        Case{0.2, 0.8, 1, 1}}) {  // one key: always key 0
    SCOPED_TRACE(::testing::Message() << c.data << " " << c.operations << " " << c.count);
    WorkloadSpec spec = SpecWith(Distribution::kHotspot, 1000);
    spec.hotspot_data_fraction = c.data;
    spec.hotspot_operation_fraction = c.operations;
    KeyChooser chooser(spec);
    int below_half = 0;
    for (int i = 0; i < 100'000; ++i) {
      const uint64_t key = chooser.Next(rng, c.count);
      ASSERT_LT(key, c.count);
      below_half += key < (c.count + 1) / 2;
    }
    EXPECT_NEAR(below_half / 100'000.0, c.expected_below_half, 0.01);
  }
}

TEST(KeyChooser, UniformIsFlatOverTheRecords) {
  KeyChooser chooser(SpecWith(Distribution::kUniform, 100));
  Rng rng(kSeed);
  constexpr int kDraws = 1'000'000;
  const std::vector<double> f = Frequencies(100, kDraws, [&] { return chooser.Next(rng, 100); });
  double chi_square = 0;
  for (double frequency : f)
    chi_square += std::pow(frequency * kDraws - 1e4, 2) / 1e4;
  EXPECT_LT(chi_square, 180);  // as in Rng.BelowIsFlat
  // YCSB's UniformLongGenerator spans the records, not the keys inserted
  // since; fewer keys than records (none loaded) bound it too.
  uint64_t highest = 0, highest_of_fewer = 0;
  for (int i = 0; i < 10'000; ++i) {
    highest = std::max(highest, chooser.Next(rng, 150));
    highest_of_fewer = std::max(highest_of_fewer, chooser.Next(rng, 50));
  }
  EXPECT_EQ(highest, 99u);
  EXPECT_EQ(highest_of_fewer, 49u);
}

TEST(KeyChooser, SameSeedSameKeys) {
  for (Distribution distribution : {Distribution::kUniform, Distribution::kZipfian,
                                    Distribution::kLatest, Distribution::kHotspot}) {
    KeyChooser a(SpecWith(distribution, 1000)), b(SpecWith(distribution, 1000));
    Rng rng_a(kSeed), rng_b(kSeed);
    for (uint64_t i = 0; i < 2000; ++i) {
      ASSERT_EQ(a.Next(rng_a, 1000 + i / 2), b.Next(rng_b, 1000 + i / 2))
          << DistributionName(distribution) << " " << i;
    }
  }
}

// ---------------------------------------------------------------------------
// ScanLengthChooser, OperationChooser

TEST(ScanLengthChooser, LengthsStayInRange) {
  Rng rng(kSeed);
  for (Distribution distribution : {Distribution::kUniform, Distribution::kZipfian}) {
    SCOPED_TRACE(DistributionName(distribution));
    WorkloadSpec spec;
    spec.min_scan_length = 10;
    spec.max_scan_length = 109;
    spec.scan_length_distribution = distribution;
    spec.zipfian_constant = 0.5;  // the request zipfian's, not the scan lengths'
    const ScanLengthChooser chooser(spec);
    std::vector<int> counts(110, 0);
    for (int i = 0; i < 200'000; ++i) {
      const uint32_t length = chooser.Next(rng);
      ASSERT_GE(length, 10u);
      ASSERT_LE(length, 109u);
      ++counts[length];
    }
    EXPECT_GT(counts[10], 0);
    EXPECT_GT(counts[109], 0);
    if (distribution == Distribution::kUniform) {
      // 2000 each, sd 45.
      EXPECT_NEAR(counts[10], 2000, 300);
      EXPECT_NEAR(counts[109], 2000, 300);
    } else {
      // Shorter more likely: the shortest is zipfian rank 0, 1/zeta(100) =
      // 18.9% of scans at YCSB's 0.99 (5.4% at 0.5), about 95 times the
      // longest.
      EXPECT_NEAR(counts[10] / 200'000.0, 0.189, 0.01);
      EXPECT_GT(counts[10], counts[11]);
      EXPECT_GT(counts[11], counts[12]);
      EXPECT_GT(counts[10], 10 * counts[109]);
    }
  }
  WorkloadSpec fixed;
  fixed.min_scan_length = fixed.max_scan_length = 100;
  for (Distribution distribution : {Distribution::kUniform, Distribution::kZipfian}) {
    fixed.scan_length_distribution = distribution;
    const ScanLengthChooser chooser(fixed);
    for (int i = 0; i < 1000; ++i)
      ASSERT_EQ(chooser.Next(rng), 100u);
  }
}

TEST(OperationChooser, DrawsTheWorkloadsProportions) {
  // 1M draws: the sd of a share is at most 0.0005; checked at 0.003.
  for (const char* name : {"a", "b", "e", "f", "write-only", "write-intensive", "read-intensive",
                           "range-only", "range-write"}) {
    SCOPED_TRACE(name);
    const StatusOr<WorkloadSpec> spec = FindWorkload(name);
    ASSERT_TRUE(spec.ok());
    const OperationChooser chooser(*spec);
    Rng rng(kSeed);
    int counts[kOpTypes] = {};
    constexpr int kDraws = 1'000'000;
    for (int i = 0; i < kDraws; ++i)
      ++counts[static_cast<size_t>(chooser.Next(rng))];
    for (size_t op = 0; op < kOpTypes; ++op) {
      const double expected = spec->Proportion(static_cast<OpType>(op)) / spec->TotalProportion();
      if (expected == 0) {
        EXPECT_EQ(counts[op], 0) << OpTypeName(static_cast<OpType>(op));
      } else {
        EXPECT_NEAR(counts[op] / double{kDraws}, expected, 0.003)
            << OpTypeName(static_cast<OpType>(op));
      }
    }
  }
}

TEST(OperationChooser, NormalizesAndNeverDrawsAZeroShare) {
  WorkloadSpec spec;
  spec.update_proportion = 3;
  spec.scan_proportion = 1;  // last positive share; rmw after it has 0
  const OperationChooser chooser(spec);
  Rng rng(kSeed);
  int updates = 0;
  for (int i = 0; i < 100'000; ++i) {
    const OpType op = chooser.Next(rng);
    ASSERT_TRUE(op == OpType::kUpdate || op == OpType::kScan) << OpTypeName(op);
    updates += op == OpType::kUpdate;
  }
  EXPECT_NEAR(updates / 100'000.0, 0.75, 0.01);
}

}  // namespace
}  // namespace dmidx::bench
