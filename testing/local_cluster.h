// Small in-process clusters on the `local` fabric for tests: options with
// every fault injected, a cluster and clients opened in one call, and the
// seed of a randomized test.
#ifndef DMIDX_TESTING_LOCAL_CLUSTER_H_
#define DMIDX_TESTING_LOCAL_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "dmidx/cluster.h"
#include "dmidx/options.h"

namespace dmidx::testing {

// Every fault the local fabric can inject, at small settings: apply delays
// up to `max_delay`, torn READs and WRITEs, WRITEs overtaking READs/atomics.
LocalFabricOptions AllLocalFaults(std::chrono::microseconds max_delay);

// `memory_nodes` MNs of `pool_bytes`, 1 MiB chunks, no huge pages; all
// faults injected (AllLocalFaults(max_delay)) when `faults`.
ClusterOptions SmallLocalCluster(uint32_t memory_nodes, uint64_t pool_bytes, bool faults,
                                 std::chrono::microseconds max_delay);

// `memory_nodes` local MNs of 64 MiB; every fault injected (delays up to
// 10 us) when `faults`, seeded with `seed` when given. Null, with a test
// failure recorded, if the cluster does not open.
std::unique_ptr<Cluster> OpenCluster(bool faults, uint32_t memory_nodes = 2,
                                     std::optional<uint64_t> seed = std::nullopt);

// A client of `threads` x `coroutines` contexts; null, with a test failure
// recorded, if it cannot be made.
std::unique_ptr<Client> NewClient(Cluster& cluster, uint32_t threads = 1, uint32_t coroutines = 1);

// Makes the redo-record slots (lock/redo_log.h) of every coroutine
// context of `client` (through a Run) and of `blocking`, if given, on
// every memory node, of `bytes` (a record of a change of 4 KiB fits), as
// their first recorded change would: a test that counts the round trips,
// batches, bytes or allocations of a change then counts the change alone.
// Records a test failure if it fails.
void PrepareRedoSlots(Client& client, Context* blocking = nullptr, uint32_t bytes = 8192);

// The next client of `cluster` (local or sim) opens with compute-node id
// `id` again, as a verbs process's next client does (the one of that id
// must have closed).
void ReopenComputeNodeId(Cluster& cluster, uint32_t id);

// The seed of a randomized test: `base`, or with DMIDX_CONCURRENCY_SEED=<n>
// in the environment, n mixed into it (for soak runs under other fault and
// workload choices). Printed, so a failure can be replayed.
uint64_t TestSeed(uint64_t base);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_LOCAL_CLUSTER_H_
