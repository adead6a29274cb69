// The radix tree beyond the index suites: its layouts, the exact round
// trips and bytes of warm operations (SMART Table 2's amplification in our
// layout), string keys with long shared prefixes against a model (header
// splits, leaf splits, every node type, merges), path merges, the ART
// cache's reverse checks across compute nodes, and every switch.
#include "dmidx/radix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dmidx/keys.h"
#include "index/verified_read.h"
#include "lib/fabric/fault_injector.h"
#include "lib/runtime/compute_node.h"
#include "radix/layout.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/sanitizers.h"
#include "tests/radix_test_util.h"

namespace dmidx {
namespace {

using radix::Padded;
using radix::RadixTestPeer;
using radix::TreeShape;
using testing::NewClient;
using testing::OpenCluster;
using testing::PrepareRedoSlots;

std::unique_ptr<Radix> OpenTree(Client* client, const std::string& name,
                                RadixOptions options = {}) {
  std::unique_ptr<Radix> tree;
  const Status status = Radix::Open(client, name, options, &tree);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return tree;
}

// One tree opened on two compute nodes of one cluster, a blocking context
// on each.
struct TwoComputeNodes {
  TwoComputeNodes(const std::string& name, RadixOptions options)
      : cluster(OpenCluster(false)),
        client_a(NewClient(*cluster)),
        client_b(NewClient(*cluster)),
        tree_a(OpenTree(client_a.get(), name, options)),
        tree_b(OpenTree(client_b.get(), name, options)) {
    EXPECT_TRUE(client_a->NewBlockingContext(&ctx_a).ok());
    EXPECT_TRUE(client_b->NewBlockingContext(&ctx_b).ok());
  }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client_a;
  std::unique_ptr<Client> client_b;
  std::unique_ptr<Radix> tree_a;
  std::unique_ptr<Radix> tree_b;
  std::unique_ptr<Context> ctx_a;
  std::unique_ptr<Context> ctx_b;
};

void ExpectSound(RangeIndex& tree, Context& ctx, const std::map<std::string, uint64_t>& model) {
  const TreeShape shape = RadixTestPeer::Walk(tree, ctx);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  std::vector<std::string> keys;
  for (const auto& [key, value] : model)
    keys.push_back(key);
  EXPECT_EQ(shape.keys, keys);
}

TEST(RadixLayoutTest, WordsRoundTrip) {
  radix::Header header;
  header.depth = 17;
  header.type = 5;
  header.count = 6;
  header.partial = {1, 2, 3, 0xfe, 0xff, 0};
  EXPECT_EQ(radix::Header::Unpack(header.Pack()), header);
  EXPECT_EQ(header.branch(), 23u);
  EXPECT_EQ(radix::Header::Unpack(0).type, radix::kDeletedType);
  const auto node = fabric::RemoteAddress::Pool(65535, (uint64_t{1} << 38) - 64);
  const radix::Slot slot = radix::Slot::ToNode(0xab, 7, node);
  EXPECT_EQ(slot.child(), node);
  EXPECT_EQ(slot.partial(), 0xab);
  EXPECT_EQ(slot.type(), 7);
  EXPECT_FALSE(slot.leaf());
  EXPECT_TRUE(slot.live());
  EXPECT_EQ(slot.WithType(3).type(), 3);
  EXPECT_EQ(slot.WithType(3).child(), node);
  const radix::Slot leaf = radix::Slot::ToLeaf(0, fabric::RemoteAddress::Pool(0, 64));
  EXPECT_TRUE(leaf.leaf() && leaf.live());
  EXPECT_TRUE(radix::Slot::Tombstone(0).tombstone());
  EXPECT_FALSE(radix::Slot().used());
  for (uint8_t type = 1; type <= radix::kMaxType; ++type) {
    EXPECT_EQ(radix::TypeHolding(radix::Capacity(type) - 1), type);
  }
  EXPECT_EQ(radix::LeafShape(8).bytes(), 40u);
  EXPECT_EQ(radix::LeafShape(32).bytes(), 64u);
  EXPECT_EQ(radix::LeafShape(1).bytes(), 40u);
}

// The README's radix example, as written there.
TEST(RadixTest, ReadmeExample) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> blocking;
  ASSERT_TRUE(client->NewBlockingContext(&blocking).ok());
  std::unique_ptr<dmidx::Radix> radix;
  Status s = dmidx::Radix::Open(client.get(), "orders", {.key_bytes = 32}, &radix);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<dmidx::RangeIndex> index = std::move(radix);
  std::string email = "com.example@alice";
  email.resize(32, '\0');
  ASSERT_TRUE(index->Insert(*blocking, email, 7).ok());
  std::string other = "com.example@bob";
  other.resize(32, '\0');
  ASSERT_TRUE(index->Insert(*blocking, other, 9).ok());
  uint64_t value = 0;
  ASSERT_TRUE(index->Lookup(*blocking, email, &value).ok());
  EXPECT_EQ(value, 7u);
  Stats before = blocking->stats();
  ASSERT_TRUE(index->Lookup(*blocking, email, &value).ok());
  EXPECT_EQ((blocking->stats() - before).round_trips, 1u);
  // A context's first change on a memory node makes its redo-record slot
  // there first (lock/redo_log.h): round trips of its own, once.
  ASSERT_TRUE(index->Update(*blocking, email, 7).ok());
  before = blocking->stats();
  ASSERT_TRUE(index->Update(*blocking, email, 8).ok());
  EXPECT_EQ((blocking->stats() - before).round_trips, 2u);
  ASSERT_TRUE(index->Lookup(*blocking, email, &value).ok());
  EXPECT_EQ(value, 8u);
  ASSERT_TRUE(index->Delete(*blocking, email).ok());
  EXPECT_TRUE(index->Lookup(*blocking, email, &value).IsNotFound());
}

// A bulk load puts each node on the memory node with the fewest leaves so
// far, and its leaves beside it: leaves spread evenly however unevenly the
// keys fill the nodes. Here sixteen nodes of 100 leaves, each followed in
// key order by a node of two leaves: nodes placed round robin put every
// big one on one memory node (1,600 leaves against 32).
TEST(RadixTest, BulkLoadSpreadsLeavesEvenlyOverMemoryNodes) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::unique_ptr<Radix> tree = OpenTree(client.get(), "spread");
  ASSERT_NE(tree, nullptr);
  std::vector<KeyValue> rows;
  auto key = [](int group, int byte, int last) {
    return std::string{
        static_cast<char>(group), static_cast<char>(byte), static_cast<char>(last), 0, 0, 0, 0, 0};
  };
  for (int group = 1; group <= 16; ++group) {
    for (int byte = 1; byte <= 100; ++byte)
      rows.push_back({key(group, byte, 0), 1});
    for (int last = 1; last <= 2; ++last)
      rows.push_back({key(group, 200, last), 2});
  }
  ASSERT_TRUE(tree->BulkLoad(*ctx, rows, 1.0).ok());
  const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_TRUE(shape.errors.empty());
  ASSERT_EQ(shape.leaves, rows.size());
  ASSERT_EQ(shape.leaves_on.size(), 2u);
  // At most one node's leaves apart.
  const uint64_t apart = std::max(shape.leaves_on[0], shape.leaves_on[1]) -
                         std::min(shape.leaves_on[0], shape.leaves_on[1]);
  EXPECT_LE(apart, 100u) << shape.leaves_on[0] << " and " << shape.leaves_on[1] << " leaves";
}

// Contexts of one compute node updating one key queue for its leaf's lock
// locally (FIFO), so none of them retries the rear word's CAS remotely; the
// wait shows as local queueing, and a holder leaving with others queued
// hands the lock and the leaf over, at most RadixOptions::max_handovers
// times in a row (at 0, never: every update CASes and READs). Write
// combining is off, or it would merge the updates before they reach the
// lock.
TEST(RadixTest, ContextsOfOneComputeNodeQueueForALeafLockLocally) {
  for (const uint32_t max_handovers : {4u, 1u, 0u}) {
    SCOPED_TRACE(max_handovers);
    auto cluster = OpenCluster(false);
    auto client = NewClient(*cluster, 2, 2);  // queues across threads and coroutines
    std::unique_ptr<Context> blocking;
    ASSERT_TRUE(client->NewBlockingContext(&blocking).ok());
    std::unique_ptr<dmidx::Radix> radix;
    ASSERT_TRUE(dmidx::Radix::Open(
                    client.get(), "queued",
                    {.key_bytes = 8, .write_combining = false, .max_handovers = max_handovers},
                    &radix)
                    .ok());
    PrepareRedoSlots(*client, blocking.get());
    const std::string key = EncodeUint64Key(42);
    ASSERT_TRUE(radix->Insert(*blocking, key, 0).ok());
    // An update alone: the descent, CAS + READ, write-back + release.
    const uint64_t alone = radix->stats()[IndexOp::kUpdate].round_trips;
    ASSERT_TRUE(radix->Update(*blocking, key, 0).ok());
    const uint64_t update_round_trips = radix->stats()[IndexOp::kUpdate].round_trips - alone;
    const OpCounters before = radix->stats()[IndexOp::kUpdate];
    constexpr int kUpdates = 50;
    const Status status = client->Run([&](Context& ctx) -> Status {
      for (int i = 0; i < kUpdates; ++i)
        DMIDX_RETURN_IF_ERROR(radix->Update(ctx, key, i));
      return Status::Ok();
    });
    ASSERT_TRUE(status.ok()) << status.ToString();
    const OpCounters updates = radix->stats()[IndexOp::kUpdate] - before;
    EXPECT_EQ(updates.operations, 4u * kUpdates);
    EXPECT_EQ(updates.lock_retries, 0u);
    EXPECT_GT(updates.local_lock_wait_ns, 0u);
    // One taken over from a local holder, with its image, saves the CAS +
    // READ round trip; at most max_handovers follow one CAS.
    const uint64_t taken = updates.operations - updates.handovers;
    EXPECT_LE(updates.handovers, max_handovers * taken);
    EXPECT_EQ(updates.handovers > 0, max_handovers > 0);
    EXPECT_EQ(updates.round_trips, update_round_trips * updates.operations - updates.handovers);
    EXPECT_GE(updates.lock_wait_ns, updates.local_lock_wait_ns);
    uint64_t value = 0;
    ASSERT_TRUE(radix->Lookup(*blocking, key, &value).ok());
    EXPECT_EQ(value, uint64_t{kUpdates - 1});
  }
}

TEST(RadixTest, OpenChecksItsOptions) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  std::unique_ptr<Radix> tree;
  EXPECT_TRUE(Radix::Open(client.get(), "t", {.key_bytes = 0}, &tree).IsInvalidArgument());
  EXPECT_TRUE(Radix::Open(client.get(), "t", {.key_bytes = 129}, &tree).IsInvalidArgument());
  RadixOptions no_table;
  no_table.rdwc_table_entries = 0;
  EXPECT_TRUE(Radix::Open(client.get(), "t", no_table, &tree).IsInvalidArgument());
  // leaf_queue_buckets: 1 to kMaxLeafQueueBuckets, named with its bound.
  for (const size_t buckets : {size_t{0}, RadixOptions::kMaxLeafQueueBuckets + 1}) {
    SCOPED_TRACE(buckets);
    RadixOptions queues;
    queues.leaf_queue_buckets = buckets;
    const Status status = Radix::Open(client.get(), "t", queues, &tree);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_NE(status.message().find("RadixOptions.leaf_queue_buckets is " +
                                    std::to_string(buckets) + "; it must be 1 to 65536"),
              std::string_view::npos)
        << status.ToString();
  }
  ASSERT_TRUE(Radix::Open(client.get(), "t", {}, &tree).ok());
  // Reopening with another key size or node kind is refused.
  EXPECT_TRUE(Radix::Open(client.get(), "t", {.key_bytes = 16}, &tree).IsInvalidArgument());
  RadixOptions fixed;
  fixed.homogeneous_nodes = false;
  EXPECT_TRUE(Radix::Open(client.get(), "t", fixed, &tree).IsInvalidArgument());
  // A B+tree of the same name is another tree.
  ASSERT_TRUE(Radix::Open(client.get(), "t", {}, &tree).ok());
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  EXPECT_TRUE(tree->Insert(*ctx, "short", 1).IsInvalidArgument());
  uint64_t value = 0;
  EXPECT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(1), &value).IsNotFound());
  tree->Close();
  EXPECT_TRUE(tree->Insert(*ctx, EncodeUint64Key(1), 1).IsInvalidArgument());
}

// Exact costs of warm, uncontended operations. With 8-byte keys a leaf is
// 40 bytes (reverse pointer, checksum, value, key, rear word) for 16 bytes
// of key and value: a lookup reads 40 (read amplification 2.5; SMART
// Table 2's (M1 + E) / E with M1 = 24); an update writes checksum and value
// (16) and the release (8) besides its CAS (8): (16 + 8 + 8) / 16 = 2,
// and its redo record (lock/redo_log.h: a 32-byte header, the WRITE's
// address and length, its 16 bytes) besides, which the release ends (no
// clear): (16 + 8 + 8 + 64) / 16 = 6. With 32-byte keys: 64 bytes read for 40
// (1.6).
TEST(RadixTest, WarmOperationsCostTheirFloorExactly) {
  for (const uint32_t key_bytes : {8u, 32u}) {
    SCOPED_TRACE("key bytes " + std::to_string(key_bytes));
    auto cluster = OpenCluster(false, 1);
    auto client = NewClient(*cluster);
    auto tree = OpenTree(client.get(), "costs", {.key_bytes = key_bytes});
    std::unique_ptr<Context> ctx;
    ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
    PrepareRedoSlots(*client, ctx.get());
    const uint32_t leaf = RadixTestPeer::LeafBytes(*tree);
    EXPECT_EQ(leaf, radix::LeafShape(key_bytes).bytes());
    // 100 keys under one node (type 128: free slots), then warm it.
    for (uint64_t key = 0; key < 100; ++key) {
      ASSERT_TRUE(tree->Insert(*ctx, EncodeUint64Key(key, key_bytes), key).ok());
    }
    uint64_t value = 0;
    ASSERT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(50, key_bytes), &value).ok());
    Stats before = ctx->stats();
    ASSERT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(60, key_bytes), &value).ok());
    EXPECT_EQ(value, 60u);
    Stats used = ctx->stats() - before;
    EXPECT_EQ(used.round_trips, 1u);
    EXPECT_EQ(used.bytes_read, leaf);
    EXPECT_EQ(used.bytes_written, 0u);
    // An update of a present key: CAS + READ, then WRITE + release.
    before = ctx->stats();
    ASSERT_TRUE(tree->Update(*ctx, EncodeUint64Key(60, key_bytes), 600).ok());
    used = ctx->stats() - before;
    EXPECT_EQ(used.round_trips, 2u);
    EXPECT_EQ(used.bytes_written, 8u + 16u + 8u + 64u);
    EXPECT_EQ(used.bytes_read, 8u + leaf);
    // An insert into the node (a free slot): the node is read afresh (the
    // cached image has no slot for the key), then leaf WRITE + slot CAS +
    // header READ in one batch.
    before = ctx->stats();
    ASSERT_TRUE(tree->Insert(*ctx, EncodeUint64Key(100, key_bytes), 1).ok());
    used = ctx->stats() - before;
    EXPECT_EQ(used.round_trips, 2u);
    EXPECT_EQ(used.bytes_written, leaf + 8u);
    // A delete: lock CAS + READ, then the deleted mark, the tombstone CAS
    // and the node READ (merge check) in one batch.
    ASSERT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(70, key_bytes), &value).ok());
    before = ctx->stats();
    ASSERT_TRUE(tree->Delete(*ctx, EncodeUint64Key(70, key_bytes)).ok());
    used = ctx->stats() - before;
    EXPECT_EQ(used.round_trips, 2u);
    EXPECT_EQ(used.bytes_written, 8u + 8u + 8u);
    EXPECT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(70, key_bytes), &value).IsNotFound());
    const IndexStats stats = tree->stats();
    EXPECT_EQ(stats[IndexOp::kLookup].cache_stale, 0u);
    EXPECT_EQ(stats.Total().read_retries, 0u);
    EXPECT_EQ(stats.Total().cas_retries, 0u);
  }
}

// A warm scan starts from the cached node covering its first key, read
// afresh, and never reads the root slot or the root node (on memory node
// 0, which every scan would otherwise load); one that leaves the node's
// prefix goes on from the next cached node. Counted exactly. After a root
// change (a header split puts a new node above the cached top node) and
// after the cached node is merged away on another compute node, scans
// still return exactly the keys present.
TEST(RadixTest, WarmScansStartFromTheCacheNotTheRoot) {
  TwoComputeNodes nodes("scans", {.key_bytes = 8});
  ASSERT_TRUE(nodes.tree_a && nodes.tree_b && nodes.ctx_a && nodes.ctx_b);
  auto& tree = nodes.tree_a;
  auto& tree_b = nodes.tree_b;
  auto& ctx = nodes.ctx_a;
  auto& ctx_b = nodes.ctx_b;
  const uint32_t leaf = RadixTestPeer::LeafBytes(*tree);
  auto key = [](std::string_view bytes) { return Padded(std::string(bytes), 8); };
  // A root branching on byte 0 ('A', 'B', 'C'), under each a node
  // branching on byte 1 over ten leaves.
  std::map<std::string, uint64_t> model;
  for (const char a : std::string("ABC")) {
    for (const char b : std::string("abcdefghij")) {
      const std::string k = key(std::string{a, b});
      ASSERT_TRUE(tree->Insert(*ctx, k, model.size()).ok());
      model[k] = model.size();
    }
  }
  auto header_of = [&](std::string_view k) {
    const fabric::RemoteAddress node = RadixTestPeer::NodeOnPath(*tree, *ctx, k, 1);
    return radix::Header::Unpack(RadixTestPeer::ReadWord(*ctx, node + radix::kHeaderOffset));
  };
  const uint32_t child_bytes = radix::NodeReadBytes(header_of(key("Ba")).type);
  ASSERT_EQ(child_bytes, radix::NodeReadBytes(header_of(key("Ca")).type));
  uint64_t value = 0;
  for (const char* k : {"Aa", "Ba", "Ca"})
    ASSERT_TRUE(tree->Lookup(*ctx, key(k), &value).ok());  // warms root and children
  auto expect_scan = [&](std::string_view from, size_t count, std::vector<std::string> want,
                         uint64_t round_trips, uint64_t bytes_read) {
    std::vector<KeyValue> out;
    const Stats before = ctx->stats();
    ASSERT_TRUE(tree->Scan(*ctx, key(from), count, &out).ok());
    const Stats used = ctx->stats() - before;
    std::vector<std::string> got;
    for (const KeyValue& kv : out) {
      got.push_back(kv.key);
      EXPECT_EQ(kv.value, model.at(kv.key));
    }
    for (std::string& k : want)
      k = key(k);
    EXPECT_EQ(got, want) << from;
    EXPECT_EQ(used.round_trips, round_trips) << from;
    EXPECT_EQ(used.bytes_read, bytes_read) << from;
  };
  // Under one node: the node, then the leaves. No root slot, no root.
  expect_scan("Bc", 5, {"Bc", "Bd", "Be", "Bf", "Bg"}, 2, child_bytes + 5 * leaf);
  // Across two nodes: a segment under each.
  expect_scan("Bi", 4, {"Bi", "Bj", "Ca", "Cb"}, 4, 2 * child_bytes + 4 * leaf);
  // The range form, under one node.
  {
    std::vector<KeyValue> out;
    const Stats before = ctx->stats();
    ASSERT_TRUE(tree->Scan(*ctx, key("Ab"), key("Ad"), &out).ok());
    const Stats used = ctx->stats() - before;
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out.front().key, key("Ab"));
    EXPECT_EQ(used.round_trips, 2u);
    EXPECT_EQ(used.bytes_read, child_bytes + 3 * leaf);
  }
  // Ranges over many segments, walked from the root slot after two.
  auto expect_all = [&](RangeIndex& index, Context& c, std::string_view from, std::string_view to) {
    std::vector<KeyValue> out;
    ASSERT_TRUE(index.Scan(c, key(from), key(to), &out).ok());
    std::vector<KeyValue> want;
    for (auto it = model.lower_bound(key(from)); it != model.end() && it->first <= key(to); ++it)
      want.push_back({it->first, it->second});
    EXPECT_EQ(out, want) << from << ".." << to;
    ASSERT_TRUE(index.Scan(c, key(from), want.size() + 1, &out).ok());
    std::vector<KeyValue> counted;
    for (auto it = model.lower_bound(key(from)); it != model.end() && counted.size() <= want.size();
         ++it)
      counted.push_back({it->first, it->second});
    EXPECT_EQ(out, counted) << from << " +" << want.size() + 1;
  };
  expect_all(*tree, *ctx, "Ah", "Cb");
  expect_all(*tree, *ctx, "A", "C\xff");
  // A root change: keys under 'Q' in a second tree make a top node with
  // header "Q", cached on both compute nodes; 'R' then splits its header
  // (a new root above it).
  model.clear();
  tree = OpenTree(nodes.client_a.get(), "rootsplit", {.key_bytes = 8});
  tree_b = OpenTree(nodes.client_b.get(), "rootsplit", {.key_bytes = 8});
  for (const char b : std::string("abcdefghij")) {
    const std::string k = key(std::string{'Q', b});
    ASSERT_TRUE(tree->Insert(*ctx, k, b).ok());
    model[k] = static_cast<uint64_t>(b);
  }
  ASSERT_TRUE(tree->Lookup(*ctx, key("Qa"), &value).ok());
  ASSERT_TRUE(tree_b->Lookup(*ctx_b, key("Qa"), &value).ok());
  ASSERT_TRUE(tree->Insert(*ctx, key("Ra"), 1).ok());
  model[key("Ra")] = 1;
  expect_all(*tree, *ctx, "Qe", "Rz");
  expect_all(*tree_b, *ctx_b, "Qe", "Rz");
  expect_all(*tree_b, *ctx_b, "A", "Z");
  // The cached 'Q' node merged away by compute node A: B's scan finds it
  // deleted, drops it and walks from the root slot.
  ASSERT_TRUE(tree_b->Lookup(*ctx_b, key("Qa"), &value).ok());
  for (const char b : std::string("abcdefghi")) {
    ASSERT_TRUE(tree->Delete(*ctx, key(std::string{'Q', b})).ok());
    model.erase(key(std::string{'Q', b}));
  }
  const uint64_t stale = tree_b->stats()[IndexOp::kScan].cache_stale;
  expect_all(*tree_b, *ctx_b, "Qa", "Rz");
  EXPECT_GT(tree_b->stats()[IndexOp::kScan].cache_stale, stale);
  const radix::TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_TRUE(shape.errors.empty());
}

// E-mail-like keys with reversed host names (as SMART evaluates), 32 bytes
// zero-padded: long shared prefixes make header splits, chains of nodes
// for leaf splits, and full 6-byte headers; one host's users fan out over
// all 256 values of a byte (every node type); deletes merge paths back.
std::string EmailKey(std::mt19937_64& rng) {
  static const char* const kHosts[] = {"com.gmail@", "com.gmail.mail@", "org.example.lists@",
                                       "net.x@", "com.example.corp.research@"};
  const int host = static_cast<int>(rng() % 6);
  std::string key;
  if (host == 5) {
    key = "bin.";
    key.push_back(static_cast<char>(rng() % 256));
    key += "tail";
  } else {
    key = kHosts[host];
    key += "user" + std::to_string(rng() % 2000);
  }
  return Padded(key, 32);
}

TEST(RadixTest, EmailKeysMatchAModelWithEveryNodeType) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto tree = OpenTree(client.get(), "emails", {.key_bytes = 32});
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  std::mt19937_64 rng(testing::TestSeed(11));
  std::map<std::string, uint64_t> model;
  std::array<bool, radix::kMaxType + 1> types_seen{};
  // Every node type appears within the first 3,000 ops; a sanitizer's
  // slowdown buys nothing on this single-threaded check beyond a quarter of
  // the release build's run.
  constexpr int kOps = testing::kAnySanitizer ? 25000 : 100000;
  for (int op = 0; op < kOps; ++op) {
    const std::string key = EmailKey(rng);
    const uint64_t value = rng();
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 40) {
      ASSERT_TRUE(tree->Insert(*ctx, key, value).ok()) << op;
      model[key] = value;
    } else if (kind < 55) {
      const Status status = tree->Update(*ctx, key, value);
      ASSERT_EQ(status.ok(), model.count(key) == 1) << op << " " << status.ToString();
      if (status.ok()) model[key] = value;
    } else if (kind < 75) {
      const Status status = tree->Delete(*ctx, key);
      ASSERT_EQ(status.ok(), model.erase(key) == 1) << op << " " << status.ToString();
    } else if (kind < 95) {
      uint64_t found = 0;
      const Status status = tree->Lookup(*ctx, key, &found);
      const auto it = model.find(key);
      ASSERT_EQ(status.ok(), it != model.end()) << op;
      if (status.ok()) {
        ASSERT_EQ(found, it->second) << op;
      }
    } else {
      std::string to = key;
      to[12] = static_cast<char>(0xff);
      std::vector<KeyValue> out;
      ASSERT_TRUE(tree->Scan(*ctx, key, to, &out).ok()) << op;
      std::vector<KeyValue> expected;
      for (auto it = model.lower_bound(key); it != model.end() && it->first <= to; ++it) {
        expected.push_back({it->first, it->second});
      }
      ASSERT_EQ(out, expected) << op;
      const size_t count = rng() % 20 + 1;
      ASSERT_TRUE(tree->Scan(*ctx, key, count, &out).ok()) << op;
      expected.clear();
      for (auto it = model.lower_bound(key); it != model.end() && expected.size() < count; ++it) {
        expected.push_back({it->first, it->second});
      }
      ASSERT_EQ(out, expected) << op;
    }
    // Often while the nodes grow (every type passes by), then now and then.
    if (op % (op < 10000 ? 250 : 20000) == 249) {
      const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
      for (uint8_t type = 1; type <= radix::kMaxType; ++type) {
        types_seen[type] = types_seen[type] || shape.nodes_by_type[type] > 0;
      }
      ASSERT_NO_FATAL_FAILURE(ExpectSound(*tree, *ctx, model));
    }
  }
  const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  for (uint8_t type = 1; type <= radix::kMaxType; ++type) {
    EXPECT_TRUE(types_seen[type]) << "no node of type " << int{type};
  }
  EXPECT_GT(shape.full_headers, 0u);
  EXPECT_GT(tree->stats()[IndexOp::kDelete].operations, 0u);
  // Everything out again: every lookup misses, and no leaf is left.
  for (const auto& [key, value] : model)
    ASSERT_TRUE(tree->Delete(*ctx, key).ok());
  model.clear();
  ASSERT_NO_FATAL_FAILURE(ExpectSound(*tree, *ctx, model));
  std::vector<KeyValue> out;
  ASSERT_TRUE(tree->Scan(*ctx, std::string(32, '\0'), 10, &out).ok());
  EXPECT_TRUE(out.empty());
}

// A delete that leaves a node one leaf merges the leaf into the parent's
// slot; one that leaves it one internal child merges the headers.
TEST(RadixTest, DeletesUndoPathCompression) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto tree = OpenTree(client.get(), "merges", {.key_bytes = 16});
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  const std::string a = Padded("abcXa", 16);
  const std::string b = Padded("abcXb", 16);
  const std::string c = Padded("abQ", 16);
  ASSERT_TRUE(tree->Insert(*ctx, a, 1).ok());
  TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.nodes, 0u);                  // the root slot holds the leaf
  ASSERT_TRUE(tree->Insert(*ctx, b, 2).ok());  // leaf split: one node "abcX"
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.nodes, 1u);
  EXPECT_EQ(shape.longest_header, 4u);
  ASSERT_TRUE(tree->Insert(*ctx, c, 3).ok());  // header split at byte 2
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.nodes, 2u);
  EXPECT_TRUE(shape.errors.empty());
  // Leaf merge: "abcX" keeps one leaf, which moves up.
  ASSERT_TRUE(tree->Delete(*ctx, b).ok());
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.nodes, 1u);
  EXPECT_EQ(shape.single_child_nodes, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectSound(*tree, *ctx, {{a, 1}, {c, 3}}));
  // Header merge: put "abcX" back under the top node, then remove c: the
  // top node's header, its branch byte and the child's header join.
  ASSERT_TRUE(tree->Insert(*ctx, b, 2).ok());
  ASSERT_TRUE(tree->Delete(*ctx, c).ok());
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.nodes, 1u);
  EXPECT_EQ(shape.longest_header, 4u);
  ASSERT_NO_FATAL_FAILURE(ExpectSound(*tree, *ctx, {{a, 1}, {b, 2}}));
  // The last two: a leaf merge into the root slot, then nothing.
  ASSERT_TRUE(tree->Delete(*ctx, a).ok());
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.nodes, 0u);
  EXPECT_EQ(shape.leaves, 1u);
  ASSERT_TRUE(tree->Delete(*ctx, b).ok());
  shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_EQ(shape.leaves, 0u);
  uint64_t value = 0;
  for (const std::string& key : {a, b, c}) {
    EXPECT_TRUE(tree->Lookup(*ctx, key, &value).IsNotFound());
  }
  ASSERT_TRUE(tree->Insert(*ctx, c, 9).ok());
  ASSERT_TRUE(tree->Lookup(*ctx, c, &value).ok());
  EXPECT_EQ(value, 9u);
}

// A compute node that died in a merge leaves the node frozen (header type
// 0): operations under it fail after their retries, scans included (a
// scan's re-reads of the frozen node's slot are bounded too), and once the
// node is given back everything works again. Backoff off, so the bounds
// are reached quickly.
TEST(RadixTest, OperationsUnderANodeLeftFrozenGiveUp) {
  auto cluster = OpenCluster(false);
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster
                  ->NewClient({.retry_backoff_min = std::chrono::nanoseconds(0),
                               .retry_backoff_max = std::chrono::nanoseconds(0)},
                              &client)
                  .ok());
  RadixOptions options;
  options.cache_bytes = 0;
  auto tree = OpenTree(client.get(), "frozen", options);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  // The root node branches on byte 0 ('X', 'Y'); under 'X' a node
  // branching on byte 1.
  for (const char* key : {"Xa", "Xb", "Y"}) {
    ASSERT_TRUE(tree->Insert(*ctx, Padded(key, 8), 1).ok());
  }
  const fabric::RemoteAddress node = RadixTestPeer::NodeOnPath(*tree, *ctx, Padded("Xa", 8), 1);
  ASSERT_FALSE(node.is_null());
  const uint64_t header = RadixTestPeer::ReadWord(*ctx, node + radix::kHeaderOffset);
  radix::Header frozen = radix::Header::Unpack(header);
  frozen.type = radix::kDeletedType;
  RadixTestPeer::WriteWord(*ctx, node + radix::kHeaderOffset, frozen.Pack());
  std::vector<KeyValue> out;
  EXPECT_TRUE(tree->Scan(*ctx, Padded("X", 8), Padded("Xz", 8), &out).IsAborted());
  EXPECT_TRUE(out.empty());
  uint64_t value = 0;
  EXPECT_TRUE(tree->Lookup(*ctx, Padded("Xa", 8), &value).IsAborted());
  ASSERT_TRUE(tree->Lookup(*ctx, Padded("Y", 8), &value).ok());  // beside it: fine
  RadixTestPeer::WriteWord(*ctx, node + radix::kHeaderOffset, header);
  ASSERT_TRUE(tree->Scan(*ctx, Padded("X", 8), Padded("Xz", 8), &out).ok());
  EXPECT_EQ(out.size(), 2u);
  EXPECT_TRUE(tree->Lookup(*ctx, Padded("Xa", 8), &value).ok());
}

// The least scratch Open accepts is enough for a delete and the merges it
// makes (with 256-slot nodes, the largest images), and Open says how much
// that is when given less.
TEST(RadixTest, DeleteAndMergeFitTheScratchOpenAsksFor) {
  auto cluster = OpenCluster(false);
  RadixOptions options;
  options.homogeneous_nodes = false;
  options.cache_bytes = 0;
  std::unique_ptr<Client> small;
  ASSERT_TRUE(cluster->NewClient({.scratch_bytes_per_context = 8192}, &small).ok());
  std::unique_ptr<Radix> refused;
  const Status status = Radix::Open(small.get(), "scratch", options, &refused);
  ASSERT_TRUE(status.IsInvalidArgument()) << status.ToString();
  const std::string message = status.ToString();
  const size_t at = message.find(">= ");
  ASSERT_NE(at, std::string::npos) << message;
  // Scratch comes in whole 4 KiB pages.
  const size_t needed = (std::stoul(message.substr(at + 3)) + 4095) / 4096 * 4096;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({.scratch_bytes_per_context = needed}, &client).ok());
  auto tree = OpenTree(client.get(), "scratch", options);
  ASSERT_NE(tree, nullptr);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  for (const char* key : {"Xa", "Xb", "Y"}) {
    ASSERT_TRUE(tree->Insert(*ctx, Padded(key, 8), 1).ok());
  }
  const Status deleted = tree->Delete(*ctx, Padded("Xb", 8));  // merges "X" away
  EXPECT_TRUE(deleted.ok()) << deleted.ToString();
  uint64_t value = 0;
  EXPECT_TRUE(tree->Lookup(*ctx, Padded("Xb", 8), &value).IsNotFound());
  EXPECT_TRUE(tree->Lookup(*ctx, Padded("Xa", 8), &value).ok());
  const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
  EXPECT_TRUE(shape.errors.empty());
  EXPECT_EQ(shape.nodes, 1u);
}

// index.h: a scan that fails returns nothing, also when it fails after
// a segment under one cached node has produced its keys (the scan then goes
// on under the next cached node). Batches fail at random; every scan either
// returns exactly the model's keys or fails with an empty result, and some
// fail after their first segment's batches went through.
TEST(RadixTest, AScanThatFailsAfterItsFirstSegmentReturnsNothing) {
  auto cluster = OpenCluster(false);
  auto client = NewClient(*cluster);
  auto tree = OpenTree(client.get(), "failing-scans", {.key_bytes = 8});
  ASSERT_NE(tree, nullptr);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  auto key = [](std::string_view bytes) { return Padded(std::string(bytes), 8); };
  std::vector<KeyValue> expected;
  for (const char a : std::string("ABC")) {
    for (const char b : std::string("abcdefghij")) {
      ASSERT_TRUE(tree->Insert(*ctx, key(std::string{a, b}), expected.size()).ok());
      expected.push_back({key(std::string{a, b}), expected.size()});
    }
  }
  // Warm the cache: the nodes under 'A', 'B' and 'C' are cached.
  uint64_t value = 0;
  for (const KeyValue& row : expected)
    ASSERT_TRUE(tree->Lookup(*ctx, row.key, &value).ok());
  fabric::RandomBatchFailures failures;
  failures.seed = testing::TestSeed(5);
  failures.probability = 0.2;
  failures.compute_nodes = {runtime::ComputeNode::Of(*client).id()};
  ASSERT_TRUE(testing::Faults(*cluster).FailBatchesAtRandom(failures).ok());
  int failed = 0;
  int failed_late = 0;  // after at least two batches of the scan went through
  for (int i = 0; i < 300; ++i) {
    const Stats before = ctx->stats();
    std::vector<KeyValue> out;
    // From "Af": A's last five keys, then B's ten (two segments).
    const Status status = tree->Scan(*ctx, key("Af"), 15, &out);
    if (status.ok()) {
      ASSERT_EQ(out.size(), 15u);
      for (size_t j = 0; j < out.size(); ++j)
        EXPECT_EQ(out[j].key, expected[5 + j].key) << j;
      continue;
    }
    ++failed;
    EXPECT_TRUE(out.empty()) << status.ToString() << ": " << out.size() << " pairs returned";
    if ((ctx->stats() - before).round_trips >= 3) ++failed_late;
  }
  ASSERT_TRUE(testing::Faults(*cluster).FailBatchesAtRandom({}).ok());
  EXPECT_GT(failed, 0);
  EXPECT_GT(failed_late, 0);
}

// Compute node A caches the path; B splits a cached node's header,
// switches its type, and deletes under it until it merges away. A answers
// every lookup correctly, and its counters show the reverse checks firing.
TEST(RadixTest, CacheReverseChecksAcrossComputeNodes) {
  TwoComputeNodes nodes("shared", {.key_bytes = 16});
  ASSERT_TRUE(nodes.tree_a && nodes.tree_b && nodes.ctx_a && nodes.ctx_b);
  auto& tree_a = nodes.tree_a;
  auto& tree_b = nodes.tree_b;
  auto& ctx_a = nodes.ctx_a;
  auto& ctx_b = nodes.ctx_b;
  std::map<std::string, uint64_t> model;
  auto put = [&](RangeIndex& tree, Context& ctx, const std::string& key, uint64_t value) {
    ASSERT_TRUE(tree.Insert(ctx, key, value).ok());
    model[key] = value;
  };
  // A top node branching on byte 0 ('A', 'B'); under 'A' a node with
  // header "prefix" branching on byte 7 over three leaves.
  auto under = [](char c) { return Padded(std::string("Aprefix") + c, 16); };
  for (char c : {'a', 'b', 'c'})
    ASSERT_NO_FATAL_FAILURE(put(*tree_a, *ctx_a, under(c), c));
  ASSERT_NO_FATAL_FAILURE(put(*tree_a, *ctx_a, Padded("Bother", 16), 1));
  auto a_reads_everything = [&] {
    for (const auto& [key, value] : model) {
      uint64_t found = 0;
      const Status status = tree_a->Lookup(*ctx_a, key, &found);
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(found, value);
    }
    uint64_t found = 0;
    EXPECT_TRUE(tree_a->Lookup(*ctx_a, under('z'), &found).IsNotFound());
  };
  ASSERT_NO_FATAL_FAILURE(a_reads_everything());
  auto stale = [&] { return tree_a->stats()[IndexOp::kLookup].cache_stale; };
  const uint64_t stale_warm = stale();
  // Header split: "AprZ" leaves the header at byte 3. A's cached top node
  // still leads to the old node, whose reverse pointer names the new one.
  ASSERT_NO_FATAL_FAILURE(put(*tree_b, *ctx_b, Padded("AprZ", 16), 9));
  ASSERT_NO_FATAL_FAILURE(a_reads_everything());
  const uint64_t stale_split = stale();
  EXPECT_GT(stale_split, stale_warm);
  // Type switch: 20 more leaves under "Aprefix" (type 1 -> 4). A's cached
  // image has fewer slots than the node's header says.
  for (char c = 'd'; c < 'x'; ++c)
    ASSERT_NO_FATAL_FAILURE(put(*tree_b, *ctx_b, under(c), c));
  ASSERT_NO_FATAL_FAILURE(a_reads_everything());
  const uint64_t stale_switch = stale();
  EXPECT_GT(stale_switch, stale_split);
  // Deletes until "Aprefix" keeps one leaf, which merges up: A's cached
  // node is deleted, its leaves deleted or moved.
  for (char c = 'b'; c < 'x'; ++c) {
    ASSERT_TRUE(tree_b->Delete(*ctx_b, under(c)).ok());
    model.erase(under(c));
  }
  ASSERT_NO_FATAL_FAILURE(a_reads_everything());
  EXPECT_GT(stale(), stale_switch);
  for (char c = 'b'; c < 'x'; ++c) {
    uint64_t found = 0;
    EXPECT_TRUE(tree_a->Lookup(*ctx_a, under(c), &found).IsNotFound());
  }
  const TreeShape shape = RadixTestPeer::Walk(*tree_a, *ctx_a);
  EXPECT_EQ(shape.single_child_nodes, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectSound(*tree_a, *ctx_a, model));
}

// Read delegation on the tree: eight coroutines of one thread look up one
// key at once, many times. A lookup that leads reads the leaf (one round
// trip, warm cache); one that joins reads nothing. So round trips plus
// delegated reads equal the lookups exactly, and some were delegated.
// One compute node of one thread and eight coroutines, a tree of keys
// 0..49, the node above key 7's leaf cached.
class RadixRdwcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster = OpenCluster(false);
    client = NewClient(*cluster, 1, 8);
    tree = OpenTree(client.get(), "rdwc");
    ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
    PrepareRedoSlots(*client, ctx.get());
    for (uint64_t key = 0; key < 50; ++key) {
      ASSERT_TRUE(tree->Insert(*ctx, EncodeUint64Key(key), key).ok());
    }
    uint64_t value = 0;
    ASSERT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(7), &value).ok());
  }

  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Radix> tree;
  std::unique_ptr<Context> ctx;
};

TEST_F(RadixRdwcTest, SameKeyReadersShareLeafReads) {
  const IndexStats before = tree->stats();
  constexpr int kLookups = 50;
  ASSERT_TRUE(client
                  ->Run([&](Context& c) -> Status {
                    for (int i = 0; i < kLookups; ++i) {
                      uint64_t found = 0;
                      DMIDX_RETURN_IF_ERROR(tree->Lookup(c, EncodeUint64Key(7), &found));
                      if (found != 7) return Status::Internal("wrong value");
                    }
                    return Status::Ok();
                  })
                  .ok());
  const OpCounters used = (tree->stats() - before)[IndexOp::kLookup];
  EXPECT_EQ(used.operations, 8u * kLookups);
  EXPECT_EQ(used.round_trips + used.delegated_reads, 8u * kLookups);
  EXPECT_GT(used.delegated_reads, 0u);
  EXPECT_EQ(used.bytes_read, used.round_trips * RadixTestPeer::LeafBytes(*tree));
}

// Write combining on the tree: eight coroutines update one key at once. A
// write that leads costs its two round trips; one folded into a leader's
// costs none. The key ends with a value one of them wrote.
TEST_F(RadixRdwcTest, SameKeyWritersFoldIntoOneWriteBack) {
  const IndexStats before = tree->stats();
  constexpr int kUpdates = 50;
  ASSERT_TRUE(client
                  ->Run([&](Context& c) -> Status {
                    for (int i = 0; i < kUpdates; ++i) {
                      DMIDX_RETURN_IF_ERROR(tree->Update(c, EncodeUint64Key(7),
                                                         1000 * (c.coroutine_index() + 1) + i));
                    }
                    return Status::Ok();
                  })
                  .ok());
  const OpCounters used = (tree->stats() - before)[IndexOp::kUpdate];
  EXPECT_EQ(used.operations, 8u * kUpdates);
  EXPECT_GT(used.combined_writes, 0u);
  EXPECT_EQ(used.round_trips, 2 * (8u * kUpdates - used.combined_writes));
  EXPECT_EQ(used.lock_retries, 0u);  // leaders of one key take turns on the compute node
  uint64_t value = 0;
  ASSERT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(7), &value).ok());
  EXPECT_EQ(value % 1000, static_cast<uint64_t>(kUpdates - 1));
}

// SMART §4.2.4 on the tree: a context that updated a key and then looks it
// up sees its write (or a later one), while other coroutines keep reading
// and writing the key, so lookups are delegated and writes combined
// throughout.
TEST(RadixRdwcOrderTest, ReadAfterOwnWriteSeesIt) {
  auto cluster = OpenCluster(true, 1, 7);
  auto client = NewClient(*cluster, 2, 6);
  auto tree = OpenTree(client.get(), "rdwc");
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  ASSERT_TRUE(tree->Insert(*ctx, EncodeUint64Key(1), 0).ok());
  // Every written value is unique; its write's start and end on one
  // logical clock. A lookup after my write completed may return my value
  // or one whose write had not completed before mine began (it may be
  // ordered after mine), never one written before mine began.
  constexpr uint64_t kMaxValues = 4096;
  std::atomic<uint64_t> clock{1};
  std::atomic<uint64_t> next{1};
  std::vector<std::atomic<uint64_t>> ended(kMaxValues);
  for (auto& end : ended)
    end.store(UINT64_MAX);
  ended[0].store(0);  // the value inserted first
  std::atomic<int> violations{0};
  ASSERT_TRUE(client
                  ->Run([&](Context& c) -> Status {
                    for (int i = 0; i < 150; ++i) {
                      uint64_t found = 0;
                      if (c.coroutine_index() % 2 == 0) {
                        DMIDX_RETURN_IF_ERROR(tree->Lookup(c, EncodeUint64Key(1), &found));
                        continue;
                      }
                      const uint64_t mine = next.fetch_add(1);
                      if (mine >= kMaxValues) return Status::Internal("too many values");
                      const uint64_t began = clock.fetch_add(1);
                      DMIDX_RETURN_IF_ERROR(tree->Update(c, EncodeUint64Key(1), mine));
                      ended[mine].store(clock.fetch_add(1));
                      DMIDX_RETURN_IF_ERROR(tree->Lookup(c, EncodeUint64Key(1), &found));
                      if (found >= kMaxValues) return Status::Internal("a value nobody wrote");
                      if (found != mine && ended[found].load() < began) ++violations;
                    }
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(violations.load(), 0);
  const IndexStats stats = tree->stats();
  EXPECT_GT(stats[IndexOp::kLookup].delegated_reads, 0u);
  EXPECT_GT(stats[IndexOp::kUpdate].combined_writes, 0u);
}

struct Config {
  std::string name;
  RadixOptions options;
};

std::vector<Config> Configs() {
  auto with = [](const std::function<void(RadixOptions&)>& change) {
    RadixOptions options;
    change(options);
    return options;
  };
  return {
      {"defaults", with([](RadixOptions&) {})},
      {"no_cache", with([](RadixOptions& o) { o.cache_bytes = 0; })},
      {"out_of_place", with([](RadixOptions& o) { o.in_place_leaves = false; })},
      {"no_rear_lock", with([](RadixOptions& o) { o.rear_embedded_lock = false; })},
      {"no_rdwc", with([](RadixOptions& o) { o.read_delegation = o.write_combining = false; })},
      {"fixed_size", with([](RadixOptions& o) { o.homogeneous_nodes = false; })},
      {"baseline", with([](RadixOptions& o) { o = RadixOptions::Baseline(); })},
  };
}

TEST(RadixSwitchesTest, BaselineTurnsEverythingOff) {
  const RadixOptions baseline = RadixOptions::Baseline();
  EXPECT_EQ(baseline.cache_bytes, 0u);
  EXPECT_FALSE(baseline.in_place_leaves);
  EXPECT_FALSE(baseline.rear_embedded_lock);
  EXPECT_FALSE(baseline.read_delegation);
  EXPECT_FALSE(baseline.write_combining);
  EXPECT_FALSE(baseline.homogeneous_nodes);
}

// One sequential workload, identical outcomes under every switch; the
// counters of a warm update move as the switches say.
TEST(RadixSwitchesTest, EverySwitchGivesTheSameResults) {
  std::vector<std::string> reference;
  for (const Config& config : Configs()) {
    SCOPED_TRACE(config.name);
    auto cluster = OpenCluster(false);
    auto client = NewClient(*cluster);
    auto tree = OpenTree(client.get(), "switches", config.options);
    std::unique_ptr<Context> ctx;
    ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
    std::mt19937_64 rng(5);
    std::vector<std::string> outcomes;
    for (int op = 0; op < 4000; ++op) {
      const std::string key = EncodeUint64Key(rng() % 600 * 977);
      uint64_t value = 0;
      Status status;
      switch (rng() % 5) {
        case 0:
        case 1:
          status = tree->Insert(*ctx, key, op);
          break;
        case 2:
          status = tree->Update(*ctx, key, op);
          break;
        case 3:
          status = tree->Delete(*ctx, key);
          break;
        default:
          status = tree->Lookup(*ctx, key, &value);
          break;
      }
      outcomes.push_back(status.ToString() + "/" + std::to_string(value));
    }
    std::vector<KeyValue> all;
    ASSERT_TRUE(tree->Scan(*ctx, EncodeUint64Key(0), 100000, &all).ok());
    for (const KeyValue& pair : all)
      outcomes.push_back(testing::Describe(pair));
    if (reference.empty()) {
      reference = outcomes;
    } else {
      EXPECT_EQ(outcomes, reference);
    }
    const TreeShape shape = RadixTestPeer::Walk(*tree, *ctx);
    for (const std::string& error : shape.errors)
      ADD_FAILURE() << error;
    // A warm update of a present key.
    ASSERT_FALSE(all.empty());
    uint64_t value = 0;
    ASSERT_TRUE(tree->Lookup(*ctx, all[0].key, &value).ok());
    const Stats before = ctx->stats();
    ASSERT_TRUE(tree->Update(*ctx, all[0].key, 1).ok());
    const Stats used = ctx->stats() - before;
    const bool cached = config.options.cache_bytes > 0;
    if (!config.options.in_place_leaves) {
      // Leaf READ, then new leaf WRITE + rear CAS, then the slot CAS (plus
      // the descent without a cache).
      EXPECT_EQ(used.round_trips, cached ? 3u : 3u + shape.levels + 1);
    } else if (!config.options.rear_embedded_lock) {
      EXPECT_EQ(used.round_trips, cached ? 3u : 3u + shape.levels + 1);
    } else {
      EXPECT_EQ(used.round_trips, cached ? 2u : 2u + shape.levels + 1);
    }
  }
}

// Regression: a leaf damaged for good (a write-back that landed in part),
// its rear word free, was taken for a torn READ: retried 10,000 times and
// reported Aborted. Every leaf READ that verifies now tells it from a torn
// READ in kDamageRoundTrips and returns DataLoss naming the leaf
// (index/verified_read.h), and a writer lets the rear word go.
TEST(RadixTest, DamagedLeafIsDataLossNamingIt) {
  for (const bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    auto cluster = OpenCluster(false);
    auto client = NewClient(*cluster);
    std::unique_ptr<Context> ctx;
    ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
    RadixOptions options;
    options.in_place_leaves = in_place;
    auto tree = OpenTree(client.get(), "damaged", options);
    PrepareRedoSlots(*client, ctx.get());
    for (uint64_t key = 1; key <= 20; ++key) {
      ASSERT_TRUE(tree->Insert(*ctx, EncodeUint64Key(key), key).ok());
    }
    // Warm costs, each after a lookup that leaves the cache fresh (an
    // out-of-place update leaves the cached parent's slot stale).
    const std::string key = EncodeUint64Key(7);
    uint64_t value = 0;
    ASSERT_TRUE(tree->Lookup(*ctx, key, &value).ok());
    IndexStats before = tree->stats();
    ASSERT_TRUE(tree->Update(*ctx, key, 7).ok());
    const uint64_t update = (tree->stats() - before)[IndexOp::kUpdate].round_trips;
    ASSERT_TRUE(tree->Lookup(*ctx, key, &value).ok());
    before = tree->stats();
    ASSERT_TRUE(tree->Lookup(*ctx, key, &value).ok());
    const uint64_t lookup = (tree->stats() - before)[IndexOp::kLookup].round_trips;

    const fabric::RemoteAddress leaf = RadixTestPeer::LeafOf(*tree, *ctx, key);
    ASSERT_FALSE(leaf.is_null());
    const fabric::RemoteAddress value_word = leaf + radix::kLeafValueOffset;
    RadixTestPeer::WriteWord(*ctx, value_word, RadixTestPeer::ReadWord(*ctx, value_word) ^ 0x5a5a);

    // The leaf READ that failed, then the re-reads and checks of the rear
    // word, and the READ under the rear lock that proves it (2: the CAS
    // with the READ, and the release): kDamageRoundTrips + 2 in all where
    // one READ was.
    const uint64_t extra = index::kDamageRoundTrips - 1 + 2;
    before = tree->stats();
    Status status = tree->Lookup(*ctx, key, &value);
    EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
    EXPECT_NE(status.message().find("leaf " + leaf.ToString()), std::string_view::npos)
        << status.ToString();
    EXPECT_EQ((tree->stats() - before)[IndexOp::kLookup].round_trips, lookup + extra);

    // A scan finds the keys before the leaf, and returns none of them.
    std::vector<KeyValue> out;
    status = tree->Scan(*ctx, EncodeUint64Key(0), 100, &out);
    EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
    EXPECT_TRUE(out.empty());
    status = tree->Scan(*ctx, EncodeUint64Key(0), EncodeUint64Key(100), &out);
    EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
    EXPECT_TRUE(out.empty());

    // In place, under the rear lock (the caller's own hold is quiet, and
    // proof: no lock to take again) and then released: the lock's READ
    // was the first. Out of place, the first of its READs of the leaf,
    // without the lock.
    for (int i = 0; i < 2; ++i) {
      before = tree->stats();
      status = tree->Update(*ctx, key, 70);
      EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
      const uint64_t used = (tree->stats() - before)[IndexOp::kUpdate].round_trips;
      // In place: a release instead of the write-back; out of place: no
      // write of a new leaf and no slot CAS.
      EXPECT_EQ(used, in_place ? update + extra - 2 : update - 2 + extra);
    }
    EXPECT_EQ(RadixTestPeer::ReadWord(*ctx, leaf + (RadixTestPeer::LeafBytes(*tree) - 8)), 0u)
        << "the leaf's rear word was left held";
    // The other keys are untouched.
    ASSERT_TRUE(tree->Lookup(*ctx, EncodeUint64Key(8), &value).ok());
    EXPECT_EQ(value, 8u);
  }
}

// Regression (review of issue 25, finding 3): a reader saw the same failing
// leaf image twice with the rear word free before and after each READ, and
// called the leaf damaged; but a whole lock cycle (CAS, write-back,
// release) fits between two READs of the word. Here an in-place update
// toggling one key's value is caught halfway through its 16-byte
// write-back (the checksum's word landed, the value's not: the image a
// reader of another compute node sees every time the toggle repeats it)
// while the reader's checks find the word free, and the value lands only
// after its last check. The reader now reads the leaf under its rear lock
// before it says DataLoss, finds it whole, and returns the value (it
// returned DataLoss before).
TEST(RadixTest, HalfWrittenLeafSeenTwiceWithItsLockFreeIsNotDataLoss) {
  auto cluster = OpenCluster(false);
  auto writer = NewClient(*cluster);
  auto reader = testing::TwoCoroutineClient(*cluster);
  ASSERT_TRUE(writer && reader);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(writer->NewBlockingContext(&ctx).ok());
  RadixOptions options;
  options.in_place_leaves = true;
  auto writer_tree = OpenTree(writer.get(), "toggle", options);
  auto reader_tree = OpenTree(reader.get(), "toggle", options);
  for (uint64_t key = 1; key <= 20; ++key)
    ASSERT_TRUE(writer_tree->Insert(*ctx, EncodeUint64Key(key), key).ok());
  const std::string key = EncodeUint64Key(7);
  constexpr uint64_t kFirst = 71, kSecond = 72;
  uint64_t value = 0;
  auto lookup = [&](runtime::ContextImpl& context) {
    return reader_tree->Lookup(context, key, &value);
  };
  const uint64_t warm_round_trips = testing::WarmRoundTrips(*reader, lookup);
  Stats used;

  // The toggle's update from kFirst to kSecond, halfway: the checksum of
  // kSecond landed, the value word still kFirst.
  ASSERT_TRUE(writer_tree->Update(*ctx, key, kFirst).ok());
  ASSERT_TRUE(writer_tree->Update(*ctx, key, kSecond).ok());
  const fabric::RemoteAddress leaf = RadixTestPeer::LeafOf(*writer_tree, *ctx, key);
  ASSERT_FALSE(leaf.is_null());
  const fabric::RemoteAddress value_word = leaf + radix::kLeafValueOffset;
  ASSERT_EQ(RadixTestPeer::ReadWord(*ctx, value_word), kSecond);
  RadixTestPeer::WriteWord(*ctx, value_word, kFirst);

  // The value lands once the reader has posted its last check of the rear
  // word (the second same failing image, the word free around both READs).
  const uint64_t checked = warm_round_trips + index::kDamageRoundTrips - 1;
  testing::Injection landed;
  const Status status = testing::RunWithInjection(
      *reader, lookup, [&](const Stats& so_far) { return so_far.round_trips >= checked; },
      [&] { RadixTestPeer::WriteWord(*ctx, value_word, kSecond); }, &landed, &used);
  ASSERT_TRUE(landed.fired);
  EXPECT_EQ(landed.at.round_trips, checked);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(value, kSecond);
  // Then the leaf under its rear lock: the CAS with the READ, and the
  // release.
  EXPECT_EQ(used.round_trips, checked + 2);
  EXPECT_EQ(RadixTestPeer::ReadWord(*ctx, leaf + (RadixTestPeer::LeafBytes(*reader_tree) - 8)), 0u)
      << "the reader left the leaf's rear word held";
}

}  // namespace
}  // namespace dmidx
