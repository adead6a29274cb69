#include "lib/runtime/executor.h"

#include <thread>
#include <vector>

#include "lib/runtime/context.h"

namespace dmidx::runtime {

namespace {

// Rounds in a row in which every coroutine of a thread waited before that
// thread gives its core away, so that on a machine with fewer cores than
// threads the others make progress.
constexpr uint32_t kIdleRoundsBeforeYield = 16;

void RunWorker(Worker& worker, const std::function<void(ContextImpl&)>& body) {
  Scheduler scheduler(
      worker.coroutine_stack_bytes(), [&worker] { worker.endpoint().Poll(); },
      [](uint32_t idle_rounds) {
        if (idle_rounds >= kIdleRoundsBeforeYield) std::this_thread::yield();
      },
      &worker.compute_node().clock());
  for (size_t c = 0; c < worker.context_count(); ++c) {
    ContextImpl& context = worker.context(c);
    context.set_scheduler(&scheduler);
    scheduler.Spawn(context.parker(), [&context, &body] { body(context); });
  }
  scheduler.Run();
  for (size_t c = 0; c < worker.context_count(); ++c)
    worker.context(c).set_scheduler(nullptr);
  // Unsignaled ops posted at the end (e.g. lock releases) land before Run
  // returns, and no other thread still touches this worker's buffers.
  worker.endpoint().Quiesce();
}

}  // namespace

void ThreadExecutor::Run(std::span<Worker* const> workers,
                         const std::function<void(ContextImpl&)>& body) {
  std::vector<std::thread> threads;
  threads.reserve(workers.size());
  for (Worker* worker : workers)
    threads.emplace_back([worker, &body] { RunWorker(*worker, body); });
  for (std::thread& thread : threads)
    thread.join();
}

}  // namespace dmidx::runtime
