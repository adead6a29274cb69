#include "lib/memnode/control_protocol.h"

namespace dmidx::memnode {

ControlMessage HandleControlRequest(MemoryNode& node, const ControlMessage& request) {
  ControlMessage reply;
  reply.type = ControlType::kReply;
  reply.request_id = request.request_id;
  switch (request.type) {
    case ControlType::kAllocateChunk: {
      StatusOr<fabric::RemoteAddress> chunk = node.AllocateChunk();
      if (chunk.ok()) reply.address = chunk->raw();
      reply.set_status(chunk.status());
      break;
    }
    case ControlType::kFreeChunk:
      reply.set_status(node.FreeChunk(fabric::RemoteAddress::FromRaw(request.address)));
      break;
    case ControlType::kCatalogWord: {
      StatusOr<fabric::RemoteAddress> word = node.CatalogWord(request.name_view(), request.create);
      if (word.ok()) reply.address = word->raw();
      reply.set_status(word.status());
      break;
    }
    case ControlType::kFreeChunks:
      reply.address = node.free_chunks();
      break;
    case ControlType::kDescribe:
      reply.address = node.chunk_bytes();
      break;
    case ControlType::kFenceComputeNode:
      reply.set_status(Status::NotSupported(
          "fencing compute node " + std::to_string(request.address) +
          ": only a verbs memory server, which owns the compute nodes' queue pairs, can fence"));
      break;
    case ControlType::kReply:
    default:
      reply.set_status(Status::InvalidArgument(
          std::string(kUnknownRequestText) + std::to_string(static_cast<uint32_t>(request.type))));
      break;
  }
  return reply;
}

Status FenceReplyStatus(const ControlMessage& reply, uint16_t memory_node) {
  const Status status = reply.status();
  if (!status.IsInvalidArgument() || !status.message().starts_with(kUnknownRequestText)) {
    return status;
  }
  return Status::NotSupported("memory node " + std::to_string(memory_node) +
                              "'s daemon is too old to fence compute nodes (it answered: " +
                              std::string(status.message()) + "); upgrade its dmidx-memnode");
}

}  // namespace dmidx::memnode
