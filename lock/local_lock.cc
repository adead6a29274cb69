#include "lock/local_lock.h"

namespace dmidx::lock {

bool LocalLock::Lock(runtime::ContextImpl& context) {
  Waiter waiter{&context};
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!held_) {
      held_ = true;
      return false;
    }
    waiters_.push_back(&waiter);
  }
  // `granted` is read under mutex_, and Unlock() sets it and unparks this
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

bool LocalLock::TryLock() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (held_) return false;
  held_ = true;
  return true;
}

void LocalLock::Unlock() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (waiters_.empty()) {
    held_ = false;
    return;
  }
  Waiter* next = waiters_.front();
  waiters_.pop_front();
  next->granted = true;
  // Still under mutex_: the waiter cannot see `granted` and return (and
  // perhaps destroy its context) before this Unpark is done. Unpark only
  // grants a permit; it never calls back into this lock.
  next->context->Unpark();
}

size_t LocalLock::waiters() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return waiters_.size();
}

}  // namespace dmidx::lock
