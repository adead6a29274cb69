#include "lock/local_lock.h"

namespace dmidx::lock {

bool LocalLock::LockSlow(runtime::ContextImpl& context, uint64_t state) {
  // Count this context as a waiter while the lock is held, or take it the
  // moment it is free (a waiter is counted only while the lock is held, so a
  // free lock has none).
  for (;;) {
    if (state == 0) {
      if (state_.compare_exchange_weak(state, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return false;
      }
    } else if (state_.compare_exchange_weak(state, state + kWaiter, std::memory_order_relaxed,
                                            std::memory_order_relaxed)) {
      break;
    }
  }
  Waiter waiter{&context};
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // The holder may have handed the lock to this waiter already, between
    // the count above and here.
    if (early_grants_ > 0) {
      --early_grants_;
      return true;
    }
    queue_.push_back(&waiter);
  }
  // `granted` is read under mutex_, and HandOver() sets it and unparks this
  // context in one critical section: once it reads true here, Unlock() is
  // done with `waiter` and with the context, so the caller may destroy the
  // context as soon as this returns. The mutex also orders what the previous
  // holder wrote under the lock before what this one does.
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (waiter.granted) return true;
    }
    context.Park();
  }
}

void LocalLock::HandOver(uint64_t state) {
  // Waiters are counted: take one off, keeping the held bit (the lock goes
  // to that waiter, not back to free).
  while (!state_.compare_exchange_weak(state, state - kWaiter, std::memory_order_release,
                                       std::memory_order_relaxed)) {
  }
  std::lock_guard<std::mutex> guard(mutex_);
  if (queue_.empty()) {
    // The waiter counted itself but has not queued yet: it takes this grant
    // when it gets to the queue (under this mutex, so it sees it).
    ++early_grants_;
    return;
  }
  Waiter* next = queue_.front();
  queue_.pop_front();
  next->granted = true;
  // Still under mutex_: the waiter cannot see `granted` and return (and
  // perhaps destroy its context) before this Unpark is done. Unpark only
  // grants a permit; it never calls back into this lock.
  next->context->Unpark();
}

}  // namespace dmidx::lock
