#include "lib/memnode/control_protocol.h"

#include <bit>
#include <string>

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
    case ControlType::kPoolUsage:
      EncodePoolUsage(node.Usage(), &reply);
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

namespace {

constexpr size_t kPoolUsageWords = 5;
static_assert(kPoolUsageWords * sizeof(uint64_t) <= ControlMessage::kMaxName);

// A reply's status, except that a daemon too old to know the request gives
// NotSupported saying it is too old `to_do` and naming the memory node.
Status TooOldStatus(const ControlMessage& reply, uint16_t memory_node, std::string_view to_do) {
  const Status status = reply.status();
  if (!status.IsInvalidArgument() || !status.message().starts_with(kUnknownRequestText)) {
    return status;
  }
  return Status::NotSupported(
      "memory node " + std::to_string(memory_node) + "'s daemon is too old " + std::string(to_do) +
      " (it answered: " + std::string(status.message()) + "); upgrade its dmidx-memnode");
}

}  // namespace

void EncodePoolUsage(const PoolUsage& usage, ControlMessage* reply) {
  const uint64_t words[kPoolUsageWords] = {usage.pool_bytes, usage.chunk_bytes, usage.total_chunks,
                                           usage.free_chunks, usage.bytes_in_use};
  static_assert(std::endian::native == std::endian::little, "the wire is little-endian");
  std::memcpy(reply->name, words, sizeof(words));
  reply->name_length = sizeof(words);
}

StatusOr<PoolUsage> DecodePoolUsage(const ControlMessage& reply, uint16_t memory_node) {
  const std::string context = "memory node " + std::to_string(memory_node) + "'s pool usage";
  uint64_t words[kPoolUsageWords];
  if (reply.name_length != sizeof(words)) {
    return Status::Internal(context + ": the reply holds " + std::to_string(reply.name_length) +
                            " bytes, not " + std::to_string(sizeof(words)));
  }
  std::memcpy(words, reply.name, sizeof(words));
  const PoolUsage usage{.memory_node = memory_node,
                        .pool_bytes = words[0],
                        .chunk_bytes = words[1],
                        .total_chunks = words[2],
                        .free_chunks = words[3],
                        .bytes_in_use = words[4]};
  if (usage.free_chunks > usage.total_chunks || usage.bytes_in_use > usage.pool_bytes) {
    return Status::Internal(context + " does not add up: " + usage.ToString());
  }
  return usage;
}

Status FenceReplyStatus(const ControlMessage& reply, uint16_t memory_node) {
  return TooOldStatus(reply, memory_node, "to fence compute nodes");
}

Status UsageReplyStatus(const ControlMessage& reply, uint16_t memory_node) {
  return TooOldStatus(reply, memory_node, "to report its pool's usage");
}

}  // namespace dmidx::memnode
