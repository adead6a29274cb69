// What every index handle shares, whatever its layout: refusing a closed
// handle, checking key sizes, and charging each operation's cost to its
// kind. Counters are kept per worker thread (no lock on the operation path)
// and summed by stats().
//
//   Status MyIndex::Lookup(Context& context, std::string_view key, uint64_t* value) {
//     return core_.Run(context, IndexOp::kLookup, [&](runtime::ContextImpl& ctx) {
//       DMIDX_RETURN_IF_ERROR(core_.CheckKey(key));
//       ...
//     });
//   }
#ifndef DMIDX_INDEX_INDEX_CORE_H_
#define DMIDX_INDEX_INDEX_CORE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/index.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

class IndexCore {
 public:
  // `kind` and `name` name the handle in errors ("B+tree 'orders'").
  IndexCore(runtime::ComputeNode& node, std::string kind, std::string name, uint32_t key_bytes);
  ~IndexCore();
  IndexCore(const IndexCore&) = delete;
  IndexCore& operator=(const IndexCore&) = delete;

  // Runs `body(ctx)` as one operation of kind `op`: InvalidArgument on a
  // closed handle; otherwise with a scratch-arena scope open for the
  // operation's buffers, charging what the context spent meanwhile (round
  // trips, bytes, lock and cache events, the longest lock wait) to `op`.
  // Inline into the public method (index_handle.h): a call more per
  // operation otherwise, once the body holds the RDWC dispatch.
  template <typename Body>
  [[gnu::always_inline]] Status Run(Context& context, IndexOp op, Body&& body) {
    runtime::ContextImpl& ctx = runtime::ContextImpl::From(context);
    const OpCounters before = ctx.counters();
    ctx.TakeLongestLockWait();
    ctx.ChargeOperation();
    Status status;
    if (closed()) {
      status = Status::InvalidArgument(label_ + " is closed");
    } else {
      runtime::ScratchArena::Scope scope(ctx.arena());
      // Objects the body reads stay allocated until it ends
      // (runtime/epochs.h).
      ctx.Pin();
      status = body(ctx);
      ctx.Unpin();
    }
    Charge(ctx, op, before);
    return status;
  }

  // InvalidArgument unless `key` is key_bytes() long.
  Status CheckKey(std::string_view key) const {
    return key.size() == key_bytes_ ? Status::Ok() : WrongKeySize(key.size());
  }
  // InvalidArgument unless `fill_factor` is in (0, 1] and `sorted` is
  // strictly ascending with every key key_bytes() long.
  Status CheckBulkLoad(std::span<const KeyValue> sorted, double fill_factor) const;
  uint32_t key_bytes() const { return key_bytes_; }
  // "B+tree 'orders'": for error messages.
  const std::string& label() const { return label_; }

  void Close() { closed_.store(true, std::memory_order_release); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  IndexStats stats() const;

 private:
  // One worker's counters: written by that worker's thread only, read by
  // stats() from any thread (relaxed; lib/common/relaxed_counters.h).
  struct Shard {
    std::array<OpCounters, kIndexOpKinds> by_op{};
    uint64_t longest_lock_wait_ns = 0;
  };
  // Adds what ctx's counters gained since `before`, as one operation.
  void Charge(runtime::ContextImpl& ctx, IndexOp op, const OpCounters& before);
  // The worker's first operation on this handle: makes its shard, listed
  // for stats(), and sets `local` (the worker's LocalObject slot) to it.
  [[gnu::noinline]] Shard& NewShard(void*& local);
  Status WrongKeySize(size_t size) const;

  const uint64_t serial_;
  const std::string label_;
  const uint32_t key_bytes_;
  std::atomic<bool> closed_{false};
  mutable std::mutex shards_mutex_;
  std::vector<std::unique_ptr<Shard>>
      shards_;  // guarded by shards_mutex_ (the list, not the counts)
};

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_INDEX_CORE_H_
