// The `local` backend: memory nodes in this process under a LocalFabric.
#include <atomic>
#include <string>
#include <utility>

#include "lib/fabric/local_fabric.h"
#include "lib/runtime/cluster_backend.h"

namespace dmidx::runtime {

namespace {

class LocalBackend final : public ClusterBackend {
 public:
  ~LocalBackend() override {
    fabric_.reset();
    DropControls();
  }

  Status Start(const ClusterOptions& options) {
    std::vector<fabric::LocalNodeMemory> regions;
    for (uint32_t id = 0; id < options.memory_nodes; ++id) {
      auto node = memnode::MemoryNode::Create(static_cast<uint16_t>(id), options.memory_node);
      if (!node.ok()) return node.status().WithContext("memory node " + std::to_string(id));
      memnode::MemoryNode& made = **node;
      regions.push_back(
          {made.pool_base(), made.pool_bytes(), made.lock_base(), made.lock_region_bytes()});
      AddControl(std::make_unique<memnode::LocalMemoryNodeControl>(&made));
      nodes_.push_back(std::move(node).value());
    }
    auto fabric = fabric::LocalFabric::Create(options.local, std::move(regions));
    if (!fabric.ok()) return fabric.status().WithContext("local fabric");
    fabric_ = std::move(fabric).value();
    return Status::Ok();
  }

  fabric::Fabric& fabric() const override { return *fabric_; }
  memnode::MemoryNode* in_process_memory_node(uint16_t node) const override {
    return node < nodes_.size() ? nodes_[node].get() : nullptr;
  }
  uint32_t NextComputeNodeId() override {
    return next_compute_node_.fetch_add(1, std::memory_order_relaxed);
  }
  Status Barrier(std::string_view, uint32_t, std::chrono::milliseconds) override {
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<memnode::MemoryNode>> nodes_;
  std::unique_ptr<fabric::LocalFabric> fabric_;
  std::atomic<uint32_t> next_compute_node_{0};
};

}  // namespace

StatusOr<std::unique_ptr<ClusterBackend>> OpenLocalBackend(const ClusterOptions& options) {
  auto backend = std::make_unique<LocalBackend>();
  DMIDX_RETURN_IF_ERROR(backend->Start(options));
  return std::unique_ptr<ClusterBackend>(std::move(backend));
}

}  // namespace dmidx::runtime
