// Options for a dmidx cluster and its compute-node clients.
//
// Everything that shapes a cluster (node counts, pool sizes, thread and
// coroutine counts, fault injection) comes from these structs; nothing is
// compiled in. Every field documents its default and its trade-off.
#ifndef DMIDX_OPTIONS_H_
#define DMIDX_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dmidx/status.h"

namespace dmidx {

// Which fabric carries the one-sided operations.
enum class FabricBackend {
  // Memory nodes are regions of this process; ops are queued at post and
  // applied asynchronously. Needs no RDMA hardware; used by tests and the
  // in-process bench.
  kLocal,
  // rdma-core verbs over RC queue pairs to memory-node daemons
  // (dmidx-memnode) found through memcached. Needs an RDMA device: a
  // ConnectX/InfiniBand NIC, or Soft-RoCE (rxe).
  kVerbs,
  // A simulated cluster in virtual time (docs/sim.md): memory nodes are
  // regions of this process, every compute node's coroutines run on the
  // calling thread, and each op takes effect and completes at the time a
  // model of the NICs and the network (SimOptions) gives it. The same seed
  // gives the same run, bit for bit. For experiments at a scale this
  // machine cannot run in real time, and for exploring schedules.
  kSim,
};

// Memory node (MN) shape. Used for every MN of a cluster.
struct MemoryNodeOptions {
  // The largest pool or lock region a memory node may have: what a remote
  // address's 47-bit offset reaches (128 TiB).
  static constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 47;
  // What chunk_bytes must be a multiple of (chunks are page aligned).
  static constexpr uint64_t kChunkAlignment = 4096;
  // Bytes of remote memory the MN offers. The first few KiB hold the MN's
  // header and catalog; the rest is handed out in chunks. Default 1 GiB. On
  // the local backend pages are committed on first touch, so a large pool
  // costs only address space until used.
  uint64_t pool_bytes = uint64_t{1} << 30;
  // Bytes of the lock region (global lock tables live there). Placed in NIC
  // device memory when the device has it. Default 256 KiB, the on-chip memory
  // of a ConnectX-5.
  uint64_t lock_region_bytes = uint64_t{256} << 10;
  // Granularity of the MN's allocator: a client takes a chunk and carves node
  // objects from it. Larger chunks mean fewer control-path requests and more
  // memory held per client thread. Default 8 MiB. Must be a multiple of
  // kChunkAlignment.
  uint64_t chunk_bytes = uint64_t{8} << 20;
  // Try 2 MiB huge pages for the pool (fewer TLB and NIC translation misses);
  // falls back to normal pages when none are reserved. Default true.
  bool huge_pages = true;
  // Number of named roots the catalog holds. Default 1024.
  uint32_t catalog_entries = 1024;
};

// Knobs of the in-process fabric. All randomness is seeded; everything that
// injects faults is off by default. These are fixed for the fabric's life;
// the switches tests flip while traffic runs (fail the next batches to a
// memory node, make it unreachable, kill a compute node) are on the fabric
// itself (lib/fabric/fault_injector.h).
struct LocalFabricOptions {
  // Seed of every random choice the fabric makes (delays, tearing, reordering).
  uint64_t seed = 1;
  // Each op becomes visible no earlier than a random delay in
  // [0, max_apply_delay] after it was posted. Zero: at the next poll of any
  // client thread. Per-connection order is kept either way.
  std::chrono::nanoseconds max_apply_delay{0};
  // READs copy the remote range in 8-byte pieces in random order, so a reader
  // can observe any mix of old and new words of a concurrent WRITE.
  bool torn_reads = false;
  // WRITEs land their 8-byte pieces in random order (still after every earlier
  // WRITE of the same connection and before every later one).
  bool torn_writes = false;
  // A WRITE may overtake the READ or atomic posted before it on the same
  // connection unless the WRITE carries the fence flag, as on a real RC
  // queue pair. READs and atomics stay in order among themselves.
  bool reorder_unfenced = false;
  // Report the lock region as NIC device (on-chip) memory, as a ConnectX-5 or
  // later would. Its size is then MemoryNodeOptions::lock_region_bytes.
  bool on_chip_lock_region = false;
  // Rare long delays among the short ones: each op, with probability
  // stall_probability (0 to 1), takes effect `stall` later than it would
  // have, and the connection's later ops wait behind it, as behind a lost
  // packet's retransmission or a sender paused between two posts. They
  // widen, now and then, the window between two steps of one operation
  // that others race through. Default 0 (never).
  double stall_probability = 0;
  std::chrono::nanoseconds stall{0};
};

// How the verbs (rdma-core) fabric uses the local RDMA device. Used by
// compute nodes and by the memory-node daemon alike.
struct VerbsOptions {
  // Device name as `ibv_devices` lists it ("mlx5_0", "rxe0"). Empty: the
  // first device with an active port.
  std::string device;
  // Port number on the device. Default 1.
  uint8_t port = 1;
  // GID table index. -1: the RoCE v2 IPv4-mapped GID when the port has one
  // (what routable RoCE needs), otherwise index 0 (InfiniBand).
  int gid_index = -1;
  // Work requests one queue pair keeps in flight; larger hides more latency
  // but pins more NIC memory. Default 256.
  uint32_t queue_depth = 256;
  // A signaled batch not complete after this long fails with
  // DeadlineExceeded and its queue pair is put in the error state, so
  // nothing waits forever on a dead peer. Default 10 s.
  std::chrono::milliseconds op_timeout{10000};
  // RC transport: ACK timeout exponent (4.096 us * 2^ack_timeout) and retry
  // count before a peer is declared unreachable. Defaults 14 (~67 ms), 7.
  uint8_t ack_timeout = 14;
  uint8_t retry_count = 7;
};

// Bootstrap through memcached (verbs clusters): node ids, connection
// handshakes and barriers of the processes of one cluster run.
struct BootstrapOptions {
  // The memcached server: "host:port", "host" (port 11211) or "[ipv6]:port".
  // Default "127.0.0.1:11211".
  std::string server = "127.0.0.1:11211";
  // Cluster name: 1 to 64 printable ASCII bytes, no '/' or whitespace.
  // Clusters with different names share a server without interfering.
  // Default "default".
  std::string cluster = "default";
  // Start a new run (a new epoch) instead of joining the current one. Set it
  // on exactly one process per run, started first; see
  // lib/bootstrap/memcached_bootstrap.h for the run protocol. Default false.
  bool start_new_run = false;
  // TCP connect timeout. Short, so a wrong address fails fast instead of
  // hanging in the kernel's connect retries. Default 2 s.
  std::chrono::milliseconds connect_timeout{2000};
  // Timeout of one request (send and reply). A server that accepts but does
  // not answer fails after this long. Default 2 s.
  std::chrono::milliseconds operation_timeout{2000};
  // How long record waits, barriers and joining a run wait when no timeout
  // is given. Long enough for all processes of a cluster to start. Default
  // 60 s.
  std::chrono::milliseconds wait_timeout{60000};
  // Pause between polls while waiting. Smaller passes waits sooner at the
  // price of more requests (every waiting process polls). Default 10 ms.
  std::chrono::milliseconds poll_interval{10};
  // How often a registered node renews its alive key; zero disables the
  // heartbeat (the node then reads as dead to others). At most half of
  // liveness_timeout. Default 500 ms.
  std::chrono::milliseconds heartbeat_interval{500};
  // A node that stops renewing its alive key reads as dead after at most
  // this long (memcached expires in whole seconds). At least 2 s. Default 3 s.
  std::chrono::seconds liveness_timeout{3};
};

// The `sim` backend's model (docs/sim.md): what each one-sided op costs at
// the NICs, on the wire and in the client's CPU, in virtual time. The
// defaults are the papers' hardware (ConnectX-5/6 NICs at 100 Gb/s, Sherman
// section 3.2 and 5, SMART section 5.2) on RoCE v2, calibrated against it
// as issue 24 asked; Uncalibrated() gives the model before that. The CPU
// costs are calibrated on this library's own client code on the machine
// it was written on, not on the papers' CPUs (docs/sim.md says how).
struct SimOptions {
  // Post-to-completion time of one small READ on an idle fabric, CPU time
  // excluded: both NICs, the wire both ways and the memory node's PCIe read.
  // Default 2 us.
  std::chrono::nanoseconds round_trip{2000};
  // One PCIe transaction between a NIC and its host's memory: part of every
  // READ and WRITE at the memory node, of a non-inline WRITE's payload
  // fetch at the compute node, and of an atomic on host memory (below).
  // Default 250 ns.
  std::chrono::nanoseconds pcie{250};
  // Packets per second one NIC's processing engine handles. Each op costs
  // each end's engine one per packet of its longer direction (a READ's
  // response, a WRITE's request; one for an atomic), and each batch one
  // more at the compute node for its doorbell. Default 45 M (ConnectX-6
  // small READs).
  double nic_messages_per_second = 45e6;
  // Bandwidth of each NIC's link, each direction, in bytes per second.
  // Default 12.5e9 (100 Gb/s).
  double link_bytes_per_second = 12.5e9;
  // Wire bytes of one packet besides its payload, by kind. RoCE v2: every
  // packet has 82 (Ethernet preamble and start 8, header 14, FCS 4,
  // inter-frame gap 12; IPv4 20; UDP 8; BTH 12; ICRC 4), and
  // a READ request adds its RETH (16): 98;
  // a READ response packet its AETH (4): 86, plus its share of the data;
  // a WRITE packet its RETH (16): 98, plus its share of the payload;
  // a WRITE's acknowledgement its AETH (4): 86;
  // an atomic request its AtomicETH (28, the operands included): 110;
  // an atomic response its AETH and AtomicAckETH (4 + 8, the old value
  // included): 94.
  // Every packet of a message pays its kind's bytes (the middle packets of
  // a real READ response and the later ones of a WRITE carry 4 and 16
  // fewer).
  uint32_t read_request_bytes = 98;
  uint32_t read_response_header_bytes = 86;
  uint32_t write_header_bytes = 98;
  uint32_t ack_bytes = 86;
  uint32_t atomic_request_bytes = 110;
  uint32_t atomic_response_bytes = 94;
  // Payload bytes per packet (the path MTU; headers are not part of it): a
  // READ response or WRITE of n bytes is ceil(n / mtu) packets. 0: every
  // message is one packet. Default 1024, RoCE's MTU on a 1500-byte Ethernet
  // MTU (the verbs backend uses the ports' active MTU).
  uint32_t mtu = 1024;
  // READs and atomics one connection (queue pair) has in flight at most: a
  // further one waits, and the connection's later ops behind it, until an
  // earlier one's response has arrived. 0: no limit. Default 16, what the
  // verbs backend sets (max_rd_atomic, at most the device's limit).
  uint32_t max_rd_atomic = 16;
  // Atomics on host memory: the NIC serializes atomics whose addresses fall
  // in one bucket, bucket (offset >> atomic_bucket_shift) % atomic_buckets
  // (Sherman 3.2.2: 4096 buckets by the 12 least significant bits of the
  // address; pools and lock regions start 4 KiB-aligned, so their offsets'
  // low bits are the addresses'). Each atomic holds its bucket for a PCIe
  // read of the word and, unless it is a CAS that fails, a PCIe write
  // ("can be omitted for failed RDMA_CAS"): 2 x pcie or 1 x pcie. A CAS's
  // outcome is predicted when it is posted, from the word as memory and the
  // atomics already queued on it leave it (docs/sim.md). host_atomic above
  // 0 instead holds the bucket that long for every atomic, failed or not.
  // Defaults 4096 buckets, shift 0, host_atomic 0.
  uint32_t atomic_buckets = 4096;
  uint32_t atomic_bucket_shift = 0;
  std::chrono::nanoseconds host_atomic{0};
  // Atomics on NIC device memory (the lock region when
  // LocalFabricOptions::on_chip_lock_region): per second per NIC. Default
  // 110 M.
  double device_atomics_per_second = 110e6;
  // Client CPU, charged to the worker thread that spends it (a thread's
  // coroutines share its CPU, so a busy thread delays its other
  // coroutines): per batch posted (building work requests and ringing the
  // doorbell), per resumption of a coroutine after a wait, and per index
  // operation. Defaults 60 ns, 120 ns, 250 ns, measured on this library's
  // `local` fabric on a 2-core VM (docs/sim.md), not on the papers' CPUs.
  std::chrono::nanoseconds cpu_per_post{60};
  std::chrono::nanoseconds cpu_per_wakeup{120};
  std::chrono::nanoseconds cpu_per_operation{250};
  // A READ or WRITE longer than one 64-byte line moves its lines in up to
  // four pieces of whole lines, each at a random time within its transfer
  // at the memory node, as a NIC's DMA does (RDMA promises no order or
  // atomicity across lines: docs/design.md). A READ that overlaps a WRITE
  // in virtual time can then see a mix, so readers' checks fail, and retry,
  // as often as on hardware. false: every op moves at one instant. The
  // knobs LocalFabricOptions::torn_reads / torn_writes tear far wider (for
  // tests). Default true.
  bool tear_lines = true;

  // The model as it was before its calibration (issue 24), to show what
  // the calibration moved: 64 bytes of headers on every message (atomics
  // 16 and 8 more for their operands), no MTU, no limit on READs and
  // atomics in flight, buckets of address bits 3 to 14, and 500 ns for every
  // atomic on host memory, failed or not.
  // InvalidArgument naming the first setting the sim backend would refuse
  // at Cluster::Open (a rate that is not positive, a round trip shorter
  // than its parts, ...); Ok otherwise. For tools that check their flags
  // before anything runs.
  Status Check() const;

  static SimOptions Uncalibrated() {
    SimOptions model;
    model.read_request_bytes = 64;
    model.read_response_header_bytes = 64;
    model.write_header_bytes = 64;
    model.ack_bytes = 64;
    model.atomic_request_bytes = 64 + 16;
    model.atomic_response_bytes = 64 + 8;
    model.mtu = 0;
    model.max_rd_atomic = 0;
    model.atomic_bucket_shift = 3;
    model.host_atomic = std::chrono::nanoseconds(500);
    return model;
  }
};

// Compute-node leases (docs/design.md, "Compute-node failures"). Every
// compute node renews a lease word in remote memory each `period`; a node
// that finds a lock held by a compute node whose lease word has not changed
// for `timeout`, by its own clock, declares that node dead, fences it, and
// recovers what it left half-done. Clocks need no synchronisation, but the
// compute nodes of a run must agree on both values (give every process the
// same flags). A longer timeout lets a node pause longer (a stop-the-world
// pause, a frozen VM) without being fenced, and makes everyone waiting on a
// node that did die wait that much longer. An index's lock_timeout should
// exceed `timeout` by the recovery's time, or waiters on a dead holder give
// up with a lock timeout first.
struct LeaseOptions {
  // How often a compute node renews its lease (one CAS to the catalog
  // memory node, from a thread of its own; under sim, from a coroutine of
  // its own in virtual time while the client runs). Default 100 ms.
  std::chrono::nanoseconds period{std::chrono::milliseconds(100)};
  // How long a lease word must stand unchanged before others judge its
  // node dead. At least 2 x period. Default 1 s.
  std::chrono::nanoseconds timeout{std::chrono::seconds(1)};

  // InvalidArgument naming the first value Cluster::Open would refuse.
  Status Check() const;
};

// Reclaiming remote memory an index unlinked (docs/design.md, "Reclaiming
// remote memory"): objects are freed once every compute node moved two
// epochs past them, epochs moving with the lease renewals.
struct ReclamationOptions {
  // How many epochs a compute node's caches keep an entry before they drop
  // it (its next lookup misses): a cache entry holds back the objects its
  // image reaches, so memory comes back this many epochs later than with
  // no caches. Matters only while objects are being retired (epochs move
  // only then). 0: an entry lives only while the epoch it was filled in
  // stands. At most kMaxCacheWindowEpochs. Default 4.
  uint32_t cache_window_epochs = 4;

  // Every advance takes at least a lease period, so a window this long
  // already holds freed memory back for hours at the default period: a
  // longer one is taken for a mistake (keep the caches' entries for good
  // by not retiring, or turn the caches off).
  static constexpr uint32_t kMaxCacheWindowEpochs = uint32_t{1} << 16;

  // Chunks back to the memory node (docs/design.md, "Chunks back to the
  // memory node"): a compactor drains a memory node's shared free lists,
  // gives back every chunk all of whose objects it holds, and pushes the
  // rest back. It runs when a worker goes, and when a memory node has fewer
  // than `compact_below_free_chunks` free chunks after a worker took one
  // (also when it has none left). Default 16; 0: only when it has none.
  uint64_t compact_below_free_chunks = 16;
  // Bundles (of up to 32 objects) one compaction takes off one memory
  // node's lists. What a compactor that dies loses, and how long other
  // workers find the lists empty, grow with it; chunks whose objects lie
  // deeper in the lists wait for a later pass. 0 turns compaction off
  // (chunks never go back). Default 256; at most kMaxCompactBundlesPerPass.
  uint32_t compact_bundles_per_pass = 256;
  static constexpr uint32_t kMaxCompactBundlesPerPass = 1 << 16;
  // Draining (docs/design.md, "Draining chunks"): a chunk goes back only
  // once every object carved from it is free and held by one pass, which a
  // churn that keeps reusing free objects everywhere rarely lets happen.
  // With this above 0, one compute node's lease keeper per memory node
  // (the first to claim it; another takes over once it stops renewing the
  // claim for the lease timeout) scans the free lists, marks up to this
  // many chunks among those the scan found the most free bytes of, and
  // publishes the marks in the memory node. Every compute node's keeper
  // reads them each lease period, and its allocators keep the marked
  // chunks' free objects off the lists (on a draining list allocators
  // take from only when the memory node has no chunk left); a chunk goes
  // back once all its objects are free. A mark comes off after
  // RemoteAllocator::kMarkScans scans without its chunk going back, and
  // every mark while the node is low on chunks. Marks keep free objects
  // from reuse meanwhile, so allocators carve new chunks instead: it pays
  // where many chunks are mostly free (docs/churn.md: a radix tree that
  // lost half its keys) and costs pool where few are (a small pool under
  // a backlog of retired objects). Every compute node of a cluster must
  // give the same value (the bench's plan digest checks it). 0 (the
  // default): no draining; at most kMaxDrainingChunks (what the marks'
  // table in a memory node holds).
  uint32_t max_draining_chunks = 0;
  static constexpr uint32_t kMaxDrainingChunks = 124;

  // How long an allocation that finds every memory node out waits, while
  // objects this compute node retired are still in their grace period,
  // for them to come back before it fails with ResourceExhausted: a lease
  // keeper that lags (a loaded machine, a long operation pinning an old
  // epoch) slows the writers down instead of failing them. Nothing is
  // waited for when nothing retired is outstanding. 0: no wait;
  // nanoseconds::max(): no limit. Default 1 s, of the cluster's clock.
  std::chrono::nanoseconds exhausted_wait{std::chrono::seconds(1)};

  // InvalidArgument naming the first setting Cluster::Open refuses; Ok
  // otherwise.
  Status Check() const;
};

struct ClusterOptions {
  FabricBackend backend = FabricBackend::kLocal;
  // Number of memory nodes. For the local backend this many MNs are started
  // in this process; for verbs, Cluster::Open waits for this many
  // dmidx-memnode daemons to register. Default 1; at most 65535.
  uint32_t memory_nodes = 1;
  // Local and sim backends: the shape of the in-process memory nodes. (Verbs memory
  // nodes take theirs from dmidx-memnode's flags.)
  MemoryNodeOptions memory_node;
  // Local and sim backends: seeds, delays, tearing, reordering and the
  // on-chip lock region. Under sim, max_apply_delay is a random extra
  // latency per op in virtual time, and a torn READ or WRITE moves its
  // words in pieces at random times while it transfers, so a READ that
  // overlaps a WRITE in virtual time can see a mix.
  LocalFabricOptions local;
  // Sim backend: the cost model.
  SimOptions sim;
  // Verbs backend: the local RDMA device, and the memcached bootstrap.
  VerbsOptions verbs;
  BootstrapOptions bootstrap;
  // Verbs backend: serve the memory nodes from this process (shaped by
  // memory_node) over the RDMA device, with no memcached and no
  // dmidx-memnode daemons; this process is then the run's only compute
  // node. One machine with Soft-RoCE runs a whole verbs cluster this way.
  // Default false (join daemons through the bootstrap).
  bool verbs_in_process_memory_nodes = false;
  // Compute-node leases: how often each renews, and when others judge it
  // dead. Every backend.
  LeaseOptions lease;
  // Reclamation of remote memory. Every backend.
  ReclamationOptions reclamation;
};

// One compute node (CN): the threads and coroutines that run index work.
struct ClientOptions {
  // Worker threads started by Client::Run. Default 1.
  uint32_t threads = 1;
  // Coroutines per worker thread. More coroutines hide more round-trip
  // latency, at the price of more in-flight work per connection. Default 1.
  // threads x coroutines_per_thread is at most 65534: a compute node may
  // have 65536 contexts alive (blocking ones and the two of its lease
  // keeper included), as lock words name their holder's context in 16 bits.
  uint32_t coroutines_per_thread = 1;
  // Stack of each coroutine. Index operations use little stack; 64 KiB leaves
  // room for sanitizers. Default 64 KiB.
  size_t coroutine_stack_bytes = size_t{64} << 10;
  // Registered local memory each context may use as READ/WRITE buffers
  // (the library keeps 64 bytes of it for lock words). Default 64 KiB
  // (enough for a few 4 KiB nodes).
  size_t scratch_bytes_per_context = size_t{64} << 10;
  // Backoff between retries of a contended step (a lock CAS that found the
  // lock held): retry n waits a random time in [d/2, d], d =
  // retry_backoff_min * 2^n capped at retry_backoff_max. Shorter retries
  // sooner and costs the memory node more atomics. Defaults 1 us and 64 us;
  // zero min retries back to back.
  std::chrono::nanoseconds retry_backoff_min{1000};
  std::chrono::nanoseconds retry_backoff_max{64000};
};

}  // namespace dmidx

#endif  // DMIDX_OPTIONS_H_
