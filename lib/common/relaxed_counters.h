// Counters written by one thread and read by others without a lock: the
// owner adds with relaxed stores (no read-modify-write: nobody else writes),
// readers load each field relaxed. A reader sees every field at some value
// it had, not a snapshot of all at one instant; sums are exact once the
// writer is quiet.
#ifndef DMIDX_COMMON_RELAXED_COUNTERS_H_
#define DMIDX_COMMON_RELAXED_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <cstring>

#include "dmidx/index.h"
#include "lib/common/counter_fields.h"

namespace dmidx {

// Charges one operation to `*owned`: operations one more, every other
// counter what it gained from `before` to `now`. Only the thread that owns
// `*owned` may call this. Inline: it is on every index operation's path
// (index/index_core.cc). Each difference is added as it is made: made all
// first (the stores could alias `now` and `before` as far as the compiler
// knows, so they stay after the loads), most are spilled, about 35
// instructions an operation more.
inline void ChargeOwnedRelaxed(OpCounters* owned, const OpCounters& now, const OpCounters& before) {
  const auto* const now_bytes = reinterpret_cast<const uint8_t*>(&now);
  const auto* const before_bytes = reinterpret_cast<const uint8_t*>(&before);
  counters::kOpCounterFields(*owned, now, [&](uint64_t& x, const uint64_t& y, const char*) {
    // The same field of `before` (every field is a uint64_t).
    uint64_t then;
    std::memcpy(&then, before_bytes + (reinterpret_cast<const uint8_t*>(&y) - now_bytes), 8);
    const uint64_t spent = &y == &now.operations ? 1 : y - then;
    std::atomic_ref<uint64_t>(x).store(x + spent, std::memory_order_relaxed);
  });
}
// Any thread.
OpCounters LoadRelaxed(const OpCounters& shared);

}  // namespace dmidx

#endif  // DMIDX_COMMON_RELAXED_COUNTERS_H_
