#include "lib/runtime/epochs.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/context.h"
#include "lib/runtime/lease.h"
#include "lib/runtime/membership.h"
#include "lib/runtime/remote_allocator.h"

namespace dmidx::runtime {

using fabric::Op;
using fabric::RemoteAddress;

namespace {}  // namespace

// ---- EpochTable ------------------------------------------------------------

EpochTable::EpochTable() = default;

void EpochTable::Observe(uint64_t global) {
  uint64_t seen = local_.load(std::memory_order_relaxed);
  // The keeper's two workers may both observe: never lower L.
  while (seen < global && !local_.compare_exchange_weak(seen, global, std::memory_order_acq_rel)) {
  }
}

void EpochTable::RaiseFreeBound(uint64_t bound) {
  uint64_t seen = free_bound_.load(std::memory_order_relaxed);
  while (seen < bound &&
         !free_bound_.compare_exchange_weak(seen, bound, std::memory_order_acq_rel)) {
  }
}

void EpochTable::NoteRetired(uint64_t epoch) {
  uint64_t seen = highest_retired_.load(std::memory_order_relaxed);
  while (seen < epoch &&
         !highest_retired_.compare_exchange_weak(seen, epoch, std::memory_order_acq_rel)) {
  }
}

std::unique_ptr<EpochTable::HolderHandle> EpochTable::AddHolder(Holder holder) {
  std::lock_guard<std::mutex> guard(holders_mutex_);
  holders_.push_back(std::move(holder));
  return std::unique_ptr<HolderHandle>(new HolderHandle(this, std::prev(holders_.end())));
}

EpochTable::HolderHandle::~HolderHandle() {
  std::lock_guard<std::mutex> guard(table_->holders_mutex_);
  table_->holders_.erase(holder_);
}

EpochTable::Published EpochTable::Publish(uint64_t window) {
  Published published;
  published.reservation = Reservation();
  // After the slots: an entry a cache takes after this is an operation's
  // pinned then (R counts it) or pinned later, at an epoch no object it
  // reaches was retired before.
  const uint64_t local = local_.load(std::memory_order_acquire);
  const uint64_t keep_from = local >= window ? local - window : 0;
  uint64_t floor = published.reservation;
  {
    std::lock_guard<std::mutex> guard(holders_mutex_);
    for (const Holder& holder : holders_)
      floor = std::min(floor, holder(keep_from));
  }
  // After the holders: an operation routed by an entry a holder dropped
  // (an eviction, an expiry, before or while it was asked) stored the
  // entry's epoch in its cache slot under that cache's lock, before the
  // drop; the holder took the lock after it, so this read sees the store.
  // An operation routed by an entry still held was counted by its holder.
  {
    std::lock_guard<std::mutex> guard(slots_mutex_);
    for (const auto& slots : slots_) {
      if (slots.second != nullptr) {
        floor = std::min(floor, slots.second->load(std::memory_order_acquire));
      }
    }
  }
  published.cache_floor = floor;
  return published;
}

void EpochTable::Register(uint32_t number, const std::atomic<uint64_t>* slot,
                          const std::atomic<uint64_t>* cache_slot) {
  assert(number < kMaxContextsPerComputeNode);
  std::lock_guard<std::mutex> guard(slots_mutex_);
  if (slots_.size() <= number) slots_.resize(number + 1, {nullptr, nullptr});
  slots_[number] = {slot, cache_slot};
}

void EpochTable::Unregister(uint32_t number) {
  std::lock_guard<std::mutex> guard(slots_mutex_);
  if (number < slots_.size()) slots_[number] = {nullptr, nullptr};
}

uint64_t EpochTable::Reservation() const {
  // Every load here and every pin's store are seq_cst: one total order, so
  // a slot read after L sees any pin stored before it (no fence needed;
  // ThreadSanitizer refuses fences).
  uint64_t reservation = local_.load(std::memory_order_seq_cst);
  std::lock_guard<std::mutex> guard(slots_mutex_);
  for (const auto& slots : slots_) {
    if (slots.first != nullptr) {
      reservation = std::min(reservation, slots.first->load(std::memory_order_seq_cst));
    }
  }
  return reservation;
}

// ---- RetiredObjects --------------------------------------------------------

void RetiredObjects::Retire(const Entry& entry, uint64_t local, uint64_t bound,
                            RemoteAllocator& allocator, EpochCounters& counters, ContextImpl* ctx) {
  bool due = false;  // whether Collect would take any
  {
    std::lock_guard<SpinLock> guard(lock_);
    if (size_ == ring_.size()) GrowLocked(std::max<size_t>(64, 2 * ring_.size()));
    Entry& retired = ring_[(head_ + size_) % ring_.size()];
    retired = entry;
    retired.epoch = local + 1;
    ++size_;
    // Entries are in epoch order: the oldest tells. Asked here, under the
    // lock already held, a retire with nothing due takes no other lock
    // (about 60 instructions of a radix delete). Nothing can make an
    // entry due for this `bound` meanwhile: only takers change the ring's
    // head.
    due = ring_[head_].epoch <= bound;
  }
  counters.retired.fetch_add(1, std::memory_order_relaxed);
  counters.retired_bytes.fetch_add(entry.bytes, std::memory_order_relaxed);
  if (due) Collect(bound, allocator, counters, ctx);
}

bool RetiredObjects::TakeOneDue(uint64_t bound, Entry* entry) {
  std::lock_guard<SpinLock> guard(lock_);
  // Entries are in epoch order: L only grows.
  if (size_ == 0 || ring_[head_].epoch > bound) return false;
  *entry = ring_[head_];
  head_ = (head_ + 1) % ring_.size();
  --size_;
  return true;
}

uint64_t RetiredObjects::Collect(uint64_t bound, RemoteAllocator& allocator,
                                 EpochCounters& counters, ContextImpl* ctx) {
  uint64_t freed = 0;
  // Off the list before it is freed, one at a time: a free through `ctx`
  // may push a bundle, and while its round trip runs another coroutine of
  // this worker may retire or collect (it must find the lock free, and
  // must not free this entry again).
  for (Entry entry; TakeOneDue(bound, &entry); ++freed)
    Reclaim(entry, allocator, counters, ctx);
  return freed;
}

void RetiredObjects::TakeDue(uint64_t bound, std::vector<Entry>* due) {
  std::lock_guard<SpinLock> guard(lock_);
  while (size_ != 0 && ring_[head_].epoch <= bound) {
    due->push_back(ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    --size_;
  }
}

void RetiredObjects::Reclaim(const Entry& entry, RemoteAllocator& allocator,
                             EpochCounters& counters, ContextImpl* ctx) {
  GiveBack(entry, allocator, ctx);
  CountReclaimed(entry, counters);
}

void RetiredObjects::GiveBack(const Entry& entry, RemoteAllocator& allocator, ContextImpl* ctx) {
  // An entry Free refuses was never an object of an allocator: it is
  // dropped, as freeing it would hand out memory nobody owns.
  if (ctx != nullptr) {
    (void)allocator.Free(*ctx, entry.object, entry.bytes, entry.alignment);
  } else {
    (void)allocator.Free(entry.object, entry.bytes, entry.alignment);
  }
}

void RetiredObjects::CountReclaimed(const Entry& entry, EpochCounters& counters) {
  counters.reclaimed.fetch_add(1, std::memory_order_relaxed);
  counters.reclaimed_bytes.fetch_add(entry.bytes, std::memory_order_relaxed);
}

size_t RetiredObjects::waiting() const {
  std::lock_guard<SpinLock> guard(lock_);
  return size_;
}

void RetiredObjects::Reserve(size_t entries) {
  std::lock_guard<SpinLock> guard(lock_);
  if (entries > ring_.size()) GrowLocked(entries);
}

void RetiredObjects::GrowLocked(size_t capacity) {
  // The entries in order from index 0: the part from the head to the
  // ring's end, then the part that wrapped around (two copies, not one
  // push_back per entry).
  std::vector<Entry> entries;
  entries.reserve(std::max(capacity, size_));
  const size_t first = std::min(size_, ring_.size() - head_);
  entries.insert(entries.end(), ring_.begin() + static_cast<ptrdiff_t>(head_),
                 ring_.begin() + static_cast<ptrdiff_t>(head_ + first));
  entries.insert(entries.end(), ring_.begin(),
                 ring_.begin() + static_cast<ptrdiff_t>(size_ - first));
  entries.resize(std::max(capacity, size_));
  ring_ = std::move(entries);
  head_ = 0;
}

std::vector<RetiredObjects::Entry> RetiredObjects::TakeAll() {
  std::lock_guard<SpinLock> guard(lock_);
  return TakeAllLocked();
}

std::vector<RetiredObjects::Entry> RetiredObjects::TakeAllLocked() {
  std::vector<Entry> all;
  all.reserve(ring_.size());
  for (size_t i = 0; i < size_; ++i)
    all.push_back(ring_[(head_ + i) % ring_.size()]);
  ring_.clear();
  head_ = 0;
  size_ = 0;
  return all;
}

void RetiredObjects::Adopt(std::vector<Entry> entries) {
  const auto by_epoch = [](const Entry& a, const Entry& b) { return a.epoch < b.epoch; };
  std::lock_guard<SpinLock> guard(lock_);
  std::vector<Entry> mine = TakeAllLocked();
  std::vector<Entry> merged;
  merged.reserve(mine.size() + entries.size());
  std::merge(mine.begin(), mine.end(), entries.begin(), entries.end(), std::back_inserter(merged),
             by_epoch);
  size_ = merged.size();
  ring_ = std::move(merged);
}

// ---- EpochAdvancer ---------------------------------------------------------

StatusOr<RemoteAddress> GlobalEpochWord(ContextImpl& ctx) {
  return ctx.compute_node().CatalogWord("dmidx/epoch", /*create=*/true);
}

EpochAdvancer::EpochAdvancer(uint32_t self, RemoteAddress global, EpochTable* table,
                             Membership* membership, std::chrono::nanoseconds lease_timeout)
    : self_(self),
      global_(global),
      table_(table),
      membership_(membership),
      lease_timeout_(lease_timeout),
      pages_(std::make_unique<LeasePages>()) {}

EpochAdvancer::~EpochAdvancer() = default;

StatusOr<uint64_t> EpochAdvancer::TryAdvance(ContextImpl& ctx) {
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress directory, LeaseDirectory(ctx, *pages_, false));
  ScratchArena::Scope scope(ctx.arena());
  // G before the directory, in one batch (placed in post order): a page
  // published after the directory's READ belongs to nodes that joined
  // after it, each of which read a G at least this one first (JoinLease),
  // so leaving them out keeps G <= L + 1 for them.
  DMIDX_ASSIGN_OR_RETURN(uint64_t * head, ctx.arena().Words(1 + kLeasePages));
  if (directory.node() != global_.node()) {
    return Status::Internal("the lease directory and G sit on different memory nodes");
  }
  const Op first[2] = {Op::Read(global_, head, 8),
                       Op::Read(directory, head + 1, kLeaseDirectoryBytes)};
  DMIDX_RETURN_IF_ERROR(ctx.Execute(global_.node(), first));
  const uint64_t global = head[0];
  table_->Observe(global);
  // The lowest counted reservation, and whose it is; the lowest cache
  // floor. Pages are read as many at a time as scratch holds.
  std::optional<uint32_t> holder;
  uint64_t lowest = kUnpinned;
  uint64_t lowest_floor = kUnpinned;
  const size_t per_batch =
      std::max<size_t>(1, ctx.arena().Fits(kLeasePageBytes, 64) / kLeasePageBytes);
  std::vector<uint32_t> batch;
  auto read_batch = [&]() -> Status {
    ScratchArena::Scope pages_scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint8_t * images, ctx.arena().Bytes(batch.size() * kLeasePageBytes, 64));
    std::vector<Op> reads;
    for (size_t i = 0; i < batch.size(); ++i) {
      reads.push_back(Op::Read(RemoteAddress::FromRaw(head[1 + batch[i]]),
                               images + i * kLeasePageBytes, kLeasePageBytes));
    }
    DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(reads));
    for (size_t i = 0; i < batch.size(); ++i) {
      for (uint32_t r = 0; r < kLeasesPerPage; ++r) {
        uint64_t record[kLeaseRecordBytes / 8];
        std::memcpy(record, images + i * kLeasePageBytes + r * kLeaseRecordBytes,
                    kLeaseRecordBytes);
        const uint32_t id = batch[i] * kLeasesPerPage + r;
        const uint64_t word = record[kLeaseWordOffset / 8];
        if (!Lease::Valid(word)) {
          return Status::DataLoss("the lease record of compute node " + std::to_string(id) +
                                  " holds " + std::to_string(word) + ", no lease word");
        }
        const LeaseState state = Lease::Of(word).state;
        if (state == LeaseState::kAbsent || state == LeaseState::kRecovered) continue;
        const uint64_t reservation = record[kLeaseEpochOffset / 8];
        if (reservation < lowest) {
          lowest = reservation;
          holder = id;
        }
        lowest_floor = std::min(lowest_floor, record[kLeaseCacheFloorOffset / 8]);
      }
    }
    batch.clear();
    return Status::Ok();
  };
  for (uint32_t page = 0; page < kLeasePages; ++page) {
    if (head[1 + page] == 0) continue;
    batch.push_back(page);
    if (batch.size() == per_batch) DMIDX_RETURN_IF_ERROR(read_batch());
  }
  if (!batch.empty()) DMIDX_RETURN_IF_ERROR(read_batch());
  table_->counters().scans.fetch_add(1, std::memory_order_relaxed);
  table_->RaiseFreeBound(FreeBound(global, lowest_floor));
  if (lowest >= global) {
    holder_.reset();
    DMIDX_ASSIGN_OR_RETURN(uint64_t * found, ctx.arena().Words(1));
    const Op cas = Op::CompareSwap(global_, found, global, global + 1);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(global_.node(), {&cas, 1}));
    if (*found == global) {
      table_->counters().advances.fetch_add(1, std::memory_order_relaxed);
      return global + 1;
    }
    return *found;
  }
  // Each advance leaves every node's reservation one behind until its next
  // renewals: only a holder whose reservation stood still for the lease
  // timeout holds reclamation back.
  const std::chrono::nanoseconds now = ctx.Now();
  if (holder_ != holder || held_reservation_ != lowest) {
    holder_ = holder;
    held_reservation_ = lowest;
    held_since_ = now;
    hold_counted_ = false;
    watch_ = std::make_unique<LeaseWatch>(lease_timeout_);
    return global;
  }
  if (now - held_since_ < lease_timeout_) return global;
  if (!hold_counted_) {
    // The advance from G is held back: counted once, however many periods
    // it stays held.
    hold_counted_ = true;
    EpochCounters& counters = table_->counters();
    counters.held_back.fetch_add(1, std::memory_order_relaxed);
    counters.last_holder.store(uint64_t{*holder} + 1, std::memory_order_relaxed);
  }
  // Its own operation: it ends, or the node does. Another node's: one that
  // stopped renewing is declared dead and recovered (then it no longer
  // counts); one that renews is left to finish its operation.
  if (*holder != self_ && membership_ != nullptr && membership_->MayJudge(ctx)) {
    DMIDX_RETURN_IF_ERROR(membership_->Check(ctx, *holder, *watch_).status());
  }
  return global;
}

}  // namespace dmidx::runtime
