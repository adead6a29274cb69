#include "lock/local_lock.h"

namespace dmidx::lock {

bool LocalLock::LockSlow(runtime::ContextImpl& context, uint64_t state) {
  Waiter waiter{&context};
  {
    // Counting and queuing happen in one critical section, so the queue's
    // order is the counting order (first-come, first-served), and a
    // HandOver() that saw this waiter counted finds it queued once it has
    // the mutex.
    std::lock_guard<std::mutex> guard(mutex_);
    for (;;) {
      if (state == 0) {
        // Free (a waiter is counted only while the lock is held, so a free
        // lock has none): take it.
        if (state_.compare_exchange_weak(state, kHeld, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          return false;
        }
      } else if (state_.compare_exchange_weak(state, state + kWaiter, std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
        break;
      }
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
  // The waiter this counted off is queued: it counted itself under
  // mutex_ and queued before letting go of it.
  std::lock_guard<std::mutex> guard(mutex_);
  Waiter* next = queue_.front();
  queue_.pop_front();
  next->granted = true;
  // Still under mutex_: the waiter cannot see `granted` and return (and
  // perhaps destroy its context) before this Unpark is done. Unpark only
  // grants a permit; it never calls back into this lock.
  next->context->Unpark();
}

}  // namespace dmidx::lock
