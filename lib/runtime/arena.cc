#include "lib/runtime/arena.h"

#include <algorithm>
#include <string>

namespace dmidx::runtime {

namespace {

size_t AlignUp(size_t offset, size_t alignment) {
  return (offset + alignment - 1) & ~(alignment - 1);
}

bool ValidAlignment(size_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0 &&
         alignment <= ScratchArena::kMaxAlignment;
}

}  // namespace

Status ScratchArena::BytesFailed(size_t bytes, size_t alignment) const {
  if (bytes == 0) return Status::InvalidArgument("scratch arena: zero-byte request");
  if (!ValidAlignment(alignment)) {
    return Status::InvalidArgument("scratch arena: alignment " + std::to_string(alignment) +
                                   " is not a power of two up to 4096");
  }
  return Status::ResourceExhausted(
      "scratch arena: " + std::to_string(bytes) + " bytes asked, " +
      std::to_string(memory_.size() - std::min(used_, memory_.size())) + " of " +
      std::to_string(memory_.size()) + " left (raise ClientOptions::scratch_bytes_per_context)");
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
