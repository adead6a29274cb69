// The adaptive radix tree client behind dmidx::Radix. docs/radix.md has the
// layouts (radix/layout.h) and the protocols of each change.
//
//   radix.cc            lookups, descents, leaf reads, updates, the handle
//   radix_insert.cc     normal insert, leaf split, header split, type switch
//   radix_delete.cc     delete and the merges that undo path compression
//   radix_range.cc      scans and bulk load
//   radix_open.cc       the descriptor: create, open
#ifndef DMIDX_RADIX_RADIX_IMPL_H_
#define DMIDX_RADIX_RADIX_IMPL_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/radix.h"
#include "index/index_core.h"
#include "index/index_handle.h"
#include "index/object_writer.h"
#include "index/restarts.h"
#include "index/verified_read.h"
#include "lib/fabric/op.h"
#include "lib/runtime/context.h"
#include "lock/lock_queue.h"
#include "lock/redo_log.h"
#include "radix/layout.h"
#include "radix/radix_cache.h"

namespace dmidx::radix {

// Times a step whose batch failed is tried again on its own (a release, an
// undo, a read that finds out what landed) before the error is returned.
inline constexpr int kBatchRetries = lock::kRetriesAfterFailure;

// A verified internal node image in a context's arena.
struct NodeImage {
  fabric::RemoteAddress address;
  uint8_t* bytes = nullptr;  // kNodeBytes, of which the header's type's slots are read
  Header header;
  fabric::RemoteAddress reverse() const;
  Slot slot(uint32_t index) const;
  uint32_t capacity() const { return Capacity(header.type); }
  // The slot index holding `partial` (live or tombstone), or -1.
  int Find(uint8_t partial) const;
  // The first empty slot index below capacity(), or -1 (full).
  int FirstEmpty() const;
  // Live slots below capacity().
  uint32_t LiveCount() const;
};

// Where a descent stands: the slot it follows next.
struct Cursor {
  fabric::RemoteAddress slot_address;  // the word: in `parent`, or the descriptor's root slot
  Slot slot;                           // its value when read
  fabric::RemoteAddress parent;        // the child's expected reverse pointer
  uint32_t depth = 0;                  // key bytes matched before the child
  bool from_cache = false;             // slot read from a cached image: reverse-check the child
  fabric::RemoteAddress cached_node;   // the cache entry used (to invalidate)
};

// What a descent for one key ends at.
struct Landing {
  enum Kind {
    kEmptyRoot,       // the root slot is empty (cursor.slot empty)
    kLeaf,            // cursor.slot is a live leaf slot for the key's path
    kTombstone,       // cursor.slot is the key's partial key's tombstone
    kNoSlot,          // `node` has no slot for the key's branch byte
    kHeaderMismatch,  // `node`'s header differs from the key at key byte `mismatch`
  };
  Kind kind = kEmptyRoot;
  // kLeaf / kTombstone: the key's slot, in `node`; kNoSlot /
  // kHeaderMismatch: the slot that led to `node`.
  Cursor cursor;
  // The last internal node read (bytes null when none was: the slot is
  // the root slot or came from a cached image), and the slot that led to
  // it (slot_address null when unknown; for kNoSlot and kHeaderMismatch
  // the same as `cursor`).
  NodeImage node;
  Cursor holder;
  uint32_t mismatch = 0;
};

// A leaf image in a context's arena, checked.
struct LeafImage {
  uint8_t* bytes = nullptr;
  fabric::RemoteAddress reverse() const;
  uint64_t rear(const LeafShape& shape) const;
  uint64_t value() const;
  std::string_view key(const LeafShape& shape) const;
  bool Verify(const LeafShape& shape) const;
};

class RadixImpl final : public index::IndexHandle<Radix, RadixImpl> {
 public:
  RadixImpl(runtime::ComputeNode& node, std::string name, uint32_t key_bytes, bool fixed_size,
            fabric::RemoteAddress descriptor, const RadixOptions& options,
            std::shared_ptr<RadixCache> cache, index::RdwcDispatch rdwc);

 private:
  friend class RadixTestPeer;
  friend class index::IndexHandle<Radix, RadixImpl>;
  using Change = index::Write;
  // The hooks of index::IndexHandle (keys checked there).
  Status LookupKey(runtime::ContextImpl& ctx, std::string_view key, uint64_t* value);
  Status WriteKey(runtime::ContextImpl& ctx, std::string_view key, uint64_t value, Change change);
  Status DeleteKey(runtime::ContextImpl& ctx, std::string_view key) { return DeleteIn(ctx, key); }
  Status ScanKeys(runtime::ContextImpl& ctx, std::string_view from,
                  std::optional<std::string_view> to, size_t count, std::vector<KeyValue>* out) {
    return ScanRange(ctx, from, to, count, out);
  }
  Status LoadSorted(runtime::ContextImpl& ctx, std::span<const KeyValue> sorted,
                    double fill_factor) {
    return Load(ctx, sorted, fill_factor);
  }

  // What an attempt of a change ends in: done, descend again, the key's
  // leaf was deleted (kAbsent), or it holds another key (kSplit).
  enum class Outcome { kDone, kRestart, kAbsent, kSplit };

  // ---- radix.cc ----
  // NotFound for a key the tree does not hold (allocates nothing).
  static Status NotInTree() {
    static const Status::Constant kNotInTree(StatusCode::kNotFound, "key not in the radix tree");
    return kNotInTree.status();
  }
  // Descends for `key` and runs step(landing, leaf) where it lands (`leaf`:
  // a leaf buffer for the step), again from the root slot (no cache, with
  // backoff) while the step returns nullopt, and returns the status it
  // returns. `what` names the operation when it gives up.
  template <typename Step>
  Status EachDescent(runtime::ContextImpl& ctx, std::string_view key, const char* what,
                     Step&& step) {
    DMIDX_ASSIGN_OR_RETURN(uint8_t * leaf_bytes, ctx.arena().Bytes(shape_.bytes(), 64));
    LeafImage leaf{leaf_bytes};
    for (index::Restarts restarts; restarts.NextAfterBackoff(ctx);) {
      runtime::ScratchArena::Scope scope(ctx.arena());
      DMIDX_ASSIGN_OR_RETURN(const Landing landing, Descend(ctx, key, restarts.first()));
      std::optional<Status> done = step(landing, leaf);
      if (done) return std::move(*done);
    }
    return index::GaveUp(what, core_.label());
  }
  StatusOr<Outcome> WriteAt(runtime::ContextImpl& ctx, const Landing& landing, std::string_view key,
                            uint64_t value, Change change, LeafImage* leaf);
  // Descends from the deepest cached node (with `use_cache`) or the root
  // slot to where `key` ends. Internal nodes read on the way are cached.
  StatusOr<Landing> Descend(runtime::ContextImpl& ctx, std::string_view key, bool use_cache);
  // Reads the node `cursor` leads to: its type's slots, and the rest when
  // its header has a larger type. Checks the reverse pointer when the
  // cursor came from the cache. False (nothing read) when the node is stale.
  // A lagging slot type read afresh is repaired, and cursor->slot then
  // holds the repaired word (what the slot holds once the repair lands).
  StatusOr<bool> ReadNode(runtime::ContextImpl& ctx, Cursor* cursor, NodeImage* node);
  // A node reached through `cursor` (read afresh) whose header still holds
  // bytes the path above matched: a header split published its new parent
  // and has not trimmed it yet (or never will: its trim failed, or its
  // splitter died). Posts the trim on the splitter's behalf.
  Status HelpTrim(runtime::ContextImpl& ctx, const Cursor& cursor, const NodeImage& node,
                  std::string_view key);
  // Trims `node`'s header (*current as last read) to start at key byte
  // `depth`, with its reverse pointer claimed from `parent` meanwhile.
  // kNotChild: the reverse pointer does not name `parent` (moved, or
  // claimed by another change); kHeaderChanged: the header was not
  // *current, which now holds what it was.
  enum class Trim { kDone, kNotChild, kHeaderChanged };
  StatusOr<Trim> TrimHeader(runtime::ContextImpl& ctx, fabric::RemoteAddress node,
                            fabric::RemoteAddress parent, Header* current, uint32_t depth);
  // Reads a leaf until it passes its checksum (its rear word may be held:
  // `held` is the caller's own hold, if any), or DataLoss naming it when it
  // is damaged (index/verified_read.h). `image_failed`: *leaf holds an image
  // of it that failed its checksum (every READ is then a retry). Without a
  // hold, damage is confirmed under the rear lock (ReadLeafUnderLock),
  // through `turn` when the caller has this compute node's turn at the
  // rear word already (LockLeaf, waiting for another's hold).
  Status ReadLeaf(runtime::ContextImpl& ctx, fabric::RemoteAddress address, LeafImage* leaf,
                  uint64_t held = 0, bool image_failed = false, lock::LockTurn* turn = nullptr);
  // The leaf READ under its rear lock, taken and let go here
  // (index::VerifiedRead::read_locked).
  StatusOr<index::LockedRead> ReadLeafUnderLock(runtime::ContextImpl& ctx,
                                                fabric::RemoteAddress address, LeafImage* leaf,
                                                lock::LockTurn* turn);
  // A compute node's local queues for leaf locks (lock/lock_queue.h), one
  // table shared by its radix trees: a queue per rear word while contexts
  // want it, in options_.leaf_queue_buckets buckets (recycled entries:
  // about one queue per bucket, however many leaves pass through). A
  // context holds one leaf lock at a time. A holder that leaves with
  // waiters queued may keep the leaf's rear word (it holds this compute
  // node's id, not the context's) and leave its image of the leaf, after its
  // write-back landed, to the next holder, which then needs no CAS and no
  // READ (at most options_.max_handovers in a row, so other compute nodes
  // get their turn).
  // This compute node's turn at the rear lock of the leaf `cursor` leads
  // to (its local queue), and then the lock, for a change of `key` (its
  // image in *leaf): held (the turn holds the word); the leaf holds another
  // key (released); the leaf was deleted; or descend again (replaced, or a
  // stale route). The turn is kept until the leaf's lock is released or
  // handed over, or the attempt ends, or until a delete's mark has landed.
  enum class LeafLock { kHeld, kOtherKey, kDeleted, kRestart };
  StatusOr<LeafLock> LockLeaf(runtime::ContextImpl& ctx, const Cursor& cursor, std::string_view key,
                              LeafImage* leaf, lock::LockTurn* turn);
  // After the batch of an in-place write-back under `hold` (with or
  // without its release) failed: `write_back` (the WRITE with its redo
  // record, and its clear if any: lock::RedoLog::Wrap) and the release are
  // posted again while the rear word shows the release did not land
  // (lock::PostAgainHeld, up to kBatchRetries times, with the turn held).
  // Ok once the update is known to have landed and the word is free; else
  // the error, after the record's `clear` (null: none) and a release by
  // CAS from `hold` (lock::ReleaseHold, posted up to lock::kReleasePosts
  // times: a memory node unreachable through all of them leaves the word
  // held, as a dead holder does, with its record whole).
  Status FinishWriteBack(runtime::ContextImpl& ctx, fabric::RemoteAddress leaf, uint64_t hold,
                         std::span<const fabric::Op> write_back, const fabric::Op* clear,
                         Status failure);
  // An update of the key's leaf in place (kAbsent: the leaf was deleted;
  // kSplit: it holds another key).
  StatusOr<Outcome> UpdateInPlace(runtime::ContextImpl& ctx, const Cursor& cursor,
                                  std::string_view key, uint64_t value, LeafImage* leaf);
  StatusOr<Outcome> UpdateOutOfPlace(runtime::ContextImpl& ctx, const Landing& landing,
                                     std::string_view key, uint64_t value, LeafImage* leaf);
  // Gives a leaf nothing leads to any more back, after its grace period
  // (runtime/epochs.h).
  void RetireLeaf(runtime::ContextImpl& ctx, fabric::RemoteAddress leaf) {
    ctx.Retire(leaf, shape_.bytes(), kObjectAlignment);
  }
  void Invalidate(runtime::ContextImpl& ctx, const Cursor& cursor);
  // The leaf `cursor` leads to (read afresh, not from the cache) has the
  // replaced mark `rear` of an out-of-place update whose slot swing has
  // not landed: waits for it (lock::LockRetry::WaitOwned). Once the
  // update's compute node is recovered, gives back its mark and claim
  // while the slot still leads to the old leaf (the update never
  // returned). Ok: look again; a LockTimeout when the mark stays past
  // lock_timeout on a live owner.
  Status AwaitReplaced(runtime::ContextImpl& ctx, const Cursor& cursor, uint64_t rear);
  // What the three below share: waits while compute node `owner`'s change
  // is in flight on the object `via` leads to (read afresh), that is while
  // `watched` (the object's claim or mark) holds `found`, via's slot holds
  // via.slot and the node holding it is not frozen; once the owner is
  // recovered, runs `end` (lock::LockRetry::WaitOwned). Ok: look again; a
  // LockTimeout ("<kind> <object> ... stayed <what> by compute node ...")
  // when a live owner outlasts lock_timeout.
  Status AwaitOwner(runtime::ContextImpl& ctx, fabric::RemoteAddress watched, uint64_t found,
                    const Cursor& via, uint32_t owner, const char* kind,
                    fabric::RemoteAddress object, const char* what, FunctionRef<Status()> end);
  // The object (a leaf, or a node when `node`) that `via` leads to (read
  // afresh) has in its reverse pointer, where a mover's CAS expected
  // via.parent, `claim`: another context's claim, or a split's new node
  // not yet published (its maker word names the splitter). Waits for it to
  // go (lock::LockRetry::WaitOwned). Once its compute node is recovered,
  // gives the reverse pointer back to via's parent while via still leads
  // to the object (every change that claims an object it does not remove
  // gives the claim to the parent whose slot then leads to it; an
  // unpublished split is undone), unless the object is a node a merge
  // froze (AwaitMerge's). Ok at once for anything else (a node without a
  // maker: a stale route). Ok: look again; a LockTimeout past
  // lock_timeout on a live owner.
  Status AwaitClaim(runtime::ContextImpl& ctx, fabric::RemoteAddress object, uint64_t claim,
                    const Cursor& via, bool node);
  // `node`, which `via` leads to (read afresh), is frozen by a merge (its
  // header, or a slot) whose claim `claim` is on its reverse pointer, and
  // the merge's slot swing has not landed: waits for the merge to end
  // (lock::LockRetry::WaitOwned). Once the merge's compute node is
  // recovered, undoes the merge whole (radix_delete.cc, UndoMerge) while
  // via still leads to the node. Ok: look again; a LockTimeout past
  // lock_timeout on a live merger.
  Status AwaitMerge(runtime::ContextImpl& ctx, fabric::RemoteAddress node, uint64_t claim,
                    const Cursor& via);
  // The undo of a dead compute node's merge of `node` (claimed with
  // `claim` from `parent`), whose slot swing never landed: every CAS
  // expects the merge's own values, so it is idempotent.
  Status UndoMerge(runtime::ContextImpl& ctx, fabric::RemoteAddress node, uint64_t claim,
                   fabric::RemoteAddress parent);
  // UndoMerge once this context's claim `own` took over `claim` on `node`,
  // whose READ `image` shows (`child_words`: two words of scratch).
  Status UndoTakenMerge(runtime::ContextImpl& ctx, fabric::RemoteAddress node, uint64_t claim,
                        uint64_t own, fabric::RemoteAddress parent, uint8_t* image,
                        uint64_t* child_words);
  // For a scan, which has no route: a fresh descent for `key`, which waits
  // for a node a merge froze on the way (AwaitMerge).
  Status AwaitKey(runtime::ContextImpl& ctx, std::string_view key);

  // ---- radix_insert.cc ----
  // Each returns kDone when the key is in, kRestart to descend again.
  StatusOr<Outcome> InsertIntoSlot(runtime::ContextImpl& ctx, const Landing& landing,
                                   std::string_view key, uint64_t value);
  StatusOr<Outcome> InsertIntoNode(runtime::ContextImpl& ctx, const Landing& landing,
                                   std::string_view key, uint64_t value);
  StatusOr<Outcome> SplitLeaf(runtime::ContextImpl& ctx, const Landing& landing,
                              const LeafImage& leaf, std::string_view key, uint64_t value);
  StatusOr<Outcome> SplitHeader(runtime::ContextImpl& ctx, const Landing& landing,
                                std::string_view key, uint64_t value);
  // CASes the header of landing.node to `type` (or larger), then the slot
  // that led to it (landing.cursor).
  Status RaiseType(runtime::ContextImpl& ctx, const Landing& landing, uint8_t type);
  // Writes a new leaf for (key, value) whose reverse pointer is `parent`
  // into `buffer` and returns the WRITE (its address allocated near `near`).
  StatusOr<fabric::Op> NewLeaf(runtime::ContextImpl& ctx, std::string_view key, uint64_t value,
                               fabric::RemoteAddress parent, uint16_t near, uint8_t* buffer);
  StatusOr<fabric::RemoteAddress> AllocateNode(runtime::ContextImpl& ctx);
  uint8_t NewNodeType(uint32_t slots) const {
    return fixed_size_ ? kMaxType : TypeHolding(slots > 0 ? slots - 1 : 0);
  }
  // One CAS, waited for; returns the word found.
  StatusOr<uint64_t> CompareSwap(runtime::ContextImpl& ctx, fabric::RemoteAddress word,
                                 uint64_t expected, uint64_t desired);
  // The same, tried again while its batch fails (up to kBatchRetries): for
  // an undo whose CAS is harmless to repeat (its expected value is this
  // change's own, which nobody else writes).
  StatusOr<uint64_t> CompareSwapRetrying(runtime::ContextImpl& ctx, fabric::RemoteAddress word,
                                         uint64_t expected, uint64_t desired);
  // `count` words at `at` read afresh into `out` (ContextImpl::ReadWords),
  // tried again while the batch fails; ReadWordRetrying for one.
  Status ReadWordsRetrying(runtime::ContextImpl& ctx, fabric::RemoteAddress at, uint32_t count,
                           uint64_t* out);
  StatusOr<uint64_t> ReadWordRetrying(runtime::ContextImpl& ctx, fabric::RemoteAddress word) {
    uint64_t value = 0;
    DMIDX_RETURN_IF_ERROR(ReadWordsRetrying(ctx, word, 1, &value));
    return value;
  }
  // Round trip 2 of a split, whose round trip 1 claimed `moved`'s reverse
  // pointer from cursor.parent (this context's claim) and wrote the new
  // objects (made): the slot's CAS to `desired` and, in the same round
  // trip, `moved`'s reverse pointer from the claim to `named`, the new node
  // that holds it. The claim keeps the reverse pointer from naming a node
  // before its WRITE landed (on another memory node it may land after the
  // CAS), so a dead splitter leaves its claim or a wholly written node
  // that names its maker (AwaitClaim undoes either). True: published.
  // False: the slot changed (the moved object was deleted or replaced),
  // the reverse pointer given back, the new objects freed; look again. An
  // error when the batch failed and the slot does not show it landed
  // (given back where it still leads to `moved`).
  StatusOr<bool> PublishSplit(runtime::ContextImpl& ctx, const Cursor& cursor,
                              fabric::RemoteAddress moved, fabric::RemoteAddress named,
                              Slot desired, index::MadeObjects& made);

  // ---- radix_delete.cc ----
  Status DeleteIn(runtime::ContextImpl& ctx, std::string_view key);
  // The locked leaf of `key` at landing.cursor: marked deleted, its slot a
  // tombstone, merges above it. `words` (3) and `holder_image` (kNodeBytes)
  // are scratch taken before the lock. Ends `turn` once the mark has landed.
  Status Unlink(runtime::ContextImpl& ctx, const Landing& landing, std::string_view key,
                uint64_t* words, uint8_t* holder_image, lock::LockTurn& turn);
  // Undoes path compression at landing.node when a delete left it with at
  // most one live child. Best effort: a race abandons it (false).
  StatusOr<bool> Merge(runtime::ContextImpl& ctx, const Landing& landing);

  // ---- radix_range.cc ----
  Status ScanRange(runtime::ContextImpl& ctx, std::string_view from,
                   std::optional<std::string_view> to, size_t count, std::vector<KeyValue>* out);
  // The cached node a scan segment from `cursor` starts at (ScanRange).
  // The entries it used are held in `held` (ContextImpl::cache_slot).
  std::optional<RadixCache::Route> ScanStart(std::string_view cursor,
                                             std::optional<std::string_view> to,
                                             std::atomic<uint64_t>& held);
  // Appends the keys of [from, to] (at most `count` in all in *out) found
  // walking down from `start` read afresh, or from the root slot. Sets
  // *stale, appending nothing, when `start` turned out deleted or moved.
  Status ScanWalk(runtime::ContextImpl& ctx, const std::optional<RadixCache::Route>& start,
                  std::string_view from, std::optional<std::string_view> to, size_t count,
                  std::vector<KeyValue>* out, bool* stale);
  Status Load(runtime::ContextImpl& ctx, std::span<const KeyValue> sorted, double fill_factor);
  // What a bulk load has put on each memory node so far (its objects are
  // the writer's, given back if the load fails).
  struct Made {
    std::vector<std::pair<uint64_t, uint64_t>> on;  // leaves, nodes; by memory node
    // The nodes in the order Build meets them (depth first). A first,
    // planning Build only records each node's key depth and memory node;
    // the load then allocates them all, shallowest first, and the second
    // Build takes their addresses from `planned`.
    struct Node {
      uint32_t depth;
      uint16_t memory_node;
    };
    bool planning = false;
    std::vector<Node> nodes;
    std::vector<fabric::RemoteAddress> planned;
    size_t next = 0;
  };
  // Writes the subtree of `sorted` below `parent` (bulk load) and returns
  // its slot; every object made is added to *made. A leaf goes beside the
  // node holding its slot (as inserts put it, so a delete marks it and
  // CASes its slot in one batch), and a node goes on the memory node with
  // the fewest leaves of the load so far (of those, the fewest nodes):
  // leaves, which every operation reads, spread evenly however unevenly the
  // keys fill the nodes.
  StatusOr<Slot> Build(runtime::ContextImpl& ctx, index::ObjectWriter& writer,
                       std::span<const KeyValue> sorted, uint32_t depth,
                       fabric::RemoteAddress parent, uint8_t partial, double fill_factor,
                       uint16_t near, Made* made);

  // This context's claim (ClaimBy) and replaced mark (ReplacedBy).
  static uint64_t Claim(const runtime::ContextImpl& ctx) {
    return ClaimBy(ctx.compute_node().id(), ctx.number());
  }
  static uint64_t Replaced(const runtime::ContextImpl& ctx) {
    return ReplacedBy(ctx.compute_node().id(), ctx.number());
  }
  fabric::RemoteAddress root_slot() const { return descriptor_ + kRootSlotOffset; }
  // A new hold of a rear word for ctx: LockedBy with its next lock
  // acquisition (lock::RedoLog::NextAcquisition), this acquisition's alone.
  StatusOr<uint64_t> NewHold(runtime::ContextImpl& ctx) const {
    static_assert(kHoldAcquisitionBits >= lock::RedoLog::kHoldAcquisitionBits);
    DMIDX_ASSIGN_OR_RETURN(const uint64_t acquisition, redo_->NextAcquisition(ctx));
    return node_hold_ | (LockedBy(0, ctx.number(), acquisition) & ~uint64_t{0xffffff});
  }
  // The LockTimeout of a leaf whose rear word stayed held (by `holder`,
  // when the word named one).
  Status LeafLockTimeout(fabric::RemoteAddress leaf, std::optional<uint32_t> holder) const;

  const std::string name_;
  const LeafShape shape_;
  const bool fixed_size_;
  const fabric::RemoteAddress descriptor_;
  const RadixOptions options_;
  std::shared_ptr<RadixCache> cache_;  // null: no cache
  // The compute node's local queues for leaf locks, shared by its radix
  // trees.
  std::shared_ptr<lock::LocalLockTable> leaf_queues_;
  // The compute node's redo records: an in-place update's (UpdateInPlace).
  std::shared_ptr<lock::RedoLog> redo_;
  const uint64_t node_hold_;  // LockedBy(this compute node, 0, 0): NewHold's low bits
  // An in-place update's batch at most: the WRITE, its record and clear,
  // the release.
  static constexpr size_t kInPlaceBatchOps = 1 + lock::RedoLog::kMaxAddedOps + 1;
};

}  // namespace dmidx::radix

// Instantiated in radix.cc, where the point-operation hooks are inlined.
extern template class dmidx::index::IndexHandle<dmidx::Radix, dmidx::radix::RadixImpl>;

#endif  // DMIDX_RADIX_RADIX_IMPL_H_
