// Compute-node lease records (lib/runtime/lease.h): their pages, joining,
// renewal, the one CAS that declares a node dead, and an observer's
// judgement by its own clock.
#include "lib/runtime/lease.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/runtime/client.h"
#include "testing/local_cluster.h"
#include "testing/watchdog.h"

namespace dmidx::runtime {
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
  RemoteAddress Record(uint32_t compute_node, bool create = true) {
    StatusOr<RemoteAddress> record = LeaseRecord(ctx(), pages, compute_node, create);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    return record.ok() ? *record : RemoteAddress();
  }
  Lease Read(RemoteAddress record) {
    StatusOr<LeaseRecordView> view = ReadLease(ctx(), record);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    return view.ok() ? view->lease : Lease();
  }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> a, b;
  std::unique_ptr<Context> setup;
  LeasePages pages;
};

Lease Alive(uint64_t heartbeat) {
  Lease lease;
  lease.state = LeaseState::kAlive;
  lease.heartbeat = heartbeat;
  return lease;
}

TEST(LeaseTest, OneWordHoldsStateDeclarerAndHeartbeat) {
  EXPECT_EQ(Alive(1).word(), 1u | uint64_t{1} << 18);
  Lease dead = Alive(9);
  dead.state = LeaseState::kDead;
  dead.declared_by = 65534;
  EXPECT_EQ(dead.word(), 2u | uint64_t{65535} << 2 | uint64_t{9} << 18);
  const Lease back = Lease::Of(dead.word());
  EXPECT_EQ(back.state, LeaseState::kDead);
  EXPECT_EQ(back.heartbeat, 9u);
  EXPECT_EQ(back.declared_by, 65534u);
  EXPECT_TRUE(Lease::Valid(0));
  EXPECT_TRUE(Lease::Valid(Alive(3).word()));
  EXPECT_TRUE(Lease::Valid(dead.word()));
  EXPECT_FALSE(Lease::Valid(uint64_t{5} << 18)) << "absent with a heartbeat";
  EXPECT_FALSE(Lease::Valid(Alive(3).word() | uint64_t{1} << 2)) << "alive with a declarer";
  EXPECT_FALSE(Lease::Valid(2)) << "dead by nobody";
}

// Records of one page sit side by side in it; a lookup without `create`
// finds no page nobody joined; ids past the last the runtime hands out
// have none; a page is zeroed even when its memory held something. (The
// rig's clients joined page 0 as they opened: the test works on page 1.)
TEST(LeaseTest, RecordsArePagedByIdAndMadeOnceZeroed) {
  Rig rig;
  constexpr uint32_t kBase = kLeasesPerPage;
  EXPECT_TRUE(LeaseRecord(rig.ctx(), rig.pages, kBase + 5, false).status().IsNotFound());
  // Memory for the page that held something before: its allocation is
  // given back, and the page's allocation takes it again.
  StatusOr<RemoteAddress> dirty = rig.ctx().allocator().Allocate(4096, 64, 0);
  ASSERT_TRUE(dirty.ok());
  auto* junk = reinterpret_cast<uint8_t*>(rig.ctx().scratch().data());
  std::fill(junk, junk + 512, uint8_t{0xa5});
  for (uint32_t i = 0; i < 8; ++i) {
    const fabric::Op write = fabric::Op::Write(*dirty + i * 512, junk, 512);
    ASSERT_TRUE(rig.ctx().Execute(0, {&write, 1}).ok());
  }
  ASSERT_TRUE(rig.ctx().allocator().Free(*dirty, 4096).ok());
  const RemoteAddress first = rig.Record(kBase);
  ASSERT_EQ(first, *dirty) << "the page did not reuse the dirtied memory; the test needs it";
  for (uint32_t id : {0u, 1u, kLeasesPerPage - 1}) {
    StatusOr<LeaseRecordView> fresh = ReadLease(rig.ctx(), first + id * kLeaseRecordBytes);
    ASSERT_TRUE(fresh.ok()) << id << ": " << fresh.status().ToString();
    EXPECT_EQ(fresh->lease.state, LeaseState::kAbsent);
    EXPECT_FALSE(fresh->recovering.has_value());
  }
  EXPECT_EQ(rig.Record(kBase), first) << "the same record each time";
  EXPECT_EQ(rig.Record(kBase + 5, false), first + 5 * kLeaseRecordBytes);
  LeasePages other;  // another compute node's cache finds it through the catalog
  EXPECT_EQ(*LeaseRecord(rig.ctx(), other, kBase + kLeasesPerPage - 1, false),
            first + (kLeasesPerPage - 1) * kLeaseRecordBytes);
  const RemoteAddress next_page = rig.Record(kBase + kLeasesPerPage);
  EXPECT_EQ(rig.Record(kBase + kLeasesPerPage + 7), next_page + 7 * kLeaseRecordBytes);
  EXPECT_FALSE(rig.Record(runtime::kMaxComputeNodes - 1).is_null());
  EXPECT_TRUE(
      LeaseRecord(rig.ctx(), rig.pages, runtime::kMaxComputeNodes / 2, false).status().IsNotFound())
      << "a page is made only for the ids a run uses";
  EXPECT_TRUE(LeaseRecord(rig.ctx(), rig.pages, runtime::kMaxComputeNodes, true)
                  .status()
                  .IsInvalidArgument());
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
    LeasePages own;  // as if each were its own compute node
    DMIDX_ASSIGN_OR_RETURN(
        found[i], LeaseRecord(ContextImpl::From(context), own, kPage * kLeasesPerPage + i, true));
    return Status::Ok();
  };
  Client* clients[] = {rig.a.get(), rig.b.get()};
  const Client::Work works[] = {work, work};
  ASSERT_TRUE(dmidx::RunClients(clients, works).ok());
  for (uint32_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(found[i], rig.Record(kPage * kLeasesPerPage) + i * kLeaseRecordBytes) << i;
  }
}

TEST(LeaseTest, JoinAndRenewFromTheLastWord) {
  Rig rig;
  const RemoteAddress record = rig.Record(4);
  StatusOr<Lease> joined = JoinLease(rig.ctx(), record, 4);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->word(), Alive(1).word());
  EXPECT_EQ(rig.Read(record).word(), Alive(1).word());
  StatusOr<Lease> renewed = RenewLease(rig.ctx(), record, *joined);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(renewed->word(), Alive(2).word());
  EXPECT_EQ(rig.Read(record).heartbeat, 2u);
  // A renewal from a word that is no longer there changes nothing and
  // says what is.
  StatusOr<Lease> stale = RenewLease(rig.ctx(), record, *joined);
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->word(), Alive(2).word());
  EXPECT_EQ(rig.Read(record).heartbeat, 2u);
  // The id's own next client (a verbs process keeps its id) takes the
  // lease back by a renewal; once declared dead, the id is refused and the
  // record left as it was.
  const StatusOr<Lease> again = JoinLease(rig.ctx(), record, 4);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->word(), Alive(3).word());
  ASSERT_EQ(DeclareDead(rig.ctx(), record, *again, 7)->word(), again->word());
  const StatusOr<Lease> dead = JoinLease(rig.ctx(), record, 4);
  EXPECT_EQ(dead.status().code(), StatusCode::kFailedPrecondition) << dead.status().ToString();
  EXPECT_NE(dead.status().message().find("never reused"), std::string_view::npos);
  EXPECT_EQ(rig.Read(record).state, LeaseState::kDead);
}

// Every context of two compute nodes declares one node dead at once, from
// the word they judged: exactly one CAS wins, every other finds that one's
// declaration; the dead node learns it at its next renewal, which changes
// nothing; only the declarer marks it recovered.
TEST(LeaseTest, OneDeclarationWinsAndOnlyItsDeclarerRecovers) {
  Watchdog watchdog;
  Rig rig;
  const RemoteAddress record = rig.Record(9);
  StatusOr<Lease> joined = JoinLease(rig.ctx(), record, 9);
  ASSERT_TRUE(joined.ok());
  std::atomic<int> won{0};
  std::atomic<int> saw_other{0};
  std::atomic<uint32_t> winner{0};
  const auto work = [&](Context& context) -> Status {
    ContextImpl& ctx = ContextImpl::From(context);
    const uint32_t me = ctx.compute_node().id() * 100 + ctx.coroutine_index();
    DMIDX_ASSIGN_OR_RETURN(const Lease found, DeclareDead(ctx, record, *joined, me));
    if (found.word() == joined->word()) {
      ++won;
      winner = me;
    } else if (found.state == LeaseState::kDead) {
      ++saw_other;
    }
    return Status::Ok();
  };
  Client* clients[] = {rig.a.get(), rig.b.get()};
  const Client::Work works[] = {work, work};
  ASSERT_TRUE(dmidx::RunClients(clients, works).ok());
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(saw_other.load(), 7);
  StatusOr<Lease> dead = RenewLease(rig.ctx(), record, *joined);
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ(dead->state, LeaseState::kDead);
  EXPECT_EQ(dead->declared_by, winner.load());
  EXPECT_EQ(rig.Read(record).heartbeat, 1u) << "a dead node's renewal moved its heartbeat";
  const Status not_mine = MarkRecovered(rig.ctx(), record, winner.load() + 1);
  EXPECT_EQ(not_mine.code(), StatusCode::kFailedPrecondition) << not_mine.ToString();
  ASSERT_TRUE(MarkRecovered(rig.ctx(), record, winner.load()).ok());
  const Lease recovered = rig.Read(record);
  EXPECT_EQ(recovered.state, LeaseState::kRecovered);
  EXPECT_EQ(recovered.declared_by, winner.load());
  // Declared again from what was judged: nothing changes, and the CAS says
  // why.
  StatusOr<Lease> late = DeclareDead(rig.ctx(), record, *joined, 1);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->state, LeaseState::kRecovered);
  EXPECT_EQ(rig.Read(record).state, LeaseState::kRecovered);
}

// An observer judged the lease stale, but the node renewed before the
// declaration landed: the declaration fails and the node lives on.
TEST(LeaseTest, ARenewalBeforeTheDeclarationKeepsTheNodeAlive) {
  Rig rig;
  const RemoteAddress record = rig.Record(2);
  StatusOr<Lease> joined = JoinLease(rig.ctx(), record, 2);
  ASSERT_TRUE(joined.ok());
  const Lease judged = rig.Read(record);
  ASSERT_TRUE(RenewLease(rig.ctx(), record, *joined).ok());
  StatusOr<Lease> found = DeclareDead(rig.ctx(), record, judged, 7);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->word(), Alive(2).word());
  EXPECT_EQ(rig.Read(record).state, LeaseState::kAlive);
  EXPECT_TRUE(DeclareDead(rig.ctx(), record, Lease::Of(Alive(2).word() | 2), 7)
                  .status()
                  .IsInvalidArgument())
      << "only alive or absent leases are declared";
}

// A lock word may name a node that died before it joined: its absent
// record is declared dead like a stale one, and a late join is refused.
TEST(LeaseTest, ANodeThatNeverJoinedCanBeDeclaredAndThenCannotJoin) {
  Rig rig;
  const RemoteAddress record = rig.Record(11);
  StatusOr<Lease> found = DeclareDead(rig.ctx(), record, Lease(), 3);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->state, LeaseState::kAbsent) << "the declaration won";
  EXPECT_EQ(rig.Read(record).declared_by, 3u);
  EXPECT_EQ(JoinLease(rig.ctx(), record, 11).status().code(), StatusCode::kFailedPrecondition);
}

// The recoverer d of X dies; s declares d dead, finds what d was
// recovering, and takes X's recovery over; X is then recovered by s.
TEST(LeaseTest, ASecondSurvivorTakesOverTheRecoveryOfADeadRecoverer) {
  Rig rig;
  const uint32_t x = 20, d = 21, s = 22;
  const RemoteAddress x_record = rig.Record(x), d_record = rig.Record(d);
  StatusOr<Lease> x_lease = JoinLease(rig.ctx(), x_record, x);
  StatusOr<Lease> d_lease = JoinLease(rig.ctx(), d_record, d);
  ASSERT_TRUE(x_lease.ok() && d_lease.ok());
  ASSERT_EQ(DeclareDead(rig.ctx(), x_record, *x_lease, d)->word(), x_lease->word());
  ASSERT_TRUE(NoteRecovering(rig.ctx(), d_record, x).ok());
  // d dies; s judges it and wins.
  ASSERT_EQ(DeclareDead(rig.ctx(), d_record, *d_lease, s)->word(), d_lease->word());
  StatusOr<LeaseRecordView> d_view = ReadLease(rig.ctx(), d_record);
  ASSERT_TRUE(d_view.ok());
  ASSERT_EQ(d_view->recovering, x);
  EXPECT_EQ(MarkRecovered(rig.ctx(), x_record, s).code(), StatusCode::kFailedPrecondition)
      << "s recovered what d had declared without taking it over";
  EXPECT_EQ(TakeOverRecovery(rig.ctx(), x_record, /*from=*/s, /*by=*/d)->declared_by, d)
      << "a takeover from the wrong declarer changed something";
  StatusOr<Lease> taken = TakeOverRecovery(rig.ctx(), x_record, d, s);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->declared_by, d) << "the word found: d's declaration";
  EXPECT_EQ(rig.Read(x_record).declared_by, s);
  ASSERT_TRUE(MarkRecovered(rig.ctx(), x_record, s).ok());
  ASSERT_TRUE(MarkRecovered(rig.ctx(), d_record, s).ok());
  EXPECT_EQ(rig.Read(x_record).state, LeaseState::kRecovered);
}

TEST(LeaseTest, AWordNoFunctionWritesIsDataLoss) {
  Rig rig;
  const RemoteAddress record = rig.Record(30);
  auto* word = reinterpret_cast<uint64_t*>(rig.ctx().scratch().data());
  *word = 2;  // dead, by nobody
  const fabric::Op write = fabric::Op::Write(record, word, 8);
  ASSERT_TRUE(rig.ctx().Execute(record.node(), {&write, 1}).ok());
  const Status read = ReadLease(rig.ctx(), record).status();
  EXPECT_TRUE(read.IsDataLoss()) << read.ToString();
  EXPECT_TRUE(JoinLease(rig.ctx(), record, 30).status().IsDataLoss());
}

// The observer's clock alone decides: a word that moves never expires, one
// that stands still expires exactly `timeout` after the first reading that
// saw it, and a change of word or of holder starts the wait again.
TEST(LeaseWatchTest, ExpiresOnlyAfterTheTimeoutWithoutChange) {
  LeaseWatch watch(milliseconds(100));
  EXPECT_FALSE(watch.Expired(1, 10, milliseconds(0)));
  EXPECT_FALSE(watch.Expired(1, 11, milliseconds(90)));
  EXPECT_FALSE(watch.Expired(1, 12, milliseconds(180)));
  EXPECT_FALSE(watch.Expired(1, 12, milliseconds(279)));
  EXPECT_TRUE(watch.Expired(1, 12, milliseconds(280)));
  EXPECT_TRUE(watch.Expired(1, 12, milliseconds(500)));
  // Another holder whose word happens to be the same: wait again.
  EXPECT_FALSE(watch.Expired(2, 12, milliseconds(501)));
  EXPECT_FALSE(watch.Expired(2, 12, milliseconds(600)));
  EXPECT_TRUE(watch.Expired(2, 12, nanoseconds(milliseconds(601))));
}

TEST(LeaseOptionsTest, ClusterOpenRefusesAPeriodOrTimeoutThatCannotWork) {
  ClusterOptions options =
      dmidx::testing::SmallLocalCluster(1, 4 << 20, false, std::chrono::microseconds(0));
  std::unique_ptr<Cluster> cluster;
  options.lease.period = nanoseconds(0);
  Status opened = Cluster::Open(options, &cluster);
  EXPECT_TRUE(opened.IsInvalidArgument()) << opened.ToString();
  EXPECT_NE(opened.message().find("lease.period"), std::string_view::npos) << opened.ToString();
  options.lease.period = milliseconds(10);
  options.lease.timeout = milliseconds(19);
  opened = Cluster::Open(options, &cluster);
  EXPECT_TRUE(opened.IsInvalidArgument()) << opened.ToString();
  EXPECT_NE(opened.message().find("lease.timeout"), std::string_view::npos) << opened.ToString();
  EXPECT_EQ(cluster, nullptr);
  options.lease.timeout = milliseconds(20);
  EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
}

// A local cluster with a 1 ms lease period, an observer client (with a
// blocking context) and the client whose lease the test watches.
struct KeeperRig {
  KeeperRig() {
    ClusterOptions options =
        dmidx::testing::SmallLocalCluster(1, 4 << 20, false, std::chrono::microseconds(0));
    options.lease.period = milliseconds(1);
    options.lease.timeout = milliseconds(50);
    EXPECT_TRUE(Cluster::Open(options, &cluster).ok());
    EXPECT_TRUE(cluster->NewClient({}, &observer).ok());
    EXPECT_TRUE(cluster->NewClient({}, &client).ok());
    EXPECT_TRUE(observer->NewBlockingContext(&setup).ok());
  }
  ContextImpl& ctx() { return ContextImpl::From(*setup); }
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> observer, client;
  std::unique_ptr<Context> setup;
};

// The lease of a client on the local backend: joined at open, renewed by
// its own thread while the client does nothing; when the client closes it
// stops renewing, and does not give the lease up (what it may still hold
// is recovered like a dead node's).
TEST(LeaseKeeperTest, AClientJoinsRenewsAndStopsWhenItCloses) {
  Watchdog watchdog;
  KeeperRig rig;
  std::unique_ptr<Client>& client = rig.client;
  ContextImpl& ctx = rig.ctx();
  LeasePages pages;
  StatusOr<RemoteAddress> record = LeaseRecord(ctx, pages, client->compute_node_id(), false);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  LeaseKeeper& keeper = static_cast<ClientImpl&>(*client).lease();
  EXPECT_EQ(keeper.record(), *record);
  // Its word moves on, by one a renewal, with nobody running anything.
  uint64_t first = 0;
  for (;;) {
    StatusOr<LeaseRecordView> view = ReadLease(ctx, *record);
    ASSERT_TRUE(view.ok());
    ASSERT_EQ(view->lease.state, LeaseState::kAlive);
    if (first == 0) first = view->lease.heartbeat;
    if (view->lease.heartbeat >= first + 3) break;
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_GE(keeper.renewals(), 3u);
  EXPECT_TRUE(keeper.status().ok());
  const Stats before = client->stats();
  EXPECT_EQ(before.round_trips, 0u) << "renewals were counted as the client's work";
  client.reset();
  StatusOr<LeaseRecordView> closed = ReadLease(ctx, *record);
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(closed->lease.state, LeaseState::kAlive) << closed->lease.ToString();
  std::this_thread::sleep_for(milliseconds(5));
  StatusOr<LeaseRecordView> later = ReadLease(ctx, *record);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->lease.word(), closed->lease.word()) << "renewed after its client closed";
}

// Declared dead by another node (its word changed under it), a client's
// keeper stops renewing and says the lease is lost, with kFenced.
TEST(LeaseKeeperTest, ANodeDeclaredDeadLearnsItAtItsNextRenewal) {
  Watchdog watchdog;
  KeeperRig rig;
  std::unique_ptr<Client>& client = rig.client;
  Client& observer = *rig.observer;
  ContextImpl& ctx = rig.ctx();
  LeaseKeeper& keeper = static_cast<ClientImpl&>(*client).lease();
  // Declare it from whatever word it has: retry while it renews under us.
  Lease judged;
  for (;;) {
    StatusOr<LeaseRecordView> view = ReadLease(ctx, keeper.record());
    ASSERT_TRUE(view.ok());
    judged = view->lease;
    StatusOr<Lease> found = DeclareDead(ctx, keeper.record(), judged, observer.compute_node_id());
    ASSERT_TRUE(found.ok());
    if (found->word() == judged.word()) break;
  }
  while (keeper.status().ok())
    std::this_thread::sleep_for(milliseconds(1));
  EXPECT_TRUE(IsFenced(keeper.status())) << keeper.status().ToString();
  EXPECT_NE(keeper.status().message().find("lost its lease"), std::string_view::npos);
  const uint64_t renewals = keeper.renewals();
  std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(keeper.renewals(), renewals) << "a dead node kept renewing";
  const RemoteAddress record = keeper.record();
  client.reset();  // the keeper goes with it
  StatusOr<LeaseRecordView> after = ReadLease(ctx, record);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->lease.state, LeaseState::kDead);
  EXPECT_EQ(after->lease.declared_by, observer.compute_node_id());
}

// Client::JudgeComputeNode: a node that renews is alive within a period
// or two; one that stopped renewing (its client closed, as a killed
// process's does) is gone once its lease stood still for the timeout, and
// is then recovered; a node cannot judge itself.
TEST(LeaseKeeperTest, JudgeComputeNodeTellsALiveNodeFromOneWhoseLeaseStoodStill) {
  Watchdog watchdog;
  KeeperRig rig;
  Client& observer = *rig.observer;
  Context& ctx = *rig.setup;
  const uint32_t node = rig.client->compute_node_id();
  const nanoseconds far = rig.cluster->Now() + std::chrono::seconds(30);
  StatusOr<bool> alive = observer.JudgeComputeNode(ctx, node, far);
  ASSERT_TRUE(alive.ok()) << alive.status().ToString();
  EXPECT_FALSE(*alive) << "a renewing node was judged gone";
  EXPECT_EQ(observer.JudgeComputeNode(ctx, observer.compute_node_id(), far).status().code(),
            StatusCode::kInvalidArgument);
  // A deadline before the timeout can pass: neither verdict.
  rig.client.reset();
  const StatusOr<bool> early = observer.JudgeComputeNode(ctx, node, rig.cluster->Now());
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded) << early.status().ToString();
  const nanoseconds start = rig.cluster->Now();
  StatusOr<bool> gone =
      observer.JudgeComputeNode(ctx, node, rig.cluster->Now() + std::chrono::seconds(30));
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_TRUE(*gone);
  EXPECT_GE(rig.cluster->Now() - start, milliseconds(50)) << "judged before the lease timeout";
  LeasePages pages;
  StatusOr<RemoteAddress> record = LeaseRecord(rig.ctx(), pages, node, false);
  ASSERT_TRUE(record.ok());
  StatusOr<LeaseRecordView> view = ReadLease(rig.ctx(), *record);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->lease.state, LeaseState::kRecovered) << view->lease.ToString();
  EXPECT_EQ(view->lease.declared_by, observer.compute_node_id());
}

// Under sim, the lease lives in virtual time: renewed once a period while
// the client runs, on a CPU of its own, and a Run still ends when its own
// work does, not at the keeper's next renewal.
TEST(LeaseKeeperTest, UnderSimTheLeaseIsRenewedInVirtualTimeWhileTheClientRuns) {
  ClusterOptions options =
      dmidx::testing::SmallLocalCluster(1, 4 << 20, false, std::chrono::microseconds(0));
  options.backend = FabricBackend::kSim;
  options.lease.period = std::chrono::microseconds(100);
  options.lease.timeout = milliseconds(1);
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({.threads = 2, .coroutines_per_thread = 2}, &client).ok());
  LeaseKeeper& keeper = static_cast<ClientImpl&>(*client).lease();
  EXPECT_EQ(keeper.renewals(), 0u);
  const nanoseconds start = cluster->Now();
  const nanoseconds work = std::chrono::microseconds(1050);
  ASSERT_TRUE(client
                  ->Run([&](Context& context) {
                    context.SleepUntil(start + work);
                    return Status::Ok();
                  })
                  .ok());
  const nanoseconds end = cluster->Now();
  EXPECT_GE(end, start + work);
  EXPECT_LT(end, start + work + std::chrono::microseconds(50))
      << "the run waited for the keeper's next renewal";
  // One renewal a period of the 1.05 ms: 10, give or take the first.
  EXPECT_GE(keeper.renewals(), 9u);
  EXPECT_LE(keeper.renewals(), 11u);
  EXPECT_TRUE(keeper.status().ok());
  // Between runs nothing renews it, and nothing moves virtual time.
  const uint64_t after_run = keeper.renewals();
  EXPECT_EQ(cluster->Now(), end);
  EXPECT_EQ(keeper.renewals(), after_run);
}

}  // namespace
}  // namespace dmidx::runtime
