// A memory node's fences without an RDMA device: the control messages'
// status and detail byte, how ComputeNodeFences answers connections and
// control requests (queue pairs are stand-ins that a fake breaks), and
// what a compute node makes of a daemon too old to fence. The same code
// runs on a device in VerbsFencingTest (verbs_fencing_test.cc).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/memnode/control_protocol.h"
#include "lib/memnode/memory_node.h"
#include "lib/memnode/verbs_compute_node_fences.h"

namespace dmidx::memnode {
namespace {

constexpr uint16_t kMemoryNode = 2;
constexpr uint32_t kFenced = 5;
constexpr uint32_t kOther = 6;
constexpr uint32_t kUnnamed = fabric::Fabric::kUnnamedComputeNode;

::testing::AssertionResult Ok(const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.ToString();
}

::testing::AssertionResult Mentions(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

ControlMessage Request(ControlType type, uint64_t address = 0) {
  ControlMessage request;
  request.type = type;
  request.request_id = 77;
  request.address = address;
  return request;
}

// The bytes of `message` copied into a fresh message, as a receive buffer
// gets them.
ControlMessage OverTheWire(const ControlMessage& message) {
  ControlMessage received;
  std::memcpy(static_cast<void*>(&received), &message, sizeof(message));
  return received;
}

TEST(ControlMessageTest, StatusAndDetailSurviveTheWire) {
  ControlMessage reply;
  reply.set_status(
      Status(StatusCode::kUnavailable, "compute node 5 was fenced", StatusDetail::kFenced));
  const Status fenced = OverTheWire(reply).status();
  EXPECT_TRUE(fenced.IsUnavailable()) << fenced.ToString();
  EXPECT_EQ(fenced.detail(), StatusDetail::kFenced);
  EXPECT_EQ(fenced.message(), "compute node 5 was fenced");

  reply.set_status(Status::Unavailable("memory node 1 is going away"));
  EXPECT_EQ(OverTheWire(reply).status().detail(), StatusDetail::kNone) << "a detail lingered";
  reply.set_status(Status::Ok());
  EXPECT_TRUE(OverTheWire(reply).status().ok());
  // The detail sits where the padding was: a reply of a daemon older than
  // it (zeroed padding) decodes as kNone.
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(&reply)[offsetof(ControlMessage, detail)], 0);
}

// Stand-in queue pairs, never handed to verbs: a fake BreakQueuePair
// counts its calls per queue pair and fails for the ones told to.
class ComputeNodeFencesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MemoryNodeOptions options;
    options.pool_bytes = 1 << 20;
    options.lock_region_bytes = 4 << 10;
    options.chunk_bytes = 64 << 10;
    options.huge_pages = false;
    options.catalog_entries = 16;
    StatusOr<std::unique_ptr<MemoryNode>> node = MemoryNode::Create(kMemoryNode, options);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    node_ = std::move(node).value();
    for (uint32_t i = 0; i < 4; ++i)
      queue_pairs_[i].qp_num = 100 + i;
    // Queue pairs 0..2 are kFenced's, 3 is kOther's.
    for (uint32_t i = 0; i < 3; ++i)
      fences_.AddDataQueuePair(kFenced, &queue_pairs_[i]);
    fences_.AddDataQueuePair(kOther, &queue_pairs_[3]);
  }

  int Break(ibv_qp* qp) {
    ++broken_[qp->qp_num];
    return qp->qp_num == failing_ ? EINVAL : 0;
  }

  Status Answer(uint32_t sender, const ControlMessage& request) {
    const ControlMessage reply = fences_.Answer(*node_, sender, request);
    EXPECT_EQ(reply.type, ControlType::kReply);
    EXPECT_EQ(reply.request_id, request.request_id);
    return OverTheWire(reply).status();
  }

  std::unique_ptr<MemoryNode> node_;
  ibv_qp queue_pairs_[4] = {};
  std::map<uint32_t, int> broken_;  // by qp_num: calls
  uint32_t failing_ = 0;            // qp_num whose break fails; 0: none
  ComputeNodeFences fences_{kMemoryNode, [this](ibv_qp* qp) { return Break(qp); }};
};

TEST_F(ComputeNodeFencesTest, AFenceBreaksEveryQueuePairOfTheNodeAndRefusesItFromThenOn) {
  EXPECT_TRUE(Ok(fences_.CheckConnection(kFenced)));
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced))));
  EXPECT_EQ(broken_, (std::map<uint32_t, int>{{100, 1}, {101, 1}, {102, 1}}));
  EXPECT_TRUE(fences_.fenced(kFenced));
  EXPECT_FALSE(fences_.fenced(kOther));

  const Status connection = fences_.CheckConnection(kFenced);
  EXPECT_TRUE(IsFenced(connection)) << connection.ToString();
  EXPECT_TRUE(Mentions(connection.message(),
                       "compute node 5 was fenced: memory node 2 refuses its connection"));
  // Its control requests, a fence included, are refused with the detail
  // in the reply; another node's are served.
  for (ControlType type :
       {ControlType::kAllocateChunk, ControlType::kDescribe, ControlType::kFenceComputeNode}) {
    const Status refused = Answer(kFenced, Request(type, kOther));
    EXPECT_TRUE(IsFenced(refused)) << refused.ToString();
    EXPECT_TRUE(Mentions(refused.message(), "refuses its control request"));
  }
  EXPECT_FALSE(fences_.fenced(kOther)) << "a fenced node's fence request went through";
  EXPECT_TRUE(Ok(fences_.CheckConnection(kOther)));
  const ControlMessage described = fences_.Answer(*node_, kOther, Request(ControlType::kDescribe));
  EXPECT_TRUE(Ok(described.status()));
  EXPECT_EQ(described.address, node_->chunk_bytes());
}

TEST_F(ComputeNodeFencesTest, FencingIsIdempotentAndCoversNodesNeverSeen) {
  constexpr uint32_t kNeverSeen = 9;
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kNeverSeen))));
  EXPECT_TRUE(broken_.empty());
  EXPECT_TRUE(IsFenced(fences_.CheckConnection(kNeverSeen)));
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced))));
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced))));
  EXPECT_EQ(broken_, (std::map<uint32_t, int>{{100, 2}, {101, 2}, {102, 2}}));
}

// A queue pair that will not move does not stop the others: all are
// tried, the first failure is reported, and the node is refused anyway.
TEST_F(ComputeNodeFencesTest, AQueuePairThatWillNotMoveIsReportedAfterTryingEveryOne) {
  failing_ = 100;
  const Status fence = Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced));
  EXPECT_EQ(fence.code(), StatusCode::kIoError) << fence.ToString();
  EXPECT_TRUE(Mentions(fence.message(),
                       "1 of 3 queue pairs stayed up, the first: queue pair 100 "
                       "to ERR"))
      << fence.ToString();
  EXPECT_EQ(broken_, (std::map<uint32_t, int>{{100, 1}, {101, 1}, {102, 1}}));
  EXPECT_TRUE(IsFenced(fences_.CheckConnection(kFenced)));

  failing_ = 0;  // a retry tries every queue pair again
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced))));
  EXPECT_EQ(broken_, (std::map<uint32_t, int>{{100, 2}, {101, 2}, {102, 2}}));
}

// Nothing could fence a queue pair filed under no compute node, so a
// handshake naming none is refused, and so is a fence of no node.
TEST_F(ComputeNodeFencesTest, ConnectionsAndFencesMustNameAComputeNode) {
  const Status unnamed = fences_.CheckConnection(kUnnamed);
  EXPECT_TRUE(unnamed.IsInvalidArgument()) << unnamed.ToString();
  EXPECT_TRUE(Mentions(unnamed.message(), "names no compute node"));
  for (uint64_t id : {uint64_t{kUnnamed}, uint64_t{1} << 40}) {
    const Status fence = Answer(kOther, Request(ControlType::kFenceComputeNode, id));
    EXPECT_TRUE(fence.IsInvalidArgument()) << fence.ToString();
    EXPECT_FALSE(IsFenced(fence));
  }
  EXPECT_FALSE(fences_.fenced(kUnnamed));
  EXPECT_TRUE(broken_.empty());
}

// A memory node whose daemon predates kFenceComputeNode answers it as
// any unknown request; the compute node says what that means.
TEST_F(ComputeNodeFencesTest, ADaemonTooOldToFenceIsNamed) {
  ControlMessage old_request = Request(ControlType::kFenceComputeNode, kFenced);
  old_request.type = static_cast<ControlType>(99);  // unknown here as 6 was there
  const ControlMessage old_reply = HandleControlRequest(*node_, old_request);
  ASSERT_TRUE(old_reply.status().IsInvalidArgument()) << old_reply.status().ToString();

  const Status too_old = FenceReplyStatus(OverTheWire(old_reply), 4);
  EXPECT_EQ(too_old.code(), StatusCode::kNotSupported) << too_old.ToString();
  EXPECT_TRUE(Mentions(too_old.message(), "memory node 4's daemon is too old to fence"));
  EXPECT_TRUE(Mentions(too_old.message(), "unknown control request type 99"));

  // Other answers pass through as they are.
  EXPECT_TRUE(
      Ok(FenceReplyStatus(fences_.Answer(*node_, kOther, Request(ControlType::kDescribe)), 4)));
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced))));
  const ControlMessage refused =
      fences_.Answer(*node_, kFenced, Request(ControlType::kFenceComputeNode, kOther));
  EXPECT_TRUE(IsFenced(FenceReplyStatus(OverTheWire(refused), 4)));
  ControlMessage bad_id;
  bad_id.set_status(Status::InvalidArgument("fence: 4294967295 is no compute node id"));
  EXPECT_TRUE(FenceReplyStatus(bad_id, 4).IsInvalidArgument());
}

// kPoolUsage through the control protocol: the reply carries the node's
// usage whole; a reply that does not hold one is an error, not numbers;
// a daemon too old to know the request is named.
TEST_F(ComputeNodeFencesTest, PoolUsageCrossesTheWireWhole) {
  ASSERT_TRUE(node_->AllocateChunk().ok());
  ASSERT_TRUE(node_->AllocateChunk().ok());
  const ControlMessage reply =
      OverTheWire(fences_.Answer(*node_, kOther, Request(ControlType::kPoolUsage)));
  ASSERT_TRUE(Ok(UsageReplyStatus(reply, kMemoryNode)));
  StatusOr<PoolUsage> usage = DecodePoolUsage(reply, kMemoryNode);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  EXPECT_EQ(*usage, node_->Usage()) << usage->ToString();
  EXPECT_EQ(usage->bytes_in_use, 2 * (64 << 10));
  EXPECT_EQ(usage->free_chunks, usage->total_chunks - 2);

  // A fenced node hears why, and gets no numbers.
  EXPECT_TRUE(Ok(Answer(kOther, Request(ControlType::kFenceComputeNode, kFenced))));
  EXPECT_TRUE(IsFenced(fences_.Answer(*node_, kFenced, Request(ControlType::kPoolUsage)).status()));

  ControlMessage short_reply = reply;
  short_reply.name_length = 8;
  EXPECT_EQ(DecodePoolUsage(short_reply, kMemoryNode).status().code(), StatusCode::kInternal);
  ControlMessage nonsense;
  EncodePoolUsage({.pool_bytes = 1 << 20,
                   .chunk_bytes = 64 << 10,
                   .total_chunks = 15,
                   .free_chunks = 16,
                   .bytes_in_use = 0},
                  &nonsense);
  const Status bad = DecodePoolUsage(nonsense, kMemoryNode).status();
  EXPECT_EQ(bad.code(), StatusCode::kInternal) << bad.ToString();
  EXPECT_TRUE(Mentions(bad.message(), "does not add up"));

  ControlMessage old_request = Request(ControlType::kPoolUsage);
  old_request.type = static_cast<ControlType>(99);  // unknown here as 7 was there
  const Status too_old =
      UsageReplyStatus(OverTheWire(HandleControlRequest(*node_, old_request)), 4);
  EXPECT_EQ(too_old.code(), StatusCode::kNotSupported) << too_old.ToString();
  EXPECT_TRUE(Mentions(too_old.message(), "memory node 4's daemon is too old to report"));
}

// The verbs daemon answers chunk requests with HandleControlRequest (in
// the verbs build only, as is this test): a chunk it took back is the
// next one it hands out, and it reports how many it has left.
TEST_F(ComputeNodeFencesTest, AFreedChunkIsTheNextHandedOutAndFreeChunksAreReported) {
  const auto ask = [&](ControlType type, uint64_t address = 0) {
    ControlMessage request;
    request.type = type;
    request.address = address;
    return HandleControlRequest(*node_, request);
  };
  const ChunkAccount start = node_->chunk_account();
  ControlMessage first = ask(ControlType::kAllocateChunk);
  ASSERT_TRUE(first.status().ok()) << first.status().ToString();
  ControlMessage second = ask(ControlType::kAllocateChunk);
  ASSERT_TRUE(second.status().ok());
  ControlMessage left = ask(ControlType::kFreeChunks);
  ASSERT_TRUE(left.status().ok());
  EXPECT_EQ(left.address, node_->total_chunks() - 2);
  ASSERT_TRUE(ask(ControlType::kFreeChunk, first.address).status().ok());
  EXPECT_EQ(ask(ControlType::kFreeChunks).address, node_->total_chunks() - 1);
  ControlMessage again = ask(ControlType::kAllocateChunk);
  ASSERT_TRUE(again.status().ok());
  EXPECT_EQ(again.address, first.address);
  EXPECT_EQ(node_->chunk_account().chunks_allocated, start.chunks_allocated + 3);
  EXPECT_EQ(node_->chunk_account().chunks_freed, start.chunks_freed + 1);
}

}  // namespace
}  // namespace dmidx::memnode
