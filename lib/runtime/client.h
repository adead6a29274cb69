// Implementations of the public Cluster and Client handles.
#ifndef DMIDX_RUNTIME_CLIENT_H_
#define DMIDX_RUNTIME_CLIENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/verbs/handshake.h"
#include "lib/memnode/memory_node.h"
#include "lib/runtime/context.h"

namespace dmidx::runtime {

class ClusterImpl final : public Cluster {
 public:
  static StatusOr<std::unique_ptr<ClusterImpl>> Create(const ClusterOptions& options);
  ~ClusterImpl() override;

  uint32_t memory_node_count() const override { return fabric_->node_count(); }
  const FabricCapabilities& capabilities() const override { return fabric_->capabilities(); }
  const ClusterOptions& options() const override { return options_; }
  Status NewClient(const ClientOptions& options, std::unique_ptr<Client>* client) override;

  fabric::Fabric& fabric() const { return *fabric_; }
  // Control paths indexed by node id.
  const std::vector<memnode::MemoryNodeControl*>& controls() const { return control_pointers_; }
  // The memory node whose catalog holds the cluster's named roots.
  static constexpr uint16_t kCatalogNode = 0;

  // Verbs clusters: the bootstrap this process joined (its id, barriers);
  // null for the local backend.
  bootstrap::MemcachedBootstrap* bootstrap() const { return bootstrap_.get(); }
  // This process's compute-node id in the run (from the bootstrap); 0 for
  // the local backend.
  uint32_t compute_node_id() const { return compute_node_id_; }

 private:
  explicit ClusterImpl(const ClusterOptions& options) : options_(options) {}
  Status StartLocal();
  Status StartVerbs();

  const ClusterOptions options_;
  uint32_t compute_node_id_ = 0;
  // Declared first, destroyed last: the fabric and control paths use them.
  std::unique_ptr<bootstrap::MemcachedBootstrap> bootstrap_;
  std::unique_ptr<fabric::verbs::Handshake> handshake_;
  std::vector<std::unique_ptr<memnode::MemoryNode>> memory_nodes_;  // local backend only
  std::vector<std::unique_ptr<memnode::MemoryNodeControl>> controls_;
  std::vector<memnode::MemoryNodeControl*> control_pointers_;
  std::unique_ptr<fabric::Fabric> fabric_;
};

class ClientImpl final : public Client {
 public:
  static StatusOr<std::unique_ptr<ClientImpl>> Create(ClusterImpl* cluster,
                                                      const ClientOptions& options);
  ~ClientImpl() override;

  Status Run(const Work& work) override;
  Status NewBlockingContext(std::unique_ptr<Context>* context) override;
  Stats stats() const override;
  const ClientOptions& options() const override { return options_; }

  ClusterImpl& cluster() const { return *cluster_; }
  // The 8-byte root slot named `name` in the cluster catalog (see
  // MemoryNode::CatalogSlot).
  StatusOr<fabric::RemoteAddress> CatalogSlot(std::string_view name, bool create) const;

  // An object the layers above keep once per compute node (HOCL's local
  // lock table, a tree's index cache): made by `make` when no holder of
  // `key` is alive, and shared by all holders until the last lets go.
  // Thread-safe.
  template <typename T, typename Make>
  std::shared_ptr<T> Shared(const std::string& key, Make&& make) {
    std::lock_guard<std::mutex> guard(shared_mutex_);
    std::weak_ptr<void>& slot = shared_[key];
    std::shared_ptr<T> object = std::static_pointer_cast<T>(slot.lock());
    if (!object) {
      object = make();
      slot = object;
    }
    return object;
  }

  // Blocking workers report here so stats() can include them.
  void AttachBlockingWorker(Worker* worker);
  void DetachBlockingWorker(Worker* worker);

 private:
  ClientImpl(ClusterImpl* cluster, const ClientOptions& options)
      : cluster_(cluster), options_(options) {}

  ClusterImpl* const cluster_;
  const ClientOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> running_{false};

  std::mutex shared_mutex_;
  std::map<std::string, std::weak_ptr<void>> shared_;  // guarded by shared_mutex_

  mutable std::mutex blocking_mutex_;
  std::set<Worker*> blocking_workers_;  // guarded by blocking_mutex_
  Stats retired_blocking_stats_;        // guarded by blocking_mutex_
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_CLIENT_H_
