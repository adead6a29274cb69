#include "lib/runtime/sim_executor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "lib/runtime/context.h"

namespace dmidx::runtime {

SimScheduler::SimScheduler(fabric::SimWorld* world, const SimOptions& model, size_t stack_bytes)
    : Scheduler(stack_bytes, [] {}), world_(world), model_(model) {}

SimScheduler::~SimScheduler() {
  fabric::SimWorld::Guard guard(*world_);
  for (Task& task : tasks_)
    task.parker->set_sink(nullptr, 0);
}

void SimScheduler::Add(uint32_t cpu, Parker* parker, std::function<void()> body) {
  fabric::SimWorld::Guard guard(*world_);
  const size_t id = Spawn(parker, std::move(body));
  parker->set_sink(this, static_cast<uint32_t>(id));
  tasks_.push_back({cpu, parker});
  if (cpu >= cpus_.size()) cpus_.resize(cpu + 1);
}

void SimScheduler::AddBackground(uint32_t cpu, Parker* parker, std::function<void()> body) {
  Add(cpu, parker, std::move(body));
  tasks_.back().background = true;
}

void SimScheduler::Run() {
  std::lock_guard<std::recursive_mutex> guard(world_->mutex());
  world_->set_driven(true);
  stopping_.store(false, std::memory_order_relaxed);
  size_t live = 0, background = 0;
  for (uint32_t id = 0; id < tasks_.size(); ++id) {
    MakeReady(id);
    ++(tasks_[id].background ? background : live);
  }
  int64_t end = 0;
  while (live > 0 || background > 0) {
    if (live == 0 && !stopping_.load(std::memory_order_relaxed)) {
      // The run's own work is done: it ends here, whatever the background
      // still finishes (a renewal in flight).
      end = world_->now();
      for (const Cpu& cpu : cpus_)
        end = std::max(end, cpu.busy_until);
      stopping_.store(true, std::memory_order_relaxed);
      for (uint32_t id = 0; id < tasks_.size(); ++id) {
        Task& task = tasks_[id];
        if (!task.background || finished(id) || !task.sleeping) continue;
        world_->Cancel(task.alarm);
        --background_alarms_;
        task.sleeping = false;
        MakeReady(id);
      }
    }
    if (!runnable_.empty()) {
      const uint32_t cpu = runnable_.front();
      runnable_.pop_front();
      const int ended = RunSlice(cpu);
      if (ended >= 0) --(tasks_[ended].background ? background : live);
      continue;
    }
    // Only background alarms queued: nothing can wake the run's own work.
    const bool stuck = live > 0 && world_->pending() == background_alarms_;
    if (stuck || !world_->RunNext()) {
      std::fprintf(stderr,
                   "sim executor: at %lld ns every coroutine waits and no event is queued "
                   "(nothing can wake them); waiting:",
                   static_cast<long long>(world_->now()));
      for (uint32_t id = 0; id < tasks_.size(); ++id) {
        if (!finished(id)) std::fprintf(stderr, " cpu %u coroutine %u;", tasks_[id].cpu, id);
      }
      std::fprintf(stderr, "\n");
      std::abort();
    }
  }
  // The run ends when its last CPU is done, not when the last slice began.
  if (!stopping_.load(std::memory_order_relaxed)) {
    end = world_->now();
    for (const Cpu& cpu : cpus_)
      end = std::max(end, cpu.busy_until);
  }
  if (end > world_->cursor()) world_->set_cursor(end);
  world_->set_driven(false);
  Clear();
}

int SimScheduler::RunSlice(uint32_t cpu_index) {
  Cpu& cpu = cpus_[cpu_index];
  if (cpu.ready.empty()) {
    cpu.scheduled = false;
    return -1;
  }
  const uint32_t id = cpu.ready.front();
  cpu.ready.pop_front();
  tasks_[id].queued = false;
  world_->set_cursor(world_->now() + model_.cpu_per_wakeup.count());
  Resume(id);
  cpu.busy_until = world_->cursor();
  if (cpu.ready.empty()) {
    cpu.scheduled = false;
  } else {
    world_->Schedule(cpu.busy_until, &SimScheduler::CpuDue, this, cpu_index);
  }
  return finished(id) ? static_cast<int>(id) : -1;
}

void SimScheduler::CpuDue(void* self, uint64_t cpu) {
  static_cast<SimScheduler*>(self)->runnable_.push_back() = static_cast<uint32_t>(cpu);
}

void SimScheduler::Alarm(void* self, uint64_t id) {
  auto* scheduler = static_cast<SimScheduler*>(self);
  if (scheduler->tasks_[id].background) --scheduler->background_alarms_;
  scheduler->tasks_[id].sleeping = false;
  scheduler->MakeReady(static_cast<uint32_t>(id));
}

void SimScheduler::MakeReady(uint32_t id) {
  Task& task = tasks_[id];
  if (task.queued) return;
  task.queued = true;
  Cpu& cpu = cpus_[task.cpu];
  cpu.ready.push_back() = id;
  if (!cpu.scheduled) ScheduleCpu(task.cpu, std::max(world_->now(), cpu.busy_until));
}

void SimScheduler::ScheduleCpu(uint32_t cpu, int64_t at) {
  cpus_[cpu].scheduled = true;
  if (at <= world_->now()) {
    // Free now: its turn comes as soon as the running event returns.
    runnable_.push_back() = cpu;
    return;
  }
  world_->Schedule(at, &SimScheduler::CpuDue, this, cpu);
}

void SimScheduler::Woken(uint32_t id) {
  Task& task = tasks_[id];
  if (!task.parked) return;  // the permit waits for its next Park()
  task.parked = false;
  MakeReady(id);
}

void SimScheduler::Park() {
  const size_t id = current_index();
  if (parker(id)->TryConsume()) return;
  tasks_[id].parked = true;
  SuspendCurrent();
  parker(id)->TryConsume();
}

void SimScheduler::Yield() {
  const size_t id = current_index();
  // At least 1 ns, so that a coroutine polling a condition lets time move.
  world_->Spend(1);
  MakeReady(static_cast<uint32_t>(id));
  SuspendCurrent();
}

void SimScheduler::SleepUntil(std::chrono::nanoseconds deadline) {
  if (world_->cursor() >= deadline.count()) return;
  const size_t id = current_index();
  tasks_[id].sleeping = true;
  tasks_[id].alarm = world_->Schedule(deadline.count(), &SimScheduler::Alarm, this, id);
  if (tasks_[id].background) ++background_alarms_;
  SuspendCurrent();
}

void SimScheduler::ChargeOperation() {
  world_->Spend(model_.cpu_per_operation.count());
}

void SimExecutor::Run(std::span<Worker* const> workers,
                      const std::function<void(ContextImpl&)>& body,
                      std::span<const BackgroundWork> background) {
  size_t stack_bytes = 0;
  for (Worker* worker : workers)
    stack_bytes = std::max(stack_bytes, worker->coroutine_stack_bytes());
  for (const BackgroundWork& work : background)
    stack_bytes = std::max(stack_bytes, work.worker->coroutine_stack_bytes());
  {
    SimScheduler scheduler(world_, model_, stack_bytes);
    for (uint32_t cpu = 0; cpu < workers.size(); ++cpu) {
      Worker& worker = *workers[cpu];
      for (size_t c = 0; c < worker.context_count(); ++c) {
        ContextImpl& context = worker.context(c);
        context.set_scheduler(&scheduler);
        scheduler.Add(cpu, context.parker(), [&context, &body] { body(context); });
      }
    }
    // Each on a CPU of its own, after the run's.
    for (size_t i = 0; i < background.size(); ++i) {
      ContextImpl& context = background[i].worker->context(0);
      context.set_scheduler(&scheduler);
      scheduler.AddBackground(static_cast<uint32_t>(workers.size() + i), context.parker(),
                              [&context, &work = background[i], &scheduler] {
                                work.body(context, scheduler.stopping());
                              });
    }
    scheduler.Run();
    for (Worker* worker : workers)
      for (size_t c = 0; c < worker->context_count(); ++c)
        worker->context(c).set_scheduler(nullptr);
    for (const BackgroundWork& work : background)
      work.worker->context(0).set_scheduler(nullptr);
  }
  // Unsignaled ops posted at the end (lock releases) land before Run returns.
  // (Background work owns what its ops still use and collects them later:
  // a renewal a cut-off link holds must not keep the run from ending.)
  for (Worker* worker : workers)
    worker->endpoint().Quiesce();
}

}  // namespace dmidx::runtime
