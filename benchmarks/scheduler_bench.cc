// What the coroutine scheduler costs: a context switch between coroutines,
// a Park that finds its permit, a Park/Unpark that suspends, a round over
// many coroutines, and a wake-up across threads.
//
// The benchmark loop itself runs inside a coroutine, so each iteration is
// exactly the switching pattern named; the coroutine that runs it gets a
// larger stack for the benchmark library's own frames.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "lib/runtime/scheduler.h"

namespace dmidx::runtime {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;

void ReportSwitches(benchmark::State& state, const Scheduler& scheduler) {
  state.counters["switches"] = benchmark::Counter(static_cast<double>(scheduler.switches()),
                                                  benchmark::Counter::kAvgIterations);
}

// Two coroutines on one thread take turns through Park/Unpark. One iteration
// is a full exchange: A -> B -> A, two switches and one scheduler round.
void BM_CoroutinePingPong(benchmark::State& state) {
  Scheduler scheduler(kStackBytes, [] {});
  Parker a_parker, b_parker;
  int turn = 0;  // 0: A's turn, 1: B's
  bool done = false;
  scheduler.Spawn(&a_parker, [&] {
    for (auto _ : state) {
      turn = 1;
      b_parker.Notify();
      while (turn != 0)
        scheduler.Park();
    }
    done = true;
    b_parker.Notify();
  });
  scheduler.Spawn(&b_parker, [&] {
    while (true) {
      while (turn != 1 && !done)
        scheduler.Park();
      if (done) return;
      turn = 0;
      a_parker.Notify();
    }
  });
  scheduler.Run();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  ReportSwitches(state, scheduler);
}
BENCHMARK(BM_CoroutinePingPong);

// Park with a permit already granted: no switch, just the permit exchange.
void BM_ParkWithPermit(benchmark::State& state) {
  Scheduler scheduler(kStackBytes, [] {});
  Parker parker;
  scheduler.Spawn(&parker, [&] {
    for (auto _ : state) {
      parker.Notify();
      scheduler.Park();
    }
  });
  scheduler.Run();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  ReportSwitches(state, scheduler);
}
BENCHMARK(BM_ParkWithPermit);

// Park without a permit; the poll callback Unparks. One iteration: switch
// out, poll, find the permit, switch back in.
void BM_ParkUnparkSuspends(benchmark::State& state) {
  Parker parker;
  Scheduler scheduler(kStackBytes, [&parker] { parker.Notify(); });
  scheduler.Spawn(&parker, [&] {
    for (auto _ : state)
      scheduler.Park();
  });
  scheduler.Run();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  ReportSwitches(state, scheduler);
}
BENCHMARK(BM_ParkUnparkSuspends);

// state.range(0) coroutines all park every round and the poll callback
// Unparks them all: one iteration is one round of that many switches. Items
// are switches, so the per-item time is the cost of one switch at that
// number of live stacks.
void BM_SchedulerRound(benchmark::State& state) {
  const auto coroutines = static_cast<size_t>(state.range(0));
  std::vector<Parker> parkers(coroutines);
  Scheduler scheduler(kStackBytes, [&parkers] {
    for (Parker& parker : parkers)
      parker.Notify();
  });
  bool done = false;
  scheduler.Spawn(&parkers[0], [&] {
    for (auto _ : state)
      scheduler.Park();
    done = true;
  });
  for (size_t i = 1; i < coroutines; ++i) {
    scheduler.Spawn(&parkers[i], [&] {
      while (!done)
        scheduler.Park();
    });
  }
  scheduler.Run();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * coroutines));
  ReportSwitches(state, scheduler);
}
BENCHMARK(BM_SchedulerRound)->Arg(2)->Arg(8)->Arg(32)->Arg(128);

// Raw permit exchange, no scheduler.
void BM_ParkerNotifyTryConsume(benchmark::State& state) {
  Parker parker;
  for (auto _ : state) {
    parker.Notify();
    benchmark::DoNotOptimize(parker.TryConsume());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ParkerNotifyTryConsume);

// A coroutine on this thread and one on a helper thread take turns: one
// iteration is two cross-thread Unparks, each seen by a spinning scheduler.
// Needs two cores to mean anything.
void BM_CrossThreadPingPong(benchmark::State& state) {
  Parker here_parker, there_parker;
  std::atomic<int> turn{0};  // 0: this thread's coroutine, 1: the helper's
  std::atomic<bool> done{false};
  std::thread helper([&] {
    Scheduler scheduler(kStackBytes, [] {});
    scheduler.Spawn(&there_parker, [&] {
      while (true) {
        // Acquire pairs with the other side's release store of the turn.
        while (turn.load(std::memory_order_acquire) != 1 && !done.load(std::memory_order_acquire)) {
          scheduler.Park();
        }
        if (done.load(std::memory_order_acquire)) return;
        turn.store(0, std::memory_order_release);
        here_parker.Notify();
      }
    });
    scheduler.Run();
  });
  Scheduler scheduler(kStackBytes, [] {});
  scheduler.Spawn(&here_parker, [&] {
    for (auto _ : state) {
      turn.store(1, std::memory_order_release);
      there_parker.Notify();
      while (turn.load(std::memory_order_acquire) != 0)
        scheduler.Park();
    }
    done.store(true, std::memory_order_release);
    there_parker.Notify();
  });
  scheduler.Run();
  helper.join();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_CrossThreadPingPong)->UseRealTime();

}  // namespace
}  // namespace dmidx::runtime
