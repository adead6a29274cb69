// The verbs fabric's fence (Fabric::FenceComputeNode on `verbs`), on a
// real RDMA device with memory nodes served in this process (skipped
// without one: run it under tools/softroce-vm.sh, as CI's softroce stage
// does). Every memory node moves the node's queue pairs to the error state
// and refuses it from then on; what the fenced node sees is what verbs
// lets it see (verbs_fabric.h). The memory node's bookkeeping is tested
// without a device in verbs_fences_test.cc.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/op.h"
#include "lib/fabric/verbs/verbs_fabric.h"
#include "lib/memnode/verbs_memory_server.h"
#include "tests/fabric_test_backends.h"
#include "tests/fabric_test_client.h"
#include "tests/fault_injection_fixture.h"

namespace dmidx::fabric_test {
namespace {

using fabric::Op;
using fabric::RemoteAddress;

// This process's compute node on a verbs backend serving its memory nodes
// (its control paths and its unnamed endpoints are this node's).
constexpr uint32_t kProcessComputeNode = 0;

class VerbsFencingTest : public ::testing::Test {
 protected:
  // Two memory nodes; the reason to skip, or "".
  std::string Build() {
    TestBackendOptions options;
    options.memory_nodes = 2;
    TestBackendOrSkip made = MakeTestBackend("verbs", options);
    if (!made.skip_reason.empty()) return made.skip_reason;
    if (!made.status.ok()) {
      ADD_FAILURE() << "starting the backend: " << made.status.ToString();
      return "";
    }
    backend_ = std::move(made.backend);
    return "";
  }
  Status Fence(uint32_t compute_node) { return backend_->fabric().FenceComputeNode(compute_node); }
  std::unique_ptr<TestClient> Connect(uint32_t compute_node) {
    return TestClient::Connect(backend_->fabric(), kDefaultBufferBytes, compute_node);
  }
  memnode::VerbsMemoryNodeControl& VerbsControl(uint16_t node) {
    return dynamic_cast<memnode::VerbsMemoryNodeControl&>(backend_->control(node));
  }
  RemoteAddress Chunk(uint16_t node) {
    auto chunk = backend_->control(node).AllocateChunk();
    if (!chunk.ok()) {
      ADD_FAILURE() << "AllocateChunk: " << chunk.status().ToString();
      return RemoteAddress();
    }
    return *chunk;
  }
  // Connects fenced_ (kComputeNode) and survivor_ (kOtherComputeNode), and
  // takes x_ on memory node 0 and y_ on memory node 1.
  void ConnectBoth() {
    fenced_ = Connect(kComputeNode);
    survivor_ = Connect(kOtherComputeNode);
    ASSERT_NE(fenced_, nullptr);
    ASSERT_NE(survivor_, nullptr);
    x_ = Chunk(0);
    y_ = Chunk(1);
  }

  std::unique_ptr<TestBackend> backend_;
  std::unique_ptr<TestClient> fenced_, survivor_;
  RemoteAddress x_, y_;
};

#define BUILD_VERBS_OR_SKIP()                                \
  do {                                                       \
    const std::string skip_reason_ = Build();                \
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_; \
    ASSERT_NE(backend_, nullptr);                            \
  } while (false)

// Ops on a queue pair the fence broke fail and land nothing: the memory
// node drops them, so the node sees what a lost link gives, Unavailable
// (retries exceeded, on a real NIC) or DeadlineExceeded (op_timeout: rxe
// reports no completion at all), not marked kFenced. A connection the node
// opens afterwards is refused with the fence's status.
TEST_F(VerbsFencingTest, FencedNodesOpsFailAndItsNewConnectionsAreRefused) {
  BUILD_VERBS_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  TestClient& fenced = *fenced_;
  TestClient& survivor = *survivor_;
  const RemoteAddress x = x_, y = y_;
  ASSERT_OK(fenced.WriteWord(x, 5));  // its queue pair to memory node 0

  ASSERT_OK(Fence(kComputeNode));
  uint64_t* w = fenced.words();
  w[0] = 9;
  w[1] = 0;
  const Status dropped =
      fenced.Run(0, {Op::Write(x + 8, &w[0], 8), Op::CompareSwap(x, &w[1], 5, 6)});
  auto lost_link = [](const Status& status) {
    return status.IsUnavailable() || status.code() == StatusCode::kDeadlineExceeded;
  };
  EXPECT_TRUE(lost_link(dropped)) << dropped.ToString();
  EXPECT_FALSE(IsFenced(dropped)) << dropped.ToString();
  const Status after = fenced.WriteWord(x + 16, 1);
  EXPECT_TRUE(lost_link(after)) << "the broken queue pair's error is kept: " << after.ToString();
  // No queue pair to memory node 1 yet: connecting now is refused.
  EXPECT_TRUE(FencedStatus(fenced.WriteWord(y, 1), kComputeNode));
  auto reopened = Connect(kComputeNode);
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(FencedStatus(reopened->WriteWord(x + 24, 1), kComputeNode));

  EXPECT_EQ(survivor.ReadWord(x), 5u) << "what the node wrote before the fence stays";
  EXPECT_EQ(survivor.ReadWord(x + 8), 0u) << "a fenced node's WRITE landed";
  EXPECT_EQ(survivor.ReadWord(x + 16), 0u);
  EXPECT_EQ(survivor.ReadWord(x + 24), 0u);
  EXPECT_EQ(survivor.ReadWord(y), 0u);
}

TEST_F(VerbsFencingTest, OtherComputeNodesKeepWorking) {
  BUILD_VERBS_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  TestClient& fenced = *fenced_;
  TestClient& survivor = *survivor_;
  const RemoteAddress x = x_, y = y_;
  ASSERT_OK(fenced.WriteWord(x, 1));
  ASSERT_OK(fenced.WriteWord(y, 1));
  ASSERT_OK(survivor.WriteWord(x + 8, 2));
  ASSERT_OK(survivor.WriteWord(y + 8, 2));

  ASSERT_OK(Fence(kComputeNode));
  uint64_t* s = survivor.words();
  s[0] = 42;
  s[1] = 0;
  EXPECT_OK(survivor.Run(0, {Op::CompareSwap(x, &s[1], 1, 3), Op::Write(x + 16, &s[0], 8)}));
  EXPECT_EQ(s[1], 1u);
  EXPECT_OK(survivor.WriteWord(y + 8, 4));
  EXPECT_EQ(survivor.ReadWord(x), 3u);
  EXPECT_EQ(survivor.ReadWord(x + 16), 42u);
  EXPECT_EQ(survivor.ReadWord(y + 8), 4u);
  // A node that connects after the fence is not touched by it, and the
  // control paths (this process's, compute node 0) still serve.
  auto newcomer = Connect(kOtherComputeNode + 1);
  ASSERT_NE(newcomer, nullptr);
  EXPECT_OK(newcomer->WriteWord(y + 16, 5));
  EXPECT_EQ(survivor.ReadWord(y + 16), 5u);
  EXPECT_NE(Chunk(1), RemoteAddress());
}

// The memory nodes do not judge: a node never seen is fenced all the same
// (its later connections are refused), and fencing again is OK.
TEST_F(VerbsFencingTest, FencingIsIdempotentAndCoversNodesNeverSeen) {
  BUILD_VERBS_OR_SKIP();
  constexpr uint32_t kLateNode = 9;
  const RemoteAddress x = Chunk(0);
  ASSERT_OK(Fence(kLateNode));
  ASSERT_OK(Fence(kLateNode));
  auto late = Connect(kLateNode);
  ASSERT_NE(late, nullptr);
  EXPECT_TRUE(FencedStatus(late->WriteWord(x, 1), kLateNode));
  EXPECT_TRUE(FencedStatus(late->WriteWord(x, 1), kLateNode)) << "a refused connection stays so";
  EXPECT_TRUE(
      backend_->fabric().FenceComputeNode(fabric::Fabric::kUnnamedComputeNode).IsInvalidArgument());
  auto other = Connect(kOtherComputeNode);
  ASSERT_NE(other, nullptr);
  EXPECT_OK(other->WriteWord(x, 2));
  EXPECT_EQ(other->ReadWord(x), 2u);
}

// A fenced node's control requests are refused too, fences included, with
// the fence's status carried back in the control reply. This process's
// control paths are its compute node's.
TEST_F(VerbsFencingTest, FencedNodesControlRequestsAreRefused) {
  BUILD_VERBS_OR_SKIP();
  ASSERT_OK(Fence(kProcessComputeNode));
  for (uint16_t node = 0; node < 2; ++node) {
    const StatusOr<RemoteAddress> chunk = backend_->control(node).AllocateChunk();
    EXPECT_TRUE(FencedStatus(chunk.status(), kProcessComputeNode)) << "memory node " << node;
  }
  const Status fence = Fence(kComputeNode);
  EXPECT_TRUE(FencedStatus(fence, kProcessComputeNode));
  EXPECT_NE(fence.message().find("on memory node 0"), std::string_view::npos) << fence.ToString();
}

// A fenced node's control queue pair stays up, so that it hears its
// refusals; it must not reach memory through it. Posted on it directly, as
// a misbehaving node could, a WRITE with the pool's key fails (control
// queue pairs have no remote access) and lands nothing.
TEST_F(VerbsFencingTest, FencedNodesControlQueuePairCannotWriteMemory) {
  BUILD_VERBS_OR_SKIP();
  survivor_ = Connect(kOtherComputeNode);
  ASSERT_NE(survivor_, nullptr);
  const RemoteAddress x = Chunk(0);
  ASSERT_OK(survivor_->WriteWord(x, 5));
  ASSERT_OK(Fence(kProcessComputeNode));

  const auto& verbs_fabric = dynamic_cast<const fabric::verbs::VerbsFabric&>(backend_->fabric());
  const fabric::verbs::RegionInfo& pool = verbs_fabric.region(0);
  ibv_qp* qp = VerbsControl(0).queue_pair_for_testing();
  uint64_t value = 9;
  ibv_sge sge{reinterpret_cast<uintptr_t>(&value), sizeof(value), 0};
  ibv_send_wr wr{};
  wr.wr_id = 99;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;  // no local key needed
  wr.wr.rdma.remote_addr = pool.pool_address + x.offset();
  wr.wr.rdma.rkey = pool.pool_rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  // Its completion reports the refusal; an emulated NIC may report none.
  ibv_wc wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int polled = 0;
  while (polled == 0 && std::chrono::steady_clock::now() < deadline) {
    polled = ibv_poll_cq(qp->send_cq, 1, &wc);
    if (polled == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(polled, 0);
  if (polled == 1) {
    EXPECT_EQ(wc.wr_id, 99u);
    EXPECT_NE(wc.status, IBV_WC_SUCCESS) << "the WRITE completed";
  }
  EXPECT_EQ(survivor_->ReadWord(x), 5u) << "a fenced node's control queue pair wrote memory";
}

// A control path that an earlier request broke (here: its queue pair in
// the error state, so the request's completions fail, as after a lost
// reply) is connected anew before a fence, which then goes through.
TEST_F(VerbsFencingTest, AFenceGoesThroughAControlPathAnEarlierRequestBroke) {
  BUILD_VERBS_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  memnode::VerbsMemoryNodeControl& control = VerbsControl(0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(control.queue_pair_for_testing(), &attr, IBV_QP_STATE), 0);
  const StatusOr<RemoteAddress> broke = control.AllocateChunk();
  EXPECT_FALSE(broke.ok());
  const StatusOr<RemoteAddress> still = control.AllocateChunk();
  EXPECT_FALSE(still.ok()) << "the path came back by itself";

  ASSERT_OK(Fence(kComputeNode));
  auto reopened = Connect(kComputeNode);
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(FencedStatus(reopened->WriteWord(x_, 1), kComputeNode))
      << "memory node 0 did not get the fence";
  EXPECT_NE(Chunk(0), RemoteAddress()) << "the control path was not connected anew";
  EXPECT_EQ(survivor_->ReadWord(x_), 0u);
}

// An endpoint opened without a compute-node id is this process's node's:
// its connections name that node, so fencing it cuts the endpoint off too.
TEST_F(VerbsFencingTest, UnnamedEndpointsAreFencedWithTheProcesssComputeNode) {
  BUILD_VERBS_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  auto unnamed = Connect(fabric::Fabric::kUnnamedComputeNode);
  ASSERT_NE(unnamed, nullptr);
  ASSERT_OK(unnamed->WriteWord(x_, 5));  // its queue pair to memory node 0

  ASSERT_OK(Fence(kProcessComputeNode));
  EXPECT_FALSE(unnamed->WriteWord(x_ + 8, 1).ok());
  EXPECT_TRUE(FencedStatus(unnamed->WriteWord(y_, 1), kProcessComputeNode))
      << "its connection to memory node 1 named no node, or another";
  EXPECT_EQ(survivor_->ReadWord(x_), 5u);
  EXPECT_EQ(survivor_->ReadWord(x_ + 8), 0u);
  EXPECT_EQ(survivor_->ReadWord(y_), 0u);
}

}  // namespace
}  // namespace dmidx::fabric_test
