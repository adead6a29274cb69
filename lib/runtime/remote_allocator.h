// Client-side allocator of remote memory. Takes chunks from memory nodes
// through their control path and carves aligned objects (tree nodes) from
// them; freed objects go to a free list of their size and node and are
// handed out again before new memory is carved.
//
// One per client thread: not thread-safe, and it needs no locking because no
// two threads share one.
//
// Destroying an allocator gives nothing back: the objects it carved are part
// of the indexes and outlive the thread that made them. ReleaseChunks() is for
// tearing a whole cluster's data down. When an object does not fit in the
// rest of the current chunk, that rest is left unused.
#ifndef DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_
#define DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/memnode/memory_node.h"

namespace dmidx::runtime {

class RemoteAllocator {
 public:
  // `nodes` are the control paths of every memory node, indexed by node id;
  // they must outlive the allocator. `first_node` is where round-robin starts
  // (give each thread a different one to spread load).
  RemoteAllocator(std::vector<memnode::MemoryNodeControl*> nodes, uint32_t first_node = 0);
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

  // Returns an object from Allocate() with the same bytes and alignment, for
  // reuse by this allocator. The caller guarantees no other client still
  // reads it (the indexes use epochs for that). InvalidArgument, and nothing
  // kept, for a null or misaligned address, an unknown node or a bad size.
  Status Free(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment = 64);

  // Chunks taken from memory nodes so far.
  uint64_t chunks_taken() const { return chunks_taken_; }
  // Objects waiting on free lists.
  uint64_t free_objects() const;

  // Gives every chunk back to its memory node. Every object carved from them
  // must be dead. Called on shutdown; errors from nodes are returned (the
  // first one), the rest are still attempted.
  Status ReleaseChunks();

 private:
  struct Cursor {  // bump pointer inside the current chunk of one node
    fabric::RemoteAddress chunk;
    uint64_t used = 0;
  };
  StatusOr<fabric::RemoteAddress> AllocateOn(uint16_t node, uint64_t bytes, uint64_t alignment);

  std::vector<memnode::MemoryNodeControl*> nodes_;
  std::vector<Cursor> cursors_;                // per node
  std::vector<fabric::RemoteAddress> chunks_;  // every chunk taken
  std::map<std::pair<uint16_t, uint64_t>, std::vector<fabric::RemoteAddress>> free_lists_;
  uint32_t next_node_ = 0;
  uint64_t chunks_taken_ = 0;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_REMOTE_ALLOCATOR_H_
