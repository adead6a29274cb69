// Scans (SMART Algorithm 4) and bulk load.
//
// A scan is walked in segments, in key order: each starts from a cached
// node on the path of its first key (read afresh; the compute node's ART
// cache) and covers the range's keys under that node's prefix, the next
// starting at the first key after it; without a cached node (or after a
// few segments, or once a cached node is found stale) the rest of the
// range is walked from the root slot. A segment walks level by level,
// reading every node and leaf of one level that can hold keys in range in
// one round trip (one batch per memory node). The frontier is kept in key
// order, so the count form reads only as many items per round as it still
// needs keys. Each node is reached through one slot read after its parent,
// so no leaf is emitted twice; a node found deleted or re-parented is
// looked for again from the root slot, keeping to its prefix. docs/radix.md
// argues the guarantee: every key present for the whole scan is returned
// once, in order.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory_resource>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "radix/radix_impl.h"

namespace dmidx::radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// One entry of the scan's frontier, in key order. Its prefix lives in the
// context's pools (ContextImpl::memory()), as do the frontier's vectors, so
// a warm context's scans take nothing from the heap; moves keep the pool.
struct Item {
  enum Kind { kFollow, kRereadSlot, kPair };
  explicit Item(std::pmr::memory_resource* memory) : prefix(memory) {}

  Kind kind = kFollow;
  // Non-zero for an item that looks again from the root slot for a
  // subtree it lost track of: only keys starting with that prefix
  // (Withins) are its to find (the lost subtree's prefix, longer than
  // `prefix` until the walk down passes it). Rare, so kept apart
  // (and here, in the padding after `kind`).
  uint32_t within = 0;
  RemoteAddress slot_address;  // where `slot` was read (null: the node itself, from the cache)
  Slot slot;
  std::pmr::string prefix;  // key bytes before the child (its depth)
  uint64_t value = 0;       // kPair: prefix is the key
  uint8_t* buffer = nullptr;
};

// The prefixes items look again within (Item::within), 0 unused.
class Withins {
 public:
  // Takes nothing from `memory` until the first Add.
  explicit Withins(std::pmr::memory_resource* memory) : prefixes_(memory) {}
  uint32_t Add(std::string_view prefix) {
    prefixes_.emplace_back(prefix);
    return static_cast<uint32_t>(prefixes_.size());
  }
  std::string_view operator[](uint32_t id) const {
    return id == 0 ? std::string_view() : std::string_view(prefixes_[id - 1]);
  }
  // Whether keys starting with `prefix` can start with prefix `id`.
  bool Compatible(std::string_view prefix, uint32_t id) const {
    if (id == 0) return true;
    const std::string_view within = (*this)[id];
    const size_t n = std::min(prefix.size(), within.size());
    return prefix.substr(0, n) == within.substr(0, n);
  }

 private:
  std::pmr::vector<std::pmr::string> prefixes_;
};

// Makes `item` look again from the root slot for what it stood for, only
// keys starting with `within` (or its own narrower bound). Out of line: a
// rare path, kept out of the scan's loop.
[[gnu::noinline]] void LookAgainFromRoot(Item& item, Withins& withins, std::string_view within,
                                         RemoteAddress root_slot) {
  if (within.size() > withins[item.within].size()) item.within = withins.Add(within);
  item.prefix.clear();
  item.kind = Item::kRereadSlot;
  item.slot_address = root_slot;
}

// -1, 0, 1 as `prefix` sorts before, within or after the keys of `bound`
// that share its length.
int ComparePrefix(std::string_view prefix, std::string_view bound) {
  return prefix.compare(bound.substr(0, prefix.size())) < 0   ? -1
         : prefix.compare(bound.substr(0, prefix.size())) > 0 ? 1
                                                              : 0;
}

// Appends, in key order, the children of the node `item` led to (its
// image `node`, header checked; the path's bytes matched up to key byte
// `matched`) that can hold keys of [from, to] within the item's bound.
void AppendChildren(const Item& item, const NodeImage& node, uint32_t matched,
                    std::string_view from, std::optional<std::string_view> to,
                    const Withins& withins, std::pmr::memory_resource* memory,
                    std::pmr::vector<Item>* next) {
  const Header& header = node.header;
  // The node's prefix: the path's bytes, then its header's.
  std::pmr::string prefix(item.prefix, memory);
  for (uint32_t pos = matched; pos < header.branch(); ++pos) {
    prefix.push_back(static_cast<char>(header.partial[pos - header.depth]));
  }
  if (ComparePrefix(prefix, from) < 0 || (to && ComparePrefix(prefix, *to) > 0) ||
      (item.within != 0 && !withins.Compatible(prefix, item.within))) {
    return;
  }
  // Live slots as (partial key, slot index), sorted.
  std::array<std::pair<uint8_t, uint32_t>, kMaxSlots> children;
  size_t live = 0;
  for (uint32_t s = 0; s < node.capacity(); ++s) {
    const Slot slot = node.slot(s);
    if (slot.live()) children[live++] = {slot.partial(), s};
  }
  std::sort(children.begin(), children.begin() + static_cast<ptrdiff_t>(live));
  for (size_t c_index = 0; c_index < live; ++c_index) {
    const auto [partial, index] = children[c_index];
    std::pmr::string child_prefix(prefix, memory);
    child_prefix.push_back(static_cast<char>(partial));
    if (ComparePrefix(child_prefix, from) < 0 || (to && ComparePrefix(child_prefix, *to) > 0) ||
        (item.within != 0 && !withins.Compatible(child_prefix, item.within))) {
      continue;
    }
    Item child(memory);
    child.slot = node.slot(index);
    child.slot_address = node.address + kSlotsOffset + 8 * index;  // to read it again
    if (item.within != 0 && child_prefix.size() < withins[item.within].size()) {
      child.within = item.within;
    }
    child.prefix = std::move(child_prefix);
    next->push_back(std::move(child));
  }
}

}  // namespace

// At most this many segments of a scan start from cached nodes; the rest
// of the range is walked from the root slot (a long scan over many small
// cached subtrees would otherwise take two round trips per subtree).
constexpr int kCachedScanSegments = 2;

Status RadixImpl::ScanRange(ContextImpl& ctx, std::string_view from,
                            std::optional<std::string_view> to, size_t count,
                            std::vector<KeyValue>* out) {
  out->clear();
  const uint32_t key_bytes = shape_.key_bytes();
  std::pmr::memory_resource* const memory = ctx.memory();
  // The first key the next segment covers, and the last key of a segment
  // under a cached node's prefix.
  std::pmr::string cursor(from, memory);
  std::pmr::string last(memory);
  for (int segment = 0;; ++segment) {
    std::optional<RadixCache::Route> route;
    if (cache_ && segment < kCachedScanSegments) {
      route = ScanStart(cursor, to, ctx.cache_slot());
      if (!route) ++ctx.counters().cache_misses;  // consulted, and nothing on the path
    }
    if (!route) {
      bool stale = false;
      return ScanWalk(ctx, std::nullopt, cursor, to, count, out, &stale);
    }
    ++ctx.counters().cache_hits;
    // The segment: the keys of the range under the node's prefix, which
    // all lie under the node while it is live (docs/radix.md).
    const std::string_view prefix = std::string_view(cursor).substr(0, route->branch);
    last.assign(prefix);
    last.resize(key_bytes, static_cast<char>(0xff));
    const bool final = to && *to <= std::string_view(last);
    const std::string_view segment_to = final ? *to : std::string_view(last);
    bool stale = false;
    DMIDX_RETURN_IF_ERROR(ScanWalk(ctx, route, cursor, segment_to, count, out, &stale));
    if (stale) {
      // As a descent does: drop the entry and walk the rest from the root
      // slot.
      cache_->Invalidate(route->node);
      ++ctx.counters().cache_stale;
      return ScanWalk(ctx, std::nullopt, cursor, to, count, out, &stale);
    }
    if (final || out->size() >= count) return Status::Ok();
    // The next segment starts at the first key after the prefix.
    size_t keep = prefix.size();
    while (keep > 0 && static_cast<uint8_t>(cursor[keep - 1]) == 0xff)
      --keep;
    if (keep == 0) return Status::Ok();  // nothing sorts after it
    cursor.resize(keep);
    cursor.back() = static_cast<char>(static_cast<uint8_t>(cursor.back()) + 1);
    cursor.resize(key_bytes, '\0');
    if (to && std::string_view(cursor) > *to) return Status::Ok();
  }
}

// The node a scan segment from `cursor` starts at: the deepest cached node
// whose prefix every key of [cursor, to] shares, if it is below the root;
// else the shallowest cached node below the root on `cursor`'s path (its
// subtree holds the most keys from `cursor` on); else the cached root;
// else none (the root slot).
std::optional<RadixCache::Route> RadixImpl::ScanStart(std::string_view cursor,
                                                      std::optional<std::string_view> to,
                                                      std::atomic<uint64_t>& held) {
  size_t common = 0;
  if (to) {
    while (common < cursor.size() && cursor[common] == (*to)[common])
      ++common;
    if (common > 0) {
      std::optional<RadixCache::Route> covering = cache_->Find(cursor.substr(0, common), held);
      if (covering && covering->branch > 0) return covering;
    }
  }
  std::optional<RadixCache::Route> deepest = cache_->Find(cursor, held);
  if (!deepest || deepest->branch == 0) return deepest;
  for (uint32_t bytes = 1; bytes < deepest->branch; ++bytes) {
    std::optional<RadixCache::Route> route = cache_->Find(cursor.substr(0, bytes + 1), held);
    if (route && route->branch > 0) return route;
  }
  return deepest;
}

Status RadixImpl::ScanWalk(ContextImpl& ctx, const std::optional<RadixCache::Route>& start,
                           std::string_view from, std::optional<std::string_view> to, size_t count,
                           std::vector<KeyValue>* out, bool* stale) {
  const uint32_t key_bytes = shape_.key_bytes();
  const size_t base = out->size();  // keys earlier segments found
  {
    std::pmr::memory_resource* const memory = ctx.memory();
    std::pmr::vector<Item> frontier(memory);
    Withins withins(memory);
    Item first(memory);
    if (start) {  // the cached node itself, read afresh
      first.slot = Slot::ToNode(0, start->header.type, start->node);
      first.prefix = from.substr(0, start->branch);
    } else {
      first.kind = Item::kRereadSlot;
      first.slot_address = root_slot();
    }
    frontier.push_back(std::move(first));
    size_t node_budget = 1;
    int stalls = 0;  // rounds that had to read something again
    // A key whose path the last round found frozen by a merge: waited for
    // (AwaitKey) outside a round's scratch.
    std::pmr::string waits(memory);
    while (true) {
      if (!waits.empty()) {
        DMIDX_RETURN_IF_ERROR(AwaitKey(ctx, waits));
        waits.clear();
      }
      // Resolved pairs at the front are final.
      size_t resolved = 0;
      while (resolved < frontier.size() && frontier[resolved].kind == Item::kPair &&
             out->size() < count) {
        out->push_back({std::string(frontier[resolved].prefix), frontier[resolved].value});
        ++resolved;
      }
      frontier.erase(frontier.begin(), frontier.begin() + static_cast<ptrdiff_t>(resolved));
      if (frontier.empty() || out->size() >= count) return Status::Ok();
      // This round: unresolved items in order, as many as the arena holds
      // and, for the count form, as the keys still needed call for: a leaf
      // gives one, a node at least two, and at most `node_budget` nodes are
      // opened (it doubles every round: a node's subtree often holds every
      // key still needed, and reading its siblings then is wasted).
      runtime::ScratchArena::Scope scope(ctx.arena());
      std::pmr::vector<Op> ops(memory);
      std::pmr::vector<size_t> chosen(memory);
      size_t promised = out->size();  // keys the chosen items and pairs before them give at least
      size_t nodes_chosen = 0;
      for (size_t i = 0; i < frontier.size(); ++i) {
        Item& item = frontier[i];
        if (item.kind == Item::kPair) {
          ++promised;
          continue;
        }
        if (count != SIZE_MAX && promised >= count) break;
        const bool node = item.kind == Item::kFollow && !item.slot.leaf();
        if (count != SIZE_MAX && node && nodes_chosen >= node_budget) break;
        uint32_t bytes = 8;
        if (item.kind == Item::kFollow) {
          bytes =
              item.slot.leaf()
                  ? shape_.bytes()
                  : NodeReadBytes(fixed_size_ ? kMaxType : std::max<uint8_t>(item.slot.type(), 1));
        }
        if (ctx.arena().Fits(bytes, 64, index::kScratchReserveBytes) == 0) break;
        DMIDX_ASSIGN_OR_RETURN(item.buffer, ctx.arena().Bytes(bytes, 64));
        const RemoteAddress remote =
            item.kind == Item::kFollow ? item.slot.child() : item.slot_address;
        ops.push_back(Op::Read(remote, item.buffer, bytes));
        chosen.push_back(i);
        promised += node ? 2 : 1;
        nodes_chosen += node ? 1 : 0;
      }
      node_budget = std::min<size_t>(node_budget * 2, 1024);
      if (chosen.empty()) return Status::ResourceExhausted("scan: no scratch for one more READ");
      DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(ops));
      // Each chosen item becomes its children, a pair, another try, or
      // nothing; rebuilt in order.
      std::pmr::vector<Item> next(memory);
      next.reserve(frontier.size());
      size_t c = 0;
      for (size_t i = 0; i < frontier.size(); ++i) {
        Item& item = frontier[i];
        if (c >= chosen.size() || chosen[c] != i) {
          next.push_back(std::move(item));
          continue;
        }
        ++c;
        if (item.kind == Item::kRereadSlot) {
          uint64_t word;
          std::memcpy(&word, item.buffer, 8);
          item.slot = Slot(word);
          item.kind = Item::kFollow;
          item.buffer = nullptr;  // progress: the slot is read
          if (!item.slot.live()) continue;
          next.push_back(std::move(item));
          continue;
        }
        if (item.slot.leaf()) {
          LeafImage leaf{item.buffer};
          if (!leaf.Verify(shape_)) {  // torn (or damaged: DataLoss)
            DMIDX_RETURN_IF_ERROR(
                ReadLeaf(ctx, item.slot.child(), &leaf, 0, /*image_failed=*/true));
          }
          const std::string_view key = leaf.key(shape_);
          // A leaf that moved up (a merge) into a slot on the path of an
          // item looking again within a longer prefix is not its to find:
          // the item that covers its key does.
          if (!key.starts_with(withins[item.within])) continue;
          const uint64_t rear = leaf.rear(shape_);
          // Deleted: gone. Replaced out of place: the slot that led here,
          // read in this scan, held the old leaf, so its value was the
          // key's then or later (as for a lookup, RadixImpl::LookupKey).
          if ((rear & kObsolete) && !(rear & kReplaced)) continue;
          if (key >= from && (!to || key <= *to)) {
            Item pair(memory);
            pair.kind = Item::kPair;
            pair.prefix = key;
            pair.value = leaf.value();
            next.push_back(std::move(pair));
          }
          continue;
        }
        NodeImage node{item.slot.child(), item.buffer, Header()};
        uint64_t word;
        std::memcpy(&word, item.buffer + kHeaderOffset, 8);
        node.header = Header::Unpack(word);
        const Header& header = node.header;
        const uint32_t depth = static_cast<uint32_t>(item.prefix.size());
        const bool itself = item.slot_address.is_null();
        const uint8_t read_type = fixed_size_ ? kMaxType : std::max<uint8_t>(item.slot.type(), 1);
        if (header.deleted() || header.type > kMaxType || header.branch() >= key_bytes ||
            (!itself && header.depth > depth) || (itself && header.branch() != depth)) {
          if (itself) {  // the start node: deleted, or not where its entry said
            out->resize(base);
            *stale = true;
            return Status::Ok();
          }
          // The slot that led here is about to change, or already has, or
          // never will again: its own node may have been merged away
          // since it was read (a dead node's slots stay as they were).
          // Look for the subtree afresh from the root slot, keeping to its
          // prefix, so the frontier's order and the keys found so far hold;
          // first, for a node a merge froze, the next round waits for it.
          if (header.deleted() && waits.empty()) {
            waits.assign(item.prefix);
            waits.resize(key_bytes, '\0');
          }
          LookAgainFromRoot(item, withins, item.prefix, root_slot());
          next.push_back(std::move(item));
          continue;
        }
        if (header.type > read_type) {  // more slots than the slot said: read them all
          item.slot = item.slot.WithType(header.type);
          next.push_back(std::move(item));
          continue;
        }
        AppendChildren(item, node, itself ? header.branch() : depth, from, to, withins, memory,
                       &next);
      }
      // A round that has to read a slot, node or leaf again (a change in
      // flight, or a frozen node whose merger died) backs off, and the scan
      // gives up after as many such rounds as a descent has restarts.
      const bool stalled = std::any_of(next.begin(), next.end(), [](const Item& item) {
        return item.kind == Item::kRereadSlot || item.buffer != nullptr;
      });
      if (stalled) {
        if (++stalls > index::kMaxRestarts) return index::GaveUp("scan", core_.label());
        index::BackoffCapped(ctx, stalls - 1);
      }
      for (Item& item : next)
        item.buffer = nullptr;
      frontier = std::move(next);
    }
  }
}

// Bottom-up: the whole tree for `sorted` is written first (every node
// and leaf, as many per round trip as scratch holds), then published at
// once by a CAS of the empty root slot. A writer that got there first makes
// the load FailedPrecondition (nothing of it is reachable; its objects go
// back to the allocator); readers see the tree empty until the CAS and
// whole after it. Nodes take the smallest type whose slots the children
// fill to at most `fill_factor`, leaving room for inserts.
Status RadixImpl::Load(ContextImpl& ctx, std::span<const KeyValue> sorted, double fill_factor) {
  uint64_t root = 0;
  {
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
    const Op read = Op::Read(root_slot(), word, 8);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(root_slot().node(), {&read, 1}));
    root = *word;
  }
  const auto not_empty = [&] {
    return Status::FailedPrecondition(core_.label() + " is not empty; BulkLoad needs an empty one");
  };
  if (Slot(root).live()) return not_empty();
  if (sorted.empty()) return Status::Ok();
  Made made;
  made.on.assign(ctx.compute_node().memory_node_count(), {0, 0});
  // Every object the load makes goes back to the allocator unless the
  // publish CAS landed, or may have.
  index::ObjectWriter writer(ctx);
  // The nodes are allocated before any leaf, shallowest first: the few
  // nodes near the root, which live as long as the tree, then share a few
  // chunks, and the chunks of the deeper nodes and of the leaves, which
  // come and go as keys do, can empty and go back to the memory node.
  made.planning = true;
  DMIDX_RETURN_IF_ERROR(
      Build(ctx, writer, sorted, 0, descriptor_, 0, fill_factor, root_slot().node(), &made)
          .status());
  std::vector<uint32_t> order(made.nodes.size());
  for (uint32_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return made.nodes[a].depth < made.nodes[b].depth;
  });
  made.planned.resize(made.nodes.size());
  for (const uint32_t i : order) {
    DMIDX_ASSIGN_OR_RETURN(made.planned[i], writer.Allocate(kNodeBytes, made.nodes[i].memory_node));
  }
  made.planning = false;
  made.on.assign(ctx.compute_node().memory_node_count(), {0, 0});
  DMIDX_ASSIGN_OR_RETURN(const Slot top, Build(ctx, writer, sorted, 0, descriptor_, 0, fill_factor,
                                               root_slot().node(), &made));
  DMIDX_RETURN_IF_ERROR(writer.Flush());
  const StatusOr<uint64_t> found = CompareSwap(ctx, root_slot(), root, top.word());
  if (!found.ok() || *found == root) writer.Keep();
  DMIDX_RETURN_IF_ERROR(found.status());
  if (*found != root) return not_empty();
  return Status::Ok();
}

// Writes the subtree of `sorted` (two keys or more share key bytes before
// `depth`) whose slot in `parent` has partial key `partial`, and returns
// that slot.
StatusOr<Slot> RadixImpl::Build(ContextImpl& ctx, index::ObjectWriter& writer,
                                std::span<const KeyValue> sorted, uint32_t depth,
                                RemoteAddress parent, uint8_t partial, double fill_factor,
                                uint16_t near, Made* made) {
  if (sorted.size() == 1) {
    if (made->planning) return Slot();
    DMIDX_ASSIGN_OR_RETURN(const RemoteAddress leaf, writer.Allocate(shape_.bytes(), near));
    DMIDX_ASSIGN_OR_RETURN(uint8_t * image, writer.Buffer(shape_.bytes()));
    InitLeafImage(shape_, image, parent, sorted[0].key, sorted[0].value);
    writer.Write(leaf, image, shape_.bytes());
    return Slot::ToLeaf(partial, leaf);
  }
  const std::string_view first = sorted.front().key;
  const std::string_view last = sorted.back().key;
  uint32_t differ = depth;
  while (first[differ] == last[differ])
    ++differ;
  Header header;
  header.depth = static_cast<uint8_t>(depth);
  header.count = static_cast<uint8_t>(std::min<uint32_t>(differ - depth, kMaxHeaderBytes));
  for (uint32_t i = 0; i < header.count; ++i)
    header.partial[i] = static_cast<uint8_t>(first[depth + i]);
  const uint32_t branch = header.branch();
  // The node and the leaves beside it (its children of one key each) go
  // on the memory node with the fewest leaves so far.
  uint32_t leaves = 0;
  for (size_t begin = 0; begin < sorted.size();) {
    size_t end = begin + 1;
    while (end < sorted.size() && sorted[end].key[branch] == sorted[begin].key[branch])
      ++end;
    leaves += end - begin == 1;
    begin = end;
  }
  const auto least =
      static_cast<uint16_t>(std::min_element(made->on.begin(), made->on.end()) - made->on.begin());
  RemoteAddress node;
  if (made->planning) {
    made->nodes.push_back({depth, least});
    node = RemoteAddress::Pool(least, 0);
  } else {
    node = made->planned[made->next++];
  }
  made->on[node.node()].first += leaves;
  ++made->on[node.node()].second;
  // Children by the branch byte: one (a chain node, the shared bytes go
  // on) or where the keys differ.
  std::vector<Slot> children;
  for (size_t begin = 0; begin < sorted.size();) {
    const char byte = sorted[begin].key[branch];
    size_t end = begin + 1;
    while (end < sorted.size() && sorted[end].key[branch] == byte)
      ++end;
    DMIDX_ASSIGN_OR_RETURN(const Slot child,
                           Build(ctx, writer, sorted.subspan(begin, end - begin), branch + 1, node,
                                 static_cast<uint8_t>(byte), fill_factor, node.node(), made));
    children.push_back(child);
    begin = end;
  }
  if (made->planning) return Slot();
  // Slots for the children at fill_factor (compared as doubles: a tiny
  // factor asks for more than any node has).
  const double wanted = std::ceil(static_cast<double>(children.size()) / fill_factor);
  const uint32_t slots =
      wanted >= kMaxSlots ? kMaxSlots : std::max<uint32_t>(static_cast<uint32_t>(wanted), 1);
  header.type = fixed_size_ ? kMaxType : TypeHolding(slots - 1);
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, writer.Buffer(kNodeBytes));
  InitNodeImage(image, parent, header);
  for (uint32_t i = 0; i < children.size(); ++i)
    SetSlotInImage(image, i, children[i]);
  writer.Write(node, image, kNodeBytes);
  return Slot::ToNode(partial, header.type, node);
}

}  // namespace dmidx::radix
