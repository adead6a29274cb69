#include "index/catalog.h"

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"

namespace dmidx::index {

using fabric::Op;
using fabric::RemoteAddress;

StatusOr<RemoteAddress> MadeObjects::Allocate(runtime::ContextImpl& ctx, uint64_t bytes,
                                              std::optional<uint16_t> node) {
  StatusOr<RemoteAddress> address = ctx.allocator().Allocate(bytes, 64, node);
  if (address.ok()) objects_.emplace_back(*address, bytes);
  return address;
}

void MadeObjects::FreeAll(runtime::ContextImpl& ctx) {
  for (const auto& [address, bytes] : objects_)
    (void)ctx.allocator().Free(address, bytes);
  objects_.clear();
}

StatusOr<RemoteAddress> OpenOrCreate(runtime::ContextImpl& ctx, RemoteAddress slot,
                                     const CreateDescriptor& create) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
  const Op read = Op::Read(slot, word, 8);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(slot.node(), {&read, 1}));
  if (*word != 0) return RemoteAddress::FromRaw(*word);

  MadeObjects made;
  StatusOr<RemoteAddress> descriptor = create(ctx, &made);
  if (!descriptor.ok()) {
    made.FreeAll(ctx);
    return descriptor.status();
  }
  const Op publish = Op::CompareSwap(slot, word, 0, descriptor->raw());
  if (Status status = ctx.Execute(slot.node(), {&publish, 1}); !status.ok()) {
    made.Keep();  // the CAS may have landed: keep them rather than free a live index
    return status;
  }
  if (*word != 0) {
    made.FreeAll(ctx);  // another compute node created it first
    return RemoteAddress::FromRaw(*word);
  }
  made.Keep();  // published: the index owns them now
  return descriptor;
}

}  // namespace dmidx::index
