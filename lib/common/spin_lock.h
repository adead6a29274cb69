// A one-byte lock for short critical sections that never wait inside (no
// Park, no Yield, no I/O): taking it free is one atomic exchange and freeing
// it one store, where an uncontended std::mutex costs about eighty
// instructions in glibc for the pair. A thread that finds it held spins on
// a load (with the CPU's pause hint) and after a while yields the core, so
// a holder that was preempted, or that is in a longer section (a cache's
// Put, which allocates and may evict), gets to run. Coroutines of one
// thread never contend for it as long as no critical section suspends the
// coroutine that holds it.
//
// Meets BasicLockable: std::lock_guard<SpinLock> works.
#ifndef DMIDX_COMMON_SPIN_LOCK_H_
#define DMIDX_COMMON_SPIN_LOCK_H_

#include <atomic>
#include <cstdint>
#include <thread>

namespace dmidx {

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  bool try_lock() {
    return !held_.load(std::memory_order_relaxed) &&
           !held_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  void LockSlow() {
    for (uint32_t spins = 0;;) {
      while (held_.load(std::memory_order_relaxed)) {
        if (spins < 64) {
          Pause();
          ++spins;
        } else {
          std::this_thread::yield();
        }
      }
      if (!held_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> held_{false};
};

}  // namespace dmidx

#endif  // DMIDX_COMMON_SPIN_LOCK_H_
