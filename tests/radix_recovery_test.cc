// Recovery of a dead compute node's half-done radix-tree changes (review
// of 69bfdaa): states a dead merger or inserter leaves, staged word by
// word, with compute node 7 (never a member: its lease is absent, so a
// waiter declares it dead and recovers it after the lease timeout) as the
// dead owner. Each test asserts that survivors get through.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/radix.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "radix/layout.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"
#include "tests/radix_test_util.h"

namespace dmidx {
namespace {

using fabric::RemoteAddress;
using radix::Padded;
using radix::RadixTestPeer;
using testing::NewClient;
using testing::OpenCluster;
using testing::Watchdog;

const uint32_t kRear = radix::LeafShape(8).rear_offset();
const uint64_t kDead = radix::ClaimBy(7, 4242);

std::string K(const char* key) {
  return Padded(key, 8);
}

struct Rig {
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 1);
  std::unique_ptr<Client> client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Radix> tree;

  explicit Rig(const std::string& name, bool cache = false) {
    EXPECT_TRUE(client->NewBlockingContext(&ctx).ok());
    RadixOptions options;
    if (!cache) options.cache_bytes = 0;
    const Status status = Radix::Open(client.get(), name, options, &tree);
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
  uint64_t Read(RemoteAddress at) { return RadixTestPeer::ReadWord(*ctx, at); }
  void Write(RemoteAddress at, uint64_t word) { RadixTestPeer::WriteWord(*ctx, at, word); }
  RemoteAddress SlotAt(RemoteAddress node, uint32_t i) {
    return node + radix::kSlotsOffset + 8 * i;
  }
  // The index of `node`'s slot with partial key byte `partial` (used), or
  // -1.
  int SlotOf(RemoteAddress node, uint8_t partial) {
    for (uint32_t i = 0; i < radix::kMaxSlots; ++i) {
      const radix::Slot slot(Read(SlotAt(node, i)));
      if (slot.used() && slot.partial() == partial) return static_cast<int>(i);
    }
    return -1;
  }
  int FirstEmpty(RemoteAddress node) {
    for (uint32_t i = 0; i < radix::kMaxSlots; ++i) {
      if (radix::Slot(Read(SlotAt(node, i))).empty()) return static_cast<int>(i);
    }
    return -1;
  }
  void ExpectWalkClean() {
    for (const std::string& error : RadixTestPeer::Walk(*tree, *ctx).errors)
      ADD_FAILURE() << error;
  }
};

// A delete of "A" marked its leaf and died before its tombstone (or the
// tombstone was on another memory node and never landed); then an insert
// of "A" claimed the deleted leaf's reverse pointer (InsertIntoSlot) and
// died before its slot CAS. The next insert of "A" finds the claim,
// waits for the dead inserter (AwaitClaim) and gives the claim back: it
// gets through. (Review 1: it restarted until kMaxRestarts.)
TEST(RadixRecoveryTest, AnInsertOverADeletedLeafADeadInserterClaimedGetsThrough) {
  Watchdog watchdog(std::chrono::seconds(240));
  Rig rig("dead-insert-claim");
  const std::string a = K("Ax"), b = K("B");
  ASSERT_TRUE(rig.tree->Insert(*rig.ctx, a, 1).ok());
  ASSERT_TRUE(rig.tree->Insert(*rig.ctx, b, 2).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, a, 0);
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*rig.tree, *rig.ctx, a);
  ASSERT_FALSE(r.is_null());
  ASSERT_FALSE(leaf.is_null());
  ASSERT_EQ(rig.Read(leaf + radix::kLeafReverseOffset), r.raw());
  rig.Write(leaf + kRear, radix::kDeletedLeaf);
  rig.Write(leaf + radix::kLeafReverseOffset, kDead);
  const auto start = std::chrono::steady_clock::now();
  const Status insert = rig.tree->Insert(*rig.ctx, a, 7);
  EXPECT_TRUE(insert.ok()) << insert.ToString() << " after "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count()
                           << " ms";
  uint64_t value = 0;
  EXPECT_TRUE(rig.tree->Lookup(*rig.ctx, a, &value).ok());
  EXPECT_EQ(value, 7u);
}

// Root R: 'A' -> N (header "XY", branch byte 3): 'a', 'b', 'c' -> leaves;
// 'B' -> leaf. "AXYb" deleted: N's slot 'b' a tombstone, N keeps two live
// children.
struct MergeRig : Rig {
  RemoteAddress n, r;
  int tomb = -1, empty = -1;
  explicit MergeRig(const std::string& name, bool cache = false) : Rig(name, cache) {
    for (const char* key : {"AXYa", "AXYb", "AXYc", "B"})
      EXPECT_TRUE(tree->Insert(*ctx, K(key), 1).ok());
    EXPECT_TRUE(tree->Delete(*ctx, K("AXYb")).ok());
    r = RadixTestPeer::NodeOnPath(*tree, *ctx, K("AXYa"), 0);
    n = RadixTestPeer::NodeOnPath(*tree, *ctx, K("AXYa"), 3);
    EXPECT_FALSE(n.is_null());
    EXPECT_EQ(Read(n + radix::kReverseOffset), r.raw());
    tomb = SlotOf(n, 'b');
    empty = FirstEmpty(n);
    EXPECT_GE(tomb, 0);
    EXPECT_GE(empty, 0);
    EXPECT_TRUE(radix::Slot(Read(SlotAt(n, static_cast<uint32_t>(tomb)))).tombstone());
  }
  // A merge of N by dead compute node 7 claimed N and posted its freeze
  // batch, whose header CAS lost (a type switch, or a trim, changed N's
  // header since the merge read it) while its slot CASes landed; the
  // merger died before its rollback: N claimed, its tombstone and first
  // empty slot frozen, its header live.
  void StagePartialFreeze() {
    Write(n + radix::kReverseOffset, kDead);
    const auto t = static_cast<uint32_t>(tomb);
    const auto e = static_cast<uint32_t>(empty);
    Write(SlotAt(n, t), radix::Slot::Frozen(radix::Slot(Read(SlotAt(n, t)))).word());
    Write(SlotAt(n, e), radix::Slot::Frozen(radix::Slot()).word());
  }
};

// Sanity: the same state met first by a descent through the frozen
// tombstone is undone whole (AwaitMerge, UndoMerge).
TEST(RadixRecoveryTest, APartialFreezeMetThroughAFrozenSlotIsUndone) {
  Watchdog watchdog(std::chrono::seconds(240));
  MergeRig rig("partial-freeze-slot");
  rig.StagePartialFreeze();
  const Status insert = rig.tree->Insert(*rig.ctx, K("AXYb"), 5);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  EXPECT_TRUE(rig.tree->Insert(*rig.ctx, K("AXYd"), 6).ok());
  rig.ExpectWalkClean();
}

// The same, with the compute node's cache holding N (warmed by a lookup
// under it): the descent for "AXYb" starts at N itself (no live slot for
// 'b' in the cached image) and meets the frozen slot with no slot address
// to wait by: it drops N's entry and looks afresh, and that descent undoes
// the merge. (Review 1: it went through the cache again, for good.)
TEST(RadixRecoveryTest, APartialFreezeMetThroughTheCacheIsUndone) {
  Watchdog watchdog(std::chrono::seconds(240));
  MergeRig rig("partial-freeze-cached", /*cache=*/true);
  uint64_t value = 0;
  ASSERT_TRUE(rig.tree->Lookup(*rig.ctx, K("AXYa"), &value).ok());
  rig.StagePartialFreeze();
  const Status insert = rig.tree->Insert(*rig.ctx, K("AXYb"), 5);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  rig.ExpectWalkClean();
}

// The partial freeze met by an insert of a new branch byte under N: the
// descent lands at N (no slot for 'd'; the header is live), and
// InsertIntoNode, finding a frozen slot, waits for the dead merger
// (AwaitMerge), which undoes the merge. (Review 1: it restarted until
// kMaxRestarts.)
TEST(RadixRecoveryTest, AnInsertIntoANodeADeadMergerPartlyFrozeGetsThrough) {
  Watchdog watchdog(std::chrono::seconds(240));
  MergeRig rig("partial-freeze-insert");
  rig.StagePartialFreeze();
  const Status insert = rig.tree->Insert(*rig.ctx, K("AXYd"), 6);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  rig.ExpectWalkClean();
}

// A merge's claim and whole freeze of node `n`, staged by hand from its
// live words: its reverse pointer claimed, its header frozen, its first
// tombstone and its first empty slot frozen (found() when it has both).
struct StagedFreeze {
  StagedFreeze(Context& context, RemoteAddress node) : b(context), n(node) {
    for (uint32_t i = 0; i < radix::kMaxSlots; ++i) {
      const radix::Slot slot(RadixTestPeer::ReadWord(b, slot_at(i)));
      if (tomb == kNone && slot.tombstone()) tomb = i;
      if (empty == kNone && slot.empty()) empty = i;
    }
    live_header = RadixTestPeer::ReadWord(b, n + radix::kHeaderOffset);
    if (found()) tomb_word = RadixTestPeer::ReadWord(b, slot_at(tomb));
  }
  bool found() const { return tomb != kNone && empty != kNone; }
  RemoteAddress slot_at(uint32_t i) const { return n + radix::kSlotsOffset + 8 * i; }
  void Freeze(uint64_t claim) const {
    radix::Header frozen = radix::Header::Unpack(live_header);
    frozen.type = radix::kFrozenType | frozen.type;
    RadixTestPeer::WriteWord(b, n + radix::kReverseOffset, claim);
    RadixTestPeer::WriteWord(b, n + radix::kHeaderOffset, frozen.Pack());
    RadixTestPeer::WriteWord(b, slot_at(tomb), radix::Slot::Frozen(radix::Slot(tomb_word)).word());
    RadixTestPeer::WriteWord(b, slot_at(empty), radix::Slot::Frozen(radix::Slot()).word());
  }

  static constexpr uint32_t kNone = ~uint32_t{0};
  Context& b;
  const RemoteAddress n;
  uint32_t tomb = kNone, empty = kNone;
  uint64_t live_header = 0, tomb_word = 0;
};

// The partial freeze met first by a header split of N (an insert of
// "AXZ"): its reverse-pointer CAS finds the dead merger's claim, and
// AwaitClaim undoes the merge whole (UndoMerge), frozen slots included, so
// an insert of "AXYb" (the frozen tombstone's byte) gets through.
// (Review 1: AwaitClaim gave only the claim back and left the slots
// frozen for good.)
TEST(RadixRecoveryTest, AClaimGivenBackByAwaitClaimLeavesNoFrozenSlotBehind) {
  Watchdog watchdog(std::chrono::seconds(240));
  MergeRig rig("partial-freeze-claim");
  rig.StagePartialFreeze();
  const Status split = rig.tree->Insert(*rig.ctx, K("AXZ"), 4);
  ASSERT_TRUE(split.ok()) << split.ToString();
  EXPECT_EQ(radix::kClaimedBit & rig.Read(rig.n + radix::kReverseOffset), 0u)
      << "the header split gave the claim back";
  bool frozen = false;
  for (uint32_t i = 0; i < radix::kMaxSlots; ++i)
    frozen = frozen || radix::Slot(rig.Read(rig.SlotAt(rig.n, i))).frozen();
  EXPECT_FALSE(frozen) << "N's claim was given back with frozen slots left on it";
  const Status insert = rig.tree->Insert(*rig.ctx, K("AXYb"), 5);
  EXPECT_TRUE(insert.ok()) << insert.ToString();
  rig.ExpectWalkClean();
}

// The dead merger's freeze landed whole (N claimed, its header
// kFrozenType | type, its tombstone and first empty slot frozen) and it
// died before its rollback. Survivor S2 (this test's client A) meets N
// frozen and runs UndoMerge: it READs N, and is slow before its CASes.
// Survivor S1 (client B) undoes the merge whole; then a live merge of N
// (by client B's compute node) claims N and freezes it again, to the very
// same header and slot words. S2's undo must not thaw that freeze: it
// takes the dead merge's claim over first, which fails now. (Review 1:
// without the takeover S2's CASes landed on the live merge's freeze, and
// the live merge went on to swing R's slot away from a node open to
// inserts again.)
TEST(RadixRecoveryTest, AStaleUndoNeverThawsALaterMergesFreeze) {
  Watchdog watchdog(std::chrono::seconds(240));
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 1);
  std::unique_ptr<Client> client_a = testing::TwoCoroutineClient(*cluster);
  std::unique_ptr<Client> client_b = NewClient(*cluster);
  std::unique_ptr<Context> ctx_b;
  ASSERT_TRUE(client_b->NewBlockingContext(&ctx_b).ok());
  RadixOptions options;
  options.cache_bytes = 0;
  std::unique_ptr<Radix> tree_a, tree_b;
  ASSERT_TRUE(Radix::Open(client_a.get(), "stale-undo", options, &tree_a).ok());
  ASSERT_TRUE(Radix::Open(client_b.get(), "stale-undo", options, &tree_b).ok());
  testing::PrepareRedoSlots(*client_a);
  Context& b = *ctx_b;
  for (const char* key : {"AXYa", "AXYb", "AXYc", "B"})
    ASSERT_TRUE(tree_b->Insert(b, K(key), 1).ok());
  ASSERT_TRUE(tree_b->Delete(b, K("AXYb")).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*tree_b, b, K("AXYa"), 0);
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*tree_b, b, K("AXYa"), 3);
  ASSERT_FALSE(n.is_null());
  ASSERT_EQ(RadixTestPeer::ReadWord(b, n + radix::kReverseOffset), r.raw());
  const StagedFreeze staged(b, n);
  ASSERT_TRUE(staged.found()) << "N has no tombstone or no empty slot";
  const uint64_t live_header = staged.live_header;
  // A merge's claim and whole freeze of N (`claim` names the merger).
  auto freeze = [&](uint64_t claim) { staged.Freeze(claim); };
  uint64_t value = 0;
  // Compute node A recovers dead node 7 once (undoing its merge), so that
  // its next wait on 7 needs no lease reading: then the dead merge again.
  freeze(kDead);
  testing::Injection none;
  ASSERT_TRUE(testing::RunWithInjection(
                  *client_a,
                  [&](runtime::ContextImpl& c) { return tree_a->Lookup(c, K("AXYa"), &value); },
                  [](const Stats&) { return false; }, [] {}, &none)
                  .ok());
  ASSERT_EQ(RadixTestPeer::ReadWord(b, n + radix::kHeaderOffset), live_header);
  freeze(kDead);
  // A live merger: compute node B's (its change never ends here, so A's
  // lookup waits for it until lock_timeout).
  const uint64_t merger8 = radix::ClaimBy(runtime::ContextImpl::From(b).compute_node().id(), 1);
  testing::Injection injection;
  const Status lookup = testing::RunWithInjection(
      *client_a, [&](runtime::ContextImpl& c) { return tree_a->Lookup(c, K("AXYa"), &value); },
      // The descent's 3 READs, AwaitMerge's two looks (3 READs each),
      // UndoMerge's READ of N.
      [](const Stats& so_far) { return so_far.reads >= 10; },
      [&] {
        // S1: B's descent meets N frozen and undoes the merge whole.
        uint64_t v = 0;
        ASSERT_TRUE(tree_b->Lookup(b, K("AXYc"), &v).ok());
        ASSERT_EQ(RadixTestPeer::ReadWord(b, n + radix::kHeaderOffset), live_header);
        ASSERT_EQ(RadixTestPeer::ReadWord(b, n + radix::kReverseOffset), r.raw());
        // A live merge of compute node 8 claims and freezes N again.
        freeze(merger8);
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 10u);
  EXPECT_EQ(injection.at.compare_swaps, 0u) << "fired before UndoMerge's first CAS";
  EXPECT_TRUE(lookup.ok() || lookup.code() == StatusCode::kDeadlineExceeded) << lookup.ToString();
  EXPECT_EQ(RadixTestPeer::ReadWord(b, n + radix::kReverseOffset), merger8);
  EXPECT_TRUE(radix::Header::Unpack(RadixTestPeer::ReadWord(b, n + radix::kHeaderOffset)).deleted())
      << "merge 8's frozen header was thawed by the stale undo";
  EXPECT_TRUE(radix::Slot(RadixTestPeer::ReadWord(b, staged.slot_at(staged.tomb))).frozen())
      << "merge 8's frozen tombstone was thawed by the stale undo";
  EXPECT_TRUE(radix::Slot(RadixTestPeer::ReadWord(b, staged.slot_at(staged.empty))).frozen())
      << "merge 8's frozen empty slot was thawed by the stale undo";
}

// ---- Review 2 (69bfdaa..4c5ba75) ----

// The walk after deaths (RadixTestPeer::Walk with dead compute nodes)
// passes a reverse pointer naming a dead compute node's unpublished split
// node only when that node leads to the object and is reachable from
// nowhere. Here leaf "B" (under R) names N, a reachable node whose maker
// word names dead compute node 7: an error. (Review 2: any node a dead
// node made passed.)
TEST(RadixRecoveryTest, TheWalkAfterDeathsFlagsAReversePointerNamingAPublishedNode) {
  Rig rig("walk-maker");
  for (const char* key : {"AXYa", "AXYc", "B"})
    ASSERT_TRUE(rig.tree->Insert(*rig.ctx, K(key), 1).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYa"), 0);
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYa"), 3);
  const RemoteAddress b = RadixTestPeer::LeafOf(*rig.tree, *rig.ctx, K("B"));
  ASSERT_FALSE(n.is_null());
  ASSERT_EQ(rig.Read(b + radix::kLeafReverseOffset), r.raw());
  rig.Write(n + radix::kMakerOffset, kDead);
  rig.Write(b + radix::kLeafReverseOffset, n.raw());
  const uint32_t dead[] = {7};
  const radix::TreeShape shape = RadixTestPeer::Walk(*rig.tree, *rig.ctx, dead);
  EXPECT_FALSE(shape.errors.empty())
      << "a leaf whose reverse pointer names a reachable node it is not under passed the walk ("
      << shape.dead_leftovers << " dead leftovers counted)";
}

// A leaf split by dead compute node 7 moved leaf "AXYa"'s reverse pointer
// to its new node X (whose maker word names 7) and died before its slot
// CAS. An out-of-place update of "AXYa" finds X where it expects N, waits
// for 7 (AwaitClaim reads X's maker word) and gives the reverse pointer
// back: it gets through. X here is a node of another subtree standing in
// for the unpublished one. (Review 2: the update waited only for a claim
// and restarted until kMaxRestarts.)
TEST(RadixRecoveryTest, AnOutOfPlaceUpdateOfALeafADeadSplitMovedGetsThrough) {
  Watchdog watchdog(std::chrono::seconds(240));
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 1);
  std::unique_ptr<Client> client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  RadixOptions options;
  options.cache_bytes = 0;
  options.in_place_leaves = false;
  std::unique_ptr<Radix> tree;
  ASSERT_TRUE(Radix::Open(client.get(), "dead-split-oop", options, &tree).ok());
  for (const char* key : {"AXYa", "AXYc", "CQa", "CQb"})
    ASSERT_TRUE(tree->Insert(*ctx, K(key), 1).ok());
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*tree, *ctx, K("AXYa"), 3);
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*tree, *ctx, K("CQa"), 2);
  const RemoteAddress leaf = RadixTestPeer::LeafOf(*tree, *ctx, K("AXYa"));
  ASSERT_FALSE(n.is_null());
  ASSERT_FALSE(x.is_null());
  ASSERT_EQ(RadixTestPeer::ReadWord(*ctx, leaf + radix::kLeafReverseOffset), n.raw());
  RadixTestPeer::WriteWord(*ctx, x + radix::kMakerOffset, kDead);
  RadixTestPeer::WriteWord(*ctx, leaf + radix::kLeafReverseOffset, x.raw());
  const Status update = tree->Update(*ctx, K("AXYa"), 9);
  EXPECT_TRUE(update.ok()) << update.ToString();
  uint64_t value = 0;
  EXPECT_TRUE(tree->Lookup(*ctx, K("AXYa"), &value).ok());
  EXPECT_EQ(value, 9u);
  // The old leaf keeps the update's own claim for good (replaced), not X.
  EXPECT_NE(RadixTestPeer::ReadWord(*ctx, leaf + radix::kLeafReverseOffset), x.raw());
}

// No death: a delete whose tombstone lands in a node a merge froze
// meanwhile finds the leaf again (Unlink's second descent), and each try
// of its CAS there READs the node holding the slot, going again while that
// node was merged away, as the first try does. (Review 2: the second try
// had no READ, and a merge between the descent and the CAS left the
// deleted leaf in a live slot; merges seed 11184.)
// Tree: R: 'A' -> Q (branch byte 1): 'X' -> Z (header "Y", branch byte 3:
// "AXYa", "AXYc"), 'Q' -> "AQ"; 'B' -> "B". A deletes "AXYa"; after its
// lock, B deletes "AXYc" (Z merged away, "AXYa"'s leaf moves up into Q);
// A's tombstone lands in Z, its READ shows Z frozen, and it descends again
// to Q; after that READ, B deletes "AQ" (Q merged away, the leaf moves up
// into R); A's CAS lands in Q.
TEST(RadixRecoveryTest, ADeletesSecondTombstoneNeverLandsInANodeMergedAway) {
  Watchdog watchdog(std::chrono::seconds(240));
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 1);
  std::unique_ptr<Client> client_a = testing::TwoCoroutineClient(*cluster);
  std::unique_ptr<Client> client_b = NewClient(*cluster);
  std::unique_ptr<Context> ctx_b;
  ASSERT_TRUE(client_b->NewBlockingContext(&ctx_b).ok());
  RadixOptions options;
  options.cache_bytes = 0;
  std::unique_ptr<Radix> tree_a, tree_b;
  ASSERT_TRUE(Radix::Open(client_a.get(), "second-tombstone", options, &tree_a).ok());
  ASSERT_TRUE(Radix::Open(client_b.get(), "second-tombstone", options, &tree_b).ok());
  testing::PrepareRedoSlots(*client_a);
  Context& b = *ctx_b;
  for (const char* key : {"AXYa", "AXYc", "AQ", "B"})
    ASSERT_TRUE(tree_b->Insert(b, K(key), 1).ok());
  const RemoteAddress q = RadixTestPeer::NodeOnPath(*tree_b, b, K("AXYa"), 1);
  const RemoteAddress z = RadixTestPeer::NodeOnPath(*tree_b, b, K("AXYa"), 3);
  ASSERT_FALSE(q.is_null());
  ASSERT_FALSE(z.is_null());
  std::vector<testing::Moment> moments(2);
  // After A's lock batch (root slot, R, Q, Z, then CAS + leaf READ).
  moments[0].due = [](const Stats& s) { return s.reads >= 5; };
  moments[0].inject = [&] { ASSERT_TRUE(tree_b->Delete(b, K("AXYc")).ok()); };
  // After the second descent's READ of Q (the tombstone batch's READ of
  // Z, then root slot, R, Q).
  moments[1].due = [](const Stats& s) { return s.reads >= 9; };
  moments[1].inject = [&] { ASSERT_TRUE(tree_b->Delete(b, K("AQ")).ok()); };
  const Status del = testing::RunWithInjections(
      *client_a, [&](runtime::ContextImpl& c) { return tree_a->Delete(c, K("AXYa")); }, &moments);
  ASSERT_TRUE(del.ok()) << del.ToString();
  ASSERT_TRUE(moments[0].seen.fired);
  ASSERT_TRUE(moments[1].seen.fired);
  EXPECT_EQ(moments[0].seen.at.reads, 5u);
  EXPECT_EQ(moments[0].seen.at.compare_swaps, 1u) << "fired after the lock batch";
  EXPECT_EQ(moments[1].seen.at.reads, 9u);
  EXPECT_EQ(moments[1].seen.at.compare_swaps, 2u) << "fired before the second tombstone CAS";
  EXPECT_TRUE(radix::Header::Unpack(RadixTestPeer::ReadWord(b, z + radix::kHeaderOffset)).deleted())
      << "Z merged away";
  EXPECT_TRUE(radix::Header::Unpack(RadixTestPeer::ReadWord(b, q + radix::kHeaderOffset)).deleted())
      << "Q merged away";
  for (const std::string& error : RadixTestPeer::Walk(*tree_b, b).errors)
    ADD_FAILURE() << error;
}

// A dead merge whose parent-slot swing landed left the child it moved up
// claimed, with its merged header; a header split of the child meets the
// claim (AwaitClaim -> UndoMerge of the child), which must keep the
// merged header (the child is R's now).
TEST(RadixRecoveryTest, AChildAMergeMovedUpKeepsItsMergedHeaderWhenItsClaimIsUndone) {
  Watchdog watchdog(std::chrono::seconds(240));
  Rig rig("moved-up-child");
  // ("AXYb" is left behind in N, as if deleted before the merge.)
  for (const char* key : {"AXYaP", "AXYaQ", "AXYb", "B"})
    ASSERT_TRUE(rig.tree->Insert(*rig.ctx, K(key), 1).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYaP"), 0);
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYaP"), 3);
  const RemoteAddress c = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYaP"), 4);
  ASSERT_FALSE(n.is_null());
  ASSERT_FALSE(c.is_null());
  const radix::Header n_header = radix::Header::Unpack(rig.Read(n + radix::kHeaderOffset));
  const radix::Header c_header = radix::Header::Unpack(rig.Read(c + radix::kHeaderOffset));
  ASSERT_EQ(n_header.depth, 1);
  ASSERT_EQ(c_header.depth, 4);
  ASSERT_EQ(c_header.count, 0);
  const int r_slot = rig.SlotOf(r, 'A');
  ASSERT_GE(r_slot, 0);
  // The dead merge of N, swing landed: N frozen and claimed, C claimed
  // with its merged header, R's slot leading to C.
  rig.Write(n + radix::kReverseOffset, kDead);
  radix::Header frozen = n_header;
  frozen.type = radix::kFrozenType | n_header.type;
  rig.Write(n + radix::kHeaderOffset, frozen.Pack());
  rig.Write(c + radix::kReverseOffset, kDead);
  radix::Header merged = c_header;
  merged.depth = 1;
  merged.count = 3;
  merged.partial = {'X', 'Y', 'a', 0, 0, 0};
  rig.Write(c + radix::kHeaderOffset, merged.Pack());
  rig.Write(rig.SlotAt(r, static_cast<uint32_t>(r_slot)),
            radix::Slot::ToNode('A', c_header.type, c).word());
  const Status insert = rig.tree->Insert(*rig.ctx, K("AXZ"), 2);
  ASSERT_TRUE(insert.ok()) << insert.ToString();
  uint64_t value = 0;
  for (const char* key : {"AXYaP", "AXYaQ", "AXZ", "B"})
    EXPECT_TRUE(rig.tree->Lookup(*rig.ctx, K(key), &value).ok()) << key;
  rig.ExpectWalkClean();
}

}  // namespace

// A survivor that undoes a dead merge and dies half-way. Root R: 'A' -> N
// (header "XY", branch byte 3): 'a' -> C (depth 4, no header bytes,
// branch byte 4: "AXYaP", "AXYaQ"), 'b' a tombstone ("AXYb" deleted, its
// merge of N never ran); 'B' -> leaf. A merge of N by compute node 6
// claimed N, froze it, claimed C and merged C's header (depth 1, "XYa"),
// and died before R's slot. Survivor 7 met N frozen and ran UndoMerge: it
// took N's claim over and died. The next survivor's UndoMerge (7's claim)
// gives back N, and C keeps 6's claim and its merged header; the descent
// that meets C's untrimmed header under a claim waits for 6 and gives C
// back to N (AwaitClaim), and the next trims it; the deletes after merge
// what they leave with one child. (Review 2: nothing met C's claim.)
TEST(RadixRecoveryTest, AnUndoerThatDiesAfterItsTakeoverLeavesNoChildClaimed) {
  Watchdog watchdog(std::chrono::seconds(240));
  Rig rig("undoer-dies");
  const uint64_t merger = radix::ClaimBy(6, 1);  // dead too: never a member
  for (const char* key : {"AXYaP", "AXYaQ", "AXYb", "B"})
    ASSERT_TRUE(rig.tree->Insert(*rig.ctx, K(key), 1).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYaP"), 0);
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYaP"), 3);
  const RemoteAddress c = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYaP"), 4);
  const RemoteAddress b_leaf = RadixTestPeer::LeafOf(*rig.tree, *rig.ctx, K("AXYb"));
  ASSERT_FALSE(n.is_null());
  ASSERT_FALSE(c.is_null());
  ASSERT_EQ(rig.Read(n + radix::kReverseOffset), r.raw());
  ASSERT_EQ(rig.Read(c + radix::kReverseOffset), n.raw());
  const radix::Header n_header = radix::Header::Unpack(rig.Read(n + radix::kHeaderOffset));
  const radix::Header c_header = radix::Header::Unpack(rig.Read(c + radix::kHeaderOffset));
  ASSERT_EQ(n_header.depth, 1);
  ASSERT_EQ(n_header.count, 2);
  ASSERT_EQ(c_header.depth, 4);
  ASSERT_EQ(c_header.count, 0);
  // "AXYb" deleted, its tombstone landed, its merge of N never ran.
  const int tomb = rig.SlotOf(n, 'b');
  ASSERT_GE(tomb, 0);
  rig.Write(b_leaf + kRear, radix::kDeletedLeaf);
  rig.Write(rig.SlotAt(n, static_cast<uint32_t>(tomb)), radix::Slot::Tombstone('b').word());
  const int empty = rig.FirstEmpty(n);
  ASSERT_GE(empty, 0);
  // Merge 6: claim, whole freeze, the child's claim and merged header.
  rig.Write(n + radix::kReverseOffset, merger);
  radix::Header frozen = n_header;
  frozen.type = radix::kFrozenType | n_header.type;
  rig.Write(n + radix::kHeaderOffset, frozen.Pack());
  rig.Write(rig.SlotAt(n, static_cast<uint32_t>(tomb)),
            radix::Slot::Frozen(radix::Slot::Tombstone('b')).word());
  rig.Write(rig.SlotAt(n, static_cast<uint32_t>(empty)), radix::Slot::Frozen(radix::Slot()).word());
  rig.Write(c + radix::kReverseOffset, merger);
  radix::Header merged = c_header;
  merged.depth = 1;
  merged.count = 3;
  merged.partial = {'X', 'Y', 'a', 0, 0, 0};
  rig.Write(c + radix::kHeaderOffset, merged.Pack());
  // Survivor 7's takeover, then its death.
  rig.Write(n + radix::kReverseOffset, kDead);

  // The next survivor meets N frozen, waits for 7, undoes the merge.
  uint64_t value = 0;
  const Status lookup = rig.tree->Lookup(*rig.ctx, K("AXYaP"), &value);
  ASSERT_TRUE(lookup.ok()) << lookup.ToString();
  EXPECT_EQ(rig.Read(n + radix::kReverseOffset), r.raw());
  EXPECT_FALSE(radix::Header::Unpack(rig.Read(n + radix::kHeaderOffset)).deleted());
  EXPECT_EQ(rig.Read(c + radix::kReverseOffset), n.raw())
      << "C keeps dead merger 6's claim under a live N";
  // C's merged header, under N again, is an untrimmed one: the next
  // descent through N trims it (HelpTrim).
  ASSERT_TRUE(rig.tree->Lookup(*rig.ctx, K("AXYaP"), &value).ok());
  EXPECT_EQ(rig.Read(c + radix::kHeaderOffset), c_header.Pack())
      << "C keeps the header merge 6 gave it";
  // Deletes under C and N: each should merge what it leaves with one
  // child, as in a tree nobody died in (R: 'A' -> leaf "AXYaQ").
  ASSERT_TRUE(rig.tree->Delete(*rig.ctx, K("AXYaP")).ok());
  const radix::TreeShape shape = RadixTestPeer::Walk(*rig.tree, *rig.ctx);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  EXPECT_EQ(shape.single_child_nodes, 0u);
  EXPECT_EQ(shape.untrimmed_headers, 0u);
  EXPECT_TRUE(rig.tree->Lookup(*rig.ctx, K("AXYaQ"), &value).ok());
}

// A header split's trim (TrimHeader) by dead compute node 7 claimed the
// split node's child C and died before its header CAS: C keeps its
// untrimmed header ("XY" from depth 1, under S whose branch byte is 2) and
// 7's claim. A descent that meets the untrimmed header under a claim, and
// a merge whose claim of C finds it, wait for 7 and give C back to S
// (AwaitClaim); the header is trimmed and the merges go through.
// (Review 2: HelpTrim stopped at the claim and merges gave up, for good.)
TEST(RadixRecoveryTest, AClaimADeadTrimmerLeftIsMetByMergesAndTrims) {
  Watchdog watchdog(std::chrono::seconds(240));
  Rig rig("dead-trimmer");
  for (const char* key : {"AXYP", "AXYQ", "B", "AXZ"})
    ASSERT_TRUE(rig.tree->Insert(*rig.ctx, K(key), 1).ok());
  const RemoteAddress split = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYP"), 2);
  const RemoteAddress c = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYP"), 3);
  ASSERT_FALSE(split.is_null());
  ASSERT_FALSE(c.is_null());
  ASSERT_EQ(rig.Read(c + radix::kReverseOffset), split.raw());
  const radix::Header trimmed = radix::Header::Unpack(rig.Read(c + radix::kHeaderOffset));
  ASSERT_EQ(trimmed.depth, 3);
  ASSERT_EQ(trimmed.count, 0);
  radix::Header untrimmed = trimmed;
  untrimmed.depth = 1;
  untrimmed.count = 2;
  untrimmed.partial = {'X', 'Y', 0, 0, 0, 0};
  rig.Write(c + radix::kHeaderOffset, untrimmed.Pack());
  rig.Write(c + radix::kReverseOffset, kDead);
  // Deletes that leave S, then C, with one child: as in a tree nobody died
  // in, they end with R: 'A' -> "AXYQ".
  ASSERT_TRUE(rig.tree->Delete(*rig.ctx, K("AXZ")).ok());
  ASSERT_TRUE(rig.tree->Delete(*rig.ctx, K("AXYP")).ok());
  uint64_t value = 0;
  EXPECT_TRUE(rig.tree->Lookup(*rig.ctx, K("AXYQ"), &value).ok());
  const radix::TreeShape shape = RadixTestPeer::Walk(*rig.tree, *rig.ctx);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  EXPECT_EQ(shape.single_child_nodes, 0u);
  EXPECT_EQ(shape.untrimmed_headers, 0u);
}

// Two memory nodes, N (header "XYQ": "AXYQa", "AXYQc") under R on the
// other one, and "B": client A's insert of "AXZa" splits N's header, its
// round trip 2 batch to N's memory node (the reverse CAS) fails, and
// client B's `race` runs once round trip 2 is posted (R's slot -> X
// landed), before PublishSplit's settling READ.
struct SplitRace {
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 2);
  std::unique_ptr<Client> client_a = testing::TwoCoroutineClient(*cluster);
  std::unique_ptr<Client> client_b = NewClient(*cluster);
  std::unique_ptr<Context> ctx_b;
  std::unique_ptr<Radix> tree_a, tree_b;
  RemoteAddress r, n;
  uint64_t n_header = 0;
  Status insert;

  void Stage(const std::string& name) {
    ASSERT_TRUE(client_b->NewBlockingContext(&ctx_b).ok());
    RadixOptions options;
    options.cache_bytes = 0;
    options.lock_timeout = std::chrono::milliseconds(300);
    ASSERT_TRUE(Radix::Open(client_a.get(), name, options, &tree_a).ok());
    ASSERT_TRUE(Radix::Open(client_b.get(), name, options, &tree_b).ok());
    testing::PrepareRedoSlots(*client_a);
    for (const char* key : {"AXYQa", "AXYQc", "B"})
      ASSERT_TRUE(tree_b->Insert(*ctx_b, K(key), 1).ok());
    r = RadixTestPeer::NodeOnPath(*tree_b, *ctx_b, K("AXYQa"), 0);
    n = RadixTestPeer::NodeOnPath(*tree_b, *ctx_b, K("AXYQa"), 4);
    ASSERT_FALSE(r.is_null());
    ASSERT_FALSE(n.is_null());
    ASSERT_NE(r.node(), n.node()) << "R and N on one memory node: stage it otherwise";
    ASSERT_EQ(RadixTestPeer::ReadWord(*ctx_b, n + radix::kReverseOffset), r.raw());
    n_header = RadixTestPeer::ReadWord(*ctx_b, n + radix::kHeaderOffset);
  }
  void Run(const std::function<void()>& race) {
    std::vector<testing::Moment> moments(2);
    // After round trip 1's claim CAS (the descent READs root slot, R, N).
    moments[0].due = [](const Stats& s) { return s.compare_swaps >= 1; };
    moments[0].inject = [&] {
      ASSERT_TRUE(testing::Faults(*cluster).FailNextBatches(n.node(), 1).ok());
    };
    // Both batches of round trip 2 posted (B's polls apply them).
    moments[1].due = [](const Stats& s) { return s.compare_swaps >= 3; };
    moments[1].inject = race;
    insert = testing::RunWithInjections(
        *client_a, [&](runtime::ContextImpl& c) { return tree_a->Insert(c, K("AXZa"), 5); },
        &moments);
    ASSERT_TRUE(moments[0].seen.fired);
    ASSERT_TRUE(moments[1].seen.fired);
    EXPECT_EQ(moments[1].seen.at.compare_swaps, 3u);
    EXPECT_EQ(testing::Faults(*cluster).counters().failed_batches, 1u) << "nothing failed";
  }
  // N names X, the new node on "AXZa"'s path at `branch`.
  void ExpectNNamesX(uint32_t branch) {
    const RemoteAddress x = RadixTestPeer::NodeOnPath(*tree_b, *ctx_b, K("AXZa"), branch);
    ASSERT_FALSE(x.is_null()) << "the split was not published: nothing staged";
    uint64_t value = 0;
    EXPECT_TRUE(tree_b->Lookup(*ctx_b, K("AXZa"), &value).ok()) << insert.ToString();
    EXPECT_EQ(RadixTestPeer::ReadWord(*ctx_b, n + radix::kReverseOffset), x.raw())
        << "N's reverse pointer was left at the live splitter's claim (insert returned "
        << insert.ToString() << ")";
  }
};

// A header split of N (under R, on another memory node than R) whose round
// trip 2 batch on N's node fails (the reverse CAS claim -> X never lands)
// while the slot CAS on R's node lands. PublishSplit reads the slot to
// settle it; before that READ, another compute node's insert fills the
// new node X and raises its type, and with it the type in R's slot. The
// slot leads to X, whatever its type: landed, and N's reverse pointer is
// moved to X. (Review 3: only the exact slot word counted as landed, and
// the live splitter's claim stayed on N for good.)
// Tree: R: 'A' -> N (header "XYQ", branch byte 4: "AXYQa", "AXYQc"),
// 'B' -> "B". A inserts "AXZa" (N's header split at byte 2); B inserts
// "AXa", "AXb", "AXc" under X (the third a type switch of X).
TEST(RadixRecoveryTest, AHeaderSplitWhoseReverseCasFailsWhileItsSlotTypeIsRaisedLeavesNoClaim) {
  Watchdog watchdog(std::chrono::seconds(240));
  SplitRace race;
  ASSERT_NO_FATAL_FAILURE(race.Stage("split-type-raised"));
  Context& b = *race.ctx_b;
  // X fills up and its type is raised, in R's slot too.
  ASSERT_NO_FATAL_FAILURE(race.Run([&] {
    for (const char* key : {"AXa", "AXb", "AXc"})
      ASSERT_TRUE(race.tree_b->Insert(b, K(key), 2).ok()) << key;
  }));
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*race.tree_b, b, K("AXZa"), 2);
  ASSERT_FALSE(x.is_null());
  EXPECT_GT(radix::Header::Unpack(RadixTestPeer::ReadWord(b, x + radix::kHeaderOffset)).type, 1)
      << "X's type was not raised: nothing staged";
  ASSERT_NO_FATAL_FAILURE(race.ExpectNNamesX(2));
  // A header split of N through X gets through, and N is trimmed.
  const Status split = race.tree_b->Insert(b, K("AXYRa"), 3);
  EXPECT_TRUE(split.ok()) << split.ToString();
  EXPECT_NE(RadixTestPeer::ReadWord(b, race.n + radix::kHeaderOffset), race.n_header)
      << "N's header was never trimmed";
  for (const std::string& error : RadixTestPeer::Walk(*race.tree_b, b).errors)
    ADD_FAILURE() << error;
}

// A header split of N by dead compute node 7, N and R on two memory nodes:
// round trip 2's slot CAS (R's node) landed, its reverse CAS claim -> X
// (N's node) did not, and it died before its trim. The next descent
// through X meets N's untrimmed header under the claim, waits for 7 and
// gives N to X (AwaitClaim), and a descent after it trims N (review 3).
// Staged from a split that completed: N's header untrimmed again, its
// reverse pointer the dead claim, X's maker word naming 7.
TEST(RadixRecoveryTest, ADeadHeaderSplitsClaimOnAPublishedNodeIsEndedByTheNextDescent) {
  Watchdog watchdog(std::chrono::seconds(240));
  Rig rig("dead-split-claim");
  for (const char* key : {"AXYQa", "AXYQc", "B"})
    ASSERT_TRUE(rig.tree->Insert(*rig.ctx, K(key), 1).ok());
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYQa"), 4);
  ASSERT_FALSE(n.is_null());
  const uint64_t untrimmed = rig.Read(n + radix::kHeaderOffset);
  ASSERT_TRUE(rig.tree->Insert(*rig.ctx, K("AXZa"), 2).ok());
  const RemoteAddress x = RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXZa"), 2);
  ASSERT_FALSE(x.is_null());
  ASSERT_EQ(RadixTestPeer::NodeOnPath(*rig.tree, *rig.ctx, K("AXYQa"), 4), n);
  ASSERT_EQ(rig.Read(n + radix::kReverseOffset), x.raw());
  rig.Write(x + radix::kMakerOffset, kDead);
  rig.Write(n + radix::kReverseOffset, kDead);
  rig.Write(n + radix::kHeaderOffset, untrimmed);
  // Descents through X to N, then a delete that leaves X with N alone.
  uint64_t value = 0;
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(rig.tree->Lookup(*rig.ctx, K("AXYQa"), &value).ok());
  ASSERT_TRUE(rig.tree->Delete(*rig.ctx, K("AXZa")).ok());
  ASSERT_TRUE(rig.tree->Lookup(*rig.ctx, K("AXYQc"), &value).ok());
  const uint32_t dead[] = {7};
  const radix::TreeShape shape = RadixTestPeer::Walk(*rig.tree, *rig.ctx, dead);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  EXPECT_EQ(shape.untrimmed_headers, 0u) << "N's header was never trimmed";
  EXPECT_EQ(shape.single_child_nodes, 0u) << "X was never merged away";
  EXPECT_EQ(shape.dead_leftovers, 0u) << "N keeps the dead splitter's claim";
}

// As the last, but the racing change splits the new node X's header (an
// insert of "AWa": R's slot -> S2 -> X), not its type: the slot leads
// neither to X nor to N, and still the split landed (nothing but this
// split moves N while it holds N's claim): N names X, and lookups of N's
// keys go through. (Review 4: PublishSplit took it for "N was deleted
// meanwhile" and left its live claim on N for good, and every descent
// through X waited on it until lock_timeout and failed.)
TEST(RadixRecoveryTest, AHeaderSplitWhoseReverseCasFailsWhileItsNewNodeIsSplitLeavesNoClaim) {
  Watchdog watchdog(std::chrono::seconds(240));
  SplitRace race;
  ASSERT_NO_FATAL_FAILURE(race.Stage("split-new-node-split"));
  Context& b = *race.ctx_b;
  // B splits X's header: R's slot -> S2 -> X.
  ASSERT_NO_FATAL_FAILURE(race.Run([&] { ASSERT_TRUE(race.tree_b->Insert(b, K("AWa"), 2).ok()); }));
  ASSERT_FALSE(RadixTestPeer::NodeOnPath(*race.tree_b, b, K("AXZa"), 1).is_null())
      << "X's header was not split: nothing staged";
  ASSERT_NO_FATAL_FAILURE(race.ExpectNNamesX(2));
  // Lookups of N's keys, through X to N.
  uint64_t value = 0;
  for (const char* key : {"AXYQa", "AXYQc"}) {
    const Status lookup = race.tree_b->Lookup(b, K(key), &value);
    EXPECT_TRUE(lookup.ok()) << key << ": " << lookup.ToString();
  }
  for (const std::string& error : RadixTestPeer::Walk(*race.tree_b, b).errors)
    ADD_FAILURE() << error;
}

// ---- Review 5 (df1bb46, 47b0ef2) ----

// Root R: 'A' -> N (header "XY", on memory node 1): 'a' a tombstone
// ("AXYa" deleted), 'b' and 'c' -> leaves on N's memory node; 'B', 'Z'
// elsewhere. A merge of N by dead compute node 7 froze N whole and died.
// Client A's lookup of "AXYb" waits for 7 and undoes the merge
// (AwaitMerge -> UndoMerge): it takes the claim over (N's reverse pointer:
// A's own claim), and the READ of N's first live child, the batch after,
// fails once. Client A lives on: whatever it left must not keep N frozen
// under the claim of a live compute node, which nobody ends (every descent
// through N waits for A until lock_timeout, for good). (Review 5: the
// child READ is not retried and the undo returns with the takeover in
// place: B's lookup of "AXYc", A's own next lookup and the walk fail.)
TEST(RadixRecoveryTest, AnUndoWhoseBatchFailsOnceLeavesNoLiveClaimOnAFrozenNode) {
  Watchdog watchdog(std::chrono::seconds(240));
  std::unique_ptr<Cluster> cluster = OpenCluster(false, 2);
  std::unique_ptr<Client> client_a = testing::TwoCoroutineClient(*cluster);
  std::unique_ptr<Client> client_b = NewClient(*cluster);
  std::unique_ptr<Context> ctx_b;
  ASSERT_TRUE(client_b->NewBlockingContext(&ctx_b).ok());
  RadixOptions options;
  options.cache_bytes = 0;
  options.lock_timeout = std::chrono::milliseconds(3000);
  std::unique_ptr<Radix> tree_a, tree_b;
  ASSERT_TRUE(Radix::Open(client_a.get(), "undo-fails-once", options, &tree_a).ok());
  ASSERT_TRUE(Radix::Open(client_b.get(), "undo-fails-once", options, &tree_b).ok());
  testing::PrepareRedoSlots(*client_a);
  Context& b = *ctx_b;
  // (Internal nodes go round-robin over the memory nodes: "ZZ1", "ZZ2"
  // and "ZY" make two before R and N.)
  for (const char* key : {"ZZ1", "ZZ2", "ZY", "AXYa", "AXYb", "AXYc", "B"})
    ASSERT_TRUE(tree_b->Insert(b, K(key), 1).ok());
  ASSERT_TRUE(tree_b->Delete(b, K("AXYa")).ok());
  const RemoteAddress r = RadixTestPeer::NodeOnPath(*tree_b, b, K("AXYb"), 0);
  const RemoteAddress n = RadixTestPeer::NodeOnPath(*tree_b, b, K("AXYb"), 3);
  ASSERT_FALSE(n.is_null());
  ASSERT_NE(n.node(), runtime::ClusterImpl::kCatalogNode)
      << "N on the catalog memory node (lease renewals would take the failure): stage it "
         "otherwise";
  ASSERT_EQ(RadixTestPeer::LeafOf(*tree_b, b, K("AXYb")).node(), n.node());
  ASSERT_EQ(RadixTestPeer::ReadWord(b, n + radix::kReverseOffset), r.raw());
  const StagedFreeze staged(b, n);
  ASSERT_TRUE(staged.found()) << "N has no tombstone or no empty slot";
  const uint64_t live_header = staged.live_header;
  // Dead compute node 7's claim and whole freeze of N.
  auto freeze = [&] { staged.Freeze(kDead); };
  uint64_t value = 0;
  // Compute node A recovers 7 once (undoing its merge), so that its next
  // wait on 7 reads no lease: then the dead merge again.
  freeze();
  testing::Injection none;
  ASSERT_TRUE(testing::RunWithInjection(
                  *client_a,
                  [&](runtime::ContextImpl& c) { return tree_a->Lookup(c, K("AXYb"), &value); },
                  [](const Stats&) { return false; }, [] {}, &none)
                  .ok());
  ASSERT_EQ(RadixTestPeer::ReadWord(b, n + radix::kHeaderOffset), live_header);
  freeze();
  testing::Injection injection;
  const Status lookup = testing::RunWithInjection(
      *client_a, [&](runtime::ContextImpl& c) { return tree_a->Lookup(c, K("AXYb"), &value); },
      // The descent's 3 READs, AwaitMerge's two looks (3 READs each),
      // UndoMerge's READ of N, then its takeover CAS: the next batch (the
      // READ of N's first live child) fails.
      [](const Stats& so_far) { return so_far.compare_swaps >= 1; },
      [&] { ASSERT_TRUE(testing::Faults(*cluster).FailNextBatches(n.node(), 1).ok()); },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_EQ(injection.at.reads, 10u);
  EXPECT_EQ(injection.at.compare_swaps, 1u) << "fired after UndoMerge's takeover";
  EXPECT_EQ(testing::Faults(*cluster).counters().failed_batches, 1u) << "nothing failed";
  (void)lookup;  // may fail: one of its batches did
  // Another compute node's lookup under N, and A's own, get through.
  const Status lookup_b = tree_b->Lookup(b, K("AXYc"), &value);
  EXPECT_TRUE(lookup_b.ok()) << lookup_b.ToString() << " (N's reverse pointer: "
                             << RadixTestPeer::ReadWord(b, n + radix::kReverseOffset)
                             << ", A's lookup: " << lookup.ToString() << ")";
  testing::Injection after;
  const Status lookup_a = testing::RunWithInjection(
      *client_a, [&](runtime::ContextImpl& c) { return tree_a->Lookup(c, K("AXYb"), &value); },
      [](const Stats&) { return false; }, [] {}, &after);
  EXPECT_TRUE(lookup_a.ok()) << lookup_a.ToString();
  EXPECT_FALSE(
      radix::Header::Unpack(RadixTestPeer::ReadWord(b, n + radix::kHeaderOffset)).deleted())
      << "N stayed frozen";
  for (const std::string& error : RadixTestPeer::Walk(*tree_b, b).errors)
    ADD_FAILURE() << error;
}

}  // namespace dmidx
