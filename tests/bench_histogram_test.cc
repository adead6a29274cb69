// The bench's latency histogram: bucket boundaries, percentiles against an
// exact sorted reference, merging and the sparse form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/histogram.h"

namespace dmidx::bench {
namespace {

constexpr double kPercentiles[] = {0, 50, 90, 99, 99.9, 100};

// The value a percentile names in sorted `values`: the ceil(p/100 * n)-th
// smallest, at least the first.
uint64_t ExactPercentile(const std::vector<uint64_t>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

Histogram HistogramOf(const std::vector<uint64_t>& values) {
  Histogram histogram;
  for (uint64_t value : values)
    histogram.Record(value);
  return histogram;
}

// Everything observable about a histogram, for equality checks.
void ExpectSameHistogram(const Histogram& actual, const Histogram& expected) {
  EXPECT_EQ(actual.count(), expected.count());
  EXPECT_EQ(actual.min(), expected.min());
  EXPECT_EQ(actual.max(), expected.max());
  EXPECT_EQ(actual.mean(), expected.mean());
  for (double p : kPercentiles)
    EXPECT_EQ(actual.Percentile(p), expected.Percentile(p)) << p;
  const Histogram::Sparse a = actual.ToSparse();
  const Histogram::Sparse b = expected.ToSparse();
  EXPECT_EQ(a.buckets, b.buckets);
  EXPECT_EQ(a.sum, b.sum);
}

// The values that sit on or next to bucket boundaries, plus kMaxTrackable.
std::vector<uint64_t> BoundaryValues() {
  std::vector<uint64_t> values = {0, 1, 126, 127, 128, 129, Histogram::kMaxTrackable};
  for (int bit = 1; bit < 64; ++bit) {
    const uint64_t power = uint64_t{1} << bit;
    values.insert(values.end(), {power - 1, power, power + 1});
  }
  return values;
}

TEST(BenchHistogramTest, BucketsTileTheTrackableRangeWithoutGaps) {
  EXPECT_EQ(Histogram::BucketLow(0), 0u);
  EXPECT_EQ(Histogram::BucketHigh(Histogram::kBuckets - 1), Histogram::kMaxTrackable);
  for (uint32_t bucket = 0; bucket < Histogram::kBuckets; ++bucket) {
    SCOPED_TRACE(bucket);
    const uint64_t low = Histogram::BucketLow(bucket);
    const uint64_t high = Histogram::BucketHigh(bucket);
    ASSERT_LE(low, high);
    EXPECT_EQ(Histogram::BucketOf(low), bucket);
    EXPECT_EQ(Histogram::BucketOf(high), bucket);
    if (bucket + 1 < Histogram::kBuckets) {
      EXPECT_EQ(high + 1, Histogram::BucketLow(bucket + 1));
    }
    // Exact below 128; above, a width of at most 1/64 of the bucket's values.
    if (low < 128) {
      EXPECT_EQ(low, high);
    } else {
      EXPECT_LE((high - low + 1) * 64, low);
    }
  }
}

TEST(BenchHistogramTest, EveryValueFallsInsideItsBucket) {
  std::vector<uint64_t> values = BoundaryValues();
  std::mt19937_64 random(7);
  for (int i = 0; i < 100000; ++i)
    values.push_back(random() >> (random() % 64));
  for (uint64_t value : values) {
    SCOPED_TRACE(value);
    const uint32_t bucket = Histogram::BucketOf(value);
    ASSERT_LT(bucket, Histogram::kBuckets);
    if (value > Histogram::kMaxTrackable) {
      EXPECT_EQ(bucket, Histogram::kBuckets - 1);
      continue;
    }
    EXPECT_LE(Histogram::BucketLow(bucket), value);
    EXPECT_GE(Histogram::BucketHigh(bucket), value);
  }
}

TEST(BenchHistogramTest, SmallValuesAreExact) {
  std::vector<uint64_t> values;
  for (uint64_t value = 0; value < 128; ++value) {
    EXPECT_EQ(Histogram::BucketOf(value), value);
    for (uint64_t copy = 0; copy <= value % 3; ++copy)
      values.push_back(value);
  }
  const Histogram histogram = HistogramOf(values);
  std::sort(values.begin(), values.end());
  for (double p = 0; p <= 100; p += 0.5) {
    EXPECT_EQ(histogram.Percentile(p), ExactPercentile(values, p)) << p;
  }
  EXPECT_EQ(histogram.min(), 0u);
  EXPECT_EQ(histogram.max(), 127u);
}

struct NamedDistribution {
  const char* name;
  std::function<uint64_t(std::mt19937_64&)> draw;
};

std::vector<NamedDistribution> Distributions() {
  return {
      {"uniform small",
       [](std::mt19937_64& random) {
         return std::uniform_int_distribution<uint64_t>(0, 1000)(random);
       }},
      {"exponential ~50 us",
       [](std::mt19937_64& random) {
         return static_cast<uint64_t>(std::exponential_distribution<double>(1 / 50000.0)(random));
       }},
      // Log-uniform from 1 ns to 100 s: every power of two in between.
      {"heavy-tailed ns..s",
       [](std::mt19937_64& random) {
         return static_cast<uint64_t>(
             std::exp(std::uniform_real_distribution<double>(0, std::log(1e11))(random)));
       }},
      {"pareto",
       [](std::mt19937_64& random) {
         const double u = std::uniform_real_distribution<double>(1e-9, 1)(random);
         return static_cast<uint64_t>(1000 * std::pow(u, -1 / 1.2));
       }},
  };
}

TEST(BenchHistogramTest, PercentilesAreWithinOneBucketOfTheExactValue) {
  for (const NamedDistribution& distribution : Distributions()) {
    for (size_t count : {1, 2, 3, 10, 1000, 200000}) {
      SCOPED_TRACE(std::string(distribution.name) + ", " + std::to_string(count) + " values");
      std::mt19937_64 random(count);
      std::vector<uint64_t> values(count);
      for (uint64_t& value : values)
        value = distribution.draw(random);
      const Histogram histogram = HistogramOf(values);
      std::sort(values.begin(), values.end());
      EXPECT_EQ(histogram.count(), count);
      EXPECT_EQ(histogram.min(), values.front());
      EXPECT_EQ(histogram.max(), values.back());
      for (double p : kPercentiles) {
        SCOPED_TRACE(p);
        const uint64_t exact = ExactPercentile(values, p);
        const uint64_t got = histogram.Percentile(p);
        EXPECT_GE(got, Histogram::BucketLow(Histogram::BucketOf(exact)));
        EXPECT_GE(got, exact);
        EXPECT_LE(got, Histogram::BucketHigh(Histogram::BucketOf(exact)));
        EXPECT_LE(static_cast<double>(got - exact), static_cast<double>(exact) / 64);
        if (exact < 128) {
          EXPECT_EQ(got, exact);
        }
      }
      EXPECT_EQ(histogram.Percentile(100), values.back());
    }
  }
}

TEST(BenchHistogramTest, MeanIsExact) {
  const Histogram histogram = HistogramOf({1, 2, 1000, 123456789});
  EXPECT_DOUBLE_EQ(histogram.mean(), (1 + 2 + 1000 + 123456789) / 4.0);
}

TEST(BenchHistogramTest, EmptyHistogramReadsZero) {
  const Histogram histogram;
  EXPECT_EQ(histogram.count(), 0u);
  EXPECT_EQ(histogram.min(), 0u);
  EXPECT_EQ(histogram.max(), 0u);
  EXPECT_EQ(histogram.mean(), 0.0);
  EXPECT_EQ(histogram.Percentile(50), 0u);
  EXPECT_TRUE(histogram.ToSparse().buckets.empty());
}

TEST(BenchHistogramTest, ZeroPercentileIsTheMinimumsBucketCappedAtMax) {
  const Histogram histogram = HistogramOf({1000, 5000});
  EXPECT_EQ(histogram.Percentile(0), Histogram::BucketHigh(Histogram::BucketOf(1000)));
  EXPECT_EQ(HistogramOf({1000}).Percentile(0), 1000u);
  EXPECT_EQ(HistogramOf({1000}).Percentile(-5), 1000u);
  EXPECT_EQ(histogram.Percentile(250), 5000u);
}

TEST(BenchHistogramTest, ValuesAboveTheTrackableRangeKeepAnExactMax) {
  const uint64_t huge = Histogram::kMaxTrackable * 3;
  const Histogram histogram = HistogramOf({10, Histogram::kMaxTrackable + 1, huge});
  EXPECT_EQ(Histogram::BucketOf(Histogram::kMaxTrackable + 1), Histogram::kBuckets - 1);
  EXPECT_EQ(Histogram::BucketOf(UINT64_MAX), Histogram::kBuckets - 1);
  EXPECT_EQ(histogram.max(), huge);
  EXPECT_EQ(histogram.Percentile(100), huge);
  // The top bucket's values are reported as max(), never below the real one.
  EXPECT_EQ(histogram.Percentile(50), huge);
  EXPECT_EQ(histogram.Percentile(10), 10u);
  const Histogram::Sparse sparse = histogram.ToSparse();
  ASSERT_EQ(sparse.buckets.size(), 2u);
  EXPECT_EQ(sparse.buckets.back(), std::make_pair(Histogram::kBuckets - 1, uint64_t{2}));
}

std::vector<uint64_t> HeavyTailedValues(uint64_t seed, size_t count) {
  std::mt19937_64 random(seed);
  std::vector<uint64_t> values(count);
  for (uint64_t& value : values)
    value = Distributions()[2].draw(random);
  return values;
}

TEST(BenchHistogramTest, MergeEqualsTheHistogramOfAllValues) {
  const std::vector<uint64_t> first = HeavyTailedValues(1, 5000);
  const std::vector<uint64_t> second = HeavyTailedValues(2, 7000);
  std::vector<uint64_t> all = first;
  all.insert(all.end(), second.begin(), second.end());

  Histogram merged = HistogramOf(first);
  merged.Merge(HistogramOf(second));
  ExpectSameHistogram(merged, HistogramOf(all));

  // Merging an empty histogram changes nothing (its min is UINT64_MAX).
  Histogram with_empty = HistogramOf(first);
  with_empty.Merge(Histogram());
  ExpectSameHistogram(with_empty, HistogramOf(first));
  Histogram into_empty;
  into_empty.Merge(HistogramOf(first));
  ExpectSameHistogram(into_empty, HistogramOf(first));
}

TEST(BenchHistogramTest, SparseFormRoundTrips) {
  const Histogram original = HistogramOf(HeavyTailedValues(3, 10000));
  const Histogram::Sparse sparse = original.ToSparse();
  EXPECT_TRUE(std::is_sorted(sparse.buckets.begin(), sparse.buckets.end()));
  for (const auto& [bucket, count] : sparse.buckets)
    EXPECT_GT(count, 0u) << bucket;
  EXPECT_EQ(sparse.min, original.min());
  EXPECT_EQ(sparse.max, original.max());

  Histogram copy;
  ASSERT_TRUE(copy.Add(sparse).ok());
  ExpectSameHistogram(copy, original);

  // Adding to a non-empty histogram is a merge.
  Histogram added = HistogramOf(HeavyTailedValues(4, 3000));
  Histogram merged = added;
  ASSERT_TRUE(added.Add(sparse).ok());
  merged.Merge(original);
  ExpectSameHistogram(added, merged);

  // An empty sparse form (min 0) does not lower the minimum.
  ASSERT_TRUE(copy.Add(Histogram().ToSparse()).ok());
  ExpectSameHistogram(copy, original);
}

TEST(BenchHistogramTest, AddRejectsBadInputAndAddsNothing) {
  const Histogram original = HistogramOf({5, 500, 50000});
  Histogram::Sparse out_of_range = HistogramOf({7, 70}).ToSparse();
  out_of_range.buckets.emplace_back(Histogram::kBuckets, 1);
  Histogram::Sparse inverted;
  inverted.buckets = {{3, 1}};
  inverted.min = 9;
  inverted.max = 3;
  for (const Histogram::Sparse& bad : {out_of_range, inverted}) {
    Histogram histogram = original;
    const Status status = histogram.Add(bad);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    ExpectSameHistogram(histogram, original);
  }
  Histogram::Sparse huge_index;
  huge_index.buckets = {{UINT32_MAX, 1}};
  Histogram histogram = original;
  EXPECT_TRUE(histogram.Add(huge_index).IsInvalidArgument());
  ExpectSameHistogram(histogram, original);
}

TEST(BenchHistogramTest, ClearEmpties) {
  Histogram histogram = HistogramOf({1, 2, 3});
  histogram.Clear();
  ExpectSameHistogram(histogram, Histogram());
  histogram.Record(40);
  EXPECT_EQ(histogram.min(), 40u);
}

}  // namespace
}  // namespace dmidx::bench
