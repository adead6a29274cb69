// The rig of the compute-node failure tests (recovery_test.cc,
// recovery_race_test.cc): one memory node, short leases (2 ms period,
// 20 ms timeout), `nodes` clients of one blocking context each, and one
// HOCL lock per client over one lock table.
#ifndef DMIDX_TESTS_RECOVERY_RIG_H_
#define DMIDX_TESTS_RECOVERY_RIG_H_

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fault_injector.h"
#include "lib/runtime/client.h"
#include "lib/runtime/lease.h"
#include "lock/hocl.h"
#include "testing/local_cluster.h"

namespace dmidx::lock::recovery_test {

inline constexpr uint64_t kLockRegionBytes = 64 << 10;

inline GlobalLockTable LockTable() {
  return {{fabric::RemoteAddress::Lock(0, 0)}, kLockRegionBytes / 8};
}

inline fabric::FaultInjector& Faults(Cluster& cluster) {
  return *static_cast<runtime::ClusterImpl&>(cluster).fabric().faults();
}

inline ClusterOptions RigOptions(FabricBackend backend) {
  ClusterOptions options =
      dmidx::testing::SmallLocalCluster(1, 8 << 20, false, std::chrono::microseconds(0));
  options.backend = backend;
  options.memory_node.lock_region_bytes = kLockRegionBytes;
  options.lease.period = std::chrono::milliseconds(2);
  options.lease.timeout = std::chrono::milliseconds(20);
  return options;
}

class Rig {
 public:
  Rig(FabricBackend backend, int nodes, ClientOptions client_options = {}) {
    EXPECT_TRUE(Cluster::Open(RigOptions(backend), &cluster_).ok());
    for (int i = 0; i < nodes; ++i) {
      clients_.emplace_back();
      EXPECT_TRUE(cluster_->NewClient(client_options, &clients_.back()).ok());
      contexts_.emplace_back();
      EXPECT_TRUE(clients_.back()->NewBlockingContext(&contexts_.back()).ok());
    }
    for (int i = 0; i < 16; ++i)
      objects_.push_back(*ctx(0).allocator().Allocate(64, 64, 0));
  }
  Cluster& cluster() { return *cluster_; }
  int nodes() const { return static_cast<int>(clients_.size()); }
  Client& client(int i) { return *clients_[i]; }
  runtime::ContextImpl& ctx(int i) { return runtime::ContextImpl::From(*contexts_[i]); }
  uint32_t id(int i) { return clients_[i]->compute_node_id(); }
  // Sixteen 64-byte objects on memory node 0.
  fabric::RemoteAddress object(int i = 0) const { return objects_[i]; }
  runtime::ClientImpl& impl(int i) { return static_cast<runtime::ClientImpl&>(*clients_[i]); }
  runtime::LeaseKeeper& keeper(int i) { return impl(i).lease(); }
  fabric::RemoteAddress record(int i) { return keeper(i).record(); }
  runtime::Lease LeaseOf(int reader, int node) {
    StatusOr<runtime::LeaseRecordView> view = runtime::ReadLease(ctx(reader), record(node));
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    return view.ok() ? view->lease : runtime::Lease();
  }
  uint64_t Word(int reader, fabric::RemoteAddress word) {
    uint64_t* value = *ctx(reader).arena().Words(1);
    const fabric::Op read = fabric::Op::Read(word, value, 8);
    EXPECT_TRUE(ctx(reader).Execute(word.node(), {&read, 1}).ok());
    return *value;
  }
  // `by` declares `node` dead from the word it reads now, as a recovery of
  // `by`'s cut short after its declaration would have left it.
  void Declare(int by, int node) {
    const runtime::Lease judged = LeaseOf(by, node);
    ASSERT_EQ(judged.state, runtime::LeaseState::kAlive);
    ASSERT_EQ(runtime::DeclareDead(ctx(by), record(node), judged, id(by))->word(), judged.word());
  }
  // Client `i` closes (its context first), as a process's client does.
  void Close(int i) {
    contexts_[i].reset();
    clients_[i].reset();
  }
  // `by` notes in its record that it recovers `node`.
  void Note(int by, int node) {
    ASSERT_TRUE(runtime::NoteRecovering(ctx(by), record(by), id(node)).ok());
  }

 private:
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<fabric::RemoteAddress> objects_;
};

// One lock of the table per compute node of the rig: a compute node's lock
// names it in its words (owner tag id + 1) and has its own local table.
class Locks {
 public:
  explicit Locks(Rig& rig, const HoclOptions& options = {}) {
    for (int i = 0; i < rig.nodes(); ++i)
      locks_.push_back(std::make_unique<HierarchicalLock>(LockTable(), options, rig.id(i) + 1));
  }
  Locks(Rig& rig, std::chrono::milliseconds timeout) : Locks(rig, WithTimeout(timeout)) {}
  HierarchicalLock& operator[](int i) { return *locks_[i]; }

 private:
  static HoclOptions WithTimeout(std::chrono::milliseconds timeout) {
    HoclOptions options;
    options.acquire_timeout = timeout;
    return options;
  }
  std::vector<std::unique_ptr<HierarchicalLock>> locks_;
};

}  // namespace dmidx::lock::recovery_test

#endif  // DMIDX_TESTS_RECOVERY_RIG_H_
