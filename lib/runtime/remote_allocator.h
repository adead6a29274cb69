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
//   goes, ContextImpl and Worker destructors).
// The calls without a context never post: they use the local lists and
// chunks only, as for the runtime's own pages (lease.cc).
//
// One per client thread: not thread-safe, and it needs no locking because no
// two threads share one. The coroutines of that thread may interleave in
// the calls that take a context (each keeps no reference into the
// allocator's state across a round trip).
//
// Destroying an allocator gives no chunk back: the objects it carved are
// part of the indexes and outlive the thread that made them. ReleaseChunks()
// is for tests of an allocator alone: a shared list or another allocator
// may hold objects of the chunks it gives back. When an object does not fit
// in the rest of the current chunk, that rest is left unused.
#ifndef DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_
#define DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

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
  // behave as those without).
  bool share = true;
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
                                           std::optional<uint16_t> node = std::nullopt);

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

  // Chunks taken from memory nodes so far.
  uint64_t chunks_taken() const { return chunks_taken_; }
  // Objects waiting on this allocator's own free lists.
  uint64_t free_objects() const;
  // Readable from any thread (relaxed: exact once the allocator's thread
  // stopped).
  SharedListCounters shared_counters() const;
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
  };
  StatusOr<fabric::RemoteAddress> Allocate(ContextImpl* ctx, uint64_t bytes, uint64_t alignment,
                                           std::optional<uint16_t> node);
  // `ctx` null: no shared list.
  StatusOr<fabric::RemoteAddress> AllocateOn(ContextImpl* ctx, uint16_t node, uint64_t bytes,
                                             uint64_t alignment);
  // Carves from the current chunk of `node`, taking a new chunk when it is
  // full (after a pop through `ctx`, if given, found nothing to reuse).
  StatusOr<fabric::RemoteAddress> CarveOn(ContextImpl* ctx, uint16_t node, uint64_t size,
                                          uint64_t alignment);
  // Pops one bundle of `node`'s `size` list into the local list.
  enum class Popped : uint8_t { kTook, kEmpty, kFailed };
  Popped PopShared(ContextImpl& ctx, uint16_t node, uint64_t size);
  // Gives up to one bundle of the local `size` objects of `node` to the
  // shared list (all of them with `all`, bundle after bundle).
  Status PushShared(ContextImpl& ctx, uint16_t node, uint64_t size, bool all);

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
  };
  // One writer: a relaxed load and store, no read-modify-write.
  static void Count(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  SharedListTally shared_tally_;
  std::vector<Cursor> cursors_;                // per node
  std::vector<fabric::RemoteAddress> chunks_;  // every chunk taken
  std::map<std::pair<uint16_t, uint64_t>, std::vector<fabric::RemoteAddress>> free_lists_;
  uint32_t next_node_ = 0;
  uint64_t chunks_taken_ = 0;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_
