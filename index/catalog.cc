#include "index/catalog.h"

#include <string>

#include "index/verified_read.h"
#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/compute_node.h"
#include "lock/redo_log.h"

namespace dmidx::index {

using fabric::Op;
using fabric::RemoteAddress;

StatusOr<RemoteAddress> MadeObjects::Allocate(runtime::ContextImpl& ctx, uint64_t bytes,
                                              std::optional<uint16_t> node) {
  StatusOr<RemoteAddress> address = ctx.allocator().Allocate(ctx, bytes, 64, node);
  if (address.ok()) objects_.emplace_back(*address, bytes);
  return address;
}

void MadeObjects::FreeAll(runtime::ContextImpl& ctx) {
  for (const auto& [address, bytes] : objects_)
    (void)ctx.allocator().Free(ctx, address, bytes);
  objects_.clear();
}

StatusOr<RemoteAddress> OpenOrCreate(runtime::ContextImpl& ctx, RemoteAddress catalog_word,
                                     const CreateDescriptor& create) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * seen, ctx.arena().Words(1));
  const Op read = Op::Read(catalog_word, seen, 8);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(catalog_word.node(), {&read, 1}));
  if (*seen != 0) return RemoteAddress::FromRaw(*seen);

  MadeObjects made;
  StatusOr<RemoteAddress> descriptor = create(ctx, &made);
  if (!descriptor.ok()) {
    made.FreeAll(ctx);
    return descriptor.status();
  }
  const Op publish = Op::CompareSwap(catalog_word, seen, 0, descriptor->raw());
  if (Status status = ctx.Execute(catalog_word.node(), {&publish, 1}); !status.ok()) {
    made.Keep();  // the CAS may have landed: keep them rather than free a live index
    return status;
  }
  if (*seen != 0) {
    made.FreeAll(ctx);  // another compute node created it first
    return RemoteAddress::FromRaw(*seen);
  }
  made.Keep();  // published: the index owns them now
  return descriptor;
}

StatusOr<OpenedDescriptor> OpenDescriptor(Client& client, const DescriptorSpec& spec,
                                          const CreateDescriptor& create) {
  const std::string catalog_name = std::string(spec.folder) + "/" + std::string(spec.name);
  DMIDX_ASSIGN_OR_RETURN(RemoteAddress catalog_word,
                         runtime::ComputeNode::Of(client).CatalogWord(catalog_name, true));
  OpenedDescriptor opened;
  DMIDX_RETURN_IF_ERROR(client.NewBlockingContext(&opened.context));
  runtime::ContextImpl& ctx = opened.ctx();
  // Before this client's first lock: what an earlier client of its id
  // left in its redo records is finished and cleared (lock/redo_log.h).
  DMIDX_RETURN_IF_ERROR(lock::RedoLog::For(runtime::ComputeNode::Of(client))->TakeOver(ctx));
  DMIDX_ASSIGN_OR_RETURN(opened.address, OpenOrCreate(ctx, catalog_word, create));
  {
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(kDescriptorBytes / 8));
    const Op read = Op::Read(opened.address, words, kDescriptorBytes);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(opened.address.node(), {&read, 1}));
    std::memcpy(opened.image.data(), words, kDescriptorBytes);
  }
  DescriptorHead found;
  std::memcpy(&found, opened.image.data(), sizeof(found));
  if (found.magic != spec.magic) {
    return Status::FailedPrecondition("catalog entry '" + catalog_name + "' does not point at a " +
                                      std::string(spec.kind));
  }
  if (found.key_bytes != spec.key_bytes) {
    return Status::InvalidArgument(std::string(spec.kind) + " '" + std::string(spec.name) +
                                   "' exists with " + std::to_string(found.key_bytes) +
                                   "-byte keys, not " + std::to_string(spec.key_bytes));
  }
  return opened;
}

Status WriteDescriptor(runtime::ContextImpl& ctx, RemoteAddress address, const void* image) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(kDescriptorBytes / 8));
  std::memcpy(words, image, kDescriptorBytes);
  const Op write = Op::Write(address, words, kDescriptorBytes);
  return ctx.Execute(address.node(), {&write, 1});
}

}  // namespace dmidx::index
