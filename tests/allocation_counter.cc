#include "tests/allocation_counter.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<uint64_t> heap_allocations{0};
}  // namespace

namespace dmidx::testing_support {

uint64_t HeapAllocations() {
  return heap_allocations.load(std::memory_order_relaxed);
}

}  // namespace dmidx::testing_support

// Not inlined: GCC would otherwise pair an inlined free() with the replaced
// operator new and warn (-Wmismatched-new-delete), wrongly.
[[gnu::noinline]] void* operator new(size_t bytes) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
// The other forms count too: libstdc++ routes a pool resource's requests
// for more memory, and every over-aligned allocation, through the aligned
// form, and a nothrow new (std::stable_sort's buffer) through its own.
[[gnu::noinline]] void* operator new(size_t bytes, std::align_val_t alignment) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t align = std::max(static_cast<size_t>(alignment), sizeof(void*));
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes == 0 ? 1 : bytes) == 0) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
[[gnu::noinline]] void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(bytes == 0 ? 1 : bytes);
}
[[gnu::noinline]] void* operator new(size_t bytes, std::align_val_t alignment,
                                     const std::nothrow_t&) noexcept {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t align = std::max(static_cast<size_t>(alignment), sizeof(void*));
  void* p = nullptr;
  return posix_memalign(&p, align, bytes == 0 ? 1 : bytes) == 0 ? p : nullptr;
}
