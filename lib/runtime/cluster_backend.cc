#include "lib/runtime/cluster_backend.h"

namespace dmidx::runtime {

StatusOr<std::unique_ptr<ClusterBackend>> ClusterBackend::Open(const ClusterOptions& options) {
  switch (options.backend) {
    case FabricBackend::kLocal:
      return OpenLocalBackend(options);
    case FabricBackend::kVerbs:
      return OpenVerbsBackend(options);
  }
  return Status::InvalidArgument("unknown fabric backend " +
                                 std::to_string(static_cast<int>(options.backend)));
}

}  // namespace dmidx::runtime
