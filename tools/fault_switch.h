// dmidx-ycsb's failure experiment reaches below the public API here, and
// only here: it kills a compute node of an in-process cluster (local, sim)
// through its fabric's fault switches (lib/fabric/fault_injector.h), as the
// tests do (testing/injection.h). A library of its own, so that
// dmidx-ycsb's objects and the bench's still read only the public API
// (tools/check-layers.sh).
#ifndef DMIDX_TOOLS_FAULT_SWITCH_H_
#define DMIDX_TOOLS_FAULT_SWITCH_H_

#include <cstdint>

#include "dmidx/cluster.h"
#include "dmidx/status.h"

namespace dmidx::tools {

// Kills compute node `compute_node` of `cluster` for good
// (FaultInjector::KillComputeNode): its later posts fail and its queued
// batches are dropped; what it wrote to remote memory stays (a lock word it
// held stays taken). FailedPrecondition when the cluster's fabric cannot
// inject faults (verbs). Thread-safe; may be called from a context of one of
// the cluster's clients.
Status KillComputeNode(Cluster& cluster, uint32_t compute_node);

}  // namespace dmidx::tools

#endif  // DMIDX_TOOLS_FAULT_SWITCH_H_
