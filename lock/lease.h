// Compute-node leases in remote memory (docs/design.md, "Compute-node
// failures"): a record per compute node on the catalog memory node, whose
// heartbeat word its node rewrites on a period and whose state word says
// whether the node is alive, was declared dead (and by whom) or has been
// recovered. Nobody watches the records on the fast path: a context that
// has waited on a word held by node N for long reads N's record, and
// judges it by its own clock (LeaseWatch: no change of the heartbeat for
// the lease timeout means gone; compute nodes share no clock). Declaring a
// node dead is one CAS of its state word, so exactly one survivor wins and
// recovers it.
//
// Layout: records of 32 bytes, kLeasesPerPage to a 4 KiB page; page p is
// published in the catalog word "dmidx/leases/<p>" by its first user (a
// CAS from 0, the loser's page given back), so a run allocates pages only
// for the ids it uses. A record: the heartbeat (0 until the node joins),
// the state word (LeaseState below), two words kept for the node's
// recovery records.
#ifndef DMIDX_LOCK_LEASE_H_
#define DMIDX_LOCK_LEASE_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/context.h"

namespace dmidx::lock {

// A record, and where its words sit in it.
inline constexpr uint32_t kLeaseRecordBytes = 32;
inline constexpr uint32_t kLeaseHeartbeatOffset = 0;
inline constexpr uint32_t kLeaseStateOffset = 8;
// Records to a page (4 KiB), the unit a run allocates as ids come.
inline constexpr uint32_t kLeasesPerPage = 128;

// A record's state word: the state in its low byte and, for dead and
// recovered, the declaring compute node + 1 from bit 16.
enum class LeaseState : uint8_t { kAbsent = 0, kAlive = 1, kDead = 2, kRecovered = 3 };

struct LeaseView {
  uint64_t heartbeat = 0;
  LeaseState state = LeaseState::kAbsent;
  // The compute node that declared it dead (kDead, kRecovered).
  std::optional<uint32_t> declared_by;

  static LeaseView Of(uint64_t heartbeat, uint64_t state_word);
};

// The state word for `state`, declared by `by` where it is kDead or
// kRecovered.
uint64_t LeaseStateWord(LeaseState state, uint32_t by = 0);

// The lease record of `compute_node`: its page found through the catalog,
// made (zeroed, then published) by the first caller that needs it.
// InvalidArgument for an id past the last one the runtime hands out.
StatusOr<fabric::RemoteAddress> LeaseRecord(runtime::ContextImpl& ctx, uint32_t compute_node);

// Takes the record of `compute_node` for it: a CAS of the state word from
// nothing to alive, then heartbeat 1 (two round trips, once per client).
// FailedPrecondition, the record untouched, when it was taken before:
// compute-node ids are never reused within a run, so another incarnation
// had it.
Status JoinLease(runtime::ContextImpl& ctx, fabric::RemoteAddress record, uint32_t compute_node);

// Writes `heartbeat` (larger than the last) and reads the state word back
// in the same batch: a node that finds itself declared dead stops renewing
// and will be fenced.
StatusOr<LeaseView> RenewLease(runtime::ContextImpl& ctx, fabric::RemoteAddress record,
                               uint64_t heartbeat);

StatusOr<LeaseView> ReadLease(runtime::ContextImpl& ctx, fabric::RemoteAddress record);

// Declares the record's node dead on behalf of compute node `by`: a CAS of
// the state word from alive. Returns what the CAS found: alive means this
// call won and `by` recovers the node; anything else is someone else's
// declaration (or no node at all), to wait on.
StatusOr<LeaseView> DeclareDead(runtime::ContextImpl& ctx, fabric::RemoteAddress record,
                                uint32_t by);

// The declarer `by` has recovered the node: a CAS of the state word from
// dead by `by` to recovered. FailedPrecondition, naming the state found,
// when the record is not dead by `by` (another survivor declared it, or
// declared `by` dead in turn and recovers both).
Status MarkRecovered(runtime::ContextImpl& ctx, fabric::RemoteAddress record, uint32_t by);

// An observer's judgement of one lease, by its own clock: the holder is
// gone once its heartbeat has not changed for `timeout` (measured from the
// first reading that saw the current value). A heartbeat that moves, by
// any amount either way, starts the wait again.
class LeaseWatch {
 public:
  explicit LeaseWatch(std::chrono::nanoseconds timeout) : timeout_(timeout) {}
  // One reading of the heartbeat, taken at `now` on the observer's clock.
  // True once the heartbeat has stood still for the timeout.
  bool Expired(uint64_t heartbeat, std::chrono::nanoseconds now);

 private:
  const std::chrono::nanoseconds timeout_;
  std::optional<uint64_t> heartbeat_;
  std::chrono::nanoseconds since_{0};
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_LEASE_H_
