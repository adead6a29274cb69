// Verbs connection handshakes carried by the memcached bootstrap.
//
// Each memory node has a mailbox in the run's key space:
//
//   hs/<node>/requests         counter of requests (incremented by clients)
//   hs/<node>/request/<i>      request i: kind, compute node, QpInfo
//   hs/<node>/reply/<i>        the memory node's answer to request i: a
//                              status code and detail, its QpInfo, and the
//                              refusal's message if any
//
// A compute node takes the next index, writes its request, and waits for the
// reply. The memory node's serving thread polls the counter and answers
// every new index in order.
#ifndef DMIDX_BOOTSTRAP_MEMCACHED_HANDSHAKE_H_
#define DMIDX_BOOTSTRAP_MEMCACHED_HANDSHAKE_H_

#include <cstdint>

#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/fabric/verbs/handshake.h"

namespace dmidx::bootstrap {

// Compute side. Thread-safe (the bootstrap is).
class MemcachedHandshake final : public fabric::verbs::Handshake {
 public:
  // `bootstrap` must outlive this object.
  explicit MemcachedHandshake(MemcachedBootstrap* bootstrap) : bootstrap_(bootstrap) {}

  StatusOr<fabric::verbs::QpInfo> Connect(uint16_t node, fabric::verbs::ConnectionKind kind,
                                          uint32_t compute_node, const fabric::verbs::QpInfo& local,
                                          std::chrono::milliseconds timeout) override;

 private:
  MemcachedBootstrap* const bootstrap_;
};

// Memory-node side: the mailbox of memory node `node`. Used by the serving
// thread only.
class MemcachedHandshakeInbox final : public fabric::verbs::HandshakeInbox {
 public:
  MemcachedHandshakeInbox(MemcachedBootstrap* bootstrap, uint16_t node)
      : bootstrap_(bootstrap), node_(node) {}

  StatusOr<std::vector<fabric::verbs::HandshakeRequest>> Take() override;
  Status Answer(const fabric::verbs::HandshakeRequest& request,
                const StatusOr<fabric::verbs::QpInfo>& reply) override;

 private:
  MemcachedBootstrap* const bootstrap_;
  const uint16_t node_;
  uint64_t answered_ = 0;  // requests 1..answered_ are taken
};

// The record name under which memory node `node` publishes its RegionInfo.
std::string RegionsRecord(uint16_t node);

// Memory node side: publishes `regions` (whose node_id names the node).
Status PublishRegions(MemcachedBootstrap* bootstrap, const fabric::verbs::RegionInfo& regions);
// Compute side: waits for memory node `node`'s regions and checks them.
StatusOr<fabric::verbs::RegionInfo> ReadRegions(MemcachedBootstrap* bootstrap, uint16_t node);

}  // namespace dmidx::bootstrap

#endif  // DMIDX_BOOTSTRAP_MEMCACHED_HANDSHAKE_H_
