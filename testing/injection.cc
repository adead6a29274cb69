#include "testing/injection.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "lib/runtime/client.h"

namespace dmidx::testing {

fabric::FaultInjector& Faults(Cluster& cluster) {
  return *static_cast<runtime::ClusterImpl&>(cluster).fabric().faults();
}

std::unique_ptr<Client> TwoCoroutineClient(Cluster& cluster) {
  constexpr std::chrono::nanoseconds kNoBackoff{0};
  std::unique_ptr<Client> client;
  const Status status = cluster.NewClient({.threads = 1,
                                           .coroutines_per_thread = 2,
                                           .retry_backoff_min = kNoBackoff,
                                           .retry_backoff_max = kNoBackoff},
                                          &client);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return client;
}

namespace {

Status RunMoments(Client& client, const std::function<Status(runtime::ContextImpl&)>& operation,
                  std::vector<Moment>* moments, Stats* used) {
  Status result = Status::Internal("the operation did not run");
  bool started = false, done = false;
  size_t next = 0;
  Stats baseline;
  const Status run = client.Run([&](Context& context) -> Status {
    auto& ctx = runtime::ContextImpl::From(context);
    if (ctx.thread_index() != 0) return Status::Internal("one thread expected");
    if (ctx.coroutine_index() == 0) {
      baseline = ctx.stats();
      started = true;
      result = operation(ctx);
      if (used) *used = ctx.stats() - baseline;
      done = true;
      return Status::Ok();
    }
    while (!done) {
      if (started && next < moments->size() && (*moments)[next].due(ctx.stats() - baseline)) {
        Moment& moment = (*moments)[next++];
        moment.seen.fired = true;
        moment.seen.at = ctx.stats() - baseline;
        moment.inject();
      }
      ctx.Yield();
    }
    return Status::Ok();
  });
  EXPECT_TRUE(run.ok()) << run.ToString();
  return result;
}

}  // namespace

Status RunWithInjections(Client& client,
                         const std::function<Status(runtime::ContextImpl&)>& operation,
                         std::vector<Moment>* moments) {
  return RunMoments(client, operation, moments, nullptr);
}

Status RunWithInjection(Client& client,
                        const std::function<Status(runtime::ContextImpl&)>& operation,
                        const std::function<bool(const Stats&)>& due,
                        const std::function<void()>& inject, Injection* injection, Stats* used) {
  std::vector<Moment> moments = {{due, inject, *injection}};
  const Status status = RunMoments(client, operation, &moments, used);
  *injection = moments[0].seen;
  return status;
}

uint64_t WarmRoundTrips(Client& client,
                        const std::function<Status(runtime::ContextImpl&)>& operation) {
  std::vector<Moment> none;
  EXPECT_TRUE(RunMoments(client, operation, &none, nullptr).ok());
  Stats used;
  const Status status = RunMoments(client, operation, &none, &used);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return used.round_trips;
}

}  // namespace dmidx::testing
