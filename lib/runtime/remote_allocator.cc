#include "lib/runtime/remote_allocator.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/context.h"

namespace dmidx::runtime {
namespace {

using FreeLists = std::map<std::pair<uint16_t, uint64_t>, std::vector<fabric::RemoteAddress>>;

constexpr uint64_t kMaxAlignment = 4096;
// Pops tried when the memory node has no chunk left and the shared list
// only failed (each pop itself makes kMaxPopAttempts attempts).
constexpr uint32_t kPopsWhenExhausted = 8;
// Seal words one batch of a compaction READs or one flush WRITEs (each a
// word of the context's arena).
constexpr uint32_t kSealOpsPerBatch = 64;

constexpr uint64_t RoundUp(uint64_t value, uint64_t power_of_two) {
  return (value + power_of_two - 1) & ~(power_of_two - 1);
}

bool ValidAlignment(uint64_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= kMaxAlignment;
}

Status ValidateRequest(uint64_t bytes, uint64_t alignment) {
  if (bytes == 0) return Status::InvalidArgument("cannot allocate 0 bytes");
  if (!ValidAlignment(alignment)) {
    return Status::InvalidArgument("alignment " + std::to_string(alignment) +
                                   " is not a power of two of at most " +
                                   std::to_string(kMaxAlignment));
  }
  return Status::Ok();
}

// Checked before rounding so a huge size cannot wrap around.
bool FitsInChunk(uint64_t chunk_bytes, uint64_t bytes, uint64_t alignment) {
  return bytes <= chunk_bytes && RoundUp(bytes, alignment) <= chunk_bytes;
}

std::string NodeName(uint16_t node) {
  return "mn" + std::to_string(node);
}

// Takes an object of `size` bytes on `node` that is aligned to `alignment`.
// (Forced inline: the first look of every allocation; a call cost a warm
// insert about 10 instructions.)
[[gnu::always_inline]] inline std::optional<fabric::RemoteAddress> TakeFree(FreeLists& free_lists,
                                                                            uint16_t node,
                                                                            uint64_t size,
                                                                            uint64_t alignment) {
  auto list = free_lists.find({node, size});
  if (list == free_lists.end()) return std::nullopt;
  std::vector<fabric::RemoteAddress>& objects = list->second;
  // One list holds every object of this rounded size, whatever alignment it
  // was freed with, so the newest one that is aligned enough wins.
  for (size_t i = objects.size(); i-- > 0;) {
    if (objects[i].offset() % alignment != 0) continue;
    const fabric::RemoteAddress object = objects[i];
    objects[i] = objects.back();
    objects.pop_back();
    if (objects.empty()) free_lists.erase(list);
    return object;
  }
  return std::nullopt;
}

// Bumps `used` within `chunk`, or nullopt when the rest of the chunk is too small.
std::optional<fabric::RemoteAddress> Carve(fabric::RemoteAddress chunk, uint64_t chunk_bytes,
                                           uint64_t& used, uint64_t size, uint64_t alignment) {
  if (chunk.is_null()) return std::nullopt;
  // Chunks are 4 KiB aligned, so aligning the offset within the chunk aligns
  // the address for any permitted alignment.
  const uint64_t begin = RoundUp(used, alignment);
  if (begin > chunk_bytes || chunk_bytes - begin < size) return std::nullopt;
  used = begin + size;
  return chunk + begin;
}

// Carve within `cursor` (a RemoteAllocator::Cursor of a node whose chunks
// are `chunk_bytes`), counting the object, and marking the chunk shared
// when `shared` (carved for a context).
template <typename Cursor>
std::optional<fabric::RemoteAddress> CarveCursor(Cursor& cursor, uint64_t chunk_bytes,
                                                 uint64_t size, uint64_t alignment, bool shared) {
  std::optional<fabric::RemoteAddress> carved =
      Carve(cursor.chunk, chunk_bytes, cursor.used, size, alignment);
  if (carved) {
    ++cursor.carved;
    cursor.shared |= shared;
  }
  return carved;
}

}  // namespace

RemoteAllocator::RemoteAllocator(std::vector<memnode::MemoryNodeControl*> nodes,
                                 uint32_t first_node, RemoteAllocatorOptions options)
    : nodes_(std::move(nodes)),
      options_(options),
      shared_(nodes_,
              {[this](uint16_t node) { return CarvePage(node, kDirectoryPageBytes); },
               [this](fabric::RemoteAddress page) { (void)Free(page, kDirectoryPageBytes); }}),
      cursors_(nodes_.size()),
      own_hints_(options_.hints == nullptr
                     ? std::make_unique<EmptyListHints>(options_.empty_list_recheck)
                     : nullptr),
      hints_(options_.hints != nullptr ? options_.hints : own_hints_.get()),
      own_draining_(options_.draining == nullptr ? std::make_unique<DrainingChunks>(nodes_.size())
                                                 : nullptr),
      draining_(options_.draining != nullptr ? options_.draining : own_draining_.get()),
      stewards_(nodes_.size()),
      scans_done_(nodes_.size(), 0),
      marked_at_(nodes_.size()),
      scan_free_(nodes_.size()),
      candidates_(nodes_.size()),
      swept_generation_(nodes_.size(), 0),
      scan_(nodes_.size()) {
  layouts_.resize(nodes_.size());
  for (size_t id = 0; id < nodes_.size(); ++id) {
    assert(nodes_[id] == nullptr || nodes_[id]->node_id() == id);
  }
  next_node_ = nodes_.empty() ? 0 : static_cast<uint32_t>(first_node % nodes_.size());
}

RemoteAllocatorOptions RemoteAllocatorOptions::From(const ReclamationOptions& reclamation) {
  RemoteAllocatorOptions options;
  options.compact_below_free_chunks = reclamation.compact_below_free_chunks;
  options.compact_bundles_per_pass = reclamation.compact_bundles_per_pass;
  options.max_draining_chunks = reclamation.max_draining_chunks;
  options.exhausted_wait = reclamation.exhausted_wait;
  return options;
}

DrainingChunks::DrainingChunks(size_t nodes)
    : node_count_(nodes), nodes_(std::make_unique<Node[]>(nodes)) {}

DrainingChunks::~DrainingChunks() {
  for (size_t node = 0; node < node_count_; ++node)
    delete[] nodes_[node].bits.load(std::memory_order_relaxed);
}

bool DrainingChunks::Contains(uint16_t node, uint64_t index) const {
  if (node >= node_count_) return false;
  const Node& entry = nodes_[node];
  const std::atomic<uint64_t>* bits = entry.bits.load(std::memory_order_acquire);
  if (bits == nullptr || index / 64 >= entry.words) return false;
  return (bits[index / 64].load(std::memory_order_relaxed) >> (index % 64) & 1) != 0;
}

bool DrainingChunks::Set(uint16_t node, uint64_t total_chunks, uint64_t index, bool draining) {
  std::lock_guard<std::mutex> lock(mutex_);
  return SetLocked(node, total_chunks, index, draining);
}

void DrainingChunks::Adopt(uint16_t node, uint64_t total_chunks,
                           const std::vector<uint64_t>& marks) {
  if (node >= node_count_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::set<uint64_t> wanted(marks.begin(), marks.end());
  // New marks first: a chunk moved from one mark to another never leaves
  // the set empty (Any) in between.
  for (uint64_t index : wanted)
    SetLocked(node, total_chunks, index, true);
  for (uint64_t index : MarkedLocked(node)) {
    if (!wanted.contains(index)) SetLocked(node, total_chunks, index, false);
  }
}

std::vector<uint64_t> DrainingChunks::Marked(uint16_t node) const {
  if (node >= node_count_) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  return MarkedLocked(node);
}

std::vector<uint64_t> DrainingChunks::MarkedLocked(uint16_t node) const {
  std::vector<uint64_t> marks;
  const std::atomic<uint64_t>* bits = nodes_[node].bits.load(std::memory_order_relaxed);
  if (bits == nullptr) return marks;
  for (uint64_t word = 0; word < nodes_[node].words; ++word) {
    for (uint64_t set = bits[word].load(std::memory_order_relaxed); set != 0; set &= set - 1)
      marks.push_back(word * 64 + static_cast<uint64_t>(std::countr_zero(set)));
  }
  return marks;
}

bool DrainingChunks::SetLocked(uint16_t node, uint64_t total_chunks, uint64_t index,
                               bool draining) {
  if (node >= node_count_ || index >= total_chunks) return false;
  Node& entry = nodes_[node];
  std::atomic<uint64_t>* bits = entry.bits.load(std::memory_order_relaxed);
  if (bits == nullptr) {
    if (!draining) return false;
    entry.words = (total_chunks + 63) / 64;
    bits = new std::atomic<uint64_t>[entry.words]();
    entry.bits.store(bits, std::memory_order_release);
  }
  if (index / 64 >= entry.words) return false;
  const uint64_t bit = uint64_t{1} << (index % 64);
  const uint64_t before = draining ? bits[index / 64].fetch_or(bit, std::memory_order_relaxed)
                                   : bits[index / 64].fetch_and(~bit, std::memory_order_relaxed);
  const bool was = (before & bit) != 0;
  if (was != draining) {
    entry.marked.fetch_add(draining ? 1 : static_cast<uint64_t>(-1), std::memory_order_relaxed);
    if (draining) entry.generation.fetch_add(1, std::memory_order_release);
  }
  return was;
}

bool EmptyListHints::RecentlyEmpty(uint16_t node, uint64_t size,
                                   std::chrono::nanoseconds now) const {
  if (noted_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> guard(mutex_);
  const auto found = empty_at_.find({node, size});
  return found != empty_at_.end() && now - found->second < recheck_;
}

void EmptyListHints::NoteEmpty(uint16_t node, uint64_t size, std::chrono::nanoseconds now) {
  std::lock_guard<std::mutex> guard(mutex_);
  empty_at_[{node, size}] = now;
  noted_.store(empty_at_.size(), std::memory_order_relaxed);
}

void EmptyListHints::Forget(uint16_t node, uint64_t size) {
  std::lock_guard<std::mutex> guard(mutex_);
  empty_at_.erase({node, size});
  noted_.store(empty_at_.size(), std::memory_order_relaxed);
}

uint64_t RemoteAllocator::free_objects() const {
  uint64_t count = 0;
  for (const auto& [key, objects] : free_lists_)
    count += objects.size();
  return count;
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::Allocate(uint64_t bytes, uint64_t alignment,
                                                          std::optional<uint16_t> node) {
  return Allocate(nullptr, bytes, alignment, node);
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::AllocateFailed(ContextImpl& ctx, uint64_t bytes,
                                                                uint64_t alignment,
                                                                std::optional<uint16_t> node,
                                                                Status failed) {
  if (!failed.IsResourceExhausted() || !exhausted_waiter_ || options_.exhausted_wait.count() == 0 ||
      (node && AnotherNodeFits(*node, bytes, alignment))) {
    return failed;
  }
  return AllocateAfterWaiting(ctx, bytes, alignment, node, std::move(failed));
}

bool RemoteAllocator::AnotherNodeFits(uint16_t node, uint64_t bytes, uint64_t alignment) const {
  for (size_t id = 0; id < nodes_.size(); ++id) {
    if (id != node && nodes_[id] != nullptr &&
        FitsInChunk(nodes_[id]->chunk_bytes(), bytes, alignment)) {
      return true;
    }
  }
  return false;
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::AllocateAfterWaiting(ContextImpl& ctx,
                                                                      uint64_t bytes,
                                                                      uint64_t alignment,
                                                                      std::optional<uint16_t> node,
                                                                      Status exhausted) {
  const std::chrono::nanoseconds start = ctx.Now();
  // At the clock's end for a wait longer than what is left of it.
  const std::chrono::nanoseconds deadline =
      options_.exhausted_wait > std::chrono::nanoseconds::max() - start
          ? std::chrono::nanoseconds::max()
          : start + options_.exhausted_wait;
  bool waited = false;
  while (exhausted_waiter_(ctx, deadline)) {
    if (!waited) Count(exhausted_waits_);
    waited = true;
    StatusOr<fabric::RemoteAddress> object =
        Allocate(options_.share ? &ctx : nullptr, bytes, alignment, node);
    if (object.ok() || !object.status().IsResourceExhausted()) return object;
    exhausted = object.status();
  }
  if (!waited) return exhausted;
  const double seconds = std::chrono::duration<double>(ctx.Now() - start).count();
  char waited_for[64];
  std::snprintf(waited_for, sizeof waited_for, "%.3f", seconds);
  return exhausted.WithContext("after waiting " + std::string(waited_for) +
                               " s for retired objects to come back");
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::Allocate(ContextImpl* ctx, uint64_t bytes,
                                                          uint64_t alignment,
                                                          std::optional<uint16_t> node) {
  DMIDX_RETURN_IF_ERROR(ValidateRequest(bytes, alignment));
  if (node.has_value()) {
    if (*node >= nodes_.size() || nodes_[*node] == nullptr) {
      return Status::InvalidArgument("unknown memory node " + std::to_string(*node) + " (" +
                                     std::to_string(nodes_.size()) + " known)");
    }
    return AllocateOn(ctx, *node, bytes, alignment);
  }
  if (nodes_.empty()) return Status::InvalidArgument("the allocator has no memory nodes");
  const uint32_t start = next_node_;
  next_node_ = static_cast<uint32_t>((start + 1) % nodes_.size());
  std::string tried;
  Status exhausted;
  for (size_t step = 0; step < nodes_.size(); ++step) {
    const auto id = static_cast<uint16_t>((start + step) % nodes_.size());
    // A node whose chunks are too small for this object is not a candidate.
    if (nodes_[id] == nullptr || !FitsInChunk(nodes_[id]->chunk_bytes(), bytes, alignment)) {
      continue;
    }
    StatusOr<fabric::RemoteAddress> object = AllocateOn(ctx, id, bytes, alignment);
    if (object.ok() || !object.status().IsResourceExhausted()) return object;
    tried += (tried.empty() ? "" : ", ") + NodeName(id);
    exhausted = object.status();
  }
  if (tried.empty()) {
    return Status::InvalidArgument(std::to_string(bytes) + " bytes aligned to " +
                                   std::to_string(alignment) +
                                   " exceed the chunk size of every memory node");
  }
  return Status::ResourceExhausted("no memory left for " + std::to_string(bytes) +
                                   " bytes (tried " + tried +
                                   "; last: " + std::string(exhausted.message()) + ")");
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::AllocateOn(ContextImpl* ctx, uint16_t node,
                                                            uint64_t bytes, uint64_t alignment) {
  const uint64_t chunk_bytes = nodes_[node]->chunk_bytes();
  if (!FitsInChunk(chunk_bytes, bytes, alignment)) {
    return Status::InvalidArgument(std::to_string(bytes) + " bytes aligned to " +
                                   std::to_string(alignment) + " exceed the chunk size " +
                                   std::to_string(chunk_bytes) + " of " + NodeName(node));
  }
  const uint64_t size = RoundUp(bytes, alignment);
  if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
  // A list whose last pop took a bundle is likely to hold more: reuse
  // before carving. Another coroutine of this thread may take what the pop
  // brought while it waits; then this one carves.
  if (ctx != nullptr && !nonempty_shared_.empty() && nonempty_shared_.contains({node, size}) &&
      PopShared(*ctx, node, size) == Popped::kTook) {
    if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
  }
  // The current chunk here, the rest behind a call: CarveOn's set-up cost
  // a warm insert about 70 instructions (docs/cpu-cost.md). (CarveOn
  // tries the current chunk again first: nothing changed it meanwhile, so
  // that only fails again.)
  if (auto carved = CarveCursor(cursors_[node], chunk_bytes, size, alignment, ctx != nullptr)) {
    return *carved;
  }
  return CarveOn(ctx, node, size, alignment);
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::CarvePage(uint16_t node, uint64_t bytes) {
  // From this allocator's own chunks; a page that lost the race to be
  // published is kept for reuse here (it may go on a list: its chunk is
  // sealed as one a context carved).
  DMIDX_ASSIGN_OR_RETURN(fabric::RemoteAddress page, CarveOn(nullptr, node, bytes, 64));
  cursors_[node].shared = true;
  return page;
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::CarveOn(ContextImpl* ctx, uint16_t node,
                                                         uint64_t size, uint64_t alignment) {
  const uint64_t chunk_bytes = nodes_[node]->chunk_bytes();
  const auto carve = [&] {
    return CarveCursor(cursors_[node], chunk_bytes, size, alignment, ctx != nullptr);
  };
  if (auto carved = carve()) return *carved;
  // Before a new chunk: what others gave back (unless an allocator of this
  // compute node just found the list empty). The pop may wait, and other
  // coroutines of this thread (or the pop itself, carving the list
  // directory) may move the cursor meanwhile.
  if (ctx != nullptr && !hints_->RecentlyEmpty(node, size, ctx->Now())) {
    if (PopShared(*ctx, node, size) == Popped::kTook) {
      if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
    }
    if (auto carved = carve()) return *carved;
  }
  StatusOr<fabric::RemoteAddress> chunk = nodes_[node]->AllocateChunk();
  if (!chunk.ok() && ctx != nullptr && chunk.status().IsResourceExhausted() && options_.share &&
      options_.compact_bundles_per_pass > 0) {
    // The pool is out: a compaction may give chunks back, this one's
    // included. It waits: the cursor may have moved meanwhile.
    if (StatusOr<uint64_t> returned = Compact(*ctx, node); returned.ok() && *returned > 0) {
      if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
      if (auto carved = carve()) return *carved;
      chunk = nodes_[node]->AllocateChunk();
    }
  }
  if (!chunk.ok()) {
    // The pool is out: what others gave back is all there is, so a list
    // that only failed (contended, a failed batch) is tried again before
    // the node is reported exhausted. One found empty ends it, unless
    // compaction is on: a compactor elsewhere may hold the list's objects
    // for a while, and gives back chunks or pushes them back.
    if (ctx == nullptr || !chunk.status().IsResourceExhausted()) return chunk.status();
    const bool compacting = options_.share && options_.compact_bundles_per_pass > 0;
    for (uint32_t attempt = 0; attempt < kPopsWhenExhausted && !chunk.ok(); ++attempt) {
      const Popped popped = PopShared(*ctx, node, size);
      if (popped == Popped::kTook) {
        if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
      }
      if (popped != Popped::kEmpty) continue;
      // The draining lists' objects are free too: the pool being out, a
      // chunk filled again beats a failed allocation.
      if (options_.max_draining_chunks != 0 &&
          PopShared(*ctx, node, size, /*draining=*/true) == Popped::kTook) {
        if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
      }
      if (!compacting) break;
      ctx->Backoff(attempt);
      if (auto carved = carve()) return *carved;
      chunk = nodes_[node]->AllocateChunk();
    }
    if (!chunk.ok()) return chunk.status();
  }
  assert(chunk->node() == node && chunk->offset() % kMaxAlignment == 0);
  // The rest of the old chunk is abandoned: it is sealed with what was
  // carved from it, and goes back once a compactor holds all of that.
  if (cursors_[node].shared) {
    pending_seals_.push_back({cursors_[node].chunk, cursors_[node].carved});
  }
  chunks_.push_back(*chunk);
  ++chunks_taken_;
  cursors_[node] = Cursor{*chunk, size, 1, ctx != nullptr};
  if (ctx != nullptr) {
    // The object is this coroutine's already; what follows only waits.
    (void)FlushSeals(*ctx);
    CompactIfLow(*ctx, node);
  }
  return *chunk;
}

SharedListCounters RemoteAllocator::shared_counters() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return {.bundles_popped = shared_tally_.bundles_popped.load(kRelaxed),
          .objects_popped = shared_tally_.objects_popped.load(kRelaxed),
          .bundles_pushed = shared_tally_.bundles_pushed.load(kRelaxed),
          .objects_pushed = shared_tally_.objects_pushed.load(kRelaxed),
          .objects_lost = shared_tally_.objects_lost.load(kRelaxed),
          .failures = shared_tally_.failures.load(kRelaxed),
          .compaction_passes = shared_tally_.compaction_passes.load(kRelaxed),
          .chunks_drained = shared_tally_.chunks_drained.load(kRelaxed),
          .chunks_returned = shared_tally_.chunks_returned.load(kRelaxed)};
}

fabric::RemoteAddress RemoteAllocator::ChunkLayout::SealWord(uint16_t node, uint64_t index) const {
  return fabric::RemoteAddress::Pool(
      node, memnode::SealWordOffset(chunks_begin, chunk_bytes, total_chunks, index));
}

StatusOr<RemoteAllocator::ChunkLayout> RemoteAllocator::Layout(ContextImpl& ctx, uint16_t node) {
  if (layouts_[node].total_chunks != 0) return layouts_[node];
  uint64_t header[memnode::kPoolHeaderWords];
  DMIDX_RETURN_IF_ERROR(
      ctx.ReadWords(fabric::RemoteAddress::Pool(node, 0), memnode::kPoolHeaderWords, header));
  ChunkLayout layout{header[memnode::kPoolHeaderChunkBytesWord],
                     header[memnode::kPoolHeaderChunksBeginWord],
                     header[memnode::kPoolHeaderTotalChunksWord]};
  if (header[0] != memnode::kPoolMagic || layout.chunk_bytes != nodes_[node]->chunk_bytes() ||
      layout.total_chunks == 0) {
    return Status::DataLoss("the pool header of " + NodeName(node) +
                            " is not one with seal words (magic, chunk size or chunk count)");
  }
  layouts_[node] = layout;
  return layout;
}

Status RemoteAllocator::FlushSeals(ContextImpl& ctx) {
  if (!options_.share) {
    pending_seals_.clear();
    return Status::Ok();
  }
  Status first_error;
  // Taken out first: other coroutines may add seals while these wait.
  while (!pending_seals_.empty()) {
    const uint16_t node = pending_seals_.front().chunk.node();
    std::vector<Seal> batch;
    for (size_t i = 0; i < pending_seals_.size() && batch.size() < kSealOpsPerBatch;) {
      if (pending_seals_[i].chunk.node() != node) {
        ++i;
        continue;
      }
      batch.push_back(pending_seals_[i]);
      pending_seals_.erase(pending_seals_.begin() + static_cast<ptrdiff_t>(i));
    }
    StatusOr<ChunkLayout> layout = Layout(ctx, node);
    Status status = layout.status();
    if (layout.ok()) {
      ScratchArena::Scope scope(ctx.arena());
      StatusOr<uint64_t*> words = ctx.arena().Words(static_cast<uint32_t>(batch.size()));
      status = words.status();
      if (words.ok()) {
        std::vector<fabric::Op> ops;
        for (size_t i = 0; i < batch.size(); ++i) {
          const uint64_t offset = batch[i].chunk.offset() - layout->chunks_begin;
          (*words)[i] = batch[i].carved;
          ops.push_back(fabric::Op::Write(layout->SealWord(node, offset / layout->chunk_bytes),
                                          *words + i, 8));
        }
        status = ctx.Execute(node, ops);
      }
    }
    // A failed batch may have landed: a seal word holds the carved count or
    // 0 either way, and a chunk at 0 stays out (at most these chunks).
    if (status.ok()) {
      compaction_counters_.chunks_sealed += batch.size();
    } else {
      compaction_counters_.seals_failed += batch.size();
      if (first_error.ok()) first_error = status;
    }
  }
  return first_error;
}

Status RemoteAllocator::SealChunks(ContextImpl& ctx) {
  for (Cursor& cursor : cursors_) {
    if (!cursor.shared) continue;  // never sealed: it may go on carving
    pending_seals_.push_back({cursor.chunk, cursor.carved});
    cursor = Cursor{};
  }
  return FlushSeals(ctx);
}

void RemoteAllocator::CompactIfLow(ContextImpl& ctx, uint16_t node) {
  if (!options_.share || options_.compact_bundles_per_pass == 0 ||
      options_.compact_below_free_chunks == 0) {
    return;
  }
  StatusOr<uint64_t> free_chunks = nodes_[node]->FreeChunks();
  if (free_chunks.ok() && *free_chunks < options_.compact_below_free_chunks) {
    (void)Compact(ctx, node);
  }
}

StatusOr<uint64_t> RemoteAllocator::Compact(ContextImpl& ctx, uint16_t node, bool scan_step,
                                            uint32_t push_attempts) {
  if (node >= nodes_.size() || nodes_[node] == nullptr) {
    return Status::InvalidArgument("Compact: unknown memory node " + std::to_string(node));
  }
  if (!options_.share || options_.compact_bundles_per_pass == 0) return uint64_t{0};
  // One pass per node and thread at a time: another would find the lists
  // this one drains empty.
  if (!compacting_.insert(node).second) return uint64_t{0};
  struct Done {
    std::set<uint16_t>& compacting;
    uint16_t node;
    ~Done() { compacting.erase(node); }
  } done{compacting_, node};
  (void)FlushSeals(ctx);
  DMIDX_ASSIGN_OR_RETURN(const ChunkLayout layout, Layout(ctx, node));
  DMIDX_ASSIGN_OR_RETURN(const std::vector<uint64_t> keys, shared_.Sizes(ctx, node));
  Count(shared_tally_.compaction_passes);

  // Drain: every bundle popped is this pass's alone (one CAS each). The
  // draining lists first, then the others, up to compact_bundles_per_pass
  // bundles each; and the objects this allocator has waiting for a
  // draining list.
  std::map<uint64_t, std::vector<fabric::RemoteAddress>> held;  // by size
  for (auto waiting = to_draining_.begin(); waiting != to_draining_.end();) {
    if (waiting->first.first != node) {
      ++waiting;
      continue;
    }
    std::vector<fabric::RemoteAddress>& objects = held[waiting->first.second];
    objects.insert(objects.end(), waiting->second.begin(), waiting->second.end());
    waiting = to_draining_.erase(waiting);
  }
  uint32_t bundles = 0;
  Status first_error;
  // Pops up to `budget` bundles of list `key` into `held`.
  const auto pop_into = [&](uint64_t key, uint32_t& budget) {
    while (budget > 0) {
      std::vector<fabric::RemoteAddress> bundle;
      if (Status popped = shared_.Pop(ctx, node, key, bundle); !popped.ok()) {
        Count(shared_tally_.failures);
        // A list that stayed contended (Aborted: others pop and push it)
        // is drained less this pass, and nothing is lost: not an error.
        if (!popped.IsAborted() && first_error.ok()) first_error = popped;
        break;
      }
      if (bundle.empty()) break;
      ++bundles;
      --budget;
      compaction_counters_.objects_drained += bundle.size();
      std::vector<fabric::RemoteAddress>& objects = held[ListObjectSize(key)];
      objects.insert(objects.end(), bundle.begin(), bundle.end());
    }
  };
  for (const bool draining : {true, false}) {
    // Tend's passes pop the draining lists whole: they hold only the
    // marked chunks' objects (and marks taken off since), and a chunk goes
    // back only once one pass holds all of its.
    uint32_t budget = draining && tending_ ? ReclamationOptions::kMaxCompactBundlesPerPass
                                           : options_.compact_bundles_per_pass;
    for (uint64_t key : keys) {
      if (IsDrainingList(key) != draining) continue;
      if (tending_ && !draining) break;  // Tend's scan moves those
      pop_into(key, budget);
    }
  }
  compaction_counters_.bundles_drained += bundles;
  if (compaction_hook_) compaction_hook_(CompactionStage::kDrained);

  // Distinct objects held per chunk. A chunk with an object twice (never,
  // unless memory was handed out twice) or one outside the chunks stays.
  std::map<uint64_t, std::set<uint64_t>> per_chunk;
  std::set<uint64_t> suspect;
  for (const auto& [size, objects] : held) {
    for (fabric::RemoteAddress object : objects) {
      const std::optional<uint64_t> index = ChunkIndex(layout, object);
      if (!index.has_value()) continue;
      if (!per_chunk[*index].insert(object.offset()).second) suspect.insert(*index);
    }
  }

  // A keeper's full pass also reads the seals of the chunks the last scan
  // found the most free bytes of (candidates for marks, below), and of
  // those marked (one that went back, through any compute node's pass,
  // reads 0).
  const bool marking = tending_ && !scan_step && options_.max_draining_chunks != 0;
  bool marks_changed = false;
  if (marking) {
    for (const auto& [index, bytes] : candidates_[node])
      per_chunk[index];
    for (const auto& [index, scans] : marked_at_[node])
      per_chunk[index];
  }

  // Their seals, then the chunks held in full go back.
  std::set<uint64_t> returned;
  std::map<uint64_t, uint64_t> seal_of;  // chunk index -> carved count read
  std::vector<uint64_t> indices;
  for (const auto& [index, objects] : per_chunk)
    indices.push_back(index);
  for (size_t begin = 0; begin < indices.size() && first_error.ok(); begin += kSealOpsPerBatch) {
    const size_t count = std::min<size_t>(kSealOpsPerBatch, indices.size() - begin);
    std::vector<uint64_t> seals(count);
    {
      ScratchArena::Scope scope(ctx.arena());
      StatusOr<uint64_t*> words = ctx.arena().Words(static_cast<uint32_t>(count));
      if (!words.ok()) {
        first_error = words.status();
        break;
      }
      std::vector<fabric::Op> ops;
      for (size_t i = 0; i < count; ++i)
        ops.push_back(fabric::Op::Read(layout.SealWord(node, indices[begin + i]), *words + i, 8));
      if (Status read = ctx.Execute(node, ops); !read.ok()) {
        first_error = read;
        break;
      }
      std::copy(*words, *words + count, seals.begin());
    }
    for (size_t i = 0; i < count; ++i) {
      const uint64_t index = indices[begin + i];
      const uint64_t objects = per_chunk[index].size();
      seal_of[index] = seals[i];
      if (seals[i] == 0 || seals[i] != objects || suspect.contains(index)) continue;
      // Nobody else holds, uses or lists an object of this chunk: it is
      // this pass's to give back. A failed call may have taken it, so its
      // objects are forgotten either way.
      const fabric::RemoteAddress chunk =
          fabric::RemoteAddress::Pool(node, layout.chunks_begin + index * layout.chunk_bytes);
      returned.insert(index);
      marks_changed |= draining_->Set(node, layout.total_chunks, index, false);
      if (Status freed = nodes_[node]->FreeChunk(chunk); freed.ok()) {
        Count(shared_tally_.chunks_returned);
        compaction_counters_.objects_returned += objects;
      } else {
        ++compaction_counters_.returns_failed;
        compaction_counters_.objects_lost += objects;
        if (first_error.ok()) first_error = freed;
      }
    }
  }

  if (compaction_hook_) compaction_hook_(CompactionStage::kReturned);
  // Marks: only the keeper's full passes (Tend) make them and take them
  // off; other passes only clear those of chunks they give back. A mark
  // comes off after kMarkScans scans ended without its chunk going back
  // (its last objects may never be freed: the list directory's chunk, a
  // key never deleted), and every mark while the node is low on chunks
  // (their objects are wanted then). New marks go to the chunks the last
  // scan found the most free bytes of (at least half the chunk; the
  // highest first among equals: the memory node hands out its lowest free
  // chunk), up to max_draining_chunks, and only while the free bytes the
  // scan found outside the marks stay at least twice the marked chunks'
  // bytes: a node with few free objects wants them for reuse.
  if (marking) {
    StatusOr<uint64_t> free_chunks = nodes_[node]->FreeChunks();
    const bool low = !free_chunks.ok() ||
                     *free_chunks < std::max<uint64_t>(1, options_.compact_below_free_chunks);
    std::map<uint64_t, uint64_t>& marks = marked_at_[node];
    for (auto mark = marks.begin(); mark != marks.end();) {
      const auto seal = seal_of.find(mark->first);
      const bool gone = seal != seal_of.end() && seal->second == 0;
      const bool expired = low || gone || scans_done_[node] >= mark->second + kMarkScans;
      if (expired && draining_->Contains(node, mark->first)) {
        draining_->Set(node, layout.total_chunks, mark->first, false);
        marks_changed = true;
        if (!gone) ++compaction_counters_.marks_expired;
      }
      if (expired || !draining_->Contains(node, mark->first)) {
        mark = marks.erase(mark);
      } else {
        ++mark;
      }
    }
    std::vector<std::pair<uint64_t, uint64_t>> by_free;  // free bytes, index
    uint64_t free_bytes = 0;
    for (const auto& [index, bytes] : candidates_[node]) {
      free_bytes += bytes;
      if (2 * bytes >= layout.chunk_bytes) by_free.emplace_back(bytes, index);
    }
    std::sort(by_free.rbegin(), by_free.rend());
    for (const auto& [bytes, index] : by_free) {
      if (low || draining_->count(node) >= options_.max_draining_chunks ||
          free_bytes - bytes < 2 * (draining_->count(node) + 1) * layout.chunk_bytes) {
        break;
      }
      const auto seal = seal_of.find(index);
      if (seal == seal_of.end() || seal->second == 0 || returned.contains(index) ||
          suspect.contains(index)) {
        continue;
      }
      if (!draining_->Set(node, layout.total_chunks, index, true)) {
        marks_changed = true;
        free_bytes -= bytes;
        marks[index] = scans_done_[node];
        ++compaction_counters_.chunks_drained;
        Count(shared_tally_.chunks_drained);
      }
    }
    candidates_[node].clear();
  }
  // The objects of a chunk just marked that were freed before lie anywhere
  // in the lists, deep ones too (a list is a stack: what lies under what
  // allocators pop and push is never popped), and the chunk empties only
  // once all are on the draining list: the whole of every list is taken
  // once, to be sorted below.
  // A scan: every bundle of one of a size's two lists moves to the other,
  // less the marked chunks' objects. Nothing is held but those, so
  // allocators keep finding the rest. It starts when chunks were newly
  // marked since the last one, moves up to compact_bundles_per_pass
  // bundles a pass (the keeper's thread also renews the lease), and goes
  // on in the next passes until the lists it moves from are empty.
  // A keeper's full pass starts one when the marks changed (the new ones'
  // objects lie in the lists), or the lists did since its last pass (the
  // next marks want a count of what is free now, and marks age by scans):
  // an idle cluster scans no more.
  if (marking && !scan_[node].pending && (marks_changed || stewards_[node].changed)) {
    scan_[node] = {.to_alt = !scan_[node].to_alt, .pending = true, .moved = 0};
    ++compaction_counters_.scans;
    scan_free_[node].clear();
  }
  if (tending_ && scan_[node].pending) {
    const bool to_alt = scan_[node].to_alt;
    uint32_t budget = options_.compact_bundles_per_pass;
    bool emptied = true;
    for (uint64_t key : keys) {
      if (IsDrainingList(key) || (key & kAltListBit) != 0) continue;
      const uint64_t size = key;
      const uint64_t from = to_alt ? size : AltList(size);
      const uint64_t to = to_alt ? AltList(size) : size;
      bool empty = false;
      while (budget > 0) {
        std::vector<fabric::RemoteAddress> bundle;
        if (Status popped = shared_.Pop(ctx, node, from, bundle); !popped.ok()) {
          Count(shared_tally_.failures);
          break;
        }
        if (bundle.empty()) {
          empty = true;
          break;
        }
        --budget;
        ++bundles;
        ++scan_[node].moved;
        ++compaction_counters_.bundles_moved;
        std::vector<fabric::RemoteAddress> rest;
        std::vector<fabric::RemoteAddress>& marked = held[size];
        for (fabric::RemoteAddress object : bundle) {
          const std::optional<uint64_t> index = ChunkIndex(layout, object);
          if (index.has_value() && draining_->Contains(node, *index)) {
            marked.push_back(object);
          } else {
            rest.push_back(object);
            if (index.has_value()) {
              // At most the chunk: an object can come by twice in a scan
              // (freed again, or moved back by another node's pass).
              uint64_t& found = scan_free_[node][*index];
              found = std::min(found + size, layout.chunk_bytes);
            }
          }
        }
        if (rest.empty()) continue;
        const auto [outcome, status] = shared_.Push(ctx, node, to, rest);
        if (outcome == RemoteFreeLists::PushOutcome::kKept) {
          std::vector<fabric::RemoteAddress>& local = free_lists_[{node, size}];
          local.insert(local.end(), rest.begin(), rest.end());
        } else if (outcome == RemoteFreeLists::PushOutcome::kLost) {
          Count(shared_tally_.objects_lost, rest.size());
        }
        if (!status.ok()) break;
      }
      emptied = emptied && empty;
    }
    // A scan that another node's moves the other way keep from emptying
    // its lists ends anyway after kMaxScanSteps steps' worth.
    if (emptied ||
        scan_[node].moved >= uint64_t{kMaxScanSteps} * options_.compact_bundles_per_pass) {
      // What it found free per chunk picks the next marks.
      scan_[node].pending = false;
      ++scans_done_[node];
      candidates_[node] = std::move(scan_free_[node]);
      scan_free_[node].clear();
    }
  }
  // The rest goes back on the lists, a draining chunk's on the draining
  // list (through the local ones, so that a push that keeps its bundle
  // leaves it to this allocator).
  for (auto& [size, objects] : held) {
    std::set<uint64_t> seen;
    std::vector<fabric::RemoteAddress>& local = free_lists_[{node, size}];
    std::vector<fabric::RemoteAddress>& waiting = to_draining_[{node, size}];
    for (fabric::RemoteAddress object : objects) {
      const std::optional<uint64_t> index = ChunkIndex(layout, object);
      if (index.has_value() && returned.contains(*index)) continue;
      if (!seen.insert(object.offset()).second) continue;  // never twice
      if (index.has_value() && draining_->Contains(node, *index)) {
        waiting.push_back(object);
        ++compaction_counters_.objects_to_draining;
      } else {
        local.push_back(object);
      }
    }
    for (const bool draining : {true, false}) {
      auto& lists = draining ? to_draining_ : free_lists_;
      if (lists[{node, size}].empty()) {
        lists.erase({node, size});
        continue;
      }
      const uint64_t lost_before = shared_tally_.objects_lost.load(std::memory_order_relaxed);
      Status pushed = PushShared(ctx, node, size, /*all=*/true, push_attempts, draining);
      compaction_counters_.objects_lost +=
          shared_tally_.objects_lost.load(std::memory_order_relaxed) - lost_before;
      if (!pushed.ok() && first_error.ok()) first_error = pushed;
    }
  }
  if (!first_error.ok()) return first_error;
  return static_cast<uint64_t>(returned.size());
}

RemoteAllocator::Popped RemoteAllocator::PopShared(ContextImpl& ctx, uint16_t node, uint64_t size,
                                                   bool draining) {
  if (size < kMinListObjectBytes) return Popped::kEmpty;
  // A bundle of draining chunks' objects only goes on to the draining
  // list, and another is popped (a few at most).
  // A size's second list exists only where compute nodes drain (a scan
  // moves bundles to it); without draining, no pop reads it.
  const bool second = !draining && options_.max_draining_chunks != 0;
  for (const bool alt : {false, true}) {
    if (alt && !second) break;
    for (uint32_t pops = 0;; ++pops) {
      const Popped popped = PopSharedOnce(ctx, node, size, draining, alt);
      if (popped == Popped::kEmpty && second && !alt) break;  // the other list
      if (popped != Popped::kDrained) return popped;
      if (pops == kMaxDrainedPops) return Popped::kFailed;
    }
  }
  return Popped::kEmpty;
}

RemoteAllocator::Popped RemoteAllocator::PopSharedOnce(ContextImpl& ctx, uint16_t node,
                                                       uint64_t size, bool draining, bool alt) {
  std::vector<fabric::RemoteAddress> bundle;
  const uint64_t key = draining ? DrainingList(size) : alt ? AltList(size) : size;
  if (!shared_.Pop(ctx, node, key, bundle).ok()) {
    // Nothing taken, or a bundle that may have been (a failed CAS batch):
    // either way nothing is handed out twice. Carving goes on.
    Count(shared_tally_.failures);
    return Popped::kFailed;
  }
  if (bundle.empty()) {
    if (!draining && (alt || options_.max_draining_chunks == 0)) {
      nonempty_shared_.erase({node, size});
      hints_->NoteEmpty(node, size, ctx.Now());
    }
    return Popped::kEmpty;
  }
  if (draining) compaction_counters_.objects_undrained += bundle.size();
  Count(shared_tally_.bundles_popped);
  Count(shared_tally_.objects_popped, bundle.size());
  if (!draining) {
    nonempty_shared_.insert({node, size});
    hints_->NoteNotEmpty(node, size);
  }
  StatusOr<ChunkLayout> layout = draining_->Any(node) && !draining
                                     ? Layout(ctx, node)
                                     : StatusOr<ChunkLayout>(Status::NotFound("no draining"));
  // No wait from here to the push: the lists' references stay valid.
  std::vector<fabric::RemoteAddress>& local = free_lists_[{node, size}];
  if (!layout.ok()) {
    local.insert(local.end(), bundle.begin(), bundle.end());
    return Popped::kTook;
  }
  // A draining chunk's objects are not handed out again.
  std::vector<fabric::RemoteAddress>& waiting = to_draining_[{node, size}];
  size_t kept = 0;
  for (fabric::RemoteAddress object : bundle) {
    const std::optional<uint64_t> index = ChunkIndex(*layout, object);
    if (index.has_value() && draining_->Contains(node, *index)) {
      waiting.push_back(object);
      ++compaction_counters_.objects_to_draining;
    } else {
      local.push_back(object);
      ++kept;
    }
  }
  if (waiting.size() >= RemoteFreeLists::BundleCapacity(size)) {
    (void)PushShared(ctx, node, size, /*all=*/false, kMaxPopAttempts, /*draining=*/true);
  }
  return kept != 0 ? Popped::kTook : Popped::kDrained;
}

Status RemoteAllocator::CheckFree(fabric::RemoteAddress object, uint64_t bytes,
                                  uint64_t alignment) const {
  if (object.is_null() || bytes == 0 || !ValidAlignment(alignment)) {
    return Status::InvalidArgument("Free: null object, zero size or bad alignment");
  }
  if (object.node() >= nodes_.size() || nodes_[object.node()] == nullptr ||
      object.region() != fabric::Region::kPool || object.offset() % alignment != 0) {
    return Status::InvalidArgument("Free: " + object.ToString() +
                                   " is not an object this allocator can hand out");
  }
  return Status::Ok();
}

Status RemoteAllocator::Free(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment) {
  DMIDX_RETURN_IF_ERROR(CheckFree(object, bytes, alignment));
  free_lists_[{object.node(), RoundUp(bytes, alignment)}].push_back(object);
  return Status::Ok();
}

Status RemoteAllocator::Free(ContextImpl& ctx, fabric::RemoteAddress object, uint64_t bytes,
                             uint64_t alignment) {
  DMIDX_RETURN_IF_ERROR(CheckFree(object, bytes, alignment));
  const uint64_t size = RoundUp(bytes, alignment);
  const uint16_t node = object.node();
  const bool shareable = options_.share && RemoteFreeLists::Shareable(object, size);
  if (shareable && draining_->Any(node)) {
    // Decided before the object goes on any list: the sweep and the
    // layout may wait, and other coroutines of this thread take from and
    // give to the lists meanwhile.
    if (draining_->generation(node) != swept_generation_[node]) SweepLocal(ctx, node);
    if (Draining(ctx, object)) {
      // Onto the draining list once a bundle of them waits.
      std::vector<fabric::RemoteAddress>& waiting = to_draining_[{node, size}];
      waiting.push_back(object);
      ++compaction_counters_.objects_freed_to_draining;
      if (waiting.size() >= RemoteFreeLists::BundleCapacity(size)) {
        (void)PushShared(ctx, node, size, /*all=*/false, kMaxPopAttempts, /*draining=*/true);
      }
      return Status::Ok();
    }
  }
  free_lists_[{node, size}].push_back(object);
  if (!shareable) return Status::Ok();
  if (free_lists_[{node, size}].size() <= options_.keep_free_objects) return Status::Ok();
  // A failed push is the allocator's business, not the caller's: its
  // objects stay here or are counted lost.
  (void)PushShared(ctx, node, size, /*all=*/false);
  return Status::Ok();
}

void RemoteAllocator::Tend(ContextImpl& ctx) {
  if (!scans_ || !options_.share || options_.compact_bundles_per_pass == 0 ||
      options_.max_draining_chunks == 0) {
    return;
  }
  struct Tending {
    bool& flag;
    ~Tending() { flag = false; }
  } tending{tending_};
  tending_ = true;
  for (size_t index = 0; index < nodes_.size(); ++index) {
    const auto node = static_cast<uint16_t>(index);
    if (nodes_[node] == nullptr || compacting_.contains(node)) continue;
    // What this allocator freed for a draining list (the retired objects
    // the keeper frees) goes there now: a chunk's last objects must not
    // wait for a bundle to fill.
    FlushDraining(ctx, node);
    const StatusOr<bool> drains = Claim(ctx, node);
    if (!drains.ok() || !*drains) continue;
    Steward& steward = stewards_[node];
    const bool scan_step = scan_[node].pending;
    if (!scan_step) {
      // A full pass only when there is something new to look at: the
      // lists changed since this allocator's last pass (every push and
      // pop of any compute node changes a head), the last scan's findings
      // wait for marks, or takeover_tends Tends went by without one (what
      // others did while the last pass ran is in the digest it ended with:
      // the last objects of a marked chunk pushed to its draining list
      // then).
      if (!shared_.Sizes(ctx, node).ok()) continue;
      steward.changed = shared_.HeadsDigest(node) != steward.digest;
      if (!steward.changed && candidates_[node].empty() && ++steward.idle < takeover_tends_) {
        (void)PublishMarks(ctx, node);
        continue;
      }
    }
    steward.idle = 0;
    (void)Compact(ctx, node, scan_step, kMaxPopAttempts);
    // The lists as this pass left them: its own moves are no news.
    if (shared_.Sizes(ctx, node).ok()) steward.digest = shared_.HeadsDigest(node);
    (void)PublishMarks(ctx, node);
  }
}

StatusOr<bool> RemoteAllocator::Claim(ContextImpl& ctx, uint16_t node) {
  Steward& steward = stewards_[node];
  if (steward.table.is_null()) {
    DMIDX_ASSIGN_OR_RETURN(steward.table, shared_.DrainingTable(ctx, node));
  }
  DMIDX_ASSIGN_OR_RETURN(const ChunkLayout layout, Layout(ctx, node));
  std::vector<uint64_t> words(kDrainingTableBytes / 8);
  DMIDX_RETURN_IF_ERROR(
      ctx.ReadWords(steward.table, static_cast<uint32_t>(words.size()), words.data()));
  const uint64_t claim = words[0];
  // The marks it holds, if the claim's holder wrote them (a drainer taken
  // over while its pass ran may WRITE once more after the new one did:
  // those are no one's, until the new one writes its own at its next
  // Tend). A torn READ (a WRITE landing) may mix two lists: a wrong hint.
  std::vector<uint64_t> marks;
  const uint64_t count = std::min<uint64_t>(words[1], ReclamationOptions::kMaxDrainingChunks);
  const bool holders = (words[2] & ~kClaimStampMask) == (claim & ~kClaimStampMask);
  for (uint64_t i = 0; holders && i < count; ++i) {
    const uint64_t index = words[kDrainingTableHeaderWords + i];
    if (index < layout.total_chunks) marks.push_back(index);
  }
  const uint64_t mine = uint64_t{self_ + 1} << 48;
  const auto cas = [&](uint64_t expected, uint64_t desired) -> StatusOr<uint64_t> {
    ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * seen, ctx.arena().Words(1));
    const fabric::Op op = fabric::Op::CompareSwap(steward.table, seen, expected, desired);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&op, 1}));
    return *seen;
  };
  const auto next = [&](uint64_t from) { return mine | ((from + 1) & kClaimStampMask); };
  if (steward.drains) {
    // Renewed: a drainer that stops (dies, closes, stalls) is taken over.
    // A claim still this compute node's (a renewal that landed although
    // its batch failed) is renewed as well.
    if ((claim & ~kClaimStampMask) == mine) {
      const uint64_t renewed = next(claim);
      DMIDX_ASSIGN_OR_RETURN(const uint64_t seen, cas(claim, renewed));
      if (seen == claim) {
        steward.claim = renewed;
        // What the table holds is what PublishMarks compares with: a
        // WRITE of an earlier drainer's is overwritten.
        steward.published.reset();
        if (holders) steward.published = std::move(marks);
        return true;
      }
      steward.claim = seen;
    } else {
      steward.claim = claim;
    }
    // Another compute node drains: this one's scan and marks end here
    // (what it held went back with its pass), and the table's marks are
    // the ones its allocators keep from its next Tend on.
    steward.drains = false;
    steward.still = 0;
    scan_[node].pending = false;
    marked_at_[node].clear();
    candidates_[node].clear();
    scan_free_[node].clear();
    return false;
  }
  // Free, this compute node's from an earlier life, or unchanged through
  // takeover_tends of this allocator's Tends after the one that first saw
  // it: claimed.
  if (claim != steward.claim) {
    steward.claim = claim;
    steward.still = 0;
  } else {
    ++steward.still;
  }
  if (claim == 0 || (claim & ~kClaimStampMask) == mine || steward.still >= takeover_tends_) {
    const uint64_t taken = next(claim);
    DMIDX_ASSIGN_OR_RETURN(const uint64_t seen, cas(claim, taken));
    if (seen == claim) {
      steward.drains = true;
      steward.claim = taken;
      steward.still = 0;
      steward.digest = 0;
      steward.idle = 0;
      // The marks it finds are its own now: they age from here.
      draining_->Adopt(node, layout.total_chunks, marks);
      marked_at_[node].clear();
      for (uint64_t index : marks)
        marked_at_[node][index] = scans_done_[node];
      steward.published.reset();  // its own holder word goes in
      return true;
    }
    steward.claim = seen;
    steward.still = 0;
  }
  draining_->Adopt(node, layout.total_chunks, marks);
  return false;
}

Status RemoteAllocator::PublishMarks(ContextImpl& ctx, uint16_t node) {
  Steward& steward = stewards_[node];
  std::vector<uint64_t> marks = draining_->Marked(node);
  if (marks.size() > ReclamationOptions::kMaxDrainingChunks) {
    marks.resize(ReclamationOptions::kMaxDrainingChunks);
  }
  if (!steward.drains || marks == steward.published) return Status::Ok();
  // Words 1 on: the count, whose, 0, the marks.
  ScratchArena::Scope scope(ctx.arena());
  const size_t count = kDrainingTableHeaderWords - 1 + marks.size();
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(count));
  words[0] = marks.size();
  words[1] = steward.claim & ~kClaimStampMask;
  words[2] = 0;
  std::copy(marks.begin(), marks.end(), words + 3);
  const fabric::Op write =
      fabric::Op::Write(steward.table + 8, words, static_cast<uint32_t>(8 * count));
  DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&write, 1}));
  steward.published = std::move(marks);
  return Status::Ok();
}

void RemoteAllocator::SweepLocal(ContextImpl& ctx, uint16_t node) {
  // The objects this allocator kept before the marks changed lie under
  // what it frees and takes since (a local list is a stack too): those of
  // marked chunks go to the draining lists now, or they would never leave.
  const uint64_t generation = draining_->generation(node);
  StatusOr<ChunkLayout> layout = Layout(ctx, node);
  if (!layout.ok()) return;  // swept at the next free
  swept_generation_[node] = generation;
  for (auto& [key, objects] : free_lists_) {
    if (key.first != node) continue;
    std::vector<fabric::RemoteAddress>* waiting = nullptr;
    for (size_t i = objects.size(); i-- > 0;) {
      const std::optional<uint64_t> index = ChunkIndex(*layout, objects[i]);
      if (!index.has_value() || !draining_->Contains(node, *index)) continue;
      if (waiting == nullptr) waiting = &to_draining_[key];
      waiting->push_back(objects[i]);
      objects[i] = objects.back();
      objects.pop_back();
      ++compaction_counters_.objects_to_draining;
    }
  }
  // And what waits for a bundle to fill: a chunk's last objects must not
  // wait on this worker's next frees of that size.
  FlushDraining(ctx, node);
}

void RemoteAllocator::FlushDraining(ContextImpl& ctx, uint16_t node) {
  std::vector<uint64_t> sizes;
  for (const auto& [key, objects] : to_draining_) {
    if (key.first == node && !objects.empty()) sizes.push_back(key.second);
  }
  for (uint64_t size : sizes)
    (void)PushShared(ctx, node, size, /*all=*/true, kMaxPopAttempts, /*draining=*/true);
}

std::optional<uint64_t> RemoteAllocator::ChunkIndex(const ChunkLayout& layout,
                                                    fabric::RemoteAddress object) {
  if (layout.total_chunks == 0 || object.offset() < layout.chunks_begin) return std::nullopt;
  const uint64_t index = (object.offset() - layout.chunks_begin) / layout.chunk_bytes;
  if (index >= layout.total_chunks) return std::nullopt;
  return index;
}

bool RemoteAllocator::Draining(ContextImpl& ctx, fabric::RemoteAddress object) {
  // A chunk is marked only by a pass that read the node's layout; this
  // allocator reads it once (one READ) if it has not yet.
  StatusOr<ChunkLayout> layout = Layout(ctx, object.node());
  if (!layout.ok()) return false;
  const std::optional<uint64_t> index = ChunkIndex(*layout, object);
  return index.has_value() && draining_->Contains(object.node(), *index);
}

Status RemoteAllocator::PushShared(ContextImpl& ctx, uint16_t node, uint64_t size, bool all,
                                   uint32_t attempts, bool draining) {
  const uint32_t capacity = RemoteFreeLists::BundleCapacity(size);
  auto& local = draining ? to_draining_ : free_lists_;
  Status first_error;
  while (true) {
    // Taken out of the local list before the round trip, so that no other
    // coroutine of this thread hands them out meanwhile.
    std::vector<fabric::RemoteAddress> bundle;
    auto list = local.find({node, size});
    if (list == local.end()) break;
    std::vector<fabric::RemoteAddress>& objects = list->second;
    for (size_t i = objects.size(); i-- > 0 && bundle.size() < capacity;) {
      if (!RemoteFreeLists::Shareable(objects[i], size)) continue;
      bundle.push_back(objects[i]);
      objects[i] = objects.back();
      objects.pop_back();
    }
    if (objects.empty()) local.erase(list);
    if (bundle.empty()) break;
    const auto [outcome, status] =
        shared_.Push(ctx, node, draining ? DrainingList(size) : size, bundle, attempts);
    switch (outcome) {
      case RemoteFreeLists::PushOutcome::kPushed:
        Count(shared_tally_.bundles_pushed);
        Count(shared_tally_.objects_pushed, bundle.size());
        if (!draining) hints_->NoteNotEmpty(node, size);
        break;
      case RemoteFreeLists::PushOutcome::kKept: {
        std::vector<fabric::RemoteAddress>& back = local[{node, size}];
        back.insert(back.end(), bundle.begin(), bundle.end());
        break;
      }
      case RemoteFreeLists::PushOutcome::kLost:
        Count(shared_tally_.objects_lost, bundle.size());
        break;
    }
    if (!status.ok()) {
      Count(shared_tally_.failures);
      if (first_error.ok()) first_error = status;
      // Kept objects would come round again: stop at the first failure.
      return first_error;
    }
    if (!all) break;
  }
  return first_error;
}

Status RemoteAllocator::ReleaseToShared(ContextImpl& ctx) {
  if (!options_.share) return Status::Ok();
  // The nodes this worker carved from or gives objects to: compacted last.
  std::set<uint16_t> touched;
  for (size_t node = 0; node < cursors_.size(); ++node) {
    if (cursors_[node].shared) touched.insert(static_cast<uint16_t>(node));
  }
  for (const Seal& seal : pending_seals_)
    touched.insert(seal.chunk.node());
  // The keys first: the pushes wait, and other coroutines may change the map.
  std::vector<std::pair<uint16_t, uint64_t>> keys;
  for (const auto& [key, objects] : free_lists_)
    keys.push_back(key);
  Status first_error;
  for (const auto& [node, size] : keys) {
    if (size < kMinListObjectBytes) continue;
    touched.insert(node);
    Status status = PushShared(ctx, node, size, /*all=*/true, kMaxGiveBackAttempts);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  keys.clear();
  for (const auto& [key, objects] : to_draining_)
    keys.push_back(key);
  for (const auto& [node, size] : keys) {
    touched.insert(node);
    Status status =
        PushShared(ctx, node, size, /*all=*/true, kMaxGiveBackAttempts, /*draining=*/true);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  if (Status sealed = SealChunks(ctx); !sealed.ok() && first_error.ok()) first_error = sealed;
  for (uint16_t node : touched) {
    StatusOr<uint64_t> compacted = Compact(ctx, node, /*scan_step=*/false, kMaxGiveBackAttempts);
    if (!compacted.ok() && first_error.ok()) first_error = compacted.status();
  }
  return first_error;
}

Status RemoteAllocator::ReleaseChunks() {
  Status first_error;
  for (fabric::RemoteAddress chunk : chunks_) {
    Status status = nodes_[chunk.node()]->FreeChunk(chunk);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  // Forget every chunk even after an error: a retry would free the chunks
  // that did go back a second time.
  chunks_.clear();
  free_lists_.clear();
  to_draining_.clear();
  nonempty_shared_.clear();
  pending_seals_.clear();
  cursors_.assign(nodes_.size(), Cursor{});
  return first_error;
}

}  // namespace dmidx::runtime
