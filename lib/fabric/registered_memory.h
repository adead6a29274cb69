// The local memory ranges an endpoint registered, looked up on every post.
#ifndef DMIDX_FABRIC_REGISTERED_MEMORY_H_
#define DMIDX_FABRIC_REGISTERED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dmidx::fabric {

// Ranges kept sorted by start address, so a lookup is a binary search (the
// post path looks up every op's buffer) rather than a scan. Ranges may
// overlap or nest; an access must lie inside one of them (an SGE names one
// memory region). Owner thread only.
class RegisteredMemory {
 public:
  struct Range {
    uintptr_t base = 0;
    size_t bytes = 0;
    uint32_t key = 0;  // backend's handle of the range (the MR's lkey on verbs)
  };

  RegisteredMemory() = default;
  // Not copyable: the memo below points into ranges_.
  RegisteredMemory(const RegisteredMemory&) = delete;
  RegisteredMemory& operator=(const RegisteredMemory&) = delete;

  // Adds [base, base + bytes); bytes > 0 and the range must not wrap.
  void Add(uintptr_t base, size_t bytes, uint32_t key);

  // The range holding all of [local, local + bytes), or nullptr.
  const Range* Find(const void* local, size_t bytes) const {
    const auto begin = reinterpret_cast<uintptr_t>(local);
    return InLastFound(begin, bytes) ? last_ : FindSlow(begin, bytes);
  }
  // Whether [begin, begin + bytes) lies in the range the last successful
  // Find returned: a few instructions, no call. False says nothing.
  bool InLastFound(uintptr_t begin, size_t bytes) const {
    return begin - last_base_ < last_bytes_ && bytes <= last_bytes_ - (begin - last_base_);
  }

 private:
  const Range* FindSlow(uintptr_t begin, size_t bytes) const;

  std::vector<Range> ranges_;  // sorted by base
  // The range the last successful Find returned, tried first (a context
  // posts from its own scratch slot almost always), with its bounds copied
  // beside it; none (0 bytes) after an Add.
  mutable const Range* last_ = nullptr;
  mutable uintptr_t last_base_ = 0;
  mutable size_t last_bytes_ = 0;
  // reach_[i]: the largest end of ranges_[0..i]; lets Find stop walking back
  // as soon as no earlier range can reach far enough.
  std::vector<uintptr_t> reach_;
};

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_REGISTERED_MEMORY_H_
