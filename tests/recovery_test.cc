// Compute-node failures at the lock layer (runtime/membership.h,
// lock::LockRetry::WaitOn): a waiter on a word whose holder died declares
// it dead once its lease stood still for the timeout, fences it, recovers
// it and frees the word; a second death during a recovery is taken over;
// a node cut off and judged dead is fenced and learns it when it is back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fault_injector.h"
#include "lib/runtime/client.h"
#include "lib/runtime/lease.h"
#include "lib/runtime/membership.h"
#include "lock/hocl.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"
#include "tests/recovery_rig.h"

namespace dmidx::lock {
namespace {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;
using runtime::Lease;
using runtime::LeaseState;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using testing::Watchdog;

using namespace recovery_test;  // NOLINT: the rig

// Node 0 takes the lock and dies holding it; node 1's Acquire waits, judges
// node 0's lease, declares it dead, fences and recovers it, frees the
// word, and takes the lock: no timeout, one recovery, one freed hold.
TEST(RecoveryTest, AWaiterRecoversAHolderThatDiedAndTakesTheLock) {
  Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 2);
  HoclOptions options;
  options.acquire_timeout = milliseconds(10000);
  Locks locks(rig, options);
  StatusOr<LockGrant> held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  const uint64_t dead_hold = rig.Word(1, held->word);
  ASSERT_EQ(dead_hold >> 48, rig.id(0) + 1u);
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  const auto before = rig.ctx(1).counters();
  StatusOr<LockGrant> taken = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  const auto used = rig.ctx(1).counters() - before;
  EXPECT_EQ(used.recoveries, 1u);
  EXPECT_EQ(used.dead_holds_freed, 1u);
  EXPECT_GT(used.lock_retries, 0u);
  const Lease lease = rig.LeaseOf(1, 0);
  EXPECT_EQ(lease.state, LeaseState::kRecovered) << lease.ToString();
  EXPECT_EQ(lease.declared_by, rig.id(1));
  EXPECT_TRUE(static_cast<runtime::ClientImpl&>(rig.client(1)).membership().KnownGone(rig.id(0)));
  EXPECT_TRUE(locks[1].Release(rig.ctx(1), *taken, {}).ok());
  EXPECT_EQ(rig.Word(1, taken->word), 0u);
  // Known gone now: a later hold of the dead node's found is freed at once.
  const uint64_t again = dead_hold + 1;
  uint64_t* value = *rig.ctx(1).arena().Words(1);
  *value = again;
  const Op plant = Op::Write(taken->word, value, 8);
  ASSERT_TRUE(rig.ctx(1).Execute(0, {&plant, 1}).ok());
  const auto before_second = rig.ctx(1).counters();
  StatusOr<LockGrant> second = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  const auto second_used = rig.ctx(1).counters() - before_second;
  EXPECT_EQ(second_used.recoveries, 0u);
  EXPECT_EQ(second_used.dead_holds_freed, 1u);
  EXPECT_EQ(second_used.lock_retries, 1u) << "a known-dead holder was waited for";
  EXPECT_TRUE(locks[1].Release(rig.ctx(1), *second, {}).ok());
}

// Node 0 holds the lock and is cut off (a partition or a long pause): its
// renewals cannot land, so node 1 judges it dead and fences it. Brought
// back, node 0 finds its operations and its lease refused with kFenced.
TEST(RecoveryTest, ANodeCutOffIsFencedAndLearnsItWhenItIsBack) {
  Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 2);
  Locks locks(rig);
  StatusOr<LockGrant> held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  Faults(rig.cluster()).SetComputeNodeCutOff(rig.id(0), true);
  StatusOr<LockGrant> taken = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(rig.LeaseOf(1, 0).state, LeaseState::kRecovered);
  Faults(rig.cluster()).SetComputeNodeCutOff(rig.id(0), false);
  // Its release, had it come through, would free node 1's hold: refused.
  const Status late = locks[0].Release(rig.ctx(0), *held, {});
  EXPECT_TRUE(IsFenced(late)) << late.ToString();
  EXPECT_NE(rig.Word(1, taken->word), 0u) << "the fenced node's release landed";
  while (rig.keeper(0).status().ok())
    std::this_thread::sleep_for(milliseconds(1));
  EXPECT_TRUE(IsFenced(rig.keeper(0).status())) << rig.keeper(0).status().ToString();
  EXPECT_TRUE(locks[1].Release(rig.ctx(1), *taken, {}).ok());
}

// The recoverer dies too. Node 1 declared node 0 (the holder) dead and
// died, with (param true) or without (false: it died between its
// declaration and its note) a note that it was recovering node 0. Node 2
// waits on node 0's word, sees node 0 dead by node 1, judges node 1's
// lease, declares it dead and recovers it: with the note, that recovery
// takes node 0's over; without, node 2 takes node 0's over itself after.
// Either way both end recovered by node 2, and node 2 takes the lock.
class RecovererDeathTest : public ::testing::TestWithParam<bool> {};

TEST_P(RecovererDeathTest, ASecondDeathDuringARecoveryIsTakenOver) {
  Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 3);
  Locks locks(rig);
  StatusOr<LockGrant> held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  // Node 1's recovery, cut short after its first steps.
  const Lease judged = rig.LeaseOf(1, 0);
  ASSERT_EQ(runtime::DeclareDead(rig.ctx(1), rig.keeper(0).record(), judged, rig.id(1))->word(),
            judged.word());
  if (GetParam()) {
    ASSERT_TRUE(runtime::NoteRecovering(rig.ctx(1), rig.keeper(1).record(), rig.id(0)).ok());
  }
  Faults(rig.cluster()).KillComputeNode(rig.id(1));
  const auto before = rig.ctx(2).counters();
  StatusOr<LockGrant> taken = locks[2].Acquire(rig.ctx(2), rig.object());
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  const auto used = rig.ctx(2).counters() - before;
  EXPECT_EQ(used.recoveries, 2u) << "node 1, and node 0 taken over";
  EXPECT_EQ(used.dead_holds_freed, 1u);
  for (int dead : {0, 1}) {
    const Lease lease = rig.LeaseOf(2, dead);
    EXPECT_EQ(lease.state, LeaseState::kRecovered) << dead << ": " << lease.ToString();
    EXPECT_EQ(lease.declared_by, rig.id(2)) << dead;
  }
  StatusOr<runtime::LeaseRecordView> own = runtime::ReadLease(rig.ctx(2), rig.keeper(2).record());
  ASSERT_TRUE(own.ok());
  EXPECT_FALSE(own->recovering.has_value()) << "node 2's note was not cleared";
  EXPECT_TRUE(locks[2].Release(rig.ctx(2), *taken, {}).ok());
}

INSTANTIATE_TEST_SUITE_P(NotedOrNot, RecovererDeathTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Noted" : "DiedBeforeItsNote";
                         });

// Under sim, in virtual time: node 0's coroutine takes the lock and then
// dies (killed by node 1's coroutine at a fixed virtual time); node 1's
// Acquire takes the lock within the lease timeout and a few round trips.
TEST(RecoveryTest, UnderSimAWaiterRecoversWithinTheLeaseTimeout) {
  Rig rig(FabricBackend::kSim, 2);
  Locks locks(rig);
  const std::chrono::nanoseconds start = rig.cluster().Now();
  const std::chrono::nanoseconds kill_at = start + microseconds(100);
  std::chrono::nanoseconds took_at{0};
  Status holder_status, waiter_status;
  Client* clients[] = {&rig.client(0), &rig.client(1)};
  const Client::Work works[] = {[&](Context& context) {
                                  auto& ctx = ContextImpl::From(context);
                                  StatusOr<LockGrant> grant = locks[0].Acquire(ctx, rig.object());
                                  if (!grant.ok()) return grant.status();
                                  ctx.SleepUntil(kill_at + milliseconds(1));  // holding it
                                  holder_status = locks[0].Release(ctx, *grant, {});
                                  return Status::Ok();
                                },
                                [&](Context& context) {
                                  auto& ctx = ContextImpl::From(context);
                                  ctx.SleepUntil(kill_at);
                                  Faults(rig.cluster()).KillComputeNode(rig.id(0));
                                  StatusOr<LockGrant> grant = locks[1].Acquire(ctx, rig.object());
                                  waiter_status = grant.status();
                                  if (!grant.ok()) return Status::Ok();
                                  took_at = ctx.Now();
                                  waiter_status = locks[1].Release(ctx, *grant, {});
                                  return Status::Ok();
                                }};
  ASSERT_TRUE(dmidx::RunClients(clients, works).ok());
  ASSERT_TRUE(waiter_status.ok()) << waiter_status.ToString();
  EXPECT_FALSE(holder_status.ok()) << "a killed node's release landed";
  const auto& lease = rig.cluster().options().lease;
  // Judged after a period's wait plus the timeout, a period of slack each
  // way for where the readings fall; recovered in microseconds.
  EXPECT_GE(took_at - kill_at, lease.timeout);
  EXPECT_LT(took_at - kill_at, lease.timeout + 3 * lease.period) << (took_at - kill_at).count();
  EXPECT_EQ(rig.LeaseOf(1, 0).state, LeaseState::kRecovered);
}

}  // namespace
}  // namespace dmidx::lock
