// IndexContractSuite: what dmidx/index.h promises when things go wrong,
// checked on every index without knowing its layout. Failures are aimed
// with testing/injection.h (the operation runs on coroutine 0 of one
// client; the next batch after its n-th fails, for n = 0, 1, ... until it
// posts fewer), a node is found by recording the ops an operation posts
// (ContextImpl::RecordPostsForTesting), and a dead compute node is the
// fabric's KillComputeNode. What the index's structure must look like
// afterwards comes from the row's walk.
//
//   ScanFailingMidwayReturnsNothing
//       both Scan forms over several leaves, each batch failing in turn:
//       an error leaves *out empty, success replaces what *out held.
//   DamagedNodeWithItsLockQuietIsDataLoss
//       a word flipped in the middle of the node a warm Lookup READs last
//       (no lock word touched): DataLoss naming it within a bounded number
//       of round trips, for every operation that reaches it.
//   WaitersBehindADeadHolderShareOneLockTimeout
//       a compute node dies holding a key's lock; several contexts of
//       another compute node writing that key all end in DeadlineExceeded
//       marked a lock timeout (StatusDetail::kLockTimeout) within about
//       one lock_timeout of the first one's start, while other keys stay
//       writable.
//   BatchFailingInEachStepOfAChangeLeavesTheIndexWhole
//       an insert that splits a full leaf or node, an insert beside a lone
//       key, a delete that leaves a node one child (a radix tree merges
//       it) and a bulk load, each with one batch failing at every step:
//       the walk holds, acknowledged keys read back, the failed change is
//       whole or absent, and every key touched is writable at once from
//       both compute nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dmidx/keys.h"
#include "lib/fabric/op.h"
#include "lib/runtime/context.h"
#include "testing/injection.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/sanitizers.h"
#include "testing/watchdog.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

using fabric::Op;
using fabric::OpCode;
using fabric::RemoteAddress;
using runtime::ContextImpl;

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

uint32_t ComputeNodeOf(Context& ctx) {
  return ContextImpl::From(ctx).compute_node().id();
}

uint64_t ReadWord(Context& context, RemoteAddress at) {
  auto& ctx = ContextImpl::From(context);
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint64_t* word = *ctx.arena().Words(1);
  const Op read = Op::Read(at, word, 8);
  EXPECT_TRUE(ctx.Execute(at.node(), {&read, 1}).ok()) << at.ToString();
  return *word;
}

void WriteWord(Context& context, RemoteAddress at, uint64_t value) {
  auto& ctx = ContextImpl::From(context);
  runtime::ScratchArena::Scope scope(ctx.arena());
  uint64_t* word = *ctx.arena().Words(1);
  *word = value;
  const Op write = Op::Write(at, word, 8);
  EXPECT_TRUE(ctx.Execute(at.node(), {&write, 1}).ok()) << at.ToString();
}

// A failure FailNextBatches armed that no batch of the operation used up
// (it posted none after the switch flipped) is used up here, so that the
// checks after it do not meet it. (A lease keeper's renewal may use it up
// first, between the count's check and the READ: then the READ passes.)
void UseUpPendingFailures(Cluster& cluster, Context& context, uint64_t armed) {
  auto& ctx = ContextImpl::From(context);
  while (Faults(cluster).counters().failed_batches < armed) {
    runtime::ScratchArena::Scope scope(ctx.arena());
    uint64_t* word = *ctx.arena().Words(1);
    const Op read = Op::Read(RemoteAddress::Pool(0, 0), word, 8);
    const Status status = ctx.Execute(0, {&read, 1});
    ASSERT_TRUE(status.IsUnavailable() || Faults(cluster).counters().failed_batches >= armed)
        << status.ToString();
  }
}

// Runs `operation` on `client`'s first context (TwoCoroutineClient).
Status OnFirstContext(Client& client, const std::function<Status(Context&)>& operation) {
  Status result = Status::Internal("did not run");
  const Status run = client.Run([&](Context& c) -> Status {
    if (ContextImpl::From(c).coroutine_index() == 0) result = operation(c);
    return Status::Ok();
  });
  EXPECT_TRUE(run.ok()) << run.ToString();
  return result;
}

// Runs `operation` on `client`'s first context with the batch after its
// n-th failing (n = 0: its first). `fired` tells whether it posted that
// many; `armed` counts the failures armed.
Status RunFailingBatch(Cluster& cluster, Client& client, uint64_t n,
                       const std::function<Status(Context&)>& operation, bool* fired,
                       uint64_t* armed) {
  Injection injection;
  auto fail_next = [&] {
    ++*armed;
    EXPECT_TRUE(Faults(cluster).FailNextBatches(0, 1).ok());
  };
  if (n == 0) {
    injection.fired = true;
    fail_next();
  }
  const Status status = RunWithInjection(
      client, [&](ContextImpl& c) { return operation(c); },
      [&](const Stats& so_far) { return so_far.batches >= n; }, fail_next, &injection);
  *fired = injection.fired;
  return status;
}

// The defect the row names for this test (IndexRow::known_defects), if any.
std::optional<std::string> KnownDefect(const IndexRow& row) {
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  test = test.substr(0, test.find('/'));
  const auto known = row.known_defects.find(test);
  if (known == row.known_defects.end()) return std::nullopt;
  return known->second;
}
#define SKIP_KNOWN_DEFECT()                                           \
  if (const auto defect = KnownDefect(GetParam())) {                  \
    GTEST_SKIP() << GetParam().name << ": known defect: " << *defect; \
  }

// One memory node (every batch goes to node 0, where the switch is), a
// two-coroutine client that runs the operation under test and another
// compute node's blocking context that checks it.
struct Nodes {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client, other;
  std::unique_ptr<Context> ctx;  // of `other`

  bool Open() {
    cluster = OpenCluster(false, 1);
    if (!cluster) return false;
    client = TwoCoroutineClient(*cluster);
    other = NewClient(*cluster);
    return client && other && other->NewBlockingContext(&ctx).ok();
  }
};

// ---------------------------------------------------------------------------

TEST_P(IndexContractSuite, ScanFailingMidwayReturnsNothing) {
  Watchdog watchdog(std::chrono::seconds(600));
  Nodes setup;
  ASSERT_TRUE(setup.Open());
  auto index = OpenIndexOrFail(GetParam(), setup.client.get(), "scans");
  auto checker = OpenIndexOrFail(GetParam(), setup.other.get(), "scans");
  ASSERT_TRUE(index && checker);
  Model model;
  for (uint64_t i = 0; i < 400; ++i) {
    ASSERT_TRUE(checker->Insert(*setup.ctx, Key(i * 10), i).ok());
    model[i * 10] = i;
  }
  const std::vector<KeyValue> garbage = {{"garbage", 1}, {"more", 2}};
  struct Form {
    const char* name;
    std::vector<KeyValue> want;
    std::function<Status(Context&, std::vector<KeyValue>*)> scan;
  };
  const std::vector<Form> forms = {
      {"Scan(from, to)", ModelRange(model, 995, 3005),
       [&](Context& c, std::vector<KeyValue>* out) {
         return index->Scan(c, Key(995), Key(3005), out);
       }},
      {"Scan(from, count)", ModelCount(model, 1005, 180),
       [&](Context& c, std::vector<KeyValue>* out) { return index->Scan(c, Key(1005), 180, out); }},
  };
  uint64_t armed = 0;
  for (const Form& form : forms) {
    uint64_t failed = 0;
    for (uint64_t n = 0;; ++n) {
      const std::string where = std::string(form.name) + ", batch " + std::to_string(n + 1);
      std::vector<KeyValue> out = garbage;
      bool fired = false;
      const Status status = RunFailingBatch(
          *setup.cluster, *setup.client, n, [&](Context& c) { return form.scan(c, &out); }, &fired,
          &armed);
      ASSERT_NO_FATAL_FAILURE(UseUpPendingFailures(*setup.cluster, *setup.ctx, armed));
      if (status.ok()) {
        EXPECT_TRUE(SameScan(out, form.want)) << where;
      } else {
        failed++;
        EXPECT_TRUE(out.empty()) << where << " failing, " << status.ToString() << ": *out holds "
                                 << out.size() << " pairs";
      }
      if (!fired) {
        ASSERT_TRUE(status.ok()) << where << ": " << status.ToString();
        break;  // the scan posted n batches or fewer: every one was failed
      }
      ASSERT_LT(n, 2000u) << where << ": a scan of more than 2000 batches";
    }
    EXPECT_GT(failed, 0u) << form.name << ": no injected failure reached the scan";
    std::printf("%s: %llu scans failed\n", form.name, static_cast<unsigned long long>(failed));
  }
}

// ---------------------------------------------------------------------------

TEST_P(IndexContractSuite, DamagedNodeWithItsLockQuietIsDataLoss) {
  SKIP_KNOWN_DEFECT();
  Watchdog watchdog(std::chrono::seconds(300));
  Nodes setup;
  ASSERT_TRUE(setup.Open());
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(setup.client->NewBlockingContext(&ctx).ok());
  auto index = OpenIndexOrFail(GetParam(), setup.client.get(), "damage");
  auto checker = OpenIndexOrFail(GetParam(), setup.other.get(), "damage");
  ASSERT_TRUE(index && checker);
  for (uint64_t i = 0; i < 300; ++i)
    ASSERT_TRUE(index->Insert(*ctx, Key(i * 10), i).ok());
  const std::string victim = Key(1500);
  uint64_t value = 0;
  ASSERT_TRUE(index->Lookup(*ctx, victim, &value).ok());  // warm
  std::vector<Op> posted;
  ContextImpl::From(*ctx).RecordPostsForTesting(&posted);
  ASSERT_TRUE(index->Lookup(*ctx, victim, &value).ok());
  ContextImpl::From(*ctx).RecordPostsForTesting(nullptr);
  auto last_read = std::find_if(posted.rbegin(), posted.rend(),
                                [](const Op& op) { return op.code == OpCode::kRead; });
  ASSERT_NE(last_read, posted.rend()) << "a Lookup that READs nothing";
  // The node the lookup found its key in: one word in its middle flipped,
  // by a raw WRITE of another compute node, no lock taken.
  const RemoteAddress node = last_read->remote;
  const RemoteAddress middle = node + ((last_read->length / 2) & ~7u);
  WriteWord(*setup.ctx, middle, ~ReadWord(*setup.ctx, middle));

  const IndexStats before = index->stats();
  Status status = index->Lookup(*ctx, victim, &value);
  const uint64_t round_trips = (index->stats() - before)[IndexOp::kLookup].round_trips;
  ASSERT_TRUE(status.IsDataLoss()) << status.ToString();
  EXPECT_TRUE(Contains(status, node.ToString())) << status.ToString();
  // Confirmed in a few READs of the node and its lock word, not after
  // thousands of retries.
  EXPECT_LE(round_trips, 24u) << status.ToString();
  std::printf("DataLoss after %llu round trips: %s\n", static_cast<unsigned long long>(round_trips),
              status.ToString().c_str());
  // Every operation that reaches the node says so; another compute node's
  // too (its cache cold).
  status = checker->Lookup(*setup.ctx, victim, &value);
  EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
  std::vector<KeyValue> out = {{"garbage", 1}};
  status = checker->Scan(*setup.ctx, Key(1400), Key(1600), &out);
  EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
  EXPECT_TRUE(out.empty());
  status = index->Update(*ctx, victim, 7);
  EXPECT_TRUE(status.IsDataLoss()) << status.ToString();
  // Keys elsewhere are untouched.
  ASSERT_TRUE(checker->Lookup(*setup.ctx, Key(0), &value).ok());
  EXPECT_EQ(value, 0u);
  ASSERT_TRUE(index->Update(*ctx, Key(2990), 5).ok());
}

// ---------------------------------------------------------------------------

TEST_P(IndexContractSuite, WaitersBehindADeadHolderShareOneLockTimeout) {
  SKIP_KNOWN_DEFECT();
  Watchdog watchdog(std::chrono::seconds(300));
  // Four waiters each waiting a fresh timeout would take four of them; the
  // bound below is two (generous for a sanitizer's slowdown).
  constexpr std::chrono::milliseconds kLockTimeout(250);
  constexpr int kWaiters = 4;
  const IndexSpec spec = {.lock_timeout = kLockTimeout};
  auto cluster = OpenCluster(false, 1);
  ASSERT_NE(cluster, nullptr);
  auto holder = TwoCoroutineClient(*cluster);
  auto waiters = NewClient(*cluster, 1, kWaiters + 1);
  ASSERT_TRUE(holder && waiters);
  std::unique_ptr<Context> ctx, holder_ctx;
  ASSERT_TRUE(waiters->NewBlockingContext(&ctx).ok());
  ASSERT_TRUE(holder->NewBlockingContext(&holder_ctx).ok());
  const uint32_t holder_id = ComputeNodeOf(*holder_ctx);
  holder_ctx.reset();
  auto dying = OpenIndexOrFail(GetParam(), holder.get(), "dead-holder", spec);
  auto index = OpenIndexOrFail(GetParam(), waiters.get(), "dead-holder", spec);
  ASSERT_TRUE(dying && index);
  Model model;
  for (uint64_t i = 0; i < 300; ++i) {
    ASSERT_TRUE(index->Insert(*ctx, Key(i * 10), i).ok());
    model[i * 10] = i;
  }
  const std::string victim = Key(1500);
  uint64_t value = 0;
  ASSERT_TRUE(OnFirstContext(*holder, [&](Context& c) {
                return dying->Lookup(c, victim, &value);
              }).ok());  // warm: the update's first CAS is its lock's
  // The holder's update posts the CAS that takes the key's lock; once it is
  // applied (the poll of the checker's READ applies it), the holder dies.
  std::vector<Op> posted;
  Injection injection;
  const Status died = RunWithInjection(
      *holder,
      [&](ContextImpl& c) {
        c.RecordPostsForTesting(&posted);
        const Status status = dying->Update(c, victim, 77);
        c.RecordPostsForTesting(nullptr);
        return status;
      },
      [](const Stats& so_far) { return so_far.compare_swaps >= 1; },
      [&] {
        (void)ReadWord(*ctx, RemoteAddress::Pool(0, 0));
        Faults(*cluster).KillComputeNode(holder_id);
      },
      &injection);
  ASSERT_TRUE(injection.fired);
  EXPECT_TRUE(died.IsUnavailable()) << died.ToString();
  auto cas = std::find_if(posted.begin(), posted.end(),
                          [](const Op& op) { return op.code == OpCode::kCompareSwap; });
  ASSERT_NE(cas, posted.end());
  ASSERT_EQ(ReadWord(*ctx, cas->remote), cas->operand)
      << "the dead holder's CAS at " << cas->remote.ToString() << " did not stay";

  using Clock = std::chrono::nanoseconds;
  struct Wait {
    Status status;
    Clock start{0}, end{0};
  };
  std::vector<Wait> waits(kWaiters);
  Clock others_done{0};
  Status others;
  const Status run = waiters->Run([&](Context& c) -> Status {
    const int i = c.coroutine_index();
    auto& impl = ContextImpl::From(c);
    if (i < kWaiters) {
      waits[i].start = impl.Now();
      waits[i].status = index->Update(c, victim, 100 + i);
      waits[i].end = impl.Now();
      return Status::Ok();
    }
    // Keys far from the victim, written while the waiters wait.
    for (uint64_t key : {0, 10, 20, 2980, 2990}) {
      others = index->Update(c, Key(key), key + 1);
      if (!others.ok()) break;
      model[key] = key + 1;
    }
    others_done = impl.Now();
    return Status::Ok();
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_TRUE(others.ok()) << others.ToString();
  Clock first_start = waits[0].start, last_end = waits[0].end;
  for (const Wait& wait : waits) {
    first_start = std::min(first_start, wait.start);
    last_end = std::max(last_end, wait.end);
    EXPECT_EQ(wait.status.code(), StatusCode::kDeadlineExceeded) << wait.status.ToString();
    EXPECT_EQ(wait.status.detail(), StatusDetail::kLockTimeout) << wait.status.ToString();
    if (Contains(wait.status, "compute node")) {
      EXPECT_TRUE(Contains(wait.status, "compute node " + std::to_string(holder_id) + " "))
          << "names another holder than " << holder_id << ": " << wait.status.ToString();
    }
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(last_end - first_start);
  std::printf("%d waiters done %lld ms after the first started (lock_timeout %lld ms)\n", kWaiters,
              static_cast<long long>(waited.count()), static_cast<long long>(kLockTimeout.count()));
  EXPECT_GE(waited, kLockTimeout);
  EXPECT_LT(waited, 2 * kLockTimeout) << "each waiter waited a lock_timeout of its own";
  EXPECT_LT(others_done, last_end) << "other keys waited for the dead holder's";
  // Reads of the victim still work; the rest of the index is intact.
  const Status read = index->Lookup(*ctx, victim, &value);
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(value, model[1500]);
  ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*index, *ctx, model));
}

// ---------------------------------------------------------------------------

// One change under test on a fresh index: its content (loaded through the
// other compute node) and the change, on the first compute node.
struct Change {
  const char* name;
  std::function<Model(const IndexRow&)> content;
  // Applies the change to `model` as it would be on success.
  std::function<Status(RangeIndex&, Context&, Model*)> run;
  bool is_load = false;
};

// Keys 16, 32, ..., loaded full: with small nodes every leaf (and, loaded
// full, their parents) has no room left, so an insert between two keys
// splits its leaf (a B+tree) or grows its node (a radix tree).
Model FullLeaves(const IndexRow& row) {
  Model model;
  const uint64_t keys = std::max<uint64_t>(200, uint64_t{row.leaf_capacity(8)} * 16);
  for (uint64_t i = 1; i <= keys; ++i)
    model[i * 16] = i;
  return model;
}

// Keys i << 16: each alone under its own branch; one more beside key 5 << 16
// when `pair`.
Model LoneKeys(bool pair) {
  Model model;
  for (uint64_t i = 1; i <= 64; ++i)
    model[i << 16] = i;
  if (pair) model[(uint64_t{5} << 16) + 1] = 99;
  return model;
}

std::vector<Change> Changes() {
  return {
      {"insert into a full leaf", FullLeaves,
       [](RangeIndex& index, Context& ctx, Model* model) {
         const uint64_t key = 16 * (model->size() / 2) + 1;
         (*model)[key] = 7;
         return index.Insert(ctx, Key(key), 7);
       }},
      {"insert past the last full leaf", FullLeaves,
       [](RangeIndex& index, Context& ctx, Model* model) {
         const uint64_t key = model->rbegin()->first + 1;
         (*model)[key] = 7;
         return index.Insert(ctx, Key(key), 7);
       }},
      {"insert beside a lone key", [](const IndexRow&) { return LoneKeys(false); },
       [](RangeIndex& index, Context& ctx, Model* model) {
         const uint64_t key = (uint64_t{5} << 16) + 1;
         (*model)[key] = 7;
         return index.Insert(ctx, Key(key), 7);
       }},
      {"delete that leaves a node one child", [](const IndexRow&) { return LoneKeys(true); },
       [](RangeIndex& index, Context& ctx, Model* model) {
         const uint64_t key = (uint64_t{5} << 16) + 1;
         model->erase(key);
         return index.Delete(ctx, Key(key));
       }},
      {"bulk load", FullLeaves,
       [](RangeIndex& index, Context& ctx, Model* model) {
         return index.BulkLoad(ctx, Pairs(*model), 1.0);
       },
       true},
  };
}

TEST_P(IndexContractSuite, BatchFailingInEachStepOfAChangeLeavesTheIndexWhole) {
  Watchdog watchdog(std::chrono::seconds(900));
  const IndexRow& row = GetParam();
  ASSERT_TRUE(row.walk) << row.name << " has no walk";
  Nodes setup;
  ASSERT_TRUE(setup.Open());
  // A key left locked shows as DeadlineExceeded in a second, not ten.
  const IndexSpec spec = {.lock_timeout = std::chrono::milliseconds(1000)};
  Context& ctx = *setup.ctx;
  uint64_t armed = 0, fired_total = 0, failed_total = 0, attempt = 0;
  for (const Change& change : Changes()) {
    uint64_t failed = 0;
    for (uint64_t n = 0;; ++n) {
      const std::string where =
          std::string(change.name) + ", batch " + std::to_string(n + 1) + " failing";
      SCOPED_TRACE(where);
      const std::string name = "change" + std::to_string(attempt++);
      auto index = OpenIndexOrFail(row, setup.client.get(), name, spec);
      auto checker = OpenIndexOrFail(row, setup.other.get(), name, spec);
      ASSERT_TRUE(index && checker);
      const Model content = change.content(row);
      // A load starts from an empty index and loads `content`.
      const Model before = change.is_load ? Model{} : content;
      if (!change.is_load) {
        ASSERT_TRUE(checker->BulkLoad(ctx, Pairs(before), 1.0).ok());
      }
      Model after = content;
      bool fired = false;
      const Status status = RunFailingBatch(
          *setup.cluster, *setup.client, n,
          [&](Context& c) { return change.run(*index, c, &after); }, &fired, &armed);
      ASSERT_NO_FATAL_FAILURE(UseUpPendingFailures(*setup.cluster, ctx, armed));
      if (fired) ++fired_total;
      // Internal: a load that cannot tell whether its publish landed.
      ASSERT_TRUE(status.ok() || status.IsUnavailable() ||
                  (change.is_load && status.code() == StatusCode::kInternal))
          << status.ToString();
      if (!status.ok()) {
        ++failed;
        ++failed_total;
      }
      // The structure holds, whatever the outcome.
      const std::vector<std::string> errors = row.walk(*checker, ctx);
      for (const std::string& error : errors)
        ADD_FAILURE() << "walk: " << error;
      if (!errors.empty() && row.dump) row.dump(*checker, ctx);
      // Acknowledged keys read back; a failed change is whole or absent.
      Model now = status.ok() ? after : before;
      if (!status.ok()) {
        std::vector<KeyValue> all;
        ASSERT_TRUE(checker->Scan(ctx, Key(0), Key(kMaxKey), &all).ok());
        if (SameScan(all, Pairs(after))) {
          now = after;
        } else {
          ASSERT_TRUE(SameScan(all, Pairs(before))) << "neither before nor after the change";
        }
      }
      ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*checker, ctx, now));
      // A load that did not take effect left the index empty and usable.
      if (change.is_load && now.empty()) {
        ASSERT_TRUE(checker->BulkLoad(ctx, Pairs(after), 1.0).ok());
        now = after;
      }
      // Every key the change touched (all of a small index) is free for
      // the other compute node and for this one at once.
      Model touched = before;
      touched.insert(after.begin(), after.end());
      for (const auto& [key, value] : touched) {
        const Status again = checker->Insert(ctx, Key(key), value + 1000);
        ASSERT_TRUE(again.ok()) << "then an insert of " << key << ": " << again.ToString();
        now[key] = value + 1000;
      }
      for (uint64_t key : {after.begin()->first, after.rbegin()->first}) {
        const Status again = OnFirstContext(
            *setup.client, [&](Context& c) { return index->Update(c, Key(key), 1); });
        ASSERT_TRUE(again.ok()) << "then its own update of " << key << ": " << again.ToString();
        now[key] = 1;
      }
      ASSERT_NO_FATAL_FAILURE(ExpectIndexMatches(*checker, ctx, now));
      if (!fired) {
        ASSERT_TRUE(status.ok()) << status.ToString();
        break;  // the change posted n batches or fewer: every step was tried
      }
      ASSERT_LT(n, 500u) << "a change of more than 500 batches";
    }
    std::printf("%s: %llu failed\n", change.name, static_cast<unsigned long long>(failed));
    EXPECT_GT(failed, 0u) << change.name << ": no injected failure made it fail";
  }
  EXPECT_GT(fired_total, 10u);
  EXPECT_GT(failed_total, 0u);
}

}  // namespace
}  // namespace dmidx::testing
