#include "lib/runtime/remote_allocator.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "lib/runtime/context.h"

namespace dmidx::runtime {
namespace {

using FreeLists = std::map<std::pair<uint16_t, uint64_t>, std::vector<fabric::RemoteAddress>>;

constexpr uint64_t kMaxAlignment = 4096;
// Pops tried when the memory node has no chunk left and the shared list
// only failed (each pop itself makes kMaxPopAttempts attempts).
constexpr uint32_t kPopsWhenExhausted = 8;

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
std::optional<fabric::RemoteAddress> TakeFree(FreeLists& free_lists, uint16_t node, uint64_t size,
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

}  // namespace

RemoteAllocator::RemoteAllocator(std::vector<memnode::MemoryNodeControl*> nodes,
                                 uint32_t first_node, RemoteAllocatorOptions options)
    : nodes_(std::move(nodes)),
      options_(options),
      // The directories are carved from this allocator's own chunks, and
      // a page that lost the race to be published is kept for reuse here.
      shared_(nodes_,
              {[this](uint16_t node) { return CarveOn(nullptr, node, kDirectoryBytes, 64); },
               [this](fabric::RemoteAddress page) { (void)Free(page, kDirectoryBytes); }}),
      cursors_(nodes_.size()) {
  for (size_t id = 0; id < nodes_.size(); ++id) {
    assert(nodes_[id] == nullptr || nodes_[id]->node_id() == id);
  }
  next_node_ = nodes_.empty() ? 0 : static_cast<uint32_t>(first_node % nodes_.size());
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
  return Allocate(options_.share ? &ctx : nullptr, bytes, alignment, node);
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
  if (ctx != nullptr && nonempty_shared_.contains({node, size}) &&
      PopShared(*ctx, node, size) == Popped::kTook) {
    if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
  }
  return CarveOn(ctx, node, size, alignment);
}

StatusOr<fabric::RemoteAddress> RemoteAllocator::CarveOn(ContextImpl* ctx, uint16_t node,
                                                         uint64_t size, uint64_t alignment) {
  const uint64_t chunk_bytes = nodes_[node]->chunk_bytes();
  if (auto carved =
          Carve(cursors_[node].chunk, chunk_bytes, cursors_[node].used, size, alignment)) {
    return *carved;
  }
  // Before a new chunk: what others gave back. The pop may wait, and other
  // coroutines of this thread may move the cursor meanwhile.
  if (ctx != nullptr && PopShared(*ctx, node, size) == Popped::kTook) {
    if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
    if (auto carved =
            Carve(cursors_[node].chunk, chunk_bytes, cursors_[node].used, size, alignment)) {
      return *carved;
    }
  }
  StatusOr<fabric::RemoteAddress> chunk = nodes_[node]->AllocateChunk();
  if (!chunk.ok()) {
    // The pool is out: what others gave back is all there is, so a list
    // that only failed (contended, a failed batch) is tried again before
    // the node is reported exhausted; one found empty ends it.
    if (ctx == nullptr || !chunk.status().IsResourceExhausted()) return chunk.status();
    for (uint32_t attempt = 0; attempt < kPopsWhenExhausted; ++attempt) {
      const Popped popped = PopShared(*ctx, node, size);
      if (popped == Popped::kEmpty) break;
      if (popped == Popped::kTook) {
        if (auto reused = TakeFree(free_lists_, node, size, alignment)) return *reused;
      }
    }
    return chunk.status();
  }
  assert(chunk->node() == node && chunk->offset() % kMaxAlignment == 0);
  // The rest of the old chunk is abandoned; it goes back with ReleaseChunks().
  chunks_.push_back(*chunk);
  ++chunks_taken_;
  cursors_[node] = Cursor{*chunk, size};
  return *chunk;
}

SharedListCounters RemoteAllocator::shared_counters() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return {.bundles_popped = shared_tally_.bundles_popped.load(kRelaxed),
          .objects_popped = shared_tally_.objects_popped.load(kRelaxed),
          .bundles_pushed = shared_tally_.bundles_pushed.load(kRelaxed),
          .objects_pushed = shared_tally_.objects_pushed.load(kRelaxed),
          .objects_lost = shared_tally_.objects_lost.load(kRelaxed),
          .failures = shared_tally_.failures.load(kRelaxed)};
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
    return Popped::kEmpty;
  }
  Count(shared_tally_.bundles_popped);
  Count(shared_tally_.objects_popped, bundle.size());
  nonempty_shared_.insert({node, size});
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

Status RemoteAllocator::PushShared(ContextImpl& ctx, uint16_t node, uint64_t size, bool all) {
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
    const auto [outcome, status] = shared_.Push(ctx, node, size, bundle);
    switch (outcome) {
      case RemoteFreeLists::PushOutcome::kPushed:
        Count(shared_tally_.bundles_pushed);
        Count(shared_tally_.objects_pushed, bundle.size());
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
  // The keys first: the pushes wait, and other coroutines may change the map.
  std::vector<std::pair<uint16_t, uint64_t>> keys;
  for (const auto& [key, objects] : free_lists_)
    keys.push_back(key);
  Status first_error;
  for (const auto& [node, size] : keys) {
    if (size < kMinListObjectBytes) continue;
    Status status = PushShared(ctx, node, size, /*all=*/true);
    if (!status.ok() && first_error.ok()) first_error = status;
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
  cursors_.assign(nodes_.size(), Cursor{});
  return first_error;
}

}  // namespace dmidx::runtime
