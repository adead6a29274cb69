// Fault injection in the fabric (fault_injector.h): every switch does exactly
// what it says, counted exactly, and traffic it does not name is untouched.
// Instantiated per backend; a backend whose faults() is null skips with the
// reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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
using fabric::FaultCounters;
using fabric::FaultInjector;
using fabric::Op;
using fabric::RemoteAddress;

// True when `status` is Unavailable and its message contains `what` and says
// the failure was injected.
::testing::AssertionResult IsInjected(const Status& status, const std::string& what) {
  if (status.IsUnavailable() && status.message().find(what) != std::string_view::npos &&
      status.message().find("injected") != std::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected Unavailable naming '" << what << "' (injected), got " << status.ToString();
}

FaultCounters Expected(uint64_t failed, uint64_t unreachable, uint64_t dropped, uint64_t dead_posts,
                       uint64_t random_judged = 0, uint64_t random_failed = 0) {
  return {failed, unreachable, dropped, dead_posts, random_judged, random_failed};
}

class FaultInjectionTest : public FaultInjectionFixture {};

TEST_P(FaultInjectionTest, FailNextBatchesFailsExactlyThatManyFromAnyEndpoint) {
  BUILD_OR_SKIP();
  auto client = Connect();
  auto other = Connect(kOtherComputeNode);
  ASSERT_NE(client, nullptr);
  ASSERT_NE(other, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);
  ASSERT_OK(faults_->FailNextBatches(0, 3));

  EXPECT_TRUE(IsInjected(client->WriteWord(x, 1), "memory node 0"));
  // Traffic to another node neither fails nor uses up node 0's count.
  EXPECT_OK(client->WriteWord(y, 5));
  EXPECT_TRUE(IsInjected(other->WriteWord(x + 8, 2), "memory node 0"));
  EXPECT_TRUE(IsInjected(client->Run(0, {Op::Write(x + 16, &client->words()[0], 8),
                                         Op::FetchAdd(x + 24, &client->words()[1], 1)}),
                         "memory node 0"));
  EXPECT_EQ(CountsNow(), Counts(Expected(3, 0, 0, 0)));

  // The count is used up: node 0 works again, and nothing failed landed.
  EXPECT_OK(client->WriteWord(x + 32, 4));
  EXPECT_EQ(other->ReadWord(x), 0u);
  EXPECT_EQ(other->ReadWord(x + 8), 0u);
  EXPECT_EQ(other->ReadWord(x + 16), 0u);
  EXPECT_EQ(other->ReadWord(x + 24), 0u) << "the FAA of a failed batch was applied";
  EXPECT_EQ(other->ReadWord(x + 32), 4u);
  EXPECT_EQ(other->ReadWord(y), 5u);
  EXPECT_EQ(CountsNow(), Counts(Expected(3, 0, 0, 0)));
}

// FailNextBatchesAfterApplying: the batch's every op lands (a WRITE, a CAS
// whose old value comes back, an FAA), then it reports the injected
// failure; a FailNextBatches count pending too is used up first; traffic
// to another node and the batches after the count are untouched.
TEST_P(FaultInjectionTest, FailNextBatchesAfterApplyingAppliesThenFails) {
  BUILD_OR_SKIP();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);
  ASSERT_OK(client->WriteWord(x + 8, 5));
  uint64_t* w = client->words();
  ASSERT_OK(faults_->FailNextBatchesAfterApplying(0, 2));
  ASSERT_OK(faults_->FailNextBatches(0, 1));

  w[0] = 31;
  EXPECT_TRUE(IsInjected(client->Run(0, {Op::Write(x + 40, &w[0], 8)}), "memory node 0"));
  EXPECT_OK(client->WriteWord(y, 6));
  w[0] = 32;
  w[1] = 0;
  w[2] = 0;
  const Status applied =
      client->Run(0, {Op::Write(x, &w[0], 8), Op::CompareSwap(x + 8, &w[1], 5, 9),
                      Op::FetchAdd(x + 16, &w[2], 3)});
  EXPECT_TRUE(IsInjected(applied, "applied, then failed")) << applied.ToString();
  EXPECT_EQ(w[1], 5u) << "the CAS's old value did not come back";
  EXPECT_TRUE(IsInjected(client->Run(0, {Op::Write(x + 24, &w[0], 8)}), "memory node 0"));
  EXPECT_OK(client->WriteWord(x + 32, 7));

  EXPECT_EQ(client->ReadWord(x + 40), 0u) << "FailNextBatches' count was not used first";
  EXPECT_EQ(client->ReadWord(x), 32u);
  EXPECT_EQ(client->ReadWord(x + 8), 9u) << "the CAS of the batch did not land";
  EXPECT_EQ(client->ReadWord(x + 16), 3u);
  EXPECT_EQ(client->ReadWord(x + 24), 32u);
  EXPECT_EQ(client->ReadWord(x + 32), 7u);
  EXPECT_EQ(client->ReadWord(y), 6u);
  FaultCounters expected = Expected(1, 0, 0, 0);
  expected.applied_then_failed_batches = 2;
  EXPECT_EQ(CountsNow(), Counts(expected));
  EXPECT_TRUE(faults_->FailNextBatchesAfterApplying(2, 1).IsInvalidArgument());
}

TEST_P(FaultInjectionTest, UnsignaledFailureIsReportedByTheNextPostWhichPostsNothing) {
  BUILD_OR_SKIP();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress x = Chunk(0);
  uint64_t* w = client->words();
  w[0] = 11;
  w[1] = 12;
  ASSERT_OK(faults_->FailNextBatches(0, 1));
  ASSERT_OK(client->Post(0, {Op::Write(x, &w[0], 8)}, nullptr));
  client->endpoint().Quiesce();

  Completion completion;
  const Status next = client->Post(0, {Op::Write(x + 8, &w[1], 8)}, &completion);
  EXPECT_TRUE(IsInjected(next, "memory node 0"));
  ASSERT_TRUE(completion.done()) << "a refused post must finish its completion";
  EXPECT_TRUE(IsInjected(completion.status(), "memory node 0"));

  // Reported once: the post after it works, and neither earlier batch landed.
  EXPECT_OK(client->WriteWord(x + 16, 13));
  EXPECT_EQ(client->ReadWord(x), 0u);
  EXPECT_EQ(client->ReadWord(x + 8), 0u) << "the post that reported the failure was posted";
  EXPECT_EQ(client->ReadWord(x + 16), 13u);
  EXPECT_EQ(CountsNow(), Counts(Expected(1, 0, 0, 0)));
}

TEST_P(FaultInjectionTest, FailedBatchCompletesInOrderWithEarlierBatches) {
  BUILD_OR_SKIP(WithDelay(std::chrono::milliseconds(50)));
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress x = Chunk(0);
  uint64_t* w = client->words();
  w[0] = 21;
  Completion first, second;
  ASSERT_OK(client->Post(0, {Op::Write(x, &w[0], 8)}, &first));
  ASSERT_OK(faults_->FailNextBatches(0, 1));
  ASSERT_OK(client->Post(0, {Op::Write(x + 8, &w[0], 8)}, &second));
  client->Wait(second);
  EXPECT_TRUE(first.done()) << "the failed batch completed before the one posted ahead of it";
  EXPECT_OK(first.status());
  EXPECT_TRUE(IsInjected(second.status(), "memory node 0"));
  EXPECT_EQ(client->ReadWord(x), 21u);
  EXPECT_EQ(client->ReadWord(x + 8), 0u);
}

TEST_P(FaultInjectionTest, UnreachableNodeFailsEveryBatchUntilReachableAgain) {
  BUILD_OR_SKIP();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);
  ASSERT_OK(faults_->SetUnreachable(0, true));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(IsInjected(client->WriteWord(x + 8 * i, 100 + i), "memory node 0 unreachable"));
  }
  EXPECT_OK(client->WriteWord(y, 7)) << "node 1 is reachable";
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 3, 0, 0)));

  ASSERT_OK(faults_->SetUnreachable(0, false));
  EXPECT_OK(client->WriteWord(x + 24, 9));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(client->ReadWord(x + 8 * i), 0u) << "word " << i;
  EXPECT_EQ(client->ReadWord(x + 24), 9u);
  EXPECT_EQ(client->ReadWord(y), 7u);
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 3, 0, 0)));
}

TEST_P(FaultInjectionTest, QueuedBatchesFailWhenTheirNodeBecomesUnreachable) {
  BUILD_OR_SKIP(WithDelay(std::chrono::milliseconds(20)));
  SKIP_UNLESS_OPS_WAIT_FOR_POLL();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const RemoteAddress x = Chunk(0);
  uint64_t* w = client->words();
  w[0] = 31;
  Completion signaled;
  ASSERT_OK(client->Post(0, {Op::Write(x, &w[0], 8), Op::Write(x + 8, &w[0], 8)}, &signaled));
  ASSERT_OK(client->Post(0, {Op::Write(x + 16, &w[0], 8)}, nullptr));
  // Nobody polled: both are still queued when the link goes down.
  ASSERT_OK(faults_->SetUnreachable(0, true));
  client->endpoint().Quiesce();
  ASSERT_TRUE(signaled.done());
  EXPECT_TRUE(IsInjected(signaled.status(), "memory node 0 unreachable"));
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 2, 0, 0)));

  ASSERT_OK(faults_->SetUnreachable(0, false));
  EXPECT_TRUE(IsInjected(client->WriteWord(x + 24, 1), "memory node 0 unreachable"))
      << "the unsignaled batch's failure is reported by the next post";
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(client->ReadWord(x + 8 * i), 0u) << "word " << i;
}

TEST_P(FaultInjectionTest, KilledComputeNodesQueuedBatchesNeverLand) {
  BUILD_OR_SKIP(WithDelay(std::chrono::milliseconds(20)));
  SKIP_UNLESS_OPS_WAIT_FOR_POLL();
  auto doomed = Connect(kComputeNode);
  auto doomed_too = Connect(kComputeNode);  // a second thread of the same node
  auto survivor = Connect(kOtherComputeNode);
  ASSERT_NE(doomed, nullptr);
  ASSERT_NE(doomed_too, nullptr);
  ASSERT_NE(survivor, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1), lock = Chunk(0) + 64;

  // Before dying it takes a lock: that word must stay taken.
  uint64_t* w = doomed->words();
  ASSERT_OK(doomed->Run(0, {Op::CompareSwap(lock, &w[0], 0, kComputeNode)}));
  ASSERT_EQ(w[0], 0u);

  w[1] = 41;
  Completion first, second, elsewhere;
  ASSERT_OK(doomed->Post(0, {Op::Write(x, &w[1], 8), Op::FetchAdd(x + 8, &w[2], 1)}, &first));
  ASSERT_OK(doomed->Post(0, {Op::Write(x + 16, &w[1], 8)}, nullptr));
  ASSERT_OK(doomed->Post(1, {Op::Write(y, &w[1], 8)}, &elsewhere));
  ASSERT_OK(doomed_too->Post(0, {Op::Write(x + 24, &doomed_too->words()[0], 8)}, &second));
  uint64_t* s = survivor->words();
  s[0] = 42;
  Completion survivor_write;
  ASSERT_OK(survivor->Post(0, {Op::Write(x + 32, &s[0], 8)}, &survivor_write));

  faults_->KillComputeNode(kComputeNode);
  survivor->Wait(survivor_write);
  EXPECT_OK(survivor_write.status()) << "another compute node's traffic is unaffected";
  doomed->endpoint().Quiesce();
  doomed_too->endpoint().Quiesce();
  for (const Completion* completion : {&first, &elsewhere, &second}) {
    ASSERT_TRUE(completion->done());
    EXPECT_TRUE(IsInjected(completion->status(), "compute node 7 died"));
  }
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 4, 0)));

  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(survivor->ReadWord(x + 8 * i), 0u) << "word " << i << " of a dead node landed";
  EXPECT_EQ(survivor->ReadWord(y), 0u);
  EXPECT_EQ(survivor->ReadWord(x + 32), 42u);
  EXPECT_EQ(survivor->ReadWord(lock), kComputeNode) << "a dead node's lock stays taken";

  // Every later post of its endpoints is refused: the first post of
  // `doomed` reports its dropped unsignaled batch, later ones are refused
  // (and counted) as posts of a dead node.
  EXPECT_TRUE(IsInjected(doomed->WriteWord(x, 1), "compute node 7 died"));
  EXPECT_TRUE(IsInjected(doomed->WriteWord(x, 1), "compute node 7 died"));
  EXPECT_TRUE(IsInjected(doomed_too->WriteWord(y, 1), "compute node 7 died"));
  EXPECT_OK(survivor->WriteWord(x + 40, 5));
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 4, 2)));
  EXPECT_EQ(survivor->ReadWord(x), 0u);
  EXPECT_EQ(survivor->ReadWord(y), 0u);
}

// Which of `batches` single-FAA batches, posted in turn to both memory
// nodes, failed (each failure must be an injected random one); adds the
// landed ones to landed[node].
std::vector<bool> PostFetchAdds(TestClient& client, RemoteAddress counters[2], int batches,
                                uint64_t landed[2]) {
  std::vector<bool> failed;
  for (int i = 0; i < batches; ++i) {
    const uint16_t node = static_cast<uint16_t>(i % 2);
    const Status status = client.Run(node, {Op::FetchAdd(counters[node], &client.words()[0], 1)});
    failed.push_back(!status.ok());
    if (status.ok()) {
      ++landed[node];
    } else {
      EXPECT_TRUE(IsInjected(status, "at random")) << "batch " << i;
    }
  }
  return failed;
}

size_t CountTrue(const std::vector<bool>& flags) {
  return static_cast<size_t>(std::count(flags.begin(), flags.end(), true));
}

// A seed names one pattern of failures: the same seed and the same posts
// fail the same batches (what lets a simulated run replay), another seed
// others; the counters say exactly how many were judged and failed, and
// no failed batch's op landed.
TEST_P(FaultInjectionTest, RandomFailuresReplayForTheSameSeedAndAreCountedExactly) {
  BUILD_OR_SKIP();
  constexpr int kBatches = 400;
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  RemoteAddress counters[2] = {Chunk(0), Chunk(1)};
  uint64_t landed[2] = {0, 0};
  fabric::RandomBatchFailures failures;
  failures.seed = 42;
  failures.probability = 0.25;
  ASSERT_OK(faults_->FailBatchesAtRandom(failures));
  const std::vector<bool> first = PostFetchAdds(*client, counters, kBatches, landed);
  const size_t failed = CountTrue(first);
  // 100 expected; the bounds are more than 5 standard deviations (8.7) out.
  EXPECT_GT(failed, 50u);
  EXPECT_LT(failed, 150u);
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 0, 0, kBatches, failed)));

  ASSERT_OK(faults_->FailBatchesAtRandom(failures));  // restarts the sequence
  EXPECT_EQ(PostFetchAdds(*client, counters, kBatches, landed), first);
  failures.seed = 43;
  ASSERT_OK(faults_->FailBatchesAtRandom(failures));
  const std::vector<bool> other = PostFetchAdds(*client, counters, kBatches, landed);
  EXPECT_NE(other, first);
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 0, 0, 3 * kBatches, 2 * failed + CountTrue(other))));

  faults_->StopRandomFailures();
  EXPECT_OK(client->WriteWord(counters[0] + 8, 1));
  EXPECT_EQ(client->ReadWord(counters[0]), landed[0]) << "a failed FAA was applied";
  EXPECT_EQ(client->ReadWord(counters[1]), landed[1]) << "a failed FAA was applied";
  EXPECT_EQ(faults_->counters().random_judged_batches, 3u * kBatches) << "judged after the stop";
}

// Only the named compute nodes' batches are judged; no more than
// max_failures fail; FailNextBatches' count is used up first, and an
// unreachable node's batches are not judged.
TEST_P(FaultInjectionTest, RandomFailuresJudgeOnlyNamedComputeNodesUpToTheBound) {
  BUILD_OR_SKIP();
  auto client = Connect();
  auto other = Connect(kOtherComputeNode);
  ASSERT_NE(client, nullptr);
  ASSERT_NE(other, nullptr);
  const RemoteAddress x = Chunk(0), y = Chunk(1);
  fabric::RandomBatchFailures failures;
  failures.probability = 1;
  failures.compute_nodes = {kOtherComputeNode};
  failures.max_failures = 3;
  ASSERT_OK(faults_->FailBatchesAtRandom(failures));
  ASSERT_OK(faults_->FailNextBatches(0, 1));
  EXPECT_TRUE(IsInjected(other->WriteWord(x, 1), "batch failed (injected)"));
  EXPECT_EQ(CountsNow(), Counts(Expected(1, 0, 0, 0, 0, 0))) << "FailNextBatches goes first";
  for (int i = 0; i < 4; ++i) {
    EXPECT_OK(client->WriteWord(x + 8 * i, 10 + i)) << "compute node " << kComputeNode;
  }
  ASSERT_OK(faults_->SetUnreachable(1, true));
  EXPECT_TRUE(IsInjected(other->WriteWord(y, 1), "unreachable"));
  ASSERT_OK(faults_->SetUnreachable(1, false));
  EXPECT_EQ(CountsNow(), Counts(Expected(1, 1, 0, 0, 0, 0)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(IsInjected(other->WriteWord(y + 8 * i, 20 + i), "at random"));
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_OK(other->WriteWord(y + 24 + 8 * i, 30 + i)) << "past max_failures";
  }
  EXPECT_EQ(CountsNow(), Counts(Expected(1, 1, 0, 0, 5, 3)));
  EXPECT_EQ(client->ReadWord(y), 0u);
  EXPECT_EQ(client->ReadWord(y + 16), 0u);
  EXPECT_EQ(client->ReadWord(y + 24), 30u);
}

// With min_spacing, a failure is followed by that many judged batches
// that land, whatever the probability.
TEST_P(FaultInjectionTest, RandomFailuresKeepTheirMinimumSpacing) {
  BUILD_OR_SKIP();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  RemoteAddress counters[2] = {Chunk(0), Chunk(1)};
  uint64_t landed[2] = {0, 0};
  fabric::RandomBatchFailures failures;
  failures.seed = 5;
  failures.probability = 1;
  failures.min_spacing = 3;
  ASSERT_OK(faults_->FailBatchesAtRandom(failures));
  std::vector<bool> want;
  for (int i = 0; i < 12; ++i)
    want.push_back(i % 4 == 0);
  EXPECT_EQ(PostFetchAdds(*client, counters, 12, landed), want);

  failures.probability = 0.5;
  ASSERT_OK(faults_->FailBatchesAtRandom(failures));
  const std::vector<bool> half = PostFetchAdds(*client, counters, 400, landed);
  size_t last = 0, failed = 0;
  for (size_t i = 0; i < half.size(); ++i) {
    if (!half[i]) continue;
    if (failed++ > 0) {
      EXPECT_GT(i - last, failures.min_spacing) << "batch " << i;
    }
    last = i;
  }
  // Each failure takes its batch and 3 more, then waits 2 on average:
  // about 400 / 6 = 67.
  EXPECT_GT(failed, 40u);
  EXPECT_LT(failed, 100u);
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 0, 0, 412, 3 + failed)));
}

TEST_P(FaultInjectionTest, RandomFailuresOutsideZeroToOneAreInvalidArgument) {
  BUILD_OR_SKIP();
  fabric::RandomBatchFailures failures;
  for (double probability : {-0.1, 1.5, std::nan("")}) {
    failures.probability = probability;
    EXPECT_TRUE(faults_->FailBatchesAtRandom(failures).IsInvalidArgument()) << probability;
  }
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_OK(client->WriteWord(Chunk(0), 1));
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 0, 0, 0, 0)));
}

TEST_P(FaultInjectionTest, UnknownNodeIsInvalidArgument) {
  BUILD_OR_SKIP();
  EXPECT_TRUE(faults_->FailNextBatches(2, 1).IsInvalidArgument());
  EXPECT_TRUE(faults_->SetUnreachable(2, true).IsInvalidArgument());
  EXPECT_EQ(CountsNow(), Counts(Expected(0, 0, 0, 0)));
}

// Switches flipped from another thread while clients post: every batch
// either lands or fails with an injected Unavailable, exactly as many fail
// as the counters say, exactly `budget` FailNextBatches failures are taken,
// and nothing hangs.
TEST_P(FaultInjectionTest, SwitchesFlipSafelyUnderTraffic) {
  BUILD_OR_SKIP(WithDelay(std::chrono::microseconds(50)));
  constexpr int kThreads = 3;
  constexpr int kBatchesPerThread = 400;
  constexpr uint64_t kBudget = 50;
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(Connect(100 + t));
    ASSERT_NE(clients.back(), nullptr);
  }
  const RemoteAddress counter = Chunk(0);
  ASSERT_OK(faults_->FailNextBatches(0, kBudget));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> landed{0}, failed{0}, wrong{0}, posted{0}, flips{0};
  std::thread flipper([&] {
    for (bool down = true; !stop.load(); down = !down) {
      (void)faults_->SetUnreachable(0, down);
      flips.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    (void)faults_->SetUnreachable(0, false);
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TestClient& client = *clients[t];
      // At least kBatchesPerThread, and on while the switch flips a few
      // times and the budget lasts (a fast backend, such as sim, finishes
      // 400 in one window; a loaded machine may not run the threads while
      // the node is reachable). Bounded, in case of a bug.
      for (int i = 0; i < kBatchesPerThread ||
                      ((flips.load() < 6 || faults_->counters().failed_batches < kBudget) &&
                       i < 100 * kBatchesPerThread);
           ++i) {
        posted.fetch_add(1);
        const Status status = client.Run(0, {Op::FetchAdd(counter, &client.words()[0], 1)});
        if (status.ok()) {
          landed.fetch_add(1);
        } else if (status.IsUnavailable() &&
                   status.message().find("injected") != std::string_view::npos) {
          failed.fetch_add(1);
        } else {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  stop = true;
  flipper.join();

  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(landed.load() + failed.load(), posted.load());
  const FaultCounters counts = faults_->counters();
  EXPECT_EQ(counts.failed_batches + counts.unreachable_batches, failed.load()) << Counts(counts);
  EXPECT_LE(counts.failed_batches, kBudget);
  EXPECT_EQ(clients[0]->ReadWord(counter), landed.load()) << "a failed FAA was applied";
  // Whatever the flips left of the budget is taken by exactly that many more.
  const uint64_t left = kBudget - counts.failed_batches;
  for (uint64_t i = 0; i < left; ++i) {
    EXPECT_TRUE(IsInjected(clients[0]->WriteWord(counter + 8, 1), "memory node 0"));
  }
  EXPECT_OK(clients[0]->WriteWord(counter + 8, 2));
  EXPECT_EQ(faults_->counters().failed_batches, kBudget);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjectionTest,
                         ::testing::ValuesIn(ConformanceBackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace dmidx::fabric_test
