// The memcached bootstrap against a real memcached on 127.0.0.1: ids,
// records, barriers, runs (epochs), cluster isolation, liveness and errors,
// and the verbs connection handshake written over it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/bootstrap/memcached_handshake.h"
#include "testing/memcached_server.h"
#include "testing/watchdog.h"

namespace dmidx::bootstrap {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::LocalPort;
using testing::MemcachedServer;
using testing::Watchdog;

using Clock = std::chrono::steady_clock;

// Passes if `text` contains `part`; the failure shows both.
::testing::AssertionResult Mentions(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

milliseconds ElapsedSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// Options with short timeouts for tests.
BootstrapOptions TestOptions(std::string server, std::string cluster, bool start_new_run) {
  BootstrapOptions options;
  options.server = std::move(server);
  options.cluster = std::move(cluster);
  options.start_new_run = start_new_run;
  options.connect_timeout = milliseconds(500);
  options.operation_timeout = milliseconds(1000);
  options.wait_timeout = milliseconds(5000);
  options.poll_interval = milliseconds(2);
  options.heartbeat_interval = milliseconds(100);
  options.liveness_timeout = seconds(2);
  return options;
}

// ---- Without a server ----------------------------------------------------

TEST(ParseServerAddressTest, AcceptsHostPortForms) {
  struct Case {
    const char* text;
    const char* host;
    uint16_t port;
    const char* printed;
  };
  for (const Case& c : {Case{"10.0.0.1:11311", "10.0.0.1", 11311, "10.0.0.1:11311"},
                        Case{"mc.example", "mc.example", 11211, "mc.example:11211"},
                        Case{"[::1]:5000", "::1", 5000, "[::1]:5000"},
                        Case{"[fe80::1]", "fe80::1", 11211, "[fe80::1]:11211"},
                        Case{"h:65535", "h", 65535, "h:65535"}}) {
    StatusOr<ServerAddress> address = ParseServerAddress(c.text);
    ASSERT_TRUE(address.ok()) << c.text << ": " << address.status().ToString();
    EXPECT_EQ(address->host, c.host);
    EXPECT_EQ(address->port, c.port);
    EXPECT_EQ(address->ToString(), c.printed);
  }
}

TEST(ParseServerAddressTest, RejectsMalformedAddresses) {
  for (const char* text :
       {"", ":11211", "host:", "host:0", "host:65536", "host:12a", "host:-1", "::1:11211",
        "host :1", " host", "[::1", "[::1]x", "[]:1", "h:1:2", "host:99999999999999999999"}) {
    StatusOr<ServerAddress> address = ParseServerAddress(text);
    EXPECT_TRUE(address.status().IsInvalidArgument()) << "'" << text << "'";
    if (!address.ok()) {
      EXPECT_TRUE(Mentions(address.status().message(), "memcached server address")) << text;
    }
  }
}

TEST(ValidateClusterNameTest, AcceptsPrintableNamesWithoutSlash) {
  for (const char* name : {"a", "bench-A_1.x", "ycsb:run@7", "UPPER"}) {
    EXPECT_TRUE(ValidateClusterName(name).ok()) << name;
  }
  EXPECT_TRUE(ValidateClusterName(std::string(kMaxClusterNameBytes, 'c')).ok());
}

TEST(ValidateClusterNameTest, RejectsEmptySlashWhitespaceControlAndLongNames) {
  for (const std::string& name :
       {std::string(""), std::string("a/b"), std::string("a b"), std::string("a\tb"),
        std::string("a\nb"), std::string("a\x01"), std::string("a\0b", 3), std::string("\x7f"),
        std::string("caf\xc3\xa9"), std::string(kMaxClusterNameBytes + 1, 'c')}) {
    Status status = ValidateClusterName(name);
    EXPECT_TRUE(status.IsInvalidArgument()) << name;
    EXPECT_TRUE(Mentions(status.message(), "cluster name")) << name;
  }
  EXPECT_TRUE(Mentions(ValidateClusterName(std::string(65, 'c')).message(), "at most 64"));
  EXPECT_TRUE(Mentions(ValidateClusterName("a\nb").message(), "\\x0a"));
}

// Options are validated before any connection attempt: the port is closed,
// so anything other than InvalidArgument would mean a connection was tried.
TEST(BootstrapOptionsTest, ConnectRejectsBadOptionsWithInvalidArgument) {
  LocalPort closed(LocalPort::Kind::kClosed);
  ASSERT_TRUE(closed.ok());
  const BootstrapOptions good = TestOptions(closed.address(), "c", true);
  struct Case {
    const char* field;
    void (*mutate)(BootstrapOptions&);
  };
  const Case cases[] = {
      {"server", [](BootstrapOptions& o) { o.server = "localhost:http"; }},
      {"server", [](BootstrapOptions& o) { o.server = ""; }},
      {"cluster", [](BootstrapOptions& o) { o.cluster = "a/b"; }},
      {"cluster", [](BootstrapOptions& o) { o.cluster = ""; }},
      {"connect_timeout", [](BootstrapOptions& o) { o.connect_timeout = milliseconds(0); }},
      {"operation_timeout", [](BootstrapOptions& o) { o.operation_timeout = milliseconds(-1); }},
      {"wait_timeout", [](BootstrapOptions& o) { o.wait_timeout = milliseconds(-1); }},
      {"poll_interval", [](BootstrapOptions& o) { o.poll_interval = milliseconds(0); }},
      {"liveness_timeout", [](BootstrapOptions& o) { o.liveness_timeout = seconds(1); }},
      {"heartbeat_interval", [](BootstrapOptions& o) { o.heartbeat_interval = seconds(5); }},
      {"heartbeat_interval", [](BootstrapOptions& o) { o.heartbeat_interval = milliseconds(-5); }},
  };
  for (const Case& c : cases) {
    BootstrapOptions options = good;
    c.mutate(options);
    StatusOr<std::unique_ptr<MemcachedBootstrap>> node = MemcachedBootstrap::Connect(options);
    EXPECT_TRUE(node.status().IsInvalidArgument()) << c.field << ": " << node.status().ToString();
  }
}

TEST(BootstrapUnreachableTest, ClosedPortIsUnavailableQuicklyAndNamesTheServer) {
  LocalPort closed(LocalPort::Kind::kClosed);
  ASSERT_TRUE(closed.ok());
  const Clock::time_point start = Clock::now();
  for (bool start_new_run : {true, false}) {
    StatusOr<std::unique_ptr<MemcachedBootstrap>> node =
        MemcachedBootstrap::Connect(TestOptions(closed.address(), "c", start_new_run));
    ASSERT_TRUE(node.status().IsUnavailable()) << node.status().ToString();
    EXPECT_TRUE(
        Mentions(node.status().message(), "memcached at " + closed.address() + " unreachable"));
  }
  EXPECT_LT(ElapsedSince(start), milliseconds(2000));
}

TEST(BootstrapUnreachableTest, ServerThatNeverAnswersTimesOutAfterOperationTimeout) {
  LocalPort silent(LocalPort::Kind::kSilent);
  ASSERT_TRUE(silent.ok());
  BootstrapOptions options = TestOptions(silent.address(), "c", false);
  options.operation_timeout = milliseconds(200);
  const Clock::time_point start = Clock::now();
  StatusOr<std::unique_ptr<MemcachedBootstrap>> node = MemcachedBootstrap::Connect(options);
  ASSERT_TRUE(node.status().IsUnavailable()) << node.status().ToString();
  EXPECT_TRUE(Mentions(node.status().message(), "memcached at " + silent.address()));
  EXPECT_LT(ElapsedSince(start), milliseconds(3000));
}

TEST(BootstrapUnreachableTest, ConnectGivesUpAfterConnectTimeout) {
  LocalPort full(LocalPort::Kind::kFull);
  ASSERT_TRUE(full.ok());
  BootstrapOptions options = TestOptions(full.address(), "c", true);
  options.connect_timeout = milliseconds(200);
  options.operation_timeout = milliseconds(5000);
  const Clock::time_point start = Clock::now();
  StatusOr<std::unique_ptr<MemcachedBootstrap>> node = MemcachedBootstrap::Connect(options);
  ASSERT_TRUE(node.status().IsUnavailable()) << node.status().ToString();
  EXPECT_TRUE(Mentions(node.status().message(), "memcached at " + full.address() + " unreachable"));
  EXPECT_LT(ElapsedSince(start), milliseconds(3000));
}

// ---- Against a private memcached -----------------------------------------

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (MemcachedServer::FindBinary().empty()) {
      GTEST_SKIP() << "no memcached binary in PATH (apt-get install memcached)";
    }
    std::string error;
    server_ = MemcachedServer::Start(&error);
    ASSERT_NE(server_, nullptr) << error;
  }

  BootstrapOptions Options(std::string cluster = "test", bool start_new_run = false) const {
    return TestOptions(server_->address(), std::move(cluster), start_new_run);
  }

  // Connects or records a failure and returns null.
  static std::unique_ptr<MemcachedBootstrap> MustConnect(const BootstrapOptions& options) {
    StatusOr<std::unique_ptr<MemcachedBootstrap>> node = MemcachedBootstrap::Connect(options);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    return node.ok() ? std::move(node).value() : nullptr;
  }

  std::unique_ptr<MemcachedServer> server_;
};

TEST_F(BootstrapTest, ConcurrentRegistrationGivesDenseUniqueIdsPerRole) {
  Watchdog watchdog(seconds(30));
  auto starter = MustConnect(Options("ids", true));
  ASSERT_NE(starter, nullptr);
  EXPECT_EQ(starter->epoch(), 1u);
  constexpr int kNodes = 16;
  std::vector<std::unique_ptr<MemcachedBootstrap>> nodes(kNodes);
  std::vector<StatusOr<uint32_t>> ids(kNodes, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      nodes[i] = MustConnect(Options("ids"));
      if (nodes[i])
        ids[i] = nodes[i]->Register(i % 4 == 0 ? NodeRole::kMemory : NodeRole::kCompute);
    });
  }
  for (std::thread& thread : threads)
    thread.join();

  std::vector<uint32_t> memory_ids, compute_ids;
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(ids[i].ok()) << ids[i].status().ToString();
    (i % 4 == 0 ? memory_ids : compute_ids).push_back(*ids[i]);
    EXPECT_EQ(nodes[i]->self()->id, *ids[i]);
    EXPECT_EQ(nodes[i]->epoch(), 1u);
  }
  auto expect_dense = [](std::vector<uint32_t> got, size_t count) {
    std::sort(got.begin(), got.end());
    std::vector<uint32_t> want(count);
    std::iota(want.begin(), want.end(), 0u);
    EXPECT_EQ(got, want);
  };
  expect_dense(memory_ids, kNodes / 4);
  expect_dense(compute_ids, kNodes - kNodes / 4);
  EXPECT_EQ(*starter->RegisteredCount(NodeRole::kMemory), kNodes / 4);
  EXPECT_EQ(*starter->RegisteredCount(NodeRole::kCompute), kNodes - kNodes / 4);

  StatusOr<uint32_t> again = nodes[0]->Register(NodeRole::kCompute);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Mentions(again.status().message(), "already registered as " + nodes[0]->self()->ToString()));
}

TEST_F(BootstrapTest, BarrierReleasesAllParticipantsOnlyWhenAllArrived) {
  Watchdog watchdog(seconds(30));
  auto starter = MustConnect(Options("barrier", true));
  ASSERT_NE(starter, nullptr);
  constexpr int kNodes = 16;
  std::atomic<int> arrived_load{0};
  std::atomic<int> arrived_again{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&] {
      auto node = MustConnect(Options("barrier"));
      if (!node) return;
      StatusOr<uint32_t> id = node->Register(NodeRole::kCompute);
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      arrived_load.fetch_add(1);
      ASSERT_TRUE(node->Barrier("load", kNodes).ok());
      EXPECT_EQ(arrived_load.load(), kNodes);  // nobody passes early
      // Records put before a barrier are visible to everyone after it.
      ASSERT_TRUE(node->Put("cn/" + std::to_string(*id), "value " + std::to_string(*id)).ok());
      ASSERT_TRUE(node->Barrier("published", kNodes).ok());
      for (int peer = 0; peer < kNodes; ++peer) {
        StatusOr<std::string> value = node->TryGet("cn/" + std::to_string(peer));
        ASSERT_TRUE(value.ok()) << value.status().ToString();
        EXPECT_EQ(*value, "value " + std::to_string(peer));
      }
      // A name may be reused: the second "load" is a new barrier.
      arrived_again.fetch_add(1);
      ASSERT_TRUE(node->Barrier("load", kNodes).ok());
      EXPECT_EQ(arrived_again.load(), kNodes);
    });
  }
  for (std::thread& thread : threads)
    thread.join();
}

TEST_F(BootstrapTest, BarrierTimeoutNamesCountsBarrierAndMissingNodes) {
  Watchdog watchdog(seconds(30));
  auto starter = MustConnect(Options("timeout", true));
  ASSERT_NE(starter, nullptr);
  std::vector<std::unique_ptr<MemcachedBootstrap>> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(MustConnect(Options("timeout")));
    ASSERT_NE(nodes.back(), nullptr);
    ASSERT_TRUE(nodes.back()->Register(NodeRole::kCompute).ok());
  }
  // compute 3 is registered and alive but never arrives.
  std::vector<Status> results(3);
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { results[i] = nodes[i]->Barrier("load", 4, milliseconds(300)); });
  }
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_GE(ElapsedSince(start), milliseconds(300));
  EXPECT_LT(ElapsedSince(start), milliseconds(3000));
  for (const Status& status : results) {
    ASSERT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
    EXPECT_TRUE(Mentions(status.message(), "3 of 4 nodes arrived at barrier 'load' after 300 ms"));
    EXPECT_TRUE(Mentions(status.message(), "compute 0"));
    EXPECT_TRUE(Mentions(status.message(), "registered but not arrived: compute 3 (alive at "));
  }
}

TEST_F(BootstrapTest, BarrierRejectsMoreArrivalsThanParticipants) {
  auto first = MustConnect(Options("over", true));
  auto second = MustConnect(Options("over"));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(first->Barrier("solo", 1).ok());
  Status status = second->Barrier("solo", 1);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_TRUE(Mentions(status.message(), "2 nodes arrived at barrier 'solo' that expects 1"));
  EXPECT_TRUE(first->Barrier("bad/name", 1).IsInvalidArgument());
  EXPECT_TRUE(first->Barrier("", 1).IsInvalidArgument());
  EXPECT_TRUE(first->Barrier("zero", 0).IsInvalidArgument());
}

TEST_F(BootstrapTest, PutGetRoundTripsArbitraryBytes) {
  Watchdog watchdog(seconds(30));
  auto writer = MustConnect(Options("records", true));
  auto reader = MustConnect(Options("records"));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string qp_info("lid\0\x01\xff\r\nEND\r\nVALUE x 0 1\r\n", 26);
  ASSERT_TRUE(writer->Put("mn/0/qp/cn/3", qp_info).ok());
  StatusOr<std::string> value = reader->Get("mn/0/qp/cn/3");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(*value, qp_info);

  std::string big(200 << 10, '\0');
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(writer->Put("mn/0/regions", big).ok());
  EXPECT_EQ(*reader->TryGet("mn/0/regions"), big);
  ASSERT_TRUE(writer->Put("mn/0/regions", "").ok());  // replace, with an empty value
  EXPECT_EQ(*reader->TryGet("mn/0/regions"), "");

  // Get waits for a record published later.
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(writer->Put("late", "here").ok());
  });
  value = reader->Get("late", milliseconds(5000));
  late.join();
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(*value, "here");
}

// A memory node's answer to a connection request travels whole: the
// compute node the request names, and a refusal's code, detail (kFenced)
// and message, or the memory node's QpInfo.
TEST_F(BootstrapTest, HandshakeCarriesTheComputeNodeAndARefusalsDetail) {
  Watchdog watchdog(seconds(30));
  auto compute = MustConnect(Options("handshake", true));
  auto memory = MustConnect(Options("handshake"));
  ASSERT_NE(compute, nullptr);
  ASSERT_NE(memory, nullptr);
  constexpr uint16_t kMemoryNode = 3;
  MemcachedHandshake handshake(compute.get());
  MemcachedHandshakeInbox inbox(memory.get(), kMemoryNode);
  fabric::verbs::QpInfo local;
  local.qpn = 17;
  fabric::verbs::QpInfo served;
  served.qpn = 42;
  const Status refusal(StatusCode::kUnavailable, "compute node 7 was fenced",
                       StatusDetail::kFenced);

  // Answers the next two requests: the first (compute node 7) refused,
  // the second (compute node 8) served.
  std::thread memory_node([&] {
    std::vector<fabric::verbs::HandshakeRequest> taken;
    while (taken.size() < 2) {
      StatusOr<std::vector<fabric::verbs::HandshakeRequest>> requests = inbox.Take();
      ASSERT_TRUE(requests.ok()) << requests.status().ToString();
      for (const fabric::verbs::HandshakeRequest& request : *requests) {
        EXPECT_EQ(request.qp.qpn, 17u);
        EXPECT_TRUE(inbox
                        .Answer(request, taken.empty() ? StatusOr<fabric::verbs::QpInfo>(refusal)
                                                       : StatusOr<fabric::verbs::QpInfo>(served))
                        .ok());
        taken.push_back(request);
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
    EXPECT_EQ(taken[0].compute_node, 7u);
    EXPECT_EQ(taken[0].kind, fabric::verbs::ConnectionKind::kControl);
    EXPECT_EQ(taken[1].compute_node, 8u);
    EXPECT_EQ(taken[1].kind, fabric::verbs::ConnectionKind::kData);
  });
  const StatusOr<fabric::verbs::QpInfo> refused = handshake.Connect(
      kMemoryNode, fabric::verbs::ConnectionKind::kControl, 7, local, milliseconds(5000));
  const StatusOr<fabric::verbs::QpInfo> accepted = handshake.Connect(
      kMemoryNode, fabric::verbs::ConnectionKind::kData, 8, local, milliseconds(5000));
  memory_node.join();

  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsUnavailable()) << refused.status().ToString();
  EXPECT_EQ(refused.status().detail(), StatusDetail::kFenced);
  EXPECT_TRUE(Mentions(refused.status().message(),
                       "memory node 3 refused the connection: compute node 7 was fenced"));
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  EXPECT_EQ(accepted->qpn, 42u);
}

TEST_F(BootstrapTest, CounterRecordsHandOutDistinctValues) {
  Watchdog watchdog(seconds(30));
  auto starter = MustConnect(Options("counter", true));
  ASSERT_NE(starter, nullptr);
  constexpr int kNodes = 8;
  constexpr int kPerNode = 25;
  std::vector<std::vector<uint64_t>> taken(kNodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      auto node = MustConnect(Options("counter"));
      if (!node) return;
      for (int k = 0; k < kPerNode; ++k) {
        StatusOr<uint64_t> value = node->Increment("hs/0/requests");
        ASSERT_TRUE(value.ok()) << value.status().ToString();
        taken[i].push_back(*value);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  std::vector<uint64_t> all;
  for (const auto& values : taken)
    all.insert(all.end(), values.begin(), values.end());
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> want(size_t{kNodes} * kPerNode);
  std::iota(want.begin(), want.end(), uint64_t{1});
  EXPECT_EQ(all, want);
  EXPECT_EQ(*starter->TryGet("hs/0/requests"), std::to_string(kNodes * kPerNode));

  ASSERT_TRUE(starter->Put("text", "not a number").ok());
  EXPECT_EQ(starter->Increment("text").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(starter->Increment("bad name").status().IsInvalidArgument());
}

TEST_F(BootstrapTest, GetTimeoutIsDeadlineExceededNamingTheKey) {
  auto node = MustConnect(Options("missing", true));
  ASSERT_NE(node, nullptr);
  const Clock::time_point start = Clock::now();
  StatusOr<std::string> value = node->Get("mn/7/regions", milliseconds(100));
  EXPECT_GE(ElapsedSince(start), milliseconds(100));
  ASSERT_EQ(value.status().code(), StatusCode::kDeadlineExceeded) << value.status().ToString();
  EXPECT_TRUE(
      Mentions(value.status().message(), "record 'mn/7/regions' was not published after 100 ms"));
  EXPECT_TRUE(Mentions(value.status().message(), "dmidx/missing/1/rec/mn/7/regions"));
  EXPECT_TRUE(node->TryGet("mn/7/regions").status().IsNotFound());
}

TEST_F(BootstrapTest, RecordNamesAndSizesAreChecked) {
  auto node = MustConnect(Options("names", true));
  ASSERT_NE(node, nullptr);
  for (const std::string& name : {std::string(""), std::string("a b"), std::string("a\nb"),
                                  std::string(300, 'n'), std::string(240, 'n')}) {
    EXPECT_TRUE(node->Put(name, "x").IsInvalidArgument()) << name;
    EXPECT_TRUE(node->TryGet(name).status().IsInvalidArgument()) << name;
    EXPECT_TRUE(node->Get(name, milliseconds(0)).status().IsInvalidArgument()) << name;
  }
  // memcached's default item size limit is 1 MiB.
  Status too_big = node->Put("huge", std::string(2 << 20, 'x'));
  EXPECT_TRUE(too_big.IsResourceExhausted()) << too_big.ToString();
  // The connection is still usable afterwards.
  EXPECT_TRUE(node->Put("small", "x").ok());
  EXPECT_EQ(*node->TryGet("small"), "x");
}

TEST_F(BootstrapTest, ClustersSharingAServerAreIsolated) {
  Watchdog watchdog(seconds(30));
  auto alpha = MustConnect(Options("alpha", true));
  auto alpha_peer = MustConnect(Options("alpha"));
  auto alpha2 = MustConnect(Options("alpha2", true));  // a name with "alpha" as a prefix
  ASSERT_NE(alpha, nullptr);
  ASSERT_NE(alpha_peer, nullptr);
  ASSERT_NE(alpha2, nullptr);
  EXPECT_EQ(alpha->epoch(), 1u);
  EXPECT_EQ(alpha2->epoch(), 1u);
  EXPECT_EQ(*alpha->Register(NodeRole::kMemory), 0u);
  EXPECT_EQ(*alpha2->Register(NodeRole::kMemory), 0u);
  EXPECT_EQ(*alpha_peer->Register(NodeRole::kMemory), 1u);

  ASSERT_TRUE(alpha->Put("mn/0/regions", "alpha").ok());
  EXPECT_TRUE(alpha2->TryGet("mn/0/regions").status().IsNotFound());
  ASSERT_TRUE(alpha2->Put("mn/0/regions", "alpha2").ok());
  EXPECT_EQ(*alpha_peer->TryGet("mn/0/regions"), "alpha");

  // alpha's two arrivals do not release alpha2's two-node barrier.
  std::thread peer([&] { EXPECT_TRUE(alpha_peer->Barrier("sync", 2).ok()); });
  EXPECT_TRUE(alpha->Barrier("sync", 2).ok());
  peer.join();
  Status lonely = alpha2->Barrier("sync", 2, milliseconds(100));
  EXPECT_TRUE(Mentions(lonely.message(), "1 of 2 nodes arrived"));
  // Ending alpha's run leaves alpha2's alone.
  ASSERT_TRUE(alpha->EndRun().ok());
  EXPECT_EQ(*alpha2->Get("mn/0/regions", milliseconds(100)), "alpha2");
}

TEST_F(BootstrapTest, NewRunReusesTheServerWithoutSeeingTheOldRun) {
  auto old_starter = MustConnect(Options("runs", true));
  auto old_peer = MustConnect(Options("runs"));
  ASSERT_NE(old_starter, nullptr);
  ASSERT_NE(old_peer, nullptr);
  ASSERT_TRUE(old_starter->Register(NodeRole::kMemory).ok());
  ASSERT_TRUE(old_peer->Register(NodeRole::kCompute).ok());
  ASSERT_TRUE(old_starter->Put("config", "run 1").ok());
  std::thread peer([&] { EXPECT_TRUE(old_peer->Barrier("done", 2).ok()); });
  ASSERT_TRUE(old_starter->Barrier("done", 2).ok());
  peer.join();
  ASSERT_TRUE(old_starter->EndRun().ok());
  ASSERT_TRUE(old_starter->EndRun().ok());  // idempotent

  auto starter = MustConnect(Options("runs", true));
  ASSERT_NE(starter, nullptr);
  EXPECT_EQ(starter->epoch(), 2u);
  auto joiner = MustConnect(Options("runs"));
  ASSERT_NE(joiner, nullptr);
  EXPECT_EQ(joiner->epoch(), 2u);
  EXPECT_EQ(*starter->Register(NodeRole::kMemory), 0u);  // ids restart
  EXPECT_EQ(*joiner->Register(NodeRole::kCompute), 0u);
  EXPECT_TRUE(joiner->TryGet("config").status().IsNotFound());
  // Run 1's two arrivals at "done" do not count: a leak would make this a
  // third and fourth arrival (FailedPrecondition) or pass early.
  std::thread second([&] { EXPECT_TRUE(joiner->Barrier("done", 2).ok()); });
  ASSERT_TRUE(starter->Barrier("done", 2).ok());
  second.join();
  // The old run's nodes notice that their run has ended.
  Status old_wait = old_peer->Barrier("later", 2, milliseconds(1000));
  EXPECT_EQ(old_wait.code(), StatusCode::kAborted) << old_wait.ToString();
  EXPECT_TRUE(Mentions(old_wait.message(), "run 1 of cluster 'runs' has ended"));
}

TEST_F(BootstrapTest, JoinerStartedBeforeTheStarterWaitsForTheNewRun) {
  Watchdog watchdog(seconds(30));
  {
    auto first = MustConnect(Options("early", true));
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(first->EndRun().ok());
  }
  std::unique_ptr<MemcachedBootstrap> joiner;
  std::thread early([&] { joiner = MustConnect(Options("early")); });
  std::this_thread::sleep_for(milliseconds(50));
  auto starter = MustConnect(Options("early", true));
  early.join();
  ASSERT_NE(starter, nullptr);
  ASSERT_NE(joiner, nullptr);
  EXPECT_EQ(starter->epoch(), 2u);
  EXPECT_EQ(joiner->epoch(), 2u);
}

TEST_F(BootstrapTest, JoiningWithoutAnyRunTimesOutWithAHint) {
  BootstrapOptions options = Options("nobody");
  options.wait_timeout = milliseconds(100);
  StatusOr<std::unique_ptr<MemcachedBootstrap>> node = MemcachedBootstrap::Connect(options);
  ASSERT_EQ(node.status().code(), StatusCode::kDeadlineExceeded) << node.status().ToString();
  EXPECT_TRUE(Mentions(node.status().message(), "no run of cluster 'nobody'"));
  EXPECT_TRUE(Mentions(node.status().message(), "start_new_run"));
}

// The race the protocol leaves open: run 1 crashed without EndRun, a node of
// run 2 connects before run 2's starter and joins run 1. Its first wait
// after the starter connected reports that, and reconnecting fixes it.
TEST_F(BootstrapTest, NodeThatJoinedASupersededRunIsAbortedOnItsNextWait) {
  auto crashed = MustConnect(Options("stale", true));
  ASSERT_NE(crashed, nullptr);
  crashed.reset();  // no EndRun
  auto too_early = MustConnect(Options("stale"));
  ASSERT_NE(too_early, nullptr);
  EXPECT_EQ(too_early->epoch(), 1u);
  auto starter = MustConnect(Options("stale", true));
  ASSERT_NE(starter, nullptr);
  EXPECT_EQ(starter->epoch(), 2u);

  Status barrier = too_early->Barrier("load", 2, milliseconds(1000));
  EXPECT_EQ(barrier.code(), StatusCode::kAborted) << barrier.ToString();
  EXPECT_TRUE(Mentions(barrier.message(), "run 1 of cluster 'stale' was superseded by run 2"));
  EXPECT_EQ(too_early->Get("anything", milliseconds(1000)).status().code(), StatusCode::kAborted);

  auto rejoined = MustConnect(Options("stale"));
  ASSERT_NE(rejoined, nullptr);
  EXPECT_EQ(rejoined->epoch(), 2u);
}

TEST_F(BootstrapTest, HeartbeatsShowLiveDeadAndDepartedNodes) {
  Watchdog watchdog(seconds(30));
  auto observer = MustConnect(Options("alive", true));
  auto victim = MustConnect(Options("alive"));
  auto survivor = MustConnect(Options("alive"));
  auto leaver = MustConnect(Options("alive"));
  ASSERT_TRUE(observer && victim && survivor && leaver);
  const Clock::time_point registered = Clock::now();
  ASSERT_EQ(*observer->Register(NodeRole::kCompute), 0u);
  ASSERT_EQ(*victim->Register(NodeRole::kCompute), 1u);
  ASSERT_EQ(*survivor->Register(NodeRole::kMemory), 0u);
  ASSERT_EQ(*leaver->Register(NodeRole::kMemory), 1u);
  const NodeId victim_id{NodeRole::kCompute, 1};
  const NodeId survivor_id{NodeRole::kMemory, 0};
  const NodeId leaver_id{NodeRole::kMemory, 1};
  EXPECT_TRUE(*observer->IsAlive(victim_id));
  EXPECT_TRUE(*observer->IsAlive(survivor_id));
  EXPECT_FALSE(*observer->IsAlive(NodeId{NodeRole::kCompute, 9}));  // never registered

  leaver.reset();  // a clean leave is visible at once
  EXPECT_FALSE(*observer->IsAlive(leaver_id));

  victim->StopHeartbeatForTesting();  // as if it crashed
  while (*observer->IsAlive(victim_id)) {
    ASSERT_LT(ElapsedSince(registered), milliseconds(4000)) << "dead node still alive";
    std::this_thread::sleep_for(milliseconds(20));
  }
  // The survivor kept renewing its key past one liveness_timeout.
  std::this_thread::sleep_until(registered + milliseconds(2500));
  EXPECT_TRUE(*observer->IsAlive(survivor_id));

  // A compute node's barrier lists the compute nodes missing, not the
  // memory nodes, which never take part in it.
  Status barrier = observer->Barrier("after-crash", 2, milliseconds(50));
  EXPECT_TRUE(Mentions(barrier.message(), "registered but not arrived: compute 1 (no heartbeat)"))
      << barrier.ToString();
  EXPECT_FALSE(Mentions(barrier.message(), "memory 0")) << barrier.ToString();
  Status memory_barrier = survivor->Barrier("memory-only", 3, milliseconds(50));
  EXPECT_TRUE(
      Mentions(memory_barrier.message(), "registered but not arrived: memory 1 (no heartbeat)"))
      << memory_barrier.ToString();
  EXPECT_TRUE(Mentions(memory_barrier.message(), "1 memory node never registered in run "))
      << memory_barrier.ToString();
  EXPECT_FALSE(Mentions(memory_barrier.message(), "compute")) << memory_barrier.ToString();
}

// A participant that never started never takes an id: the barrier says how
// many of the caller's role are missing that way.
TEST_F(BootstrapTest, BarrierTimeoutCountsNodesThatNeverRegistered) {
  Watchdog watchdog(seconds(30));
  auto memory = MustConnect(Options("unstarted", true));
  auto compute = MustConnect(Options("unstarted"));
  ASSERT_TRUE(memory && compute);
  ASSERT_TRUE(memory->Register(NodeRole::kMemory).ok());
  ASSERT_TRUE(compute->Register(NodeRole::kCompute).ok());
  Status barrier = compute->Barrier("start", 3, milliseconds(50));
  ASSERT_EQ(barrier.code(), StatusCode::kDeadlineExceeded) << barrier.ToString();
  EXPECT_TRUE(Mentions(barrier.message(), "1 of 3 nodes arrived at barrier 'start'"));
  EXPECT_TRUE(Mentions(barrier.message(),
                       "arrived: compute 0; registered but not arrived: none; "
                       "2 compute nodes never registered in run 1"))
      << barrier.ToString();
  EXPECT_FALSE(Mentions(barrier.message(), "memory 0")) << barrier.ToString();
}

TEST_F(BootstrapTest, ServerLossIsUnavailableNotATimeout) {
  auto node = MustConnect(Options("loss", true));
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(node->Put("x", "1").ok());
  server_->Kill();
  const Clock::time_point start = Clock::now();
  Status put = node->Put("x", "2");
  EXPECT_TRUE(put.IsUnavailable()) << put.ToString();
  EXPECT_TRUE(Mentions(put.message(), "memcached at " + server_->address() + " unreachable"));
  StatusOr<std::string> get = node->Get("y", milliseconds(5000));
  EXPECT_TRUE(get.status().IsUnavailable()) << get.status().ToString();
  Status barrier = node->Barrier("b", 2, milliseconds(5000));
  EXPECT_TRUE(barrier.IsUnavailable()) << barrier.ToString();
  EXPECT_LT(ElapsedSince(start), milliseconds(3000));
}

TEST_F(BootstrapTest, ServerRestartEndsTheRunButTheConnectionRecovers) {
  auto node = MustConnect(Options("restart", true));
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(node->Put("x", "1").ok());
  const uint16_t port = server_->port();
  server_->Kill();
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(node->Put("x", "2").IsUnavailable());
  std::string error;
  server_ = MemcachedServer::Start(&error, port);
  ASSERT_NE(server_, nullptr) << error;
  // libmemcached retries a failed server once the wall-clock second of the
  // failure has passed; the run's keys are gone.
  const Clock::time_point restarted = Clock::now();
  while (!node->Put("x", "3").ok()) {
    ASSERT_LT(ElapsedSince(restarted), milliseconds(3000)) << "no reconnect";
    std::this_thread::sleep_for(milliseconds(20));
  }
  StatusOr<std::string> value = node->Get("y", milliseconds(1000));
  EXPECT_EQ(value.status().code(), StatusCode::kAborted) << value.status().ToString();
  EXPECT_TRUE(Mentions(value.status().message(), "restarted or flushed"));
}

}  // namespace
}  // namespace dmidx::bootstrap
