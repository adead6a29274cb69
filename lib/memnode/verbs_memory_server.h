// The memory node's side of the verbs fabric: registers the pool (and the
// lock region, in NIC device memory when the device has enough), answers
// connection handshakes with connected RC queue pairs, and serves control
// messages (chunks, catalog, fences) with SEND/RECV. One thread does all of
// it; it never touches index data.
//
// Fencing (ControlType::kFenceComputeNode; the bookkeeping is
// ComputeNodeFences). The server files each data queue pair under the
// compute node its handshake named (a handshake naming none is refused:
// nothing could fence it). A fence request
// moves every data QP of that compute node to IBV_QPS_ERR (ibv_modify_qp;
// packets arriving after that are not executed, and the node's pending
// work requests complete with errors on its side) and remembers the node
// as fenced: its later handshakes are refused, and so are its control
// requests, with Unavailable marked StatusDetail::kFenced naming it. The
// reply is OK only once every such QP is in the error state; a QP that
// would not move does not stop the others from being tried, and the reply
// then reports the first failure. Control QPs are connected without
// remote access (fabric::verbs::PeerAccess::kSendOnly), so a fenced node,
// whose control QP stays up to hear its refusals, touches no memory
// through it. Handshakes,
// control requests and fences are served by the one thread, so no
// connection of a fenced node slips in after its fence. The server does
// not judge liveness: whoever asks is trusted to have judged. An id the
// server never saw is fenced just the same, and fencing is idempotent.
// Fenced QPs are kept (in the error state) until the server goes, so
// their numbers are not reused while the fenced node may still send. The
// fenced set is in memory only: a restarted server has forgotten it.
#ifndef DMIDX_MEMNODE_VERBS_MEMORY_SERVER_H_
#define DMIDX_MEMNODE_VERBS_MEMORY_SERVER_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "dmidx/options.h"
#include "lib/fabric/verbs/handshake.h"
#include "lib/fabric/verbs/verbs_device.h"
#include "lib/memnode/control_protocol.h"
#include "lib/memnode/memory_node.h"
#include "lib/memnode/verbs_compute_node_fences.h"

namespace dmidx::memnode {

class VerbsMemoryServer {
 public:
  // Registers `node`'s memory on `device`. `node` and `inbox` must outlive
  // the server.
  static StatusOr<std::unique_ptr<VerbsMemoryServer>> Create(
      MemoryNode* node, std::shared_ptr<fabric::verbs::Device> device, const VerbsOptions& options,
      fabric::verbs::HandshakeInbox* inbox);
  ~VerbsMemoryServer();  // stops the serving thread

  // What compute nodes need to address this node's regions.
  const fabric::verbs::RegionInfo& regions() const { return regions_; }
  bool lock_region_on_chip() const { return regions_.on_chip != 0; }

  // Starts serving on a thread of its own.
  void Start();
  // Stops and joins the serving thread. Idempotent.
  void Stop();

  // The first error the serving thread hit (it keeps serving other
  // requests); OK if none.
  Status error() const;
  uint64_t connections() const { return connections_.load(std::memory_order_relaxed); }
  uint64_t control_requests() const { return control_requests_.load(std::memory_order_relaxed); }

 private:
  struct ControlConnection;

  VerbsMemoryServer(MemoryNode* node, std::shared_ptr<fabric::verbs::Device> device,
                    const VerbsOptions& options, fabric::verbs::HandshakeInbox* inbox);
  Status RegisterRegions();
  void Serve();
  void ServeHandshakes();
  StatusOr<fabric::verbs::QpInfo> Accept(const fabric::verbs::HandshakeRequest& request);
  bool ServeControl();
  void RecordError(const Status& status);

  MemoryNode* const node_;
  const std::shared_ptr<fabric::verbs::Device> device_;
  const VerbsOptions options_;
  fabric::verbs::HandshakeInbox* const inbox_;

  fabric::verbs::RegionInfo regions_;
  fabric::verbs::MrPtr pool_mr_;
  fabric::verbs::DmPtr lock_dm_;
  fabric::verbs::MrPtr lock_mr_;
  fabric::verbs::CqPtr data_cq_;
  fabric::verbs::CqPtr control_cq_;
  std::vector<fabric::verbs::QpPtr> data_qps_;               // serving thread only
  std::vector<std::unique_ptr<ControlConnection>> control_;  // serving thread only
  // Files data_qps_ by compute node; declared after them, so destroyed
  // before.
  ComputeNodeFences fences_;  // serving thread only

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> connections_{0};
  std::atomic<uint64_t> control_requests_{0};
  mutable std::mutex error_mutex_;
  Status error_;  // guarded by error_mutex_
};

// A compute node's control path to one memory node over a control QP
// (two-sided only: PeerAccess::kSendOnly at both ends). Thread-safe: calls
// are serialized (control traffic is rare). A request with no answer
// within VerbsOptions::op_timeout, or with a failed completion, breaks the
// path: that and every later call fail with Unavailable naming the memory
// node, except FenceComputeNode, which connects anew first.
class VerbsMemoryNodeControl final : public MemoryNodeControl {
 public:
  // Connects as compute node `compute_node` (the memory node refuses a
  // fenced one). `handshake` must outlive the control path (a fence may
  // reconnect through it).
  static StatusOr<std::unique_ptr<VerbsMemoryNodeControl>> Create(
      uint16_t node, uint32_t compute_node, std::shared_ptr<fabric::verbs::Device> device,
      const VerbsOptions& options, fabric::verbs::Handshake* handshake);
  ~VerbsMemoryNodeControl() override;

  uint16_t node_id() const override { return node_; }
  uint64_t chunk_bytes() const override { return chunk_bytes_; }
  StatusOr<fabric::RemoteAddress> AllocateChunk() override;
  Status FreeChunk(fabric::RemoteAddress chunk) override;
  StatusOr<uint64_t> FreeChunks() override;
  StatusOr<fabric::RemoteAddress> CatalogWord(std::string_view name, bool create) override;
  // ControlType::kPoolUsage. NotSupported naming the memory node if its
  // daemon is too old to know the request.
  StatusOr<PoolUsage> Usage() override;
  // Asks the memory node to fence compute node `compute_node`
  // (ControlType::kFenceComputeNode); OK once it has. A path broken by an
  // earlier request is connected anew first (a new control QP, through the
  // handshake), and once more if this request breaks it. NotSupported
  // naming the memory node if its daemon is too old to know the request.
  Status FenceComputeNode(uint32_t compute_node);

  // The control QP, for tests that post on it directly (what a misbehaving
  // compute node could do). Valid until a fence connects the path anew.
  ibv_qp* queue_pair_for_testing() const { return qp_.get(); }

 private:
  VerbsMemoryNodeControl(uint16_t node, uint32_t compute_node,
                         std::shared_ptr<fabric::verbs::Device> device, const VerbsOptions& options,
                         fabric::verbs::Handshake* handshake);
  // Makes the CQ and QP (dropping old ones) and connects the QP through
  // the handshake. Under mutex_, or before the object is shared.
  Status Connect();
  // Connect() again if a call broke the path.
  Status ReconnectIfBroken();
  StatusOr<ControlMessage> Call(ControlMessage request);

  const uint16_t node_;
  const uint32_t compute_node_;
  const std::shared_ptr<fabric::verbs::Device> device_;
  const VerbsOptions options_;
  fabric::verbs::Handshake* const handshake_;
  uint64_t chunk_bytes_ = 0;

  std::mutex mutex_;
  uint64_t next_request_ = 1;  // guarded by mutex_
  ControlMessage buffers_[2];  // [0] send, [1] receive; registered
  fabric::verbs::MrPtr mr_;
  fabric::verbs::CqPtr cq_;  // guarded by mutex_
  fabric::verbs::QpPtr qp_;  // guarded by mutex_
  Status broken_;            // guarded by mutex_
};

}  // namespace dmidx::memnode

#endif  // DMIDX_MEMNODE_VERBS_MEMORY_SERVER_H_
