// The B+tree client where the index suites (tests/index_suites.h) do not
// cover it: open/create semantics and key sizes, long keys, long scans,
// per-compute-node lock table and cache, orphaned root splits, lock
// placement, the README's example, per-context counters.
#include "dmidx/btree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "btree/btree_impl.h"
#include "btree/node.h"
#include "dmidx/keys.h"
#include "index/verified_read.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "lock/hocl.h"
#include "lock/rdwc.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"
#include "tests/btree_test_util.h"

namespace dmidx {
namespace {

using testing::Injection;
using testing::NewClient;
using testing::OpenCluster;
using testing::SmallNodes;
using testing::Watchdog;

TEST(BTreeTest, KeySizeAndReopen) {
  auto cluster = OpenCluster(false);
  auto first = NewClient(*cluster), second = NewClient(*cluster);
  std::unique_ptr<BTree> a, b, wrong;
  ASSERT_TRUE(BTree::Open(first.get(), "shared", {}, &a).ok());
  ASSERT_TRUE(BTree::Open(second.get(), "shared", {}, &b).ok());
  BTreeOptions sixteen;
  sixteen.key_bytes = 16;
  EXPECT_TRUE(BTree::Open(second.get(), "shared", sixteen, &wrong).IsInvalidArgument());
  BTreeOptions no_wait;
  no_wait.lock_timeout = std::chrono::milliseconds(0);
  EXPECT_TRUE(BTree::Open(second.get(), "shared", no_wait, &wrong).IsInvalidArgument());
  EXPECT_EQ(wrong, nullptr);
  std::unique_ptr<Context> ca, cb;
  ASSERT_TRUE(first->NewBlockingContext(&ca).ok());
  ASSERT_TRUE(second->NewBlockingContext(&cb).ok());
  ASSERT_TRUE(a->Insert(*ca, EncodeUint64Key(7), 70).ok());
  uint64_t value = 0;
  ASSERT_TRUE(b->Lookup(*cb, EncodeUint64Key(7), &value).ok());  // the other CN sees it
  EXPECT_EQ(value, 70u);
  EXPECT_TRUE(a->Insert(*ca, EncodeUint64Key(7, 16), 1).IsInvalidArgument());
  EXPECT_TRUE(a->Lookup(*ca, "short", &value).IsInvalidArgument());
  std::unique_ptr<BTree> other;
  ASSERT_TRUE(BTree::Open(first.get(), "other", {}, &other).ok());
  EXPECT_TRUE(other->Lookup(*ca, EncodeUint64Key(7), &value).IsNotFound());  // trees are separate
}

// Long keys (64 bytes, and the 256-byte maximum) with bytes beyond the
// encoded integer: every operation against a model, scans included.
// rdwc_table_entries is bounded (include/dmidx/btree.h) when read
// delegation or write combining is on: Open names the option and the
// bound; with both off the value is not used.
TEST(BTreeTest, RdwcTableEntriesAboveTheBoundAreInvalidArgument) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<BTree> tree;
  for (const bool combining : {false, true}) {
    BTreeOptions options;
    options.read_delegation = !combining;
    options.write_combining = combining;
    for (const size_t entries : {lock::Rdwc::kMaxTableEntries + 1, (size_t{1} << 63) + 1}) {
      SCOPED_TRACE(entries);
      options.rdwc_table_entries = entries;
      const Status status = BTree::Open(client.get(), "bounded", options, &tree);
      EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
      EXPECT_NE(status.message().find("BTreeOptions.rdwc_table_entries"), std::string_view::npos)
          << status.ToString();
      EXPECT_NE(status.message().find(std::to_string(lock::Rdwc::kMaxTableEntries)),
                std::string_view::npos)
          << status.ToString();
      EXPECT_EQ(tree, nullptr);
    }
  }
  BTreeOptions unused;
  unused.rdwc_table_entries = (size_t{1} << 63) + 1;
  EXPECT_TRUE(BTree::Open(client.get(), "bounded", unused, &tree).ok());
}

// CheckOptions refuses what Open would, without a cluster: the bounds of
// BTreeOptions, and nodes that hold fewer than four keys (at the default
// 1024 bytes, keys of more than 152 bytes, as btree.h says).
TEST(BTreeTest, CheckOptionsRefusesWhatOpenWouldWithoutACluster) {
  auto refused = [](const BTreeOptions& options, std::string_view why) {
    const Status status = BTree::CheckOptions(options);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_NE(status.message().find(why), std::string_view::npos) << status.ToString();
  };
  EXPECT_TRUE(BTree::CheckOptions({}).ok());
  BTreeOptions options;
  options.key_bytes = 152;
  EXPECT_TRUE(BTree::CheckOptions(options).ok());
  options.key_bytes = 153;
  refused(options, "fewer than 4 keys");
  options.node_bytes = 4096;
  options.key_bytes = BTreeOptions::kMaxKeyBytes;
  EXPECT_TRUE(BTree::CheckOptions(options).ok());
  options.key_bytes = BTreeOptions::kMaxKeyBytes + 1;
  refused(options, "key size");
  options.key_bytes = 0;
  refused(options, "key size");
  options = {};
  for (const uint32_t node_bytes :
       {BTreeOptions::kMinNodeBytes - BTreeOptions::kNodeBytesMultiple,
        BTreeOptions::kMaxNodeBytes + BTreeOptions::kNodeBytesMultiple, 1000u}) {
    options.node_bytes = node_bytes;
    refused(options, "node size");
  }
  options = {};
  options.lock_timeout = std::chrono::milliseconds(0);
  refused(options, "lock_timeout");
  options = {};
  options.write_combining = true;
  options.rdwc_table_entries = BTreeOptions::kMaxRdwcTableEntries + 1;
  refused(options, "rdwc_table_entries");

  // Open refuses the same.
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<BTree> tree;
  options = {};
  options.key_bytes = 153;
  EXPECT_TRUE(BTree::Open(client.get(), "four-keys", options, &tree).IsInvalidArgument());
  EXPECT_EQ(tree, nullptr);
}

TEST(BTreeTest, LongKeysMatchAModel) {
  for (uint32_t key_bytes : {64u, 256u}) {
    auto cluster = OpenCluster(false);
    auto client = NewClient(*cluster);
    BTreeOptions options;
    options.key_bytes = key_bytes;
    options.node_bytes = key_bytes == 64 ? 1024 : 4096;
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), "long-keys", options, &tree).ok());
    std::unique_ptr<Context> context;
    ASSERT_TRUE(client->NewBlockingContext(&context).ok());
    // Keys sort by their first 8 bytes, then by a tail byte pattern.
    auto key_of = [&](uint64_t n) {
      std::string key = EncodeUint64Key(n / 4, key_bytes);
      key[key_bytes - 1] = static_cast<char>(0x80 + n % 4);  // high bit: unsigned order
      return key;
    };
    std::map<std::string, uint64_t> model;
    std::mt19937_64 rng(key_bytes);
    for (int step = 0; step < 4000; ++step) {
      const uint64_t n = rng() % 1500;
      if (rng() % 3 != 0) {
        ASSERT_TRUE(tree->Insert(*context, key_of(n), n).ok());
        model[key_of(n)] = n;
      } else {
        ASSERT_EQ(tree->Delete(*context, key_of(n)).ok(), model.erase(key_of(n)) == 1);
      }
    }
    std::vector<KeyValue> all;
    ASSERT_TRUE(tree->Scan(*context, std::string(key_bytes, '\0'), SIZE_MAX, &all).ok());
    ASSERT_EQ(all.size(), model.size()) << key_bytes;
    auto it = model.begin();
    for (const KeyValue& row : all) {
      ASSERT_EQ(row.key, it->first);
      ASSERT_EQ(row.value, it->second);
      ++it;
    }
    uint64_t value = 0;
    EXPECT_TRUE(tree->Lookup(*context, EncodeUint64Key(1), &value).IsInvalidArgument());
  }
}

// A long scan reads a level-1 node and then all the leaves it names at once:
// about two round trips per parent, not one per leaf.
TEST(BTreeTest, LongScanReadsLeavesAParentAtATime) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "long", SmallNodes(), &tree).ok());
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  constexpr uint64_t kKeys = 20000;
  std::vector<KeyValue> rows;
  for (uint64_t key = 0; key < kKeys; ++key)
    rows.push_back({EncodeUint64Key(key), key});
  ASSERT_TRUE(tree->BulkLoad(*context, rows, 1.0).ok());
  constexpr uint64_t kLeaves = (kKeys + 12) / 13;  // 13 entries a full leaf
  uint64_t value;
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(0), &value).ok());  // warms the top
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<KeyValue> all;
    const Stats before = context->stats();
    ASSERT_TRUE(tree->Scan(*context, EncodeUint64Key(0), SIZE_MAX, &all).ok());
    const Stats used = context->stats() - before;
    ASSERT_EQ(all.size(), kKeys);
    for (uint64_t key = 0; key < kKeys; ++key)
      ASSERT_EQ(all[key].value, key);
    EXPECT_LT(used.round_trips * 5, kLeaves) << "pass " << pass << ": " << used.ToString();
  }
}

// HOCL's local lock table belongs to the compute node, not to a handle:
// contexts working through two handles of one tree queue behind each other
// locally and get the global lock handed over, never spinning on its CAS.
TEST(BTreeTest, HandlesOfOneComputeNodeShareTheLocalLockTable) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster, 1, 2);
  std::unique_ptr<BTree> handles[2];
  for (auto& handle : handles)
    ASSERT_TRUE(BTree::Open(client.get(), "one", {}, &handle).ok());
  constexpr int kUpdates = 200;
  const Status status = client->Run([&](Context& ctx) -> Status {
    BTree& tree = *handles[ctx.coroutine_index()];
    for (int i = 0; i < kUpdates; ++i) {
      DMIDX_RETURN_IF_ERROR(tree.Insert(ctx, EncodeUint64Key(7), i));
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  uint64_t handovers = 0, retries = 0;
  for (auto& handle : handles) {
    handovers += handle->stats()[IndexOp::kInsert].handovers;
    retries += handle->stats()[IndexOp::kInsert].lock_retries;
  }
  // At least every other insert (one coroutine's: the other's comes
  // straight back from its write-back to an image handed over with the
  // lock, needing no READ, and may release before the first queues again).
  EXPECT_GE(handovers, uint64_t{kUpdates});
  EXPECT_EQ(retries, 0u);
}

// The index cache belongs to the compute node too: a handle opened after
// another warmed the cache looks up in 1 round trip from its first call.
TEST(BTreeTest, HandlesOfOneComputeNodeShareTheCache) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  std::unique_ptr<BTree> first, second;
  ASSERT_TRUE(BTree::Open(client.get(), "cached", SmallNodes(), &first).ok());
  for (uint64_t key = 0; key < 3000; ++key) {
    ASSERT_TRUE(first->Insert(*context, EncodeUint64Key(key), key).ok());
  }
  uint64_t value = 0;
  ASSERT_TRUE(first->Lookup(*context, EncodeUint64Key(1234), &value).ok());
  ASSERT_TRUE(BTree::Open(client.get(), "cached", SmallNodes(), &second).ok());
  const Stats before = context->stats();
  ASSERT_TRUE(second->Lookup(*context, EncodeUint64Key(1234), &value).ok());
  EXPECT_EQ(value, 1234u);
  EXPECT_EQ((context->stats() - before).round_trips, 1u);
  EXPECT_EQ(second->stats()[IndexOp::kLookup].cache_hits, 1u);
}

// Compute nodes that died between splitting the root leaf and publishing a
// new root leave a chain of leaves under a leaf root, here longer than one
// internal node holds (13 children with 256-byte nodes). The others still
// grow the tree (the next root goes over that chain, and the splitter's own
// separator is checked for), and still reach and change every key.
TEST(BTreeTest, RootSplitsWhoseSplittersDiedStillGrow) {
  constexpr uint32_t kOrphans = 20;  // leaves in the parentless chain
  constexpr uint64_t kPerLeaf = 6;   // keys each
  constexpr uint64_t kKeys = 4000;   // keys at the end: key k is stored as k * 100
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "orphan", SmallNodes(), &tree).ok());
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  uint64_t value = 0;
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(0), &value).IsNotFound());

  // The dead splitters' work, by hand: the root leaf and kOrphans - 1
  // siblings, leaf i holding keys [i * kPerLeaf, (i + 1) * kPerLeaf); the
  // descriptor still names the root leaf.
  using fabric::Op;
  using fabric::RemoteAddress;
  auto& ctx = runtime::ContextImpl::From(*context);
  auto& impl = static_cast<runtime::ClientImpl&>(*client);
  auto slot = impl.CatalogWord("btree/orphan", false);
  ASSERT_TRUE(slot.ok());
  auto* words = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  Op read = Op::Read(*slot, &words[0], 8);
  ASSERT_TRUE(ctx.Execute(slot->node(), {&read, 1}).ok());
  read =
      Op::Read(RemoteAddress::FromRaw(words[0]) + offsetof(btree::Descriptor, root), &words[1], 8);
  ASSERT_TRUE(ctx.Execute(read.remote.node(), {&read, 1}).ok());
  std::vector<RemoteAddress> leaves = {RemoteAddress::FromRaw(words[1])};
  while (leaves.size() < kOrphans) {
    auto leaf = ctx.allocator().Allocate(testing::kSmallNodeBytes, 64);
    ASSERT_TRUE(leaf.ok());
    leaves.push_back(*leaf);
  }
  auto shape = btree::NodeShape::Make(testing::kSmallNodeBytes, 8);
  ASSERT_TRUE(shape.ok());
  uint8_t* image = ctx.scratch().data() + 1024;
  for (uint32_t i = kOrphans; i-- > 0;) {  // right to left: siblings exist first
    btree::NodeView leaf(*shape, image);
    const bool last = i + 1 == kOrphans;
    leaf.InitLeaf(i == 0 ? "" : EncodeUint64Key(i * kPerLeaf * 100),
                  last ? "" : EncodeUint64Key((i + 1) * kPerLeaf * 100),
                  last ? RemoteAddress() : leaves[i + 1]);
    for (uint64_t k = 0; k < kPerLeaf; ++k) {
      const uint64_t key = i * kPerLeaf + k;
      leaf.SetLeafEntry(static_cast<uint32_t>(k), EncodeUint64Key(key * 100), key);
    }
    leaf.Seal();
    const Op write = Op::Write(leaves[i], image, testing::kSmallNodeBytes);
    ASSERT_TRUE(ctx.Execute(leaves[i].node(), {&write, 1}).ok());
  }

  // Changes in every orphan, then inserts that split them and grow the tree.
  for (uint64_t key = 0; key < kOrphans * kPerLeaf; key += 5) {
    ASSERT_TRUE(tree->Update(*context, EncodeUint64Key(key * 100), key).ok()) << key;
  }
  for (uint64_t key = kOrphans * kPerLeaf; key < kKeys; ++key) {
    const Status status = tree->Insert(*context, EncodeUint64Key(key * 100), key);
    ASSERT_TRUE(status.ok()) << key << ": " << status.ToString();
  }
  for (uint64_t key = 0; key < kOrphans * kPerLeaf; ++key) {  // between the old keys
    ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(key * 100 + 50), key).ok()) << key;
    ASSERT_TRUE(tree->Delete(*context, EncodeUint64Key(key * 100 + 50)).ok()) << key;
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(tree->Scan(*context, EncodeUint64Key(0), SIZE_MAX, &all).ok());
  ASSERT_EQ(all.size(), kKeys);
  for (uint64_t key = 0; key < kKeys; ++key) {
    ASSERT_EQ(all[key].key, EncodeUint64Key(key * 100));
    ASSERT_EQ(all[key].value, key);
    ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(key * 100), &value).ok()) << key;
    ASSERT_EQ(value, key);
  }
}

// on_chip_locks = false: the tree's lock words are a table in pool memory
// on every memory node, named by the descriptor; on: the lock region.
TEST(BTreeTest, LockPlacementFollowsTheSwitch) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> context;
  ASSERT_TRUE(client->NewBlockingContext(&context).ok());
  auto& ctx = runtime::ContextImpl::From(*context);
  auto& impl = static_cast<runtime::ClientImpl&>(*client);
  auto* words = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  for (const bool on_chip : {true, false}) {
    const std::string name = on_chip ? "chip" : "pool";
    BTreeOptions options;
    options.on_chip_locks = on_chip;
    std::unique_ptr<BTree> tree;
    ASSERT_TRUE(BTree::Open(client.get(), name, options, &tree).ok());
    ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(1), 1).ok());
    auto slot = impl.CatalogWord("btree/" + name, false);
    ASSERT_TRUE(slot.ok());
    fabric::Op read = fabric::Op::Read(*slot, &words[0], 8);
    ASSERT_TRUE(ctx.Execute(slot->node(), {&read, 1}).ok());
    btree::Descriptor desc;
    read = fabric::Op::Read(fabric::RemoteAddress::FromRaw(words[0]), &words[8], sizeof(desc));
    ASSERT_TRUE(ctx.Execute(read.remote.node(), {&read, 1}).ok());
    std::memcpy(&desc, &words[8], sizeof(desc));
    EXPECT_EQ((desc.head.flags & btree::kPoolLocks) != 0, !on_chip) << name;
    if (on_chip) continue;
    EXPECT_GT(desc.lock_words, 0u);
    const auto directory = fabric::RemoteAddress::FromRaw(desc.lock_directory);
    read = fabric::Op::Read(directory, &words[0], 8 * cluster->memory_node_count());
    ASSERT_TRUE(ctx.Execute(directory.node(), {&read, 1}).ok());
    for (uint16_t node = 0; node < cluster->memory_node_count(); ++node) {
      const auto base = fabric::RemoteAddress::FromRaw(words[node]);
      EXPECT_EQ(base.node(), node);
      EXPECT_EQ(base.region(), fabric::Region::kPool);
    }
  }
}

// The README's example: an engine opens a tree, loads it, and runs Insert,
// Lookup and Scan from coroutines.
TEST(BTreeTest, ReadmeExample) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster, 2, 4);
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "orders", {}, &tree).ok());  // 8-byte keys, 1 KiB nodes
  std::vector<KeyValue> rows;
  for (uint64_t id = 0; id < 3000; ++id)
    rows.push_back({EncodeUint64Key(id * 2), id});
  std::unique_ptr<Context> blocking;
  ASSERT_TRUE(client->NewBlockingContext(&blocking).ok());
  ASSERT_TRUE(tree->BulkLoad(*blocking, rows, 0.8).ok());
  // The README's coroutine body, with its results checked.
  auto body = [&](Context& ctx) -> Status {
    const std::string key = EncodeUint64Key(42);
    DMIDX_RETURN_IF_ERROR(tree->Insert(ctx, key, 7));
    uint64_t value;
    DMIDX_RETURN_IF_ERROR(tree->Lookup(ctx, key, &value));
    if (value != 7) return Status::Internal("lookup of 42 gave " + std::to_string(value));
    std::vector<KeyValue> page;
    DMIDX_RETURN_IF_ERROR(tree->Scan(ctx, key, 10, &page));
    if (page.size() != 10 || page[0].key != key || page[9].key != EncodeUint64Key(60)) {
      return Status::Internal("Scan(42, 10) gave " + std::to_string(page.size()) + " pairs");
    }
    DMIDX_RETURN_IF_ERROR(tree->Scan(ctx, EncodeUint64Key(100), EncodeUint64Key(199), &page));
    if (page.size() != 50 || page[0].key != EncodeUint64Key(100) || page[0].value != 50) {
      return Status::Internal("Scan(100, 199) gave " + std::to_string(page.size()) + " pairs");
    }
    return Status::Ok();
  };
  const Status status = client->Run(body);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::printf("%s", tree->stats().ToString().c_str());
  // The comments' round trips, on one uncontended context with a warm cache.
  const IndexStats before = tree->stats();
  ASSERT_TRUE(body(*blocking).ok());
  const IndexStats used = tree->stats() - before;
  EXPECT_EQ(used[IndexOp::kInsert].round_trips, 2u);  // no split
  EXPECT_EQ(used[IndexOp::kLookup].round_trips, 1u);
  EXPECT_EQ(tree->stats()[IndexOp::kInsert].operations, 9u);
  EXPECT_EQ(tree->stats()[IndexOp::kScan].operations, 18u);
  tree->Close();
  uint64_t value;
  EXPECT_TRUE(tree->Lookup(*blocking, EncodeUint64Key(2), &value).IsInvalidArgument());
}

// Per-operation counters are charged to the context that ran the operation:
// coroutines sharing one thread (and its connections) each pay only their
// own round trips and bytes.
TEST(BTreeTest, CountersAreChargedPerContext) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster, 1, 8);
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client.get(), "charged", {}, &tree).ok());
  std::vector<KeyValue> rows;
  for (uint64_t key = 0; key < 5000; ++key)
    rows.push_back({EncodeUint64Key(key), key});
  std::unique_ptr<Context> blocking;
  ASSERT_TRUE(client->NewBlockingContext(&blocking).ok());
  ASSERT_TRUE(tree->BulkLoad(*blocking, rows, 0.7).ok());
  uint64_t value;
  for (uint64_t key = 0; key < 5000; key += 10) {  // every level-1 node cached
    ASSERT_TRUE(tree->Lookup(*blocking, EncodeUint64Key(key), &value).ok());
  }
  constexpr uint64_t kLookups = 50;
  const IndexStats before = tree->stats();
  const Status status = client->Run([&](Context& ctx) -> Status {
    for (uint64_t i = 0; i < kLookups; ++i) {
      const uint64_t key = (ctx.coroutine_index() * kLookups + i) * 11 % 5000;
      uint64_t found = 0;
      DMIDX_RETURN_IF_ERROR(tree->Lookup(ctx, EncodeUint64Key(key), &found));
      if (found != key) return Status::Internal("wrong value");
    }
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  const OpCounters used = (tree->stats() - before)[IndexOp::kLookup];
  EXPECT_EQ(used.operations, 8 * kLookups);
  EXPECT_EQ(used.round_trips, 8 * kLookups);  // 1 each, though 8 interleave on a thread
  EXPECT_EQ(used.bytes_read, 8 * kLookups * 1024);
}

// The root node of tree `name`, read from its descriptor.
fabric::RemoteAddress RootOf(Client& client, runtime::ContextImpl& ctx, const std::string& name) {
  auto& impl = static_cast<runtime::ClientImpl&>(client);
  auto slot = impl.CatalogWord("btree/" + name, false);
  EXPECT_TRUE(slot.ok());
  if (!slot.ok()) return {};
  auto* words = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  fabric::Op read = fabric::Op::Read(*slot, &words[0], 8);
  EXPECT_TRUE(ctx.Execute(slot->node(), {&read, 1}).ok());
  read = fabric::Op::Read(
      fabric::RemoteAddress::FromRaw(words[0]) + offsetof(btree::Descriptor, root), &words[1], 8);
  EXPECT_TRUE(ctx.Execute(read.remote.node(), {&read, 1}).ok());
  return fabric::RemoteAddress::FromRaw(words[1]);
}

// The global lock words of a tree with on_chip_locks (the default): the
// lock region of every memory node, as btree/btree_open.cc lays them out.
lock::GlobalLockTable OnChipLockTable(Client& client) {
  const auto& cluster = static_cast<runtime::ClientImpl&>(client).cluster();
  lock::GlobalLockTable table;
  table.words_per_node = UINT64_MAX;
  for (uint16_t node = 0; node < cluster.memory_node_count(); ++node) {
    table.bases.push_back(fabric::RemoteAddress::Lock(node, 0));
    table.words_per_node =
        std::min(table.words_per_node, cluster.fabric().layout(node).lock_region_bytes / 8);
  }
  return table;
}

// One compute node with a blocking context, for tests that reach the
// tree's remote memory directly.
class BTreeFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = OpenCluster(false);
    ASSERT_NE(cluster_, nullptr);
    client_ = NewClient(*cluster_);
    ASSERT_TRUE(client_->NewBlockingContext(&context_).ok());
  }
  runtime::ContextImpl& ctx() { return runtime::ContextImpl::From(*context_); }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Context> context_;
};

// Regression: a write-back that landed only in part (its writer's
// connection failed midway) leaves a node that fails its checksum for good,
// with its lock word free. Readers used to take it for a torn READ and retry
// 10,000 times (yielding the thread each time) before giving up with
// Aborted; writers did the same under the node's lock. Both now tell it
// from a torn READ within a few round trips and return DataLoss naming the
// node, and a writer lets the lock go.
TEST_F(BTreeFaultTest, PartlyWrittenNodeIsDataLossNotEndlessRetries) {
  Watchdog watchdog;
  Client* client = client_.get();
  Context* context = context_.get();
  std::unique_ptr<BTree> tree;
  ASSERT_TRUE(BTree::Open(client, "damaged", SmallNodes(), &tree).ok());
  for (uint64_t key = 1; key <= 5; ++key) {
    ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(key), key).ok());
  }
  // Warm costs first (the descriptor's root is known by then).
  uint64_t value = 0;
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(3), &value).ok());
  IndexStats before = tree->stats();
  ASSERT_TRUE(tree->Lookup(*context, EncodeUint64Key(3), &value).ok());
  const uint64_t lookup = (tree->stats() - before)[IndexOp::kLookup].round_trips;
  // The root is the only leaf. Damage one word of it in place, as a
  // write-back whose checksum landed but whose entry did not would.
  const fabric::RemoteAddress leaf = RootOf(*client, ctx(), "damaged");
  auto shape = btree::NodeShape::Make(testing::kSmallNodeBytes, 8);
  ASSERT_TRUE(shape.ok());
  auto* word = reinterpret_cast<uint64_t*>(ctx().scratch().data() + 512);
  const uint32_t value_offset = shape->leaf_entry_offset(0) + shape->key_stride();
  fabric::Op op = fabric::Op::Read(leaf + value_offset, word, 8);
  ASSERT_TRUE(ctx().Execute(leaf.node(), {&op, 1}).ok());
  *word ^= 0x5a5a;
  op = fabric::Op::Write(leaf + value_offset, word, 8);
  ASSERT_TRUE(ctx().Execute(leaf.node(), {&op, 1}).ok());

  // Far fewer round trips than kMaxTornReads: a few retries, then the
  // check of the lock word and re-reads that tell damage from a torn READ
  // (index/verified_read.h), and the READ under the node's lock that
  // proves it (2: the lock's CAS with the READ, and the release), where
  // one READ was.
  const uint64_t extra = index::kDamageRoundTrips - 1 + 2;
  before = tree->stats();
  Status status = tree->Lookup(*context, EncodeUint64Key(3), &value);
  EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
  EXPECT_NE(status.message().find(leaf.ToString()), std::string_view::npos) << status.ToString();
  EXPECT_EQ((tree->stats() - before)[IndexOp::kLookup].round_trips, lookup + extra);

  std::vector<KeyValue> out = {{EncodeUint64Key(9), 9}};
  before = tree->stats();
  status = tree->Scan(*context, EncodeUint64Key(0), 10, &out);
  EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ((tree->stats() - before)[IndexOp::kScan].round_trips, lookup + extra);

  // A writer reads the node under its lock: the same verdict, and the lock
  // is let go (the next writer is not stuck behind it).
  for (int i = 0; i < 2; ++i) {
    before = tree->stats();
    status = tree->Insert(*context, EncodeUint64Key(4), 40);
    EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
    // Its descent reads the leaf (the root) first, without the lock, and
    // stops there.
    EXPECT_EQ((tree->stats() - before)[IndexOp::kInsert].round_trips,
              uint64_t{index::kDamageRoundTrips} + 2);
  }
  op = fabric::Op::Read(OnChipLockTable(*client).WordFor(leaf), word, 8);
  ASSERT_TRUE(ctx().Execute(leaf.node(), {&op, 1}).ok());
  EXPECT_EQ(*word, 0u) << "the leaf's lock word was left held";
}

// Regression (review of issue 25, finding 3): a reader saw the same failing
// image twice with the node's lock word free before and after each READ,
// and called the node damaged; but a whole lock cycle fits between two
// READs of the word. Here an Insert's entry-level write-back is caught
// between its two WRITEs (checksum and bitmap landed, the entry not: the
// image a reader of another compute node sees mid-batch, every time an
// Insert/Delete loop repeats it) while the reader's checks find the word
// free, and the entry lands only after its last check. The reader now
// reads the leaf under its lock before it says DataLoss, finds it whole,
// and returns the value (it returned DataLoss before).
TEST_F(BTreeFaultTest, HalfWrittenBatchSeenTwiceWithItsLockFreeIsNotDataLoss) {
  Watchdog watchdog;
  auto reader = testing::TwoCoroutineClient(*cluster_);
  ASSERT_NE(reader, nullptr);
  std::unique_ptr<BTree> writer_tree, reader_tree;
  ASSERT_TRUE(BTree::Open(client_.get(), "half", SmallNodes(), &writer_tree).ok());
  ASSERT_TRUE(BTree::Open(reader.get(), "half", SmallNodes(), &reader_tree).ok());
  for (const uint64_t key : {1, 2, 3, 4, 5})
    ASSERT_TRUE(writer_tree->Insert(*context_, EncodeUint64Key(key), key).ok());
  uint64_t value = 0;
  auto lookup = [&](runtime::ContextImpl& context) {
    return reader_tree->Lookup(context, EncodeUint64Key(3), &value);
  };
  const uint64_t warm_round_trips = testing::WarmRoundTrips(*reader, lookup);
  Stats used;

  // The root is the only leaf. Its image after Delete(4), and after
  // Insert(4) again (into the slot the Delete cleared).
  const fabric::RemoteAddress leaf = RootOf(*client_, ctx(), "half");
  auto shape = btree::NodeShape::Make(testing::kSmallNodeBytes, 8);
  ASSERT_TRUE(shape.ok());
  const uint32_t bytes = shape->node_bytes();
  // Scratch is the context's arena too: each image is copied out at once.
  uint8_t* buffer = ctx().scratch().data();
  auto read_leaf = [&] {
    const fabric::Op read = fabric::Op::Read(leaf, buffer, bytes);
    EXPECT_TRUE(ctx().Execute(leaf.node(), {&read, 1}).ok());
    return std::vector<uint8_t>(buffer, buffer + bytes);
  };
  ASSERT_TRUE(writer_tree->Delete(*context_, EncodeUint64Key(4)).ok());
  const std::vector<uint8_t> deleted = read_leaf();
  ASSERT_TRUE(writer_tree->Insert(*context_, EncodeUint64Key(4), 44).ok());
  std::vector<uint8_t> inserted = read_leaf();
  const int slot = btree::NodeView(*shape, inserted.data()).FindLeafSlot(EncodeUint64Key(4));
  ASSERT_GE(slot, 0);
  // The Insert's batch halfway: its first WRITE (checksum, bitmap) landed,
  // the entry (its second) not yet.
  const uint32_t entry = shape->leaf_entry_offset(static_cast<uint32_t>(slot));
  std::vector<uint8_t> half = inserted;
  std::memcpy(half.data() + entry, deleted.data() + entry, shape->entry_bytes());
  ASSERT_FALSE(btree::NodeView(*shape, half.data()).Verify());
  std::memcpy(buffer, half.data(), bytes);
  fabric::Op op = fabric::Op::Write(leaf, buffer, bytes);
  ASSERT_TRUE(ctx().Execute(leaf.node(), {&op, 1}).ok());

  // The entry lands once the reader has posted its last check of the word
  // (the second same failing image, the word free around both READs).
  const uint64_t checked = warm_round_trips + index::kDamageRoundTrips - 1;
  Injection landed;
  const Status status = testing::RunWithInjection(
      *reader, lookup, [&](const Stats& so_far) { return so_far.round_trips >= checked; },
      [&] {
        std::memcpy(buffer, inserted.data(), bytes);
        const fabric::Op rest =
            fabric::Op::Write(leaf + entry, buffer + entry, shape->entry_bytes());
        ASSERT_TRUE(ctx().Execute(leaf.node(), {&rest, 1}).ok());
      },
      &landed, &used);
  ASSERT_TRUE(landed.fired);
  EXPECT_EQ(landed.at.round_trips, checked);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(value, 3u);
  // Then the leaf under its lock: the CAS with the READ, and the release.
  EXPECT_EQ(used.round_trips, checked + 2);
  op = fabric::Op::Read(OnChipLockTable(*client_).WordFor(leaf), buffer, 8);
  ASSERT_TRUE(ctx().Execute(leaf.node(), {&op, 1}).ok());
  uint64_t word;
  std::memcpy(&word, buffer, 8);
  EXPECT_EQ(word, 0u) << "the reader left the leaf's lock held";
}

// Regression: an Insert whose leaf split landed but whose separator could
// not be added to the parent (here: the parent's lock word held by a dead
// compute node, so the lock times out) returned DeadlineExceeded although
// the key was in the tree. The key is durable in its leaf and reachable by
// the B-link sibling chain, so the Insert now returns OK and the separator
// is left for later.
TEST_F(BTreeFaultTest, SplitWhoseSeparatorInsertFailsStillReturnsOk) {
  Watchdog watchdog;
  Client* client = client_.get();
  Context* context = context_.get();
  std::unique_ptr<BTree> tree;
  BTreeOptions options = SmallNodes();
  options.lock_timeout = std::chrono::milliseconds(200);
  ASSERT_TRUE(BTree::Open(client, "orphaned-split", options, &tree).ok());
  std::map<std::string, uint64_t> model;
  uint64_t next = 0;
  for (; next < 40; ++next) {
    ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(next * 10), next).ok());
    model[EncodeUint64Key(next * 10)] = next;
  }
  // A two-level tree: the root is the parent of every leaf.
  const fabric::RemoteAddress root = RootOf(*client, ctx(), "orphaned-split");
  auto shape = btree::NodeShape::Make(testing::kSmallNodeBytes, 8);
  ASSERT_TRUE(shape.ok());
  uint8_t* image = ctx().scratch().data() + 1024;
  fabric::Op op = fabric::Op::Read(root, image, testing::kSmallNodeBytes);
  ASSERT_TRUE(ctx().Execute(root.node(), {&op, 1}).ok());
  const btree::NodeView root_node(*shape, image);
  ASSERT_EQ(root_node.level(), 1);
  const fabric::RemoteAddress rightmost = root_node.child(root_node.count());
  const lock::GlobalLockTable locks = OnChipLockTable(*client);
  ASSERT_NE(locks.WordFor(rightmost), locks.WordFor(root)) << "pick another tree name";

  // A context of compute node tag 9 died holding the root's lock word.
  auto* word = reinterpret_cast<uint64_t*>(ctx().scratch().data() + 512);
  *word = (uint64_t{9} << 48) | 0x77;
  op = fabric::Op::Write(locks.WordFor(root), word, 8);
  ASSERT_TRUE(ctx().Execute(root.node(), {&op, 1}).ok());

  // Fill the rightmost leaf until one insert splits it (its separator
  // insert is the one that waits for the dead holder, lock_timeout).
  bool split = false;
  for (int i = 0; i < 16 && !split; ++i, ++next) {
    const IndexStats before = tree->stats();
    const Status status = tree->Insert(*context, EncodeUint64Key(next * 10), next);
    split = (tree->stats() - before)[IndexOp::kInsert].lock_retries > 0;
    ASSERT_TRUE(status.ok()) << "insert " << next << (split ? " (split)" : "") << ": "
                             << status.ToString();
    model[EncodeUint64Key(next * 10)] = next;
  }
  ASSERT_TRUE(split) << "no insert reached the parent";
  // Every key is reachable, the new ones through the sibling chain (the
  // parent is still held, so it has no separator for them).
  uint64_t value = 0;
  for (const auto& [key, expected] : model) {
    ASSERT_TRUE(tree->Lookup(*context, key, &value).ok()) << DecodeUint64Key(key);
    EXPECT_EQ(value, expected);
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(tree->Scan(*context, EncodeUint64Key(0), SIZE_MAX, &all).ok());
  ASSERT_EQ(all.size(), model.size());
  // The dead holder's word is cleared (by an operator, say): the tree goes
  // on growing, splits of the leaves without a separator included.
  *word = 0;
  op = fabric::Op::Write(locks.WordFor(root), word, 8);
  ASSERT_TRUE(ctx().Execute(root.node(), {&op, 1}).ok());
  for (; next < 400; ++next) {
    ASSERT_TRUE(tree->Insert(*context, EncodeUint64Key(next * 10), next).ok()) << next;
    model[EncodeUint64Key(next * 10)] = next;
  }
  ASSERT_TRUE(tree->Scan(*context, EncodeUint64Key(0), SIZE_MAX, &all).ok());
  ASSERT_EQ(all.size(), model.size());
  auto it = model.begin();
  for (const KeyValue& pair : all) {
    ASSERT_EQ(pair.key, it->first);
    ASSERT_EQ(pair.value, it->second);
    ++it;
  }
  for (const auto& [key, expected] : model) {
    ASSERT_TRUE(tree->Lookup(*context, key, &value).ok()) << DecodeUint64Key(key);
    EXPECT_EQ(value, expected);
  }
}

}  // namespace
}  // namespace dmidx
