// Error paths of the lock and the B+tree reached through the fabric's fault
// injection (lib/fabric/fault_injector.h) instead of deliberately malformed
// batches: a lock CAS that must be undone, a release whose retries fail too,
// a split whose write fails, a bulk load whose publish fails, a client that
// dies holding a lock. Every test asserts exact outcomes (statuses, lock
// words, counters, what the tree holds), never timing.
//
// Targeting one batch in the middle of an operation: the operation runs on
// coroutine 0 of a one-thread client and a watcher on coroutine 1. The local
// fabric never applies an op at post time and no other client thread polls,
// so coroutine 0 parks after every batch it posts and the watcher runs
// between any two of its batches: it flips the fault switch right after the
// batch it waits for was posted, and the next batch posted is the one that
// fails. The watcher records the stats it fired at, and the tests assert
// them, so a missed moment fails the test instead of passing it.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "btree/btree_impl.h"
#include "btree/node.h"
#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/keys.h"
#include "lib/fabric/fault_injector.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"
#include "lock/hocl.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/watchdog.h"
#include "tests/btree_test_util.h"

namespace dmidx {
namespace {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;
using testing::Faults;
using testing::Injection;
using testing::Key;
using testing::Model;
using testing::NewClient;
using testing::OpenCluster;
using testing::RunWithInjection;
using testing::SmallNodes;
using testing::Watchdog;

uint32_t ComputeNodeId(Client& client) {
  return runtime::ComputeNode::Of(client).id();
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string_view::npos;
}

// The global lock words of a tree with on_chip_locks (the default), and of
// the HOCL tests here: the lock region of every memory node, laid out as
// btree/btree_open.cc does.
lock::GlobalLockTable OnChipLockTable(Client& client) {
  const runtime::ComputeNode& node = runtime::ComputeNode::Of(client);
  lock::GlobalLockTable table;
  table.words_per_node = UINT64_MAX;
  for (uint16_t id = 0; id < node.memory_node_count(); ++id) {
    table.bases.push_back(RemoteAddress::Lock(id, 0));
    table.words_per_node = std::min(table.words_per_node, node.layout(id).lock_region_bytes / 8);
  }
  return table;
}

// The 8-byte word at `address` (through the first scratch word of a
// blocking context that runs no operation meanwhile).
uint64_t ReadWord(ContextImpl& ctx, RemoteAddress address) {
  auto* word = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  *word = 0xdeadbeef;
  const Op read = Op::Read(address, word, 8);
  EXPECT_TRUE(ctx.Execute(address.node(), {&read, 1}).ok());
  return *word;
}

void WriteWord(ContextImpl& ctx, RemoteAddress address, uint64_t value) {
  auto* word = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  *word = value;
  const Op write = Op::Write(address, word, 8);
  ASSERT_TRUE(ctx.Execute(address.node(), {&write, 1}).ok());
}

// The root the descriptor of tree `name` names.
RemoteAddress RootOf(Client& client, ContextImpl& ctx, const std::string& name) {
  auto slot = runtime::ComputeNode::Of(client).CatalogWord("btree/" + name, false);
  EXPECT_TRUE(slot.ok());
  if (!slot.ok()) return {};
  const RemoteAddress descriptor = RemoteAddress::FromRaw(ReadWord(ctx, *slot));
  return RemoteAddress::FromRaw(ReadWord(ctx, descriptor + offsetof(btree::Descriptor, root)));
}

btree::NodeShape SmallShape() {
  return *btree::NodeShape::Make(testing::kSmallNodeBytes, 8);
}

// Reads the node at `address` into `image` (node bytes of scratch past the
// first 64).
void ReadNode(ContextImpl& ctx, RemoteAddress address, uint8_t* image) {
  const Op read = Op::Read(address, image, testing::kSmallNodeBytes);
  ASSERT_TRUE(ctx.Execute(address.node(), {&read, 1}).ok());
}

// The leaf of tree `name` (small nodes, no split under way) covering `key`.
RemoteAddress LeafOf(Client& client, ContextImpl& ctx, const std::string& name,
                     std::string_view key) {
  const btree::NodeShape shape = SmallShape();
  uint8_t* image = ctx.scratch().data() + 64;
  RemoteAddress address = RootOf(client, ctx, name);
  for (int depth = 0; depth < 16; ++depth) {
    ReadNode(ctx, address, image);
    const btree::NodeView node(shape, image);
    EXPECT_TRUE(node.Verify());
    if (node.is_leaf()) return address;
    address = node.FindChild(key);
  }
  ADD_FAILURE() << "no leaf under 16 levels";
  return {};
}

// ---- HOCL ------------------------------------------------------------------

class FaultPathsLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = OpenCluster(false, 2);
    ASSERT_NE(cluster_, nullptr);
    client_ = NewClient(*cluster_);
    other_client_ = NewClient(*cluster_);
    ASSERT_TRUE(client_->NewBlockingContext(&context_).ok());
    ASSERT_TRUE(other_client_->NewBlockingContext(&other_context_).ok());
    object_ = *ctx().allocator().Allocate(64, 64, 0);
  }
  ContextImpl& ctx() { return ContextImpl::From(*context_); }
  ContextImpl& other_ctx() { return ContextImpl::From(*other_context_); }
  uint64_t Tag() const { return ComputeNodeId(*client_) + 1; }
  uint64_t OtherTag() const { return ComputeNodeId(*other_client_) + 1; }
  static lock::HoclOptions ShortTimeout() {
    lock::HoclOptions options;
    options.acquire_timeout = std::chrono::milliseconds(200);
    return options;
  }
  fabric::FaultInjector& faults() { return Faults(*cluster_); }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_, other_client_;
  std::unique_ptr<Context> context_, other_context_;
  RemoteAddress object_;
};

// Error path: Acquire's lock CAS batch fails. Acquire returns Unavailable
// and undoes the CAS (a CAS from its own tag back to 0, as the CAS may have
// landed though its completion failed); the word is free and the next
// Acquire takes it at once.
TEST_F(FaultPathsLockTest, FailedLockCasIsUndone) {
  Watchdog watchdog;
  lock::HierarchicalLock lock(OnChipLockTable(*client_), ShortTimeout(), Tag());
  const RemoteAddress word = lock.table().WordFor(object_);
  ASSERT_TRUE(faults().FailNextBatches(object_.node(), 1).ok());
  Stats before = ctx().stats();
  const StatusOr<lock::LockGrant> failed = lock.Acquire(ctx(), object_);
  EXPECT_TRUE(failed.status().IsUnavailable()) << failed.status().ToString();
  EXPECT_TRUE(Contains(failed.status(), "injected")) << failed.status().ToString();
  EXPECT_EQ((ctx().stats() - before).compare_swaps, 2u) << "the CAS and its undo";
  EXPECT_EQ(faults().counters().failed_batches, 1u);
  EXPECT_EQ(ReadWord(ctx(), word), 0u);
  EXPECT_EQ(ctx().counters().lock_retries, 0u);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  EXPECT_EQ(ctx().counters().lock_retries, 0u) << "the word was left held";
  EXPECT_EQ(ReadWord(ctx(), word), grant->tag);
  ASSERT_TRUE(lock.Release(ctx(), *grant, {}).ok());
  EXPECT_EQ(ReadWord(ctx(), word), 0u);

  // The undo itself matters when the CAS landed but its completion failed.
  // An injected failure applies nothing, so the landed CAS is played by
  // putting the hold of this context's next acquisition into the word
  // first: the undo frees it.
  WriteWord(ctx(), word, lock.NextTagForTesting(ctx()));
  ASSERT_TRUE(faults().FailNextBatches(object_.node(), 1).ok());
  EXPECT_TRUE(lock.Acquire(ctx(), object_).status().IsUnavailable());
  EXPECT_EQ(ReadWord(ctx(), word), 0u) << "the undo did not take back the landed CAS";

  // ... and it never frees another compute node's hold.
  lock::HierarchicalLock other(OnChipLockTable(*other_client_), ShortTimeout(), OtherTag());
  const uint64_t other_hold = other.NextTagForTesting(other_ctx());
  WriteWord(ctx(), word, other_hold);
  ASSERT_TRUE(faults().FailNextBatches(object_.node(), 1).ok());
  EXPECT_TRUE(lock.Acquire(ctx(), object_).status().IsUnavailable());
  EXPECT_EQ(ReadWord(ctx(), word), other_hold) << "the undo freed another node's lock";

  // ... nor a hold that an earlier acquisition of this same context took
  // (a local handover chain may still keep it: tests/hocl_test.cc).
  WriteWord(ctx(), word, grant->tag);
  ASSERT_TRUE(faults().FailNextBatches(object_.node(), 1).ok());
  EXPECT_TRUE(lock.Acquire(ctx(), object_).status().IsUnavailable());
  EXPECT_EQ(ReadWord(ctx(), word), grant->tag) << "the undo freed this context's earlier hold";
  EXPECT_EQ(faults().counters().failed_batches, 4u);
}

// Error path: the lock word's memory node is unreachable for one Acquire.
// The CAS batch and its undo fail at once with Unavailable naming the node
// (no CAS retry loop up to acquire_timeout); reachable again, the lock
// works and its word is free.
TEST_F(FaultPathsLockTest, UnreachableNodeFailsAcquireAtOnce) {
  Watchdog watchdog;
  lock::HoclOptions options;
  options.acquire_timeout = std::chrono::seconds(30);
  lock::HierarchicalLock lock(OnChipLockTable(*client_), options, Tag());
  const RemoteAddress word = lock.table().WordFor(object_);
  ASSERT_TRUE(faults().SetUnreachable(object_.node(), true).ok());
  const StatusOr<lock::LockGrant> failed = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(faults().SetUnreachable(object_.node(), false).ok());
  EXPECT_TRUE(failed.status().IsUnavailable()) << failed.status().ToString();
  EXPECT_TRUE(
      Contains(failed.status(), "memory node " + std::to_string(object_.node()) + " unreachable"))
      << failed.status().ToString();
  EXPECT_EQ(faults().counters().unreachable_batches, 2u) << "the CAS and its undo, once each";
  EXPECT_EQ(ctx().counters().lock_retries, 0u);
  EXPECT_EQ(ReadWord(ctx(), word), 0u);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  EXPECT_EQ(ctx().counters().lock_retries, 0u);
  ASSERT_TRUE(lock.Release(ctx(), *grant, {Op::Write(object_, ctx().zero_word(), 8)}).ok());
  EXPECT_EQ(ReadWord(ctx(), word), 0u);
}

// Error path: the write-back batch fails, and so does every batch after it
// (tests/hocl_test.cc covers retries that succeed): the 1 + release_retries
// READs of the word that would tell whether the release landed, then the
// release by CAS, once and release_retries times again. Release returns
// the error; the word stays held with this compute node's hold, and
// another compute node's Acquire ends in DeadlineExceeded naming this
// node's tag.
TEST_F(FaultPathsLockTest, ReleaseWhoseRetriesFailLeavesTheWordHeld) {
  Watchdog watchdog;
  const lock::HoclOptions options = ShortTimeout();
  lock::HierarchicalLock lock(OnChipLockTable(*client_), options, Tag());
  lock::HierarchicalLock other(OnChipLockTable(*other_client_), options, OtherTag());
  const RemoteAddress word = lock.table().WordFor(object_);
  auto grant = lock.Acquire(ctx(), object_);
  ASSERT_TRUE(grant.ok());
  const uint64_t failures = 1 + 2 * (1 + uint64_t{options.release_retries});
  ASSERT_TRUE(faults().FailNextBatches(object_.node(), failures).ok());
  const Stats before = ctx().stats();
  const Status status = lock.Release(ctx(), *grant, {Op::Write(object_, ctx().zero_word(), 8)});
  const Stats used = ctx().stats() - before;
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_EQ(used.reads, 1 + options.release_retries) << "a READ of the word per retry";
  EXPECT_EQ(used.compare_swaps, 1 + options.release_retries) << "the release by CAS, every post";
  EXPECT_EQ(used.batches, failures);
  EXPECT_EQ(faults().counters().failed_batches, failures);
  const uint64_t held = ReadWord(ctx(), word);
  EXPECT_EQ(held, grant->tag);
  EXPECT_EQ(held >> 48, Tag());

  const StatusOr<lock::LockGrant> blocked = other.Acquire(other_ctx(), object_);
  ASSERT_EQ(blocked.status().code(), StatusCode::kDeadlineExceeded) << blocked.status().ToString();
  EXPECT_TRUE(Contains(blocked.status(), "held by compute node " + std::to_string(Tag() - 1) +
                                             " (owner tag " + std::to_string(Tag()) + ") "))
      << blocked.status().ToString();
  EXPECT_GT(other_ctx().counters().lock_retries, 0u);
  // This compute node waits for its own stale hold like anyone else.
  EXPECT_EQ(lock.Acquire(ctx(), object_).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ReadWord(ctx(), word), held);
}

// ---- B+tree ----------------------------------------------------------------

// One memory node (every batch of the tree goes to it), a client of one
// thread and two coroutines for RunWithInjection, and a blocking context
// for set-up and checks.
class FaultPathsTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = OpenCluster(false, 1);
    ASSERT_NE(cluster_, nullptr);
    client_ = NewClient(*cluster_, 1, 2);
    ASSERT_TRUE(client_->NewBlockingContext(&context_).ok());
    // The batches an operation posts are counted: none of them makes a
    // redo-record slot (lock/redo_log.h).
    testing::PrepareRedoSlots(*client_, context_.get());
  }
  ContextImpl& ctx() { return ContextImpl::From(*context_); }
  fabric::FaultInjector& faults() { return Faults(*cluster_); }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Context> context_;
};

// Batches a failed write-back batch with the release (HOCL's Release)
// posts before it gives up and releases the word by CAS: the batch and the
// READs of the lock word (lock::PostAgainHeld: one before each post again,
// a failed one tried again without spending a post, 1 + release_retries of
// them when every one fails). Failing that many fails it for good.
uint64_t FailedReleasePosts() {
  return 2 + uint64_t{lock::HoclOptions{}.release_retries};
}

// Error path: a leaf split whose write batch (new sibling + shrunk leaf +
// lock release, one batch: WriteSplit with combined commands) fails, and
// so does every READ of the lock word after it that would tell whether the
// release landed. The failure is injected right after the splitting Insert
// posted its lock CAS, so the next batch, the split's, is the first that
// fails. The Insert returns Unavailable; the release by CAS frees the
// leaf's lock; the leaf and the root are unchanged (every earlier key found
// with its value, the new one not); later Inserts split it for real and the
// tree matches the model.
TEST_F(FaultPathsTreeTest, SplitWhoseWriteFails) {
  Watchdog watchdog;
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client_.get(), "split", SmallNodes(), &tree).ok());
  const btree::NodeShape shape = SmallShape();
  Model model;
  for (uint64_t i = 1; i <= shape.leaf_slots(); ++i) {
    ASSERT_TRUE(tree->Insert(*context_, Key(i * 10), i).ok());
    model[i * 10] = i;
  }
  // The root is the only leaf, and it is full: the next Insert splits it.
  const RemoteAddress root = RootOf(*client_, ctx(), "split");
  uint8_t* image = ctx().scratch().data() + 64;
  ReadNode(ctx(), root, image);
  ASSERT_TRUE(btree::NodeView(shape, image).is_leaf());
  ASSERT_EQ(btree::NodeView(shape, image).leaf_entries(), shape.leaf_slots());
  const RemoteAddress word = OnChipLockTable(*client_).WordFor(root);

  Injection injection;
  const Status status = RunWithInjection(
      *client_, [&](ContextImpl& ctx) { return tree->Insert(ctx, Key(55), 55); },
      [](const Stats& so_far) { return so_far.compare_swaps >= 1; },
      [&] { ASSERT_TRUE(faults().FailNextBatches(root.node(), FailedReleasePosts()).ok()); },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.compare_swaps, 1u) << "fired after the lock CAS, before anything else";
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_TRUE(Contains(status, "injected")) << status.ToString();
  EXPECT_EQ(faults().counters().failed_batches, FailedReleasePosts());

  EXPECT_EQ(ReadWord(ctx(), word), 0u) << "the leaf's lock word was left held";
  EXPECT_EQ(RootOf(*client_, ctx(), "split"), root) << "the tree grew without its split";
  ReadNode(ctx(), root, image);
  EXPECT_TRUE(btree::NodeView(shape, image).Verify());
  EXPECT_EQ(btree::NodeView(shape, image).leaf_entries(), shape.leaf_slots());
  uint64_t value = 0;
  EXPECT_TRUE(tree->Lookup(*context_, Key(55), &value).IsNotFound());
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree, *context_, model));

  // The tree goes on: the same Insert splits the leaf now, and many more.
  ASSERT_TRUE(tree->Insert(*context_, Key(55), 55).ok());
  model[55] = 55;
  for (uint64_t i = 0; i < 300; ++i) {
    const uint64_t key = (i * 7919) % 5000 + 1;
    ASSERT_TRUE(tree->Insert(*context_, Key(key), key + 1).ok()) << key;
    model[key] = key + 1;
  }
  EXPECT_NE(RootOf(*client_, ctx(), "split"), root);
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree, *context_, model));
  EXPECT_EQ(faults().counters().failed_batches, FailedReleasePosts());
}

// A full root leaf of tree `name` (small nodes, keys 10, 20, ...), so the
// next Insert splits it.
class FaultPathsSplitTest : public FaultPathsTreeTest {
 protected:
  void FillRootLeaf(const std::string& name) {
    ASSERT_TRUE(BTree::Open(client_.get(), name, SmallNodes(), &tree_).ok());
    for (uint64_t i = 1; i <= SmallShape().leaf_slots(); ++i)
      ASSERT_TRUE(tree_->Insert(*context_, Key(i * 10), i).ok());
    root_ = RootOf(*client_, ctx(), name);
  }

  // Inserts key 55 (which splits the root leaf) on coroutine 0, whose
  // allocator is primed with one free node so that the split's new sibling
  // is `*sibling`, and fails `failures` batches from the split's on (the
  // one after the lock CAS; by default for good: FailedReleasePosts).
  // `then`, if given, is a second step (a testing::Moment, whose `seen` it
  // sets). Returns the Insert's status; *free_before and *free_after are
  // the allocator's free objects around the Insert.
  // With `applied`, the failed batches land all the same
  // (FailNextBatchesAfterApplying).
  Status InsertFailingTheSplit(RemoteAddress* sibling, uint64_t* free_before, uint64_t* free_after,
                               testing::Moment* then = nullptr,
                               uint64_t failures = FailedReleasePosts(), bool applied = false) {
    std::vector<testing::Moment> moments = {
        {[](const Stats& so_far) { return so_far.compare_swaps >= 1; },
         [&] {
           ASSERT_TRUE((applied ? faults().FailNextBatchesAfterApplying(root_.node(), failures)
                                : faults().FailNextBatches(root_.node(), failures))
                           .ok());
         },
         {}}};
    if (then) moments.push_back(*then);
    const Status status = testing::RunWithInjections(
        *client_,
        [&](ContextImpl& ctx) -> Status {
          const uint64_t bytes = SmallShape().node_bytes();
          DMIDX_ASSIGN_OR_RETURN(*sibling, ctx.allocator().Allocate(bytes, 64, root_.node()));
          DMIDX_RETURN_IF_ERROR(ctx.allocator().Free(*sibling, bytes));
          *free_before = ctx.allocator().free_objects();
          const Status inserted = tree_->Insert(ctx, Key(55), 55);
          *free_after = ctx.allocator().free_objects();
          return inserted;
        },
        &moments);
    const Injection& split = moments[0].seen;
    EXPECT_TRUE(split.fired);
    EXPECT_EQ(split.at.compare_swaps, 1u) << "fired after the lock CAS, before anything else";
    if (then) then->seen = moments[1].seen;
    return status;
  }

  std::unique_ptr<BTree> tree_;
  RemoteAddress root_;
};

// A split whose batch (new sibling + shrunk node + release, one batch)
// fails once is posted again rather than given up: it may have placed a
// prefix (the new sibling, part of the shrunk node), and the lock word,
// read back, still holds this hold's tag, so nobody has changed the node
// since. The Insert succeeds, the new sibling is linked and kept, the key
// is in the tree and the lock free. (It used to fail the Insert and free
// the lock over whatever prefix had landed.)
TEST_F(FaultPathsSplitTest, SplitWhoseWriteFailsOnceIsPostedAgain) {
  Watchdog watchdog;
  ASSERT_NO_FATAL_FAILURE(FillRootLeaf("posted-again"));
  RemoteAddress sibling;
  uint64_t free_before = 0, free_after = 0;
  const Status status = InsertFailingTheSplit(&sibling, &free_before, &free_after, nullptr, 1);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(faults().counters().failed_batches, 1u);
  EXPECT_EQ(tree_->stats()[IndexOp::kInsert].reposted_batches, 1u);
  uint8_t* image = ctx().scratch().data() + 64;
  ReadNode(ctx(), root_, image);
  EXPECT_TRUE(btree::NodeView(SmallShape(), image).Verify());
  EXPECT_EQ(btree::NodeView(SmallShape(), image).sibling(), sibling) << "the split did not land";
  EXPECT_EQ(free_after, free_before - 1);
  EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root_)), 0u);
  uint64_t value = 0;
  ASSERT_TRUE(tree_->Lookup(*context_, Key(55), &value).ok());
  EXPECT_EQ(value, 55u);
  Model model;
  for (uint64_t i = 1; i <= SmallShape().leaf_slots(); ++i)
    model[i * 10] = i;
  model[55] = 55;
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree_, *context_, model));
}

// ... but the new sibling is not under the split node's lock: once the
// split node's sibling word names it, another compute node may reach it,
// lock it under its own word and change it. So when the check after the
// failure finds that link placed (and with it the whole sibling, placed
// before it), the batch is posted again without the sibling
// (lock::LinkedObjects). An injected failure applies nothing, so the
// landed link and the other node's change to the sibling are played by
// writing them after the failure, before the check.
TEST_F(FaultPathsSplitTest, SplitPostedAgainLeavesOutItsLinkedSibling) {
  Watchdog watchdog;
  ASSERT_NO_FATAL_FAILURE(FillRootLeaf("linked-again"));
  RemoteAddress sibling;
  uint64_t free_before = 0, free_after = 0;
  constexpr uint64_t kChange = 0x5eed;
  // The split's batch: the sibling, the redo record of the node's write
  // (lock/redo_log.h: its head, then the node's bytes), the node, the
  // release (which ends the record: no clear).
  constexpr uint64_t kSplitWrites = 5;
  testing::Moment landed{[](const Stats& so_far) { return so_far.writes >= kSplitWrites; },
                         [&] {
                           WriteWord(ctx(), sibling + btree::kChecksumOffset, kChange);
                           WriteWord(ctx(), root_ + btree::kSiblingOffset, sibling.raw());
                         },
                         {}};
  const Status status = InsertFailingTheSplit(&sibling, &free_before, &free_after, &landed, 1);
  EXPECT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(landed.seen.fired);
  EXPECT_EQ(landed.seen.at.writes, kSplitWrites)
      << "fired after the split's batch, before the check";
  EXPECT_EQ(faults().counters().failed_batches, 1u);
  EXPECT_EQ(tree_->stats()[IndexOp::kInsert].reposted_batches, 1u);
  EXPECT_EQ(ReadWord(ctx(), sibling + btree::kChecksumOffset), kChange)
      << "the batch posted again overwrote the linked sibling";
  EXPECT_EQ(ReadWord(ctx(), root_ + btree::kSiblingOffset), sibling.raw());
  EXPECT_EQ(free_after, free_before - 1);
  EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root_)), 0u);
}

// Regression: a split whose batch (new sibling + shrunk node + release, one
// batch) failed kept its new sibling allocated, although nothing could
// point at it: every failed split leaked a node. After the failure the
// split reads the split node's sibling word; it still names the old
// sibling (here none), so the link never landed, and the new node goes back
// to the allocator: the next allocation of a node's size takes it again.
TEST_F(FaultPathsSplitTest, FailedSplitGivesItsUnlinkedSiblingBack) {
  Watchdog watchdog;
  ASSERT_NO_FATAL_FAILURE(FillRootLeaf("unlinked"));
  RemoteAddress sibling;
  uint64_t free_before = 0, free_after = 0;
  const Status status = InsertFailingTheSplit(&sibling, &free_before, &free_after);
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_EQ(faults().counters().failed_batches, FailedReleasePosts());
  uint8_t* image = ctx().scratch().data() + 64;
  ReadNode(ctx(), root_, image);
  EXPECT_TRUE(btree::NodeView(SmallShape(), image).sibling().is_null()) << "the link landed";
  EXPECT_EQ(free_after, free_before) << "the unlinked sibling was not given back";
  // The allocator of the thread that ran the Insert (idle now).
  runtime::RemoteAllocator& allocator =
      static_cast<runtime::ClientImpl&>(*client_).workers()[0]->allocator();
  const StatusOr<RemoteAddress> reused =
      allocator.Allocate(SmallShape().node_bytes(), 64, root_.node());
  ASSERT_TRUE(reused.ok()) << reused.status().ToString();
  EXPECT_EQ(*reused, sibling) << "the sibling's memory is not handed out again";
}

// ... but a split whose batch failed after its link may have landed keeps
// its sibling (a leak, never a pointer to freed memory). It is decided
// before the lock word is let go (lock::LinkedObjects::unlinked): once
// another holder has the word, merges may bring the sibling word back to
// its old value. An injected failure applies nothing, so the landed link
// is played by writing the sibling's address into the split node's sibling
// word after the failed batch; then the READs that would tell whether the
// release landed fail too (so the batch is not posted again), and the
// check before the word is let go finds the link.
TEST_F(FaultPathsSplitTest, FailedSplitWhoseLinkLandedKeepsItsSibling) {
  Watchdog watchdog;
  ASSERT_NO_FATAL_FAILURE(FillRootLeaf("linked"));
  RemoteAddress sibling;
  uint64_t free_before = 0, free_after = 0;
  constexpr uint64_t kSplitWrites = 5;  // as in SplitPostedAgainLeavesOutItsLinkedSibling
  testing::Moment linked{
      [](const Stats& so_far) { return so_far.writes >= kSplitWrites; },
      [&] {
        WriteWord(ctx(), root_ + btree::kSiblingOffset, sibling.raw());
        ASSERT_TRUE(faults().FailNextBatches(root_.node(), FailedReleasePosts() - 1).ok());
      },
      {}};
  const Status status = InsertFailingTheSplit(&sibling, &free_before, &free_after, &linked, 1);
  const Injection& link = linked.seen;
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  ASSERT_TRUE(link.fired);
  EXPECT_EQ(link.at.compare_swaps, 1u) << "fired after the split's batch, before the check";
  EXPECT_EQ(ReadWord(ctx(), root_ + btree::kSiblingOffset), sibling.raw());
  EXPECT_EQ(free_after, free_before - 1) << "a sibling that may be linked was given back";
  EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root_)), 0u);
}

// Finding 3 of the merge review: a split whose batch failed although every
// op of it landed (the release too), and every READ of the lock word after
// it failed as well, used to return Unavailable and then read the split
// node's sibling word after the release to decide whether to free the new
// node; with merges that word can be back at its old value by then. Now
// the lock word and the link word are read in one batch before the word is
// let go: the word is no longer this hold's, so the release landed and the
// whole batch before it. The split happened: the Insert succeeds, the
// sibling is kept and linked, the lock free, the key in the tree.
TEST_F(FaultPathsSplitTest, FailedSplitThatLandedIsDecidedBeforeTheWordIsLetGo) {
  Watchdog watchdog;
  ASSERT_NO_FATAL_FAILURE(FillRootLeaf("landed"));
  RemoteAddress sibling;
  uint64_t free_before = 0, free_after = 0;
  const Status status = InsertFailingTheSplit(&sibling, &free_before, &free_after, nullptr,
                                              FailedReleasePosts(), /*applied=*/true);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(faults().counters().applied_then_failed_batches, FailedReleasePosts());
  uint8_t* image = ctx().scratch().data() + 64;
  ReadNode(ctx(), root_, image);
  EXPECT_TRUE(btree::NodeView(SmallShape(), image).Verify());
  EXPECT_EQ(btree::NodeView(SmallShape(), image).sibling(), sibling) << "the split did not land";
  EXPECT_EQ(free_after, free_before - 1) << "the linked sibling was given back";
  EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root_)), 0u);
  Model model;
  for (uint64_t i = 1; i <= SmallShape().leaf_slots(); ++i)
    model[i * 10] = i;
  model[55] = 55;
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree_, *context_, model));
}

class FaultPathsBulkLoadTest : public FaultPathsTreeTest {
 protected:
  // 600 keys in 256-byte nodes: leaves, two internal levels above them.
  static std::vector<KeyValue> Pairs(Model* model) {
    for (uint64_t i = 1; i <= 600; ++i)
      (*model)[i * 3] = i;
    return testing::Pairs(*model);
  }

  // The batches a BulkLoad of `pairs` into a new empty tree posts (on the
  // one memory node): the same for every such tree, as the load is
  // deterministic. The publishing CAS is the third from last (then the
  // leftmost leaf's write, then the lock release).
  uint64_t BatchesOfLoad(const std::vector<KeyValue>& pairs) {
    std::unique_ptr<BTree> probe;
    EXPECT_TRUE(BTree::Open(client_.get(), "probe", SmallNodes(), &probe).ok());
    Injection never;
    Stats used;
    const Status status = RunWithInjection(
        *client_, [&](ContextImpl& ctx) { return probe->BulkLoad(ctx, pairs, 1.0); },
        [](const Stats&) { return false; }, [] {}, &never, &used);
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(used.compare_swaps, 2u) << "the lock CAS and the publishing CAS";
    return used.batches;
  }

  // Loads `pairs` into the empty tree `name` with `moments` (each flips a
  // switch once the load has posted `after` batches); what it returned.
  struct Flip {
    uint64_t after;
    std::function<void()> inject;
  };
  Status LoadWithFlips(const std::string& name, const std::vector<KeyValue>& pairs,
                       const std::vector<Flip>& flips, std::unique_ptr<BTree>* tree,
                       RemoteAddress* root) {
    EXPECT_TRUE(BTree::Open(client_.get(), name, SmallNodes(), tree).ok());
    *root = RootOf(*client_, ctx(), name);
    std::vector<testing::Moment> moments;
    for (const Flip& flip : flips) {
      moments.push_back(
          {[after = flip.after](const Stats& so_far) { return so_far.batches >= after; },
           flip.inject,
           {}});
    }
    const Status status = testing::RunWithInjections(
        *client_, [&](ContextImpl& ctx) { return (*tree)->BulkLoad(ctx, pairs, 1.0); }, &moments);
    for (size_t i = 0; i < flips.size(); ++i) {
      EXPECT_TRUE(moments[i].seen.fired) << i;
      EXPECT_EQ(moments[i].seen.at.batches, flips[i].after) << "flip " << i << " fired late";
    }
    return status;
  }

  // Loads `pairs` into the empty tree `name`, failing `count` batches from
  // the publishing CAS on; what the load returned.
  Status LoadFailingPublish(const std::string& name, const std::vector<KeyValue>& pairs,
                            uint64_t count, std::unique_ptr<BTree>* tree, RemoteAddress* root) {
    const uint64_t total = BatchesOfLoad(pairs);
    const Status status = LoadWithFlips(
        name, pairs,
        {{total - 3, [&] { ASSERT_TRUE(faults().FailNextBatches(root->node(), count).ok()); }}},
        tree, root);
    EXPECT_EQ(faults().counters().failed_batches, count);
    return status;
  }

  // Loads `pairs` into the empty tree `name` with the publishing CAS
  // landing and its batch failing (FailNextBatchesAfterApplying), and with
  // `check_fails` the READ of the descriptor after it failing too.
  Status LoadWithPublishLanding(const std::string& name, const std::vector<KeyValue>& pairs,
                                bool check_fails, std::unique_ptr<BTree>* tree,
                                RemoteAddress* root) {
    const uint64_t total = BatchesOfLoad(pairs);
    std::vector<Flip> flips = {
        {total - 3,
         [&] { ASSERT_TRUE(faults().FailNextBatchesAfterApplying(root->node(), 1).ok()); }}};
    if (check_fails) {
      flips.push_back(
          {total - 2, [&] { ASSERT_TRUE(faults().FailNextBatches(root->node(), 1).ok()); }});
    }
    const Status status = LoadWithFlips(name, pairs, flips, tree, root);
    EXPECT_EQ(faults().counters().applied_then_failed_batches, 1u);
    EXPECT_EQ(faults().counters().failed_batches, check_fails ? 1u : 0u);
    return status;
  }

  // A second compute node's handle of tree `name` whose root hint is the
  // empty tree's root leaf (a Lookup ran), with a short lock timeout.
  std::unique_ptr<BTree> StaleHandle(const std::string& name) {
    stale_client_ = NewClient(*cluster_);
    EXPECT_TRUE(stale_client_->NewBlockingContext(&stale_context_).ok());
    BTreeOptions options = SmallNodes();
    options.lock_timeout = std::chrono::milliseconds(200);
    std::unique_ptr<BTree> stale;
    EXPECT_TRUE(BTree::Open(stale_client_.get(), name, options, &stale).ok());
    uint64_t value = 0;
    EXPECT_TRUE(stale->Lookup(*stale_context_, Key(1), &value).IsNotFound());
    return stale;
  }

  // Every key of `model` is in `tree`, whose root is `root` and no longer
  // the empty root leaf `old_root`; the old root's lock word is free.
  void ExpectLoaded(BTree& tree, const std::string& name, RemoteAddress old_root,
                    const Model& model) {
    const RemoteAddress loaded = RootOf(*client_, ctx(), name);
    EXPECT_NE(loaded, old_root) << "the new root was not published";
    EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(old_root)), 0u);
    uint8_t* image = ctx().scratch().data() + 64;
    ReadNode(ctx(), old_root, image);
    const btree::NodeView leftmost(SmallShape(), image);
    EXPECT_TRUE(leftmost.Verify());
    EXPECT_FALSE(leftmost.high_is_max()) << "the leftmost leaf holds the empty root's image";
    ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(tree, *context_, model));
  }

  std::unique_ptr<Client> stale_client_;
  std::unique_ptr<Context> stale_context_;

  // The tree is still empty and free to load: root unchanged, its lock
  // word free, no key found; a second BulkLoad succeeds and every key is
  // there.
  void ExpectEmptyAndLoadable(BTree& tree, const std::string& name, RemoteAddress root,
                              const std::vector<KeyValue>& pairs, const Model& model) {
    EXPECT_EQ(RootOf(*client_, ctx(), name), root);
    EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root)), 0u);
    uint64_t value = 0;
    EXPECT_TRUE(tree.Lookup(*context_, pairs.front().key, &value).IsNotFound());
    EXPECT_TRUE(tree.Lookup(*context_, pairs.back().key, &value).IsNotFound());
    ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(tree, *context_, Model{}));
    const Status again = tree.BulkLoad(*context_, pairs, 1.0);
    ASSERT_TRUE(again.ok()) << again.ToString();
    const RemoteAddress loaded = RootOf(*client_, ctx(), name);
    EXPECT_NE(loaded, root);
    uint8_t* image = ctx().scratch().data() + 64;
    ReadNode(ctx(), loaded, image);
    EXPECT_GE(btree::NodeView(SmallShape(), image).level(), 2) << "the load grew no levels";
    ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(tree, *context_, model));
  }
};

// Error path: the CAS that publishes a bulk load's new root fails (injected
// right after the load's last node write was posted). The load asks the
// descriptor, finds the old root, frees its nodes and releases the root
// leaf's lock: Unavailable, and the tree is still empty and loadable.
TEST_F(FaultPathsBulkLoadTest, PublishFailsAndTheTreeStaysEmpty) {
  Watchdog watchdog;
  Model model;
  const std::vector<KeyValue> pairs = Pairs(&model);
  std::unique_ptr<BTree> tree;
  RemoteAddress root;
  const Status status = LoadFailingPublish("loaded", pairs, 1, &tree, &root);
  EXPECT_TRUE(status.IsUnavailable()) << status.ToString();
  EXPECT_TRUE(Contains(status, "injected")) << status.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectEmptyAndLoadable(*tree, "loaded", root, pairs, model));
}

// Error path: the publishing CAS fails and so does the READ of the
// descriptor that would tell whether it landed. BulkLoad cannot know, so it
// writes the leftmost leaf all the same before it releases the lock, and
// returns Internal "may have published" (docs/btree.md). An injected failure
// applies nothing, so nothing was published: the root is now the loaded
// leftmost leaf, with a high fence and the other leaves along its sibling
// chain. Every key is found through it, and the tree goes on from there:
// inserts below the first separator split that root leaf and grow a root
// over the chain (GrowRoot), and the tree still matches the model.
TEST_F(FaultPathsBulkLoadTest, PublishAndItsCheckFailIsInternalMayHavePublished) {
  Watchdog watchdog;
  Model model;
  const std::vector<KeyValue> pairs = Pairs(&model);
  std::unique_ptr<BTree> tree;
  RemoteAddress root;
  const Status status = LoadFailingPublish("unknown", pairs, 2, &tree, &root);
  EXPECT_EQ(status.code(), StatusCode::kInternal) << status.ToString();
  EXPECT_TRUE(Contains(status, "may have published")) << status.ToString();
  EXPECT_TRUE(Contains(status, "leftmost leaf was written")) << status.ToString();
  EXPECT_EQ(RootOf(*client_, ctx(), "unknown"), root);
  EXPECT_EQ(ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root)), 0u);
  uint8_t* image = ctx().scratch().data() + 64;
  ReadNode(ctx(), root, image);
  const btree::NodeView leaf(SmallShape(), image);
  EXPECT_TRUE(leaf.Verify());
  EXPECT_TRUE(leaf.is_leaf());
  EXPECT_FALSE(leaf.high_is_max());
  EXPECT_FALSE(leaf.sibling().is_null());
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree, *context_, model));

  for (uint64_t i = 0; i < 300; ++i) {
    const uint64_t key = i % 2 == 0 ? i / 2 * 3 + 1 : (i * 7919) % 1800 + 2;
    ASSERT_TRUE(tree->Insert(*context_, Key(key), key + 5).ok()) << key;
    model[key] = key + 5;
  }
  EXPECT_NE(RootOf(*client_, ctx(), "unknown"), root) << "the root leaf never grew a root";
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree, *context_, model));
}

// Regression (issue 25 review, finding 1): the publishing CAS lands but its
// batch fails (its completion lost after the memory node ran it). The load
// used to ask the descriptor, find its root published, release the lock and
// return Internal without writing the leftmost leaf: the keys below the
// first separator were lost, and a compute node whose root hint was the old
// root leaf (still the empty root's image, fences both infinite) took it
// for the root and acknowledged writes of any key into it. Now the leaf is
// written before the release, and the load, found published, succeeds:
// every key is there, and so is a key written through the stale hint.
TEST_F(FaultPathsBulkLoadTest, PublishLandsButItsBatchFails) {
  Watchdog watchdog;
  Model model;
  const std::vector<KeyValue> pairs = Pairs(&model);
  std::unique_ptr<BTree> stale = StaleHandle("landed");
  std::unique_ptr<BTree> tree;
  RemoteAddress root;
  const Status status = LoadWithPublishLanding("landed", pairs, false, &tree, &root);
  EXPECT_TRUE(status.ok()) << status.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectLoaded(*tree, "landed", root, model));

  const Status stale_insert = stale->Insert(*stale_context_, Key(1799), 17);
  ASSERT_TRUE(stale_insert.ok()) << stale_insert.ToString();
  model[1799] = 17;
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*tree, *context_, model));
}

// Regression (finding 1): the publishing CAS lands, its batch fails, and
// the READ of the descriptor fails too. The load cannot tell whether its
// root is out, so it writes the leftmost leaf before the release (it used
// to release without it): Internal "may have published", and every key is
// in the tree, which does have the new root.
TEST_F(FaultPathsBulkLoadTest, PublishLandsAndItsCheckFails) {
  Watchdog watchdog;
  Model model;
  const std::vector<KeyValue> pairs = Pairs(&model);
  std::unique_ptr<BTree> tree;
  RemoteAddress root;
  const Status status = LoadWithPublishLanding("landed-unknown", pairs, true, &tree, &root);
  EXPECT_EQ(status.code(), StatusCode::kInternal) << status.ToString();
  EXPECT_TRUE(Contains(status, "may have published")) << status.ToString();
  EXPECT_TRUE(Contains(status, "leftmost leaf was written")) << status.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectLoaded(*tree, "landed-unknown", root, model));
}

// Regression (finding 1): the root is published and every write of the
// leftmost leaf fails (HierarchicalLock::WriteBack's: the first and
// release_retries more). The load used to
// release the lock anyway, so writers locked a leaf that still held the
// empty root's image and acknowledged writes into it. Now the lock stays
// held with this compute node's tag: Internal naming the leaf, and another
// compute node's writes through a stale root hint (of any key: the
// unwritten leaf still claims the whole key space) end in
// DeadlineExceeded.
TEST_F(FaultPathsBulkLoadTest, LeftmostLeafWriteFailsAndTheLockStaysHeld) {
  Watchdog watchdog;
  Model model;
  const std::vector<KeyValue> pairs = Pairs(&model);
  const uint64_t total = BatchesOfLoad(pairs);
  std::unique_ptr<BTree> stale = StaleHandle("unwritten");
  std::unique_ptr<BTree> tree;
  RemoteAddress root;
  const uint64_t writes = 1 + lock::HoclOptions{}.release_retries;
  const Status status = LoadWithFlips(
      "unwritten", pairs,
      {{total - 2, [&] { ASSERT_TRUE(faults().FailNextBatches(root.node(), writes).ok()); }}},
      &tree, &root);
  EXPECT_EQ(status.code(), StatusCode::kInternal) << status.ToString();
  EXPECT_TRUE(Contains(status, "could not write its leftmost leaf " + root.ToString()))
      << status.ToString();
  EXPECT_EQ(faults().counters().failed_batches, writes);
  EXPECT_NE(RootOf(*client_, ctx(), "unwritten"), root) << "the root was not published";
  const uint64_t word = ReadWord(ctx(), OnChipLockTable(*client_).WordFor(root));
  EXPECT_EQ(word >> 48, ComputeNodeId(*client_) + 1u) << "the leaf's lock was let go";

  const Status through_hint = stale->Insert(*stale_context_, Key(1799), 17);
  EXPECT_EQ(through_hint.code(), StatusCode::kDeadlineExceeded) << through_hint.ToString();
  const Status below_first = stale->Insert(*stale_context_, Key(1), 1);
  EXPECT_EQ(below_first.code(), StatusCode::kDeadlineExceeded) << below_first.ToString();
}

// Error path: a compute node dies holding a leaf's lock. Client A takes the
// leaf's lock word as A's tree would (HOCL with A's owner tag, compute node
// id + 1) and dies (KillComputeNode): its later posts fail with Unavailable
// naming it, and the word stays taken. Client B's Insert into that leaf
// ends in DeadlineExceeded after lock_timeout naming A's tag; B's reads of
// that leaf and its writes to other leaves succeed; nothing hangs.
TEST(FaultPathsDeadClientTest, ClientDiesHoldingALeafLock) {
  Watchdog watchdog;
  auto cluster = OpenCluster(false, 2);
  ASSERT_NE(cluster, nullptr);
  auto a = NewClient(*cluster), b = NewClient(*cluster);
  std::unique_ptr<Context> ca, cb;
  ASSERT_TRUE(a->NewBlockingContext(&ca).ok());
  ASSERT_TRUE(b->NewBlockingContext(&cb).ok());
  ContextImpl& a_ctx = ContextImpl::From(*ca);
  ContextImpl& b_ctx = ContextImpl::From(*cb);
  BTreeOptions options = SmallNodes();
  options.lock_timeout = std::chrono::milliseconds(200);
  std::unique_ptr<BTree> a_tree, b_tree;
  ASSERT_TRUE(BTree::Open(a.get(), "dead-holder", options, &a_tree).ok());
  ASSERT_TRUE(BTree::Open(b.get(), "dead-holder", options, &b_tree).ok());
  Model model;
  for (uint64_t i = 1; i <= 200; ++i) {
    ASSERT_TRUE(a_tree->Insert(*ca, Key(i * 10), i).ok());
    model[i * 10] = i;
  }
  const uint64_t victim = 1000, elsewhere = 20;
  const RemoteAddress leaf = LeafOf(*b, b_ctx, "dead-holder", Key(victim));
  const RemoteAddress other_leaf = LeafOf(*b, b_ctx, "dead-holder", Key(elsewhere));
  const lock::GlobalLockTable locks = OnChipLockTable(*b);
  ASSERT_NE(leaf, other_leaf);
  const RemoteAddress third_leaf = LeafOf(*b, b_ctx, "dead-holder", Key(2000));
  ASSERT_NE(locks.WordFor(leaf), locks.WordFor(other_leaf)) << "pick other keys";
  ASSERT_NE(locks.WordFor(leaf), locks.WordFor(third_leaf)) << "pick other keys";

  const uint32_t a_id = ComputeNodeId(*a);
  const uint64_t a_tag = uint64_t{a_id} + 1;
  lock::HierarchicalLock a_lock(locks, lock::HoclOptions{}, a_tag);
  auto grant = a_lock.Acquire(a_ctx, leaf);
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  Faults(*cluster).KillComputeNode(a_id);

  // A is dead: whatever it posts fails, naming it; its hold stays.
  const std::string a_died = "compute node " + std::to_string(a_id) + " died";
  uint64_t value = 0;
  const Status a_lookup = a_tree->Lookup(*ca, Key(elsewhere), &value);
  EXPECT_TRUE(a_lookup.IsUnavailable()) << a_lookup.ToString();
  EXPECT_TRUE(Contains(a_lookup, a_died)) << a_lookup.ToString();
  const Status a_release = a_lock.Release(a_ctx, *grant, {});
  EXPECT_TRUE(a_release.IsUnavailable()) << a_release.ToString();
  EXPECT_TRUE(Contains(a_release, a_died)) << a_release.ToString();
  EXPECT_GE(Faults(*cluster).counters().dead_posts, 2u);
  EXPECT_EQ(ReadWord(b_ctx, locks.WordFor(leaf)), grant->tag);

  // B's writes to that leaf give up with a clear error naming A.
  const Status blocked = b_tree->Insert(*cb, Key(victim), 7);
  ASSERT_EQ(blocked.code(), StatusCode::kDeadlineExceeded) << blocked.ToString();
  EXPECT_TRUE(Contains(blocked, "held by compute node " + std::to_string(a_tag - 1) +
                                    " (owner tag " + std::to_string(a_tag) + ") "))
      << blocked.ToString();
  const Status blocked_delete = b_tree->Delete(*cb, Key(victim));
  EXPECT_EQ(blocked_delete.code(), StatusCode::kDeadlineExceeded) << blocked_delete.ToString();
  // B's reads of it (lock-free) and its writes elsewhere go on.
  ASSERT_TRUE(b_tree->Lookup(*cb, Key(victim), &value).ok());
  EXPECT_EQ(value, model[victim]);
  ASSERT_TRUE(b_tree->Insert(*cb, Key(elsewhere), 77).ok());
  model[elsewhere] = 77;
  ASSERT_TRUE(b_tree->Update(*cb, Key(2000), 2).ok());
  model[2000] = 2;
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*b_tree, *cb, model));
  EXPECT_EQ(ReadWord(b_ctx, locks.WordFor(leaf)), grant->tag);
}

}  // namespace
}  // namespace dmidx
