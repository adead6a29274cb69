// How the coroutines of compute nodes get OS threads.
//
// Client::Run and RunClients (runtime/client.h) hand the executor every
// worker taking part and the body each of their contexts runs; the
// executor decides which OS threads run them. ThreadExecutor, the default,
// gives each worker a thread of its own with a Scheduler on it, which
// polls the worker's endpoint and gives the core away when every coroutine
// waits. A virtual-time backend can instead run the coroutines of many
// compute nodes on one thread and advance its clock when all are parked.
#ifndef DMIDX_RUNTIME_EXECUTOR_H_
#define DMIDX_RUNTIME_EXECUTOR_H_

#include <atomic>
#include <functional>
#include <span>

namespace dmidx::runtime {

class ContextImpl;
class Worker;

// Work a virtual-time executor runs beside a Run's coroutines for as long
// as they run (a compute node's lease renewal, lib/runtime/lease_keeper.h):
// body(context, stop) on the worker's one context, on a CPU of its own.
// Once every coroutine of the Run has returned, `stop` reads true and the
// body is woken from a sleep (ContextImpl::SleepUntil returns early); it
// must then return without starting new work. Its ops may still be in
// flight when Run returns (Run does not quiesce its endpoint): the work
// keeps their buffers and completions alive, and collects them later.
struct BackgroundWork {
  Worker* worker = nullptr;
  std::function<void(ContextImpl&, const std::atomic<bool>& stop)> body;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs body(context) once for every context of every worker in
  // `workers`, each as a coroutine on the worker's scheduler, and returns
  // when all have returned and every worker's endpoint is quiet (ops posted
  // unsignaled at the end have landed). Coroutines never migrate between
  // threads.
  virtual void Run(std::span<Worker* const> workers,
                   const std::function<void(ContextImpl&)>& body) = 0;
  // Run, with `background` beside it. Only a virtual-time executor takes
  // background work: in real time it runs on threads of its own.
  virtual void Run(std::span<Worker* const> workers, const std::function<void(ContextImpl&)>& body,
                   std::span<const BackgroundWork> background) {
    (void)background;
    Run(workers, body);
  }
  // Whether the clock is virtual and moves only while the executor runs
  // (or a blocking context waits): background work must then be handed to
  // Run instead of running on a thread.
  virtual bool virtual_time() const { return false; }
};

class ThreadExecutor final : public Executor {
 public:
  void Run(std::span<Worker* const> workers,
           const std::function<void(ContextImpl&)>& body) override;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_EXECUTOR_H_
