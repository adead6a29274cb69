#include "tests/radix_test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace dmidx::radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

uint64_t Word(const std::vector<uint8_t>& bytes, size_t offset) {
  uint64_t word;
  std::memcpy(&word, bytes.data() + offset, 8);
  return word;
}

// Reads `length` bytes at `address` into a fresh vector (8-byte aligned
// scratch from the context's arena, copied out).
std::vector<uint8_t> Read(ContextImpl& ctx, RemoteAddress address, uint32_t length,
                          std::vector<std::string>* errors) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint8_t*> buffer = ctx.arena().Bytes(length, 64);
  std::vector<uint8_t> out(length);
  if (!buffer.ok()) {
    errors->push_back(buffer.status().ToString());
    return out;
  }
  const Op read = Op::Read(address, *buffer, length);
  const Status status = ctx.Execute(address.node(), {&read, 1});
  if (!status.ok()) errors->push_back("READ " + address.ToString() + ": " + status.ToString());
  std::memcpy(out.data(), *buffer, length);
  return out;
}

struct Walker {
  ContextImpl& ctx;
  const LeafShape shape;
  const bool fixed_size;
  TreeShape shape_seen;
  std::span<const uint32_t> dead;

  bool Dead(uint32_t node) const { return std::find(dead.begin(), dead.end(), node) != dead.end(); }
  // Every node the walk reached, and the nodes leftovers name as
  // unpublished (each must be among none of them: checked at the end).
  std::vector<RemoteAddress> reached;
  std::vector<std::pair<RemoteAddress, std::string>> unpublished;

  // A reverse pointer `reverse` of `object` where `parent` belongs that a
  // dead compute node left: its claim, or a node its split made and never
  // published (whose maker word names it and one of whose slots leads to
  // the object).
  bool DeadLeftover(RemoteAddress object, uint64_t reverse, const std::string& where) {
    if (dead.empty() || reverse == 0) return false;
    if (reverse & kClaimedBit) return Dead(OwnerOf(reverse));
    const RemoteAddress made = RemoteAddress::FromRaw(reverse);
    const std::vector<uint8_t> node = Read(ctx, made, kNodeBytes, &shape_seen.errors);
    const uint64_t maker = Word(node, kMakerOffset);
    if (!(maker & kClaimedBit) || !Dead(OwnerOf(maker))) return false;
    bool leads = false;
    for (uint32_t i = 0; i < kMaxSlots && !leads; ++i) {
      const Slot slot(Word(node, kSlotsOffset + 8 * i));
      leads = slot.live() && slot.child() == object;
    }
    if (leads) unpublished.emplace_back(made, where);
    return leads;
  }
  void CheckReverse(const std::string& where, RemoteAddress object, uint64_t reverse,
                    RemoteAddress parent, const char* what) {
    if (reverse == parent.raw()) return;
    if (DeadLeftover(object, reverse, where)) {
      ++shape_seen.dead_leftovers;
    } else {
      Error(where, what);
    }
  }

  void Error(const std::string& where, const std::string& what) {
    shape_seen.errors.push_back(where + ": " + what);
  }

  // The child of `slot`, reached from `parent` with `prefix` matched.
  void Visit(Slot slot, RemoteAddress parent, const std::string& prefix, uint64_t level) {
    const RemoteAddress address = slot.child();
    const std::string where = address.ToString();
    if (slot.leaf()) {
      const std::vector<uint8_t> leaf = Read(ctx, address, shape.bytes(), &shape_seen.errors);
      ++shape_seen.leaves;
      if (shape_seen.leaves_on.size() <= address.node()) {
        shape_seen.leaves_on.resize(address.node() + 1);
      }
      ++shape_seen.leaves_on[address.node()];
      CheckReverse(where, address, Word(leaf, kLeafReverseOffset), parent, "leaf reverse pointer");
      if (Word(leaf, kLeafChecksumOffset) != LeafChecksum(shape, leaf.data())) {
        Error(where, "leaf checksum");
      }
      if (Word(leaf, shape.rear_offset()) == kDeletedLeaf && !dead.empty()) {
        ++shape_seen.dead_leftovers;  // reads as absent; an insert takes its slot
        return;
      }
      if (Word(leaf, shape.rear_offset()) != 0) {
        Error(where, "leaf rear word " + std::to_string(Word(leaf, shape.rear_offset())));
      }
      const std::string key(reinterpret_cast<const char*>(leaf.data() + kLeafKeyOffset),
                            shape.key_bytes());
      if (key.compare(0, prefix.size(), prefix) != 0) Error(where, "leaf key off its path");
      if (!prefix.empty() && slot.partial() != static_cast<uint8_t>(prefix.back())) {
        Error(where, "leaf slot's partial key");
      }
      if (getenv("DMIDX_WALK_DEBUG")) {
        fprintf(stderr, "%*sleaf %s partial %02x key[7]=%02x rear %llx rev %s\n", int(level * 2),
                "", where.c_str(), slot.partial(), static_cast<uint8_t>(key[7]),
                static_cast<unsigned long long>(Word(leaf, shape.rear_offset())),
                RemoteAddress::FromRaw(Word(leaf, kLeafReverseOffset)).ToString().c_str());
      }
      shape_seen.keys.push_back(key);
      return;
    }
    const std::vector<uint8_t> node = Read(ctx, address, kNodeBytes, &shape_seen.errors);
    const Header header = Header::Unpack(Word(node, kHeaderOffset));
    ++shape_seen.nodes;
    if (getenv("DMIDX_WALK_DEBUG")) {
      const Header h = Header::Unpack(Word(node, kHeaderOffset));
      fprintf(stderr, "%*snode %s depth %d count %d type %d prefix '%s' rev %llx\n", int(level * 2),
              "", where.c_str(), h.depth, h.count, h.type, prefix.c_str(),
              static_cast<unsigned long long>(Word(node, kReverseOffset)));
    }
    shape_seen.levels = std::max(shape_seen.levels, level);
    reached.push_back(address);
    CheckReverse(where, address, Word(node, kReverseOffset), parent, "node reverse pointer");
    if (header.deleted() || header.type > kMaxType) {
      Error(where, "reachable node of type " + std::to_string(header.type));
      return;
    }
    ++shape_seen.nodes_by_type[header.type];
    if (fixed_size && header.type != kMaxType) Error(where, "fixed-size tree with a small node");
    // A slot's type may lag its child's header (a type switch raced a
    // header split: readers read the rest and repair it), never lead it.
    if (slot.type() > header.type) {
      Error(where, "slot says type " + std::to_string(slot.type()) + ", header " +
                       std::to_string(header.type));
    } else if (slot.type() < header.type) {
      ++shape_seen.lagging_slot_types;
    }
    // A header that starts above the path's depth still holds bytes the
    // path matched (a header split's node not trimmed yet): readers skip
    // them, so the walk does too, after checking that they agree.
    uint32_t matched = 0;
    if (header.depth < prefix.size() && header.branch() >= prefix.size()) {
      ++shape_seen.untrimmed_headers;
      matched = static_cast<uint32_t>(prefix.size()) - header.depth;
      for (uint32_t i = 0; i < matched; ++i) {
        if (static_cast<char>(header.partial[i]) != prefix[header.depth + i]) {
          Error(where, "untrimmed header bytes disagree with the path");
        }
      }
    } else if (header.depth != prefix.size()) {
      Error(where, "header depth " + std::to_string(header.depth));
    }
    shape_seen.longest_header = std::max<uint64_t>(shape_seen.longest_header, header.count);
    if (header.count == kMaxHeaderBytes) ++shape_seen.full_headers;
    if (header.branch() >= shape.key_bytes()) Error(where, "branch byte beyond the key");
    std::string node_prefix = prefix;
    for (uint32_t i = matched; i < header.count; ++i) {
      node_prefix.push_back(static_cast<char>(header.partial[i]));
    }
    std::vector<std::pair<uint8_t, Slot>> children;
    std::array<bool, 256> partials{};
    uint32_t live = 0;
    bool empty_seen = false;
    for (uint32_t i = 0; i < kMaxSlots; ++i) {
      const Slot child(Word(node, kSlotsOffset + 8 * i));
      if (i >= Capacity(header.type)) {
        if (!child.empty()) Error(where, "slot " + std::to_string(i) + " behind the type");
        continue;
      }
      if (getenv("DMIDX_WALK_DEBUG") && child.used() && !child.live()) {
        fprintf(stderr, "%*sslot %u %s partial %02x\n", int(level * 2 + 2), "", i,
                child.frozen() ? "frozen" : "tombstone", child.partial());
      }
      if (child.empty()) {
        empty_seen = true;
        continue;
      }
      if (empty_seen) Error(where, "used slot after an empty one");
      if (child.frozen()) Error(where, "frozen slot in a reachable node");
      if (partials[child.partial()]) Error(where, "two slots for one partial key");
      partials[child.partial()] = true;
      if (child.tombstone()) {
        ++shape_seen.tombstones;
        continue;
      }
      ++live;
      children.emplace_back(child.partial(), child);
    }
    if (live < 2) {
      ++shape_seen.single_child_nodes;
      if (getenv("DMIDX_WALK_DEBUG"))
        fprintf(stderr, "single-child node %s depth %d count %d type %d live %u\n", where.c_str(),
                header.depth, header.count, header.type, live);
    }
    std::sort(children.begin(), children.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [partial, child] : children) {
      std::string child_prefix = node_prefix;
      child_prefix.push_back(static_cast<char>(partial));
      Visit(child, address, child_prefix, level + 1);
    }
  }
};

}  // namespace

TreeShape RadixTestPeer::Walk(RangeIndex& index, Context& context, std::span<const uint32_t> dead) {
  auto& tree = dynamic_cast<RadixImpl&>(index);
  ContextImpl& ctx = ContextImpl::From(context);
  Walker walker{ctx, tree.shape_, tree.fixed_size_, {}, dead, {}, {}};
  const std::vector<uint8_t> root = Read(ctx, tree.root_slot(), 8, &walker.shape_seen.errors);
  const Slot slot(Word(root, 0));
  if (slot.live()) walker.Visit(slot, tree.descriptor_, "", 1);
  for (const auto& [made, where] : walker.unpublished) {
    if (std::find(walker.reached.begin(), walker.reached.end(), made) != walker.reached.end()) {
      walker.Error(where, "reverse pointer names node " + made.ToString() +
                              ", reachable, as a dead split's unpublished one");
    }
  }
  return walker.shape_seen;
}

uint32_t RadixTestPeer::LeafBytes(RangeIndex& index) {
  return dynamic_cast<RadixImpl&>(index).shape_.bytes();
}

lock::LocalLockTable& RadixTestPeer::LeafQueues(RangeIndex& index) {
  return *dynamic_cast<RadixImpl&>(index).leaf_queues_;
}

uint64_t RadixTestPeer::LockedWord(RangeIndex& index, ContextImpl& ctx) {
  return dynamic_cast<RadixImpl&>(index).NewHold(ctx).value();
}

uint64_t RadixTestPeer::ReadWord(Context& context, RemoteAddress at) {
  std::vector<std::string> errors;
  return Word(Read(ContextImpl::From(context), at, 8, &errors), 0);
}

void RadixTestPeer::WriteWord(Context& context, RemoteAddress at, uint64_t word) {
  ContextImpl& ctx = ContextImpl::From(context);
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint64_t* buffer = *ctx.arena().Words(1);
  *buffer = word;
  const Op write = Op::Write(at, buffer, 8);
  (void)ctx.Execute(at.node(), {&write, 1});
}

namespace {

// Follows `key`'s path from the root slot, read afresh, to a leaf or to
// the node whose branch byte is key byte `branch` (when given).
Slot FollowPath(Context& context, RemoteAddress root_slot, std::string_view key,
                std::optional<uint32_t> branch) {
  Slot slot(RadixTestPeer::ReadWord(context, root_slot));
  while (slot.live() && !slot.leaf()) {
    std::vector<std::string> errors;
    const std::vector<uint8_t> node =
        Read(ContextImpl::From(context), slot.child(), kNodeBytes, &errors);
    const Header header = Header::Unpack(Word(node, kHeaderOffset));
    if (branch && header.branch() == *branch) return slot;
    const auto byte = static_cast<uint8_t>(key[header.branch()]);
    Slot next;
    for (uint32_t i = 0; i < Capacity(header.type); ++i) {
      const Slot candidate(Word(node, kSlotsOffset + 8 * i));
      if (candidate.live() && candidate.partial() == byte) next = candidate;
    }
    slot = next;
  }
  return branch ? Slot() : slot;
}

}  // namespace

RemoteAddress RadixTestPeer::LeafOf(RangeIndex& index, Context& context, std::string_view key) {
  const Slot slot =
      FollowPath(context, dynamic_cast<RadixImpl&>(index).root_slot(), key, std::nullopt);
  return slot.live() ? slot.child() : RemoteAddress();
}

RemoteAddress RadixTestPeer::NodeOnPath(RangeIndex& index, Context& context, std::string_view key,
                                        uint32_t branch) {
  const Slot slot = FollowPath(context, dynamic_cast<RadixImpl&>(index).root_slot(), key, branch);
  return slot.live() ? slot.child() : RemoteAddress();
}

}  // namespace dmidx::radix
