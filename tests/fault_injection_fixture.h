// The fixture of the fault-injection tests (fault_injection_test.cc,
// fencing_test.cc): a backend by name with two memory nodes, its fault
// switches, and clients of named compute nodes. A backend whose faults()
// is null skips with the reason. The compute-node ids and FencedStatus
// serve verbs_fencing_test.cc too.
//
//   class MyFaultTest : public FaultInjectionFixture {};
//   TEST_P(MyFaultTest, Something) {
//     BUILD_OR_SKIP(WithDelay(std::chrono::milliseconds(20)));
//     auto client = Connect(kComputeNode);
//     ...
//   }
//   INSTANTIATE_TEST_SUITE_P(Backends, MyFaultTest,
//                            ::testing::ValuesIn(ConformanceBackendNames()));
#ifndef DMIDX_TESTS_FAULT_INJECTION_FIXTURE_H_
#define DMIDX_TESTS_FAULT_INJECTION_FIXTURE_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "dmidx/options.h"
#include "dmidx/status.h"
#include "lib/fabric/fault_injector.h"
#include "lib/fabric/remote_address.h"
#include "tests/fabric_test_backends.h"
#include "tests/fabric_test_client.h"

namespace dmidx::fabric_test {

inline constexpr uint32_t kComputeNode = 7;
inline constexpr uint32_t kOtherComputeNode = 8;

inline std::string Counts(const fabric::FaultCounters& c) {
  return "failed=" + std::to_string(c.failed_batches) +
         " unreachable=" + std::to_string(c.unreachable_batches) +
         " dropped=" + std::to_string(c.dropped_batches) +
         " dead_posts=" + std::to_string(c.dead_posts) +
         " random_judged=" + std::to_string(c.random_judged_batches) +
         " random_failed=" + std::to_string(c.random_failed_batches) +
         " applied_then_failed=" + std::to_string(c.applied_then_failed_batches);
}

// True when `status` is the fence's: Unavailable marked kFenced, naming
// compute node `compute_node`.
inline ::testing::AssertionResult FencedStatus(const Status& status, uint32_t compute_node) {
  const std::string name = "compute node " + std::to_string(compute_node) + " was fenced";
  if (IsFenced(status) && status.message().find(name) != std::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected Unavailable (kFenced) naming '" << name << "', got " << status.ToString()
         << (status.detail() == StatusDetail::kFenced ? " (kFenced)" : " (not kFenced)");
}

// Ops land after a random delay of up to `delay`.
inline LocalFabricOptions WithDelay(std::chrono::nanoseconds delay) {
  LocalFabricOptions knobs;
  knobs.max_apply_delay = delay;
  return knobs;
}

class FaultInjectionFixture : public ::testing::TestWithParam<std::string> {
 protected:
  // Two memory nodes; the reason to skip, or "".
  std::string Build(LocalFabricOptions knobs = {}) {
    TestBackendOptions options;
    options.memory_nodes = 2;
    options.faults = knobs;
    TestBackendOrSkip made = MakeTestBackend(GetParam(), options);
    if (!made.skip_reason.empty()) return made.skip_reason;
    if (!made.status.ok()) {
      ADD_FAILURE() << "starting the backend: " << made.status.ToString();
      return "";
    }
    backend_ = std::move(made.backend);
    faults_ = backend_->fabric().faults();
    if (faults_ == nullptr) {
      return "fabric backend '" + GetParam() + "' cannot inject faults (faults() is null)";
    }
    return "";
  }

  std::unique_ptr<TestClient> Connect(uint32_t compute_node = kComputeNode) {
    return TestClient::Connect(backend_->fabric(), kDefaultBufferBytes, compute_node);
  }

  fabric::RemoteAddress Chunk(uint16_t node) {
    auto chunk = backend_->control(node).AllocateChunk();
    if (!chunk.ok()) {
      ADD_FAILURE() << "AllocateChunk: " << chunk.status().ToString();
      return fabric::RemoteAddress();
    }
    return *chunk;
  }

  std::string CountsNow() const { return Counts(faults_->counters()); }

  std::unique_ptr<TestBackend> backend_;
  fabric::FaultInjector* faults_ = nullptr;
};

#define BUILD_OR_SKIP(...)                                   \
  do {                                                       \
    const std::string skip_reason_ = Build(__VA_ARGS__);     \
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_; \
    ASSERT_NE(backend_, nullptr);                            \
  } while (false)

// For tests that flip a switch between posting and polling.
#define SKIP_UNLESS_OPS_WAIT_FOR_POLL()                                                \
  do {                                                                                 \
    if (!backend_->traits().applies_ops_only_in_poll) {                                \
      GTEST_SKIP() << "fabric backend '" << GetParam() << "' may apply ops at Post()"; \
    }                                                                                  \
  } while (false)

}  // namespace dmidx::fabric_test

#endif  // DMIDX_TESTS_FAULT_INJECTION_FIXTURE_H_
