// What the in-process backends (`local`, `sim`) share: memory nodes that
// live in this process, compute nodes numbered 0, 1, 2, ... and no other
// process to wait for at a barrier.
#ifndef DMIDX_RUNTIME_IN_PROCESS_BACKEND_H_
#define DMIDX_RUNTIME_IN_PROCESS_BACKEND_H_

#include <atomic>
#include <memory>
#include <vector>

#include "lib/fabric/local_fabric.h"
#include "lib/runtime/cluster_backend.h"

namespace dmidx::runtime {

class InProcessBackend : public ClusterBackend {
 public:
  ~InProcessBackend() override;

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

 protected:
  InProcessBackend() = default;
  // Starts options.memory_nodes memory nodes shaped by options.memory_node
  // and returns their regions, for the fabric.
  StatusOr<std::vector<fabric::LocalNodeMemory>> StartMemoryNodes(const ClusterOptions& options);
  void set_fabric(std::unique_ptr<fabric::Fabric> fabric) { fabric_ = std::move(fabric); }

 private:
  std::vector<std::unique_ptr<memnode::MemoryNode>> nodes_;
  std::unique_ptr<fabric::Fabric> fabric_;
  std::atomic<uint32_t> next_compute_node_{0};
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_IN_PROCESS_BACKEND_H_
