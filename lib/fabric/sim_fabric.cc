#include "lib/fabric/sim_fabric.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "lib/fabric/memory_access.h"
#include "lib/fabric/ring_queue.h"

namespace dmidx::fabric {

// ---- SimWorld ---------------------------------------------------------------

uint64_t SimWorld::Schedule(int64_t at, Callback callback, void* target, uint64_t argument) {
  Guard guard(*this);
  events_.push(Event{std::max(at, now()), next_serial_, callback, target, argument});
  return next_serial_++;
}

void SimWorld::Cancel(uint64_t event) {
  Guard guard(*this);
  if (event < next_serial_) cancelled_.insert(event);
}

bool SimWorld::RunNext() {
  Guard guard(*this);
  DropCancelled();
  if (events_.empty()) return false;
  const Event event = events_.top();
  events_.pop();
  now_.store(event.at, std::memory_order_relaxed);
  // The cursor may be ahead (CPU spent posting since the last event): time
  // never goes back.
  if (event.at > cursor()) cursor_.store(event.at, std::memory_order_relaxed);
  event.callback(event.target, event.argument);
  return true;
}

bool SimWorld::PollNext() {
  std::unique_lock<std::recursive_mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    contenders_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    contenders_.fetch_sub(1, std::memory_order_relaxed);
  }
  const bool ran = RunNext();
  lock.unlock();
  if (contenders_.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
  return ran;
}

void SimWorld::DropCancelled() {
  // Dropped unseen: a cancelled event moves no time.
  while (!events_.empty() && !cancelled_.empty() && cancelled_.erase(events_.top().serial) > 0)
    events_.pop();
}

void SimWorld::RunUntil(int64_t deadline) {
  Guard guard(*this);
  for (DropCancelled(); !events_.empty() && events_.top().at <= deadline; DropCancelled())
    RunNext();
  if (deadline > now()) now_.store(deadline, std::memory_order_relaxed);
  if (deadline > cursor()) cursor_.store(deadline, std::memory_order_relaxed);
}

// ---- Batches ----------------------------------------------------------------

namespace {

constexpr int64_t kPsPerNs = 1000;
// A torn READ or WRITE moves its words in at most this many pieces.
constexpr uint32_t kMaxPieces = 4;
// The unit a NIC's DMA moves at once (SimOptions::tear_lines).
constexpr uint64_t kLineBytes = 64;

int64_t NsOf(int64_t ps) {
  return (ps + kPsPerNs - 1) / kPsPerNs;
}

}  // namespace

class SimEndpoint;

// One part of one op that takes effect at one instant: the words
// order[begin, end) of op `op` (every word, ascending, when begin == end),
// or, for a line piece, its bytes [begin, end).
struct SimPiece {
  uint32_t op = 0;
  uint32_t begin = 0, end = 0;
  bool lines = false;
};

// A posted batch, from post to completion. Pooled by the fabric.
struct SimBatch {
  SimFabric* fabric = nullptr;
  SimEndpoint* endpoint = nullptr;
  uint16_t node = 0;
  Completion* completion = nullptr;
  InjectedFault fault = InjectedFault::kNone;  // why it failed
  bool fault_at_post = false;                  // refused at post (counted then)
  bool fail_after_applying = false;            // applied, then failed (counted at post)
  std::vector<Op> ops;
  std::vector<uint8_t> inline_bytes;  // kInline WRITE payloads, in op order
  std::vector<uint32_t> inline_offset;
  std::vector<uint32_t> order;  // torn ops' word orders
  std::vector<SimPiece> pieces;
  uint32_t next_op = 0;  // the first op not planned yet
  bool doorbell_rung = false;
  int64_t done = 0;  // latest response so far (ps)

  static void ApplyPiece(void* batch, uint64_t piece);
  static void Complete(void* batch, uint64_t);
};

// The per-node state of one endpoint's connection: times in ps.
struct SimConnectionState {
  int64_t last_end = 0;          // latest end of an op taking effect
  int64_t last_write_end = 0;    // the same, WRITEs only
  int64_t last_other_start = 0;  // latest start of a READ or atomic
  int64_t reads_done = 0;        // latest response of a READ or atomic
  int64_t last_completion = 0;   // latest completion delivered
  // When the responses of the connection's READs and atomics arrive,
  // earliest first (SimOptions::max_rd_atomic): those not after the op
  // being planned are no longer in flight.
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> reads_in_flight;
  // A batch waits at a fence, or for a READ or atomic to complete: later
  // batches wait behind it, in order.
  bool stalled = false;
  RingQueue<SimBatch*> waiting;
};

class SimEndpoint final : public Endpoint {
 public:
  SimEndpoint(SimFabric* fabric, uint32_t compute_node)
      : Endpoint(*fabric, compute_node),
        fabric_(fabric),
        nic_(&fabric->compute_nic(compute_node)),
        connections_(fabric->node_count()),
        rng_(fabric->NextSeed()),
        compute_node_faults_(compute_node) {}

  ~SimEndpoint() override { Quiesce(); }

  void Poll() override {
    SimWorld& world = fabric_->world();
    if (!world.driven()) {
      world.PollNext();
    } else if (world.driven_here()) {
      // Only a blocking context polls; on the executor's own thread it
      // would wait for events that run only when it returns.
      std::fprintf(stderr,
                   "sim fabric: a blocking context waits inside a simulated run (use the "
                   "coroutine's own context there)\n");
      std::abort();
    }
  }

  void Quiesce() override {
    SimWorld& world = fabric_->world();
    SimWorld::Guard guard(world);
    while (in_flight_ > 0) {
      if (!world.RunNext()) {
        std::fprintf(stderr, "sim fabric: %zu batches in flight but no event queued\n", in_flight_);
        std::abort();
      }
    }
  }

  // Endpoint
  Status DoPost(uint16_t node, std::span<const Op> ops, Completion* completion) override {
    SimWorld& world = fabric_->world();
    SimWorld::Guard guard(world);
    DMIDX_RETURN_IF_ERROR(deferred_.Take());
    const InjectedFault fault = fabric_->faults()->OnPost(node, compute_node_faults_);
    if (StopsComputeNode(fault)) return FaultInjector::StatusOf(fault, node, compute_node());
    world.Spend(fabric_->model().cpu_per_post.count());
    SimBatch* batch = fabric_->NewBatch();
    batch->endpoint = this;
    batch->node = node;
    batch->completion = completion;
    batch->fail_after_applying = fault == InjectedFault::kAppliedThenFailed;
    batch->fault = batch->fail_after_applying ? InjectedFault::kNone : fault;
    batch->fault_at_post = batch->fault != InjectedFault::kNone;
    if (batch->fault == InjectedFault::kNone) {
      batch->ops.assign(ops.begin(), ops.end());
      batch->inline_offset.assign(ops.size(), 0);
      for (size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].code != OpCode::kWrite || !(ops[i].flags & kInline)) continue;
        // Copied now: the caller may reuse an inline WRITE's source at once.
        batch->inline_offset[i] = static_cast<uint32_t>(batch->inline_bytes.size());
        const auto* source = static_cast<const uint8_t*>(ops[i].local);
        batch->inline_bytes.insert(batch->inline_bytes.end(), source, source + ops[i].length);
      }
    }
    ++in_flight_;
    SimConnectionState& connection = connections_[node];
    if (connection.stalled) {
      connection.waiting.push_back() = batch;
    } else {
      Plan(batch, world.cursor() * kPsPerNs);
    }
    return Status::Ok();
  }

  // A batch stalled at a fence, or behind max_rd_atomic READs and atomics,
  // resumes: plans the rest of it, then the batches posted on its
  // connection meanwhile, in order.
  static void Resume(void* target, uint64_t) {
    auto* batch = static_cast<SimBatch*>(target);
    SimEndpoint& self = *batch->endpoint;
    SimConnectionState& connection = self.connections_[batch->node];
    const int64_t now = self.fabric_->world().now() * kPsPerNs;
    connection.stalled = false;
    self.Plan(batch, now);
    while (!connection.stalled && !connection.waiting.empty()) {
      SimBatch* next = connection.waiting.front();
      connection.waiting.pop_front();
      self.Plan(next, now);
    }
  }

  EndpointCounters& counters() { return counters_; }
  DeferredError& deferred() { return deferred_; }
  void BatchDone() { --in_flight_; }
  // This endpoint's compute node's faults now (under the world's mutex).
  const ComputeNodeFaults& compute_node_faults() {
    return compute_node_faults_.Get(*fabric_->faults());
  }

 protected:
  StatusOr<uint32_t> DoRegister(void*, size_t) override { return 0; }

 private:
  // Works out, from `depart` (ps) on, when each op of the batch not planned
  // yet takes effect, and queues its pieces; then queues the completion for
  // when the last response arrives (and not before the connection's
  // earlier completions). A fenced op whose connection still waits for a
  // READ or atomic, or a READ or atomic with max_rd_atomic of them in
  // flight, stalls the connection until then (the send queue stops, as on
  // a real NIC): planning resumes in Resume().
  void Plan(SimBatch* batch, int64_t depart) {
    SimWorld& world = fabric_->world();
    SimConnectionState& connection = connections_[batch->node];
    if (batch->fault_at_post) {
      // Refused at post: completes, in order, one round trip later.
      batch->done = depart + fabric_->model().round_trip.count() * kPsPerNs;
    } else {
      PlanOps(batch, depart, connection);
      if (connection.stalled) return;
    }
    const int64_t complete = std::max(batch->done, connection.last_completion);
    connection.last_completion = complete;
    world.Schedule(NsOf(complete), &SimBatch::Complete, batch, 0);
  }

  void PlanOps(SimBatch* batch, int64_t depart, SimConnectionState& connection) {
    const SimOptions& model = fabric_->model();
    const LocalFabricOptions& knobs = fabric_->knobs();
    SimFabric::Nic& cn = *nic_;
    SimFabric::Nic& mn = fabric_->memory_nic(batch->node);
    const int64_t message = fabric_->message_ps();
    const double per_byte = fabric_->ps_per_byte();
    const int64_t wire = fabric_->wire_ps();
    const int64_t pcie = model.pcie.count() * kPsPerNs;
    auto bytes_ps = [per_byte](uint64_t bytes) {
      return static_cast<int64_t>(static_cast<double>(bytes) * per_byte);
    };
    int64_t posted = depart;
    if (!batch->doorbell_rung) {
      // The doorbell: one message for the whole batch.
      batch->doorbell_rung = true;
      posted = cn.engine.Serve(depart, message);
      ++cn.messages;
      batch->done = posted;
    }
    for (size_t i = batch->next_op; i < batch->ops.size(); ++i) {
      const Op& op = batch->ops[i];
      const bool write = op.code == OpCode::kWrite;
      const bool atomic = op.code == OpCode::kCompareSwap || op.code == OpCode::kFetchAdd;
      if ((op.flags & kFence) && connection.reads_done > posted) {
        Stall(batch, i, connection.reads_done);
        return;
      }
      if (!write && model.max_rd_atomic > 0) {
        auto& flying = connection.reads_in_flight;
        while (!flying.empty() && flying.top() <= posted)
          flying.pop();
        if (flying.size() >= model.max_rd_atomic) {
          Stall(batch, i, flying.top());
          return;
        }
      }
      // Each end's engine handles every packet of the longer direction.
      const uint32_t packets = atomic ? 1 : fabric_->Packets(op.length);
      int64_t t = cn.engine.Serve(posted, message * packets);
      cn.messages += packets;
      const uint64_t request = write    ? uint64_t{packets} * model.write_header_bytes + op.length
                               : atomic ? model.atomic_request_bytes
                                        : model.read_request_bytes;
      if (write && !(op.flags & kInline)) t += pcie;  // the NIC fetches the payload
      t = cn.link_out.Serve(t, bytes_ps(request));
      cn.bytes_out += request;
      t += wire;
      t = mn.link_in.Serve(t, bytes_ps(request));
      mn.bytes_in += request;
      t = mn.engine.Serve(t, message * packets);
      mn.messages += packets;
      // The op at the memory: [start, end] of its effect.
      int64_t start, end;
      if (atomic) {
        end = fabric_->OnDevice(op)
                  ? mn.device_atomics.Serve(
                        t, static_cast<int64_t>(1e12 / model.device_atomics_per_second))
                  : HostAtomic(batch, static_cast<uint32_t>(i), t);
        start = end;
      } else {
        start = t + pcie;
        end = start + bytes_ps(op.length);
      }
      // Servers are reserved at the op's natural times; what delays it
      // beyond them (injected jitter, waiting for the connection's earlier
      // ops, a torn op's spread) delays only its own response, not other
      // connections' use of the links.
      const int64_t natural_end = end;
      if (knobs.max_apply_delay.count() > 0) {
        const int64_t jitter =
            static_cast<int64_t>(rng_() % (knobs.max_apply_delay.count() + 1)) * kPsPerNs;
        start += jitter;
        end += jitter;
      }
      const int64_t stall = StallOf(knobs, rng_).count() * kPsPerNs;
      start += stall;
      end += stall;
      // RC order: after the connection's earlier ops, except that an
      // unfenced WRITE may overtake earlier READs and atomics when asked.
      const bool overtake =
          write && knobs.reorder_unfenced && !(op.flags & kFence) && rng_() % 2 == 0;
      // Never before the WRITE was posted, nor before an earlier WRITE of
      // the connection lands (an injected fault: a real WRITE could not
      // land before it arrives, but then it could rarely overtake).
      const int64_t floor = std::max(connection.last_write_end + 1, posted);
      if (overtake && connection.last_other_start - kPsPerNs > floor) {
        // Just before the latest READ or atomic (a whole ns: events are
        // timed in ns), after every earlier WRITE.
        const int64_t moved = std::clamp(start, floor, connection.last_other_start - kPsPerNs);
        end -= start - moved;
        start = moved;
      } else if (start <= connection.last_end) {
        end += connection.last_end + 1 - start;
        start = connection.last_end + 1;
      }
      if (!write) connection.last_other_start = start;
      const bool torn =
          (op.code == OpCode::kRead && knobs.torn_reads) || (write && knobs.torn_writes);
      const int64_t landed = torn || !model.tear_lines || (op.code != OpCode::kRead && !write)
                                 ? std::max(end, AddPieces(batch, static_cast<uint32_t>(i), torn,
                                                           start, end, knobs.max_apply_delay))
                                 : AddLinePieces(batch, static_cast<uint32_t>(i), start, end);
      connection.last_end = std::max(connection.last_end, landed);
      if (write) connection.last_write_end = std::max(connection.last_write_end, landed);
      const uint64_t response =
          op.code == OpCode::kRead
              ? uint64_t{packets} * model.read_response_header_bytes + op.length
          : atomic ? model.atomic_response_bytes
                   : model.ack_bytes;
      int64_t r = mn.link_out.Serve(natural_end, bytes_ps(response));
      mn.bytes_out += response;
      r = cn.link_in.Serve(r + wire, bytes_ps(response));
      cn.bytes_in += response;
      // Delays push the response later; an overtaking WRITE's response
      // still takes the natural path (it never completes faster).
      r += std::max<int64_t>(0, landed - natural_end);
      if (!write) {
        connection.reads_done = std::max(connection.reads_done, r);
        if (model.max_rd_atomic > 0) connection.reads_in_flight.push(r);
      }
      batch->done = std::max(batch->done, r);
    }
    batch->next_op = static_cast<uint32_t>(batch->ops.size());
  }

  // Stops planning `batch` at op `op` until `until` (ps): its connection
  // stalls, and Resume() plans on from there.
  void Stall(SimBatch* batch, size_t op, int64_t until) {
    batch->next_op = static_cast<uint32_t>(op);
    connections_[batch->node].stalled = true;
    fabric_->world().Schedule(NsOf(until), &SimEndpoint::Resume, batch, 0);
  }

  // An atomic on host memory arriving at `arrival` (ps) takes its bucket;
  // returns when it is done. It holds the bucket for a PCIe read and, but
  // for a CAS that fails, a PCIe write; whether it fails is predicted from
  // the word as memory and the bucket's pending atomics will leave it
  // (the prediction is checked when it applies: SimFabric::Nic).
  int64_t HostAtomic(SimBatch* batch, uint32_t op_index, int64_t arrival) {
    const SimOptions& model = fabric_->model();
    const Op& op = batch->ops[op_index];
    SimFabric::Bucket& bucket = fabric_->BucketOf(batch->node, op.remote);
    if (model.host_atomic.count() > 0) {
      return bucket.server.Serve(arrival, model.host_atomic.count() * kPsPerNs);
    }
    const auto last = std::find_if(
        bucket.pending.rbegin(), bucket.pending.rend(),
        [&op](const SimFabric::PendingAtomic& pending) { return pending.word == op.remote.raw(); });
    const uint64_t value =
        last != bucket.pending.rend() ? last->value : fabric_->LoadWord(batch->node, op.remote);
    const bool writes = op.code == OpCode::kFetchAdd || value == op.compare;
    const uint64_t after = op.code == OpCode::kFetchAdd ? value + op.operand
                           : writes                     ? op.operand
                                                        : value;
    bucket.pending.push_back({op.remote.raw(), after, writes, batch, op_index});
    const int64_t pcie = model.pcie.count() * kPsPerNs;
    return bucket.server.Serve(arrival, writes ? 2 * pcie : pcie);
  }

  // Queues one piece at `start`, or, torn, up to kMaxPieces pieces of
  // shuffled words at random times in [start, end + tear window + delay];
  // returns the time of the last.
  int64_t AddPieces(SimBatch* batch, uint32_t op_index, bool torn, int64_t start, int64_t end,
                    std::chrono::nanoseconds delay) {
    SimWorld& world = fabric_->world();
    const Op& op = batch->ops[op_index];
    const size_t words = op.code == OpCode::kRead || op.code == OpCode::kWrite
                             ? ((op.remote.offset() & 7) + op.length + 7) / 8
                             : 1;
    if (!torn || words == 1) {
      batch->pieces.push_back({op_index, 0, 0});
      world.Schedule(NsOf(start), &SimBatch::ApplyPiece, batch, batch->pieces.size() - 1);
      return start;
    }
    const uint32_t first = static_cast<uint32_t>(batch->order.size());
    batch->order.resize(first + words);
    std::iota(batch->order.begin() + first, batch->order.end(), 0);
    std::shuffle(batch->order.begin() + first, batch->order.end(), rng_);
    const uint32_t pieces = static_cast<uint32_t>(std::min<size_t>(words, kMaxPieces));
    const int64_t spread = end - start + tear_window_ps_ + delay.count() * kPsPerNs;
    int64_t last = start;
    for (uint32_t p = 0; p < pieces; ++p) {
      const uint32_t begin = first + static_cast<uint32_t>(words * p / pieces);
      const uint32_t stop = first + static_cast<uint32_t>(words * (p + 1) / pieces);
      batch->pieces.push_back({op_index, begin, stop});
      const int64_t at = start + static_cast<int64_t>(rng_() % (spread + 1));
      last = std::max(last, at);
      world.Schedule(NsOf(at), &SimBatch::ApplyPiece, batch, batch->pieces.size() - 1);
    }
    return last;
  }

  // SimOptions::tear_lines: an op within one 64-byte line moves at
  // `start`; a longer one in up to kMaxPieces pieces of whole lines, each at
  // a random time in [start, end], its transfer. Returns `end`.
  int64_t AddLinePieces(SimBatch* batch, uint32_t op_index, int64_t start, int64_t end) {
    SimWorld& world = fabric_->world();
    const Op& op = batch->ops[op_index];
    const uint64_t first_line = op.remote.offset() / kLineBytes;
    const uint64_t lines =
        (op.remote.offset() + op.length + kLineBytes - 1) / kLineBytes - first_line;
    if (lines <= 1) {
      batch->pieces.push_back({op_index, 0, 0});
      world.Schedule(NsOf(start), &SimBatch::ApplyPiece, batch, batch->pieces.size() - 1);
      return end;
    }
    const uint32_t pieces = static_cast<uint32_t>(std::min<uint64_t>(lines, kMaxPieces));
    // Byte offset in the op where line `l` (0 = the op's first) begins.
    auto boundary = [&](uint64_t l) -> uint32_t {
      if (l == 0) return 0;
      if (l >= lines) return op.length;
      return static_cast<uint32_t>((first_line + l) * kLineBytes - op.remote.offset());
    };
    for (uint32_t p = 0; p < pieces; ++p) {
      batch->pieces.push_back(
          {op_index, boundary(lines * p / pieces), boundary(lines * (p + 1) / pieces), true});
      const int64_t at = start + static_cast<int64_t>(rng_() % (end - start + 1));
      world.Schedule(NsOf(at), &SimBatch::ApplyPiece, batch, batch->pieces.size() - 1);
    }
    return end;
  }

  SimFabric* const fabric_;
  SimFabric::Nic* const nic_;
  DeferredError deferred_;
  std::vector<SimConnectionState> connections_;  // by node; guarded by the world's mutex
  std::mt19937_64 rng_;                          // guarded by the world's mutex
  // How far apart a torn op's pieces may land beyond its transfer: two
  // round trips, wide enough for another client's dependent READs (one
  // round trip apart) to fall between them.
  const int64_t tear_window_ps_ = fabric_->model().round_trip.count() * kPsPerNs * 2;
  size_t in_flight_ = 0;                        // guarded by the world's mutex
  ComputeNodeFaultsCache compute_node_faults_;  // guarded by the world's mutex
};

void SimBatch::ApplyPiece(void* target, uint64_t index) {
  auto* batch = static_cast<SimBatch*>(target);
  SimFabric& fabric = *batch->fabric;
  const uint32_t compute_node = batch->endpoint->compute_node();
  const ComputeNodeFaults node_faults = batch->endpoint->compute_node_faults();
  if (fabric.HoldWhileCutOff(compute_node, node_faults.holds(), &ApplyPiece, target, index)) return;
  const SimPiece& piece = batch->pieces[index];
  const Op& op = batch->ops[piece.op];
  // An atomic on host memory leaves its bucket's pending list, applied or
  // not; `predicted` is whether its bucket time assumed a write-back.
  const bool settles = (op.code == OpCode::kCompareSwap || op.code == OpCode::kFetchAdd) &&
                       !fabric.OnDevice(op) && fabric.model().host_atomic.count() == 0;
  bool predicted = false;
  if (settles) {
    std::vector<SimFabric::PendingAtomic>& pending =
        fabric.BucketOf(batch->node, op.remote).pending;
    const auto it = std::find_if(pending.begin(), pending.end(),
                                 [batch, &piece](const SimFabric::PendingAtomic& atomic) {
                                   return atomic.batch == batch && atomic.op == piece.op;
                                 });
    assert(it != pending.end());
    if (it != pending.end()) {
      predicted = it->writes;
      pending.erase(it);
    }
  }
  if (batch->fault == InjectedFault::kNone) {
    if (node_faults.stop != InjectedFault::kNone) {
      batch->fault = node_faults.stop;
    } else if (fabric.faults()->IsUnreachable(batch->node)) {
      batch->fault = InjectedFault::kUnreachable;
    }
  }
  if (batch->fault != InjectedFault::kNone) return;
  const LocalNodeMemory& memory = fabric.node_memory(batch->node);
  uint8_t* remote =
      (op.remote.region() == Region::kLock ? memory.lock_region : memory.pool) + op.remote.offset();
  auto* local = static_cast<uint8_t*>(op.local);
  // A line piece is the bytes [begin, end) of the op, moved as a whole op's.
  const uint32_t skip = piece.lines ? piece.begin : 0;
  const uint32_t length = piece.lines ? piece.end - piece.begin : op.length;
  remote += skip;
  const std::span<const uint32_t> words =
      piece.lines
          ? std::span<const uint32_t>()
          : std::span<const uint32_t>(batch->order.data() + piece.begin, piece.end - piece.begin);
  // While an executor drives the world, its thread is the only one that
  // touches remote memory: a whole op moves as one plain copy.
  const bool alone = words.empty() && fabric.world().driven();
  switch (op.code) {
    case OpCode::kRead:
      if (alone) {
        std::memcpy(local + skip, remote, length);
      } else {
        MoveWords(true, remote, local + skip, length, words);
      }
      break;
    case OpCode::kWrite: {
      uint8_t* source =
          ((op.flags & kInline) ? batch->inline_bytes.data() + batch->inline_offset[piece.op]
                                : local) +
          skip;
      if (alone) {
        std::memcpy(remote, source, length);
      } else {
        MoveWords(false, remote, source, length, words);
      }
      break;
    }
    case OpCode::kCompareSwap: {
      const uint64_t old_value = CompareSwapWord(remote, op.compare, op.operand);
      std::memcpy(local, &old_value, 8);
      batch->endpoint->counters().CountCompareSwapResult(op.compare, old_value);
      if (settles) {
        SimFabric::Nic& nic = fabric.memory_nic(batch->node);
        ++nic.host_atomics;
        nic.mispredicted_atomics += predicted != (old_value == op.compare);
      }
      break;
    }
    case OpCode::kFetchAdd: {
      const uint64_t old_value = FetchAddWord(remote, op.operand);
      std::memcpy(local, &old_value, 8);
      if (settles) ++fabric.memory_nic(batch->node).host_atomics;
      break;
    }
  }
}

void SimBatch::Complete(void* target, uint64_t argument) {
  auto* batch = static_cast<SimBatch*>(target);
  SimEndpoint& endpoint = *batch->endpoint;
  const uint32_t compute_node = endpoint.compute_node();
  if (batch->fabric->HoldWhileCutOff(compute_node, endpoint.compute_node_faults().holds(),
                                     &Complete, target, argument)) {
    return;
  }
  Completion* const completion = batch->completion;
  Status status;
  if (batch->fault != InjectedFault::kNone) {
    if (!batch->fault_at_post) batch->fabric->faults()->CountDroppedWhileQueued(batch->fault);
    status = FaultInjector::StatusOf(batch->fault, batch->node, endpoint.compute_node());
  } else if (batch->fail_after_applying) {
    status = FaultInjector::StatusOf(InjectedFault::kAppliedThenFailed, batch->node,
                                     endpoint.compute_node());
  }
  batch->fabric->FreeBatch(batch);
  endpoint.BatchDone();
  if (completion) {
    completion->Finish(status);
  } else if (!status.ok()) {
    endpoint.deferred().Set(status);
  }
}

// ---- SimFabric ----------------------------------------------------------------

int64_t SimFabric::Server::Serve(int64_t arrival, int64_t service) {
  const int64_t start = std::max(arrival, free_at);
  free_at = start + service;
  busy += service;
  return free_at;
}

SimFabric::SimFabric(const LocalFabricOptions& knobs, const SimOptions& model,
                     std::vector<LocalNodeMemory> nodes)
    : knobs_(knobs),
      model_(model),
      nodes_(std::move(nodes)),
      faults_(static_cast<uint16_t>(nodes_.size())) {
  capabilities_.on_chip_lock_memory = knobs_.on_chip_lock_region;
  capabilities_.on_chip_memory_bytes =
      knobs_.on_chip_lock_region ? nodes_.front().lock_region_bytes : 0;
  capabilities_.masked_atomics = false;
  capabilities_.max_inline_bytes = kMaxInlineBytes;
  capabilities_.max_sge = LocalFabric::kMaxSge;
  capabilities_.max_batch_ops = kMaxBatchOps;
  capabilities_.max_message_bytes = LocalFabric::kMaxMessageBytes;
  message_ps_ = static_cast<int64_t>(1e12 / model_.nic_messages_per_second);
  ps_per_byte_ = 1e12 / model_.link_bytes_per_second;
  memory_nics_.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    memory_nics_[i].name = "mn" + std::to_string(i);
    memory_nics_[i].buckets.resize(model_.atomic_buckets);
  }
  // What an idle 8-byte READ spends outside the wire: the doorbell and the
  // request at the compute node's engine, the request's bytes on both
  // links, the memory node's engine, its PCIe read and transfer, and the
  // response's bytes on both links. The wire takes the rest, half each way.
  wire_ps_ = (model_.round_trip.count() * kPsPerNs - IdleReadPartsPs(model_)) / 2;
}

int64_t SimFabric::IdleReadPartsPs(const SimOptions& model) {
  const auto message_ps = static_cast<int64_t>(1e12 / model.nic_messages_per_second);
  const double ps_per_byte = 1e12 / model.link_bytes_per_second;
  const int64_t request = model.read_request_bytes;
  const int64_t response = model.read_response_header_bytes + 8;
  return 3 * message_ps + static_cast<int64_t>(ps_per_byte * static_cast<double>(2 * request)) +
         model.pcie.count() * kPsPerNs + static_cast<int64_t>(ps_per_byte * 8) +
         static_cast<int64_t>(ps_per_byte * static_cast<double>(2 * response));
}

Status SimFabric::CheckModel(const SimOptions& model) {
  auto positive = [](double value, const char* name) -> Status {
    if (!(value > 0)) {
      return Status::InvalidArgument(std::string("sim fabric: SimOptions::") + name +
                                     " must be positive");
    }
    return Status::Ok();
  };
  DMIDX_RETURN_IF_ERROR(positive(model.nic_messages_per_second, "nic_messages_per_second"));
  DMIDX_RETURN_IF_ERROR(positive(model.link_bytes_per_second, "link_bytes_per_second"));
  DMIDX_RETURN_IF_ERROR(positive(model.device_atomics_per_second, "device_atomics_per_second"));
  DMIDX_RETURN_IF_ERROR(positive(model.atomic_buckets, "atomic_buckets"));
  if (model.atomic_bucket_shift >= 64) {
    return Status::InvalidArgument("sim fabric: SimOptions::atomic_bucket_shift must be below 64");
  }
  if (model.pcie.count() < 0 || model.host_atomic.count() < 0 || model.cpu_per_post.count() < 0 ||
      model.cpu_per_wakeup.count() < 0 || model.cpu_per_operation.count() < 0) {
    return Status::InvalidArgument("sim fabric: SimOptions times must not be negative");
  }
  const int64_t parts = IdleReadPartsPs(model);
  if (model.round_trip.count() * kPsPerNs < parts) {
    return Status::InvalidArgument("sim fabric: SimOptions::round_trip (" +
                                   std::to_string(model.round_trip.count()) +
                                   " ns) is shorter than an idle READ's parts without the wire (" +
                                   std::to_string(parts / kPsPerNs) + " ns)");
  }
  return Status::Ok();
}

SimFabric::~SimFabric() = default;

StatusOr<std::unique_ptr<SimFabric>> SimFabric::Create(const LocalFabricOptions& knobs,
                                                       const SimOptions& model,
                                                       std::vector<LocalNodeMemory> nodes) {
  DMIDX_RETURN_IF_ERROR(CheckNodeMemory(nodes, "sim fabric"));
  DMIDX_RETURN_IF_ERROR(CheckLocalFabricOptions(knobs, "sim fabric"));
  DMIDX_RETURN_IF_ERROR(CheckModel(model));
  return std::unique_ptr<SimFabric>(new SimFabric(knobs, model, std::move(nodes)));
}

uint64_t SimFabric::LoadWord(uint16_t node, RemoteAddress address) const {
  const LocalNodeMemory& memory = nodes_[node];
  uint8_t* base = address.region() == Region::kLock ? memory.lock_region : memory.pool;
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + address.offset()))
      .load(std::memory_order_acquire);
}

NodeLayout SimFabric::layout(uint16_t node) const {
  return {nodes_[node].pool_bytes, nodes_[node].lock_region_bytes};
}

SimFabric::Nic& SimFabric::compute_nic(uint32_t compute_node) {
  SimWorld::Guard guard(world_);
  std::unique_ptr<Nic>& nic = compute_nics_[compute_node];
  if (!nic) {
    nic = std::make_unique<Nic>();
    nic->name = compute_node == kUnnamedComputeNode ? std::string("cn-unnamed")
                                                    : "cn" + std::to_string(compute_node);
  }
  return *nic;
}

uint64_t SimFabric::NextSeed() {
  SimWorld::Guard guard(world_);
  // splitmix64 of (seed, serial): distinct, reproducible streams.
  uint64_t z = knobs_.seed + 0x9e3779b97f4a7c15ull * (++seed_serial_);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

SimBatch* SimFabric::NewBatch() {
  SimBatch* batch;
  if (free_batches_.empty()) {
    batches_.push_back(std::make_unique<SimBatch>());
    batch = batches_.back().get();
  } else {
    batch = free_batches_.back();
    free_batches_.pop_back();
  }
  batch->fabric = this;
  batch->fault = InjectedFault::kNone;
  batch->fault_at_post = false;
  batch->fail_after_applying = false;
  batch->ops.clear();
  batch->inline_bytes.clear();
  batch->inline_offset.clear();
  batch->order.clear();
  batch->pieces.clear();
  batch->next_op = 0;
  batch->doorbell_rung = false;
  batch->done = 0;
  return batch;
}

void SimFabric::FreeBatch(SimBatch* batch) {
  free_batches_.push_back(batch);
}

std::vector<NicUsage> SimFabric::nic_usage() const {
  SimWorld::Guard guard(world_);
  std::vector<NicUsage> usage;
  auto add = [&usage](const Nic& nic) {
    usage.push_back({nic.name, nic.messages, nic.bytes_in, nic.bytes_out,
                     static_cast<double>(nic.engine.busy) / kPsPerNs,
                     static_cast<double>(nic.link_in.busy) / kPsPerNs,
                     static_cast<double>(nic.link_out.busy) / kPsPerNs});
  };
  for (const Nic& nic : memory_nics_)
    add(nic);
  std::vector<uint32_t> ids;
  for (const auto& [id, nic] : compute_nics_)
    ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint32_t id : ids)
    add(*compute_nics_.at(id));
  return usage;
}

StatusOr<std::unique_ptr<Endpoint>> SimFabric::DoConnect(uint32_t compute_node) {
  return std::unique_ptr<Endpoint>(new SimEndpoint(this, compute_node));
}

Status SimFabric::DoFenceComputeNode(uint32_t compute_node) {
  // Under the world's mutex: no event applies an op meanwhile, and every
  // event after it reads the fence.
  SimWorld::Guard guard(world_);
  faults_.Fence(compute_node);
  return Status::Ok();
}

bool SimFabric::HoldWhileCutOff(uint32_t compute_node, bool cut_off, SimWorld::Callback callback,
                                void* target, uint64_t argument) {
  if (!cut_off && held_events_ == 0) return false;
  HeldEvents& held = held_[compute_node];
  if (!cut_off && held.events.empty()) return false;
  held.events.push_back({callback, target, argument});
  ++held_events_;
  if (!held.check_scheduled) {
    held.check_scheduled = true;
    world_.Schedule(world_.now() + model_.round_trip.count(), &SimFabric::CheckCutOff, this,
                    compute_node);
  }
  return true;
}

void SimFabric::CheckCutOff(void* target, uint64_t argument) {
  auto* fabric = static_cast<SimFabric*>(target);
  const auto compute_node = static_cast<uint32_t>(argument);
  SimWorld& world = fabric->world_;
  HeldEvents& held = fabric->held_[compute_node];
  if (fabric->faults_.FaultsOf(compute_node).holds()) {
    world.Schedule(world.now() + fabric->model_.round_trip.count(), &SimFabric::CheckCutOff, fabric,
                   compute_node);
    return;
  }
  held.check_scheduled = false;
  const std::vector<HeldEvent> events = std::exchange(held.events, {});
  fabric->held_events_ -= events.size();
  // In the order held; each is checked again, so one cut off anew is held
  // again, and the rest behind it.
  for (const HeldEvent& event : events)
    event.callback(event.target, event.argument);
}

}  // namespace dmidx::fabric

namespace dmidx {

Status SimOptions::Check() const {
  return fabric::SimFabric::CheckModel(*this);
}

}  // namespace dmidx
