// How the in-process backends (`local`, `sim`) touch remote memory, and how
// they report an unsignaled batch's failure: shared so that both move words
// the same way.
//
// Remote memory is only touched through std::atomic_ref word accesses (a
// partial word is merged with a CAS loop), so concurrent READs and WRITEs
// are not data races in the C++ sense and ThreadSanitizer stays quiet.
// WRITE word stores are release and READ word loads acquire: a client whose
// READ observes a word written by a batch also observes every word that
// batch's connection wrote before it.
#ifndef DMIDX_FABRIC_MEMORY_ACCESS_H_
#define DMIDX_FABRIC_MEMORY_ACCESS_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <utility>

#include "dmidx/status.h"

namespace dmidx::fabric {

// The 8-byte words covering [address, address + length).
inline size_t WordCount(const uint8_t* address, size_t length) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  const uintptr_t first_word = begin & ~uintptr_t{7};
  return (begin + length - first_word + 7) / 8;
}

// Moves word `index` (< WordCount) of the remote range [remote, remote +
// length) to or from the matching bytes of `local`: a READ's load is
// acquire; a WRITE's whole word is a release store and a partial word is
// merged into the current value with a CAS loop, so bytes outside the
// range written concurrently by others are never lost.
inline void MoveWord(bool is_read, uint8_t* remote, uint8_t* local, size_t length, size_t index) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(remote);
  const uintptr_t word = (begin & ~uintptr_t{7}) + 8 * index;
  const uintptr_t lo = std::max(word, begin);
  const uintptr_t hi = std::min(word + 8, begin + length);
  const size_t first = lo - word, bytes = hi - lo, local_offset = lo - begin;
  std::atomic_ref<uint64_t> target(*reinterpret_cast<uint64_t*>(word));
  if (is_read) {
    const uint64_t value = target.load(std::memory_order_acquire);
    std::memcpy(local + local_offset, reinterpret_cast<const uint8_t*>(&value) + first, bytes);
    return;
  }
  if (bytes == 8) {
    uint64_t value;
    std::memcpy(&value, local + local_offset, 8);
    target.store(value, std::memory_order_release);
    return;
  }
  uint64_t expected = target.load(std::memory_order_relaxed);
  uint64_t desired;
  do {
    desired = expected;
    std::memcpy(reinterpret_cast<uint8_t*>(&desired) + first, local + local_offset, bytes);
  } while (!target.compare_exchange_weak(expected, desired, std::memory_order_release,
                                         std::memory_order_relaxed));
}

// Moves the words listed in `indices`, in that order; every word, in
// ascending address order, when `indices` is empty.
inline void MoveWords(bool is_read, uint8_t* remote, uint8_t* local, size_t length,
                      std::span<const uint32_t> indices = {}) {
  if (indices.empty()) {
    if ((reinterpret_cast<uintptr_t>(remote) | length) % 8 == 0) {
      // Whole words: no partial word to merge (the common case, and the
      // one a simulated 1 KiB node read spends its time in).
      auto* words = reinterpret_cast<uint64_t*>(remote);
      for (size_t i = 0; i < length / 8; ++i) {
        std::atomic_ref<uint64_t> target(words[i]);
        uint64_t value;
        if (is_read) {
          value = target.load(std::memory_order_acquire);
          std::memcpy(local + 8 * i, &value, 8);
        } else {
          std::memcpy(&value, local + 8 * i, 8);
          target.store(value, std::memory_order_release);
        }
      }
      return;
    }
    const size_t words = WordCount(remote, length);
    for (size_t i = 0; i < words; ++i)
      MoveWord(is_read, remote, local, length, i);
    return;
  }
  for (uint32_t i : indices)
    MoveWord(is_read, remote, local, length, i);
}

// CAS and FAA on one remote word (acq_rel); return the old value.
inline uint64_t CompareSwapWord(uint8_t* remote, uint64_t compare, uint64_t swap) {
  uint64_t old_value = compare;
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(remote))
      .compare_exchange_strong(old_value, swap, std::memory_order_acq_rel,
                               std::memory_order_acquire);
  return old_value;
}
inline uint64_t FetchAddWord(uint8_t* remote, uint64_t add) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(remote))
      .fetch_add(add, std::memory_order_acq_rel);
}

// Where a connection reports the failure of an unsignaled batch, for the
// next Post() of its endpoint. Written by whichever thread applies; read by
// the owner.
class DeferredError {
 public:
  void Set(const Status& status) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (status_.ok()) status_ = status;
    // Release: a poster that sees the flag also sees status_ (it takes the
    // mutex anyway; the flag only keeps the mutex off the common path).
    pending_.store(true, std::memory_order_release);
  }
  // The first failure since the last call, or OK.
  Status Take() {
    if (!pending_.load(std::memory_order_acquire)) return Status::Ok();
    std::lock_guard<std::mutex> guard(mutex_);
    pending_.store(false, std::memory_order_relaxed);
    return std::exchange(status_, Status::Ok());
  }

 private:
  std::atomic<bool> pending_{false};
  std::mutex mutex_;
  Status status_;  // guarded by mutex_
};

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_MEMORY_ACCESS_H_
