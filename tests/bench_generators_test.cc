// The random choices of dmidx-ycsb: the Rng, YCSB's hash, the key, scan
// length and operation distributions. Every test draws from a fixed seed,
// so each is deterministic; the tolerances still leave room for other
// seeds (stated with each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "bench/generators.h"

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

TEST(Zipfian, GrowEqualsBuildingAnew) {
  Zipfian grown(1000, 0.99);
  for (uint64_t items = 1001; items <= 3000; ++items)
    grown.Grow(items);
  grown.Grow(2'000'000);
  EXPECT_EQ(grown.items(), 2'000'000u);
  const Zipfian fresh(2'000'000, 0.99);
  Rng a(kSeed), b(kSeed);
  for (int i = 0; i < 10'000; ++i)
    ASSERT_EQ(grown.Next(a), fresh.Next(b)) << i;
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

TEST(ScrambledZipfian, SpreadsTheHotKeysWithTheSameProfile) {
  constexpr uint64_t kItems = 10'000;
  constexpr int kDraws = 2'000'000;
  ScrambledZipfian scrambled(kItems, 0.99);
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
  // The hottest key is rank 0's: ScrambledZipfian::KeyOfRank(0, items).
  EXPECT_EQ(keys[0], ScrambledZipfian::KeyOfRank(0, kItems));

  // The same profile: sorting the frequencies undoes the scrambling. The
  // 10 hottest differ from plain zipfian's by under 1% (sampling sd about
  // 1% for the 10th), checked at 5%. Over all keys, TV 0.035 was measured:
  // sampling noise over 10000 keys, plus ranks whose hashes meet modulo
  // items sharing one key (as in YCSB). A uniform generator gives 0.5.
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

TEST(KeyChooser, ZipfianStaysBelowCountAndKeepsItsHotKeys) {
  // Built for 20000 keys, of which 10000 exist: numbers >= count are drawn
  // again, so which keys are hot does not depend on count.
  KeyChooser chooser(SpecWith(Distribution::kZipfian, 10'000), 20'000);
  Rng rng(kSeed);
  const std::vector<double> f =
      Frequencies(10'000, 500'000, [&] { return chooser.Next(rng, 10'000); });
  // Rank 0's key may not exist yet (KeyOfRank(0, 20000) >= 10000); the
  // hottest existing key is that of the first rank hashed below 10000.
  uint64_t rank = 0;
  while (ScrambledZipfian::KeyOfRank(rank, 20'000) >= 10'000)
    ++rank;
  const uint64_t hottest = std::max_element(f.begin(), f.end()) - f.begin();
  EXPECT_EQ(hottest, ScrambledZipfian::KeyOfRank(rank, 20'000)) << "rank " << rank;
  // Redrawing raises its share above what it has over all 20000 keys.
  EXPECT_GT(f[hottest], ExactZipfian(20'000, 0.99)[rank]);
  // One existing key: every draw is it, however many redraws that takes.
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(chooser.Next(rng, 1), 0u);
}

TEST(KeyChooser, LatestFavoursRecentInsertsAndFollowsThem) {
  KeyChooser chooser(SpecWith(Distribution::kLatest, 10'000), 20'000);
  Rng rng(kSeed);
  std::vector<double> f = Frequencies(10'000, 500'000, [&] { return chooser.Next(rng, 10'000); });
  EXPECT_EQ(std::max_element(f.begin(), f.end()) - f.begin(), 9'999);
  // Exactly, P(rank < 1000) = zeta(1000) / zeta(10000) = 0.756 at theta
  // 0.99 and P(rank < 10) = 0.289; Gray's method gives ranks 2..9 a little
  // too much (measured 0.762 and 0.303; sampling sd 0.0007), hence 0.025.
  EXPECT_NEAR(std::accumulate(f.begin() + 9'000, f.end(), 0.0), 0.756, 0.025);
  EXPECT_NEAR(std::accumulate(f.begin() + 9'990, f.end(), 0.0), 0.289, 0.025);
  // 10000 inserts later the hot spot has moved to the new keys.
  f = Frequencies(20'000, 500'000, [&] { return chooser.Next(rng, 20'000); });
  EXPECT_EQ(std::max_element(f.begin(), f.end()) - f.begin(), 19'999);
  // Measured 0.932 on the new keys; key 9999 went from hottest to 6e-6.
  EXPECT_GT(std::accumulate(f.begin() + 10'000, f.end(), 0.0), 0.9);
  EXPECT_LT(f[9'999], f[19'999] / 100);
}

TEST(KeyChooser, HotspotSendsItsShareToTheHotKeys) {
  WorkloadSpec spec = SpecWith(Distribution::kHotspot, 10'000);
  spec.hotspot_data_fraction = 0.2;
  spec.hotspot_operation_fraction = 0.8;
  KeyChooser chooser(spec, 10'000);
  Rng rng(kSeed);
  const std::vector<double> f =
      Frequencies(10'000, 1'000'000, [&] { return chooser.Next(rng, 10'000); });
  // The first 2000 keys get 80% (sd 0.0004), each about 0.8/2000.
  EXPECT_NEAR(std::accumulate(f.begin(), f.begin() + 2'000, 0.0), 0.8, 0.005);
  EXPECT_NEAR(*std::max_element(f.begin(), f.begin() + 2'000), 0.0004, 0.0001);
  EXPECT_NEAR(*std::min_element(f.begin() + 2'000, f.end()), 0.2 / 8'000, 0.0001);
}

TEST(KeyChooser, HotspotEdgeFractions) {
  Rng rng(kSeed);
  struct Case {
    double data, operations;
    uint64_t count;
    double expected_below_half;  // share of draws in the first half of [0, count)
  };
  for (const Case& c : {Case{0, 0.8, 1000, 0.5},  // no hot keys: all uniform
                        Case{1, 0.3, 1000, 0.5},  // all keys hot
                        Case{0.5, 1, 1000, 1},    // every operation hot
                        Case{0.5, 0, 1000, 0},    // none hot
                        Case{0.2, 0.8, 1, 1}}) {  // one key: always key 0
    SCOPED_TRACE(testing::Message() << c.data << " " << c.operations << " " << c.count);
    WorkloadSpec spec = SpecWith(Distribution::kHotspot, 1000);
    spec.hotspot_data_fraction = c.data;
    spec.hotspot_operation_fraction = c.operations;
    KeyChooser chooser(spec, 1000);
    int below_half = 0;
    for (int i = 0; i < 100'000; ++i) {
      const uint64_t key = chooser.Next(rng, c.count);
      ASSERT_LT(key, c.count);
      below_half += key < (c.count + 1) / 2;
    }
    EXPECT_NEAR(below_half / 100'000.0, c.expected_below_half, 0.01);
  }
}

TEST(KeyChooser, UniformIsFlatAndFollowsCount) {
  KeyChooser chooser(SpecWith(Distribution::kUniform, 100), 100);
  Rng rng(kSeed);
  constexpr int kDraws = 1'000'000;
  const std::vector<double> f = Frequencies(100, kDraws, [&] { return chooser.Next(rng, 100); });
  double chi_square = 0;
  for (double frequency : f)
    chi_square += std::pow(frequency * kDraws - 1e4, 2) / 1e4;
  EXPECT_LT(chi_square, 180);  // as in Rng.BelowIsFlat
  uint64_t max_key = 0;
  for (int i = 0; i < 10'000; ++i)
    max_key = std::max(max_key, chooser.Next(rng, 150));
  EXPECT_EQ(max_key, 149u);
}

TEST(KeyChooser, SameSeedSameKeys) {
  for (Distribution distribution : {Distribution::kUniform, Distribution::kZipfian,
                                    Distribution::kLatest, Distribution::kHotspot}) {
    KeyChooser a(SpecWith(distribution, 1000), 2000), b(SpecWith(distribution, 1000), 2000);
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
      // 18.9% of scans at theta 0.99, about 95 times the longest.
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
