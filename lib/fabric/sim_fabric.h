// The `sim` fabric: memory nodes in this process, ops in virtual time.
//
// A SimWorld keeps a virtual clock and one queue of timed events; nothing
// depends on wall time or on OS scheduling, so one driving thread and one
// seed give the same run bit for bit. At Post() the fabric works out, from
// the cost model (SimOptions, docs/sim.md), when each op of the batch
// reaches its memory node and when the batch's completion reaches the
// compute node, and queues an event for each: an op takes effect (copies
// memory) at its modelled arrival time, and the completion is delivered at
// its modelled time. Events run when someone drives the world: the sim
// executor (runtime/sim_executor.h) between coroutine runs, or an
// endpoint's Poll() or Quiesce() (one event per Poll; blocking contexts
// and fabric tests).
//
// The model: each NIC (one per memory node, one per compute node) has a
// processing engine (nic_messages_per_second, per packet), a link each way
// (link_bytes_per_second; every packet of a message, mtu payload bytes at
// most, pays its kind's headers) and, at a memory node, host-atomic buckets
// and a device-memory atomic unit. Each is a FIFO server: an op waits until
// it is free, then holds it for its service time. Servers are reserved when
// an op is posted, in post order (with one wire latency for all, that
// differs from arrival order only by the compute-side queueing). The wire's
// one-way latency is whatever makes an idle 8-byte READ take exactly
// SimOptions::round_trip.
//
// Ordering is the fabric contract's: the ops of one connection execute in
// post order (an unfenced WRITE may overtake the READ or atomic before it
// when LocalFabricOptions::reorder_unfenced), a fenced op waits for the
// connection's earlier READs and atomics to complete, a READ or atomic
// beyond SimOptions::max_rd_atomic in flight waits for the earliest one's
// response (and the connection's later ops behind it), and completions are
// delivered in post order. With torn_reads / torn_writes a READ or WRITE
// moves its words in up to four pieces, in random order, each at a random
// time within [arrival, arrival + transfer time + 2 x round_trip +
// max_apply_delay] (wider than a real DMA, so that tearing shows), so a READ
// that overlaps a WRITE in virtual time can see a mix; without them an op's
// 64-byte lines move in up to four pieces at random times within its
// transfer (SimOptions::tear_lines, as a NIC's DMA), or, with that off or
// within one line, at one instant, in ascending order.
//
// Fault injection (faults()) behaves as on `local`: a batch's fate is
// decided at post, and every op is checked again when it takes effect.
// FenceComputeNode flips its switch under the world's mutex, so no op
// takes effect meanwhile. The events that apply and complete a cut-off
// compute node's batches are held, in order, until it is brought back or
// stopped (fenced or killed: then, within a round trip, they run and drop
// the batches, which complete with the stop's status).
//
// Thread safety: any thread may post and poll (one mutex guards the world
// and the fabric); runs are reproducible only when one thread drives.
#ifndef DMIDX_FABRIC_SIM_FABRIC_H_
#define DMIDX_FABRIC_SIM_FABRIC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dmidx/options.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/local_fabric.h"

namespace dmidx::fabric {

// Virtual time and the event queue.
class SimWorld {
 public:
  using Callback = void (*)(void* target, uint64_t argument);

  // Guards the world and everything the sim fabric keeps; recursive, since
  // an event's callback (a completion waking a coroutine) may schedule more.
  std::recursive_mutex& mutex() { return mutex_; }
  // Holds the mutex for a scope, unless the calling thread is the driving
  // executor's, which holds it for its whole run (saving a lock and unlock
  // on every post and event).
  class Guard {
   public:
    explicit Guard(const SimWorld& world)
        : mutex_(world.mutex_),
          locked_(world.driver_.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
      if (locked_) mutex_.lock();
    }
    ~Guard() {
      if (locked_) mutex_.unlock();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    std::recursive_mutex& mutex_;
    const bool locked_;
  };

  // Time, in ns since the world began, of the event being run or last run.
  int64_t now() const { return now_.load(std::memory_order_relaxed); }
  // `now` plus the CPU time the code running now has spent: what the
  // running compute node's clock reads, and when the ops it posts leave.
  // Never goes back outside an executor's run; in one, the executor sets
  // it for each coroutine it resumes (each CPU's own time only goes
  // forward).
  int64_t cursor() const { return cursor_.load(std::memory_order_relaxed); }
  void set_cursor(int64_t cursor) { cursor_.store(cursor, std::memory_order_relaxed); }
  void Spend(int64_t ns) { cursor_.fetch_add(ns, std::memory_order_relaxed); }

  // Runs callback(target, argument) at time `at` (not before now()). Events
  // of equal time run in the order they were scheduled. Returns the event's
  // number, for Cancel.
  uint64_t Schedule(int64_t at, Callback callback, void* target, uint64_t argument);
  // The event Schedule numbered `event`, which has not run yet, will not
  // run (nor move time).
  void Cancel(uint64_t event);
  // Events queued and not cancelled.
  size_t pending() const {
    Guard guard(*this);
    return events_.size() - cancelled_.size();
  }
  // Runs the earliest event, advancing now() to its time; false when none is
  // queued.
  bool RunNext();
  // RunNext for a thread that polls in a loop: when another thread waits to
  // drive the world too, gives it a turn afterwards (a mutex is not fair,
  // and a starved poster would leave virtual time without its ops).
  bool PollNext();
  // Runs every event due by `deadline`, then advances now() to it.
  void RunUntil(int64_t deadline);

  // Set, by the executor's thread holding mutex(), while an executor drives
  // the world: endpoints' Poll() then leaves the events to it.
  void set_driven(bool driven) {
    driver_.store(driven ? std::this_thread::get_id() : std::thread::id(),
                  std::memory_order_relaxed);
  }
  bool driven() const { return driver_.load(std::memory_order_relaxed) != std::thread::id(); }
  bool driven_here() const {
    return driver_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

 private:
  struct Event {
    int64_t at;
    uint64_t serial;
    Callback callback;
    void* target;
    uint64_t argument;
    bool operator>(const Event& other) const {
      return at != other.at ? at > other.at : serial > other.serial;
    }
  };

  // Pops the cancelled events at the top of the queue.
  void DropCancelled();

  mutable std::recursive_mutex mutex_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;  // guarded
  uint64_t next_serial_ = 0;                                                    // guarded
  std::unordered_set<uint64_t> cancelled_;                                      // guarded
  std::atomic<int64_t> now_{0}, cursor_{0};
  std::atomic<std::thread::id> driver_{};
  std::atomic<int> contenders_{0};
};

class SimConnection;
struct SimBatch;

class SimFabric final : public Fabric {
 public:
  // Limits reported, as LocalFabric's.
  static constexpr uint32_t kMaxInlineBytes = LocalFabric::kMaxInlineBytes;
  static constexpr uint32_t kMaxBatchOps = LocalFabric::kMaxBatchOps;

  // InvalidArgument for no nodes, more than 65535, misaligned regions, or a
  // cost model with a non-positive rate or a round trip shorter than its
  // own parts (the message names the option).
  static StatusOr<std::unique_ptr<SimFabric>> Create(const LocalFabricOptions& knobs,
                                                     const SimOptions& model,
                                                     std::vector<LocalNodeMemory> nodes);
  // The cost model's part of Create's checks, for tools that check their
  // flags before building anything.
  static Status CheckModel(const SimOptions& model);
  ~SimFabric() override;

  const FabricCapabilities& capabilities() const override { return capabilities_; }
  uint16_t node_count() const override { return static_cast<uint16_t>(nodes_.size()); }
  NodeLayout layout(uint16_t node) const override;
  FaultInjector* faults() override { return &faults_; }
  std::vector<NicUsage> nic_usage() const override;

  SimWorld& world() { return world_; }
  const SimOptions& model() const { return model_; }

  // ---- Used by endpoints and batches (under the world's mutex). ----
  struct Server {
    int64_t free_at = 0;  // ps
    int64_t busy = 0;     // ps of service given
    // Takes the server at `arrival` (ps) for `service` ps; returns when done.
    int64_t Serve(int64_t arrival, int64_t service);
  };
  // An atomic on host memory that is planned and not applied yet, and what
  // its word is predicted to hold after it (SimOptions::host_atomic).
  struct PendingAtomic {
    uint64_t word = 0;  // RemoteAddress::raw()
    uint64_t value = 0;
    bool writes = false;  // predicted: not a failed CAS
    const SimBatch* batch = nullptr;
    uint32_t op = 0;
  };
  // Atomics on host memory whose addresses share the bucket's bits queue
  // here, in post order.
  struct Bucket {
    Server server;
    std::vector<PendingAtomic> pending;
  };
  struct Nic {
    std::string name;
    Server engine, link_in, link_out, device_atomics;
    std::vector<Bucket> buckets;  // memory nodes only
    uint64_t messages = 0, bytes_in = 0, bytes_out = 0;
    // Atomics on host memory applied, and those whose outcome (a CAS
    // failed or not) differed from the prediction their bucket time used.
    uint64_t host_atomics = 0, mispredicted_atomics = 0;
  };
  Nic& memory_nic(uint16_t node) { return memory_nics_[node]; }
  Nic& compute_nic(uint32_t compute_node);
  const LocalFabricOptions& knobs() const { return knobs_; }
  const LocalNodeMemory& node_memory(uint16_t node) const { return nodes_[node]; }
  uint64_t NextSeed();
  SimBatch* NewBatch();
  void FreeBatch(SimBatch* batch);

  // Model constants, in ps.
  int64_t message_ps() const { return message_ps_; }
  double ps_per_byte() const { return ps_per_byte_; }
  int64_t wire_ps() const { return wire_ps_; }
  // Packets of a message carrying `payload` bytes (SimOptions::mtu).
  uint32_t Packets(uint32_t payload) const {
    return model_.mtu == 0 || payload <= model_.mtu ? 1 : (payload + model_.mtu - 1) / model_.mtu;
  }
  // Whether an atomic goes to the NIC's device memory, not a host bucket.
  bool OnDevice(const Op& op) const {
    return op.remote.region() == Region::kLock && capabilities_.on_chip_lock_memory;
  }
  Bucket& BucketOf(uint16_t node, RemoteAddress address) {
    std::vector<Bucket>& buckets = memory_nics_[node].buckets;
    return buckets[(address.offset() >> model_.atomic_bucket_shift) % buckets.size()];
  }
  // The word at `address` now (an atomic load).
  uint64_t LoadWord(uint16_t node, RemoteAddress address) const;

  // From an event that applies or completes a batch of `compute_node`
  // (`cut_off`: whether its ops wait now, ComputeNodeFaults::holds()): true
  // when the event must wait, because the node is cut off or earlier
  // events of it wait already (they go first). It is then kept, and run
  // again in the order kept once the node is brought back or stopped;
  // whether that is so is looked at every SimOptions::round_trip of
  // virtual time.
  bool HoldWhileCutOff(uint32_t compute_node, bool cut_off, SimWorld::Callback callback,
                       void* target, uint64_t argument);

 private:
  // What an idle 8-byte READ spends outside the wire, in ps.
  static int64_t IdleReadPartsPs(const SimOptions& model);
  SimFabric(const LocalFabricOptions& knobs, const SimOptions& model,
            std::vector<LocalNodeMemory> nodes);
  StatusOr<std::unique_ptr<Endpoint>> DoConnect(uint32_t compute_node) override;
  Status DoFenceComputeNode(uint32_t compute_node) override;
  // The event that looks at a cut-off compute node (argument) again.
  static void CheckCutOff(void* fabric, uint64_t compute_node);

  const LocalFabricOptions knobs_;
  const SimOptions model_;
  const std::vector<LocalNodeMemory> nodes_;
  FabricCapabilities capabilities_;
  FaultInjector faults_;
  SimWorld world_;
  int64_t message_ps_ = 0, wire_ps_ = 0;
  double ps_per_byte_ = 0;
  // Guarded by the world's mutex.
  std::vector<Nic> memory_nics_;
  std::unordered_map<uint32_t, std::unique_ptr<Nic>> compute_nics_;
  std::vector<std::unique_ptr<SimBatch>> batches_;
  std::vector<SimBatch*> free_batches_;
  uint64_t seed_serial_ = 0;
  // Events of cut-off compute nodes, by node (HoldWhileCutOff).
  struct HeldEvent {
    SimWorld::Callback callback;
    void* target;
    uint64_t argument;
  };
  struct HeldEvents {
    std::vector<HeldEvent> events;
    bool check_scheduled = false;
  };
  std::unordered_map<uint32_t, HeldEvents> held_;
  size_t held_events_ = 0;  // in every node's list
};

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_SIM_FABRIC_H_
