// Targeted races on one radix-tree node, with every fault of the local
// fabric injected (torn READs and WRITEs, delays, reordering): a header
// split, type switches and leaf splits at once from different compute
// nodes; deletes racing inserts on one path (merges against splits). The
// final state must equal the model and the tree must keep every invariant
// of docs/radix.md (tests/radix_test_util.h walks it).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "dmidx/keys.h"
#include "dmidx/radix.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"
#include "testing/watchdog.h"
#include "testing/zipf.h"
#include "tests/radix_test_util.h"

namespace dmidx {
namespace {

using radix::RadixTestPeer;
using radix::TreeShape;
using testing::NewClient;
using testing::OpenCluster;
using testing::RunClients;
using testing::Watchdog;

constexpr uint32_t kKeyBytes = 16;
constexpr uint32_t kComputeNodes = 3;
constexpr uint32_t kThreads = 2;
constexpr uint32_t kCoroutines = 3;

std::string Padded(const std::string& key) {
  return radix::Padded(key, kKeyBytes);
}

struct Cluster3 {
  std::unique_ptr<Cluster> cluster;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Radix>> trees;
  std::vector<Client*> client_list;
};

// kComputeNodes clients of one faulty cluster, each with its handle of one
// tree (`options` on each, `fixed` the node kind).
Cluster3 Open(uint64_t seed, RadixOptions options) {
  Cluster3 setup;
  setup.cluster = OpenCluster(true, 2, seed);
  options.key_bytes = kKeyBytes;
  for (uint32_t i = 0; i < kComputeNodes; ++i) {
    setup.clients.push_back(NewClient(*setup.cluster, kThreads, kCoroutines));
    std::unique_ptr<Radix> tree;
    const Status status = Radix::Open(setup.clients.back().get(), "race", options, &tree);
    EXPECT_TRUE(status.ok()) << status.ToString();
    setup.trees.push_back(std::move(tree));
    setup.client_list.push_back(setup.clients.back().get());
  }
  return setup;
}

void ExpectTreeEquals(Cluster3& setup, const std::map<std::string, uint64_t>& model) {
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(setup.clients[0]->NewBlockingContext(&ctx).ok());
  const TreeShape shape = RadixTestPeer::Walk(*setup.trees[0], *ctx);
  for (const std::string& error : shape.errors)
    ADD_FAILURE() << error;
  // At rest every header split has trimmed its node (its trim waits out a
  // merge's freeze; a lost trim would leave the node out of merges' reach).
  EXPECT_EQ(shape.untrimmed_headers, 0u);
  std::vector<std::string> keys;
  for (const auto& [key, value] : model)
    keys.push_back(key);
  EXPECT_EQ(shape.keys, keys);
  for (const auto& [key, value] : model) {
    for (auto& tree : setup.trees) {
      uint64_t found = 0;
      const Status status = tree->Lookup(*ctx, key, &found);
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(found, value);
    }
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(
      setup.trees[1]->Scan(*ctx, std::string(kKeyBytes, '\0'), model.size() + 10, &all).ok());
  ASSERT_EQ(all.size(), model.size());
  size_t i = 0;
  for (const auto& [key, value] : model) {
    EXPECT_EQ(all[i].key, key);
    EXPECT_EQ(all[i].value, value);
    ++i;
  }
}

class RadixRaceTest : public ::testing::TestWithParam<bool> {};  // homogeneous nodes

RadixOptions Options(bool homogeneous) {
  RadixOptions options;
  options.homogeneous_nodes = homogeneous;
  return options;
}

// One full node (header "NODEHDR" is 7 bytes: a 6-byte header and a chain
// node, with four leaves under the last), then at once: compute node 0
// splits the header at every byte (keys leaving it at byte 1..6), compute
// node 1 adds 60 branch bytes under it (type switches 4 -> 8 -> ... ->
// 64), compute node 2 splits its leaves (keys sharing 8..14 bytes with
// them). Every context also reads keys already in.
TEST_P(RadixRaceTest, HeaderSplitTypeSwitchAndLeafSplitAtOnce) {
  Watchdog watchdog(std::chrono::seconds(240));
  const uint64_t seed = testing::TestSeed(21);
  Cluster3 setup = Open(seed, Options(GetParam()));
  std::map<std::string, uint64_t> model;
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(setup.clients[0]->NewBlockingContext(&ctx).ok());
  for (char c : {'a', 'b', 'c', 'd'}) {
    const std::string key = Padded(std::string("NODEHDR") + c);
    ASSERT_TRUE(setup.trees[0]->Insert(*ctx, key, c).ok());
    model[key] = c;
  }
  // Each key is written by one context: its final value is known.
  std::vector<std::pair<std::string, uint64_t>> plan[kComputeNodes];
  for (int depth = 1; depth < 7; ++depth) {
    for (char c = 'p'; c < 'p' + 4; ++c) {
      std::string key = std::string("NODEHDR").substr(0, depth) + c + "x";
      plan[0].push_back({Padded(key), 1000 + plan[0].size()});
    }
  }
  for (int c = 0; c < 60; ++c) {
    plan[1].push_back({Padded(std::string("NODEHDR") + static_cast<char>('e' + c)), 2000 + c});
  }
  for (char c : {'a', 'b', 'c', 'd'}) {
    for (int shared = 8; shared < 15; ++shared) {
      std::string key = Padded(std::string("NODEHDR") + c);
      key[shared] = static_cast<char>('A' + shared);
      plan[2].push_back({key, 3000 + plan[2].size()});
    }
  }
  for (const auto& part : plan) {
    for (const auto& [key, value] : part)
      model[key] = value;
  }
  const ClientOptions shape{.threads = kThreads, .coroutines_per_thread = kCoroutines};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  const std::vector<Status> results = RunClients(setup.client_list, [&](int client, Context& c) {
    const int index = testing::ContextIndex(client, c, shape) % (kThreads * kCoroutines);
    const auto& part = plan[client];
    for (size_t i = static_cast<size_t>(index); i < part.size(); i += kThreads * kCoroutines) {
      DMIDX_RETURN_IF_ERROR(setup.trees[client]->Insert(c, part[i].first, part[i].second));
      uint64_t found = 0;
      const std::string old_key = Padded(std::string("NODEHDR") + static_cast<char>('a' + i % 4));
      const Status status = setup.trees[client]->Lookup(c, old_key, &found);
      if (!status.ok() || found != static_cast<uint64_t>('a' + i % 4)) {
        std::lock_guard<std::mutex> guard(failures_mutex);
        failures.push_back("lookup of an old key: " + status.ToString());
      }
      const Status own = setup.trees[client]->Lookup(c, part[i].first, &found);
      if (!own.ok() || found != part[i].second) {
        std::lock_guard<std::mutex> guard(failures_mutex);
        failures.push_back("own key not found after its insert: " + own.ToString());
      }
    }
    return Status::Ok();
  });
  for (const Status& status : results)
    EXPECT_TRUE(status.ok()) << status.ToString();
  for (const std::string& failure : failures)
    ADD_FAILURE() << failure;
  ASSERT_NO_FATAL_FAILURE(ExpectTreeEquals(setup, model));
  const TreeShape tree_shape = RadixTestPeer::Walk(*setup.trees[0], *ctx);
  if (GetParam()) {
    EXPECT_GT(tree_shape.nodes_by_type[5], 0u);  // the 64-slot node
  }
}

// Deletes racing inserts on one path: every context owns keys under one
// short prefix and inserts and deletes them in rounds, so nodes keep
// splitting and merging away under each other. The final state of each key
// is its owner's last operation.
TEST_P(RadixRaceTest, DeletesRaceInsertsOnOnePath) {
  Watchdog watchdog(std::chrono::seconds(240));
  const uint64_t seed = testing::TestSeed(22);
  Cluster3 setup = Open(seed, Options(GetParam()));
  constexpr int kContexts = kComputeNodes * kThreads * kCoroutines;
  constexpr int kRounds = 150;
  std::array<std::map<std::string, uint64_t>, kContexts> owned;
  const ClientOptions shape{.threads = kThreads, .coroutines_per_thread = kCoroutines};
  const std::vector<Status> results = RunClients(setup.client_list, [&](int client, Context& c) {
    const int index = testing::ContextIndex(client, c, shape);
    std::mt19937_64 rng(seed * 131 + static_cast<uint64_t>(index));
    auto& mine = owned[static_cast<size_t>(index)];
    for (int round = 0; round < kRounds; ++round) {
      // Keys "PATH" + owner byte + a few shapes: siblings of one node,
      // leaves sharing long prefixes (chains), one that splits a header.
      std::string key = "PATH";
      key.push_back(static_cast<char>('A' + index));
      switch (rng() % 3) {
        case 0:
          key.push_back(static_cast<char>('a' + rng() % 4));
          break;
        case 1:
          key += "longshared";
          key.push_back(static_cast<char>('a' + rng() % 2));
          break;
        default:
          key = "PA" + std::string(1, static_cast<char>('a' + index)) + "X";
          break;
      }
      key = Padded(key);
      const uint64_t value = rng();
      if (mine.count(key) == 0 || rng() % 2 == 0) {
        DMIDX_RETURN_IF_ERROR(setup.trees[client]->Insert(c, key, value));
        mine[key] = value;
      } else {
        DMIDX_RETURN_IF_ERROR(setup.trees[client]->Delete(c, key));
        mine.erase(key);
      }
      uint64_t found = 0;
      const Status status = setup.trees[client]->Lookup(c, key, &found);
      if (mine.count(key) == 1) {
        if (!status.ok()) return Status::Internal("own key lost: " + status.ToString());
        if (found != mine[key]) return Status::Internal("own key has another value");
      } else if (!status.IsNotFound()) {
        return Status::Internal("own deleted key still found: " + status.ToString());
      }
    }
    return Status::Ok();
  });
  for (const Status& status : results)
    EXPECT_TRUE(status.ok()) << status.ToString();
  std::map<std::string, uint64_t> model;
  for (const auto& mine : owned)
    model.insert(mine.begin(), mine.end());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeEquals(setup, model));
  uint64_t deletes = 0;
  for (auto& tree : setup.trees)
    deletes += tree->stats()[IndexOp::kDelete].operations;
  EXPECT_GT(deletes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Nodes, RadixRaceTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "adaptive" : "fixed_size";
                         });

}  // namespace
}  // namespace dmidx

namespace dmidx {
namespace {

// Hot keys, every technique off (out-of-place leaves, fixed-size nodes):
// zipf 0.99 inserts, updates and deletes of 16 keys from every context of
// three compute nodes; the tree must stay sound (no key reachable twice,
// every invariant), and lookups and a scan must agree on every key.
TEST(RadixHotKeysTest, OutOfPlaceChangesKeepOneLeafPerKey) {
  Watchdog watchdog(std::chrono::seconds(240));
  const uint64_t seed = testing::TestSeed(23);
  Cluster3 setup = Open(seed, RadixOptions::Baseline());
  const ClientOptions shape{.threads = kThreads, .coroutines_per_thread = kCoroutines};
  const testing::Zipf zipf(16, 0.99);
  const std::vector<Status> results = RunClients(setup.client_list, [&](int client, Context& c) {
    std::mt19937_64 rng(seed * 977 +
                        static_cast<uint64_t>(testing::ContextIndex(client, c, shape)));
    for (int i = 0; i < 400; ++i) {
      const std::string key = Padded(EncodeUint64Key(zipf(rng)));
      const uint64_t dice = rng() % 10;
      Status status;
      if (dice < 5) {
        status = setup.trees[client]->Insert(c, key, rng());
      } else if (dice < 8) {
        status = setup.trees[client]->Update(c, key, rng());
      } else {
        status = setup.trees[client]->Delete(c, key);
      }
      if (!status.ok() && !status.IsNotFound()) return status;
    }
    return Status::Ok();
  });
  for (const Status& status : results)
    EXPECT_TRUE(status.ok()) << status.ToString();
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(setup.clients[0]->NewBlockingContext(&ctx).ok());
  const TreeShape tree = RadixTestPeer::Walk(*setup.trees[0], *ctx);
  for (const std::string& error : tree.errors)
    ADD_FAILURE() << error;
  for (size_t i = 1; i < tree.keys.size(); ++i) {
    EXPECT_LT(tree.keys[i - 1], tree.keys[i]) << "a key reachable twice, or out of order";
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(setup.trees[1]->Scan(*ctx, std::string(kKeyBytes, '\0'), 100, &all).ok());
  EXPECT_EQ(all.size(), tree.keys.size());
  for (uint64_t k = 0; k < 16; ++k) {
    const std::string key = Padded(EncodeUint64Key(k));
    const bool walked = std::find(tree.keys.begin(), tree.keys.end(), key) != tree.keys.end();
    const bool scanned =
        std::any_of(all.begin(), all.end(), [&](const KeyValue& pair) { return pair.key == key; });
    for (auto& handle : setup.trees) {
      uint64_t value = 0;
      const Status status = handle->Lookup(*ctx, key, &value);
      EXPECT_EQ(status.ok(), walked) << "key " << k << ": " << status.ToString();
    }
    EXPECT_EQ(scanned, walked) << "key " << k;
  }
  if (::testing::Test::HasFailure()) {
    setenv("DMIDX_WALK_DEBUG", "1", 1);
    (void)RadixTestPeer::Walk(*setup.trees[0], *ctx);
  }
}

}  // namespace
}  // namespace dmidx
