// Compute-node lease records (lock/lease.h): their pages, joining,
// renewal, the one CAS that declares a node dead, and an observer's
// judgement by its own clock.
#include "lock/lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/runtime/client.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"

namespace dmidx::lock {
namespace {

using fabric::RemoteAddress;
using runtime::ContextImpl;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using testing::Watchdog;

// A local cluster of one memory node, two clients of 1 thread x 4
// coroutines, and a blocking context on the first.
struct Rig {
  Rig() {
    ClusterOptions options =
        dmidx::testing::SmallLocalCluster(1, 4 << 20, false, std::chrono::microseconds(0));
    EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
    for (auto* client : {&a, &b}) {
      EXPECT_TRUE(cluster->NewClient({.threads = 1, .coroutines_per_thread = 4}, client).ok());
    }
    EXPECT_TRUE(a->NewBlockingContext(&setup).ok());
  }
  ContextImpl& ctx() { return ContextImpl::From(*setup); }
  RemoteAddress Record(uint32_t compute_node) {
    StatusOr<RemoteAddress> record = LeaseRecord(ctx(), compute_node);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    return record.ok() ? *record : RemoteAddress();
  }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> a, b;
  std::unique_ptr<Context> setup;
};

TEST(LeaseTest, StateWordsNameTheirDeclarer) {
  EXPECT_EQ(LeaseStateWord(LeaseState::kAlive), 1u);
  EXPECT_EQ(LeaseStateWord(LeaseState::kAlive, 7), 1u) << "alive names nobody";
  EXPECT_EQ(LeaseStateWord(LeaseState::kDead, 0), 2u | 1u << 16);
  EXPECT_EQ(LeaseStateWord(LeaseState::kRecovered, 65534), 3u | uint64_t{65535} << 16);
  const LeaseView dead = LeaseView::Of(9, LeaseStateWord(LeaseState::kDead, 5));
  EXPECT_EQ(dead.heartbeat, 9u);
  EXPECT_EQ(dead.state, LeaseState::kDead);
  EXPECT_EQ(dead.declared_by, 5u);
  EXPECT_FALSE(LeaseView::Of(1, 1).declared_by.has_value());
}

// Records of one page sit side by side in it; another page is another
// object; ids past the last the runtime hands out have none.
TEST(LeaseTest, RecordsArePagedByIdAndMadeOnce) {
  Rig rig;
  const RemoteAddress first = rig.Record(0);
  ASSERT_FALSE(first.is_null());
  EXPECT_EQ(rig.Record(0), first) << "the same record each time";
  EXPECT_EQ(rig.Record(5), first + 5 * kLeaseRecordBytes);
  EXPECT_EQ(rig.Record(kLeasesPerPage - 1), first + (kLeasesPerPage - 1) * kLeaseRecordBytes);
  const RemoteAddress next_page = rig.Record(kLeasesPerPage);
  EXPECT_EQ(rig.Record(kLeasesPerPage + 7), next_page + 7 * kLeaseRecordBytes);
  EXPECT_EQ(rig.Record(runtime::kMaxComputeNodes - 1).is_null(), false);
  EXPECT_TRUE(LeaseRecord(rig.ctx(), runtime::kMaxComputeNodes).status().IsInvalidArgument());
  // A fresh page reads as nobody's.
  StatusOr<LeaseView> fresh = ReadLease(rig.ctx(), rig.Record(kLeasesPerPage + 3));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->heartbeat, 0u);
  EXPECT_EQ(fresh->state, LeaseState::kAbsent);
}

// Contexts of two compute nodes all asking for records of one new page at
// once: the page is published once, and every record is in it.
TEST(LeaseTest, ConcurrentFirstUsersPublishOnePage) {
  Watchdog watchdog;
  Rig rig;
  constexpr uint32_t kPage = 3;
  std::vector<RemoteAddress> found(8);
  std::atomic<uint32_t> next{0};
  const auto work = [&](Context& context) -> Status {
    const uint32_t i = next.fetch_add(1);
    DMIDX_ASSIGN_OR_RETURN(found[i],
                           LeaseRecord(ContextImpl::From(context), kPage * kLeasesPerPage + i));
    return Status::Ok();
  };
  Client* clients[] = {rig.a.get(), rig.b.get()};
  const Client::Work works[] = {work, work};
  ASSERT_TRUE(RunClients(clients, works).ok());
  for (uint32_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(found[i], rig.Record(kPage * kLeasesPerPage) + i * kLeaseRecordBytes) << i;
  }
}

TEST(LeaseTest, JoinRenewAndReadBack) {
  Rig rig;
  const RemoteAddress record = rig.Record(4);
  ASSERT_TRUE(JoinLease(rig.ctx(), record, 4).ok());
  StatusOr<LeaseView> joined = ReadLease(rig.ctx(), record);
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->heartbeat, 1u);
  EXPECT_EQ(joined->state, LeaseState::kAlive);
  StatusOr<LeaseView> renewed = RenewLease(rig.ctx(), record, 2);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(renewed->state, LeaseState::kAlive);
  EXPECT_EQ(ReadLease(rig.ctx(), record)->heartbeat, 2u);
  // The id's record is taken: a second incarnation of id 4 is refused.
  const Status again = JoinLease(rig.ctx(), record, 4);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
  EXPECT_NE(again.message().find("never reused"), std::string_view::npos) << again.ToString();
  EXPECT_EQ(ReadLease(rig.ctx(), record)->heartbeat, 2u)
      << "a refused join still rewrote the heartbeat";
}

// Every context of two compute nodes declares one node dead at once:
// exactly one CAS finds it alive, every other finds that one's
// declaration; the dead node learns it at its next renewal; only the
// declarer marks it recovered.
TEST(LeaseTest, OneDeclarationWinsAndOnlyItsDeclarerRecovers) {
  Watchdog watchdog;
  Rig rig;
  const RemoteAddress record = rig.Record(9);
  ASSERT_TRUE(JoinLease(rig.ctx(), record, 9).ok());
  std::atomic<int> won{0};
  std::atomic<int> saw_other{0};
  std::atomic<uint32_t> winner{0};
  const auto work = [&](Context& context) -> Status {
    ContextImpl& ctx = ContextImpl::From(context);
    const uint32_t me = ctx.compute_node().id() * 100 + ctx.coroutine_index();
    DMIDX_ASSIGN_OR_RETURN(const LeaseView found, DeclareDead(ctx, record, me));
    if (found.state == LeaseState::kAlive) {
      ++won;
      winner = me;
    } else if (found.state == LeaseState::kDead) {
      ++saw_other;
    }
    return Status::Ok();
  };
  Client* clients[] = {rig.a.get(), rig.b.get()};
  const Client::Work works[] = {work, work};
  ASSERT_TRUE(RunClients(clients, works).ok());
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(saw_other.load(), 7);
  StatusOr<LeaseView> dead = RenewLease(rig.ctx(), record, 5);
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ(dead->state, LeaseState::kDead);
  EXPECT_EQ(dead->declared_by, winner.load());
  const Status not_mine = MarkRecovered(rig.ctx(), record, winner.load() + 1);
  EXPECT_EQ(not_mine.code(), StatusCode::kFailedPrecondition) << not_mine.ToString();
  ASSERT_TRUE(MarkRecovered(rig.ctx(), record, winner.load()).ok());
  StatusOr<LeaseView> recovered = ReadLease(rig.ctx(), record);
  EXPECT_EQ(recovered->state, LeaseState::kRecovered);
  EXPECT_EQ(recovered->declared_by, winner.load());
  // Declared again: nothing changes, and the CAS says why.
  StatusOr<LeaseView> late = DeclareDead(rig.ctx(), record, 1);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->state, LeaseState::kRecovered);
  EXPECT_EQ(ReadLease(rig.ctx(), record)->state, LeaseState::kRecovered);
}

// The observer's clock alone decides: a heartbeat that moves never
// expires, one that stands still expires exactly `timeout` after the first
// reading that saw it, and any change starts the wait again.
TEST(LeaseWatchTest, ExpiresOnlyAfterTheTimeoutWithoutChange) {
  LeaseWatch watch(milliseconds(100));
  EXPECT_FALSE(watch.Expired(1, milliseconds(0)));
  EXPECT_FALSE(watch.Expired(2, milliseconds(90)));
  EXPECT_FALSE(watch.Expired(3, milliseconds(180)));
  EXPECT_FALSE(watch.Expired(3, milliseconds(279)));
  EXPECT_TRUE(watch.Expired(3, milliseconds(280)));
  EXPECT_TRUE(watch.Expired(3, milliseconds(500)));
  // It moved (even backwards, as after a rejoin): wait again.
  EXPECT_FALSE(watch.Expired(2, milliseconds(501)));
  EXPECT_FALSE(watch.Expired(2, milliseconds(600)));
  EXPECT_TRUE(watch.Expired(2, nanoseconds(milliseconds(601))));
}

}  // namespace
}  // namespace dmidx::lock
