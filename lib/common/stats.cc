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

ReclamationStats& ReclamationStats::operator+=(const ReclamationStats& other) {
  counters::Add(*this, other, counters::kReclamationFields);
  return *this;
}

std::string ReclamationStats::ToString() const {
  return counters::ToString(*this, counters::kReclamationFields);
}

std::string PoolUsage::ToString() const {
  return "memory_node=" + std::to_string(memory_node) + " " +
         counters::ToString(*this, counters::kPoolUsageFields);
}

}  // namespace dmidx
