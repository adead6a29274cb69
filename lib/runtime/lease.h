// Compute-node leases in remote memory (docs/design.md, "Compute-node
// failures"): a record per compute node on the catalog memory node, whose
// lease word its node renews on a period and which says whether the node
// is alive, was declared dead (and by whom) or has been recovered. Nobody
// watches the records on the fast path: a context that finds a word held
// by node N reads N's lease word, and reads it again once `lease_timeout`
// has passed on its own clock (LeaseWatch); unchanged means gone (compute
// nodes share no clock). Declaring a node dead is one CAS from exactly the
// word the observer judged, so exactly one survivor wins, and a node that
// renewed meanwhile is not declared.
//
// The lease word is one 64-bit word, so it is never torn and every change
// is one CAS: the state in bits 0-1 (LeaseState), the declarer's id + 1 in
// bits 2-17 (dead and recovered), a heartbeat count in bits 18-63. A
// renewal is a CAS from the word its node last wrote to the next count: it
// fails, and tells the node, once anyone else changed the word.
//
// Layout: records of 64 bytes, kLeasesPerPage to a 4 KiB page. The
// catalog word "dmidx/leases" names a directory of kLeasePages words, made
// (zeroed) and published by the first joiner; word p names page p, made
// and published by a CAS from 0 by the first joiner of its ids (the
// loser's page given back). So a run allocates pages only for the ids it
// uses, a lookup that finds no page finds no node, and one READ of the
// directory finds every page (the epoch advancer's: epochs.h). A record:
// the lease word, then the id + 1 of the node whose recovery its node is
// doing (0: none), then the address of the node's directory of redo-record
// slots and that directory's shape (lock/redo_log.h; 0 until the node
// records its first change, and read only by its recoverer), then the
// node's epoch reservation and cache floor (epochs.h; kUnpinned once its
// client closed), then unused words.
#ifndef DMIDX_RUNTIME_LEASE_H_
#define DMIDX_RUNTIME_LEASE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/context.h"

namespace dmidx::runtime {

// A record, and where its words sit in it.
inline constexpr uint32_t kLeaseRecordBytes = 64;
inline constexpr uint32_t kLeaseWordOffset = 0;
inline constexpr uint32_t kLeaseRecoveringOffset = 8;
inline constexpr uint32_t kLeaseRedoDirectoryOffset = 16;
inline constexpr uint32_t kLeaseRedoShapeOffset = 24;
inline constexpr uint32_t kLeaseEpochOffset = 32;
inline constexpr uint32_t kLeaseCacheFloorOffset = 40;
static_assert(kLeaseCacheFloorOffset == kLeaseEpochOffset + 8, "written as one 16-byte WRITE");
static_assert(kLeaseCacheFloorOffset + 8 <= kLeaseRecordBytes);
// Records to a page (4 KiB), the unit a run allocates as ids come, and
// the pages of the directory.
inline constexpr uint32_t kLeasesPerPage = 64;
inline constexpr uint64_t kLeasePageBytes = uint64_t{kLeaseRecordBytes} * kLeasesPerPage;
static_assert(kLeasePageBytes == 4096);
inline constexpr uint32_t kLeasePages = (kMaxComputeNodes + kLeasesPerPage - 1) / kLeasesPerPage;
inline constexpr uint64_t kLeaseDirectoryBytes = uint64_t{kLeasePages} * 8;

// What a lease join or renewal carries in its batch besides the CAS
// (epochs.h): a WRITE of the node's epoch reservation and cache floor
// before it and a READ of the global epoch after it. `global` must be on
// the record's memory node (both are on the catalog's).
struct EpochExchange {
  fabric::RemoteAddress global;
  uint64_t reservation = 0;
  uint64_t cache_floor = 0;
  uint64_t global_seen = 0;  // set once the batch completed
};

// kAbsent is the word 0: no node ever joined with the record's id.
enum class LeaseState : uint8_t { kAbsent = 0, kAlive = 1, kDead = 2, kRecovered = 3 };

// A lease word, decoded.
struct Lease {
  LeaseState state = LeaseState::kAbsent;
  uint64_t heartbeat = 0;
  // The compute node that declared it dead (kDead, kRecovered).
  std::optional<uint32_t> declared_by;

  static Lease Of(uint64_t word);
  // Whether `word` is one the functions below write: 0, alive with no
  // declarer, or dead or recovered with one. Readers report anything else
  // as DataLoss.
  static bool Valid(uint64_t word);
  uint64_t word() const;
  // "alive (heartbeat 7)", "dead, declared by compute node 3", ...
  std::string ToString() const;
};

// The page addresses a compute node has seen (pages never move once
// published), so that only a page's first lookup asks the catalog (a
// control-path message on verbs). Kept by whoever looks records up, one
// per compute node; thread-safe.
class LeasePages {
 public:
  LeasePages();
  // The page's address, null until seen.
  fabric::RemoteAddress Get(uint32_t page) const;
  void Set(uint32_t page, fabric::RemoteAddress address);
  // The directory's address, null until seen.
  fabric::RemoteAddress directory() const {
    return fabric::RemoteAddress::FromRaw(directory_.load(std::memory_order_acquire));
  }
  void set_directory(fabric::RemoteAddress address) {
    directory_.store(address.raw(), std::memory_order_release);
  }

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> pages_;
  std::atomic<uint64_t> directory_{0};
};

// The directory of lease pages; with `create`, made if no node made it
// yet; without, NotFound when none did.
StatusOr<fabric::RemoteAddress> LeaseDirectory(ContextImpl& ctx, LeasePages& pages, bool create);

// The lease record of `compute_node`. With `create`, its page is made
// (zeroed, then published) if it has none yet; without, NotFound when no
// node of that page ever joined. InvalidArgument for an id past the last
// one the runtime hands out.
StatusOr<fabric::RemoteAddress> LeaseRecord(ContextImpl& ctx, LeasePages& pages,
                                            uint32_t compute_node, bool create);

// Takes the record for `compute_node`: a CAS of its lease word from 0 to
// alive with heartbeat 1, or, when the word reads alive (the id's earlier
// client: a verbs process keeps its id for its next client after a
// settled close, ClusterBackend::DetachClient, and a client that closes
// stops renewing without giving its lease up, so that what it may still
// hold is recovered like a dead node's), a renewal from that word.
// Returns the word it wrote, the first a renewal starts from.
// FailedPrecondition, the lease word untouched, when the id was declared
// dead. With `epoch`, the batch also writes the reservation and reads G.
StatusOr<Lease> JoinLease(ContextImpl& ctx, fabric::RemoteAddress record, uint32_t compute_node,
                          EpochExchange* epoch = nullptr);

// The node's renewal: a CAS of its lease word from `last` (the word its
// last join or renewal wrote) to the next heartbeat. Returns the word now
// there: `last` one beat on when it renewed; otherwise what someone else
// made of it (declared dead: the node stops renewing, and is fenced).
// With `epoch`, the batch also writes the reservation and reads G.
StatusOr<Lease> RenewLease(ContextImpl& ctx, fabric::RemoteAddress record, const Lease& last,
                           EpochExchange* epoch = nullptr);

// The lease word and the id the record's node is recovering, if any.
struct LeaseRecordView {
  Lease lease;
  std::optional<uint32_t> recovering;
};
StatusOr<LeaseRecordView> ReadLease(ContextImpl& ctx, fabric::RemoteAddress record);

// Declares the record's node dead on behalf of compute node `by`: a CAS
// from `judged`, the word the observer found unchanged for the lease
// timeout (alive, or absent: a lock word may name a node that died before
// it joined). Returns the word the CAS found: equal to `judged` means this
// call won and `by` recovers the node (after fencing it); anything else
// means the node renewed (judge again) or someone else declared it (wait
// for recovered, and watch the declarer's own lease).
StatusOr<Lease> DeclareDead(ContextImpl& ctx, fabric::RemoteAddress record, const Lease& judged,
                            uint32_t by);

// Compute node `by` takes over a recovery: the record is dead by `from`,
// whom `by` has declared dead and fenced in turn. A CAS from dead-by-`from`
// to dead-by-`by`, the heartbeat kept. Returns the word found (equal to
// dead-by-`from`: taken over).
StatusOr<Lease> TakeOverRecovery(ContextImpl& ctx, fabric::RemoteAddress record, uint32_t from,
                                 uint32_t by);

// What the record's node (a recoverer) is recovering: `target`'s id, or
// none. Written before it starts and cleared after it marks the target
// recovered, so whoever recovers the recoverer finds the target.
Status NoteRecovering(ContextImpl& ctx, fabric::RemoteAddress own_record,
                      std::optional<uint32_t> target);

// The declarer `by` has recovered the node: a CAS of the lease word from
// dead-by-`by` to recovered-by-`by`. FailedPrecondition, naming the state
// found, when the record is not dead by `by`.
Status MarkRecovered(ContextImpl& ctx, fabric::RemoteAddress record, uint32_t by);

// An observer's judgement of one holder's lease, by its own clock: gone
// once the same holder's lease word has stood unchanged for `timeout`,
// measured from the first reading that saw that word. A different holder,
// or any change of the word, starts the wait again.
class LeaseWatch {
 public:
  explicit LeaseWatch(std::chrono::nanoseconds timeout) : timeout_(timeout) {}
  // One reading of `holder`'s lease word, taken at `now` on the observer's
  // clock. True once it has stood unchanged for the timeout.
  bool Expired(uint32_t holder, uint64_t word, std::chrono::nanoseconds now);

 private:
  const std::chrono::nanoseconds timeout_;
  std::optional<uint32_t> holder_;
  uint64_t word_ = 0;
  std::chrono::nanoseconds since_{0};
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_LEASE_H_
