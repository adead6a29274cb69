// The B-link tree client behind dmidx::BTree. See docs/btree.md for the node
// layout, why reads check a checksum, and how each technique is switched.
//
//   btree.cc       point operations, descents, splits, counters
//   btree_merge.cc merges after deletes, root collapse, retiring nodes
//   btree_range.cc Scan and BulkLoad
//   btree_open.cc  the descriptor: create, open, lock placement
#ifndef DMIDX_TREE_BTREE_IMPL_H_
#define DMIDX_TREE_BTREE_IMPL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "btree/btree_cache.h"
#include "btree/node.h"
#include "dmidx/btree.h"
#include "index/catalog.h"
#include "index/index_core.h"
#include "index/index_handle.h"
#include "index/restarts.h"
#include "lib/fabric/op.h"
#include "lib/runtime/context.h"
#include "lock/hocl.h"

namespace dmidx::btree {

// The tree descriptor, found through the catalog word "btree/<name>".
//
//   0                16     24          28        32         40          48       64
//   +----------------+------+-----------+---------+----------+-----------+--------+
//   | head           | root | node bytes| (unused)| lock dir | lock words|reserved|
//   +----------------+------+-----------+---------+----------+-----------+--------+
// The head (index::DescriptorHead) is magic, key bytes and flags.
// root is CASed when the tree grows a level. With kPoolLocks the global lock
// words are in pool memory: `lock dir` points at one base address per memory
// node, each the start of `lock words` zeroed words on that node.
struct Descriptor {
  index::DescriptorHead head;  // flags: kPoolLocks
  uint64_t root;
  uint32_t node_bytes;
  uint32_t unused;
  uint64_t lock_directory;
  uint64_t lock_words;
  uint64_t reserved[2];
};
static_assert(index::IsDescriptorLayout<Descriptor>(offsetof(Descriptor, root)));
inline constexpr uint64_t kDescriptorMagic = 0x3145455254424d44ull;  // "DMBTREE1"
inline constexpr uint32_t kPoolLocks = 1;

inline constexpr size_t kNodeBufferAlignment = 64;
// Node buffers one operation holds at most: a leaf change's image and spare
// (for a split), and a separator insert's (also a root growth's) two.
inline constexpr size_t kMaxNodeBuffers = 4;

// Sibling pointers a leaf change follows in a row before it descends again
// (once; after that it follows the chain).
inline constexpr int kMaxHops = 2;

// Dead nodes a descent follows to the node each was merged into before it
// starts again from the root (a chain of them is a stale pointer's path
// through several merges; a longer one, memory reused meanwhile).
inline constexpr int kMaxDeadHops = 8;

struct Entry {
  std::string key;
  uint64_t value_or_child;
};

class BTreeImpl final : public index::IndexHandle<BTree, BTreeImpl> {
 public:
  // `local_locks`: the compute node's HOCL local table (shared by its
  // trees); `cache`: its cache of this tree (null: none).
  BTreeImpl(runtime::ComputeNode& node, std::string name, const NodeShape& shape,
            fabric::RemoteAddress descriptor, lock::GlobalLockTable table,
            const BTreeOptions& options, uint64_t owner_tag,
            std::shared_ptr<lock::LocalLockTable> local_locks, std::shared_ptr<BTreeCache> cache,
            index::RdwcDispatch rdwc);

 private:
  friend class BTreeTestPeer;
  friend class index::IndexHandle<BTree, BTreeImpl>;
  enum class Change { kUpsert, kUpdate, kDelete };

  // The hooks of index::IndexHandle (keys checked there).
  Status LookupKey(runtime::ContextImpl& ctx, std::string_view key, uint64_t* value);
  Status WriteKey(runtime::ContextImpl& ctx, std::string_view key, uint64_t value,
                  index::Write write) {
    return Modify(ctx, key, write == index::Write::kUpsert ? Change::kUpsert : Change::kUpdate,
                  value);
  }
  Status DeleteKey(runtime::ContextImpl& ctx, std::string_view key) {
    return Modify(ctx, key, Change::kDelete, 0);
  }
  // Both Scan forms: keys in [from, to] (to unset: unbounded), at most
  // `count` of them.
  Status ScanKeys(runtime::ContextImpl& ctx, std::string_view from,
                  std::optional<std::string_view> to, size_t count, std::vector<KeyValue>* out);
  Status LoadSorted(runtime::ContextImpl& ctx, std::span<const KeyValue> sorted,
                    double fill_factor);

  Status Modify(runtime::ContextImpl& ctx, std::string_view key, Change change, uint64_t value);
  // Modify's end: seals the locked leaf's image `buffer` after one
  // entry's change in `slot` and writes it back with the release (`image`:
  // the buffer, handed over with the lock).
  [[gnu::always_inline]] inline Status WriteBackEntry(
      runtime::ContextImpl& ctx, fabric::RemoteAddress leaf, int slot, lock::LockGrant& grant,
      const ChecksumCheckpoints& checkpoints, uint8_t* buffer, const lock::ObjectImage& image);
  // WriteBackEntry for a delete that left the leaf underfull, then the
  // merge (`spare`: a free node buffer).
  [[gnu::noinline]] Status DeleteAndMerge(runtime::ContextImpl& ctx, std::string_view key,
                                          fabric::RemoteAddress leaf, int slot,
                                          lock::LockGrant& grant,
                                          const ChecksumCheckpoints& checkpoints, uint8_t* buffer,
                                          const lock::ObjectImage& image, uint8_t* spare);
  Status WalkLeaves(runtime::ContextImpl& ctx, std::string_view from,
                    std::optional<std::string_view> to, size_t count, std::vector<KeyValue>* out);
  Status ReadAhead(runtime::ContextImpl& ctx, std::span<const fabric::RemoteAddress> plan,
                   std::span<uint8_t* const> buffers);

  // A node buffer from the context's arena (freed with the operation's
  // scope). Taken before a lock, so that no error path holds one.
  [[gnu::always_inline]] StatusOr<uint8_t*> NodeBuffer(runtime::ContextImpl& ctx) const {
    return ctx.arena().Bytes(shape_.node_bytes(), kNodeBufferAlignment);
  }
  // Registered 8-byte words from the arena: where remote words are read to.
  static StatusOr<uint64_t*> Word(runtime::ContextImpl& ctx) { return ctx.arena().Words(1); }
  // Reads a node image that passes its checksum (a torn READ is retried).
  // Damage is told from a torn READ under the node's lock (ReadUnderLock).
  // The caller holds no HOCL lock, or passes `may_lock` false: the damage
  // check then takes no lock, and a node that keeps failing is read again
  // (bounded by index::kMaxTornReads).
  Status ReadNode(runtime::ContextImpl& ctx, fabric::RemoteAddress address, uint8_t* buffer,
                  bool may_lock = true);
  // Takes the node's lock with a READ of it into `buffer`, and lets it go.
  Status ReadUnderLock(runtime::ContextImpl& ctx, fabric::RemoteAddress address, uint8_t* buffer);
  // Locks `address` and leaves a verified image of it in read.local; with
  // `checkpoints`, keeps that image's checksum lanes (NodeView::SealFrom).
  StatusOr<lock::LockGrant> LockAndRead(runtime::ContextImpl& ctx, fabric::RemoteAddress address,
                                        const fabric::Op& read,
                                        ChecksumCheckpoints* checkpoints = nullptr);
  StatusOr<fabric::RemoteAddress> LocateLeaf(runtime::ContextImpl& ctx, std::string_view key,
                                             uint8_t* buffer, bool use_cache,
                                             std::optional<fabric::RemoteAddress>* cached_parent);
  StatusOr<fabric::RemoteAddress> Root(runtime::ContextImpl& ctx, bool refresh);
  // Sets the root hint to `root`, learned in `ctx`'s epoch.
  void SetRootHint(runtime::ContextImpl& ctx, uint64_t root);
  // Under root_hint_mutex_: stores the hint and its epoch.
  void StoreRootHint(uint64_t root, uint64_t epoch);
  // The hint if ctx's pin holds what it reaches (learned at ctx's epoch or
  // later), else 0 (ask the descriptor).
  uint64_t RootHint(const runtime::ContextImpl& ctx) const;
  // The keeper's call (EpochTable::Holder): drops a hint learned before
  // `keep_from`; the epoch of the hint kept (kUnpinned: none).
  uint64_t HoldRootHint(uint64_t keep_from);
  StatusOr<fabric::RemoteAddress> Descend(runtime::ContextImpl& ctx, std::string_view key,
                                          uint8_t level, uint8_t* buffer, bool use_cache);
  StatusOr<fabric::RemoteAddress> AllocateNode(runtime::ContextImpl& ctx,
                                               std::optional<uint16_t> near);
  StatusOr<fabric::RemoteAddress> AllocateSibling(runtime::ContextImpl& ctx,
                                                  fabric::RemoteAddress left,
                                                  lock::LockGrant& grant);
  Status WriteSplit(runtime::ContextImpl& ctx, fabric::RemoteAddress left, lock::LockGrant& grant,
                    fabric::RemoteAddress right, const uint8_t* left_image,
                    const uint8_t* right_image);
  // `left_image` holds the locked node's image; `right_image` is a spare
  // node buffer for the new sibling.
  Status SplitLeaf(runtime::ContextImpl& ctx, fabric::RemoteAddress leaf, lock::LockGrant& grant,
                   std::string_view key, uint64_t value, uint8_t* left_image, uint8_t* right_image);
  Status InsertSeparator(runtime::ContextImpl& ctx, uint8_t level, std::string key,
                         fabric::RemoteAddress right);
  // Splits the locked, full internal node at `address` (image in
  // `left_image`) with `key` -> `child` added, and returns the separator to
  // add one level up.
  StatusOr<std::pair<std::string, fabric::RemoteAddress>> SplitInternal(
      runtime::ContextImpl& ctx, fabric::RemoteAddress address, lock::LockGrant& grant,
      const std::string& key, fabric::RemoteAddress child, uint8_t* left_image,
      uint8_t* right_image);
  // `chain` and `image`: two free node buffers.
  StatusOr<bool> GrowRoot(runtime::ContextImpl& ctx, uint8_t level, uint8_t* chain, uint8_t* image);
  // GrowRoot's work under the lock of the old root `root` (its image in
  // `chain`).
  StatusOr<bool> GrowRootOver(runtime::ContextImpl& ctx, uint8_t level, fabric::RemoteAddress root,
                              uint8_t* chain, uint8_t* image);
  // CASes the descriptor's root from `old_root` to `new_root`: true if it
  // swapped (the hint follows), false if the root was no longer `old_root`.
  StatusOr<bool> PublishRoot(runtime::ContextImpl& ctx, fabric::RemoteAddress old_root,
                             fabric::RemoteAddress new_root);
  // BulkLoad's last step, the new root published (or maybe: `unknown`
  // says why its outcome is unknown): writes the leftmost leaf `leaf`
  // (`image`) under `grant`, then releases; if it cannot, keeps the lock
  // held. Internal unless the publish is known and the write landed.
  Status WriteLeftmostLeaf(runtime::ContextImpl& ctx, lock::LockGrant& grant,
                           fabric::RemoteAddress leaf, uint8_t* image, const Status& unknown);

  // Under `grant` (the lock of the parent about to name `address`): true,
  // with the lock let go, when the node at `address` is dead (merged away)
  // or its level byte could not be read; false (still held) when live.
  bool DeadNode(runtime::ContextImpl& ctx, fabric::RemoteAddress address, lock::LockGrant& grant);

  // ---- merges (btree_merge.cc; docs/btree.md, "Merges") ----
  // What one merge attempt at a level left to do.
  enum class MergeStep {
    kDone,             // merged with the parent still full enough, or nothing to merge
    kParentUnderfull,  // merged (or the node is its parent's only child): go a level up
    kTryLeft,          // the right neighbour would fill the merged node too much: try the left
  };
  // A delete left the leaf of `key` underfull: merges it with a sibling
  // under the same parent, and so on up while parents are left underfull;
  // collapses a root left with one child. Best effort: the delete has
  // landed already, so what fails here is given up. `a` and `b` are the
  // delete's node buffers (free now); one more is taken.
  void MergeAfterDelete(runtime::ContextImpl& ctx, std::string_view key, uint8_t* a, uint8_t* b);
  // One merge of the node at `level` covering `key` (images: three node
  // buffers). The pair is the node and its right neighbour, or with
  // `left_pair` (or when it is the last child) its left one.
  StatusOr<MergeStep> MergeAt(runtime::ContextImpl& ctx, std::string_view key, uint8_t level,
                              std::array<uint8_t*, 3> images, bool left_pair);
  // While the root is an internal node with one child: marks it dead
  // (merged into the child) under its lock, then moves the descriptor's
  // root down to the child by CAS. `image`: a node buffer.
  Status CollapseRoot(runtime::ContextImpl& ctx, uint8_t* image);
  // A descent met `root`, a dead node with both fences infinite: a root
  // whose collapse may not have reached the descriptor yet. CASes the
  // descriptor from it to the node it collapsed into (idempotent: the
  // collapse's own CAS, or another helper's, makes it fail) and refreshes
  // the root hint.
  Status HelpCollapse(runtime::ContextImpl& ctx, fabric::RemoteAddress root,
                      fabric::RemoteAddress into);
  // Underfull by options_.merge_below_percent (never when it is 0).
  bool Underfull(const NodeView& node) const {
    return node.fill() < (node.is_leaf() ? merge_below_leaf_ : merge_below_internal_);
  }
  // Every node a merge or a root collapse made unreachable from every
  // remote structure (its unlinking WRITE or CAS has landed) goes through
  // here: counted (retired_nodes_, read by tests) and given to
  // ctx.Retire, which frees it after a grace period that covers every
  // operation in flight, every cached image and every root hint
  // (runtime/epochs.h): a reader holding a stale pointer still finds the
  // dead node's image.
  void RetireNode(runtime::ContextImpl& ctx, fabric::RemoteAddress node);

  const std::string name_;
  const NodeShape shape_;
  const fabric::RemoteAddress descriptor_;
  const BTreeOptions options_;
  lock::HierarchicalLock lock_;
  std::shared_ptr<BTreeCache> cache_;
  // The root as this handle last learned it (0: ask the descriptor), and
  // the epoch it was learned in. The hint outlives operations, so it
  // holds that epoch like a cache entry (EpochTable::AddHolder, below):
  // a collapsed root it names is not freed while it may be followed, and
  // the keeper drops a hint older than the cache window. Set under
  // root_hint_mutex_; read without it.
  //
  // A descent uses the hint only if it was learned at its own pin's epoch
  // or later (RootHint): its pin then holds whatever the hint reaches, as
  // every node reachable from the root it names is retired at the hint's
  // epoch or later. An older hint is not held by the pin, and the keeper
  // may drop it (and its hold) while the descent still follows it: that
  // descent asks the descriptor instead (once an epoch a handle, about).
  // The pair is written under root_hint_mutex_ and read without it, with
  // root_hint_version_ odd while a writer changes it (a seqlock).
  std::atomic<uint64_t> root_hint_{0};
  std::atomic<uint64_t> root_hint_epoch_{0};
  std::atomic<uint64_t> root_hint_version_{0};
  std::mutex root_hint_mutex_;
  // A leaf (internal node) with fewer entries (separators) than this is
  // underfull; 0: merging is off.
  uint32_t merge_below_leaf_ = 0;
  uint32_t merge_below_internal_ = 0;
  // A merged leaf (internal node) holds at most this many entries
  // (separators).
  uint32_t merge_fit_leaf_ = 0;
  uint32_t merge_fit_internal_ = 0;
  // Of this handle: nodes merged away and roots collapsed, and nodes given
  // to RetireNode.
  std::atomic<uint64_t> merges_{0};
  std::atomic<uint64_t> root_collapses_{0};
  std::atomic<uint64_t> retired_nodes_{0};
  // Last: unregistered first, before the hint it reads goes.
  std::unique_ptr<runtime::EpochTable::HolderHandle> root_hint_holder_;
};

}  // namespace dmidx::btree

// Instantiated in btree.cc, where the point-operation hooks are inlined.
extern template class dmidx::index::IndexHandle<dmidx::BTree, dmidx::btree::BTreeImpl>;

#endif  // DMIDX_TREE_BTREE_IMPL_H_
