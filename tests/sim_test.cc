// The `sim` backend's own promises (the fabric contract is the conformance
// suite's sim row): exact virtual times on an idle fabric, the client CPU
// model, and one seed giving one run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/sim_fabric.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "testing/local_cluster.h"
#include "testing/run_clients.h"

namespace dmidx {
namespace {

using fabric::Op;
using fabric::OpCode;
using fabric::RemoteAddress;

ClusterOptions SimCluster(uint64_t seed, bool faults) {
  ClusterOptions options =
      testing::SmallLocalCluster(2, uint64_t{16} << 20, faults, std::chrono::microseconds(3));
  options.backend = FabricBackend::kSim;
  options.local.seed = seed;
  return options;
}

fabric::SimFabric& SimOf(Cluster& cluster) {
  return static_cast<fabric::SimFabric&>(static_cast<runtime::ClusterImpl&>(cluster).fabric());
}

// A cancelled event never runs and moves no time: RunNext runs the next
// one, and RunUntil stops at its deadline.
TEST(SimTest, ACancelledEventNeverRunsNorMovesTime) {
  fabric::SimWorld world;
  std::vector<uint64_t> ran;
  const auto record = [](void* target, uint64_t argument) {
    static_cast<std::vector<uint64_t>*>(target)->push_back(argument);
  };
  const uint64_t first = world.Schedule(100, record, &ran, 1);
  world.Schedule(300, record, &ran, 2);
  const uint64_t third = world.Schedule(200, record, &ran, 3);
  EXPECT_NE(first, third);
  world.Cancel(first);
  world.Cancel(third);
  world.RunUntil(250);
  EXPECT_TRUE(ran.empty());
  EXPECT_EQ(world.now(), 250);
  EXPECT_TRUE(world.RunNext());
  EXPECT_EQ(ran, std::vector<uint64_t>{2});
  EXPECT_EQ(world.now(), 300);
  EXPECT_FALSE(world.RunNext());
}

// An 8-byte READ on an idle fabric completes exactly one round trip after
// it left, and it leaves after the CPU time of one post.
TEST(SimTest, IdleReadTakesExactlyTheModelsRoundTrip) {
  for (const int64_t round_trip : {2000, 1500, 3001}) {
    ClusterOptions options = SimCluster(1, false);
    options.sim.round_trip = std::chrono::nanoseconds(round_trip);
    std::unique_ptr<Cluster> cluster;
    ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
    fabric::SimFabric& sim = SimOf(*cluster);
    auto endpoint = sim.Connect().value();
    uint64_t word = 0;
    ASSERT_TRUE(endpoint->RegisterLocal(&word, sizeof(word)).ok());
    const int64_t start = sim.world().now();
    fabric::Completion completion;
    const Op read = Op::Read(RemoteAddress::Pool(0, 4096), &word, 8);
    ASSERT_TRUE(endpoint->Post(0, std::span<const Op>(&read, 1), &completion).ok());
    while (!completion.done())
      endpoint->Poll();
    EXPECT_EQ(sim.world().now() - start, round_trip + options.sim.cpu_per_post.count());
    // Bytes on the wire: a READ request's headers, a response's and the
    // 8 bytes read.
    const std::vector<fabric::NicUsage> nics = sim.nic_usage();
    ASSERT_EQ(nics.size(), 3u);  // mn0, mn1, the unnamed compute node
    EXPECT_EQ(nics[0].bytes_in, options.sim.read_request_bytes);
    EXPECT_EQ(nics[0].bytes_out, options.sim.read_response_header_bytes + 8u);
    EXPECT_EQ(nics[1].messages, 0u);
    EXPECT_EQ(nics[2].messages, 2u);  // the doorbell and the READ
  }
}

// A fresh sim fabric over two small memory nodes, for tests that drive
// endpoints directly.
struct SimRig {
  explicit SimRig(const LocalFabricOptions& knobs, const SimOptions& model = {}) {
    for (auto& region : regions)
      region.assign(1 << 16, 0);
    std::vector<fabric::LocalNodeMemory> nodes;
    for (auto& region : regions) {
      nodes.push_back({reinterpret_cast<uint8_t*>(region.data()), region.size() * 8,
                       reinterpret_cast<uint8_t*>(region.data()) + (1 << 18), 1 << 18});
    }
    sim = fabric::SimFabric::Create(knobs, model, nodes).value();
    endpoint = sim->Connect().value();
    EXPECT_TRUE(endpoint->RegisterLocal(buffer.data(), buffer.size() * 8).ok());
  }
  Status Run(std::span<const Op> ops) {
    fabric::Completion completion;
    DMIDX_RETURN_IF_ERROR(endpoint->Post(0, ops, &completion));
    while (!completion.done())
      endpoint->Poll();
    return completion.status();
  }
  std::vector<uint64_t> regions[2];
  std::vector<uint64_t> buffer = std::vector<uint64_t>(1024, 0);
  std::unique_ptr<fabric::SimFabric> sim;
  std::unique_ptr<fabric::Endpoint> endpoint;
};

// SimOptions::tear_lines: a 1 KiB READ racing 1 KiB WRITEs of one node
// sees whole 64-byte lines, never a line of two versions, and, with the
// model's tearing on, sometimes lines of two versions in one image; with it
// off, always one version. Also for a READ that starts mid-line.
TEST(SimTest, ReadsRacingWritesTearOnlyAtLineBoundaries) {
  for (const bool tear : {true, false}) {
    for (const uint32_t skew : {0u, 40u}) {
      SimOptions model;
      model.tear_lines = tear;
      SimRig rig(LocalFabricOptions{}, model);
      auto writer = rig.sim->Connect().value();
      const RemoteAddress x = RemoteAddress::Pool(0, 4096);
      uint64_t* image = rig.buffer.data();
      uint64_t* versions = rig.buffer.data() + 256;  // 4 versions of 128 words
      for (uint64_t v = 0; v < 4; ++v)
        std::fill(versions + 128 * v, versions + 128 * (v + 1), v + 1);
      ASSERT_TRUE(rig.endpoint->RegisterLocal(rig.buffer.data(), rig.buffer.size() * 8).ok());
      ASSERT_TRUE(writer->RegisterLocal(rig.buffer.data(), rig.buffer.size() * 8).ok());
      const uint32_t length = 1024 - skew;
      int mixed = 0;
      for (int trial = 0; trial < 400; ++trial) {
        const Op write = Op::Write(x, versions + 128 * (trial % 4), 1024);
        const Op read = Op::Read(x + skew, image, length);
        fabric::Completion wrote, read_done;
        ASSERT_TRUE(writer->Post(0, std::span<const Op>(&write, 1), &wrote).ok());
        // The READ leaves a little later each trial, so it lands across
        // the WRITE's transfer.
        rig.sim->world().RunUntil(rig.sim->world().now() + trial % 100);
        ASSERT_TRUE(rig.endpoint->Post(0, std::span<const Op>(&read, 1), &read_done).ok());
        while (!wrote.done() || !read_done.done())
          rig.endpoint->Poll();
        ASSERT_TRUE(wrote.status().ok() && read_done.status().ok());
        // Byte b of the image is remote byte skew + b, in line (skew + b) / 64.
        const auto* bytes = reinterpret_cast<const uint8_t*>(image);
        std::vector<uint8_t> line_version(16, 0);
        bool two_versions = false;
        for (uint32_t b = 0; b < length; ++b) {
          const uint32_t remote_byte = skew + b;
          // Each word holds its version in its low byte; the rest are 0.
          if (remote_byte % 8 != 0) continue;
          const uint8_t version = bytes[b];
          uint8_t& line = line_version[remote_byte / 64];
          if (line == 0) line = version;
          ASSERT_EQ(line, version) << "a line of two versions: tear " << tear << " skew " << skew
                                   << " trial " << trial << " byte " << b;
          if (version != line_version[skew / 64]) two_versions = true;
        }
        mixed += two_versions;
      }
      if (tear) {
        EXPECT_GT(mixed, 0) << "skew " << skew;
      } else {
        EXPECT_EQ(mixed, 0) << "skew " << skew;
      }
    }
  }
}

// A WRITE that overtakes a READ (reorder_unfenced) still lands after every
// earlier WRITE of its connection, and not before it reaches the memory
// node: with jitter, [WRITE 1 KiB of 0xAA, READ, WRITE 8 bytes of 0xBB] to
// one place always ends as 0xBB, and a lone WRITE after a long idle time
// still takes its round trip.
TEST(SimTest, OvertakingWritesKeepWriteOrderAndTakeTime) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    LocalFabricOptions knobs;
    knobs.seed = seed;
    knobs.reorder_unfenced = true;
    knobs.max_apply_delay = std::chrono::microseconds(3);
    SimRig rig(knobs);
    uint64_t* first = rig.buffer.data();
    std::fill(first, first + 128, 0xaa);
    uint64_t* second = first + 128;
    *second = 0xbb;
    const RemoteAddress x = RemoteAddress::Pool(0, 4096);
    const Op ops[] = {Op::Write(x, first, 1024), Op::Read(x + 2048, second + 1, 8),
                      Op::Write(x, second, 8)};
    ASSERT_TRUE(rig.Run(ops).ok());
    ASSERT_EQ(rig.regions[0][4096 / 8], 0xbbu) << "seed " << seed;
    // Idle for 10 us, then a lone WRITE.
    rig.sim->world().RunUntil(rig.sim->world().now() + 10000);
    const int64_t posted = rig.sim->world().now();
    const Op write = Op::Write(x, second, 8);
    ASSERT_TRUE(rig.Run(std::span<const Op>(&write, 1)).ok());
    EXPECT_GE(rig.sim->world().now() - posted, SimOptions{}.round_trip.count() / 2)
        << "seed " << seed;
  }
}

// A batch stalled at a fence rings its doorbell once; and a blocking
// thread's clock never goes back, however far its posts ran ahead.
TEST(SimTest, FenceStallRingsOneDoorbellAndTimeOnlyGoesForward) {
  SimRig rig(LocalFabricOptions{});
  uint64_t* words = rig.buffer.data();
  const RemoteAddress x = RemoteAddress::Pool(0, 4096);
  const Op ops[] = {Op::Read(x, words, 8), Op::Read(x + 8, words + 1, 8, fabric::kFence)};
  ASSERT_TRUE(rig.Run(ops).ok());
  const Op fenced[] = {Op::Read(x, words, 8, fabric::kFence)};
  fabric::Completion first, second;
  ASSERT_TRUE(rig.endpoint->Post(0, std::span<const Op>(ops, 1), &first).ok());
  ASSERT_TRUE(rig.endpoint->Post(0, fenced, &second).ok());
  int64_t last = rig.sim->world().cursor();
  while (!second.done()) {
    for (int i = 0; i < 5; ++i) {
      const Op read = Op::Read(RemoteAddress::Pool(1, 4096), words + 8, 8);
      ASSERT_TRUE(rig.endpoint->Post(1, std::span<const Op>(&read, 1), nullptr).ok());
      ASSERT_GE(rig.sim->world().cursor(), last);
      last = rig.sim->world().cursor();
    }
    rig.endpoint->Poll();
    ASSERT_GE(rig.sim->world().cursor(), last) << "the clock went back";
    last = rig.sim->world().cursor();
  }
  rig.endpoint->Quiesce();
  // Batches: 3 on node 0, the rest on node 1; each rings one doorbell and
  // sends one message per op.
  const std::vector<fabric::NicUsage> nics = rig.sim->nic_usage();
  ASSERT_EQ(nics.size(), 3u);
  EXPECT_EQ(nics[0].messages, 4u);  // node 0: four READs
  EXPECT_EQ(nics[2].messages, 3u + 4u + 2u * nics[1].messages);
}

// Doorbell batching and inline WRITEs are cheaper, exactly: eight READs in
// one batch cost one doorbell and one post's CPU, eight batches eight of
// each; an idle inline WRITE completes one PCIe transaction sooner than a
// WRITE whose payload the NIC must fetch.
TEST(SimTest, BatchingAndInlineWritesAreCheaperByTheModelsAmounts) {
  const SimOptions model;
  uint64_t messages[2] = {0, 0};
  int64_t cpu[2] = {0, 0};
  for (const bool batched : {true, false}) {
    SimRig rig(LocalFabricOptions{});
    std::vector<Op> reads;
    for (int i = 0; i < 8; ++i)
      reads.push_back(Op::Read(RemoteAddress::Pool(0, 4096 + 64 * i), rig.buffer.data() + i, 8));
    const int64_t before = rig.sim->world().cursor();
    fabric::Completion completion;
    for (int i = 0; i < (batched ? 1 : 8); ++i) {
      const std::span<const Op> part =
          batched ? std::span<const Op>(reads) : std::span<const Op>(reads).subspan(i, 1);
      ASSERT_TRUE(rig.endpoint->Post(0, part, &completion).ok());
    }
    cpu[batched] = rig.sim->world().cursor() - before;
    while (!completion.done())
      rig.endpoint->Poll();
    messages[batched] = rig.sim->nic_usage()[2].messages;
  }
  EXPECT_EQ(messages[1], 1u + 8u);
  EXPECT_EQ(messages[0], 8u + 8u);
  EXPECT_EQ(cpu[1], model.cpu_per_post.count());
  EXPECT_EQ(cpu[0], 8 * model.cpu_per_post.count());

  int64_t took[2] = {0, 0};
  for (const bool inlined : {true, false}) {
    SimRig rig(LocalFabricOptions{});
    rig.buffer[0] = 42;
    const Op write = Op::Write(RemoteAddress::Pool(0, 4096), rig.buffer.data(), 8,
                               inlined ? fabric::kInline : 0);
    const int64_t start = rig.sim->world().now();
    ASSERT_TRUE(rig.Run(std::span<const Op>(&write, 1)).ok());
    took[inlined] = rig.sim->world().now() - start;
    EXPECT_EQ(rig.regions[0][4096 / 8], 42u);
  }
  // The WRITE's request carries 8 payload bytes and its response none: the
  // link time moves between directions (8 bytes each way), not in total.
  EXPECT_EQ(took[0] - took[1], model.pcie.count());
}

int64_t NsOf(int64_t ps) {
  return (ps + 999) / 1000;
}

// Every packet of a message pays its kind's headers, and a message is
// ceil(payload / mtu) packets (the MTU bounds the payload, as in RoCE: a
// 1 KiB READ is one packet). Each end's engine handles every packet. An
// idle 2 KiB READ takes the round trip plus exactly its second packet's
// engine work, its longer transfer and its response's bytes on both links.
TEST(SimTest, MessagesPayTheirKindsHeadersOnEveryPacket) {
  const SimOptions model;
  ASSERT_EQ(model.mtu, 1024u);
  struct Case {
    Op op;
    uint64_t in, out, messages;  // at the memory node
  };
  SimRig probe(LocalFabricOptions{});
  uint64_t* words = probe.buffer.data();
  const RemoteAddress x = RemoteAddress::Pool(0, 4096);
  const Case cases[] = {
      {Op::Read(x, words, 1024), 98, 86 + 1024, 1},
      {Op::Read(x, words, 2048), 98, 2 * 86 + 2048, 2},
      {Op::Read(x, words, 1025), 98, 2 * 86 + 1025, 2},
      {Op::Write(x, words, 2048), 2 * 98 + 2048, 86, 2},
      {Op::Write(x, words, 8, fabric::kInline), 98 + 8, 86, 1},
      {Op::CompareSwap(x, words, 0, 1), 110, 94, 1},
      {Op::FetchAdd(x, words, 1), 110, 94, 1},
  };
  for (const Case& c : cases) {
    SimRig rig(LocalFabricOptions{});
    Op op = c.op;
    op.local = rig.buffer.data();
    const int64_t start = rig.sim->world().now();
    ASSERT_TRUE(rig.Run({&op, 1}).ok());
    const std::vector<fabric::NicUsage> nics = rig.sim->nic_usage();
    EXPECT_EQ(nics[0].bytes_in, c.in) << "op " << static_cast<int>(op.code) << " " << op.length;
    EXPECT_EQ(nics[0].bytes_out, c.out) << "op " << static_cast<int>(op.code) << " " << op.length;
    EXPECT_EQ(nics[0].messages, c.messages);
    EXPECT_EQ(nics[2].messages, 1 + c.messages);  // and the doorbell
    if (op.code == OpCode::kRead && op.length == 2048) {
      const double per_byte = rig.sim->ps_per_byte();
      const int64_t extra = 2 * rig.sim->message_ps() +
                            static_cast<int64_t>(per_byte * (2048 - 8)) +
                            2 * static_cast<int64_t>(per_byte * (c.out - (86 + 8)));
      EXPECT_EQ(rig.sim->world().now() - start,
                model.cpu_per_post.count() + NsOf(model.round_trip.count() * 1000 + extra));
    }
  }
  // With no MTU a message is one packet, whatever its length.
  SimOptions one_packet;
  one_packet.mtu = 0;
  SimRig rig(LocalFabricOptions{}, one_packet);
  const Op read = Op::Read(x, rig.buffer.data(), 4096);
  ASSERT_TRUE(rig.Run({&read, 1}).ok());
  EXPECT_EQ(rig.sim->nic_usage()[0].bytes_out, 86u + 4096);
  EXPECT_EQ(rig.sim->nic_usage()[0].messages, 1u);
}

// SimOptions::max_rd_atomic: a connection has at most 16 READs and
// atomics in flight. The 17th READ of a batch leaves when the first one's
// response is in, exactly a round trip after it left, and so completes one
// round trip (less the doorbell it rang already) later; a WRITE posted
// after it to the word it reads still lands after it; and 16 complete in
// one round trip. Atomics count too.
TEST(SimTest, AReadBeyondMaxRdAtomicInFlightWaitsForTheFirstsResponse) {
  const SimOptions model;
  ASSERT_EQ(model.max_rd_atomic, 16u);
  const int64_t round_trip = model.round_trip.count();
  for (const uint32_t reads : {16u, 17u}) {
    SimRig rig(LocalFabricOptions{});
    uint64_t* words = rig.buffer.data();
    rig.regions[0][4096 / 8 + 16] = 7;  // the 17th READ's word
    std::vector<Op> ops;
    for (uint32_t i = 0; i < reads; ++i)
      ops.push_back(Op::Read(RemoteAddress::Pool(0, 4096 + 8 * i), words + i, 8));
    const int64_t start = rig.sim->world().now();
    fabric::Completion read_done, write_done;
    ASSERT_TRUE(rig.endpoint->Post(0, ops, &read_done).ok());
    words[100] = 9;
    const Op write =
        Op::Write(RemoteAddress::Pool(0, 4096 + 8 * 16), words + 100, 8, fabric::kInline);
    ASSERT_TRUE(rig.endpoint->Post(0, {&write, 1}, &write_done).ok());
    int64_t read_took = 0;
    while (!write_done.done()) {
      rig.endpoint->Poll();
      if (read_done.done() && read_took == 0) read_took = rig.sim->world().now() - start;
    }
    ASSERT_TRUE(read_done.status().ok() && write_done.status().ok());
    if (reads == 16) {
      EXPECT_LT(read_took, round_trip + round_trip / 2);
    } else {
      EXPECT_EQ(read_took, model.cpu_per_post.count() + round_trip +
                               NsOf(round_trip * 1000 - rig.sim->message_ps()));
      EXPECT_EQ(words[16], 7u) << "the WRITE posted after the waiting READ overtook it";
    }
    EXPECT_EQ(rig.regions[0][4096 / 8 + 16], 9u);
  }
  // No limit: 17 READs in one round trip; 16 FAAs then a READ: the READ
  // waits for an FAA's response.
  for (const uint32_t limit : {0u, 16u}) {
    SimOptions unlimited;
    unlimited.max_rd_atomic = limit;
    SimRig rig(LocalFabricOptions{}, unlimited);
    std::vector<Op> ops;
    for (uint32_t i = 0; i < 16; ++i)
      ops.push_back(Op::FetchAdd(RemoteAddress::Pool(0, 4096 + 8 * i), rig.buffer.data() + i, 1));
    ops.push_back(Op::Read(RemoteAddress::Pool(0, 8192), rig.buffer.data() + 16, 8));
    const int64_t start = rig.sim->world().now();
    ASSERT_TRUE(rig.Run(ops).ok());
    const int64_t took = rig.sim->world().now() - start;
    if (limit == 0) {
      EXPECT_LT(took, round_trip + round_trip / 2);
    } else {
      EXPECT_GT(took, 2 * round_trip);
    }
  }
}

// Host atomics (Sherman 3.2.2): a bucket per 12 low address bits, held for
// a PCIe read and write, a failed CAS for the read only. Two CASes on one
// word then an FAA in the same bucket: when the second CAS fails the FAA
// starts one PCIe transaction sooner. The prediction the bucket time used
// was right each time. Uncalibrated() charges both outcomes alike.
TEST(SimTest, AFailedCasHoldsItsBucketOnePcieTransactionLess) {
  for (const bool uncalibrated : {false, true}) {
    const SimOptions model = uncalibrated ? SimOptions::Uncalibrated() : SimOptions{};
    int64_t took[2] = {0, 0};
    for (const uint64_t compare : {0u, 1u}) {
      SimRig rig(LocalFabricOptions{}, model);
      uint64_t* old = rig.buffer.data();
      const RemoteAddress word = RemoteAddress::Pool(0, 4096);
      const Op ops[] = {Op::CompareSwap(word, old, 0, 1),
                        Op::CompareSwap(word, old + 1, compare, 2),
                        Op::FetchAdd(word + 4096 * 3, old + 2, 1)};
      const int64_t start = rig.sim->world().now();
      ASSERT_TRUE(rig.Run(ops).ok());
      took[compare] = rig.sim->world().now() - start;
      EXPECT_EQ(old[0], 0u);
      EXPECT_EQ(old[1], 1u);
      EXPECT_EQ(rig.regions[0][4096 / 8], compare == 1 ? 2u : 1u);
      const fabric::SimFabric::Nic& nic = rig.sim->memory_nic(0);
      EXPECT_EQ(nic.host_atomics, uncalibrated ? 0u : 3u);
      EXPECT_EQ(nic.mispredicted_atomics, 0u);
    }
    EXPECT_EQ(took[1] - took[0], uncalibrated ? 0 : model.pcie.count());
  }
}

// Two atomics whose offsets share their 12 low bits share a bucket: the
// second waits out the first's hold (two PCIe transactions, less the
// engine time between their arrivals); with other low bits it does not.
// Uncalibrated() buckets by bits 3 to 14 instead.
TEST(SimTest, AtomicsWithTheSameTwelveLowAddressBitsShareABucket) {
  auto took = [](const SimOptions& model, uint64_t second) {
    SimRig rig(LocalFabricOptions{}, model);
    const Op ops[] = {Op::FetchAdd(RemoteAddress::Pool(0, 4096), rig.buffer.data(), 1),
                      Op::FetchAdd(RemoteAddress::Pool(0, second), rig.buffer.data() + 1, 1)};
    const int64_t start = rig.sim->world().now();
    EXPECT_TRUE(rig.Run(ops).ok());
    EXPECT_EQ(rig.regions[0][second / 8], 1u);
    return rig.sim->world().now() - start;
  };
  const SimOptions model;
  const int64_t apart = took(model, 4096 + 8);
  SimRig rig(LocalFabricOptions{});
  const int64_t wait_ps = 2 * model.pcie.count() * 1000 - rig.sim->message_ps();
  for (const uint64_t shared : {8192u, 4096u + 4096 * 5}) {
    const int64_t waited = took(model, shared) - apart;
    EXPECT_GE(waited, wait_ps / 1000) << shared;
    EXPECT_LE(waited, wait_ps / 1000 + 1) << shared;
  }
  EXPECT_EQ(took(model, 4096 + 2048), apart);
  const SimOptions old = SimOptions::Uncalibrated();
  const int64_t old_apart = took(old, 4096 + 8);
  EXPECT_EQ(took(old, 8192), old_apart);
  EXPECT_GT(took(old, 4096 + 32768), old_apart);
}

// A CAS's outcome is predicted when it is posted; a WRITE that lands
// between then and its turn in the bucket makes the prediction wrong, and
// the memory node counts it. The CAS's own result is still the word's.
TEST(SimTest, ACasWhoseWordAWriteChangesMeanwhileIsCountedMispredicted) {
  SimRig rig(LocalFabricOptions{});
  const RemoteAddress word = RemoteAddress::Pool(0, 4096);
  rig.regions[0][4096 / 8] = 1;  // held
  auto other = rig.sim->Connect().value();
  uint64_t* words = rig.buffer.data();
  ASSERT_TRUE(other->RegisterLocal(words, rig.buffer.size() * 8).ok());
  const Op release = Op::Write(word, words + 10, 8, fabric::kInline);  // words[10] == 0
  const Op take = Op::CompareSwap(word, words, 0, 5);
  fabric::Completion released, taken;
  ASSERT_TRUE(other->Post(0, {&release, 1}, &released).ok());
  ASSERT_TRUE(rig.endpoint->Post(0, {&take, 1}, &taken).ok());
  while (!released.done() || !taken.done())
    rig.endpoint->Poll();
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(rig.regions[0][4096 / 8], 5u);
  EXPECT_EQ(rig.sim->memory_nic(0).host_atomics, 1u);
  EXPECT_EQ(rig.sim->memory_nic(0).mispredicted_atomics, 1u);
}

// A round trip shorter than the model's own parts is refused, naming it.
TEST(SimTest, ImpossibleModelIsInvalidArgument) {
  ClusterOptions options = SimCluster(1, false);
  options.sim.round_trip = std::chrono::nanoseconds(100);
  std::unique_ptr<Cluster> cluster;
  const Status status = Cluster::Open(options, &cluster);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.ToString().find("round_trip"), std::string::npos) << status.ToString();
  options.sim.round_trip = std::chrono::nanoseconds(2000);
  options.sim.nic_messages_per_second = 0;
  EXPECT_TRUE(Cluster::Open(options, &cluster).IsInvalidArgument());
}

// LocalFabricOptions::stall_probability: a stalled READ completes exactly
// `stall` later than an unstalled one; at probability 1 all do, at 1/2
// about half.
TEST(SimTest, StalledOpsCompleteExactlyAStallLater) {
  LocalFabricOptions knobs;
  knobs.stall = std::chrono::microseconds(50);
  auto times = [&knobs](double probability) {
    knobs.stall_probability = probability;
    SimRig rig(knobs);
    const Op read = Op::Read(RemoteAddress::Pool(0, 4096), rig.buffer.data(), 8);
    std::vector<int64_t> took;
    for (int i = 0; i < 200; ++i) {
      const int64_t start = rig.sim->world().now();
      EXPECT_TRUE(rig.Run({&read, 1}).ok());
      took.push_back(rig.sim->world().now() - start);
    }
    return took;
  };
  const std::vector<int64_t> plain = times(0);
  const int64_t idle = plain.front();
  EXPECT_EQ(std::count(plain.begin(), plain.end(), idle), 200);
  const std::vector<int64_t> all = times(1);
  EXPECT_EQ(std::count(all.begin(), all.end(), idle + knobs.stall.count()), 200);
  const std::vector<int64_t> half = times(0.5);
  const auto stalled = std::count(half.begin(), half.end(), idle + knobs.stall.count());
  EXPECT_EQ(stalled + std::count(half.begin(), half.end(), idle), 200);
  EXPECT_GT(stalled, 60);  // 100 expected; 140 and 60 are over 5 deviations out
  EXPECT_LT(stalled, 140);
}

TEST(SimTest, StallProbabilityOutsideZeroToOneIsInvalidArgument) {
  for (const FabricBackend backend : {FabricBackend::kSim, FabricBackend::kLocal}) {
    ClusterOptions options = SimCluster(1, false);
    options.backend = backend;
    options.local.stall_probability = 1.5;
    std::unique_ptr<Cluster> cluster;
    const Status status = Cluster::Open(options, &cluster);
    EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
    EXPECT_NE(status.ToString().find("stall_probability"), std::string::npos) << status.ToString();
  }
}

// One worker is one CPU: its coroutines' operations run one after another,
// so N coroutines that each charge one operation and do one READ finish no
// sooner than N operations' CPU time; on N workers they overlap.
TEST(SimTest, CoroutinesOfOneWorkerShareItsCpu) {
  for (const uint32_t threads : {1u, 4u}) {
    ClusterOptions options = SimCluster(1, false);
    options.sim.cpu_per_operation = std::chrono::microseconds(10);
    std::unique_ptr<Cluster> cluster;
    ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
    std::unique_ptr<Client> client = testing::NewClient(*cluster, threads, 4 / threads);
    ASSERT_NE(client, nullptr);
    const int64_t start = SimOf(*cluster).world().now();
    ASSERT_TRUE(client
                    ->Run([](Context& context) {
                      runtime::ContextImpl& ctx = runtime::ContextImpl::From(context);
                      ctx.ChargeOperation();
                      uint64_t* word = ctx.discard_word();
                      const Op read = Op::Read(RemoteAddress::Pool(0, 4096), word, 8);
                      return ctx.Execute(0, std::span<const Op>(&read, 1));
                    })
                    .ok());
    const int64_t elapsed = SimOf(*cluster).world().now() - start;
    if (threads == 1) {
      EXPECT_GE(elapsed, 4 * 10000) << "four operations on one CPU overlapped";
    } else {
      EXPECT_LT(elapsed, 2 * 10000) << "four CPUs did not run in parallel";
    }
  }
}

// Many compute nodes, threads and coroutines hammering a few words with
// CAS and FAA, every fault injected: the same seed gives the same virtual
// time, the same counters and the same memory; another seed does not.
struct RunPrint {
  int64_t end_ns = 0;
  Stats stats;
  std::vector<uint64_t> words;
  bool operator==(const RunPrint&) const = default;
};

RunPrint RunContended(uint64_t seed) {
  RunPrint print;
  std::unique_ptr<Cluster> cluster;
  EXPECT_TRUE(Cluster::Open(SimCluster(seed, true), &cluster).ok());
  if (!cluster) return print;
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < 3; ++c)
    clients.push_back(testing::NewClient(*cluster, 2, 3));
  const RemoteAddress base = RemoteAddress::Pool(1, 8192);
  std::vector<Client*> pointers;
  for (auto& client : clients)
    pointers.push_back(client.get());
  std::vector<Status> statuses =
      testing::RunClients(pointers, [&](int client, Context& context) -> Status {
        runtime::ContextImpl& ctx = runtime::ContextImpl::From(context);
        auto* old = reinterpret_cast<uint64_t*>(ctx.scratch().data());
        for (int i = 0; i < 200; ++i) {
          const RemoteAddress word = base + 8 * ((client * 7 + i) % 4);
          const Op add = Op::FetchAdd(word, old, 1);
          DMIDX_RETURN_IF_ERROR(ctx.Execute(1, std::span<const Op>(&add, 1)));
          const Op cas = Op::CompareSwap(word + 32, old, *old, *old + client + 1);
          DMIDX_RETURN_IF_ERROR(ctx.Execute(1, std::span<const Op>(&cas, 1)));
          ctx.Backoff(static_cast<uint32_t>(i % 3));
        }
        return Status::Ok();
      });
  for (const Status& status : statuses)
    EXPECT_TRUE(status.ok()) << status.ToString();
  fabric::SimFabric& sim = SimOf(*cluster);
  print.end_ns = sim.world().now();
  for (auto& client : clients)
    print.stats += client->stats();
  const uint8_t* pool =
      static_cast<runtime::ClusterImpl&>(*cluster).backend().in_process_memory_node(1)->pool_base();
  for (int w = 0; w < 8; ++w)
    print.words.push_back(reinterpret_cast<const uint64_t*>(pool + 8192)[w]);
  return print;
}

TEST(SimTest, SameSeedGivesTheSameRunBitForBit) {
  const RunPrint first = RunContended(11);
  const RunPrint second = RunContended(11);
  EXPECT_EQ(first, second) << "end " << first.end_ns << " vs " << second.end_ns;
  EXPECT_GT(first.stats.compare_swap_failures, 0u) << "no contention: the test proves little";
  uint64_t adds = 0;
  for (int w = 0; w < 4; ++w)
    adds += first.words[w];
  EXPECT_EQ(adds, 3u * 2 * 3 * 200) << "an FAA was lost or doubled";
  const RunPrint other = RunContended(12);
  EXPECT_NE(first.end_ns, other.end_ns) << "seed 12 ran exactly as seed 11";
}

}  // namespace
}  // namespace dmidx
