// The `sim` backend: memory nodes in this process under a SimFabric, and
// compute nodes in its virtual time (runtime/sim_executor.h).
#include <memory>
#include <utility>

#include "lib/fabric/sim_fabric.h"
#include "lib/runtime/in_process_backend.h"
#include "lib/runtime/sim_executor.h"

namespace dmidx::runtime {

namespace {

class SimBackend final : public InProcessBackend {
 public:
  Status Start(const ClusterOptions& options) {
    auto regions = StartMemoryNodes(options);
    if (!regions.ok()) return regions.status();
    auto fabric = fabric::SimFabric::Create(options.local, options.sim, std::move(regions).value());
    if (!fabric.ok()) return fabric.status();
    fabric::SimWorld* world = &fabric.value()->world();
    clock_ = std::make_unique<SimClock>(world);
    executor_ = std::make_unique<SimExecutor>(world, options.sim);
    set_fabric(std::move(fabric).value());
    return Status::Ok();
  }

  const Clock& clock() const override { return *clock_; }
  Executor& executor() override { return *executor_; }

 private:
  std::unique_ptr<SimClock> clock_;
  std::unique_ptr<SimExecutor> executor_;
};

}  // namespace

StatusOr<std::unique_ptr<ClusterBackend>> OpenSimBackend(const ClusterOptions& options) {
  auto backend = std::make_unique<SimBackend>();
  DMIDX_RETURN_IF_ERROR(backend->Start(options));
  return std::unique_ptr<ClusterBackend>(std::move(backend));
}

}  // namespace dmidx::runtime
