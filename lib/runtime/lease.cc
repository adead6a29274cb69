#include "lib/runtime/lease.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/publish.h"

namespace dmidx {

Status LeaseOptions::Check() const {
  if (period <= std::chrono::nanoseconds(0)) {
    return Status::InvalidArgument("ClusterOptions.lease.period must be positive, not " +
                                   std::to_string(period.count()) + " ns");
  }
  if (timeout < 2 * period) {
    return Status::InvalidArgument(
        "ClusterOptions.lease.timeout (" + std::to_string(timeout.count()) +
        " ns) must be at least 2 x lease.period (" + std::to_string(period.count()) +
        " ns): a node renews once a period, and one late renewal "
        "must not get it judged dead");
  }
  return Status::Ok();
}

Status ReclamationOptions::Check() const {
  if (cache_window_epochs > kMaxCacheWindowEpochs) {
    return Status::InvalidArgument(
        "ClusterOptions.reclamation.cache_window_epochs must be at most " +
        std::to_string(kMaxCacheWindowEpochs) + ", not " + std::to_string(cache_window_epochs) +
        ": every cache entry would hold freed memory back for that many epochs");
  }
  if (exhausted_wait.count() < 0) {
    return Status::InvalidArgument(
        "ClusterOptions.reclamation.exhausted_wait must not be negative");
  }
  if (compact_bundles_per_pass > kMaxCompactBundlesPerPass) {
    return Status::InvalidArgument("ClusterOptions.reclamation.compact_bundles_per_pass " +
                                   std::to_string(compact_bundles_per_pass) + " exceeds " +
                                   std::to_string(kMaxCompactBundlesPerPass));
  }
  if (max_draining_chunks > kMaxDrainingChunks) {
    return Status::InvalidArgument("ClusterOptions.reclamation.max_draining_chunks " +
                                   std::to_string(max_draining_chunks) + " exceeds " +
                                   std::to_string(kMaxDrainingChunks));
  }
  return Status::Ok();
}

namespace runtime {

using fabric::Op;
using fabric::RemoteAddress;

namespace {

constexpr uint64_t kPageBytes = kLeasePageBytes;

// The lease word's fields (lease.h).
constexpr uint64_t kStateMask = 0x3;
constexpr int kByShift = 2;
constexpr uint64_t kByMask = 0xffff;
constexpr int kHeartbeatShift = 18;

Status Invalid(RemoteAddress record, uint64_t word) {
  return Status::DataLoss("lease record " + record.ToString() + " holds " + std::to_string(word) +
                          ", no lease word");
}

// One CAS of the record's lease word from `expected` to `desired`;
// returns the word found. With `epoch`, a WRITE of the reservation before
// the CAS and a READ of G after it, in the same batch.
StatusOr<Lease> SwapLease(ContextImpl& ctx, RemoteAddress record, uint64_t expected,
                          uint64_t desired, EpochExchange* epoch = nullptr) {
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(4));
  std::array<Op, 3> ops;
  size_t count = 0;
  if (epoch != nullptr) {
    if (epoch->global.node() != record.node()) {
      return Status::InvalidArgument("the global epoch word must sit on the lease record's node");
    }
    words[1] = epoch->reservation;
    words[2] = epoch->cache_floor;
    ops[count++] = Op::Write(record + kLeaseEpochOffset, &words[1], 16);
  }
  ops[count++] = Op::CompareSwap(record + kLeaseWordOffset, &words[0], expected, desired);
  if (epoch != nullptr) ops[count++] = Op::Read(epoch->global, &words[3], 8);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(record.node(), {ops.data(), count}));
  if (epoch != nullptr) epoch->global_seen = words[3];
  if (!Lease::Valid(words[0])) return Invalid(record, words[0]);
  return Lease::Of(words[0]);
}

Lease Dead(const Lease& lease, uint32_t by, LeaseState state = LeaseState::kDead) {
  Lease dead = lease;
  dead.state = state;
  dead.declared_by = by;
  return dead;
}

// A new zeroed object of `bytes` (reused memory is not zeroed) published
// by a CAS of `word` from 0, unless another compute node published one
// first; returns the object published.
StatusOr<RemoteAddress> MakeZeroedAndPublish(ContextImpl& ctx, RemoteAddress word, uint64_t bytes) {
  return MakeAndPublish(
      ctx, word, bytes, /*first_word=*/0,
      [&] { return ctx.allocator().Allocate(bytes, 64, word.node()); },
      [&](RemoteAddress object) { (void)ctx.allocator().Free(object, bytes); });
}

}  // namespace

Lease Lease::Of(uint64_t word) {
  Lease lease;
  lease.state = static_cast<LeaseState>(word & kStateMask);
  lease.heartbeat = word >> kHeartbeatShift;
  const uint64_t by = (word >> kByShift) & kByMask;
  if (by > 0) lease.declared_by = static_cast<uint32_t>(by - 1);
  return lease;
}

bool Lease::Valid(uint64_t word) {
  const Lease lease = Of(word);
  switch (lease.state) {
    case LeaseState::kAbsent:
      return word == 0;
    case LeaseState::kAlive:
      return !lease.declared_by.has_value();
    case LeaseState::kDead:
    case LeaseState::kRecovered:
      return lease.declared_by.has_value();
  }
  return false;
}

uint64_t Lease::word() const {
  uint64_t word = static_cast<uint64_t>(state) | heartbeat << kHeartbeatShift;
  if (declared_by) word |= (uint64_t{*declared_by} + 1) << kByShift;
  return word;
}

std::string Lease::ToString() const {
  switch (state) {
    case LeaseState::kAbsent:
      return "no node";
    case LeaseState::kAlive:
      return "alive (heartbeat " + std::to_string(heartbeat) + ")";
    case LeaseState::kDead:
      return "dead, declared by compute node " + std::to_string(declared_by.value_or(0));
    case LeaseState::kRecovered:
      return "recovered by compute node " + std::to_string(declared_by.value_or(0));
  }
  return "unknown";
}

LeasePages::LeasePages() : pages_(new std::atomic<uint64_t>[kLeasePages]()) {}

RemoteAddress LeasePages::Get(uint32_t page) const {
  return RemoteAddress::FromRaw(pages_[page].load(std::memory_order_acquire));
}

void LeasePages::Set(uint32_t page, RemoteAddress address) {
  pages_[page].store(address.raw(), std::memory_order_release);
}

StatusOr<RemoteAddress> LeaseDirectory(ContextImpl& ctx, LeasePages& pages, bool create) {
  if (const RemoteAddress known = pages.directory(); !known.is_null()) return known;
  StatusOr<RemoteAddress> catalog_word = ctx.compute_node().CatalogWord("dmidx/leases", create);
  if (!catalog_word.ok()) {
    if (catalog_word.status().IsNotFound()) {
      return Status::NotFound("no lease records: no compute node ever joined");
    }
    return catalog_word.status();
  }
  DMIDX_ASSIGN_OR_RETURN(const uint64_t seen, ctx.ReadWord(*catalog_word));
  RemoteAddress directory = RemoteAddress::FromRaw(seen);
  if (directory.is_null()) {
    if (!create) return Status::NotFound("no lease records: the directory is not published yet");
    DMIDX_ASSIGN_OR_RETURN(directory,
                           MakeZeroedAndPublish(ctx, *catalog_word, kLeaseDirectoryBytes));
  }
  pages.set_directory(directory);
  return directory;
}

StatusOr<RemoteAddress> LeaseRecord(ContextImpl& ctx, LeasePages& pages, uint32_t compute_node,
                                    bool create) {
  if (compute_node >= kMaxComputeNodes) {
    return Status::InvalidArgument("no lease record for compute node " +
                                   std::to_string(compute_node) + ": ids run to " +
                                   std::to_string(kMaxComputeNodes - 1));
  }
  const uint32_t page_index = compute_node / kLeasesPerPage;
  const uint64_t offset = uint64_t{compute_node % kLeasesPerPage} * kLeaseRecordBytes;
  if (const RemoteAddress known = pages.Get(page_index); !known.is_null()) return known + offset;
  auto not_found = [&](const std::string& why) {
    return Status::NotFound("no lease record for compute node " + std::to_string(compute_node) +
                            ": " + why);
  };
  StatusOr<RemoteAddress> directory = LeaseDirectory(ctx, pages, create);
  if (!directory.ok()) {
    if (directory.status().IsNotFound()) return not_found("no compute node ever joined");
    return directory.status();
  }
  const RemoteAddress slot = *directory + uint64_t{page_index} * 8;
  DMIDX_ASSIGN_OR_RETURN(const uint64_t seen, ctx.ReadWord(slot));
  RemoteAddress page = RemoteAddress::FromRaw(seen);
  if (page.is_null()) {
    if (!create) {
      return not_found("no node of ids " + std::to_string(page_index * kLeasesPerPage) + " to " +
                       std::to_string((page_index + 1) * kLeasesPerPage - 1) + " ever joined");
    }
    DMIDX_ASSIGN_OR_RETURN(page, MakeZeroedAndPublish(ctx, slot, kPageBytes));
  }
  pages.Set(page_index, page);
  return page + offset;
}

StatusOr<Lease> JoinLease(ContextImpl& ctx, RemoteAddress record, uint32_t compute_node,
                          EpochExchange* epoch) {
  Lease alive;
  alive.state = LeaseState::kAlive;
  alive.heartbeat = 1;
  DMIDX_ASSIGN_OR_RETURN(Lease found, SwapLease(ctx, record, 0, alive.word(), epoch));
  if (found.state == LeaseState::kAbsent) return alive;
  if (found.state == LeaseState::kAlive) {
    // The id's own earlier client (a verbs process opening its next one):
    // a renewal from the word it left.
    DMIDX_ASSIGN_OR_RETURN(const Lease renewed, RenewLease(ctx, record, found, epoch));
    if (renewed.state == LeaseState::kAlive && renewed.heartbeat == found.heartbeat + 1) {
      return renewed;
    }
    found = renewed;
  }
  return Status::FailedPrecondition(
      "the lease record of compute node " + std::to_string(compute_node) + " reads " +
      found.ToString() +
      ": the id was judged dead, and compute-node ids are never reused within a run (on a "
      "verbs cluster, start the process again to join with a new id)");
}

StatusOr<Lease> RenewLease(ContextImpl& ctx, RemoteAddress record, const Lease& last,
                           EpochExchange* epoch) {
  Lease next = last;
  ++next.heartbeat;
  DMIDX_ASSIGN_OR_RETURN(const Lease found,
                         SwapLease(ctx, record, last.word(), next.word(), epoch));
  return found.word() == last.word() ? next : found;
}

StatusOr<LeaseRecordView> ReadLease(ContextImpl& ctx, RemoteAddress record) {
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  const Op read = Op::Read(record + kLeaseWordOffset, words, 16);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(record.node(), {&read, 1}));
  if (!Lease::Valid(words[0])) return Invalid(record, words[0]);
  LeaseRecordView view;
  view.lease = Lease::Of(words[0]);
  if (words[1] != 0) view.recovering = static_cast<uint32_t>(words[1] - 1);
  return view;
}

StatusOr<Lease> DeclareDead(ContextImpl& ctx, RemoteAddress record, const Lease& judged,
                            uint32_t by) {
  if (judged.state != LeaseState::kAlive && judged.state != LeaseState::kAbsent) {
    return Status::InvalidArgument("only a lease judged alive or absent is declared dead, not " +
                                   judged.ToString());
  }
  return SwapLease(ctx, record, judged.word(), Dead(judged, by).word());
}

StatusOr<Lease> TakeOverRecovery(ContextImpl& ctx, RemoteAddress record, uint32_t from,
                                 uint32_t by) {
  // The heartbeat stays what the declaration kept, which only a read tells.
  DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView seen, ReadLease(ctx, record));
  if (seen.lease.state != LeaseState::kDead || seen.lease.declared_by != from) return seen.lease;
  return SwapLease(ctx, record, seen.lease.word(), Dead(seen.lease, by).word());
}

Status NoteRecovering(ContextImpl& ctx, RemoteAddress own_record, std::optional<uint32_t> target) {
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
  *word = target ? uint64_t{*target} + 1 : 0;
  const Op write = Op::Write(own_record + kLeaseRecoveringOffset, word, 8);
  return ctx.Execute(own_record.node(), {&write, 1});
}

Status MarkRecovered(ContextImpl& ctx, RemoteAddress record, uint32_t by) {
  DMIDX_ASSIGN_OR_RETURN(const LeaseRecordView seen, ReadLease(ctx, record));
  const Lease& lease = seen.lease;
  if (lease.state == LeaseState::kDead && lease.declared_by == by) {
    DMIDX_ASSIGN_OR_RETURN(
        const Lease found,
        SwapLease(ctx, record, lease.word(), Dead(lease, by, LeaseState::kRecovered).word()));
    if (found.word() == lease.word()) return Status::Ok();
    return Status::FailedPrecondition("compute node " + std::to_string(by) +
                                      " cannot mark a lease recovered that is " + found.ToString());
  }
  return Status::FailedPrecondition("compute node " + std::to_string(by) +
                                    " cannot mark a lease recovered that is " + lease.ToString());
}

bool LeaseWatch::Expired(uint32_t holder, uint64_t word, std::chrono::nanoseconds now) {
  if (holder_ != holder || word_ != word) {
    holder_ = holder;
    word_ = word;
    since_ = now;
    return false;
  }
  return now - since_ >= timeout_;
}

}  // namespace runtime
}  // namespace dmidx
