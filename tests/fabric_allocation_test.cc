// The post path allocates nothing once an endpoint is warm (issue 9, item
// 10): signaled and unsignaled batches, inline WRITEs and atomics, posted and
// polled to completion, make no heap allocation.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/fabric/fabric.h"
#include "lib/fabric/op.h"
#include "tests/allocation_counter.h"
#include "tests/fabric_test_backends.h"
#include "tests/fabric_test_client.h"

namespace dmidx::fabric_test {
namespace {

using fabric::Completion;
using fabric::Op;
using fabric::RemoteAddress;
using testing_support::AllocationMeter;

class FabricAllocationTest : public ::testing::TestWithParam<std::string> {};

// One round: an unsignaled WRITE, an unsignaled inline WRITE, and a signaled
// READ + CAS + FAA batch behind them, polled to completion.
Status Round(TestClient& client, RemoteAddress chunk) {
  uint64_t* w = client.words();
  DMIDX_RETURN_IF_ERROR(client.Post(0, {Op::Write(chunk, &w[0], 64)}, nullptr));
  DMIDX_RETURN_IF_ERROR(
      client.Post(0, {Op::Write(chunk + 64, &w[8], 8, fabric::kInline)}, nullptr));
  Completion completion;
  DMIDX_RETURN_IF_ERROR(
      client.Post(0,
                  {Op::Read(chunk + 128, &w[16], 64), Op::CompareSwap(chunk + 192, &w[24], 0, 0),
                   Op::FetchAdd(chunk + 200, &w[25], 1)},
                  &completion));
  client.Wait(completion);
  return completion.status();
}

TEST_P(FabricAllocationTest, WarmPostAndPollAllocateNothing) {
  TestBackendOrSkip made = MakeTestBackend(GetParam(), {});
  if (!made.skip_reason.empty()) GTEST_SKIP() << made.skip_reason;
  ASSERT_OK(made.status);
  auto client = TestClient::Connect(made.backend->fabric());
  ASSERT_NE(client, nullptr);
  auto chunk = made.backend->control(0).AllocateChunk();
  ASSERT_OK(chunk.status());
  // Warm up: connections, queues and rings reach their working size.
  for (int i = 0; i < 64; ++i)
    ASSERT_OK(Round(*client, *chunk));
  const AllocationMeter meter;
  constexpr int kRounds = 1000;
  for (int i = 0; i < kRounds; ++i) {
    const Status status = Round(*client, *chunk);
    if (!status.ok()) FAIL() << status.ToString();
  }
  EXPECT_EQ(meter.allocations(), 0u) << "heap allocations in " << kRounds << " warm rounds";
}

INSTANTIATE_TEST_SUITE_P(Backends, FabricAllocationTest,
                         ::testing::ValuesIn(ConformanceBackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace dmidx::fabric_test
