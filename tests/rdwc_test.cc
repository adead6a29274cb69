// RDWC (lock/rdwc.h): read delegation and write combining in controlled
// schedules with exact counts, the window rules (a read window closes at the
// READ, a write window at the write-back, a closed group takes no joiners,
// the next group of its key waits for it),
// fallbacks, hash conflicts, and a multi-thread stress checking that no read
// returns a value older than a write completed before the read began.
//
// Single-thread schedules rely on the scheduler's round robin: a coroutine
// runs until it yields or parks, and then every other runnable coroutine of
// its thread runs once before it resumes. Waits on another coroutine's
// progress are Yield loops on flags, so the schedules do not depend on the
// order in which coroutines start.
#include "lock/rdwc.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/runtime/context.h"
#include "lock/lock_queue.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"

namespace dmidx::lock {
namespace {

using runtime::ContextImpl;
using testing::Watchdog;

// Runs work(ctx) on every context of a fresh client of `threads` x
// `coroutines` contexts and expects every call to return OK. On the sim
// backend time is virtual: it passes only while every coroutine waits
// (ctx.SleepUntil), so arrivals and timeouts fall at exact times.
void RunContexts(uint32_t threads, uint32_t coroutines,
                 const std::function<Status(ContextImpl&)>& work,
                 FabricBackend backend = FabricBackend::kLocal) {
  std::unique_ptr<Cluster> cluster;
  if (backend == FabricBackend::kLocal) {
    cluster = testing::OpenCluster(/*faults=*/false, /*memory_nodes=*/1);
  } else {
    ClusterOptions options = testing::SmallLocalCluster(
        /*memory_nodes=*/1, uint64_t{16} << 20, /*faults=*/false, std::chrono::microseconds(0));
    options.backend = backend;
    const Status opened = Cluster::Open(options, &cluster);
    ASSERT_TRUE(opened.ok()) << opened.ToString();
  }
  ASSERT_NE(cluster, nullptr);
  auto client = testing::NewClient(*cluster, threads, coroutines);
  ASSERT_NE(client, nullptr);
  const Status status =
      client->Run([&](Context& context) { return work(ContextImpl::From(context)); });
  ASSERT_TRUE(status.ok()) << status.ToString();
}

void YieldTimes(ContextImpl& ctx, int times) {
  for (int i = 0; i < times; ++i)
    ctx.Yield();
}

// Yields until `condition` holds (another coroutine of this thread sets it).
void YieldUntil(ContextImpl& ctx, const std::function<bool()>& condition) {
  while (!condition())
    ctx.Yield();
}

constexpr int kCoroutines = 8;
// The lock_timeout of every Write() whose test does not look at timeouts:
// none of their bodies waits for a lock.
constexpr std::chrono::nanoseconds kLockTimeout = std::chrono::seconds(10);

// One outcome per coroutine of a single-thread run.
struct Outcomes {
  Outcomes() { status.fill(Status::Internal("no outcome recorded")); }

  std::array<Status, kCoroutines> status;
  std::array<uint64_t, kCoroutines> value{};
  std::array<uint64_t, kCoroutines> delegated{};  // ctx.counters().delegated_reads taken
  std::array<uint64_t, kCoroutines> combined{};   // ctx.counters().combined_writes taken

  uint64_t TotalDelegated() const {
    uint64_t sum = 0;
    for (uint64_t d : delegated)
      sum += d;
    return sum;
  }
  uint64_t TotalCombined() const {
    uint64_t sum = 0;
    for (uint64_t c : combined)
      sum += c;
    return sum;
  }
};

// Read() of `key` by coroutine ctx.coroutine_index(), its outcome recorded.
void RecordedRead(Rdwc& rdwc, ContextImpl& ctx, std::string_view key, Outcomes& out,
                  const Rdwc::ReadBody& body) {
  const int i = ctx.coroutine_index();
  const uint64_t before = ctx.counters().delegated_reads;
  out.status[i] = rdwc.Read(ctx, key, &out.value[i], body);
  out.delegated[i] = ctx.counters().delegated_reads - before;
}

void RecordedWrite(Rdwc& rdwc, ContextImpl& ctx, std::string_view key, uint64_t value,
                   Outcomes& out, const Rdwc::WriteBody& body,
                   std::chrono::nanoseconds lock_timeout = kLockTimeout) {
  const int i = ctx.coroutine_index();
  const uint64_t before = ctx.counters().combined_writes;
  out.status[i] = rdwc.Write(ctx, key, value, lock_timeout, body);
  out.combined[i] = ctx.counters().combined_writes - before;
}

// ---- Read delegation ----------------------------------------------------

// The leader yields before its READ, so every other coroutine of the thread
// arrives and joins: one body run serves all.
TEST(RdwcTest, ReadDelegationOneBodyServesEveryReader) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  const uint64_t remote = 42;
  int body_runs = 0;
  Outcomes out;
  RunContexts(1, kCoroutines, [&](ContextImpl& ctx) {
    RecordedRead(rdwc, ctx, "key", out, [&](Rdwc::ReadWindow& window, uint64_t* value) {
      ++body_runs;
      YieldTimes(ctx, 3);
      window.Close();
      window.Close();  // idempotent
      *value = remote;
      return Status::Ok();
    });
    return Status::Ok();
  });
  EXPECT_EQ(body_runs, 1);
  int leaders = 0;
  for (int i = 0; i < kCoroutines; ++i) {
    EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
    EXPECT_EQ(out.value[i], remote) << i;
    leaders += out.delegated[i] == 0;
  }
  EXPECT_EQ(leaders, 1);
  EXPECT_EQ(out.TotalDelegated(), kCoroutines - 1);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.reads_led, 1u);
  EXPECT_EQ(stats.reads_delegated, kCoroutines - 1u);
  EXPECT_EQ(stats.fallbacks, 0u);
  EXPECT_EQ(stats.conflicts, 0u);
}

// NotFound is an answer: it is shared like a value.
TEST(RdwcTest, ReadDelegationSharesNotFound) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  int body_runs = 0;
  Outcomes out;
  RunContexts(1, kCoroutines, [&](ContextImpl& ctx) {
    RecordedRead(rdwc, ctx, "absent", out, [&](Rdwc::ReadWindow& window, uint64_t*) {
      ++body_runs;
      YieldTimes(ctx, 3);
      window.Close();
      return Status::NotFound("absent");
    });
    return Status::Ok();
  });
  EXPECT_EQ(body_runs, 1);
  for (int i = 0; i < kCoroutines; ++i)
    EXPECT_TRUE(out.status[i].IsNotFound()) << i << ": " << out.status[i].ToString();
  EXPECT_EQ(out.TotalDelegated(), kCoroutines - 1);
  EXPECT_EQ(rdwc.stats().reads_delegated, kCoroutines - 1u);
  EXPECT_EQ(rdwc.stats().fallbacks, 0u);
}

// A leader that shares nothing: joiners run their own body. The leader's
// run returns 1 (or fails); the fallbacks' runs close and return 2. A lock
// timeout is not shared either: a lookup's joiners waited for no lock.
enum class ReadLeaderEnd { kNoClose, kErrorAfterClose, kLockTimeoutAfterClose };

class RdwcReadFallbackTest : public ::testing::TestWithParam<ReadLeaderEnd> {};

TEST_P(RdwcReadFallbackTest, JoinersRunTheirOwnBody) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  int body_runs = 0;
  Outcomes out;
  int leader = -1;
  RunContexts(1, kCoroutines, [&](ContextImpl& ctx) {
    RecordedRead(rdwc, ctx, "key", out, [&](Rdwc::ReadWindow& window, uint64_t* value) {
      if (body_runs++ == 0) {
        leader = ctx.coroutine_index();
        YieldTimes(ctx, 3);
        if (GetParam() == ReadLeaderEnd::kNoClose) {
          *value = 1;  // e.g. answered from a cache: no READ posted
          return Status::Ok();
        }
        window.Close();
        YieldTimes(ctx, 1);
        if (GetParam() == ReadLeaderEnd::kLockTimeoutAfterClose) {
          // e.g. the B+tree's proof of damage, under a lock held too long
          return LockTimeout("test: lock word held too long");
        }
        return Status::Unavailable("memory node gone");
      }
      window.Close();
      *value = 2;
      return Status::Ok();
    });
    return Status::Ok();
  });
  ASSERT_GE(leader, 0);
  EXPECT_EQ(body_runs, kCoroutines);
  for (int i = 0; i < kCoroutines; ++i) {
    if (i == leader) {
      if (GetParam() == ReadLeaderEnd::kNoClose) {
        EXPECT_TRUE(out.status[i].ok()) << out.status[i].ToString();
        EXPECT_EQ(out.value[i], 1u);
      } else if (GetParam() == ReadLeaderEnd::kLockTimeoutAfterClose) {
        EXPECT_TRUE(IsLockTimeout(out.status[i])) << out.status[i].ToString();
      } else {
        EXPECT_EQ(out.status[i].code(), StatusCode::kUnavailable) << out.status[i].ToString();
      }
      continue;
    }
    EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
    EXPECT_EQ(out.value[i], 2u) << i;
  }
  EXPECT_EQ(out.TotalDelegated(), 0u);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.reads_led, 1u);
  EXPECT_EQ(stats.reads_delegated, 0u);
  EXPECT_EQ(stats.fallbacks, kCoroutines - 1u);
}

INSTANTIATE_TEST_SUITE_P(LeaderEnds, RdwcReadFallbackTest,
                         ::testing::Values(ReadLeaderEnd::kNoClose, ReadLeaderEnd::kErrorAfterClose,
                                           ReadLeaderEnd::kLockTimeoutAfterClose));

// ---- Write combining ----------------------------------------------------

// Coroutine i writes 1000 - i, so the last arrival's value is the smallest
// and neither the first nor the largest: Close() must return the value
// deposited last, and one remote write carries every write.
TEST(RdwcTest, WriteCombiningWritesTheLastArrivalOnce) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  uint64_t remote = 0;
  int remote_writes = 0;
  std::vector<int> arrivals;
  std::vector<uint64_t> closed_values;
  Outcomes out;
  RunContexts(1, kCoroutines, [&](ContextImpl& ctx) {
    const int i = ctx.coroutine_index();
    arrivals.push_back(i);
    RecordedWrite(rdwc, ctx, "key", 1000 - i, out, [&](Rdwc::WriteWindow& window) {
      YieldTimes(ctx, 3);
      const uint64_t value = window.Close();
      closed_values.push_back(value);
      closed_values.push_back(window.Close());  // idempotent
      ++remote_writes;
      remote = value;
      return Status::Ok();
    });
    return Status::Ok();
  });
  ASSERT_EQ(arrivals.size(), static_cast<size_t>(kCoroutines));
  const uint64_t last = 1000 - arrivals.back();
  EXPECT_EQ(remote_writes, 1);
  EXPECT_EQ(remote, last);
  EXPECT_EQ(closed_values, (std::vector<uint64_t>{last, last}));
  for (int i = 0; i < kCoroutines; ++i)
    EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
  EXPECT_EQ(out.combined[arrivals.front()], 0u);  // the leader
  EXPECT_EQ(out.TotalCombined(), kCoroutines - 1);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.writes_led, 1u);
  EXPECT_EQ(stats.writes_combined, kCoroutines - 1u);
  EXPECT_EQ(stats.fallbacks, 0u);
  EXPECT_EQ(stats.conflicts, 0u);
}

// A leader alone: Close() returns its own value.
TEST(RdwcTest, WriteLeaderAloneWritesItsOwnValue) {
  Watchdog watchdog;
  Rdwc rdwc(4);
  uint64_t remote = 0;
  RunContexts(1, 1, [&](ContextImpl& ctx) {
    return rdwc.Write(ctx, "key", 7, kLockTimeout, [&](Rdwc::WriteWindow& window) {
      remote = window.Close();
      return Status::Ok();
    });
  });
  EXPECT_EQ(remote, 7u);
  EXPECT_EQ(rdwc.stats().writes_led, 1u);
  EXPECT_EQ(rdwc.stats().writes_combined, 0u);
}

// A leader that shares nothing: no Close (the key was absent and it
// inserted its own value), or an error or NotFound after Close, a
// DeadlineExceeded that is no lock timeout (an op timed out) included.
// Every joiner runs its own body, whose Close() returns its own value.
enum class WriteLeaderEnd { kNoClose, kErrorAfterClose, kNotFoundAfterClose, kOpTimeoutAfterClose };

class RdwcWriteFallbackTest : public ::testing::TestWithParam<WriteLeaderEnd> {};

TEST_P(RdwcWriteFallbackTest, JoinersRunTheirOwnBody) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  int body_runs = 0;
  std::vector<uint64_t> written;  // by every body that wrote, in order
  int leader = -1;
  Outcomes out;
  RunContexts(1, kCoroutines, [&](ContextImpl& ctx) {
    const int i = ctx.coroutine_index();
    const uint64_t own = 1000 - i;
    RecordedWrite(rdwc, ctx, "key", own, out, [&](Rdwc::WriteWindow& window) {
      if (body_runs++ == 0) {
        leader = i;
        YieldTimes(ctx, 3);
        switch (GetParam()) {
          case WriteLeaderEnd::kNoClose:
            written.push_back(own);
            return Status::Ok();
          case WriteLeaderEnd::kErrorAfterClose:
            (void)window.Close();
            return Status::Unavailable("memory node gone");
          case WriteLeaderEnd::kNotFoundAfterClose:
            (void)window.Close();
            return Status::NotFound("key removed meanwhile");
          case WriteLeaderEnd::kOpTimeoutAfterClose:
            (void)window.Close();
            return Status::DeadlineExceeded("test: the write-back's completion never came");
        }
      }
      written.push_back(window.Close());
      return Status::Ok();
    });
    return Status::Ok();
  });
  ASSERT_GE(leader, 0);
  EXPECT_EQ(body_runs, kCoroutines);
  const bool leader_wrote = GetParam() == WriteLeaderEnd::kNoClose;
  ASSERT_EQ(written.size(), static_cast<size_t>(kCoroutines - (leader_wrote ? 0 : 1)));
  // Each fallback wrote its own value (joiners resume in arrival order).
  std::vector<uint64_t> expected;
  for (int i = 0; i < kCoroutines; ++i)
    if (i != leader || leader_wrote) expected.push_back(1000 - i);
  EXPECT_EQ(written, expected);
  for (int i = 0; i < kCoroutines; ++i) {
    if (i == leader && !leader_wrote) {
      EXPECT_FALSE(out.status[i].ok());
    } else {
      EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
    }
  }
  EXPECT_EQ(out.TotalCombined(), 0u);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.writes_led, 1u);
  EXPECT_EQ(stats.writes_combined, 0u);
  EXPECT_EQ(stats.fallbacks, kCoroutines - 1u);
}

INSTANTIATE_TEST_SUITE_P(LeaderEnds, RdwcWriteFallbackTest,
                         ::testing::Values(WriteLeaderEnd::kNoClose,
                                           WriteLeaderEnd::kErrorAfterClose,
                                           WriteLeaderEnd::kNotFoundAfterClose,
                                           WriteLeaderEnd::kOpTimeoutAfterClose));

// A Write() arriving after the leader's Close() does not join the closed
// group (its value could not be in the write-back): it leads its own,
// which waits for the first group to finish before its body runs (one
// write-back of a key in flight per compute node), so the writes land in
// arrival order.
TEST(RdwcTest, WriteAfterCloseLeadsANewGroup) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  std::vector<uint64_t> written;
  bool first_closed = false;
  bool second_done = false;
  Outcomes out;
  RunContexts(1, 2, [&](ContextImpl& ctx) {
    if (ctx.coroutine_index() == 0) {
      RecordedWrite(rdwc, ctx, "key", 10, out, [&](Rdwc::WriteWindow& window) {
        const uint64_t value = window.Close();
        first_closed = true;
        // Bounded: a wrong join by coroutine 1 must fail, not hang.
        YieldTimes(ctx, 5);
        written.push_back(value);
        return Status::Ok();
      });
    } else {
      YieldUntil(ctx, [&] { return first_closed; });
      RecordedWrite(rdwc, ctx, "key", 20, out, [&](Rdwc::WriteWindow& window) {
        written.push_back(window.Close());
        return Status::Ok();
      });
      second_done = true;
    }
    return Status::Ok();
  });
  EXPECT_TRUE(second_done);
  EXPECT_EQ(written, (std::vector<uint64_t>{10, 20}));
  EXPECT_TRUE(out.status[0].ok());
  EXPECT_TRUE(out.status[1].ok());
  EXPECT_EQ(out.TotalCombined(), 0u);
  EXPECT_EQ(rdwc.stats().writes_led, 2u);
  EXPECT_EQ(rdwc.stats().conflicts, 0u);
}

// Coroutine 0 reads "key", closing its window at once; the others arrive
// while its READ flies and form the next group. The first body ends in
// `first` (value 100 if OK), the next in value 101. Returns the body runs.
int RunReadersBehindAFlyingRead(Rdwc& rdwc, const Status& first, Outcomes& out) {
  int body_runs = 0;
  bool first_closed = false;
  RunContexts(1, kCoroutines, [&](ContextImpl& ctx) {
    if (ctx.coroutine_index() != 0) YieldUntil(ctx, [&] { return first_closed; });
    RecordedRead(rdwc, ctx, "key", out, [&](Rdwc::ReadWindow& window, uint64_t* value) {
      const int run = body_runs++;
      window.Close();
      if (run == 0) first_closed = true;
      YieldTimes(ctx, 3);  // the READ in flight
      *value = 100 + run;
      return run == 0 ? first : Status::Ok();
    });
    return Status::Ok();
  });
  return body_runs;
}

// With a warm cache a lookup's leader closes its window at once and its
// READ flies: readers arriving meanwhile must not join it, but they need
// not each send a READ either. The first of them leads the next group and
// waits for the flying READ to land; the others join that group: two body
// runs serve eight readers. The same when the flying READ's lookup ends in
// a lock timeout: a read group shares none, not with the next group's
// waiting leader either.
TEST(RdwcTest, ReadersArrivingWhileAReadFliesShareTheNextOne) {
  for (const Status& first : {Status::Ok(), LockTimeout("test: lock word held too long")}) {
    SCOPED_TRACE(first.ToString());
    Watchdog watchdog;
    Rdwc rdwc(64);
    Outcomes out;
    EXPECT_EQ(RunReadersBehindAFlyingRead(rdwc, first, out), 2);
    EXPECT_EQ(out.status[0], first);
    if (first.ok()) {
      EXPECT_EQ(out.value[0], 100u);
    }
    for (int i = 1; i < kCoroutines; ++i) {
      EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
      EXPECT_EQ(out.value[i], 101u) << i;
    }
    EXPECT_EQ(out.TotalDelegated(), kCoroutines - 2u);
    EXPECT_EQ(rdwc.stats().reads_led, 2u);
    EXPECT_EQ(rdwc.stats().reads_delegated, kCoroutines - 2u);
    EXPECT_EQ(rdwc.stats().fallbacks, 0u);
  }
}

// ---- Lock timeouts of write groups ----------------------------------------
//
// On the sim backend (virtual time): the leader (coroutine 0) arrives at
// arrival[0] and its body waits for a lock held by a dead holder, giving
// up kOvershoot past its own deadline (arrival[0] + kTimeout), as
// LockRetry's last backoff overshoots it. Each waiter takes that lock timeout only if its
// own deadline (its arrival + kTimeout) had passed by then; a later one
// runs its own body, whose lock deadline still counts from its arrival.

constexpr std::chrono::nanoseconds kTimeout = std::chrono::milliseconds(1);
constexpr std::chrono::nanoseconds kOvershoot = std::chrono::microseconds(2);

// rdwc.stats()'s writes_led, writes_combined and fallbacks.
std::array<uint64_t, 3> WriteCounts(const Rdwc& rdwc) {
  const RdwcStats stats = rdwc.stats();
  return {stats.writes_led, stats.writes_combined, stats.fallbacks};
}

// What the lock-timeout schedules record.
struct TimeoutRun {
  std::array<std::chrono::nanoseconds, kCoroutines> arrival{};
  std::chrono::nanoseconds gave_up{0};  // the leader's clock when its body returned
  std::vector<int> bodies;              // coroutine of each body run, in order
  // The lock deadline a body met (lock::LockDeadline, as its first lock
  // would), by coroutine; unset: it ran no body or took no lock.
  std::array<std::optional<std::chrono::nanoseconds>, kCoroutines> lock_deadline;
  // A lock wait origin left behind in ctx after Write() returned.
  std::array<bool, kCoroutines> origin_left{};
  Outcomes out;

  // Write() of "key" by coroutine i, recording its arrival.
  void Write(Rdwc& rdwc, ContextImpl& ctx, const Rdwc::WriteBody& body) {
    const int i = ctx.coroutine_index();
    arrival[i] = ctx.Now();
    RecordedWrite(rdwc, ctx, "key", 100 + i, out, body, kTimeout);
    origin_left[i] = ctx.TakeLockWaitOrigin().has_value();
  }
  // The leader's body: holds the window open until `close_at` (from its
  // arrival), then gives up at arrival + kTimeout + kOvershoot with `end`
  // (default: a lock timeout).
  Status Leader(ContextImpl& ctx, Rdwc::WriteWindow& window, std::chrono::nanoseconds close_at,
                bool* closed, const Status& end = LockTimeout("test: the key's lock stayed held")) {
    bodies.push_back(ctx.coroutine_index());
    ctx.SleepUntil(arrival[0] + close_at);
    (void)window.Close();
    *closed = true;
    ctx.SleepUntil(arrival[0] + kTimeout + kOvershoot);
    gave_up = ctx.Now();
    return end;
  }
  // A waiter's own body: its lock deadline taken (lock_deadline) or not,
  // then a write that succeeds (the holder let go meanwhile).
  Status Own(ContextImpl& ctx, Rdwc::WriteWindow& window, bool take_lock) {
    const int i = ctx.coroutine_index();
    bodies.push_back(i);
    if (take_lock) lock_deadline[i] = LockDeadline(ctx, ctx.Now(), kTimeout);
    (void)window.Close();
    return Status::Ok();
  }
};

// Joiners of the leader's group: coroutine 1 arrives with the leader,
// coroutine 2 kTimeout / 2 later, and the leader's body ends in `end`.
TimeoutRun RunJoinersOfATimedOutLeader(Rdwc& rdwc, const Status& end) {
  TimeoutRun run;
  bool leader_in_body = false, closed = false;
  RunContexts(
      1, 3,
      [&](ContextImpl& ctx) {
        const int i = ctx.coroutine_index();
        if (i == 0) {
          run.Write(rdwc, ctx, [&](Rdwc::WriteWindow& window) {
            leader_in_body = true;
            return run.Leader(ctx, window, kTimeout + kOvershoot, &closed, end);
          });
          return Status::Ok();
        }
        YieldUntil(ctx, [&] { return leader_in_body; });
        if (i == 2) ctx.SleepUntil(run.arrival[0] + kTimeout / 2);
        run.Write(rdwc, ctx, [&](Rdwc::WriteWindow& window) {
          return run.Own(ctx, window, /*take_lock=*/false);
        });
        return Status::Ok();
      },
      FabricBackend::kSim);
  // The schedule: coroutine 1's deadline passed before the leader gave up,
  // coroutine 2's not, and both joined before the leader closed.
  EXPECT_LE(run.arrival[1] + kTimeout, run.gave_up);
  EXPECT_GT(run.arrival[2] + kTimeout, run.gave_up);
  EXPECT_LT(run.arrival[2], run.arrival[0] + kTimeout + kOvershoot);
  return run;
}

// Coroutine 1 takes the leader's lock timeout without running a body (the
// rule the waiters of a lock's local queue follow); coroutine 2 has not
// waited its lock_timeout when the leader gives up and runs its own body,
// which takes no lock: nothing of its arrival stays behind in ctx.
TEST(RdwcTest, LockTimeoutGoesToJoinersWhoseOwnDeadlinePassed) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  const TimeoutRun run = RunJoinersOfATimedOutLeader(rdwc, LockTimeout("test: lock held"));
  EXPECT_EQ(run.bodies, (std::vector<int>{0, 2}));
  EXPECT_TRUE(IsLockTimeout(run.out.status[0])) << run.out.status[0].ToString();
  EXPECT_EQ(run.out.status[1], run.out.status[0]);
  EXPECT_TRUE(run.out.status[2].ok()) << run.out.status[2].ToString();
  EXPECT_EQ(run.out.combined, (std::array<uint64_t, kCoroutines>{0, 1, 0}));
  EXPECT_EQ(run.origin_left, (std::array<bool, kCoroutines>{}));
  EXPECT_EQ(WriteCounts(rdwc), (std::array<uint64_t, 3>{1, 1, 1}));
}

// A DeadlineExceeded that is no lock timeout (an op that timed out on the
// fabric) goes to nobody, not even to a joiner whose own lock deadline
// passed: both run their own body.
TEST(RdwcTest, OtherDeadlineExceededGoesToNoJoiner) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  const Status op_timeout =
      Status::DeadlineExceeded("test: the write-back's completion never came");
  const TimeoutRun run = RunJoinersOfATimedOutLeader(rdwc, op_timeout);
  EXPECT_EQ(run.bodies, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(run.out.status[0], op_timeout);
  EXPECT_TRUE(run.out.status[1].ok()) << run.out.status[1].ToString();
  EXPECT_TRUE(run.out.status[2].ok()) << run.out.status[2].ToString();
  EXPECT_EQ(run.out.TotalCombined(), 0u);
  EXPECT_EQ(WriteCounts(rdwc), (std::array<uint64_t, 3>{1, 0, 2}));
}

// Review: a leader that ends in an error that is no lock timeout (here a
// fabric op's DeadlineExceeded, after its body ran past kTimeout) shares
// nothing, so its joiner runs its own body. That joiner waited for no lock
// holder, yet its body's first lock counts its deadline from its arrival
// (WaitedSince is set for every fallback), which has passed already: the
// first CAS that finds the word held, even by a live holder about to let
// go, gives up at once with a lock timeout ("did its holder die?").
TEST(RdwcTest, JoinerAfterANonLockErrorHasAnUnexpiredLockDeadline) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  TimeoutRun run;
  bool leader_in_body = false, closed = false;
  std::chrono::nanoseconds body_start{0};
  bool retry_waits = false;
  RunContexts(
      1, 2,
      [&](ContextImpl& ctx) {
        if (ctx.coroutine_index() == 0) {
          run.Write(rdwc, ctx, [&](Rdwc::WriteWindow& window) {
            leader_in_body = true;
            return run.Leader(ctx, window, kTimeout + kOvershoot, &closed,
                              Status::DeadlineExceeded("test: an op timed out on the fabric"));
          });
          return Status::Ok();
        }
        YieldUntil(ctx, [&] { return leader_in_body; });
        run.Write(rdwc, ctx, [&](Rdwc::WriteWindow& window) {
          body_start = ctx.Now();
          const std::chrono::nanoseconds deadline = LockDeadline(ctx, body_start, kTimeout);
          run.lock_deadline[1] = deadline;
          LockRetry retry(ctx, nullptr, deadline);  // as if its first CAS found the word held
          retry_waits = retry.Wait();
          (void)window.Close();
          return Status::Ok();
        });
        return Status::Ok();
      },
      FabricBackend::kSim);
  ASSERT_EQ(run.bodies, (std::vector<int>{0}));  // Leader() records; the fallback ran (below)
  ASSERT_TRUE(run.out.status[1].ok()) << run.out.status[1].ToString();
  ASSERT_TRUE(run.lock_deadline[1].has_value());
  EXPECT_GT(*run.lock_deadline[1], body_start)
      << "the fallback's lock deadline passed before its body began";
  EXPECT_TRUE(retry_waits) << "its first held CAS would give up at once (a LockTimeout)";
}

// The leader (coroutine 0) closes its window at once, then gives up on
// the lock. Coroutine 1 leads the key's next group, arriving once the
// leader closed, at the leader's arrival + delay[1] at the earliest;
// coroutines 2, ... join its group at the leader's arrival + delay[i] at
// the earliest. Every body of theirs takes its lock deadline.
TimeoutRun RunNextGroupOfATimedOutLeader(Rdwc& rdwc,
                                         const std::vector<std::chrono::nanoseconds>& delay) {
  TimeoutRun run;
  bool closed = false, next_leader_in = false;
  RunContexts(
      1, static_cast<uint32_t>(delay.size()),
      [&](ContextImpl& ctx) {
        const int i = ctx.coroutine_index();
        if (i == 0) {
          run.Write(rdwc, ctx, [&](Rdwc::WriteWindow& window) {
            return run.Leader(ctx, window, std::chrono::nanoseconds(0), &closed);
          });
          return Status::Ok();
        }
        YieldUntil(ctx, [&] { return closed; });
        if (i != 1) YieldUntil(ctx, [&] { return next_leader_in; });
        ctx.SleepUntil(run.arrival[0] + delay[i]);  // at once for a time past
        // No yield from here until it has entered: coroutine 1 leads (and
        // waits for the leader), the others join it.
        if (i == 1) next_leader_in = true;
        run.Write(rdwc, ctx, [&](Rdwc::WriteWindow& window) {
          return run.Own(ctx, window, /*take_lock=*/true);
        });
        return Status::Ok();
      },
      FabricBackend::kSim);
  return run;
}

// The next group's leader that arrived right after the leader closed its
// window (coroutine 1) takes the lock timeout, and so does its joiner that
// arrived with it (coroutine 2); its joiner that arrived kTimeout / 2
// after the leader (coroutine 3) runs its own body, whose lock deadline
// is its own arrival + kTimeout, not a fresh kTimeout from when its body
// began.
TEST(RdwcTest, NextGroupsLeaderTakesTheLockTimeoutWhenItsDeadlinePassed) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  const std::chrono::nanoseconds at_once(0);
  const TimeoutRun run =
      RunNextGroupOfATimedOutLeader(rdwc, {at_once, at_once, at_once, kTimeout / 2});
  ASSERT_LE(run.arrival[2] + kTimeout, run.gave_up);
  ASSERT_GT(run.arrival[3] + kTimeout, run.gave_up);
  EXPECT_EQ(run.bodies, (std::vector<int>{0, 3}));
  for (int i : {0, 1, 2})
    EXPECT_TRUE(IsLockTimeout(run.out.status[i])) << i << ": " << run.out.status[i].ToString();
  EXPECT_TRUE(run.out.status[3].ok()) << run.out.status[3].ToString();
  EXPECT_EQ(run.lock_deadline[3], run.arrival[3] + kTimeout);
  EXPECT_EQ(run.out.combined, (std::array<uint64_t, kCoroutines>{0, 1, 1, 0}));
  EXPECT_EQ(run.origin_left, (std::array<bool, kCoroutines>{}));
  EXPECT_EQ(WriteCounts(rdwc), (std::array<uint64_t, 3>{1, 2, 1}));
}

// The next group's leader that arrived kTimeout / 2 after the leader
// (coroutine 1) has not waited its lock_timeout when the leader gives up:
// it leads its group's body, whose lock deadline counts from its arrival,
// and its joiner (coroutine 2) takes its write.
TEST(RdwcTest, NextGroupsLateLeaderRunsItsBodyAfterALockTimeout) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  const std::chrono::nanoseconds at_once(0);
  const TimeoutRun run = RunNextGroupOfATimedOutLeader(rdwc, {at_once, kTimeout / 2, at_once});
  ASSERT_GT(run.arrival[1] + kTimeout, run.gave_up);
  EXPECT_EQ(run.bodies, (std::vector<int>{0, 1}));
  EXPECT_TRUE(IsLockTimeout(run.out.status[0])) << run.out.status[0].ToString();
  EXPECT_TRUE(run.out.status[1].ok()) << run.out.status[1].ToString();
  EXPECT_TRUE(run.out.status[2].ok()) << run.out.status[2].ToString();
  EXPECT_EQ(run.lock_deadline[1], run.arrival[1] + kTimeout);
  EXPECT_EQ(run.out.combined, (std::array<uint64_t, kCoroutines>{0, 0, 1}));
  EXPECT_EQ(WriteCounts(rdwc), (std::array<uint64_t, 3>{2, 1, 0}));
}

// ---- Hash conflicts -----------------------------------------------------

// One slot: keys "a" and "b" share it. While a read group and a write group
// of "a" are open, a Read and a Write of "b" run alone (conflicts), and a
// Read of "a" still joins. A read group does not make the slot busy for
// writes: the Write of "a" leads its own write group.
TEST(RdwcTest, HashConflictRunsAlone) {
  Watchdog watchdog;
  Rdwc rdwc(1);
  std::map<std::string, uint64_t> remote = {{"a", 1}, {"b", 2}};
  std::map<std::string, int> read_bodies, write_bodies;
  int entered = 0;  // coroutines 2-4 that have called Read/Write
  int a_leaders_in_body = 0;
  Outcomes out;
  auto read_body = [&](ContextImpl& ctx, const std::string& key, bool wait) {
    return [&, key, wait](Rdwc::ReadWindow& window, uint64_t* value) {
      ++read_bodies[key];
      if (wait) {
        ++a_leaders_in_body;
        YieldUntil(ctx, [&] { return entered == 3; });
      }
      window.Close();
      *value = remote[key];
      return Status::Ok();
    };
  };
  auto write_body = [&](ContextImpl& ctx, const std::string& key, bool wait) {
    return [&, key, wait](Rdwc::WriteWindow& window) {
      ++write_bodies[key];
      if (wait) {
        ++a_leaders_in_body;
        YieldUntil(ctx, [&] { return entered == 3; });
      }
      remote[key] = window.Close();
      return Status::Ok();
    };
  };
  RunContexts(1, 5, [&](ContextImpl& ctx) {
    switch (ctx.coroutine_index()) {
      case 0:
        RecordedRead(rdwc, ctx, "a", out, read_body(ctx, "a", true));
        break;
      case 1:
        YieldUntil(ctx, [&] { return a_leaders_in_body == 1; });
        RecordedWrite(rdwc, ctx, "a", 11, out, write_body(ctx, "a", true));
        break;
      default:
        YieldUntil(ctx, [&] { return a_leaders_in_body == 2; });
        ++entered;
        if (ctx.coroutine_index() == 2) {
          RecordedRead(rdwc, ctx, "b", out, read_body(ctx, "b", false));
        } else if (ctx.coroutine_index() == 3) {
          RecordedWrite(rdwc, ctx, "b", 22, out, write_body(ctx, "b", false));
        } else {
          RecordedRead(rdwc, ctx, "a", out, read_body(ctx, "a", false));
        }
    }
    return Status::Ok();
  });
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
  EXPECT_EQ(read_bodies["a"], 1);
  EXPECT_EQ(read_bodies["b"], 1);
  EXPECT_EQ(write_bodies["a"], 1);
  EXPECT_EQ(write_bodies["b"], 1);
  EXPECT_EQ(out.value[2], 2u);      // "b" read alone
  EXPECT_EQ(out.delegated[4], 1u);  // "a" joined the read group
  EXPECT_EQ(out.value[4], out.value[0]);
  EXPECT_EQ(remote["b"], 22u);
  EXPECT_EQ(remote["a"], 11u);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.conflicts, 2u);
  EXPECT_EQ(stats.reads_led, 1u);
  EXPECT_EQ(stats.writes_led, 1u);
  EXPECT_EQ(stats.reads_delegated, 1u);
  EXPECT_EQ(stats.fallbacks, 0u);
}

// Once a group is done, its slot takes a group of any key.
TEST(RdwcTest, SlotIsFreeAfterTheGroupEnds) {
  Watchdog watchdog;
  Rdwc rdwc(1);
  RunContexts(1, 1, [&](ContextImpl& ctx) {
    for (const char* key : {"a", "b", "a"}) {
      uint64_t value = 0;
      DMIDX_RETURN_IF_ERROR(rdwc.Read(ctx, key, &value, [](Rdwc::ReadWindow& window, uint64_t* v) {
        window.Close();
        *v = 1;
        return Status::Ok();
      }));
      DMIDX_RETURN_IF_ERROR(rdwc.Write(ctx, key, 1, kLockTimeout, [](Rdwc::WriteWindow& window) {
        (void)window.Close();
        return Status::Ok();
      }));
    }
    return Status::Ok();
  });
  EXPECT_EQ(rdwc.stats().reads_led, 3u);
  EXPECT_EQ(rdwc.stats().writes_led, 3u);
  EXPECT_EQ(rdwc.stats().conflicts, 0u);
}

// ---- Reads after writes (SMART §4.2.4) ----------------------------------

// Coroutine 0 leads a read group and waits before its Close(). Coroutine 1
// writes the key (its body updates `remote`) and completes. Coroutine 2
// then reads: it joins the still-open group, and since the leader's READ is
// posted after its Close(), it sees the new value. Coroutine 3 reads after
// the leader's Close(): it must not join (that group's READ may precede
// writes it must see), so it leads a group of its own.
TEST(RdwcTest, ReadAfterCompletedWriteSeesIt) {
  Watchdog watchdog;
  Rdwc rdwc(64);
  uint64_t remote = 1;
  enum Step { kStart, kLeaderInBody, kWriteDone, kLateReaderJoined, kLeaderClosed, kLastDone };
  Step step = kStart;
  int read_bodies = 0;
  Outcomes out;
  RunContexts(1, 4, [&](ContextImpl& ctx) {
    switch (ctx.coroutine_index()) {
      case 0:
        RecordedRead(rdwc, ctx, "key", out, [&](Rdwc::ReadWindow& window, uint64_t* value) {
          ++read_bodies;
          step = kLeaderInBody;
          YieldUntil(ctx, [&] { return step == kLateReaderJoined; });
          window.Close();
          step = kLeaderClosed;
          // Bounded: a wrong join by coroutine 3 must fail, not hang.
          YieldTimes(ctx, 5);
          *value = remote;  // the READ
          return Status::Ok();
        });
        break;
      case 1:
        YieldUntil(ctx, [&] { return step == kLeaderInBody; });
        out.status[1] = rdwc.Write(ctx, "key", 2, kLockTimeout, [&](Rdwc::WriteWindow& window) {
          remote = window.Close();
          return Status::Ok();
        });
        step = kWriteDone;
        break;
      case 2:
        YieldUntil(ctx, [&] { return step == kWriteDone; });
        // Joins and parks inside Read before coroutine 0 runs again.
        step = kLateReaderJoined;
        RecordedRead(rdwc, ctx, "key", out, [&](Rdwc::ReadWindow& window, uint64_t* value) {
          ++read_bodies;
          window.Close();
          *value = remote;
          return Status::Ok();
        });
        break;
      case 3:
        YieldUntil(ctx, [&] { return step == kLeaderClosed; });
        RecordedRead(rdwc, ctx, "key", out, [&](Rdwc::ReadWindow& window, uint64_t* value) {
          ++read_bodies;
          window.Close();
          *value = remote;
          return Status::Ok();
        });
        step = kLastDone;
        break;
    }
    return Status::Ok();
  });
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(out.status[i].ok()) << i << ": " << out.status[i].ToString();
  EXPECT_EQ(step, kLastDone);
  EXPECT_EQ(read_bodies, 2);  // coroutines 0 and 3
  EXPECT_EQ(out.delegated[2], 1u);
  EXPECT_EQ(out.value[2], 2u);
  EXPECT_EQ(out.delegated[3], 0u);
  EXPECT_EQ(out.value[3], 2u);
  EXPECT_EQ(out.value[0], 2u);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.reads_led, 2u);
  EXPECT_EQ(stats.reads_delegated, 1u);
  EXPECT_EQ(stats.writes_led, 1u);
}

// ---- Stress -------------------------------------------------------------

// 4 threads x 8 coroutines on a few keys and a 2-slot table (so conflicts
// happen too), reading and writing a "remote" map under a mutex. Each
// remote write gets the key's next sequence number; values are unique per
// Write() call. A read must return a value some write wrote, whose sequence
// number is at least the key's at the read's start (no value older than a
// write completed before the read began). Some read leaders skip Close()
// and some write leaders insert without it or fail, so fallbacks happen.
TEST(RdwcTest, StressReadsNeverOlderThanCompletedWrites) {
  Watchdog watchdog;
  constexpr uint32_t kThreads = 4, kPerThread = 8;
  constexpr int kOps = 400, kKeys = 3;
  Rdwc rdwc(2);
  struct Remote {
    std::mutex mutex;
    std::array<uint64_t, kKeys> seq{};                       // 0: key absent
    std::array<uint64_t, kKeys> value{};                     // guarded by mutex
    std::array<std::map<uint64_t, uint64_t>, kKeys> seq_of;  // value -> seq of its write
  } remote;
  const std::array<std::string, kKeys> keys = {"k0", "k1", "k2"};
  std::atomic<uint64_t> reads{0}, writes{0}, delegated{0}, combined{0};
  const uint64_t seed = testing::TestSeed(1);
  RunContexts(kThreads, kPerThread, [&](ContextImpl& ctx) -> Status {
    const uint64_t id = ctx.thread_index() * kPerThread + ctx.coroutine_index();
    std::mt19937_64 rng(seed * 1000 + id);
    const OpCounters before = ctx.counters();
    for (int op = 0; op < kOps; ++op) {
      const int k = static_cast<int>(rng() % kKeys);
      const bool skip_close = rng() % 8 == 0;
      const bool fail = rng() % 16 == 0;
      if (rng() % 2 == 0) {
        uint64_t start_seq;
        {
          std::lock_guard<std::mutex> guard(remote.mutex);
          start_seq = remote.seq[k];
        }
        uint64_t value = 0;
        const Status status =
            rdwc.Read(ctx, keys[k], &value, [&](Rdwc::ReadWindow& window, uint64_t* out) {
              ctx.Yield();
              if (!skip_close) window.Close();
              bool present;
              {
                std::lock_guard<std::mutex> guard(remote.mutex);  // the READ
                present = remote.seq[k] != 0;
                *out = remote.value[k];
              }
              ctx.Yield();  // e.g. a consistency check: joining has ended before it
              return present ? Status::Ok() : Status::NotFound("absent");
            });
        ++reads;
        std::lock_guard<std::mutex> guard(remote.mutex);
        if (status.IsNotFound()) {
          if (start_seq != 0) return Status::Internal("NotFound after a completed write");
          continue;
        }
        DMIDX_RETURN_IF_ERROR(status);
        auto it = remote.seq_of[k].find(value);
        if (it == remote.seq_of[k].end())
          return Status::Internal("read a value nobody wrote: " + std::to_string(value));
        if (it->second < start_seq) {
          return Status::Internal("read write #" + std::to_string(it->second) + " of " + keys[k] +
                                  " after write #" + std::to_string(start_seq) + " completed");
        }
      } else {
        const uint64_t mine = ((id + 1) << 32) | static_cast<uint64_t>(op + 1);
        const Status status =
            rdwc.Write(ctx, keys[k], mine, kLockTimeout, [&](Rdwc::WriteWindow& window) {
              ctx.Yield();
              std::unique_lock<std::mutex> guard(remote.mutex);
              uint64_t value = mine;
              if (remote.seq[k] != 0 || !skip_close) {  // else: "insert" alone, no Close
                guard.unlock();
                value = window.Close();
                if (fail) return Status::Unavailable("injected");
                guard.lock();
              }
              remote.value[k] = value;
              remote.seq_of[k][value] = ++remote.seq[k];
              return Status::Ok();
            });
        ++writes;
        if (!status.ok() && status.code() != StatusCode::kUnavailable) return status;
      }
    }
    delegated += ctx.counters().delegated_reads - before.delegated_reads;
    combined += ctx.counters().combined_writes - before.combined_writes;
    return Status::Ok();
  });
  EXPECT_EQ(reads + writes, uint64_t{kThreads} * kPerThread * kOps);
  const RdwcStats stats = rdwc.stats();
  EXPECT_EQ(stats.reads_led + stats.reads_delegated + stats.writes_led + stats.writes_combined +
                stats.conflicts + stats.fallbacks,
            reads + writes);
  EXPECT_EQ(stats.reads_delegated, delegated.load());
  EXPECT_EQ(stats.writes_combined, combined.load());
  // Eight coroutines of a thread on three keys, bodies that yield: groups
  // form on every thread.
  EXPECT_GT(stats.reads_delegated, 0u);
  EXPECT_GT(stats.writes_combined, 0u);
  EXPECT_GT(stats.conflicts, 0u);
  EXPECT_GT(stats.fallbacks, 0u);
}

// The table size is bounded: 0 and anything above kMaxTableEntries are
// InvalidArgument naming the option (and, above, the bound), checked before
// a table is made (std::bit_ceil of a size above 2^63 would be undefined).
TEST(RdwcTest, TableEntriesOutsideTheBoundAreInvalidArgument) {
  const auto contains = [](const Status& status, const std::string& text) {
    return status.message().find(text) != std::string_view::npos;
  };
  const std::string bound = std::to_string(Rdwc::kMaxTableEntries);
  EXPECT_TRUE(Rdwc::CheckTableEntries(1, "Opt.entries").ok());
  EXPECT_TRUE(Rdwc::CheckTableEntries(Rdwc::kMaxTableEntries, "Opt.entries").ok());
  const Status zero = Rdwc::CheckTableEntries(0, "Opt.entries");
  EXPECT_TRUE(zero.IsInvalidArgument()) << zero.ToString();
  EXPECT_TRUE(contains(zero, "Opt.entries")) << zero.ToString();
  for (const size_t entries : {Rdwc::kMaxTableEntries + 1, (size_t{1} << 63) + 1, ~size_t{0}}) {
    SCOPED_TRACE(entries);
    const Status status = Rdwc::CheckTableEntries(entries, "Opt.entries");
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_TRUE(contains(status, "Opt.entries")) << status.ToString();
    EXPECT_TRUE(contains(status, "at most " + bound)) << status.ToString();
  }
  auto cluster = testing::OpenCluster(/*faults=*/false, /*memory_nodes=*/1);
  ASSERT_NE(cluster, nullptr);
  auto client = testing::NewClient(*cluster);
  ASSERT_NE(client, nullptr);
  runtime::ComputeNode& node = runtime::ComputeNode::Of(*client);
  const StatusOr<std::shared_ptr<Rdwc>> huge =
      Rdwc::Shared(node, "owner", (size_t{1} << 63) + 1, "Opt.entries");
  EXPECT_TRUE(huge.status().IsInvalidArgument()) << huge.status().ToString();
  const StatusOr<std::shared_ptr<Rdwc>> small = Rdwc::Shared(node, "owner", 100, "Opt.entries");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_NE(*small, nullptr);
}

}  // namespace
}  // namespace dmidx::lock
