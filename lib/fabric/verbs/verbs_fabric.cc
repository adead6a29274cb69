#include "lib/fabric/verbs/verbs_fabric.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <utility>

#include "lib/fabric/ring_queue.h"

namespace dmidx::fabric::verbs {

namespace {

using Clock = std::chrono::steady_clock;

// wr_id = node << 1 | signaled.
constexpr uint64_t kSignaledBit = 1;

// Queue-depth relations. A batch takes at most depth / kDepthPerBatch WRs
// (capabilities().max_batch_ops), and a WR is signaled whenever the
// unsignaled WRs since the last signaled one would reach depth /
// kDepthPerTail. MakeRoom() waits for a completion when a batch does not
// fit; that completion exists as long as a full batch plus a full unsignaled
// tail fit in the queue: 1/kDepthPerBatch + 1/kDepthPerTail <= 1.
constexpr uint32_t kDepthPerBatch = 4;
constexpr uint32_t kDepthPerTail = 4;
static_assert(kDepthPerBatch * kDepthPerTail >= kDepthPerBatch + kDepthPerTail,
              "a full batch and a full unsignaled tail must fit in the send queue together");
// VerbsFabric::Create rejects smaller queues, so a batch holds at least one
// WR (the software fence's probe READ is one).
constexpr uint32_t kMinQueueDepth = 16;
static_assert(kMinQueueDepth / kDepthPerBatch >= 1 && kMinQueueDepth / kDepthPerTail >= 1);

constexpr uint32_t MaxBatchOps(uint32_t queue_depth) {
  return queue_depth / kDepthPerBatch;
}

struct CasCheck {
  const uint64_t* result = nullptr;
  uint64_t expected = 0;
};

// One signaled WR still in flight, and what its completion settles.
struct SignalRecord {
  Completion* completion = nullptr;  // null: signaled only to reclaim slots
  uint32_t wrs = 0;                  // send-queue slots freed by this completion
  uint32_t cas_checks = 0;           // entries of Connection::cas_checks it settles
  Clock::time_point deadline;
  OpCode first_op = OpCode::kRead;  // for error messages
  RemoteAddress first_remote;
  uint32_t ops = 0;
};

struct Connection {
  QpPtr qp;
  uint32_t outstanding = 0;      // WRs posted whose slots are not reclaimed yet
  uint32_t unsignaled_tail = 0;  // WRs posted since the last signaled one
  // Every posted CAS whose completion is not reaped yet, in post order; the
  // first `unassigned_cas` from the back belong to no signaled record yet.
  // At most queue_depth (one WR each), reserved at connect.
  RingQueue<CasCheck> cas_checks;
  uint32_t unassigned_cas = 0;
  // Signaled WRs in flight, in post order (completions arrive in that
  // order). At most queue_depth, reserved at connect.
  RingQueue<SignalRecord> signaled;
  // One batch's work requests, pre-linked (wrs[i].next = &wrs[i + 1],
  // wrs[i].sg_list = &sges[i]) once at connect; a post fills the first n
  // and cuts the chain after them for the doorbell.
  std::vector<ibv_send_wr> wrs;
  std::vector<ibv_sge> sges;
  // Software fence: batches (or their tails) held back until every WR
  // posted before them has completed, in post order.
  struct Deferred {
    std::vector<Op> ops;
    Completion* completion;
    // Copies of kInline WRITE sources: the caller may reuse its buffer as
    // soon as Post() returns, but a deferred op is posted later.
    std::vector<uint8_t> inline_payloads;
  };
  std::deque<Deferred> deferred;
  Status broken;  // sticky once the QP failed

  bool idle() const { return signaled.empty() && unsignaled_tail == 0; }
  // Sizes and links the per-batch arrays and reserves the in-flight queues.
  void Prepare(uint32_t queue_depth) {
    const uint32_t max_batch = MaxBatchOps(queue_depth);
    wrs.assign(max_batch, ibv_send_wr{});
    sges.assign(max_batch, ibv_sge{});
    for (uint32_t i = 0; i < max_batch; ++i) {
      wrs[i].next = i + 1 < max_batch ? &wrs[i + 1] : nullptr;
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
    }
    cas_checks.reserve(queue_depth);
    signaled.reserve(queue_depth);
  }
  // Drops the CAS results the first `count` settle, counting failures into
  // `counters` when they completed (nullptr: they did not).
  void SettleCas(uint32_t count, EndpointCounters* counters) {
    for (uint32_t i = 0; i < count && !cas_checks.empty(); ++i) {
      const CasCheck check = cas_checks.front();
      cas_checks.pop_front();
      if (counters) counters->CountCompareSwapResult(check.expected, *check.result);
    }
  }
  // Fails every held-back batch with the connection's error.
  void FailDeferred() {
    for (Deferred& batch : deferred) {
      if (batch.completion) batch.completion->Finish(broken);
    }
    deferred.clear();
  }
};

Connection::Deferred MakeDeferred(std::span<const Op> ops, Completion* completion) {
  Connection::Deferred deferred{{ops.begin(), ops.end()}, completion, {}};
  size_t total = 0;
  for (const Op& op : ops) {
    if (op.flags & kInline) total += op.length;
  }
  deferred.inline_payloads.resize(total);
  size_t at = 0;
  for (Op& op : deferred.ops) {
    if (!(op.flags & kInline)) continue;
    std::memcpy(deferred.inline_payloads.data() + at, op.local, op.length);
    op.local = deferred.inline_payloads.data() + at;
    at += op.length;
  }
  return deferred;
}

std::string Describe(const SignalRecord& record) {
  std::string out = std::string(OpCodeName(record.first_op)) + " " + record.first_remote.ToString();
  if (record.ops > 1) out += " (batch of " + std::to_string(record.ops) + " ops)";
  return out;
}

Status CompletionStatus(const ibv_wc& wc, const std::string& op, uint16_t node) {
  const std::string message = CompletionError(wc, op);
  if (wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR) {
    return Status::Unavailable("memory node " + std::to_string(node) + " unreachable: " + message);
  }
  return Status::IoError(message);
}

class VerbsEndpoint final : public Endpoint {
 public:
  static StatusOr<std::unique_ptr<VerbsEndpoint>> Create(VerbsFabric* fabric,
                                                         uint32_t compute_node) {
    std::unique_ptr<VerbsEndpoint> endpoint(new VerbsEndpoint(fabric, compute_node));
    const Device& device = fabric->device();
    const int wanted = static_cast<int>(fabric->options().queue_depth) * fabric->node_count() + 16;
    const int cqe = std::min(wanted, device.device_attr().orig_attr.max_cqe);
    endpoint->cq_.reset(ibv_create_cq(device.context(), cqe, nullptr, nullptr, 0));
    if (!endpoint->cq_) return ErrnoStatus("ibv_create_cq on " + device.name(), errno);
    DMIDX_RETURN_IF_ERROR(
        endpoint->RegisterLocal(&endpoint->quiesce_word_, sizeof(endpoint->quiesce_word_)));
    return endpoint;
  }

  ~VerbsEndpoint() override { Quiesce(); }

  void Poll() override {
    PollCompletions();
    CheckDeadlines();
    if (software_fence_) ReleaseDeferred();
  }

  void Quiesce() override {
    // Completions arrive in order, so a signaled READ behind an unsignaled
    // tail tells when all of it executed. Deferred batches may add new
    // tails while this runs, so probe again whenever one is left.
    for (;;) {
      bool busy = false;
      for (uint16_t node = 0; node < connections_.size(); ++node) {
        Connection& connection = connections_[node];
        if (!connection.qp || !connection.broken.ok()) continue;
        if (connection.signaled.empty() && connection.deferred.empty() &&
            connection.unsignaled_tail > 0) {
          const Op probe =
              Op::Read(RemoteAddress::Pool(node, 0), &quiesce_word_, sizeof(quiesce_word_));
          (void)PostOn(node, connection, {&probe, 1}, nullptr, true);
        }
        busy = busy || !connection.signaled.empty() || !connection.deferred.empty();
      }
      if (!busy) return;
      Poll();
      std::this_thread::yield();
    }
  }

 protected:
  Status DoPost(uint16_t node, std::span<const Op> ops, Completion* completion) override {
    Connection& connection = connections_[node];
    if (!connection.qp) DMIDX_RETURN_IF_ERROR(ConnectTo(node, connection));
    if (!connection.broken.ok()) return connection.broken;
    if (!software_fence_) return PostOn(node, connection, ops, completion, completion != nullptr);
    if (!connection.deferred.empty()) {
      connection.deferred.push_back(MakeDeferred(ops, completion));
      return Status::Ok();
    }
    std::vector<Op> rest;
    DMIDX_RETURN_IF_ERROR(Submit(node, connection, ops, completion, &rest));
    if (!rest.empty()) connection.deferred.push_back(MakeDeferred(rest, completion));
    return Status::Ok();
  }

  // Memory regions are kept here for their lifetime; the base class looks
  // ranges up (binary search) and hands back the lkey.
  StatusOr<uint32_t> DoRegister(void* base, size_t bytes) override {
    DMIDX_ASSIGN_OR_RETURN(MrPtr mr, fabric_->device().Register(base, bytes));
    const uint32_t lkey = mr->lkey;
    memory_regions_.push_back(std::move(mr));
    return lkey;
  }

 private:
  VerbsEndpoint(VerbsFabric* fabric, uint32_t compute_node)
      : Endpoint(*fabric, compute_node),
        fabric_(fabric),
        software_fence_(fabric->device().fence_in_software()),
        connections_(fabric->node_count()) {}

  // Software fence: posts `ops` up to the first fenced op that has earlier
  // WRs to wait for, plus a signaled WR that tells when those are done, and
  // leaves that op and the rest in *rest.
  Status Submit(uint16_t node, Connection& connection, std::span<const Op> ops,
                Completion* completion, std::vector<Op>* rest) {
    size_t fence = ops.size();
    for (size_t i = 0; i < ops.size(); ++i) {
      if ((ops[i].flags & kFence) && (i > 0 || !connection.idle())) {
        fence = i;
        break;
      }
    }
    if (fence == ops.size())
      return PostOn(node, connection, ops, completion, completion != nullptr);
    rest->assign(ops.begin() + fence, ops.end());
    if (fence > 0) return PostOn(node, connection, ops.first(fence), nullptr, true);
    if (!connection.signaled.empty()) return Status::Ok();  // its completion will do
    // Only unsignaled WRs are in flight: a signaled READ behind them tells
    // when they are done.
    const Op probe = Op::Read(RemoteAddress::Pool(node, 0), &quiesce_word_, sizeof(quiesce_word_));
    return PostOn(node, connection, {&probe, 1}, nullptr, true);
  }

  // Posts held-back batches whose fence is now satisfied.
  void ReleaseDeferred() {
    for (uint16_t node = 0; node < connections_.size(); ++node) {
      Connection& connection = connections_[node];
      while (!connection.deferred.empty() && connection.signaled.empty()) {
        if (!connection.broken.ok()) {
          connection.FailDeferred();
          break;
        }
        // Copied out: a deadline inside Submit() may fail and clear the queue.
        const std::vector<Op> ops = connection.deferred.front().ops;
        Completion* const completion = connection.deferred.front().completion;
        std::vector<Op> rest;
        Status status = Submit(node, connection, ops, completion, &rest);
        if (connection.deferred.empty()) break;
        if (!status.ok()) {
          if (connection.broken.ok()) connection.broken = status;
          connection.FailDeferred();
          break;
        }
        if (rest.empty()) {
          connection.deferred.pop_front();
        } else {
          connection.deferred.front().ops = std::move(rest);
        }
      }
    }
  }

  // Connects on first use; a failed attempt is retried by the next post.
  Status ConnectTo(uint16_t node, Connection& connection) {
    connection.broken = Status::Ok();
    const Device& device = fabric_->device();
    const uint32_t depth = fabric_->options().queue_depth;
    auto qp = device.CreateQp(cq_.get(), depth, 0);
    if (!qp.ok()) return connection.broken = qp.status();
    const QpInfo local = device.LocalInfo(qp->get());
    auto remote = fabric_->handshake().Connect(
        node, ConnectionKind::kData, compute_node(), local,
        std::chrono::duration_cast<std::chrono::milliseconds>(fabric_->options().op_timeout));
    if (!remote.ok()) {
      return connection.broken =
                 remote.status().WithContext("connecting to memory node " + std::to_string(node));
    }
    Status status =
        device.ConnectQp(qp->get(), local, *remote, PeerAccess::kSendOnly, fabric_->options());
    if (!status.ok()) return connection.broken = status;
    connection.Prepare(depth);
    connection.qp = std::move(qp).value();
    return Status::Ok();
  }

  // Waits (polling) until `wrs` more WRs fit in the connection's send queue.
  Status MakeRoom(Connection& connection, uint32_t wrs) {
    const uint32_t depth = fabric_->options().queue_depth;
    while (connection.outstanding + wrs > depth) {
      if (!connection.broken.ok()) return connection.broken;
      if (connection.signaled.empty()) {
        return Status::Internal("send queue full of unsignaled work requests");
      }
      // Only reap: releasing deferred batches from here could post them
      // ahead of the batch being posted now.
      PollCompletions();
      CheckDeadlines();
    }
    return Status::Ok();
  }

  // Fills the connection's pre-linked WRs for `ops` and rings the doorbell
  // once. No allocation: the WR, SGE, CAS and signal arrays were sized at
  // connect (see the queue-depth relations above).
  Status PostOn(uint16_t node, Connection& connection, std::span<const Op> ops,
                Completion* completion, bool signal) {
    const auto count = static_cast<uint32_t>(ops.size());
    assert(count >= 1 && count <= connection.wrs.size());
    DMIDX_RETURN_IF_ERROR(MakeRoom(connection, count));
    // Keep the unsignaled tail short so MakeRoom always has a signaled WR to
    // wait for.
    signal = signal ||
             connection.unsignaled_tail + count >= fabric_->options().queue_depth / kDepthPerTail;

    const RegionInfo& region = fabric_->region(node);
    uint32_t cas_posted = 0;
    for (uint32_t i = 0; i < count; ++i) {
      const Op& op = ops[i];
      const bool lock = op.remote.region() == Region::kLock;
      const uint64_t remote =
          (lock ? region.lock_address : region.pool_address) + op.remote.offset();
      const uint32_t rkey = lock ? region.lock_rkey : region.pool_rkey;
      const RegisteredMemory::Range* registration = registered().Find(op.local, op.length);
      ibv_sge& sge = connection.sges[i];
      sge.addr = reinterpret_cast<uintptr_t>(op.local);
      sge.length = op.length;
      sge.lkey = registration ? registration->key : 0;
      ibv_send_wr& wr = connection.wrs[i];
      wr.wr_id = uint64_t{node} << 1;
      wr.send_flags = 0;
      if ((op.flags & kFence) && !software_fence_) wr.send_flags |= IBV_SEND_FENCE;
      if (op.flags & kInline) wr.send_flags |= IBV_SEND_INLINE;
      switch (op.code) {
        case OpCode::kRead:
          wr.opcode = IBV_WR_RDMA_READ;
          wr.wr.rdma = {remote, rkey};
          break;
        case OpCode::kWrite:
          wr.opcode = IBV_WR_RDMA_WRITE;
          wr.wr.rdma = {remote, rkey};
          break;
        case OpCode::kCompareSwap:
          wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
          wr.wr.atomic = {remote, op.compare, op.operand, rkey};
          connection.cas_checks.push_back() = {static_cast<const uint64_t*>(op.local), op.compare};
          ++cas_posted;
          break;
        case OpCode::kFetchAdd:
          wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
          wr.wr.atomic = {remote, op.operand, 0, rkey};
          break;
      }
    }
    ibv_send_wr& last = connection.wrs[count - 1];
    if (signal) {
      last.send_flags |= IBV_SEND_SIGNALED;
      last.wr_id |= kSignaledBit;
    }
    // Cut the chain after this batch for the doorbell, then relink it.
    ibv_send_wr* const after = last.next;
    last.next = nullptr;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(connection.qp.get(), connection.wrs.data(), &bad);
    last.next = after;
    if (rc != 0) {
      // Some WRs before `bad` may be posted; the QP's accounting is lost, so
      // the connection is unusable from here on.
      connection.broken = ErrnoStatus("ibv_post_send to memory node " + std::to_string(node), rc);
      // WRs before `bad` are in flight: put the QP in error so they flush
      // and the NIC lets go of their buffers.
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(connection.qp.get(), &attr, IBV_QP_STATE);
      return connection.broken;
    }
    connection.outstanding += count;
    connection.unassigned_cas += cas_posted;
    if (!signal) {
      connection.unsignaled_tail += count;
      return Status::Ok();
    }
    SignalRecord& record = connection.signaled.push_back();
    record.completion = completion;
    record.wrs = connection.unsignaled_tail + count;
    record.cas_checks = std::exchange(connection.unassigned_cas, 0);
    record.deadline = Clock::now() + fabric_->options().op_timeout;
    record.first_op = ops.front().code;
    record.first_remote = ops.front().remote;
    record.ops = count;
    connection.unsignaled_tail = 0;
    return Status::Ok();
  }

  void PollCompletions() {
    ibv_wc wcs[32];
    int n;
    while ((n = ibv_poll_cq(cq_.get(), 32, wcs)) > 0) {
      for (int i = 0; i < n; ++i)
        HandleCompletion(wcs[i]);
    }
  }

  void HandleCompletion(const ibv_wc& wc) {
    const auto node = static_cast<uint16_t>(wc.wr_id >> 1);
    if (node >= connections_.size()) return;
    Connection& connection = connections_[node];
    const bool signaled = wc.wr_id & kSignaledBit;
    if (wc.status != IBV_WC_SUCCESS && connection.broken.ok()) {
      const std::string op = signaled && !connection.signaled.empty()
                                 ? Describe(connection.signaled.front())
                                 : "unsignaled op to memory node " + std::to_string(node);
      connection.broken = CompletionStatus(wc, op, node);
    }
    if (!signaled || connection.signaled.empty()) return;
    const SignalRecord record = connection.signaled.front();
    connection.signaled.pop_front();
    connection.outstanding -= std::min(connection.outstanding, record.wrs);
    // CAS results are counted here, on the owner thread (Poll); a failed
    // completion means their results are unknown, so they are not counted.
    connection.SettleCas(record.cas_checks, wc.status == IBV_WC_SUCCESS ? &counters_ : nullptr);
    if (wc.status == IBV_WC_SUCCESS) {
      if (record.completion) record.completion->Finish(Status::Ok());
    } else if (record.completion) {
      record.completion->Finish(connection.broken);
    }
  }

  // A signaled WR overdue by op_timeout fails its QP; one overdue by twice
  // that (the NIC did not even flush) fails its waiters directly.
  void CheckDeadlines() {
    const Clock::time_point now = Clock::now();
    for (uint16_t node = 0; node < connections_.size(); ++node) {
      Connection& connection = connections_[node];
      if (connection.signaled.empty() || connection.signaled.front().deadline > now) continue;
      if (connection.broken.ok()) {
        connection.broken = Status::DeadlineExceeded(
            Describe(connection.signaled.front()) + ": no completion from memory node " +
            std::to_string(node) + " within " +
            std::to_string(fabric_->options().op_timeout.count()) + " ms");
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(connection.qp.get(), &attr, IBV_QP_STATE);
        for (size_t i = 0; i < connection.signaled.size(); ++i) {
          connection.signaled[i].deadline = now + fabric_->options().op_timeout;
        }
        continue;
      }
      for (size_t i = 0; i < connection.signaled.size(); ++i) {
        Completion* const completion = connection.signaled[i].completion;
        if (completion) completion->Finish(connection.broken);
      }
      connection.signaled.clear();
      connection.cas_checks.clear();
      connection.unassigned_cas = 0;
      connection.FailDeferred();
    }
  }

  VerbsFabric* const fabric_;
  const bool software_fence_;
  // Member order is destruction order reversed: QPs go before the MRs they
  // use, and both before the CQ.
  CqPtr cq_;
  alignas(8) uint64_t quiesce_word_ = 0;
  std::vector<MrPtr> memory_regions_;
  std::vector<Connection> connections_;  // by node
};

}  // namespace

VerbsFabric::VerbsFabric(const VerbsOptions& options, std::shared_ptr<Device> device,
                         std::vector<RegionInfo> regions, Handshake* handshake,
                         ProcessComputeNode process)
    : options_(options),
      device_(std::move(device)),
      regions_(std::move(regions)),
      handshake_(handshake),
      process_(std::move(process)) {
  capabilities_.on_chip_lock_memory =
      std::all_of(regions_.begin(), regions_.end(), [](const RegionInfo& r) { return r.on_chip; });
  capabilities_.on_chip_memory_bytes =
      capabilities_.on_chip_lock_memory ? regions_.front().lock_bytes : 0;
  capabilities_.masked_atomics = false;  // upstream rdma-core has none
  capabilities_.max_inline_bytes = device_->max_inline_bytes();
  capabilities_.max_sge = static_cast<uint32_t>(device_->device_attr().orig_attr.max_sge);
  capabilities_.max_batch_ops = MaxBatchOps(options_.queue_depth);
  capabilities_.max_message_bytes =
      std::min<uint32_t>(device_->port_attr().max_msg_sz, uint32_t{1} << 30);
}

StatusOr<std::unique_ptr<VerbsFabric>> VerbsFabric::Create(const VerbsOptions& options,
                                                           std::shared_ptr<Device> device,
                                                           std::vector<RegionInfo> regions,
                                                           Handshake* handshake,
                                                           ProcessComputeNode process) {
  if (regions.empty() || regions.size() >= RemoteAddress::kMaxNodes) {
    return Status::InvalidArgument("verbs fabric: need 1 to 65535 memory nodes, got " +
                                   std::to_string(regions.size()));
  }
  if (options.queue_depth < kMinQueueDepth) {
    return Status::InvalidArgument("VerbsOptions.queue_depth must be at least " +
                                   std::to_string(kMinQueueDepth));
  }
  if (!device || !handshake) return Status::InvalidArgument("verbs fabric: no device or handshake");
  if (process.id == kUnnamedComputeNode) {
    return Status::InvalidArgument(
        "verbs fabric: needs the compute node this process is (memory nodes refuse connections "
        "that name none)");
  }
  return std::unique_ptr<VerbsFabric>(new VerbsFabric(
      options, std::move(device), std::move(regions), handshake, std::move(process)));
}

NodeLayout VerbsFabric::layout(uint16_t node) const {
  return {regions_[node].pool_bytes, regions_[node].lock_bytes};
}

StatusOr<std::unique_ptr<Endpoint>> VerbsFabric::DoConnect(uint32_t compute_node) {
  // Every queue pair is filed under a compute node on its memory node, so
  // that a fence reaches it: an unnamed endpoint is this process's.
  if (compute_node == kUnnamedComputeNode) compute_node = process_.id;
  DMIDX_ASSIGN_OR_RETURN(auto endpoint, VerbsEndpoint::Create(this, compute_node));
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

Status VerbsFabric::DoFenceComputeNode(uint32_t compute_node) {
  if (!process_.fence) {
    return Status::NotSupported("verbs fabric: cannot fence compute node " +
                                std::to_string(compute_node) +
                                ": it was made without the memory nodes' control paths, through "
                                "which their daemons are asked to fence");
  }
  return process_.fence(compute_node);
}

}  // namespace dmidx::fabric::verbs
