// Time as every layer above the fabric sees it (LevelDB's Env owns time the
// same way). Real clusters run on SteadyClock; a virtual-time backend
// supplies a clock that advances only when every coroutine is parked, which
// is what makes a simulated run deterministic. Code in tree/, lock/, cache/
// and radix/ reads time only through the context (ContextImpl::Now).
#ifndef DMIDX_RUNTIME_CLOCK_H_
#define DMIDX_RUNTIME_CLOCK_H_

#include <chrono>

namespace dmidx::runtime {

class Clock {
 public:
  virtual ~Clock() = default;
  // Time since an arbitrary origin fixed for the clock's life; never goes
  // back. Thread-safe.
  virtual std::chrono::nanoseconds Now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  std::chrono::nanoseconds Now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch());
  }
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_CLOCK_H_
