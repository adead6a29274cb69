// A cluster backend: what one fabric brings to a cluster.
//
// The cluster (runtime/client.h) and the fabric conformance harness both
// start a backend through ClusterBackend::Open and use nothing else of it:
// the fabric, one control path per memory node, compute-node ids, barriers
// across the compute-node processes of a run, and the clock. Whatever those
// need to stay alive (in-process memory nodes, a memcached bootstrap, a
// handshake) is the backend's own and goes away with it.
//
// Adding a backend means: one file here (<name>_backend.cc) with its Open
// function, one FabricBackend value, one case in ClusterBackend::Open, and
// one row in the conformance table (tests/fabric_test_backends.cc).
#ifndef DMIDX_RUNTIME_CLUSTER_BACKEND_H_
#define DMIDX_RUNTIME_CLUSTER_BACKEND_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/options.h"
#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/memnode/memory_node.h"
#include "lib/runtime/clock.h"
#include "lib/runtime/executor.h"

namespace dmidx::runtime {

class ClusterBackend {
 public:
  // Starts the backend `options.backend` names. Errors say which memory
  // node or service failed; Unavailable when the backend cannot run on this
  // machine (no RDMA device) or was left out of this build.
  static StatusOr<std::unique_ptr<ClusterBackend>> Open(const ClusterOptions& options);

  virtual ~ClusterBackend() = default;
  ClusterBackend(const ClusterBackend&) = delete;
  ClusterBackend& operator=(const ClusterBackend&) = delete;

  virtual fabric::Fabric& fabric() const = 0;
  // Control paths of the memory nodes, indexed by node id.
  const std::vector<memnode::MemoryNodeControl*>& controls() const { return control_pointers_; }
  // The memory node object when it lives in this process (tests inspect
  // its memory); null when it is reached only over the network.
  virtual memnode::MemoryNode* in_process_memory_node(uint16_t node) const = 0;

  // The id of the next compute node this process opens (one per Client).
  // In-process backends number their clients 0, 1, 2, ...; a verbs process
  // is one compute node of its run, with the id the bootstrap gave it.
  virtual uint32_t NextComputeNodeId() = 0;
  // The id of a client about to open (ClientImpl::Create), or why no client
  // may open now; DetachClient when that client goes. In-process backends
  // take NextComputeNodeId (a new id each). A verbs process is one compute
  // node: one client at a time, since two would write the same compute-node
  // id into lock words and each take the other's holds for its own.
  //
  // A client that goes `settled` (no batch of it failed, no recovery of
  // another node left half-done: ClientImpl::Settled) left nothing in
  // remote memory under its id that its id's next client does not take
  // over (lock::RedoLog::TakeOver), so that client may resume the id and
  // its lease. One that goes unsettled may have left a word held, a claim
  // or a mark that nothing local names: only a recovery of its id, once
  // its lease times out, finds and ends them, and a client resuming the id
  // would keep its lease alive and them unended. Its id is therefore
  // closed: AttachClient refuses it (FailedPrecondition), and the process
  // comes back as a new compute node by opening its cluster again. Not
  // where the process is its run's only compute node (a verbs process
  // serving its own memory nodes: ClosesUnsettledIds): nobody else could
  // recover the id, so its next client resumes it, and what the earlier
  // one left stays as a live holder's does.
  StatusOr<uint32_t> AttachClient();
  void DetachClient(uint32_t id, bool settled);
  // Returns once `participants` compute-node processes of this run have
  // reached the barrier `name` (DeadlineExceeded after `timeout`, naming
  // who is missing). A backend whose run is this one process returns OK at
  // once.
  virtual Status Barrier(std::string_view name, uint32_t participants,
                         std::chrono::milliseconds timeout) = 0;

  // Small records shared by the compute-node processes of this run (a
  // bench's per-node results gathered on node 0, say): memcached on a
  // bootstrapped verbs run (1 MiB each at most, names of printable ASCII
  // without spaces), this process's memory otherwise. PutRecord replaces
  // an earlier value; GetRecord waits up to `timeout` for `name` to appear
  // (DeadlineExceeded naming it); IncrementRecord adds 1 to a counter
  // record, creating it, and returns the new value (1 for the first call).
  virtual Status PutRecord(std::string_view name, std::string_view bytes);
  virtual StatusOr<std::string> GetRecord(std::string_view name, std::chrono::milliseconds timeout);
  virtual StatusOr<uint64_t> IncrementRecord(std::string_view name);

  // What every layer takes time from. Real time here; a virtual-time
  // backend supplies its own.
  virtual const Clock& clock() const { return steady_clock_; }
  // What runs compute nodes' coroutines. One OS thread per worker here;
  // a virtual-time backend supplies its own.
  virtual Executor& executor() { return thread_executor_; }

 protected:
  ClusterBackend() = default;
  // AttachClient's and DetachClient's backend part: the id the next client
  // opens as, or why none may open now, and that client's going.
  virtual StatusOr<uint32_t> DoAttachClient() { return NextComputeNodeId(); }
  virtual void DoDetachClient() {}
  // Whether an id whose client went unsettled is closed (DetachClient):
  // false where no other compute node could ever recover it.
  virtual bool ClosesUnsettledIds() const { return true; }
  // Backends keep their control paths here, in node order.
  void AddControl(std::unique_ptr<memnode::MemoryNodeControl> control) {
    control_pointers_.push_back(control.get());
    controls_.push_back(std::move(control));
  }
  // Destroys the control paths; a backend's destructor calls it before the
  // objects they use (memory nodes, handshakes) go.
  void DropControls() {
    control_pointers_.clear();
    controls_.clear();
  }

 private:
  std::vector<std::unique_ptr<memnode::MemoryNodeControl>> controls_;
  std::vector<memnode::MemoryNodeControl*> control_pointers_;
  // The in-process records.
  std::mutex records_mutex_;
  std::condition_variable records_changed_;
  std::map<std::string, std::string, std::less<>> records_;  // guarded by records_mutex_
  // Ids whose last client went unsettled (DetachClient).
  std::mutex closed_ids_mutex_;
  std::set<uint32_t> closed_ids_;  // guarded by closed_ids_mutex_
  SteadyClock steady_clock_;
  ThreadExecutor thread_executor_;
};

// One Open function per backend file.
StatusOr<std::unique_ptr<ClusterBackend>> OpenLocalBackend(const ClusterOptions& options);
StatusOr<std::unique_ptr<ClusterBackend>> OpenVerbsBackend(const ClusterOptions& options);
StatusOr<std::unique_ptr<ClusterBackend>> OpenSimBackend(const ClusterOptions& options);

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_CLUSTER_BACKEND_H_
