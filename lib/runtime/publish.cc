#include "lib/runtime/publish.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/context.h"

namespace dmidx::runtime {

StatusOr<fabric::RemoteAddress> MakeAndPublish(
    ContextImpl& ctx, fabric::RemoteAddress word, uint64_t bytes, uint64_t first_word,
    const std::function<StatusOr<fabric::RemoteAddress>()>& take,
    const std::function<void(fabric::RemoteAddress)>& give_back) {
  assert(bytes >= 8 && bytes % 8 == 0);
  DMIDX_ASSIGN_OR_RETURN(const fabric::RemoteAddress object, take());
  ScratchArena::Scope scope(ctx.arena());
  Status written;
  {
    // WRITEs of at most kPiece from two small buffers (the first piece,
    // the zeros after it, if any), in one batch where they fit.
    constexpr uint64_t kPiece = 1024;
    const uint64_t piece = std::min(kPiece, bytes);
    const uint64_t buffer_bytes = bytes > piece ? 2 * piece : piece;
    StatusOr<uint8_t*> buffers = ctx.arena().Bytes(buffer_bytes, 64);
    written = buffers.status();
    if (buffers.ok()) {
      uint8_t* first = *buffers;
      uint8_t* zeros = *buffers + piece;  // used only when bytes > piece
      std::memset(first, 0, buffer_bytes);
      std::memcpy(first, &first_word, 8);
      std::vector<fabric::Op> writes;
      for (uint64_t at = 0; at < bytes; at += piece) {
        writes.push_back(
            fabric::Op::Write(object + at, at == 0 ? first : zeros, std::min(piece, bytes - at)));
      }
      written = ctx.ExecuteAll(writes);
    }
  }
  if (!written.ok()) {
    give_back(object);
    return written;
  }
  DMIDX_ASSIGN_OR_RETURN(uint64_t * seen, ctx.arena().Words(1));
  const fabric::Op publish = fabric::Op::CompareSwap(word, seen, 0, object.raw());
  DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&publish, 1}));
  if (*seen != 0) {
    give_back(object);
    return fabric::RemoteAddress::FromRaw(*seen);
  }
  return object;
}

}  // namespace dmidx::runtime
