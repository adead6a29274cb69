// Regression tests of the radix tree, each named after the defect it pins
// (issue 23): an upsert lost to a merge, a scan stuck on a merged-away slot,
// keys left locked or claims left stranded by one failed batch, a header
// split's trim lost for good, a merge whose freeze batch fails. Exact
// interleavings come from testing/injection.h: the operation runs on
// coroutine 0 and the change it races runs, or the fault switch flips,
// between two of its batches; each test asserts the moment it fired at.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/radix.h"
#include "lib/runtime/client.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"
#include "lock/lock_queue.h"
#include "radix/layout.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"
#include "testing/sanitizers.h"
#include "testing/watchdog.h"
#include "tests/radix_test_util.h"

namespace dmidx {
namespace {

using fabric::RemoteAddress;
using radix::Padded;
using radix::RadixTestPeer;
using radix::TreeShape;
using runtime::ContextImpl;
using testing::Faults;
using testing::Injection;
using testing::NewClient;
using testing::OpenCluster;
using testing::RunWithInjection;
using testing::TwoCoroutineClient;
using testing::Watchdog;

const uint32_t kRear = radix::LeafShape(8).rear_offset();

std::string K(const char* key) {
  return Padded(key, 8);
}

std::unique_ptr<Radix> OpenTree(Client* client, const std::string& name, RadixOptions options) {
  std::unique_ptr<Radix> tree;
  const Status status = Radix::Open(client, name, options, &tree);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return tree;
}

std::unique_ptr<Context> Blocking(Client& client) {
  std::unique_ptr<Context> ctx;
  EXPECT_TRUE(client.NewBlockingContext(&ctx).ok());
  return ctx;
}

void ExpectWalkClean(Radix& tree, Context& ctx) {
  const TreeShape shape = RadixTestPeer::Walk(tree, ctx);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
}

uint64_t HeaderWord(Context& ctx, RemoteAddress node) {
  return RadixTestPeer::ReadWord(ctx, node + radix::kHeaderOffset);
}

// The slot of internal node `node` that leads to `child` (null when none).
RemoteAddress SlotLeadingTo(Context& ctx, RemoteAddress node, RemoteAddress child) {
  for (uint32_t i = 0; i < radix::kMaxSlots; ++i) {
    const RemoteAddress at = node + radix::kSlotsOffset + 8 * i;
    const radix::Slot slot(RadixTestPeer::ReadWord(ctx, at));
    if (slot.live() && slot.child() == child) return at;
  }
  return RemoteAddress();
}

// Turns the slot of `node` leading to `child` into a tombstone, as a
// delete of `child` does.
void TombstoneSlotOf(Context& ctx, RemoteAddress node, RemoteAddress child) {
  const RemoteAddress at = SlotLeadingTo(ctx, node, child);
  ASSERT_FALSE(at.is_null());
  const radix::Slot slot(RadixTestPeer::ReadWord(ctx, at));
  RadixTestPeer::WriteWord(ctx, at, radix::Slot::Tombstone(slot.partial()).word());
}

// Root R (branch byte 0): 'A' -> S (branch 1), 'B' -> leaf.
// S: 'a' -> C (branch 2), 'b' -> leaf "Ab". C: 'x' -> "Aax", 'y' -> "Aay".
const char* const kKeys[] = {"Aax", "Aay", "Ab", "B"};

// Two compute nodes on one memory node: A runs the operation under test
// with two coroutines, B the change it races through a blocking context.
struct Pair {
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 1);
  std::unique_ptr<Client> client_a = TwoCoroutineClient(*cluster);
  std::unique_ptr<Client> client_b = NewClient(*cluster);
  std::unique_ptr<Radix> tree_a, tree_b;
  std::unique_ptr<Context> ctx_b = Blocking(*client_b);

  Pair(const std::string& name, RadixOptions options, RadixOptions options_b) {
    tree_a = OpenTree(client_a.get(), name, options);
    tree_b = OpenTree(client_b.get(), name, options_b);
    // client_a's redo-record slots made: the batches an update posts (and
    // the tests fail) are the update's own.
    testing::PrepareRedoSlots(*client_a);
  }
  Pair(const std::string& name, RadixOptions options) : Pair(name, options, options) {}
  void Fill() {
    for (const char* key : kKeys)
      ASSERT_TRUE(tree_b->Insert(*ctx_b, K(key), 1).ok());
  }
  // tree_a's Update(key, value), the next `batches` batches to `leaf`'s
  // memory node failing from the moment `when` holds of the update's ops.
  template <typename When>
  Status UpdateFailing(const std::string& key, uint64_t value, RemoteAddress leaf, uint32_t batches,
                       When when, Injection* injection) {
    return RunWithInjection(
        *client_a, [&](ContextImpl& c) { return tree_a->Update(c, key, value); }, when,
        [&] { ASSERT_TRUE(Faults(*cluster).FailNextBatches(leaf.node(), batches).ok()); },
        injection);
  }
  // On client_a's two coroutines: coroutine 0 looks `warm` up (this
  // compute node then caches the nodes above it) and runs `first`;
  // coroutine 1, once coroutine 0 has posted a CAS (it holds a leaf's
  // turn), runs `second`. Returns when both are done.
  template <typename First, typename Second>
  Status RunBehind(const std::string& warm, First first, Second second) {
    bool started = false, done = false;
    return client_a->Run([&](Context& context) -> Status {
      auto& ctx = ContextImpl::From(context);
      if (ctx.coroutine_index() == 0) {
        uint64_t value = 0;
        DMIDX_RETURN_IF_ERROR(tree_a->Lookup(ctx, warm, &value));
        started = true;
        first(ctx);
        done = true;
        return Status::Ok();
      }
      const Stats before = ctx.stats();
      while (!started || (ctx.stats() - before).compare_swaps < 1)
        ctx.Yield();
      DMIDX_RETURN_IF_ERROR(second(ctx));
      while (!done)
        ctx.Yield();
      return Status::Ok();
    });
  }
};

// After the rear CAS that locks the leaf (posted with the leaf's READ).
bool AfterLeafLock(const Stats& so_far) {
  return so_far.compare_swaps >= 1;
}

RadixOptions NoCache() {
  RadixOptions options;
  options.cache_bytes = 0;
  return options;
}

// ---------------------------------------------------------------------------
// An upsert whose descent landed on a deleted leaf (its delete's mark landed,
// its tombstone CAS not yet) took the leaf's live slot with no protection
// against a merge of the node: a merge freezes only tombstones and the
// first empty slot, and moves the (deleted) live child up. The slot CAS then
// landed in the removed node and the insert, which returned Ok, was lost.
TEST(RadixRegressionTest, UpsertOfAKeyWhoseDeleteIsHalfDoneIsNotLostToAMerge) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("lost", NoCache());
  ASSERT_NO_FATAL_FAILURE(pair.Fill());
  Context& ctx_b = *pair.ctx_b;
  const std::string k = K("Aax"), m = K("Aay");
  const RemoteAddress node_c = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, k, 2);
  const RemoteAddress leaf_k = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, k);
  ASSERT_FALSE(node_c.is_null());
  ASSERT_FALSE(leaf_k.is_null());
  // A delete of k of a third compute node: its mark landed, its tombstone
  // CAS has not (in flight, or that node died).
  RadixTestPeer::WriteWord(ctx_b, leaf_k + kRear, radix::kDeletedLeaf);
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, k, &value).IsNotFound());

  // Insert(k) READs the root slot, R, S and C; while C's READ is posted, B
  // deletes m, which leaves C one live slot (k's deleted leaf) and merges
  // C away: the leaf moves up into S.
  Injection injection;
  const Status insert = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Insert(c, k, 77); },
      [](const Stats& so_far) { return so_far.reads >= 4; },
      [&] { ASSERT_TRUE(pair.tree_b->Delete(ctx_b, m).ok()); }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 4u) << "fired while C's READ was posted";
  ASSERT_TRUE(insert.ok()) << insert.ToString();
  EXPECT_TRUE(radix::Header::Unpack(HeaderWord(ctx_b, node_c)).deleted()) << "C was merged away";
  const Status found = pair.tree_b->Lookup(ctx_b, k, &value);
  EXPECT_TRUE(found.ok()) << "lost insert: " << found.ToString();
  EXPECT_EQ(value, 77u);
  const TreeShape shape = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_NE(std::find(shape.keys.begin(), shape.keys.end(), k), shape.keys.end());
}

// The same race with no injection point: every fault of the local fabric
// (delays, torn READs and WRITEs, reordering), two memory nodes, the upsert
// started a random time after the merging delete, many rounds. Each round's
// half-done delete is observed (NotFound) before the upsert starts, so an
// upsert that returned Ok must be found.
TEST(RadixRegressionTest, UpsertsOfKeysWhoseDeletesAreHalfDoneAreNeverLostToMerges) {
  Watchdog watchdog(std::chrono::seconds(600));
  const uint64_t seeds = testing::kAnySanitizer ? 2 : 6;
  constexpr int kRounds = 50;
  uint64_t lost = 0, merged = 0, rounds = 0;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    auto cluster = OpenCluster(true, 2, testing::TestSeed(seed));
    auto client_a = NewClient(*cluster);
    auto client_b = NewClient(*cluster);
    auto tree_a = OpenTree(client_a.get(), "stress", RadixOptions());
    auto tree_b = OpenTree(client_b.get(), "stress", RadixOptions());
    auto ctx_b = Blocking(*client_b);
    auto key = [](int round, const char* tail) {
      std::string k = "R";
      k.push_back(static_cast<char>('A' + round / 26));
      k.push_back(static_cast<char>('a' + round % 26));
      return K((k + tail).c_str());
    };
    for (int round = 0; round < kRounds; ++round) {
      for (const char* tail : {"ax", "ay", "b"})
        ASSERT_TRUE(tree_b->Insert(*ctx_b, key(round, tail), 1).ok());
    }
    std::mt19937_64 rng(seed);
    Client* const clients[] = {client_a.get(), client_b.get()};
    for (int round = 0; round < kRounds; ++round) {
      const std::string k = key(round, "ax"), m = key(round, "ay");
      const RemoteAddress node_c = RadixTestPeer::NodeOnPath(*tree_b, *ctx_b, k, 4);
      const RemoteAddress leaf_k = RadixTestPeer::LeafOf(*tree_b, *ctx_b, k);
      ASSERT_FALSE(node_c.is_null());
      ASSERT_FALSE(leaf_k.is_null());
      RadixTestPeer::WriteWord(*ctx_b, leaf_k + kRear, radix::kDeletedLeaf);
      uint64_t value = 0;
      ASSERT_TRUE(tree_b->Lookup(*ctx_b, k, &value).IsNotFound());
      const auto start_after = std::chrono::microseconds(rng() % 120);
      const std::vector<Status> results =
          testing::RunClients(clients, [&](int client, Context& c) -> Status {
            if (client == 1) return tree_b->Delete(c, m);
            std::this_thread::sleep_for(start_after);
            return tree_a->Insert(c, k, 77);
          });
      for (const Status& status : results)
        ASSERT_TRUE(status.ok()) << status.ToString();
      ++rounds;
      if (radix::Header::Unpack(HeaderWord(*ctx_b, node_c)).deleted()) ++merged;
      if (!tree_b->Lookup(*ctx_b, k, &value).ok() || value != 77) ++lost;
    }
    ExpectWalkClean(*tree_b, *ctx_b);
  }
  EXPECT_EQ(lost, 0u) << "upserts that returned Ok and were lost, of " << rounds << " rounds";
  EXPECT_GT(merged, 0u) << "no round merged the node: the race was not run";
}

// ---------------------------------------------------------------------------
// A scan that found a node deleted re-read "the slot that led to it"; when
// that slot's own node had been merged away after the scan read it, the
// slot never changed again and the scan gave up (Aborted) on a quiescent
// tree that held a key in range all along.
TEST(RadixRegressionTest, ScanFindsAKeyWhoseParentWasMergedAwayUnderIt) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("scan", NoCache());
  ASSERT_NO_FATAL_FAILURE(pair.Fill());
  Context& ctx_b = *pair.ctx_b;
  // The scan of ["A", "Az"] READs the root slot, R, then S; while S's READ
  // is posted, B deletes "Ab" (S merges away: C moves up into R) and "Aay"
  // (C merges away: "Aax" moves up).
  std::vector<KeyValue> out;
  Injection injection;
  const Status scan = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Scan(c, K("A"), K("Az"), &out); },
      [](const Stats& so_far) { return so_far.reads >= 3; },
      [&] {
        ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("Ab")).ok());
        ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("Aay")).ok());
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 3u) << "fired while S's READ was posted";
  ASSERT_TRUE(scan.ok()) << scan.ToString();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, K("Aax"));
  // The count form over the same change, from a fresh tree.
  Pair again("scan-count", NoCache());
  ASSERT_NO_FATAL_FAILURE(again.Fill());
  Injection second;
  const Status counted = RunWithInjection(
      *again.client_a, [&](ContextImpl& c) { return again.tree_a->Scan(c, K("A"), 10, &out); },
      [](const Stats& so_far) { return so_far.reads >= 3; },
      [&] {
        ASSERT_TRUE(again.tree_b->Delete(*again.ctx_b, K("Ab")).ok());
        ASSERT_TRUE(again.tree_b->Delete(*again.ctx_b, K("Aay")).ok());
      },
      &second);
  ASSERT_TRUE(second.fired);
  ASSERT_TRUE(counted.ok()) << counted.ToString();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, K("Aax"));
  EXPECT_EQ(out[1].key, K("B"));
}

// ---------------------------------------------------------------------------
// Batches that fail once in the middle of a write. Each failure is
// injected right after the named batch was posted, so the next batch the
// operation posts fails (and only that one).

// An in-place update whose write-back + release batch failed left the
// leaf's rear word held by its compute node: every later update or delete
// of the key ended in DeadlineExceeded. The write-back is finished instead,
// or, when it never lands, the word released.
TEST(RadixRegressionTest, UpdateWhoseWriteBackBatchFailsLeavesTheKeyFree) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options;
  options.lock_timeout = std::chrono::milliseconds(300);
  Pair pair("locked", options);
  Context& ctx_b = *pair.ctx_b;
  const std::string key = K("K");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, key, 1).ok());
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, key);
  ASSERT_FALSE(leaf.is_null());
  // Update: root slot READ, [rear CAS + leaf READ], [write-back + release].
  Injection injection;
  const Status update = pair.UpdateFailing(key, 2, leaf, 1, AfterLeafLock, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 1u);
  EXPECT_EQ(Faults(*pair.cluster).counters().failed_batches, 1u);
  // The rear word was still held, so the write-back and release went again
  // (lock::PostAgainHeld, counted as HOCL's are).
  EXPECT_TRUE(update.ok()) << update.ToString();
  EXPECT_EQ(pair.tree_a->stats()[IndexOp::kUpdate].reposted_batches, 1u);
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), 0u) << "the rear word was left held";
  // READs of the word that fail are tried again without spending a post
  // again: the first post and kBatchRetries READs fail, the next READ sees
  // the word held, and the post again lands.
  Injection reads_fail;
  const Status later =
      pair.UpdateFailing(key, 3, leaf, 1 + radix::kBatchRetries, AfterLeafLock, &reads_fail);
  ASSERT_TRUE(reads_fail.fired);
  EXPECT_TRUE(later.ok()) << later.ToString();
  EXPECT_EQ(pair.tree_a->stats()[IndexOp::kUpdate].reposted_batches, 2u);
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), 0u) << "the rear word was left held";
  // A batch that never lands: the first post and 1 + kBatchRetries READs
  // fail. The update fails, and the rear word is released all the same by
  // CAS from the compute node's locked word (lock::ReleaseHold, as HOCL's),
  // so no live node keeps the key.
  Injection never;
  const uint64_t failed_before = Faults(*pair.cluster).counters().failed_batches;
  const Status failed =
      pair.UpdateFailing(key, 4, leaf, 2 + radix::kBatchRetries, AfterLeafLock, &never);
  ASSERT_TRUE(never.fired);
  EXPECT_TRUE(failed.IsUnavailable()) << failed.ToString();
  EXPECT_EQ(Faults(*pair.cluster).counters().failed_batches - failed_before,
            2u + radix::kBatchRetries);
  EXPECT_EQ(pair.tree_a->stats()[IndexOp::kUpdate].reposted_batches, 2u);
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), 0u) << "the rear word was left held";
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, key, &value).ok());
  EXPECT_EQ(value, 3u) << "the failed update's write-back never landed";
  EXPECT_TRUE(pair.tree_b->Update(ctx_b, key, 5).ok());
  EXPECT_TRUE(pair.tree_b->Delete(ctx_b, key).ok());
}

// The same on the kept path: a local waiter queues for the leaf, so the
// holder keeps the rear word for it and posts its write-back alone; that
// batch fails. The word is not handed over (nothing says the write-back
// landed): the holder posts write-back and release again (its turn still
// held, lock::PostAgainHeld), and the waiter takes the word by CAS.
TEST(RadixRegressionTest, KeptWordWhoseWriteBackFailsIsNotHandedOver) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options;
  options.write_combining = false;  // else the second update rides the first's WRITE
  options.lock_timeout = std::chrono::milliseconds(300);
  Pair pair("kept-fails", options);
  Context& ctx_b = *pair.ctx_b;
  const std::string x = K("Ax");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, x, 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("B"), 1).ok());
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, x);
  ASSERT_FALSE(leaf.is_null());
  // The first update's next batch after its lock batch, the write-back,
  // fails; the second queues for the leaf meanwhile.
  Status first, second;
  const Status run = pair.RunBehind(
      x, [&](ContextImpl& ctx) { first = pair.tree_a->Update(ctx, x, 2); },
      [&](ContextImpl& ctx) -> Status {
        DMIDX_RETURN_IF_ERROR(Faults(*pair.cluster).FailNextBatches(leaf.node(), 1));
        second = pair.tree_a->Update(ctx, x, 3);
        return Status::Ok();
      });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_TRUE(first.ok()) << first.ToString();
  EXPECT_TRUE(second.ok()) << second.ToString();
  EXPECT_EQ(Faults(*pair.cluster).counters().failed_batches, 1u) << "the scenario did not run";
  EXPECT_EQ(pair.tree_a->stats()[IndexOp::kUpdate].reposted_batches, 1u);
  EXPECT_GT(pair.tree_a->stats()[IndexOp::kUpdate].local_lock_wait_ns, 0u)
      << "the second update did not queue behind the first";
  EXPECT_EQ(pair.tree_a->stats()[IndexOp::kUpdate].handovers, 0u)
      << "a word whose write-back failed was handed over";
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), 0u) << "the rear word was left held";
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, x, &value).ok());
  EXPECT_EQ(value, 3u);
}

// An in-place update whose lock batch (rear CAS + leaf READ) fails: the
// update fails, and the word is left as it was found.
TEST(RadixRegressionTest, UpdateWhoseLockBatchFailsLeavesTheKeyFree) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options;
  options.lock_timeout = std::chrono::milliseconds(300);
  Pair pair("lock-batch", options);
  Context& ctx_b = *pair.ctx_b;
  const std::string key = K("K");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, key, 1).ok());
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, key);
  Injection injection;
  const Status update = pair.UpdateFailing(
      key, 2, leaf, 1, [](const Stats& so_far) { return so_far.reads >= 1; }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 0u);
  EXPECT_TRUE(update.IsUnavailable()) << update.ToString();
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), 0u);
  EXPECT_TRUE(pair.tree_b->Update(ctx_b, key, 3).ok());
}

// A delete whose mark batch failed left the leaf locked (and not deleted)
// for good. The batch is posted again; the delete takes effect.
TEST(RadixRegressionTest, DeleteWhoseMarkBatchFailsLeavesNoLockBehind) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options;
  options.lock_timeout = std::chrono::milliseconds(300);
  Pair pair("mark", options);
  Context& ctx_b = *pair.ctx_b;
  const std::string key = K("K");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, key, 1).ok());
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, key);
  Injection injection;
  const Status erase = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Delete(c, key); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 1; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatches(leaf.node(), 1).ok()); }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 1u);
  EXPECT_EQ(Faults(*pair.cluster).counters().failed_batches, 1u);
  EXPECT_TRUE(erase.ok()) << erase.ToString();
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), radix::kDeletedLeaf);
  uint64_t value = 0;
  EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, key, &value).IsNotFound());
  EXPECT_TRUE(pair.tree_b->Insert(ctx_b, key, 5).ok());
  EXPECT_TRUE(pair.tree_b->Delete(ctx_b, key).ok());
}

// A leaf split whose slot CAS failed returned without giving the old leaf's
// reverse pointer back: the leaf named a node never published, and every
// later split of it restarted until the insert gave up.
TEST(RadixRegressionTest, LeafSplitWhoseSlotCasFailsGivesTheLeafBack) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("strand", NoCache());
  Context& ctx_b = *pair.ctx_b;
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("Aa"), 1).ok());  // the root slot's leaf
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, K("Aa"));
  const uint64_t reverse = RadixTestPeer::ReadWord(ctx_b, leaf + radix::kLeafReverseOffset);
  // Insert("Ab"): root slot READ, [rear CAS + READ] (1 CAS), the release (a
  // CAS), [chain node + leaf + reverse CAS] (3), then the root slot's CAS.
  Injection injection;
  const Status insert = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Insert(c, K("Ab"), 2); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 3; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatches(0, 1).ok()); }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 3u);
  EXPECT_TRUE(insert.IsUnavailable()) << insert.ToString();
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + radix::kLeafReverseOffset), reverse)
      << "the leaf's reverse pointer names a node that was never published";
  ExpectWalkClean(*pair.tree_b, ctx_b);
  EXPECT_TRUE(pair.tree_b->Insert(ctx_b, K("Ab"), 2).ok());
  uint64_t value = 0;
  EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, K("Aa"), &value).ok());
  ExpectWalkClean(*pair.tree_b, ctx_b);
}

// The same for a header split: its node's reverse pointer is given back.
TEST(RadixRegressionTest, HeaderSplitWhoseSlotCasFailsGivesTheNodeBack) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("header", NoCache());
  Context& ctx_b = *pair.ctx_b;
  // Under the root slot: X, header "PATH" (depth 0), branching on byte 4.
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PATHAa"), 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PATHBa"), 2).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("PATHAa"), 4);
  ASSERT_FALSE(x.is_null());
  const uint64_t reverse = RadixTestPeer::ReadWord(ctx_b, x + radix::kReverseOffset);
  // Insert("PAXy"): root slot READ, X READ, [split node + leaf + X's
  // reverse CAS], then the root slot's CAS: that batch fails.
  Injection injection;
  const Status insert = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Insert(c, K("PAXy"), 3); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 1; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatches(0, 1).ok()); }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 1u);
  EXPECT_TRUE(insert.IsUnavailable()) << insert.ToString();
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, x + radix::kReverseOffset), reverse);
  ExpectWalkClean(*pair.tree_b, ctx_b);
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PAXy"), 3).ok());
  const TreeShape shape = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.keys.size(), 3u);
  EXPECT_EQ(shape.untrimmed_headers, 0u);
}

// An out-of-place update whose slot CAS failed left the old leaf claimed and
// marked replaced while its slot still led to it: the key could no longer be
// read, updated or deleted.
TEST(RadixRegressionTest, OutOfPlaceUpdateWhoseSlotCasFailsLeavesTheKeyReadable) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("replaced", RadixOptions::Baseline());
  Context& ctx_b = *pair.ctx_b;
  const std::string key = K("K");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, key, 1).ok());
  // Update: root slot READ, leaf READ, [new leaf + claim CAS + replace
  // CAS] (2 CASes), then the slot's CAS: that batch fails.
  Injection injection;
  const Status update = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Update(c, key, 2); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 2; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatches(0, 1).ok()); }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 2u);
  EXPECT_TRUE(update.IsUnavailable()) << update.ToString();
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, key, &value).ok());
  EXPECT_EQ(value, 1u);
  ExpectWalkClean(*pair.tree_b, ctx_b);
  EXPECT_TRUE(pair.tree_b->Update(ctx_b, key, 3).ok());
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, key, &value).ok());
  EXPECT_EQ(value, 3u);
}

// The same with the claim batch itself failing: what landed of it (the
// claim, the replaced mark) is this context's own, and is given back.
TEST(RadixRegressionTest, OutOfPlaceUpdateWhoseClaimBatchFailsLeavesTheKeyReadable) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("claim-batch", RadixOptions::Baseline());
  Context& ctx_b = *pair.ctx_b;
  const std::string key = K("K");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, key, 1).ok());
  Injection injection;
  const Status update = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Update(c, key, 2); },
      [](const Stats& so_far) { return so_far.reads >= 2; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatches(0, 1).ok()); }, &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_TRUE(update.IsUnavailable()) << update.ToString();
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, key, &value).ok());
  EXPECT_EQ(value, 1u);
  ExpectWalkClean(*pair.tree_b, ctx_b);
  EXPECT_TRUE(pair.tree_b->Update(ctx_b, key, 3).ok());
}

// A merge whose freeze batch fails gives the node back whole: not frozen,
// not claimed, every key reachable, and later inserts land in it.
TEST(RadixRegressionTest, MergeWhoseFreezeBatchFailsGivesTheNodeBack) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("freeze", NoCache());
  ASSERT_NO_FATAL_FAILURE(pair.Fill());
  Context& ctx_b = *pair.ctx_b;
  const RemoteAddress node_c = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("Aax"), 2);
  const uint64_t header = HeaderWord(ctx_b, node_c);
  // Delete("Aay"): descent (4 READs), [lock CAS + READ], [mark + tombstone
  // CAS + C's READ], the merge's descent, then its claim CAS (3 CASes) and
  // its freeze batch: that fails.
  Injection injection;
  const Status erase = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Delete(c, K("Aay")); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 3; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatches(node_c.node(), 1).ok()); },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 3u);
  EXPECT_TRUE(erase.ok()) << erase.ToString();  // the delete took effect; the merge did not
  EXPECT_EQ(HeaderWord(ctx_b, node_c), header) << "C left frozen";
  const TreeShape shape = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  EXPECT_EQ(shape.single_child_nodes, 1u);  // C, merged by the next delete that passes
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("Aaz"), 4).ok());
  uint64_t value = 0;
  for (const char* key : {"Aax", "Aaz", "Ab", "B"})
    EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, K(key), &value).ok()) << key;
  ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("Aaz")).ok());
  const TreeShape merged = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  EXPECT_TRUE(merged.errors.empty());
  EXPECT_EQ(merged.single_child_nodes, 0u);
}

// ---------------------------------------------------------------------------
// A header split's third round trip (the trim) could be lost for good: a
// merge's freeze made the header read deleted for a moment, the trim gave
// up, and the node stayed under its new parent with a header longer than
// its depth, which no merge would take back. Staged here as a splitter
// that died before its trim: the next descent through the new parent trims
// it, and the parent then merges as it should.
TEST(RadixRegressionTest, AHeaderLeftUntrimmedIsTrimmedByTheNextDescent) {
  Watchdog watchdog(std::chrono::seconds(120));
  auto cluster = OpenCluster(false, 1);
  auto client = NewClient(*cluster);
  auto tree = OpenTree(client.get(), "trim", NoCache());
  auto ctx = Blocking(*client);
  // Root slot -> S ("PA", branching on byte 2): 'T' -> X ("H" at depth 3,
  // branching on byte 4: 'A', 'B'), 'a' -> leaf "PAaX".
  const std::string a = K("PATHAa"), b = K("PATHBa"), p = K("PAaX");
  for (const std::string& key : {a, b, p})
    ASSERT_TRUE(tree->Insert(*ctx, key, 1).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*tree, *ctx, a, 4);
  ASSERT_FALSE(x.is_null());
  radix::Header header = radix::Header::Unpack(HeaderWord(*ctx, x));
  ASSERT_EQ(header.depth, 3);
  ASSERT_EQ(header.count, 1);
  const radix::Header trimmed = header;
  header.depth = 0;
  header.count = 4;
  header.partial = {'P', 'A', 'T', 'H', 0, 0};
  RadixTestPeer::WriteWord(*ctx, x + radix::kHeaderOffset, header.Pack());
  // The walk skips the bytes the path matched, as readers do.
  TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.untrimmed_headers, 1u);
  uint64_t value = 0;
  ASSERT_TRUE(tree->Lookup(*ctx, a, &value).ok());
  EXPECT_EQ(radix::Header::Unpack(HeaderWord(*ctx, x)), trimmed) << "the lookup did not trim X";
  // S merges X back once "PAaX" goes (a header merge needs X trimmed).
  ASSERT_TRUE(tree->Delete(*ctx, p).ok());
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.untrimmed_headers, 0u);
  EXPECT_EQ(shape.single_child_nodes, 0u);
  EXPECT_EQ(shape.nodes, 1u);
  for (const std::string& key : {a, b})
    EXPECT_TRUE(tree->Lookup(*ctx, key, &value).ok());
}

// A merge never takes a node whose header is still untrimmed: in a header
// merge its child would inherit the untrimmed depth (and with it the
// resting state above, one level down). Staged: X untrimmed under S, with
// one leaf and one internal child Y; deleting the leaf leaves X one child.
// X is trimmed on the way and then merged; no header ends up untrimmed.
TEST(RadixRegressionTest, AMergeWaitsForItsNodesTrim) {
  Watchdog watchdog(std::chrono::seconds(120));
  auto cluster = OpenCluster(false, 1);
  auto client = NewClient(*cluster);
  auto tree = OpenTree(client.get(), "untrimmed", NoCache());
  auto ctx = Blocking(*client);
  // S ("PA"): 'T' -> X ("H", depth 3): 'A' -> Y (branching on byte 5:
  // "PATHAa", "PATHAb"), 'B' -> leaf "PATHBa"; 'a' -> leaf "PAaX".
  const std::vector<std::string> keys = {K("PATHAa"), K("PATHAb"), K("PATHBa"), K("PAaX")};
  for (const std::string& key : keys)
    ASSERT_TRUE(tree->Insert(*ctx, key, 1).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*tree, *ctx, keys[0], 4);
  ASSERT_FALSE(x.is_null());
  radix::Header header = radix::Header::Unpack(HeaderWord(*ctx, x));
  ASSERT_EQ(header.depth, 3);
  header.depth = 0;
  header.count = 4;
  header.partial = {'P', 'A', 'T', 'H', 0, 0};
  RadixTestPeer::WriteWord(*ctx, x + radix::kHeaderOffset, header.Pack());
  ASSERT_TRUE(tree->Delete(*ctx, keys[2]).ok());
  const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  EXPECT_EQ(shape.untrimmed_headers, 0u) << "a header merge copied an untrimmed depth";
  EXPECT_EQ(shape.single_child_nodes, 0u);
  uint64_t value = 0;
  for (const std::string& key : {keys[0], keys[1], keys[3]})
    EXPECT_TRUE(tree->Lookup(*ctx, key, &value).ok());
}

// ---------------------------------------------------------------------------
// Found by review of the fixes above.

// A scan that reached a leaf through a node merged away since, and found
// the leaf replaced (an out-of-place update through the leaf's new parent),
// re-read the dead node's slot for good: Aborted, with the key present
// throughout.
TEST(RadixRegressionTest, ScanFindsAKeyReplacedAfterItsNodeWasMergedAway) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("scan-replaced", RadixOptions::Baseline());
  ASSERT_NO_FATAL_FAILURE(pair.Fill());
  Context& ctx_b = *pair.ctx_b;
  std::vector<KeyValue> out;
  Injection injection;
  const Status scan = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Scan(c, K("A"), K("Az"), &out); },
      [](const Stats& so_far) { return so_far.reads >= 4; },
      [&] {
        ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("Aay")).ok());     // C merges: "Aax" moves up
        ASSERT_TRUE(pair.tree_b->Update(ctx_b, K("Aax"), 9).ok());  // out of place, through S
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 5u) << "fired while the leaves' READs were posted";
  ASSERT_TRUE(scan.ok()) << scan.ToString();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, K("Aax"));
  // The scan read the slot that led to the old leaf before the update:
  // the old value (its value then) or the new one.
  EXPECT_TRUE(out[0].value == 9u || out[0].value == 1u) << out[0].value;
  EXPECT_EQ(out[1].key, K("Ab"));
}

// An insert that claimed a deleted leaf and then lost its slot CAS kept the
// claim. Its slot can be a stale one of the parent the leaf's reverse
// pointer names only for a moment (the leaf was split down after the
// descent read the parent, and a merge of the split node is moving it back
// up): once that merge publishes the leaf, the stale claim keeps every
// later insert of the key out of the slot (its deleter having died).
TEST(RadixRegressionTest, AnInsertWhoseSlotCasLosesGivesItsClaimBack) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("stale-claim", NoCache());
  Context& ctx_b = *pair.ctx_b;
  const std::string k = K("Ax"), k2 = K("Ay");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, k, 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("B"), 1).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, k, 0);
  const RemoteAddress d = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, k);
  ASSERT_FALSE(r.is_null());
  ASSERT_FALSE(d.is_null());
  const RemoteAddress slot_of_d = SlotLeadingTo(ctx_b, r, d);
  ASSERT_FALSE(slot_of_d.is_null());
  const uint64_t d_word = RadixTestPeer::ReadWord(ctx_b, slot_of_d);
  std::vector<testing::Moment> moments = {
      {[](const Stats& so_far) { return so_far.reads >= 2; },  // R's READ posted
       [&] {
         // k2 splits D down under a new node C.
         ASSERT_TRUE(pair.tree_b->Insert(ctx_b, k2, 2).ok());
         const RemoteAddress c = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, k, 1);
         ASSERT_FALSE(c.is_null());
         // k's delete marked D and died before its tombstone.
         RadixTestPeer::WriteWord(ctx_b, d + kRear, radix::kDeletedLeaf);
         // k2's delete marked and tombstoned its leaf, and its merge of C
         // stands between its child-reverse CAS and its parent-slot CAS:
         // C claimed and frozen, D's reverse pointer naming R.
         const RemoteAddress e = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, k2);
         RadixTestPeer::WriteWord(ctx_b, e + kRear, radix::kDeletedLeaf);
         TombstoneSlotOf(ctx_b, c, e);
         RadixTestPeer::WriteWord(ctx_b, c + radix::kReverseOffset, radix::ClaimBy(7, 4242));
         radix::Header header = radix::Header::Unpack(HeaderWord(ctx_b, c));
         header.type = radix::kDeletedType;
         RadixTestPeer::WriteWord(ctx_b, c + radix::kHeaderOffset, header.Pack());
         RadixTestPeer::WriteWord(ctx_b, d + radix::kLeafReverseOffset, r.raw());
       },
       {}},
      // The insert's claim won and its slot CAS lost; it looks again. The
      // merge's parent-slot CAS lands: R's slot leads to D again.
      {[](const Stats& so_far) { return so_far.compare_swaps >= 3 && so_far.reads >= 4; },
       [&] { RadixTestPeer::WriteWord(ctx_b, slot_of_d, d_word); },
       {}}};
  const Status insert = testing::RunWithInjections(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Insert(c, k, 77); }, &moments);
  ASSERT_TRUE(moments[1].seen.fired);
  // The lock CAS, the claim, the lost slot CAS and the claim given back.
  EXPECT_EQ(moments[1].seen.at.compare_swaps, 4u);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, k, &value).ok());
  EXPECT_EQ(value, 77u);
  EXPECT_TRUE(pair.tree_b->Insert(ctx_b, k, 78).ok());
}

// A header split's own trim, paused after its round trip 2 while a reader
// trimmed the node on its behalf, the new key was deleted and the split
// node merged back (giving the node the very header word the splitter
// expects), then landed on the merged node: every key under it cut off.
// The trim holds the node's reverse pointer now, and finds it moved.
TEST(RadixRegressionTest, ALateTrimNeverLandsOnAHeaderAMergeGaveBack) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("trim-aba", NoCache());
  Context& ctx_b = *pair.ctx_b;
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PATHAa"), 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PATHBa"), 2).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("PATHAa"), 4);
  ASSERT_FALSE(x.is_null());
  const uint64_t untrimmed = HeaderWord(ctx_b, x);
  uint64_t after_help = 0, after_merge = 0;
  Injection injection;
  const Status insert = RunWithInjection(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Insert(c, K("PAXy"), 3); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 2; },  // round trip 2 posted
      [&] {
        // Round trip 2 lands (the new node is published) while the
        // splitter's coroutine waits its turn.
        int spins = 0;
        while (RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("PATHAa"), 2).is_null() &&
               ++spins < 100000) {
        }
        ASSERT_LT(spins, 100000) << "round trip 2 never landed";
        uint64_t value = 0;
        ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, K("PATHAa"), &value).ok());  // trims X
        after_help = HeaderWord(ctx_b, x);
        ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("PAXy")).ok());  // S merges back into X
        after_merge = HeaderWord(ctx_b, x);
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  EXPECT_NE(after_help, untrimmed) << "the lookup did not trim X";
  EXPECT_EQ(after_merge, untrimmed) << "the merge did not give X its old header word";
  EXPECT_EQ(HeaderWord(ctx_b, x), untrimmed) << "the late trim landed on the merged X";
  ExpectWalkClean(*pair.tree_b, ctx_b);
  uint64_t value = 0;
  for (const char* key : {"PATHAa", "PATHBa"})
    EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, K(key), &value).ok()) << key;
}

// An insert into a full node CASes the slot behind the node's type, then
// raises the type. When that CAS's batch failed although the CAS landed
// (the completion lost after the memory node ran it), the insert returned
// before raising the type: readers, who read a node by its type, missed the
// key, and it appeared later, when another insert raised the type, with no
// write of its own. The type is raised on a failed batch too: the key is
// readable at once, and stays so across the next insert into the node.
TEST(RadixRegressionTest, SlotCasBehindTheTypeLandingWithItsBatchFailingLeavesTheKeyReadable) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("behind-type", NoCache());
  Context& ctx_b = *pair.ctx_b;
  // R: 'A' -> C (four children: type 1, full), 'B' -> leaf.
  for (const char* key : {"Aa", "Ab", "Ac", "Ad", "B"})
    ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K(key), 1).ok());
  const RemoteAddress c = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("Aa"), 1);
  ASSERT_FALSE(c.is_null());
  ASSERT_EQ(radix::Header::Unpack(HeaderWord(ctx_b, c)).type, 1);
  // Insert("Ae"): root slot, R and C READs, then [leaf WRITE + CAS of C's
  // slot 4], which lands and then fails.
  Injection injection;
  const Status insert = RunWithInjection(
      *pair.client_a, [&](ContextImpl& ctx) { return pair.tree_a->Insert(ctx, K("Ae"), 5); },
      [](const Stats& so_far) { return so_far.reads >= 3; },
      [&] { ASSERT_TRUE(Faults(*pair.cluster).FailNextBatchesAfterApplying(c.node(), 1).ok()); },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 3u);
  EXPECT_EQ(injection.at.compare_swaps, 0u);
  EXPECT_TRUE(insert.IsUnavailable()) << insert.ToString();
  EXPECT_EQ(Faults(*pair.cluster).counters().applied_then_failed_batches, 1u);
  EXPECT_NE(radix::Slot(RadixTestPeer::ReadWord(ctx_b, c + radix::kSlotsOffset + 8 * 4)).word(), 0u)
      << "the slot CAS did not land: nothing staged";
  EXPECT_EQ(radix::Header::Unpack(HeaderWord(ctx_b, c)).type, 2) << "the type was not raised";
  uint64_t value = 0;
  const Status before = pair.tree_b->Lookup(ctx_b, K("Ae"), &value);
  EXPECT_TRUE(before.ok()) << "the landed key is invisible: " << before.ToString();
  // Another insert into C: the key's visibility must not change.
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("Af"), 6).ok());
  const Status after = pair.tree_b->Lookup(ctx_b, K("Ae"), &value);
  EXPECT_EQ(after.code(), before.code()) << "the key appeared (or went) with no write of it";
  EXPECT_EQ(value, 5u);
  ExpectWalkClean(*pair.tree_b, ctx_b);
}

// A leaf lock handed over without an image (the last local holder kept the
// rear word for the next one with no image of the leaf to give) was read
// as if another held the word: the READ of a damaged leaf never found the
// word quiet, so it was read again kMaxTornReads times and reported
// Aborted, never confirmed as DataLoss. The handed-over word is this
// compute node's own hold and counts as quiet. Coroutine 1 locks the leaf
// as one of A's writers would, waits for coroutine 0's Update to queue
// behind it, and keeps the word for it without an image.
TEST(RadixRegressionTest, AHandoverWithoutAnImageOfADamagedLeafIsDataLoss) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options = NoCache();
  options.in_place_leaves = true;
  Pair pair("handed-damaged", options);
  Context& ctx_b = *pair.ctx_b;
  const std::string key = K("K");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, key, 1).ok());
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, key);
  ASSERT_FALSE(leaf.is_null());
  const RemoteAddress value_word = leaf + radix::kLeafValueOffset;
  RadixTestPeer::WriteWord(ctx_b, value_word, RadixTestPeer::ReadWord(ctx_b, value_word) ^ 0x5a5a);

  Status update = Status::Internal("the update did not run");
  bool held = false, kept = false;
  const Status run = pair.client_a->Run([&](Context& context) -> Status {
    ContextImpl& ctx = ContextImpl::From(context);
    if (ctx.coroutine_index() == 0) {
      while (!held)
        ctx.Yield();
      update = pair.tree_a->Update(ctx, key, 2);
      return Status::Ok();
    }
    lock::LockTurn turn;
    DMIDX_RETURN_IF_ERROR(lock::LockTurn::Take(RadixTestPeer::LeafQueues(*pair.tree_a), ctx,
                                               leaf + kRear, nullptr, ctx.Now(), &turn));
    // The word is free: a WRITE of the hold takes it as the CAS would.
    const uint64_t locked = RadixTestPeer::LockedWord(*pair.tree_a, ctx);
    RadixTestPeer::WriteWord(ctx_b, leaf + kRear, locked);
    turn.Took(locked);
    held = true;
    while (turn.waiters() == 0)
      ctx.Yield();
    kept = turn.KeepForNext(options.max_handovers);
    turn.Leave();  // no image
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(kept) << "the word was not kept for the update";
  EXPECT_TRUE(update.IsDataLoss()) << update.ToString();
  EXPECT_NE(update.message().find("leaf " + leaf.ToString()), std::string_view::npos)
      << update.ToString();
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf + kRear), 0u) << "the rear word was left held";
}

// An update waited behind the holder of another leaf's lock: leaves hashed
// onto shared local queues made a context wait for whatever held another
// leaf of its queue, up to lock_timeout behind a dead holder (review finding
// 4). Now the queue is the leaf's own, whatever the buckets: with one,
// coroutine 0 polls the leaf of "A", which a dead compute node holds, until
// its lock timeout, and coroutine 1 updates "B" meanwhile with no retry and
// one lock CAS, before coroutine 0 gives up.
TEST(RadixRegressionTest, AnUpdateNeverWaitsBehindAnotherLeafsDeadHolder) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options;
  options.leaf_queue_buckets = 1;
  options.lock_timeout = std::chrono::milliseconds(300);
  Pair pair("other-leaf", options);
  Context& ctx_b = *pair.ctx_b;
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("A"), 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("B"), 1).ok());
  const RemoteAddress leaf_a = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, K("A"));
  const RemoteAddress leaf_b = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, K("B"));
  ASSERT_FALSE(leaf_a.is_null());
  ASSERT_FALSE(leaf_b.is_null());
  RadixTestPeer::WriteWord(ctx_b, leaf_a + kRear, radix::LockedBy(7, 0, 1));  // dead
  // Coroutines of one thread: these need no atomics.
  ContextImpl* first = nullptr;
  bool first_gave_up = false, second_before = false;
  Status first_status, second_status;
  std::vector<fabric::Op> second_posts;
  OpCounters second_counters;
  const Status run = pair.client_a->Run([&](Context& context) -> Status {
    ContextImpl& ctx = ContextImpl::From(context);
    if (ctx.coroutine_index() == 0) {
      first = &ctx;
      first_status = pair.tree_a->Update(ctx, K("A"), 2);
      first_gave_up = true;
      return Status::Ok();
    }
    while (first == nullptr || first->counters().lock_retries == 0)
      ctx.Yield();  // until coroutine 0 has the turn at A's leaf and polls
    const OpCounters before = ctx.counters();
    ctx.RecordPostsForTesting(&second_posts);
    second_status = pair.tree_a->Update(ctx, K("B"), 2);
    ctx.RecordPostsForTesting(nullptr);
    second_before = !first_gave_up;
    second_counters = ctx.counters() - before;
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_TRUE(lock::IsLockTimeout(first_status)) << first_status.ToString();
  ASSERT_TRUE(second_status.ok()) << second_status.ToString();
  EXPECT_TRUE(second_before) << "B's update waited for A's dead holder";
  EXPECT_EQ(second_counters.lock_retries, 0u);
  EXPECT_EQ(second_counters.handovers, 0u);
  size_t lock_cas_posts = 0;
  for (const fabric::Op& op : second_posts)
    lock_cas_posts += op.code == fabric::OpCode::kCompareSwap && op.remote == leaf_b + kRear;
  EXPECT_EQ(lock_cas_posts, 1u);
  uint64_t value = 0;
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, K("B"), &value).ok());
  EXPECT_EQ(value, 2u);
  EXPECT_EQ(RadixTestPeer::ReadWord(ctx_b, leaf_b + kRear), 0u);
}

// A merge whose descent found the parent's slot lagging its node's type
// posted the repair of that slot and then CASed the slot expecting the
// lagging word: its own repair made the merge fail, every time.
TEST(RadixRegressionTest, AMergeThroughALaggingSlotTypeExpectsItsOwnRepair) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("lagging", NoCache());
  Context& ctx_b = *pair.ctx_b;
  // R: 'A' -> C (five children: type 2), 'B' -> leaf.
  for (const char* key : {"Aa", "Ab", "Ac", "Ad", "Ae", "B"})
    ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K(key), 1).ok());
  const RemoteAddress c = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("Aa"), 1);
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("Aa"), 0);
  ASSERT_FALSE(c.is_null());
  ASSERT_EQ(radix::Header::Unpack(HeaderWord(ctx_b, c)).type, 2);
  for (const char* key : {"Ab", "Ac", "Ad"})
    ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K(key)).ok());
  // Delete("Ae"): root slot, R and C READs, [lock CAS + leaf READ], [mark +
  // tombstone CAS + C's READ], then the merge's descent. Before it, R's slot
  // for C comes to say type 1, as after a type switch raced a header split.
  Injection injection;
  const Status erase = RunWithInjection(
      *pair.client_a, [&](ContextImpl& ctx) { return pair.tree_a->Delete(ctx, K("Ae")); },
      [](const Stats& so_far) { return so_far.reads >= 5; },
      [&] {
        const RemoteAddress at = SlotLeadingTo(ctx_b, r, c);
        ASSERT_FALSE(at.is_null());
        const radix::Slot slot(RadixTestPeer::ReadWord(ctx_b, at));
        RadixTestPeer::WriteWord(ctx_b, at, slot.WithType(1).word());
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 5u);
  ASSERT_TRUE(erase.ok()) << erase.ToString();
  const TreeShape shape = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.single_child_nodes, 0u) << "C was not merged";
  EXPECT_EQ(shape.lagging_slot_types, 0u);
  uint64_t value = 0;
  EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, K("Aa"), &value).ok());
}

// ---------------------------------------------------------------------------
// Found by a second review.

// A header split's trim gave up when it found its node's reverse pointer
// held by a descent trimming it on the split's behalf; when that descent's
// trim then lost to a type switch, the node stayed untrimmed at rest. The
// splitter now waits out a claim it does not hold.
TEST(RadixRegressionTest, ASplittersTrimWaitsOutAHelpersClaim) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("trim-claim", NoCache());
  Context& ctx_b = *pair.ctx_b;
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PATHAa"), 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("PATHBa"), 2).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("PATHAa"), 4);
  ASSERT_FALSE(x.is_null());
  RemoteAddress s_node;
  std::vector<testing::Moment> moments = {
      // Round trip 2 posted: it lands, and a reader's trim claims X.
      {[](const Stats& so_far) { return so_far.compare_swaps >= 2; },
       [&] {
         int spins = 0;
         while (
             (s_node = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, K("PATHAa"), 2)).is_null() &&
             ++spins < 100000) {
         }
         ASSERT_LT(spins, 100000) << "round trip 2 never landed";
         RadixTestPeer::WriteWord(ctx_b, x + radix::kReverseOffset, radix::ClaimBy(7, 4242));
       },
       {}},
      // The splitter found the claim and reads X again, waiting: the
      // reader's header CAS lost to a type switch of X, and it gives its
      // claim back.
      {[](const Stats& so_far) { return so_far.reads >= 4; },
       [&] {
         radix::Header header = radix::Header::Unpack(HeaderWord(ctx_b, x));
         header.type = static_cast<uint8_t>(header.type + 1);
         RadixTestPeer::WriteWord(ctx_b, x + radix::kHeaderOffset, header.Pack());
         RadixTestPeer::WriteWord(ctx_b, x + radix::kReverseOffset, s_node.raw());
       },
       {}}};
  const Status insert = testing::RunWithInjections(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Insert(c, K("PAXy"), 3); },
      &moments);
  ASSERT_TRUE(moments[1].seen.fired);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  TreeShape shape = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.untrimmed_headers, 0u) << "X left untrimmed at rest";
  ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("PAXy")).ok());
  shape = RadixTestPeer::Walk(*pair.tree_b, ctx_b);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.single_child_nodes, 0u);
}

// A merge whose only child is internal and untrimmed (its split's trim
// never landed) trims it and merges, instead of giving up for good (its
// own descent never reads the child, so never helps it).
TEST(RadixRegressionTest, AMergeTrimsItsUntrimmedChild) {
  Watchdog watchdog(std::chrono::seconds(120));
  auto cluster = OpenCluster(false, 1);
  auto client = NewClient(*cluster);
  auto tree = OpenTree(client.get(), "child-trim", NoCache());
  auto ctx = Blocking(*client);
  const std::string a = K("PATHAa"), b = K("PATHBa"), p = K("PAaX");
  for (const std::string& key : {a, b, p})
    ASSERT_TRUE(tree->Insert(*ctx, key, 1).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*tree, *ctx, a, 4);
  radix::Header header = radix::Header::Unpack(HeaderWord(*ctx, x));
  header.depth = 0;
  header.count = 4;
  header.partial = {'P', 'A', 'T', 'H', 0, 0};
  RadixTestPeer::WriteWord(*ctx, x + radix::kHeaderOffset, header.Pack());
  ASSERT_TRUE(tree->Delete(*ctx, p).ok());  // S keeps X alone: merged
  const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.untrimmed_headers, 0u);
  EXPECT_EQ(shape.single_child_nodes, 0u);
  EXPECT_EQ(shape.nodes, 1u);
  uint64_t value = 0;
  for (const std::string& key : {a, b})
    EXPECT_TRUE(tree->Lookup(*ctx, key, &value).ok());
}

// A merge moving a child up used to set the child's reverse pointer to the
// parent before the parent's slot led to it. A route from a stale cached
// image of the parent whose slot led straight to the child then passed its
// reverse check: an out-of-place update (or a split) through it took the
// child, its slot CAS failed, and one failed batch there left the child
// claimed and replaced, or naming a node never published, once the merge
// published it. Now the child stays claimed by the merge until the slot
// leads to it, so such a route fails its check and looks again.
void StaleRouteDuringAMerge(bool update) {
  Watchdog watchdog(std::chrono::seconds(120));
  RadixOptions options;
  options.in_place_leaves = !update;
  options.write_combining = false;
  options.read_delegation = false;
  Pair pair(update ? "stale-update" : "stale-split", options, NoCache());
  Context& ctx_b = *pair.ctx_b;
  const std::string k = K("Ax"), k2 = K("Ay");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, k, 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("B"), 1).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, k, 0);
  const RemoteAddress c = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, k);
  const RemoteAddress slot_of_c = SlotLeadingTo(ctx_b, r, c);
  ASSERT_FALSE(slot_of_c.is_null());
  const uint64_t c_word = RadixTestPeer::ReadWord(ctx_b, slot_of_c);
  // A caches R, whose slot leads to C.
  Injection none;
  uint64_t value = 0;
  ASSERT_TRUE(RunWithInjection(
                  *pair.client_a,
                  [&](ContextImpl& cx) { return pair.tree_a->Lookup(cx, k, &value); },
                  [](const Stats&) { return false; }, [] {}, &none)
                  .ok());
  // k2 splits C under N; k2's delete and the merge of N stand between the
  // merge's claim of C and its parent-slot CAS.
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, k2, 2).ok());
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*pair.tree_b, ctx_b, k, 1);
  ASSERT_FALSE(n.is_null());
  const RemoteAddress e = RadixTestPeer::LeafOf(*pair.tree_b, ctx_b, k2);
  RadixTestPeer::WriteWord(ctx_b, e + kRear, radix::kDeletedLeaf);
  ASSERT_NO_FATAL_FAILURE(TombstoneSlotOf(ctx_b, n, e));
  const uint64_t merger = radix::ClaimBy(7, 4242);
  RadixTestPeer::WriteWord(ctx_b, n + radix::kReverseOffset, merger);
  radix::Header header = radix::Header::Unpack(HeaderWord(ctx_b, n));
  header.type = radix::kDeletedType;
  RadixTestPeer::WriteWord(ctx_b, n + radix::kHeaderOffset, header.Pack());
  RadixTestPeer::WriteWord(ctx_b, c + radix::kLeafReverseOffset, merger);
  // The write comes through the stale route and finds C claimed; the merge
  // then finishes (its slot CAS, then its claim given to R).
  Injection injection;
  const Status status = RunWithInjection(
      *pair.client_a,
      [&](ContextImpl& cx) {
        return update ? pair.tree_a->Update(cx, k, 9) : pair.tree_a->Insert(cx, K("Az"), 9);
      },
      // Its first remote step (through the stale route) is done: it found C
      // claimed and looks again from the root.
      [](const Stats& so_far) { return so_far.reads >= 2; },
      [&] {
        RadixTestPeer::WriteWord(ctx_b, slot_of_c,
                                 radix::Slot::ToLeaf(radix::Slot(c_word).partial(), c).word());
        RadixTestPeer::WriteWord(ctx_b, c + radix::kLeafReverseOffset, r.raw());
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_TRUE(status.ok()) << status.ToString();
  ExpectWalkClean(*pair.tree_b, ctx_b);
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, update ? k : K("Az"), &value).ok());
  EXPECT_EQ(value, 9u);
  EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, k, &value).ok());
  EXPECT_TRUE(pair.tree_b->Insert(ctx_b, K("Aw"), 5).ok());
}

TEST(RadixRegressionTest, AnUpdateThroughAStaleRouteNeverTakesAChildAMergeIsMoving) {
  StaleRouteDuringAMerge(true);
}

TEST(RadixRegressionTest, ASplitThroughAStaleRouteNeverTakesAChildAMergeIsMoving) {
  StaleRouteDuringAMerge(false);
}

// Found by the merge-heavy schedule exploration (seed 835): a scan looking
// again within a subtree's prefix met, on its way down, a leaf of a
// neighbouring subtree that a merge had moved up into the path and an
// update had then replaced; it took that leaf's key as its new bound and
// returned the key a second time.
TEST(RadixRegressionTest, AScanLookingAgainSkipsAReplacedLeafOutsideItsBound) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("scan-bound", RadixOptions::Baseline());
  Context& ctx_b = *pair.ctx_b;
  // R: 'A' -> M (branching on byte 1): '0' -> leaf "A0", '$' -> N ("A$x",
  // "A$y"); 'B' -> leaf.
  for (const char* key : {"A0", "A$x", "A$y", "B"})
    ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K(key), 1).ok());
  std::vector<KeyValue> out;
  std::vector<testing::Moment> moments = {
      // M's READ posted: N loses a child and merges (its last leaf moves
      // up into M).
      {[](const Stats& so_far) { return so_far.reads >= 3; },
       [&] { ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("A$x")).ok()); },
       {}},
      // The READs of "A0" and N posted ("A0" is returned, N is found
      // merged away: the scan looks again within "A$"): M loses its other
      // child and merges ("A0" moves up into R).
      {[](const Stats& so_far) { return so_far.reads >= 5; },
       [&] { ASSERT_TRUE(pair.tree_b->Delete(ctx_b, K("A$y")).ok()); },
       {}},
      // R's READ posted (its slot 'A' leads to "A0"): "A0" is replaced.
      {[](const Stats& so_far) { return so_far.reads >= 7; },
       [&] { ASSERT_TRUE(pair.tree_b->Update(ctx_b, K("A0"), 2).ok()); },
       {}}};
  const Status scan = testing::RunWithInjections(
      *pair.client_a, [&](ContextImpl& c) { return pair.tree_a->Scan(c, K("A"), K("Az"), &out); },
      &moments);
  ASSERT_TRUE(moments[2].seen.fired);
  EXPECT_EQ(moments[2].seen.at.reads, 7u);
  ASSERT_TRUE(scan.ok()) << scan.ToString();
  ASSERT_EQ(out.size(), 1u) << "a key returned twice";
  EXPECT_EQ(out[0].key, K("A0"));
}

// Found by the failures exploration (seed 3255): a compute node's context
// handed a leaf's rear word over with its image of the leaf; the next
// holder came through a stale cached route, and the image's reverse
// pointer (the one field a split may change under a held word) still named
// the cached parent, so the route passed its check. A delete of a key a
// split had just put beside that leaf returned NotFound with the key
// present. A handed image now never vouches for a cached route.
TEST(RadixRegressionTest, AHandedOverImageNeverVouchesForACachedRoute) {
  Watchdog watchdog(std::chrono::seconds(120));
  Pair pair("handed", RadixOptions(), NoCache());
  Context& ctx_b = *pair.ctx_b;
  const std::string x = K("Ax"), y = K("Ay");
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, x, 1).ok());
  ASSERT_TRUE(pair.tree_b->Insert(ctx_b, K("B"), 1).ok());
  // This compute node caches R, whose slot for 'A' leads to "Ax". Once the
  // update has posted its lock CAS (it holds the leaf's turn): another
  // compute node inserts "Ay", splitting "Ax"'s leaf under a new node.
  // Then this context deletes "Ay" through its stale cached R: it queues
  // behind the update for the same leaf, which hands the word over with
  // its image.
  Status updated, erased;
  const Status run = pair.RunBehind(
      x, [&](ContextImpl& ctx) { updated = pair.tree_a->Update(ctx, x, 2); },
      [&](ContextImpl& ctx) -> Status {
        if (!pair.tree_b->Insert(ctx_b, y, 3).ok()) return Status::Internal("insert of Ay");
        erased = pair.tree_a->Delete(ctx, y);
        return Status::Ok();
      });
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(updated.ok()) << updated.ToString();
  EXPECT_EQ(pair.tree_a->stats()[IndexOp::kDelete].handovers, 1u) << "the scenario did not run";
  EXPECT_TRUE(erased.ok()) << "a delete of a present key: " << erased.ToString();
  uint64_t value = 0;
  EXPECT_TRUE(pair.tree_b->Lookup(ctx_b, y, &value).IsNotFound());
  ASSERT_TRUE(pair.tree_b->Lookup(ctx_b, x, &value).ok());
  EXPECT_EQ(value, 2u);
}

// Review (issue 27): a cache entry filled at epoch e routes an operation
// pinned at p > e + 1 to a leaf deleted (retired at r, e < r < p) after the
// fill; the entry is dropped while the operation, paused, has yet to read
// the leaf. The cache floor rose with the drop, so the leaf could be freed
// (and reused) under the operation. Now the lookup holds the entry's epoch
// for as long as it runs: after the renewal and the advances that would
// have freed the leaf, it is still not free.
TEST(RadixRegressionTest, AnEntryDroppedUnderALookupDoesNotLetTheLeafItRoutedToBeFreed) {
  Watchdog watchdog(std::chrono::seconds(120));
  ClusterOptions options =
      testing::SmallLocalCluster(1, 8 << 20, false, std::chrono::microseconds(0));
  options.lease.period = std::chrono::milliseconds(2);
  options.lease.timeout = std::chrono::milliseconds(20);
  // Entries never expire here: only the drop below takes the entry out.
  options.reclamation.cache_window_epochs = ReclamationOptions::kMaxCacheWindowEpochs;
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
  auto reader = NewClient(*cluster);  // A: the paused lookup's node
  auto writer = NewClient(*cluster);  // B: deletes
  // No read delegation: the second lookup of the key must not wait for
  // the paused one's READ.
  RadixOptions reader_options;
  reader_options.read_delegation = false;
  auto reader_tree = OpenTree(reader.get(), "stale", reader_options);
  // No cache on the writer: its own entries would hold the leaf back.
  RadixOptions writer_options;
  writer_options.cache_bytes = 0;
  auto writer_tree = OpenTree(writer.get(), "stale", writer_options);
  ASSERT_NE(reader_tree, nullptr);
  ASSERT_NE(writer_tree, nullptr);
  auto paused = Blocking(*reader);
  auto other = Blocking(*reader);
  auto deleter = Blocking(*writer);
  auto& reader_epochs = static_cast<runtime::ClientImpl&>(*reader).epochs();
  auto& writer_epochs = static_cast<runtime::ClientImpl&>(*writer).epochs();
  const auto eventually = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  };

  const std::string key = K("key1");
  // Every node keeps two children or more through the deletes below (no
  // merge: the entries of a merged-away node would hold the floor down).
  for (const char* k : {"key1", "key2", "key3", "spare", "zeta"})
    ASSERT_TRUE(writer_tree->Insert(*deleter, K(k), 111).ok());
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*writer_tree, *deleter, key);
  ASSERT_FALSE(leaf.is_null());
  // The reader's cache takes the node above the leaf at epoch e.
  uint64_t value = 0;
  ASSERT_TRUE(reader_tree->Lookup(*other, key, &value).ok());
  const uint64_t filled_at = reader_epochs.local();
  // A retirement moves G on; once the writer is past e, the key's delete
  // retires its leaf at r > e. The reader's entry keeps the free bound
  // below e meanwhile, so G goes on moving.
  ASSERT_TRUE(writer_tree->Delete(*deleter, K("spare")).ok());
  ASSERT_TRUE(eventually([&] { return writer_epochs.local() > filled_at; }));
  ASSERT_TRUE(writer_tree->Delete(*deleter, key).ok());
  const uint64_t retired_at = writer_epochs.highest_retired();
  ASSERT_GT(retired_at, filled_at);
  // The lookup pins at p >= r + 2 (G >= p then, so nothing but the cache
  // floor keeps the leaf from its free bound).
  ASSERT_TRUE(eventually([&] { return reader_epochs.local() >= retired_at + 2; }));

  // The lookup, through the cached route, stops just before its READ of
  // the leaf.
  std::mutex mutex;
  std::condition_variable changed;
  bool at_leaf = false;
  bool go_on = false;
  bool freed_when_read = true;
  std::vector<fabric::Op> posts;
  ContextImpl& paused_ctx = ContextImpl::From(*paused);
  paused_ctx.RecordPostsForTesting(&posts);
  paused_ctx.SetPostHookForTesting([&](std::span<const fabric::Op> ops) {
    for (const fabric::Op& op : ops) {
      if (op.code != fabric::OpCode::kRead || op.remote != leaf) continue;
      std::unique_lock<std::mutex> lock(mutex);
      if (at_leaf) return;  // a second READ of it
      at_leaf = true;
      changed.notify_all();
      changed.wait(lock, [&] { return go_on; });
      freed_when_read = writer_epochs.free_bound() >= retired_at;
      return;
    }
  });
  Status looked_up;
  uint64_t found = 0;
  std::thread lookup([&] { looked_up = reader_tree->Lookup(*paused, key, &found); });
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(20), [&] { return at_leaf; }))
        << "the lookup never read the leaf through the cache";
  }
  // Another lookup of the reader's finds the leaf deleted through the same
  // entry, and drops the entry.
  const uint64_t stale_before = ContextImpl::From(*other).counters().cache_stale;
  EXPECT_TRUE(reader_tree->Lookup(*other, key, &value).IsNotFound());
  EXPECT_GT(ContextImpl::From(*other).counters().cache_stale, stale_before);
  // The reader publishes its cache floor after the drop, and the writer's
  // advancer reads it twice (or frees the leaf).
  auto& reader_keeper = static_cast<runtime::ClientImpl&>(*reader).lease();
  const uint64_t renewals = reader_keeper.renewals();
  ASSERT_TRUE(eventually([&] { return reader_keeper.renewals() >= renewals + 2; }));
  const uint64_t scans = writer_epochs.counters().scans.load();
  ASSERT_TRUE(eventually([&] {
    return writer_epochs.counters().scans.load() >= scans + 2 ||
           writer_epochs.free_bound() >= retired_at;
  }));
  EXPECT_LT(writer_epochs.free_bound(), retired_at)
      << "the leaf's grace period ended while a lookup routed to it was still running";
  {
    std::lock_guard<std::mutex> lock(mutex);
    go_on = true;
  }
  changed.notify_all();
  lookup.join();
  paused_ctx.SetPostHookForTesting({});
  paused_ctx.RecordPostsForTesting(nullptr);
  EXPECT_FALSE(freed_when_read) << "the lookup read a leaf whose grace period had ended";
  EXPECT_TRUE(looked_up.ok() || looked_up.IsNotFound()) << looked_up.ToString();
  if (looked_up.ok()) {
    EXPECT_EQ(found, 111u);
  }
  // Once it ended, it holds nothing. (The other lookup's retry re-cached
  // the path at the epoch of the entry that routed it: images read by an
  // operation a stale entry routed are kept at that entry's epoch.)
  EXPECT_EQ(paused_ctx.cache_slot().load(), runtime::kUnpinned);
  EXPECT_EQ(ContextImpl::From(*other).cache_slot().load(), runtime::kUnpinned);
}

}  // namespace
}  // namespace dmidx
