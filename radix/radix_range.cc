// Scans (SMART Algorithm 4) and bulk load.
//
// A scan walks the tree level by level from the deepest cached node whose
// prefix the whole range shares (or the root slot), reading every node and
// leaf of one level that can hold keys in range in one round trip (one
// batch per memory node). The frontier is kept in key order, so the count
// form reads only as many items per round as it still needs keys. Each
// node is reached through one slot read after its parent, so no leaf is
// emitted twice; a node found deleted or re-parented is looked up again
// through the slot that led to it. docs/radix.md argues the guarantee:
// every key present for the whole scan is returned once, in order.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "radix/radix_impl.h"

namespace dmidx::radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// One entry of the scan's frontier, in key order.
struct Item {
  enum Kind { kFollow, kRereadSlot, kPair };
  Kind kind = kFollow;
  RemoteAddress slot_address;  // where `slot` was read (null: the node itself, from the cache)
  Slot slot;
  std::string prefix;  // key bytes before the child (its depth)
  uint64_t value = 0;  // kPair: prefix is the key
  uint8_t* buffer = nullptr;
};

// -1, 0, 1 as `prefix` sorts before, within or after the keys of `bound`
// that share its length.
int ComparePrefix(std::string_view prefix, std::string_view bound) {
  return prefix.compare(bound.substr(0, prefix.size())) < 0   ? -1
         : prefix.compare(bound.substr(0, prefix.size())) > 0 ? 1
                                                              : 0;
}

}  // namespace

Status RadixImpl::Scan(Context& context, std::string_view from, std::string_view to,
                       std::vector<KeyValue>* out) {
  if (out != nullptr) out->clear();
  return core_.Run(context, IndexOp::kScan, [&](ContextImpl& ctx) -> Status {
    DMIDX_RETURN_IF_ERROR(core_.CheckKey(from));
    DMIDX_RETURN_IF_ERROR(core_.CheckKey(to));
    if (out == nullptr) return Status::InvalidArgument("Scan: null output");
    if (from > to) return Status::Ok();
    return ScanRange(ctx, from, to, SIZE_MAX, out);
  });
}

Status RadixImpl::Scan(Context& context, std::string_view from, size_t count,
                       std::vector<KeyValue>* out) {
  if (out != nullptr) out->clear();
  return core_.Run(context, IndexOp::kScan, [&](ContextImpl& ctx) -> Status {
    DMIDX_RETURN_IF_ERROR(core_.CheckKey(from));
    if (out == nullptr) return Status::InvalidArgument("Scan: null output");
    if (count == 0) return Status::Ok();
    return ScanRange(ctx, from, std::nullopt, count, out);
  });
}

Status RadixImpl::ScanRange(ContextImpl& ctx, std::string_view from,
                            std::optional<std::string_view> to, size_t count,
                            std::vector<KeyValue>* out) {
  const uint32_t key_bytes = shape_.key_bytes();
  // Key bytes every key of the range shares.
  size_t common = 0;
  if (to) {
    while (common < key_bytes && from[common] == (*to)[common])
      ++common;
  }
  for (int restart = 0; restart < kMaxRestarts; ++restart) {
    out->clear();
    if (restart > 0) ctx.Backoff(std::min(restart - 1, 6));
    std::vector<Item> frontier;
    // The start: the deepest cached node the whole range lies under, read
    // afresh, or the root slot.
    std::optional<RadixCache::Route> route;
    if (cache_ && restart == 0 && common > 0) route = cache_->Find(from.substr(0, common));
    if (route) {
      ++ctx.counters().cache_hits;
      Item start;
      start.slot = Slot::ToNode(0, route->header.type, route->node);
      start.prefix = std::string(from.substr(0, route->branch));
      frontier.push_back(std::move(start));
    } else {
      if (cache_) ++ctx.counters().cache_misses;
      Item start;
      start.kind = Item::kRereadSlot;
      start.slot_address = root_slot();
      frontier.push_back(std::move(start));
    }
    bool restart_needed = false;
    size_t node_budget = 1;
    while (!restart_needed) {
      // Resolved pairs at the front are final.
      size_t resolved = 0;
      while (resolved < frontier.size() && frontier[resolved].kind == Item::kPair &&
             out->size() < count) {
        out->push_back({std::move(frontier[resolved].prefix), frontier[resolved].value});
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
      std::vector<Op> ops;
      std::vector<size_t> chosen;
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
        if (ctx.arena().Fits(bytes, 64, 512) == 0) break;
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
      DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(&ops));
      // Each chosen item becomes its children, a pair, another try, or
      // nothing; rebuilt in order.
      std::vector<Item> next;
      next.reserve(frontier.size());
      size_t c = 0;
      for (size_t i = 0; i < frontier.size() && !restart_needed; ++i) {
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
          if (!item.slot.live()) continue;
          next.push_back(std::move(item));
          continue;
        }
        if (item.slot.leaf()) {
          LeafImage leaf{item.buffer};
          if (!leaf.Verify(shape_)) {
            ++ctx.counters().read_retries;
            next.push_back(std::move(item));  // torn: read again
            continue;
          }
          const uint64_t rear = leaf.rear(shape_);
          if (rear & kObsolete) {
            if (rear & kReplaced) {
              if (item.slot_address.is_null()) {
                restart_needed = true;
                break;
              }
              item.kind = Item::kRereadSlot;
              next.push_back(std::move(item));
            }
            continue;
          }
          const std::string_view key = leaf.key(shape_);
          if (key >= from && (!to || key <= *to)) {
            Item pair;
            pair.kind = Item::kPair;
            pair.prefix = std::string(key);
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
          if (itself) {
            restart_needed = true;
            break;
          }
          item.kind = Item::kRereadSlot;  // the slot is about to change
          next.push_back(std::move(item));
          continue;
        }
        if (header.type > read_type) {  // more slots than the slot said: read them all
          item.slot = item.slot.WithType(header.type);
          next.push_back(std::move(item));
          continue;
        }
        // The node's prefix: the path's bytes, then its header's.
        std::string prefix = item.prefix;
        for (uint32_t pos = itself ? header.branch() : depth; pos < header.branch(); ++pos) {
          prefix.push_back(static_cast<char>(header.partial[pos - header.depth]));
        }
        if (ComparePrefix(prefix, from) < 0 || (to && ComparePrefix(prefix, *to) > 0)) continue;
        std::vector<std::pair<uint8_t, uint32_t>> children;  // partial key, slot index
        for (uint32_t s = 0; s < node.capacity(); ++s) {
          const Slot slot = node.slot(s);
          if (slot.live()) children.emplace_back(slot.partial(), s);
        }
        std::sort(children.begin(), children.end());
        for (const auto& [partial, index] : children) {
          std::string child_prefix = prefix;
          child_prefix.push_back(static_cast<char>(partial));
          if (ComparePrefix(child_prefix, from) < 0 ||
              (to && ComparePrefix(child_prefix, *to) > 0)) {
            continue;
          }
          Item child;
          child.slot = node.slot(index);
          child.slot_address = node.address + kSlotsOffset + 8 * index;  // to read it again
          child.prefix = std::move(child_prefix);
          next.push_back(std::move(child));
        }
      }
      frontier = std::move(next);
    }
  }
  return Status::Aborted("scan gave up after too many restarts");
}

// By inserts, in key order. A radix tree's shape does not depend on the
// order keys arrive in (nodes branch where keys differ, each key has its
// own leaf), so a load builds the tree inserts would; fill_factor is
// checked, and otherwise has nothing to fill: nodes take the smallest type
// that holds their slots. docs/radix.md says what a bottom-up build would
// save (round trips only).
Status RadixImpl::BulkLoad(Context& context, std::span<const KeyValue> sorted, double fill_factor) {
  return core_.Run(context, IndexOp::kBulkLoad,
                   [&](ContextImpl& ctx) { return Load(ctx, sorted, fill_factor); });
}

Status RadixImpl::Load(ContextImpl& ctx, std::span<const KeyValue> sorted, double fill_factor) {
  if (!(fill_factor > 0.0 && fill_factor <= 1.0)) {
    return Status::InvalidArgument("BulkLoad: fill_factor must be in (0, 1]");
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    DMIDX_RETURN_IF_ERROR(core_.CheckKey(sorted[i].key));
    if (i > 0 && !(sorted[i - 1].key < sorted[i].key)) {
      return Status::InvalidArgument("BulkLoad: keys must be strictly ascending (key " +
                                     std::to_string(i) + ")");
    }
  }
  {
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
    const Op read = Op::Read(root_slot(), word, 8);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(root_slot().node(), {&read, 1}));
    if (Slot(*word).live()) {
      return Status::FailedPrecondition(core_.label() +
                                        " is not empty; BulkLoad needs an empty one");
    }
  }
  for (const KeyValue& pair : sorted) {
    runtime::ScratchArena::Scope scope(ctx.arena());
    DMIDX_RETURN_IF_ERROR(Write(ctx, pair.key, pair.value, Change::kUpsert, nullptr));
  }
  return Status::Ok();
}

}  // namespace dmidx::radix
