// The radix tree's remote layouts (docs/radix.md explains the protocols).
// Every field that is CASed is one aligned 8-byte word; all words are
// little-endian host words (every node is written and read by the same kind
// of machine).
//
// Descriptor (64 bytes), found through the catalog word "radix/<name>":
//
//   0       8          12        16          24                          64
//   +-------+----------+---------+-----------+---------------------------+
//   | magic | key bytes| flags   | root slot | reserved                  |
//   +-------+----------+---------+-----------+---------------------------+
//
// The root slot is a slot like those of internal nodes (below): the parent
// slot of the tree's top node; 0 in an empty tree.
//
// Internal node (space for 256 slots is reserved, so a type switch is in
// place; a READ fetches the first 16 + 8 * Capacity(type) bytes):
//
//   0               8        16       24             16 + 8 * 256
//   +---------------+--------+--------+--- ... ------+
//   | reverse ptr   | header | slot 0 | slot 1 ...   |
//   +---------------+--------+--------+--- ... ------+
//
// Header word:
//
//   63                         16 15   13 12     8 7        0
//   +----------------------------+-------+--------+----------+
//   | partial key bytes 0..5     | count | type   | depth    |
//   +----------------------------+-------+--------+----------+
//
// The node matches key bytes [depth, depth + count) against its partial
// key bytes and branches on key byte depth + count (its "branch byte"), which
// no header change alters. Type 1..7: 4, 8, ... 256 slots; 0: deleted (or
// frozen while a merge removes it).
//
// Slot word (0: empty, never used):
//
//   63   62   61     57   56   55        48 47                            0
//   +----+----+--------+----+-------------+-------------------------------+
//   |used| -  | type   |leaf| partial key | child: node id (16) | off/64 (32)|
//   +----+----+--------+----+-------------+-------------------------------+
//
// A deleted key leaves a tombstone: used, its partial key, child 0. Slots
// fill in index order and never become empty again, so a node has at most
// one slot per partial key (docs/radix.md, "Why tombstones"). A merge
// freezes a node's tombstones and first empty slot (leaf bit, child 0).
//
// Leaf (fixed size per tree, S = key bytes rounded up to 8):
//
//   0             8          16      24        24 + S
//   +-------------+----------+-------+---------+-----------+
//   | reverse ptr | checksum | value | key     | rear word |
//   +-------------+----------+-------+---------+-----------+
//
// checksum = ChecksumWords over value and key. Rear word: 0 free; kLocked
// with the holder's compute-node id + 1 (bits 8-23), context number (bits
// 24-39) and acquisition (bits 40-63) while an update holds it (LockedBy); kObsolete (with
// kReplaced for an out-of-place update's old leaf) once the leaf was deleted or replaced, forever:
// the paper's valid bit, kept in the lock word so that the one CAS that takes the leaf from writers
// also invalidates it for readers.
#ifndef DMIDX_RADIX_LAYOUT_H_
#define DMIDX_RADIX_LAYOUT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "dmidx/radix.h"
#include "index/catalog.h"
#include "lib/common/checksum.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::radix {

// ---- descriptor ----
struct Descriptor {
  index::DescriptorHead head;  // flags: kFixedSizeNodes
  uint64_t root_slot;
  uint64_t reserved[5];
};
static_assert(index::IsDescriptorLayout<Descriptor>(offsetof(Descriptor, root_slot)));
inline constexpr uint64_t kDescriptorMagic = 0x3158494441524d44ull;  // "DMRADIX1"
inline constexpr uint32_t kFixedSizeNodes = 1;                       // flags: homogeneous off
inline constexpr uint32_t kRootSlotOffset = offsetof(Descriptor, root_slot);
inline constexpr uint32_t kMaxKeyBytes = RadixOptions::kMaxKeyBytes;

// ---- node types ----
inline constexpr uint8_t kDeletedType = 0;
inline constexpr uint8_t kMaxType = 7;
// A merge freezes a node's header to kFrozenType | its type (no type of
// a live node), so that whoever undoes the merge of a dead compute node
// knows the type to give back (radix_delete.cc).
inline constexpr uint8_t kFrozenType = 0x10;
inline constexpr uint32_t kMaxSlots = 256;
// Slots of node type 1..7: 4, 8, 16, 32, 64, 128, 256.
constexpr uint32_t Capacity(uint8_t type) {
  // One compare for types 1-7 against 0 and frozen ones (Find and its
  // kind test it on every slot).
  return static_cast<uint8_t>(type - 1) < kMaxType ? 2u << type : 0;
}
static_assert(Capacity(kDeletedType) == 0 && Capacity(kFrozenType | 3) == 0 && Capacity(1) == 4);
static_assert(Capacity(1) == 4 && Capacity(kMaxType) == kMaxSlots);
// The smallest type with more than `index` slots.
constexpr uint8_t TypeHolding(uint32_t index) {
  uint8_t type = 1;
  while (Capacity(type) <= index)
    ++type;
  return type;
}
static_assert(TypeHolding(0) == 1 && TypeHolding(4) == 2 && TypeHolding(255) == kMaxType);

// ---- internal node ----
inline constexpr uint32_t kReverseOffset = 0;
inline constexpr uint32_t kHeaderOffset = 8;
inline constexpr uint32_t kSlotsOffset = 16;
// A node a split makes names its maker (the splitting context's ClaimBy)
// in the word after the slots, which no descent reads: a split that moved
// an object's reverse pointer to its new node and died before publishing
// it is undone by whoever meets the object, once the maker is recovered
// (RadixImpl::AwaitClaim). 0 in a bulk-loaded node.
inline constexpr uint32_t kMakerOffset = kSlotsOffset + 8 * kMaxSlots;
inline constexpr uint32_t kNodeBytes = kMakerOffset + 8;  // reserved per node
constexpr uint32_t NodeReadBytes(uint8_t type) {
  return kSlotsOffset + 8 * Capacity(type);
}
static_assert(kHeaderOffset % 8 == 0 && kSlotsOffset % 8 == 0, "header and slots are CASed");
static_assert(kNodeBytes == 2072);

inline constexpr uint32_t kMaxHeaderBytes = 6;

struct Header {
  uint8_t depth = 0;
  uint8_t type = 0;
  uint8_t count = 0;  // partial key bytes in the header, <= kMaxHeaderBytes
  std::array<uint8_t, kMaxHeaderBytes> partial{};

  uint32_t branch() const { return uint32_t{depth} + count; }
  // Frozen by a merge (removed, or being removed).
  bool deleted() const { return type == kDeletedType || type > kMaxType; }

  uint64_t Pack() const {
    uint64_t word = uint64_t{depth} | (uint64_t{type} & 0x1f) << 8 | (uint64_t{count} & 7) << 13;
    for (uint32_t i = 0; i < kMaxHeaderBytes; ++i)
      word |= uint64_t{partial[i]} << (16 + 8 * i);
    return word;
  }
  static Header Unpack(uint64_t word) {
    Header header;
    header.depth = static_cast<uint8_t>(word);
    header.type = static_cast<uint8_t>((word >> 8) & 0x1f);
    header.count = static_cast<uint8_t>((word >> 13) & 7);
    for (uint32_t i = 0; i < kMaxHeaderBytes; ++i) {
      header.partial[i] = static_cast<uint8_t>(word >> (16 + 8 * i));
    }
    return header;
  }
  friend bool operator==(const Header&, const Header&) = default;
};

// ---- child pointers: 16-bit node id, pool offset in 64-byte units ----
inline constexpr uint64_t kObjectAlignment = 64;
inline constexpr uint64_t kMaxPoolBytes = RadixOptions::kMaxPoolBytes;
static_assert(kMaxPoolBytes == (uint64_t{1} << 32) * kObjectAlignment);

constexpr uint64_t PackChild(fabric::RemoteAddress address) {
  return uint64_t{address.node()} << 32 | (address.offset() / kObjectAlignment);
}
constexpr fabric::RemoteAddress UnpackChild(uint64_t child) {
  return child == 0 ? fabric::RemoteAddress()
                    : fabric::RemoteAddress::Pool(static_cast<uint16_t>(child >> 32),
                                                  (child & 0xffffffffull) * kObjectAlignment);
}

// ---- slots ----
class Slot {
 public:
  static constexpr uint64_t kUsed = uint64_t{1} << 63;
  static constexpr uint64_t kLeaf = uint64_t{1} << 56;

  constexpr Slot() = default;
  constexpr explicit Slot(uint64_t word) : word_(word) {}
  static constexpr Slot ToLeaf(uint8_t partial, fabric::RemoteAddress leaf) {
    return Slot(kUsed | kLeaf | uint64_t{partial} << 48 | PackChild(leaf));
  }
  static constexpr Slot ToNode(uint8_t partial, uint8_t type, fabric::RemoteAddress node) {
    return Slot(kUsed | (uint64_t{type} & 0x1f) << 57 | uint64_t{partial} << 48 | PackChild(node));
  }
  static constexpr Slot Tombstone(uint8_t partial) { return Slot(kUsed | uint64_t{partial} << 48); }
  // A slot a merge froze (a tombstone, or the first empty slot) so that no
  // insert lands in the node it removes: Frozen(slot) of either. A frozen
  // empty slot carries kWasEmpty (a type bit, unused in a frozen slot), so
  // that an undone merge gives each slot back what it held.
  static constexpr uint64_t kWasEmpty = uint64_t{1} << 57;
  static constexpr Slot Frozen(Slot was) {
    return Slot(kUsed | kLeaf | uint64_t{was.partial()} << 48 | (was.empty() ? kWasEmpty : 0));
  }
  // What a frozen slot held before its merge.
  constexpr Slot Unfrozen() const { return (word_ & kWasEmpty) ? Slot() : Tombstone(partial()); }

  constexpr uint64_t word() const { return word_; }
  constexpr bool empty() const { return word_ == 0; }
  constexpr bool used() const { return (word_ & kUsed) != 0; }
  // A slot that leads somewhere (not empty, not a tombstone).
  constexpr bool live() const { return used() && (word_ & 0xffffffffffffull) != 0; }
  constexpr bool tombstone() const { return used() && !live() && !leaf(); }
  constexpr bool frozen() const { return used() && !live() && leaf(); }
  constexpr bool leaf() const { return (word_ & kLeaf) != 0; }
  constexpr uint8_t partial() const { return static_cast<uint8_t>(word_ >> 48); }
  constexpr uint8_t type() const { return static_cast<uint8_t>((word_ >> 57) & 0x1f); }
  constexpr fabric::RemoteAddress child() const { return UnpackChild(word_ & 0xffffffffffffull); }
  constexpr Slot WithType(uint8_t type) const {
    return Slot((word_ & ~(uint64_t{0x1f} << 57)) | (uint64_t{type} & 0x1f) << 57);
  }
  friend constexpr bool operator==(Slot, Slot) = default;

 private:
  uint64_t word_ = 0;
};
static_assert(Slot::ToLeaf(0, fabric::RemoteAddress::Pool(3, 64 * 5)).child() ==
              fabric::RemoteAddress::Pool(3, 64 * 5));
static_assert(Slot::Tombstone(0).used() && !Slot::Tombstone(0).live());
static_assert(Slot::Frozen(Slot()).frozen() && Slot::Frozen(Slot()).Unfrozen().empty());
static_assert(Slot::Frozen(Slot::Tombstone(9)).Unfrozen() == Slot::Tombstone(9));
static_assert(Slot::ToNode(7, 3, fabric::RemoteAddress::Pool(1, 128)).type() == 3);

// A reverse pointer with this bit set is claimed: a merge is removing the
// node (its parent | kClaimedBit), or an out-of-place update is replacing
// the leaf. No split or merge moves a claimed object. (The region bit of a
// pool address, never set in one.)
inline constexpr uint64_t kClaimedBit = uint64_t{1} << fabric::RemoteAddress::kOffsetBits;
// The claim a context writes: kClaimedBit with the claiming context's
// compute node id + 1 (bits 48..63) and its number (bits 0..46,
// ContextImpl::number). Unlike any address, so no CAS that expects a parent
// matches it; unlike every other live context's claim, so a context whose
// claim batch failed can take back its own claim, and only its own, with a
// CAS. (What a claimed reverse pointer held before is never read back from
// it: whoever undoes a claim knows the parent.)
constexpr uint64_t ClaimBy(uint32_t compute_node, uint64_t context_number) {
  return kClaimedBit | (uint64_t{compute_node} + 1) << 48 | (context_number & (kClaimedBit - 1));
}
static_assert((ClaimBy(0, 1) & kClaimedBit) != 0 && ClaimBy(0, 1) != ClaimBy(1, 1));

// ---- leaves ----
inline constexpr uint32_t kLeafReverseOffset = 0;
inline constexpr uint32_t kLeafChecksumOffset = 8;
inline constexpr uint32_t kLeafValueOffset = 16;
inline constexpr uint32_t kLeafKeyOffset = 24;
static_assert(kLeafValueOffset == kLeafChecksumOffset + 8,
              "checksum and value go back together as one 16-byte WRITE");

inline constexpr uint64_t kLocked = 1;
inline constexpr uint64_t kObsolete = 2;
inline constexpr uint64_t kReplaced = 4;
inline constexpr uint64_t kDeletedLeaf = kObsolete;
inline constexpr uint64_t kReplacedLeaf = kObsolete | kReplaced;
// A hold of a rear word: compute node, context number and the low
// kHoldAcquisitionBits bits of the context's lock acquisition
// (lock::RedoLog::NextAcquisition), so that a hold value is this
// acquisition's alone while a redo record may name it (lock/redo_log.h).
inline constexpr int kHoldAcquisitionBits = 24;
constexpr uint64_t LockedBy(uint32_t compute_node, uint32_t context_number, uint64_t acquisition) {
  return kLocked | (uint64_t{compute_node} + 1) << 8 | uint64_t{context_number & 0xffff} << 24 |
         (acquisition & ((uint64_t{1} << kHoldAcquisitionBits) - 1)) << 40;
}
static_assert(LockedBy(0xfffe, 0xffff, ~uint64_t{0}) >> 40 == 0xffffff);
static_assert(((LockedBy(7, 0xffff, ~uint64_t{0}) >> 8) & 0xffff) == 8);
// The compute node a rear word's hold names; none for a word that is not
// an in-place writer's hold (free, or an obsolete mark).
inline std::optional<uint32_t> HolderOf(uint64_t rear) {
  if ((rear & (kLocked | kObsolete)) != kLocked) return std::nullopt;
  return static_cast<uint32_t>((rear >> 8) & 0xffff) - 1;
}
// An out-of-place update's replaced mark: kReplacedLeaf with the updating
// context's compute node id + 1 (bits 48..63) and number (bits 8..47), so
// that after a failed batch it can tell its own mark from another's.
// Readers test only the kObsolete and kReplaced bits.
constexpr uint64_t ReplacedBy(uint32_t compute_node, uint64_t context_number) {
  return kReplacedLeaf | (uint64_t{compute_node} + 1) << 48 |
         (context_number & ((uint64_t{1} << 40) - 1)) << 8;
}
static_assert((ReplacedBy(3, 9) & kReplacedLeaf) == kReplacedLeaf);
// The compute node a claim (ClaimBy) or a replaced mark (ReplacedBy)
// names, and the claim that goes with a replaced mark (the updating
// context's, on the old leaf's reverse pointer).
constexpr uint32_t OwnerOf(uint64_t claim_or_mark) {
  return static_cast<uint32_t>(claim_or_mark >> 48) - 1;
}
constexpr uint64_t ClaimOfReplaced(uint64_t mark) {
  return ClaimBy(OwnerOf(mark), (mark >> 8) & ((uint64_t{1} << 40) - 1));
}
static_assert(OwnerOf(ReplacedBy(3, 9)) == 3 && OwnerOf(ClaimBy(5, 1)) == 5);
static_assert(ClaimOfReplaced(ReplacedBy(3, 9)) == ClaimBy(3, 9));

// Sizes of one tree's leaves.
class LeafShape {
 public:
  explicit LeafShape(uint32_t key_bytes)
      : key_bytes_(key_bytes), key_stride_((key_bytes + 7) & ~7u) {}
  uint32_t key_bytes() const { return key_bytes_; }
  uint32_t key_stride() const { return key_stride_; }
  uint32_t rear_offset() const { return kLeafKeyOffset + key_stride_; }
  uint32_t bytes() const { return rear_offset() + 8; }

 private:
  uint32_t key_bytes_;
  uint32_t key_stride_;
};

// The checksum a leaf image must hold: over its value and key words.
inline uint64_t LeafChecksum(const LeafShape& shape, const uint8_t* image) {
  return ChecksumWords(image + kLeafValueOffset, 1 + shape.key_stride() / 8);
}

// ---- images of new objects ----
// A new internal node's full image: every one of the 256 slots, zero but
// for those the caller sets (pool memory may be reused and must read as
// empty behind the type).
inline void InitNodeImage(uint8_t* image, fabric::RemoteAddress reverse, const Header& header,
                          uint64_t maker = 0) {
  std::memset(image, 0, kNodeBytes);
  const uint64_t words[2] = {reverse.raw(), header.Pack()};
  std::memcpy(image + kReverseOffset, &words[0], 8);
  std::memcpy(image + kHeaderOffset, &words[1], 8);
  std::memcpy(image + kMakerOffset, &maker, 8);
}
inline void SetSlotInImage(uint8_t* image, uint32_t index, Slot slot) {
  const uint64_t word = slot.word();
  std::memcpy(image + kSlotsOffset + 8 * index, &word, 8);
}
// A new leaf's image (free rear word) for `key` (key_bytes long).
inline void InitLeafImage(const LeafShape& shape, uint8_t* image, fabric::RemoteAddress reverse,
                          std::string_view key, uint64_t value) {
  std::memset(image, 0, shape.bytes());
  std::memcpy(image + kLeafReverseOffset, &reverse, 8);
  std::memcpy(image + kLeafValueOffset, &value, 8);
  std::memcpy(image + kLeafKeyOffset, key.data(), key.size());
  const uint64_t checksum = LeafChecksum(shape, image);
  std::memcpy(image + kLeafChecksumOffset, &checksum, 8);
}

}  // namespace dmidx::radix

#endif  // DMIDX_RADIX_LAYOUT_H_
