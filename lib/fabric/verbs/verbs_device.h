// rdma-core plumbing shared by the compute side (VerbsFabric) and the memory
// node side (VerbsMemoryServer): RAII handles, opening a device, choosing a
// GID, creating RC queue pairs and moving them to RTS.
//
// Upstream rdma-core only: no ibv_exp_* calls, no masked atomics.
#ifndef DMIDX_FABRIC_VERBS_VERBS_DEVICE_H_
#define DMIDX_FABRIC_VERBS_VERBS_DEVICE_H_

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dmidx/options.h"
#include "dmidx/status.h"

namespace dmidx::fabric::verbs {

// unique_ptr deleters for every verbs object, destroyed in reverse order of
// creation by their owners' member order.
struct ContextDeleter {
  void operator()(ibv_context* p) const { ibv_close_device(p); }
};
struct PdDeleter {
  void operator()(ibv_pd* p) const { ibv_dealloc_pd(p); }
};
struct CqDeleter {
  void operator()(ibv_cq* p) const { ibv_destroy_cq(p); }
};
struct QpDeleter {
  void operator()(ibv_qp* p) const { ibv_destroy_qp(p); }
};
struct MrDeleter {
  void operator()(ibv_mr* p) const { ibv_dereg_mr(p); }
};
struct DmDeleter {
  void operator()(ibv_dm* p) const { ibv_free_dm(p); }
};
using ContextPtr = std::unique_ptr<ibv_context, ContextDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using QpPtr = std::unique_ptr<ibv_qp, QpDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using DmPtr = std::unique_ptr<ibv_dm, DmDeleter>;

// "<what>: <strerror(errno)>" as IoError (ResourceExhausted for ENOMEM).
Status ErrnoStatus(std::string_view what, int error);

// What a peer needs to connect an RC queue pair to ours. Sent over the
// bootstrap as raw bytes (both ends run the same build and byte order).
//
//   0     2     4        8        12     16                         32
//   +-----+-----+--------+--------+------+--------------------------+
//   | lid | pad | qpn    | psn    | mtu  | gid (16 bytes)           |
//   +-----+-----+--------+--------+------+--------------------------+
struct QpInfo {
  uint16_t lid = 0;
  uint16_t pad = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint32_t mtu = 0;  // enum ibv_mtu of the sender's port
  std::array<uint8_t, 16> gid{};
};
static_assert(sizeof(QpInfo) == 32);

// What a connected queue pair lets its peer do besides SEND to it.
enum class PeerAccess {
  // Nothing: the peer's READs, WRITEs and atomics are refused (a remote
  // access error), whatever keys it holds. Control queue pairs, and a
  // compute node's own ends (no one reads its memory).
  kSendOnly,
  // READ, WRITE and atomics on any region registered in this device's
  // protection domain whose key the peer holds: a memory node's data
  // queue pairs.
  kRemoteMemory,
};

// An open device with one protection domain, and the port and GID to use.
class Device {
 public:
  // Opens `options.device` (empty: the first device with an active port) and
  // checks the port is active. GID: options.gid_index, or (-1) the RoCE v2
  // IPv4-mapped GID when present, else index 0. Unavailable with the device
  // list when there is no device or the port is down.
  static StatusOr<std::unique_ptr<Device>> Open(const VerbsOptions& options);

  ibv_context* context() const { return context_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  const std::string& name() const { return name_; }
  uint8_t port() const { return port_; }
  int gid_index() const { return gid_index_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  const ibv_device_attr_ex& device_attr() const { return device_attr_; }
  // Largest inline payload a QP of this device accepted (probed).
  uint32_t max_inline_bytes() const { return max_inline_bytes_; }
  // Whether the fabric must fence in software (hold a fenced op back until
  // every earlier WR completed) instead of with IBV_SEND_FENCE. True for
  // Soft-RoCE: rxe of Linux 6.1 intermittently stalls a queue pair forever
  // on IBV_SEND_FENCE (tests/fabric_conformance_test.cc,
  // FencedOpsNeverOvertakeEarlierReadsAndAtomics, reproduces it).
  bool fence_in_software() const { return name_.rfind("rxe", 0) == 0; }

  // Registers host memory for local and remote READ, WRITE and atomics.
  StatusOr<MrPtr> Register(void* base, size_t bytes) const;

  // A QpInfo for `qp` with a fresh random PSN.
  QpInfo LocalInfo(ibv_qp* qp) const;

  // RC queue pair on `cq` (send and receive).
  StatusOr<QpPtr> CreateQp(ibv_cq* cq, uint32_t send_depth, uint32_t receive_depth) const;
  // INIT -> RTR -> RTS against `remote`, letting the peer do `access`;
  // `local` is what we told the peer.
  Status ConnectQp(ibv_qp* qp, const QpInfo& local, const QpInfo& remote, PeerAccess access,
                   const VerbsOptions& options) const;

 private:
  Device() = default;

  ContextPtr context_;
  PdPtr pd_;
  std::string name_;
  uint8_t port_ = 1;
  int gid_index_ = 0;
  ibv_gid gid_{};
  ibv_port_attr port_attr_{};
  ibv_device_attr_ex device_attr_{};
  uint32_t max_inline_bytes_ = 0;
};

// "READ mn2:pool+0x40: remote access error (wc status 10)".
std::string CompletionError(const ibv_wc& wc, std::string_view op);

}  // namespace dmidx::fabric::verbs

#endif  // DMIDX_FABRIC_VERBS_VERBS_DEVICE_H_
