// A FIFO over one array that grows by doubling and never shrinks, so a queue
// that has reached its working size pushes and pops without touching the
// heap (std::deque allocates and frees a block every few elements).
#ifndef DMIDX_FABRIC_RING_QUEUE_H_
#define DMIDX_FABRIC_RING_QUEUE_H_

#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace dmidx::fabric {

// T must be default-constructible and movable. Slots are reused: push_back()
// hands out a slot holding whatever an earlier element left there, for the
// caller to overwrite. Not thread-safe.
template <typename T>
class RingQueue {
 public:
  // Makes room for `capacity` elements up front (rounded up to a power of 2).
  void reserve(size_t capacity) {
    if (capacity > slots_.size()) Grow(capacity);
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }

  T& front() {
    assert(size_ > 0);
    return slots_[head_];
  }
  // The i-th element from the front.
  T& operator[](size_t i) {
    assert(i < size_);
    return slots_[(head_ + i) & (slots_.size() - 1)];
  }

  // A slot at the back, now part of the queue; grows the array when full.
  T& push_back() {
    if (size_ == slots_.size()) Grow(size_ + 1);
    T& slot = slots_[(head_ + size_) & (slots_.size() - 1)];
    ++size_;
    return slot;
  }
  void pop_front() {
    assert(size_ > 0);
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  void clear() {
    head_ = 0;
    size_ = 0;
  }

 private:
  void Grow(size_t at_least) {
    size_t capacity = slots_.empty() ? 8 : slots_.size();
    while (capacity < at_least)
      capacity *= 2;
    std::vector<T> bigger(capacity);
    for (size_t i = 0; i < size_; ++i)
      bigger[i] = std::move((*this)[i]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // size is 0 or a power of 2
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_RING_QUEUE_H_
