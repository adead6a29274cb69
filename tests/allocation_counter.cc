#include "tests/allocation_counter.h"

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
