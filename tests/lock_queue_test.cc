// lock/lock_queue.h with a radix-style lock word: inside the locked object
// (its last 8 bytes), held with the compute node's own value rather than a
// tag per acquisition, the turns' table hashed. FIFO order, the handover
// limit, the image that saves the next holder its READ, a failed release,
// and one timeout shared by the waiters behind a dead holder.
#include "lock/lock_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fault_injector.h"
#include "lib/runtime/client.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"
#include "tests/lock_test_util.h"

namespace dmidx::lock {
namespace {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;
using testing::Watchdog;

constexpr uint32_t kObjectBytes = 64;
constexpr uint32_t kWordOffset = kObjectBytes - 8;  // the lock word is the object's rear
constexpr uint64_t kHold = uint64_t{1} << 8;        // what this compute node's hold writes

// A cluster of one memory node, a client of 1 thread x `coroutines`, a
// blocking context, a zeroed object, and a hashed table of 4 queues.
struct Rig {
  explicit Rig(uint32_t coroutines) {
    ClusterOptions options =
        dmidx::testing::SmallLocalCluster(1, 4 << 20, false, std::chrono::microseconds(0));
    EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
    EXPECT_TRUE(cluster
                    ->NewClient({.threads = 1,
                                 .coroutines_per_thread = coroutines,
                                 .scratch_bytes_per_context = 4096},
                                &client)
                    .ok());
    EXPECT_TRUE(client->NewBlockingContext(&setup).ok());
    object = *ctx().allocator().Allocate(kObjectBytes, 64, 0);
    auto* zeros = reinterpret_cast<uint8_t*>(ctx().scratch().data());
    std::fill(zeros, zeros + kObjectBytes, 0);
    const Op clear = Op::Write(object, zeros, kObjectBytes);
    EXPECT_TRUE(ctx().Execute(0, {&clear, 1}).ok());
  }
  ContextImpl& ctx() { return ContextImpl::From(*setup); }
  RemoteAddress word() const { return object + kWordOffset; }
  fabric::FaultInjector& faults() {
    return *static_cast<runtime::ClusterImpl&>(*cluster).fabric().faults();
  }
  uint64_t Read(uint32_t offset) {
    auto* value = reinterpret_cast<uint64_t*>(ctx().scratch().data());
    const Op read = Op::Read(object + offset, value, 8);
    EXPECT_TRUE(ctx().Execute(0, {&read, 1}).ok());
    return *value;
  }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> setup;
  RemoteAddress object;
  std::shared_ptr<LocalLockTable> table = LocalLockTable::Hashed(4);
};

// Takes the turn and the word (CAS + READ of the whole object in one batch,
// retried by LockRetry), so that `bytes` holds the object.
StatusOr<LockTurn> Lock(Rig& rig, ContextImpl& ctx, uint8_t* bytes,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const Op read = Op::Read(rig.object, bytes, kObjectBytes);
  const std::chrono::nanoseconds start = ctx.Now();
  LockTurn turn;
  DMIDX_RETURN_IF_ERROR(LockTurn::Take(*rig.table, ctx, rig.word(), &read, start, &turn));
  if (turn.handed_over()) {
    if (!turn.image_taken()) DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&read, 1}));
    return turn;
  }
  LockRetry retry(ctx, &turn, LockDeadline(ctx, start, timeout));
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  for (;;) {
    const Op ops[2] = {Op::CompareSwap(rig.word(), old, 0, kHold), read};
    DMIDX_RETURN_IF_ERROR(ctx.Execute(0, ops));
    uint64_t found;
    std::memcpy(&found, bytes + kWordOffset, 8);  // the READ ran after the CAS
    if (found == kHold && *old == 0) {
      turn.Took(kHold);
      return turn;
    }
    if (!retry.Wait()) return LockTimeout("word held by " + std::to_string(found));
  }
}

// One locked increment of the object's first word: the write-back alone
// when the word is kept for the next holder (with the object's image),
// else with the release WRITE in one batch.
Status LockedIncrement(Rig& rig, ContextImpl& ctx, uint32_t max_handovers) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
  DMIDX_ASSIGN_OR_RETURN(LockTurn turn, Lock(rig, ctx, bytes));
  uint64_t counter;
  std::memcpy(&counter, bytes, 8);
  ++counter;
  std::memcpy(bytes, &counter, 8);
  const Op write = Op::Write(rig.object, bytes, 8);
  if (turn.KeepForNext(max_handovers)) {
    DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&write, 1}));
    const ObjectImage image{rig.object, bytes, kObjectBytes};
    turn.Leave(&image);
    return Status::Ok();
  }
  const Op batch[2] = {write, Op::Write(rig.word(), ctx.zero_word(), 8)};
  return ctx.Execute(0, batch);
}

// Four coroutines of one thread, three locked increments each, handing the
// word over at most `max_handovers` times in a row. Returns the
// coroutines' order of turns.
struct Round {
  std::vector<int> order;
  uint64_t handovers = 0;
};
Round RunRound(Rig& rig, uint32_t max_handovers) {
  Round round;
  std::mutex mutex;
  std::atomic<uint64_t> handovers{0};
  const Status status = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    for (int i = 0; i < 3; ++i) {
      {
        std::lock_guard<std::mutex> guard(mutex);
        round.order.push_back(-1 - ctx.coroutine_index());  // asks
      }
      DMIDX_RETURN_IF_ERROR(LockedIncrement(rig, ctx, max_handovers));
    }
    handovers += ctx.counters().handovers;
    return Status::Ok();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  round.handovers = handovers;
  return round;
}

// The turns go in the order asked: first come, first served. Each
// coroutine asks again once its increment is done, so the four take turns
// round robin.
TEST(LockQueueTest, TurnsGoInTheOrderAsked) {
  Watchdog watchdog;
  Rig rig(4);
  std::vector<int> taken;
  std::mutex mutex;
  const Status status = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    for (int i = 0; i < 3; ++i) {
      runtime::ScratchArena::Scope scope(ctx.arena());
      DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
      DMIDX_ASSIGN_OR_RETURN(LockTurn turn, Lock(rig, ctx, bytes));
      {
        std::lock_guard<std::mutex> guard(mutex);
        taken.push_back(ctx.coroutine_index());
      }
      const Op batch[1] = {Op::Write(rig.word(), ctx.zero_word(), 8)};
      DMIDX_RETURN_IF_ERROR(ctx.Execute(0, batch));  // the CAS that is next finds it free
      turn.Dropped();
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(taken, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
}

// The handover limit: at most max_handovers in a row, then the word is
// released and the next holder takes it by CAS. A handover with the image
// costs the next holder no round trip to lock: a holder that took the word
// by CAS spends 2 round trips (CAS + READ, write-back + release), one handed
// the word spends 1 (the write-back). The counter proves every image true.
TEST(LockQueueTest, HandoversAreCappedAndTheImageSavesTheRead) {
  Watchdog watchdog;
  for (const uint32_t max_handovers : {0u, 2u, 4u}) {
    SCOPED_TRACE(max_handovers);
    Rig rig(4);
    const Stats before = rig.client->stats();
    const Round round = RunRound(rig, max_handovers);
    const Stats used = rig.client->stats() - before;
    const uint64_t taken = used.compare_swaps - used.compare_swap_failures;
    EXPECT_EQ(used.compare_swap_failures, 0u) << "only one context at a time CASes";
    EXPECT_EQ(taken + round.handovers, 12u);
    // 12 turns round robin: a CAS, then max_handovers handovers, and again.
    const uint64_t chains = (12 + max_handovers) / (max_handovers + 1);
    EXPECT_EQ(taken, chains);
    EXPECT_EQ(used.round_trips, 2 * taken + round.handovers);
    EXPECT_EQ(rig.Read(0), 12u);
    EXPECT_EQ(rig.Read(kWordOffset), 0u) << "the last holder released the word";
  }
}

// A release whose batch fails is a CAS from the hold to 0, posted again
// while it fails: it frees the word once a post gets through, and leaves
// it held (as a dead holder does) when all kReleasePosts fail.
TEST(LockQueueTest, AFailedReleaseIsPostedAgainAsACas) {
  Watchdog watchdog;
  Rig rig(1);
  ContextImpl& ctx = rig.ctx();
  uint8_t* bytes = *ctx.arena().Bytes(kObjectBytes, 64);
  for (const bool all_fail : {false, true}) {
    SCOPED_TRACE(all_fail);
    StatusOr<LockTurn> turn = Lock(rig, ctx, bytes);
    ASSERT_TRUE(turn.ok()) << turn.status().ToString();
    const Op batch[2] = {Op::Write(rig.object, bytes, 8),
                         Op::Write(rig.word(), ctx.zero_word(), 8)};
    ASSERT_TRUE(rig.faults().FailNextBatches(0, all_fail ? 1 + kReleasePosts : 2).ok());
    EXPECT_TRUE(ctx.Execute(0, batch).IsUnavailable());
    const Stats before = ctx.stats();
    const Status released = turn->Release(ctx);
    EXPECT_EQ((ctx.stats() - before).compare_swaps, all_fail ? uint64_t{kReleasePosts} : 2u);
    EXPECT_EQ(released.ok(), !all_fail) << released.ToString();
    EXPECT_EQ(rig.Read(kWordOffset), all_fail ? kHold : 0u);
  }
}

// Waiters behind a dead holder share the first one's timeout: the deadline
// counts from Take, so those queued behind the first find it (nearly)
// passed when their turn comes, and together retry less than the first.
TEST(LockQueueTest, WaitersBehindADeadHolderShareOneTimeout) {
  Watchdog watchdog;
  Rig rig(4);
  auto* dead = reinterpret_cast<uint64_t*>(rig.ctx().scratch().data());
  *dead = uint64_t{6} << 8;  // compute node 5 died holding it
  const Op hold = Op::Write(rig.word(), dead, 8);
  ASSERT_TRUE(rig.ctx().Execute(0, {&hold, 1}).ok());
  ExpectQueuedWaitersShareOneTimeout(*rig.client, 4, [&](ContextImpl& ctx) -> Status {
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
    return Lock(rig, ctx, bytes, std::chrono::milliseconds(300)).status();
  });
}

// A lock's deadline counts from its acquisition's start, or from an
// earlier start of the operation's wait for it that its context holds (an
// RDWC waiter's arrival, lock/rdwc.h), whichever came first, never later;
// the first acquisition takes that start.
TEST(LockQueueTest, DeadlineCountsFromTheOperationsEarlierWait) {
  Watchdog watchdog;
  Rig rig(1);
  ContextImpl& ctx = rig.ctx();
  const std::chrono::nanoseconds start = std::chrono::seconds(5);
  const std::chrono::nanoseconds timeout = std::chrono::milliseconds(1);
  const std::chrono::nanoseconds earlier = start - std::chrono::microseconds(3);
  EXPECT_EQ(LockDeadline(ctx, start, timeout), start + timeout);
  ctx.set_lock_wait_origin(earlier);
  EXPECT_EQ(LockDeadline(ctx, start, timeout), earlier + timeout);
  EXPECT_EQ(LockDeadline(ctx, start, timeout), start + timeout);  // taken
  ctx.set_lock_wait_origin(start + std::chrono::microseconds(3));
  EXPECT_EQ(LockDeadline(ctx, start, timeout), start + timeout);
  EXPECT_FALSE(ctx.TakeLockWaitOrigin().has_value());
}

// A word hashed onto the queue of another word that the last holder kept
// is released by the next holder before it takes its own.
TEST(LockQueueTest, AWordKeptForAnotherWordsHolderIsReleasedFirst) {
  Watchdog watchdog;
  Rig rig(2);
  rig.table = LocalLockTable::Hashed(1);  // every word on one queue
  const RemoteAddress other = rig.object + 8;
  std::atomic<int> kept{0};
  const Status status = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    if (ctx.coroutine_index() == 0) {
      runtime::ScratchArena::Scope scope(ctx.arena());
      DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
      DMIDX_ASSIGN_OR_RETURN(LockTurn turn, Lock(rig, ctx, bytes));  // suspends: 1 queues
      if (turn.KeepForNext(4)) ++kept;
      return Status::Ok();
    }
    LockTurn turn;
    DMIDX_RETURN_IF_ERROR(LockTurn::Take(*rig.table, ctx, other, nullptr, ctx.Now(), &turn));
    if (turn.handed_over()) return Status::Internal("handed a word it did not ask for");
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(kept.load(), 1);
  EXPECT_EQ(rig.Read(kWordOffset), 0u) << "the kept word was never released";
}

}  // namespace
}  // namespace dmidx::lock
