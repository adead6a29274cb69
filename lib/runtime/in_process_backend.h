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
  StatusOr<uint32_t> DoAttachClient() override {
    const uint32_t again = reopen_.exchange(kNone, std::memory_order_relaxed);
    return again != kNone ? again : NextComputeNodeId();
  }
  // The next client opens with `id` again, as a verbs process's next client
  // opens with its process's id: for tests of what a client takes over
  // from an earlier one of its id. The earlier one must have closed.
  void ReopenComputeNodeIdForTesting(uint32_t id) { reopen_.store(id, std::memory_order_relaxed); }
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
  static constexpr uint32_t kNone = ~uint32_t{0};
  std::atomic<uint32_t> reopen_{kNone};
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_IN_PROCESS_BACKEND_H_
