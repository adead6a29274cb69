#include "btree/node.h"

#include <algorithm>
#include <string>

#include "lib/common/checksum.h"
#include "lib/common/key_compare.h"

namespace dmidx::btree {

StatusOr<NodeShape> NodeShape::Make(uint32_t node_bytes, uint32_t key_bytes) {
  if (node_bytes % BTreeOptions::kNodeBytesMultiple != 0 ||
      node_bytes < BTreeOptions::kMinNodeBytes || node_bytes > BTreeOptions::kMaxNodeBytes) {
    return Status::InvalidArgument(
        "node size must be a multiple of " + std::to_string(BTreeOptions::kNodeBytesMultiple) +
        " in [" + std::to_string(BTreeOptions::kMinNodeBytes) + ", " +
        std::to_string(BTreeOptions::kMaxNodeBytes) + "], not " + std::to_string(node_bytes));
  }
  if (key_bytes == 0 || key_bytes > kMaxKeyBytes) {
    return Status::InvalidArgument("key size must be in [1, " + std::to_string(kMaxKeyBytes) +
                                   "], not " + std::to_string(key_bytes));
  }
  NodeShape shape(node_bytes, key_bytes);
  if (shape.leaf_slots() < 4 || shape.internal_slots() < 4) {
    return Status::InvalidArgument("a node of " + std::to_string(node_bytes) +
                                   " bytes holds fewer than 4 keys of " +
                                   std::to_string(key_bytes) + " bytes; use larger nodes");
  }
  return shape;
}

uint32_t NodeShape::leaf_slots() const {
  if (node_bytes_ <= header_bytes()) return 0;
  return std::min(kMaxLeafSlots, (node_bytes_ - header_bytes()) / entry_bytes());
}

uint32_t NodeShape::internal_slots() const {
  if (node_bytes_ <= header_bytes() + 8) return 0;
  return std::min<uint32_t>(0xffff, (node_bytes_ - header_bytes() - 8) / entry_bytes());
}

void NodeView::StoreKey(uint32_t offset, std::string_view key) {
  std::memset(data_ + offset, 0, shape_.key_stride());
  std::memcpy(data_ + offset, key.data(), std::min<size_t>(key.size(), shape_.key_bytes()));
}

void NodeView::InitCommon(uint8_t level, std::string_view low, std::string_view high,
                          fabric::RemoteAddress sibling) {
  std::memset(data_, 0, shape_.node_bytes());
  data_[kMetaOffset] = level;
  data_[kMetaOffset + 1] = (low.empty() ? kLowIsMin : 0) | (high.empty() ? kHighIsMax : 0);
  const uint16_t key_bytes = static_cast<uint16_t>(shape_.key_bytes());
  std::memcpy(data_ + kMetaOffset + 4, &key_bytes, 2);
  set_sibling(sibling);
  StoreKey(kFencesOffset, low);
  StoreKey(kFencesOffset + shape_.key_stride(), high);
}

void NodeView::InitLeaf(std::string_view low, std::string_view high,
                        fabric::RemoteAddress sibling) {
  InitCommon(0, low, high, sibling);
}

void NodeView::InitInternal(uint8_t level, std::string_view low, std::string_view high,
                            fabric::RemoteAddress sibling, fabric::RemoteAddress first_child) {
  InitCommon(level, low, high, sibling);
  Store64(shape_.header_bytes(), first_child.raw());
}

uint64_t NodeView::ComputeChecksum(ChecksumCheckpoints* checkpoints) const {
  return ChecksumWords(data_ + 8, shape_.node_bytes() / 8 - 1, checkpoints);
}

void NodeView::SealFrom(const ChecksumCheckpoints& checkpoints, uint32_t changed_below) {
  // The hash covers bytes [8, node_bytes) in words: words from
  // ceil((changed_below - 8) / 8) on are unchanged.
  const uint32_t changed_words = changed_below <= 8 ? 0 : (changed_below - 8 + 7) / 8;
  Store64(kChecksumOffset,
          ChecksumWordsFrom(data_ + 8, shape_.node_bytes() / 8 - 1, checkpoints, changed_words));
}

uint16_t NodeView::count() const {
  uint16_t count;
  std::memcpy(&count, data_ + kMetaOffset + 2, 2);
  return count;
}

void NodeView::set_count(uint16_t count) {
  std::memcpy(data_ + kMetaOffset + 2, &count, 2);
}

int NodeView::FindLeafSlot(std::string_view key) const {
  const uint64_t used = bitmap();
  const uint8_t* entry = data_ + shape_.header_bytes();
  const uint32_t stride = shape_.entry_bytes();
  const uint32_t slots = shape_.leaf_slots();
  if (key.size() == 8) {
    // The common 8-byte key: every slot's key word in turn (a free slot's
    // may match too, so the bitmap settles a match), a few instructions a
    // slot and no memcmp call. Slots fill lowest first, so a present key
    // is found after about half the used slots.
    uint64_t want;
    std::memcpy(&want, key.data(), 8);
    for (uint32_t slot = 0; slot < slots; ++slot, entry += stride) {
      uint64_t have;
      std::memcpy(&have, entry, 8);
      if (have == want && (used >> slot & 1)) return static_cast<int>(slot);
    }
    return -1;
  }
  for (uint64_t bits = used; bits != 0; bits &= bits - 1) {
    const int slot = __builtin_ctzll(bits);
    if (std::memcmp(entry + slot * stride, key.data(), key.size()) == 0) return slot;
  }
  return -1;
}

int NodeView::FreeLeafSlot() const {
  const uint32_t slots = shape_.leaf_slots();
  const uint64_t all = slots == 64 ? ~uint64_t{0} : (uint64_t{1} << slots) - 1;
  const uint64_t free = all & ~bitmap();
  return free == 0 ? -1 : __builtin_ctzll(free);
}

NodeView::LeafSlots NodeView::SortedLeafSlots() const {
  LeafSlots sorted;
  if (shape_.key_bytes() == 8) {
    // 8-byte keys sort as big-endian words, each packed with its slot into
    // one integer (key word, then slot): a sort of plain integers, no
    // comparisons through memcmp.
    std::array<unsigned __int128, kMaxLeafSlots> packed;
    for (uint64_t bits = bitmap(); bits != 0; bits &= bits - 1) {
      const auto slot = static_cast<uint32_t>(__builtin_ctzll(bits));
      uint64_t key;
      std::memcpy(&key, data_ + shape_.leaf_entry_offset(slot), 8);
      packed[sorted.count++] = (static_cast<unsigned __int128>(__builtin_bswap64(key)) << 8) | slot;
    }
    std::sort(packed.begin(), packed.begin() + sorted.count);
    for (uint32_t i = 0; i < sorted.count; ++i)
      sorted.slots[i] = static_cast<uint8_t>(packed[i] & 0xff);
    return sorted;
  }
  for (uint64_t bits = bitmap(); bits != 0; bits &= bits - 1) {
    sorted.slots[sorted.count++] = static_cast<uint8_t>(__builtin_ctzll(bits));
  }
  std::sort(sorted.slots.begin(), sorted.slots.begin() + sorted.count,
            [this](uint8_t a, uint8_t b) { return CompareKeys(leaf_key(a), leaf_key(b)) < 0; });
  return sorted;
}

void NodeView::SetLeafEntry(uint32_t slot, std::string_view key, uint64_t value) {
  const uint32_t offset = shape_.leaf_entry_offset(slot);
  StoreKey(offset, key);
  Store64(offset + shape_.key_stride(), value);
  Store64(kBitmapOffset, bitmap() | (uint64_t{1} << slot));
}

void NodeView::ClearLeafEntry(uint32_t slot) {
  const uint32_t offset = shape_.leaf_entry_offset(slot);
  std::memset(data_ + offset, 0, shape_.entry_bytes());
  Store64(kBitmapOffset, bitmap() & ~(uint64_t{1} << slot));
}

fabric::RemoteAddress NodeView::child(uint32_t i) const {
  const uint32_t offset =
      i == 0 ? shape_.header_bytes() : shape_.internal_entry_offset(i - 1) + shape_.key_stride();
  return fabric::RemoteAddress::FromRaw(Load64(offset));
}

void NodeView::set_child(uint32_t i, fabric::RemoteAddress child) {
  const uint32_t offset =
      i == 0 ? shape_.header_bytes() : shape_.internal_entry_offset(i - 1) + shape_.key_stride();
  Store64(offset, child.raw());
}

void NodeView::RemoveSeparator(uint32_t i) {
  const uint16_t n = count();
  const uint32_t at = shape_.internal_entry_offset(i);
  const uint32_t end = shape_.internal_entry_offset(n);
  std::memmove(data_ + at, data_ + at + shape_.entry_bytes(), end - at - shape_.entry_bytes());
  std::memset(data_ + end - shape_.entry_bytes(), 0, shape_.entry_bytes());
  set_count(static_cast<uint16_t>(n - 1));
}

fabric::RemoteAddress NodeView::FindChild(std::string_view key) const {
  return child(ChildIndex(key));
}

uint32_t NodeView::ChildIndex(std::string_view key) const {
  // The number of separators <= key is the child index.
  uint32_t lo = 0, hi = count();
  const uint8_t* first = data_ + shape_.internal_entry_offset(0);
  const uint32_t stride = shape_.entry_bytes();
  if (key.size() == 8) {
    // 8-byte keys compare as big-endian words: no call per probe.
    uint64_t want;
    std::memcpy(&want, key.data(), 8);
    want = __builtin_bswap64(want);
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      uint64_t separator;
      std::memcpy(&separator, first + mid * stride, 8);
      if (__builtin_bswap64(separator) <= want) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (CompareKeys(internal_key(mid), key) <= 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

bool NodeView::InsertSeparator(std::string_view key, fabric::RemoteAddress right_child) {
  const uint16_t n = count();
  if (n >= shape_.internal_slots()) return false;
  uint32_t position = 0;
  while (position < n && CompareKeys(internal_key(position), key) < 0)
    ++position;
  const uint32_t from = shape_.internal_entry_offset(position);
  const uint32_t to = shape_.internal_entry_offset(n);
  std::memmove(data_ + from + shape_.entry_bytes(), data_ + from, to - from);
  StoreKey(from, key);
  Store64(from + shape_.key_stride(), right_child.raw());
  set_count(static_cast<uint16_t>(n + 1));
  return true;
}

}  // namespace dmidx::btree
