// A FIFO lock for the contexts of one compute node (its threads and
// coroutines). Waiters park their context instead of spinning, so coroutines
// of one thread contending for it cannot deadlock: while one waits, the
// scheduler runs the holder. Ownership passes directly to the oldest waiter
// on Unlock (handover), so the order is first-come, first-served.
//
// This is the local half of HOCL's lock pair; the B+tree's lock layer adds the
// global lock and the bound on consecutive handovers on top of it.
#ifndef DMIDX_LOCK_LOCAL_LOCK_H_
#define DMIDX_LOCK_LOCAL_LOCK_H_

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
  bool Lock(runtime::ContextImpl& context);
  // Returns true and takes the lock if it is free and nobody waits.
  bool TryLock();
  // Passes the lock to the oldest waiter, or frees it. Precondition: held by
  // the caller's context. Once the waiter's Lock() returns, Unlock() no
  // longer touches it or its context (the waiter may destroy both).
  void Unlock();
  // Contexts parked in Lock() right now.
  size_t waiters() const;

 private:
  // Lives on the waiting context's stack while it is queued.
  struct Waiter {
    runtime::ContextImpl* context;
    bool granted = false;  // guarded by mutex_
  };

  mutable std::mutex mutex_;
  bool held_ = false;            // guarded by mutex_
  std::deque<Waiter*> waiters_;  // guarded by mutex_
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_LOCAL_LOCK_H_
