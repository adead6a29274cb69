// Counters written by one thread and read by others without a lock: the
// owner adds with relaxed stores (no read-modify-write: nobody else writes),
// readers load each field relaxed. A reader sees every field at some value
// it had, not a snapshot of all at one instant; sums are exact once the
// writer is quiet.
#ifndef DMIDX_COMMON_RELAXED_COUNTERS_H_
#define DMIDX_COMMON_RELAXED_COUNTERS_H_

#include "dmidx/index.h"

namespace dmidx {

// Only the thread that owns `*owned` may call this.
void AddOwnedRelaxed(OpCounters* owned, const OpCounters& delta);
// Any thread.
OpCounters LoadRelaxed(const OpCounters& shared);

}  // namespace dmidx

#endif  // DMIDX_COMMON_RELAXED_COUNTERS_H_
