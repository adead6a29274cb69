// Cluster bootstrap through one memcached server: node ids, named records,
// named barriers and liveness, for the processes of one dmidx run.
//
// Key space. Every key starts with "dmidx/<cluster>/", so clusters with
// different names share one memcached without seeing each other's keys:
//
//   dmidx/<cluster>/epoch                          run counter (decimal)
//   dmidx/<cluster>/<epoch>/closed                 set by EndRun()
//   dmidx/<cluster>/<epoch>/ids/<role>             id counter of a role
//   dmidx/<cluster>/<epoch>/alive/<role>/<id>      heartbeat, expires
//   dmidx/<cluster>/<epoch>/rec/<name>             Put/Get records
//   dmidx/<cluster>/<epoch>/barrier/<name>/<use>/count
//   dmidx/<cluster>/<epoch>/barrier/<name>/<use>/arrived/<k>
//
// Runs and epochs. A run is one start of the cluster's processes; its keys
// live under its epoch, so a new run needs no memcached restart and never
// sees the keys of an earlier run. The protocol:
//
//   1. Exactly one process per run connects with `start_new_run = true`
//      (typically the first memory node). It increments the epoch counter
//      (creating it if missing) and uses the new value.
//   2. Every other process reads the counter. It joins epoch E if E > 0 and
//      E is not closed; otherwise it polls until a newer, open epoch appears,
//      or fails with DeadlineExceeded after `wait_timeout`.
//   3. At the clean end of a run one process calls EndRun(), which closes the
//      epoch. A process of the next run that starts before that run's
//      starter then waits in step 2 instead of joining the finished run.
//   4. Every wait (Get, Barrier) also checks, on every poll, that its epoch
//      is still the newest and not closed, and otherwise fails with Aborted.
//
// The race this leaves: if the previous run crashed (no EndRun) and a
// process of the next run connects before that run's starter, it joins the
// stale epoch. It is never mixed into the new run (the key spaces differ);
// its first wait after the starter has connected fails with Aborted ("epoch
// 4 was superseded by epoch 5"), and it must Connect again. The same rule
// catches two processes started with `start_new_run`: all but the one with
// the highest epoch get Aborted. Starting the starter first avoids both.
//
// Node ids are dense per role and per run: memory nodes get 0..M-1 (a remote
// address carries a 16-bit memory-node id), compute nodes 0..C-1, from an
// atomic increment of the role's counter.
//
// Liveness: after Register(), a background thread re-sets the node's alive
// key every `heartbeat_interval`, with memcached expiry `liveness_timeout`.
// IsAlive() is true while the key exists. A node that is destroyed deletes
// its key (it left); a node that dies stops renewing it and reads as dead
// within liveness_timeout. A barrier that times out names the nodes that
// arrived and the registered nodes that did not, with their liveness.
//
// Keys of old epochs are never deleted; memcached evicts them (least
// recently used) when it needs room. A run writes a few KB. Flushing or
// restarting memcached during a run makes every wait fail with Aborted.
#ifndef DMIDX_BOOTSTRAP_MEMCACHED_BOOTSTRAP_H_
#define DMIDX_BOOTSTRAP_MEMCACHED_BOOTSTRAP_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dmidx/options.h"
#include "dmidx/status.h"

namespace dmidx::bootstrap {

enum class NodeRole : uint8_t { kMemory, kCompute };

// "memory" or "compute".
std::string_view NodeRoleName(NodeRole role);

struct NodeId {
  NodeRole role = NodeRole::kCompute;
  uint32_t id = 0;
  // "memory 3", "compute 0".
  std::string ToString() const;
  friend bool operator==(const NodeId&, const NodeId&) = default;
};

inline constexpr uint16_t kDefaultMemcachedPort = 11211;
inline constexpr size_t kMaxClusterNameBytes = 64;
inline constexpr size_t kMaxBarrierNameBytes = 64;
// Memory-node ids are 16 bits in a remote address (ClusterOptions allows at
// most 65535 memory nodes).
inline constexpr uint32_t kMaxMemoryNodes = 65535;

struct ServerAddress {
  std::string host;
  uint16_t port = kDefaultMemcachedPort;
  // "host:port", or "[addr]:port" when host contains ':'.
  std::string ToString() const;
};

// Parses "host:port", "host" (port 11211), "[ipv6]:port" or "[ipv6]".
// InvalidArgument naming the problem for anything else (empty host,
// whitespace, port not in 1..65535, bare IPv6 without brackets).
StatusOr<ServerAddress> ParseServerAddress(std::string_view text);

// OK if `name` is 1..kMaxClusterNameBytes bytes of printable ASCII other than
// '/' (no whitespace, no control characters); InvalidArgument otherwise.
Status ValidateClusterName(std::string_view name);

// A counter value as memcached returns it (it may pad a number with
// trailing spaces); nullopt for anything else.
std::optional<uint64_t> ParseCounter(std::string_view text);

using BootstrapOptions = ::dmidx::BootstrapOptions;

class MemcachedConnection;  // one libmemcached handle and its mutex

// One process's (or, in tests, one thread's) view of the cluster bootstrap.
//
// Thread-safe: every method may be called concurrently. Requests are
// serialized on one memcached connection (libmemcached handles are not
// thread-safe); waits sleep without holding it. A call blocks for at most its
// wait timeout plus connect_timeout and operation_timeout.
//
// Errors common to every call: Unavailable "memcached at HOST:PORT
// unreachable: ..." when a request fails to connect, send or get a reply.
// Waits do not retry through such failures. The object stays usable;
// libmemcached retries a failed server from the next wall-clock second on.
// Waits (Get, Barrier) return Aborted when their run has ended or has been
// superseded by a newer one; see the protocol above.
class MemcachedBootstrap {
 public:
  // Validates `options` (InvalidArgument naming the field), connects
  // (Unavailable "memcached at HOST:PORT unreachable: ..."), and starts or
  // joins a run as described above (DeadlineExceeded after wait_timeout if
  // there is no open run to join).
  static StatusOr<std::unique_ptr<MemcachedBootstrap>> Connect(const BootstrapOptions& options);

  MemcachedBootstrap(const MemcachedBootstrap&) = delete;
  MemcachedBootstrap& operator=(const MemcachedBootstrap&) = delete;
  // Stops the heartbeat and deletes this node's alive key (best effort).
  ~MemcachedBootstrap();

  const std::string& cluster() const { return options_.cluster; }
  const ServerAddress& server() const { return server_; }
  // The run's epoch, >= 1; fixed for the object's lifetime.
  uint64_t epoch() const { return epoch_; }

  // Takes the next id of `role` in this run (dense from 0) and starts the
  // heartbeat. At most once per object: FailedPrecondition on a second call.
  // ResourceExhausted when the role's id space is used up. Ids are never
  // reused: if the first heartbeat fails, the error is returned and the id
  // stays taken (self() has it).
  StatusOr<uint32_t> Register(NodeRole role);
  // This node's id, once Register succeeded.
  std::optional<NodeId> self() const;
  // How many ids of `role` were handed out in this run so far.
  StatusOr<uint32_t> RegisteredCount(NodeRole role);
  // Whether `node` has renewed its alive key within liveness_timeout.
  StatusOr<bool> IsAlive(NodeId node);

  // Publishes `bytes` (any bytes, up to memcached's item size, 1 MiB by
  // default: ResourceExhausted beyond) under `name`, replacing an earlier
  // value. `name` is printable ASCII without spaces, e.g. "mn/3/regions"
  // (InvalidArgument otherwise or if the key would exceed 250 bytes).
  Status Put(std::string_view name, std::string_view bytes);
  // Atomically adds 1 to the counter record `name`, creating it if missing,
  // and returns the new value: the first caller gets 1, and concurrent
  // callers on any node get distinct values. TryGet/Get(name) read it as
  // decimal text. FailedPrecondition if `name` holds a non-counter value.
  StatusOr<uint64_t> Increment(std::string_view name);
  // The value under `name`; NotFound if absent. Does not wait.
  StatusOr<std::string> TryGet(std::string_view name);
  // Waits until `name` is present and returns it; DeadlineExceeded naming
  // the record and its key after `timeout` (wait_timeout when omitted).
  StatusOr<std::string> Get(std::string_view name);
  StatusOr<std::string> Get(std::string_view name, std::chrono::milliseconds timeout);

  // Returns when `participants` nodes (counting this one) have arrived at the
  // barrier `name`. The k-th call with a given name on each node meets the
  // k-th call on the others, so names may be reused; a call that fails still
  // counts as made. After `timeout` (wait_timeout when omitted):
  // DeadlineExceeded "3 of 4 nodes arrived at barrier 'load' after 30 s;
  // arrived: ...; registered but not arrived: compute 2 (no heartbeat)",
  // listing registered nodes of this node's role (all roles if it is not
  // registered), and "...; 1 compute node never registered in run 5 ..."
  // when fewer than `participants` of its role have taken an id.
  // FailedPrecondition for a node that arrives beyond `participants` (the
  // nodes disagree on the count).
  // `name`: 1..kMaxBarrierNameBytes of printable ASCII other than '/'.
  Status Barrier(std::string_view name, uint32_t participants);
  Status Barrier(std::string_view name, uint32_t participants, std::chrono::milliseconds timeout);

  // Marks the run as finished: later waits of any node of this epoch fail
  // with Aborted and processes that connect without start_new_run wait for a
  // new run. Call once all nodes are past their last barrier. Idempotent.
  Status EndRun();

  // Stops renewing the alive key without deleting it, as a crash would.
  void StopHeartbeatForTesting();

 private:
  struct PollResult;

  MemcachedBootstrap(const BootstrapOptions& options, ServerAddress server,
                     std::unique_ptr<MemcachedConnection> connection);

  Status StartNewRun();
  Status JoinCurrentRun();
  std::string RunKey(std::string_view suffix) const;
  std::string AliveKey(NodeId node) const;
  // The key of record `name`; InvalidArgument if the name is not allowed.
  StatusOr<std::string> RecordKey(std::string_view name) const;
  // Polls `keys` until `done(values)` holds or `timeout` passes, checking on
  // each poll that the run is still current (Aborted otherwise).
  template <typename Done>
  StatusOr<PollResult> PollUntil(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                                 Done done);
  // "arrived: ...; registered but not arrived: ...[; N compute nodes never
  // registered ...]" for a barrier timeout.
  std::string DescribeArrivals(const std::string& barrier_key, uint64_t arrived,
                               uint32_t participants);
  void HeartbeatLoop(NodeId node);
  void StopHeartbeat();

  const BootstrapOptions options_;
  const ServerAddress server_;
  const std::string cluster_prefix_;  // "dmidx/<cluster>/"
  const std::string origin_;          // "<hostname>:<pid>", for diagnostics
  std::unique_ptr<MemcachedConnection> connection_;
  uint64_t epoch_ = 0;  // set once by Connect before the object is shared

  mutable std::mutex mutex_;
  std::optional<NodeId> self_;                    // guarded by mutex_
  std::map<std::string, uint64_t> barrier_uses_;  // guarded by mutex_
  bool stop_heartbeat_ = false;                   // guarded by mutex_
  bool crashed_for_testing_ = false;              // guarded by mutex_
  std::condition_variable heartbeat_wakeup_;
  std::thread heartbeat_thread_;  // started by Register, joined by StopHeartbeat
};

}  // namespace dmidx::bootstrap

#endif  // DMIDX_BOOTSTRAP_MEMCACHED_BOOTSTRAP_H_
