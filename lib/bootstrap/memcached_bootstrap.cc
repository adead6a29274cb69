#include "lib/bootstrap/memcached_bootstrap.h"

#include <libmemcached/memcached.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <utility>

#include "lib/bootstrap/memcached_connection.h"

namespace dmidx::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// memcached's limit on key length (MEMCACHED_MAX_KEY counts a NUL).
constexpr size_t kMaxKeyBytes = MEMCACHED_MAX_KEY - 1;
// How many nodes a barrier timeout message lists by name.
constexpr size_t kMaxListedNodes = 16;
// Bounded well below 30 days, above which memcached reads an expiry as an
// absolute Unix time.
constexpr std::chrono::seconds kMaxLivenessTimeout{3600};

bool IsPrintableNonSpace(char c) {
  return c > 0x20 && c < 0x7f;
}

// Validates a name made of printable ASCII without spaces. `what` names it
// in the message ("cluster name").
Status ValidateName(std::string_view what, std::string_view name, size_t max_bytes,
                    bool allow_slash) {
  if (name.empty()) return Status::InvalidArgument(std::string(what) + " must not be empty");
  if (name.size() > max_bytes) {
    return Status::InvalidArgument(std::string(what) + " " + Quoted(name) + " has " +
                                   std::to_string(name.size()) + " bytes; at most " +
                                   std::to_string(max_bytes) + " are allowed");
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (IsPrintableNonSpace(name[i]) && (allow_slash || name[i] != '/')) continue;
    return Status::InvalidArgument(std::string(what) + " " + Quoted(name) + " has " +
                                   Quoted(name.substr(i, 1)) + " at byte " + std::to_string(i) +
                                   "; allowed are printable ASCII characters other than " +
                                   (allow_slash ? "space" : "space and '/'"));
  }
  return Status::Ok();
}

Status ValidateTimings(const BootstrapOptions& options) {
  auto positive = [](milliseconds value, std::string_view field) {
    if (value.count() > 0) return Status::Ok();
    return Status::InvalidArgument("BootstrapOptions::" + std::string(field) +
                                   " must be positive, not " + std::to_string(value.count()) +
                                   " ms");
  };
  DMIDX_RETURN_IF_ERROR(positive(options.connect_timeout, "connect_timeout"));
  DMIDX_RETURN_IF_ERROR(positive(options.operation_timeout, "operation_timeout"));
  DMIDX_RETURN_IF_ERROR(positive(options.poll_interval, "poll_interval"));
  if (options.wait_timeout.count() < 0) {
    return Status::InvalidArgument("BootstrapOptions::wait_timeout must not be negative");
  }
  if (options.heartbeat_interval.count() < 0) {
    return Status::InvalidArgument("BootstrapOptions::heartbeat_interval must not be negative");
  }
  if (options.liveness_timeout < std::chrono::seconds(2) ||
      options.liveness_timeout > kMaxLivenessTimeout) {
    return Status::InvalidArgument(
        "BootstrapOptions::liveness_timeout must be 2 to 3600 s (memcached expires in whole "
        "seconds), not " +
        std::to_string(options.liveness_timeout.count()) + " s");
  }
  if (2 * options.heartbeat_interval > options.liveness_timeout) {
    return Status::InvalidArgument("BootstrapOptions::heartbeat_interval (" +
                                   FormatDuration(options.heartbeat_interval) +
                                   ") must be at most half of liveness_timeout (" +
                                   std::to_string(options.liveness_timeout.count()) + " s)");
  }
  return Status::Ok();
}

std::string Origin() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return std::string(host[0] ? host : "unknown-host") + ":" + std::to_string(getpid());
}

}  // namespace

std::optional<uint64_t> ParseCounter(std::string_view text) {
  while (!text.empty() && text.back() == ' ')
    text.remove_suffix(1);
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string_view NodeRoleName(NodeRole role) {
  return role == NodeRole::kMemory ? "memory" : "compute";
}

std::string NodeId::ToString() const {
  return std::string(NodeRoleName(role)) + " " + std::to_string(id);
}

std::string ServerAddress::ToString() const {
  const bool bracket = host.find(':') != std::string::npos;
  return (bracket ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StatusOr<ServerAddress> ParseServerAddress(std::string_view text) {
  auto invalid = [text](std::string_view why) {
    return Status::InvalidArgument("memcached server address " + Quoted(text) + ": " +
                                   std::string(why) + " (expected host:port or [ipv6]:port)");
  };
  if (text.empty()) return invalid("empty");
  for (char c : text) {
    if (!IsPrintableNonSpace(c)) return invalid("contains whitespace or a control character");
  }
  std::string_view host = text;
  std::optional<std::string_view> port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return invalid("'[' without ']'");
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return invalid("junk after ']'");
      port_text = rest.substr(1);
    }
  } else if (const size_t colon = text.find(':'); colon != std::string_view::npos) {
    if (text.find(':', colon + 1) != std::string_view::npos) {
      return invalid("more than one ':' (write IPv6 addresses in brackets)");
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (host.empty()) return invalid("empty host");
  ServerAddress address{std::string(host), kDefaultMemcachedPort};
  if (port_text) {
    uint32_t port = 0;
    const auto [end, error] =
        std::from_chars(port_text->data(), port_text->data() + port_text->size(), port);
    if (port_text->empty() || error != std::errc() ||
        end != port_text->data() + port_text->size() || port == 0 || port > 65535) {
      return invalid("port must be a number in 1..65535");
    }
    address.port = static_cast<uint16_t>(port);
  }
  return address;
}

Status ValidateClusterName(std::string_view name) {
  return ValidateName("cluster name", name, kMaxClusterNameBytes, /*allow_slash=*/false);
}

struct MemcachedBootstrap::PollResult {
  bool done = false;
  std::vector<std::optional<std::string>> values;  // of the keys polled for
};

MemcachedBootstrap::MemcachedBootstrap(const BootstrapOptions& options, ServerAddress server,
                                       std::unique_ptr<MemcachedConnection> connection)
    : options_(options),
      server_(std::move(server)),
      cluster_prefix_("dmidx/" + options.cluster + "/"),
      origin_(Origin()),
      connection_(std::move(connection)) {}

MemcachedBootstrap::~MemcachedBootstrap() {
  StopHeartbeat();
  std::optional<NodeId> node;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!crashed_for_testing_) node = self_;
  }
  // A clean leave: others see the node gone at once instead of after
  // liveness_timeout. Nothing can be done about a failure here.
  if (node && options_.heartbeat_interval.count() > 0) {
    static_cast<void>(connection_->Delete(AliveKey(*node)));
  }
}

StatusOr<std::unique_ptr<MemcachedBootstrap>> MemcachedBootstrap::Connect(
    const BootstrapOptions& options) {
  DMIDX_ASSIGN_OR_RETURN(ServerAddress server, ParseServerAddress(options.server));
  DMIDX_RETURN_IF_ERROR(ValidateClusterName(options.cluster));
  DMIDX_RETURN_IF_ERROR(ValidateTimings(options));
  DMIDX_ASSIGN_OR_RETURN(std::unique_ptr<MemcachedConnection> connection,
                         MemcachedConnection::Open(server, options));
  std::unique_ptr<MemcachedBootstrap> bootstrap(
      new MemcachedBootstrap(options, std::move(server), std::move(connection)));
  DMIDX_RETURN_IF_ERROR(options.start_new_run ? bootstrap->StartNewRun()
                                              : bootstrap->JoinCurrentRun());
  return bootstrap;
}

std::string MemcachedBootstrap::RunKey(std::string_view suffix) const {
  return cluster_prefix_ + std::to_string(epoch_) + "/" + std::string(suffix);
}

std::string MemcachedBootstrap::AliveKey(NodeId node) const {
  return RunKey("alive/" + std::string(NodeRoleName(node.role)) + "/" + std::to_string(node.id));
}

Status MemcachedBootstrap::StartNewRun() {
  DMIDX_ASSIGN_OR_RETURN(epoch_, connection_->Increment(cluster_prefix_ + "epoch"));
  return Status::Ok();
}

Status MemcachedBootstrap::JoinCurrentRun() {
  const std::string epoch_key = cluster_prefix_ + "epoch";
  const Clock::time_point deadline = Clock::now() + options_.wait_timeout;
  while (true) {
    DMIDX_ASSIGN_OR_RETURN(std::optional<std::string> text, connection_->Get(epoch_key));
    const std::optional<uint64_t> epoch = text ? ParseCounter(*text) : uint64_t{0};
    if (!epoch) return Status::Internal("key " + Quoted(epoch_key) + " holds " + Quoted(*text));
    if (*epoch > 0) {
      const std::string closed_key = cluster_prefix_ + std::to_string(*epoch) + "/closed";
      DMIDX_ASSIGN_OR_RETURN(std::optional<std::string> closed, connection_->Get(closed_key));
      if (!closed) {
        epoch_ = *epoch;
        return Status::Ok();
      }
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      const std::string waited = FormatDuration(options_.wait_timeout);
      const std::string hint = "; connect one process with start_new_run = true";
      if (*epoch == 0) {
        return Status::DeadlineExceeded("no run of cluster " + Quoted(options_.cluster) +
                                        " was started within " + waited + " (key " +
                                        Quoted(epoch_key) + " is absent)" + hint);
      }
      return Status::DeadlineExceeded("no open run of cluster " + Quoted(options_.cluster) +
                                      " within " + waited + ": run " + std::to_string(*epoch) +
                                      " has ended and no newer run was started" + hint);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(options_.poll_interval, deadline - now));
  }
}

template <typename Done>
StatusOr<MemcachedBootstrap::PollResult> MemcachedBootstrap::PollUntil(
    std::vector<std::string> keys, milliseconds timeout, Done done) {
  const size_t own_keys = keys.size();
  const std::string epoch_key = cluster_prefix_ + "epoch";
  keys.push_back(epoch_key);
  keys.push_back(RunKey("closed"));
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    DMIDX_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> values,
                           connection_->MultiGet(keys));
    const std::optional<std::string> closed = std::move(values[own_keys + 1]);
    const std::optional<std::string> epoch_text = std::move(values[own_keys]);
    values.resize(own_keys);
    // Checked before the run's state: a wait that was satisfied before
    // EndRun or a new run still succeeds.
    if (done(values)) return PollResult{true, std::move(values)};

    const std::string run =
        "run " + std::to_string(epoch_) + " of cluster " + Quoted(options_.cluster);
    if (closed) return Status::Aborted(run + " has ended (EndRun was called)");
    const std::optional<uint64_t> epoch = epoch_text ? ParseCounter(*epoch_text) : std::nullopt;
    if (!epoch) {
      return Status::Aborted(run + " is gone: key " + Quoted(epoch_key) +
                             " is missing or invalid (was memcached restarted or flushed?)");
    }
    if (*epoch != epoch_) {
      return Status::Aborted(run + " was superseded by run " + std::to_string(*epoch) +
                             " (a process connected with start_new_run); connect again to join it");
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return PollResult{false, std::move(values)};
    std::this_thread::sleep_for(std::min<Clock::duration>(options_.poll_interval, deadline - now));
  }
}

StatusOr<uint32_t> MemcachedBootstrap::Register(NodeRole role) {
  // mutex_ is held across the increment so that concurrent calls on one
  // object cannot take two ids.
  std::lock_guard<std::mutex> lock(mutex_);
  if (self_) {
    return Status::FailedPrecondition("this node is already registered as " + self_->ToString());
  }
  const std::string counter_key = RunKey("ids/" + std::string(NodeRoleName(role)));
  DMIDX_ASSIGN_OR_RETURN(const uint64_t count, connection_->Increment(counter_key));
  const uint64_t limit = role == NodeRole::kMemory ? kMaxMemoryNodes : UINT32_MAX;
  if (count == 0 || count > limit) {
    return Status::ResourceExhausted(
        "run " + std::to_string(epoch_) + " of cluster " + Quoted(options_.cluster) +
        " already has " + std::to_string(limit) + " " + std::string(NodeRoleName(role)) + " nodes");
  }
  self_ = NodeId{role, static_cast<uint32_t>(count - 1)};
  if (options_.heartbeat_interval.count() > 0 && !stop_heartbeat_) {
    // The first beat is synchronous, so the node is alive once Register
    // returns. On failure the id stays taken (ids are never reused).
    DMIDX_RETURN_IF_ERROR(connection_->Set(AliveKey(*self_), origin_, options_.liveness_timeout));
    heartbeat_thread_ = std::thread([this, node = *self_] { HeartbeatLoop(node); });
  }
  return self_->id;
}

std::optional<NodeId> MemcachedBootstrap::self() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return self_;
}

StatusOr<uint32_t> MemcachedBootstrap::RegisteredCount(NodeRole role) {
  const std::string counter_key = RunKey("ids/" + std::string(NodeRoleName(role)));
  DMIDX_ASSIGN_OR_RETURN(std::optional<std::string> text, connection_->Get(counter_key));
  if (!text) return uint32_t{0};
  const std::optional<uint64_t> count = ParseCounter(*text);
  if (!count || *count > UINT32_MAX) {
    return Status::Internal("key " + Quoted(counter_key) + " holds " + Quoted(*text));
  }
  return static_cast<uint32_t>(*count);
}

StatusOr<bool> MemcachedBootstrap::IsAlive(NodeId node) {
  DMIDX_ASSIGN_OR_RETURN(std::optional<std::string> beat, connection_->Get(AliveKey(node)));
  return beat.has_value();
}

void MemcachedBootstrap::HeartbeatLoop(NodeId node) {
  const std::string key = AliveKey(node);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!heartbeat_wakeup_.wait_for(lock, options_.heartbeat_interval,
                                     [this] { return stop_heartbeat_; })) {
    lock.unlock();
    // A failed beat is retried at the next interval; a node whose beats keep
    // failing reads as dead to others, which is what it is to them.
    static_cast<void>(connection_->Set(key, origin_, options_.liveness_timeout));
    lock.lock();
  }
}

void MemcachedBootstrap::StopHeartbeat() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_heartbeat_ = true;
    thread = std::move(heartbeat_thread_);
  }
  heartbeat_wakeup_.notify_all();
  if (thread.joinable()) thread.join();
}

void MemcachedBootstrap::StopHeartbeatForTesting() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    crashed_for_testing_ = true;
  }
  StopHeartbeat();
}

StatusOr<std::string> MemcachedBootstrap::RecordKey(std::string_view name) const {
  DMIDX_RETURN_IF_ERROR(ValidateName("record name", name, kMaxKeyBytes, /*allow_slash=*/true));
  std::string key = RunKey("rec/" + std::string(name));
  if (key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("record name " + Quoted(name) + " makes the key " +
                                   std::to_string(key.size()) + " bytes long; memcached allows " +
                                   std::to_string(kMaxKeyBytes));
  }
  return key;
}

Status MemcachedBootstrap::Put(std::string_view name, std::string_view bytes) {
  DMIDX_ASSIGN_OR_RETURN(const std::string key, RecordKey(name));
  return connection_->Set(key, bytes, std::chrono::seconds(0));
}

StatusOr<uint64_t> MemcachedBootstrap::Increment(std::string_view name) {
  DMIDX_ASSIGN_OR_RETURN(const std::string key, RecordKey(name));
  return connection_->Increment(key);
}

StatusOr<std::string> MemcachedBootstrap::TryGet(std::string_view name) {
  DMIDX_ASSIGN_OR_RETURN(const std::string key, RecordKey(name));
  DMIDX_ASSIGN_OR_RETURN(std::optional<std::string> value, connection_->Get(key));
  if (!value)
    return Status::NotFound("record " + Quoted(name) + " is not published (key " + Quoted(key) +
                            ")");
  return std::move(*value);
}

StatusOr<std::string> MemcachedBootstrap::Get(std::string_view name) {
  return Get(name, options_.wait_timeout);
}

StatusOr<std::string> MemcachedBootstrap::Get(std::string_view name, milliseconds timeout) {
  DMIDX_ASSIGN_OR_RETURN(const std::string key, RecordKey(name));
  DMIDX_ASSIGN_OR_RETURN(PollResult result, PollUntil({key}, timeout, [](const auto& values) {
                           return values[0].has_value();
                         }));
  if (!result.done) {
    return Status::DeadlineExceeded("record " + Quoted(name) + " was not published after " +
                                    FormatDuration(timeout) + " (key " + Quoted(key) + ")");
  }
  return std::move(*result.values[0]);
}

Status MemcachedBootstrap::Barrier(std::string_view name, uint32_t participants) {
  return Barrier(name, participants, options_.wait_timeout);
}

Status MemcachedBootstrap::Barrier(std::string_view name, uint32_t participants,
                                   milliseconds timeout) {
  DMIDX_RETURN_IF_ERROR(
      ValidateName("barrier name", name, kMaxBarrierNameBytes, /*allow_slash=*/false));
  if (participants == 0) return Status::InvalidArgument("a barrier needs at least 1 participant");
  uint64_t use = 0;
  std::string arrival_label;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    use = barrier_uses_[std::string(name)]++;
    arrival_label = self_ ? self_->ToString() : "unregistered " + origin_;
  }
  std::string barrier = "barrier " + Quoted(name);
  if (use > 0) barrier += " (use " + std::to_string(use + 1) + ")";
  const std::string barrier_key =
      RunKey("barrier/" + std::string(name) + "/" + std::to_string(use));
  const std::string count_key = barrier_key + "/count";

  DMIDX_ASSIGN_OR_RETURN(const uint64_t arrival, connection_->Increment(count_key));
  if (arrival > participants) {
    return Status::FailedPrecondition(std::to_string(arrival) + " nodes arrived at " + barrier +
                                      " that expects " + std::to_string(participants) +
                                      ": the nodes disagree on the number of participants");
  }
  DMIDX_RETURN_IF_ERROR(connection_->Set(barrier_key + "/arrived/" + std::to_string(arrival),
                                         arrival_label, std::chrono::seconds(0)));
  uint64_t arrived = arrival;
  DMIDX_ASSIGN_OR_RETURN(PollResult result,
                         PollUntil({count_key}, timeout, [&](const auto& values) {
                           if (values[0]) arrived = ParseCounter(*values[0]).value_or(arrived);
                           return arrived >= participants;
                         }));
  if (result.done) return Status::Ok();
  return Status::DeadlineExceeded(std::to_string(arrived) + " of " + std::to_string(participants) +
                                  " nodes arrived at " + barrier + " after " +
                                  FormatDuration(timeout) + "; " +
                                  DescribeArrivals(barrier_key, arrived, participants));
}

std::string MemcachedBootstrap::DescribeArrivals(const std::string& barrier_key, uint64_t arrived,
                                                 uint32_t participants) {
  auto list = [](const std::vector<std::string>& items, size_t total) {
    if (items.empty()) return std::string("none");
    std::string out;
    for (const std::string& item : items)
      out += (out.empty() ? "" : ", ") + item;
    if (total > items.size()) out += ", and " + std::to_string(total - items.size()) + " more";
    return out;
  };
  // Who arrived, from the arrival slots (best effort: a slot may not be
  // written yet, or a request may fail; the message is still useful).
  std::vector<std::string> slot_keys;
  for (uint64_t k = 1; k <= arrived && slot_keys.size() < kMaxListedNodes; ++k) {
    slot_keys.push_back(barrier_key + "/arrived/" + std::to_string(k));
  }
  std::vector<std::string> arrived_nodes;
  std::set<std::string> arrived_set;
  if (StatusOr<std::vector<std::optional<std::string>>> slots = connection_->MultiGet(slot_keys);
      slots.ok()) {
    for (const std::optional<std::string>& label : *slots) {
      arrived_nodes.push_back(label.value_or("?"));
      if (label) arrived_set.insert(*label);
    }
  }
  std::string out = "arrived: " + list(arrived_nodes, arrived);
  if (arrived > kMaxListedNodes) return out;  // too many to tell who is missing

  // Registered nodes that did not arrive, with their liveness: nodes of
  // this node's role, the barrier's participants (compute nodes never wait
  // for memory nodes at a barrier, nor the reverse); every role when this
  // node is unregistered.
  const std::optional<NodeId> me = self();
  std::vector<NodeRole> roles = {NodeRole::kMemory, NodeRole::kCompute};
  if (me) roles = {me->role};
  std::vector<NodeId> missing;  // the first kMaxListedNodes of them
  size_t missing_total = 0;
  uint64_t registered = 0;
  for (NodeRole role : roles) {
    const StatusOr<uint32_t> count = RegisteredCount(role);
    if (count.ok()) registered += *count;
    for (uint32_t id = 0; count.ok() && id < *count; ++id) {
      if (arrived_set.contains(NodeId{role, id}.ToString())) continue;
      if (++missing_total <= kMaxListedNodes) missing.push_back({role, id});
    }
  }
  std::vector<std::string> alive_keys;
  for (const NodeId& node : missing)
    alive_keys.push_back(AliveKey(node));
  const StatusOr<std::vector<std::optional<std::string>>> beats = connection_->MultiGet(alive_keys);
  std::vector<std::string> missing_nodes;
  for (size_t i = 0; i < missing.size(); ++i) {
    std::string item = missing[i].ToString();
    if (beats.ok()) item += (*beats)[i] ? " (alive at " + *(*beats)[i] + ")" : " (no heartbeat)";
    missing_nodes.push_back(std::move(item));
  }
  out += "; registered but not arrived: " + list(missing_nodes, missing_total);
  // Participants that never took an id: not started, or pointed elsewhere.
  if (me && registered < participants) {
    const uint64_t absent = participants - registered;
    out += "; " + std::to_string(absent) + " " + std::string(NodeRoleName(me->role)) + " node" +
           (absent == 1 ? "" : "s") + " never registered in run " + std::to_string(epoch_) +
           " (not started, or given another memcached or cluster name?)";
  }
  return out;
}

Status MemcachedBootstrap::EndRun() {
  return connection_->Set(RunKey("closed"), origin_, std::chrono::seconds(0));
}

}  // namespace dmidx::bootstrap
