#include "lib/memnode/verbs_memory_server.h"

#include <chrono>
#include <cstring>
#include <string>
#include <utility>

namespace dmidx::memnode {

using fabric::verbs::ConnectionKind;
using fabric::verbs::Device;
using fabric::verbs::ErrnoStatus;
using fabric::verbs::HandshakeRequest;
using fabric::verbs::PeerAccess;
using fabric::verbs::QpInfo;

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kControlReceives = 4;  // receive slots per control connection
constexpr auto kInboxInterval = std::chrono::milliseconds(1);

// Control CQ wr_id: connection index << 8 | slot << 1 | is_receive.
uint64_t ControlWrId(size_t connection, uint32_t slot, bool receive) {
  return (uint64_t{connection} << 8) | (uint64_t{slot} << 1) | (receive ? 1 : 0);
}

Status PostReceive(ibv_qp* qp, ControlMessage* buffer, uint32_t lkey, uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof(ControlMessage), lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp, &wr, &bad)) return ErrnoStatus("ibv_post_recv", rc);
  return Status::Ok();
}

// ComputeNodeFences::BreakQueuePair on a real device.
int MoveToError(ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

Status PostSend(ibv_qp* qp, const ControlMessage* buffer, uint32_t lkey, uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof(ControlMessage), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp, &wr, &bad)) return ErrnoStatus("ibv_post_send", rc);
  return Status::Ok();
}

}  // namespace

// One compute node's control QP and its registered message slots.
struct VerbsMemoryServer::ControlConnection {
  uint32_t compute_node = 0;
  fabric::verbs::QpPtr qp;
  fabric::verbs::MrPtr mr;
  ControlMessage receive[kControlReceives];
  ControlMessage send;
};

VerbsMemoryServer::VerbsMemoryServer(MemoryNode* node, std::shared_ptr<Device> device,
                                     const VerbsOptions& options,
                                     fabric::verbs::HandshakeInbox* inbox)
    : node_(node),
      device_(std::move(device)),
      options_(options),
      inbox_(inbox),
      fences_(node->id(), MoveToError) {}

VerbsMemoryServer::~VerbsMemoryServer() {
  Stop();
}

StatusOr<std::unique_ptr<VerbsMemoryServer>> VerbsMemoryServer::Create(
    MemoryNode* node, std::shared_ptr<Device> device, const VerbsOptions& options,
    fabric::verbs::HandshakeInbox* inbox) {
  if (!node || !device || !inbox) {
    return Status::InvalidArgument("VerbsMemoryServer needs a node, a device and an inbox");
  }
  std::unique_ptr<VerbsMemoryServer> server(
      new VerbsMemoryServer(node, std::move(device), options, inbox));
  DMIDX_RETURN_IF_ERROR(server->RegisterRegions());
  ibv_context* context = server->device_->context();
  server->data_cq_.reset(ibv_create_cq(context, 16, nullptr, nullptr, 0));
  server->control_cq_.reset(ibv_create_cq(context, 1024, nullptr, nullptr, 0));
  if (!server->data_cq_ || !server->control_cq_) return ErrnoStatus("ibv_create_cq", errno);
  return server;
}

Status VerbsMemoryServer::RegisterRegions() {
  DMIDX_ASSIGN_OR_RETURN(pool_mr_, device_->Register(node_->pool_base(), node_->pool_bytes()));
  regions_.pool_address = reinterpret_cast<uintptr_t>(node_->pool_base());
  regions_.pool_bytes = node_->pool_bytes();
  regions_.pool_rkey = pool_mr_->rkey;
  regions_.lock_bytes = node_->lock_region_bytes();
  regions_.node_id = node_->id();

  // Device memory when the NIC has enough of it (ConnectX-5 and later);
  // the host lock region of the same node otherwise.
  const uint64_t lock_bytes = node_->lock_region_bytes();
  if (device_->device_attr().max_dm_size >= lock_bytes) {
    ibv_alloc_dm_attr attr{};
    attr.length = lock_bytes;
    attr.log_align_req = 3;
    lock_dm_.reset(ibv_alloc_dm(device_->context(), &attr));
    if (lock_dm_) {
      std::vector<uint8_t> zeros(lock_bytes, 0);
      if (ibv_memcpy_to_dm(lock_dm_.get(), 0, zeros.data(), lock_bytes) != 0) {
        return ErrnoStatus("zeroing device memory", errno);
      }
      const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
      lock_mr_.reset(ibv_reg_dm_mr(device_->pd(), lock_dm_.get(), 0, lock_bytes, access));
      if (!lock_mr_) return ErrnoStatus("ibv_reg_dm_mr", errno);
      regions_.lock_address = 0;  // zero-based
      regions_.lock_rkey = lock_mr_->rkey;
      regions_.on_chip = 1;
      return Status::Ok();
    }
  }
  DMIDX_ASSIGN_OR_RETURN(lock_mr_, device_->Register(node_->lock_base(), lock_bytes));
  regions_.lock_address = reinterpret_cast<uintptr_t>(node_->lock_base());
  regions_.lock_rkey = lock_mr_->rkey;
  regions_.on_chip = 0;
  return Status::Ok();
}

void VerbsMemoryServer::Start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { Serve(); });
}

void VerbsMemoryServer::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

Status VerbsMemoryServer::error() const {
  std::lock_guard<std::mutex> guard(error_mutex_);
  return error_;
}

void VerbsMemoryServer::RecordError(const Status& status) {
  std::lock_guard<std::mutex> guard(error_mutex_);
  if (error_.ok()) error_ = status;
}

void VerbsMemoryServer::Serve() {
  Clock::time_point next_inbox = Clock::now();
  while (!stop_.load(std::memory_order_relaxed)) {
    bool busy = ServeControl();
    if (Clock::now() >= next_inbox) {
      ServeHandshakes();
      next_inbox = Clock::now() + kInboxInterval;
    }
    if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void VerbsMemoryServer::ServeHandshakes() {
  StatusOr<std::vector<HandshakeRequest>> requests = inbox_->Take();
  if (!requests.ok()) {
    RecordError(requests.status().WithContext("reading connection requests"));
    return;
  }
  for (const HandshakeRequest& request : *requests) {
    StatusOr<QpInfo> reply = Accept(request);
    // A fenced node's refusal is the fence working, not the server failing.
    if (!reply.ok() && !IsFenced(reply.status())) RecordError(reply.status());
    Status answered = inbox_->Answer(request, reply);
    if (!answered.ok()) RecordError(answered.WithContext("answering a connection request"));
  }
}

StatusOr<QpInfo> VerbsMemoryServer::Accept(const HandshakeRequest& request) {
  const bool control = request.kind == ConnectionKind::kControl;
  DMIDX_RETURN_IF_ERROR(fences_.CheckConnection(request.compute_node));
  ibv_cq* cq = control ? control_cq_.get() : data_cq_.get();
  DMIDX_ASSIGN_OR_RETURN(auto qp, device_->CreateQp(cq, control ? 2 * kControlReceives : 1,
                                                    control ? kControlReceives : 1));
  const QpInfo local = device_->LocalInfo(qp.get());
  if (!control) {
    DMIDX_RETURN_IF_ERROR(
        device_->ConnectQp(qp.get(), local, request.qp, PeerAccess::kRemoteMemory, options_));
    fences_.AddDataQueuePair(request.compute_node, qp.get());
    data_qps_.push_back(std::move(qp));
    connections_.fetch_add(1, std::memory_order_relaxed);
    return local;
  }
  auto connection = std::make_unique<ControlConnection>();
  connection->compute_node = request.compute_node;
  DMIDX_ASSIGN_OR_RETURN(connection->mr,
                         device_->Register(connection.get(), sizeof(ControlConnection)));
  // A QP takes receives only once out of RESET. The client sends its first
  // request after it has our answer, which goes out after we return, so
  // the buffers are waiting in time. Two-sided only: with no remote access
  // the compute node's READs, WRITEs and atomics on it fail, whatever keys
  // it holds, so a fenced node (whose control QP stays up) touches nothing.
  DMIDX_RETURN_IF_ERROR(
      device_->ConnectQp(qp.get(), local, request.qp, PeerAccess::kSendOnly, options_));
  const size_t index = control_.size();
  for (uint32_t slot = 0; slot < kControlReceives; ++slot) {
    DMIDX_RETURN_IF_ERROR(PostReceive(qp.get(), &connection->receive[slot], connection->mr->lkey,
                                      ControlWrId(index, slot, true)));
  }
  connection->qp = std::move(qp);
  control_.push_back(std::move(connection));
  connections_.fetch_add(1, std::memory_order_relaxed);
  return local;
}

bool VerbsMemoryServer::ServeControl() {
  ibv_wc wcs[16];
  const int n = ibv_poll_cq(control_cq_.get(), 16, wcs);
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = wcs[i];
    const size_t index = wc.wr_id >> 8;
    const uint32_t slot = (wc.wr_id >> 1) & 0x7f;
    if (!(wc.wr_id & 1) || index >= control_.size()) continue;  // send completions
    ControlConnection& connection = *control_[index];
    if (wc.status != IBV_WC_SUCCESS) {
      // The compute node went away; its QP is in error. Drop it quietly
      // unless it is something else.
      if (wc.status != IBV_WC_WR_FLUSH_ERR) {
        RecordError(Status::IoError(fabric::verbs::CompletionError(wc, "control RECV")));
      }
      continue;
    }
    control_requests_.fetch_add(1, std::memory_order_relaxed);
    connection.send = fences_.Answer(*node_, connection.compute_node, connection.receive[slot]);
    Status status = PostReceive(connection.qp.get(), &connection.receive[slot], connection.mr->lkey,
                                ControlWrId(index, slot, true));
    if (status.ok()) {
      status = PostSend(connection.qp.get(), &connection.send, connection.mr->lkey,
                        ControlWrId(index, 0, false));
    }
    if (!status.ok()) RecordError(status.WithContext("control reply"));
  }
  return n > 0;
}

// ---- VerbsMemoryNodeControl ------------------------------------------------

VerbsMemoryNodeControl::VerbsMemoryNodeControl(uint16_t node, uint32_t compute_node,
                                               std::shared_ptr<Device> device,
                                               const VerbsOptions& options,
                                               fabric::verbs::Handshake* handshake)
    : node_(node),
      compute_node_(compute_node),
      device_(std::move(device)),
      options_(options),
      handshake_(handshake) {}

VerbsMemoryNodeControl::~VerbsMemoryNodeControl() = default;

StatusOr<std::unique_ptr<VerbsMemoryNodeControl>> VerbsMemoryNodeControl::Create(
    uint16_t node, uint32_t compute_node, std::shared_ptr<Device> device,
    const VerbsOptions& options, fabric::verbs::Handshake* handshake) {
  std::unique_ptr<VerbsMemoryNodeControl> control(
      new VerbsMemoryNodeControl(node, compute_node, std::move(device), options, handshake));
  DMIDX_ASSIGN_OR_RETURN(control->mr_,
                         control->device_->Register(control->buffers_, sizeof(control->buffers_)));
  DMIDX_RETURN_IF_ERROR(control->Connect());
  ControlMessage describe;
  describe.type = ControlType::kDescribe;
  DMIDX_ASSIGN_OR_RETURN(ControlMessage reply, control->Call(describe));
  control->chunk_bytes_ = reply.address;
  return control;
}

Status VerbsMemoryNodeControl::Connect() {
  const Device& dev = *device_;
  // A QP goes before the CQ it uses.
  qp_.reset();
  cq_.reset(ibv_create_cq(dev.context(), 8, nullptr, nullptr, 0));
  if (!cq_) return ErrnoStatus("ibv_create_cq", errno);
  DMIDX_ASSIGN_OR_RETURN(qp_, dev.CreateQp(cq_.get(), 2, 2));
  const QpInfo local = dev.LocalInfo(qp_.get());
  DMIDX_ASSIGN_OR_RETURN(QpInfo remote,
                         handshake_->Connect(node_, ConnectionKind::kControl, compute_node_, local,
                                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 options_.op_timeout)));
  return dev.ConnectQp(qp_.get(), local, remote, PeerAccess::kSendOnly, options_);
}

Status VerbsMemoryNodeControl::ReconnectIfBroken() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (broken_.ok()) return Status::Ok();
  // A late reply to the request that broke the path cannot land in a
  // reply slot now: the old QP is gone, and the new one has a new number.
  DMIDX_RETURN_IF_ERROR(Connect().WithContext("reconnecting the control path to memory node " +
                                              std::to_string(node_) +
                                              " after: " + std::string(broken_.message())));
  broken_ = Status::Ok();
  return Status::Ok();
}

StatusOr<ControlMessage> VerbsMemoryNodeControl::Call(ControlMessage request) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!broken_.ok()) return broken_;
  request.request_id = next_request_++;
  buffers_[0] = request;
  const uint32_t lkey = mr_->lkey;
  Status posted = PostReceive(qp_.get(), &buffers_[1], lkey, 1);
  if (posted.ok()) posted = PostSend(qp_.get(), &buffers_[0], lkey, 0);
  if (!posted.ok()) {
    broken_ = posted.WithContext("control path to memory node " + std::to_string(node_));
    return broken_;
  }
  const Clock::time_point deadline = Clock::now() + options_.op_timeout;
  bool sent = false, received = false;
  while (!(sent && received)) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq_.get(), 1, &wc);
    if (n == 0) {
      if (Clock::now() > deadline) {
        broken_ = Status::Unavailable("memory node " + std::to_string(node_) +
                                      " did not answer a control request within " +
                                      std::to_string(options_.op_timeout.count()) + " ms");
        return broken_;
      }
      std::this_thread::yield();
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      broken_ =
          Status::Unavailable("control path to memory node " + std::to_string(node_) + ": " +
                              fabric::verbs::CompletionError(wc, wc.wr_id == 1 ? "RECV" : "SEND"));
      return broken_;
    }
    (wc.wr_id == 1 ? received : sent) = true;
  }
  if (buffers_[1].request_id != request.request_id) {
    broken_ = Status::Internal("control reply does not match its request");
    return broken_;
  }
  return buffers_[1];
}

StatusOr<fabric::RemoteAddress> VerbsMemoryNodeControl::AllocateChunk() {
  ControlMessage request;
  request.type = ControlType::kAllocateChunk;
  DMIDX_ASSIGN_OR_RETURN(ControlMessage reply, Call(request));
  DMIDX_RETURN_IF_ERROR(reply.status());
  return fabric::RemoteAddress::FromRaw(reply.address);
}

Status VerbsMemoryNodeControl::FreeChunk(fabric::RemoteAddress chunk) {
  ControlMessage request;
  request.type = ControlType::kFreeChunk;
  request.address = chunk.raw();
  DMIDX_ASSIGN_OR_RETURN(ControlMessage reply, Call(request));
  return reply.status();
}

StatusOr<PoolUsage> VerbsMemoryNodeControl::Usage() {
  ControlMessage request;
  request.type = ControlType::kPoolUsage;
  DMIDX_ASSIGN_OR_RETURN(ControlMessage reply, Call(request));
  DMIDX_RETURN_IF_ERROR(UsageReplyStatus(reply, node_));
  return DecodePoolUsage(reply, node_);
}

StatusOr<uint64_t> VerbsMemoryNodeControl::FreeChunks() {
  ControlMessage request;
  request.type = ControlType::kFreeChunks;
  DMIDX_ASSIGN_OR_RETURN(ControlMessage reply, Call(request));
  DMIDX_RETURN_IF_ERROR(reply.status());
  return reply.address;
}

Status VerbsMemoryNodeControl::FenceComputeNode(uint32_t compute_node) {
  ControlMessage request;
  request.type = ControlType::kFenceComputeNode;
  request.address = compute_node;
  // The fence is what a survivor must get through, so a path that an
  // earlier request broke (no answer within op_timeout, a failed
  // completion) is made anew first, and once more if this request breaks
  // it: fencing twice is harmless. A memory node that is down fails both.
  Status failed;
  for (int attempt = 0; attempt < 2; ++attempt) {
    DMIDX_RETURN_IF_ERROR(ReconnectIfBroken());
    StatusOr<ControlMessage> reply = Call(request);
    if (reply.ok()) return FenceReplyStatus(*reply, node_);
    failed = reply.status();
  }
  return failed;
}

StatusOr<fabric::RemoteAddress> VerbsMemoryNodeControl::CatalogWord(std::string_view name,
                                                                    bool create) {
  if (name.empty() || name.size() > CatalogEntry::kMaxNameBytes) {
    return Status::InvalidArgument("catalog names are 1 to " +
                                   std::to_string(CatalogEntry::kMaxNameBytes) + " bytes");
  }
  ControlMessage request;
  request.type = ControlType::kCatalogWord;
  request.create = create ? 1 : 0;
  request.set_name(name);
  DMIDX_ASSIGN_OR_RETURN(ControlMessage reply, Call(request));
  DMIDX_RETURN_IF_ERROR(reply.status());
  return fabric::RemoteAddress::FromRaw(reply.address);
}

}  // namespace dmidx::memnode
