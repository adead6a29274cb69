// lock/lock_queue.h with a radix-style lock word: inside the locked object
// (its last 8 bytes), held with the compute node's own value rather than a
// tag per acquisition, the turns' table recycled. FIFO order, the handover
// limit, the image that saves the next holder its READ, a failed release,
// one timeout shared by the waiters behind a dead holder, and the queue of
// a word its own: no wait behind another word's holder, no word kept for a
// waiter of another, and as many entries as words in use at once.
#include "lock/lock_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
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
// blocking context, two zeroed objects, and a recycled table of 4 buckets.
struct Rig {
  explicit Rig(uint32_t coroutines, uint32_t threads = 1) {
    ClusterOptions options =
        dmidx::testing::SmallLocalCluster(1, 4 << 20, false, std::chrono::microseconds(0));
    EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
    EXPECT_TRUE(cluster
                    ->NewClient({.threads = threads,
                                 .coroutines_per_thread = coroutines,
                                 .scratch_bytes_per_context = 4096},
                                &client)
                    .ok());
    EXPECT_TRUE(client->NewBlockingContext(&setup).ok());
    object = *ctx().allocator().Allocate(kObjectBytes, 64, 0);
    other = *ctx().allocator().Allocate(kObjectBytes, 64, 0);
    auto* zeros = reinterpret_cast<uint8_t*>(ctx().scratch().data());
    std::fill(zeros, zeros + kObjectBytes, 0);
    const Op clear[2] = {Op::Write(object, zeros, kObjectBytes),
                         Op::Write(other, zeros, kObjectBytes)};
    EXPECT_TRUE(ctx().Execute(0, clear).ok());
  }
  ContextImpl& ctx() { return ContextImpl::From(*setup); }
  RemoteAddress word() const { return object + kWordOffset; }
  fabric::FaultInjector& faults() {
    return *static_cast<runtime::ClusterImpl&>(*cluster).fabric().faults();
  }
  uint64_t Read(uint32_t offset) { return ReadAt(object + offset); }
  uint64_t ReadAt(RemoteAddress at) {
    auto* value = reinterpret_cast<uint64_t*>(ctx().scratch().data());
    const Op read = Op::Read(at, value, 8);
    EXPECT_TRUE(ctx().Execute(0, {&read, 1}).ok());
    return *value;
  }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> setup;
  RemoteAddress object;
  RemoteAddress other;  // a second object, its lock word at the same offset
  std::shared_ptr<LocalLockTable> table = LocalLockTable::Recycling(4);
};

// Takes the turn and the word of `object` (rig.object unless given; CAS +
// READ of the whole object in one batch, retried by LockRetry), so that
// `bytes` holds the object.
StatusOr<LockTurn> Lock(Rig& rig, ContextImpl& ctx, uint8_t* bytes,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10),
                        std::optional<RemoteAddress> of = std::nullopt) {
  const RemoteAddress object = of.value_or(rig.object);
  const RemoteAddress word = object + kWordOffset;
  const Op read = Op::Read(object, bytes, kObjectBytes);
  const std::chrono::nanoseconds start = ctx.Now();
  LockTurn turn;
  DMIDX_RETURN_IF_ERROR(LockTurn::Take(*rig.table, ctx, word, &read, start, &turn));
  if (turn.handed_over()) {
    if (!turn.image_taken()) DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&read, 1}));
    return turn;
  }
  LockRetry retry(ctx, &turn, LockDeadline(ctx, start, timeout));
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  for (;;) {
    const Op ops[2] = {Op::CompareSwap(word, old, 0, kHold), read};
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

// Puts the hold of compute node 5 (dead) on `word`.
void HoldForADeadComputeNode(Rig& rig, RemoteAddress word) {
  auto* dead = reinterpret_cast<uint64_t*>(rig.ctx().scratch().data());
  *dead = uint64_t{6} << 8;
  const Op hold = Op::Write(word, dead, 8);
  ASSERT_TRUE(rig.ctx().Execute(0, {&hold, 1}).ok());
}

// A context never waits behind the holder of another word (review finding
// 4), even one in its bucket: coroutine 0 polls a word a dead compute node
// holds until its timeout, and coroutine 1, asking for another word
// meanwhile, takes it with one CAS before coroutine 0 gives up. With words
// hashed onto shared queues, coroutine 1 queued behind coroutine 0 for the
// whole timeout.
TEST(LockQueueTest, AWaiterNeverWaitsBehindAnotherWordsDeadHolder) {
  Watchdog watchdog;
  Rig rig(2);
  rig.table = LocalLockTable::Recycling(1);  // every word in one bucket
  ASSERT_NO_FATAL_FAILURE(HoldForADeadComputeNode(rig, rig.word()));
  // Coroutines of one thread: these need no atomics.
  ContextImpl* first = nullptr;
  bool first_gave_up = false, second_before = false;
  Status first_status, second_status;
  std::vector<Op> second_posts;
  uint64_t second_retries = 0;
  const Status run = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
    if (ctx.coroutine_index() == 0) {
      first = &ctx;
      first_status = Lock(rig, ctx, bytes, std::chrono::milliseconds(300)).status();
      first_gave_up = true;
      return Status::Ok();
    }
    while (first == nullptr || first->counters().lock_retries == 0)
      ctx.Yield();  // until coroutine 0 has its turn and polls
    const uint64_t retries_before = ctx.counters().lock_retries;
    ctx.RecordPostsForTesting(&second_posts);
    StatusOr<LockTurn> turn = Lock(rig, ctx, bytes, std::chrono::milliseconds(300), rig.other);
    ctx.RecordPostsForTesting(nullptr);
    second_before = !first_gave_up;
    second_retries = ctx.counters().lock_retries - retries_before;
    second_status = turn.status();
    if (turn.ok()) DMIDX_RETURN_IF_ERROR(turn->Release(ctx));
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_TRUE(IsLockTimeout(first_status)) << first_status.ToString();
  ASSERT_TRUE(second_status.ok()) << second_status.ToString();
  EXPECT_TRUE(second_before) << "the other word waited for the dead holder's timeout";
  // Its lock's one batch: the CAS and the READ behind it.
  ASSERT_EQ(second_posts.size(), 2u);
  EXPECT_EQ(second_posts[0].code, fabric::OpCode::kCompareSwap);
  EXPECT_EQ(second_posts[0].remote, rig.other + kWordOffset);
  EXPECT_EQ(second_retries, 0u);
  EXPECT_EQ(rig.ReadAt(rig.other + kWordOffset), 0u);
}

// A word is kept only for a waiter that wants it (review finding 7):
// coroutine 1 asks for another word of the same bucket while coroutine 0
// holds the first, so coroutine 0 has no waiter, releases its word in its
// write-back's batch, and each takes its word with one CAS. With words
// hashed onto shared queues, coroutine 0 kept its word for coroutine 1,
// which then spent a CAS releasing it before its own: a hold nobody used,
// and a third CAS.
TEST(LockQueueTest, AWordIsKeptOnlyForAWaiterOfThatWord) {
  Watchdog watchdog;
  Rig rig(2);
  rig.table = LocalLockTable::Recycling(1);  // every word in one bucket
  // Coroutines of one thread: these need no atomics.
  bool first_holds = false, second_asked = false, kept = true, handed = true;
  uint64_t handovers = 0;
  const Stats before = rig.client->stats();
  const Status run = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
    if (ctx.coroutine_index() == 0) {
      DMIDX_ASSIGN_OR_RETURN(LockTurn turn, Lock(rig, ctx, bytes));
      first_holds = true;
      while (!second_asked)
        ctx.Yield();
      kept = turn.KeepForNext(4);
      const Op write = Op::Write(rig.object, bytes, 8);
      if (kept) {
        DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&write, 1}));
        const ObjectImage image{rig.object, bytes, kObjectBytes};
        turn.Leave(&image);
      } else {
        const Op batch[2] = {write, Op::Write(rig.word(), ctx.zero_word(), 8)};
        DMIDX_RETURN_IF_ERROR(ctx.Execute(0, batch));
      }
    } else {
      while (!first_holds)
        ctx.Yield();
      second_asked = true;
      DMIDX_ASSIGN_OR_RETURN(LockTurn turn,
                             Lock(rig, ctx, bytes, std::chrono::seconds(10), rig.other));
      handed = turn.handed_over();
      const Op release = Op::Write(rig.other + kWordOffset, ctx.zero_word(), 8);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&release, 1}));
      turn.Dropped();
    }
    handovers += ctx.counters().handovers;
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_FALSE(kept) << "kept for a waiter of another word";
  EXPECT_FALSE(handed);
  EXPECT_EQ(handovers, 0u);
  const Stats used = rig.client->stats() - before;
  EXPECT_EQ(used.compare_swaps, 2u) << "one lock CAS each, and no release by CAS";
  EXPECT_EQ(used.compare_swap_failures, 0u);
  EXPECT_EQ(rig.Read(kWordOffset), 0u);
  EXPECT_EQ(rig.ReadAt(rig.other + kWordOffset), 0u);
}

// A recycled table holds an entry per word in use at once, not per word
// ever used: four coroutines each take the turn of a word of their own at
// once, then of 25 more words one after another, and one bucket ends with
// 4 entries. A context that asks again for a word whose turn it has is
// refused, and the entry goes idle all the same once the turn ends (the
// next word takes it over).
TEST(LockQueueTest, ARecycledTableHoldsAnEntryPerWordInUseAtOnce) {
  Watchdog watchdog;
  Rig rig(4);
  rig.table = LocalLockTable::Recycling(1);
  int holding = 0;  // coroutines of one thread
  const Status run = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const uint32_t base = 8 * 64 * static_cast<uint32_t>(ctx.coroutine_index());
    {
      LockTurn turn;
      DMIDX_RETURN_IF_ERROR(
          LockTurn::Take(*rig.table, ctx, rig.object + base, nullptr, ctx.Now(), &turn));
      ++holding;
      while (holding < 4)
        ctx.Yield();
    }
    for (uint32_t i = 1; i <= 25; ++i) {
      LockTurn turn;
      DMIDX_RETURN_IF_ERROR(
          LockTurn::Take(*rig.table, ctx, rig.object + base + 8 * i, nullptr, ctx.Now(), &turn));
      ctx.Yield();
    }
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(rig.table->entries(), 4u);

  rig.table = LocalLockTable::Recycling(1);
  ContextImpl& ctx = rig.ctx();
  LockTurn turn, again;
  ASSERT_TRUE(LockTurn::Take(*rig.table, ctx, rig.word(), nullptr, ctx.Now(), &turn).ok());
  EXPECT_EQ(LockTurn::Take(*rig.table, ctx, rig.word(), nullptr, ctx.Now(), &again).code(),
            StatusCode::kFailedPrecondition);
  turn.Leave();
  ASSERT_TRUE(LockTurn::Take(*rig.table, ctx, rig.other, nullptr, ctx.Now(), &turn).ok());
  EXPECT_EQ(rig.table->entries(), 1u) << "the refused Take left the entry in use";
}

// Under stress: threads x coroutines on one bucket of a recycled table,
// three words; every turn checks exclusion per word, that a handed word is
// held remotely, and the counts add up at the end.
TEST(LockQueueTest, RecycledTableUnderThreadsKeepsOneHolderPerWord) {
  Watchdog watchdog;
  Rig rig(4, 4);
  rig.table = LocalLockTable::Recycling(1);
  const RemoteAddress third = *rig.ctx().allocator().Allocate(kObjectBytes, 64, 0);
  const RemoteAddress objects[3] = {rig.object, rig.other, third};
  {
    auto* zeros = reinterpret_cast<uint8_t*>(rig.ctx().scratch().data());
    std::fill(zeros, zeros + kObjectBytes, 0);
    const Op clear = Op::Write(third, zeros, kObjectBytes);
    ASSERT_TRUE(rig.ctx().Execute(0, {&clear, 1}).ok());
  }
  constexpr int kRounds = 300;
  std::atomic<int> inside[3] = {0, 0, 0};
  std::atomic<int> violations{0}, bad_handover{0};
  const Status run = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint8_t * bytes, ctx.arena().Bytes(kObjectBytes, 64));
    for (int i = 0; i < kRounds; ++i) {
      const int w = static_cast<int>((ctx.coroutine_index() + i) % 3);
      const RemoteAddress object = objects[w];
      DMIDX_ASSIGN_OR_RETURN(LockTurn turn,
                             Lock(rig, ctx, bytes, std::chrono::seconds(30), object));
      if (inside[w].fetch_add(1) != 0) ++violations;
      if (turn.handed_over()) {
        uint64_t found;
        std::memcpy(&found, bytes + kWordOffset, 8);
        if (found != kHold) ++bad_handover;
      }
      uint64_t count;
      std::memcpy(&count, bytes, 8);
      ++count;
      std::memcpy(bytes, &count, 8);
      const Op write = Op::Write(object, bytes, 8);
      inside[w].fetch_sub(1);
      if (turn.KeepForNext(3)) {
        DMIDX_RETURN_IF_ERROR(ctx.Execute(0, {&write, 1}));
        const ObjectImage image{object, bytes, kObjectBytes};
        turn.Leave(&image);
      } else {
        const Op batch[2] = {write, Op::Write(object + kWordOffset, ctx.zero_word(), 8)};
        DMIDX_RETURN_IF_ERROR(ctx.Execute(0, batch));
      }
      if (i % 7 == 0) ctx.Yield();
    }
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(bad_handover.load(), 0);
  uint64_t total = 0;
  for (const RemoteAddress& object : objects) {
    total += rig.ReadAt(object);
    EXPECT_EQ(rig.ReadAt(object + kWordOffset), 0u);
  }
  EXPECT_EQ(total, uint64_t{16} * kRounds);
  EXPECT_LE(rig.table->entries(), 16u);
}

}  // namespace
}  // namespace dmidx::lock
