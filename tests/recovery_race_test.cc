// Compute-node failures at the edges (runtime/membership.h,
// runtime/lease_keeper.h): chains of recoverers that die, a node the dead
// were recovering, recoveries cut short, holds of a client that closed,
// judgement under virtual time, several contexts of one node recovering one
// dead node, and the sim executor with background renewals. Found by a
// review of the first version of the recovery; each was a wedge, a freed
// live hold, or a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
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

using namespace recovery_test;  // NOLINT: the rig

// ---- chains of recoverers, and recoveries cut short ---------------------------

// H holds the word and dies; X declared H (noted) and died; W declared X
// and its recovery of X was cut short right after (a lost answer). W,
// waiting on H's word, follows the chain H -> X -> W itself, resumes its
// recovery of X, which takes H over: W takes the lock.
TEST(RecoveryChainTest, ARecoveryOfOwnCutShortIsResumedAlongTheChain) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 3);  // H = 0, X = 1, W = 2
  Locks locks(rig, milliseconds(1000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  rig.Declare(1, 0);
  rig.Note(1, 0);
  Faults(rig.cluster()).KillComputeNode(rig.id(1));
  rig.Declare(2, 1);  // W's recovery of X, cut short after its declaration
  auto taken = locks[2].Acquire(rig.ctx(2), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString() << "; H: " << rig.LeaseOf(2, 0).ToString()
                          << "; X: " << rig.LeaseOf(2, 1).ToString();
}

// Two deaths during recoveries: X died recovering H (noted), Y died
// recovering X (noted). W on H's word follows H -> X -> Y, judges Y's
// lease, declares and recovers Y, which takes X over, which takes H over.
TEST(RecoveryChainTest, AChainOfTwoDeadRecoverersIsRecoveredWhole) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 4);  // H = 0, X = 1, Y = 2, W = 3
  Locks locks(rig, milliseconds(1000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  rig.Declare(1, 0);
  rig.Note(1, 0);
  Faults(rig.cluster()).KillComputeNode(rig.id(1));
  rig.Declare(2, 1);
  rig.Note(2, 1);
  Faults(rig.cluster()).KillComputeNode(rig.id(2));
  auto taken = locks[3].Acquire(rig.ctx(3), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString() << "; H: " << rig.LeaseOf(3, 0).ToString()
                          << "; X: " << rig.LeaseOf(3, 1).ToString()
                          << "; Y: " << rig.LeaseOf(3, 2).ToString();
}

// D declared S dead (S had paused) and noted it, then died before fencing
// S. S, alive and unfenced, waits on D's word and declares D; its recovery
// of D finds D's note naming S itself: S learns it was judged dead, fails
// with kFenced, and never takes itself over. D (dead by S) and S (dead by
// D) form a cycle, which W, waiting on D's word, breaks by taking one
// over; W takes the lock.
TEST(RecoveryChainTest, ANodeNeverTakesItselfOverAndACycleIsBroken) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 3);  // S = 0, D = 1, W = 2
  Locks locks(rig, milliseconds(1000));
  auto held = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_TRUE(held.ok());
  rig.Declare(1, 0);
  rig.Note(1, 0);
  Faults(rig.cluster()).KillComputeNode(rig.id(1));
  auto s = locks[0].Acquire(rig.ctx(0), rig.object());
  EXPECT_TRUE(IsFenced(s.status())) << s.status().ToString();
  EXPECT_NE(rig.LeaseOf(2, 0).declared_by, rig.id(0)) << "S declared/took over itself";
  auto taken = locks[2].Acquire(rig.ctx(2), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString() << "; S: " << rig.LeaseOf(2, 0).ToString()
                          << "; D: " << rig.LeaseOf(2, 1).ToString();
}

// X declared H dead and its recovery failed half-way (a step's error
// went up and its operation ended). X lives on; nobody else may take over
// from a live declarer, so X's lease keeper finishes the recovery a period
// later (Membership::ResumeUnfinished), and W, waiting on H's word, gets it.
TEST(RecoveryChainTest, ALiveDeclarersRecoveryCutShortIsFinishedByItsKeeper) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 3);  // H = 0, X = 1, W = 2
  Locks locks(rig, milliseconds(2000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  std::atomic<int> runs{0};
  auto step = rig.impl(1).membership().AddRecoveryStep("fails once", [&](ContextImpl&, uint32_t) {
    return runs.fetch_add(1) == 0 ? Status::Internal("injected: the step fails once")
                                  : Status::Ok();
  });
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  auto failed = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_EQ(failed.status().code(), StatusCode::kInternal) << failed.status().ToString();
  EXPECT_EQ(rig.LeaseOf(2, 0).state, LeaseState::kDead);
  auto taken = locks[2].Acquire(rig.ctx(2), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString() << "; H: " << rig.LeaseOf(2, 0).ToString()
                          << "; X: " << rig.LeaseOf(2, 1).ToString();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(rig.LeaseOf(2, 0).declared_by, rig.id(1));
  EXPECT_EQ((rig.ctx(2).counters()).recoveries, 0u) << "W recovered what X had declared";
}

// ---- a live node's holds freed ----------------------------------------------

// A client that closes while a word it holds stays held (a failed release,
// or a hold kept on purpose) does not give its lease up: the next waiter
// judges it after the timeout and recovers it (fence and steps) before it
// frees the word.
TEST(RecoveryHoldTest, AClosedClientsHoldIsFreedOnlyByARecovery) {
  testing::Watchdog watchdog;
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(RigOptions(FabricBackend::kLocal), &cluster).ok());
  std::unique_ptr<Client> a, b;
  ASSERT_TRUE(cluster->NewClient({}, &a).ok());
  ASSERT_TRUE(cluster->NewClient({}, &b).ok());
  std::unique_ptr<Context> actx, bctx;
  ASSERT_TRUE(a->NewBlockingContext(&actx).ok());
  ASSERT_TRUE(b->NewBlockingContext(&bctx).ok());
  const RemoteAddress object = *ContextImpl::From(*bctx).allocator().Allocate(64, 64, 0);
  HoclOptions options;
  options.acquire_timeout = milliseconds(300);
  HierarchicalLock la(LockTable(), options, a->compute_node_id() + 1);
  HierarchicalLock lb(LockTable(), options, b->compute_node_id() + 1);
  auto held = la.Acquire(ContextImpl::From(*actx), object);
  ASSERT_TRUE(held.ok());
  la.KeepHeld(*held);
  actx.reset();
  a.reset();
  auto& ctx = ContextImpl::From(*bctx);
  const auto before = ctx.counters();
  auto taken = lb.Acquire(ctx, object);
  const auto used = ctx.counters() - before;
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(used.recoveries, 1u);
  EXPECT_EQ(used.dead_holds_freed, 1u);
}

// A client holding a lock in a blocking context, with no Run going, is
// alive. On local its keeper's thread renews; under sim nothing renews
// outside a Run, so a blocking context (whose wait moves virtual time)
// never judges a lease. Either way the waiter gets a lock timeout, and the
// holder's release lands.
TEST(RecoveryHoldTest, ABlockingContextsLiveHoldIsNeverTaken) {
  for (FabricBackend backend : {FabricBackend::kLocal, FabricBackend::kSim}) {
    Rig rig(backend, 2);
    Locks locks(rig, milliseconds(200));
    auto held = locks[0].Acquire(rig.ctx(0), rig.object());
    ASSERT_TRUE(held.ok());
    auto taken = locks[1].Acquire(rig.ctx(1), rig.object());
    const Status late = locks[0].Release(rig.ctx(0), *held, {});
    EXPECT_TRUE(IsLockTimeout(taken.status()))
        << (backend == FabricBackend::kSim ? "sim" : "local")
        << ": an alive holder's lock was taken; holder reads " << rig.LeaseOf(1, 0).ToString()
        << ", its release: " << late.ToString();
    EXPECT_TRUE(late.ok()) << late.ToString();
  }
}

// X declared H dead; its step failed once, and on the keeper's retry runs
// four lease timeouts long. The retry runs beside X's renewals, not in
// their way: X stays alive, and W gets the lock once the retry is done.
TEST(RecoveryKeeperTest, ASlowResumedRecoveryDoesNotStarveTheRenewals) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 3);  // H = 0, X = 1, W = 2
  Locks locks(rig, milliseconds(2000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  std::atomic<int> runs{0};
  auto step = rig.impl(1).membership().AddRecoveryStep("slow", [&](ContextImpl&, uint32_t) {
    if (runs.fetch_add(1) == 0) return Status::Internal("injected: the step fails once");
    std::this_thread::sleep_for(milliseconds(80));  // 4 x lease.timeout
    return Status::Ok();
  });
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  auto failed = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_EQ(failed.status().code(), StatusCode::kInternal) << failed.status().ToString();
  auto taken = locks[2].Acquire(rig.ctx(2), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(rig.LeaseOf(2, 1).state, LeaseState::kAlive) << rig.LeaseOf(2, 1).ToString();
  EXPECT_TRUE(rig.keeper(1).status().ok()) << rig.keeper(1).status().ToString();
}

// W took H's recovery over from X (recovered, dead before noting H), and
// the takeover's answer was lost: H is dead by W, and nobody else may act.
// W's keeper finds it (the takeover was remembered before its CAS) and
// finishes it; V gets the lock. Built by hand: the state a lost answer
// leaves.
TEST(RecoveryKeeperTest, ATakeOverWhoseAnswerWasLostIsFinishedByTheKeeper) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 4);  // H = 0, X = 1, W = 2, V = 3
  Locks locks(rig, milliseconds(1000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  rig.Declare(1, 0);  // X declared H, and died before noting it
  Faults(rig.cluster()).KillComputeNode(rig.id(1));
  rig.Declare(3, 1);
  ASSERT_TRUE(runtime::MarkRecovered(rig.ctx(3), rig.record(1), rig.id(3)).ok());
  // W's TakeOver, as far as its CAS (Membership remembers it first).
  runtime::Membership& w = rig.impl(2).membership();
  ASSERT_TRUE(runtime::TakeOverRecovery(rig.ctx(2), rig.record(0), rig.id(1), rig.id(2)).ok());
  w.RememberForTesting(rig.id(0));
  auto taken = locks[3].Acquire(rig.ctx(3), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString() << "; H: " << rig.LeaseOf(3, 0).ToString();
  EXPECT_EQ(rig.LeaseOf(3, 0).state, LeaseState::kRecovered);
}

// X declared H1 and H2; H1's recovery always fails, H2's failed once. The
// keeper goes on past H1 and finishes H2: W gets H2's word.
TEST(RecoveryKeeperTest, OneFailingRecoveryHoldsNoOtherUp) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 4);  // H1 = 0, H2 = 1, X = 2, W = 3
  Locks locks(rig, milliseconds(1000));
  auto held1 = locks[0].Acquire(rig.ctx(0), rig.object(0));
  auto held2 = locks[1].Acquire(rig.ctx(1), rig.object(1));
  ASSERT_TRUE(held1.ok() && held2.ok());
  std::atomic<int> h2_runs{0};
  const uint32_t h1 = rig.id(0);
  auto step =
      rig.impl(2).membership().AddRecoveryStep("h1 fails", [&](ContextImpl&, uint32_t dead) {
        if (dead == h1) return Status::DataLoss("injected: H1's recovery always fails");
        return h2_runs.fetch_add(1) == 0 ? Status::Internal("injected: once") : Status::Ok();
      });
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  Faults(rig.cluster()).KillComputeNode(rig.id(1));
  ASSERT_FALSE(locks[2].Acquire(rig.ctx(2), rig.object(0)).ok());
  auto f2 = locks[2].Acquire(rig.ctx(2), rig.object(1));
  ASSERT_EQ(f2.status().code(), StatusCode::kInternal) << f2.status().ToString();
  auto taken = locks[3].Acquire(rig.ctx(3), rig.object(1));
  EXPECT_TRUE(taken.ok()) << taken.status().ToString() << "; H2: " << rig.LeaseOf(3, 1).ToString();
  EXPECT_GE(h2_runs.load(), 2);
}

// X declared H and its recovery of H failed, so the keeper was to finish
// it; then X's client closed, and its process opened its next client with
// X's id. Had that client resumed X's lease, V would watch X's lease (H's
// declarer) forever and never get H's word: nothing of the new client knows
// of H. A client that closes with a recovery unfinished closes its id
// instead: the reopen is refused, X's lease stands still, V declares X,
// takes H's recovery over and gets the word.
TEST(RecoveryKeeperTest, AClientThatClosesWithARecoveryUnfinishedClosesItsId) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 3);  // H = 0, X = 1, V = 2
  Locks locks(rig, milliseconds(2000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  // Permanent: kept until X's client closes, so that X's keeper cannot
  // finish H's recovery between the step's going and the close (it tries
  // every period; a handle dropped before Close left that to timing).
  rig.impl(1).membership().AddPermanentRecoveryStep("fails", [](ContextImpl&, uint32_t) {
    return Status::DataLoss("injected: X's recovery of H always fails");
  });
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  auto failed = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_EQ(failed.status().code(), StatusCode::kDataLoss) << failed.status().ToString();
  // Even a close that comes periods later finds the recovery unfinished.
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_FALSE(rig.impl(1).Settled());
  const uint32_t x = rig.id(1);
  rig.Close(1);
  testing::ReopenComputeNodeId(rig.cluster(), x);
  std::unique_ptr<Client> next;
  const Status reopened = rig.cluster().NewClient({}, &next);
  EXPECT_EQ(reopened.code(), StatusCode::kFailedPrecondition) << reopened.ToString();
  EXPECT_NE(reopened.message().find("closed unsettled"), std::string::npos) << reopened.ToString();
  EXPECT_EQ(next, nullptr);
  auto taken = locks[2].Acquire(rig.ctx(2), rig.object());
  EXPECT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(rig.LeaseOf(2, 0).state, LeaseState::kRecovered) << rig.LeaseOf(2, 0).ToString();
}

// A renewal of the lease keeper's that failed once (a link cut off for a
// moment, shorter than the lease timeout) leaves nothing in remote memory:
// a renewal is one CAS of the lease word, and the next renewal goes on from
// it. The client did nothing else, so it closes settled, and its process's
// next client resumes its id: it must not be refused as "closed unsettled".
TEST(RecoveryKeeperTest, ARenewalThatFailedOnceLeavesTheCloseSettled) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 1);
  fabric::FaultInjector& faults = Faults(rig.cluster());
  // The client's own context is idle and no recovery is unfinished: the next
  // batch to memory node 0 is the keeper's renewal.
  ASSERT_TRUE(faults.FailNextBatches(0, 1).ok());
  while (faults.counters().failed_batches < 1)
    std::this_thread::sleep_for(microseconds(200));
  const uint64_t renewed = rig.keeper(0).renewals();
  while (rig.keeper(0).renewals() < renewed + 2)
    std::this_thread::sleep_for(microseconds(200));
  ASSERT_TRUE(rig.keeper(0).status().ok()) << rig.keeper(0).status().ToString();
  EXPECT_TRUE(rig.impl(0).Settled()) << "a failed renewal made the client unsettled";
  const uint32_t id = rig.id(0);
  rig.Close(0);
  testing::ReopenComputeNodeId(rig.cluster(), id);
  std::unique_ptr<Client> next;
  const Status reopened = rig.cluster().NewClient({}, &next);
  ASSERT_TRUE(reopened.ok()) << reopened.ToString();
  EXPECT_EQ(next->compute_node_id(), id);
}

// The same for an open whose lease join failed (its LeaseRecord READ, a
// transient fault): nothing of that client ever ran or held anything, so
// the open fails with that error, and the id is not closed by it: the open
// after succeeds, as the id's next client.
TEST(RecoveryKeeperTest, AnOpenWhoseLeaseJoinFailedDoesNotCloseItsId) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 1);
  const uint32_t id = rig.id(0);
  rig.Close(0);
  // Nothing else posts now: the next batch to memory node 0 is the open's.
  ASSERT_TRUE(Faults(rig.cluster()).FailNextBatches(0, 1).ok());
  testing::ReopenComputeNodeId(rig.cluster(), id);
  std::unique_ptr<Client> failed;
  const Status first = rig.cluster().NewClient({}, &failed);
  ASSERT_FALSE(first.ok());
  ASSERT_EQ(Faults(rig.cluster()).counters().failed_batches, 1u);
  testing::ReopenComputeNodeId(rig.cluster(), id);
  std::unique_ptr<Client> next;
  const Status reopened = rig.cluster().NewClient({}, &next);
  ASSERT_TRUE(reopened.ok()) << reopened.ToString() << " (after " << first.ToString() << ")";
  EXPECT_EQ(next->compute_node_id(), id);
}

// A step's handle going waits for a recovery running the step: nothing of
// the step runs after its handle is gone.
TEST(RecoveryKeeperTest, AStepNeverRunsAfterItsHandleIsGone) {
  testing::Watchdog watchdog;
  Rig rig(FabricBackend::kLocal, 2);  // H = 0, X = 1
  Locks locks(rig, milliseconds(2000));
  auto held = locks[0].Acquire(rig.ctx(0), rig.object());
  ASSERT_TRUE(held.ok());
  std::atomic<int> runs{0};
  std::atomic<bool> handle_gone{false}, ran_after{false}, in_step{false};
  auto step = rig.impl(1).membership().AddRecoveryStep("layer", [&](ContextImpl&, uint32_t) {
    if (runs.fetch_add(1) == 0) return Status::Internal("injected: the step fails once");
    in_step = true;
    std::this_thread::sleep_for(milliseconds(10));
    if (handle_gone.load()) ran_after = true;
    return Status::Ok();
  });
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  auto failed = locks[1].Acquire(rig.ctx(1), rig.object());
  ASSERT_EQ(failed.status().code(), StatusCode::kInternal) << failed.status().ToString();
  while (!in_step.load())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  step.reset();
  handle_gone = true;
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_FALSE(ran_after.load()) << "the step ran on after its handle was destroyed";
}

// ---- the one-node concurrency: two contexts recover one dead node ------------

// Eight coroutines of one compute node wait on eight words a dead node
// holds: one recovers it, once; the others wait for that recovery as for
// any recoverer's.
class RecoveryConcurrencyTest : public ::testing::TestWithParam<FabricBackend> {};

TEST_P(RecoveryConcurrencyTest, TwoContextsOfOneNodeRecoverTheSameDeadNode) {
  testing::Watchdog watchdog;
  constexpr int kWaiters = 8;
  ClientOptions options;
  options.threads = GetParam() == FabricBackend::kSim ? 1 : 2;
  options.coroutines_per_thread = kWaiters / options.threads;
  Rig rig(GetParam(), 2, options);  // D = 0, S = 1
  Locks locks(rig, milliseconds(10000));
  for (int i = 0; i < kWaiters; ++i)
    ASSERT_TRUE(locks[0].Acquire(rig.ctx(0), rig.object(i)).ok());
  Faults(rig.cluster()).KillComputeNode(rig.id(0));
  std::atomic<int> next{0};
  std::atomic<uint64_t> counted{0};
  Client* clients[] = {&rig.client(1)};
  const Client::Work works[] = {[&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const int i = next.fetch_add(1);
    const auto before = ctx.counters();
    StatusOr<LockGrant> got = locks[1].Acquire(ctx, rig.object(i));
    counted += (ctx.counters() - before).recoveries;
    DMIDX_ASSIGN_OR_RETURN(LockGrant grant, std::move(got));
    return locks[1].Release(ctx, grant, {});
  }};
  ASSERT_TRUE(dmidx::RunClients(clients, works).ok());
  EXPECT_EQ(rig.impl(1).membership().recoveries(), 1u)
      << "one dead node recovered more than once by one compute node (concurrently)";
  EXPECT_EQ(counted.load(), 1u) << "OpCounters::recoveries summed over the node's operations";
}

INSTANTIATE_TEST_SUITE_P(Backends, RecoveryConcurrencyTest,
                         ::testing::Values(FabricBackend::kLocal, FabricBackend::kSim));

// ---- the sim executor ---------------------------------------------------------

// A Run whose coroutines all wait with nothing to wake them aborts
// ("every coroutine waits"), although the lease keepers' sleeps are
// events.
TEST(SimBackgroundTest, DeadlockIsStillDetected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        alarm(10);
        std::unique_ptr<Cluster> cluster;
        if (!Cluster::Open(RigOptions(FabricBackend::kSim), &cluster).ok()) std::exit(3);
        std::unique_ptr<Client> client;
        if (!cluster->NewClient({}, &client).ok()) std::exit(3);
        (void)client->Run([](Context& context) {
          ContextImpl::From(context).Park();  // nobody unparks it
          return Status::Ok();
        });
        std::exit(0);
      },
      "every coroutine waits");
}

void CutOffAtTheEnd();

// A node cut off while its keeper's renewal is in flight when the run's
// work ends: the renewal is posted, not waited for, so the Run returns.
TEST(SimBackgroundTest, RunEndsWhileACutOffNodesRenewalIsHeld) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(10);
        CutOffAtTheEnd();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

void CutOffAtTheEnd() {
  {
    {
      Rig rig(FabricBackend::kSim, 2);
      Client* clients[] = {&rig.client(0), &rig.client(1)};
      const auto period = rig.cluster().options().lease.period;
      const uint32_t victim = rig.id(0);
      Cluster& cluster = rig.cluster();
      const Client::Work works[] = {[](Context&) { return Status::Ok(); },
                                    [&, period, victim](Context& context) {
                                      auto& ctx = ContextImpl::From(context);
                                      Faults(cluster).SetComputeNodeCutOff(victim, true);
                                      ctx.SleepUntil(ctx.Now() + 3 * period);
                                      return Status::Ok();
                                    }};
      (void)dmidx::RunClients(clients, works);
      Faults(cluster).SetComputeNodeCutOff(victim, false);
    }
  }
}

}  // namespace
}  // namespace dmidx::lock
