#include "tests/fabric_test_client.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dmidx::fabric_test {

using fabric::Completion;
using fabric::Endpoint;
using fabric::Op;
using fabric::RemoteAddress;
using Clock = std::chrono::steady_clock;

::testing::AssertionResult IsOk(const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.ToString();
}

namespace {

[[noreturn]] void AbortHung(const char* what) {
  std::fprintf(stderr, "fabric test: %s did not finish within %lld s; aborting\n", what,
               static_cast<long long>(kHangTimeout.count()));
  std::abort();
}

}  // namespace

void WaitFor(Endpoint& endpoint, const Completion& completion) {
  const Clock::time_point deadline = Clock::now() + kHangTimeout;
  for (uint64_t spins = 1; !completion.done(); ++spins) {
    endpoint.Poll();
    if (spins % 64 == 0) {
      std::this_thread::yield();
      if (Clock::now() > deadline) AbortHung("a signaled batch");
    }
  }
}

Status PostAndWait(Endpoint& endpoint, uint16_t node, std::span<const Op> ops) {
  Completion completion;
  // A rejected batch never expected the completion, and a batch DoPost()
  // failed was finished by Post(): either way nothing is left to wait for.
  Status posted = endpoint.Post(node, ops, &completion);
  if (!posted.ok()) return posted;
  WaitFor(endpoint, completion);
  return completion.status();
}

std::unique_ptr<TestClient> TestClient::Connect(fabric::Fabric& fabric, size_t buffer_bytes,
                                                uint32_t compute_node) {
  auto endpoint = fabric.Connect(compute_node);
  if (!endpoint.ok()) {
    ADD_FAILURE() << "Connect: " << endpoint.status().ToString();
    return nullptr;
  }
  std::unique_ptr<TestClient> client(new TestClient(std::move(endpoint).value(), buffer_bytes));
  const Status registered =
      client->endpoint_->RegisterLocal(client->bytes(), client->buffer_bytes());
  if (!registered.ok()) {
    ADD_FAILURE() << "RegisterLocal: " << registered.ToString();
    return nullptr;
  }
  return client;
}

uint64_t TestClient::ReadWord(RemoteAddress address) {
  uint64_t* scratch = &words_[words_.size() - 8];
  const Status status = Run(address.node(), {Op::Read(address, scratch, 8)});
  if (status.ok()) return *scratch;
  ADD_FAILURE() << "READ " << address.ToString() << ": " << status.ToString();
  return kBadWord;
}

Status TestClient::WriteWord(RemoteAddress address, uint64_t value) {
  uint64_t* scratch = &words_[words_.size() - 7];
  *scratch = value;
  return Run(address.node(), {Op::Write(address, scratch, 8)});
}

Stats TestClient::stats() const {
  Stats stats;
  endpoint_->counters().AddTo(&stats);
  return stats;
}

}  // namespace dmidx::fabric_test
