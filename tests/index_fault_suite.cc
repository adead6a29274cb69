// IndexFaultSuite: every index with one batch of a write failing, at every
// remote step the write takes (testing/injection.h aims the failure: the
// write runs on coroutine 0 of one client and the fault switch flips after
// its n-th batch was posted, for n = 0, 1, ... until the write posts fewer).
// The write may then fail (Unavailable: its outcome unknown) or succeed,
// but it must never leave its key locked, claimed or half-changed: another
// compute node reads the old or the new state, then changes the key again
// at once, and the neighbours and a scan are untouched.
#include <gtest/gtest.h>

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
#include "testing/watchdog.h"
#include "tests/index_suites.h"

namespace dmidx::testing {
namespace {

using runtime::ContextImpl;

// What a write does to its key: the state before and after (nullopt:
// absent), and the call.
struct Write {
  const char* name;
  std::optional<uint64_t> before;  // set up by the test through the other client
  std::optional<uint64_t> after;
  // The key shares all but its last byte with one other key, and nothing
  // else shares as much (a radix tree splits a leaf to insert it, and
  // merges the node away to delete it).
  bool beside_a_lone_key = false;
  std::function<Status(RangeIndex&, Context&, const std::string&)> run;
};

std::vector<Write> Writes() {
  return {
      {"insert of a new key", std::nullopt, 7, false,
       [](RangeIndex& index, Context& ctx, const std::string& key) {
         return index.Insert(ctx, key, 7);
       }},
      {"insert of a present key", 1, 7, false,
       [](RangeIndex& index, Context& ctx, const std::string& key) {
         return index.Insert(ctx, key, 7);
       }},
      {"update", 1, 7, false,
       [](RangeIndex& index, Context& ctx, const std::string& key) {
         return index.Update(ctx, key, 7);
       }},
      {"delete", 1, std::nullopt, false,
       [](RangeIndex& index, Context& ctx, const std::string& key) {
         return index.Delete(ctx, key);
       }},
      {"insert beside a lone key", std::nullopt, 7, true,
       [](RangeIndex& index, Context& ctx, const std::string& key) {
         return index.Insert(ctx, key, 7);
       }},
      {"delete beside a lone key", 1, std::nullopt, true,
       [](RangeIndex& index, Context& ctx, const std::string& key) {
         return index.Delete(ctx, key);
       }},
  };
}

TEST_P(IndexFaultSuite, AWriteWhoseBatchFailsOnceLeavesItsKeyUsable) {
  Watchdog watchdog(std::chrono::seconds(600));
  auto cluster = OpenCluster(false, 1);
  auto client = TwoCoroutineClient(*cluster);
  auto other = NewClient(*cluster);
  ASSERT_TRUE(client && other);
  std::unique_ptr<RangeIndex> index = OpenIndexOrFail(GetParam(), client.get(), "faults");
  std::unique_ptr<RangeIndex> checker = OpenIndexOrFail(GetParam(), other.get(), "faults");
  ASSERT_TRUE(index && checker);
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(other->NewBlockingContext(&ctx).ok());
  // Stable keys 0, 10, 20, ... (small nodes: a few levels); each attempt
  // writes a key of its own between them, and deletes of stable keys'
  // neighbours empty nodes.
  constexpr uint64_t kStable = 300;
  for (uint64_t i = 0; i < kStable; ++i)
    ASSERT_TRUE(checker->Insert(*ctx, EncodeUint64Key(i * 10), i).ok());
  uint64_t next_key = 1;
  uint64_t failed = 0, fired = 0, armed = 0;
  // Runs `operation` on this compute node's first context.
  auto on_client = [&](const std::function<Status(Context&)>& operation) {
    Status result;
    EXPECT_TRUE(client
                    ->Run([&](Context& c) -> Status {
                      if (ContextImpl::From(c).coroutine_index() == 0) result = operation(c);
                      return Status::Ok();
                    })
                    .ok());
    return result;
  };
  for (const Write& write : Writes()) {
    for (uint64_t n = 0;; ++n) {
      uint64_t k = next_key;
      next_key += next_key % 10 == 9 ? 2 : 1;  // never a stable key
      // A region of its own past the stable keys, holding one other key.
      const uint64_t lone = (uint64_t{1} << 40) + (k << 16);
      if (write.beside_a_lone_key) {
        k = lone + 1;
        ASSERT_TRUE(checker->Insert(*ctx, EncodeUint64Key(lone), 5).ok());
      }
      const std::string key = EncodeUint64Key(k);
      if (write.before) {
        ASSERT_TRUE(checker->Insert(*ctx, key, *write.before).ok());
      }
      const std::string where = std::string(write.name) + ", batch " + std::to_string(n + 1) +
                                " failing, key " + std::to_string(k);
      Injection injection;
      auto fail_next = [&] {
        ++armed;
        ASSERT_TRUE(Faults(*cluster).FailNextBatches(0, 1).ok());
      };
      if (n == 0) {
        injection.fired = true;
        fail_next();
      }
      const Status status = RunWithInjection(
          *client, [&](ContextImpl& c) { return write.run(*index, c, key); },
          [&](const Stats& so_far) { return so_far.batches >= n; }, fail_next, &injection);
      if (!injection.fired) {
        ASSERT_TRUE(status.ok()) << where << ": " << status.ToString();
        if (write.after) {
          ASSERT_TRUE(checker->Delete(*ctx, key).ok()) << where;
        }
        if (write.beside_a_lone_key) {
          ASSERT_TRUE(checker->Delete(*ctx, EncodeUint64Key(lone)).ok()) << where;
        }
        break;  // the write posted n batches or fewer: every step was tried
      }
      ++fired;
      ASSERT_TRUE(status.ok() || status.IsUnavailable()) << where << ": " << status.ToString();
      failed += status.ok() ? 0 : 1;
      // A failure left pending (the write posted no batch after the
      // switch flipped) is used up here, not by the checks below.
      while (Faults(*cluster).counters().failed_batches < armed) {
        auto& raw = ContextImpl::From(*ctx);
        auto* word = reinterpret_cast<uint64_t*>(raw.scratch().data());
        const fabric::Op read = fabric::Op::Read(fabric::RemoteAddress::Pool(0, 0), word, 8);
        ASSERT_TRUE(raw.Execute(0, {&read, 1}).IsUnavailable());
      }
      uint64_t value = 0;
      const Status read = checker->Lookup(*ctx, key, &value);
      const std::optional<uint64_t> seen =
          read.ok() ? std::optional<uint64_t>(value) : std::nullopt;
      ASSERT_TRUE(read.ok() || read.IsNotFound()) << where << ": " << read.ToString();
      if (status.ok()) {
        EXPECT_EQ(seen, write.after) << where;
      } else {
        EXPECT_TRUE(seen == write.before || seen == write.after) << where;
      }
      // The key is free for another compute node at once.
      const Status again = checker->Insert(*ctx, key, 9);
      ASSERT_TRUE(again.ok()) << where << ": then an insert: " << again.ToString();
      ASSERT_TRUE(checker->Update(*ctx, key, 10).ok()) << where;
      ASSERT_TRUE(checker->Lookup(*ctx, key, &value).ok()) << where;
      EXPECT_EQ(value, 10u) << where;
      ASSERT_TRUE(checker->Delete(*ctx, key).ok()) << where;
      // And for this compute node too.
      ASSERT_TRUE(on_client([&](Context& c) { return index->Insert(c, key, 11); }).ok()) << where;
      ASSERT_TRUE(on_client([&](Context& c) { return index->Delete(c, key); }).ok()) << where;
      if (write.beside_a_lone_key) {
        ASSERT_TRUE(checker->Lookup(*ctx, EncodeUint64Key(lone), &value).ok()) << where;
        EXPECT_EQ(value, 5u) << where;
        ASSERT_TRUE(checker->Delete(*ctx, EncodeUint64Key(lone)).ok()) << where;
      }
      ASSERT_LT(n, 200u) << where << ": a write of more than 200 batches";
    }
  }
  EXPECT_GT(fired, 4u);
  std::printf("%llu injected failures hit a write, %llu of those writes failed\n",
              static_cast<unsigned long long>(fired), static_cast<unsigned long long>(failed));
  EXPECT_GT(failed, 0u) << "no injected failure reached a write";
  // Every stable key, once, in order, by a scan and by lookups.
  std::vector<KeyValue> all;
  ASSERT_TRUE(checker->Scan(*ctx, EncodeUint64Key(0), kStable * 2, &all).ok());
  ASSERT_EQ(all.size(), kStable);
  for (uint64_t i = 0; i < kStable; ++i) {
    EXPECT_EQ(all[i].key, EncodeUint64Key(i * 10));
    EXPECT_EQ(all[i].value, i);
  }
}

}  // namespace
}  // namespace dmidx::testing
