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
  // Acquire pairs with the release in Unlock(): what the previous holder
  // wrote under the lock is visible once `granted` reads true.
  while (!waiter.granted.load(std::memory_order_acquire))
    context.Park();
  return true;
}

bool LocalLock::TryLock() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (held_) return false;
  held_ = true;
  return true;
}

void LocalLock::Unlock() {
  Waiter* next = nullptr;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (waiters_.empty()) {
      held_ = false;
      return;
    }
    next = waiters_.front();
    waiters_.pop_front();
  }
  // `next` lives on the waiter's stack and may be gone as soon as `granted`
  // is set, so take its context first. Contexts outlive their waits.
  runtime::ContextImpl* context = next->context;
  next->granted.store(true, std::memory_order_release);
  context->Unpark();
}

size_t LocalLock::waiters() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return waiters_.size();
}

}  // namespace dmidx::lock
