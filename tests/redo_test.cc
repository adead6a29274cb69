// Redo records (lock/redo_log.h): a compute node that dies in the middle of
// a write-back batch under a lock leaves, once a survivor has recovered it,
// the object wholly as it was or wholly as the change meant, and the word
// free; a record of a change that completed is never redone.
//
// On `local`, a write-back batch is cut at every op boundary, and inside
// each op longer than a word (half of its words placed): the dying node's
// batch is caught as it is posted (ContextImpl::RecordPostsForTesting) and
// dropped by killing the node before it applies, and another compute node
// places the first ops of it, as the dead node's queue pair would have
// before it died. On `sim`, the node is killed at many virtual instants
// while it updates a key in a loop, with torn WRITEs: the fabric places
// what landed by then, pieces of a WRITE included.
//
//   DeathAtEachOpBoundaryLeavesTheObjectOldOrNew
//       B+tree (entry-level and whole-node write-backs), the radix tree's
//       in-place update: the bytes of every WRITE of the change are all old
//       (the record was not whole) or all new (it was: redone, or landed),
//       the value read back says the same, and the key is writable.
//   DeathAtEachOpBoundaryOfASplit
//       the B+tree split's batch (the new sibling is written before the
//       record and left out of it): every key and the new one (when the
//       record was whole) read back, and the tree stays writable.
//   DeathAtEachOpBoundaryOfAMerge
//       a B+tree merge's batch (left, right's dead mark and parent under
//       one record): the tree whole after recovery, merged or not.
//   AMergeThatFailedEveryPostKeepsItsRecordFromItsContextsNextChange,
//   AReleaseThatFailedEveryPostKeepsItsRecordFromItsContextsNextChange
//       a merge's write-back, or an update's release, that failed every
//       post and landed in part, its words left held with the record
//       whole: the same context's next recorded change fails (Unavailable)
//       instead of writing over the record, and the recovery redoes it.
//   AStaleRecordIsNeverRedone
//       the radix ABA case: a context's update completes (its record
//       cleared before the release), another compute node changes the
//       value, and the same context dies holding the leaf again before its
//       new record lands: the other node's value stays.
//   AnEarlierRecordOfAHandoverChainIsNeverRedone
//       HOCL's case for the clear: three contexts of one compute node in a
//       local handover chain (one tag), the third dying before its record
//       lands: the second's write stays.
//   ALongRecordIsRedoneInPiecesAndATornOneIsNot
//       a whole-node write-back's record (1 KiB and 4 KiB nodes), longer
//       than the pieces recovery reads it in, is redone by a survivor with
//       1 KiB of its arena left; with one word of its image wrong it is
//       not.
//   ARecordOfManyWritesIsRedoneInPieces
//       a record of 15 WRITEs of many lengths (its table longer than a
//       piece) is redone whole by the same survivor.
//   UnderSimAKilledUpdaterLeavesNoTornObject
//       both indexes: no survivor read fails, the key reads back a value
//       its dead updater wrote, and every other key is intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "btree/node.h"
#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/keys.h"
#include "dmidx/radix.h"
#include "lib/fabric/fault_injector.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "lib/runtime/lease.h"
#include "lib/runtime/membership.h"
#include "lock/redo_log.h"
#include "radix/layout.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/watchdog.h"
#include "tests/btree_test_util.h"

namespace dmidx {
namespace {

using fabric::Op;
using fabric::OpCode;
using fabric::RemoteAddress;
using runtime::ContextImpl;
using std::chrono::milliseconds;
using testing::Faults;

// The index under test, opened the same way on every compute node.
struct IndexKind {
  std::string name;
  std::function<Status(Client*, const std::string&, std::unique_ptr<RangeIndex>*)> open;
};

IndexKind BTreeKind(bool entry_level, uint32_t node_bytes = 1024) {
  return {
      std::string("btree_") + (entry_level ? "entry" : "node") + "_" + std::to_string(node_bytes),
      [=](Client* client, const std::string& name, std::unique_ptr<RangeIndex>* out) {
        BTreeOptions options;
        options.node_bytes = node_bytes;
        options.entry_level_write_back = entry_level;
        options.lock_timeout = milliseconds(20000);
        std::unique_ptr<BTree> tree;
        DMIDX_RETURN_IF_ERROR(BTree::Open(client, name, options, &tree));
        *out = std::move(tree);
        return Status::Ok();
      }};
}

IndexKind RadixKind() {
  return {"radix", [](Client* client, const std::string& name, std::unique_ptr<RangeIndex>* out) {
            RadixOptions options;
            options.lock_timeout = milliseconds(20000);
            std::unique_ptr<Radix> tree;
            DMIDX_RETURN_IF_ERROR(Radix::Open(client, name, options, &tree));
            *out = std::move(tree);
            return Status::Ok();
          }};
}

std::string Key(uint64_t i) {
  return EncodeUint64Key(i);
}

ClusterOptions Options(FabricBackend backend) {
  ClusterOptions options =
      testing::SmallLocalCluster(1, 8 << 20, false, std::chrono::microseconds(0));
  options.backend = backend;
  options.lease.period = milliseconds(2);
  options.lease.timeout = milliseconds(20);
  return options;
}

// One op of a batch as the dying node posted it, with its bytes.
struct Posted {
  OpCode code;
  RemoteAddress remote;
  std::vector<uint8_t> bytes;  // a WRITE's
};

// What a batch holds, by the redo record's layout (lock/redo_log.h):
// [linked][record][change][clear][release].
struct Parts {
  size_t linked = 0;      // ops before the record
  size_t record_end = 0;  // one past the record's last op: the change's first
  size_t change_end = 0;  // one past the change's last op: the clear's, or the release's
  bool cleared = false;   // whether the batch clears its record (lock/redo_log.h, Wrap)
  bool recorded = false;
};

// The parts of a write-back batch: the ops in ctx's slot are the record's
// (its head at the slot's start, its long WRITEs after) and, last, the
// clear (8 bytes at the slot's start).
Parts PartsOf(const std::vector<Posted>& batch, lock::RedoLog::SlotRef slot) {
  Parts parts;
  auto in_slot = [&](const Posted& op) {
    return op.remote.node() == slot.address.node() && op.remote.offset() >= slot.address.offset() &&
           op.remote.offset() < slot.address.offset() + slot.capacity;
  };
  std::vector<size_t> inside;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (in_slot(batch[i])) inside.push_back(i);
  }
  if (inside.empty()) return parts;
  parts.recorded = true;
  parts.linked = inside.front();
  const size_t last = inside.back();
  parts.cleared =
      last != parts.linked && batch[last].remote == slot.address && batch[last].bytes.size() == 8;
  if (parts.cleared) inside.pop_back();
  parts.record_end = inside.back() + 1;
  // The change runs to the clear, or else to the release (the batch's last
  // op, on the lock word) or the batch's end.
  parts.change_end = parts.cleared ? last : batch.size();
  if (!parts.cleared && batch.size() > parts.record_end && batch.back().bytes.size() == 8) {
    parts.change_end = batch.size() - 1;
  }
  return parts;
}

uint64_t ReadWord(ContextImpl& ctx, RemoteAddress at) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint64_t* word = *ctx.arena().Words(1);
  const Op read = Op::Read(at, word, 8);
  EXPECT_TRUE(ctx.Execute(at.node(), {&read, 1}).ok());
  return *word;
}

std::vector<uint8_t> ReadBytes(ContextImpl& ctx, RemoteAddress at, uint32_t length) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint8_t* bytes = *ctx.arena().Bytes(length, 8);
  const Op read = Op::Read(at, bytes, length);
  EXPECT_TRUE(ctx.Execute(at.node(), {&read, 1}).ok());
  return std::vector<uint8_t>(bytes, bytes + length);
}

// Takes `count` lock acquisitions of ctx's, as its locks would
// (RedoLog::NextAcquisition: its slots cleared as the hold's bits wrap).
// One acquisition's hold value comes round 2^kHoldAcquisitionBits later.
constexpr uint64_t kHoldWrap = uint64_t{1} << lock::RedoLog::kHoldAcquisitionBits;
Status TakeAcquisitions(ContextImpl& ctx, uint64_t count) {
  std::shared_ptr<lock::RedoLog> redo = lock::RedoLog::For(ctx.compute_node());
  for (uint64_t i = 0; i < count; ++i)
    DMIDX_RETURN_IF_ERROR(redo->NextAcquisition(ctx).status());
  return Status::Ok();
}

// Places `bytes` at `at`, words [first, end) of them only (a torn WRITE's
// part), from another compute node's context.
void Place(ContextImpl& ctx, RemoteAddress at, const std::vector<uint8_t>& bytes, size_t first,
           size_t end) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint8_t* buffer = *ctx.arena().Bytes(bytes.size(), 8);
  std::memcpy(buffer, bytes.data(), bytes.size());
  const size_t begin = std::min(bytes.size(), 8 * first);
  const size_t stop = std::min(bytes.size(), 8 * end);
  if (stop <= begin) return;
  const Op write = Op::Write(at + begin, buffer + begin, static_cast<uint32_t>(stop - begin));
  ASSERT_TRUE(ctx.Execute(at.node(), {&write, 1}).ok());
}

// How a cut leaves the batch: ops [0, whole) placed, then of op `whole`
// (if any) its words [torn_first, torn_end).
struct Cut {
  size_t whole = 0;
  size_t torn_first = 0, torn_end = 0;
  std::string ToString() const {
    std::string s = "after op " + std::to_string(whole);
    if (torn_end > torn_first) {
      s += ", words " + std::to_string(torn_first) + ".." + std::to_string(torn_end) + " of op " +
           std::to_string(whole);
    }
    return s;
  }
};

// Every cut of a batch: at each op boundary, and each op of several words
// half placed (its first half, or its second).
std::vector<Cut> CutsOf(const std::vector<Posted>& batch) {
  std::vector<Cut> cuts;
  for (size_t k = 0; k <= batch.size(); ++k) {
    cuts.push_back({k, 0, 0});
    if (k == batch.size() || batch[k].code != OpCode::kWrite) continue;
    const size_t words = (batch[k].bytes.size() + 7) / 8;
    if (words < 2) continue;
    cuts.push_back({k, 0, words / 2});
    cuts.push_back({k, words / 2, words});
  }
  return cuts;
}

// A cluster of three compute nodes: D (two coroutines, dies), S (the
// survivor) and P (places the dead node's ops), each with the index open.
class Nodes {
 public:
  Nodes(FabricBackend backend, const IndexKind& kind, bool prepare = true,
        uint32_t memory_nodes = 1, size_t survivor_scratch = 0) {
    ClusterOptions options = Options(backend);
    options.memory_nodes = memory_nodes;
    EXPECT_TRUE(Cluster::Open(options, &cluster_).ok());
    dying_ = testing::TwoCoroutineClient(*cluster_);
    if (survivor_scratch == 0) {
      survivor_ = testing::NewClient(*cluster_);
    } else {
      ClientOptions client;
      client.scratch_bytes_per_context = survivor_scratch;
      EXPECT_TRUE(cluster_->NewClient(client, &survivor_).ok());
    }
    placer_ = testing::NewClient(*cluster_);
    EXPECT_TRUE(survivor_->NewBlockingContext(&survivor_ctx_).ok());
    EXPECT_TRUE(placer_->NewBlockingContext(&placer_ctx_).ok());
    EXPECT_TRUE(kind.open(dying_.get(), "t", &dying_index_).ok());
    EXPECT_TRUE(kind.open(survivor_.get(), "t", &survivor_index_).ok());
    // D's slots made (and large enough for a node's record): the batch
    // caught is the change's own.
    if (prepare) testing::PrepareRedoSlots(*dying_);
  }
  Cluster& cluster() { return *cluster_; }
  Client& dying() { return *dying_; }
  Client* survivor_client() { return survivor_.get(); }
  RangeIndex& dying_index() { return *dying_index_; }
  RangeIndex& survivor_index() { return *survivor_index_; }
  Context& survivor() { return *survivor_ctx_; }
  ContextImpl& survivor_ctx() { return ContextImpl::From(*survivor_ctx_); }
  ContextImpl& placer_ctx() { return ContextImpl::From(*placer_ctx_); }
  uint32_t dying_id() { return runtime::ComputeNode::Of(*dying_).id(); }

  // Runs `operation` on D's first coroutine.
  Status OnDying(const std::function<Status(ContextImpl&)>& operation) {
    testing::Injection never;
    return testing::RunWithInjection(
        *dying_, operation, [](const Stats&) { return false; }, [] {}, &never);
  }

  // Runs `operation` on D's first coroutine with every batch D posts after
  // its first CAS failing (never applied: a batch's fate is decided at its
  // post, so no thread that polls can apply it first), keeps the first
  // batch with a WRITE it posted after that CAS (a write-back: the lock's)
  // in *batch (its WRITEs from the last op that is not one), with their
  // bytes, then kills D. *slot: D's slot on the batch's memory node. The
  // operation's status. The failures are armed, and the batch kept, from a
  // hook on D's posts (ContextImpl::SetPostHookForTesting), so whatever
  // the threads' timing the batch after the CAS fails.
  // The batches of the dying node fail from the one after its
  // `after_cases`-th lock CAS on (by default its first).
  Status KillInFirstWriteBatch(const std::function<Status(ContextImpl&)>& operation,
                               std::vector<Posted>* batch, lock::RedoLog::SlotRef* slot,
                               bool kill = true, int after_cases = 1) {
    std::vector<Op> posted;
    ContextImpl* dying_ctx = nullptr;
    fabric::RandomBatchFailures failures;
    failures.probability = 1;
    failures.compute_nodes = {dying_id()};
    int cases_seen = 0;
    bool armed = false, captured = false;
    const auto hook = [&](std::span<const Op> ops) {
      const auto is = [&](OpCode code) {
        return std::any_of(ops.begin(), ops.end(), [&](const Op& op) { return op.code == code; });
      };
      if (cases_seen >= after_cases && !armed) {
        armed = true;
        EXPECT_TRUE(Faults(*cluster_).FailBatchesAtRandom(failures).ok());
      }
      if (armed && !captured && is(OpCode::kWrite)) {
        captured = true;
        size_t first = ops.size();
        while (first > 0 && ops[first - 1].code == OpCode::kWrite)
          --first;
        for (size_t i = first; i < ops.size(); ++i) {
          const auto* bytes = static_cast<const uint8_t*>(ops[i].local);
          batch->push_back({ops[i].code, ops[i].remote, {bytes, bytes + ops[i].length}});
        }
      }
      if (is(OpCode::kCompareSwap)) ++cases_seen;
    };
    const Status status = OnDying([&](ContextImpl& ctx) {
      dying_ctx = &ctx;
      ctx.RecordPostsForTesting(&posted);
      ctx.SetPostHookForTesting(hook);
      const Status result = operation(ctx);
      ctx.SetPostHookForTesting({});
      ctx.RecordPostsForTesting(nullptr);
      return result;
    });
    if (kill) Faults(*cluster_).KillComputeNode(dying_id());
    Faults(*cluster_).StopRandomFailures();
    EXPECT_TRUE(captured) << "the operation posted no WRITE after its CAS";
    if (!batch->empty() && dying_ctx != nullptr) {
      *slot = lock::RedoLog::For(runtime::ComputeNode::Of(*dying_))
                  ->SlotOf(dying_ctx->number(), batch->front().remote.node());
    }
    return status;
  }

  // Places what `cut` says of `batch`, as D's queue pair would have.
  void Place(const std::vector<Posted>& batch, const Cut& cut) {
    for (size_t i = 0; i < cut.whole; ++i) {
      ASSERT_EQ(batch[i].code, OpCode::kWrite) << "a write-back batch of WRITEs";
      dmidx::Place(placer_ctx(), batch[i].remote, batch[i].bytes, 0, batch[i].bytes.size());
    }
    if (cut.torn_end > cut.torn_first) {
      dmidx::Place(placer_ctx(), batch[cut.whole].remote, batch[cut.whole].bytes, cut.torn_first,
                   cut.torn_end);
    }
  }

  // D's index and client closed, as a process's client closes.
  void CloseDying() {
    dying_index_.reset();
    dying_.reset();
  }

  // D's index and client closed, and D opened again with its id and its
  // index open, as a verbs process opens its next client.
  void ReopenDying(const IndexKind& kind) {
    const uint32_t id = dying_id();
    CloseDying();
    testing::ReopenComputeNodeId(*cluster_, id);
    dying_ = testing::TwoCoroutineClient(*cluster_);
    ASSERT_NE(dying_, nullptr);
    ASSERT_EQ(dying_id(), id);
    ASSERT_TRUE(kind.open(dying_.get(), "t", &dying_index_).ok());
    testing::PrepareRedoSlots(*dying_);  // the slots taken over, as its first change would
  }

  // D updates `key` to `value` and is killed in that update's write-back
  // batch with none of the batch placed, then recovered; *read: the key's
  // value S finds after. *held: the lock word's value when D died (its
  // hold); *slot: D's slot there.
  void DieUpdatingThenRecover(uint64_t key, uint64_t value, uint64_t* held, uint64_t* read,
                              lock::RedoLog::SlotRef* slot = nullptr) {
    std::vector<Posted> batch;
    lock::RedoLog::SlotRef dying_slot;
    const Status died = KillInFirstWriteBatch(
        [&](ContextImpl& ctx) { return dying_index().Update(ctx, Key(key), value); }, &batch,
        &dying_slot);
    ASSERT_FALSE(batch.empty()) << died.ToString();
    if (slot != nullptr) *slot = dying_slot;
    *held = ReadWord(placer_ctx(), batch.back().remote);
    ASSERT_NO_FATAL_FAILURE(Recover());
    ASSERT_TRUE(survivor_index().Lookup(survivor(), Key(key), read).ok());
  }

  // S judges D's lease until D is recovered (declared, fenced, its
  // records redone), as a waiter on one of its words would.
  void Recover() {
    auto& membership = static_cast<runtime::ClientImpl&>(*survivor_).membership();
    runtime::LeaseWatch watch(cluster_->options().lease.timeout);
    for (int i = 0; i < 10000; ++i) {
      const StatusOr<bool> gone = membership.Check(survivor_ctx(), dying_id(), watch);
      ASSERT_TRUE(gone.ok()) << gone.status().ToString();
      if (*gone) return;
      std::this_thread::sleep_for(cluster_->options().lease.period);
    }
    FAIL() << "compute node " << dying_id() << " was never recovered";
  }

 private:
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> dying_, survivor_, placer_;
  std::unique_ptr<Context> survivor_ctx_, placer_ctx_;
  std::unique_ptr<RangeIndex> dying_index_, survivor_index_;
};

class RedoTest : public ::testing::TestWithParam<IndexKind> {};

// The change's WRITEs (after the record, before the clear) hold their new
// bytes, or every one its old bytes; `old` has each one's bytes before.
void ExpectOldOrNew(ContextImpl& ctx, const std::vector<Posted>& batch, const Parts& parts,
                    const std::vector<std::vector<uint8_t>>& old, bool want_new,
                    const std::string& where) {
  for (size_t i = parts.record_end; i < parts.change_end; ++i) {
    const std::vector<uint8_t> now =
        ReadBytes(ctx, batch[i].remote, static_cast<uint32_t>(batch[i].bytes.size()));
    if (want_new) {
      EXPECT_EQ(now, batch[i].bytes) << where << ": op " << i << " was not redone";
    } else {
      EXPECT_EQ(now, old[i]) << where << ": op " << i << " changed without its record";
    }
  }
}

// One cut of a dying node's write-back batch, placed, and its node
// recovered (ForEachCut).
struct CutRun {
  Nodes& nodes;
  const std::vector<Posted>& batch;
  const Parts& parts;
  const Cut& cut;
  // Whether the change is to be found whole: its record whole when the
  // recovery began, or its clear placed (and so everything before it).
  bool whole;
};

// For each cut of the first write-back batch `change` posts (learnt from a
// first run): a fresh cluster of `kind`, `setup` run on it, `change` run on
// D with D killed in that batch, the cut placed, D recovered, and the
// change's own WRITEs checked to hold all their old bytes or all their new
// ones; then `check`. Counts the cuts whose change was whole in *whole.
void ForEachCut(const IndexKind& kind, const std::function<void(Nodes&)>& setup,
                const std::function<Status(Nodes&, ContextImpl&)>& change,
                const std::function<void(const CutRun&)>& check, size_t* whole_cuts,
                size_t* all_cuts, int after_cases = 1) {
  std::vector<Cut> cuts = {{0, 0, 0}};
  for (size_t c = 0; c < cuts.size(); ++c) {
    const Cut cut = cuts[c];
    SCOPED_TRACE(kind.name + ", " + cut.ToString());
    Nodes nodes(FabricBackend::kLocal, kind);
    ASSERT_NO_FATAL_FAILURE(setup(nodes));
    std::vector<Posted> batch;
    lock::RedoLog::SlotRef slot;
    const Status died = nodes.KillInFirstWriteBatch(
        [&](ContextImpl& ctx) { return change(nodes, ctx); }, &batch, &slot, true, after_cases);
    // A change cut in its first write-back fails; one cut later (a
    // merge's batch, after its delete's write-back landed) returns what
    // landed first.
    const bool first_batch = after_cases == 1;
    if (first_batch) {
      EXPECT_FALSE(died.ok());
    }
    const Parts parts = PartsOf(batch, slot);
    ASSERT_TRUE(parts.recorded) << "the write-back carries no record";
    ASSERT_LT(parts.record_end, parts.change_end);
    if (c == 0) cuts = CutsOf(batch);
    std::vector<std::vector<uint8_t>> old;
    for (const Posted& op : batch) {
      old.push_back(
          ReadBytes(nodes.placer_ctx(), op.remote, static_cast<uint32_t>(op.bytes.size())));
    }
    ASSERT_NO_FATAL_FAILURE(nodes.Place(batch, cut));
    // Once the change was placed (and its clear, if any), it is whole.
    // Before, the record is whole once each of its ops' bytes stand in the
    // slot: placed whole, or placed in part over a record that held the
    // rest already (an earlier change's of the same bytes).
    bool whole = cut.whole >= parts.change_end + (parts.cleared ? 1 : 0);
    if (!whole) {
      whole = true;
      for (size_t i = parts.linked; i < parts.record_end; ++i) {
        whole &= ReadBytes(nodes.placer_ctx(), batch[i].remote,
                           static_cast<uint32_t>(batch[i].bytes.size())) == batch[i].bytes;
      }
      if (cut.whole >= parts.record_end) {
        ASSERT_TRUE(whole) << "the record's ops did not land";
      }
    }
    ASSERT_NO_FATAL_FAILURE(nodes.Recover());
    ExpectOldOrNew(nodes.survivor_ctx(), batch, parts, old, whole, cut.ToString());
    // The lock word (the release's) is free once a record was redone; a
    // hold no valid record names stays for a waiter to free.
    // (A write-back without the release, such as a merge's, ends in its
    // clear instead: its words are freed as void holds.)
    if (whole && cut.whole <= parts.change_end && first_batch) {
      EXPECT_EQ(ReadWord(nodes.survivor_ctx(), batch.back().remote), 0u)
          << "a redone word left held";
    }
    *whole_cuts += whole ? 1 : 0;
    ++*all_cuts;
    ASSERT_NO_FATAL_FAILURE(check({nodes, batch, parts, cut, whole}));
  }
}

// Keys 0 .. keys - 1 inserted by S (*model: key i -> i), then `victim`
// updated to 1000 by D (its caches warm).
void FillAndWarm(Nodes& nodes, uint64_t keys, uint64_t victim, testing::Model* model) {
  model->clear();
  for (uint64_t i = 0; i < keys; ++i) {
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
    (*model)[i] = i;
  }
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    return nodes.dying_index().Update(ctx, Key(victim), 1000);
                  })
                  .ok());
  (*model)[victim] = 1000;
}

TEST_P(RedoTest, DeathAtEachOpBoundaryLeavesTheObjectOldOrNew) {
  testing::Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  testing::Model model;
  size_t whole = 0, cuts = 0;
  ForEachCut(
      GetParam(),
      [&](Nodes& nodes) { ASSERT_NO_FATAL_FAILURE(FillAndWarm(nodes, kKeys, kVictim, &model)); },
      [&](Nodes& nodes, ContextImpl& ctx) {
        return nodes.dying_index().Update(ctx, Key(kVictim), 2000);
      },
      [&](const CutRun& run) {
        ASSERT_EQ(run.parts.linked, 0u);
        uint64_t value = 0;
        RangeIndex& index = run.nodes.survivor_index();
        ASSERT_TRUE(index.Lookup(run.nodes.survivor(), Key(kVictim), &value).ok());
        EXPECT_EQ(value, run.whole ? 2000u : 1000u);
        model[kVictim] = 3000;
        ASSERT_TRUE(index.Update(run.nodes.survivor(), Key(kVictim), 3000).ok());
        ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(index, run.nodes.survivor(), model));
      },
      &whole, &cuts);
  EXPECT_GT(whole, 0u);
  EXPECT_LT(whole, cuts);
  std::printf("%s: %zu cuts, %zu with the change whole\n", GetParam().name.c_str(), cuts, whole);
}

// The radix ABA case (lock/redo_log.h: why the clear comes before the
// release). D's update completes, its record cleared before its release;
// S changes the value; D takes the leaf again (the same hold value: the
// compute node's locked word) and dies before its new record is whole. The
// old record must not be redone over S's value. (HOCL's tags are unique
// per acquisition: the B+tree rows pass without the clear too; a local
// handover chain, which keeps its tag, is where HOCL needs it.)
TEST_P(RedoTest, AStaleRecordIsNeverRedone) {
  testing::Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  testing::Model model;
  size_t whole = 0, cuts = 0;
  ForEachCut(
      GetParam(),
      [&](Nodes& nodes) {
        model.clear();
        for (uint64_t i = 0; i < kKeys; ++i) {
          ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
          model[i] = i;
        }
        ASSERT_TRUE(nodes
                        .OnDying([&](ContextImpl& ctx) {
                          return nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                        })
                        .ok());
        ASSERT_TRUE(nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 2000).ok());
      },
      [&](Nodes& nodes, ContextImpl& ctx) {
        return nodes.dying_index().Update(ctx, Key(kVictim), 3000);
      },
      [&](const CutRun& run) {
        uint64_t value = 0;
        ASSERT_TRUE(
            run.nodes.survivor_index().Lookup(run.nodes.survivor(), Key(kVictim), &value).ok());
        EXPECT_EQ(value, run.whole ? 3000u : 2000u) << "1000: the completed change was redone";
      },
      &whole, &cuts);
  EXPECT_LT(whole, cuts);
}

// A reader that finds an object torn under a dead holder's lock waits on
// that holder as a lock waiter would (index::RereadUntilVerified), so the
// holder is declared, fenced and recovered, its record redone, and the
// read returns the redone value. D dies in an update's write-back batch
// with its record placed and the change's first WRITE torn; S only
// reads the key, and no one else waits on the word. Before, the reader
// reread the torn image until it gave up (Aborted after kMaxTornReads).
TEST_P(RedoTest, AReaderOfATornObjectRecoversItsDeadHolder) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, GetParam());
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    return nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                  })
                  .ok());
  std::vector<Posted> batch;
  lock::RedoLog::SlotRef slot;
  (void)nodes.KillInFirstWriteBatch(
      [&](ContextImpl& ctx) {
        const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
        EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
        return updated;
      },
      &batch, &slot);
  const Parts parts = PartsOf(batch, slot);
  ASSERT_TRUE(parts.recorded);
  const size_t words = (batch[parts.record_end].bytes.size() + 7) / 8;
  ASSERT_GE(words, 2u) << "the change's first WRITE is one word: it cannot tear";
  // Its first word only: the object's checksum (radix: the leaf's; B+tree:
  // the node's header), new over old bytes, so every READ fails its check.
  ASSERT_NO_FATAL_FAILURE(nodes.Place(batch, Cut{parts.record_end, 0, 1}));
  uint64_t value = 0;
  const Status read = nodes.survivor_index().Lookup(nodes.survivor(), Key(kVictim), &value);
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(value, 2000u) << "the dead holder's record was not redone";
  EXPECT_EQ(nodes.survivor_index().stats()[IndexOp::kLookup].recoveries, 1u)
      << "the reader did not recover the dead holder";
}

// A hold that no record names: D's update took its object's lock, and every
// batch after that CAS failed (record, write-back and release alike), so the
// word stays held and no record of D's names it. D's client then closes,
// and its process opens its next client with D's id, as a verbs process
// does. Had that client resumed D's id and lease, S would wait on a holder
// whose lease keeps moving and time out forever. A client a batch of which
// failed closes its id instead (ClusterBackend::DetachClient): the next
// open is refused, D's lease stands still, and S, meeting the hold, declares
// D dead, recovers it, frees the word and writes.
TEST_P(RedoTest, AClientWhoseBatchFailedClosesItsIdSoItsHoldIsRecovered) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, GetParam());
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  std::vector<Posted> batch;
  lock::RedoLog::SlotRef slot;
  const Status failed = nodes.KillInFirstWriteBatch(
      [&](ContextImpl& ctx) {
        const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
        EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
        return updated;
      },
      &batch, &slot, /*kill=*/false);
  ASSERT_FALSE(failed.ok());
  ASSERT_FALSE(batch.empty());
  const RemoteAddress word = batch.back().remote;
  ASSERT_NE(ReadWord(nodes.placer_ctx(), word), 0u) << "D's hold was not left behind";
  EXPECT_FALSE(static_cast<runtime::ClientImpl&>(nodes.dying()).Settled());
  const uint32_t id = nodes.dying_id();
  nodes.CloseDying();
  testing::ReopenComputeNodeId(nodes.cluster(), id);
  std::unique_ptr<Client> next;
  const Status reopened = nodes.cluster().NewClient({}, &next);
  EXPECT_EQ(reopened.code(), StatusCode::kFailedPrecondition) << reopened.ToString();
  EXPECT_NE(reopened.message().find("closed unsettled"), std::string::npos) << reopened.ToString();
  const Status wrote = nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000);
  ASSERT_TRUE(wrote.ok()) << wrote.ToString();
  uint64_t value = 0;
  ASSERT_TRUE(nodes.survivor_index().Lookup(nodes.survivor(), Key(kVictim), &value).ok());
  EXPECT_EQ(value, 3000u);
  EXPECT_GE(nodes.survivor_index().stats()[IndexOp::kUpdate].recoveries, 1u)
      << "S did not recover D";
}

INSTANTIATE_TEST_SUITE_P(Indexes, RedoTest,
                         ::testing::Values(BTreeKind(true), BTreeKind(false), RadixKind()),
                         [](const ::testing::TestParamInfo<IndexKind>& param) {
                           return param.param.name;
                         });

// A B+tree split: its batch is [the new right node][record][the split
// node][clear][release]; the right node lands before the record and is
// left out of it (once linked, another compute node may change it under
// its own lock). A death at each cut leaves every key and, once the record
// was whole, the new one, reachable through the split node's sibling; the
// tree stays writable.
TEST(RedoSplitTest, DeathAtEachOpBoundaryOfASplit) {
  testing::Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint32_t kNodeBytes = 256;
  const uint32_t slots = btree::NodeShape::Make(kNodeBytes, 8)->leaf_slots();
  testing::Model model;
  size_t whole = 0, cuts = 0;
  ForEachCut(
      BTreeKind(true, kNodeBytes),
      [&](Nodes& nodes) {
        model.clear();
        // The root leaf, full.
        for (uint64_t i = 1; i <= slots; ++i) {
          ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i * 10), i).ok());
          model[i * 10] = i;
        }
        uint64_t value = 0;
        ASSERT_TRUE(nodes
                        .OnDying([&](ContextImpl& ctx) {
                          return nodes.dying_index().Lookup(ctx, Key(10), &value);
                        })
                        .ok());
      },
      [&](Nodes& nodes, ContextImpl& ctx) { return nodes.dying_index().Insert(ctx, Key(55), 55); },
      [&](const CutRun& run) {
        ASSERT_EQ(run.parts.linked, 1u) << "the new right node first";
        RangeIndex& index = run.nodes.survivor_index();
        testing::Model want = model;
        if (run.whole) want[55] = 55;
        ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(index, run.nodes.survivor(), want));
        want[55] = 5500;
        ASSERT_TRUE(index.Insert(run.nodes.survivor(), Key(55), 5500).ok());
        for (uint64_t k = 1; k <= 20; ++k) {
          ASSERT_TRUE(index.Insert(run.nodes.survivor(), Key(k * 10 + 3), k).ok());
          want[k * 10 + 3] = k;
        }
        ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(index, run.nodes.survivor(), want));
      },
      &whole, &cuts);
  EXPECT_GT(whole, 0u);
  EXPECT_LT(whole, cuts);
  std::printf("split: %zu cuts, %zu with the change whole\n", cuts, whole);
}

// A B+tree of `node_bytes` nodes on S: two leaves under a root, keys
// 10 .. 10 * (slots + 1) less a few (*model), so that deleting key 10
// leaves the left one underfull and merges the pair; D has looked key 10
// up (its cache warm).
void MakeMergeablePair(Nodes& nodes, uint32_t node_bytes, testing::Model* model) {
  const uint32_t slots = btree::NodeShape::Make(node_bytes, 8)->leaf_slots();
  model->clear();
  // Two leaves under a root: keys 10 .. 10 * (slots + 1), split in two.
  for (uint64_t i = 1; i <= slots + 1; ++i) {
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i * 10), i).ok());
    (*model)[i * 10] = i;
  }
  // The left one down to one key above a quarter full.
  const uint64_t keep = (slots + 3) / 4;
  for (uint64_t i = keep + 1; i <= (slots + 1) / 2; ++i) {
    ASSERT_TRUE(nodes.survivor_index().Delete(nodes.survivor(), Key(i * 10)).ok());
    model->erase(i * 10);
  }
  // The right one a key less, so that the pair fits in three quarters of
  // a leaf once the left is underfull (docs/btree.md, "Merges").
  const uint64_t last = 10 * (slots + 1);
  ASSERT_TRUE(nodes.survivor_index().Delete(nodes.survivor(), Key(last)).ok());
  model->erase(last);
  uint64_t value = 0;
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    return nodes.dying_index().Lookup(ctx, Key(10), &value);
                  })
                  .ok());
}

// After D's recovery, S finds the B+tree holding *want, every key once and
// in order, its invariants kept (D's words left held are a dead holder's),
// and writable: keys k * 10 + 3 inserted (added to *want) read back.
void ExpectWholeAfterRecovery(Nodes& nodes, testing::Model* want) {
  RangeIndex& index = nodes.survivor_index();
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(index, nodes.survivor(), *want));
  const uint32_t dead[] = {nodes.dying_id()};
  EXPECT_EQ(btree::BTreeTestPeer::Walk(index, nodes.survivor(), dead), std::vector<std::string>{});
  for (uint64_t k = 1; k <= 20; ++k) {
    ASSERT_TRUE(index.Insert(nodes.survivor(), Key(k * 10 + 3), k).ok());
    (*want)[k * 10 + 3] = k;
  }
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(index, nodes.survivor(), *want));
  EXPECT_EQ(btree::BTreeTestPeer::Walk(index, nodes.survivor()), std::vector<std::string>{});
}

// A B+tree merge: a delete leaves the left of two leaves under the root
// underfull, and its merge's batch under the left's lock is
// [record][left][right's dead mark][parent][clear] (after the delete's own
// write-back and the three lock CASes: the parent's, the left's, the
// right's). A death at each cut leaves the tree whole after recovery
// (the merge done, or not at all), every key but the deleted ones there,
// and the tree writable; the right's and the parent's words, held with no
// record, are what a dead node leaves for the next waiter.
TEST(RedoMergeTest, DeathAtEachOpBoundaryOfAMerge) {
  testing::Watchdog watchdog(std::chrono::seconds(600));
  constexpr uint32_t kNodeBytes = 256;
  testing::Model model;
  size_t whole = 0, cuts = 0;
  ForEachCut(
      BTreeKind(true, kNodeBytes),
      [&](Nodes& nodes) { ASSERT_NO_FATAL_FAILURE(MakeMergeablePair(nodes, kNodeBytes, &model)); },
      [&](Nodes& nodes, ContextImpl& ctx) { return nodes.dying_index().Delete(ctx, Key(10)); },
      [&](const CutRun& run) {
        ASSERT_EQ(run.parts.change_end - run.parts.record_end, 3u)
            << "left, right's mark and parent under one record";
        testing::Model want = model;
        want.erase(10);  // the delete landed before its merge began
        ASSERT_NO_FATAL_FAILURE(ExpectWholeAfterRecovery(run.nodes, &want));
      },
      &whole, &cuts, /*after_cases=*/4);
  EXPECT_GT(whole, 0u);
  EXPECT_LT(whole, cuts);
  std::printf("merge: %zu cuts, %zu with the change whole\n", cuts, whole);
}

// A batch of D's under a hold, with its record, that fails every post and
// lands in part leaves the word held with the record whole, for a
// recovery to finish. D's context goes on: its next recorded change on
// that memory node (an update in place in another index, "u", that D
// wrote before) must not write its record over that one (one slot per context
// and memory node; lock/redo_log.h, KeepRecord): it fails with
// Unavailable naming the word, posting nothing. Then D dies and S
// recovers it: the record is redone and its word freed, and "u" holds
// what D's changes that succeeded wrote. Runs `change` on D with every
// batch after its `after_cases`-th lock CAS failing; `cut` says what
// landed of its write-back (which must hold `change_writes` WRITEs under
// the record; 0: any number).
void FailInPartThenChangeAgain(Nodes& nodes, const IndexKind& kind,
                               const std::function<Status(ContextImpl&)>& change, int after_cases,
                               size_t change_writes, const std::function<Cut(const Parts&)>& cut) {
  std::unique_ptr<RangeIndex> other, other_on_survivor;
  ASSERT_TRUE(kind.open(&nodes.dying(), "u", &other).ok());
  ASSERT_TRUE(kind.open(nodes.survivor_client(), "u", &other_on_survivor).ok());
  testing::Model other_model = {{1, 1}};
  ASSERT_TRUE(nodes.OnDying([&](ContextImpl& ctx) { return other->Insert(ctx, Key(1), 1); }).ok());
  std::vector<Posted> batch;
  lock::RedoLog::SlotRef slot;
  uint32_t number = 0;
  // (Its status is the caller's: a delete whose merge failed is Ok.)
  (void)nodes.KillInFirstWriteBatch(
      [&](ContextImpl& ctx) {
        number = ctx.number();
        return change(ctx);
      },
      &batch, &slot, /*kill=*/false, after_cases);
  const Parts parts = PartsOf(batch, slot);
  ASSERT_TRUE(parts.recorded);
  ASSERT_LT(parts.record_end, parts.change_end);
  if (change_writes != 0) {
    ASSERT_EQ(parts.change_end - parts.record_end, change_writes);
  }
  ASSERT_NO_FATAL_FAILURE(nodes.Place(batch, cut(parts)));
  const Posted& record = batch[parts.linked];
  uint64_t record_word = 0;
  std::memcpy(&record_word, record.bytes.data() + lock::kRecordWordOffset, 8);
  const RemoteAddress word = RemoteAddress::FromRaw(record_word);
  const uint64_t hold = ReadWord(nodes.placer_ctx(), word);
  ASSERT_NE(hold, 0u) << "the failed batch's word was not left held";
  const std::shared_ptr<lock::RedoLog> log =
      lock::RedoLog::For(runtime::ComputeNode::Of(nodes.dying()));
  EXPECT_TRUE(log->KeepsRecord(number, slot.address.node()));
  // The same context's next recorded change on that memory node.
  uint32_t next_number = 0;
  const Status next = nodes.OnDying([&](ContextImpl& ctx) {
    next_number = ctx.number();
    return other->Update(ctx, Key(1), 2);  // in place: the radix tree's records too
  });
  ASSERT_EQ(next_number, number) << "not the same context";
  EXPECT_EQ(next.code(), StatusCode::kUnavailable) << next.ToString();
  EXPECT_NE(next.message().find(word.ToString()), std::string::npos) << next.ToString();
  if (next.ok()) other_model[1] = 2;
  EXPECT_EQ(ReadBytes(nodes.placer_ctx(), slot.address, static_cast<uint32_t>(record.bytes.size())),
            record.bytes)
      << "the failed batch's record was written over";
  EXPECT_EQ(ReadWord(nodes.placer_ctx(), word), hold);
  Faults(nodes.cluster()).KillComputeNode(nodes.dying_id());
  ASSERT_NO_FATAL_FAILURE(nodes.Recover());
  EXPECT_EQ(ReadWord(nodes.placer_ctx(), word), 0u) << "the record was not redone";
  ASSERT_NO_FATAL_FAILURE(
      testing::ExpectIndexMatches(*other_on_survivor, nodes.survivor(), other_model));
}

// A merge whose write-back (HierarchicalLock::WriteBack) fails every post,
// having landed in part: its record and the left's image (the left holds
// the right's entries), not the right's dead mark nor the parent's image.
// The merge keeps the three words held (KeepHeld) with the record whole;
// the record outlives the context's next change, and the recovery
// redoes the merge: every key once, in order. (Written over, the record
// would name nothing held: the recovery would free the three words as
// void holds, and leave a left with the right's entries beside a right
// the parent still names.)
TEST(RedoMergeTest, AMergeThatFailedEveryPostKeepsItsRecordFromItsContextsNextChange) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint32_t kNodeBytes = 256;
  const IndexKind kind = BTreeKind(true, kNodeBytes);
  Nodes nodes(FabricBackend::kLocal, kind);
  testing::Model model;
  ASSERT_NO_FATAL_FAILURE(MakeMergeablePair(nodes, kNodeBytes, &model));
  // Every batch after the delete's lock CAS and the merge's three fails.
  ASSERT_NO_FATAL_FAILURE(FailInPartThenChangeAgain(
      nodes, kind, [&](ContextImpl& ctx) { return nodes.dying_index().Delete(ctx, Key(10)); },
      /*after_cases=*/4, /*left, right's mark, parent:*/ 3,
      [](const Parts& parts) {
        return Cut{parts.record_end + 1, 0, 0};
      }));
  testing::Model want = model;
  want.erase(10);  // the delete landed before its merge began
  ASSERT_NO_FATAL_FAILURE(ExpectWholeAfterRecovery(nodes, &want));
}

// The same for an update whose release fails every post (HOCL's Release
// for the B+tree, the radix tree's FinishWriteBack), its record whole and
// its first WRITE torn (half its words landed): the recovery redoes it,
// and the key reads the update's value.
TEST_P(RedoTest, AReleaseThatFailedEveryPostKeepsItsRecordFromItsContextsNextChange) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, GetParam());
  testing::Model model;
  ASSERT_NO_FATAL_FAILURE(FillAndWarm(nodes, kKeys, kVictim, &model));
  ASSERT_NO_FATAL_FAILURE(FailInPartThenChangeAgain(
      nodes, GetParam(),
      [&](ContextImpl& ctx) {
        const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
        EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
        return updated;
      },
      /*after_cases=*/1, /*any number of WRITEs:*/ 0,
      [](const Parts& parts) {
        return Cut{parts.record_end, 0, 1};
      }));
  model[kVictim] = 2000;
  ASSERT_NO_FATAL_FAILURE(
      testing::ExpectIndexMatches(nodes.survivor_index(), nodes.survivor(), model));
}

// Why HOCL needs the clear too, although its tags are unique per
// acquisition: a local handover chain keeps its tag across the critical
// sections of several contexts. On D, the context numbered lowest takes a
// key's lock and writes 1, hands the lock to the next, which writes 2, and
// that one to the third, whose write of 3 never lands (its batches fail)
// before D dies. Recovery reads the slots in number order and redoes the
// first record that matches the word; were the first two left valid (both
// match the word's tag), the first holder's would be redone over the
// second's acknowledged write.
TEST(RedoChainTest, AnEarlierRecordOfAHandoverChainIsNeverRedone) {
  testing::Watchdog watchdog(std::chrono::seconds(300));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(Options(FabricBackend::kLocal), &cluster).ok());
  std::unique_ptr<Client> dying;
  ASSERT_TRUE(cluster
                  ->NewClient({.threads = 1,
                               .coroutines_per_thread = 4,
                               .retry_backoff_min = std::chrono::nanoseconds(0),
                               .retry_backoff_max = std::chrono::nanoseconds(0)},
                              &dying)
                  .ok());
  auto survivor = testing::NewClient(*cluster);
  std::unique_ptr<Context> checker;
  ASSERT_TRUE(survivor->NewBlockingContext(&checker).ok());
  const IndexKind kind = BTreeKind(true);
  std::unique_ptr<RangeIndex> dying_index, survivor_index;
  ASSERT_TRUE(kind.open(dying.get(), "t", &dying_index).ok());
  ASSERT_TRUE(kind.open(survivor.get(), "t", &survivor_index).ok());
  testing::Model model;
  for (uint64_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(survivor_index->Insert(*checker, Key(i), i).ok());
    model[i] = i;
  }
  testing::PrepareRedoSlots(*dying);
  // Caches warm on D.
  ASSERT_TRUE(dying
                  ->Run([&](Context& ctx) {
                    uint64_t value = 0;
                    return dying_index->Lookup(ctx, Key(kVictim), &value);
                  })
                  .ok());
  const uint32_t dying_id = runtime::ComputeNode::Of(*dying).id();
  fabric::RandomBatchFailures failures;
  failures.probability = 1;
  failures.compute_nodes = {dying_id};
  // Coroutine 0 first, then 1, then 2 queue for the word; coroutine 3
  // arms the failures once the first two write-backs (kept for the next
  // holder: record, header, entry, clear) were posted.
  std::atomic<int> started{0};
  uint32_t numbers[3] = {};
  Status statuses[3];
  bool armed = false;
  const Status run = dying->Run([&](Context& context) -> Status {
    auto& ctx = ContextImpl::From(context);
    const int i = ctx.coroutine_index();
    if (i == 3) {
      const uint64_t writes_before = ctx.stats().writes;
      while (started.load() < 3 || !armed) {
        if (!armed && ctx.stats().writes - writes_before >= 8) {
          EXPECT_TRUE(Faults(*cluster).FailBatchesAtRandom(failures).ok());
          armed = true;
        }
        ctx.Yield();
      }
      return Status::Ok();
    }
    while (started.load() != i)
      ctx.Yield();
    numbers[i] = ctx.number();
    started.fetch_add(1);
    statuses[i] = dying_index->Update(context, Key(kVictim), i + 1);
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  Faults(*cluster).KillComputeNode(dying_id);
  Faults(*cluster).StopRandomFailures();
  ASSERT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  ASSERT_TRUE(statuses[1].ok()) << statuses[1].ToString();
  EXPECT_FALSE(statuses[2].ok()) << "the last holder's write landed";
  ASSERT_LT(numbers[0], numbers[1]);
  EXPECT_GE(dying_index->stats()[IndexOp::kUpdate].handovers, 2u) << "no handover chain";
  auto& membership = static_cast<runtime::ClientImpl&>(*survivor).membership();
  runtime::LeaseWatch watch(cluster->options().lease.timeout);
  bool gone = false;
  for (int i = 0; i < 10000 && !gone; ++i) {
    const StatusOr<bool> checked = membership.Check(ContextImpl::From(*checker), dying_id, watch);
    ASSERT_TRUE(checked.ok()) << checked.status().ToString();
    gone = *checked;
    if (!gone) std::this_thread::sleep_for(cluster->options().lease.period);
  }
  ASSERT_TRUE(gone);
  uint64_t value = 0;
  ASSERT_TRUE(survivor_index->Lookup(*checker, Key(kVictim), &value).ok());
  EXPECT_EQ(value, 2u) << "1: the first holder's record was redone over the second's write";
  model[kVictim] = 4;
  ASSERT_TRUE(survivor_index->Update(*checker, Key(kVictim), 4).ok());
  ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*survivor_index, *checker, model));
}

// ---- Review tests -----------------------------------------------------------

// A client with the smallest scratch ClientOptions allows (one page) and a
// tree whose four nodes fit in it (BTreeOptions::node_bytes' documented
// bound) writes its first key: the record's slot, root and page are made
// without the arena holding a 4 KiB zero buffer (Grow's kZeroPiece).
TEST(RedoEdgeTest, ASmallScratchClientCanWrite) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(Options(FabricBackend::kLocal), &cluster).ok());
  for (const IndexKind& kind : {BTreeKind(true, 256), RadixKind()}) {
    const bool radix = kind.name == "radix";
    SCOPED_TRACE(kind.name);
    std::unique_ptr<Client> client;
    ClientOptions options;
    // The least each index's Open accepts, rounded up to a page.
    options.scratch_bytes_per_context = radix ? 12288 : 4096;
    ASSERT_TRUE(cluster->NewClient(options, &client).ok());
    std::unique_ptr<Context> ctx;
    ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
    std::unique_ptr<RangeIndex> index;
    const Status opened = kind.open(client.get(), "small-" + kind.name, &index);
    ASSERT_TRUE(opened.ok()) << opened.ToString();
    const Status inserted = index->Insert(*ctx, Key(1), 1);
    EXPECT_TRUE(inserted.ok()) << inserted.ToString();
    const Status updated = index->Update(*ctx, Key(1), 2);
    EXPECT_TRUE(updated.ok()) << updated.ToString();
  }
}

// A survivor with the smallest scratch (one page) recovers a dead node that
// recorded changes: RecoveryStep needs the root's 2 KiB and a page's
// 2 KiB (one memory node) in the arena at once, more than the page holds
// once the library's words are taken, so every recovery of a node that ever
// recorded a change fails and its holds stay forever.
TEST(RedoEdgeTest, ASmallScratchSurvivorCanRecover) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(Options(FabricBackend::kLocal), &cluster).ok());
  auto dying = testing::NewClient(*cluster);
  std::unique_ptr<Client> survivor;
  ClientOptions options;
  options.scratch_bytes_per_context = 4096;
  ASSERT_TRUE(cluster->NewClient(options, &survivor).ok());
  std::unique_ptr<Context> dying_ctx, checker;
  ASSERT_TRUE(dying->NewBlockingContext(&dying_ctx).ok());
  ASSERT_TRUE(survivor->NewBlockingContext(&checker).ok());
  const IndexKind kind = BTreeKind(true, 256);
  std::unique_ptr<RangeIndex> dying_index, survivor_index;
  ASSERT_TRUE(kind.open(dying.get(), "t", &dying_index).ok());
  ASSERT_TRUE(kind.open(survivor.get(), "t", &survivor_index).ok());
  ASSERT_TRUE(dying_index->Insert(*dying_ctx, Key(1), 1).ok());
  const uint32_t dying_id = runtime::ComputeNode::Of(*dying).id();
  Faults(*cluster).KillComputeNode(dying_id);
  auto& membership = runtime::ComputeNode::Of(*survivor).membership();
  runtime::LeaseWatch watch(cluster->options().lease.timeout);
  bool gone = false;
  for (int i = 0; i < 10000 && !gone; ++i) {
    const StatusOr<bool> checked = membership.Check(ContextImpl::From(*checker), dying_id, watch);
    ASSERT_TRUE(checked.ok()) << checked.status().ToString();
    gone = *checked;
    if (!gone) std::this_thread::sleep_for(cluster->options().lease.period);
  }
  EXPECT_TRUE(gone);
}

// D's first recorded change makes its directory: one ordered batch whose
// last WRITEs on the lease's memory node are the 16-byte one naming the
// root and its shape in D's lease record (words 2 and 3), then the slot's
// directory word. D holds the leaf's lock then (Grow runs inside Release).
// A death that tears that 16-byte WRITE (the root's word placed, the
// shape's not: DESIGN.md promises 8-byte atomicity only) must still let a
// survivor recover D. Here D dies holding a leaf's lock with no whole
// record, and its lease record is left as such a tear leaves it (root
// named, shape 0). RecoveryStep answers DataLoss for a shape that is not
// this version's, at every try: D is never recovered and its hold is never
// freed.
TEST(RedoEdgeTest, ATornDirectoryNamingIsRecoverable) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, BTreeKind(true));
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  uint64_t value = 0;
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    return nodes.dying_index().Lookup(ctx, Key(kVictim), &value);
                  })
                  .ok());
  std::vector<Posted> batch;
  lock::RedoLog::SlotRef slot;
  (void)nodes.KillInFirstWriteBatch(
      [&](ContextImpl& ctx) {
        const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
        EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
        return updated;
      },
      &batch, &slot);
  ASSERT_FALSE(batch.empty());
  // Nothing of the batch placed; the lease record's shape word as a torn
  // naming WRITE leaves it.
  auto& membership = runtime::ComputeNode::Of(nodes.dying()).membership();
  const StatusOr<RemoteAddress> lease =
      membership.LeaseRecordOf(nodes.placer_ctx(), nodes.dying_id());
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_NE(ReadWord(nodes.placer_ctx(), *lease + runtime::kLeaseRedoDirectoryOffset), 0u);
  ASSERT_NO_FATAL_FAILURE(Place(nodes.placer_ctx(), *lease + runtime::kLeaseRedoShapeOffset,
                                std::vector<uint8_t>(8, 0), 0, 1));
  ASSERT_NO_FATAL_FAILURE(nodes.Recover());
  ASSERT_TRUE(nodes.survivor_index().Lookup(nodes.survivor(), Key(kVictim), &value).ok());
  EXPECT_EQ(value, kVictim);
  const Status updated = nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000);
  EXPECT_TRUE(updated.ok()) << updated.ToString();
}

// A survivor whose scratch is 8 KiB (room for four 1 KiB nodes and more,
// as BTreeOptions asks) on two memory nodes updates a key whose leaf lock a
// dead node holds: its wait recovers the dead node from inside the update,
// with the update's node buffers taken, and RecoveryStep then needs the
// root's 2 KiB, a page's 4 KiB (256 numbers x 2 memory nodes) and a slot's
// first 512 bytes in the same arena. The recovery fails ResourceExhausted
// at every try, and the update never gets the lock.
TEST(RedoEdgeTest, ASurvivorWithEightKiBScratchRecoversFromInsideAnUpdate) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, BTreeKind(false), /*prepare=*/true, /*memory_nodes=*/2,
              /*survivor_scratch=*/8192);
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    return nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                  })
                  .ok());
  std::vector<Posted> batch;
  lock::RedoLog::SlotRef slot;
  (void)nodes.KillInFirstWriteBatch(
      [&](ContextImpl& ctx) {
        const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
        EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
        return updated;
      },
      &batch, &slot);
  ASSERT_FALSE(batch.empty());
  // Nothing of the batch placed: D died holding the leaf's lock.
  const Status updated = nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000);
  EXPECT_TRUE(updated.ok()) << updated.ToString();
}

// The radix ABA case again, through a hold left behind. D's update X
// fails in every batch after its lock CAS (the memory node unreachable for
// a while): its write-back batch placed up to its clear (record and WRITE
// landed, clear and release not), every retry and the release by CAS
// failed, so the rear word keeps D's locked word and X's record stays
// whole, as lock/redo_log.h allows ("a hold left behind"). D's next update
// of the key has its lock batch [CAS, READ] fail: LockLeaf then releases
// "its" word by CAS from D's locked word (turn->Release, no clear), which
// frees the word X left, with X's record still whole. S writes 3000. D
// takes the leaf again (the same locked word) and dies before its new
// record lands: recovery finds X's record whole and the word holding its
// hold value, and redoes X's 2000 over S's acknowledged 3000.
// A hold a failed release left behind (every post of the write-back and of
// the release by CAS failed, the record and the WRITE placed) is this
// acquisition's alone: a later failed lock of the same compute node
// undoes its own CAS only, so the word stays held with its record whole,
// and a recovery after the node's death completes that change. (With one
// hold value per compute node, the later lock's undo freed the word while
// the record stayed whole; the node's next hold of the leaf matched it
// again, and a recovery then redid the old change over a survivor's
// acknowledged write.)
TEST(RedoLeftHoldTest, AHoldAFailedReleaseLeftIsFreedOnlyByRecovery) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, RadixKind());
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    return nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                  })
                  .ok());
  // X: every batch after the CAS fails; its record and WRITE placed.
  std::vector<Posted> batch;
  lock::RedoLog::SlotRef slot;
  const Status x = nodes.KillInFirstWriteBatch(
      [&](ContextImpl& ctx) {
        const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
        EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
        return updated;
      },
      &batch, &slot, /*kill=*/false);
  ASSERT_FALSE(x.ok());
  const Parts parts = PartsOf(batch, slot);
  ASSERT_TRUE(parts.recorded);
  ASSERT_NO_FATAL_FAILURE(nodes.Place(batch, Cut{parts.change_end, 0, 0}));
  const RemoteAddress rear = batch.back().remote;
  const uint64_t hold = ReadWord(nodes.placer_ctx(), rear);
  ASSERT_NE(hold, 0u) << "X's hold was not left behind";
  // Y: its lock batch fails once; its undo by CAS is its own hold's.
  fabric::RandomBatchFailures once;
  once.probability = 1;
  once.max_failures = 1;
  once.compute_nodes = {nodes.dying_id()};
  ASSERT_TRUE(Faults(nodes.cluster()).FailBatchesAtRandom(once).ok());
  const Status y = nodes.OnDying(
      [&](ContextImpl& ctx) { return nodes.dying_index().Update(ctx, Key(kVictim), 2500); });
  Faults(nodes.cluster()).StopRandomFailures();
  EXPECT_FALSE(y.ok());
  EXPECT_EQ(ReadWord(nodes.placer_ctx(), rear), hold) << "Y freed the word X's release left";
  // D's context takes 2^24 acquisitions: the wrap clears its slots, but
  // not X's record, whose word still holds its value.
  ASSERT_TRUE(
      nodes.OnDying([&](ContextImpl& ctx) { return TakeAcquisitions(ctx, kHoldWrap); }).ok());
  EXPECT_NE(ReadWord(nodes.placer_ctx(), slot.address), 0u)
      << "the wrap cleared a record whose word its hold still held";
  // D dies; the survivor's recovery completes X's change and frees the word.
  Faults(nodes.cluster()).KillComputeNode(nodes.dying_id());
  ASSERT_NO_FATAL_FAILURE(nodes.Recover());
  EXPECT_EQ(ReadWord(nodes.placer_ctx(), rear), 0u);
  uint64_t value = 0;
  ASSERT_TRUE(nodes.survivor_index().Lookup(nodes.survivor(), Key(kVictim), &value).ok());
  EXPECT_EQ(value, 2000u) << "X's whole record was not redone";
  ASSERT_TRUE(nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000).ok());
  ASSERT_TRUE(nodes.survivor_index().Lookup(nodes.survivor(), Key(kVictim), &value).ok());
  EXPECT_EQ(value, 3000u);
}

// A release that lands leaves its record whole (no clear): it can never
// match the word again only while no later hold of the word has the same
// value. A radix hold keeps 24 bits of its acquisition, so the context's
// 2^24-th acquisition after one has that one's value again; as those bits
// pass 0, NextAcquisition clears the context's slots. Here D updates a key
// (its record left whole), S updates it after, D takes 2^24 acquisitions
// and then holds the leaf again under the very value of its first update
// and dies before its record lands: the recovery must not redo the first
// update over S's acknowledged write (it does without the clear at the
// wrap).
TEST(RedoWrapTest, ARecordIsNeverRedoneUnderAHoldValueThatCameRound) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, RadixKind());
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  uint64_t first = 0;
  uint32_t number = 0;
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    const Status status = nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                    first = ctx.lock_acquisitions();
                    number = ctx.number();
                    return status;
                  })
                  .ok());
  ASSERT_TRUE(nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000).ok());
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    // Up to one before the first update's value comes round.
                    return TakeAcquisitions(ctx, kHoldWrap - 1);
                  })
                  .ok());
  uint64_t held = 0, value = 0;
  ASSERT_NO_FATAL_FAILURE(nodes.DieUpdatingThenRecover(kVictim, 4000, &held, &value));
  EXPECT_EQ(held, radix::LockedBy(nodes.dying_id(), number, first))
      << "D's hold is not the first update's value again";
  EXPECT_EQ(value, 3000u) << "1000: the first update's record was redone";
}

// ---- Recovery in bounded scratch -------------------------------------------

// A record longer than the pieces recovery reads it in (a whole-node
// write-back: the node image, 1 KiB or 4 KiB, WRITTEN into the record
// after its head) is redone by a survivor whose arena has only 1 KiB left
// (RecoveryStep's bound), and the same record with one word of a later
// piece of its image wrong (its WRITE torn: the checksum fails) is not.
// D dies in its update's write-back batch with none of it placed; the
// record's ops are placed whole, or whole but for that word.
TEST(RedoScratchTest, ALongRecordIsRedoneInPiecesAndATornOneIsNot) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  // What the survivor's arena keeps free while it recovers D.
  constexpr size_t kLeft = 1024;
  for (const uint32_t node_bytes : {1024u, 4096u}) {
    for (const bool torn : {false, true}) {
      SCOPED_TRACE(std::to_string(node_bytes) + "-byte nodes, " + (torn ? "torn" : "whole"));
      Nodes nodes(FabricBackend::kLocal, BTreeKind(false, node_bytes));
      for (uint64_t i = 0; i < kKeys; ++i)
        ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
      ASSERT_TRUE(nodes
                      .OnDying([&](ContextImpl& ctx) {
                        return nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                      })
                      .ok());
      std::vector<Posted> batch;
      lock::RedoLog::SlotRef slot;
      (void)nodes.KillInFirstWriteBatch(
          [&](ContextImpl& ctx) {
            const Status updated = nodes.dying_index().Update(ctx, Key(kVictim), 2000);
            EXPECT_FALSE(updated.ok()) << "the update's batches did not fail";
            return updated;
          },
          &batch, &slot);
      const Parts parts = PartsOf(batch, slot);
      ASSERT_TRUE(parts.recorded) << "the write-back carries no record";
      // The record's ops: its head, then the image's bytes after it.
      ASSERT_EQ(parts.record_end - parts.linked, 2u);
      std::vector<uint8_t> image = batch[parts.record_end - 1].bytes;
      ASSERT_GE(image.size(), node_bytes);
      std::vector<std::vector<uint8_t>> old;
      for (const Posted& op : batch) {
        old.push_back(
            ReadBytes(nodes.placer_ctx(), op.remote, static_cast<uint32_t>(op.bytes.size())));
      }
      if (torn) {
        // The image's last word (past the first pieces) not as recorded.
        image[image.size() - 1] ^= 0x5a;
      }
      std::vector<Posted> placed(batch.begin(), batch.begin() + parts.record_end);
      placed.back().bytes = image;
      ASSERT_NO_FATAL_FAILURE(nodes.Place(placed, Cut{parts.record_end, 0, 0}));
      {
        ContextImpl& survivor = nodes.survivor_ctx();
        runtime::ScratchArena::Scope taken(survivor.arena());
        const size_t free = survivor.arena().capacity() - survivor.arena().used();
        ASSERT_GT(free, kLeft);
        ASSERT_TRUE(survivor.arena().Bytes(free - kLeft, 8).ok());
        ASSERT_NO_FATAL_FAILURE(nodes.Recover());
      }
      ExpectOldOrNew(nodes.survivor_ctx(), batch, parts, old, !torn, torn ? "torn" : "whole");
      uint64_t value = 0;
      RangeIndex& index = nodes.survivor_index();
      ASSERT_TRUE(index.Lookup(nodes.survivor(), Key(kVictim), &value).ok());
      EXPECT_EQ(value, torn ? 1000u : 2000u);
      if (!torn) {
        EXPECT_EQ(ReadWord(nodes.survivor_ctx(), batch.back().remote), 0u)
            << "a redone word left held";
      }
      const Status updated = index.Update(nodes.survivor(), Key(kVictim), 3000);
      EXPECT_TRUE(updated.ok()) << updated.ToString();
      ASSERT_TRUE(index.Lookup(nodes.survivor(), Key(kVictim), &value).ok());
      EXPECT_EQ(value, 3000u);
    }
  }
}

// A record of kMaxRecordedWrites WRITEs of many lengths, short and long,
// whole words or not (its WRITE table alone longer than a recovery piece,
// its long WRITEs several pieces each), written by D with none of its
// change landed, is redone whole by a survivor with 1 KiB of its arena
// left.
TEST(RedoScratchTest, ARecordOfManyWritesIsRedoneInPieces) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint32_t kWrites = lock::RedoLog::kMaxRecordedWrites;
  constexpr size_t kLeft = 1024;
  constexpr uint64_t kHold = 0x0123456789abcdefull;
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(Options(FabricBackend::kLocal), &cluster).ok());
  auto dying = testing::NewClient(*cluster);
  auto survivor = testing::NewClient(*cluster);
  std::unique_ptr<Context> dying_context, checker;
  ASSERT_TRUE(dying->NewBlockingContext(&dying_context).ok());
  ASSERT_TRUE(survivor->NewBlockingContext(&checker).ok());
  ContextImpl& ctx = ContextImpl::From(*dying_context);
  ContextImpl& check = ContextImpl::From(*checker);
  const auto log = lock::RedoLog::For(runtime::ComputeNode::Of(*dying));
  // S's recovery step (its first lock user's, when it opens an index).
  const auto survivor_log = lock::RedoLog::For(runtime::ComputeNode::Of(*survivor));
  // The word, held by D; the WRITEs' targets, zeroed.
  const StatusOr<RemoteAddress> word = ctx.allocator().Allocate(8, 8, 0);
  ASSERT_TRUE(word.ok()) << word.status().ToString();
  std::vector<uint8_t> hold(8);
  std::memcpy(hold.data(), &kHold, 8);
  ASSERT_NO_FATAL_FAILURE(Place(check, *word, hold, 0, 1));
  std::vector<uint32_t> lengths;
  for (uint32_t i = 0; i < kWrites; ++i)
    lengths.push_back(i % 3 == 0 ? 8 + 5 * i : 61 + 97 * i);  // 8 .. 1419 bytes
  std::vector<RemoteAddress> targets;
  std::vector<std::vector<uint8_t>> bytes;
  for (uint32_t i = 0; i < kWrites; ++i) {
    const StatusOr<RemoteAddress> at = ctx.allocator().Allocate(lengths[i] + 8, 8, 0);
    ASSERT_TRUE(at.ok()) << at.status().ToString();
    targets.push_back(*at);
    ASSERT_NO_FATAL_FAILURE(
        Place(check, *at, std::vector<uint8_t>(lengths[i] + 8, 0), 0, lengths[i] / 8 + 1));
    std::vector<uint8_t> value(lengths[i]);
    for (uint32_t b = 0; b < lengths[i]; ++b)
      value[b] = static_cast<uint8_t>(i * 31 + b * 7 + 1);
    bytes.push_back(std::move(value));
  }
  // The change's record, wrapped by D and placed alone: its ops in D's
  // slot but the clear, none of the change's own.
  {
    runtime::ScratchArena::Scope scope(ctx.arena());
    std::vector<Op> change;
    for (uint32_t i = 0; i < kWrites; ++i) {
      uint8_t* local = *ctx.arena().Bytes(lengths[i], 8);
      std::memcpy(local, bytes[i].data(), lengths[i]);
      change.push_back(Op::Write(targets[i], local, lengths[i]));
    }
    std::vector<Op> batch(kWrites + lock::RedoLog::kMaxAddedOps);
    const StatusOr<uint32_t> wrapped =
        log->Wrap(ctx, *word, kHold, change, 0, static_cast<uint32_t>(batch.size()), batch.data(),
                  /*clear=*/true);
    ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
    const lock::RedoLog::SlotRef slot = log->SlotOf(ctx.number(), 0);
    ASSERT_GT(slot.capacity, 0u);
    std::vector<Op> record;
    for (uint32_t i = 0; i + 1 < *wrapped; ++i) {
      const Op& op = batch[i];
      if (op.remote.offset() >= slot.address.offset() &&
          op.remote.offset() < slot.address.offset() + slot.capacity) {
        record.push_back(op);
      }
    }
    ASSERT_FALSE(record.empty());
    ASSERT_GT(record.front().length, 256u) << "the head fits in one piece";
    ASSERT_TRUE(ctx.ExecuteAll(record).ok());
  }
  const uint32_t dying_id = runtime::ComputeNode::Of(*dying).id();
  Faults(*cluster).KillComputeNode(dying_id);
  {
    runtime::ScratchArena::Scope taken(check.arena());
    const size_t free = check.arena().capacity() - check.arena().used();
    ASSERT_GT(free, kLeft);
    ASSERT_TRUE(check.arena().Bytes(free - kLeft, 8).ok());
    auto& membership = runtime::ComputeNode::Of(*survivor).membership();
    runtime::LeaseWatch watch(cluster->options().lease.timeout);
    bool gone = false;
    for (int i = 0; i < 10000 && !gone; ++i) {
      const StatusOr<bool> checked = membership.Check(check, dying_id, watch);
      ASSERT_TRUE(checked.ok()) << checked.status().ToString();
      gone = *checked;
      if (!gone) std::this_thread::sleep_for(cluster->options().lease.period);
    }
    ASSERT_TRUE(gone);
  }
  for (uint32_t i = 0; i < kWrites; ++i) {
    std::vector<uint8_t> want = bytes[i];
    want.resize(lengths[i] + 8, 0);  // nothing past the WRITE's end
    EXPECT_EQ(ReadBytes(check, targets[i], lengths[i] + 8), want) << "WRITE " << i;
  }
  EXPECT_EQ(ReadWord(check, *word), 0u) << "a redone word left held";
}

// A verbs process's next client takes its id's directory over, and its
// contexts' numbers and lock acquisitions start again: the hold an earlier
// client's update had comes round at once. Here D's first client updates a
// key (its record left whole by the landed release), S updates it after,
// D's next client opens (RedoLog::TakeOver clears the records it takes
// over), holds the leaf under the very value of that first update and
// dies before its record lands: the recovery must not redo the first
// update over S's acknowledged write (it does without TakeOver's clear).
TEST(RedoReopenTest, AnEarlierClientsRecordIsNeverRedoneUnderItsSuccessorsHold) {
  testing::Watchdog watchdog(std::chrono::seconds(120));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, RadixKind());
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  uint64_t first = 0;
  uint32_t number = 0;
  lock::RedoLog::SlotRef slot;
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    const Status status = nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                    first = ctx.lock_acquisitions();
                    number = ctx.number();
                    slot = lock::RedoLog::For(ctx.compute_node())->SlotOf(number, 0);
                    return status;
                  })
                  .ok());
  ASSERT_FALSE(slot.address.is_null());
  ASSERT_NE(ReadWord(nodes.placer_ctx(), slot.address), 0u)
      << "the update's record was cleared: this test needs it left whole";
  ASSERT_TRUE(nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000).ok());
  ASSERT_NO_FATAL_FAILURE(nodes.ReopenDying(RadixKind()));
  EXPECT_EQ(ReadWord(nodes.placer_ctx(), slot.address), 0u)
      << "the next client took the record over without clearing it";
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    if (ctx.number() != number) {
                      return Status::Internal("another context number than the first client's");
                    }
                    // The path to the key cached, as the first client's was.
                    uint64_t seen = 0;
                    DMIDX_RETURN_IF_ERROR(nodes.dying_index().Lookup(ctx, Key(kVictim), &seen));
                    while (ctx.lock_acquisitions() + 1 < first)
                      ctx.NextLockAcquisition();
                    return Status::Ok();
                  })
                  .ok());
  uint64_t held = 0, value = 0;
  lock::RedoLog::SlotRef next_slot;
  ASSERT_NO_FATAL_FAILURE(nodes.DieUpdatingThenRecover(kVictim, 4000, &held, &value, &next_slot));
  EXPECT_EQ(next_slot.address, slot.address) << "the slot was not taken over";
  EXPECT_EQ(held, radix::LockedBy(nodes.dying_id(), number, first))
      << "the next client's hold is not the first update's value";
  EXPECT_EQ(value, 3000u) << "1000: the first client's record was redone";
}

// NextAcquisition clears only the wrapping context's own slots, but a
// radix handover chain's later holders record under the chain's (its
// first holder's) hold in their own slots; so a holder the word was
// handed to clears its record. Here D's coroutine 0 (A) takes a key's
// leaf with hold H and writes 1000, hands the word to coroutine 1 (B),
// which writes 2000 under H and releases. S writes 3000. A takes 2^24
// acquisitions (its slots cleared as the bits pass 0), holds the leaf
// again under H and dies before its record lands: had B's record been
// left whole, recovery would find it matching the word and redo 2000 over
// S's acknowledged 3000 (it did, before handed holders cleared).
TEST(RedoWrapTest, AChainRecordInAnotherContextsSlotIsNeverRedoneAfterTheFirstHoldersWrap) {
  testing::Watchdog watchdog(std::chrono::seconds(300));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  // Without write combining, so that two updates of one key queue for its
  // leaf rather than combine.
  const IndexKind kind{
      "radix_no_wc", [](Client* client, const std::string& name, std::unique_ptr<RangeIndex>* out) {
        RadixOptions options;
        options.lock_timeout = milliseconds(20000);
        options.write_combining = false;
        std::unique_ptr<Radix> tree;
        DMIDX_RETURN_IF_ERROR(Radix::Open(client, name, options, &tree));
        *out = std::move(tree);
        return Status::Ok();
      }};
  Nodes nodes(FabricBackend::kLocal, kind);
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  // Caches warm on D.
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    uint64_t value = 0;
                    return nodes.dying_index().Lookup(ctx, Key(kVictim), &value);
                  })
                  .ok());
  std::shared_ptr<lock::RedoLog> redo = lock::RedoLog::For(runtime::ComputeNode::Of(nodes.dying()));
  uint32_t numbers[2] = {};
  uint64_t acquisitions[2] = {};
  Status statuses[2];
  bool chained = false;
  for (int attempt = 0; attempt < 50 && !chained; ++attempt) {
    std::atomic<int> started{0};
    const Status run = nodes.dying().Run([&](Context& context) -> Status {
      auto& ctx = ContextImpl::From(context);
      const int i = ctx.coroutine_index();
      numbers[i] = ctx.number();
      started.fetch_add(1);
      // Both at once: the one that takes the leaf first keeps it for the
      // other, which queued meanwhile (retried until A, coroutine 0, is first).
      while (started.load() != 2)
        ctx.Yield();
      for (int k = 0; k < attempt % 8 && i == 1; ++k)
        ctx.Yield();
      statuses[i] = nodes.dying_index().Update(context, Key(kVictim), 1000 * (i + 1));
      acquisitions[i] = ctx.lock_acquisitions();
      return Status::Ok();
    });
    ASSERT_TRUE(run.ok()) << run.ToString();
    ASSERT_TRUE(statuses[0].ok() && statuses[1].ok());
    // Chained: B's record is under A's hold.
    const lock::RedoLog::SlotRef b = redo->SlotOf(numbers[1], 0);
    ASSERT_FALSE(b.address.is_null());
    chained = ReadWord(nodes.placer_ctx(), b.address + lock::kRecordHoldOffset) ==
              radix::LockedBy(nodes.dying_id(), numbers[0], acquisitions[0]);
  }
  ASSERT_TRUE(chained) << "no handover chain";
  const lock::RedoLog::SlotRef b_slot = redo->SlotOf(numbers[1], 0);
  const uint64_t hold = ReadWord(nodes.placer_ctx(), b_slot.address + lock::kRecordHoldOffset);
  EXPECT_EQ(ReadWord(nodes.placer_ctx(), b_slot.address), 0u)
      << "B's record, under the chain's hold (A's acquisition), was left whole";
  ASSERT_EQ(hold, radix::LockedBy(nodes.dying_id(), numbers[0], acquisitions[0]))
      << "B's record is not under A's (the chain's) hold";
  ASSERT_TRUE(nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000).ok());
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    if (ctx.number() != numbers[0]) return Status::Internal("not A's number");
                    if (ctx.lock_acquisitions() != acquisitions[0])
                      return Status::Internal("A took other acquisitions");
                    return TakeAcquisitions(ctx, kHoldWrap - 1);
                  })
                  .ok());
  uint64_t held = 0, value = 0;
  ASSERT_NO_FATAL_FAILURE(nodes.DieUpdatingThenRecover(kVictim, 4000, &held, &value));
  EXPECT_EQ(held, hold) << "A's hold is not the chain's value again";
  EXPECT_EQ(value, 3000u) << "2000: B's record (under A's hold) was redone after A's wrap";
}

// A Grow whose round trip fails forgets the context's slot locally
// (page->slots[index] = Slot{}) while the directory may still name it,
// with the record the context left whole there (a landed release has no
// clear); so ClearSlots clears what the directory names, not what the
// client knows. D updates a key (record R, hold H, left whole), S writes
// 3000, D's Reserve of a larger slot fails, D takes 2^24 acquisitions,
// holds the leaf again under H, and dies before a record of its own is
// placed (its Grow fails again): recovery must not redo R's 1000 over
// S's 3000 (it did, when ClearSlots cleared the slots the client knew).
TEST(RedoWrapTest, ASlotAFailedGrowForgotIsClearedAtTheWrap) {
  testing::Watchdog watchdog(std::chrono::seconds(300));
  constexpr uint64_t kKeys = 40, kVictim = 17;
  Nodes nodes(FabricBackend::kLocal, RadixKind(), /*prepare=*/false);
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_TRUE(nodes.survivor_index().Insert(nodes.survivor(), Key(i), i).ok());
  std::shared_ptr<lock::RedoLog> redo = lock::RedoLog::For(runtime::ComputeNode::Of(nodes.dying()));
  uint64_t first = 0;
  uint32_t number = 0;
  lock::RedoLog::SlotRef named;
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    const Status status = nodes.dying_index().Update(ctx, Key(kVictim), 1000);
                    first = ctx.lock_acquisitions();
                    number = ctx.number();
                    named = redo->SlotOf(number, 0);
                    return status;
                  })
                  .ok());
  ASSERT_FALSE(named.address.is_null());
  ASSERT_NE(ReadWord(nodes.placer_ctx(), named.address), 0u) << "the record was cleared";
  ASSERT_TRUE(nodes.survivor_index().Update(nodes.survivor(), Key(kVictim), 3000).ok());
  fabric::RandomBatchFailures failures;
  failures.probability = 1;
  failures.compute_nodes = {nodes.dying_id()};
  ASSERT_TRUE(nodes
                  .OnDying([&](ContextImpl& ctx) {
                    if (ctx.number() != number) return Status::Internal("another number");
                    EXPECT_TRUE(Faults(nodes.cluster()).FailBatchesAtRandom(failures).ok());
                    const Status grown = redo->Reserve(ctx, 0, 4096);
                    Faults(nodes.cluster()).StopRandomFailures();
                    if (grown.ok()) return Status::Internal("the Reserve did not fail");
                    return TakeAcquisitions(ctx, kHoldWrap - 1);
                  })
                  .ok());
  EXPECT_TRUE(redo->SlotOf(number, 0).address.is_null()) << "the failed Grow kept the slot";
  uint64_t held = 0, value = 0;
  ASSERT_NO_FATAL_FAILURE(nodes.DieUpdatingThenRecover(kVictim, 4000, &held, &value));
  EXPECT_EQ(value, 3000u) << "1000: the record in the slot a failed Grow forgot was redone";
}

// Under sim, in virtual time, with torn WRITEs (a WRITE lands in pieces,
// and a kill falls between events: a piece may land, the next not): D's
// coroutine updates one key in a loop, and S's kills D at one of many
// instants 331 ns apart (32 us: several of its updates), then recovers it (as a waiter
// on its word would), reads the key, and writes it. No read fails, the key
// holds the last value D had acknowledged or the one it was writing, and
// every other key is intact.
class RedoSimTest : public ::testing::TestWithParam<IndexKind> {};

TEST_P(RedoSimTest, AKilledUpdaterLeavesNoTornObject) {
  testing::Watchdog watchdog(std::chrono::seconds(900));
  constexpr int kInstants = 96;
  constexpr uint64_t kKeys = 40, kVictim = 17, kFinal = 1000000;
  int took_effect = 0;
  for (int instant = 0; instant < kInstants; ++instant) {
    SCOPED_TRACE(GetParam().name + ", instant " + std::to_string(instant));
    ClusterOptions options = Options(FabricBackend::kSim);
    options.local.torn_writes = true;
    options.local.seed = static_cast<uint64_t>(instant) + 1;
    std::unique_ptr<Cluster> cluster;
    ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
    auto dying = testing::NewClient(*cluster);
    auto survivor = testing::NewClient(*cluster);
    std::unique_ptr<Context> checker;
    ASSERT_TRUE(survivor->NewBlockingContext(&checker).ok());
    std::unique_ptr<RangeIndex> dying_index, survivor_index;
    ASSERT_TRUE(GetParam().open(dying.get(), "t", &dying_index).ok());
    ASSERT_TRUE(GetParam().open(survivor.get(), "t", &survivor_index).ok());
    testing::Model model;
    for (uint64_t i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(survivor_index->Insert(*checker, Key(i), i).ok());
      model[i] = i;
    }
    testing::PrepareRedoSlots(*dying);
    const uint32_t dying_id = runtime::ComputeNode::Of(*dying).id();
    const std::chrono::nanoseconds kill_at =
        cluster->Now() + std::chrono::microseconds(40) + instant * std::chrono::nanoseconds(331);
    uint64_t acked = 0, found = 0;
    Status read, written, recovered;
    Client* clients[] = {dying.get(), survivor.get()};
    const Client::Work works[] = {
        [&](Context& ctx) {
          for (uint64_t value = 1;; ++value) {
            if (!dying_index->Update(ctx, Key(kVictim), value).ok()) return Status::Ok();
            acked = value;
          }
        },
        [&](Context& context) {
          auto& ctx = ContextImpl::From(context);
          ctx.SleepUntil(kill_at);
          Faults(*cluster).KillComputeNode(dying_id);
          auto& membership = runtime::ComputeNode::Of(*survivor).membership();
          runtime::LeaseWatch watch(options.lease.timeout);
          recovered = Status::Internal("never recovered");
          for (int i = 0; i < 1000; ++i) {
            const StatusOr<bool> gone = membership.Check(ctx, dying_id, watch);
            if (!gone.ok()) {
              recovered = gone.status();
              break;
            }
            if (*gone) {
              recovered = Status::Ok();
              break;
            }
            ctx.SleepUntil(ctx.Now() + options.lease.period);
          }
          read = survivor_index->Lookup(context, Key(kVictim), &found);
          written = survivor_index->Update(context, Key(kVictim), kFinal);
          return Status::Ok();
        }};
    ASSERT_TRUE(RunClients(clients, works).ok());
    ASSERT_TRUE(recovered.ok()) << recovered.ToString();
    ASSERT_TRUE(read.ok()) << read.ToString();
    EXPECT_TRUE(found == acked || found == acked + 1)
        << "read " << found << " after " << acked << " was acknowledged";
    took_effect += found == acked + 1 ? 1 : 0;
    ASSERT_TRUE(written.ok()) << written.ToString();
    model[kVictim] = kFinal;
    ASSERT_NO_FATAL_FAILURE(testing::ExpectIndexMatches(*survivor_index, *checker, model));
  }
  // Some kills fell after the dead update's record was whole.
  EXPECT_GT(took_effect, 0);
  EXPECT_LT(took_effect, kInstants);
  std::printf("%s: the dead update took effect after %d of %d kills\n", GetParam().name.c_str(),
              took_effect, kInstants);
}

INSTANTIATE_TEST_SUITE_P(Indexes, RedoSimTest,
                         ::testing::Values(BTreeKind(true), BTreeKind(false), RadixKind()),
                         [](const ::testing::TestParamInfo<IndexKind>& param) {
                           return param.param.name;
                         });

}  // namespace
}  // namespace dmidx
