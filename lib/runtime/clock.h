// Time as every layer above the fabric sees it (LevelDB's Env owns time the
// same way). Real clusters run on SteadyClock; a virtual-time backend
// supplies a clock that advances only when every coroutine is parked, which
// is what makes a simulated run deterministic. Code in btree/, lock/, cache/
// and radix/ reads time only through the context (ContextImpl::Now).
#ifndef DMIDX_RUNTIME_CLOCK_H_
#define DMIDX_RUNTIME_CLOCK_H_

#include <chrono>
#include <thread>

namespace dmidx::runtime {

class Clock {
 public:
  virtual ~Clock() = default;
  // Time since an arbitrary origin fixed for the clock's life; never goes
  // back. Thread-safe.
  virtual std::chrono::nanoseconds Now() const = 0;
  // Returns once Now() reads at least `deadline`: a blocking context's
  // wait. A real clock sleeps; a virtual one runs what is due meanwhile.
  virtual void SleepUntil(std::chrono::nanoseconds deadline) const = 0;
};

class SteadyClock final : public Clock {
 public:
  std::chrono::nanoseconds Now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch());
  }
  void SleepUntil(std::chrono::nanoseconds deadline) const override {
    const std::chrono::nanoseconds left = deadline - Now();
    if (left.count() > 0) std::this_thread::sleep_for(left);
  }
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_CLOCK_H_
