// Stands in for verbs_backend.cc in a build without rdma-core
// (-DDMIDX_WITH_VERBS=OFF).
#include "lib/runtime/cluster_backend.h"

namespace dmidx::runtime {

StatusOr<std::unique_ptr<ClusterBackend>> OpenVerbsBackend(const ClusterOptions&) {
  return Status::Unavailable(
      "the verbs backend is not in this build of dmidx (configured with DMIDX_WITH_VERBS=OFF)");
}

}  // namespace dmidx::runtime
