// Client-side allocator of remote memory. Takes chunks from memory nodes
// through their control path and carves aligned objects (tree nodes) from
// them; freed objects go to a free list of their size and node and are
// handed out again before new memory is carved.
//
// Its own free lists are in local memory. Behind them are the shared ones
// in each memory node (remote_free_list.h), which any compute node takes
// from and gives back to with one-sided CAS; only the calls that take a
// ContextImpl reach them, since they post ops:
// - Allocate(ctx, ...) with no local object of the size takes a bundle
//   from the node's shared list before it takes a new chunk, and before
//   it carves at all while the last bundle it took showed the list
//   non-empty; with a local object it posts nothing;
// - Free(ctx, ...) that leaves more than `keep_free_objects` local
//   objects of one size and node gives a bundle of them to the shared list;
// - ReleaseToShared(ctx) gives all of them back (a worker does so when it
//   goes, ContextImpl and Worker destructors), seals its chunks and
//   compacts the lists of the nodes it gave to.
//
// Chunks go back to their memory node (docs/design.md, "Chunks back to the
// memory node"). A chunk this allocator stops carving (it takes the next
// one, or ReleaseToShared) is *sealed* if a call with a context carved
// from it: the number of objects carved from
// it is WRITTEN to its seal word on the memory node (memory_node.h), with
// the next call that has a context. Compact(ctx, node) pops up to
// `compact_bundles_per_pass` bundles off the node's lists, gives back
// every sealed chunk whose carved count it holds in full
// (MemoryNodeControl::FreeChunk, which zeroes the seal) and pushes the
// rest back. Objects are never handed out twice, so holding all of a
// sealed chunk's objects means nobody else holds, uses or lists one. It
// runs on ReleaseToShared and when a node has fewer than
// `compact_below_free_chunks` free chunks after this allocator took one.
// The calls without a context never post: they use the local lists and
// chunks only, as for the runtime's own pages (lease.cc).
//
// One per client thread: not thread-safe, and it needs no locking because no
// two threads share one. The coroutines of that thread may interleave in
// the calls that take a context (each keeps no reference into the
// allocator's state across a round trip).
//
// Destroying an allocator gives no chunk back itself: the objects it carved
// are part of the indexes and outlive the thread that made them (a
// compactor gives a chunk back once they are all free). ReleaseChunks()
// is for tests of an allocator alone, with no shared lists: a shared list
// or another allocator may hold objects of the chunks it gives back. When an object does not fit
// in the rest of the current chunk, that rest is left unused.
#ifndef DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_
#define DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "dmidx/options.h"
#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/memnode/memory_node.h"
#include "lib/runtime/remote_free_list.h"

namespace dmidx::runtime {

class ContextImpl;

struct RemoteAllocatorOptions {
  // Free objects of one size on one memory node an allocator keeps for
  // itself; one more, and Free(ctx, ...) gives a bundle of them (up to
  // kMaxBundleObjects) to the node's shared list. Higher: fewer round
  // trips per free, more memory idle in one thread, and more lost if its
  // compute node dies (its free objects are lost with it). Default 64.
  uint32_t keep_free_objects = 64;
  // false: the shared lists are never used (the calls with a context
  // behave as those without), and no chunk is sealed or compacted.
  bool share = true;
  // ReclamationOptions::compact_below_free_chunks and
  // compact_bundles_per_pass (dmidx/options.h), with the same defaults.
  uint64_t compact_below_free_chunks = 16;
  uint32_t compact_bundles_per_pass = 256;
  // ReclamationOptions::max_draining_chunks, with the same default.
  uint32_t max_draining_chunks = 0;
  // The chunks being drained, shared by the allocators of one compute
  // node (its client's); it must outlive them. Null: the allocator keeps
  // a set of its own.
  class DrainingChunks* draining = nullptr;
  // ReclamationOptions::exhausted_wait: how long Allocate(ctx, ...) keeps
  // asking its exhausted waiter (SetExhaustedWaiter) before it gives up.
  std::chrono::nanoseconds exhausted_wait{std::chrono::seconds(1)};
  // What the allocators of one compute node (its client's) learned of
  // the shared lists, shared by them; it must outlive them. Null: the
  // allocator keeps its own.
  class EmptyListHints* hints = nullptr;
  // The hints' `recheck` when the allocator keeps its own (a client's
  // allocators share theirs, with its lease period).
  std::chrono::nanoseconds empty_list_recheck{std::chrono::milliseconds(100)};

  static RemoteAllocatorOptions From(const ReclamationOptions& reclamation);
};

// The marks' table of a memory node (docs/design.md, "Draining chunks"):
// kDrainingTableBytes in the free-list directory's page, right after the
// directory (remote_free_list.h), zeroed when that is made.
//
//   word 0  the claim: 0, or (drainer's compute-node id + 1) << 48 | stamp
//           (48 bits); the drainer CASes the stamp on each Tend
//   word 1  how many marks follow (at most kMaxDrainingChunks)
//   word 2  whose marks they are: (writer's id + 1) << 48; readers take
//           them only from the claim's holder
//   word 3  0
//   word 4  the marked chunks' indices
//
// Only the drainer writes words 1 on, with one WRITE: a READ that races it
// may see a torn list, which costs nothing but a wrong hint (a mark decides
// where free objects wait, never whether a chunk goes back: that takes a
// pass that holds every object its seal counts).
inline constexpr uint32_t kDrainingTableHeaderWords = 4;
inline constexpr uint64_t kClaimStampMask = (uint64_t{1} << 48) - 1;
static_assert(kDrainingTableBytes / 8 - kDrainingTableHeaderWords ==
              ReclamationOptions::kMaxDrainingChunks);

// The chunks a compute node's allocators keep free objects of off the
// lists (docs/design.md, "Draining chunks"), a set per memory node,
// shared by its allocators: its lease keeper's allocator makes it the
// memory node's table (Tend: the marks it makes as the drainer, or those
// it reads), any allocator clears the mark of a chunk it gives back, and
// every allocator's Free(ctx, ...) sends a marked chunk's objects to the
// node's draining list instead of keeping them for reuse. Reading takes
// no lock (Free's path); marking takes a mutex.
class DrainingChunks {
 public:
  explicit DrainingChunks(size_t nodes);
  ~DrainingChunks();
  DrainingChunks(const DrainingChunks&) = delete;
  DrainingChunks& operator=(const DrainingChunks&) = delete;

  // Whether `node` has a chunk marked (one relaxed load: the fast path's
  // test when none is).
  bool Any(uint16_t node) const {
    return node < node_count_ && nodes_[node].marked.load(std::memory_order_relaxed) != 0;
  }
  // Whether chunk `index` of `node` is marked.
  bool Contains(uint16_t node, uint64_t index) const;
  // Marks or clears chunk `index` of `node`, which has `total_chunks`
  // chunks (the same on every call for a node). Returns whether it was
  // marked before.
  bool Set(uint16_t node, uint64_t total_chunks, uint64_t index, bool draining);
  // Marks exactly the chunks `marks` of `node` (indices at or past
  // `total_chunks` are left out).
  void Adopt(uint16_t node, uint64_t total_chunks, const std::vector<uint64_t>& marks);
  // The chunks of `node` marked, in index order.
  std::vector<uint64_t> Marked(uint16_t node) const;
  // How many times a chunk of `node` was newly marked: a pass that scans
  // does so when it changed since its last scan.
  uint64_t generation(uint16_t node) const {
    // Acquire: the bits a new generation's marks set are seen with it.
    return node < node_count_ ? nodes_[node].generation.load(std::memory_order_acquire) : 0;
  }
  // Chunks of `node` marked.
  uint64_t count(uint16_t node) const {
    return node < node_count_ ? nodes_[node].marked.load(std::memory_order_relaxed) : 0;
  }

 private:
  struct Node {
    // A bit per chunk, made on the first mark and published (release)
    // after `words` is set; never freed before the set is.
    std::atomic<std::atomic<uint64_t>*> bits{nullptr};
    uint64_t words = 0;
    std::atomic<uint64_t> marked{0};
    std::atomic<uint64_t> generation{0};
  };
  bool SetLocked(uint16_t node, uint64_t total_chunks, uint64_t index, bool draining);
  std::vector<uint64_t> MarkedLocked(uint16_t node) const;
  const size_t node_count_;
  std::unique_ptr<Node[]> nodes_;
  mutable std::mutex mutex_;  // marks and clears, and Marked
};

// Which shared lists a compute node's allocators found empty, and when:
// before a new chunk an allocator pops the shared list first, unless an
// allocator of its node found that list empty less than `recheck` ago and
// none of them pushed to it since. A node whose threads all start
// carving at once (the bench's load) then pays the directory's load and
// an empty pop once per list, not once per thread; a list other nodes
// push to is looked at again every `recheck`. Thread-safe.
class EmptyListHints {
 public:
  explicit EmptyListHints(std::chrono::nanoseconds recheck) : recheck_(recheck) {}
  EmptyListHints(const EmptyListHints&) = delete;
  EmptyListHints& operator=(const EmptyListHints&) = delete;

  bool RecentlyEmpty(uint16_t node, uint64_t size, std::chrono::nanoseconds now) const;
  void NoteEmpty(uint16_t node, uint64_t size, std::chrono::nanoseconds now);
  // The list may hold something (a push or a pop that took a bundle).
  void NoteNotEmpty(uint16_t node, uint64_t size) {
    if (noted_.load(std::memory_order_relaxed) != 0) Forget(node, size);
  }

 private:
  void Forget(uint16_t node, uint64_t size);
  const std::chrono::nanoseconds recheck_;
  mutable std::mutex mutex_;
  std::map<std::pair<uint16_t, uint64_t>, std::chrono::nanoseconds> empty_at_;  // guarded
  std::atomic<size_t> noted_{0};                                                // empty_at_.size()
};

// Seals and compaction (chunks back to the memory node).
struct CompactionCounters {
  uint64_t chunks_sealed = 0;
  // Seal WRITEs whose batch failed (it may have landed: either way the
  // word is right or 0, and a chunk left at 0 never goes back).
  uint64_t seals_failed = 0;
  uint64_t passes = 0;
  uint64_t bundles_drained = 0;
  uint64_t objects_drained = 0;
  uint64_t chunks_returned = 0;
  uint64_t objects_returned = 0;  // objects of the chunks returned
  // FreeChunk calls that failed: the chunk may have gone back, so its
  // objects are forgotten.
  uint64_t returns_failed = 0;
  // Drained objects not pushed back (a failed push batch or FreeChunk).
  uint64_t objects_lost = 0;
  // Marks a keeper's pass took off: chunks that did not empty within
  // kMarkScans scans, and every mark while the node was low on chunks.
  uint64_t marks_expired = 0;
  // Chunks a pass began to drain, and objects it put on draining lists.
  uint64_t chunks_drained = 0;
  uint64_t objects_to_draining = 0;
  // Objects Free(ctx, ...) sent to a draining list, and those an
  // allocator took back off one because the node had no chunk left.
  uint64_t objects_freed_to_draining = 0;
  uint64_t objects_undrained = 0;
  // Scans (a pass after new marks moves every bundle of one of a size's
  // two lists to the other, taking the marked chunks' objects out), and
  // the bundles they moved.
  uint64_t scans = 0;
  uint64_t bundles_moved = 0;
};

// What an allocator did with the shared lists, and what failures cost.
struct SharedListCounters {
  uint64_t bundles_popped = 0;
  uint64_t objects_popped = 0;
  uint64_t bundles_pushed = 0;
  uint64_t objects_pushed = 0;
  // Objects given up after a push batch failed (it may have landed).
  uint64_t objects_lost = 0;
  // Pops and pushes that failed (and were not retried).
  uint64_t failures = 0;
  // Compaction passes, chunks they began to drain, chunks they gave back
  // to the memory node (CompactionCounters' passes, chunks_drained and
  // chunks_returned, readable while the allocator runs).
  uint64_t compaction_passes = 0;
  uint64_t chunks_drained = 0;
  uint64_t chunks_returned = 0;
};

class RemoteAllocator {
 public:
  // `nodes` are the control paths of every memory node, indexed by node id;
  // they must outlive the allocator. `first_node` is where round-robin starts
  // (give each thread a different one to spread load).
  RemoteAllocator(std::vector<memnode::MemoryNodeControl*> nodes, uint32_t first_node = 0,
                  RemoteAllocatorOptions options = {});
  RemoteAllocator(const RemoteAllocator&) = delete;
  RemoteAllocator& operator=(const RemoteAllocator&) = delete;

  // Allocates `bytes` (rounded up to `alignment`) aligned to `alignment` (a
  // power of two, at most 4096). With `node`, only on that memory node (e.g. a
  // new sibling next to the node it splits from); otherwise on the next node
  // round-robin, moving on to the others when one is exhausted.
  // InvalidArgument for a zero size, a bad alignment, a size over the chunk
  // size, or an unknown node; ResourceExhausted when no permitted node has
  // memory left. The memory is not zeroed when it is reused.
  StatusOr<fabric::RemoteAddress> Allocate(uint64_t bytes, uint64_t alignment = 64,
                                           std::optional<uint16_t> node = std::nullopt);
  // The same, taking objects from the shared lists (see the top) through
  // `ctx`, a context of this allocator's thread. A failed pop is not an
  // error: the object is carved instead.
  StatusOr<fabric::RemoteAddress> Allocate(ContextImpl& ctx, uint64_t bytes,
                                           uint64_t alignment = 64,
                                           std::optional<uint16_t> node = std::nullopt) {
    // Inline, and what a failure needs behind a call: out of line, this
    // wrapper's frame and the copy of its result cost every warm radix
    // insert 26 instructions (docs/cpu-cost.md), where its caller now
    // tests the status it tests anyway.
    StatusOr<fabric::RemoteAddress> object =
        Allocate(options_.share ? &ctx : nullptr, bytes, alignment, node);
    if (!object.ok()) object = AllocateFailed(ctx, bytes, alignment, node, object.status());
    return object;
  }

  // Returns an object from Allocate() with the same bytes and alignment, for
  // reuse by this allocator. The caller guarantees no other client still
  // reads it (the indexes use epochs for that). InvalidArgument, and nothing
  // kept, for a null or misaligned address, an unknown node or a bad size.
  Status Free(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment = 64);
  // The same, then gives a bundle to the shared list when this allocator
  // keeps more than `keep_free_objects` of the object's size and node. A
  // failed push is not an error (the objects stay, or are counted lost).
  Status Free(ContextImpl& ctx, fabric::RemoteAddress object, uint64_t bytes,
              uint64_t alignment = 64);

  // Gives every local free object that may go on a shared list
  // (RemoteFreeLists::Shareable) to its node's list, in bundles. Those that
  // may not (smaller than 64 bytes, or not 64-byte aligned) stay. Returns
  // the first error; the other bundles are still tried.
  Status ReleaseToShared(ContextImpl& ctx);

  // One compaction pass over `node`'s shared lists (see the top): returns
  // the chunks it gave back. Seals waiting for a context are written
  // first. Errors of the pass come back after whatever it drained was
  // pushed back (a list that stayed contended is not one: it is drained
  // less); InvalidArgument for an unknown node. 0, and nothing posted, with
  // share false or compact_bundles_per_pass 0.
  StatusOr<uint64_t> Compact(ContextImpl& ctx, uint16_t node) {
    return Compact(ctx, node, /*scan_step=*/false, kMaxPopAttempts);
  }
  // Stops carving every current chunk a call with a context carved from
  // and writes their seals (and those waiting): a worker that goes, and
  // tests.
  Status SealChunks(ContextImpl& ctx);

  // Called by Allocate(ctx, ...) when no memory node has room, with the
  // time it gives up at: true when memory may have come back (it then
  // tries again), false when waiting is pointless or the time is up (it
  // then returns ResourceExhausted). A worker's allocator waits for the
  // objects its client retired (ClientImpl::AwaitReclamation). An
  // allocation asked for one node waits only when no other node could
  // hold the object: otherwise it fails at once, and its caller may go to
  // another node (one without a node waits once all are out).
  using ExhaustedWaiter = std::function<bool(ContextImpl&, std::chrono::nanoseconds deadline)>;
  void SetExhaustedWaiter(ExhaustedWaiter waiter) { exhausted_waiter_ = std::move(waiter); }
  // Makes this allocator its compute node's (`self`) drainer (the lease
  // keeper's: a scan's round trips are no worker's to wait): its Tend
  // claims the draining of each memory node in its marks' table, and
  // takes a claim over once it stood still for `takeover_tends` Tends
  // (its holder died, or stopped draining), at least 2.
  void EnableScans(uint32_t self, uint32_t takeover_tends) {
    scans_ = true;
    self_ = self;
    takeover_tends_ = std::max<uint32_t>(2, takeover_tends);
  }
  // Draining's step, once a lease period (the keeper's Reclaim), per
  // memory node (docs/design.md, "Draining chunks"): one round trip reads
  // the node's marks' table. A node another compute node drains: its
  // marks become this compute node's (DrainingChunks::Adopt). One this one
  // drains (it renews its claim): a pass over the draining lists that
  // goes on with a scan still going; or, when none is and the node's
  // lists changed since this allocator's last pass or the last scan's
  // findings wait, a full pass that gives back what it can, takes stale
  // marks off, marks more and scans when they or the lists changed; then
  // the marks go to the table if they changed. Nothing without
  // EnableScans or max_draining_chunks.
  void Tend(ContextImpl& ctx);
  // Tests: Tend's next full-pass decision for `node` takes the lists as
  // changed (what compute nodes do meanwhile, shortened).
  void NoteListsChangedForTesting(uint16_t node) {
    if (node < stewards_.size()) stewards_[node].digest = 0;
  }
  // Whether this allocator drains `node` (its last Tend claimed it).
  bool DrainsForTesting(uint16_t node) const {
    return node < stewards_.size() && stewards_[node].drains;
  }
  // A mark comes off once this many scans ended without its chunk going
  // back (the first one after the mark brings the objects freed before
  // it; the chunk's last live objects may take a while to be freed).
  static constexpr uint64_t kMarkScans = 40;
  // A scan ends after moving this many passes' worth of bundles
  // (compact_bundles_per_pass each) even if its lists never come up empty.
  static constexpr uint32_t kMaxScanSteps = 64;
  // Times Allocate(ctx, ...) found every node out and waited.
  uint64_t exhausted_waits() const { return exhausted_waits_.load(std::memory_order_relaxed); }

  // Tests: called by Compact once it drained the lists (kDrained) and once
  // it gave its chunks back, before it pushes the rest back (kReturned).
  enum class CompactionStage : uint8_t { kDrained, kReturned };
  void SetCompactionHookForTesting(std::function<void(CompactionStage)> hook) {
    compaction_hook_ = std::move(hook);
  }

  // Chunks taken from memory nodes so far.
  uint64_t chunks_taken() const { return chunks_taken_; }
  // Objects waiting on this allocator's own free lists.
  uint64_t free_objects() const;
  // Readable from any thread (relaxed: exact once the allocator's thread
  // stopped).
  SharedListCounters shared_counters() const;
  // (passes and chunks_returned come from the tally shared_counters()
  // reads: one count, kept once.)
  CompactionCounters compaction_counters() const {
    CompactionCounters counters = compaction_counters_;
    counters.passes = shared_tally_.compaction_passes.load(std::memory_order_relaxed);
    counters.chunks_returned = shared_tally_.chunks_returned.load(std::memory_order_relaxed);
    return counters;
  }
  const RemoteAllocatorOptions& options() const { return options_; }
  RemoteFreeLists& shared_lists_for_testing() { return shared_; }

  // Gives every chunk back to its memory node. Every object carved from them
  // must be dead, and no shared list may hold one (tests of an allocator
  // alone). Errors from nodes are returned (the first one), the rest are
  // still attempted.
  Status ReleaseChunks();

 private:
  struct Cursor {  // bump pointer inside the current chunk of one node
    fabric::RemoteAddress chunk;
    uint64_t used = 0;
    uint64_t carved = 0;  // objects carved from it
    // Whether a call with a context carved from it. Only such a chunk is
    // sealed: one carved only without (the runtime's own pages, never
    // freed) would never go back, and its seal would cost round trips.
    bool shared = false;
  };
  struct Seal {
    fabric::RemoteAddress chunk;
    uint64_t carved = 0;
  };
  // Where a node's chunks and seal words are (its pool header).
  struct ChunkLayout {
    uint64_t chunk_bytes = 0;
    uint64_t chunks_begin = 0;
    uint64_t total_chunks = 0;  // 0: not read yet
    fabric::RemoteAddress SealWord(uint16_t node, uint64_t index) const;
  };
  StatusOr<ChunkLayout> Layout(ContextImpl& ctx, uint16_t node);
  // Writes the seals waiting in pending_seals_ (their WRITEs to one node
  // share a batch).
  Status FlushSeals(ContextImpl& ctx);
  // Compacts `node` if it has fewer than compact_below_free_chunks chunks
  // left, after this allocator took one.
  void CompactIfLow(ContextImpl& ctx, uint16_t node);

  StatusOr<fabric::RemoteAddress> Allocate(ContextImpl* ctx, uint64_t bytes, uint64_t alignment,
                                           std::optional<uint16_t> node);
  // `ctx` null: no shared list.
  StatusOr<fabric::RemoteAddress> AllocateOn(ContextImpl* ctx, uint16_t node, uint64_t bytes,
                                             uint64_t alignment);
  // Carves from the current chunk of `node`, taking a new chunk when it is
  // full (after a pop through `ctx`, if given, found nothing to reuse).
  StatusOr<fabric::RemoteAddress> CarveOn(ContextImpl* ctx, uint16_t node, uint64_t size,
                                          uint64_t alignment);
  // A page of the runtime's (a free-list directory, a marks' table) on
  // `node`, 64-byte aligned, for MakeAndPublish.
  StatusOr<fabric::RemoteAddress> CarvePage(uint16_t node, uint64_t bytes);
  // Pops one bundle of `node`'s `size` list (its draining list with
  // `draining`) into the local list.
  // kDrained: every object popped was a draining chunk's (PopSharedOnce).
  enum class Popped : uint8_t { kTook, kEmpty, kFailed, kDrained };
  static constexpr uint32_t kMaxDrainedPops = 4;
  Popped PopSharedOnce(ContextImpl& ctx, uint16_t node, uint64_t size, bool draining,
                       bool alt = false);
  Popped PopShared(ContextImpl& ctx, uint16_t node, uint64_t size, bool draining = false);
  // Gives up to one bundle of the local `size` objects of `node` to the
  // shared list (all of them with `all`, bundle after bundle), each pushed
  // through a contended head for up to `attempts` tries: kMaxGiveBackAttempts
  // when the worker goes (ReleaseToShared: what it keeps would be stranded),
  // kMaxPopAttempts otherwise (a live allocator reuses what it keeps, and
  // may be inside an index's lock: a split allocating its sibling). With
  // `draining`, those waiting for the draining list, to it.
  Status PushShared(ContextImpl& ctx, uint16_t node, uint64_t size, bool all,
                    uint32_t attempts = kMaxPopAttempts, bool draining = false);
  // One compaction pass; its pushes back try up to `push_attempts` each.
  // A scan step (Tend's) pops only the draining lists (whole) and moves up
  // to compact_bundles_per_pass bundles of the scan.
  StatusOr<uint64_t> Compact(ContextImpl& ctx, uint16_t node, bool scan_step,
                             uint32_t push_attempts);
  // The index of the chunk `object` lies in, if in one.
  static std::optional<uint64_t> ChunkIndex(const ChunkLayout& layout,
                                            fabric::RemoteAddress object);
  // InvalidArgument unless `object` could be one this allocator hands out.
  Status CheckFree(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment) const;
  // Moves the objects of marked chunks off the local lists of `node`, and
  // flushes them.
  void SweepLocal(ContextImpl& ctx, uint16_t node);
  // Pushes what waits for `node`'s draining lists, partial bundles too.
  void FlushDraining(ContextImpl& ctx, uint16_t node);
  // Whether Free(ctx, ...) sends `object` to a draining list.
  bool Draining(ContextImpl& ctx, fabric::RemoteAddress object);

  std::vector<memnode::MemoryNodeControl*> nodes_;
  RemoteAllocatorOptions options_;
  RemoteFreeLists shared_;
  // Lists whose last pop took a bundle: tried before carving.
  std::set<std::pair<uint16_t, uint64_t>> nonempty_shared_;
  // SharedListCounters, written by the allocator's thread only and read by
  // any (Client::reclamation_stats while a lease keeper frees).
  struct SharedListTally {
    std::atomic<uint64_t> bundles_popped{0};
    std::atomic<uint64_t> objects_popped{0};
    std::atomic<uint64_t> bundles_pushed{0};
    std::atomic<uint64_t> objects_pushed{0};
    std::atomic<uint64_t> objects_lost{0};
    std::atomic<uint64_t> failures{0};
    std::atomic<uint64_t> compaction_passes{0};
    std::atomic<uint64_t> chunks_drained{0};
    std::atomic<uint64_t> chunks_returned{0};
  };
  // One writer: a relaxed load and store, no read-modify-write.
  static void Count(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  SharedListTally shared_tally_;
  CompactionCounters compaction_counters_;
  std::vector<Seal> pending_seals_;   // chunks no longer carved, not yet sealed
  std::vector<ChunkLayout> layouts_;  // per node
  std::set<uint16_t> compacting_;     // nodes a coroutine of this thread compacts
  std::function<void(CompactionStage)> compaction_hook_;
  ExhaustedWaiter exhausted_waiter_;
  std::atomic<uint64_t> exhausted_waits_{0};
  // Whether a node other than `node` could hold the object: an allocation
  // asked for `node` alone then fails at once, and its caller may go to
  // another (a near node is a preference: AllocateNode, NewLeaf,
  // ObjectWriter).
  bool AnotherNodeFits(uint16_t node, uint64_t bytes, uint64_t alignment) const;
  // Allocate(ctx, ...) once its first try failed with `failed`: that,
  // unless every node was found out and a wait may help
  // (AllocateAfterWaiting).
  StatusOr<fabric::RemoteAddress> AllocateFailed(ContextImpl& ctx, uint64_t bytes,
                                                 uint64_t alignment, std::optional<uint16_t> node,
                                                 Status failed);
  // Allocate(ctx, ...) once every node was found out.
  StatusOr<fabric::RemoteAddress> AllocateAfterWaiting(ContextImpl& ctx, uint64_t bytes,
                                                       uint64_t alignment,
                                                       std::optional<uint16_t> node,
                                                       Status exhausted);
  std::vector<Cursor> cursors_;                // per node
  std::unique_ptr<EmptyListHints> own_hints_;  // when options_.hints is null
  EmptyListHints* hints_;
  std::vector<fabric::RemoteAddress> chunks_;  // every chunk taken
  std::map<std::pair<uint16_t, uint64_t>, std::vector<fabric::RemoteAddress>> free_lists_;
  // Freed objects of draining chunks, by node and size, until a bundle of
  // them goes to the draining list.
  std::map<std::pair<uint16_t, uint64_t>, std::vector<fabric::RemoteAddress>> to_draining_;
  std::unique_ptr<DrainingChunks> own_draining_;  // when options_.draining is null
  DrainingChunks* draining_;
  // Per memory node, the keeper's view of its marks' table (Tend).
  struct Steward {
    fabric::RemoteAddress table;  // null until found
    bool drains = false;          // this compute node holds the claim
    uint64_t claim = 0;           // the claim word it last wrote or saw
    uint32_t still = 0;           // Tends another's claim stood still
    // The marks the table holds, and whose they are, as last read or
    // written; nullopt: to be written.
    std::optional<std::vector<uint64_t>> published;
    uint64_t digest = 0;   // the lists' heads after this allocator's last pass
    bool changed = false;  // the lists changed since (for the pass Tend runs)
    uint32_t idle = 0;     // Tends since its last pass
  };
  // Reads `node`'s marks' table (made if missing) and renews, takes or
  // follows the claim: whether this compute node drains `node`. A node
  // that follows adopts the table's marks.
  StatusOr<bool> Claim(ContextImpl& ctx, uint16_t node);
  // Writes the marks to the table when they differ from what it holds.
  Status PublishMarks(ContextImpl& ctx, uint16_t node);
  std::vector<Steward> stewards_;
  uint32_t self_ = 0;
  uint32_t takeover_tends_ = 2;
  // Per node, the keeper's: the scans that ended, and its marks with the
  // scans ended when each was made.
  std::vector<uint64_t> scans_done_;
  std::vector<std::map<uint64_t, uint64_t>> marked_at_;
  // Per node, the free bytes per chunk the scan going on has moved so far,
  // and what the last one that ended found (the next marks' candidates).
  std::vector<std::map<uint64_t, uint64_t>> scan_free_;
  std::vector<std::map<uint64_t, uint64_t>> candidates_;
  // Per node, the marks' generation this allocator's local lists were last
  // swept at (SweepLocal).
  std::vector<uint64_t> swept_generation_;
  // Whether this allocator's passes scan (EnableScans), and per node the
  // marks' generation (DrainingChunks::generation) its last scan started
  // at, its direction, and whether it is still going.
  bool scans_ = false;
  bool tending_ = false;  // within Tend: its passes mark and scan
  struct Scan {
    bool to_alt = false;
    bool pending = false;
    uint64_t moved = 0;  // bundles
  };
  std::vector<Scan> scan_;
  uint32_t next_node_ = 0;
  uint64_t chunks_taken_ = 0;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_
