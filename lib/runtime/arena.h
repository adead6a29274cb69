// A bump allocator over a context's registered scratch memory: where every
// layer above the runtime takes the local buffers of its ops (node images,
// lock words, CAS results).
//
//   runtime::ScratchArena::Scope scope(ctx.arena());    // freed at scope end
//   DMIDX_ASSIGN_OR_RETURN(uint8_t* node, ctx.arena().Bytes(node_bytes, 64));
//   DMIDX_ASSIGN_OR_RETURN(uint64_t* word, ctx.arena().Words(1));
//
// Allocations are freed in stack order, by the Scope that was open when
// they were made; an index opens one per operation. A request that does not
// fit is ResourceExhausted, saying what was asked and what is left, so a
// too-small ClientOptions::scratch_bytes_per_context shows as a clear error.
// A buffer handed to an op must stay in scope until the op has executed: an
// unsignaled op's buffer until a later signaled op on the same connection
// completed (or use the context's constant words). Used by one context's
// coroutine only: not thread-safe.
#ifndef DMIDX_RUNTIME_ARENA_H_
#define DMIDX_RUNTIME_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "dmidx/status.h"

namespace dmidx::runtime {

class ScratchArena {
 public:
  ScratchArena() = default;
  // `memory` must outlive the arena.
  explicit ScratchArena(std::span<uint8_t> memory) : memory_(memory) {}
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // `bytes` (> 0) of memory aligned to `alignment` (a power of two, at
  // most 4096). InvalidArgument for a zero size or a bad alignment,
  // ResourceExhausted when it does not fit.
  [[gnu::always_inline]] StatusOr<uint8_t*> Bytes(size_t bytes, size_t alignment = 8) {
    // The fast path inline (every operation takes a few buffers), even in
    // a caller the compiler finds large (a descent); errors and their
    // messages out of line.
    const size_t begin = (used_ + alignment - 1) & ~(alignment - 1);
    if (bytes != 0 && alignment != 0 && (alignment & (alignment - 1)) == 0 &&
        alignment <= kMaxAlignment && begin <= memory_.size() && memory_.size() - begin >= bytes) {
      used_ = begin + bytes;
      return memory_.data() + begin;
    }
    return BytesFailed(bytes, alignment);
  }
  // `count` 8-byte words, 8-byte aligned (for atomics and small reads).
  [[gnu::always_inline]] StatusOr<uint64_t*> Words(size_t count) {
    // Bytes' fast path for 8-byte words, without a StatusOr in between.
    const size_t begin = (used_ + 7) & ~size_t{7};
    if (count != 0 && begin <= memory_.size() && (memory_.size() - begin) / 8 >= count) {
      used_ = begin + count * 8;
      return reinterpret_cast<uint64_t*>(memory_.data() + begin);
    }
    return BytesFailed(count * 8, 8);
  }
  // How many `bytes`-sized, `alignment`-aligned buffers still fit with
  // `leave` bytes left over after them (for code that reads as many nodes
  // per round trip as scratch holds, leaving room for others' small words).
  size_t Fits(size_t bytes, size_t alignment = 8, size_t leave = 0) const;

  static constexpr size_t kMaxAlignment = 4096;

  size_t used() const { return used_; }
  size_t capacity() const { return memory_.size(); }

  // Frees, when it ends, everything allocated since it began.
  class Scope {
   public:
    explicit Scope(ScratchArena& arena) : arena_(arena), mark_(arena.used_) {}
    ~Scope() { arena_.used_ = mark_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ScratchArena& arena_;
    const size_t mark_;
  };

 private:
  // Why Bytes(bytes, alignment) cannot be served.
  Status BytesFailed(size_t bytes, size_t alignment) const;

  std::span<uint8_t> memory_;
  size_t used_ = 0;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_ARENA_H_
