#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "lib/runtime/client.h"
#include "lib/runtime/compute_node.h"
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
    if (problems_.empty()) return outcome;
    outcome.error = schedule_.details;
    auto add_once = [](std::vector<std::string>& names, const std::string& name) {
      if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
      }
    };
    for (size_t i = 0; i < problems_.size(); ++i) {
      const Problem& problem = problems_[i];
      if (i < kProblemsListed) outcome.error += "\n" + problem.message;
      if (i == kProblemsListed) {
        outcome.error += "\n... and " + std::to_string(problems_.size() - i) + " more";
      }
      add_once(outcome.categories, problem.category);
      add_once(outcome.sequels, problem.sequel);
    }
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
    Status status = Cluster::Open(options, &cluster_);
    if (!status.ok()) return Fail("set-up", "cluster: " + status.ToString());
    for (uint32_t cn = 0; cn < kComputeNodes; ++cn) {
      clients_.push_back(NewClient(*cluster_, kThreads, kCoroutines));
      if (!clients_.back()) return Fail("set-up", "client " + std::to_string(cn));
      raw_.push_back(clients_.back().get());
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
    const std::vector<Status> results = RunClients(raw_, [&](int cn, Context& ctx) -> Status {
      const int id = ContextIndex(cn, ctx, clients_[0]->options());
      std::vector<LoggedOp>& log = logs_[id];
      std::mt19937_64 ops_rng(schedule_.run_seed ^ (static_cast<uint64_t>(id) << 40));
      uint64_t sequence = 0;
      std::optional<uint64_t> follow;  // the key of an operation that failed
      int follow_left = 0;
      for (int i = 0; i < kOpsPerContext; ++i) {
        LoggedOp op;
        if (schedule_.kind == Kind::kMixed) {
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
        op.start = clock_++;
        const Status done = Execute(index, ctx, schedule_.keys, &op);
        op.end = clock_++;
        op.code = done.code();
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
    const bool failures = schedule_.kind == Kind::kFailures;
    if (failures && !explore.walk_after_failures) return;
    Context* reader = Reader(0);
    if (reader == nullptr) return;
    RangeIndex& index = *handles_[0][0];
    std::vector<std::string> errors = IndexHooks().at(schedule_.index->name).walk(index, *reader);
    if (explore.settled && !failures) {
      for (std::string& line : explore.settled(index, *reader))
        errors.push_back(std::move(line));
    }
    std::string error;
    for (const std::string& line : errors)
      error += line + "\n";
    if (!error.empty()) Fail("tree at rest", error);
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
      Fail("not linearizable", error);
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
};

}  // namespace

Outcome RunSchedule(Schedule schedule, uint64_t seed) {
  return ScheduleRun(std::move(schedule)).Run(seed);
}

}  // namespace dmidx::testing
