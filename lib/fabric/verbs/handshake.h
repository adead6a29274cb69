// How a compute node and a memory node agree on a connected RC queue pair.
//
// The compute side creates a QP and sends a HandshakeRequest carrying its
// QpInfo; the memory node creates the matching QP, connects it, and answers
// with its own QpInfo. Both then move their QP to RTS. How requests travel
// is the transport's business: memcached between processes
// (bootstrap/memcached_handshake.h), or an in-process queue in tests.
#ifndef DMIDX_FABRIC_VERBS_HANDSHAKE_H_
#define DMIDX_FABRIC_VERBS_HANDSHAKE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "dmidx/status.h"
#include "lib/fabric/verbs/verbs_device.h"

namespace dmidx::fabric::verbs {

// Where a memory node's regions are, as its NIC sees them. Published once by
// the memory node; compute nodes need it before their first op.
//
//   0              8              16        20        24             32
//   +--------------+--------------+---------+---------+--------------+
//   | pool address | pool bytes   |pool rkey|lock rkey| lock address |
//   +--------------+--------------+---------+---------+--------------+
//   32             40        44        48
//   +--------------+---------+---------+
//   | lock bytes   | on chip | node id |
//   +--------------+---------+---------+
struct RegionInfo {
  uint64_t pool_address = 0;
  uint64_t pool_bytes = 0;
  uint32_t pool_rkey = 0;
  uint32_t lock_rkey = 0;
  uint64_t lock_address = 0;  // 0 for zero-based device memory
  uint64_t lock_bytes = 0;
  uint32_t on_chip = 0;  // 1: the lock region is NIC device memory
  uint32_t node_id = 0;
};
static_assert(sizeof(RegionInfo) == 48);

enum class ConnectionKind : uint32_t {
  kData = 1,     // one-sided ops of one client thread
  kControl = 2,  // two-sided control messages (chunks, catalog)
};

struct HandshakeRequest {
  uint64_t id = 0;  // assigned by the transport, unique per memory node
  ConnectionKind kind = ConnectionKind::kData;
  uint32_t compute_node = 0;
  QpInfo qp;
};

// Compute side: sends a request to memory node `node` on behalf of compute
// node `compute_node` (the memory node files the queue pair under it, for a
// fence) and waits for the reply: the memory node's QpInfo, or its refusal
// (Unavailable marked StatusDetail::kFenced for a fenced compute node).
// Thread-safe.
class Handshake {
 public:
  virtual ~Handshake() = default;
  virtual StatusOr<QpInfo> Connect(uint16_t node, ConnectionKind kind, uint32_t compute_node,
                                   const QpInfo& local, std::chrono::milliseconds timeout) = 0;
};

// Memory-node side: the requests addressed to one memory node.
class HandshakeInbox {
 public:
  virtual ~HandshakeInbox() = default;
  // Requests that arrived since the last call; never blocks for long.
  virtual StatusOr<std::vector<HandshakeRequest>> Take() = 0;
  // Answers `request`: the memory node's QpInfo, or an error for the client.
  virtual Status Answer(const HandshakeRequest& request, const StatusOr<QpInfo>& reply) = 0;
};

// Both ends in one process, for tests and single-process clusters.
class InProcessHandshake final : public Handshake {
 public:
  InProcessHandshake();
  ~InProcessHandshake() override;

  // The inbox of memory node `node`; valid as long as this object.
  HandshakeInbox* inbox(uint16_t node);

  StatusOr<QpInfo> Connect(uint16_t node, ConnectionKind kind, uint32_t compute_node,
                           const QpInfo& local, std::chrono::milliseconds timeout) override;

 private:
  class Inbox;
  std::mutex mutex_;
  std::map<uint16_t, std::unique_ptr<Inbox>> inboxes_;  // guarded by mutex_
};

}  // namespace dmidx::fabric::verbs

#endif  // DMIDX_FABRIC_VERBS_HANDSHAKE_H_
