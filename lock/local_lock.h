// A FIFO lock for the contexts of one compute node (its threads and
// coroutines). Waiters park their context instead of spinning, so coroutines
// of one thread contending for it cannot deadlock: while one waits, the
// scheduler runs the holder. Ownership passes directly to the oldest waiter
// on Unlock (handover), so the order is first-come, first-served.
//
// Uncontended, Lock and Unlock are one compare-and-swap each on one word
// (held bit and waiter count) and nothing else: no mutex, no allocation.
// Only a waiter and the Unlock that hands the lock to it take the mutex that
// guards the queue of parked contexts.
//
// Each queue of lock/lock_queue.h (LocalLockTable's entries) is one of these:
// its users, HOCL's local level (the B+tree) and the radix tree's leaf locks,
// add the remote word, its handover with the object's image and the bound
// on consecutive handovers on top of it.
#ifndef DMIDX_LOCK_LOCAL_LOCK_H_
#define DMIDX_LOCK_LOCAL_LOCK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>

#include "lib/runtime/context.h"

namespace dmidx::lock {

class LocalLock {
 public:
  LocalLock() = default;
  LocalLock(const LocalLock&) = delete;
  LocalLock& operator=(const LocalLock&) = delete;

  // Returns once `context` holds the lock. Returns true if the lock was
  // handed over by a previous holder, false if it was free.
  bool Lock(runtime::ContextImpl& context) {
    uint64_t state = 0;
    if (state_.compare_exchange_strong(state, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return false;
    }
    return LockSlow(context, state);
  }
  // Returns true and takes the lock if it is free and nobody waits.
  bool TryLock() {
    uint64_t state = 0;
    return state_.compare_exchange_strong(state, kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  // Passes the lock to the oldest waiter, or frees it. Precondition: held by
  // the caller's context. Once the waiter's Lock() returns, Unlock() no
  // longer touches it or its context (the waiter may destroy both).
  void Unlock() {
    uint64_t state = kHeld;
    if (state_.compare_exchange_strong(state, 0, std::memory_order_release,
                                       std::memory_order_relaxed)) {
      return;
    }
    HandOver(state);
  }
  // Contexts waiting in Lock() right now.
  size_t waiters() const { return state_.load(std::memory_order_relaxed) >> 1; }

  // Holds `lock` for `context` from construction to destruction.
  class Guard {
   public:
    Guard(LocalLock& lock, runtime::ContextImpl& context) : lock_(lock) { lock_.Lock(context); }
    ~Guard() { lock_.Unlock(); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    LocalLock& lock_;
  };

 private:
  // state_: bit 0 is set while the lock is held; the rest counts waiters.
  // Waiters are counted only while it is held: a Lock() that finds the lock
  // held adds itself, an Unlock() that finds waiters hands the lock over
  // (the bit stays set) and takes one off.
  static constexpr uint64_t kHeld = 1;
  static constexpr uint64_t kWaiter = 2;

  // Lives on the waiting context's stack while it is queued.
  struct Waiter {
    runtime::ContextImpl* context;
    bool granted = false;  // guarded by mutex_
  };

  bool LockSlow(runtime::ContextImpl& context, uint64_t state);
  void HandOver(uint64_t state);

  std::atomic<uint64_t> state_{0};
  std::mutex mutex_;
  std::deque<Waiter*> queue_;  // guarded by mutex_, oldest first
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_LOCAL_LOCK_H_
