// The `local` fabric: memory nodes are regions of this process.
//
// Ops are queued at post and applied later, never at post time: any client
// thread's Poll() applies the due ops of its own connections and helps apply
// other connections' ops (as a NIC serves every queue pair), so an unsignaled
// op becomes visible even if its poster never polls again. Each connection's
// ops are applied in order under that connection's mutex; connections are
// applied concurrently by different threads, so their 8-byte words interleave
// as they would at a real NIC.
//
// With tearing off, the words of one op are copied in ascending address
// order; the torn modes (LocalFabricOptions) pick a random order instead.
//
// Fault injection (faults(), fault_injector.h): a batch's fate is decided at
// post (FailNextBatches, FailBatchesAtRandom, an unreachable node: the
// batch is queued as one marker that completes, in order, with the
// failure; a dead compute node: Post() fails at once), and every op is
// checked again when applied (an unreachable node or a dead compute node
// drops it), so queued ops never land once their node is cut off or their
// compute node died. A batch of FailNextBatchesAfterApplying is queued whole
// and applied as any other; only its completion reports the failure.
// FenceComputeNode stops a node as a death does, then takes each of its
// connections' mutexes in turn, so an apply in progress has finished when
// it returns. A cut-off compute node's connections stop applying at their
// first queued op until it is brought back or stopped (a Quiesce() waits
// for that); stopped, the held ops are dropped and report the stop.
//
// Remote memory is only touched through std::atomic_ref word accesses (a
// partial word is merged with a CAS loop), so concurrent READs and WRITEs are
// not data races in the C++ sense and ThreadSanitizer stays quiet. WRITE word
// stores are release and READ word loads acquire; atomics are acq_rel. So a
// client whose CAS or READ observes a word written by a batch also observes
// every word that batch's connection wrote before it.
#ifndef DMIDX_FABRIC_LOCAL_FABRIC_H_
#define DMIDX_FABRIC_LOCAL_FABRIC_H_

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "dmidx/options.h"
#include "lib/fabric/fabric.h"

namespace dmidx::fabric {

// One memory node's regions, owned by the caller and 8-byte aligned. They
// must outlive the fabric.
struct LocalNodeMemory {
  uint8_t* pool = nullptr;
  uint64_t pool_bytes = 0;
  uint8_t* lock_region = nullptr;
  uint64_t lock_region_bytes = 0;
};

// InvalidArgument, naming `fabric`, unless `nodes` are 1 to 65534 regions
// that are non-null, 8-byte aligned, whole words and addressable by a
// RemoteAddress. Every in-process fabric checks its regions with it.
Status CheckNodeMemory(const std::vector<LocalNodeMemory>& nodes, const std::string& fabric);

// InvalidArgument, naming `fabric`, unless the knobs are in range
// (stall_probability in [0, 1], no negative delay).
Status CheckLocalFabricOptions(const LocalFabricOptions& knobs, const std::string& fabric);

// The stall (LocalFabricOptions::stall_probability, stall) one op gets: the
// knobs' stall or none. Draws from `rng` only while stalls are on, so a run
// without them makes the same random choices as before they existed.
inline std::chrono::nanoseconds StallOf(const LocalFabricOptions& knobs, std::mt19937_64& rng) {
  if (knobs.stall_probability <= 0) return std::chrono::nanoseconds(0);
  // 53 random bits: uniform in [0, 1), exactly as a double holds it.
  const bool stalls = std::ldexp(static_cast<double>(rng() >> 11), -53) < knobs.stall_probability;
  return stalls ? knobs.stall : std::chrono::nanoseconds(0);
}

class LocalConnection;

class LocalFabric final : public Fabric {
 public:
  // Limits the local fabric reports (chosen to resemble a ConnectX NIC).
  static constexpr uint32_t kMaxInlineBytes = 256;
  static constexpr uint32_t kMaxBatchOps = 256;
  static constexpr uint32_t kMaxSge = 32;
  static constexpr uint32_t kMaxMessageBytes = 1u << 30;

  // InvalidArgument for no nodes, more than 65535, or misaligned regions.
  static StatusOr<std::unique_ptr<LocalFabric>> Create(const LocalFabricOptions& options,
                                                       std::vector<LocalNodeMemory> nodes);
  ~LocalFabric() override;

  const FabricCapabilities& capabilities() const override { return capabilities_; }
  uint16_t node_count() const override { return static_cast<uint16_t>(nodes_.size()); }
  NodeLayout layout(uint16_t node) const override;
  FaultInjector* faults() override { return &faults_; }

  const LocalFabricOptions& options() const { return options_; }
  // Whether ops are ever applied later than at once (max_apply_delay or
  // stalls): when not, nobody needs to read the clock.
  bool delays() const { return delays_; }
  const LocalNodeMemory& node_memory(uint16_t node) const { return nodes_[node]; }

  // Used by endpoints: the current set of connections, for helping.
  using ConnectionList = std::vector<std::shared_ptr<LocalConnection>>;
  std::shared_ptr<const ConnectionList> connections() const;
  // Changes whenever the set of connections does; lets pollers keep a
  // snapshot instead of loading connections() on every poll.
  uint64_t connections_version() const {
    return connections_version_.load(std::memory_order_acquire);
  }
  void AddConnection(std::shared_ptr<LocalConnection> connection);
  void RemoveConnections(const LocalConnection* const* begin, size_t count);
  uint64_t NextConnectionSeed();

 private:
  LocalFabric(const LocalFabricOptions& options, std::vector<LocalNodeMemory> nodes);
  StatusOr<std::unique_ptr<Endpoint>> DoConnect(uint32_t compute_node) override;
  Status DoFenceComputeNode(uint32_t compute_node) override;

  const LocalFabricOptions options_;
  const bool delays_;  // options_ has max_apply_delay or stalls (decided once)
  const std::vector<LocalNodeMemory> nodes_;
  FabricCapabilities capabilities_;
  FaultInjector faults_;
  // A plain mutex rather than std::atomic<std::shared_ptr>: GCC 12's
  // implementation hides its lock from ThreadSanitizer, which then reports
  // races. Pollers take it only when connections_version_ changed.
  mutable std::mutex registry_mutex_;
  std::shared_ptr<const ConnectionList> connections_;  // guarded by registry_mutex_
  std::atomic<uint64_t> connection_serial_{0};
  std::atomic<uint64_t> connections_version_{0};
};

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_LOCAL_FABRIC_H_
