#include "bench/generators.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace dmidx::bench {

// ---------------------------------------------------------------------------
// Rng: xoshiro256** (Blackman and Vigna), state filled by splitmix64 so that
// nearby seeds (0, 1, 2, ... per context) give unrelated streams.

namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : state_)
    word = SplitMix64(&seed);
}

uint64_t Rng::Below(uint64_t n) {
  assert(n >= 1);
  // Lemire's multiply-shift ("Fast random integer generation in an
  // interval", 2019): the high word of x * n is uniform in [0, n) once the
  // few low words below 2^64 mod n are rejected. The rejection almost never
  // runs (probability n / 2^64), so the common path is one multiply.
  unsigned __int128 product = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(product);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      product = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

// ---------------------------------------------------------------------------
// Zipfian

namespace {

// Below this many terms, sums are computed term by term.
constexpr uint64_t kDirectTerms = uint64_t{1} << 16;
// The Euler-Maclaurin tail starts no lower than here, where its truncation
// error is far below a double's precision (see PowerSumTail).
constexpr uint64_t kTailStart = 1024;

// sum_{i=first..last} i^-theta, term by term, smallest terms first so that
// they are not lost against the large sum.
double PowerSumDirect(uint64_t first, uint64_t last, double theta) {
  assert(first >= 1 && first <= last);
  double sum = 0;
  for (uint64_t i = last;; --i) {
    sum += std::pow(static_cast<double>(i), -theta);
    if (i == first) return sum;
  }
}

// sum_{i=a..b} f(i) for f(x) = x^-theta by Euler-Maclaurin:
//   integral_a^b f + (f(a) + f(b)) / 2 + (f'(b) - f'(a)) / 12
//                  - (f'''(b) - f'''(a)) / 720 + R,
// where the first omitted term (B6/6! (f^(5)(b) - f^(5)(a))) bounds R: about
// theta(theta+1)..(theta+4) / 30240 * a^-(theta+5), under 1e-17 for
// a >= 1024 and theta < 4, and 4e-21 for theta = 1.
double PowerSumTail(uint64_t a, uint64_t b, double theta) {
  const double x = static_cast<double>(a);
  const double y = static_cast<double>(b);
  // integral = (y^(1-theta) - x^(1-theta)) / (1-theta), written with expm1 so
  // that theta near 1 does not subtract two nearly equal numbers.
  const double integral =
      std::pow(x, 1 - theta) * std::expm1((1 - theta) * std::log(y / x)) / (1 - theta);
  const auto f = [theta](double v) { return std::pow(v, -theta); };
  const auto f1 = [theta](double v) { return -theta * std::pow(v, -theta - 1); };
  const auto f3 = [theta](double v) {
    return -theta * (theta + 1) * (theta + 2) * std::pow(v, -theta - 3);
  };
  return integral + (f(x) + f(y)) / 2 + (f1(y) - f1(x)) / 12 - (f3(y) - f3(x)) / 720;
}

double PowerSum(uint64_t first, uint64_t last, double theta) {
  if (last < first) return 0;
  if (last - first < kDirectTerms) return PowerSumDirect(first, last, theta);
  const uint64_t tail_start = std::max(first, kTailStart);
  const double head = first < tail_start ? PowerSumDirect(first, tail_start - 1, theta) : 0;
  return head + PowerSumTail(tail_start, last, theta);
}

}  // namespace

double Zipfian::Zeta(uint64_t n, double theta) {
  return PowerSum(1, n, theta);
}

Zipfian::Zipfian(uint64_t items, double theta)
    : Zipfian(items, theta, Zeta(std::max<uint64_t>(items, 1), theta)) {}

Zipfian::Zipfian(uint64_t items, double theta, double zeta_n)
    : items_(std::max<uint64_t>(items, 1)),
      eta_items_(items_),
      theta_(theta),
      zeta_n_(zeta_n),
      zeta_2_(Zeta(2, theta)) {
  assert(items >= 1);
  assert(theta > 0 && theta != 1);
  Derive();
  auto table = std::make_shared<std::vector<uint64_t>>(kTableSteps + 1);
  for (uint32_t j = 0; j <= kTableSteps; ++j) {
    (*table)[j] = RankOf(static_cast<double>(j) / kTableSteps);
  }
  table_ = std::move(table);
}

void Zipfian::Grow(uint64_t items) {
  if (items <= items_) return;
  zeta_n_ += PowerSum(items_ + 1, items, theta_);
  items_ = items;
  Derive();
  table_.reset();
}

void Zipfian::Derive() {
  // YCSB's ZipfianGenerator: alpha = 1 / (1 - theta) and
  //   eta = (1 - (2 / items)^(1 - theta)) / (1 - zeta(2) / zeta(items)),
  // with the constructor's item count (eta_items_), which Grow keeps.
  alpha_ = 1 / (1 - theta_);
  // With 1 or 2 items this divides by 0 (zeta_n == zeta_2); eta is then
  // infinite but unused, since every draw is rank 0 or 1.
  eta_ =
      (1 - std::pow(2.0 / static_cast<double>(eta_items_), 1 - theta_)) / (1 - zeta_2_ / zeta_n_);
  rank_1_bound_ = 1 + std::pow(0.5, theta_);
}

uint64_t Zipfian::RankOf(double u) const {
  // Gray et al.: ranks 0 and 1 exactly, the rest by inverting an
  // approximation of the cumulative distribution.
  const double uz = u * zeta_n_;
  if (uz < 1) return 0;
  if (uz < rank_1_bound_) return 1;
  const double rank = static_cast<double>(items_) * std::pow(eta_ * u - eta_ + 1, alpha_);
  // The approximation can reach items (u near 1); NaN cannot pass either.
  if (!(rank < static_cast<double>(items_))) return items_ - 1;
  return static_cast<uint64_t>(rank);
}

// ---------------------------------------------------------------------------
// ScrambledZipfian

ScrambledZipfian::ScrambledZipfian(Kind kind, uint64_t items, double theta)
    : kind_(kind), items_(std::max<uint64_t>(items, 1)), ranks_(RanksFor(kind, items_, theta)) {
  assert(items >= 1);
}

Zipfian ScrambledZipfian::RanksFor(Kind kind, uint64_t items, double theta) {
  if (kind == Kind::kExact) return Zipfian(items, theta);
  // ScrambledZipfianGenerator: ZipfianGenerator(0, ITEM_COUNT, theta), with
  // zeta precomputed for 0.99 (over ITEM_COUNT items; YCSB computes it over
  // ITEM_COUNT + 1 for any other theta).
  if (theta == kYcsbZipfianConstant) return Zipfian(kYcsbItemCount + 1, theta, kYcsbZetan);
  return Zipfian(kYcsbItemCount + 1, theta);
}

// ---------------------------------------------------------------------------
// KeyChooser

namespace {

std::optional<ScrambledZipfian> ZipfianKeysFor(const WorkloadSpec& spec) {
  if (spec.request_distribution != Distribution::kZipfian) return std::nullopt;
  if (spec.zipfian == ZipfianKind::kExact) {
    return ScrambledZipfian(ScrambledZipfian::Kind::kExact,
                            spec.LoadedRecords() + spec.ExpectedNewKeys(), spec.zipfian_constant);
  }
  // CoreWorkload: ScrambledZipfianGenerator(insertstart, insertstart +
  // insertcount + expectednewkeys), both ends included.
  return ScrambledZipfian(ScrambledZipfian::Kind::kYcsb,
                          spec.LoadedRecords() + spec.YcsbExpectedNewKeys() + 1,
                          spec.zipfian_constant);
}

std::optional<Zipfian> LatestFor(const WorkloadSpec& spec) {
  if (spec.request_distribution != Distribution::kLatest) return std::nullopt;
  // SkewedLatestGenerator: ZipfianGenerator(basis.lastValue()), the newest
  // record's key number (recordcount - 1) as its item count. YCSB's count
  // is 0 with one record (zeta 0, eta infinite: every draw is the newest
  // key until inserts come, then its draws break); Zipfian takes 1, as it
  // does without records (an insert-only run, which draws no key).
  return Zipfian(spec.record_count > 1 ? spec.record_count - 1 : 1, kYcsbZipfianConstant);
}

}  // namespace

KeyChooser::KeyChooser(const WorkloadSpec& spec)
    : distribution_(spec.request_distribution),
      records_(spec.LoadedRecords()),
      insert_start_(spec.insert_start),
      zipfian_(ZipfianKeysFor(spec)),
      latest_(LatestFor(spec)),
      hot_data_fraction_(spec.hotspot_data_fraction),
      hot_operation_fraction_(spec.hotspot_operation_fraction) {}

uint64_t KeyChooser::NextOther(Rng& rng, uint64_t count) {
  assert(count >= 1);
  if (count == 0) return 0;
  switch (distribution_) {
    case Distribution::kUniform:
      return rng.Below(RecordRange(count));
    case Distribution::kZipfian:
      return NextZipfian(rng, count);
    case Distribution::kLatest:
      return NextLatest(rng, count);
    case Distribution::kHotspot:
      return NextHotspot(rng, count);
  }
  return rng.Below(count);
}

uint64_t KeyChooser::NextLatest(Rng& rng, uint64_t count) {
  // SkewedLatestGenerator: with last = the newest key's number
  // (basis.lastValue(), insertstart + count - 1 here), the key is last -
  // zipfian.nextLong(last): rank 0 is the newest key, and ranks stay below
  // last, so YCSB never draws key number 0.
  const uint64_t last = insert_start_ + count - 1;
  if (last > latest_->items()) latest_->Grow(last);
  uint64_t rank = latest_->Next(rng);
  // Ranks reach count only below insertstart (keys this run did not load).
  for (int redraw = 0; rank >= count && redraw < kMaxRedraws; ++redraw)
    rank = latest_->Next(rng);
  return count - 1 - rank % count;
}

uint64_t KeyChooser::NextHotspot(Rng& rng, uint64_t count) const {
  // HotspotIntegerGenerator over the records: the hot keys are the first
  // (int)(records * hotspotdatafraction) of them (Java's cast saturates at
  // 2^31 - 1), a draw is hot with probability hotspotopnfraction, and
  // uniform within its set. Where YCSB divides by zero (an empty set: a
  // fraction of 0 or 1, or few keys), every draw goes to the other set.
  const uint64_t range = RecordRange(count);
  const double hot_share = std::min(static_cast<double>(range) * hot_data_fraction_,
                                    static_cast<double>(std::numeric_limits<int32_t>::max()));
  const uint64_t hot = std::min(range, static_cast<uint64_t>(hot_share));
  const uint64_t cold = range - hot;
  const bool pick_hot = rng.NextDouble() < hot_operation_fraction_;
  if ((pick_hot && hot > 0) || cold == 0) return rng.Below(hot);
  return hot + rng.Below(cold);
}

// ---------------------------------------------------------------------------
// ScanLengthChooser, OperationChooser

ScanLengthChooser::ScanLengthChooser(const WorkloadSpec& spec)
    : min_(spec.min_scan_length),
      max_(std::max(spec.min_scan_length, spec.max_scan_length)),
      zipfian_(spec.scan_length_distribution == Distribution::kZipfian),
      lengths_(uint64_t{max_} - min_ + 1, kYcsbZipfianConstant) {}

uint32_t ScanLengthChooser::Next(Rng& rng) const {
  const uint64_t offset = zipfian_ ? lengths_.Next(rng) : rng.Below(uint64_t{max_} - min_ + 1);
  return static_cast<uint32_t>(min_ + offset);
}

OperationChooser::OperationChooser(const WorkloadSpec& spec) {
  const double total = spec.TotalProportion();
  double sum = 0;
  size_t last_positive = kOpTypes - 1;
  for (size_t i = 0; i < kOpTypes; ++i) {
    const double proportion = spec.Proportion(static_cast<OpType>(i));
    sum += proportion;
    cumulative_[i] = total > 0 ? sum / total : 1;
    if (proportion > 0) last_positive = i;
  }
  // Rounding may leave the sum a hair below 1; the last operation with a
  // share takes the gap, never one with proportion 0.
  for (size_t i = last_positive; i < kOpTypes; ++i)
    cumulative_[i] = 1;
  int types = 0;
  for (size_t i = 0; i < kOpTypes; ++i)
    types += spec.Proportion(static_cast<OpType>(i)) > 0;
  if (types == 1) only_ = static_cast<int>(last_positive);
}

OpType OperationChooser::Next(Rng& rng) const {
  // A single-type mix draws nothing (the bench's overhead per op counts).
  if (only_ >= 0) return static_cast<OpType>(only_);
  const double u = rng.NextDouble();
  size_t i = 0;
  while (i + 1 < kOpTypes && u >= cumulative_[i])
    ++i;
  return static_cast<OpType>(i);
}

}  // namespace dmidx::bench
