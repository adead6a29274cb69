// What index, lock and cache code may use of the compute node it runs on.
//
// btree/, lock/, cache/ and radix/ include this header and runtime/context.h,
// nothing else of the runtime: no fabric backend, bootstrap, rdma-core or
// libmemcached header reaches them through either (CI checks it).
#ifndef DMIDX_RUNTIME_COMPUTE_NODE_H_
#define DMIDX_RUNTIME_COMPUTE_NODE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>

#include "dmidx/cluster.h"
#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/clock.h"

namespace dmidx::runtime {

class EpochTable;
class Membership;

// The name of an object kept once per compute node, typed by what it holds,
// so two layers cannot read one object as different types.
template <typename T>
class SharedKey {
 public:
  explicit SharedKey(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// Compute-node ids run from 0 to kMaxComputeNodes - 1: lock words name
// their holder's compute node as id + 1 in 16 bits, and 0 means free.
inline constexpr uint32_t kMaxComputeNodes = 65535;

class ComputeNode {
 public:
  // The compute node behind a client the runtime made.
  static ComputeNode& Of(Client& client);

  virtual ~ComputeNode() = default;

  // This compute node's id, unique among the compute nodes of its cluster
  // run (in-process clusters number their clients 0, 1, ...).
  virtual uint32_t id() const = 0;
  virtual uint32_t memory_node_count() const = 0;
  virtual const FabricCapabilities& capabilities() const = 0;
  // Region sizes of memory node `node` (< memory_node_count()).
  virtual fabric::NodeLayout layout(uint16_t node) const = 0;
  // The 8-byte catalog word named `name` in the cluster catalog (see
  // memnode::MemoryNode::CatalogWord); `create` makes it if missing.
  virtual StatusOr<fabric::RemoteAddress> CatalogWord(std::string_view name, bool create) const = 0;
  virtual const Clock& clock() const = 0;
  // A number no other call on any compute node of this cluster returns
  // (1, 2, ...): names objects kept per worker (Worker::LocalObject).
  virtual uint64_t NewSerial() = 0;
  // What this compute node knows of the others' leases, and the recovery
  // of those that die (runtime/membership.h).
  virtual Membership& membership() = 0;
  // This compute node's local epoch, its contexts' pins and what else
  // holds epochs (its caches): runtime/epochs.h.
  virtual EpochTable& epochs() = 0;

  // The object `key` names (HOCL's local lock table, a tree's index cache):
  // made by `make` when no holder of it is alive, and shared by all holders
  // until the last lets go. Thread-safe.
  template <typename T, typename Make>
  std::shared_ptr<T> Shared(const SharedKey<T>& key, Make&& make) {
    return std::static_pointer_cast<T>(SharedObject(
        std::type_index(typeid(T)), key.name(), [&]() -> std::shared_ptr<void> { return make(); },
        /*keep=*/false));
  }
  // The same, but made once per client: the compute node holds it too,
  // until its client goes. For an object whose state must outlive its
  // users (lock::RedoLog: the slots of its records).
  template <typename T, typename Make>
  std::shared_ptr<T> Kept(const SharedKey<T>& key, Make&& make) {
    return std::static_pointer_cast<T>(SharedObject(
        std::type_index(typeid(T)), key.name(), [&]() -> std::shared_ptr<void> { return make(); },
        /*keep=*/true));
  }

 protected:
  ComputeNode() = default;
  virtual std::shared_ptr<void> SharedObject(std::type_index type, const std::string& name,
                                             const std::function<std::shared_ptr<void>()>& make,
                                             bool keep) = 0;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_COMPUTE_NODE_H_
