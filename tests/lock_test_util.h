// Checks shared by the tests of lock/'s users (tests/hocl_test.cc,
// tests/lock_queue_test.cc).
#ifndef DMIDX_TESTS_LOCK_TEST_UTIL_H_
#define DMIDX_TESTS_LOCK_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <atomic>
#include <functional>

#include "dmidx/cluster.h"
#include "lib/runtime/context.h"
#include "lock/lock_queue.h"

namespace dmidx::lock {

// Runs `acquire` (one lock acquisition that should time out: a dead holder
// keeps the word) once on each of `client`'s `contexts` contexts, all
// coroutines of one thread, coroutine 0 first. All must end in a lock
// timeout (IsLockTimeout), and the contexts queued locally behind the first must
// together retry the word's CAS less than the first alone: they shared its
// timeout rather than each waiting a fresh one. (Not exactly once each:
// their waits start a little after the first's, by a scheduler round,
// which is long under TSan.)
inline void ExpectQueuedWaitersShareOneTimeout(
    Client& client, int contexts, const std::function<Status(runtime::ContextImpl&)>& acquire) {
  std::atomic<uint64_t> first_retries{0}, later_retries{0};
  std::atomic<int> timed_out{0};
  ASSERT_TRUE(client
                  .Run([&](Context& context) {
                    auto& ctx = runtime::ContextImpl::From(context);
                    if (IsLockTimeout(acquire(ctx))) ++timed_out;
                    (ctx.coroutine_index() == 0 ? first_retries : later_retries) +=
                        ctx.counters().lock_retries;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(timed_out.load(), contexts);
  EXPECT_GE(later_retries.load(), uint64_t(contexts - 1))
      << "each waiter behind the first CASes at least once";
  EXPECT_LT(later_retries.load(), first_retries.load())
      << "the waiters behind the first each waited a whole timeout of their own";
}

}  // namespace dmidx::lock

#endif  // DMIDX_TESTS_LOCK_TEST_UTIL_H_
