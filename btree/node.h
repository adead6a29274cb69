// B+tree node images: the layout of docs/btree.md over a local buffer that
// holds a copy of a remote node. All multi-byte fields are little-endian
// host words (every node is written and read by the same kind of machine);
// keys are bytes compared with memcmp.
//
//   0        8         16       24        32         32+S        32+2S
//   +--------+---------+--------+---------+----------+-----------+----------+
//   |checksum| bitmap  | meta   | sibling | low fence| high fence| entries  |
//   +--------+---------+--------+---------+----------+-----------+----------+
//
// S = key stride (key bytes rounded up to 8). meta: byte 0 level (its top
// bit set: dead), byte 1 fence flags, bytes 2-3 count (internal nodes),
// bytes 4-5 key bytes. A dead node was merged into its left neighbour (or,
// a root, collapsed into its only child): its sibling word names that
// node, its fences are kept (docs/btree.md, "Merges"). The mark sits in
// the level byte so that every check of a node's level (is_leaf, a
// descent's expected level) refuses a dead node at no cost of its own.
// Leaf entry: key (S) + value (8), slot used iff its bitmap bit is set.
// Internal: child 0 (8), then entries key (S) + child (8), keys sorted;
// child i+1 holds keys >= key i and below key i+1.
#ifndef DMIDX_TREE_NODE_H_
#define DMIDX_TREE_NODE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/status.h"
#include "lib/common/checksum.h"
#include "lib/common/key_compare.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::btree {

// The words every node starts with (the picture above); the fences follow.
struct NodeHead {
  uint64_t checksum;
  uint64_t bitmap;  // leaf: slot i used iff bit i is set
  uint64_t meta;
  uint64_t sibling;
};
inline constexpr uint32_t kChecksumOffset = offsetof(NodeHead, checksum);
inline constexpr uint32_t kBitmapOffset = offsetof(NodeHead, bitmap);
inline constexpr uint32_t kMetaOffset = offsetof(NodeHead, meta);
inline constexpr uint32_t kSiblingOffset = offsetof(NodeHead, sibling);
inline constexpr uint32_t kFencesOffset = sizeof(NodeHead);
static_assert(kBitmapOffset == kChecksumOffset + 8,
              "checksum and bitmap go back together as one 16-byte WRITE");
inline constexpr uint32_t kMaxLeafSlots = 8 * sizeof(NodeHead::bitmap);  // one bitmap word
inline constexpr uint32_t kMaxKeyBytes = BTreeOptions::kMaxKeyBytes;

// The sizes every node of one tree shares.
class NodeShape {
 public:
  // InvalidArgument unless node_bytes is a multiple of 64 in [256, 65536]
  // (BTreeOptions' bounds), key_bytes is in [1, kMaxKeyBytes], and both node
  // kinds hold >= 4 entries.
  static StatusOr<NodeShape> Make(uint32_t node_bytes, uint32_t key_bytes);

  uint32_t node_bytes() const { return node_bytes_; }
  uint32_t key_bytes() const { return key_bytes_; }
  uint32_t key_stride() const { return (key_bytes_ + 7) & ~7u; }
  uint32_t header_bytes() const { return kFencesOffset + 2 * key_stride(); }
  uint32_t entry_bytes() const { return key_stride() + 8; }
  uint32_t leaf_slots() const;
  uint32_t internal_slots() const;
  // Offset of leaf slot i; of internal key i (its child follows the key).
  uint32_t leaf_entry_offset(uint32_t slot) const { return header_bytes() + slot * entry_bytes(); }
  uint32_t internal_entry_offset(uint32_t i) const {
    return header_bytes() + 8 + i * entry_bytes();
  }

 private:
  NodeShape(uint32_t node_bytes, uint32_t key_bytes)
      : node_bytes_(node_bytes), key_bytes_(key_bytes) {}
  uint32_t node_bytes_;
  uint32_t key_bytes_;
};

// A view of one node image. Does not own `data` (node_bytes, 8-aligned).
class NodeView {
 public:
  NodeView(const NodeShape& shape, uint8_t* data) : shape_(shape), data_(data) {}

  // Fresh nodes. An empty fence string means minus infinity (low) or plus
  // infinity (high); otherwise fences are key_bytes long.
  void InitLeaf(std::string_view low, std::string_view high, fabric::RemoteAddress sibling);
  void InitInternal(uint8_t level, std::string_view low, std::string_view high,
                    fabric::RemoteAddress sibling, fabric::RemoteAddress first_child);

  // Checksum of everything after the checksum word; with `checkpoints`,
  // also keeps what SealFrom needs.
  uint64_t ComputeChecksum(ChecksumCheckpoints* checkpoints = nullptr) const;
  void Seal() { Store64(kChecksumOffset, ComputeChecksum()); }
  // Seal() for an image whose bytes from `changed_below` on are those of
  // the image `checkpoints` were kept from (by ComputeChecksum or Verify):
  // the hash (taken last word first) is taken again only below there.
  void SealFrom(const ChecksumCheckpoints& checkpoints, uint32_t changed_below);
  // True iff the stored checksum matches the image: the image is one
  // version of the node, not a torn mix (up to a 2^-63 collision: 63 bits are kept).
  bool Verify(ChecksumCheckpoints* checkpoints = nullptr) const {
    return Load64(kChecksumOffset) == ComputeChecksum(checkpoints);
  }

  uint8_t level() const { return data_[kMetaOffset]; }
  bool is_leaf() const { return level() == 0; }
  uint16_t count() const;
  fabric::RemoteAddress sibling() const {
    return fabric::RemoteAddress::FromRaw(Load64(kSiblingOffset));
  }
  void set_sibling(fabric::RemoteAddress sibling) { Store64(kSiblingOffset, sibling.raw()); }
  bool low_is_min() const { return data_[kMetaOffset + 1] & kLowIsMin; }
  // Merged away (or a collapsed root): nothing is read from it but its
  // fences and `merged_into()`, the node that took its range over. Its
  // level() has kDeadLevel set, so it equals no live level.
  bool dead() const { return data_[kMetaOffset] & kDeadLevel; }
  fabric::RemoteAddress merged_into() const { return sibling(); }
  // Marks the image dead, its range taken over by `into` (not sealed).
  void MarkDead(fabric::RemoteAddress into) {
    data_[kMetaOffset] |= kDeadLevel;
    set_sibling(into);
  }
  static constexpr uint8_t kDeadLevel = 0x80;
  bool high_is_max() const { return data_[kMetaOffset + 1] & kHighIsMax; }
  std::string_view low_fence() const { return KeyAt(kFencesOffset); }
  std::string_view high_fence() const { return KeyAt(kFencesOffset + shape_.key_stride()); }
  // low <= key < high. A key beyond high means: follow the sibling.
  bool Covers(std::string_view key) const {
    return (low_is_min() || CompareKeys(key, low_fence()) >= 0) && !BeyondHigh(key);
  }
  bool BeyondHigh(std::string_view key) const {
    return !high_is_max() && CompareKeys(key, high_fence()) >= 0;
  }

  // ---- leaves (unsorted) ----
  uint64_t bitmap() const { return Load64(kBitmapOffset); }
  // Counted inline: the build targets any x86-64, where
  // __builtin_popcountll is a call into libgcc (about 10 instructions
  // more on every delete, which asks whether its leaf is underfull).
  uint32_t leaf_entries() const {
    uint64_t bits = bitmap();
    bits -= (bits >> 1) & 0x5555555555555555;
    bits = (bits & 0x3333333333333333) + ((bits >> 2) & 0x3333333333333333);
    bits = (bits + (bits >> 4)) & 0x0f0f0f0f0f0f0f0f;
    return static_cast<uint32_t>((bits * 0x0101010101010101) >> 56);
  }
  // Slot holding `key`, or -1.
  int FindLeafSlot(std::string_view key) const;
  // A free slot, or -1 when the leaf is full.
  int FreeLeafSlot() const;
  std::string_view leaf_key(uint32_t slot) const { return KeyAt(shape_.leaf_entry_offset(slot)); }
  uint64_t leaf_value(uint32_t slot) const {
    return Load64(shape_.leaf_entry_offset(slot) + shape_.key_stride());
  }
  // The live slots, in key order.
  struct LeafSlots {
    std::array<uint8_t, kMaxLeafSlots> slots;
    uint32_t count = 0;
    const uint8_t* begin() const { return slots.data(); }
    const uint8_t* end() const { return slots.data() + count; }
  };
  LeafSlots SortedLeafSlots() const;
  void SetLeafEntry(uint32_t slot, std::string_view key, uint64_t value);
  void ClearLeafEntry(uint32_t slot);

  // ---- internal nodes (sorted) ----
  std::string_view internal_key(uint32_t i) const { return KeyAt(shape_.internal_entry_offset(i)); }
  // Child i: 0 is the first child, i >= 1 follows key i-1.
  fabric::RemoteAddress child(uint32_t i) const;
  // The child whose range holds `key` (the key must be covered).
  fabric::RemoteAddress FindChild(std::string_view key) const;
  // The index of that child.
  uint32_t ChildIndex(std::string_view key) const;
  // Adds separator `key` with `right_child` (keys >= key) in order. False if
  // the node is full. `key` must not be present.
  bool InsertSeparator(std::string_view key, fabric::RemoteAddress right_child);
  // Removes separator i and child i + 1 (whose keys then go to child i).
  void RemoveSeparator(uint32_t i);
  // Points child i at `child`.
  void set_child(uint32_t i, fabric::RemoteAddress child);

  // Entries in use: a leaf's keys, an internal node's separators.
  uint32_t fill() const { return is_leaf() ? leaf_entries() : count(); }

  uint8_t* data() const { return data_; }
  const NodeShape& shape() const { return shape_; }

 private:
  static constexpr uint8_t kLowIsMin = 1;
  static constexpr uint8_t kHighIsMax = 2;

  uint64_t Load64(uint32_t offset) const {
    uint64_t value;
    std::memcpy(&value, data_ + offset, 8);
    return value;
  }
  void Store64(uint32_t offset, uint64_t value) { std::memcpy(data_ + offset, &value, 8); }
  std::string_view KeyAt(uint32_t offset) const {
    return {reinterpret_cast<const char*>(data_ + offset), shape_.key_bytes()};
  }
  void StoreKey(uint32_t offset, std::string_view key);
  void InitCommon(uint8_t level, std::string_view low, std::string_view high,
                  fabric::RemoteAddress sibling);
  void set_count(uint16_t count);

  const NodeShape shape_;  // a copy: 8 bytes, and no dangling reference
  uint8_t* data_;
};

}  // namespace dmidx::btree

#endif  // DMIDX_TREE_NODE_H_
