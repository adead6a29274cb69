// The `verbs` fabric: one-sided ops over rdma-core RC queue pairs.
//
// Each endpoint (client thread) has one completion queue and, per memory
// node, one RC queue pair, connected through the Handshake on the first op
// to that node (so only threads that exist, and only nodes they use, cost a
// QP). A batch is one linked WR list posted with one doorbell: each QP's
// WRs and SGEs are allocated and pre-linked once at connect, and its
// in-flight records live in rings reserved to the queue depth, so a post
// allocates nothing (only a batch held back by the software fence is copied).
//
// Selective signaling: only the last WR of a signaled batch asks for a
// completion. Unsignaled WRs still occupy send-queue slots until a later
// signaled WR of the same QP completes, so when unsignaled WRs pile up to
// a quarter of the queue depth the next batch's last WR is signaled anyway, with no
// waiter, just to reclaim slots. Completions of one QP arrive in post order,
// so each QP keeps its signaled WRs in a FIFO and pops one per completion.
//
// Failures: a bad completion fails its batch with a Status carrying
// ibv_wc_status_str and the op; the QP is then in the error state and every
// later op to that node fails with the same status (never spun on). A
// signaled batch with no completion after VerbsOptions::op_timeout fails with
// DeadlineExceeded and its QP is moved to the error state.
//
// Fencing: FenceComputeNode goes through a FenceRequest the fabric is given
// (the runtime's verbs backend sends ControlType::kFenceComputeNode to every
// memory-node daemon over its control paths, which the fabric does not
// own); without one it answers NotSupported. A memory node that fenced a
// compute node has moved that node's queue pairs to the error state, so
// its ops in flight and later ones fail on their completions: the
// responder drops them and the requester gives up after its retries
// (IBV_WC_RETRY_EXC_ERR, Unavailable "unreachable"), or op_timeout comes
// first (DeadlineExceeded; Soft-RoCE reports no completion at all), and
// the QP's other WRs flush. That looks just like a lost link, so those
// statuses are not marked kFenced. What is
// marked is a memory node's refusal: a fenced node's new connection (its
// next endpoint, or a QP it has not connected yet) fails with Unavailable
// marked StatusDetail::kFenced naming it, as do its control requests.
#ifndef DMIDX_FABRIC_VERBS_VERBS_FABRIC_H_
#define DMIDX_FABRIC_VERBS_VERBS_FABRIC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dmidx/options.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/verbs/handshake.h"
#include "lib/fabric/verbs/verbs_device.h"

namespace dmidx::fabric::verbs {

// Fences compute node `compute_node` on every memory node and returns OK
// once each acknowledged (Fabric::FenceComputeNode's contract); otherwise
// the first failure, naming the memory node. Thread-safe.
using FenceRequest = std::function<Status(uint32_t compute_node)>;

// The compute node a verbs process is, as its cluster backend knows it.
struct ProcessComputeNode {
  // Its id (the bootstrap's). Required: an endpoint opened without an id
  // (Fabric::Connect()) is this node's, so its handshakes name it and
  // fencing the id cuts it off too. Memory nodes refuse a handshake that
  // names no compute node, since no fence could reach its queue pair.
  uint32_t id = Fabric::kUnnamedComputeNode;
  // Serves FenceComputeNode; empty: NotSupported.
  FenceRequest fence;
};

class VerbsFabric final : public Fabric {
 public:
  // `regions[i]` describes memory node i. `handshake` must outlive the
  // fabric. InvalidArgument if `process.id` is kUnnamedComputeNode.
  static StatusOr<std::unique_ptr<VerbsFabric>> Create(const VerbsOptions& options,
                                                       std::shared_ptr<Device> device,
                                                       std::vector<RegionInfo> regions,
                                                       Handshake* handshake,
                                                       ProcessComputeNode process);

  const FabricCapabilities& capabilities() const override { return capabilities_; }
  uint16_t node_count() const override { return static_cast<uint16_t>(regions_.size()); }
  NodeLayout layout(uint16_t node) const override;

  const VerbsOptions& options() const { return options_; }
  const Device& device() const { return *device_; }
  const RegionInfo& region(uint16_t node) const { return regions_[node]; }
  Handshake& handshake() const { return *handshake_; }

 private:
  VerbsFabric(const VerbsOptions& options, std::shared_ptr<Device> device,
              std::vector<RegionInfo> regions, Handshake* handshake, ProcessComputeNode process);
  // An unnamed endpoint is process_.id's.
  StatusOr<std::unique_ptr<Endpoint>> DoConnect(uint32_t compute_node) override;
  // Through process_.fence; NotSupported without one.
  Status DoFenceComputeNode(uint32_t compute_node) override;

  const VerbsOptions options_;
  const std::shared_ptr<Device> device_;
  const std::vector<RegionInfo> regions_;
  Handshake* const handshake_;
  const ProcessComputeNode process_;
  FabricCapabilities capabilities_;
};

}  // namespace dmidx::fabric::verbs

#endif  // DMIDX_FABRIC_VERBS_VERBS_FABRIC_H_
