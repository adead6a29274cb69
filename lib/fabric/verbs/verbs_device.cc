#include "lib/fabric/verbs/verbs_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <system_error>
#include <vector>

namespace dmidx::fabric::verbs {

namespace {

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};

bool IsIpv4Mapped(const ibv_gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) == 0;
}

// The RoCE v2 IPv4-mapped GID of the port, or -1.
int FindRoceV2Ipv4Gid(ibv_context* context, uint8_t port, int table_length) {
  for (int index = 0; index < table_length; ++index) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context, port, index, &entry, 0) != 0) continue;
    if (entry.gid_type == IBV_GID_TYPE_ROCE_V2 && IsIpv4Mapped(entry.gid)) return index;
  }
  return -1;
}

// Largest max_inline_data, out of a few candidates, that a QP accepts.
uint32_t ProbeMaxInline(ibv_context* context, ibv_pd* pd) {
  CqPtr cq(ibv_create_cq(context, 1, nullptr, nullptr, 0));
  if (!cq) return 0;
  for (uint32_t candidate : {256u, 220u, 128u, 64u, 32u}) {
    ibv_qp_init_attr attr{};
    attr.send_cq = cq.get();
    attr.recv_cq = cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = 1;
    attr.cap.max_recv_wr = 1;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = candidate;
    QpPtr qp(ibv_create_qp(pd, &attr));
    if (qp) return std::min(candidate, attr.cap.max_inline_data);
  }
  return 0;
}

std::string DeviceNames(ibv_device** list, int count) {
  std::string names;
  for (int i = 0; i < count; ++i) {
    if (!names.empty()) names += ", ";
    names += ibv_get_device_name(list[i]);
  }
  return names.empty() ? "none" : names;
}

}  // namespace

Status ErrnoStatus(std::string_view what, int error) {
  std::string message(what);
  message += ": ";
  message += std::error_code(error, std::generic_category()).message();
  if (error == ENOMEM) return Status::ResourceExhausted(message);
  return Status::IoError(message);
}

StatusOr<std::unique_ptr<Device>> Device::Open(const VerbsOptions& options) {
  int count = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
  if (!list || count == 0) {
    return Status::Unavailable(
        "no RDMA device found: load the NIC's driver, or create a Soft-RoCE device with "
        "'rdma link add rxe0 type rxe netdev <ethernet device>'");
  }
  std::unique_ptr<Device> device(new Device());
  std::string why_not;
  for (int i = 0; i < count; ++i) {
    const char* name = ibv_get_device_name(list.get()[i]);
    if (!options.device.empty() && options.device != name) continue;
    ContextPtr context(ibv_open_device(list.get()[i]));
    if (!context) {
      why_not += std::string(name) + ": cannot open (" + std::strerror(errno) + "); ";
      continue;
    }
    ibv_port_attr port_attr{};
    if (ibv_query_port(context.get(), options.port, &port_attr) != 0) {
      why_not += std::string(name) + ": no port " + std::to_string(options.port) + "; ";
      continue;
    }
    if (port_attr.state != IBV_PORT_ACTIVE) {
      why_not += std::string(name) + " port " + std::to_string(options.port) + " is " +
                 ibv_port_state_str(port_attr.state) + "; ";
      continue;
    }
    device->context_ = std::move(context);
    device->port_attr_ = port_attr;
    device->name_ = name;
    break;
  }
  if (!device->context_) {
    if (!options.device.empty() && why_not.empty()) {
      return Status::Unavailable("RDMA device '" + options.device +
                                 "' not found; devices: " + DeviceNames(list.get(), count));
    }
    return Status::Unavailable("no usable RDMA device with an active port " +
                               std::to_string(options.port) + " (" + why_not + ")");
  }
  device->port_ = options.port;
  ibv_context* context = device->context_.get();
  if (ibv_query_device_ex(context, nullptr, &device->device_attr_) != 0) {
    return ErrnoStatus("ibv_query_device_ex on " + device->name_, errno);
  }
  if (options.gid_index >= device->port_attr_.gid_tbl_len) {
    return Status::InvalidArgument("GID index " + std::to_string(options.gid_index) +
                                   " is past the GID table of " + device->name_ + " (" +
                                   std::to_string(device->port_attr_.gid_tbl_len) + " entries)");
  }
  device->gid_index_ = options.gid_index;
  if (device->gid_index_ < 0) {
    device->gid_index_ = FindRoceV2Ipv4Gid(context, options.port, device->port_attr_.gid_tbl_len);
    if (device->gid_index_ < 0) device->gid_index_ = 0;
  }
  if (ibv_query_gid(context, options.port, device->gid_index_, &device->gid_) != 0) {
    return ErrnoStatus("ibv_query_gid", errno);
  }
  device->pd_.reset(ibv_alloc_pd(context));
  if (!device->pd_) return ErrnoStatus("ibv_alloc_pd on " + device->name_, errno);
  device->max_inline_bytes_ = ProbeMaxInline(context, device->pd_.get());
  return device;
}

StatusOr<MrPtr> Device::Register(void* base, size_t bytes) const {
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_ATOMIC;
  MrPtr mr(ibv_reg_mr(pd_.get(), base, bytes, access));
  if (!mr) {
    const int error = errno;
    std::string what = "ibv_reg_mr of " + std::to_string(bytes) + " bytes on " + name_;
    if (error == ENOMEM || error == EPERM) {
      what +=
          " (is 'ulimit -l' too low? raise it, e.g. 'ulimit -l unlimited', or set "
          "memlock in /etc/security/limits.conf)";
    }
    return ErrnoStatus(what, error);
  }
  return mr;
}

QpInfo Device::LocalInfo(ibv_qp* qp) const {
  QpInfo info;
  info.lid = port_attr_.lid;
  info.qpn = qp->qp_num;
  info.psn = std::random_device()() & 0xffffff;
  info.mtu = port_attr_.active_mtu;
  std::memcpy(info.gid.data(), gid_.raw, 16);
  return info;
}

StatusOr<QpPtr> Device::CreateQp(ibv_cq* cq, uint32_t send_depth, uint32_t receive_depth) const {
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;
  attr.cap.max_send_wr = send_depth;
  attr.cap.max_recv_wr = std::max<uint32_t>(receive_depth, 1);
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = max_inline_bytes_;
  QpPtr qp(ibv_create_qp(pd_.get(), &attr));
  if (!qp) {
    return ErrnoStatus("ibv_create_qp (send depth " + std::to_string(send_depth) + ") on " + name_,
                       errno);
  }
  return qp;
}

Status Device::ConnectQp(ibv_qp* qp, const QpInfo& local, const QpInfo& remote, PeerAccess access,
                         const VerbsOptions& options) const {
  const uint8_t read_atomic_depth =
      static_cast<uint8_t>(std::clamp(device_attr_.orig_attr.max_qp_rd_atom, 1, 16));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port_;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  if (access == PeerAccess::kRemoteMemory) {
    attr.qp_access_flags |=
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  }
  if (int rc = ibv_modify_qp(
          qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    return ErrnoStatus("queue pair to INIT", rc);
  }

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, remote.mtu));
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = read_atomic_depth;
  attr.min_rnr_timer = 12;
  attr.ah_attr.is_global = 1;
  std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
  attr.ah_attr.grh.hop_limit = 64;
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.sl = 0;
  attr.ah_attr.port_num = port_;
  if (int rc =
          ibv_modify_qp(qp, &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return ErrnoStatus("queue pair to RTR (remote qpn " + std::to_string(remote.qpn) + ")", rc);
  }

  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = options.ack_timeout;
  attr.retry_cnt = options.retry_count;
  attr.rnr_retry = 7;
  attr.sq_psn = local.psn;
  attr.max_rd_atomic = read_atomic_depth;
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    return ErrnoStatus("queue pair to RTS", rc);
  }
  return Status::Ok();
}

std::string CompletionError(const ibv_wc& wc, std::string_view op) {
  return std::string(op) + ": " + ibv_wc_status_str(wc.status) + " (wc status " +
         std::to_string(wc.status) + ", vendor error " + std::to_string(wc.vendor_err) + ")";
}

}  // namespace dmidx::fabric::verbs
