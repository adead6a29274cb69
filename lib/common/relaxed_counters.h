// Counters written by one thread and read by others without a lock: the
// owner adds with relaxed stores (no read-modify-write: nobody else writes),
// readers load each field relaxed. A reader sees every field at some value
// it had, not a snapshot of all at one instant; sums are exact once the
// writer is quiet.
#ifndef DMIDX_COMMON_RELAXED_COUNTERS_H_
#define DMIDX_COMMON_RELAXED_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "dmidx/index.h"
#include "lib/common/counter_fields.h"

namespace dmidx {

// Only the thread that owns `*owned` may call this. Inline: it is on every
// index operation's path (index/index_core.cc).
inline void AddOwnedRelaxed(OpCounters* owned, const OpCounters& delta) {
  counters::kOpCounterFields(*owned, delta, [](uint64_t& x, const uint64_t& y, const char*) {
    std::atomic_ref<uint64_t>(x).store(x + y, std::memory_order_relaxed);
  });
}
// Any thread.
OpCounters LoadRelaxed(const OpCounters& shared);

}  // namespace dmidx

#endif  // DMIDX_COMMON_RELAXED_COUNTERS_H_
