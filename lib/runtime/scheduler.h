// Coroutines on one thread (Boost.Context fibers) and the parker that wakes
// them.
//
// A coroutine runs until it parks: waiting for a fabric completion or a local
// event (a lock's wait queue). The scheduler then polls the fabric and
// resumes whichever coroutines got a permit. Coroutines never migrate between
// threads and never spin while holding the thread, so two coroutines of one
// thread contending for one local lock cannot deadlock.
#ifndef DMIDX_RUNTIME_SCHEDULER_H_
#define DMIDX_RUNTIME_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lib/fabric/op.h"
#include "lib/runtime/clock.h"

namespace dmidx::runtime {

// Told, on the notifier's thread, which parker got a permit: lets a
// single-threaded scheduler resume just that coroutine instead of checking
// every parker.
class WakeSink {
 public:
  virtual void Woken(uint32_t id) = 0;

 protected:
  ~WakeSink() = default;
};

// A binary permit: Notify() grants it (from any thread), TryConsume() takes
// it. A permit granted before the waiter parks is not lost; several grants
// before a take count once. Release/acquire: whatever the notifier wrote
// before Notify() is visible to the waiter after a successful TryConsume().
class Parker final : public fabric::Notifier {
 public:
  void Notify() override {
    permit_.store(true, std::memory_order_release);
    if (sink_ != nullptr) sink_->Woken(id_);
  }
  // Sets `*failed` (if set: set_failure_flag) when a batch it waits for
  // fails.
  void Failed() override {
    if (failed_ != nullptr) failed_->store(true, std::memory_order_relaxed);
  }
  void set_failure_flag(std::atomic<bool>* failed) { failed_ = failed; }
  bool TryConsume() {
    return permit_.load(std::memory_order_relaxed) &&
           permit_.exchange(false, std::memory_order_acquire);
  }
  // Reports each Notify() to `sink` as `id` (null: to nobody). Only a
  // scheduler whose notifications all come on its own thread sets one, and
  // only while nothing can notify.
  void set_sink(WakeSink* sink, uint32_t id) {
    sink_ = sink;
    id_ = id;
  }

 private:
  std::atomic<bool> permit_{false};
  WakeSink* sink_ = nullptr;
  uint32_t id_ = 0;
  std::atomic<bool>* failed_ = nullptr;
};

class Scheduler {
 public:
  // `poll` runs between rounds of resuming coroutines (it polls the
  // fabric); `idle` runs after a round that resumed none (every coroutine
  // waits), with the count of such rounds in a row: the executor's place to
  // give the core away, or to advance virtual time.
  // `clock` (may be null: then SleepUntil only yields) times SleepUntil.
  Scheduler(size_t stack_bytes, std::function<void()> poll,
            std::function<void(uint32_t idle_rounds)> idle = {}, const Clock* clock = nullptr);
  virtual ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Adds a coroutine that runs `body` when Run() is called; `parker` wakes it
  // and must outlive the scheduler.
  // Returns the coroutine's index (0, 1, ... in spawn order).
  size_t Spawn(Parker* parker, std::function<void()> body);

  // Runs every spawned coroutine to completion on the calling thread.
  virtual void Run();

  // From a coroutine of this scheduler: returns at once if its parker holds
  // a permit (taking it); otherwise suspends until it does.
  virtual void Park();

  // From a coroutine of this scheduler: lets the other coroutines run (and
  // the fabric be polled) once, then continues.
  virtual void Yield();

  // From a coroutine of this scheduler: suspends it until `deadline` on the
  // scheduler's clock. A round in which every coroutine sleeps or waits is
  // an idle round, so the executor may give the core away meanwhile (or,
  // under virtual time, advance the clock) instead of spinning.
  virtual void SleepUntil(std::chrono::nanoseconds deadline);

  // From a coroutine of this scheduler, once per index operation it starts:
  // a virtual-time scheduler charges the operation's client CPU time here;
  // others do nothing.
  virtual void ChargeOperation() {}

  // Context switches into coroutines so far.
  uint64_t switches() const { return switches_; }

 protected:
  // For schedulers that decide the order themselves (Run, Park, Yield and
  // SleepUntil overridden): switches into coroutine `index` until it
  // suspends or ends; and, from the running coroutine, back out.
  void Resume(size_t index);
  void SuspendCurrent();
  bool finished(size_t index) const;
  // The running coroutine's index; only while one runs.
  size_t current_index() const;
  Parker* parker(size_t index) const;
  // Frees every coroutine (all must have finished).
  void Clear();

 private:
  struct Coroutine;
  // Runs `coroutine` until it suspends or ends.
  void SwitchInto(Coroutine* coroutine);

  const size_t stack_bytes_;
  const std::function<void()> poll_;
  const std::function<void(uint32_t)> idle_;
  const Clock* const clock_;
  std::vector<std::unique_ptr<Coroutine>> coroutines_;
  Coroutine* current_ = nullptr;
  uint64_t switches_ = 0;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_SCHEDULER_H_
