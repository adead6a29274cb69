// Counts the process's heap allocations (operator new), so that a test or a
// benchmark can check how many a piece of code makes. Linking
// allocation_counter.cc replaces the global operator new and delete of the
// binary; it is process-wide by nature.
#ifndef DMIDX_TESTS_ALLOCATION_COUNTER_H_
#define DMIDX_TESTS_ALLOCATION_COUNTER_H_

#include <cstdint>

namespace dmidx::testing_support {

// Heap allocations made through operator new since the process started.
uint64_t HeapAllocations();

// Allocations made since construction.
class AllocationMeter {
 public:
  AllocationMeter() : start_(HeapAllocations()) {}
  uint64_t allocations() const { return HeapAllocations() - start_; }

 private:
  uint64_t start_;
};

}  // namespace dmidx::testing_support

#endif  // DMIDX_TESTS_ALLOCATION_COUNTER_H_
