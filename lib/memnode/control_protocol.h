// Two-sided control messages between a compute node and a memory node's CPU:
// chunk allocation and return, catalog look-ups, and fencing a compute node
// (a survivor asks every memory node to cut off one it judged dead; see
// VerbsMemoryServer). Sent with SEND/RECV on a dedicated control queue
// pair; one request in flight per control QP.
#ifndef DMIDX_MEMNODE_CONTROL_PROTOCOL_H_
#define DMIDX_MEMNODE_CONTROL_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "dmidx/status.h"
#include "lib/memnode/memory_node.h"

namespace dmidx::memnode {

enum class ControlType : uint32_t {
  kAllocateChunk = 1,
  kFreeChunk = 2,
  kCatalogWord = 3,
  kReply = 4,
  kDescribe = 5,  // reply address = the node's chunk size
  // Request address = a compute node's id. The memory node moves every
  // data queue pair of that node to the error state, refuses its later
  // handshakes and control requests, and replies OK once all of them are
  // in the error state. Idempotent; an id never seen is fenced too.
  // Served by the verbs memory server, not by HandleControlRequest.
  kFenceComputeNode = 6,
  // The reply carries the node's PoolUsage (EncodePoolUsage) in its name
  // bytes.
  kPoolUsage = 7,
  kFreeChunks = 8,  // reply address = the chunks the node has left
};

// One control message, request or reply.
//
//   0      4      8            16           24    25   26   27    32           96          192
//   +------+------+------------+------------+-----+----+----+-----+------------+-----------+
//   | type | code | request id | address    |creat|nlen|detl| pad | name (64)  | text (96) |
//   +------+------+------------+------------+-----+----+----+-----+------------+-----------+
// Requests: address = chunk to free or compute node to fence; name/create
// for catalog look-ups. A kPoolUsage reply's name holds five little-endian
// words: pool bytes, chunk bytes, total chunks, free chunks, bytes in use.
// Replies: code = StatusCode, detail = StatusDetail (a refusal of a fenced
// compute node is kFenced), address = result, text = error message.
struct ControlMessage {
  static constexpr size_t kMaxName = 64;
  static constexpr size_t kMaxText = 96;

  ControlType type = ControlType::kReply;
  uint32_t code = 0;
  uint64_t request_id = 0;
  uint64_t address = 0;
  uint8_t create = 0;
  uint8_t name_length = 0;
  uint8_t detail = 0;
  uint8_t pad[5] = {};
  char name[kMaxName] = {};
  char text[kMaxText] = {};

  void set_name(std::string_view value) {
    name_length = static_cast<uint8_t>(std::min(value.size(), kMaxName));
    std::memcpy(name, value.data(), name_length);
  }
  std::string_view name_view() const { return {name, std::min<size_t>(name_length, kMaxName)}; }

  void set_status(const Status& status) {
    code = static_cast<uint32_t>(status.code());
    detail = static_cast<uint8_t>(status.detail());
    const std::string_view message = status.message();
    const size_t n = std::min(message.size(), kMaxText - 1);
    std::memcpy(text, message.data(), n);
    text[n] = '\0';
  }
  Status status() const {
    if (code == 0) return Status::Ok();
    return Status(static_cast<StatusCode>(code), std::string_view(text, strnlen(text, kMaxText)),
                  static_cast<StatusDetail>(detail));
  }
};
static_assert(sizeof(ControlMessage) == 192);
static_assert(offsetof(ControlMessage, detail) == 26);
static_assert(offsetof(ControlMessage, name) == 32);

// How a memory node's reply to a request of a type it does not know
// begins (InvalidArgument). Daemons older than a request type answer so.
inline constexpr std::string_view kUnknownRequestText = "unknown control request type ";

// A PoolUsage into a kPoolUsage reply, and out of one (the memory node's
// id is the caller's: the reply does not carry it). DecodePoolUsage is
// Internal for a reply whose name is not five words long, or whose
// numbers disagree (more free chunks than chunks, bytes in use past the
// pool).
void EncodePoolUsage(const PoolUsage& usage, ControlMessage* reply);
StatusOr<PoolUsage> DecodePoolUsage(const ControlMessage& reply, uint16_t memory_node);

// Answers one request against `node`: chunks, catalog, description.
// kFenceComputeNode is NotSupported here (VerbsMemoryServer serves it);
// an unknown type is InvalidArgument beginning with kUnknownRequestText.
ControlMessage HandleControlRequest(MemoryNode& node, const ControlMessage& request);

// What memory node `memory_node`'s `reply` to a kFenceComputeNode request
// says: its status, except that a daemon too old to know the request
// (an InvalidArgument beginning with kUnknownRequestText) gives
// NotSupported saying so and naming the memory node.
Status FenceReplyStatus(const ControlMessage& reply, uint16_t memory_node);
// The same for a kPoolUsage request (a daemon too old to report its pool).
Status UsageReplyStatus(const ControlMessage& reply, uint16_t memory_node);

}  // namespace dmidx::memnode

#endif  // DMIDX_MEMNODE_CONTROL_PROTOCOL_H_
