#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "lib/fabric/sim_fabric.h"
#include "lib/runtime/client.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/membership.h"
#include "testing/history.h"
#include "testing/linearizability.h"
#include "testing/local_cluster.h"
#include "testing/model.h"
#include "testing/run_clients.h"
#include "testing/zipf.h"
#include "tests/index_test_hooks.h"
#include "tests/sim_schedule.h"

namespace dmidx::testing {
namespace {

// `text` with every number (decimal, or hexadecimal after "0x") replaced by
// "#": the same failure of any key, node or address reads the same. (Not
// std::regex: GCC 12 warns inside <regex> under AddressSanitizer.)
std::string WithoutNumbers(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "0x") == 0 && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      i += 2;
      while (i < text.size() && std::isxdigit(static_cast<unsigned char>(text[i])))
        ++i;
      out += '#';
    } else if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
        ++i;
      out += '#';
    } else {
      out += text[i++];
    }
  }
  return out;
}

// Problems of one schedule listed in its description.
constexpr size_t kProblemsListed = 8;
// The categories of the checks after the run.
constexpr char kNotLinearizable[] = "not linearizable";
constexpr char kTreeAtRest[] = "tree at rest";

// The operation a mixed schedule's context runs next (kind, key, scan
// bounds; values are the caller's).
void PickMixed(const Schedule& schedule, const Zipf& zipf, std::mt19937_64& rng, LoggedOp* op) {
  const uint64_t keys = schedule.keys.count();
  op->key = schedule.skewed ? zipf(rng) : rng() % keys;
  const uint64_t dice = rng() % 100;
  if (dice < 30) {
    op->kind = OpKind::kInsert;
  } else if (dice < 45) {
    op->kind = OpKind::kUpdate;
  } else if (dice < 60) {
    op->kind = OpKind::kDelete;
  } else if (dice < 94) {
    op->kind = OpKind::kLookup;
  } else if (dice % 2 == 0) {
    op->kind = OpKind::kScanRange;
    op->value = std::min(op->key + rng() % 16, keys - 1);
  } else {
    op->kind = OpKind::kScanCount;
    op->value = 1 + rng() % 8;
  }
}

// The keys of the latest deletes started, shared by a schedule's contexts
// (one thread runs them all).
class RecentDeletes {
 public:
  void Add(uint64_t id) {
    ids_[next_++ % ids_.size()] = id;
    count_ = std::min(count_ + 1, ids_.size());
  }
  bool empty() const { return count_ == 0; }
  uint64_t Pick(std::mt19937_64& rng) const { return ids_[rng() % count_]; }

 private:
  std::array<uint64_t, 4> ids_{};
  size_t next_ = 0, count_ = 0;
};

// The operation a merges or failures context runs next: delete-heavy;
// most inserts re-insert a key just deleted, many deletes take a sibling
// of one; `follow`, when set, is the key.
void PickShaped(const Schedule& schedule, RecentDeletes& recent, std::optional<uint64_t> follow,
                std::mt19937_64& rng, LoggedOp* op) {
  const uint64_t keys = schedule.keys.count();
  const uint64_t dice = rng() % 100, chance = rng() % 100, uniform = rng() % keys;
  op->kind = dice < 28   ? OpKind::kInsert
             : dice < 56 ? OpKind::kDelete
             : dice < 66 ? OpKind::kUpdate
             : dice < 80 ? OpKind::kLookup
             : dice < 90 ? OpKind::kScanRange
                         : OpKind::kScanCount;
  if (follow) {
    op->key = *follow;
  } else if (op->kind == OpKind::kInsert && !recent.empty() && chance < 60) {
    op->key = recent.Pick(rng);
  } else if (op->kind == OpKind::kDelete && !recent.empty() && chance < 40) {
    op->key = schedule.keys.Sibling(recent.Pick(rng), rng);
  } else {
    op->key = uniform;
  }
  if (op->kind == OpKind::kDelete) recent.Add(op->key);
  if (op->kind == OpKind::kScanRange) op->value = std::min(op->key + rng() % (keys / 2), keys - 1);
  if (op->kind == OpKind::kScanCount) op->value = 1 + rng() % 8;
}

// Runs `op` on `index` with its ids encoded by `keys`; a scan's keys are
// decoded back to ids (logged as Key(id)), and one that encodes no id is
// DataLoss.
Status Execute(RangeIndex& index, Context& ctx, const KeyCodec& keys, LoggedOp* op) {
  const std::string key = keys.Encode(op->key);
  Status done;
  switch (op->kind) {
    case OpKind::kInsert:
      return index.Insert(ctx, key, op->value);
    case OpKind::kUpdate:
      return index.Update(ctx, key, op->value);
    case OpKind::kDelete:
      return index.Delete(ctx, key);
    case OpKind::kLookup:
      return index.Lookup(ctx, key, &op->value);
    case OpKind::kScanRange:
      done = index.Scan(ctx, key, keys.Encode(op->value), &op->scanned);
      break;
    case OpKind::kScanCount:
      done = index.Scan(ctx, key, static_cast<size_t>(op->value), &op->scanned);
      break;
  }
  for (KeyValue& pair : op->scanned) {
    const std::optional<uint64_t> id = keys.Decode(pair.key);
    if (!id)
      return Status::DataLoss("scan returned key " + Hex(pair.key) + ", which encodes no key id");
    pair.key = Key(*id);
  }
  return done;
}

// Whether `op` may have ended with `done`: Ok; NotFound for an update,
// delete or lookup; Unavailable caused by an injected batch failure when
// `injected` (its compute node had one fail).
bool Allowed(const LoggedOp& op, const Status& done, bool injected) {
  if (done.ok()) return true;
  if (done.IsNotFound()) {
    return op.kind == OpKind::kUpdate || op.kind == OpKind::kDelete || op.kind == OpKind::kLookup;
  }
  return injected && done.IsUnavailable() &&
         done.message().find("(injected") != std::string_view::npos;
}

// A hash of every logged operation's kind, key, values, ticks, status and
// scan result: two runs with equal prints ran the same history.
uint64_t Fingerprint(const std::vector<std::vector<LoggedOp>>& logs) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](uint64_t value) { hash = (hash ^ value) * 1099511628211ull; };
  for (const auto& log : logs) {
    for (const LoggedOp& op : log) {
      mix(static_cast<uint64_t>(op.kind));
      mix(static_cast<uint64_t>(op.code));
      mix(op.key);
      mix(op.value);
      mix(op.start);
      mix(op.end);
      for (const KeyValue& pair : op.scanned) {
        mix(std::hash<std::string>()(pair.key));
        mix(pair.value);
      }
    }
  }
  return hash;
}

// One schedule's cluster, compute nodes and index handles, and its
// history. A result an operation may not have is a problem; the schedule
// goes on without that context (the others run on, and the runs after it
// and the check too), so that one run shows every kind of failure it has.
class ScheduleRun {
 public:
  explicit ScheduleRun(Schedule schedule) : schedule_(std::move(schedule)) {}

  Outcome Run(uint64_t seed) {
    Outcome outcome;
    outcome.shape = schedule_.shape;
    if (Open(seed) && Preload() && RunContexts() && AfterTheRun() && ReadFinalContents()) {
      outcome.ops = Check();
      CheckIndexAtRest();
    }
    outcome.print = Fingerprint(logs_);
    if (faults_ != nullptr) outcome.injected = faults_->counters().random_failed_batches;
    outcome.deaths = deaths_;
    outcome.pending = pending_;
    for (Client* client : raw_) {
      outcome.reclaimed +=
          static_cast<runtime::ClientImpl&>(*client).epochs().counters().reclaimed.load();
    }
    outcome.died = died_;
    if (problems_.empty()) return outcome;
    outcome.error = schedule_.details;
    if (!died_.empty()) outcome.error += "\n" + died_;
    if (Deaths()) {
      outcome.sequels.push_back(
          "compute node " +
          std::string(second_scheduled_ && deaths_ > 1 ? "and its recoverer " : "") +
          "died during " + (first_doing_.empty() ? "no operation" : first_doing_));
    }
    auto add_once = [](std::vector<std::string>& names, const std::string& name) {
      if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
      }
    };
    // The first kProblemsListed operations' failures, and every check's
    // after the run (the linearizability check, the walk): one each.
    size_t unlisted = 0;
    for (size_t i = 0; i < problems_.size(); ++i) {
      const Problem& problem = problems_[i];
      if (i < kProblemsListed || problem.category == kNotLinearizable ||
          problem.category == kTreeAtRest) {
        outcome.error += "\n" + problem.message;
      } else {
        ++unlisted;
      }
      add_once(outcome.categories, problem.category);
      add_once(outcome.sequels, problem.sequel);
    }
    if (unlisted > 0) outcome.error += "\n... and " + std::to_string(unlisted) + " more";
    return outcome;
  }

 private:
  struct Problem {
    std::string category;  // Outcome::categories
    std::string sequel;    // Outcome::sequels, or ""
    std::string message;   // where, and the status
  };

  // Records a problem; returns false, for set-up steps that cannot go on.
  bool Fail(std::string category, std::string message, std::string sequel = "") {
    problems_.push_back({std::move(category), std::move(sequel), std::move(message)});
    return false;
  }

  // A result `op` may not have: a problem, under its status with numbers
  // and addresses left out (the same failure of any key, node or context is
  // one row of the summary), and, when an operation of its key ended
  // Unavailable before, as that operation's sequel.
  void Unexpected(const LoggedOp& op, const Status& done, std::string where) {
    std::string category = WithoutNumbers(done.ToString());
    if (done.IsUnavailable()) category += " (not injected here)";
    std::string sequel;
    const auto failed = unavailable_.find(op.key);
    if (op.kind != OpKind::kScanRange && op.kind != OpKind::kScanCount &&
        failed != unavailable_.end()) {
      sequel = std::string(OpKindName(failed->second)) + " Unavailable, then " +
               std::string(StatusCodeName(done.code()));
    }
    Fail(std::move(category),
         std::move(where) + " (" + OpKindName(op.kind) + " of key " + std::to_string(op.key) +
             "): " + done.ToString(),
         std::move(sequel));
  }

  // Notes an operation on one key that ended Unavailable.
  void NoteUnavailable(const LoggedOp& op) {
    if (op.kind != OpKind::kScanRange && op.kind != OpKind::kScanCount) {
      unavailable_[op.key] = op.kind;
    }
  }

  bool Open(uint64_t seed) {
    ClusterOptions options = SmallLocalCluster(2, uint64_t{16} << 20, true,
                                               std::chrono::microseconds(schedule_.max_delay_us));
    options.backend = FabricBackend::kSim;
    options.local.seed = seed;
    options.local.stall_probability = schedule_.stall_probability;
    options.local.stall = std::chrono::microseconds(schedule_.stall_us);
    if (Deaths() || schedule_.kind == Kind::kMerges) {
      // Short leases move epochs within a schedule: deletes' leaves and
      // merged nodes are freed and reused while it runs.
      options.lease.period = kDeathLeasePeriod;
      options.lease.timeout = kDeathLeaseTimeout;
    }
    // Caches keep no entry past the current epoch: reuse as soon as the
    // operations in flight allow it.
    options.reclamation.cache_window_epochs = 0;
    Status status = Cluster::Open(options, &cluster_);
    if (!status.ok()) return Fail("set-up", "cluster: " + status.ToString());
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      clients_.push_back(NewClient(*cluster_, kThreads, kCoroutines));
      if (!clients_.back()) return Fail("set-up", "client " + std::to_string(cn));
      raw_.push_back(clients_.back().get());
      runtime::ComputeNode& node = runtime::ComputeNode::Of(*clients_.back());
      ids_.push_back(node.id());
      if (Deaths()) {
        // Added before the index opens, so that it runs first of a
        // recovery's steps (after the fence): a second death it schedules
        // lands within the redo records' step or later.
        recovery_steps_.push_back(node.membership().AddRecoveryStep(
            "sim schedules: a second death", [this, cn](runtime::ContextImpl&, uint32_t dead) {
              OnRecovery(cn, dead);
              return Status::Ok();
            }));
      }
      handles_.emplace_back();
      for (const registry::IndexSettings& settings : schedule_.settings[cn]) {
        std::unique_ptr<RangeIndex> index;
        status = schedule_.index->open(raw_.back(), "explore", kKeyBytes, settings, &index);
        handles_.back().push_back(std::move(index));
        if (!status.ok()) {
          return Fail("set-up",
                      "open on compute node " + std::to_string(cn) + ": " + status.ToString());
        }
      }
    }
    faults_ = static_cast<runtime::ClusterImpl&>(*cluster_).fabric().faults();
    return true;
  }

  bool Deaths() const { return schedule_.kind == Kind::kDeaths; }

  fabric::SimWorld& World() {
    return static_cast<fabric::SimFabric&>(static_cast<runtime::ClusterImpl&>(*cluster_).fabric())
        .world();
  }

  // Deaths: compute node `cn` dies `delay_ns` of virtual time from the
  // running code's clock, at an event of its own.
  void ScheduleDeath(uint32_t cn, uint64_t delay_ns) {
    fabric::SimWorld& world = World();
    death_events_[cn] =
        world.Schedule(world.cursor() + static_cast<int64_t>(delay_ns), &DeathEvent, this, cn);
  }
  static void DeathEvent(void* run, uint64_t cn) {
    auto& self = *static_cast<ScheduleRun*>(run);
    self.death_events_.erase(static_cast<uint32_t>(cn));
    self.Die(static_cast<uint32_t>(cn));
  }

  // Compute node `cn` dies now: what it posted and was not applied is
  // dropped (a torn WRITE keeps the pieces that landed), it posts nothing
  // more, and its contexts' operations in flight are pending.
  void Die(uint32_t cn) {
    if (dead_[cn]) return;
    faults_->KillComputeNode(ids_[cn]);
    dead_[cn] = true;
    ++deaths_;
    const int64_t now = World().now();
    std::string doing;
    for (size_t id = 0; id < kContexts; ++id) {
      const InFlight& op = in_flight_[id];
      if (!op.running || op.cn != cn) continue;
      doing += doing.empty() ? "" : ", ";
      doing += std::string(OpKindName(op.kind)) + " of key " + std::to_string(op.key) + " " +
               std::to_string(now - op.started_ns) + " ns in";
    }
    if (deaths_ == 1) {
      std::set<std::string> kinds;
      for (size_t id = 0; id < kContexts; ++id) {
        if (in_flight_[id].running && in_flight_[id].cn == cn) {
          kinds.insert(OpKindName(in_flight_[id].kind));
        }
      }
      for (const std::string& kind : kinds)
        first_doing_ += (first_doing_.empty() ? "" : ", ") + kind;
    }
    died_ += died_.empty() ? "" : "; ";
    died_ += "compute node " + std::to_string(cn) + " died at " + std::to_string(now) +
             " ns, during " + (doing.empty() ? "no operation" : doing);
  }

  // A recovery step of compute node `cn`'s: with Schedule::second_death,
  // the first recoverer of the victim dies during the recovery.
  void OnRecovery(uint32_t cn, uint32_t dead) {
    if (!second_armed_ || second_scheduled_ || !schedule_.second_death) return;
    if (dead != ids_[schedule_.victim] || dead_[cn]) return;
    second_scheduled_ = true;
    ScheduleDeath(cn, schedule_.second_delay_ns);
  }

  // Deaths: the compute nodes alive.
  std::vector<uint32_t> Survivors() const {
    std::vector<uint32_t> alive;
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      if (!dead_[cn]) alive.push_back(cn);
    }
    return alive;
  }

  // Deaths: runs `ops` after the contexts' run on the survivors' executor
  // contexts (a blocking context may not judge a lease, so it could not
  // free a word a dead node holds): `ops[i]` on compute node
  // `nodes[i]`, each survivor's in order on one context of its, the
  // survivors at once; a result an operation may not have is a problem.
  bool RunOnSurvivors(std::vector<LoggedOp> ops, const std::vector<uint32_t>& nodes,
                      const std::string& when, std::vector<LoggedOp>* log) {
    const std::vector<uint32_t> survivors = Survivors();
    std::vector<Client*> clients;
    for (uint32_t cn : survivors)
      clients.push_back(raw_[cn]);
    const std::vector<Status> results = RunClients(clients, [&](int index, Context& ctx) {
      if (ctx.thread_index() != 0 || ctx.coroutine_index() != 0) return Status::Ok();
      const uint32_t cn = survivors[static_cast<size_t>(index)];
      for (size_t i = 0; i < ops.size(); ++i) {
        if (nodes[i] != cn) continue;
        LoggedOp op = ops[i];
        RangeIndex& index_handle = *handles_[cn][op.key % handles_[cn].size()];
        if (op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate) {
          op.value = uint64_t{kContexts + 1} << 32 | ++alone_sequence_;
        }
        op.start = clock_++;
        const Status done = Execute(index_handle, ctx, schedule_.keys, &op);
        op.end = clock_++;
        op.code = done.code();
        const bool allowed = Allowed(op, done, false);
        if (!allowed) Unexpected(op, done, when + ", compute node " + std::to_string(cn));
        log->push_back(std::move(op));
        if (!allowed) break;
      }
      return Status::Ok();
    });
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok()) {
        return Fail("set-up",
                    "compute node " + std::to_string(survivors[i]) + ": " + results[i].ToString());
      }
    }
    return true;
  }

  // A blocking context of compute node `cn`, made on first use (a mixed
  // schedule makes them only after its run, as it always did).
  Context* Reader(uint32_t cn) {
    if (readers_.empty()) readers_.resize(kComputeNodes);
    if (!readers_[cn]) {
      const Status status = clients_[cn]->NewBlockingContext(&readers_[cn]);
      if (!status.ok()) {
        Fail("set-up", "blocking context: " + status.ToString());
        return nullptr;
      }
    }
    return readers_[cn].get();
  }

  // Runs one operation outside the contexts' run, by a blocking context of
  // `cn`, into `log`: a result it may not have is a problem. False only if
  // it could not run.
  bool RunAlone(uint32_t cn, LoggedOp op, const std::string& when, std::vector<LoggedOp>* log) {
    Context* reader = Reader(cn);
    if (reader == nullptr) return false;
    RangeIndex& index = *handles_[cn][op.key % handles_[cn].size()];
    if (op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate) {
      op.value = uint64_t{kContexts + 1} << 32 | ++alone_sequence_;
    }
    op.start = clock_++;
    const Status done = Execute(index, *reader, schedule_.keys, &op);
    op.end = clock_++;
    op.code = done.code();
    if (!Allowed(op, done, false))
      Unexpected(op, done, when + ", compute node " + std::to_string(cn));
    log->push_back(std::move(op));
    return true;
  }

  std::vector<LoggedOp>* alone_log() { return &logs_[kContexts]; }

  // Merges and failures: the preloaded keys, inserted before the run.
  bool Preload() {
    const size_t problems = problems_.size();
    for (uint64_t id = 0; id < schedule_.preload.size(); ++id) {
      if (!schedule_.preload[id]) continue;
      LoggedOp op;
      op.kind = OpKind::kInsert;
      op.key = id;
      if (!RunAlone(static_cast<uint32_t>(id % kComputeNodes), op, "before the run", alone_log())) {
        return false;
      }
    }
    return problems_.size() == problems;
  }

  bool FailuresOn() const { return schedule_.failures.probability > 0; }

  bool RunContexts() {
    if (FailuresOn()) {
      fabric::RandomBatchFailures failures = schedule_.failures;
      failures.compute_nodes = {runtime::ComputeNode::Of(*clients_[schedule_.failing_client]).id()};
      const Status status = faults_->FailBatchesAtRandom(failures);
      if (!status.ok()) return Fail("set-up", "failures: " + status.ToString());
    }
    const uint64_t keys = schedule_.keys.count();
    const Zipf zipf(keys, 0.99);
    RecentDeletes recent;
    const bool mixed_ops =
        schedule_.kind == Kind::kMixed || (Deaths() && !schedule_.merges_workload);
    uint64_t victim_started = 0;
    second_armed_ = true;
    const std::vector<Status> results = RunClients(raw_, [&](int cn, Context& ctx) -> Status {
      const int id = ContextIndex(cn, ctx, clients_[0]->options());
      std::vector<LoggedOp>& log = logs_[id];
      std::mt19937_64 ops_rng(schedule_.run_seed ^ (static_cast<uint64_t>(id) << 40));
      uint64_t sequence = 0;
      std::optional<uint64_t> follow;  // the key of an operation that failed
      int follow_left = 0;
      for (int i = 0; i < kOpsPerContext; ++i) {
        if (dead_[cn]) break;  // its process is gone
        LoggedOp op;
        if (mixed_ops) {
          PickMixed(schedule_, zipf, ops_rng, &op);
        } else {
          const bool following = follow_left > 0;
          if (following) --follow_left;
          PickShaped(schedule_, recent, following ? follow : std::nullopt, ops_rng, &op);
        }
        if (op.kind == OpKind::kInsert || op.kind == OpKind::kUpdate) {
          op.value = uint64_t(id + 1) << 32 | ++sequence;
        }
        const auto& handles = handles_[cn];
        // Handles in turn: a context's next operation goes through the
        // other one (the B+tree's: the other lock path).
        RangeIndex& index = *handles[static_cast<size_t>(i) % handles.size()];
        if (Deaths() && static_cast<uint32_t>(cn) == schedule_.victim &&
            ++victim_started == schedule_.kill_op) {
          ScheduleDeath(schedule_.victim, schedule_.kill_delay_ns);
        }
        in_flight_[id] = {true, static_cast<uint32_t>(cn), op.kind, op.key, World().cursor()};
        op.start = clock_++;
        const Status done = Execute(index, ctx, schedule_.keys, &op);
        op.end = clock_++;
        op.code = done.code();
        in_flight_[id].running = false;
        if (dead_[cn]) {
          // Its node died during it: no one saw its response.
          op.pending = true;
          ++pending_;
          log.push_back(std::move(op));
          break;
        }
        const bool injected = FailuresOn() &&
                              static_cast<uint32_t>(cn) == schedule_.failing_client &&
                              faults_->counters().random_failed_batches > 0;
        const bool allowed = Allowed(op, done, injected);
        if (!allowed) {
          Unexpected(op, done,
                     "compute node " + std::to_string(cn) + ", context " + std::to_string(id) +
                         ", op " + std::to_string(i));
        }
        if (done.IsUnavailable()) {
          NoteUnavailable(op);
          follow = op.key;
          follow_left = 3;
        }
        log.push_back(std::move(op));
        if (!allowed) break;  // this context stops
      }
      return Status::Ok();
    });
    if (FailuresOn()) faults_->StopRandomFailures();
    second_armed_ = false;
    if (Deaths()) {
      // A death still to come (its node ran out of operations first) comes
      // now, at rest; the runs after this one go on without it.
      for (const auto& [cn, event] : death_events_)
        World().Cancel(event);
      death_events_.clear();
      Die(schedule_.victim);
    }
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      if (!results[cn].ok()) {
        return Fail("set-up", "compute node " + std::to_string(cn) + ": " + results[cn].ToString());
      }
    }
    return true;
  }

  // Merges and failures: every key is updated once more and the whole
  // range is scanned, both ways, on a quiescent tree: a key left locked, or
  // a scan that cannot finish, fails here.
  bool AfterTheRun() {
    if (schedule_.kind == Kind::kMixed) return true;
    const uint64_t keys = schedule_.keys.count();
    if (Deaths()) {
      // The same on the survivors, each key's update on one of them in
      // turn, then a scan each way on each.
      const std::vector<uint32_t> survivors = Survivors();
      std::vector<LoggedOp> ops;
      std::vector<uint32_t> nodes;
      for (uint64_t id = 0; id < keys; ++id) {
        LoggedOp op;
        op.kind = OpKind::kUpdate;
        op.key = id;
        ops.push_back(op);
        nodes.push_back(survivors[(id + 1) % survivors.size()]);
      }
      for (uint32_t cn : survivors) {
        for (const OpKind kind : {OpKind::kScanRange, OpKind::kScanCount}) {
          LoggedOp op;
          op.kind = kind;
          op.key = 0;
          op.value = kind == OpKind::kScanRange ? keys - 1 : keys;
          ops.push_back(op);
          nodes.push_back(cn);
        }
      }
      return RunOnSurvivors(std::move(ops), nodes, "after the run", alone_log());
    }
    for (uint64_t id = 0; id < keys; ++id) {
      LoggedOp op;
      op.kind = OpKind::kUpdate;
      op.key = id;
      if (!RunAlone(static_cast<uint32_t>((id + 1) % kComputeNodes), op, "after the run",
                    alone_log())) {
        return false;
      }
    }
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      LoggedOp op;
      op.kind = cn % 2 == 0 ? OpKind::kScanRange : OpKind::kScanCount;
      op.key = 0;
      op.value = op.kind == OpKind::kScanRange ? keys - 1 : keys;
      if (!RunAlone(cn, op, "after the run", alone_log())) return false;
    }
    return true;
  }

  // The final contents, each key read by another compute node, after
  // everything else.
  bool ReadFinalContents() {
    if (Deaths()) {
      const std::vector<uint32_t> survivors = Survivors();
      std::vector<LoggedOp> ops;
      std::vector<uint32_t> nodes;
      for (uint64_t key = 0; key < schedule_.keys.count(); ++key) {
        LoggedOp op;
        op.kind = OpKind::kLookup;
        op.key = key;
        ops.push_back(op);
        nodes.push_back(survivors[key % survivors.size()]);
      }
      return RunOnSurvivors(std::move(ops), nodes, "at the end", &logs_.back());
    }
    for (uint64_t key = 0; key < schedule_.keys.count(); ++key) {
      LoggedOp op;
      op.kind = OpKind::kLookup;
      op.key = key;
      if (!RunAlone(static_cast<uint32_t>(key % kComputeNodes), op, "at the end", &logs_.back())) {
        return false;
      }
    }
    return true;
  }

  // An index at rest keeps what its structure walk checks
  // (IndexTestHooks::walk), and what its exploration hooks add for a
  // history without failures (ExploreHooks::settled). After injected
  // failures only where the index's walk holds then too
  // (ExploreHooks::walk_after_failures).
  void CheckIndexAtRest() {
    const ExploreHooks& explore = IndexExploreHooks().at(schedule_.index->name);
    const bool failures = schedule_.kind == Kind::kFailures || Deaths();
    // Deaths: the walk must hold whatever the index: what a dead node left
    // half-done was recovered, or is left as the walk allows.
    if (schedule_.kind == Kind::kFailures && !explore.walk_after_failures) return;
    const uint32_t cn = Deaths() ? Survivors().front() : 0;
    Context* reader = Reader(cn);
    if (reader == nullptr) return;
    RangeIndex& index = *handles_[cn][0];
    std::vector<uint32_t> dead;
    for (uint32_t node = 0; node < dead_.size(); ++node) {
      if (dead_[node]) dead.push_back(ids_[node]);
    }
    std::vector<std::string> errors =
        Deaths() && explore.walk_after_deaths
            ? explore.walk_after_deaths(index, *reader, dead)
            : IndexHooks().at(schedule_.index->name).walk(index, *reader);
    if (explore.settled && !failures) {
      for (std::string& line : explore.settled(index, *reader))
        errors.push_back(std::move(line));
    }
    std::string error;
    for (const std::string& line : errors)
      error += line + "\n";
    if (!error.empty()) Fail(kTreeAtRest, error);
  }

  // The per-key operations checked.
  size_t Check() {
    LinearizabilityOptions check;
    check.max_key = schedule_.keys.count() - 1;
    const LinearizabilityReport report = CheckLinearizable(logs_, check);
    if (!report.ok) {
      std::string error = report.ToString();
      for (const std::string& line : report.errors)
        error += "\n" + line;
      Fail(kNotLinearizable, error);
    }
    return report.ops;
  }

  const Schedule schedule_;
  std::vector<Problem> problems_;
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<Client*> raw_;
  std::vector<std::vector<std::unique_ptr<RangeIndex>>> handles_;  // by compute node
  std::vector<std::unique_ptr<Context>> readers_;                  // by compute node
  fabric::FaultInjector* faults_ = nullptr;
  // One log per context, then the operations run alone (preload, after the
  // run), then the final reads.
  std::vector<std::vector<LoggedOp>> logs_ = std::vector<std::vector<LoggedOp>>(kContexts + 2);
  uint64_t clock_ = 1;  // one thread runs every context: a plain counter
  uint64_t alone_sequence_ = 0;
  std::map<uint64_t, OpKind> unavailable_;  // key -> its latest operation that ended Unavailable
  // Deaths.
  std::vector<uint32_t> ids_;  // compute-node ids, by compute node
  std::vector<std::unique_ptr<runtime::Membership::StepHandle>> recovery_steps_;
  std::array<bool, kComputeNodes> dead_{};
  std::map<uint32_t, uint64_t> death_events_;  // compute node -> its death's event, not run yet
  bool second_armed_ = false, second_scheduled_ = false;
  uint32_t deaths_ = 0;
  uint64_t pending_ = 0;
  std::string died_;         // Outcome::died
  std::string first_doing_;  // the kinds of the victim's operations in flight when it died
  // Each context's operation in flight, for Outcome::died.
  struct InFlight {
    bool running = false;
    uint32_t cn = 0;
    OpKind kind = OpKind::kLookup;
    uint64_t key = 0;
    int64_t started_ns = 0;
  };
  std::array<InFlight, kContexts> in_flight_{};
};

}  // namespace

Outcome RunSchedule(Schedule schedule, uint64_t seed) {
  return ScheduleRun(std::move(schedule)).Run(seed);
}

}  // namespace dmidx::testing
