// Counters of one client thread. Each thread counts its own; a bench or test
// sums them. Counts are exact and deterministic for a given sequence of ops.
#ifndef DMIDX_STATS_H_
#define DMIDX_STATS_H_

#include <cstdint>
#include <string>

namespace dmidx {

struct Stats {
  // Sequential network waits: one per wait that had to wait for at least one
  // posted batch, however many memory nodes the batches went to. This is the
  // latency-relevant count ("round trips" in the Sherman and SMART papers).
  uint64_t round_trips = 0;
  // Batches posted (doorbells rung), signaled or not.
  uint64_t batches = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t compare_swaps = 0;
  uint64_t fetch_adds = 0;
  uint64_t bytes_read = 0;     // payload bytes of READs (atomics count 8)
  uint64_t bytes_written = 0;  // payload bytes of WRITEs (atomics count 8)
  // CAS ops that completed with an old value different from the expected one.
  uint64_t compare_swap_failures = 0;

  Stats& operator+=(const Stats& other);
  friend Stats operator+(Stats a, const Stats& b) { return a += b; }
  friend Stats operator-(Stats a, const Stats& b);
  friend bool operator==(const Stats&, const Stats&) = default;
  // One line, "round_trips=3 batches=3 reads=2 ...".
  std::string ToString() const;
};

// What one memory node's pool holds (Cluster::MemoryUsage): what the
// memory node's CPU counts, not what the indexes keep inside their chunks
// (a chunk handed out counts whole, full or not, until it is returned).
struct PoolUsage {
  uint32_t memory_node = 0;
  uint64_t pool_bytes = 0;    // the whole pool: header, catalog and chunks
  uint64_t chunk_bytes = 0;   // bytes of one chunk
  uint64_t total_chunks = 0;  // chunks the pool is cut into
  uint64_t free_chunks = 0;   // chunks in the pool, not handed out
  // Bytes of the chunks handed out and not returned.
  uint64_t bytes_in_use = 0;

  friend bool operator==(const PoolUsage&, const PoolUsage&) = default;
  // One line, "memory_node=0 pool_bytes=... bytes_in_use=...".
  std::string ToString() const;
};

// What one compute node's reclamation of remote memory did since its
// client opened (Client::reclamation_stats; docs/design.md, "Reclaiming
// remote memory"). Counts of this compute node only.
struct ReclamationStats {
  // Objects the indexes unlinked and retired, and their bytes.
  uint64_t retired_objects = 0;
  uint64_t retired_bytes = 0;
  // Retired objects whose grace period ended: given back to an allocator
  // (and through it to the shared free lists) for reuse.
  uint64_t reclaimed_objects = 0;
  uint64_t reclaimed_bytes = 0;
  // Advances of the global epoch made by this node's CAS.
  uint64_t epoch_advances = 0;
  // Advances this node could not make because a node's reservation stood
  // below the global epoch for the lease timeout (a stalled operation, or
  // a node being judged).
  uint64_t held_back = 0;
  // The shared free lists in remote memory (one per memory node and size):
  // bundles and objects taken from them and given to them, objects given
  // up after a push failed (it may have landed), pops and pushes that
  // failed.
  uint64_t shared_bundles_popped = 0;
  uint64_t shared_objects_popped = 0;
  uint64_t shared_bundles_pushed = 0;
  uint64_t shared_objects_pushed = 0;
  uint64_t shared_objects_lost = 0;
  uint64_t shared_failures = 0;
  // Compaction (chunks back to the memory nodes): passes run, chunks they
  // began to drain (their free objects kept off the lists until the chunk
  // empties), chunks given back.
  uint64_t compaction_passes = 0;
  uint64_t chunks_drained = 0;
  uint64_t chunks_returned = 0;

  ReclamationStats& operator+=(const ReclamationStats& other);
  friend ReclamationStats operator+(ReclamationStats a, const ReclamationStats& b) {
    return a += b;
  }
  friend bool operator==(const ReclamationStats&, const ReclamationStats&) = default;
  // One line, "retired_objects=3 retired_bytes=192 ...".
  std::string ToString() const;
};

}  // namespace dmidx

#endif  // DMIDX_STATS_H_
