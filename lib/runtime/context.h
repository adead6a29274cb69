// What index code runs with: the per-coroutine context and the per-thread
// worker it belongs to.
//
// Index layers write plain sequential code against ContextImpl: post ops,
// Wait() for them, Park() on local events. Whether that suspends a coroutine
// or blocks a thread is the runtime's business.
#ifndef DMIDX_RUNTIME_CONTEXT_H_
#define DMIDX_RUNTIME_CONTEXT_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "lib/fabric/fabric.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/epochs.h"
#include "lib/runtime/remote_allocator.h"
#include "lib/runtime/scheduler.h"

namespace dmidx::runtime {

class ClientImpl;
class ContextImpl;

// What identifies a context among the live contexts of its compute node
// (ContextImpl::number()), and the global lock acquisitions counted under
// that number so far (ContextImpl::NextLockAcquisition()). A context that
// goes gives both back to its compute node, and the next context made
// takes them over, so a number's count never restarts while the compute
// node lives.
struct ContextNumber {
  uint32_t value = 0;  // < kMaxContextsPerComputeNode
  uint64_t lock_acquisitions = 0;
};
// Contexts (coroutines and blocking ones) one compute node may have alive
// at once: HOCL's lock words name a context in 16 bits (lock/hocl.h).
inline constexpr uint32_t kMaxContextsPerComputeNode = uint32_t{1} << 16;

// One client thread: its connections (endpoint), registered scratch memory,
// remote allocator, counters, and the contexts of its coroutines. Used by one
// thread at a time; lives as long as its client.
class Worker {
 public:
  // Connects to the fabric, registers `scratch_regions` x scratch bytes, and
  // makes `contexts` (<= scratch_regions) coroutine contexts, context i using
  // region i.
  static StatusOr<std::unique_ptr<Worker>> Create(ClientImpl* client, int thread_index,
                                                  uint32_t contexts, uint32_t scratch_regions);
  ~Worker();

  ClientImpl& client() const { return *client_; }
  ComputeNode& compute_node() const { return *compute_node_; }
  // The compute node's clock, fixed for its life: found once, so that a
  // context's Now() (the bench reads it every operation) makes no call
  // to find it.
  const Clock& clock() const { return *clock_; }
  fabric::Endpoint& endpoint() const { return *endpoint_; }
  RemoteAllocator& allocator() { return allocator_; }
  // Objects this worker's contexts retired, waiting for their grace period
  // to end before they go to allocator().
  RetiredObjects& retired() { return retired_; }
  ContextImpl& context(size_t i) const { return *contexts_[i]; }
  std::span<uint8_t> scratch_region(size_t i) const;
  size_t context_count() const { return contexts_.size(); }
  size_t coroutine_stack_bytes() const;
  int thread_index() const { return thread_index_; }

  // Owner thread only: a relaxed load and store, no read-modify-write
  // (other threads only read it).
  void CountRoundTrip() {
    round_trips_.store(round_trips_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // A pointer this worker keeps for an object elsewhere that wants a part
  // of its own per worker (an index handle's counters), found by the
  // object's serial (ComputeNode::NewSerial; serials are never reused, so a
  // entry of an object that is gone is never found again). Null until set.
  // Only the thread running this worker calls it.
  void*& LocalObject(uint64_t serial) {
    // A few recent objects by serial first (one per index an operation mix
    // uses, typically), then the map; the map's values never move.
    ObjectMemo& memo = object_memo_[serial % object_memo_.size()];
    if (memo.object == nullptr || memo.serial != serial) memo = {serial, &local_objects_[serial]};
    return *memo.object;
  }
  // Fabric counters plus round trips.
  Stats stats() const;

  // Whether a failed batch of this worker's leaves its client unsettled
  // (ClientImpl::Settled): every worker's but the lease keeper's renewer,
  // whose batches (its record's page, the join, the renewals) leave
  // nothing under the id but the lease word, which the next renewal or a
  // next client's join goes on from. Set before the worker posts anything.
  bool unsettles_on_failure() const { return unsettles_on_failure_; }
  void set_unsettles_on_failure(bool unsettles);

 private:
  Worker(ClientImpl* client, ComputeNode* compute_node, int thread_index,
         std::unique_ptr<fabric::Endpoint> endpoint);

  ClientImpl* const client_;
  ComputeNode* const compute_node_;  // the same object as client_
  const Clock* const clock_;         // compute_node_->clock()
  const int thread_index_;
  std::unique_ptr<fabric::Endpoint> endpoint_;
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> scratch_;
  size_t scratch_region_bytes_ = 0;
  RemoteAllocator allocator_;
  RetiredObjects retired_;
  std::vector<std::unique_ptr<ContextImpl>> contexts_;
  std::unordered_map<uint64_t, void*> local_objects_;
  struct ObjectMemo {
    uint64_t serial = 0;
    void** object = nullptr;
  };
  std::array<ObjectMemo, 4> object_memo_{};
  // Written by the owner thread only; atomic so Client::stats() may read it
  // while a blocking context is in use elsewhere.
  std::atomic<uint64_t> round_trips_{0};
  bool unsettles_on_failure_ = true;
};

class ContextImpl final : public Context {
 public:
  // `number` comes from the compute node (ClientImpl::TakeContextNumber)
  // and goes back to it when the context goes.
  ContextImpl(Worker* worker, int coroutine_index, std::span<uint8_t> scratch, ContextNumber number)
      : worker_(worker),
        coroutine_index_(coroutine_index),
        number_(number.value),
        lock_acquisitions_(number.lock_acquisitions),
        scratch_(scratch),
        arena_(this->scratch()) {
    NoteFailuresOnClient();
    AttachEpochSlot();
  }
  // A blocking context that owns its own single-context worker.
  ContextImpl(std::unique_ptr<Worker> owned_worker, ContextNumber number);
  ~ContextImpl() override;

  // Every Context the runtime hands out is a ContextImpl.
  static ContextImpl& From(Context& context) { return static_cast<ContextImpl&>(context); }

  int thread_index() const override { return worker_->thread_index(); }
  int coroutine_index() const override { return coroutine_index_; }
  Stats stats() const override { return worker_->stats(); }

  // This context's number: no other live context of its compute node has
  // it (thread and coroutine indexes do not tell blocking contexts apart).
  uint32_t number() const { return number_; }
  // Counts a global lock acquisition (HOCL numbers its lock-word tags with
  // it) and returns the count: 1, 2, ... continuing the count of the
  // earlier contexts that had this number. A plain increment: only this
  // context's coroutine or thread calls it.
  uint64_t NextLockAcquisition() { return ++lock_acquisitions_; }
  // Gives the last NextLockAcquisition() back (its caller could not use
  // it: lock::RedoLog::NextAcquisition).
  void RetractLockAcquisition() { --lock_acquisitions_; }
  uint64_t lock_acquisitions() const { return lock_acquisitions_; }

  Worker& worker() const { return *worker_; }
  ComputeNode& compute_node() const { return worker_->compute_node(); }
  fabric::Endpoint& endpoint() const { return worker_->endpoint(); }
  RemoteAllocator& allocator() const { return worker_->allocator(); }
  // Registered memory this context may use as op buffers, 4 KiB aligned:
  // what the arena hands out. The last kRuntimeScratchBytes of the region are
  // kept back for the runtime's constant words.
  static constexpr size_t kRuntimeScratchBytes = 64;
  std::span<uint8_t> scratch() const {
    return scratch_.first(scratch_.size() - kRuntimeScratchBytes);
  }
  // A registered word that always holds 0: the source of WRITEs of 0 (a
  // lock release) that may still be in flight when the operation that
  // posted them has ended.
  const uint64_t* zero_word() const {
    return reinterpret_cast<const uint64_t*>(scratch_.data() + scratch_.size() -
                                             kRuntimeScratchBytes);
  }
  // A registered word where atomics whose result nobody reads put it (a
  // lock release by CAS, the radix tree's unsignaled repair CASes), so
  // that they need no arena memory. Never look at what it holds, not even
  // right after a signaled op into it completed: an unsignaled atomic of
  // this context may still be in flight and put its result there at any
  // time. A result that is looked at goes to a word of the arena.
  uint64_t* discard_word() const {
    return reinterpret_cast<uint64_t*>(scratch_.data() + scratch_.size() - kRuntimeScratchBytes +
                                       8);
  }

  // Posts one batch to `node`, tracked by `completion` (null: unsignaled).
  // Completions waited on with Wait() must be made with notifier(), which
  // notes a batch of theirs that fails on the client (Parker::Failed:
  // ClientImpl::Settled); a failed post is noted here (both unless the
  // worker's failures do not unsettle it: Worker::unsettles_on_failure).
  Status Post(uint16_t node, std::span<const fabric::Op> ops, fabric::Completion* completion);
  // Waits until every batch `completion` tracks has finished and returns the
  // first error. Counts one round trip if it tracks at least one batch.
  Status Wait(fabric::Completion& completion);
  // Posts one signaled batch and waits for it: one round trip.
  Status Execute(uint16_t node, std::span<const fabric::Op> ops);
  // Posts `ops`, addressed to any memory nodes, as one batch per node (split
  // at the fabric's max_batch_ops; `ops` is reordered by node, keeping the
  // order within a node) and waits for all: one round trip. Takes nothing
  // from the heap once warm (mixed nodes are regrouped through memory()).
  Status ExecuteAll(std::span<fabric::Op> ops);
  // Reads the `count` 8-byte words at `at` into `out` (any memory: they
  // pass through the arena): one READ, one round trip.
  Status ReadWords(fabric::RemoteAddress at, uint32_t count, uint64_t* out);
  // The 8-byte word at `at`, read in one round trip.
  StatusOr<uint64_t> ReadWord(fabric::RemoteAddress at) {
    uint64_t word = 0;
    DMIDX_RETURN_IF_ERROR(ReadWords(at, 1, &word));
    return word;
  }

  fabric::Notifier* notifier() { return &parker_; }

  // Tests: while `ops` is set, every op this context posts is appended to
  // it as posted (its remote address names the memory node), before the
  // fabric sees it; null (the default) records nothing. For a test that
  // finds what an operation reads or locks without knowing the index.
  void RecordPostsForTesting(std::vector<fabric::Op>* ops) { recorded_posts_ = ops; }
  // Tests: while posts are recorded (RecordPostsForTesting), `hook` is
  // called with each batch before the fabric sees it, on the posting
  // context (a fault armed there fails that very batch); empty: none.
  void SetPostHookForTesting(std::function<void(std::span<const fabric::Op>)> hook) {
    post_hook_ = std::move(hook);
  }

  // Bump allocator over scratch() for op buffers (runtime/arena.h).
  ScratchArena& arena() { return arena_; }
  // For an operation's own bookkeeping that outgrows fixed buffers (a
  // scan's plan and frontier): pools this context keeps and reuses, so a
  // warm context takes nothing from the heap. Not thread-safe: this
  // context's coroutine only.
  std::pmr::memory_resource* memory() { return &memory_; }

  // This context's own traffic (round trips, bytes), kept apart from the
  // other coroutines of its thread; index layers add their events (lock
  // retries, handovers, cache, read retries) and charge the difference
  // across one operation to its kind.
  OpCounters& counters() { return counters_; }
  // The lock layer records each wait for a lock (and the part of it spent
  // in a local queue): summed into counters(), and the longest kept until
  // the index layer takes it per operation (TakeLongestLockWait).
  void RecordLockWait(std::chrono::nanoseconds waited,
                      std::chrono::nanoseconds queued_locally = std::chrono::nanoseconds(0)) {
    longest_lock_wait_ = std::max(longest_lock_wait_, waited);
    counters_.lock_wait_ns += static_cast<uint64_t>(waited.count());
    counters_.local_lock_wait_ns += static_cast<uint64_t>(queued_locally.count());
  }
  std::chrono::nanoseconds TakeLongestLockWait() {
    return std::exchange(longest_lock_wait_, std::chrono::nanoseconds(0));
  }
  // When this operation began waiting for a lock it has yet to take: set
  // by RDWC (lock/rdwc.h) to a waiter's arrival while the waiter runs its
  // own body, so that its first lock's deadline counts from there
  // (lock::LockDeadline takes it); unset otherwise.
  void set_lock_wait_origin(std::optional<std::chrono::nanoseconds> origin) {
    lock_wait_origin_ = origin;
  }
  std::optional<std::chrono::nanoseconds> TakeLockWaitOrigin() {
    return std::exchange(lock_wait_origin_, std::nullopt);
  }

  // Suspends until Unpark() was called since the last Park() returned; may
  // also return spuriously, so callers loop on their own condition.
  void Park();
  // Wakes this context's Park(). Any thread.
  void Unpark() { parker_.Notify(); }

  // Time from the cluster's clock.
  std::chrono::nanoseconds Now() const override { return worker_->clock().Now(); }
  // Lets the other coroutines of this thread run once (and the fabric make
  // progress), then continues. A blocking context polls and gives the core
  // away. For waits on a condition another context or node will change.
  void Yield();
  // Waits before retry `attempt` (0, 1, ...) of a contended step: a random
  // time in [d/2, d] with d = retry_backoff_min * 2^attempt, at most
  // retry_backoff_max (ClientOptions), yielding meanwhile. The jitter comes
  // from a generator seeded by the compute node, thread and coroutine, so
  // runs repeat.
  void Backoff(uint32_t attempt);
  // Waits until the clock reads `deadline`, letting the other coroutines of
  // this thread run meanwhile (a blocking context sleeps). Returns at once
  // for a deadline already past.
  void SleepUntil(std::chrono::nanoseconds deadline) override;
  // The operation's epoch (epochs.h): Pin() before its first post, Unpin()
  // after its last wait. The pin is a seq_cst store, so the slot is visible
  // to the keeper's scan before any READ the operation posts. Not nested:
  // IndexCore::Run pins; other code that reads index objects outside Run
  // (a recovery) uses PinScope.
  void Pin() {
    epoch_slot_.store(epoch_local_->load(std::memory_order_relaxed), std::memory_order_seq_cst);
  }
  void Unpin() {
    epoch_slot_.store(kUnpinned, std::memory_order_release);
    cache_slot_.store(kUnpinned, std::memory_order_release);
  }
  // Where the operation holds the epochs of the cache entries it followed
  // (runtime::HoldCacheEpoch, epochs.h): the caches' lookups take it and
  // lower it under their lock. kUnpinned again when the operation ends.
  std::atomic<uint64_t>& cache_slot() { return cache_slot_; }
  bool pinned() const { return epoch_slot_.load(std::memory_order_relaxed) != kUnpinned; }
  // The epoch this context's reads are protected from: its pin, or the
  // compute node's local epoch when it is not pinned; lower when a cache
  // entry of an older epoch routed it (cache_slot: an image read through
  // that route may be of an object unlinked since). What a cache
  // entry it fills keeps (epochs.h).
  uint64_t epoch() const {
    const uint64_t pin = epoch_slot_.load(std::memory_order_relaxed);
    if (pin == kUnpinned) return epoch_local_->load(std::memory_order_acquire);
    return std::min(pin, cache_slot_.load(std::memory_order_relaxed));
  }
  // Pins for its life unless the context is pinned already.
  class PinScope {
   public:
    explicit PinScope(ContextImpl& ctx) : ctx_(ctx.pinned() ? nullptr : &ctx) {
      if (ctx_ != nullptr) ctx_->Pin();
    }
    ~PinScope() {
      if (ctx_ != nullptr) ctx_->Unpin();
    }
    PinScope(const PinScope&) = delete;
    PinScope& operator=(const PinScope&) = delete;

   private:
    ContextImpl* const ctx_;
  };
  // Gives `object` (from an allocator: its bytes and alignment as
  // allocated) back once no operation that could have reached it runs on
  // any compute node. Call it after the write that unlinked the object
  // from every remote structure landed. The object waits on the worker's
  // list (Worker::retired); objects whose grace period ended go to the
  // worker's allocator through this context, and a free that leaves the
  // allocator more than it keeps pushes a bundle to a shared list (one
  // round trip: it may suspend the coroutine). Otherwise local work only.
  void Retire(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment = 64);

  // Called once per index operation (index/index_core.h): under virtual
  // time the operation's client CPU is charged here.
  void ChargeOperation() {
    if (scheduler_ != nullptr) scheduler_->ChargeOperation();
  }

  // Set by the runtime while a coroutine scheduler runs this context.
  void set_scheduler(Scheduler* scheduler) { scheduler_ = scheduler; }
  // Whether a scheduler runs this context now (not a blocking context).
  bool scheduled() const { return scheduler_ != nullptr; }
  Parker* parker() { return &parker_; }

 private:
  Worker* const worker_;
  const int coroutine_index_;
  const uint32_t number_;
  uint64_t lock_acquisitions_;
  const std::span<uint8_t> scratch_;
  ScratchArena arena_;
  // Blocks up to 1 MiB come from pools (a radix scan's frontier can pass
  // 64 KiB); a pool takes memory only once a block of its size is asked.
  std::pmr::unsynchronized_pool_resource memory_{
      std::pmr::pool_options{.max_blocks_per_chunk = 0, .largest_required_pool_block = 1 << 20}};
  friend class Worker;  // NoteFailuresOnClient, when its flag changes
  // Points parker_'s failure flag at the client's (ClientImpl::Settled),
  // or at none where the worker's failures do not unsettle it.
  void NoteFailuresOnClient();
  // Registers this context's pin slot with its compute node, and finds the
  // node's local epoch.
  void AttachEpochSlot();
  std::atomic<uint64_t> epoch_slot_{kUnpinned};  // the compute node's EpochTable reads it
  std::atomic<uint64_t> cache_slot_{kUnpinned};  // HoldCacheEpoch's; the EpochTable reads it
  const std::atomic<uint64_t>* epoch_local_ = nullptr;
  Parker parker_;
  Scheduler* scheduler_ = nullptr;  // null: blocking context
  OpCounters counters_;
  uint64_t backoff_state_ = 0;  // the jitter generator's state; 0: not seeded yet
  std::chrono::nanoseconds longest_lock_wait_{0};
  std::optional<std::chrono::nanoseconds> lock_wait_origin_;
  std::vector<fabric::Op>* recorded_posts_ = nullptr;           // RecordPostsForTesting
  std::function<void(std::span<const fabric::Op>)> post_hook_;  // SetPostHookForTesting
  // Declared last so it is destroyed first: its endpoint quiesces (no thread
  // will notify parker_ again) before parker_ goes away.
  std::unique_ptr<Worker> owned_worker_;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_CONTEXT_H_
