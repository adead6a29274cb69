#include "testing/zipf.h"

#include <algorithm>
#include <cmath>

namespace dmidx::testing {

Zipf::Zipf(uint64_t n, double theta) : cdf_(n) {
  double sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), theta);
    cdf_[i] = sum;
  }
  for (double& c : cdf_)
    c /= sum;
}

uint64_t Zipf::operator()(std::mt19937_64& rng) const {
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  return std::min<uint64_t>(it - cdf_.begin(), cdf_.size() - 1);
}

double Zipf::Probability(uint64_t rank) const {
  return rank == 0 ? cdf_[0] : cdf_[rank] - cdf_[rank - 1];
}

}  // namespace dmidx::testing
