// A memory node's fences of compute nodes, apart from the device: which
// data queue pairs belong to which compute node, which compute nodes are
// fenced, and how the memory node answers a connection or control request
// because of that. VerbsMemoryServer owns one (see its comment for the
// protocol); tests drive one without an RDMA device, with a fake way to
// break a queue pair.
//
// The fenced set lives in memory only: a memory node that restarts has
// forgotten it (docs/design.md, "Fencing").
#ifndef DMIDX_MEMNODE_VERBS_COMPUTE_NODE_FENCES_H_
#define DMIDX_MEMNODE_VERBS_COMPUTE_NODE_FENCES_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "dmidx/status.h"
#include "lib/memnode/control_protocol.h"
#include "lib/memnode/memory_node.h"

namespace dmidx::memnode {

// Not thread-safe: the memory node's serving thread owns it, which is what
// keeps a connection of a fenced node from slipping in after its fence.
class ComputeNodeFences {
 public:
  // Moves one queue pair to IBV_QPS_ERR; returns 0 or an errno value.
  using BreakQueuePair = std::function<int(ibv_qp* qp)>;

  // `memory_node` names this memory node in refusals. `break_queue_pair`
  // is ibv_modify_qp to IBV_QPS_ERR in the server.
  ComputeNodeFences(uint16_t memory_node, BreakQueuePair break_queue_pair);

  // Whether compute node `compute_node` may connect: InvalidArgument for a
  // handshake that names no compute node (Fabric::kUnnamedComputeNode: no
  // fence could reach its queue pair), Unavailable marked kFenced naming
  // it if it was fenced, OK otherwise.
  Status CheckConnection(uint32_t compute_node) const;

  // Files data queue pair `qp` under `compute_node`, which
  // CheckConnection() let in. `qp` is not owned: it must stay valid as
  // long as this object.
  void AddDataQueuePair(uint32_t compute_node, ibv_qp* qp);

  // The reply to `request`, which came over a control path of compute node
  // `sender`: the refusal if `sender` was fenced; for kFenceComputeNode,
  // the fence (Fence()); anything else HandleControlRequest(node, request).
  ControlMessage Answer(MemoryNode& node, uint32_t sender, const ControlMessage& request);

  // Marks `compute_node` fenced, then moves every data queue pair filed
  // under it to the error state, all of them even past a failure, and
  // returns the first failure (with how many failed) or OK. Marked
  // first, so that a node whose queue pair failed to move is still
  // refused from then on; a repeat tries every queue pair again.
  Status Fence(uint32_t compute_node);

  bool fenced(uint32_t compute_node) const { return fenced_.contains(compute_node); }

 private:
  // Unavailable marked kFenced naming `compute_node` if it was fenced, for
  // what it asked for (`what`); OK otherwise.
  Status RefuseIfFenced(uint32_t compute_node, std::string_view what) const;

  const uint16_t memory_node_;
  const BreakQueuePair break_queue_pair_;
  std::map<uint32_t, std::vector<ibv_qp*>> data_queue_pairs_;
  std::set<uint32_t> fenced_;
};

}  // namespace dmidx::memnode

#endif  // DMIDX_MEMNODE_VERBS_COMPUTE_NODE_FENCES_H_
