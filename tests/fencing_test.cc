// Fencing a compute node (Fabric::FenceComputeNode) and cutting one off
// (FaultInjector::SetComputeNodeCutOff): once a fence returns nothing of
// the node lands, every op it posted or posts reports StatusDetail::kFenced
// naming it, and other compute nodes go on. Instantiated per backend; one
// without fault injection (verbs) skips, and its fence is checked apart
// (verbs_fencing_test.cc, on a real device): there the fence is the
// memory-node daemons', and what the fenced node sees is what verbs lets
// it see (verbs_fabric.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/fault_injector.h"
#include "lib/fabric/op.h"
#include "tests/fabric_test_backends.h"
#include "tests/fabric_test_client.h"
#include "tests/fault_injection_fixture.h"

namespace dmidx::fabric_test {
namespace {

using fabric::Completion;
using fabric::Op;
using fabric::RemoteAddress;

// A notifier whose Notify() blocks until Release(): a completion with it
// pauses whoever finishes its batch inside the apply (on `local`, holding
// the connection's mutex).
class BlockingNotifier final : public fabric::Notifier {
 public:
  void Notify() override {
    entered_.store(true, std::memory_order_release);
    while (!released_.load(std::memory_order_acquire))
      std::this_thread::yield();
  }
  bool entered() const { return entered_.load(std::memory_order_acquire); }
  void Release() { released_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> entered_{false}, released_{false};
};

class FencingTest : public FaultInjectionFixture {
 protected:
  Status Fence(uint32_t compute_node) { return backend_->fabric().FenceComputeNode(compute_node); }

  // Polls `client` `polls` times (virtual time goes on under sim).
  static void PollFor(TestClient& client, int polls) {
    for (int i = 0; i < polls; ++i)
      client.endpoint().Poll();
  }

  // Connects cut_ (kComputeNode) and survivor_ (kOtherComputeNode), cuts
  // kComputeNode off, and posts from it a batch to memory node 0 signaled
  // by waiting_ (a WRITE of `value` at x_, an FAA of 2 at x_ + 8) and an
  // unsignaled WRITE of `value` at y_ on node 1; polls a while, and checks
  // that neither completed nor landed.
  void PostWhileCutOff(uint64_t value) {
    cut_ = Connect(kComputeNode);
    survivor_ = Connect(kOtherComputeNode);
    ASSERT_NE(cut_, nullptr);
    ASSERT_NE(survivor_, nullptr);
    x_ = Chunk(0);
    y_ = Chunk(1);
    faults_->SetComputeNodeCutOff(kComputeNode, true);
    uint64_t* w = cut_->words();
    w[0] = value;
    ASSERT_OK(cut_->Post(0, {Op::Write(x_, &w[0], 8), Op::FetchAdd(x_ + 8, &w[1], 2)}, &waiting_));
    ASSERT_OK(cut_->Post(1, {Op::Write(y_, &w[0], 8)}, nullptr));
    PollFor(*cut_, 2000);
    EXPECT_FALSE(waiting_.done()) << "a cut-off node's batch completed";
    EXPECT_EQ(survivor_->ReadWord(x_), 0u) << "a cut-off node's WRITE landed";
    EXPECT_EQ(survivor_->ReadWord(x_ + 8), 0u);
    EXPECT_EQ(survivor_->ReadWord(y_), 0u);
  }

  // Once kComputeNode, cut off with PostWhileCutOff's batches held, was
  // stopped (fenced or killed) and not brought back: the signaled batch
  // completes with a status `stopped` accepts, so does the next post (the
  // unsignaled batch's), nothing landed, and Quiesce() and the endpoint's
  // destructor return.
  template <typename StoppedStatus>
  void ExpectHeldBatchesFlushed(StoppedStatus stopped) {
    cut_->Wait(waiting_);
    EXPECT_TRUE(stopped(waiting_.status()));
    cut_->endpoint().Quiesce();
    EXPECT_TRUE(stopped(cut_->WriteWord(x_ + 16, 1)));
    cut_.reset();  // still cut off
    EXPECT_EQ(faults_->counters().dropped_batches, 2u) << CountsNow();
    EXPECT_EQ(survivor_->ReadWord(x_), 0u) << "a held batch landed after the stop";
    EXPECT_EQ(survivor_->ReadWord(x_ + 8), 0u);
    EXPECT_EQ(survivor_->ReadWord(x_ + 16), 0u);
    EXPECT_EQ(survivor_->ReadWord(y_), 0u);
  }

  // Brings the node back even after a failed assertion, before the
  // clients go: their Quiesce() would wait for that.
  void TearDown() override {
    if (faults_ != nullptr) faults_->SetComputeNodeCutOff(kComputeNode, false);
  }

  // PostWhileCutOff's completion, clients and addresses; the completion
  // first, so the clients' Quiesce() finishes it before it goes.
  Completion waiting_;
  std::unique_ptr<TestClient> cut_, survivor_;
  RemoteAddress x_, y_;
};

TEST_P(FencingTest, FencedNodesPostsFailAtOnceAndChangeNothing) {
  BUILD_OR_SKIP();
  auto fenced = Connect(kComputeNode);
  auto survivor = Connect(kOtherComputeNode);
  ASSERT_NE(fenced, nullptr);
  ASSERT_NE(survivor, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);
  ASSERT_OK(fenced->WriteWord(x, 5));

  ASSERT_OK(Fence(kComputeNode));
  uint64_t* w = fenced->words();
  w[0] = 9;
  w[1] = 0;
  Completion completion;
  EXPECT_TRUE(FencedStatus(
      fenced->Post(0, {Op::Write(x + 8, &w[0], 8), Op::CompareSwap(x, &w[1], 5, 6)}, &completion),
      kComputeNode));
  ASSERT_TRUE(completion.done()) << "a refused post must finish its completion";
  EXPECT_TRUE(FencedStatus(completion.status(), kComputeNode));
  EXPECT_TRUE(FencedStatus(fenced->Post(1, {Op::Write(y, &w[0], 8)}, nullptr), kComputeNode));
  EXPECT_TRUE(FencedStatus(fenced->Run(0, {Op::FetchAdd(x + 16, &w[1], 1)}), kComputeNode));
  EXPECT_TRUE(FencedStatus(fenced->WriteWord(x, 1), kComputeNode));

  // A new endpoint of the fenced node is fenced too.
  auto reopened = Connect(kComputeNode);
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(FencedStatus(reopened->WriteWord(y + 8, 1), kComputeNode));

  EXPECT_EQ(survivor->ReadWord(x), 5u) << "what the node wrote before the fence stays";
  EXPECT_EQ(survivor->ReadWord(x + 8), 0u);
  EXPECT_EQ(survivor->ReadWord(x + 16), 0u);
  EXPECT_EQ(survivor->ReadWord(y), 0u);
  EXPECT_EQ(survivor->ReadWord(y + 8), 0u);
  EXPECT_EQ(faults_->counters().dead_posts, 5u) << CountsNow();
}

TEST_P(FencingTest, QueuedBatchesNeverLandAndReportFenced) {
  BUILD_OR_SKIP(WithDelay(std::chrono::milliseconds(20)));
  SKIP_UNLESS_OPS_WAIT_FOR_POLL();
  auto fenced = Connect(kComputeNode);
  auto fenced_too = Connect(kComputeNode);  // a second thread of the same node
  auto survivor = Connect(kOtherComputeNode);
  ASSERT_NE(fenced, nullptr);
  ASSERT_NE(fenced_too, nullptr);
  ASSERT_NE(survivor, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);

  uint64_t* w = fenced->words();
  w[0] = 41;
  Completion first, elsewhere, second;
  ASSERT_OK(fenced->Post(0, {Op::Write(x, &w[0], 8), Op::FetchAdd(x + 8, &w[1], 1)}, &first));
  ASSERT_OK(fenced->Post(0, {Op::Write(x + 16, &w[0], 8)}, nullptr));
  ASSERT_OK(fenced->Post(1, {Op::Write(y, &w[0], 8)}, &elsewhere));
  ASSERT_OK(fenced_too->Post(0, {Op::CompareSwap(x + 24, &fenced_too->words()[0], 0, 1)}, &second));
  // Nobody polled: everything is still queued when the fence comes.
  ASSERT_OK(Fence(kComputeNode));
  fenced->endpoint().Quiesce();
  fenced_too->endpoint().Quiesce();
  for (const Completion* completion : {&first, &elsewhere, &second}) {
    ASSERT_TRUE(completion->done());
    EXPECT_TRUE(FencedStatus(completion->status(), kComputeNode));
  }
  EXPECT_TRUE(FencedStatus(fenced->WriteWord(x, 1), kComputeNode))
      << "the dropped unsignaled batch is reported by the next post";
  EXPECT_EQ(faults_->counters().dropped_batches, 4u) << CountsNow();

  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(survivor->ReadWord(x + 8 * i), 0u) << "word " << i << " of a fenced node landed";
  EXPECT_EQ(survivor->ReadWord(y), 0u);
}

TEST_P(FencingTest, OtherComputeNodesKeepWorking) {
  BUILD_OR_SKIP(WithDelay(std::chrono::milliseconds(20)));
  auto fenced = Connect(kComputeNode);
  auto survivor = Connect(kOtherComputeNode);
  ASSERT_NE(fenced, nullptr);
  ASSERT_NE(survivor, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);
  uint64_t* s = survivor->words();
  s[0] = 42;
  Completion queued;
  ASSERT_OK(survivor->Post(0, {Op::Write(x, &s[0], 8)}, &queued));
  ASSERT_OK(Fence(kComputeNode));

  survivor->Wait(queued);
  EXPECT_OK(queued.status()) << "a survivor's batch queued across the fence";
  s[1] = 0;
  EXPECT_OK(survivor->Run(0, {Op::CompareSwap(x, &s[1], 42, 43), Op::Write(x + 8, &s[0], 8)}));
  EXPECT_EQ(s[1], 42u);
  EXPECT_OK(survivor->WriteWord(y, 7));
  EXPECT_EQ(survivor->ReadWord(x), 43u);
  EXPECT_EQ(survivor->ReadWord(x + 8), 42u);
  EXPECT_EQ(survivor->ReadWord(y), 7u);
  EXPECT_TRUE(FencedStatus(fenced->WriteWord(x, 1), kComputeNode));
  EXPECT_EQ(survivor->ReadWord(x), 43u);
}

TEST_P(FencingTest, FencingTwiceIsFineAndADeadNodeStaysDead) {
  BUILD_OR_SKIP();
  auto fenced = Connect(kComputeNode);
  auto dead = Connect(kOtherComputeNode);
  ASSERT_NE(fenced, nullptr);
  ASSERT_NE(dead, nullptr);
  const RemoteAddress x = Chunk(0);
  ASSERT_OK(Fence(kComputeNode));
  ASSERT_OK(Fence(kComputeNode));
  EXPECT_TRUE(FencedStatus(fenced->WriteWord(x, 1), kComputeNode));
  // A fenced node killed later still reports the fence, and a killed node
  // fenced later (a survivor fences a node that really died) its death.
  faults_->KillComputeNode(kComputeNode);
  EXPECT_TRUE(FencedStatus(fenced->WriteWord(x, 1), kComputeNode));
  faults_->KillComputeNode(kOtherComputeNode);
  ASSERT_OK(Fence(kOtherComputeNode));
  const Status died = dead->WriteWord(x, 1);
  EXPECT_TRUE(died.IsUnavailable()) << died.ToString();
  EXPECT_FALSE(IsFenced(died)) << died.ToString();
  // A node fenced before it ever connected is fenced from its first post.
  constexpr uint32_t kLateNode = 9;
  ASSERT_OK(Fence(kLateNode));
  auto late = Connect(kLateNode);
  ASSERT_NE(late, nullptr);
  EXPECT_TRUE(FencedStatus(late->WriteWord(x, 1), kLateNode));
  EXPECT_TRUE(
      backend_->fabric().FenceComputeNode(fabric::Fabric::kUnnamedComputeNode).IsInvalidArgument());
  auto unnamed = Connect(fabric::Fabric::kUnnamedComputeNode);
  ASSERT_NE(unnamed, nullptr);
  EXPECT_OK(unnamed->WriteWord(x + 8, 1));
}

// A fence that lands while another thread applies the node's long torn
// WRITEs returns only once that apply is over: from then on the memory
// they write never changes. Whether the fence lands mid-apply is up to the
// scheduler; `local` has the deterministic test below.
TEST_P(FencingTest, FenceWaitsOutAnApplyInProgress) {
  LocalFabricOptions knobs;
  knobs.torn_writes = true;  // word by word, with yields: a long apply
  BUILD_OR_SKIP(knobs);
  if (GetParam() == "local") GTEST_SKIP() << "local: FenceWaitsOutAnApplyPausedInANotification";
  const RemoteAddress x = Chunk(0);
  constexpr uint32_t kBytes = 32 << 10;
  // Read straight from the memory node, bypassing the fabric.
  memnode::MemoryNode* memory_node = backend_->memory_node(0);
  ASSERT_NE(memory_node, nullptr);
  const uint8_t* memory = memory_node->pool_base() + x.offset();
  std::atomic<bool> started{false};
  std::thread writer([&] {
    auto fenced = Connect(kComputeNode);
    if (fenced == nullptr) return;
    for (uint64_t round = 1;; ++round) {
      for (uint32_t i = 0; i < kBytes / 8; ++i)
        fenced->words()[i] = round;
      const Status status = fenced->Run(0, {Op::Write(x, fenced->words(), kBytes)});
      started.store(true, std::memory_order_release);
      if (!status.ok()) {
        EXPECT_TRUE(FencedStatus(status, kComputeNode));
        return;
      }
    }
  });
  while (!started.load(std::memory_order_acquire))
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_OK(Fence(kComputeNode));
  auto snapshot = [&] {
    std::vector<uint64_t> words(kBytes / 8);
    for (size_t i = 0; i < words.size(); ++i) {
      words[i] = std::atomic_ref<const uint64_t>(reinterpret_cast<const uint64_t*>(memory)[i])
                     .load(std::memory_order_acquire);
    }
    return words;
  };
  const std::vector<uint64_t> at_fence = snapshot();
  writer.join();
  EXPECT_EQ(snapshot(), at_fence) << "the fenced node's WRITE went on landing after the fence";
}

// On `local`, an apply paused in a completion's notification (the
// connection's mutex held, the node's next batch queued behind) holds the
// fence back until it goes on; the queued batch then reports the fence.
TEST_P(FencingTest, FenceWaitsOutAnApplyPausedInANotification) {
  BUILD_OR_SKIP();
  if (GetParam() != "local") GTEST_SKIP() << "applies under the connection's mutex: local only";
  auto fenced = Connect(kComputeNode);
  auto survivor = Connect(kOtherComputeNode);
  ASSERT_NE(fenced, nullptr);
  ASSERT_NE(survivor, nullptr);
  const RemoteAddress x = Chunk(0);
  BlockingNotifier notifier;
  Completion first(&notifier), second;
  uint64_t* w = fenced->words();
  w[0] = 1;
  w[1] = 2;
  ASSERT_OK(fenced->Post(0, {Op::Write(x, &w[0], 8)}, &first));
  ASSERT_OK(fenced->Post(0, {Op::Write(x + 8, &w[1], 8)}, &second));

  // The survivor's poll applies the fenced node's batches, as a NIC serves
  // every queue pair, and stops in the first one's notification.
  std::thread applier([&] {
    while (!notifier.entered())
      survivor->endpoint().Poll();
  });
  while (!notifier.entered())
    std::this_thread::yield();
  Status fence_status = Status::Internal("the fence did not run");
  std::atomic<bool> returned{false};
  std::thread fencer([&] {
    fence_status = Fence(kComputeNode);
    returned.store(true, std::memory_order_release);
  });
  // Once the fence switch is flipped, the fence only has the apply left to
  // wait out; without that wait it would return within microseconds.
  while (faults_->FaultsOf(kComputeNode).stop == fabric::InjectedFault::kNone)
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load(std::memory_order_acquire))
      << "the fence returned while an apply of the node's ops was in progress";
  notifier.Release();
  applier.join();
  fencer.join();
  EXPECT_OK(fence_status);
  fenced->endpoint().Quiesce();
  EXPECT_OK(first.status());
  EXPECT_TRUE(FencedStatus(second.status(), kComputeNode));
  EXPECT_EQ(survivor->ReadWord(x), 1u);
  EXPECT_EQ(survivor->ReadWord(x + 8), 0u) << "the batch queued behind the apply landed";
  EXPECT_EQ(faults_->counters().dropped_batches, 1u) << CountsNow();
}

TEST_P(FencingTest, CutOffNodesBatchesWaitAndLandWhenBroughtBack) {
  BUILD_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(PostWhileCutOff(51));
  EXPECT_OK(survivor_->WriteWord(x_ + 16, 3)) << "other nodes are not cut off";

  faults_->SetComputeNodeCutOff(kComputeNode, false);
  cut_->Wait(waiting_);
  EXPECT_OK(waiting_.status());
  cut_->endpoint().Quiesce();
  EXPECT_EQ(survivor_->ReadWord(x_), 51u);
  EXPECT_EQ(survivor_->ReadWord(x_ + 8), 2u);
  EXPECT_EQ(survivor_->ReadWord(y_), 51u);
  EXPECT_EQ(survivor_->ReadWord(x_ + 16), 3u);
  EXPECT_OK(cut_->WriteWord(x_ + 24, 4));
}

// A stop wins over a cut-off, as a fenced queue pair flushes what it
// holds: fenced while cut off, and never brought back, the node's held
// batches complete with kFenced without landing, and its endpoint can be
// quiesced and destroyed.
TEST_P(FencingTest, CutOffNodeFencedMeanwhileFlushesItsHeldBatches) {
  BUILD_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(PostWhileCutOff(61));
  ASSERT_OK(Fence(kComputeNode));
  ExpectHeldBatchesFlushed([](const Status& status) { return FencedStatus(status, kComputeNode); });
}

// The same for a node killed while cut off: its held batches report its
// death.
TEST_P(FencingTest, CutOffNodeKilledMeanwhileFlushesItsHeldBatches) {
  BUILD_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(PostWhileCutOff(71));
  faults_->KillComputeNode(kComputeNode);
  ExpectHeldBatchesFlushed([](const Status& status) -> ::testing::AssertionResult {
    if (status.IsUnavailable() && !IsFenced(status) &&
        status.message().find("died") != std::string_view::npos) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "expected the node's death, got " << status.ToString();
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, FencingTest, ::testing::ValuesIn(ConformanceBackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace dmidx::fabric_test
