// Arithmetic and printing for structs of uint64_t counters (Stats,
// OpCounters): each struct lists its fields once in a `Fields` function
//   fields(a, b, f) calls f(a.x, b.x, "x") for every counter x,
// and these do the rest.
#ifndef DMIDX_COMMON_COUNTER_FIELDS_H_
#define DMIDX_COMMON_COUNTER_FIELDS_H_

#include <cstdint>
#include <string>

namespace dmidx::counters {

template <typename T, typename Fields>
void Add(T& a, const T& b, Fields fields) {
  fields(a, b, [](uint64_t& x, const uint64_t& y, const char*) { x += y; });
}

template <typename T, typename Fields>
void Subtract(T& a, const T& b, Fields fields) {
  fields(a, b, [](uint64_t& x, const uint64_t& y, const char*) { x -= y; });
}

// "name=value name=value ..." in field order.
template <typename T, typename Fields>
std::string ToString(const T& a, Fields fields) {
  std::string out;
  fields(a, a, [&out](const uint64_t& x, const uint64_t&, const char* name) {
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += std::to_string(x);
  });
  return out;
}

// The fields of Stats, ReclamationStats, PoolUsage (its counters; not
// memory_node) (dmidx/stats.h) and of OpCounters (dmidx/index.h):
// f(field_of_a, field_of_b, name) for every counter, in order. Every place
// that walks the counters (arithmetic, printing, the bench's JSON) uses
// these lists.
inline constexpr auto kStatsFields = [](auto& a, auto& b, auto f) {
  f(a.round_trips, b.round_trips, "round_trips");
  f(a.batches, b.batches, "batches");
  f(a.reads, b.reads, "reads");
  f(a.writes, b.writes, "writes");
  f(a.compare_swaps, b.compare_swaps, "compare_swaps");
  f(a.fetch_adds, b.fetch_adds, "fetch_adds");
  f(a.bytes_read, b.bytes_read, "bytes_read");
  f(a.bytes_written, b.bytes_written, "bytes_written");
  f(a.compare_swap_failures, b.compare_swap_failures, "compare_swap_failures");
};

inline constexpr auto kReclamationFields = [](auto& a, auto& b, auto f) {
  f(a.retired_objects, b.retired_objects, "retired_objects");
  f(a.retired_bytes, b.retired_bytes, "retired_bytes");
  f(a.reclaimed_objects, b.reclaimed_objects, "reclaimed_objects");
  f(a.reclaimed_bytes, b.reclaimed_bytes, "reclaimed_bytes");
  f(a.epoch_advances, b.epoch_advances, "epoch_advances");
  f(a.held_back, b.held_back, "held_back");
  f(a.shared_bundles_popped, b.shared_bundles_popped, "shared_bundles_popped");
  f(a.shared_objects_popped, b.shared_objects_popped, "shared_objects_popped");
  f(a.shared_bundles_pushed, b.shared_bundles_pushed, "shared_bundles_pushed");
  f(a.shared_objects_pushed, b.shared_objects_pushed, "shared_objects_pushed");
  f(a.shared_objects_lost, b.shared_objects_lost, "shared_objects_lost");
  f(a.shared_failures, b.shared_failures, "shared_failures");
  f(a.compaction_passes, b.compaction_passes, "compaction_passes");
  f(a.chunks_drained, b.chunks_drained, "chunks_drained");
  f(a.chunks_returned, b.chunks_returned, "chunks_returned");
};

inline constexpr auto kPoolUsageFields = [](auto& a, auto& b, auto f) {
  f(a.pool_bytes, b.pool_bytes, "pool_bytes");
  f(a.chunk_bytes, b.chunk_bytes, "chunk_bytes");
  f(a.total_chunks, b.total_chunks, "total_chunks");
  f(a.free_chunks, b.free_chunks, "free_chunks");
  f(a.bytes_in_use, b.bytes_in_use, "bytes_in_use");
};

inline constexpr auto kOpCounterFields = [](auto& a, auto& b, auto f) {
  f(a.operations, b.operations, "ops");
  f(a.round_trips, b.round_trips, "round_trips");
  f(a.bytes_read, b.bytes_read, "bytes_read");
  f(a.bytes_written, b.bytes_written, "bytes_written");
  f(a.lock_retries, b.lock_retries, "lock_retries");
  f(a.handovers, b.handovers, "handovers");
  f(a.cache_hits, b.cache_hits, "cache_hits");
  f(a.cache_misses, b.cache_misses, "cache_misses");
  f(a.cache_stale, b.cache_stale, "cache_stale");
  f(a.read_retries, b.read_retries, "read_retries");
  f(a.reposted_batches, b.reposted_batches, "reposted_batches");
  f(a.delegated_reads, b.delegated_reads, "delegated_reads");
  f(a.combined_writes, b.combined_writes, "combined_writes");
  f(a.cas_retries, b.cas_retries, "cas_retries");
  f(a.recoveries, b.recoveries, "recoveries");
  f(a.dead_holds_freed, b.dead_holds_freed, "dead_holds_freed");
  f(a.lock_wait_ns, b.lock_wait_ns, "lock_wait_ns");
  f(a.local_lock_wait_ns, b.local_lock_wait_ns, "local_lock_wait_ns");
};

}  // namespace dmidx::counters

#endif  // DMIDX_COMMON_COUNTER_FIELDS_H_
