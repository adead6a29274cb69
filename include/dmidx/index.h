// The interface both range indexes (the B+tree of dmidx/btree.h, the radix
// tree) implement, so an engine or the bench can drive either through one
// shape.
//
// Keys are fixed-size byte strings per index (dmidx/keys.h encodes integers
// order-preservingly), compared as unsigned bytes. Values are any 8 bytes,
// 0 included. Every operation takes the caller's Context (a coroutine of
// Client::Run, which yields on every wait, or a blocking context) and may be
// called from many contexts at once.
//
// What an error says about a change (Insert, Update, Delete, BulkLoad):
//   InvalidArgument, NotFound, FailedPrecondition, ResourceExhausted, Aborted
//       nothing was changed.
//   Unavailable, DeadlineExceeded, IoError, Internal
//       the change may or may not have taken effect (its write may have
//       landed before the connection failed); read the key to learn.
//   DataLoss
//       a node the operation needed is damaged for good: it fails its
//       consistency check while no writer is at work on it (for example a
//       write-back that landed only in part before its writer's connection
//       failed). The message names the node. This call changed nothing, and
//       retrying will not help: every operation that reaches the node gets
//       DataLoss until it is repaired, and repair needs a redo record (the
//       crash-tolerance work; not done yet). Lookups and scans report it too.
// A change whose own write landed returns OK even when a follow-up step
// failed: a B+tree leaf split whose separator could not be added to the
// level above (its lock held by a dead compute node, say) leaves the key
// reachable through the sibling chain, so the Insert succeeded.
#ifndef DMIDX_INDEX_H_
#define DMIDX_INDEX_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/status.h"

namespace dmidx {

struct KeyValue {
  std::string key;
  uint64_t value = 0;
  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

// Operation kinds, for per-kind counters.
enum class IndexOp : uint8_t { kLookup, kInsert, kUpdate, kDelete, kScan, kBulkLoad };
inline constexpr size_t kIndexOpKinds = 6;
// "lookup", "insert", "update", "delete", "scan", "bulk_load".
const char* IndexOpName(IndexOp op);

// What operations cost, summed over the operations of one kind. Counted per
// context, so coroutines sharing a thread do not see each other's traffic;
// exact for a given sequence of operations without contention. Round trips
// and bytes are the one-sided ops; a remote allocator's occasional chunk
// request to a memory node (its control path) is not among them.
struct OpCounters {
  uint64_t operations = 0;     // calls, whatever their status
  uint64_t round_trips = 0;    // sequential network waits
  uint64_t bytes_read = 0;     // READ payload (atomics count 8)
  uint64_t bytes_written = 0;  // WRITE payload (atomics count 8)
  uint64_t lock_retries = 0;   // lock CASes that found the lock held
  uint64_t handovers = 0;      // locks received from a local holder, no remote op
  uint64_t cache_hits = 0;     // routes the compute-side cache answered
  uint64_t cache_misses = 0;   // lookups of the cache that found nothing
  uint64_t cache_stale = 0;    // cached routes found stale and repaired
  uint64_t read_retries = 0;   // READs repeated after a failed consistency check
  // Write-back batches posted again under a lock after a post of them
  // failed (lock::PostAgainHeld: HOCL's Release and WriteBack, the radix
  // tree's in-place update).
  uint64_t reposted_batches = 0;
  // Radix tree (and indexes with RDWC, lock/rdwc.h): lookups answered by
  // another context's READ, writes carried by another context's WRITE (or
  // given up with it on its lock timeout), and
  // CASes of structural changes (slot inserts, splits, type switches,
  // merges) that lost a race and were retried. The radix tree counts its
  // reverse-check failures (cached nodes found changed) in cache_stale.
  uint64_t delegated_reads = 0;
  uint64_t combined_writes = 0;
  uint64_t cas_retries = 0;
  // Compute-node failures (docs/design.md): dead compute nodes this
  // operation's waits declared dead and recovered, and lock words it freed
  // that a dead, recovered compute node still held (with the radix tree's
  // claims and replaced marks it gave back for one).
  uint64_t recoveries = 0;
  uint64_t dead_holds_freed = 0;
  // Time spent waiting for locks, in the cluster clock's ns (virtual under
  // sim): from asking for a lock to holding it, and the part of that spent
  // queued behind this compute node's own holders (HOCL's local queue).
  uint64_t lock_wait_ns = 0;
  uint64_t local_lock_wait_ns = 0;

  OpCounters& operator+=(const OpCounters& other);
  friend OpCounters operator+(OpCounters a, const OpCounters& b) { return a += b; }
  friend OpCounters operator-(OpCounters a, const OpCounters& b);
  friend bool operator==(const OpCounters&, const OpCounters&) = default;
  // "ops=3 round_trips=6 bytes_read=..." on one line.
  std::string ToString() const;
};

// Counters of one index handle (one compute node's view), by operation kind.
struct IndexStats {
  std::array<OpCounters, kIndexOpKinds> by_op{};
  // The longest any operation of this handle waited for a lock.
  uint64_t longest_lock_wait_ns = 0;

  const OpCounters& operator[](IndexOp op) const { return by_op[static_cast<size_t>(op)]; }
  OpCounters& operator[](IndexOp op) { return by_op[static_cast<size_t>(op)]; }
  OpCounters Total() const;
  // Per-kind counters minus `before`'s (for one phase of a run); the
  // longest wait is kept as is.
  friend IndexStats operator-(IndexStats a, const IndexStats& before);
  // One line per kind that ran, plus the longest lock wait.
  std::string ToString() const;
};

class RangeIndex {
 public:
  virtual ~RangeIndex() = default;
  RangeIndex(const RangeIndex&) = delete;
  RangeIndex& operator=(const RangeIndex&) = delete;

  // Sets `key` to `value`, adding it if absent.
  virtual Status Insert(Context& ctx, std::string_view key, uint64_t value) = 0;
  // Sets `key` to `value` if present; NotFound (nothing changed) otherwise.
  virtual Status Update(Context& ctx, std::string_view key, uint64_t value) = 0;
  // Removes `key`; NotFound if absent.
  virtual Status Delete(Context& ctx, std::string_view key) = 0;
  // NotFound if absent.
  virtual Status Lookup(Context& ctx, std::string_view key, uint64_t* value) = 0;

  // Replaces *out with the pairs from <= key <= to (both inclusive), in key
  // order; empty when from > to, and on any error. Not a snapshot: under concurrent writes,
  // every key present for the whole scan appears exactly once, and keys
  // written meanwhile may or may not.
  virtual Status Scan(Context& ctx, std::string_view from, std::string_view to,
                      std::vector<KeyValue>* out) = 0;
  // Replaces *out with the first `count` pairs with key >= from, in order
  // (empty on any error).
  virtual Status Scan(Context& ctx, std::string_view from, size_t count,
                      std::vector<KeyValue>* out) = 0;

  // Loads `sorted` (strictly ascending keys of key_bytes()) into the index,
  // which must be empty, filling nodes to `fill_factor` in (0, 1] of their
  // capacity. Bad input is InvalidArgument and a non-empty index is
  // FailedPrecondition, both before anything changes. Writers racing a bulk
  // load wait for it; readers may see the index empty or partly loaded
  // until it ends.
  virtual Status BulkLoad(Context& ctx, std::span<const KeyValue> sorted, double fill_factor) = 0;

  // Ends this handle's use: later calls return InvalidArgument. Call it
  // when no operation of this handle is in flight. The index itself stays
  // in the cluster; Open it again to use it.
  virtual void Close() = 0;

  virtual uint32_t key_bytes() const = 0;
  virtual IndexStats stats() const = 0;

 protected:
  RangeIndex() = default;
};

}  // namespace dmidx

#endif  // DMIDX_INDEX_H_
