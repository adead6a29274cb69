#include "lock/lease.h"

#include <array>
#include <cstring>
#include <span>
#include <string>

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/compute_node.h"

namespace dmidx::lock {

using fabric::Op;
using fabric::RemoteAddress;

namespace {

constexpr uint64_t kPageBytes = uint64_t{kLeaseRecordBytes} * kLeasesPerPage;
static_assert(kPageBytes == 4096);
constexpr uint32_t kZeroPieces = 8;

// The state word's parts (lease.h).
constexpr uint64_t kStateMask = 0xff;
constexpr int kByShift = 16;

std::string StateName(const LeaseView& view) {
  switch (view.state) {
    case LeaseState::kAbsent:
      return "no node";
    case LeaseState::kAlive:
      return "alive";
    case LeaseState::kDead:
      return "dead, declared by compute node " + std::to_string(view.declared_by.value_or(0));
    case LeaseState::kRecovered:
      return "recovered by compute node " + std::to_string(view.declared_by.value_or(0));
  }
  return "unknown";
}

// Posts `ops` (which put the record's heartbeat and state word into
// words[0] and words[1]) and returns what they read.
StatusOr<LeaseView> Post(runtime::ContextImpl& ctx, RemoteAddress record, std::span<const Op> ops,
                         const uint64_t* words) {
  DMIDX_RETURN_IF_ERROR(ctx.Execute(record.node(), ops));
  return LeaseView::Of(words[0], words[1]);
}

}  // namespace

LeaseView LeaseView::Of(uint64_t heartbeat, uint64_t state_word) {
  LeaseView view;
  view.heartbeat = heartbeat;
  const uint64_t state = state_word & kStateMask;
  view.state = state <= 3 ? static_cast<LeaseState>(state) : LeaseState::kAbsent;
  const uint64_t by = state_word >> kByShift;
  if ((view.state == LeaseState::kDead || view.state == LeaseState::kRecovered) && by > 0) {
    view.declared_by = static_cast<uint32_t>(by - 1);
  }
  return view;
}

uint64_t LeaseStateWord(LeaseState state, uint32_t by) {
  const uint64_t word = static_cast<uint64_t>(state);
  if (state == LeaseState::kDead || state == LeaseState::kRecovered) {
    return word | (uint64_t{by} + 1) << kByShift;
  }
  return word;
}

StatusOr<RemoteAddress> LeaseRecord(runtime::ContextImpl& ctx, uint32_t compute_node) {
  if (compute_node >= runtime::kMaxComputeNodes) {
    return Status::InvalidArgument("no lease record for compute node " +
                                   std::to_string(compute_node) + ": ids run to " +
                                   std::to_string(runtime::kMaxComputeNodes - 1));
  }
  const uint32_t page_index = compute_node / kLeasesPerPage;
  const uint64_t offset = uint64_t{compute_node % kLeasesPerPage} * kLeaseRecordBytes;
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress catalog_word,
                         ctx.compute_node().CatalogWord(
                             "dmidx/leases/" + std::to_string(page_index), /*create=*/true));
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * seen, ctx.arena().Words(1));
  const Op read = Op::Read(catalog_word, seen, 8);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(catalog_word.node(), {&read, 1}));
  if (*seen != 0) return RemoteAddress::FromRaw(*seen) + offset;
  // The first user of the page makes it: zeroed (reused memory is not),
  // then published by CAS; a page that lost the race goes back.
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress page,
                         ctx.allocator().Allocate(kPageBytes, 64, catalog_word.node()));
  {
    // Zeroed from one small buffer, kZeroPieces WRITEs of it in one batch.
    StatusOr<uint8_t*> zeros = ctx.arena().Bytes(kPageBytes / kZeroPieces, 64);
    Status written = zeros.status();
    if (zeros.ok()) {
      std::memset(*zeros, 0, kPageBytes / kZeroPieces);
      std::array<Op, kZeroPieces> writes;
      for (uint32_t i = 0; i < kZeroPieces; ++i)
        writes[i] =
            Op::Write(page + i * (kPageBytes / kZeroPieces), *zeros, kPageBytes / kZeroPieces);
      written = ctx.Execute(page.node(), writes);
    }
    if (!written.ok()) {
      (void)ctx.allocator().Free(page, kPageBytes);
      return written;
    }
  }
  // A failed CAS may have landed: the page is kept then (a published page
  // must not be freed; an unpublished one is a page's worth, once).
  const Op publish = Op::CompareSwap(catalog_word, seen, 0, page.raw());
  DMIDX_RETURN_IF_ERROR(ctx.Execute(catalog_word.node(), {&publish, 1}));
  if (*seen != 0) {
    (void)ctx.allocator().Free(page, kPageBytes);
    return RemoteAddress::FromRaw(*seen) + offset;
  }
  return page + offset;
}

Status JoinLease(runtime::ContextImpl& ctx, RemoteAddress record, uint32_t compute_node) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  // The state first, alone: a join refused must not touch the heartbeat of
  // the record's node (an observer would take the change for a renewal).
  const Op take =
      Op::CompareSwap(record + kLeaseStateOffset, &words[1], 0, LeaseStateWord(LeaseState::kAlive));
  DMIDX_RETURN_IF_ERROR(ctx.Execute(record.node(), {&take, 1}));
  if (words[1] != 0) {
    return Status::FailedPrecondition("the lease record of compute node " +
                                      std::to_string(compute_node) + " was taken before (" +
                                      StateName(LeaseView::Of(0, words[1])) +
                                      "): compute-node ids are never reused within a run");
  }
  words[0] = 1;
  const Op beat = Op::Write(record + kLeaseHeartbeatOffset, &words[0], 8);
  return ctx.Execute(record.node(), {&beat, 1});
}

StatusOr<LeaseView> RenewLease(runtime::ContextImpl& ctx, RemoteAddress record,
                               uint64_t heartbeat) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  words[0] = heartbeat;
  const Op ops[2] = {Op::Write(record + kLeaseHeartbeatOffset, &words[0], 8),
                     Op::Read(record + kLeaseStateOffset, &words[1], 8)};
  return Post(ctx, record, ops, words);
}

StatusOr<LeaseView> ReadLease(runtime::ContextImpl& ctx, RemoteAddress record) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  const Op read = Op::Read(record + kLeaseHeartbeatOffset, words, 16);
  return Post(ctx, record, {&read, 1}, words);
}

StatusOr<LeaseView> DeclareDead(runtime::ContextImpl& ctx, RemoteAddress record, uint32_t by) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(2));
  const Op ops[2] = {
      Op::Read(record + kLeaseHeartbeatOffset, &words[0], 8),
      Op::CompareSwap(record + kLeaseStateOffset, &words[1], LeaseStateWord(LeaseState::kAlive),
                      LeaseStateWord(LeaseState::kDead, by))};
  return Post(ctx, record, ops, words);
}

Status MarkRecovered(runtime::ContextImpl& ctx, RemoteAddress record, uint32_t by) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
  const uint64_t dead = LeaseStateWord(LeaseState::kDead, by);
  const Op cas = Op::CompareSwap(record + kLeaseStateOffset, word, dead,
                                 LeaseStateWord(LeaseState::kRecovered, by));
  DMIDX_RETURN_IF_ERROR(ctx.Execute(record.node(), {&cas, 1}));
  if (*word != dead) {
    return Status::FailedPrecondition("compute node " + std::to_string(by) +
                                      " cannot mark a lease recovered that is " +
                                      StateName(LeaseView::Of(0, *word)));
  }
  return Status::Ok();
}

bool LeaseWatch::Expired(uint64_t heartbeat, std::chrono::nanoseconds now) {
  if (!heartbeat_ || *heartbeat_ != heartbeat) {
    heartbeat_ = heartbeat;
    since_ = now;
    return false;
  }
  return now - since_ >= timeout_;
}

}  // namespace dmidx::lock
