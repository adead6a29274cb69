#include "dmidx/stats.h"

#include "lib/common/counter_fields.h"

namespace dmidx {

Stats& Stats::operator+=(const Stats& other) {
  counters::Add(*this, other, counters::kStatsFields);
  return *this;
}

Stats operator-(Stats a, const Stats& b) {
  counters::Subtract(a, b, counters::kStatsFields);
  return a;
}

std::string Stats::ToString() const {
  return counters::ToString(*this, counters::kStatsFields);
}

}  // namespace dmidx
