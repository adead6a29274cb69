// HOCL: mutual exclusion across compute nodes, bounded handover, command
// combination round trips, and a dead holder reported instead of hanging.
#include "lock/hocl.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fault_injector.h"
#include "lib/runtime/client.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"
#include "testing/watchdog.h"
#include "tests/lock_test_util.h"

namespace dmidx::lock {
namespace {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;
using testing::Watchdog;

constexpr uint64_t kLockRegionBytes = 64 << 10;

std::unique_ptr<Cluster> OpenCluster(bool faults) {
  ClusterOptions options =
      testing::SmallLocalCluster(2, 8 << 20, faults, std::chrono::microseconds(20));
  options.memory_node.lock_region_bytes = kLockRegionBytes;
  std::unique_ptr<Cluster> cluster;
  EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
  return cluster;
}

GlobalLockTable LockTable() {
  return {{RemoteAddress::Lock(0, 0), RemoteAddress::Lock(1, 0)}, kLockRegionBytes / 8};
}

fabric::FaultInjector& Faults(Cluster& cluster) {
  return *static_cast<runtime::ClusterImpl&>(cluster).fabric().faults();
}

std::unique_ptr<Client> NewClient(Cluster& cluster, uint32_t threads, uint32_t coroutines) {
  std::unique_ptr<Client> client;
  EXPECT_TRUE(cluster
                  .NewClient({.threads = threads,
                              .coroutines_per_thread = coroutines,
                              .scratch_bytes_per_context = 4096},
                             &client)
                  .ok());
  return client;
}

// One locked increment of the counter at `object`: lock (CAS + READ in one
// batch), write back counter + 1 and release in one batch.
Status LockedIncrement(HierarchicalLock& lock, ContextImpl& ctx, RemoteAddress object) {
  runtime::ScratchArena::Scope scope(ctx.arena());  // the lock takes its words from it too
  DMIDX_ASSIGN_OR_RETURN(uint64_t * counter, ctx.arena().Words(2));
  const Op read = Op::Read(object, counter, 8);
  DMIDX_ASSIGN_OR_RETURN(LockGrant grant, lock.Acquire(ctx, object, &read));
  if (!grant.read_done) {
    Status status = ctx.Execute(object.node(), {&read, 1});
    if (!status.ok()) {
      (void)lock.Release(ctx, grant, {});
      return status;
    }
  }
  counter[1] = counter[0] + 1;
  return lock.Release(ctx, grant, {Op::Write(object, &counter[1], 8)});
}

// The 8-byte word at `address`, read by `ctx` (a blocking context that runs
// nothing else meanwhile) into its first scratch word.
uint64_t ReadWord(ContextImpl& ctx, RemoteAddress address) {
  auto* word = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  const Op read = Op::Read(address, word, 8);
  EXPECT_TRUE(ctx.Execute(address.node(), {&read, 1}).ok());
  return *word;
}

// A cluster, a client of `threads` x `coroutines`, a blocking context and
// a 64-byte object on memory node 0, for the handover tests.
struct Rig {
  Rig(uint32_t threads, uint32_t coroutines)
      : cluster(OpenCluster(false)), client(NewClient(*cluster, threads, coroutines)) {
    EXPECT_TRUE(client->NewBlockingContext(&setup).ok());
    object = *ContextImpl::From(*setup).allocator().Allocate(64, 64, 0);
  }
  ContextImpl& setup_ctx() { return ContextImpl::From(*setup); }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> setup;
  RemoteAddress object;
};

class HoclTest : public ::testing::TestWithParam<bool> {};  // local table on/off

// Two compute nodes, each 2 threads x 4 coroutines, all incrementing two
// counters (on two memory nodes) under their locks, with delays, torn
// READs/WRITEs and reordering injected. A lost update shows as a short total.
TEST_P(HoclTest, MutualExclusionAcrossComputeNodes) {
  Watchdog watchdog;
  auto cluster = OpenCluster(/*faults=*/true);
  ASSERT_NE(cluster, nullptr);
  auto first = NewClient(*cluster, 2, 4), second = NewClient(*cluster, 2, 4);
  std::unique_ptr<Context> setup;
  ASSERT_TRUE(first->NewBlockingContext(&setup).ok());
  auto& setup_ctx = ContextImpl::From(*setup);
  const RemoteAddress counters[2] = {*setup_ctx.allocator().Allocate(64, 64, 0),
                                     *setup_ctx.allocator().Allocate(64, 64, 1)};
  HoclOptions options;
  options.local_table = GetParam();
  HierarchicalLock locks[2] = {{LockTable(), options, 1}, {LockTable(), options, 2}};
  constexpr int kIterations = 60;
  // Per compute node: handovers its contexts counted, their longest wait.
  std::atomic<uint64_t> handovers[2] = {0, 0}, longest_wait_ns[2] = {0, 0};
  const std::vector<Status> results = testing::RunClients(
      std::vector<Client*>{first.get(), second.get()}, [&](int cn, Context& context) {
        auto& ctx = ContextImpl::From(context);
        const uint64_t handovers_before = ctx.counters().handovers;
        for (int i = 0; i < kIterations; ++i) {
          DMIDX_RETURN_IF_ERROR(LockedIncrement(locks[cn], ctx, counters[i % 2]));
        }
        handovers[cn] += ctx.counters().handovers - handovers_before;
        const auto waited = static_cast<uint64_t>(ctx.TakeLongestLockWait().count());
        for (uint64_t seen = longest_wait_ns[cn];
             waited > seen && !longest_wait_ns[cn].compare_exchange_weak(seen, waited);) {
        }
        return Status::Ok();
      });
  for (const Status& status : results)
    ASSERT_TRUE(status.ok()) << status.ToString();
  auto* values = reinterpret_cast<uint64_t*>(setup_ctx.scratch().data());
  for (int i = 0; i < 2; ++i) {
    const Op read = Op::Read(counters[i], &values[i], 8);
    ASSERT_TRUE(setup_ctx.Execute(counters[i].node(), {&read, 1}).ok());
  }
  const uint64_t per_counter = 2 /*CNs*/ * 2 /*threads*/ * 4 /*coroutines*/ * kIterations / 2;
  EXPECT_EQ(values[0], per_counter);
  EXPECT_EQ(values[1], per_counter);
  Client* clients[2] = {first.get(), second.get()};
  for (int cn = 0; cn < 2; ++cn) {
    // The lock CASes are the only CASes: the successful ones took the
    // global word. Each CN did half of 2 counters' work.
    const Stats fabric = clients[cn]->stats();
    const uint64_t global_acquisitions = fabric.compare_swaps - fabric.compare_swap_failures;
    EXPECT_EQ(global_acquisitions + handovers[cn], per_counter);
    if (GetParam()) {
      // Never more than max_handovers local handovers per global acquisition.
      EXPECT_LE(handovers[cn], options.max_handovers * global_acquisitions);
      EXPECT_GT(handovers[cn], 0u) << "16 contexts on 2 locks never handed over";
    } else {
      EXPECT_EQ(handovers[cn], 0u);
    }
    EXPECT_GT(longest_wait_ns[cn], 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(LocalTable, HoclTest, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? "On" : "Off"; });

// With handovers capped at 0, every acquisition takes the global word.
TEST(HoclHandoverTest, ZeroBudgetNeverHandsOver) {
  Watchdog watchdog;
  Rig rig(2, 4);
  auto& client = rig.client;
  const RemoteAddress counter = rig.object;
  HoclOptions options;
  options.max_handovers = 0;
  HierarchicalLock lock(LockTable(), options, 1);
  std::atomic<uint64_t> handovers{0};
  ASSERT_TRUE(client
                  ->Run([&](Context& context) {
                    auto& ctx = ContextImpl::From(context);
                    for (int i = 0; i < 30; ++i) {
                      DMIDX_RETURN_IF_ERROR(LockedIncrement(lock, ctx, counter));
                    }
                    handovers += ctx.counters().handovers;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(handovers.load(), 0u);
  const Stats fabric = client->stats();
  EXPECT_EQ(fabric.compare_swaps - fabric.compare_swap_failures, 8u * 30);
}

// Regression: the acquire timeout started only when a context reached the
// head of the local queue, so N local waiters behind a dead holder took N
// timeouts one after another, each retrying about as often as the first.
// Now the deadline counts from Acquire: the waiters behind the first find it
// (nearly) passed when their turn comes, so together they retry less than
// the first alone. (Not exactly once each: their Acquires start a little
// after the first's, by a scheduler round, which is long under TSan.)
TEST(HoclHandoverTest, LocalWaitersBehindADeadHolderShareOneTimeout) {
  Watchdog watchdog;
  Rig rig(1, 4);
  auto& client = rig.client;
  auto& setup_ctx = rig.setup_ctx();
  const RemoteAddress object = rig.object;
  HoclOptions options;
  options.acquire_timeout = std::chrono::milliseconds(1000);
  HierarchicalLock lock(LockTable(), options, 1);
  uint64_t* dead = *setup_ctx.arena().Words(1);
  *dead = (uint64_t{6} << 48) | 0x99;  // a context of compute node 5 that died holding it
  const Op hold = Op::Write(lock.table().WordFor(object), dead, 8);
  ASSERT_TRUE(setup_ctx.Execute(object.node(), {&hold, 1}).ok());
  ExpectQueuedWaitersShareOneTimeout(
      *client, 4, [&](ContextImpl& ctx) { return lock.Acquire(ctx, object).status(); });
}

// One blocking context of one compute node, and an object on memory node 0.
class HoclSingleContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = OpenCluster(false);
    ASSERT_NE(cluster_, nullptr);
    client_ = NewClient(*cluster_, 1, 1);
    ASSERT_TRUE(client_->NewBlockingContext(&context_).ok());
    object_ = *ctx().allocator().Allocate(64, 64, 0);
  }
  ContextImpl& ctx() { return ContextImpl::From(*context_); }
  static HoclOptions ShortTimeout() {
    HoclOptions options;
    options.acquire_timeout = std::chrono::milliseconds(200);
    return options;
  }
  // Locks the object through `lock`, fails the next `failures` batches
  // (injected) and releases it with a write-back of 77 to its first word:
  // Release's status, and in *used what it posted.
  Status ReleaseFailing(HierarchicalLock& lock, uint64_t failures, Stats* used) {
    auto grant = lock.Acquire(ctx(), object_);
    if (!grant.ok()) return Status::Internal("not locked: " + grant.status().ToString());
    uint64_t* value = reinterpret_cast<uint64_t*>(ctx().scratch().data()) + 1;
    *value = 77;
    EXPECT_TRUE(Faults(*cluster_).FailNextBatches(object_.node(), failures).ok());
    const Stats before = ctx().stats();
    const Status status = lock.Release(ctx(), *grant, {Op::Write(object_, value, 8)});
    *used = ctx().stats() - before;
    return status;
  }

  // Fails the next batch (injected) and releases `grant` with
  // `write_back`, whose first op writes an object linked by the WRITE of
  // the object's first word after it: Release's status, in *used what it
  // posted and in *reposted the batches it posted again.
  Status ReleaseLinkedFailingOnce(HierarchicalLock& lock, LockGrant& grant,
                                  std::span<const Op> write_back, Stats* used, uint64_t* reposted) {
    EXPECT_TRUE(Faults(*cluster_).FailNextBatches(object_.node(), 1).ok());
    const Stats before = ctx().stats();
    const uint64_t reposted_before = ctx().counters().reposted_batches;
    const Status status =
        lock.Release(ctx(), grant, write_back, nullptr, {.ops = 1, .link = object_});
    *used = ctx().stats() - before;
    *reposted = ctx().counters().reposted_batches - reposted_before;
    return status;
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Context> context_;
  RemoteAddress object_;
};

// Uncontended: lock CAS + READ in one batch, write-back + release in one
// batch: exactly 2 round trips, 2 batches, and the release WRITE is 8 bytes.
TEST_F(HoclSingleContextTest, UncontendedLockedUpdateIsTwoRoundTrips) {
  HierarchicalLock lock(LockTable(), HoclOptions{}, 1);
  const Stats before = ctx().stats();
  ASSERT_TRUE(LockedIncrement(lock, ctx(), object_).ok());
  const Stats used = ctx().stats() - before;
  EXPECT_EQ(used.round_trips, 2u);
  EXPECT_EQ(used.batches, 2u);
  EXPECT_EQ(used.compare_swaps, 1u);
  EXPECT_EQ(used.reads, 1u);
  EXPECT_EQ(used.writes, 2u);                   // the counter and the release
  EXPECT_EQ(used.bytes_written, 8u + 8u + 8u);  // CAS counts 8, two 8-byte WRITEs
  EXPECT_EQ(used.compare_swap_failures, 0u);
  // The lock word is free again.
  auto* word = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  const Op read = Op::Read(lock.table().WordFor(object_), word, 8);
  ASSERT_TRUE(ctx().Execute(object_.node(), {&read, 1}).ok());
  EXPECT_EQ(*word, 0u);
}

// A lock word whose holder died is reported after acquire_timeout with the
// holder's compute node, instead of spinning forever.
TEST_F(HoclSingleContextTest, DeadHolderIsReported) {
  Watchdog watchdog;
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  auto* tag = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  *tag = (uint64_t{5} << 48) | 0x1234;  // a context of compute node 4 that died holding it
  const Op hold = Op::Write(lock.table().WordFor(object_), tag, 8);
  ASSERT_TRUE(ctx().Execute(object_.node(), {&hold, 1}).ok());
  StatusOr<LockGrant> grant = lock.Acquire(ctx(), object_);
  ASSERT_EQ(grant.status().code(), StatusCode::kDeadlineExceeded) << grant.status().ToString();
  EXPECT_TRUE(IsLockTimeout(grant.status())) << "not marked as a lock timeout";
  EXPECT_NE(grant.status().message().find("held by compute node 4 (owner tag 5) "),
            std::string_view::npos)
      << grant.status().ToString();
  EXPECT_GT(ctx().counters().lock_retries, 0u);
  // The local entry was let go: once the word is free, the lock works again.
  *tag = 0;
  ASSERT_TRUE(ctx().Execute(object_.node(), {&hold, 1}).ok());
  EXPECT_TRUE(LockedIncrement(lock, ctx(), object_).ok());
}

// An operation that waited for the lock before its Acquire (an RDWC
// waiter, lock/rdwc.h) counts the deadline from the start of that wait,
// set in its context: with that start two timeouts back, the Acquire gives
// up after its first CAS. The Acquire takes it: the next one counts from
// its own start.
TEST_F(HoclSingleContextTest, DeadlineCountsFromTheOperationsEarlierWait) {
  Watchdog watchdog;
  const HoclOptions options = ShortTimeout();
  HierarchicalLock lock(LockTable(), options, 1);
  auto* tag = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  *tag = (uint64_t{5} << 48) | 0x1234;  // a context of compute node 4 that died holding it
  const Op hold = Op::Write(lock.table().WordFor(object_), tag, 8);
  ASSERT_TRUE(ctx().Execute(object_.node(), {&hold, 1}).ok());
  ctx().set_lock_wait_origin(ctx().Now() - 2 * options.acquire_timeout);
  const uint64_t before = ctx().counters().lock_retries;
  const StatusOr<LockGrant> grant = lock.Acquire(ctx(), object_);
  EXPECT_TRUE(IsLockTimeout(grant.status())) << grant.status().ToString();
  EXPECT_EQ(ctx().counters().lock_retries - before, 1u);
  EXPECT_FALSE(ctx().TakeLockWaitOrigin().has_value());
}

// A write-back batch that fails (the memory node fails it, injected) may
// have landed in part, none or all, so it is posted again. It carried the
// release WRITE, which may have landed too (and then another holder may be
// changing the object), so the word is READ first: it still holds this
// hold's tag, and the same batch, write-back and release, is posted again
// and lands. Release returns Ok, the object holds the new value and the
// word is free: one READ and one batch more than the happy path, no CAS.
TEST_F(HoclSingleContextTest, FailedWriteBackIsPostedAgain) {
  Watchdog watchdog;
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  Stats used;
  const uint64_t reposted = ctx().counters().reposted_batches;
  const Status status = ReleaseFailing(lock, 1, &used);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Faults(*cluster_).counters().failed_batches, 1u);
  EXPECT_EQ(ctx().counters().reposted_batches - reposted, 1u);
  EXPECT_EQ(used.batches, 3u) << "the batch, the READ of the word, the batch again";
  EXPECT_EQ(used.reads, 1u);
  EXPECT_EQ(used.writes, 4u) << "the write-back and the release, twice";
  EXPECT_EQ(used.compare_swaps, 0u);
  EXPECT_EQ(ReadWord(ctx(), object_), 77u) << "the write-back was not posted again";
  EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u);
}

// Without command combination the write-back goes alone, before the
// release: when it fails, this hold has the word for sure, so it is posted
// again at once (no READ of the word), then the release WRITE.
TEST_F(HoclSingleContextTest, FailedWriteBackIsPostedAgainWithoutCombination) {
  Watchdog watchdog;
  HoclOptions options = ShortTimeout();
  options.combine_commands = false;
  HierarchicalLock lock(LockTable(), options, 1);
  Stats used;
  const uint64_t reposted = ctx().counters().reposted_batches;
  const Status status = ReleaseFailing(lock, 1, &used);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(ctx().counters().reposted_batches - reposted, 1u);
  EXPECT_EQ(used.batches, 3u) << "the write-back twice, then the release";
  EXPECT_EQ(used.writes, 3u);
  EXPECT_EQ(used.reads, 0u);
  EXPECT_EQ(used.compare_swaps, 0u);
  EXPECT_EQ(ReadWord(ctx(), object_), 77u) << "the write-back was not posted again";
  EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u);
}

// ... and a write-back that never surely lands is reported, with the word
// freed: the batch fails, and so do the READs of the word after it
// (1 + release_retries of them: a READ that fails is tried again without
// spending a post again, up to release_retries times), so nothing tells
// whether the release landed.
// The word is released by a CAS from the hold's tag (the batch's release
// may have landed and another holder taken the word since), and Release
// returns the error. (tests/fault_paths_test.cc: the CAS fails too.)
TEST_F(HoclSingleContextTest, WriteBackThatNeverLandsIsReportedAndTheWordFreed) {
  Watchdog watchdog;
  const HoclOptions options = ShortTimeout();
  HierarchicalLock lock(LockTable(), options, 1);
  Stats used;
  const Status status = ReleaseFailing(lock, 2 + options.release_retries, &used);
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_EQ(Faults(*cluster_).counters().failed_batches, 2u + options.release_retries);
  EXPECT_EQ(used.batches, 1u + (1u + options.release_retries) + 1u);
  EXPECT_EQ(used.reads, 1u + options.release_retries);
  EXPECT_EQ(ctx().counters().reposted_batches, 0u) << "no READ told it was safe to";
  EXPECT_EQ(used.compare_swaps, 1u) << "the release by CAS, once";
  EXPECT_EQ(ReadWord(ctx(), object_), 0u);
  EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u) << "the word was left held";
  const uint64_t retries_before = ctx().counters().lock_retries;
  auto again = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ctx().counters().lock_retries, retries_before);
  EXPECT_TRUE(lock.Release(ctx(), *again, {}).ok());
}

// The failed batch's release may have landed, and another compute node may
// have taken the word and changed the object before this holder looks.
// Posting the write-back again would then overwrite that node's change,
// and a release retry must not free its hold. (An injected failure applies
// nothing, so the landed batch, the other node's hold and its change are
// played by writing them while this context still holds the grant.) The
// READ of the word finds the other node's tag: the release landed, and so
// did the write-back before it; Release returns Ok and posts nothing more.
TEST_F(HoclSingleContextTest, FailedBatchIsNotPostedAgainUnderAnotherNodesHold) {
  Watchdog watchdog;
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  auto* words = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  const uint64_t other = (uint64_t{7} << 48) | 0x4242;  // a context of compute node tag 7
  words[1] = other;
  words[2] = 5;   // compute node 7's change
  words[3] = 77;  // this holder's
  const Op take[2] = {Op::Write(grant->word, &words[1], 8), Op::Write(object_, &words[2], 8)};
  ASSERT_TRUE(ctx().Execute(object_.node(), take).ok());
  ASSERT_TRUE(Faults(*cluster_).FailNextBatches(object_.node(), 1).ok());
  const Stats before = ctx().stats();
  const Status status = lock.Release(ctx(), *grant, {Op::Write(object_, &words[3], 8)});
  const Stats used = ctx().stats() - before;
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(used.batches, 2u) << "the batch and the READ of the word";
  EXPECT_EQ(used.compare_swaps, 0u);
  EXPECT_EQ(ctx().counters().reposted_batches, 0u);
  EXPECT_EQ(ReadWord(ctx(), grant->word), other) << "the release retry freed compute node 7's lock";
  EXPECT_EQ(ReadWord(ctx(), object_), 5u) << "compute node 7's change was overwritten";
  // This compute node now waits for node 7 like anyone else.
  const StatusOr<LockGrant> blocked = lock.Acquire(ctx(), object_);
  EXPECT_EQ(blocked.status().code(), StatusCode::kDeadlineExceeded) << blocked.status().ToString();
}

// Review: a write-back may carry an object that this hold's word does not
// guard -- the B+tree's combined split posts {new right node, shrunk left
// node, release} under the LEFT node's lock only (btree.cc WriteSplit). If
// the failed batch placed its prefix (right, then left with its sibling
// link to right) but not the release, the right node is reachable (a
// lock-free descent follows left's sibling link) and lockable under its own
// word, so another compute node can change it before this holder looks.
// The READ of the left's word still finds this hold's tag, and the whole
// batch is posted again: the right node's stale image overwrites that
// node's change. (Played as FailedBatchIsNotPostedAgainUnderAnotherNodesHold
// does: the landed prefix and the other node's locked change are written
// while this context still holds the grant, then the batch fails once.)
// Fixed: the caller names the right node as linked by the left's word
// (LinkedObjects); the READ of the lock word also reads that link, finds
// it placed, and the batch is posted again without the right node.
TEST_F(HoclSingleContextTest, RepostDoesNotOverwriteAnObjectOutsideTheHold) {
  Watchdog watchdog;
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  HoclOptions no_table = ShortTimeout();
  no_table.local_table = false;
  HierarchicalLock node7(LockTable(), no_table, 7);  // another compute node's handle
  RemoteAddress right = *ctx().allocator().Allocate(64, 64, 0);
  while (lock.table().WordFor(right) == lock.table().WordFor(object_))
    right = *ctx().allocator().Allocate(64, 64, 0);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  auto* words = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  words[2] = 77;  // this holder's new right node
  words[3] = 78;  // this holder's left node, linked to it
  words[4] = 5;   // compute node 7's change to the right node
  const Op write_back[2] = {Op::Write(right, &words[2], 8), Op::Write(object_, &words[3], 8)};
  // The failed batch's prefix landed: both WRITEs, not the release.
  ASSERT_TRUE(ctx().Execute(object_.node(), write_back).ok());
  // Compute node 7 reaches the right node and changes it under its lock.
  auto other = node7.Acquire(ctx(), right);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE(node7.Release(ctx(), *other, {Op::Write(right, &words[4], 8)}).ok());
  ASSERT_EQ(ReadWord(ctx(), right), 5u);
  // This holder's batch is reported failed; Release posts it again.
  Stats used;
  uint64_t reposted = 0;
  const Status status = ReleaseLinkedFailingOnce(lock, *grant, write_back, &used, &reposted);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(ReadWord(ctx(), right), 5u)
      << "the re-posted write-back overwrote compute node 7's change to the right node";
  EXPECT_EQ(reposted, 1u);
  EXPECT_EQ(used.batches, 3u) << "the batch, the READs of the word and the link, the rest again";
  EXPECT_EQ(used.reads, 2u);
  EXPECT_EQ(used.writes, 3u + 2u) << "the left and the release posted again, not the right";
  EXPECT_EQ(ReadWord(ctx(), object_), 78u);
  EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u);
}

// ... and while the link has not landed, the linked object is unreachable:
// the whole batch is posted again, the linked object with it (without it,
// the left would link to a node never written). Without command
// combination the write-back goes alone (the hold surely has the word), so
// only the link is read before it is posted again.
TEST_F(HoclSingleContextTest, RepostKeepsALinkedObjectWhoseLinkDidNotLand) {
  Watchdog watchdog;
  for (const bool combine : {true, false}) {
    SCOPED_TRACE(combine);
    HoclOptions options = ShortTimeout();
    options.combine_commands = combine;
    HierarchicalLock lock(LockTable(), options, 1);
    const RemoteAddress right = *ctx().allocator().Allocate(64, 64, 0);
    auto grant = lock.Acquire(ctx(), object_);
    ASSERT_TRUE(grant.ok());
    auto* words = reinterpret_cast<uint64_t*>(ctx().scratch().data());
    words[2] = 77;           // the new right node
    words[3] = right.raw();  // the left node's link to it
    const Op write_back[2] = {Op::Write(right, &words[2], 8), Op::Write(object_, &words[3], 8)};
    Stats used;
    uint64_t reposted = 0;
    const Status status = ReleaseLinkedFailingOnce(lock, *grant, write_back, &used, &reposted);
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(reposted, 1u);
    EXPECT_EQ(used.reads, combine ? 2u : 1u) << "the lock word (with the release) and the link";
    EXPECT_EQ(used.writes, combine ? 3u + 3u : 2u + 2u + 1u)
        << "the whole batch twice (or the write-back twice, then the release)";
    EXPECT_EQ(ReadWord(ctx(), right), 77u) << "the right node was not written";
    EXPECT_EQ(ReadWord(ctx(), object_), right.raw());
    EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u);
  }
}

// A LinkedObjects that does not fit the write-back is rejected before
// anything of it is posted, and the lock released: no WRITE follows the
// linked ones, the link word lies outside the WRITE after them, or one of
// them is not a WRITE.
TEST_F(HoclSingleContextTest, LinkedObjectsThatDoNotFitAreRejected) {
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  const RemoteAddress right = *ctx().allocator().Allocate(64, 64, 0);
  auto* words = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  const Op write_right = Op::Write(right, &words[2], 8);
  const Op write_left = Op::Write(object_, &words[3], 16);
  const Op read_right = Op::Read(right, &words[4], 8);
  struct Case {
    std::vector<Op> write_back;
    LinkedObjects linked;
  };
  const Case cases[] = {
      {{write_right}, {.ops = 1, .link = right}},
      {{write_right, write_left}, {.ops = 1, .link = object_ + 16}},
      {{write_right, write_left}, {.ops = 1, .link = object_ + 4}},
      {{write_right, write_left}, {.ops = 1, .link = right}},
      {{read_right, write_left}, {.ops = 1, .link = object_}},
  };
  for (const Case& c : cases) {
    auto grant = lock.Acquire(ctx(), object_);
    ASSERT_TRUE(grant.ok());
    const Stats before = ctx().stats();
    const Status status = lock.Release(ctx(), *grant, c.write_back, nullptr, c.linked);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_EQ((ctx().stats() - before).writes, 1u) << "only the release WRITE is posted";
    EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u);
  }
}

// Review of btmerge2: with `unlinked` given, a Release whose write-back
// was refused before anything of it was posted (here a LinkedObjects that
// does not fit: InvalidArgument; in a split, a redo record that found no
// slot) posts the release alone. When that post fails although it landed
// and nothing re-reads the word (release_retries 0), DecideLink finds the
// word no longer this hold's and took it for "the whole batch landed":
// Release returned Ok for a write-back it never posted (a split would then
// add a separator naming a node never written, its Insert acknowledged
// and lost). It must return the refusal, with *unlinked set (nothing of
// the write-back was posted).
TEST_F(HoclSingleContextTest, ARefusedWriteBackIsNeverReportedLandedByItsLinkCheck) {
  Watchdog watchdog;
  HoclOptions options = ShortTimeout();
  options.release_retries = 0;
  HierarchicalLock lock(LockTable(), options, 1);
  const RemoteAddress right = *ctx().allocator().Allocate(64, 64, 0);
  auto* words = reinterpret_cast<uint64_t*>(ctx().scratch().data());
  words[2] = 77;
  words[3] = right.raw();
  // The link word lies outside the WRITE after the linked one: refused.
  const Op write_back[2] = {Op::Write(right, &words[2], 8), Op::Write(object_, &words[3], 8)};
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  ASSERT_TRUE(Faults(*cluster_).FailNextBatchesAfterApplying(object_.node(), 1).ok());
  bool unlinked = false;
  const Status status =
      lock.Release(ctx(), *grant, write_back, nullptr, {.ops = 1, .link = object_ + 8}, &unlinked);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_TRUE(unlinked) << "nothing of the write-back was posted";
  EXPECT_NE(ReadWord(ctx(), object_), right.raw()) << "the write-back was posted";
  EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u);
}

// Review: release_retries = 0 (no re-post) must still release the word
// once the batch failed; ReleaseHold is handed release_retries as its
// number of posts in all, so it posts no CAS and a live compute node
// leaves the word held for good.
TEST_F(HoclSingleContextTest, NoRetriesStillReleasesTheWord) {
  Watchdog watchdog;
  HoclOptions options = ShortTimeout();
  options.release_retries = 0;
  HierarchicalLock lock(LockTable(), options, 1);
  Stats used;
  const Status status = ReleaseFailing(lock, 1, &used);
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_EQ(ReadWord(ctx(), lock.table().WordFor(object_)), 0u) << "the word was left held";
  EXPECT_EQ(used.batches, 2u) << "the batch, then the release by CAS";
  EXPECT_EQ(used.compare_swaps, 1u);
  EXPECT_EQ(ctx().counters().reposted_batches, 0u);
}

// Review: PostHeld reads the lock word into ctx.discard_word() and trusts
// it "since nothing else of this context puts a result there meanwhile".
// But the radix tree posts UNSIGNALED CASes whose result goes to that very
// word (radix.cc: the parent slot's type repair), and such a CAS to another
// memory node may be applied at any time after its post. Here one is in
// flight to memory node 1 (its old value, 0x1234, lands in the discard
// word) while a Release on memory node 0 fails once: when it lands between
// the READ of the lock word and the check, the check takes 0x1234 for
// "the release landed", and Release returns Ok without re-posting or
// releasing -- the word stays held by this live node for good.
TEST(HoclDiscardWordTest, UnsignaledResultDoesNotPassForALandedRelease) {
  Watchdog watchdog;
  ClusterOptions cluster_options =
      testing::SmallLocalCluster(2, 8 << 20, false, std::chrono::microseconds(0));
  cluster_options.memory_node.lock_region_bytes = kLockRegionBytes;
  cluster_options.local.max_apply_delay = std::chrono::microseconds(20);
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(cluster_options, &cluster).ok());
  auto client = NewClient(*cluster, 1, 1);
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  ContextImpl& ctx = ContextImpl::From(*context);
  const RemoteAddress object = *ctx.allocator().Allocate(64, 64, 0);
  const RemoteAddress slot = *ctx.allocator().Allocate(64, 64, 1);
  auto* words = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  words[1] = 0x1234;
  const Op init = Op::Write(slot, &words[1], 8);
  ASSERT_TRUE(ctx.Execute(slot.node(), {&init, 1}).ok());
  HierarchicalLock lock(LockTable(), HoclOptions{}, 1);
  int misjudged = 0, rounds = 0;
  for (; rounds < 3000 && misjudged == 0; ++rounds) {
    auto grant = lock.Acquire(ctx, object);
    ASSERT_TRUE(grant.ok()) << "round " << rounds << ": " << grant.status().ToString();
    // A radix-style repair CAS: unsignaled, result to the discard word
    // (it fails: the slot is not 0xdead).
    const Op repair = Op::CompareSwap(slot, ctx.discard_word(), 0xdead, 0xbeef);
    ASSERT_TRUE(ctx.Post(slot.node(), {&repair, 1}, nullptr).ok());
    words[2] = 77;
    ASSERT_TRUE(Faults(*cluster).FailNextBatches(object.node(), 1).ok());
    const Status status = lock.Release(ctx, *grant, {Op::Write(object, &words[2], 8)});
    const uint64_t word = ReadWord(ctx, lock.table().WordFor(object));
    if (status.ok() && word == grant->tag) ++misjudged;
  }
  EXPECT_EQ(misjudged, 0) << "after " << rounds
                          << " rounds: Release returned Ok, but the word is still held";
}

// The word holds the tag of the context whose CAS took it; a context that
// got the lock by local handover and then fails its write-back must look
// for that tag in the word, and release it by CAS with that tag, not its
// own, or the word stays held forever. Its batch fails once (the READ of
// the word finds the chain's tag, and the batch is posted again), or on
// every post (the READs fail too, and the release by CAS frees the word).
TEST(HoclHandoverTest, ReleaseRetryAfterHandoverFreesTheWord) {
  Watchdog watchdog;
  HoclOptions options;
  options.acquire_timeout = std::chrono::milliseconds(200);
  for (const uint64_t failures : {uint64_t{1}, 2 + uint64_t{options.release_retries}}) {
    SCOPED_TRACE(failures);
    Rig rig(1, 2);
    auto& cluster = rig.cluster;
    const RemoteAddress object = rig.object;
    HierarchicalLock lock(LockTable(), options, 1);
    std::atomic<int> handed_over{0};
    Status failed;
    // Coroutine 0 takes the word (its CAS suspends it, so coroutine 1
    // queues behind it) and hands it over; coroutine 1's write-back batch
    // fails.
    const Status status = rig.client->Run([&](Context& context) -> Status {
      auto& ctx = ContextImpl::From(context);
      DMIDX_ASSIGN_OR_RETURN(LockGrant grant, lock.Acquire(ctx, object));
      if (ctx.coroutine_index() == 0) return lock.Release(ctx, grant, {});
      if (grant.handed_over) ++handed_over;
      DMIDX_RETURN_IF_ERROR(Faults(*cluster).FailNextBatches(object.node(), failures));
      failed = lock.Release(ctx, grant, {Op::Write(object, ctx.zero_word(), 8)});
      return Status::Ok();
    });
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(handed_over.load(), 1);
    EXPECT_EQ(failed.ok(), failures == 1) << failed.ToString();
    EXPECT_EQ(Faults(*cluster).counters().failed_batches, failures);
    EXPECT_EQ(ReadWord(rig.setup_ctx(), lock.table().WordFor(object)), 0u)
        << "the retried release did not free the word";
  }
}

// A local handover carries the holder's image of the object: the next
// holder's combined READ of that object and length is answered from it, with
// no round trip, and sees the write-back's bytes; a release without an
// image passes none on.
TEST(HoclHandoverTest, HandoverCarriesTheObjectImage) {
  Watchdog watchdog;
  Rig rig(1, 3);
  auto& client = rig.client;
  const RemoteAddress object = rig.object;
  HierarchicalLock lock(LockTable(), HoclOptions{}, 1);
  struct Seen {
    bool handed_over = false, read_done = false;
    uint64_t value = 0, round_trips = 0;
  };
  std::vector<Seen> seen(3);
  // Coroutine 0 takes the word (its CAS suspends it, so 1 and 2 queue) and
  // writes 42 with an image; 1 reads 8 bytes (answered from the image) and
  // writes 43 without one; 2 reads 8 bytes (needs its own READ).
  ASSERT_TRUE(client
                  ->Run([&](Context& context) -> Status {
                    auto& ctx = ContextImpl::From(context);
                    runtime::ScratchArena::Scope scope(ctx.arena());
                    DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
                    const int me = ctx.coroutine_index();
                    const Op read = Op::Read(object, words, 8);
                    const uint64_t before = ctx.counters().round_trips;
                    DMIDX_ASSIGN_OR_RETURN(LockGrant grant, lock.Acquire(ctx, object, &read));
                    seen[me] = {grant.handed_over, grant.read_done, words[0],
                                ctx.counters().round_trips - before};
                    words[1] = 42 + me;
                    const ObjectImage image{object, &words[1], 8};
                    return lock.Release(ctx, grant, {Op::Write(object, &words[1], 8)},
                                        me == 0 ? &image : nullptr);
                  })
                  .ok());
  EXPECT_FALSE(seen[0].handed_over);
  EXPECT_TRUE(seen[0].read_done);
  EXPECT_EQ(seen[0].round_trips, 1u);  // the CAS and the READ in one batch
  EXPECT_TRUE(seen[1].handed_over);
  EXPECT_TRUE(seen[1].read_done);
  EXPECT_EQ(seen[1].value, 42u);
  EXPECT_EQ(seen[1].round_trips, 0u);
  EXPECT_TRUE(seen[2].handed_over);
  EXPECT_FALSE(seen[2].read_done);  // 1 released without an image
  EXPECT_EQ(seen[2].round_trips, 0u);
}

// What one holder in a handover test saw.
struct Turn {
  bool handed_over = false, read_done = false;
  uint64_t seen[2] = {0, 0};  // the object's two words, under the lock
  Status released;
  Stats release_used;  // what its Release posted
};

// A failure injected into a holder's write-back: `batches` batches from it
// on fail; with `first_landed`, its first WRITE is played as landed before
// (a failed batch may have placed a prefix; an injected one places none).
struct WriteBackFailure {
  fabric::FaultInjector* faults = nullptr;
  uint64_t batches = 0;
  bool first_landed = false;
};

// Locks `object` with a combined READ of its first two words (reading them
// alone if no image came with the lock), records what it saw in *turn, and
// writes `value` to both back, a WRITE each, with an image of them.
Status WriteWithImage(HierarchicalLock& lock, ContextImpl& ctx, RemoteAddress object,
                      uint64_t value, const WriteBackFailure& failure, Turn* turn) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(4));
  const Op read = Op::Read(object, &words[0], 16);
  DMIDX_ASSIGN_OR_RETURN(LockGrant grant, lock.Acquire(ctx, object, &read));
  if (!grant.read_done) DMIDX_RETURN_IF_ERROR(ctx.Execute(object.node(), {&read, 1}));
  turn->handed_over = grant.handed_over;
  turn->read_done = grant.read_done;
  turn->seen[0] = words[0];
  turn->seen[1] = words[1];
  words[2] = words[3] = value;
  const ObjectImage image{object, &words[2], 16};
  const Op write_back[2] = {Op::Write(object, &words[2], 8), Op::Write(object + 8, &words[3], 8)};
  if (failure.first_landed) DMIDX_RETURN_IF_ERROR(ctx.Execute(object.node(), {write_back, 1}));
  if (failure.batches > 0)
    DMIDX_RETURN_IF_ERROR(failure.faults->FailNextBatches(object.node(), failure.batches));
  const Stats before = ctx.stats();
  turn->released = lock.Release(ctx, grant, write_back, &image);
  turn->release_used = ctx.stats() - before;
  return Status::Ok();
}

// Three holders of one object in a handover chain: coroutine 0 takes the
// word (1 and 2 queue meanwhile) and writes 100; 1 writes 101 with
// `failure` on its write-back (kept for 2); 2 writes 102 and releases.
std::vector<Turn> HandoverChainWithAFailedWriteBack(Rig& rig, HierarchicalLock& lock,
                                                    WriteBackFailure failure) {
  std::vector<Turn> turns(3);
  const Status run = rig.client->Run([&](Context& context) {
    auto& ctx = ContextImpl::From(context);
    const int me = ctx.coroutine_index();
    return WriteWithImage(lock, ctx, rig.object, 100 + static_cast<uint64_t>(me),
                          me == 1 ? failure : WriteBackFailure{}, &turns[me]);
  });
  EXPECT_TRUE(run.ok()) << run.ToString();
  return turns;
}

// A handover keeps the word for the next local holder, so the write-back
// batch goes alone, and when it fails (here after its first WRITE landed:
// the object is torn) it is posted again, as long as it takes: nobody else
// can change the object meanwhile. The next holder is handed the word with
// the image of the whole new object. Exact ops: the happy holders' Release
// is one batch each (the first: its two WRITEs, kept; the last: its two and
// the release), the failed one's two batches of two WRITEs, no READ, no
// CAS.
TEST(HoclHandoverTest, FailedWriteBackIsPostedAgainBeforeTheHandover) {
  Watchdog watchdog;
  Rig rig(1, 3);
  fabric::FaultInjector& faults = Faults(*rig.cluster);
  HierarchicalLock lock(LockTable(), HoclOptions{}, 1);
  const std::vector<Turn> turns = HandoverChainWithAFailedWriteBack(
      rig, lock, {.faults = &faults, .batches = 1, .first_landed = true});
  for (const Turn& turn : turns)
    EXPECT_TRUE(turn.released.ok()) << turn.released.ToString();
  EXPECT_EQ(faults.counters().failed_batches, 1u);
  EXPECT_EQ(turns[0].release_used.batches, 1u);
  EXPECT_EQ(turns[0].release_used.writes, 2u);
  ASSERT_TRUE(turns[1].handed_over);
  EXPECT_TRUE(turns[1].read_done);
  EXPECT_EQ(turns[1].seen[0], 100u);
  EXPECT_EQ(turns[1].seen[1], 100u);
  EXPECT_EQ(turns[1].release_used.batches, 2u) << "the write-back, posted once more";
  EXPECT_EQ(turns[1].release_used.writes, 4u);
  EXPECT_EQ(turns[1].release_used.reads, 0u);
  EXPECT_EQ(turns[1].release_used.compare_swaps, 0u);
  ASSERT_TRUE(turns[2].handed_over);
  EXPECT_TRUE(turns[2].read_done) << "the image of the write-back posted again was not handed over";
  EXPECT_EQ(turns[2].seen[0], 101u);
  EXPECT_EQ(turns[2].seen[1], 101u) << "the next holder was handed a torn object";
  EXPECT_EQ(turns[2].release_used.batches, 1u);
  EXPECT_EQ(turns[2].release_used.writes, 3u);
  EXPECT_EQ(ReadWord(rig.setup_ctx(), rig.object), 102u);
  EXPECT_EQ(ReadWord(rig.setup_ctx(), rig.object + 8), 102u);
  EXPECT_EQ(ReadWord(rig.setup_ctx(), lock.table().WordFor(rig.object)), 0u);
  const Stats fabric = rig.client->stats();
  EXPECT_EQ(fabric.compare_swaps, 1u) << "one global acquisition for the chain";
}

// ... and when every post of it fails, the word is not handed over as if
// the object were whole (without an image the next holder would take a
// possibly torn object under a hold it was given, and nothing tells): the
// keep is dropped, the word released by a CAS from the chain's tag, and
// the holder gets the error. The next holder takes the word by CAS like
// any other and reads the object as the failed posts left it (its first
// word new: a B+tree node's checksum tells such a node under that hold).
TEST(HoclHandoverTest, WriteBackThatNeverLandsIsNotHandedOver) {
  Watchdog watchdog;
  Rig rig(1, 3);
  fabric::FaultInjector& faults = Faults(*rig.cluster);
  const HoclOptions options;
  HierarchicalLock lock(LockTable(), options, 1);
  const uint64_t posts = 1 + options.release_retries;
  const std::vector<Turn> turns = HandoverChainWithAFailedWriteBack(
      rig, lock, {.faults = &faults, .batches = posts, .first_landed = true});
  EXPECT_TRUE(turns[0].released.ok()) << turns[0].released.ToString();
  ASSERT_TRUE(turns[1].handed_over);
  EXPECT_TRUE(turns[1].released.IsUnavailable()) << turns[1].released.ToString();
  EXPECT_EQ(faults.counters().failed_batches, posts);
  EXPECT_EQ(turns[1].release_used.batches, posts + 1) << "the posts and the release by CAS";
  EXPECT_EQ(turns[1].release_used.writes, 2 * posts);
  EXPECT_EQ(turns[1].release_used.compare_swaps, 1u);
  EXPECT_FALSE(turns[2].handed_over) << "handed the word over a write-back that never landed";
  EXPECT_TRUE(turns[2].read_done) << "its own READ, in its lock CAS's batch";
  EXPECT_EQ(turns[2].seen[0], 101u);
  EXPECT_EQ(turns[2].seen[1], 100u);
  EXPECT_TRUE(turns[2].released.ok()) << turns[2].released.ToString();
  EXPECT_EQ(ReadWord(rig.setup_ctx(), lock.table().WordFor(rig.object)), 0u);
  const Stats fabric = rig.client->stats();
  EXPECT_EQ(fabric.compare_swaps - fabric.compare_swap_failures, 3u)
      << "two global acquisitions and the release by CAS";
}

// Two objects whose lock words collide share one local entry. A handed
// image names its object, so a holder of the other object is not answered
// from it; and every holder drops the image it was handed (its changes
// would make it stale), so a later holder of the first object is not
// answered from an image older than the holder in between.
TEST(HoclHandoverTest, CollidingObjectsNeverShareAnImage) {
  Watchdog watchdog;
  Rig rig(1, 3);
  const RemoteAddress first = rig.object;
  const GlobalLockTable table = LockTable();
  // Another 64-byte object of memory node 0 with the same lock word.
  RemoteAddress second;
  for (int tries = 0; tries < 100000 && second.is_null(); ++tries) {
    const RemoteAddress candidate = *rig.setup_ctx().allocator().Allocate(64, 64, 0);
    if (table.WordFor(candidate) == table.WordFor(first)) second = candidate;
  }
  ASSERT_FALSE(second.is_null()) << "no object shares the first one's lock word";
  HierarchicalLock lock(table, HoclOptions{}, 1);
  std::vector<Turn> turns(3);
  // Coroutine 0 writes 7 to the first object; 1 writes 8 to the second; 2
  // writes 9 to the first.
  const Status run = rig.client->Run([&](Context& context) {
    auto& ctx = ContextImpl::From(context);
    const int me = ctx.coroutine_index();
    return WriteWithImage(lock, ctx, me == 1 ? second : first, 7 + static_cast<uint64_t>(me), {},
                          &turns[me]);
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  for (const Turn& turn : turns)
    EXPECT_TRUE(turn.released.ok()) << turn.released.ToString();
  ASSERT_TRUE(turns[1].handed_over);
  EXPECT_FALSE(turns[1].read_done) << "the first object's image answered a READ of the second";
  EXPECT_EQ(turns[1].seen[0], 0u) << "the second object was never written before";
  ASSERT_TRUE(turns[2].handed_over);
  EXPECT_FALSE(turns[2].read_done) << "the first object's image outlived a holder of the second";
  EXPECT_EQ(turns[2].seen[0], 7u);
}

// Two handles of compute node 0 on the same lock words, with and without
// the local table: as another tree with on-chip locks (they share the lock
// region's words) or a handle opened with local_lock_table off.
struct HandlesWithAndWithoutTable {
  static HoclOptions NoTable() {
    HoclOptions options;
    options.local_table = false;
    return options;
  }
  HierarchicalLock with_table{LockTable(), HoclOptions{}, 1};
  HierarchicalLock without_table{LockTable(), NoTable(), 1};
};

// Regression: the global word held the tag of the CONTEXT whose CAS took it,
// and handovers kept it, so that context's later undo of a failed CAS
// batch (a CAS from its tag to 0) freed the word while a handover chain
// still held it. Coroutine 0 takes the word and hands it to coroutine 1;
// then it asks for the same word through a handle without the local table
// (another tree with on-chip locks, or a handle opened with
// local_lock_table off) and that CAS batch fails. Its undo must leave the
// chain's hold in the word. Tags are per acquisition now.
TEST(HoclHandoverTest, UndoOfAFailedCasNeverFreesAWordAHandoverChainHolds) {
  Watchdog watchdog;
  Rig rig(1, 2);
  auto& cluster = rig.cluster;
  const RemoteAddress object = rig.object;
  HandlesWithAndWithoutTable handles;
  HierarchicalLock& with_table = handles.with_table;
  const RemoteAddress word = with_table.table().WordFor(object);
  bool undone = false;  // the coroutines share one thread
  uint64_t chain_tag = 0, before_undo = 0, after_undo = 0;
  bool handed_over = false;
  Status failed, released;
  const Status run = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    DMIDX_ASSIGN_OR_RETURN(LockGrant grant, with_table.Acquire(ctx, object));
    if (ctx.coroutine_index() == 1) {
      handed_over = grant.handed_over;
      chain_tag = grant.tag;
      while (!undone)
        ctx.Yield();  // holds the word meanwhile
      released = with_table.Release(ctx, grant, {});
      return Status::Ok();
    }
    DMIDX_RETURN_IF_ERROR(with_table.Release(ctx, grant, {}));  // to coroutine 1
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * seen, ctx.arena().Words(1));
    const Op read = Op::Read(word, seen, 8);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&read, 1}));
    before_undo = *seen;
    DMIDX_RETURN_IF_ERROR(Faults(*cluster).FailNextBatches(word.node(), 1));
    failed = handles.without_table.Acquire(ctx, object).status();
    DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&read, 1}));
    after_undo = *seen;
    undone = true;
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(handed_over);
  EXPECT_NE(chain_tag, 0u);
  EXPECT_EQ(before_undo, chain_tag) << "the word does not hold the chain's tag";
  EXPECT_TRUE(failed.IsUnavailable()) << failed.ToString();
  EXPECT_EQ(Faults(*cluster).counters().failed_batches, 1u);
  EXPECT_EQ(after_undo, chain_tag)
      << "the undo of a failed CAS freed a word a handover chain still held";
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_EQ(ReadWord(rig.setup_ctx(), word), 0u) << "the chain's last holder did not free the word";
}

// Regression, what the bug above cost: an acknowledged increment was lost.
// Compute node 0's coroutine 0 increments a counter under the lock and hands
// the word (and its image) to coroutine 1, which holds it; coroutine 0's
// CAS batch for the word through a handle without the local table then
// fails. Compute node 1 increments the counter meanwhile, and coroutine 1
// writes back its increment of the image once compute node 1's first CAS
// has come back: that CAS must find the word held (it takes the word after
// coroutine 1's release), or compute node 1's increment is overwritten.
TEST(HoclHandoverTest, NoIncrementIsLostWhenTheTakingContextsCasFailsElsewhere) {
  Watchdog watchdog;
  Rig rig(1, 2);
  auto& cluster = rig.cluster;
  const RemoteAddress counter = rig.object;
  auto other = NewClient(*cluster, 1, 1);
  std::unique_ptr<Context> other_context;
  ASSERT_TRUE(other->NewBlockingContext(&other_context).ok());
  HandlesWithAndWithoutTable handles;
  HierarchicalLock& with_table = handles.with_table;
  HierarchicalLock other_lock(LockTable(), HoclOptions{}, 2);
  std::atomic<bool> undone{false}, other_done{false};
  Status other_status, failed;
  std::thread other_node([&] {
    while (!undone.load())
      std::this_thread::yield();
    other_status = LockedIncrement(other_lock, ContextImpl::From(*other_context), counter);
    other_done = true;
  });
  const Status run = rig.client->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const int me = ctx.coroutine_index();
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
    const Op read = Op::Read(counter, &words[0], 8);
    DMIDX_ASSIGN_OR_RETURN(LockGrant grant, with_table.Acquire(ctx, counter, &read));
    if (!grant.read_done) DMIDX_RETURN_IF_ERROR(ctx.Execute(counter.node(), {&read, 1}));
    if (me == 1) {
      // Until compute node 1 has tried the word once (a failed CAS), or
      // has taken it and is done.
      while (other->stats().compare_swap_failures == 0 && !other_done.load())
        ctx.Yield();
    }
    words[1] = words[0] + 1;
    const ObjectImage image{counter, &words[1], 8};
    DMIDX_RETURN_IF_ERROR(
        with_table.Release(ctx, grant, {Op::Write(counter, &words[1], 8)}, &image));
    if (me == 1) return Status::Ok();
    DMIDX_RETURN_IF_ERROR(Faults(*cluster).FailNextBatches(counter.node(), 1));
    failed = handles.without_table.Acquire(ctx, counter).status();
    undone = true;
    return Status::Ok();
  });
  other_node.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_TRUE(failed.IsUnavailable()) << failed.ToString();
  ASSERT_TRUE(other_status.ok()) << other_status.ToString();
  EXPECT_EQ(ReadWord(rig.setup_ctx(), counter), 3u) << "an acknowledged increment was lost";
  EXPECT_GT(ContextImpl::From(*other_context).counters().lock_retries, 0u)
      << "compute node 1 took the word while coroutine 1 held it";
}

TEST_F(HoclSingleContextTest, WriteBackOnAnotherNodeIsRejectedAndTheLockReleased) {
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  const RemoteAddress elsewhere = *ctx().allocator().Allocate(64, 64, 1);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  EXPECT_TRUE(lock.Release(ctx(), *grant, {Op::Write(elsewhere, ctx().scratch().data(), 8)})
                  .IsInvalidArgument());
  auto again = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(lock.Release(ctx(), *again, {}).ok());
}

TEST_F(HoclSingleContextTest, WriteBackOfTooManyOpsIsRejectedAndTheLockReleased) {
  HierarchicalLock lock(LockTable(), ShortTimeout(), 1);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  std::vector<Op> too_many(HierarchicalLock::kMaxWriteBackOps + 1,
                           Op::Write(object_, ctx().zero_word(), 8));
  const Stats before = ctx().stats();
  EXPECT_TRUE(lock.Release(ctx(), *grant, too_many).IsInvalidArgument());
  EXPECT_EQ((ctx().stats() - before).writes, 1u) << "only the release WRITE is posted";
  auto again = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(lock.Release(ctx(), *again, {}).ok());
}

// Asking again for a word the context holds would park it behind itself
// forever; it is refused instead.
TEST_F(HoclSingleContextTest, SameContextTwiceIsFailedPrecondition) {
  HierarchicalLock lock(LockTable(), HoclOptions{}, 1);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(lock.Acquire(ctx(), object_).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(lock.Release(ctx(), *grant, {}).ok());
  auto again = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(lock.Release(ctx(), *again, {}).ok());
}

// The local table finds entries without a lock: one bucket chains every
// word, and each word still has exactly one entry, the same every time.
TEST(LocalLockTableTest, OneBucketKeepsOneEntryPerWord) {
  LocalLockTable table(1);
  std::vector<LocalLockTable::Entry*> first;
  for (uint64_t i = 0; i < 200; ++i)
    first.push_back(&table.EntryFor(RemoteAddress::Lock(static_cast<uint16_t>(i % 3), 8 * i)));
  EXPECT_EQ(table.entries(), 200u);
  for (uint64_t i = 0; i < 200; ++i) {
    EXPECT_EQ(&table.EntryFor(RemoteAddress::Lock(static_cast<uint16_t>(i % 3), 8 * i)), first[i])
        << i;
  }
  EXPECT_EQ(table.entries(), 200u);
}

// Threads racing to make the entries of the same words end with one entry
// per word, which all of them were given.
TEST(LocalLockTableTest, RacingFirstUsesMakeOneEntryPerWord) {
  Watchdog watchdog;
  constexpr int kThreads = 4;
  constexpr uint64_t kWords = 500;
  LocalLockTable table(64);
  std::vector<std::vector<LocalLockTable::Entry*>> seen(kThreads);
  testing::RunThreadsTogether(kThreads, [&](int t) {
    for (uint64_t w = 0; w < kWords; ++w)
      seen[t].push_back(&table.EntryFor(RemoteAddress::Pool(0, 8 * w)));
  });
  EXPECT_EQ(table.entries(), kWords);
  for (int t = 1; t < kThreads; ++t)
    EXPECT_EQ(seen[t], seen[0]) << "thread " << t;
}

}  // namespace
}  // namespace dmidx::lock
