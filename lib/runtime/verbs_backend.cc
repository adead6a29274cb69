// The `verbs` backend: rdma-core queue pairs to memory nodes, which are
// either dmidx-memnode daemons found through the memcached bootstrap, or
// (ClusterOptions::verbs_in_process_memory_nodes) served by this process
// over the same device.
//
// The backend owns the control paths to the memory nodes, so it serves the
// fabric's FenceComputeNode: it sends the fence to every memory node's
// daemon (VerbsMemoryServer) and waits for each acknowledgement.
#include <atomic>
#include <string>
#include <utility>

#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/bootstrap/memcached_handshake.h"
#include "lib/fabric/verbs/handshake.h"
#include "lib/fabric/verbs/verbs_fabric.h"
#include "lib/memnode/verbs_memory_server.h"
#include "lib/runtime/cluster_backend.h"

namespace dmidx::runtime {

namespace {

class VerbsBackend final : public ClusterBackend {
 public:
  ~VerbsBackend() override {
    fabric_.reset();
    verbs_controls_.clear();
    DropControls();
    for (auto& server : servers_)
      server->Stop();
  }

  // Joins the run through memcached as a compute node and waits for every
  // memory node's regions. Data queue pairs are connected later, by each
  // thread on its first op to a node.
  Status Join(const ClusterOptions& options) {
    DMIDX_ASSIGN_OR_RETURN(device_, fabric::verbs::Device::Open(options.verbs));
    DMIDX_ASSIGN_OR_RETURN(bootstrap_, bootstrap::MemcachedBootstrap::Connect(options.bootstrap));
    DMIDX_ASSIGN_OR_RETURN(compute_node_id_, bootstrap_->Register(bootstrap::NodeRole::kCompute));
    handshake_ = std::make_unique<bootstrap::MemcachedHandshake>(bootstrap_.get());
    std::vector<fabric::verbs::RegionInfo> regions;
    for (uint32_t id = 0; id < options.memory_nodes; ++id) {
      StatusOr<fabric::verbs::RegionInfo> info =
          bootstrap::ReadRegions(bootstrap_.get(), static_cast<uint16_t>(id));
      if (!info.ok()) {
        return info.status().WithContext("waiting for memory node " + std::to_string(id) + " of " +
                                         std::to_string(options.memory_nodes) +
                                         " (is dmidx-memnode running?)");
      }
      regions.push_back(*info);
    }
    return Connect(options, std::move(regions));
  }

  // Serves options.memory_nodes memory nodes from this process and connects
  // to them over the device, with an in-process handshake.
  Status Serve(const ClusterOptions& options) {
    DMIDX_ASSIGN_OR_RETURN(device_, fabric::verbs::Device::Open(options.verbs));
    auto handshake = std::make_unique<fabric::verbs::InProcessHandshake>();
    std::vector<fabric::verbs::RegionInfo> regions;
    for (uint32_t id = 0; id < options.memory_nodes; ++id) {
      const auto node_id = static_cast<uint16_t>(id);
      auto node = memnode::MemoryNode::Create(node_id, options.memory_node);
      if (!node.ok()) return node.status().WithContext("memory node " + std::to_string(id));
      DMIDX_ASSIGN_OR_RETURN(auto server,
                             memnode::VerbsMemoryServer::Create(node->get(), device_, options.verbs,
                                                                handshake->inbox(node_id)));
      server->Start();
      regions.push_back(server->regions());
      nodes_.push_back(std::move(node).value());
      servers_.push_back(std::move(server));
    }
    handshake_ = std::move(handshake);
    return Connect(options, std::move(regions));
  }

  fabric::Fabric& fabric() const override { return *fabric_; }
  memnode::MemoryNode* in_process_memory_node(uint16_t node) const override {
    return node < nodes_.size() ? nodes_[node].get() : nullptr;
  }
  // A verbs process is one compute node of its run, with one client open
  // at a time (ClusterBackend::AttachClient).
  uint32_t NextComputeNodeId() override { return compute_node_id_; }
  StatusOr<uint32_t> DoAttachClient() override {
    if (client_open_.exchange(true)) {
      return Status::FailedPrecondition(
          "this process is compute node " + std::to_string(compute_node_id_) +
          " of its run and has a client open already: a verbs cluster has one client at a time "
          "(give it more threads or coroutines; two would name the same compute node in lock "
          "words)");
    }
    return compute_node_id_;
  }
  void DoDetachClient() override { client_open_.store(false); }
  // A process serving its own memory nodes is its run's only compute node.
  bool ClosesUnsettledIds() const override { return servers_.empty(); }
  Status Barrier(std::string_view name, uint32_t participants,
                 std::chrono::milliseconds timeout) override {
    if (!bootstrap_) return Status::Ok();
    return bootstrap_->Barrier(name, participants, timeout);
  }
  Status PutRecord(std::string_view name, std::string_view bytes) override {
    if (!bootstrap_) return ClusterBackend::PutRecord(name, bytes);
    return bootstrap_->Put(name, bytes);
  }
  StatusOr<std::string> GetRecord(std::string_view name,
                                  std::chrono::milliseconds timeout) override {
    if (!bootstrap_) return ClusterBackend::GetRecord(name, timeout);
    return bootstrap_->Get(name, timeout);
  }
  StatusOr<uint64_t> IncrementRecord(std::string_view name) override {
    if (!bootstrap_) return ClusterBackend::IncrementRecord(name);
    return bootstrap_->Increment(name);
  }

 private:
  // Opens a control path to every memory node, then the fabric.
  Status Connect(const ClusterOptions& options, std::vector<fabric::verbs::RegionInfo> regions) {
    for (uint32_t id = 0; id < options.memory_nodes; ++id) {
      DMIDX_ASSIGN_OR_RETURN(auto control, memnode::VerbsMemoryNodeControl::Create(
                                               static_cast<uint16_t>(id), compute_node_id_, device_,
                                               options.verbs, handshake_.get()));
      verbs_controls_.push_back(control.get());
      AddControl(std::move(control));
    }
    DMIDX_ASSIGN_OR_RETURN(
        fabric_, fabric::verbs::VerbsFabric::Create(
                     options.verbs, device_, std::move(regions), handshake_.get(),
                     {compute_node_id_,
                      [this](uint32_t compute_node) { return FenceEverywhere(compute_node); }}));
    return Status::Ok();
  }

  // Fabric::FenceComputeNode on verbs: asks every memory node, even past
  // one that fails (so the others stop the node's traffic meanwhile), and
  // returns the first failure naming its memory node; a caller retries.
  Status FenceEverywhere(uint32_t compute_node) {
    Status first_failure;
    for (memnode::VerbsMemoryNodeControl* control : verbs_controls_) {
      const Status fenced = control->FenceComputeNode(compute_node);
      if (fenced.ok() || !first_failure.ok()) continue;
      first_failure = fenced.WithContext("fencing compute node " + std::to_string(compute_node) +
                                         " on memory node " + std::to_string(control->node_id()));
    }
    return first_failure;
  }

  uint32_t compute_node_id_ = 0;
  std::atomic<bool> client_open_{false};
  // The control paths AddControl keeps, as verbs ones (for fences).
  std::vector<memnode::VerbsMemoryNodeControl*> verbs_controls_;
  std::shared_ptr<fabric::verbs::Device> device_;
  // Declared before what uses them, so destroyed after.
  std::unique_ptr<bootstrap::MemcachedBootstrap> bootstrap_;
  std::vector<std::unique_ptr<memnode::MemoryNode>> nodes_;
  std::unique_ptr<fabric::verbs::Handshake> handshake_;
  std::vector<std::unique_ptr<memnode::VerbsMemoryServer>> servers_;
  std::unique_ptr<fabric::Fabric> fabric_;
};

}  // namespace

StatusOr<std::unique_ptr<ClusterBackend>> OpenVerbsBackend(const ClusterOptions& options) {
  auto backend = std::make_unique<VerbsBackend>();
  DMIDX_RETURN_IF_ERROR(options.verbs_in_process_memory_nodes ? backend->Serve(options)
                                                              : backend->Join(options));
  return std::unique_ptr<ClusterBackend>(std::move(backend));
}

}  // namespace dmidx::runtime
