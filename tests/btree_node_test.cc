// B+tree node images: layout, key codec, checksum against torn images, leaf
// and internal operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dmidx/keys.h"
#include "lib/common/checksum.h"
#include "btree/node.h"

namespace dmidx::btree {
namespace {

using fabric::RemoteAddress;

NodeShape Shape(uint32_t node_bytes = 1024, uint32_t key_bytes = 8) {
  auto shape = NodeShape::Make(node_bytes, key_bytes);
  EXPECT_TRUE(shape.ok()) << shape.status().ToString();
  return *shape;
}

struct Image {
  explicit Image(const NodeShape& shape) : words(shape.node_bytes() / 8), view(shape, bytes()) {}
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words.data()); }
  std::vector<uint64_t> words;
  NodeView view;
};

TEST(KeyCodecTest, ByteOrderIsNumericOrder) {
  std::mt19937_64 rng(7);
  for (size_t key_bytes : {8u, 16u, 64u}) {
    for (int i = 0; i < 2000; ++i) {
      const uint64_t a = rng() >> (rng() % 64), b = rng() >> (rng() % 64);
      const std::string ka = EncodeUint64Key(a, key_bytes), kb = EncodeUint64Key(b, key_bytes);
      ASSERT_EQ(ka.size(), key_bytes);
      EXPECT_EQ(a < b, ka < kb) << a << " " << b;
      EXPECT_EQ(DecodeUint64Key(ka), a);
      const auto sa = static_cast<int64_t>(a), sb = static_cast<int64_t>(b);
      EXPECT_EQ(sa < sb, EncodeInt64Key(sa, key_bytes) < EncodeInt64Key(sb, key_bytes));
      EXPECT_EQ(DecodeInt64Key(EncodeInt64Key(sa, key_bytes)), sa);
    }
  }
  EXPECT_LT(EncodeUint64Key(0), EncodeUint64Key(1));
  EXPECT_LT(EncodeUint64Key(UINT64_MAX - 1), EncodeUint64Key(UINT64_MAX));
  EXPECT_LT(EncodeInt64Key(INT64_MIN), EncodeInt64Key(-1));
  EXPECT_LT(EncodeInt64Key(-1), EncodeInt64Key(0));
}

TEST(NodeShapeTest, RejectsBadSizes) {
  EXPECT_TRUE(NodeShape::Make(1000, 8).status().IsInvalidArgument());    // not a multiple of 64
  EXPECT_TRUE(NodeShape::Make(128, 8).status().IsInvalidArgument());     // too small
  EXPECT_TRUE(NodeShape::Make(1024, 0).status().IsInvalidArgument());    // empty keys
  EXPECT_TRUE(NodeShape::Make(1024, 257).status().IsInvalidArgument());  // keys too long
  EXPECT_TRUE(NodeShape::Make(256, 64).status().IsInvalidArgument());    // < 4 keys fit
  EXPECT_TRUE(NodeShape::Make(1024, 64).ok());
  EXPECT_TRUE(NodeShape::Make(4096, 256).ok());
}

TEST(NodeShapeTest, LayoutOfTheDefaultTree) {
  const NodeShape shape = Shape(1024, 8);
  EXPECT_EQ(shape.key_stride(), 8u);
  EXPECT_EQ(shape.header_bytes(), 48u);
  EXPECT_EQ(shape.entry_bytes(), 16u);
  EXPECT_EQ(shape.leaf_slots(), 61u);  // (1024 - 48) / 16
  EXPECT_EQ(shape.internal_slots(), 60u);
  EXPECT_EQ(shape.leaf_entry_offset(0), 48u);
  EXPECT_EQ(shape.leaf_entry_offset(60) + shape.entry_bytes(), 1024u);
  // Every entry and every fence starts 8-byte aligned.
  const NodeShape odd = Shape(2048, 13);
  EXPECT_EQ(odd.key_stride(), 16u);
  for (uint32_t i = 0; i < odd.leaf_slots(); ++i)
    EXPECT_EQ(odd.leaf_entry_offset(i) % 8, 0u);
  EXPECT_LE(odd.leaf_entry_offset(odd.leaf_slots() - 1) + odd.entry_bytes(), 2048u);
  EXPECT_LE(odd.internal_entry_offset(odd.internal_slots() - 1) + odd.entry_bytes(), 2048u);
  // Large nodes stop at one bitmap word of leaf slots.
  EXPECT_EQ(Shape(4096, 8).leaf_slots(), kMaxLeafSlots);
}

TEST(NodeChecksumTest, NeverZeroAndSensitiveToEveryWordAndPosition) {
  const NodeShape shape = Shape();
  Image image(shape);
  image.view.InitLeaf("", "", RemoteAddress());
  image.view.Seal();
  EXPECT_TRUE(image.view.Verify());
  std::vector<uint64_t> zeros(shape.node_bytes() / 8, 0);
  EXPECT_FALSE(NodeView(shape, reinterpret_cast<uint8_t*>(zeros.data())).Verify());
  for (size_t w = 1; w < image.words.size(); ++w) {
    for (uint64_t flip : {uint64_t{1}, uint64_t{1} << 63, uint64_t{0x100}}) {
      image.words[w] ^= flip;
      EXPECT_FALSE(image.view.Verify()) << "word " << w;
      image.words[w] ^= flip;
    }
  }
  // Swapping two different words changes the checksum too.
  image.words[5] = 1;
  image.words[6] = 2;
  image.view.Seal();
  std::swap(image.words[5], image.words[6]);
  EXPECT_FALSE(image.view.Verify());
}

// A writer's seal after one entry's change (NodeView::SealFrom, resuming
// from the checkpoints its verification kept) equals a full Seal(), for
// every slot, set and cleared, in leaves of several sizes.
TEST(NodeChecksumTest, SealFromTheChangedEntryEqualsAFullSeal) {
  std::mt19937_64 rng(11);
  for (uint32_t node_bytes : {256u, 1024u, 4096u, 16384u}) {
    const NodeShape shape = Shape(node_bytes, 8);
    Image image(shape);
    image.view.InitLeaf("", "", RemoteAddress());
    for (uint32_t slot = 0; slot < shape.leaf_slots(); slot += 2)
      image.view.SetLeafEntry(slot, EncodeUint64Key(rng()), rng());
    image.view.Seal();
    for (uint32_t slot = 0; slot < shape.leaf_slots(); ++slot) {
      ChecksumCheckpoints checkpoints;
      ASSERT_TRUE(image.view.Verify(&checkpoints));
      if (slot % 3 == 2) {
        image.view.ClearLeafEntry(slot);
      } else {
        image.view.SetLeafEntry(slot, EncodeUint64Key(rng()), rng());
      }
      image.view.SealFrom(checkpoints, shape.leaf_entry_offset(slot) + shape.entry_bytes());
      const uint64_t resumed = image.words[0];
      image.view.Seal();
      ASSERT_EQ(resumed, image.words[0]) << node_bytes << "-byte node, slot " << slot;
    }
  }
}

// A READ may return any mix of the 8-byte words of two versions. Every mix
// that is neither version must fail the check.
TEST(NodeChecksumTest, RejectsTornMixesOfTwoVersions) {
  const NodeShape shape = Shape();
  std::mt19937_64 rng(11);
  Image before(shape), after(shape), torn(shape);
  before.view.InitLeaf(EncodeUint64Key(100), EncodeUint64Key(900), RemoteAddress::Pool(1, 4096));
  for (uint32_t slot = 0; slot < 30; ++slot) {
    before.view.SetLeafEntry(slot, EncodeUint64Key(100 + slot * 7), rng());
  }
  before.view.Seal();
  int mixes = 0;
  for (int round = 0; round < 2000; ++round) {
    after.words = before.words;
    // One writer step: an insert, an update or a delete (entry-level).
    const int kind = round % 3;
    if (kind == 0) {
      after.view.SetLeafEntry(after.view.FreeLeafSlot(), EncodeUint64Key(500 + round), rng());
    } else if (kind == 1) {
      after.view.SetLeafEntry(rng() % 30, EncodeUint64Key(100 + (rng() % 30) * 7), rng());
    } else {
      after.view.ClearLeafEntry(rng() % 30);
    }
    after.view.Seal();
    ASSERT_TRUE(after.view.Verify());
    for (int trial = 0; trial < 20; ++trial) {
      for (size_t w = 0; w < torn.words.size(); ++w) {
        torn.words[w] = (rng() & 1) ? after.words[w] : before.words[w];
      }
      if (torn.words == before.words || torn.words == after.words) continue;
      ++mixes;
      ASSERT_FALSE(torn.view.Verify()) << "torn mix accepted in round " << round;
    }
  }
  EXPECT_GT(mixes, 10000);
}

// What an insert, update or delete without a split changes: the checksum,
// the bitmap and the one entry. That is all the write-back has to send.
TEST(NodeLayoutTest, EntryLevelChangesTouchOnlyHeaderWordsAndTheEntry) {
  const NodeShape shape = Shape(1024, 16);
  Image before(shape), after(shape);
  before.view.InitLeaf("", "", RemoteAddress());
  before.view.SetLeafEntry(3, EncodeUint64Key(3, 16), 33);
  before.view.Seal();
  auto changed_outside = [&](uint32_t slot) {
    std::set<uint32_t> outside;
    const uint32_t entry_begin = shape.leaf_entry_offset(slot) / 8;
    const uint32_t entry_end = entry_begin + shape.entry_bytes() / 8;
    for (uint32_t w = 0; w < before.words.size(); ++w) {
      const bool allowed =
          w == kChecksumOffset / 8 || w == kBitmapOffset / 8 || (w >= entry_begin && w < entry_end);
      if (before.words[w] != after.words[w] && !allowed) outside.insert(w);
    }
    return outside;
  };
  after.words = before.words;
  after.view.SetLeafEntry(7, EncodeUint64Key(7, 16), 0);  // insert; value 0 is allowed
  after.view.Seal();
  EXPECT_TRUE(changed_outside(7).empty());
  after.words = before.words;
  after.view.SetLeafEntry(3, EncodeUint64Key(3, 16), 99);  // update
  after.view.Seal();
  EXPECT_TRUE(changed_outside(3).empty());
  after.words = before.words;
  after.view.ClearLeafEntry(3);  // delete
  after.view.Seal();
  EXPECT_TRUE(changed_outside(3).empty());
}

TEST(NodeViewTest, FencesAndCoverage) {
  const NodeShape shape = Shape();
  Image image(shape);
  image.view.InitLeaf(EncodeUint64Key(10), EncodeUint64Key(20), RemoteAddress::Pool(2, 64));
  EXPECT_TRUE(image.view.is_leaf());
  EXPECT_FALSE(image.view.low_is_min());
  EXPECT_FALSE(image.view.high_is_max());
  EXPECT_EQ(image.view.sibling(), RemoteAddress::Pool(2, 64));
  EXPECT_FALSE(image.view.Covers(EncodeUint64Key(9)));
  EXPECT_TRUE(image.view.Covers(EncodeUint64Key(10)));
  EXPECT_TRUE(image.view.Covers(EncodeUint64Key(19)));
  EXPECT_FALSE(image.view.Covers(EncodeUint64Key(20)));
  EXPECT_TRUE(image.view.BeyondHigh(EncodeUint64Key(20)));
  image.view.InitLeaf("", "", RemoteAddress());
  EXPECT_TRUE(image.view.low_is_min());
  EXPECT_TRUE(image.view.high_is_max());
  EXPECT_TRUE(image.view.Covers(EncodeUint64Key(0)));
  EXPECT_TRUE(image.view.Covers(EncodeUint64Key(UINT64_MAX)));
}

TEST(NodeViewTest, UnsortedLeafMatchesAModel) {
  const NodeShape shape = Shape(1024, 8);
  Image image(shape);
  image.view.InitLeaf("", "", RemoteAddress());
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(3);
  for (int step = 0; step < 5000; ++step) {
    const std::string key = EncodeUint64Key(rng() % 100);
    const int slot = image.view.FindLeafSlot(key);
    ASSERT_EQ(slot >= 0, model.count(key) == 1);
    if (slot >= 0 && rng() % 2 == 0) {
      image.view.ClearLeafEntry(slot);
      model.erase(key);
    } else if (slot >= 0) {
      const uint64_t value = rng();
      image.view.SetLeafEntry(slot, key, value);
      model[key] = value;
    } else if (const int free = image.view.FreeLeafSlot(); free >= 0) {
      const uint64_t value = rng();
      image.view.SetLeafEntry(free, key, value);
      model[key] = value;
    } else {
      EXPECT_EQ(model.size(), shape.leaf_slots());  // full exactly when all slots are used
    }
    ASSERT_EQ(image.view.leaf_entries(), model.size());
  }
  for (const auto& [key, value] : model) {
    const int slot = image.view.FindLeafSlot(key);
    ASSERT_GE(slot, 0);
    EXPECT_EQ(image.view.leaf_value(slot), value);
    EXPECT_EQ(image.view.leaf_key(slot), key);
  }
}

TEST(NodeViewTest, InternalNodeRoutesLikeAModel) {
  const NodeShape shape = Shape(1024, 8);
  Image image(shape);
  image.view.InitInternal(1, "", "", RemoteAddress(), RemoteAddress::Pool(0, 4096));
  std::map<uint64_t, RemoteAddress> separators;  // key -> child for keys >= key
  std::mt19937_64 rng(5);
  while (separators.size() < shape.internal_slots()) {
    const uint64_t key = rng() % 100000;
    if (separators.count(key)) continue;
    const RemoteAddress child = RemoteAddress::Pool(0, 4096 * (separators.size() + 2));
    ASSERT_TRUE(image.view.InsertSeparator(EncodeUint64Key(key), child));
    separators[key] = child;
  }
  EXPECT_FALSE(image.view.InsertSeparator(EncodeUint64Key(100001), RemoteAddress::Pool(0, 8)));
  EXPECT_EQ(image.view.count(), shape.internal_slots());
  for (uint32_t i = 1; i < image.view.count(); ++i) {
    EXPECT_LT(image.view.internal_key(i - 1), image.view.internal_key(i));
  }
  for (int probe = 0; probe < 5000; ++probe) {
    const uint64_t key = rng() % 100010;
    auto it = separators.upper_bound(key);
    const RemoteAddress expected =
        it == separators.begin() ? RemoteAddress::Pool(0, 4096) : std::prev(it)->second;
    EXPECT_EQ(image.view.FindChild(EncodeUint64Key(key)), expected) << key;
  }
}

}  // namespace
}  // namespace dmidx::btree
