// Bounded restarts and capped backoff for the retry loops of every index:
// a descent that found a stale route, a change that lost a race, a step
// that waits for another change to land. The bounds are named once here,
// so that a bug or a dead peer shows as an error that names the operation
// and the index, never as a loop without end.
//
//   for (index::Restarts restarts; restarts.NextAfterBackoff(ctx);) {
//     ... return when done; `continue` to start over ...
//   }
//   return index::GaveUp("descent", core_.label());
#ifndef DMIDX_INDEX_RESTARTS_H_
#define DMIDX_INDEX_RESTARTS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dmidx/status.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

// Attempts of one loop before it gives up.
inline constexpr int kMaxRestarts = 100000;
// The longest backoff a restart loop waits: ctx.Backoff(kMaxBackoffStep),
// 2^6 times ClientOptions::retry_backoff_min (within retry_backoff_max).
// Lock acquisition backs off by its own rule (lock/).
inline constexpr uint32_t kMaxBackoffStep = 6;

// Scratch-arena bytes that an operation taking the arena greedily (a
// scan's read-ahead, a bulk load's or split's batch of object images)
// leaves free for what it takes meanwhile in nested scopes: lock words, a
// root or guard word read, CAS results (a few 8-byte words each), and the
// recovery of a dead lock holder that a wait among them may run
// (lock::RedoLog::kRecoveryScratchBytes; index/restarts.cc checks).
inline constexpr size_t kScratchReserveBytes = 1024;

// Waits before retry `attempt` (0, 1, ...) of a step that waits for
// another change to land, the step capped at kMaxBackoffStep.
inline void BackoffCapped(runtime::ContextImpl& ctx, int attempt) {
  ctx.Backoff(std::min(static_cast<uint32_t>(attempt), kMaxBackoffStep));
}

// The attempts of one retry loop, at most kMaxRestarts.
class Restarts {
 public:
  // Starts the next attempt, without waiting: false once kMaxRestarts ran.
  bool Next() { return ++attempt_ < kMaxRestarts; }
  // Next(), after a capped backoff when the attempt is a restart (one of
  // the loop's attempts before it found something another change had to
  // finish first).
  bool NextAfterBackoff(runtime::ContextImpl& ctx) {
    if (attempt_ >= 0 && attempt_ + 1 < kMaxRestarts) BackoffCapped(ctx, attempt_);
    return Next();
  }
  // Attempts before this one (0 on the first).
  int restarts() const { return attempt_; }
  bool first() const { return attempt_ == 0; }
  // Counts from the start again (a loop that moved on to the next step).
  void Reset() { attempt_ = -1; }

 private:
  int attempt_ = -1;
};

// The error of a loop that gave up: `what` (the operation) on `index` (its
// label, "B+tree 'orders'").
Status GaveUp(std::string_view what, std::string_view index);

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_RESTARTS_H_
