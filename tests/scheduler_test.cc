// The coroutine scheduler, its parker, local events (Park/Unpark) and the
// local lock: used directly, across threads, and through Client::Run.
//
// A lost wake-up shows as a hang, so every test that waits runs under a
// watchdog that aborts with the test's name instead of hanging ctest.
#include "lib/runtime/scheduler.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "lock/local_lock.h"
#include "testing/sanitizers.h"
#include "testing/watchdog.h"

namespace dmidx {
namespace {

using runtime::ContextImpl;
using runtime::Parker;
using runtime::Scheduler;

constexpr size_t kStackBytes = size_t{64} << 10;

using testing::Watchdog;

// ---- Parker -----------------------------------------------------------------

TEST(ParkerTest, PermitGrantedBeforeTakeIsKept) {
  Parker parker;
  EXPECT_FALSE(parker.TryConsume());
  parker.Notify();
  EXPECT_TRUE(parker.TryConsume());
  EXPECT_FALSE(parker.TryConsume());
}

TEST(ParkerTest, SeveralGrantsCountOnce) {
  Parker parker;
  parker.Notify();
  parker.Notify();
  parker.Notify();
  EXPECT_TRUE(parker.TryConsume());
  EXPECT_FALSE(parker.TryConsume());
}

// Two threads alternate through two parkers; a plain counter is handed back
// and forth, so the release/acquire of Notify/TryConsume is what orders it.
TEST(ParkerTest, CrossThreadPingPongPublishesWrites) {
  Watchdog watchdog;
  constexpr int kRounds = 20000;
  Parker to_peer, to_main;
  int64_t shared = 0;  // written by whoever holds the turn
  std::thread peer([&] {
    for (int i = 0; i < kRounds; ++i) {
      while (!to_peer.TryConsume())
        std::this_thread::yield();
      shared += 1;
      to_main.Notify();
    }
  });
  int64_t mismatches = 0;
  for (int i = 0; i < kRounds; ++i) {
    shared += 1;
    to_peer.Notify();
    while (!to_main.TryConsume())
      std::this_thread::yield();
    if (shared != 2 * (i + 1)) ++mismatches;
  }
  peer.join();
  EXPECT_EQ(shared, 2 * kRounds);
  EXPECT_EQ(mismatches, 0);
}

// ---- Scheduler used directly --------------------------------------------------

TEST(SchedulerTest, RunWithNothingSpawnedReturns) {
  int polls = 0;
  Scheduler scheduler(kStackBytes, [&] { ++polls; });
  scheduler.Run();
  EXPECT_EQ(scheduler.switches(), 0u);
  EXPECT_EQ(polls, 0);
}

TEST(SchedulerTest, RunsEveryCoroutineOnceInSpawnOrder) {
  constexpr int kCoroutines = 5;
  int polls = 0;
  Scheduler scheduler(kStackBytes, [&] { ++polls; });
  std::array<Parker, kCoroutines> parkers;
  std::vector<int> order;
  const std::thread::id runner = std::this_thread::get_id();
  bool migrated = false;
  for (int i = 0; i < kCoroutines; ++i) {
    scheduler.Spawn(&parkers[i], [&order, &migrated, runner, i] {
      order.push_back(i);
      if (std::this_thread::get_id() != runner) migrated = true;
    });
  }
  EXPECT_TRUE(order.empty());  // nothing runs before Run()
  scheduler.Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(migrated);
  // One switch into each coroutine; none parked, so no poll was needed.
  EXPECT_EQ(scheduler.switches(), 5u);
  EXPECT_EQ(polls, 0);
}

TEST(SchedulerTest, ParkWithPermitReturnsWithoutSwitching) {
  Scheduler scheduler(kStackBytes, [] {});
  Parker parker;
  parker.Notify();  // granted before the coroutine even starts
  int parks_returned = 0;
  scheduler.Spawn(&parker, [&] {
    scheduler.Park();
    ++parks_returned;
  });
  scheduler.Run();
  EXPECT_EQ(parks_returned, 1);
  EXPECT_EQ(scheduler.switches(), 1u);
  EXPECT_FALSE(parker.TryConsume());  // the permit was taken
}

TEST(SchedulerTest, ParkWithoutPermitWaitsUntilPollGrantsOne) {
  Parker parker;
  int polls = 0;
  int polls_seen_after_park = -1;
  Scheduler scheduler(kStackBytes, [&] {
    ++polls;
    if (polls == 3) parker.Notify();
  });
  scheduler.Spawn(&parker, [&] {
    scheduler.Park();
    polls_seen_after_park = polls;
  });
  scheduler.Run();
  // Parked in round 1; polls 1 and 2 grant nothing, poll 3 grants the permit;
  // round 4 resumes the coroutine, which finishes. Two switches in all.
  EXPECT_EQ(polls_seen_after_park, 3);
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(scheduler.switches(), 2u);
}

TEST(SchedulerTest, CoroutineWakesAnotherOnTheSameThread) {
  Scheduler scheduler(kStackBytes, [] {});
  Parker sleeper_parker, waker_parker;
  std::vector<std::string> events;
  scheduler.Spawn(&sleeper_parker, [&] {
    events.push_back("sleeper parks");
    scheduler.Park();
    events.push_back("sleeper wakes");
  });
  scheduler.Spawn(&waker_parker, [&] {
    events.push_back("waker notifies");
    sleeper_parker.Notify();
  });
  scheduler.Run();
  EXPECT_EQ(events, (std::vector<std::string>{"sleeper parks", "waker notifies", "sleeper wakes"}));
  // sleeper, waker, sleeper again.
  EXPECT_EQ(scheduler.switches(), 3u);
}

TEST(SchedulerTest, SwitchesAccumulateOverRuns) {
  Scheduler scheduler(kStackBytes, [] {});
  Parker parker;
  int runs = 0;
  scheduler.Spawn(&parker, [&] { ++runs; });
  scheduler.Run();
  scheduler.Spawn(&parker, [&] { ++runs; });
  scheduler.Spawn(&parker, [&] { ++runs; });
  scheduler.Run();
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(scheduler.switches(), 3u);
}

TEST(SchedulerTest, SpawnedButNeverRunIsDestroyedWithoutRunning) {
  Parker parker;
  bool ran = false;
  auto owned = std::make_shared<int>(1);  // a leak would show under LeakSanitizer
  {
    Scheduler scheduler(kStackBytes, [] {});
    scheduler.Spawn(&parker, [&ran, owned] { ran = true; });
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(owned.use_count(), 1);  // the body (and its captures) are gone
}

// Two coroutines take turns N times. Round 1 runs A then B; B's first Park
// finds the permit A granted, but the turn is still A's, so B parks again.
// From then on each round resumes A once and B once: 2N switches in all.
TEST(SchedulerTest, PingPongOnOneThreadSwitchesTwicePerRound) {
  Watchdog watchdog;
  constexpr int kRounds = 1000;
  int polls = 0;
  Scheduler scheduler(kStackBytes, [&] { ++polls; });
  Parker a_parker, b_parker;
  int turn = 0;  // 0: A's turn, 1: B's
  int a_count = 0, b_count = 0;
  scheduler.Spawn(&a_parker, [&] {
    for (int i = 0; i < kRounds; ++i) {
      while (turn != 0)
        scheduler.Park();
      ++a_count;
      turn = 1;
      b_parker.Notify();
    }
  });
  scheduler.Spawn(&b_parker, [&] {
    for (int i = 0; i < kRounds; ++i) {
      while (turn != 1)
        scheduler.Park();
      ++b_count;
      turn = 0;
      a_parker.Notify();
    }
  });
  scheduler.Run();
  EXPECT_EQ(a_count, kRounds);
  EXPECT_EQ(b_count, kRounds);
  EXPECT_EQ(scheduler.switches(), uint64_t{2} * kRounds);
  EXPECT_EQ(polls, kRounds - 1);
}

#ifndef NDEBUG
TEST(SchedulerDeathTest, ParkOutsideACoroutineAsserts) {
  Scheduler scheduler(kStackBytes, [] {});
  EXPECT_DEATH(scheduler.Park(), "outside a coroutine");
}
#endif

// ---- Schedulers on several threads ------------------------------------------

// Pairs of coroutines, A on one thread's scheduler and B on another's, take
// turns N times through an atomic turn word and each other's parker. The
// shared counter is plain memory: the turn's release/acquire orders it.
TEST(SchedulerTest, PingPongAcrossThreadsCountsExactly) {
  Watchdog watchdog;
  constexpr int kPairs = 4;
  constexpr int kRounds = 10000;
  struct Pair {
    std::atomic<int> turn{0};  // 0: A's turn, 1: B's
    int64_t shared = 0;
    int64_t a_mismatches = 0;
    int64_t b_mismatches = 0;
    Parker a_parker, b_parker;
  };
  std::array<Pair, kPairs> pairs;
  auto side = [&](int me) {
    Scheduler scheduler(kStackBytes, [] {});
    for (Pair& pair : pairs) {
      Parker* mine = me == 0 ? &pair.a_parker : &pair.b_parker;
      Parker* peer = me == 0 ? &pair.b_parker : &pair.a_parker;
      int64_t* mismatches = me == 0 ? &pair.a_mismatches : &pair.b_mismatches;
      scheduler.Spawn(mine, [&scheduler, &pair, peer, mismatches, me] {
        for (int i = 0; i < kRounds; ++i) {
          // Acquire pairs with the peer's release store of the turn.
          while (pair.turn.load(std::memory_order_acquire) != me)
            scheduler.Park();
          if (pair.shared != 2 * i + me) ++*mismatches;
          ++pair.shared;
          pair.turn.store(1 - me, std::memory_order_release);
          peer->Notify();
        }
      });
    }
    scheduler.Run();
  };
  std::thread a_thread(side, 0);
  std::thread b_thread(side, 1);
  a_thread.join();
  b_thread.join();
  for (const Pair& pair : pairs) {
    EXPECT_EQ(pair.shared, 2 * kRounds);
    EXPECT_EQ(pair.a_mismatches, 0);
    EXPECT_EQ(pair.b_mismatches, 0);
  }
}

// Notifier threads hammer the parkers of coroutines that wait for messages.
// Every message is counted before its Notify(), so a coroutine that saw no
// new message and parks must be woken by a later Notify(): none may be lost.
TEST(SchedulerTest, UnparkStormFromOtherThreadsLosesNoWakeUp) {
  Watchdog watchdog;
  constexpr int kCoroutines = 8;
  constexpr int kNotifiers = 2;
  constexpr uint64_t kMessagesPerNotifier = 20000;  // to each coroutine
  constexpr uint64_t kExpected = kNotifiers * kMessagesPerNotifier;
  std::array<Parker, kCoroutines> parkers;
  std::array<std::atomic<uint64_t>, kCoroutines> mailboxes{};
  std::array<uint64_t, kCoroutines> seen{};
  std::array<uint64_t, kCoroutines> parks{};

  Scheduler scheduler(kStackBytes, [] {});
  for (int c = 0; c < kCoroutines; ++c) {
    scheduler.Spawn(&parkers[c], [&, c] {
      while (seen[c] < kExpected) {
        const uint64_t available = mailboxes[c].load(std::memory_order_acquire);
        if (available == seen[c]) {
          ++parks[c];
          scheduler.Park();
          continue;
        }
        seen[c] = available;
      }
    });
  }
  std::vector<std::thread> notifiers;
  for (int t = 0; t < kNotifiers; ++t) {
    notifiers.emplace_back([&] {
      for (uint64_t i = 0; i < kMessagesPerNotifier; ++i) {
        for (int c = 0; c < kCoroutines; ++c) {
          mailboxes[c].fetch_add(1, std::memory_order_release);
          parkers[c].Notify();
        }
      }
    });
  }
  scheduler.Run();
  for (std::thread& notifier : notifiers)
    notifier.join();
  for (int c = 0; c < kCoroutines; ++c) {
    EXPECT_EQ(seen[c], kExpected) << "coroutine " << c;
    EXPECT_EQ(mailboxes[c].load(), kExpected) << "coroutine " << c;
  }
  // Each park is followed by one switch back in; plus the first entry.
  uint64_t total_parks = 0;
  for (uint64_t p : parks)
    total_parks += p;
  EXPECT_LE(scheduler.switches(), total_parks + kCoroutines);
}

// ---- Through Client::Run ------------------------------------------------------

ClusterOptions SmallClusterOptions() {
  ClusterOptions options;
  options.memory_nodes = 1;
  options.memory_node.pool_bytes = uint64_t{8} << 20;
  options.memory_node.chunk_bytes = uint64_t{256} << 10;
  options.memory_node.huge_pages = false;
  options.memory_node.catalog_entries = 64;
  return options;
}

struct TestClient {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> blocking;  // for set-up and checks from the test thread

  ContextImpl& blocking_context() const { return ContextImpl::From(*blocking); }
};

void OpenTestClient(uint32_t threads, uint32_t coroutines, TestClient* out) {
  ASSERT_TRUE(Cluster::Open(SmallClusterOptions(), &out->cluster).ok());
  ClientOptions options;
  options.threads = threads;
  options.coroutines_per_thread = coroutines;
  ASSERT_TRUE(out->cluster->NewClient(options, &out->client).ok());
  ASSERT_TRUE(out->client->NewBlockingContext(&out->blocking).ok());
}

// Reads one 8-byte word through the blocking context.
uint64_t ReadWord(ContextImpl& ctx, fabric::RemoteAddress address) {
  auto* word = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  *word = ~uint64_t{0};
  const fabric::Op read = fabric::Op::Read(address, word, 8);
  EXPECT_TRUE(ctx.Execute(address.node(), {&read, 1}).ok());
  return *word;
}

Status Check(bool condition, const std::string& what) {
  return condition ? Status::Ok() : Status::Internal(what);
}

// A barrier for the coroutines of ONE worker thread, built on Park/Unpark.
// Touched only by that thread, so its fields are plain; if a coroutine ever
// ran on another thread, ThreadSanitizer would flag them.
struct ThreadBarrier {
  uint32_t arrived = 0;
  uint64_t generation = 0;
  std::vector<ContextImpl*> waiting;
  std::thread::id owner;

  void Arrive(ContextImpl& ctx, uint32_t parties) {
    const uint64_t my_generation = generation;
    if (++arrived == parties) {
      arrived = 0;
      ++generation;
      for (ContextImpl* waiter : waiting)
        waiter->Unpark();
      waiting.clear();
      return;
    }
    waiting.push_back(&ctx);
    while (generation == my_generation)
      ctx.Park();
  }
};

// 4 threads x 32 coroutines: each does FAA, WRITE and READ round trips and
// meets its thread's other coroutines at a Park/Unpark barrier every
// iteration. Counts, FAA results and fabric stats are exact.
TEST(RunSchedulingTest, ManyCoroutinesOnSeveralThreadsDoFabricOpsAndPark) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 4;
  constexpr uint32_t kCoroutines = 32;
  constexpr uint32_t kIterations = 40;
  constexpr uint64_t kTotal = uint64_t{kThreads} * kCoroutines * kIterations;
  TestClient test;
  ASSERT_NO_FATAL_FAILURE(OpenTestClient(kThreads, kCoroutines, &test));
  auto slots = test.blocking_context().allocator().Allocate(kThreads * kCoroutines * 64);
  auto counter = test.blocking_context().allocator().Allocate(8);
  ASSERT_TRUE(slots.ok() && counter.ok());
  const Stats before = test.client->stats();

  std::array<ThreadBarrier, kThreads> barriers;
  std::mutex tickets_mutex;
  std::vector<int> tickets(kTotal, 0);  // how often each FAA result was seen
  std::atomic<uint64_t> bodies{0};
  const Status status = test.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    bodies.fetch_add(1, std::memory_order_relaxed);
    const uint32_t t = static_cast<uint32_t>(ctx.thread_index());
    const uint32_t c = static_cast<uint32_t>(ctx.coroutine_index());
    ThreadBarrier& barrier = barriers[t];
    if (c == 0) barrier.owner = std::this_thread::get_id();
    const fabric::RemoteAddress slot = *slots + (t * kCoroutines + c) * 64;
    auto* words = reinterpret_cast<uint64_t*>(ctx.scratch().data());
    std::vector<uint64_t> my_tickets;
    for (uint32_t i = 0; i < kIterations; ++i) {
      const fabric::Op faa = fabric::Op::FetchAdd(*counter, &words[0], 1);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(counter->node(), {&faa, 1}));
      my_tickets.push_back(words[0]);

      words[1] = (uint64_t{t} << 48) | (uint64_t{c} << 32) | i;
      const fabric::Op write = fabric::Op::Write(slot, &words[1], 8);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(slot.node(), {&write, 1}));
      words[2] = 0;
      const fabric::Op read = fabric::Op::Read(slot, &words[2], 8);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(slot.node(), {&read, 1}));
      DMIDX_RETURN_IF_ERROR(Check(words[2] == words[1], "read back a different value"));

      barrier.Arrive(ctx, kCoroutines);
      DMIDX_RETURN_IF_ERROR(
          Check(barrier.owner == std::this_thread::get_id(), "coroutine changed threads"));
    }
    std::lock_guard<std::mutex> guard(tickets_mutex);
    for (uint64_t ticket : my_tickets) {
      if (ticket < kTotal) ++tickets[ticket];
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(bodies.load(), uint64_t{kThreads} * kCoroutines);
  EXPECT_EQ(ReadWord(test.blocking_context(), *counter), kTotal);
  for (uint64_t ticket = 0; ticket < kTotal; ++ticket) {
    ASSERT_EQ(tickets[ticket], 1) << "FAA result " << ticket;
  }
  for (const ThreadBarrier& barrier : barriers)
    EXPECT_EQ(barrier.generation, kIterations);

  Stats expected;
  expected.round_trips = 3 * kTotal;
  expected.batches = 3 * kTotal;
  expected.fetch_adds = kTotal;
  expected.writes = kTotal;
  expected.reads = kTotal;
  expected.bytes_read = 16 * kTotal;     // 8 per FAA + 8 per READ
  expected.bytes_written = 16 * kTotal;  // 8 per FAA + 8 per WRITE
  // One more READ by the blocking context (ReadWord above).
  expected.round_trips += 1;
  expected.batches += 1;
  expected.reads += 1;
  expected.bytes_read += 8;
  EXPECT_EQ(test.client->stats() - before, expected) << (test.client->stats() - before).ToString();
}

// A barrier for every coroutine of every thread: the last to arrive Unparks
// the others from its own thread. Each round writes plain per-coroutine
// values before the barrier and reads all of them after it.
TEST(RunSchedulingTest, CrossThreadBarrierOnParkUnpark) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 2;
  constexpr uint32_t kCoroutines = 8;
  constexpr uint32_t kParties = kThreads * kCoroutines;
  constexpr uint64_t kRounds = 300;
  TestClient test;
  ASSERT_NO_FATAL_FAILURE(OpenTestClient(kThreads, kCoroutines, &test));

  struct GlobalBarrier {
    std::mutex mutex;
    uint32_t arrived = 0;               // guarded by mutex
    std::vector<ContextImpl*> waiting;  // guarded by mutex
    std::atomic<uint64_t> generation{0};

    void Arrive(ContextImpl& ctx) {
      uint64_t my_generation;
      std::vector<ContextImpl*> wake;
      {
        std::lock_guard<std::mutex> guard(mutex);
        my_generation = generation.load(std::memory_order_relaxed);
        if (++arrived == kParties) {
          arrived = 0;
          wake.swap(waiting);
          // Release pairs with the waiters' acquire load below: what every
          // party wrote before arriving is visible once they see the change.
          generation.store(my_generation + 1, std::memory_order_release);
        } else {
          waiting.push_back(&ctx);
        }
      }
      for (ContextImpl* waiter : wake)
        waiter->Unpark();
      while (generation.load(std::memory_order_acquire) == my_generation)
        ctx.Park();
    }
  } barrier;
  std::vector<uint64_t> values(kParties, 0);

  const Status status = test.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const size_t me = ctx.thread_index() * kCoroutines + ctx.coroutine_index();
    for (uint64_t round = 1; round <= kRounds; ++round) {
      values[me] = round;
      barrier.Arrive(ctx);
      for (uint64_t value : values) {
        DMIDX_RETURN_IF_ERROR(Check(value == round, "a party's write was not visible"));
      }
      barrier.Arrive(ctx);
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(barrier.generation.load(), 2 * kRounds);
}

// ---- LocalLock ------------------------------------------------------------------

TEST(LocalLockTest, TryLockFailsWhileHeld) {
  lock::LocalLock lock;
  EXPECT_TRUE(lock.TryLock());
  EXPECT_FALSE(lock.TryLock());
  lock.Unlock();
  EXPECT_TRUE(lock.TryLock());
  lock.Unlock();
  EXPECT_EQ(lock.waiters(), 0u);
}

// All coroutines of ONE thread contend; the holder suspends inside the
// critical section (a READ round trip), so the others really queue. A plain
// counter is read before and written after the suspension: any overlap of
// two holders would lose an increment. The scheduler resumes coroutines in
// spawn order, so the FIFO order is exactly 0, 1, ..., n-1 repeated, and
// every acquisition but the very first is a handover.
TEST(LocalLockTest, CoroutinesOfOneThreadTakeTurnsInFifoOrder) {
  Watchdog watchdog;
  constexpr uint32_t kCoroutines = 16;
  constexpr uint32_t kIterations = 50;
  TestClient test;
  ASSERT_NO_FATAL_FAILURE(OpenTestClient(1, kCoroutines, &test));
  auto word = test.blocking_context().allocator().Allocate(8);
  ASSERT_TRUE(word.ok());

  lock::LocalLock lock;
  uint64_t counter = 0;
  std::vector<uint32_t> arrivals;
  std::vector<uint32_t> order;  // of acquisitions
  uint64_t handovers = 0;
  const Status status = test.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    auto* buffer = reinterpret_cast<uint64_t*>(ctx.scratch().data());
    for (uint32_t i = 0; i < kIterations; ++i) {
      // Nothing suspends between arriving and queueing inside Lock(), so on
      // one thread arrival order is queue order.
      arrivals.push_back(static_cast<uint32_t>(ctx.coroutine_index()));
      if (lock.Lock(ctx)) ++handovers;
      const uint64_t seen = counter;
      order.push_back(static_cast<uint32_t>(ctx.coroutine_index()));
      const fabric::Op read = fabric::Op::Read(*word, buffer, 8);
      const Status read_status = ctx.Execute(word->node(), {&read, 1});
      counter = seen + 1;
      lock.Unlock();
      DMIDX_RETURN_IF_ERROR(read_status);
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(counter, uint64_t{kCoroutines} * kIterations);
  EXPECT_EQ(handovers, uint64_t{kCoroutines} * kIterations - 1);
  ASSERT_EQ(order.size(), size_t{kCoroutines} * kIterations);
  EXPECT_EQ(order, arrivals);  // first come, first served
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_EQ(order[i], i % kCoroutines) << "acquisition " << i;
  }
  EXPECT_EQ(lock.waiters(), 0u);
  EXPECT_TRUE(lock.TryLock());
  lock.Unlock();
}

// Coroutines of several threads contend. Mutual exclusion is checked with an
// atomic occupancy count and with a plain counter (a missing happens-before
// edge on handover is a ThreadSanitizer report).
TEST(LocalLockTest, CoroutinesOfSeveralThreadsExcludeEachOther) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 4;
  constexpr uint32_t kCoroutines = 8;
  constexpr uint32_t kIterations = 200;
  constexpr uint64_t kTotal = uint64_t{kThreads} * kCoroutines * kIterations;
  TestClient test;
  ASSERT_NO_FATAL_FAILURE(OpenTestClient(kThreads, kCoroutines, &test));
  auto word = test.blocking_context().allocator().Allocate(8);
  ASSERT_TRUE(word.ok());

  lock::LocalLock lock;
  uint64_t counter = 0;  // guarded by lock
  std::atomic<int> inside{0};
  std::atomic<uint64_t> overlaps{0}, handovers{0}, free_acquisitions{0};
  const Status status = test.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    auto* buffer = reinterpret_cast<uint64_t*>(ctx.scratch().data());
    for (uint32_t i = 0; i < kIterations; ++i) {
      (lock.Lock(ctx) ? handovers : free_acquisitions).fetch_add(1, std::memory_order_relaxed);
      if (inside.fetch_add(1, std::memory_order_relaxed) != 0) {
        overlaps.fetch_add(1, std::memory_order_relaxed);
      }
      const uint64_t seen = counter;
      const fabric::Op faa = fabric::Op::FetchAdd(*word, buffer, 1);
      const Status faa_status = ctx.Execute(word->node(), {&faa, 1});
      // Under the lock the remote word moves in step with the counter.
      const bool in_step = faa_status.ok() && *buffer == seen;
      counter = seen + 1;
      inside.fetch_sub(1, std::memory_order_relaxed);
      lock.Unlock();
      DMIDX_RETURN_IF_ERROR(faa_status);
      DMIDX_RETURN_IF_ERROR(Check(in_step, "remote word and counter diverged"));
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(counter, kTotal);
  EXPECT_EQ(overlaps.load(), 0u);
  EXPECT_EQ(handovers.load() + free_acquisitions.load(), kTotal);
  EXPECT_GE(free_acquisitions.load(), 1u);
  EXPECT_EQ(ReadWord(test.blocking_context(), *word), kTotal);
  EXPECT_EQ(lock.waiters(), 0u);
  EXPECT_TRUE(lock.TryLock());
  lock.Unlock();
}

// Blocking contexts on separate threads queue one at a time behind a held
// lock; unlocking hands it down the queue in arrival order.
TEST(LocalLockTest, HandoverAcrossThreadsIsFirstComeFirstServed) {
  Watchdog watchdog;
  constexpr int kWaiters = 4;
  TestClient test;
  ASSERT_NO_FATAL_FAILURE(OpenTestClient(1, 1, &test));

  lock::LocalLock lock;
  ASSERT_TRUE(lock.TryLock());  // held by the test thread
  std::vector<int> order;       // guarded by lock
  std::array<std::atomic<int>, kWaiters> handed_over{};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWaiters; ++w) {
    threads.emplace_back([&, w] {
      std::unique_ptr<Context> context;
      if (!test.client->NewBlockingContext(&context).ok()) {
        handed_over[w] = -1;
        return;
      }
      handed_over[w] = lock.Lock(ContextImpl::From(*context)) ? 1 : 0;
      order.push_back(w);
      lock.Unlock();
    });
    // Start the next waiter only once this one is queued.
    while (lock.waiters() != static_cast<size_t>(w + 1) && handed_over[w] != -1) {
      std::this_thread::yield();
    }
    if (handed_over[w] == -1) {
      ADD_FAILURE() << "waiter " << w << " has no context";
      break;
    }
  }
  lock.Unlock();
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  for (int w = 0; w < kWaiters; ++w)
    EXPECT_EQ(handed_over[w].load(), 1) << "waiter " << w;
  EXPECT_EQ(lock.waiters(), 0u);
  EXPECT_TRUE(lock.TryLock());
  lock.Unlock();
}

// Regression: Unlock() set the waiter's `granted` flag and only then
// unparked its context. A waiter that saw `granted` before that Unpark (it
// checks right after queueing, and again after every stale permit) could
// return, unlock, and destroy its blocking context while Unlock() was about
// to write the context's parker: a use after free. Here blocking contexts
// are made and destroyed around every hand-off (each does a READ first, so
// it often carries a stale permit into Lock()); AddressSanitizer reports the
// write to a freed context, ThreadSanitizer the race with its destruction.
TEST(LocalLockTest, HandoverToAContextDestroyedRightAfterIsSafe) {
  Watchdog watchdog;
  constexpr int kThreads = 4;
  // A context per iteration is the expensive part under a sanitizer; a
  // quarter of them still hands the lock over hundreds of times there.
  constexpr int kIterations = testing::kAnySanitizer ? 500 : 2000;
  TestClient test;
  ASSERT_NO_FATAL_FAILURE(OpenTestClient(1, 1, &test));
  auto word = test.blocking_context().allocator().Allocate(8);
  ASSERT_TRUE(word.ok());

  lock::LocalLock lock;
  uint64_t counter = 0;  // guarded by lock
  std::atomic<uint64_t> handovers{0};
  std::atomic<bool> failed{false};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // Start together, or each thread may finish before the next starts.
      ready.fetch_add(1);
      while (ready.load() < kThreads)
        std::this_thread::yield();
      for (int i = 0; i < kIterations && !failed.load(std::memory_order_relaxed); ++i) {
        std::unique_ptr<Context> context;
        if (!test.client->NewBlockingContext(&context).ok()) {
          failed = true;
          return;
        }
        auto& ctx = ContextImpl::From(*context);
        auto* buffer = reinterpret_cast<uint64_t*>(ctx.scratch().data());
        const fabric::Op read = fabric::Op::Read(*word, buffer, 8);
        if (!ctx.Execute(word->node(), {&read, 1}).ok()) failed = true;
        if (lock.Lock(ctx)) handovers.fetch_add(1, std::memory_order_relaxed);
        ++counter;
        // Hold the lock a little (a round trip and a few microseconds), so
        // the other threads queue behind it.
        if (!ctx.Execute(word->node(), {&read, 1}).ok()) failed = true;
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
        lock.Unlock();
        context.reset();  // right after the hand-off, as a short-lived caller would
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  ASSERT_FALSE(failed.load());
  EXPECT_EQ(counter, uint64_t{kThreads} * kIterations);
  EXPECT_GT(handovers.load(), 0u) << "no hand-off happened; the test proves nothing";
  EXPECT_EQ(lock.waiters(), 0u);
}

}  // namespace
}  // namespace dmidx
