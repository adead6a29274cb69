// Making one batch in the middle of an operation fail, or running a change
// between two of its batches, exactly (lib/fabric/fault_injector.h).
//
// The operation runs on coroutine 0 of a one-thread, two-coroutine client
// and a watcher on coroutine 1. The local fabric never applies an op at
// post time and no other client thread polls, so coroutine 0 parks after
// every batch it posts and the watcher runs between any two of its
// batches: it calls `inject` right after the batch it waits for was posted
// (say, flips a fault switch, so the next batch posted fails, or runs a
// change of another client's through a blocking context, whose polls also
// apply the batch already posted). The watcher records the stats it fired
// at, and tests assert them, so a missed moment fails the test instead of
// passing it.
#ifndef DMIDX_TESTING_INJECTION_H_
#define DMIDX_TESTING_INJECTION_H_

#include <functional>
#include <memory>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/stats.h"
#include "dmidx/status.h"
#include "lib/fabric/fault_injector.h"
#include "lib/runtime/context.h"

namespace dmidx::testing {

// The fault switches of an in-process cluster's fabric.
fabric::FaultInjector& Faults(Cluster& cluster);

// A client of one thread with two coroutines and no retry backoff, for
// RunWithInjection. Null, with a test failure recorded, if it cannot be made.
std::unique_ptr<Client> TwoCoroutineClient(Cluster& cluster);

// What the watcher saw when it fired.
struct Injection {
  bool fired = false;
  Stats at;  // the operation's stats so far
};

// Runs `operation` on coroutine 0 of `client` (one thread, two coroutines)
// and returns its status; coroutine 1 calls `inject` once, the first time
// `due(stats of the operation so far)` holds, checked whenever coroutine 0
// is parked on a batch. `used` (optional) gets the operation's stats.
Status RunWithInjection(Client& client,
                        const std::function<Status(runtime::ContextImpl&)>& operation,
                        const std::function<bool(const Stats&)>& due,
                        const std::function<void()>& inject, Injection* injection,
                        Stats* used = nullptr);

// Runs `operation` as RunWithInjection does, twice, injecting nothing (the
// first run warms caches), and returns the second run's round trips: an
// operation's warm cost, before an injection changes it. Records a test
// failure if either run fails.
uint64_t WarmRoundTrips(Client& client,
                        const std::function<Status(runtime::ContextImpl&)>& operation);

// One of several moments of RunWithInjections, fired in order.
struct Moment {
  std::function<bool(const Stats&)> due;
  std::function<void()> inject;
  Injection seen;  // set when it fired
};
// The same with several moments: each fires once, in order, the first
// time its `due` holds after the one before fired.
Status RunWithInjections(Client& client,
                         const std::function<Status(runtime::ContextImpl&)>& operation,
                         std::vector<Moment>* moments);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_INJECTION_H_
