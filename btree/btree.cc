// The B-link tree client: point operations, descents, splits and counters.
// See docs/btree.md for the node layout and why reads check a checksum.
#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "btree/btree_impl.h"
#include "index/object_writer.h"
#include "index/open.h"
#include "index/restarts.h"
#include "index/verified_read.h"

namespace dmidx {

namespace btree {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// NotFound for a key the tree does not hold (allocates nothing).
Status NotInTree() {
  static const Status::Constant kNotInTree(StatusCode::kNotFound, "key not in the tree");
  return kNotInTree.status();
}

void SortByKey(std::vector<Entry>* entries) {
  std::sort(entries->begin(), entries->end(),
            [](const Entry& a, const Entry& b) { return a.key < b.key; });
}

// A node's fences as InitLeaf/InitInternal take them ("" = infinite).
std::string LowFence(const NodeView& node) {
  return node.low_is_min() ? "" : std::string(node.low_fence());
}
std::string HighFence(const NodeView& node) {
  return node.high_is_max() ? "" : std::string(node.high_fence());
}

// Reads the node at `address` into `buffer` until the image passes its
// checksum (index/verified_read.h): only a writer holding the node's lock
// word `lock_word` changes a reachable node, so the word at `quiet` (0, or
// the caller's own hold) means no writer is mid-write. `read_locked` reads
// the node under its lock, to tell damage from a torn READ.
Status ReadVerifiedNode(ContextImpl& ctx, const NodeShape& shape, RemoteAddress address,
                        uint8_t* buffer, RemoteAddress lock_word, uint64_t quiet,
                        FunctionRef<StatusOr<index::LockedRead>()> read_locked,
                        std::chrono::nanoseconds wait_timeout) {
  return index::ReadVerified(
      ctx, "node", address, buffer, shape.node_bytes(),
      [&] { return NodeView(shape, buffer).Verify(); }, lock_word,
      [quiet](uint64_t word) { return word == quiet; }, read_locked,
      [](uint64_t word) { return lock::HierarchicalLock::HolderOf(word); }, wait_timeout);
}

}  // namespace

BTreeImpl::BTreeImpl(runtime::ComputeNode& node, std::string name, const NodeShape& shape,
                     RemoteAddress descriptor, lock::GlobalLockTable table,
                     const BTreeOptions& options, uint64_t owner_tag,
                     std::shared_ptr<lock::LocalLockTable> local_locks,
                     std::shared_ptr<BTreeCache> cache, index::RdwcDispatch rdwc)
    : IndexHandle(node, "B+tree", name, shape.key_bytes(), std::move(rdwc)),
      name_(std::move(name)),
      shape_(shape),
      descriptor_(descriptor),
      options_(options),
      lock_(std::move(table),
            lock::HoclOptions{.local_table = options.local_lock_table,
                              .max_handovers = options.max_handovers,
                              .combine_commands = options.combine_commands,
                              .acquire_timeout = options.lock_timeout},
            owner_tag, std::move(local_locks), lock::RedoLog::For(node)),
      cache_(std::move(cache)) {
  // At least 1 when merging is on: an empty leaf, an internal node with
  // one child, is always underfull.
  auto below = [&](uint32_t slots) {
    return options.merge_below_percent == 0
               ? 0u
               : std::max(1u, (options.merge_below_percent * slots + 99) / 100);
  };
  merge_below_leaf_ = below(shape_.leaf_slots());
  merge_below_internal_ = below(shape_.internal_slots());
  // A merged node is at most three quarters full and keeps at least the
  // underfull threshold free, so the next few inserts do not split it
  // again (and at merge_below_percent 50, one key inserted and deleted in
  // turn does not split and merge every time).
  auto fit = [](uint32_t slots, uint32_t threshold) {
    return std::min(slots * 3 / 4, slots - threshold);
  };
  merge_fit_leaf_ = fit(shape_.leaf_slots(), merge_below_leaf_);
  merge_fit_internal_ = fit(shape_.internal_slots(), merge_below_internal_);
  root_hint_holder_ =
      node.epochs().AddHolder([this](uint64_t keep_from) { return HoldRootHint(keep_from); });
}

Status BTreeImpl::LookupKey(ContextImpl& ctx, std::string_view key, uint64_t* value) {
  DMIDX_ASSIGN_OR_RETURN(uint8_t * buffer, NodeBuffer(ctx));
  DMIDX_RETURN_IF_ERROR(Descend(ctx, key, 0, buffer, /*use_cache=*/true).status());
  const NodeView leaf(shape_, buffer);
  const int slot = leaf.FindLeafSlot(key);
  if (slot < 0) return NotInTree();
  *value = leaf.leaf_value(slot);
  return Status::Ok();
}

// Every leaf change: locate the leaf, lock it (CAS + READ in one batch),
// change one entry, write back that entry, the checksum and the bitmap with
// the release in one batch. An upsert into a full leaf splits it.
Status BTreeImpl::Modify(ContextImpl& ctx, std::string_view key, Change change, uint64_t value) {
  DMIDX_ASSIGN_OR_RETURN(uint8_t * buffer, NodeBuffer(ctx));
  DMIDX_ASSIGN_OR_RETURN(uint8_t * spare, NodeBuffer(ctx));  // a split's right half
  std::optional<RemoteAddress> cached_parent;
  DMIDX_ASSIGN_OR_RETURN(RemoteAddress leaf, LocateLeaf(ctx, key, buffer, true, &cached_parent));
  // Sibling pointers followed in a row before the first new descent; after
  // it the chain is followed as far as it goes (leaves whose parent was
  // never told of them, say after a compute node died mid-split).
  int hops = 0;
  bool descended_again = false;
  for (index::Restarts restarts; restarts.Next();) {
    const Op read = Op::Read(leaf, buffer, shape_.node_bytes());
    // The lanes of the checksum the READ verified with: the seal after one
    // entry's change hashes again only from that entry on.
    ChecksumCheckpoints checkpoints;
    DMIDX_ASSIGN_OR_RETURN(lock::LockGrant grant, LockAndRead(ctx, leaf, read, &checkpoints));
    NodeView node(shape_, buffer);
    if (!node.is_leaf() || !node.Covers(key)) {
      // Moved right by a split, or a stale route: let go and look again.
      // A split moves a key at most a few leaves right; further (the leaf
      // was the root before a bulk load, say) a descent is cheaper than
      // locking leaf after leaf.
      const RemoteAddress sibling = node.sibling();
      const bool right = node.is_leaf() && node.BeyondHigh(key) && !sibling.is_null() &&
                         (descended_again || hops++ < kMaxHops);
      DMIDX_RETURN_IF_ERROR(lock_.Release(ctx, grant, {}));
      if (cached_parent) {
        cache_->Invalidate(*cached_parent);
        ++ctx.counters().cache_stale;
      }
      cached_parent.reset();
      if (right) {
        leaf = sibling;
      } else {
        descended_again = true;
        DMIDX_ASSIGN_OR_RETURN(leaf, LocateLeaf(ctx, key, buffer, false, &cached_parent));
      }
      continue;
    }
    // The leaf as it will stand after this change's write-back: handed
    // with the lock to a waiter of this compute node, which then needs no
    // READ of it.
    const lock::ObjectImage image{leaf, buffer, shape_.node_bytes()};
    int slot = node.FindLeafSlot(key);
    if (slot < 0 && change != Change::kUpsert) {
      DMIDX_RETURN_IF_ERROR(lock_.Release(ctx, grant, {}, &image));
      return NotInTree();
    }
    if (slot < 0) slot = node.FreeLeafSlot();
    if (slot < 0) return SplitLeaf(ctx, leaf, grant, key, value, buffer, spare);
    if (change == Change::kDelete) {
      node.ClearLeafEntry(slot);
      // Left underfull: written back, then merged (out of line).
      if (node.leaf_entries() < merge_below_leaf_) [[unlikely]]
        return DeleteAndMerge(ctx, key, leaf, slot, grant, checkpoints, buffer, image, spare);
    } else {
      node.SetLeafEntry(slot, key, value);
    }
    return WriteBackEntry(ctx, leaf, slot, grant, checkpoints, buffer, image);
  }
  return index::GaveUp("leaf change", core_.label());
}

Status BTreeImpl::WriteBackEntry(ContextImpl& ctx, RemoteAddress leaf, int slot,
                                 lock::LockGrant& grant, const ChecksumCheckpoints& checkpoints,
                                 uint8_t* buffer, const lock::ObjectImage& image) {
  // Changed: the bitmap and the entry, all below the entry's end.
  const uint32_t entry = shape_.leaf_entry_offset(slot);
  NodeView(shape_, buffer).SealFrom(checkpoints, entry + shape_.entry_bytes());
  if (!options_.entry_level_write_back) {
    return lock_.Release(ctx, grant, {Op::Write(leaf, buffer, shape_.node_bytes())}, &image);
  }
  // Entry-level write-back: checksum + bitmap, and the entry.
  return lock_.Release(
      ctx, grant,
      {Op::Write(leaf, buffer, 16), Op::Write(leaf + entry, buffer + entry, shape_.entry_bytes())},
      &image);
}

Status BTreeImpl::DeleteAndMerge(ContextImpl& ctx, std::string_view key, RemoteAddress leaf,
                                 int slot, lock::LockGrant& grant,
                                 const ChecksumCheckpoints& checkpoints, uint8_t* buffer,
                                 const lock::ObjectImage& image, uint8_t* spare) {
  // The delete's own write-back is what it returns; the merge after it
  // is best effort.
  const Status status = WriteBackEntry(ctx, leaf, slot, grant, checkpoints, buffer, image);
  if (status.ok()) MergeAfterDelete(ctx, key, buffer, spare);
  return status;
}

Status BTreeImpl::ReadNode(ContextImpl& ctx, RemoteAddress address, uint8_t* buffer,
                           bool may_lock) {
  const auto read_locked = [&]() -> StatusOr<index::LockedRead> {
    // A caller holding another node's lock takes no second one: the
    // failures count as torn READs (a writer at work), read again.
    if (!may_lock) return index::LockedRead::kBusy;
    DMIDX_RETURN_IF_ERROR(ReadUnderLock(ctx, address, buffer));
    return index::LockedRead::kRead;
  };
  return ReadVerifiedNode(ctx, shape_, address, buffer, lock_.table().WordFor(address), 0,
                          read_locked, options_.lock_timeout);
}

// The rare path of a reader's damage check: HOCL's lock with the READ
// combined (read under it, or answered from a local holder's image), then
// the release with no write-back.
Status BTreeImpl::ReadUnderLock(ContextImpl& ctx, RemoteAddress address, uint8_t* buffer) {
  const Op read = Op::Read(address, buffer, shape_.node_bytes());
  DMIDX_ASSIGN_OR_RETURN(lock::LockGrant grant, lock_.Acquire(ctx, address, &read));
  Status status;
  if (!grant.read_done) status = ctx.Execute(address.node(), {&read, 1});
  const Status released = lock_.Release(ctx, grant, {});
  return status.ok() ? released : status;
}

StatusOr<lock::LockGrant> BTreeImpl::LockAndRead(ContextImpl& ctx, RemoteAddress address,
                                                 const Op& read, ChecksumCheckpoints* checkpoints) {
  DMIDX_ASSIGN_OR_RETURN(lock::LockGrant grant, lock_.Acquire(ctx, address, &read));
  auto* buffer = static_cast<uint8_t*>(read.local);
  // Under the lock the node does not change, and every write-back before the
  // lock's release has landed; an image still failing its checksum is read
  // again rather than trusted, and if it keeps failing while the word holds
  // this compute node's own tag, the node is damaged (DataLoss).
  Status status;
  if (!grant.read_done || !NodeView(shape_, buffer).Verify(checkpoints)) {
    if (grant.read_done) ++ctx.counters().read_retries;
    status = ReadVerifiedNode(ctx, shape_, address, buffer, grant.word, grant.tag,
                              index::kUnderOwnHold, options_.lock_timeout);
    // The checkpoints are of the image that verified.
    if (status.ok() && checkpoints != nullptr)
      NodeView(shape_, buffer).ComputeChecksum(checkpoints);
  }
  if (!status.ok()) {
    (void)lock_.Release(ctx, grant, {});
    return status;
  }
  return grant;
}

// The address of the leaf for `key`, without reading the leaf: from the
// cache's level-1 entry, or from the level-1 node on the way down (or the
// root, while it is a leaf). The caller reads the leaf under its lock and
// checks its fences, so a stale answer only costs a retry.
StatusOr<RemoteAddress> BTreeImpl::LocateLeaf(ContextImpl& ctx, std::string_view key,
                                              uint8_t* buffer, bool use_cache,
                                              std::optional<RemoteAddress>* cached_parent) {
  if (use_cache && cache_) {
    if (auto route = cache_->Find(key, ctx.cache_slot()); route && route->level == 1) {
      ++ctx.counters().cache_hits;
      *cached_parent = route->node;
      return route->child;
    }
  }
  // Descend counts the cache miss (or its hit higher up).
  StatusOr<RemoteAddress> parent = Descend(ctx, key, 1, buffer, use_cache);
  if (parent.ok()) return NodeView(shape_, buffer).FindChild(key);
  if (parent.status().IsNotFound()) return Root(ctx, false);  // the root is a leaf
  return parent.status();
}

StatusOr<RemoteAddress> BTreeImpl::Root(ContextImpl& ctx, bool refresh) {
  uint64_t root = refresh ? 0 : RootHint(ctx);
  if (root == 0) {
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * word, Word(ctx));
    const Op read = Op::Read(descriptor_ + offsetof(Descriptor, root), word, 8);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(descriptor_.node(), {&read, 1}));
    root = *word;
    SetRootHint(ctx, root);
  }
  return RemoteAddress::FromRaw(root);
}

void BTreeImpl::SetRootHint(ContextImpl& ctx, uint64_t root) {
  std::lock_guard<std::mutex> guard(root_hint_mutex_);
  // The epoch this operation reads in: every node reachable from the root
  // it learned is retired at that epoch or later (runtime/epochs.h).
  StoreRootHint(root, ctx.epoch());
}

void BTreeImpl::StoreRootHint(uint64_t root, uint64_t epoch) {
  // Every access of the seqlock is seq_cst (one total order, no fence:
  // ThreadSanitizer's build refuses atomic_thread_fence); on x86 that
  // costs the readers nothing and the writer, under the mutex, an xchg
  // per store.
  const uint64_t version = root_hint_version_.load();
  root_hint_version_.store(version + 1);
  root_hint_epoch_.store(epoch);
  root_hint_.store(root);
  root_hint_version_.store(version + 2);
}

uint64_t BTreeImpl::RootHint(const ContextImpl& ctx) const {
  const uint64_t version = root_hint_version_.load();
  const uint64_t root = root_hint_.load();
  const uint64_t epoch = root_hint_epoch_.load();
  if ((version & 1) != 0 || root_hint_version_.load() != version) {
    return 0;  // being changed: ask the descriptor
  }
  // Learned before this operation's epoch: its pin does not hold what the
  // hint reaches, and the keeper may drop the hint meanwhile.
  return epoch >= ctx.epoch() ? root : 0;
}

uint64_t BTreeImpl::HoldRootHint(uint64_t keep_from) {
  std::lock_guard<std::mutex> guard(root_hint_mutex_);
  if (root_hint_.load(std::memory_order_relaxed) == 0) return runtime::kUnpinned;
  const uint64_t epoch = root_hint_epoch_.load(std::memory_order_relaxed);
  if (epoch < keep_from) {
    // Too old to hold reclamation back for: the next descent asks the
    // descriptor.
    StoreRootHint(0, epoch);
    return runtime::kUnpinned;
  }
  return epoch;
}

// The node at `level` whose range holds `key`, its image left in `buffer`.
// NotFound when the tree has no such level (yet). With `use_cache`, starts
// from the lowest cached node above `level` that covers the key; every
// internal node read on the way is cached.
StatusOr<RemoteAddress> BTreeImpl::Descend(ContextImpl& ctx, std::string_view key, uint8_t level,
                                           uint8_t* buffer, bool use_cache) {
  for (index::Restarts restarts; restarts.Next();) {
    RemoteAddress address;
    std::optional<BTreeCache::Route> route;
    if (use_cache && cache_ && restarts.first()) {
      route = cache_->Find(key, ctx.cache_slot());
      if (route && route->level > level) {
        ++ctx.counters().cache_hits;
      } else {
        route.reset();
        ++ctx.counters().cache_misses;
      }
    }
    bool at_root = !route;  // `address` is what this CN believes is the root
    if (route) {
      address = route->child;
    } else {
      DMIDX_ASSIGN_OR_RETURN(address, Root(ctx, !restarts.first()));
    }
    bool restart_needed = false;
    int dead_hops = 0;
    while (!restart_needed) {
      DMIDX_RETURN_IF_ERROR(ReadNode(ctx, address, buffer));
      const NodeView node(shape_, buffer);
      if (at_root && !(node.low_is_min() && node.high_is_max()) && restarts.first()) {
        // The root has split since this CN learned it: the tree grew. Ask
        // the descriptor (once; a root still being published is reached
        // through the sibling chain meanwhile).
        at_root = false;
        DMIDX_ASSIGN_OR_RETURN(const RemoteAddress root, Root(ctx, true));
        if (root != address) {
          address = root;
          continue;
        }
      }
      at_root = false;
      if (route && (node.level() + 1 != route->level || !node.Covers(key))) {
        cache_->Invalidate(route->node);  // stale: the cached node moved on
        ++ctx.counters().cache_stale;
        restart_needed = true;
        break;
      }
      route.reset();
      if (node.BeyondHigh(key)) {
        if (node.sibling().is_null()) {
          restart_needed = true;
        } else {
          address = node.sibling();
        }
        continue;
      }
      if (!node.Covers(key)) {  // reached through a stale pointer
        restart_needed = true;
        continue;
      }
      if (!node.is_leaf()) {
        if (node.dead()) [[unlikely]] {
          // Merged into its left neighbour, which holds its keys now (a
          // dead root collapsed into its child): go there. A stale
          // pointer led here: a cached image, or a sibling word or root
          // read before the merge.
          if (++dead_hops > kMaxDeadHops) {
            restart_needed = true;
            continue;
          }
          if (node.low_is_min() && node.high_is_max()) {
            DMIDX_RETURN_IF_ERROR(HelpCollapse(ctx, address, node.merged_into()));
          }
          address = node.merged_into();
          continue;
        }
        if (cache_) cache_->Put(address, buffer, ctx.epoch());
      }
      if (node.level() == level) return address;
      if (node.level() < level) {
        return Status::NotFound("the tree has no level " + std::to_string(level));
      }
      address = node.FindChild(key);
    }
  }
  return index::GaveUp("descent", core_.label());
}

StatusOr<RemoteAddress> BTreeImpl::AllocateNode(ContextImpl& ctx, std::optional<uint16_t> near) {
  StatusOr<RemoteAddress> address = ctx.allocator().Allocate(ctx, shape_.node_bytes(), 64, near);
  if (near && !address.ok() && address.status().IsResourceExhausted()) {
    address = ctx.allocator().Allocate(ctx, shape_.node_bytes(), 64);
  }
  return address;
}

// The new right sibling of the locked node `left`, on the same memory node
// when it has room; on failure the lock is let go.
StatusOr<RemoteAddress> BTreeImpl::AllocateSibling(ContextImpl& ctx, RemoteAddress left,
                                                   lock::LockGrant& grant) {
  StatusOr<RemoteAddress> right = AllocateNode(ctx, left.node());
  if (!right.ok()) (void)lock_.Release(ctx, grant, {});
  return right;
}

// Writes the new right node, then the shrunk left node with the lock
// release: one ordered batch when both live on one memory node and commands
// are combined. If that fails, the right node goes back to the allocator
// only when the left's link to it surely did not land.
//
// Only the left's sibling word can name `right`: the separator above and
// the cache entries are made only after the batch succeeded, and the
// release hands no image of the left over. Which ops of the failed batch
// landed is unknown (on verbs any prefix, its last WRITE perhaps in part),
// so HOCL's Release decides it before it lets the lock word go
// (HierarchicalLock::Release's `unlinked`): the word still this hold's and the
// sibling word without the new value means the link never landed. Read
// after the release, the sibling word would tell nothing: another holder
// may link a new node there, a root may be grown over it and merges may
// bring the word back to its old value.
Status BTreeImpl::WriteSplit(ContextImpl& ctx, RemoteAddress left, lock::LockGrant& grant,
                             RemoteAddress right, const uint8_t* left_image,
                             const uint8_t* right_image) {
  index::MadeObjects made;
  made.Add(right, shape_.node_bytes());
  const Op write_right = Op::Write(right, right_image, shape_.node_bytes());
  const Op write_left = Op::Write(left, left_image, shape_.node_bytes());
  bool unlinked = false;
  Status status;
  if (right.node() == left.node() && options_.combine_commands) {
    // `right` is not under the left's lock: once the left's sibling word
    // names it, another compute node may lock and change it, so a post
    // again after a failure leaves it out then (lock::LinkedObjects).
    status = lock_.Release(ctx, grant, {write_right, write_left}, nullptr,
                           {.ops = 1, .link = left + kSiblingOffset}, &unlinked);
  } else {
    status = ctx.Execute(right.node(), {&write_right, 1});
    if (!status.ok()) {
      (void)lock_.Release(ctx, grant, {});
      made.FreeAll(ctx);  // the left's WRITE was never posted: nothing points at it
      return status;
    }
    status = lock_.Release(ctx, grant, {write_left}, nullptr,
                           {.ops = 0, .link = left + kSiblingOffset}, &unlinked);
  }
  if (!status.ok() && unlinked) {
    made.FreeAll(ctx);
  } else {
    made.Keep();
  }
  return status;
}

// The leaf at `leaf` (locked, image in buffer 0) is full: move the upper
// half of its entries, with the new one, to a new right sibling.
Status BTreeImpl::SplitLeaf(ContextImpl& ctx, RemoteAddress leaf, lock::LockGrant& grant,
                            std::string_view key, uint64_t value, uint8_t* left_image,
                            uint8_t* right_image) {
  NodeView left(shape_, left_image);
  std::vector<Entry> entries;
  for (uint32_t slot : left.SortedLeafSlots()) {
    entries.push_back({std::string(left.leaf_key(slot)), left.leaf_value(slot)});
  }
  const Entry added{std::string(key), value};
  entries.insert(std::upper_bound(entries.begin(), entries.end(), added,
                                  [](const Entry& a, const Entry& b) { return a.key < b.key; }),
                 added);
  const size_t mid = entries.size() / 2;
  const std::string split_key = entries[mid].key;
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress right, AllocateSibling(ctx, leaf, grant));
  const std::string low = LowFence(left), high = HighFence(left);
  NodeView right_node(shape_, right_image);
  right_node.InitLeaf(split_key, high, left.sibling());
  for (size_t i = mid; i < entries.size(); ++i) {
    right_node.SetLeafEntry(static_cast<uint32_t>(i - mid), entries[i].key,
                            entries[i].value_or_child);
  }
  right_node.Seal();
  left.InitLeaf(low, split_key, right);
  for (size_t i = 0; i < mid; ++i) {
    left.SetLeafEntry(static_cast<uint32_t>(i), entries[i].key, entries[i].value_or_child);
  }
  left.Seal();
  DMIDX_RETURN_IF_ERROR(WriteSplit(ctx, leaf, grant, right, left_image, right_image));
  // The key is now durable in one of the halves, and the new half reachable
  // through the left half's sibling pointer. If the separator cannot be
  // added above (the parent's lock held by a dead compute node, its memory
  // node unreachable), descents keep following that pointer: the change
  // has taken effect, so it returns OK and the level above stays without
  // the separator (a root grown later over this level's chain includes it).
  (void)InsertSeparator(ctx, 1, split_key, right);
  return Status::Ok();
}

// Adds separator `key` -> `right` (the new node of a split) at `level`, the
// parent level of the split, and so on up while parents split. Grows a new
// root when the split node was the root (the tree has no `level` yet).
Status BTreeImpl::InsertSeparator(ContextImpl& ctx, uint8_t level, std::string key,
                                  RemoteAddress right) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, NodeBuffer(ctx));
  DMIDX_ASSIGN_OR_RETURN(uint8_t * spare, NodeBuffer(ctx));
  for (index::Restarts restarts; restarts.Next();) {
    StatusOr<RemoteAddress> parent = Descend(ctx, key, level, image, false);
    if (!parent.ok() && parent.status().IsNotFound()) {
      DMIDX_ASSIGN_OR_RETURN(bool grown, GrowRoot(ctx, level, image, spare));
      // Grown or not, look again: the new root holds `key` unless the
      // chain it was built over was longer than a node holds.
      if (!grown) ctx.Yield();  // another context is growing the tree
      continue;
    }
    DMIDX_RETURN_IF_ERROR(parent.status());
    const Op read = Op::Read(*parent, image, shape_.node_bytes());
    DMIDX_ASSIGN_OR_RETURN(lock::LockGrant grant, LockAndRead(ctx, *parent, read));
    NodeView node(shape_, image);
    if (node.level() != level || !node.Covers(key)) {
      DMIDX_RETURN_IF_ERROR(lock_.Release(ctx, grant, {}));
      continue;  // it split meanwhile: look again
    }
    const uint32_t i = node.ChildIndex(key);
    if ((i > 0 && node.internal_key(i - 1) == key) ||
        (!node.low_is_min() && node.low_fence() == key)) {
      // Already there: a root was grown over this level's chain, and maybe
      // split since with `key` pushed up to a low fence. (Split keys are
      // unique per level, so either way it names `right`.)
      return lock_.Release(ctx, grant, {});
    }
    // A root grown over this level's chain meanwhile (GrowRoot) may have
    // named `right` already, and a merge then folded it into its left
    // neighbour (dead, separator removed): naming it again would leave a
    // live parent over a dead child for good (writes in its range lock the
    // dead node and descend to it again). Under this parent's lock `right`
    // cannot die: a merge needs the lock of the parent naming it, and
    // only this one covers its range. One READ of its level byte.
    if (DeadNode(ctx, right, grant)) return Status::Ok();
    if (node.InsertSeparator(key, right)) {
      node.Seal();
      Status status = lock_.Release(ctx, grant, {Op::Write(*parent, image, shape_.node_bytes())});
      if (status.ok() && cache_) cache_->Put(*parent, image, ctx.epoch());
      return status;
    }
    // The parent is full: split it, and add its separator a level up.
    DMIDX_ASSIGN_OR_RETURN(auto above,
                           SplitInternal(ctx, *parent, grant, key, right, image, spare));
    ++level;
    key = std::move(above.first);
    right = above.second;
    restarts.Reset();
  }
  return index::GaveUp("separator insert", core_.label());
}

bool BTreeImpl::DeadNode(ContextImpl& ctx, RemoteAddress address, lock::LockGrant& grant) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint64_t*> meta = Word(ctx);
  Status read = meta.status();
  if (read.ok()) {
    const Op op = Op::Read(address + kMetaOffset, *meta, 8);
    read = ctx.Execute(address.node(), {&op, 1});
  }
  // Not known to be live: let go without naming it (the B-link chain
  // keeps it reachable meanwhile, as for a splitter that died).
  if (!read.ok() || (static_cast<uint8_t>(**meta) & NodeView::kDeadLevel) != 0) {
    (void)lock_.Release(ctx, grant, {});
    return true;
  }
  return false;
}

StatusOr<std::pair<std::string, RemoteAddress>> BTreeImpl::SplitInternal(
    ContextImpl& ctx, RemoteAddress address, lock::LockGrant& grant, const std::string& key,
    RemoteAddress child, uint8_t* left_image, uint8_t* right_image) {
  NodeView left(shape_, left_image);
  const uint8_t level = left.level();
  std::vector<Entry> separators;
  for (uint32_t i = 0; i < left.count(); ++i) {
    separators.push_back({std::string(left.internal_key(i)), left.child(i + 1).raw()});
  }
  separators.push_back({key, child.raw()});
  SortByKey(&separators);
  const size_t mid = separators.size() / 2;
  const std::string push_up = separators[mid].key;
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress right, AllocateSibling(ctx, address, grant));
  const std::string low = LowFence(left), high = HighFence(left);
  const RemoteAddress first_child = left.child(0);
  NodeView right_node(shape_, right_image);
  right_node.InitInternal(level, push_up, high, left.sibling(),
                          RemoteAddress::FromRaw(separators[mid].value_or_child));
  for (size_t i = mid + 1; i < separators.size(); ++i) {
    right_node.InsertSeparator(separators[i].key,
                               RemoteAddress::FromRaw(separators[i].value_or_child));
  }
  right_node.Seal();
  left.InitInternal(level, low, push_up, right, first_child);
  for (size_t i = 0; i < mid; ++i) {
    left.InsertSeparator(separators[i].key, RemoteAddress::FromRaw(separators[i].value_or_child));
  }
  left.Seal();
  DMIDX_RETURN_IF_ERROR(WriteSplit(ctx, address, grant, right, left_image, right_image));
  if (cache_) {
    cache_->Put(address, left_image, ctx.epoch());
    cache_->Put(right, right_image, ctx.epoch());
  }
  return std::make_pair(push_up, right);
}

// The root has split (into `left` and `right`, or earlier by a splitter
// still between its split and this step, or dead there): makes a root of
// `level` over the whole chain of the old root's level (as many nodes as
// one node holds; the B-link siblings reach the rest) and publishes it with
// a CAS on the descriptor. So one dead compute node cannot stop the tree
// from growing. False (nothing changed) when the root has not split: someone
// else grew the tree.
//
// The old root R0's lock, taken with its READ, is held from the chain's
// READs until the CAS has landed. Without it the CAS could swap an R0 that
// is the root again, not still: another context grows a root over the same
// chain, merges fold the chain into R0 (the leftmost node always survives)
// and that root collapses back to R0; the CAS would then publish a root
// naming dead nodes. The descriptor comes back to R0 only through a merge
// into R0, which needs R0's lock. One lock at a time still: the chain is
// read without locks (ReadNode's damage check does not lock either).
StatusOr<bool> BTreeImpl::GrowRoot(ContextImpl& ctx, uint8_t level, uint8_t* chain,
                                   uint8_t* image) {
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress root, Root(ctx, true));
  const Op read = Op::Read(root, chain, shape_.node_bytes());
  DMIDX_ASSIGN_OR_RETURN(lock::LockGrant grant, LockAndRead(ctx, root, read));
  const NodeView link(shape_, chain);
  if (link.dead() && link.low_is_min() && link.high_is_max()) {
    const RemoteAddress into = link.merged_into();
    DMIDX_RETURN_IF_ERROR(lock_.Release(ctx, grant, {}));
    DMIDX_RETURN_IF_ERROR(HelpCollapse(ctx, root, into));
    return false;
  }
  const StatusOr<bool> grown = GrowRootOver(ctx, level, root, chain, image);
  const Status released = lock_.Release(ctx, grant, {});
  if (!grown.ok() || *grown) return grown;  // published (or maybe): whatever the release did
  DMIDX_RETURN_IF_ERROR(released);
  return false;
}

StatusOr<bool> BTreeImpl::GrowRootOver(ContextImpl& ctx, uint8_t level, RemoteAddress root,
                                       uint8_t* chain, uint8_t* image) {
  const NodeView link(shape_, chain);  // holds the locked root's image first
  if (link.dead() || link.level() + 1 != level || link.high_is_max()) return false;
  std::vector<std::pair<std::string, RemoteAddress>> children{{"", root}};  // (low fence, node)
  for (RemoteAddress next = link.sibling();
       children.size() <= shape_.internal_slots() && !next.is_null();) {
    DMIDX_RETURN_IF_ERROR(ReadNode(ctx, next, chain, /*may_lock=*/false));
    // Merged away since its left neighbour was read: read the chain again.
    if (link.dead()) return false;
    children.emplace_back(std::string(link.low_fence()), next);
    next = link.high_is_max() ? RemoteAddress() : link.sibling();
  }
  // Given back unless published (or maybe: a publish CAS that failed).
  index::ObjectWriter writer(ctx);
  DMIDX_ASSIGN_OR_RETURN(RemoteAddress grown, writer.Allocate(shape_.node_bytes(), root.node()));
  NodeView node(shape_, image);
  node.InitInternal(level, "", "", RemoteAddress(), children[0].second);
  for (size_t i = 1; i < children.size(); ++i) {
    node.InsertSeparator(children[i].first, children[i].second);
  }
  node.Seal();
  writer.Write(grown, image, shape_.node_bytes());
  DMIDX_RETURN_IF_ERROR(writer.Flush());
  const StatusOr<bool> published = PublishRoot(ctx, root, grown);
  if (!published.ok() || *published) writer.Keep();
  return published;
}

StatusOr<bool> BTreeImpl::PublishRoot(ContextImpl& ctx, RemoteAddress old_root,
                                      RemoteAddress new_root) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * seen, Word(ctx));
  const Op publish = Op::CompareSwap(descriptor_ + offsetof(Descriptor, root), seen, old_root.raw(),
                                     new_root.raw());
  DMIDX_RETURN_IF_ERROR(ctx.Execute(descriptor_.node(), {&publish, 1}));
  if (*seen != old_root.raw()) return false;
  SetRootHint(ctx, new_root.raw());
  return true;
}

}  // namespace btree

template class index::IndexHandle<BTree, btree::BTreeImpl>;

}  // namespace dmidx
