#include "lib/runtime/arena.h"

#include <algorithm>
#include <string>

namespace dmidx::runtime {

namespace {

constexpr size_t kMaxAlignment = 4096;

size_t AlignUp(size_t offset, size_t alignment) {
  return (offset + alignment - 1) & ~(alignment - 1);
}

bool ValidAlignment(size_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= kMaxAlignment;
}

}  // namespace

StatusOr<uint8_t*> ScratchArena::Bytes(size_t bytes, size_t alignment) {
  if (bytes == 0) return Status::InvalidArgument("scratch arena: zero-byte request");
  if (!ValidAlignment(alignment)) {
    return Status::InvalidArgument("scratch arena: alignment " + std::to_string(alignment) +
                                   " is not a power of two up to 4096");
  }
  // The memory itself is 4096-aligned (registered scratch), so aligning the
  // offset aligns the address.
  const size_t begin = AlignUp(used_, alignment);
  if (begin > memory_.size() || memory_.size() - begin < bytes) {
    return Status::ResourceExhausted(
        "scratch arena: " + std::to_string(bytes) + " bytes asked, " +
        std::to_string(memory_.size() - std::min(used_, memory_.size())) + " of " +
        std::to_string(memory_.size()) + " left (raise ClientOptions::scratch_bytes_per_context)");
  }
  used_ = begin + bytes;
  return memory_.data() + begin;
}

size_t ScratchArena::Fits(size_t bytes, size_t alignment, size_t leave) const {
  if (bytes == 0 || !ValidAlignment(alignment)) return 0;
  const size_t begin = AlignUp(used_, alignment);
  if (begin >= memory_.size() || memory_.size() - begin <= leave) return 0;
  const size_t stride = AlignUp(bytes, alignment);
  const size_t room = memory_.size() - begin - leave;
  return room < bytes ? 0 : 1 + (room - bytes) / stride;
}

}  // namespace dmidx::runtime
