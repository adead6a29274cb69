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

#include <functional>
#include <span>

namespace dmidx::runtime {

class ContextImpl;
class Worker;

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
};

class ThreadExecutor final : public Executor {
 public:
  void Run(std::span<Worker* const> workers,
           const std::function<void(ContextImpl&)>& body) override;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_EXECUTOR_H_
