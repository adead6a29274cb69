#include "lib/memnode/verbs_compute_node_fences.h"

#include <string>
#include <utility>

#include "lib/fabric/fabric.h"
#include "lib/fabric/verbs/verbs_device.h"

namespace dmidx::memnode {

namespace {

constexpr uint32_t kUnnamed = fabric::Fabric::kUnnamedComputeNode;

ControlMessage ReplyTo(const ControlMessage& request, const Status& status) {
  ControlMessage reply;
  reply.type = ControlType::kReply;
  reply.request_id = request.request_id;
  reply.set_status(status);
  return reply;
}

}  // namespace

ComputeNodeFences::ComputeNodeFences(uint16_t memory_node, BreakQueuePair break_queue_pair)
    : memory_node_(memory_node), break_queue_pair_(std::move(break_queue_pair)) {}

Status ComputeNodeFences::CheckConnection(uint32_t compute_node) const {
  if (compute_node == kUnnamed) {
    return Status::InvalidArgument("memory node " + std::to_string(memory_node_) +
                                   " refuses a connection that names no compute node: no fence "
                                   "could reach its queue pair");
  }
  return RefuseIfFenced(compute_node, "connection");
}

void ComputeNodeFences::AddDataQueuePair(uint32_t compute_node, ibv_qp* qp) {
  data_queue_pairs_[compute_node].push_back(qp);
}

ControlMessage ComputeNodeFences::Answer(MemoryNode& node, uint32_t sender,
                                         const ControlMessage& request) {
  // A fenced node's control QP stays up, so that it hears why; it gets
  // nothing more through it (no chunks, no catalog entries, no fences),
  // and it can touch no memory through it: control QPs are connected
  // without remote access (VerbsMemoryServer::Accept).
  const Status refused = RefuseIfFenced(sender, "control request");
  if (!refused.ok()) return ReplyTo(request, refused);
  if (request.type != ControlType::kFenceComputeNode) return HandleControlRequest(node, request);
  if (request.address >= kUnnamed) {
    return ReplyTo(request,
                   Status::InvalidArgument("fence: " + std::to_string(request.address) +
                                           " is no compute node id (ids are below " +
                                           std::to_string(kUnnamed) + ", which names none)"));
  }
  return ReplyTo(request, Fence(static_cast<uint32_t>(request.address)));
}

Status ComputeNodeFences::Fence(uint32_t compute_node) {
  fenced_.insert(compute_node);
  const auto found = data_queue_pairs_.find(compute_node);
  if (found == data_queue_pairs_.end()) return Status::Ok();
  Status first_failure;
  size_t failures = 0;
  for (ibv_qp* qp : found->second) {
    const int rc = break_queue_pair_(qp);
    if (rc == 0) continue;
    if (failures++ == 0) {
      first_failure =
          fabric::verbs::ErrnoStatus("queue pair " + std::to_string(qp->qp_num) + " to ERR", rc);
    }
  }
  if (failures == 0) return Status::Ok();
  // Short: a control reply carries ControlMessage::kMaxText bytes, and the
  // requester adds which compute and memory node.
  return first_failure.WithContext(std::to_string(failures) + " of " +
                                   std::to_string(found->second.size()) +
                                   " queue pairs stayed up, the first");
}

Status ComputeNodeFences::RefuseIfFenced(uint32_t compute_node, std::string_view what) const {
  if (!fenced_.contains(compute_node)) return Status::Ok();
  return Status(StatusCode::kUnavailable,
                "compute node " + std::to_string(compute_node) + " was fenced: memory node " +
                    std::to_string(memory_node_) + " refuses its " + std::string(what),
                StatusDetail::kFenced);
}

}  // namespace dmidx::memnode
