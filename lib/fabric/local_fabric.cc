#include "lib/fabric/local_fabric.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "lib/fabric/memory_access.h"
#include "lib/fabric/ring_queue.h"

namespace dmidx::fabric {

namespace {

using Clock = std::chrono::steady_clock;

// Moves the words of one READ or WRITE: in ascending address order, or,
// when `torn`, in random order with an occasional thread yield between
// words so that concurrent ops interleave with this one.
void MoveRemote(bool is_read, uint8_t* remote, uint8_t* local, size_t length, bool torn,
                std::mt19937_64* rng, std::vector<uint32_t>* order) {
  const size_t words = WordCount(remote, length);
  if (!torn || words == 1) return MoveWords(is_read, remote, local, length);
  order->resize(words);
  std::iota(order->begin(), order->end(), 0);
  std::shuffle(order->begin(), order->end(), *rng);
  for (uint32_t i : *order) {
    MoveWord(is_read, remote, local, length, i);
    if ((*rng)() % 8 == 0) std::this_thread::yield();
  }
}

bool IsReadOrAtomic(OpCode code) {
  return code != OpCode::kWrite;
}

}  // namespace

// One queued op. A batch's ops are consecutive in its connection's queue;
// a batch refused at post is one marker entry carrying the reason.
struct PendingOp {
  Op op;
  Completion* completion = nullptr;  // on the last op of a signaled batch
  Clock::time_point due;
  InjectedFault fault = InjectedFault::kNone;  // set on a marker
  bool batch_end = false;                      // last op of its batch
  // Set on the last op of a batch that is applied and then fails
  // (FailNextBatchesAfterApplying).
  bool fail_after_applying = false;
  // Copy of a kInline WRITE's source (the caller may reuse it at once).
  std::array<uint8_t, LocalFabric::kMaxInlineBytes> inline_payload;
};

// What a connection needs of its endpoint. Touched only while applying an
// op, and the endpoint quiesces before it is destroyed, so never after it
// is gone.
struct EndpointSinks {
  EndpointCounters* counters;
  DeferredError* deferred;
  uint32_t compute_node;
};

// One client thread's queue pair to one memory node.
class LocalConnection {
 public:
  LocalConnection(const LocalFabricOptions& options, FaultInjector* faults, uint16_t node,
                  const LocalNodeMemory& memory, EndpointSinks sinks, uint64_t seed)
      : options_(options),
        faults_(faults),
        node_(node),
        memory_(memory),
        sinks_(sinks),
        rng_(seed),
        compute_node_faults_(sinks.compute_node) {}

  // Queues a batch: its ops, each due at `due(op index)`, or, when `fault`
  // is set, one marker that fails it (kAppliedThenFailed: its ops, the last
  // marked to fail the batch once applied). Owner thread only. Enqueue and Apply
  // are the work a NIC does in place of this fabric; they stay out of line
  // so that tools/cpu-cost.sh can tell their instructions from the client's.
  template <typename DueTime>
  [[gnu::noinline]] void Enqueue(std::span<const Op> ops, Completion* completion,
                                 InjectedFault fault, DueTime due) {
    std::lock_guard<std::mutex> guard(mutex_);
    const bool after_applying = fault == InjectedFault::kAppliedThenFailed;
    if (after_applying) fault = InjectedFault::kNone;
    const size_t count = fault == InjectedFault::kNone ? ops.size() : 1;
    for (size_t i = 0; i < count; ++i) {
      PendingOp& entry = queue_.push_back();
      entry.op = ops[i];
      entry.due = due(i);
      entry.fault = fault;
      entry.batch_end = i + 1 == count;
      entry.fail_after_applying = after_applying && entry.batch_end;
      entry.completion = entry.batch_end ? completion : nullptr;
      if (fault == InjectedFault::kNone && (ops[i].flags & kInline)) {
        std::memcpy(entry.inline_payload.data(), ops[i].local, ops[i].length);
      }
    }
    queued_.fetch_add(count, std::memory_order_release);
  }

  bool has_queued() const { return queued_.load(std::memory_order_acquire) != 0; }
  uint32_t compute_node() const { return sinks_.compute_node; }

  // Returns once no thread is applying this connection's ops: whoever
  // applies after that sees every switch flipped before the call (it takes
  // the mutex after this call released it).
  void WaitOutApply() { std::lock_guard<std::mutex> guard(mutex_); }

  // Applies the due ops (every op when `all`). `blocking` waits for the
  // connection's mutex; otherwise a connection another thread is applying is
  // skipped.
  [[gnu::noinline]] void Apply(Clock::time_point now, bool all, bool blocking) {
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    if (blocking) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return;
    }
    ApplyLocked(now, all);
  }

 private:
  bool Due(const PendingOp& op, Clock::time_point now, bool all) const {
    return all || op.due <= now;
  }

  void ApplyLocked(Clock::time_point now, bool all) {
    while (!queue_.empty() && Due(queue_.front(), now, all)) {
      // A cut-off node's ops wait, neither applied nor completed, unless
      // it was stopped too: then FaultOf drops them.
      if (compute_node_faults_.Get(*faults_).holds()) return;
      // A WRITE may overtake the READ or atomic before it unless the WRITE
      // is fenced (RC semantics: READs and atomics run in order among
      // themselves; a later WRITE need not wait for their responses).
      // Completions are still delivered in post order, so a waiter never
      // sees its batch done before the READ landed.
      if (options_.reorder_unfenced && queue_.size() >= 2 && Swappable(queue_[0], queue_[1]) &&
          Due(queue_[1], now, all) && rng_() % 2 == 0) {
        const InjectedFault second = Execute(queue_[1]);
        const InjectedFault first = Execute(queue_[0]);
        SettleFront(first);
        SettleFront(second);
        continue;
      }
      SettleFront(Execute(queue_.front()));
    }
  }

  static bool Swappable(const PendingOp& first, const PendingOp& second) {
    return first.fault == InjectedFault::kNone && second.fault == InjectedFault::kNone &&
           IsReadOrAtomic(first.op.code) && second.op.code == OpCode::kWrite &&
           !(second.op.flags & kFence);
  }

  // Pops the front op, which ran (or was dropped for `fault`); at the end of
  // its batch, reports the batch.
  void SettleFront(InjectedFault fault) {
    PendingOp& front = queue_.front();
    if (fault != InjectedFault::kNone && batch_fault_ == InjectedFault::kNone) {
      batch_fault_ = fault;
      // A marker was counted when it was refused at post.
      if (front.fault == InjectedFault::kNone) faults_->CountDroppedWhileQueued(fault);
    }
    if (front.fail_after_applying && batch_fault_ == InjectedFault::kNone) {
      batch_fault_ = InjectedFault::kAppliedThenFailed;  // counted at post
    }
    const bool batch_end = front.batch_end;
    Completion* const completion = front.completion;
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    if (!batch_end) return;
    const InjectedFault batch_fault = std::exchange(batch_fault_, InjectedFault::kNone);
    if (batch_fault == InjectedFault::kNone) {
      if (completion) completion->Finish(Status::Ok());
      return;
    }
    const Status status = FaultInjector::StatusOf(batch_fault, node_, sinks_.compute_node);
    if (completion) {
      completion->Finish(status);
    } else {
      sinks_.deferred->Set(status);
    }
  }

  // Why `pending` must not be applied now, or kNone.
  InjectedFault FaultOf(const PendingOp& pending) {
    if (pending.fault != InjectedFault::kNone) return pending.fault;
    const InjectedFault stop = compute_node_faults_.Get(*faults_).stop;
    if (stop != InjectedFault::kNone) return stop;
    if (faults_->IsUnreachable(node_)) return InjectedFault::kUnreachable;
    return InjectedFault::kNone;
  }

  uint8_t* Resolve(RemoteAddress address) const {
    uint8_t* base = address.region() == Region::kLock ? memory_.lock_region : memory_.pool;
    return base + address.offset();
  }

  // Applies `pending` unless a fault stops it; returns that fault.
  InjectedFault Execute(PendingOp& pending) {
    const InjectedFault fault = FaultOf(pending);
    if (fault != InjectedFault::kNone) return fault;
    const Op& op = pending.op;
    uint8_t* remote = Resolve(op.remote);
    auto* local = static_cast<uint8_t*>(op.local);
    switch (op.code) {
      case OpCode::kRead:
        MoveRemote(true, remote, local, op.length, options_.torn_reads, &rng_, &order_);
        break;
      case OpCode::kWrite: {
        uint8_t* source = (op.flags & kInline) ? pending.inline_payload.data() : local;
        MoveRemote(false, remote, source, op.length, options_.torn_writes, &rng_, &order_);
        break;
      }
      case OpCode::kCompareSwap: {
        const uint64_t old_value = CompareSwapWord(remote, op.compare, op.operand);
        std::memcpy(local, &old_value, 8);
        sinks_.counters->CountCompareSwapResult(op.compare, old_value);
        break;
      }
      case OpCode::kFetchAdd: {
        const uint64_t old_value = FetchAddWord(remote, op.operand);
        std::memcpy(local, &old_value, 8);
        break;
      }
    }
    return InjectedFault::kNone;
  }

  const LocalFabricOptions& options_;
  FaultInjector* const faults_;
  const uint16_t node_;
  const LocalNodeMemory memory_;
  const EndpointSinks sinks_;

  std::mutex mutex_;
  RingQueue<PendingOp> queue_;                        // guarded by mutex_
  std::mt19937_64 rng_;                               // guarded by mutex_
  std::vector<uint32_t> order_;                       // guarded by mutex_; torn copies
  InjectedFault batch_fault_ = InjectedFault::kNone;  // guarded by mutex_
  ComputeNodeFaultsCache compute_node_faults_;        // guarded by mutex_
  std::atomic<size_t> queued_{0};
};

namespace {

class LocalEndpoint final : public Endpoint {
 public:
  LocalEndpoint(LocalFabric* fabric, uint32_t compute_node)
      : Endpoint(*fabric, compute_node),
        fabric_(fabric),
        connections_(fabric->node_count()),
        rng_(fabric->NextConnectionSeed()),
        compute_node_faults_(compute_node) {}

  ~LocalEndpoint() override {
    Quiesce();
    std::vector<const LocalConnection*> mine;
    for (const auto& connection : connections_) {
      if (connection) mine.push_back(connection.get());
    }
    fabric_->RemoveConnections(mine.data(), mine.size());
  }

  void Poll() override {
    // Without injected delays every op is due at once: no clock read.
    const Clock::time_point now = fabric_->delays() ? Clock::now() : Clock::time_point::max();
    for (const auto& connection : connections_) {
      if (connection && connection->has_queued()) connection->Apply(now, false, true);
    }
    // Help the other connections along, as a NIC serves every queue pair: an
    // unsignaled op must land even if its poster never polls again.
    const uint64_t version = fabric_->connections_version();
    if (!all_connections_ || version != all_connections_version_) {
      all_connections_version_ = version;
      all_connections_ = fabric_->connections();
    }
    for (const auto& connection : *all_connections_) {
      if (connection->has_queued()) connection->Apply(now, false, false);
    }
  }

  void Quiesce() override {
    for (const auto& connection : connections_) {
      if (!connection) continue;
      connection->Apply(Clock::now(), true, true);
      // Left queued only while the compute node is cut off: wait for it to
      // be brought back or stopped (FaultInjector::SetComputeNodeCutOff).
      while (connection->has_queued()) {
        std::this_thread::yield();
        connection->Apply(Clock::now(), true, true);
      }
    }
  }

 protected:
  StatusOr<uint32_t> DoRegister(void*, size_t) override { return 0; }

  Status DoPost(uint16_t node, std::span<const Op> ops, Completion* completion) override {
    DMIDX_RETURN_IF_ERROR(deferred_.Take());
    const InjectedFault fault = fabric_->faults()->OnPost(node, compute_node_faults_);
    if (StopsComputeNode(fault)) return FaultInjector::StatusOf(fault, node, compute_node());
    LocalConnection& connection = ConnectionTo(node);
    if (!fabric_->delays()) {
      // Due at once: no clock read.
      connection.Enqueue(ops, completion, fault, [](size_t) { return Clock::time_point::min(); });
      return Status::Ok();
    }
    const LocalFabricOptions& knobs = fabric_->options();
    const Clock::time_point now = Clock::now();
    connection.Enqueue(ops, completion, fault, [&](size_t) {
      Clock::time_point due = now;
      if (knobs.max_apply_delay.count() > 0) {
        due += std::chrono::nanoseconds(rng_() % (knobs.max_apply_delay.count() + 1));
      }
      return due + StallOf(knobs, rng_);
    });
    return Status::Ok();
  }

 private:
  LocalConnection& ConnectionTo(uint16_t node) {
    std::shared_ptr<LocalConnection>& connection = connections_[node];
    if (!connection) {
      connection = std::make_shared<LocalConnection>(
          fabric_->options(), fabric_->faults(), node, fabric_->node_memory(node),
          EndpointSinks{&counters_, &deferred_, compute_node()}, fabric_->NextConnectionSeed());
      fabric_->AddConnection(connection);
    }
    return *connection;
  }

  LocalFabric* const fabric_;
  // Declared before the connections: they point at it.
  DeferredError deferred_;
  std::vector<std::shared_ptr<LocalConnection>> connections_;  // by node, made on first use
  std::mt19937_64 rng_;                         // delays; used by the owner thread only
  ComputeNodeFaultsCache compute_node_faults_;  // for posts; owner thread only
  // Snapshot of every connection of the fabric, for helping. Holding it keeps
  // removed connections alive; they are empty by then, so helping them is a
  // no-op.
  std::shared_ptr<const LocalFabric::ConnectionList> all_connections_;
  uint64_t all_connections_version_ = 0;
};

}  // namespace

LocalFabric::LocalFabric(const LocalFabricOptions& options, std::vector<LocalNodeMemory> nodes)
    : options_(options),
      delays_(options.max_apply_delay.count() > 0 || options.stall_probability > 0),
      nodes_(std::move(nodes)),
      faults_(static_cast<uint16_t>(nodes_.size())),
      connections_(std::make_shared<const ConnectionList>()) {
  capabilities_.on_chip_lock_memory = options_.on_chip_lock_region;
  capabilities_.on_chip_memory_bytes =
      options_.on_chip_lock_region ? nodes_.front().lock_region_bytes : 0;
  capabilities_.masked_atomics = false;
  capabilities_.max_inline_bytes = kMaxInlineBytes;
  capabilities_.max_sge = kMaxSge;
  capabilities_.max_batch_ops = kMaxBatchOps;
  capabilities_.max_message_bytes = kMaxMessageBytes;
}

LocalFabric::~LocalFabric() = default;

Status CheckNodeMemory(const std::vector<LocalNodeMemory>& nodes, const std::string& fabric) {
  if (nodes.empty()) return Status::InvalidArgument(fabric + ": no memory nodes");
  if (nodes.size() >= RemoteAddress::kMaxNodes) {
    return Status::InvalidArgument(fabric + ": " + std::to_string(nodes.size()) +
                                   " memory nodes; at most 65535");
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const LocalNodeMemory& node = nodes[i];
    // Whole 8-byte words are loaded even for a partial-word access at the
    // end of a region, so regions must be whole words.
    const bool aligned = reinterpret_cast<uintptr_t>(node.pool) % 8 == 0 &&
                         reinterpret_cast<uintptr_t>(node.lock_region) % 8 == 0 &&
                         node.pool_bytes % 8 == 0 && node.lock_region_bytes % 8 == 0;
    if (!node.pool || !node.lock_region || !aligned ||
        node.pool_bytes > RemoteAddress::kMaxOffset ||
        node.lock_region_bytes > RemoteAddress::kMaxOffset) {
      return Status::InvalidArgument(fabric + ": memory node " + std::to_string(i) +
                                     " has a null, misaligned or oversized region");
    }
  }
  return Status::Ok();
}

Status CheckLocalFabricOptions(const LocalFabricOptions& knobs, const std::string& fabric) {
  if (!(knobs.stall_probability >= 0 && knobs.stall_probability <= 1)) {
    return Status::InvalidArgument(fabric + ": LocalFabricOptions::stall_probability " +
                                   std::to_string(knobs.stall_probability) + " is not in [0, 1]");
  }
  if (knobs.max_apply_delay.count() < 0 || knobs.stall.count() < 0) {
    return Status::InvalidArgument(fabric +
                                   ": LocalFabricOptions::max_apply_delay and stall must not be "
                                   "negative");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<LocalFabric>> LocalFabric::Create(const LocalFabricOptions& options,
                                                           std::vector<LocalNodeMemory> nodes) {
  DMIDX_RETURN_IF_ERROR(CheckNodeMemory(nodes, "local fabric"));
  DMIDX_RETURN_IF_ERROR(CheckLocalFabricOptions(options, "local fabric"));
  return std::unique_ptr<LocalFabric>(new LocalFabric(options, std::move(nodes)));
}

NodeLayout LocalFabric::layout(uint16_t node) const {
  return {nodes_[node].pool_bytes, nodes_[node].lock_region_bytes};
}

StatusOr<std::unique_ptr<Endpoint>> LocalFabric::DoConnect(uint32_t compute_node) {
  return std::unique_ptr<Endpoint>(new LocalEndpoint(this, compute_node));
}

Status LocalFabric::DoFenceComputeNode(uint32_t compute_node) {
  faults_.Fence(compute_node);
  // An apply of the node's ops that began before the fence holds its
  // connection's mutex; once it is released, every later apply reads the
  // fence (the increment of the injector's generation happens before the
  // release). A connection made after this snapshot was registered after
  // the fence, so its applies read it too.
  for (const std::shared_ptr<LocalConnection>& connection : *connections()) {
    if (connection->compute_node() == compute_node) connection->WaitOutApply();
  }
  return Status::Ok();
}

std::shared_ptr<const LocalFabric::ConnectionList> LocalFabric::connections() const {
  std::lock_guard<std::mutex> guard(registry_mutex_);
  return connections_;
}

void LocalFabric::AddConnection(std::shared_ptr<LocalConnection> connection) {
  std::lock_guard<std::mutex> guard(registry_mutex_);
  auto next = std::make_shared<ConnectionList>(*connections_);
  next->push_back(std::move(connection));
  connections_ = std::move(next);
  connections_version_.fetch_add(1, std::memory_order_release);
}

void LocalFabric::RemoveConnections(const LocalConnection* const* begin, size_t count) {
  if (count == 0) return;
  std::lock_guard<std::mutex> guard(registry_mutex_);
  auto next = std::make_shared<ConnectionList>(*connections_);
  std::erase_if(*next, [&](const std::shared_ptr<LocalConnection>& connection) {
    return std::find(begin, begin + count, connection.get()) != begin + count;
  });
  connections_ = std::move(next);
  connections_version_.fetch_add(1, std::memory_order_release);
}

uint64_t LocalFabric::NextConnectionSeed() {
  const uint64_t serial = connection_serial_.fetch_add(1, std::memory_order_relaxed);
  // splitmix64 of (seed, serial): distinct, reproducible streams per connection.
  uint64_t z = options_.seed + 0x9e3779b97f4a7c15ull * (serial + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace dmidx::fabric
