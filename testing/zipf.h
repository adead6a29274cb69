// Zipf-distributed ranks for skewed workloads (YCSB's "zipfian 0.99").
#ifndef DMIDX_TESTING_ZIPF_H_
#define DMIDX_TESTING_ZIPF_H_

#include <cstdint>
#include <random>
#include <vector>

namespace dmidx::testing {

// Ranks in [0, n): rank r is drawn with probability proportional to
// 1 / (r + 1)^theta, by inverting the exact CDF (O(n) memory, O(log n) a
// draw). Deterministic for a given generator state; const, so one Zipf may
// serve many threads, each with its own generator.
class Zipf {
 public:
  // n >= 1, theta >= 0 (0 is uniform).
  Zipf(uint64_t n, double theta);

  uint64_t operator()(std::mt19937_64& rng) const;
  // The probability of `rank`.
  double Probability(uint64_t rank) const;
  uint64_t size() const { return cdf_.size(); }

 private:
  std::vector<double> cdf_;  // cdf_[r]: probability of a rank <= r
};

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_ZIPF_H_
