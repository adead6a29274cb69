#include "lib/runtime/remote_allocator.h"

#include <algorithm>
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
      // The directories are carved from this allocator's own chunks, and
      // a page that lost the race to be published is kept for reuse here
      // (it may go on a list: its chunk is sealed as one a context carved).
      shared_(nodes_, {[this](uint16_t node) -> StatusOr<fabric::RemoteAddress> {
                         DMIDX_ASSIGN_OR_RETURN(fabric::RemoteAddress page,
                                                CarveOn(nullptr, node, kDirectoryBytes, 64));
                         cursors_[node].shared = true;
                         return page;
                       },
                       [this](fabric::RemoteAddress page) { (void)Free(page, kDirectoryBytes); }}),
      cursors_(nodes_.size()),
      own_hints_(options_.hints == nullptr
                     ? std::make_unique<EmptyListHints>(options_.empty_list_recheck)
                     : nullptr),
      hints_(options_.hints != nullptr ? options_.hints : own_hints_.get()) {
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
  options.exhausted_wait = reclamation.exhausted_wait;
  return options;
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

StatusOr<fabric::RemoteAddress> RemoteAllocator::Allocate(ContextImpl& ctx, uint64_t bytes,
                                                          uint64_t alignment,
                                                          std::optional<uint16_t> node) {
  StatusOr<fabric::RemoteAddress> object =
      Allocate(options_.share ? &ctx : nullptr, bytes, alignment, node);
  if (object.ok() || !object.status().IsResourceExhausted() || !exhausted_waiter_ ||
      options_.exhausted_wait.count() == 0 || (node && AnotherNodeFits(*node, bytes, alignment))) {
    return object;
  }
  return AllocateAfterWaiting(ctx, bytes, alignment, node, object.status());
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

StatusOr<uint64_t> RemoteAllocator::Compact(ContextImpl& ctx, uint16_t node,
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
  DMIDX_ASSIGN_OR_RETURN(const std::vector<uint64_t> sizes, shared_.Sizes(ctx, node));
  Count(shared_tally_.compaction_passes);

  // Drain: every bundle popped is this pass's alone (one CAS each).
  std::map<uint64_t, std::vector<fabric::RemoteAddress>> held;  // by size
  uint32_t bundles = 0;
  Status first_error;
  for (uint64_t size : sizes) {
    while (bundles < options_.compact_bundles_per_pass) {
      std::vector<fabric::RemoteAddress> bundle;
      if (Status popped = shared_.Pop(ctx, node, size, bundle); !popped.ok()) {
        Count(shared_tally_.failures);
        // A list that stayed contended (Aborted: others pop and push it)
        // is drained less this pass, and nothing is lost: not an error.
        if (!popped.IsAborted() && first_error.ok()) first_error = popped;
        break;
      }
      if (bundle.empty()) break;
      ++bundles;
      compaction_counters_.objects_drained += bundle.size();
      std::vector<fabric::RemoteAddress>& objects = held[size];
      objects.insert(objects.end(), bundle.begin(), bundle.end());
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
      if (object.offset() < layout.chunks_begin) continue;
      const uint64_t index = (object.offset() - layout.chunks_begin) / layout.chunk_bytes;
      if (index >= layout.total_chunks) continue;
      if (!per_chunk[index].insert(object.offset()).second) suspect.insert(index);
    }
  }

  // Their seals, then the chunks held in full go back.
  std::set<uint64_t> returned;
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
      if (seals[i] == 0 || seals[i] != objects || suspect.contains(index)) continue;
      // Nobody else holds, uses or lists an object of this chunk: it is
      // this pass's to give back. A failed call may have taken it, so its
      // objects are forgotten either way.
      const fabric::RemoteAddress chunk =
          fabric::RemoteAddress::Pool(node, layout.chunks_begin + index * layout.chunk_bytes);
      returned.insert(index);
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
  // The rest goes back on the lists (through the local ones, so that a
  // push that keeps its bundle leaves it to this allocator).
  for (auto& [size, objects] : held) {
    std::set<uint64_t> seen;
    std::vector<fabric::RemoteAddress>& local = free_lists_[{node, size}];
    for (fabric::RemoteAddress object : objects) {
      const bool in_chunks =
          object.offset() >= layout.chunks_begin &&
          (object.offset() - layout.chunks_begin) / layout.chunk_bytes < layout.total_chunks;
      const uint64_t index =
          in_chunks ? (object.offset() - layout.chunks_begin) / layout.chunk_bytes : 0;
      if (in_chunks && returned.contains(index)) continue;
      if (!seen.insert(object.offset()).second) continue;  // never twice
      local.push_back(object);
    }
    if (local.empty()) {
      free_lists_.erase({node, size});
      continue;
    }
    const uint64_t lost_before = shared_tally_.objects_lost.load(std::memory_order_relaxed);
    Status pushed = PushShared(ctx, node, size, /*all=*/true, push_attempts);
    compaction_counters_.objects_lost +=
        shared_tally_.objects_lost.load(std::memory_order_relaxed) - lost_before;
    if (!pushed.ok() && first_error.ok()) first_error = pushed;
  }
  if (!first_error.ok()) return first_error;
  return static_cast<uint64_t>(returned.size());
}

RemoteAllocator::Popped RemoteAllocator::PopShared(ContextImpl& ctx, uint16_t node, uint64_t size) {
  if (size < kMinListObjectBytes) return Popped::kEmpty;
  std::vector<fabric::RemoteAddress> bundle;
  if (!shared_.Pop(ctx, node, size, bundle).ok()) {
    // Nothing taken, or a bundle that may have been (a failed CAS batch):
    // either way nothing is handed out twice. Carving goes on.
    Count(shared_tally_.failures);
    return Popped::kFailed;
  }
  if (bundle.empty()) {
    nonempty_shared_.erase({node, size});
    hints_->NoteEmpty(node, size, ctx.Now());
    return Popped::kEmpty;
  }
  Count(shared_tally_.bundles_popped);
  Count(shared_tally_.objects_popped, bundle.size());
  nonempty_shared_.insert({node, size});
  hints_->NoteNotEmpty(node, size);
  std::vector<fabric::RemoteAddress>& local = free_lists_[{node, size}];
  local.insert(local.end(), bundle.begin(), bundle.end());
  return Popped::kTook;
}

Status RemoteAllocator::Free(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment) {
  if (object.is_null() || bytes == 0 || !ValidAlignment(alignment)) {
    return Status::InvalidArgument("Free: null object, zero size or bad alignment");
  }
  if (object.node() >= nodes_.size() || nodes_[object.node()] == nullptr ||
      object.region() != fabric::Region::kPool || object.offset() % alignment != 0) {
    return Status::InvalidArgument("Free: " + object.ToString() +
                                   " is not an object this allocator can hand out");
  }
  free_lists_[{object.node(), RoundUp(bytes, alignment)}].push_back(object);
  return Status::Ok();
}

Status RemoteAllocator::Free(ContextImpl& ctx, fabric::RemoteAddress object, uint64_t bytes,
                             uint64_t alignment) {
  DMIDX_RETURN_IF_ERROR(Free(object, bytes, alignment));
  const uint64_t size = RoundUp(bytes, alignment);
  if (!options_.share || !RemoteFreeLists::Shareable(object, size)) return Status::Ok();
  if (free_lists_[{object.node(), size}].size() <= options_.keep_free_objects) return Status::Ok();
  // A failed push is the allocator's business, not the caller's: its
  // objects stay here or are counted lost.
  (void)PushShared(ctx, object.node(), size, /*all=*/false);
  return Status::Ok();
}

Status RemoteAllocator::PushShared(ContextImpl& ctx, uint16_t node, uint64_t size, bool all,
                                   uint32_t attempts) {
  const uint32_t capacity = RemoteFreeLists::BundleCapacity(size);
  Status first_error;
  while (true) {
    // Taken out of the local list before the round trip, so that no other
    // coroutine of this thread hands them out meanwhile.
    std::vector<fabric::RemoteAddress> bundle;
    auto list = free_lists_.find({node, size});
    if (list == free_lists_.end()) break;
    std::vector<fabric::RemoteAddress>& objects = list->second;
    for (size_t i = objects.size(); i-- > 0 && bundle.size() < capacity;) {
      if (!RemoteFreeLists::Shareable(objects[i], size)) continue;
      bundle.push_back(objects[i]);
      objects[i] = objects.back();
      objects.pop_back();
    }
    if (objects.empty()) free_lists_.erase(list);
    if (bundle.empty()) break;
    const auto [outcome, status] = shared_.Push(ctx, node, size, bundle, attempts);
    switch (outcome) {
      case RemoteFreeLists::PushOutcome::kPushed:
        Count(shared_tally_.bundles_pushed);
        Count(shared_tally_.objects_pushed, bundle.size());
        hints_->NoteNotEmpty(node, size);
        break;
      case RemoteFreeLists::PushOutcome::kKept: {
        std::vector<fabric::RemoteAddress>& back = free_lists_[{node, size}];
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
  if (Status sealed = SealChunks(ctx); !sealed.ok() && first_error.ok()) first_error = sealed;
  for (uint16_t node : touched) {
    StatusOr<uint64_t> compacted = Compact(ctx, node, kMaxGiveBackAttempts);
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
  nonempty_shared_.clear();
  pending_seals_.clear();
  cursors_.assign(nodes_.size(), Cursor{});
  return first_error;
}

}  // namespace dmidx::runtime
