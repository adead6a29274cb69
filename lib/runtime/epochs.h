// Epoch-based reclamation of remote memory across compute nodes
// (docs/design.md, "Reclaiming remote memory").
//
// One global epoch G lives in remote memory (the catalog word
// "dmidx/epoch"). Each compute node keeps a local epoch L, the last G its
// lease keeper read (G <= L + 1 always holds while the node lives), and
// publishes a reservation R in its lease record: no operation of it that
// is still running began before epoch R. Both ride in the lease renewal's
// batch (a WRITE of R and a READ of G beside the CAS), so the fast path
// posts nothing for them.
//
// An operation pins: it stores L in its context's slot (a seq_cst store,
// so the slot is visible before the operation posts its first READ) and
// clears the slot when it ends. R = min(L, every pinned slot), taken by
// the keeper before each renewal.
//
// An object unlinked from every remote structure is retired at epoch
// r = L + 1 (>= G when the unlink landed) and freed once G >= r + 2: by
// then G moved twice past the unlink, and each move needed every counted
// node's R >= the epoch it left, published from a scan of its slots made
// after it read that epoch, so every operation that could have reached the
// object has ended.
//
// Caches hold epochs too (docs/design.md, "Caches hold epochs too"): an
// entry keeps the epoch its filler was pinned at, every object reachable
// from its image is retired at r >= that epoch, and a node publishes, next
// to R, its cache floor C = min(R, its caches' oldest entry); an object is
// freed only once r < C of every counted node as well. The keeper drops
// entries older than L - ReclamationOptions::cache_window_epochs before
// each renewal, so caches hold reclamation back for that long at most; G
// itself moves with the pins alone.
//
// G moves from E to E + 1 by a CAS from E, made by a node's keeper that
// read every counted record's R >= E (the lease records' pages, read in
// the batch that reads G). A record counts unless its lease is absent or
// recovered: a node declared dead still counts until its recoverer has
// fenced it and finished. A live node whose R stays below G holds every
// node's reclamation back; the advancer judges its lease like a waiter
// on its lock would (Membership::Check), so a node that stopped renewing
// is declared dead, fenced and recovered, and no longer counts. A node
// whose keeper renews while one of its operations never ends holds
// reclamation back for as long: `EpochCounters::held_back` counts the
// advances it blocked (each once, however long it blocks it).
#ifndef DMIDX_RUNTIME_EPOCHS_H_
#define DMIDX_RUNTIME_EPOCHS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "dmidx/status.h"
#include "lib/common/spin_lock.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::runtime {

class ContextImpl;
class LeasePages;
class LeaseWatch;
class Membership;
class RemoteAllocator;

// A slot that pins nothing, and a reservation that holds nothing back (a
// client that closed).
inline constexpr uint64_t kUnpinned = ~uint64_t{0};

// An operation followed an address a cache entry filled at `epoch` routed
// it to: lowers its cache slot (ContextImpl::cache_slot) to `epoch`, so
// that its compute node's cache floor stays <= `epoch` until the operation
// ends, even once the entry is dropped. Called under the cache's lock,
// before the lock goes: a drop of the entry, and the keeper's question to
// the cache after it, come after this store, so the keeper's read of the
// slot, after the question (EpochTable::Publish), sees it; a plain store
// is enough. The operation's reservation is left alone: G moves on.
inline void HoldCacheEpoch(std::atomic<uint64_t>& slot, uint64_t epoch) {
  if (epoch < slot.load(std::memory_order_relaxed)) slot.store(epoch, std::memory_order_relaxed);
}

// What a compute node's reclamation did, for stats and tests. Relaxed
// counters.
struct EpochCounters {
  std::atomic<uint64_t> retired{0};  // objects retired
  std::atomic<uint64_t> retired_bytes{0};
  // Objects whose grace period ended, given to an allocator (by the
  // keeper: once it pushed them to the shared lists).
  std::atomic<uint64_t> reclaimed{0};
  std::atomic<uint64_t> reclaimed_bytes{0};
  std::atomic<uint64_t> advances{0};  // G moved by this node's CAS
  std::atomic<uint64_t> scans{0};     // times this node's advancer read every lease record
  // Objects whose grace period had not ended when the client closed,
  // handed to the cluster for another client's keeper to free
  // (ClusterImpl::AdoptOrphans).
  std::atomic<uint64_t> handed_over{0};
  // Objects closed clients left that this node took over (freed here and
  // counted in `reclaimed`, or handed over again).
  std::atomic<uint64_t> adopted{0};
  // Advances this node tried and could not make because a counted node's
  // reservation stood below G for at least the lease timeout (a stalled
  // operation, or a node that stopped renewing and is being judged): each
  // advance once, however many periods it stays held back.
  std::atomic<uint64_t> held_back{0};
  // The node that held the last advance back (id + 1; 0: none yet).
  std::atomic<uint64_t> last_holder{0};
};

// A compute node's local epoch and the pin slots of its contexts (one per
// context number). Thread-safe.
class EpochTable {
 public:
  EpochTable();
  EpochTable(const EpochTable&) = delete;
  EpochTable& operator=(const EpochTable&) = delete;

  // L: the last global epoch this node's keeper read.
  uint64_t local() const { return local_.load(std::memory_order_acquire); }
  const std::atomic<uint64_t>* local_word() const { return &local_; }
  // Raises L to `global` (never lowers it). The keeper only.
  void Observe(uint64_t global);

  // Objects retired at an epoch <= free_bound() may be freed: min(G - 2,
  // every counted node's C - 1), as the advancer last read them.
  uint64_t free_bound() const { return free_bound_.load(std::memory_order_acquire); }
  // Raises the bound (never lowers it). The advancer only.
  void RaiseFreeBound(uint64_t bound);

  // The highest epoch an object of this node was retired at (0: none yet).
  // The keeper moves G on only while free_bound() is below it: once the
  // bound passed every retired object, G stops, whether or not the workers
  // have collected their rings yet.
  uint64_t highest_retired() const { return highest_retired_.load(std::memory_order_acquire); }
  void NoteRetired(uint64_t epoch);

  // Something that keeps epochs across operations (a cache): asked with
  // the oldest epoch it may keep (`keep_from`), it drops what is older and
  // returns the oldest epoch it still keeps (kUnpinned: none).
  using Holder = std::function<uint64_t(uint64_t keep_from)>;
  class HolderHandle;
  // Registered until the handle goes (its destructor waits for a call in
  // progress). Thread-safe.
  std::unique_ptr<HolderHandle> AddHolder(Holder holder);

  // Context number `number` (< kMaxContextsPerComputeNode) pins in
  // `slot` (the context's own word, kUnpinned while it runs nothing), and
  // holds the epoch of the oldest cache entry its operation followed in
  // `cache_slot` (ContextImpl::HoldCacheEpoch; kUnpinned: none), until it
  // calls Unregister. Cold: when a context is made and when it goes.
  void Register(uint32_t number, const std::atomic<uint64_t>* slot,
                const std::atomic<uint64_t>* cache_slot = nullptr);
  void Unregister(uint32_t number);

  // R to publish: min(L, every pinned slot). L is read before the slots,
  // behind a seq_cst fence, so an operation that pinned a value below L
  // after the read of L is still seen.
  uint64_t Reservation() const;

  // What a renewal publishes: R, and C = min(R, every holder's oldest
  // epoch once it dropped those older than L - `window`, every cache
  // slot), the holders asked after the pin slots were read and the cache
  // slots read after the holders were asked.
  struct Published {
    uint64_t reservation = 0;
    uint64_t cache_floor = 0;
  };
  Published Publish(uint64_t window);

  EpochCounters& counters() { return counters_; }
  const EpochCounters& counters() const { return counters_; }

 private:
  std::atomic<uint64_t> local_{0};
  std::atomic<uint64_t> free_bound_{0};
  std::atomic<uint64_t> highest_retired_{0};
  std::mutex holders_mutex_;
  std::list<Holder> holders_;  // guarded by holders_mutex_ (held while they run)
  mutable std::mutex slots_mutex_;
  // By context number: the pin slot and the cache slot. Guarded by
  // slots_mutex_.
  std::vector<std::pair<const std::atomic<uint64_t>*, const std::atomic<uint64_t>*>> slots_;
  EpochCounters counters_;
};

class EpochTable::HolderHandle {
 public:
  ~HolderHandle();
  HolderHandle(const HolderHandle&) = delete;
  HolderHandle& operator=(const HolderHandle&) = delete;

 private:
  friend class EpochTable;
  HolderHandle(EpochTable* table, std::list<Holder>::iterator holder)
      : table_(table), holder_(holder) {}
  EpochTable* const table_;
  const std::list<Holder>::iterator holder_;
};

// Objects one worker retired, oldest first, each with its epoch r; given to
// an allocator once r <= the table's free bound. One per worker, like its
// allocator; its worker retires and collects, and the lease keeper takes
// due entries off every worker's list too (an idle worker's objects come
// back without another retirement of it): a spin lock guards the list,
// held only while entries go on or come off, never while one is freed (a
// free may post a bundle and wait: another coroutine of the thread could
// then want the lock).
class RetiredObjects {
 public:
  struct Entry {
    fabric::RemoteAddress object;
    uint64_t bytes = 0;
    uint64_t alignment = 0;
    uint64_t epoch = 0;
  };
  // Adds `object` at epoch `local + 1` and frees to `allocator` every
  // entry retired at an epoch <= `bound`.
  void Retire(const Entry& entry, uint64_t local, uint64_t bound, RemoteAllocator& allocator,
              EpochCounters& counters, ContextImpl* ctx = nullptr);
  // Frees every entry retired at an epoch <= `bound`; returns how many.
  // With `ctx` (of the allocator's worker), through the allocator's calls
  // that reach the shared free lists (remote_free_list.h).
  uint64_t Collect(uint64_t bound, RemoteAllocator& allocator, EpochCounters& counters,
                   ContextImpl* ctx = nullptr);
  // Appends to `due` every entry retired at an epoch <= `bound`, taken off
  // the list, for the caller to free (Reclaim) once it let go of whatever
  // guards it.
  void TakeDue(uint64_t bound, std::vector<Entry>* due);
  // Gives `entry`, whose grace period ended, to `allocator` (through `ctx`,
  // a context of the allocator's worker, when not null) and counts it
  // reclaimed.
  static void Reclaim(const Entry& entry, RemoteAllocator& allocator, EpochCounters& counters,
                      ContextImpl* ctx);
  // Reclaim's two halves, for a caller that counts only once the objects
  // reached where others take them (ClientImpl::CollectRetired).
  static void GiveBack(const Entry& entry, RemoteAllocator& allocator, ContextImpl* ctx);
  static void CountReclaimed(const Entry& entry, EpochCounters& counters);
  // Entries still waiting.
  size_t waiting() const;
  // Room for `entries` waiting at once without taking memory again (the
  // list grows by doubling; an engine that retires at a steady rate stops
  // growing it once it holds a grace period's worth).
  void Reserve(size_t entries);
  // Hands every waiting entry over, oldest first (a worker that goes).
  std::vector<Entry> TakeAll();
  // Takes over entries another list handed over, keeping epoch order.
  void Adopt(std::vector<Entry> entries);

 private:
  // A ring over ring_, oldest at head_. The *Locked ones with lock_ held.
  void GrowLocked(size_t capacity);
  std::vector<Entry> TakeAllLocked();
  // Takes the oldest entry off into `entry` if it is due by `bound`.
  bool TakeOneDue(uint64_t bound, Entry* entry);
  mutable SpinLock lock_;
  std::vector<Entry> ring_;  // guarded by lock_, as head_ and size_
  size_t head_ = 0;
  size_t size_ = 0;
};

// The free bound a node computes from G and the lowest C of the counted
// nodes (EpochTable::free_bound).
constexpr uint64_t FreeBound(uint64_t global, uint64_t lowest_cache_floor) {
  const uint64_t by_global = global >= 2 ? global - 2 : 0;
  const uint64_t by_caches = lowest_cache_floor >= 1 ? lowest_cache_floor - 1 : 0;
  return by_global < by_caches ? by_global : by_caches;
}

// The keeper's side of one compute node's reclamation: where G is, and the
// advance (TryAdvance) over the lease records. Not thread-safe: the
// keeper's recovery worker runs it.
class EpochAdvancer {
 public:
  // `global`: the catalog word "dmidx/epoch" (GlobalEpochWord).
  EpochAdvancer(uint32_t self, fabric::RemoteAddress global, EpochTable* table,
                Membership* membership, std::chrono::nanoseconds lease_timeout);
  ~EpochAdvancer();
  EpochAdvancer(const EpochAdvancer&) = delete;
  EpochAdvancer& operator=(const EpochAdvancer&) = delete;

  // Reads G and the lease directory in one round trip, then every page it
  // names (as many a round trip as scratch holds), and moves G on by a CAS
  // when every counted reservation is >= G; raises the table's free bound. A live node that held G
  // back has its lease judged (Membership::Check): once its lease stood still for the lease timeout
  // it is declared dead, fenced and recovered. Returns the G this node now knows.
  StatusOr<uint64_t> TryAdvance(ContextImpl& ctx);

 private:
  const uint32_t self_;
  const fabric::RemoteAddress global_;
  EpochTable* const table_;
  Membership* const membership_;
  const std::chrono::nanoseconds lease_timeout_;
  std::unique_ptr<LeasePages> pages_;  // the lease directory's address, once seen
  // The lowest reservation the last attempt found, whose it was, since when
  // it stands, and the watch over its node's lease.
  std::optional<uint32_t> holder_;
  uint64_t held_reservation_ = 0;
  std::chrono::nanoseconds held_since_{0};
  bool hold_counted_ = false;  // in EpochCounters::held_back
  std::unique_ptr<LeaseWatch> watch_;
};

// The catalog word that holds G (made on first use).
StatusOr<fabric::RemoteAddress> GlobalEpochWord(ContextImpl& ctx);

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_EPOCHS_H_
