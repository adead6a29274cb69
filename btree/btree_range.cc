// Scan and BulkLoad of the B-link tree.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory_resource>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "btree/btree_impl.h"
#include "index/object_writer.h"

namespace dmidx::btree {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// As many node buffers as the context's arena holds, leaving
// index::kScratchReserveBytes for the lock layer's words; at least `at_least`. The
// list is in the context's pools (ContextImpl::memory()).
StatusOr<std::pmr::vector<uint8_t*>> NodeBuffers(ContextImpl& ctx, const NodeShape& shape,
                                                 size_t at_least, size_t at_most = SIZE_MAX) {
  std::pmr::vector<uint8_t*> buffers(ctx.memory());
  const size_t room =
      ctx.arena().Fits(shape.node_bytes(), kNodeBufferAlignment, index::kScratchReserveBytes);
  const size_t wanted = std::max(std::min(room, at_most), at_least);
  buffers.reserve(wanted);
  for (size_t i = 0; i < wanted; ++i) {
    DMIDX_ASSIGN_OR_RETURN(uint8_t * buffer,
                           ctx.arena().Bytes(shape.node_bytes(), kNodeBufferAlignment));
    buffers.push_back(buffer);
  }
  return buffers;
}

// One node of a level being built: where it is and the lowest key it holds
// ("" for the leftmost node of a level: minus infinity).
struct Built {
  std::string low;
  RemoteAddress address;
};

// Splits `n` items into `nodes` runs as even as possible: run i is
// [Begin(i), Begin(i + 1)).
size_t RunBegin(size_t n, size_t nodes, size_t i) {
  return n / nodes * i + n % nodes * i / nodes;  // n * i / nodes without overflow
}

}  // namespace

// Reads leaf after leaf along the sibling chain. Each leaf image is one
// version of one leaf (checksummed), and the leaves covering the key space
// at any moment partition it, so taking from a leaf image that covers the
// cursor the keys in [cursor, its high fence), then moving the cursor to
// that high fence, visits every key present for the whole scan exactly
// once, in order. With the leaf's parent cached, the leaves ahead are read
// together in one round trip (one batch per memory node); an image that does
// not cover the cursor (the tree changed) is set right by a descent.
Status BTreeImpl::ScanKeys(ContextImpl& ctx, std::string_view from,
                           std::optional<std::string_view> to, size_t count,
                           std::vector<KeyValue>* out) {
  if (count != SIZE_MAX) out->reserve(std::min<size_t>(count, 4096));
  return WalkLeaves(ctx, from, to, count, out);
}

// Reads the leaves `plan` names into buffers 1.. in one round trip.
Status BTreeImpl::ReadAhead(ContextImpl& ctx, std::span<const RemoteAddress> plan,
                            std::span<uint8_t* const> buffers) {
  std::pmr::vector<Op> reads(ctx.memory());
  reads.reserve(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    reads.push_back(Op::Read(plan[i], buffers[1 + i], shape_.node_bytes()));
  }
  return ctx.ExecuteAll(reads);
}

namespace {

// Appends the entries of the verified `leaf` with cursor <= key <= to that
// the leaf covers, in key order, until `out` holds `count`. True when it
// does (the scan is complete).
bool EmitLeaf(const NodeView& leaf, std::string_view cursor, std::optional<std::string_view> to,
              size_t count, std::vector<KeyValue>* out) {
  const NodeShape& shape = leaf.shape();
  if (shape.key_bytes() != 8) {
    for (uint32_t slot : leaf.SortedLeafSlots()) {
      const std::string_view key = leaf.leaf_key(slot);
      if (CompareKeys(key, cursor) < 0 || !leaf.Covers(key)) continue;
      if (to && CompareKeys(key, *to) > 0) return false;
      out->push_back({std::string(key), leaf.leaf_value(slot)});
      if (out->size() == count) return true;
    }
    return false;
  }
  // 8-byte keys as big-endian words: the bounds once, then one integer
  // comparison per entry; only the entries in range are sorted.
  auto word = [](std::string_view key) {
    uint64_t value;
    std::memcpy(&value, key.data(), 8);
    return __builtin_bswap64(value);
  };
  uint64_t low = word(cursor);
  if (!leaf.low_is_min()) low = std::max(low, word(leaf.low_fence()));
  uint64_t high = to ? word(*to) : UINT64_MAX;  // inclusive
  bool empty = false;
  if (!leaf.high_is_max()) {
    const uint64_t fence = word(leaf.high_fence());  // exclusive
    if (fence == 0) empty = true;
    high = std::min(high, fence - 1);
  }
  if (empty || low > high) return false;
  std::array<uint64_t, kMaxLeafSlots> keys;
  std::array<uint8_t, kMaxLeafSlots> slots;
  size_t n = 0;
  uint64_t least = UINT64_MAX, most = 0;
  const uint8_t* entries = leaf.data() + shape.leaf_entry_offset(0);
  const uint32_t stride = shape.entry_bytes();
  for (uint64_t bits = leaf.bitmap(); bits != 0; bits &= bits - 1) {
    const auto slot = static_cast<uint32_t>(__builtin_ctzll(bits));
    uint64_t key;
    std::memcpy(&key, entries + slot * stride, 8);
    key = __builtin_bswap64(key);
    if (key >= low && key <= high) {
      keys[n] = key;
      slots[n++] = static_cast<uint8_t>(slot);
      least = std::min(least, key);
      most = std::max(most, key);
    }
  }
  auto emit = [&](uint32_t slot) {
    KeyValue& row = out->emplace_back();
    row.key.assign(reinterpret_cast<const char*>(entries + slot * stride), 8);
    row.value = leaf.leaf_value(slot);
    return out->size() == count;
  };
  if (most - least < (uint64_t{1} << 58)) {
    // The usual case: offsets from the least key fit in 58 bits, so each
    // entry sorts as one 64-bit integer (offset, then slot).
    std::array<uint64_t, kMaxLeafSlots> packed;
    for (size_t i = 0; i < n; ++i)
      packed[i] = (keys[i] - least) << 6 | slots[i];
    std::sort(packed.begin(), packed.begin() + n);
    for (size_t i = 0; i < n; ++i) {
      if (emit(static_cast<uint32_t>(packed[i] & 63))) return true;
    }
    return false;
  }
  std::array<unsigned __int128, kMaxLeafSlots> packed;
  for (size_t i = 0; i < n; ++i)
    packed[i] = static_cast<unsigned __int128>(keys[i]) << 8 | slots[i];
  std::sort(packed.begin(), packed.begin() + n);
  for (size_t i = 0; i < n; ++i) {
    if (emit(static_cast<uint32_t>(packed[i] & 0xff))) return true;
  }
  return false;
}

}  // namespace

Status BTreeImpl::WalkLeaves(ContextImpl& ctx, std::string_view from,
                             std::optional<std::string_view> to, size_t count,
                             std::vector<KeyValue>* out) {
  // Leaves to read ahead: as many as the scratch holds (buffer 0 is for
  // single reads), or for `count`, enough at half-full leaves (one more
  // for the part of the first leaf below the cursor); only those buffers
  // are taken from the arena.
  const size_t half_leaf = std::max<size_t>(1, shape_.leaf_slots() / 2);
  const size_t most = count == SIZE_MAX ? SIZE_MAX : 1 + count / half_leaf + 2;
  DMIDX_ASSIGN_OR_RETURN(const std::pmr::vector<uint8_t*> buffers,
                         NodeBuffers(ctx, shape_, 2, most));
  auto read_ahead = [&] {
    const size_t room = buffers.size() - 1;
    return count == SIZE_MAX ? room : std::min(room, (count - out->size()) / half_leaf + 2);
  };
  std::string cursor(from);
  // The cached level-1 node covering the cursor names the leaves ahead.
  auto plan_for = [&](RemoteAddress expected) {
    std::pmr::vector<RemoteAddress> plan(ctx.memory());
    if (cache_) cache_->LeavesFrom(cursor, to.value_or(""), read_ahead(), &plan, ctx.cache_slot());
    if (!plan.empty() && !expected.is_null() && plan[0] != expected) plan.clear();
    return plan;
  };
  RemoteAddress next;  // the sibling to read; null for the first leaf
  std::pmr::vector<RemoteAddress> ahead(ctx.memory());  // read ahead into buffers 1.. in order
  size_t taken = 0;                                     // of `ahead`
  // Every pass moves the cursor strictly right (to the high fence of a
  // leaf covering it) or returns, so the loop ends.
  for (;;) {
    // A verified image of the leaf covering the cursor.
    uint8_t* image = buffers[0];
    RemoteAddress address = next;
    bool from_cache = false;
    if (taken < ahead.size() && ahead[taken] == next) {
      image = buffers[1 + taken++];
    } else {
      std::pmr::vector<RemoteAddress> plan = plan_for(next);
      if (plan.empty() && cache_ && !next.is_null() && read_ahead() > 2) {
        // Past the cached parent: read the next one (cached on the way)
        // when that saves round trips.
        StatusOr<RemoteAddress> parent = Descend(ctx, cursor, 1, image, /*use_cache=*/true);
        if (!parent.ok() && !parent.status().IsNotFound()) return parent.status();
        plan = plan_for(next);
      }
      if (!plan.empty()) {
        ++ctx.counters().cache_hits;
        from_cache = true;
        DMIDX_RETURN_IF_ERROR(ReadAhead(ctx, plan, buffers));
        ahead = std::move(plan);
        taken = 1;
        address = ahead[0];
        image = buffers[1];
      } else if (next.is_null()) {
        DMIDX_ASSIGN_OR_RETURN(address, Descend(ctx, cursor, 0, image, /*use_cache=*/true));
      } else {
        DMIDX_RETURN_IF_ERROR(ReadNode(ctx, next, image));
      }
    }
    if (!NodeView(shape_, image).Verify()) {
      ++ctx.counters().read_retries;
      DMIDX_RETURN_IF_ERROR(ReadNode(ctx, address, image));
    }
    if (const NodeView leaf(shape_, image); !leaf.is_leaf() || !leaf.Covers(cursor)) {
      if (from_cache) ++ctx.counters().cache_stale;
      ahead.clear();
      image = buffers[0];
      DMIDX_ASSIGN_OR_RETURN(address, Descend(ctx, cursor, 0, image, /*use_cache=*/false));
    }

    const NodeView leaf(shape_, image);
    if (EmitLeaf(leaf, cursor, to, count, out)) return Status::Ok();
    if (leaf.high_is_max() || (to && leaf.high_fence() > *to)) return Status::Ok();
    cursor.assign(leaf.high_fence());
    next = leaf.sibling();
    if (next.is_null()) {
      return Status::Internal("leaf " + address.ToString() + " of B+tree '" + name_ +
                              "' has a high fence but no sibling");
    }
  }
}

// Builds the whole tree bottom-up from `sorted` while holding the lock of
// the empty root leaf. The leftmost new leaf reuses the root leaf's address,
// so a writer that waited for that lock finds the loaded leaf (and follows
// its sibling when the key lies beyond it); every other node is written
// before the new root is published, and the leftmost leaf's image after
// that, before the lock release (WriteLeftmostLeaf).
Status BTreeImpl::LoadSorted(ContextImpl& ctx, std::span<const KeyValue> sorted,
                             double fill_factor) {
  // The root leaf's image; the writer takes what scratch is left.
  DMIDX_ASSIGN_OR_RETURN(uint8_t * root_image, NodeBuffer(ctx));
  RemoteAddress root;
  lock::LockGrant grant;
  for (int hops = 0;; ++hops) {
    DMIDX_ASSIGN_OR_RETURN(root, Root(ctx, true));
    const Op read = Op::Read(root, root_image, shape_.node_bytes());
    DMIDX_ASSIGN_OR_RETURN(grant, LockAndRead(ctx, root, read));
    const NodeView node(shape_, root_image);
    // A root that collapsed (dead, both fences infinite) before its CAS
    // moved the descriptor down: finish the move for it and look again
    // (the tree may be empty below it).
    if (!node.dead() || !node.low_is_min() || !node.high_is_max() || hops >= kMaxDeadHops) break;
    const RemoteAddress into = node.merged_into();
    DMIDX_RETURN_IF_ERROR(lock_.Release(ctx, grant, {}));
    DMIDX_RETURN_IF_ERROR(HelpCollapse(ctx, root, into));
  }
  {
    const NodeView node(shape_, root_image);
    if (!node.is_leaf() || !node.low_is_min() || !node.high_is_max() || node.bitmap() != 0) {
      (void)lock_.Release(ctx, grant, {});
      return Status::FailedPrecondition("BulkLoad needs an empty tree; B+tree '" + name_ +
                                        "' is not (it holds keys, or held enough to grow levels)");
    }
  }
  if (sorted.empty()) return lock_.Release(ctx, grant, {});  // nothing to load
  // The leftmost leaf's write, after the publish, must not fail for want of
  // memory for its redo record: the record's slot is made now, before the
  // load takes the memory.
  if (Status reserved = lock_.ReserveRecord(ctx, grant, shape_.node_bytes()); !reserved.ok()) {
    (void)lock_.Release(ctx, grant, {});
    return reserved;
  }

  // Every node the load makes goes back to the allocator unless the new
  // root was published (or may have been).
  index::ObjectWriter writer(ctx);
  auto fail = [&](Status status) {
    (void)lock_.Release(ctx, grant, {});
    return status;
  };
  auto allocate = [&](size_t nodes, bool reuse_root) -> StatusOr<std::vector<RemoteAddress>> {
    std::vector<RemoteAddress> addresses;
    if (reuse_root) addresses.push_back(root);
    while (addresses.size() < nodes) {
      DMIDX_ASSIGN_OR_RETURN(RemoteAddress address,
                             writer.Allocate(shape_.node_bytes(), std::nullopt));
      addresses.push_back(address);
    }
    return addresses;
  };
  // A buffer for the image of the node at `address`, written by a flush.
  auto next = [&](RemoteAddress address) -> StatusOr<uint8_t*> {
    DMIDX_ASSIGN_OR_RETURN(uint8_t * image, writer.Buffer(shape_.node_bytes()));
    writer.Write(address, image, shape_.node_bytes());
    return image;
  };
  // Leaves.
  const size_t per_leaf = std::clamp<size_t>(
      static_cast<size_t>(std::floor(fill_factor * shape_.leaf_slots())), 1, shape_.leaf_slots());
  const size_t leaves = (sorted.size() + per_leaf - 1) / per_leaf;
  StatusOr<std::vector<RemoteAddress>> leaf_addresses = allocate(leaves, true);
  if (!leaf_addresses.ok()) return fail(leaf_addresses.status());
  std::vector<Built> level;
  for (size_t i = 0; i < leaves; ++i) {
    const size_t begin = RunBegin(sorted.size(), leaves, i);
    const size_t end = RunBegin(sorted.size(), leaves, i + 1);
    uint8_t* image = root_image;
    if (i > 0) {
      StatusOr<uint8_t*> buffer = next((*leaf_addresses)[i]);
      if (!buffer.ok()) return fail(buffer.status());
      image = *buffer;
    }
    NodeView leaf(shape_, image);
    leaf.InitLeaf(i == 0 ? "" : std::string_view(sorted[begin].key),
                  i + 1 == leaves ? "" : std::string_view(sorted[end].key),
                  i + 1 == leaves ? RemoteAddress() : (*leaf_addresses)[i + 1]);
    for (size_t k = begin; k < end; ++k) {
      leaf.SetLeafEntry(static_cast<uint32_t>(k - begin), sorted[k].key, sorted[k].value);
    }
    leaf.Seal();
    level.push_back({i == 0 ? "" : sorted[begin].key, (*leaf_addresses)[i]});
  }
  // Internal levels, until one node is left.
  const size_t fanout = shape_.internal_slots() + 1;
  const size_t per_node = std::clamp<size_t>(
      static_cast<size_t>(std::floor(fill_factor * static_cast<double>(fanout))), 2, fanout);
  for (uint8_t height = 1; level.size() > 1; ++height) {
    const size_t nodes = (level.size() + per_node - 1) / per_node;
    StatusOr<std::vector<RemoteAddress>> addresses = allocate(nodes, false);
    if (!addresses.ok()) return fail(addresses.status());
    std::vector<Built> above;
    for (size_t i = 0; i < nodes; ++i) {
      const size_t begin = RunBegin(level.size(), nodes, i);
      const size_t end = RunBegin(level.size(), nodes, i + 1);
      StatusOr<uint8_t*> image = next((*addresses)[i]);
      if (!image.ok()) return fail(image.status());
      NodeView node(shape_, *image);
      node.InitInternal(height, level[begin].low, i + 1 == nodes ? "" : level[end].low,
                        i + 1 == nodes ? RemoteAddress() : (*addresses)[i + 1],
                        level[begin].address);
      for (size_t k = begin + 1; k < end; ++k)
        node.InsertSeparator(level[k].low, level[k].address);
      node.Seal();
      above.push_back({level[begin].low, (*addresses)[i]});
    }
    level = std::move(above);
  }
  if (Status status = writer.Flush(); !status.ok()) return fail(status);
  const RemoteAddress top = level[0].address;
  if (top == root) {
    writer.Keep();
    const Op leftmost = Op::Write(root, root_image, shape_.node_bytes());
    return lock_.Release(ctx, grant, {&leftmost, 1});
  }
  Status unknown;  // why the publish's outcome is unknown, if it is
  StatusOr<bool> published = PublishRoot(ctx, root, top);
  if (!published.ok()) {
    // The CAS may have landed all the same (its batch failed after the
    // memory node ran it): ask the descriptor.
    StatusOr<RemoteAddress> now = Root(ctx, true);
    if (now.ok() && *now != top) return fail(published.status());
    if (!now.ok()) unknown = published.status();
  } else if (!*published) {
    return fail(Status::Aborted("the root of B+tree '" + name_ + "' changed during BulkLoad"));
  }
  writer.Keep();
  return WriteLeftmostLeaf(ctx, grant, root, root_image, unknown);
}

// The new root is out (or may be): until the leftmost leaf, at the old
// root's address, holds its loaded image, the keys below the first
// separator are missing, and a compute node whose root hint is still the
// old root takes that leaf (the empty root's image, fences both infinite)
// for the root and puts any key in it. So the leaf is written alone, under
// the lock (nobody else writes it meanwhile), and again while its batch
// fails (HierarchicalLock::WriteBack), before the release: a Release whose
// write-back never lands lets the word go, and that leaf's stale image is
// whole (no checksum tells it).
// If the publish did not land after all (`unknown` set), the old root is
// then a leaf with a high fence whose sibling chain holds every other leaf:
// descents follow the chain, and a root grown over it (GrowRoot) covers it,
// so every loaded key is reachable either way. If the leaf cannot be
// written, the lock stays held: writers get DeadlineExceeded instead of
// acknowledged writes in the wrong leaf.
Status BTreeImpl::WriteLeftmostLeaf(ContextImpl& ctx, lock::LockGrant& grant, RemoteAddress leaf,
                                    uint8_t* image, const Status& unknown) {
  const Op leftmost = Op::Write(leaf, image, shape_.node_bytes());
  const Status written = lock_.WriteBack(ctx, grant, {&leftmost, 1});
  if (!written.ok()) {
    lock_.KeepHeld(grant);
    return Status::Internal("BulkLoad of B+tree '" + name_ + "' " +
                            (unknown.ok() ? "published" : "may have published") +
                            " its root but could not write its leftmost leaf " + leaf.ToString() +
                            " (" + std::string(written.message()) +
                            "); the tree may be damaged, and the leaf's lock stays held");
  }
  const Status released = lock_.Release(ctx, grant, {});
  if (!unknown.ok()) {
    return Status::Internal("BulkLoad of B+tree '" + name_ + "' may have published its root (" +
                            std::string(unknown.message()) +
                            "); its leftmost leaf was written, so every key loaded is in the tree "
                            "either way");
  }
  return released;
}

}  // namespace dmidx::btree
