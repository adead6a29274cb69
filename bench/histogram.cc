#include "bench/histogram.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <string>

namespace dmidx::bench {
namespace {

constexpr int kSubBucketShift = Histogram::kSubBucketBits - 1;

// The inverse: buckets below 2 * kSubBuckets are exact (shift 0); above,
// bucket / kSubBuckets is shift + 1.
constexpr int ShiftOfBucket(uint32_t bucket) {
  const uint32_t block = bucket >> kSubBucketShift;
  return block == 0 ? 0 : static_cast<int>(block) - 1;
}

static_assert(Histogram::ShiftOf(Histogram::kMaxTrackable) * Histogram::kSubBuckets +
                      (Histogram::kMaxTrackable >> Histogram::ShiftOf(Histogram::kMaxTrackable)) ==
                  Histogram::kBuckets - 1,
              "kMaxTrackable must land in the last bucket");

}  // namespace

uint64_t Histogram::BucketLow(uint32_t bucket) {
  assert(bucket < kBuckets);
  const int shift = ShiftOfBucket(bucket);
  return uint64_t{bucket - static_cast<uint32_t>(shift) * kSubBuckets} << shift;
}

uint64_t Histogram::BucketHigh(uint32_t bucket) {
  return BucketLow(bucket) + (uint64_t{1} << ShiftOfBucket(bucket)) - 1;
}

void Histogram::Merge(const Histogram& other) {
  for (uint32_t bucket = 0; bucket < kBuckets; ++bucket)
    counts_[bucket] += other.counts_[bucket];
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

void Histogram::Clear() {
  *this = Histogram();
}

uint64_t Histogram::min() const {
  return count_ == 0 ? 0 : min_;
}

double Histogram::mean() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
}

uint64_t Histogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  if (!(p > 0)) p = 0;  // also NaN
  if (p > 100) p = 100;
  // The rank is at least 1, so p = 0 means the smallest value's bucket;
  // p = 100 means the largest value, whose bucket's upper end is capped at
  // max(), so the result is max() exactly.
  const double scaled = std::ceil(p / 100.0 * static_cast<double>(count_));
  const uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(scaled), 1, count_);
  uint64_t seen = 0;
  for (uint32_t bucket = 0; bucket < kBuckets; ++bucket) {
    seen += counts_[bucket];
    if (seen < rank) continue;
    // The top bucket also holds the values above kMaxTrackable, so its
    // upper end is max() itself.
    if (bucket == kBuckets - 1) return max_;
    return std::min(BucketHigh(bucket), max_);
  }
  return max_;  // unreachable while counts_ sum to count_
}

Histogram::Sparse Histogram::ToSparse() const {
  Sparse sparse;
  for (uint32_t bucket = 0; bucket < kBuckets; ++bucket) {
    if (counts_[bucket] != 0) sparse.buckets.emplace_back(bucket, counts_[bucket]);
  }
  sparse.min = min();
  sparse.max = max_;
  sparse.sum = sum_;
  return sparse;
}

Status Histogram::Add(const Sparse& sparse) {
  // Validate everything first so that a bad input adds nothing.
  uint64_t added = 0;
  for (const auto& [bucket, count] : sparse.buckets) {
    if (bucket >= kBuckets) {
      return Status::InvalidArgument("histogram bucket " + std::to_string(bucket) +
                                     " out of range (there are " + std::to_string(kBuckets) + ")");
    }
    added += count;
  }
  if (added != 0 && sparse.min > sparse.max) {
    return Status::InvalidArgument("histogram min " + std::to_string(sparse.min) +
                                   " above its max " + std::to_string(sparse.max));
  }
  for (const auto& [bucket, count] : sparse.buckets)
    counts_[bucket] += count;
  count_ += added;
  // An empty sparse form carries min = max = 0, which must not lower min_.
  if (added != 0) {
    min_ = std::min(min_, sparse.min);
    max_ = std::max(max_, sparse.max);
  }
  sum_ += sparse.sum;
  return Status::Ok();
}

}  // namespace dmidx::bench
