// Running compute nodes in virtual time (the `sim` backend).
//
// SimExecutor runs every context of every worker it is given as a
// coroutine on the calling thread, driven by the fabric's SimWorld: when no
// coroutine can run, the world runs its next event (an op taking effect, a
// completion, a timer) and virtual time jumps to it. Nothing depends on wall
// time or OS scheduling, so a run repeats exactly.
//
// Each worker is one CPU in the model: its coroutines run one at a time,
// and what they run costs virtual time (SimOptions: cpu_per_wakeup when a
// coroutine resumes, cpu_per_post per batch it posts, cpu_per_operation per
// index operation). A coroutine woken while its worker is busy waits until
// the worker is free, so a worker with many busy coroutines is CPU-bound in
// virtual time as it would be on a real core. A coroutine's clock reads the
// time of the event that resumed it plus the CPU spent since: time only
// goes forward for each worker (another worker's events may still run at a
// slightly earlier virtual time afterwards; they run on another CPU).
#ifndef DMIDX_RUNTIME_SIM_EXECUTOR_H_
#define DMIDX_RUNTIME_SIM_EXECUTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "dmidx/options.h"
#include "lib/fabric/ring_queue.h"
#include "lib/fabric/sim_fabric.h"
#include "lib/runtime/clock.h"
#include "lib/runtime/executor.h"
#include "lib/runtime/scheduler.h"

namespace dmidx::runtime {

// The world's clock: the running code's virtual time.
class SimClock final : public Clock {
 public:
  explicit SimClock(fabric::SimWorld* world) : world_(world) {}
  std::chrono::nanoseconds Now() const override {
    return std::chrono::nanoseconds(world_->cursor());
  }
  // Runs the world's events up to `deadline` and moves time there.
  void SleepUntil(std::chrono::nanoseconds deadline) const override {
    world_->RunUntil(deadline.count());
  }

 private:
  fabric::SimWorld* const world_;
};

// Coroutines of many workers on one thread, each worker a CPU in virtual
// time. Used by SimExecutor; public for tests.
class SimScheduler final : public Scheduler, public WakeSink {
 public:
  SimScheduler(fabric::SimWorld* world, const SimOptions& model, size_t stack_bytes);
  ~SimScheduler() override;

  // Adds a coroutine of CPU `cpu` (0, 1, ...) that runs `body`; `parker`
  // wakes it and must outlive the scheduler.
  void Add(uint32_t cpu, Parker* parker, std::function<void()> body);
  // Adds a background coroutine (executor.h, BackgroundWork): Run stops
  // waiting for it once every other coroutine has returned, sets stopping()
  // and wakes it from any sleep, then runs it to its end.
  void AddBackground(uint32_t cpu, Parker* parker, std::function<void()> body);
  const std::atomic<bool>& stopping() const { return stopping_; }

  // Runs every coroutine to completion. Aborts, naming the time and the
  // coroutines that wait, when every coroutine waits and no event is
  // queued (nothing could ever wake them).
  void Run() override;
  void Park() override;
  void Yield() override;
  void SleepUntil(std::chrono::nanoseconds deadline) override;
  void ChargeOperation() override;
  void Woken(uint32_t id) override;

 private:
  struct Task {
    uint32_t cpu = 0;
    Parker* parker = nullptr;
    bool parked = false;    // waits for its parker's permit
    bool sleeping = false;  // waits for an alarm
    bool queued = false;    // in its CPU's ready queue
    bool background = false;
    uint64_t alarm = 0;  // the sleep's event, while sleeping
  };
  struct Cpu {
    fabric::RingQueue<uint32_t> ready;
    int64_t busy_until = 0;
    bool scheduled = false;  // a RunCpu event is queued, or the CPU runs
  };

  void MakeReady(uint32_t id);
  void ScheduleCpu(uint32_t cpu, int64_t at);
  // Runs the CPU's next ready coroutine until it suspends; its id if it
  // ended, else -1.
  int RunSlice(uint32_t cpu);
  static void CpuDue(void* self, uint64_t cpu);
  static void Alarm(void* self, uint64_t id);

  fabric::SimWorld* const world_;
  const SimOptions model_;
  std::vector<Task> tasks_;
  std::vector<Cpu> cpus_;
  fabric::RingQueue<uint32_t> runnable_;  // CPUs whose turn came
  std::atomic<bool> stopping_{false};
  // Alarms of sleeping background coroutines: events that alone cannot
  // wake the run's own work (the deadlock check leaves them out).
  size_t background_alarms_ = 0;
};

class SimExecutor final : public Executor {
 public:
  SimExecutor(fabric::SimWorld* world, const SimOptions& model) : world_(world), model_(model) {}
  void Run(std::span<Worker* const> workers,
           const std::function<void(ContextImpl&)>& body) override {
    Run(workers, body, {});
  }
  void Run(std::span<Worker* const> workers, const std::function<void(ContextImpl&)>& body,
           std::span<const BackgroundWork> background) override;
  bool virtual_time() const override { return true; }

 private:
  fabric::SimWorld* const world_;
  const SimOptions model_;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_SIM_EXECUTOR_H_
