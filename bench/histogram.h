// A log-bucketed latency histogram in the manner of HdrHistogram (Debian has
// no package of it): values below 2^kSubBucketBits land in exact buckets;
// above, each power of two is split into 2^(kSubBucketBits-1) buckets, so a
// bucket's width is under 2^-(kSubBucketBits-1) of its values (1.6 %).
// Recording is a few instructions and allocates nothing; histograms merge
// exactly (bucket counts add), across threads and, through ToSparse() and
// Add(), across processes. Not thread-safe: one histogram per thread, merged
// by the bench.
#ifndef DMIDX_BENCH_HISTOGRAM_H_
#define DMIDX_BENCH_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "dmidx/status.h"

namespace dmidx::bench {

class Histogram {
 public:
  static constexpr int kSubBucketBits = 7;
  // Values above kMaxTrackable are counted in the top bucket; max() stays
  // exact.
  static constexpr uint64_t kMaxTrackable = (uint64_t{1} << 44) - 1;  // ~4.9 h in ns
  // Buckets per power of two above the exact range.
  static constexpr uint32_t kSubBuckets = 1u << (kSubBucketBits - 1);
  // A value's bucket is (shift * kSubBuckets + (value >> shift)), where
  // shift is how many low bits the bucket ignores: 0 below 2^kSubBucketBits,
  // so the value is its own bucket, and bit_width(value) - kSubBucketBits
  // above, which leaves value >> shift in [kSubBuckets, 2 * kSubBuckets).
  // Each power of two above the exact range thus gets kSubBuckets
  // consecutive buckets.
  static constexpr int ShiftOf(uint64_t value) {
    constexpr uint64_t kExactMask = (uint64_t{1} << kSubBucketBits) - 1;
    return std::bit_width(value | kExactMask) - kSubBucketBits;
  }
  static constexpr uint32_t kBuckets =
      (1u << kSubBucketBits) + (44 - kSubBucketBits) * (1u << (kSubBucketBits - 1));

  // Inline: on every operation's path.
  void Record(uint64_t value) {
    ++counts_[BucketOf(value)];
    ++count_;
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
    sum_ += value;
  }
  void Merge(const Histogram& other);
  void Clear();

  uint64_t count() const { return count_; }
  uint64_t min() const;  // 0 when empty
  uint64_t max() const { return max_; }
  double mean() const;
  // The value at percentile p in [0, 100] (clamped): the upper end of the
  // bucket that holds the ceil(p/100 * count)-th smallest value (at least
  // the 1st), capped at max(); 0 when empty. Never below the exact value and
  // within one bucket's width of it, so p = 0 gives the upper end of min()'s
  // bucket and p = 100 gives max(). The top bucket's upper end is max()
  // (it also counts the values above kMaxTrackable).
  uint64_t Percentile(double p) const;

  // The bucket a value falls in, and a bucket's range [low, high].
  // Precondition of BucketLow and BucketHigh: bucket < kBuckets.
  static uint32_t BucketOf(uint64_t value) {
    value = std::min(value, kMaxTrackable);
    const int shift = ShiftOf(value);
    return static_cast<uint32_t>(shift) * kSubBuckets + static_cast<uint32_t>(value >> shift);
  }
  static uint64_t BucketLow(uint32_t bucket);
  static uint64_t BucketHigh(uint32_t bucket);

  // Sparse form: (bucket, count) for every non-empty bucket, ascending,
  // plus the exact min, max and sum (all 0 when empty); Add merges one back.
  struct Sparse {
    std::vector<std::pair<uint32_t, uint64_t>> buckets;
    uint64_t min = 0;
    uint64_t max = 0;
    uint64_t sum = 0;
  };
  Sparse ToSparse() const;
  // InvalidArgument for a bucket index out of range, or min > max with a
  // non-zero count (nothing is added then).
  Status Add(const Sparse& sparse);

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  uint64_t sum_ = 0;
};

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_HISTOGRAM_H_
