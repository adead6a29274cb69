// New remote objects, written as many per round trip as the context's
// scratch arena holds, and given back to the allocator unless they were
// published. For every change that makes objects before one step makes
// them reachable (a bulk load, a split):
//
//   index::ObjectWriter writer(ctx);
//   DMIDX_ASSIGN_OR_RETURN(RemoteAddress node, writer.Allocate(bytes, near));
//   DMIDX_ASSIGN_OR_RETURN(uint8_t * image, writer.Buffer(bytes));
//   ... fill image ...
//   writer.Write(node, image, bytes);
//   DMIDX_RETURN_IF_ERROR(writer.Flush());  // an error frees what was made
//   ... publish ...; writer.Keep();
#ifndef DMIDX_INDEX_OBJECT_WRITER_H_
#define DMIDX_INDEX_OBJECT_WRITER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "dmidx/status.h"
#include "index/catalog.h"
#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

class ObjectWriter {
 public:
  // Takes the arena from here on (buffers come from a scope of its own:
  // take what must outlive a flush before).
  explicit ObjectWriter(runtime::ContextImpl& ctx) : ctx_(ctx) { scope_.emplace(ctx.arena()); }
  // Frees every object made, unless Keep() was called.
  ~ObjectWriter() { made_.FreeAll(ctx_); }
  ObjectWriter(const ObjectWriter&) = delete;
  ObjectWriter& operator=(const ObjectWriter&) = delete;

  // A new object of `bytes` (64-byte aligned), on memory node `near` when
  // it has room, else on any.
  StatusOr<fabric::RemoteAddress> Allocate(uint64_t bytes, std::optional<uint16_t> near);
  // A buffer for an object's image, valid until the next Flush (which it
  // runs first when the arena has no room for it beside
  // kScratchReserveBytes).
  StatusOr<uint8_t*> Buffer(uint32_t bytes);
  // Queues the WRITE of `image` (from Buffer) to `at`.
  void Write(fabric::RemoteAddress at, const uint8_t* image, uint32_t bytes) {
    ops_.push_back(fabric::Op::Write(at, image, bytes));
  }
  // Posts the queued WRITEs (one batch per memory node) and waits for them;
  // frees the buffers. On an error every object made is freed at once:
  // none of them was reachable.
  Status Flush();
  // The objects are published (or may be): they are the index's now.
  void Keep() { made_.Keep(); }

 private:
  runtime::ContextImpl& ctx_;
  MadeObjects made_;
  std::vector<fabric::Op> ops_;
  std::optional<runtime::ScratchArena::Scope> scope_;
};

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_OBJECT_WRITER_H_
