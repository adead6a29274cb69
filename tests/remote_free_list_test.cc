// The shared free lists in remote memory (lib/runtime/remote_free_list.h):
// their words, bundles moving between compute nodes, the races a pop can
// lose (a header torn by a reuse, ABA), deaths and failed batches between
// round trips, and many threads and coroutines at once on `local` and
// `sim`. A test-side ledger holds every object some context holds, and an
// object taken that the ledger already holds fails the test.
#include "lib/runtime/remote_free_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fault_injector.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"
#include "testing/sanitizers.h"

namespace dmidx::runtime {
namespace {

using fabric::Op;
using fabric::OpCode;
using fabric::RemoteAddress;

constexpr uint64_t kObjectBytes = 128;  // a bundle of up to 15
constexpr uint32_t kCapacity = 15;
constexpr uint64_t kPoolBytes = 16 << 20;

// Every object some context holds, keyed by raw address.
class Ledger {
 public:
  // False when `object` is held already: it was handed out twice.
  bool Take(RemoteAddress object) {
    std::lock_guard lock(mutex_);
    return held_.insert(object.raw()).second;
  }
  void Give(RemoteAddress object) {
    std::lock_guard lock(mutex_);
    held_.erase(object.raw());
  }
  size_t held() const {
    std::lock_guard lock(mutex_);
    return held_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::set<uint64_t> held_;
};

std::set<RemoteAddress> AsSet(const std::vector<RemoteAddress>& objects) {
  return {objects.begin(), objects.end()};
}

// A cluster of one memory node and `clients` clients with a blocking
// context each, and a RemoteFreeLists per blocking context.
class FreeListRig {
 public:
  FreeListRig(FabricBackend backend, int clients, bool local_faults = false) {
    ClusterOptions options =
        testing::SmallLocalCluster(1, kPoolBytes, local_faults, std::chrono::microseconds(5));
    options.backend = backend;
    EXPECT_TRUE(Cluster::Open(options, &cluster_).ok());
    for (int i = 0; i < clients; ++i) {
      clients_.emplace_back();
      EXPECT_TRUE(cluster_->NewClient({}, &clients_.back()).ok());
      contexts_.emplace_back();
      EXPECT_TRUE(clients_.back()->NewBlockingContext(&contexts_.back()).ok());
      lists_.push_back(NewLists(ctx(i)));
    }
  }
  ~FreeListRig() {
    lists_.clear();
    contexts_.clear();
    clients_.clear();
  }

  static std::unique_ptr<RemoteFreeLists> NewLists(ContextImpl& ctx) {
    RemoteFreeLists::PageSource pages{
        [&ctx](uint16_t node) { return ctx.allocator().Allocate(kDirectoryPageBytes, 64, node); },
        [&ctx](RemoteAddress page) { (void)ctx.allocator().Free(page, kDirectoryPageBytes); }};
    return std::make_unique<RemoteFreeLists>(ctx.worker().client().cluster().controls(), pages);
  }

  Cluster& cluster() { return *cluster_; }
  Client& client(int i) { return *clients_[i]; }
  ContextImpl& ctx(int i) { return ContextImpl::From(*contexts_[i]); }
  RemoteFreeLists& lists(int i) { return *lists_[i]; }
  uint32_t id(int i) { return clients_[i]->compute_node_id(); }
  fabric::FaultInjector& faults() {
    return *static_cast<ClusterImpl&>(*cluster_).fabric().faults();
  }

  // `count` fresh objects, carved by client `i` without the lists.
  std::vector<RemoteAddress> Carve(int i, int count) {
    std::vector<RemoteAddress> objects;
    for (int n = 0; n < count; ++n)
      objects.push_back(*ctx(i).allocator().Allocate(kObjectBytes, 64, 0));
    return objects;
  }
  void Push(int i, const std::vector<RemoteAddress>& bundle) {
    const auto [outcome, status] = lists(i).Push(ctx(i), 0, kObjectBytes, bundle);
    ASSERT_EQ(outcome, RemoteFreeLists::PushOutcome::kPushed) << status.ToString();
  }
  std::vector<RemoteAddress> Pop(int i) {
    std::vector<RemoteAddress> bundle;
    const Status popped = lists(i).Pop(ctx(i), 0, kObjectBytes, bundle);
    EXPECT_TRUE(popped.ok()) << popped.ToString();
    return bundle;
  }
  // Pops everything through client `i`; fails the test on a duplicate.
  std::vector<RemoteAddress> Drain(int i) {
    std::vector<RemoteAddress> all;
    for (std::vector<RemoteAddress> bundle = Pop(i); !bundle.empty(); bundle = Pop(i))
      all.insert(all.end(), bundle.begin(), bundle.end());
    EXPECT_EQ(AsSet(all).size(), all.size()) << "an object came off the list twice";
    return all;
  }
  ListHead Head(int i) {
    const RemoteAddress word = *lists(i).HeadForTesting(ctx(i), 0, kObjectBytes);
    return ListHead::Of(*ctx(i).ReadWord(word));
  }

 private:
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<std::unique_ptr<RemoteFreeLists>> lists_;
};

TEST(ListHeadTest, WordsRoundTripAndTagsWrap) {
  const ListHead head{uint64_t{1} << 46, 77};
  EXPECT_EQ(ListHead::Of(head.word()).offset, head.offset);
  EXPECT_EQ(ListHead::Of(head.word()).tag, 77u);
  const ListHead top{RemoteAddress::kMaxOffset & ~uint64_t{63}, (1u << kHeadTagBits) - 1};
  EXPECT_EQ(ListHead::Of(top.word()).offset, top.offset);
  EXPECT_EQ(ListHead::Of(top.word()).tag, top.tag);
  const ListHead wrapped = top.Next(64);
  EXPECT_EQ(wrapped.tag, 0u);
  EXPECT_EQ(wrapped.offset, 64u);
  EXPECT_TRUE(ListHead::Of(0).empty());
}

TEST(ListHeadTest, BundlesFitTheirFirstObject) {
  EXPECT_EQ(RemoteFreeLists::BundleCapacity(64), 7u);
  EXPECT_EQ(RemoteFreeLists::BundleCapacity(kObjectBytes), kCapacity);
  EXPECT_EQ(RemoteFreeLists::BundleCapacity(4096), kMaxBundleObjects);
  for (uint64_t size = kMinListObjectBytes; size <= 1024; size += 8) {
    EXPECT_LE(8 * (kBundleFixedWords + RemoteFreeLists::BundleCapacity(size) - 1), size) << size;
  }
  EXPECT_TRUE(RemoteFreeLists::Shareable(RemoteAddress::Pool(0, 8192), 64));
  EXPECT_FALSE(RemoteFreeLists::Shareable(RemoteAddress::Pool(0, 8192 + 8), 64));
  EXPECT_FALSE(RemoteFreeLists::Shareable(RemoteAddress::Pool(0, 8192), 56));
  EXPECT_FALSE(RemoteFreeLists::Shareable(RemoteAddress::Lock(0, 8192), 64));
}

class FreeListTest : public ::testing::TestWithParam<FabricBackend> {};

TEST_P(FreeListTest, AnotherComputeNodePopsWhatOnePushed) {
  FreeListRig rig(GetParam(), 2);
  EXPECT_TRUE(rig.Pop(1).empty()) << "a new list is empty";
  const std::vector<RemoteAddress> first = rig.Carve(0, 5), second = rig.Carve(0, kCapacity);
  rig.Push(0, first);
  rig.Push(0, second);
  EXPECT_EQ(rig.Head(1).tag, 2u) << "each push raises the tag";
  EXPECT_EQ(rig.Head(1).offset, second[0].offset());
  // Last in, first out, one whole bundle per pop.
  EXPECT_EQ(AsSet(rig.Pop(1)), AsSet(second));
  EXPECT_EQ(AsSet(rig.Pop(1)), AsSet(first));
  EXPECT_TRUE(rig.Pop(1).empty());
  EXPECT_EQ(rig.Head(0).tag, 4u) << "each pop raises the tag";
  // Both clients found the same directory entry.
  EXPECT_EQ(*rig.lists(0).HeadForTesting(rig.ctx(0), 0, kObjectBytes),
            *rig.lists(1).HeadForTesting(rig.ctx(1), 0, kObjectBytes));
}

TEST_P(FreeListTest, PopAndPushCostAConstantNumberOfRoundTrips) {
  FreeListRig rig(GetParam(), 1);
  const std::vector<RemoteAddress> bundle = rig.Carve(0, kCapacity);
  rig.Push(0, bundle);  // finds the directory
  std::vector<RemoteAddress> taken;
  uint64_t before = rig.ctx(0).counters().round_trips;
  ASSERT_TRUE(rig.lists(0).Pop(rig.ctx(0), 0, kObjectBytes, taken).ok());
  EXPECT_EQ(taken.size(), kCapacity);
  EXPECT_EQ(rig.ctx(0).counters().round_trips - before, 3u) << "READ head, READ header, CAS";
  before = rig.ctx(0).counters().round_trips;
  EXPECT_EQ(rig.lists(0).Push(rig.ctx(0), 0, kObjectBytes, taken).first,
            RemoteFreeLists::PushOutcome::kPushed);
  EXPECT_EQ(rig.ctx(0).counters().round_trips - before, 1u) << "WRITE + CAS from the known head";
}

TEST_P(FreeListTest, SizesGetEntriesOfTheirOwn) {
  FreeListRig rig(GetParam(), 2);
  std::vector<RemoteAddress> small = rig.Carve(0, 3);
  std::vector<RemoteAddress> big;
  for (int i = 0; i < 3; ++i)
    big.push_back(*rig.ctx(0).allocator().Allocate(512, 64, 0));
  ASSERT_EQ(rig.lists(0).Push(rig.ctx(0), 0, 512, big).first,
            RemoteFreeLists::PushOutcome::kPushed);
  rig.Push(0, small);
  std::vector<RemoteAddress> got;
  ASSERT_TRUE(rig.lists(1).Pop(rig.ctx(1), 0, 512, got).ok());
  EXPECT_EQ(AsSet(got), AsSet(big));
  EXPECT_EQ(AsSet(rig.Pop(1)), AsSet(small));
  EXPECT_NE(*rig.lists(1).HeadForTesting(rig.ctx(1), 0, 512),
            *rig.lists(1).HeadForTesting(rig.ctx(1), 0, kObjectBytes));
}

TEST_P(FreeListTest, PushRejectsWhatCannotGoOnTheList) {
  FreeListRig rig(GetParam(), 1);
  std::vector<RemoteAddress> too_many = rig.Carve(0, kCapacity + 1);
  EXPECT_EQ(rig.lists(0).Push(rig.ctx(0), 0, kObjectBytes, too_many).first,
            RemoteFreeLists::PushOutcome::kKept);
  const std::vector<RemoteAddress> misaligned = {too_many[0] + 8};
  EXPECT_EQ(rig.lists(0).Push(rig.ctx(0), 0, kObjectBytes, misaligned).first,
            RemoteFreeLists::PushOutcome::kKept);
  EXPECT_TRUE(rig.Pop(0).empty());
}

// Client 1 pushes two bundles of 4 (`below`, then `top`); client 0 pops
// while `race` runs once, just before the first batch of client 0's that
// `when` picks reaches the fabric. Returns what client 0 popped.
struct TwoBundles {
  std::vector<RemoteAddress> below, top;
};
std::vector<RemoteAddress> PopRacing(FreeListRig& rig, TwoBundles& bundles,
                                     const std::function<bool(std::span<const Op>)>& when,
                                     const std::function<void()>& race) {
  bundles.below = rig.Carve(1, 4);
  bundles.top = rig.Carve(1, 4);
  rig.Push(1, bundles.below);
  rig.Push(1, bundles.top);
  std::vector<Op> posts;
  bool raced = false;
  rig.ctx(0).RecordPostsForTesting(&posts);
  rig.ctx(0).SetPostHookForTesting([&](std::span<const Op> ops) {
    if (raced || !when(ops)) return;
    raced = true;
    race();
  });
  std::vector<RemoteAddress> got = rig.Pop(0);
  rig.ctx(0).RecordPostsForTesting(nullptr);
  EXPECT_TRUE(raced);
  return got;
}

// The pop's header READ is overtaken: another node pops the bundle and
// writes into its first object a header that names objects it holds. The
// CAS fails (the tag moved) and none of them is handed out.
TEST_P(FreeListTest, AHeaderReadAfterTheBundleWasReusedIsNeverTaken) {
  FreeListRig rig(GetParam(), 2);
  TwoBundles bundles;
  std::vector<RemoteAddress> stolen;
  const auto header_read = [&](std::span<const Op> ops) {
    return ops[0].code == OpCode::kRead && ops[0].remote == bundles.top[0];
  };
  const std::vector<RemoteAddress> got = PopRacing(rig, bundles, header_read, [&] {
    const std::vector<RemoteAddress>& top = bundles.top;
    stolen = rig.Pop(1);
    // A plausible bundle of the thief's own objects, its next the top's.
    ScratchArena::Scope scope(rig.ctx(1).arena());
    uint64_t* fake = *rig.ctx(1).arena().Words(5);
    fake[0] = top[0].offset();
    fake[1] = kObjectBytes << 8 | 3;
    fake[2] = top[1].offset();
    fake[3] = top[2].offset();
    const Op write = Op::Write(top[0], fake, 32);
    ASSERT_TRUE(rig.ctx(1).Execute(0, {&write, 1}).ok());
  });
  EXPECT_EQ(AsSet(stolen), AsSet(bundles.top));
  EXPECT_EQ(AsSet(got), AsSet(bundles.below)) << "the pop went on from the head its CAS found";
  EXPECT_TRUE(rig.Pop(1).empty());
}

// ABA: between the pop's READs and its CAS, another node pops the bundle,
// pops the one below, and pushes the first back. The head names the same
// object again, but its tag moved, so the CAS fails and the bundle below
// (now held) is not handed out.
TEST_P(FreeListTest, ABundlePushedBackUnderAPopIsNotTakenWithAStaleNext) {
  FreeListRig rig(GetParam(), 2);
  TwoBundles bundles;
  std::vector<RemoteAddress> held_below;
  const auto cas = [](std::span<const Op> ops) { return ops[0].code == OpCode::kCompareSwap; };
  const std::vector<RemoteAddress> got = PopRacing(rig, bundles, cas, [&] {
    EXPECT_EQ(AsSet(rig.Pop(1)), AsSet(bundles.top));
    held_below = rig.Pop(1);
    rig.Push(1, bundles.top);
    EXPECT_EQ(rig.Head(1).offset, bundles.top[0].offset()) << "the same object heads it again";
  });
  EXPECT_EQ(AsSet(held_below), AsSet(bundles.below));
  EXPECT_EQ(AsSet(got), AsSet(bundles.top)) << "its retry took the bundle as pushed back";
  EXPECT_TRUE(rig.Pop(1).empty());
}

// Which batch of a pop or push a hook is looking at.
bool IsCas(std::span<const Op> ops) {
  return ops.back().code == OpCode::kCompareSwap;
}

// A compute node that dies before its pop's CAS leaves the list whole; one
// whose CAS landed and whose completion was lost loses that bundle only.
TEST_P(FreeListTest, APopCutShortLosesAtMostItsBundle) {
  for (const bool landed : {false, true}) {
    SCOPED_TRACE(landed ? "the CAS landed" : "the node died before its CAS");
    FreeListRig rig(GetParam(), 2);
    const std::vector<RemoteAddress> below = rig.Carve(1, 5), top = rig.Carve(1, 5);
    rig.Push(1, below);
    rig.Push(1, top);
    std::vector<Op> posts;
    rig.ctx(0).RecordPostsForTesting(&posts);
    rig.ctx(0).SetPostHookForTesting([&](std::span<const Op> ops) {
      if (!IsCas(ops)) return;
      if (landed) {
        ASSERT_TRUE(rig.faults().FailNextBatchesAfterApplying(0, 1).ok());
      } else {
        rig.faults().KillComputeNode(rig.id(0));
      }
    });
    std::vector<RemoteAddress> got;
    EXPECT_FALSE(rig.lists(0).Pop(rig.ctx(0), 0, kObjectBytes, got).ok());
    EXPECT_TRUE(got.empty()) << "a pop that failed hands nothing out";
    rig.ctx(0).RecordPostsForTesting(nullptr);
    const std::vector<RemoteAddress> left = rig.Drain(1);
    if (landed) {
      EXPECT_EQ(AsSet(left), AsSet(below)) << "the top bundle is lost, nothing else";
    } else {
      std::vector<RemoteAddress> all = below;
      all.insert(all.end(), top.begin(), top.end());
      EXPECT_EQ(AsSet(left), AsSet(all)) << "nothing is lost";
    }
  }
}

// A push whose batch failed: given up by its pusher, and on the list at
// most once (when it landed); a push whose node died between its two
// batches (a first CAS from a stale guess failed) leaves the list as it
// was, its header WRITE unreachable.
TEST_P(FreeListTest, APushCutShortIsOnTheListOnceOrNotAtAll) {
  enum class Cut { kFailed, kAppliedThenFailed, kDiedBeforeTheRetry };
  for (const Cut cut : {Cut::kFailed, Cut::kAppliedThenFailed, Cut::kDiedBeforeTheRetry}) {
    SCOPED_TRACE(static_cast<int>(cut));
    FreeListRig rig(GetParam(), 2);
    const std::vector<RemoteAddress> resident = rig.Carve(1, 5), pushed = rig.Carve(0, 5);
    if (cut == Cut::kDiedBeforeTheRetry) {
      // Client 0 learns the head is empty, then client 1 pushes: client
      // 0's first CAS (from empty) fails.
      EXPECT_TRUE(rig.Pop(0).empty());
      rig.Push(1, resident);
    } else {
      rig.Push(0, resident);  // client 0's next push guesses the head right
    }
    std::vector<Op> posts;
    int batches = 0;
    rig.ctx(0).RecordPostsForTesting(&posts);
    rig.ctx(0).SetPostHookForTesting([&](std::span<const Op> ops) {
      if (!IsCas(ops)) return;
      ++batches;
      if (cut == Cut::kFailed) {
        ASSERT_TRUE(rig.faults().FailNextBatches(0, 1).ok());
      }
      if (cut == Cut::kAppliedThenFailed) {
        ASSERT_TRUE(rig.faults().FailNextBatchesAfterApplying(0, 1).ok());
      }
      if (cut == Cut::kDiedBeforeTheRetry && batches == 2) {
        rig.faults().KillComputeNode(rig.id(0));
      }
    });
    const auto [outcome, status] = rig.lists(0).Push(rig.ctx(0), 0, kObjectBytes, pushed);
    rig.ctx(0).RecordPostsForTesting(nullptr);
    EXPECT_FALSE(status.ok());
    std::vector<RemoteAddress> expected = resident;
    if (cut == Cut::kAppliedThenFailed) {
      EXPECT_EQ(outcome, RemoteFreeLists::PushOutcome::kLost);
      expected.insert(expected.end(), pushed.begin(), pushed.end());
    } else if (cut == Cut::kFailed) {
      EXPECT_EQ(outcome, RemoteFreeLists::PushOutcome::kLost) << "it cannot tell it did not land";
    } else {
      EXPECT_EQ(batches, 2);
      EXPECT_EQ(outcome, RemoteFreeLists::PushOutcome::kKept) << "its retry was never posted";
    }
    EXPECT_EQ(AsSet(rig.Drain(1)), AsSet(expected));
  }
}

std::string BackendName(const ::testing::TestParamInfo<FabricBackend>& param) {
  return param.param == FabricBackend::kLocal ? "local" : "sim";
}

INSTANTIATE_TEST_SUITE_P(Backends, FreeListTest,
                         ::testing::Values(FabricBackend::kLocal, FabricBackend::kSim),
                         BackendName);

// Many clients, threads and coroutines push and pop one list at once,
// with the local fabric's delays and torn READs and WRITEs, and with
// batches failing at random. Every object is in one place at a time: held
// (the ledger), on the list, or lost by a failed batch, which the pushers
// count and the pops that failed bound.
struct StressCase {
  FabricBackend backend;
  bool failures;
};

class FreeListStressTest : public ::testing::TestWithParam<StressCase> {};

TEST_P(FreeListStressTest, ManyContextsNeverHandOutAnObjectTwice) {
  const StressCase param = GetParam();
  constexpr int kClients = 3;
  const ClientOptions shape{.threads = 2, .coroutines_per_thread = 3};
  const int contexts = kClients * 2 * 3;
  const int rounds = testing::kAnySanitizer ? 40 : 200;
  constexpr int kObjectsPerContext = 2 * kCapacity;

  FreeListRig rig(param.backend, 1, /*local_faults=*/param.backend == FabricBackend::kLocal);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back();
    ASSERT_TRUE(rig.cluster().NewClient(shape, &clients.back()).ok());
  }
  Ledger ledger;
  std::vector<std::vector<RemoteAddress>> held(contexts);
  for (int c = 0; c < contexts; ++c) {
    held[c] = rig.Carve(0, kObjectsPerContext);
    for (RemoteAddress object : held[c])
      ASSERT_TRUE(ledger.Take(object));
  }
  const size_t total = size_t{contexts} * kObjectsPerContext;
  if (param.failures) {
    fabric::RandomBatchFailures failures;
    failures.seed = testing::TestSeed(27);
    failures.probability = 0.02;
    ASSERT_TRUE(rig.faults().FailBatchesAtRandom(failures).ok());
  }
  std::mutex counts_mutex;
  uint64_t lost_by_pushes = 0, failed_pops = 0, contended_pops = 0, pops = 0, pushes = 0;
  std::vector<Client*> raw;
  for (auto& client : clients)
    raw.push_back(client.get());
  const std::vector<Status> results =
      testing::RunClients(raw, [&](int client, Context& context) -> Status {
        ContextImpl& ctx = ContextImpl::From(context);
        const int index = testing::ContextIndex(client, context, shape);
        std::vector<RemoteAddress>& mine = held[index];
        std::unique_ptr<RemoteFreeLists> lists = FreeListRig::NewLists(ctx);
        std::mt19937_64 random(index);
        uint64_t my_lost = 0, my_failed_pops = 0, my_contended_pops = 0, my_pops = 0, my_pushes = 0;
        for (int round = 0; round < rounds; ++round) {
          if (!mine.empty() && random() % 2 == 0) {
            const size_t count = std::min<size_t>(mine.size(), 1 + random() % kCapacity);
            std::vector<RemoteAddress> bundle(mine.end() - count, mine.end());
            mine.resize(mine.size() - count);
            // Out of the ledger before the list may hand them to others.
            for (RemoteAddress object : bundle)
              ledger.Give(object);
            const auto [outcome, status] = lists->Push(ctx, 0, kObjectBytes, bundle);
            ++my_pushes;
            if (outcome == RemoteFreeLists::PushOutcome::kKept) {
              for (RemoteAddress object : bundle)
                EXPECT_TRUE(ledger.Take(object)) << object.ToString() << " kept, yet taken";
              mine.insert(mine.end(), bundle.begin(), bundle.end());
            } else if (outcome == RemoteFreeLists::PushOutcome::kLost) {
              my_lost += bundle.size();
            }
          } else {
            std::vector<RemoteAddress> bundle;
            const Status popped = lists->Pop(ctx, 0, kObjectBytes, bundle);
            ++my_pops;
            // Aborted (a contended list) took nothing; any other error may
            // have lost the bundle its CAS took.
            if (popped.IsAborted()) {
              ++my_contended_pops;
            } else if (!popped.ok()) {
              ++my_failed_pops;
              if (!param.failures) ADD_FAILURE() << popped.ToString();
            }
            for (RemoteAddress object : bundle) {
              EXPECT_TRUE(ledger.Take(object)) << object.ToString() << " handed out twice";
              mine.push_back(object);
            }
          }
        }
        std::lock_guard lock(counts_mutex);
        lost_by_pushes += my_lost;
        failed_pops += my_failed_pops;
        contended_pops += my_contended_pops;
        pops += my_pops;
        pushes += my_pushes;
        return Status::Ok();
      });
  rig.faults().StopRandomFailures();
  for (const Status& result : results)
    EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_GT(pushes, 0u);
  EXPECT_LT(contended_pops, pops / 4) << "most pops get through, even on one hot list";
  size_t still_held = 0;
  for (const auto& objects : held)
    still_held += objects.size();
  EXPECT_EQ(ledger.held(), still_held);
  std::vector<RemoteAddress> left = rig.Drain(0);
  for (RemoteAddress object : left)
    EXPECT_TRUE(ledger.Take(object)) << object.ToString() << " is on the list and held";
  const size_t accounted = still_held + left.size();
  if (!param.failures) {
    EXPECT_EQ(accounted, total) << "nothing is lost without failures";
    EXPECT_EQ(lost_by_pushes, 0u);
    EXPECT_EQ(failed_pops, 0u);
  } else {
    EXPECT_GT(lost_by_pushes + failed_pops, 0u) << "failures were injected";
    EXPECT_LE(accounted, total - lost_by_pushes) << "a bundle given up came back";
    EXPECT_GE(accounted + kCapacity * failed_pops, total - lost_by_pushes)
        << "more was lost than the failed pops can have taken";
  }
}

std::string StressName(const ::testing::TestParamInfo<StressCase>& param) {
  return std::string(param.param.backend == FabricBackend::kLocal ? "local" : "sim") +
         (param.param.failures ? "_failures" : "");
}

INSTANTIATE_TEST_SUITE_P(Backends, FreeListStressTest,
                         ::testing::Values(StressCase{FabricBackend::kLocal, false},
                                           StressCase{FabricBackend::kLocal, true},
                                           StressCase{FabricBackend::kSim, false},
                                           StressCase{FabricBackend::kSim, true}),
                         StressName);

}  // namespace
}  // namespace dmidx::runtime
