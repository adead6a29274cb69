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

namespace dmidx {

// Which fabric carries the one-sided operations.
enum class FabricBackend {
  // Memory nodes are regions of this process; ops are queued at post and
  // applied asynchronously. Needs no RDMA hardware; used by tests and the
  // in-process bench.
  kLocal,
};

// Memory node (MN) shape. Used for every MN of a cluster.
struct MemoryNodeOptions {
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
  // memory held per client thread. Default 8 MiB. Must be a multiple of 4 KiB.
  uint64_t chunk_bytes = uint64_t{8} << 20;
  // Try 2 MiB huge pages for the pool (fewer TLB and NIC translation misses);
  // falls back to normal pages when none are reserved. Default true.
  bool huge_pages = true;
  // Number of named roots the catalog holds. Default 1024.
  uint32_t catalog_entries = 1024;
};

// Knobs of the in-process fabric. All randomness is seeded; everything that
// injects faults is off by default.
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
  // A READ or atomic may be overtaken by later ops of the same connection
  // unless one of those carries the fence flag, as on a real RC queue pair.
  bool reorder_unfenced = false;
  // Report the lock region as NIC device (on-chip) memory, as a ConnectX-5 or
  // later would. Its size is then MemoryNodeOptions::lock_region_bytes.
  bool on_chip_lock_region = false;
};

struct ClusterOptions {
  FabricBackend backend = FabricBackend::kLocal;
  // Number of memory nodes. For the local backend this many MNs are started
  // in this process. Default 1; at most 65535.
  uint32_t memory_nodes = 1;
  MemoryNodeOptions memory_node;
  LocalFabricOptions local;
};

// One compute node (CN): the threads and coroutines that run index work.
struct ClientOptions {
  // Worker threads started by Client::Run. Default 1.
  uint32_t threads = 1;
  // Coroutines per worker thread. More coroutines hide more round-trip
  // latency, at the price of more in-flight work per connection. Default 1.
  uint32_t coroutines_per_thread = 1;
  // Stack of each coroutine. Index operations use little stack; 64 KiB leaves
  // room for sanitizers. Default 64 KiB.
  size_t coroutine_stack_bytes = size_t{64} << 10;
  // Registered local memory each context may use as READ/WRITE buffers.
  // Default 64 KiB (enough for a few 4 KiB nodes).
  size_t scratch_bytes_per_context = size_t{64} << 10;
};

}  // namespace dmidx

#endif  // DMIDX_OPTIONS_H_
