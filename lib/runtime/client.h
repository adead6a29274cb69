// Implementations of the public Cluster and Client handles.
#ifndef DMIDX_RUNTIME_CLIENT_H_
#define DMIDX_RUNTIME_CLIENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/runtime/cluster_backend.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"
#include "lib/runtime/lease_keeper.h"
#include "lib/runtime/membership.h"

namespace dmidx::runtime {

class ClusterImpl final : public Cluster {
 public:
  static StatusOr<std::unique_ptr<ClusterImpl>> Create(const ClusterOptions& options);
  ~ClusterImpl() override;

  uint32_t memory_node_count() const override { return fabric().node_count(); }
  const FabricCapabilities& capabilities() const override { return fabric().capabilities(); }
  const ClusterOptions& options() const override { return options_; }
  Status NewClient(const ClientOptions& options, std::unique_ptr<Client>* client) override;

  std::chrono::nanoseconds Now() const override { return backend_->clock().Now(); }
  std::vector<NicUsage> nic_usage() const override { return fabric().nic_usage(); }
  StatusOr<std::vector<PoolUsage>> MemoryUsage() override;
  uint32_t NextComputeNodeId() override { return backend_->NextComputeNodeId(); }
  Status Barrier(std::string_view name, uint32_t participants,
                 std::chrono::milliseconds timeout) override {
    return backend_->Barrier(name, participants, timeout);
  }
  Status PutRecord(std::string_view name, std::string_view bytes) override {
    return backend_->PutRecord(name, bytes);
  }
  StatusOr<std::string> GetRecord(std::string_view name,
                                  std::chrono::milliseconds timeout) override {
    return backend_->GetRecord(name, timeout);
  }

  ClusterBackend& backend() const { return *backend_; }
  // The clients open now (ClientImpl registers itself): under virtual time
  // every open client's lease is renewed in every run, whether or not the
  // run has work of it.
  void AddClient(ClientImpl* client);
  void RemoveClient(ClientImpl* client);
  std::vector<ClientImpl*> OpenClients() const;
  fabric::Fabric& fabric() const { return backend_->fabric(); }
  // Control paths indexed by node id.
  const std::vector<memnode::MemoryNodeControl*>& controls() const { return backend_->controls(); }
  uint64_t NewSerial() { return next_serial_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // The memory node whose catalog holds the cluster's named roots.
  static constexpr uint16_t kCatalogNode = 0;

  // Objects a client that closed had retired whose grace period had not
  // ended: the next keeper of an open client to look adopts them
  // (ClientImpl::CollectRetired) and frees them once it ends. What is left
  // when the cluster closes is given up (the memory stays allocated).
  void AdoptOrphans(std::vector<RetiredObjects::Entry> entries);
  std::vector<RetiredObjects::Entry> TakeOrphans();
  size_t orphans_waiting() const;

 private:
  ClusterImpl(const ClusterOptions& options, std::unique_ptr<ClusterBackend> backend)
      : options_(options), backend_(std::move(backend)) {}

  const ClusterOptions options_;
  const std::unique_ptr<ClusterBackend> backend_;
  std::atomic<uint64_t> next_serial_{0};
  mutable std::mutex clients_mutex_;
  std::set<ClientImpl*> open_clients_;  // guarded by clients_mutex_
  mutable std::mutex orphans_mutex_;
  RetiredObjects orphans_;  // guarded by orphans_mutex_
};

class ClientImpl final : public Client, public ComputeNode {
 public:
  static StatusOr<std::unique_ptr<ClientImpl>> Create(ClusterImpl* cluster,
                                                      const ClientOptions& options);
  ~ClientImpl() override;

  // Client
  Status Run(const Work& work) override;
  Status NewBlockingContext(std::unique_ptr<Context>* context) override;
  Stats stats() const override;
  const ClientOptions& options() const override { return options_; }
  uint32_t compute_node_id() const override { return id_; }
  std::vector<uint64_t> OpsPerMemoryNode() const override;
  StatusOr<bool> JudgeComputeNode(Context& ctx, uint32_t node,
                                  std::chrono::nanoseconds deadline) override;
  ReclamationStats reclamation_stats() const override;
  Status ReleaseRetired() override;

  // ComputeNode
  uint32_t id() const override { return id_; }
  uint32_t memory_node_count() const override { return cluster_->memory_node_count(); }
  const FabricCapabilities& capabilities() const override { return cluster_->capabilities(); }
  fabric::NodeLayout layout(uint16_t node) const override {
    return cluster_->fabric().layout(node);
  }
  StatusOr<fabric::RemoteAddress> CatalogWord(std::string_view name, bool create) const override;
  const Clock& clock() const override { return cluster_->backend().clock(); }
  uint64_t NewSerial() override { return cluster_->NewSerial(); }
  Membership& membership() override { return *membership_; }

  ClusterImpl& cluster() const { return *cluster_; }
  const std::vector<std::unique_ptr<Worker>>& workers() const { return workers_; }
  // This compute node's lease: joined at Create, left when the client goes.
  LeaseKeeper& lease() const { return *lease_; }

  EpochTable& epochs() override { return epochs_; }
  DrainingChunks& draining_chunks() { return draining_; }
  // Objects a worker that went had retired and not yet freed: the keeper
  // frees them (CollectRetired) once their grace period ends.
  void AdoptRetired(std::vector<RetiredObjects::Entry> entries);
  // Frees, through `ctx` (the lease keeper's recovery worker's) to its
  // allocator and on to the shared free lists, every adopted object whose
  // grace period ended, and every object retired at an epoch <=
  // `workers_bound` waiting on the list of a worker of the client (idle
  // ones too) or of `ctx`'s own worker.
  // Takes over what closed clients left (ClusterImpl::AdoptOrphans) first.
  void CollectRetired(ContextImpl& ctx, uint64_t workers_bound);
  // A worker's allocator found every memory node out
  // (RemoteAllocator::SetExhaustedWaiter): frees what of `ctx`'s worker's
  // retired objects is due, and returns true at once if that was any;
  // otherwise, while objects this client retired have not been freed and
  // `deadline` is ahead and the lease holds, sleeps a quarter of a lease
  // period (the keeper moves the epoch and frees meanwhile) and returns
  // true; else false. The waiting operation's own pin holds G back: only
  // what was retired before the epoch it pinned can come back to it.
  bool AwaitReclamation(ContextImpl& ctx, std::chrono::nanoseconds deadline);
  // What its workers' allocators learned of the shared lists.
  EmptyListHints& empty_list_hints() { return empty_list_hints_; }

  // Blocking workers report here so stats() can include them.
  void AttachBlockingWorker(Worker* worker);
  void DetachBlockingWorker(Worker* worker);

  // A number for a new context: one given back by a context that went
  // (with its count), or the next unused one. ResourceExhausted once
  // kMaxContextsPerComputeNode contexts are alive. Thread-safe; only
  // making and destroying contexts calls these.
  StatusOr<ContextNumber> TakeContextNumber();
  void GiveContextNumber(ContextNumber number);

  // A batch of this client's failed (ContextImpl::Post or Wait): what it
  // was changing may be left in remote memory, a word held or a claim with
  // no record, which only a recovery of this id ends. Cold path only.
  void NoteFailedBatch() { failed_batch_.store(true, std::memory_order_relaxed); }
  // The flag NoteFailedBatch sets, for contexts' parkers to set from the
  // fabric's error path (Parker::Failed).
  std::atomic<bool>* failed_batch_flag() { return &failed_batch_; }
  // Whether this client, closing now, leaves nothing under its id that its
  // id's next client does not take over: no batch of it failed and no
  // recovery it began is unfinished (ClusterBackend::DetachClient).
  bool Settled() const;

 protected:
  std::shared_ptr<void> SharedObject(std::type_index type, const std::string& name,
                                     const std::function<std::shared_ptr<void>()>& make,
                                     bool keep) override;

 private:
  friend Status RunClients(std::span<Client* const>, std::span<const Client::Work>);

  // The last act of closing, once the keeper stopped and the workers went
  // (they left what they retired to adopted_): frees through `ctx` (the
  // keeper's recovery worker's) what the grace period released, and hands
  // the rest to the cluster (ClusterImpl::AdoptOrphans,
  // EpochCounters::handed_over), never freeing an object early.
  void CloseReclamation(ContextImpl& ctx);

  ClientImpl(ClusterImpl* cluster, const ClientOptions& options, uint32_t id);

  ClusterImpl* const cluster_;
  const ClientOptions options_;
  const uint32_t id_;
  // The chunks this compute node's compactors drain, shared by its
  // workers' allocators (declared before workers_).
  DrainingChunks draining_;

  // Declared before workers_: their contexts pin here, and a worker that
  // goes leaves what it retired.
  EpochTable epochs_;
  // Declared before workers_: their allocators share it.
  EmptyListHints empty_list_hints_;
  std::mutex adopted_mutex_;
  RetiredObjects adopted_;  // guarded by adopted_mutex_

  // Declared before workers_: their contexts give their numbers back here.
  std::mutex numbers_mutex_;
  std::vector<ContextNumber> free_numbers_;  // guarded by numbers_mutex_
  uint32_t numbers_made_ = 0;                // guarded by numbers_mutex_

  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<LeaseKeeper> lease_;
  std::atomic<bool> running_{false};
  std::atomic<bool> failed_batch_{false};

  std::mutex shared_mutex_;
  // guarded by shared_mutex_
  std::map<std::pair<std::type_index, std::string>, std::weak_ptr<void>> shared_;
  std::vector<std::shared_ptr<void>> kept_;  // guarded by shared_mutex_: Kept's objects

  mutable std::mutex blocking_mutex_;
  std::set<Worker*> blocking_workers_;  // guarded by blocking_mutex_
  Stats retired_blocking_stats_;        // guarded by blocking_mutex_
  // The shared-list counters of blocking workers that went (only those
  // fields are set).
  ReclamationStats retired_blocking_lists_;  // guarded by blocking_mutex_
};

// dmidx::RunClients (dmidx/cluster.h): the one place that runs clients,
// handing every worker of them to the cluster's executor in one go.
Status RunClients(std::span<Client* const> clients, std::span<const Client::Work> work);

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_CLIENT_H_
