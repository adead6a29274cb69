// One client thread's endpoint and registered buffer, and the waits fabric
// tests share (the conformance suite and the fault-injection tests).
#ifndef DMIDX_TESTS_FABRIC_TEST_CLIENT_H_
#define DMIDX_TESTS_FABRIC_TEST_CLIENT_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "dmidx/stats.h"
#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/op.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::fabric_test {

::testing::AssertionResult IsOk(const Status& status);

#define ASSERT_OK(expr) ASSERT_TRUE(::dmidx::fabric_test::IsOk(expr))
#define EXPECT_OK(expr) EXPECT_TRUE(::dmidx::fabric_test::IsOk(expr))

// A backend that never completes a batch would hang a test; waits give up
// after this long by aborting (a completion cannot be abandoned while the
// backend may still finish it).
inline constexpr auto kHangTimeout = std::chrono::seconds(60);

inline constexpr size_t kDefaultBufferBytes = size_t{64} << 10;
// What ReadWord() returns on error.
inline constexpr uint64_t kBadWord = 0xbadbadbadbadbad0;

// Polls `endpoint` until `completion` is done.
void WaitFor(fabric::Endpoint& endpoint, const fabric::Completion& completion);

// Posts `ops` as one signaled batch and waits for it.
Status PostAndWait(fabric::Endpoint& endpoint, uint16_t node, std::span<const fabric::Op> ops);

// One client thread's endpoint and its registered buffer (8-byte aligned).
// The buffer's last 64 bytes are scratch for ReadWord() and WriteWord().
class TestClient {
 public:
  // Null, with a recorded failure, if connecting or registering fails.
  static std::unique_ptr<TestClient> Connect(
      fabric::Fabric& fabric, size_t buffer_bytes = kDefaultBufferBytes,
      uint32_t compute_node = fabric::Fabric::kUnnamedComputeNode);

  ~TestClient() { endpoint_->Quiesce(); }

  fabric::Endpoint& endpoint() { return *endpoint_; }
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words_.data()); }
  uint64_t* words() { return words_.data(); }
  size_t buffer_bytes() const { return words_.size() * sizeof(uint64_t); }

  Status Run(uint16_t node, std::span<const fabric::Op> ops) {
    return PostAndWait(*endpoint_, node, ops);
  }
  Status Run(uint16_t node, std::initializer_list<fabric::Op> ops) {
    return Run(node, std::span<const fabric::Op>(ops.begin(), ops.size()));
  }
  Status Post(uint16_t node, std::span<const fabric::Op> ops, fabric::Completion* completion) {
    return endpoint_->Post(node, ops, completion);
  }
  Status Post(uint16_t node, std::initializer_list<fabric::Op> ops,
              fabric::Completion* completion) {
    return Post(node, std::span<const fabric::Op>(ops.begin(), ops.size()), completion);
  }
  void Wait(const fabric::Completion& completion) { WaitFor(*endpoint_, completion); }

  // The word at `address`; on error records a failure and returns kBadWord.
  uint64_t ReadWord(fabric::RemoteAddress address);
  Status WriteWord(fabric::RemoteAddress address, uint64_t value);

  Stats stats() const;

 private:
  TestClient(std::unique_ptr<fabric::Endpoint> endpoint, size_t buffer_bytes)
      : words_((buffer_bytes + 7) / 8), endpoint_(std::move(endpoint)) {}

  std::vector<uint64_t> words_;  // declared first: outlives the endpoint
  std::unique_ptr<fabric::Endpoint> endpoint_;
};

}  // namespace dmidx::fabric_test

#endif  // DMIDX_TESTS_FABRIC_TEST_CLIENT_H_
