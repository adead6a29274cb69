#include "testing/zipf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace dmidx::testing {
namespace {

// Frequencies of `draws` ranks.
std::vector<double> Frequencies(const Zipf& zipf, int draws, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> counts(zipf.size());
  for (int i = 0; i < draws; ++i) {
    const uint64_t rank = zipf(rng);
    EXPECT_LT(rank, zipf.size());
    if (rank < counts.size()) counts[rank] += 1;
  }
  for (double& count : counts)
    count /= draws;
  return counts;
}

TEST(ZipfTest, ProbabilitiesFollowThePowerLawAndSumToOne) {
  const Zipf zipf(1000, 0.99);
  double sum = 0;
  for (uint64_t rank = 0; rank < zipf.size(); ++rank)
    sum += zipf.Probability(rank);
  EXPECT_NEAR(sum, 1.0, 1e-9);
  for (const uint64_t rank : {1u, 9u, 99u, 999u}) {
    EXPECT_NEAR(zipf.Probability(0) / zipf.Probability(rank), std::pow(rank + 1.0, 0.99), 1e-6);
  }
}

TEST(ZipfTest, DrawnFrequenciesMatchTheProbabilities) {
  const Zipf zipf(16, 0.99);
  constexpr int kDraws = 200000;
  const std::vector<double> seen = Frequencies(zipf, kDraws, 5);
  for (uint64_t rank = 0; rank < zipf.size(); ++rank) {
    const double p = zipf.Probability(rank);
    const double sigma = std::sqrt(p * (1 - p) / kDraws);
    EXPECT_NEAR(seen[rank], p, 5 * sigma) << "rank " << rank;
  }
  EXPECT_GT(seen[0], seen[1]);
  EXPECT_GT(seen[1], seen[15]);
}

TEST(ZipfTest, ThetaZeroIsUniform) {
  const Zipf zipf(8, 0.0);
  constexpr int kDraws = 80000;
  const std::vector<double> seen = Frequencies(zipf, kDraws, 9);
  for (uint64_t rank = 0; rank < zipf.size(); ++rank) {
    EXPECT_DOUBLE_EQ(zipf.Probability(rank), 0.125);
    EXPECT_NEAR(seen[rank], 0.125, 0.01) << "rank " << rank;
  }
}

TEST(ZipfTest, DeterministicForAGeneratorState) {
  const Zipf zipf(100, 0.99);
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(zipf(a), zipf(b));
  const Zipf one(1, 0.99);
  EXPECT_EQ(one(a), 0u);
}

}  // namespace
}  // namespace dmidx::testing
