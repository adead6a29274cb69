#include "tools/fault_switch.h"

#include "lib/fabric/fault_injector.h"
#include "lib/runtime/client.h"

namespace dmidx::tools {

Status KillComputeNode(Cluster& cluster, uint32_t compute_node) {
  fabric::FaultInjector* faults = static_cast<runtime::ClusterImpl&>(cluster).fabric().faults();
  if (faults == nullptr) {
    return Status::FailedPrecondition(
        "this cluster's fabric cannot kill a compute node (verbs: kill its process)");
  }
  faults->KillComputeNode(compute_node);
  return Status::Ok();
}

}  // namespace dmidx::tools
