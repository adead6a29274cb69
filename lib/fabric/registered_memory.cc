#include "lib/fabric/registered_memory.h"

#include <algorithm>

namespace dmidx::fabric {

void RegisteredMemory::Add(uintptr_t base, size_t bytes, uint32_t key) {
  const auto at = std::upper_bound(ranges_.begin(), ranges_.end(), base,
                                   [](uintptr_t value, const Range& r) { return value < r.base; });
  const size_t index = static_cast<size_t>(at - ranges_.begin());
  ranges_.insert(at, Range{base, bytes, key});
  last_ = nullptr;  // ranges_ may have moved
  last_base_ = 0;
  last_bytes_ = 0;
  reach_.resize(ranges_.size());
  for (size_t i = index; i < ranges_.size(); ++i) {
    const uintptr_t end = ranges_[i].base + ranges_[i].bytes;
    reach_[i] = i == 0 ? end : std::max(reach_[i - 1], end);
  }
}

const RegisteredMemory::Range* RegisteredMemory::FindSlow(uintptr_t begin, size_t bytes) const {
  if (bytes > UINTPTR_MAX - begin) return nullptr;
  const uintptr_t end = begin + bytes;
  // The last range starting at or before `begin`, then earlier ones while
  // some range at or before them still reaches `end`.
  size_t i = static_cast<size_t>(
      std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                       [](uintptr_t value, const Range& r) { return value < r.base; }) -
      ranges_.begin());
  while (i > 0 && reach_[i - 1] >= end) {
    --i;
    if (ranges_[i].base + ranges_[i].bytes >= end) {
      last_ = &ranges_[i];
      last_base_ = ranges_[i].base;
      last_bytes_ = ranges_[i].bytes;
      return last_;
    }
  }
  return nullptr;
}

}  // namespace dmidx::fabric
