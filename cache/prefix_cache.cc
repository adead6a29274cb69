#include "cache/prefix_cache.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_core.h"

namespace dmidx::cache {

static_assert(PrefixCache::kEntryOverheadBytes == kCacheEntryOverheadBytes);

// The index is a path-compressed trie over prefix bytes (a radix tree). A
// node stands for the prefix spelt by the segments from the root down to it
// and holds the entry of that prefix, if any, so entries hang at any depth.
// A node other than the root has an entry or at least two children: nodes
// left with neither are removed and a node left with one child only merges
// into it, so there are at most 2 * entries + 1 nodes and each holds at most
// kMaxPrefixBytes of segment.
struct PrefixCache::Impl {
  struct Node;

  struct Entry : CacheEntry {
    using CacheEntry::CacheEntry;
    Node* node = nullptr;  // where it hangs
  };

  struct Child {
    uint8_t byte;  // the child's first segment byte
    std::unique_ptr<Node> node;
  };

  // A node with this many children or more also finds them by first byte
  // in a 256-entry table: the root's and an inner trie node's children
  // are often a radix node's whole fan-out, and a lookup walks through
  // such nodes on every call. The table goes when the children drop below
  // half as many, so a node with a table has at least kDirectChildren / 2
  // children: the tables (2 KiB each) cost at most 128 bytes per entry.
  static constexpr size_t kDirectChildren = 32;

  struct Node {
    std::string segment;  // the bytes from the parent to here; empty only at the root
    Node* parent = nullptr;
    Entry* entry = nullptr;
    std::vector<Child> children;  // sorted by byte
    // children by first byte (null where none), while there are enough
    // of them (kDirectChildren).
    std::unique_ptr<std::array<Node*, 256>> direct;
  };

  explicit Impl(size_t capacity_bytes)
      : core(capacity_bytes, [this](Entry& entry) { Unindex(entry); }) {}

  static std::vector<Child>::iterator LowerBound(Node& node, uint8_t byte) {
    return std::lower_bound(node.children.begin(), node.children.end(), byte,
                            [](const Child& child, uint8_t b) { return child.byte < b; });
  }
  static Node* FindChild(Node& node, uint8_t byte) {
    if (node.direct) return (*node.direct)[byte];
    auto it = LowerBound(node, byte);
    return it != node.children.end() && it->byte == byte ? it->node.get() : nullptr;
  }
  // Every change to a node's children goes through these three, which keep
  // its direct table (if any) in step. (MergeWithOnlyChild moves a child
  // out of a node it then frees, table and all.)
  static void AddChild(Node& node, std::vector<Child>::iterator at, uint8_t byte,
                       std::unique_ptr<Node> child) {
    Node* added = child.get();
    node.children.insert(at, Child{byte, std::move(child)});
    if (node.direct) {
      (*node.direct)[byte] = added;
    } else if (node.children.size() >= kDirectChildren) {
      node.direct = std::make_unique<std::array<Node*, 256>>();
      node.direct->fill(nullptr);
      for (const Child& c : node.children)
        (*node.direct)[c.byte] = c.node.get();
    }
  }
  static void ReplaceChild(Node& node, Child& slot, std::unique_ptr<Node> child) {
    if (node.direct) (*node.direct)[slot.byte] = child.get();
    slot.node = std::move(child);  // frees the replaced node
  }
  static void RemoveChild(Node& node, uint8_t byte) {
    if (node.direct) (*node.direct)[byte] = nullptr;
    node.children.erase(LowerBound(node, byte));  // frees the child
    if (node.direct && node.children.size() < kDirectChildren / 2) node.direct.reset();
  }
  static uint8_t ByteAt(std::string_view bytes, size_t at) {
    return static_cast<uint8_t>(bytes[at]);
  }

  // The node standing for exactly `prefix`, or null.
  Node* FindExact(std::string_view prefix);
  // The entry of exactly `prefix` if it holds the node at `address`, or null.
  Entry* EntryOf(std::string_view prefix, fabric::RemoteAddress address) {
    Node* node = FindExact(prefix);
    if (node == nullptr || node->entry == nullptr) return nullptr;
    return node->entry->address() == address ? node->entry : nullptr;
  }
  // The node standing for exactly `prefix`, made (splitting a segment if
  // need be) when missing.
  Node& MakePath(std::string_view prefix);
  void Put(std::string_view prefix, std::unique_ptr<Entry> entry, uint64_t epoch);
  std::optional<CachedNode> FindDeepest(std::string_view key, size_t max_prefix_bytes);
  // The core's callback: unhooks `entry` and prunes the nodes it leaves
  // without a purpose.
  void Unindex(Entry& entry);
  // Replaces `node` (not the root, no entry, one child) by its child.
  void MergeWithOnlyChild(Node& node);

  Node root;
  size_t nodes = 1;
  CacheCore<Entry> core;
};

PrefixCache::Impl::Node* PrefixCache::Impl::FindExact(std::string_view prefix) {
  Node* node = &root;
  size_t depth = 0;
  while (depth < prefix.size()) {
    Node* child = FindChild(*node, ByteAt(prefix, depth));
    if (child == nullptr || prefix.compare(depth, child->segment.size(), child->segment) != 0) {
      return nullptr;
    }
    depth += child->segment.size();
    node = child;
  }
  return node;
}

PrefixCache::Impl::Node& PrefixCache::Impl::MakePath(std::string_view prefix) {
  Node* node = &root;
  size_t depth = 0;
  while (depth < prefix.size()) {
    const std::string_view rest = prefix.substr(depth);
    auto it = LowerBound(*node, ByteAt(rest, 0));
    if (it == node->children.end() || it->byte != ByteAt(rest, 0)) {
      auto leaf = std::make_unique<Node>();
      leaf->segment = std::string(rest);
      leaf->parent = node;
      Node& made = *leaf;
      AddChild(*node, it, ByteAt(rest, 0), std::move(leaf));
      ++nodes;
      return made;
    }
    Node* child = it->node.get();
    const std::string_view segment = child->segment;
    const size_t common =
        std::mismatch(segment.begin(), segment.end(), rest.begin(), rest.end()).first -
        segment.begin();
    if (common < segment.size()) {  // the prefix ends or turns inside the segment: split it
      auto middle = std::make_unique<Node>();
      middle->segment = std::string(segment.substr(0, common));
      middle->parent = node;
      child->segment.erase(0, common);
      child->parent = middle.get();
      Node* made = middle.get();
      AddChild(*made, made->children.end(), ByteAt(child->segment, 0), std::move(it->node));
      ReplaceChild(*node, *it, std::move(middle));
      ++nodes;
      child = made;
    }
    depth += common;
    node = child;
  }
  return *node;
}

void PrefixCache::Impl::Put(std::string_view prefix, std::unique_ptr<Entry> entry, uint64_t epoch) {
  bool replaced = false;
  if (Node* same_prefix = FindExact(prefix); same_prefix != nullptr && same_prefix->entry) {
    core.Erase(*same_prefix->entry);  // may prune same_prefix
    replaced = true;
  }
  if (Entry* same_address = core.Find(entry->address())) {
    core.Erase(*same_address);
    replaced = true;
  }
  if (replaced) core.CountReplacement();
  Entry& inserted = core.Insert(std::move(entry), epoch);  // may evict, and prune
  Node& node = MakePath(prefix);
  node.entry = &inserted;
  inserted.node = &node;
}

std::optional<CachedNode> PrefixCache::Impl::FindDeepest(std::string_view key,
                                                         size_t max_prefix_bytes) {
  Node* node = &root;
  size_t depth = 0;
  Entry* deepest = root.entry;  // "" is a prefix of every key
  size_t deepest_depth = 0;
  while (depth < key.size()) {
    Node* child = FindChild(*node, ByteAt(key, depth));
    if (child == nullptr) break;
    const std::string& segment = child->segment;
    if (depth + segment.size() > max_prefix_bytes || depth + segment.size() > key.size()) break;
    // Segments are a few bytes: compared in place, without a memcmp call.
    size_t same = 0;
    while (same < segment.size() && segment[same] == key[depth + same])
      ++same;
    if (same != segment.size()) break;
    depth += segment.size();
    node = child;
    if (node->entry != nullptr) {
      deepest = node->entry;
      deepest_depth = depth;
    }
  }
  if (deepest == nullptr) {
    core.Miss();
    return std::nullopt;
  }
  core.Hit(*deepest);
  return CachedNode{static_cast<uint32_t>(deepest_depth), deepest->address(), deepest->bytes(),
                    deepest->epoch()};
}

void PrefixCache::Impl::Unindex(Entry& entry) {
  Node* node = entry.node;
  node->entry = nullptr;
  while (node != &root && node->entry == nullptr) {
    if (node->children.size() == 1) {
      MergeWithOnlyChild(*node);
      return;
    }
    if (!node->children.empty()) return;
    Node* parent = node->parent;
    RemoveChild(*parent, ByteAt(node->segment, 0));  // frees node
    --nodes;
    node = parent;  // may now have one child, or none
  }
}

void PrefixCache::Impl::MergeWithOnlyChild(Node& node) {
  std::unique_ptr<Node> child = std::move(node.children.front().node);
  child->segment.insert(0, node.segment);
  child->parent = node.parent;
  Node& parent = *node.parent;
  ReplaceChild(parent, *LowerBound(parent, ByteAt(node.segment, 0)),
               std::move(child));  // frees node
  --nodes;
}

PrefixCache::PrefixCache(size_t capacity_bytes) : impl_(std::make_unique<Impl>(capacity_bytes)) {}

PrefixCache::~PrefixCache() = default;

void PrefixCache::Put(std::string_view prefix, fabric::RemoteAddress address,
                      std::span<const uint8_t> image, uint64_t epoch) {
  // impl_ and the capacity Admits() reads never change: no lock needed yet.
  if (prefix.size() > kMaxPrefixBytes || !impl_->core.Admits(image.size())) return;
  {
    // A newer image of the node the prefix's entry holds, of the same
    // size (a slot changed): replaced in place, nothing allocated.
    std::lock_guard<SpinLock> guard(lock_);
    if (Impl::Entry* same = impl_->EntryOf(prefix, address);
        same != nullptr && same->bytes().size() == image.size()) {
      same->Overwrite(image);
      impl_->core.Restamp(*same, epoch);
      impl_->core.Touch(*same);
      impl_->core.CountReplacement();
      return;
    }
  }
  auto entry = std::make_unique<Impl::Entry>(address, image);  // copied outside the lock
  std::lock_guard<SpinLock> guard(lock_);
  impl_->Put(prefix, std::move(entry), epoch);
}

std::optional<CachedNode> PrefixCache::FindDeepestLocked(std::string_view key,
                                                         size_t max_prefix_bytes) {
  return impl_->FindDeepest(key, max_prefix_bytes);
}

bool PrefixCache::Refresh(std::string_view prefix, fabric::RemoteAddress address,
                          std::span<const uint8_t> image, uint64_t epoch) {
  std::lock_guard<SpinLock> guard(lock_);
  Impl::Entry* entry = impl_->EntryOf(prefix, address);
  if (entry == nullptr) return false;
  const std::span<const uint8_t> cached = entry->bytes();
  if (cached.size() < image.size() || std::memcmp(cached.data(), image.data(), image.size()) != 0) {
    return false;
  }
  impl_->core.Restamp(*entry, epoch);
  impl_->core.Touch(*entry);
  return true;
}

uint64_t PrefixCache::HoldEpochs(uint64_t keep_from) {
  std::lock_guard<SpinLock> guard(lock_);
  impl_->core.DropOlderThan(keep_from);
  return impl_->core.OldestEpoch();
}

void PrefixCache::Invalidate(fabric::RemoteAddress address) {
  std::lock_guard<SpinLock> guard(lock_);
  impl_->core.Invalidate(address);
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<SpinLock> guard(lock_);
  const CacheCoreStats& core = impl_->core.stats();
  return {.hits = core.hits,
          .misses = core.misses,
          .entries = core.entries,
          .bytes = core.bytes,
          .evictions = core.evictions,
          .invalidations = core.invalidations,
          .replacements = core.replacements,
          .expirations = core.expirations};
}

size_t PrefixCache::TrieNodesForTesting() const {
  std::lock_guard<SpinLock> guard(lock_);
  return impl_->nodes;
}

size_t PrefixCache::DirectTablesForTesting() const {
  std::lock_guard<SpinLock> guard(lock_);
  size_t tables = 0;
  std::vector<const Impl::Node*> stack{&impl_->root};
  while (!stack.empty()) {
    const Impl::Node* node = stack.back();
    stack.pop_back();
    tables += node->direct ? 1 : 0;
    for (const Impl::Child& child : node->children)
      stack.push_back(child.node.get());
  }
  return tables;
}

}  // namespace dmidx::cache
