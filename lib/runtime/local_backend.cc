// The in-process backends' shared part, and the `local` backend: memory
// nodes in this process under a LocalFabric.
#include <string>
#include <utility>

#include "lib/runtime/in_process_backend.h"

namespace dmidx::runtime {

InProcessBackend::~InProcessBackend() {
  fabric_.reset();
  DropControls();
}

StatusOr<std::vector<fabric::LocalNodeMemory>> InProcessBackend::StartMemoryNodes(
    const ClusterOptions& options) {
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
  return regions;
}

namespace {

class LocalBackend final : public InProcessBackend {
 public:
  Status Start(const ClusterOptions& options) {
    auto regions = StartMemoryNodes(options);
    if (!regions.ok()) return regions.status();
    auto fabric = fabric::LocalFabric::Create(options.local, std::move(regions).value());
    if (!fabric.ok()) return fabric.status().WithContext("local fabric");
    set_fabric(std::move(fabric).value());
    return Status::Ok();
  }
};

}  // namespace

StatusOr<std::unique_ptr<ClusterBackend>> OpenLocalBackend(const ClusterOptions& options) {
  auto backend = std::make_unique<LocalBackend>();
  DMIDX_RETURN_IF_ERROR(backend->Start(options));
  return std::unique_ptr<ClusterBackend>(std::move(backend));
}

}  // namespace dmidx::runtime
