#include "bench/runner.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "bench/ack_log.h"
#include "bench/generators.h"
#include "lib/common/counter_fields.h"

namespace dmidx::bench {

const char* LoadModeName(LoadMode mode) {
  switch (mode) {
    case LoadMode::kBulk:
      return "bulk";
    case LoadMode::kInsert:
      return "insert";
    case LoadMode::kNone:
      return "none";
  }
  return "?";
}

namespace {

using std::chrono::nanoseconds;

// Pairs a scan takes at a time while the end of a point counts the live
// keys (any size counts the same keys; this one keeps a scan's buffer
// small).
constexpr size_t kCountPage = 1024;

// The new keys one compute-node process inserts, numbered 0, 1, ... in the
// process (ordinals); key number = records + process + ordinal * processes
// (a local run is one process, whatever its compute nodes). Reads choose
// among the keys every ordinal below acknowledged() has inserted (YCSB's
// acknowledged counter): a window of done marks, advanced by whichever
// context finds the lowest pending ordinal done. An insert that stalls
// while kWindow later ones finish stops the advance (reads then see fewer
// new keys, never a key not inserted).
class InsertSequence {
 public:
  static constexpr uint64_t kWindow = uint64_t{1} << 16;  // > contexts in flight

  uint64_t Take() { return next_.fetch_add(1, std::memory_order_relaxed); }
  void Acknowledge(uint64_t ordinal) {
    // At least release: a context that sees the mark sees the insert done.
    // seq_cst, as the flag's exchange, its release and the advancer's last
    // look at the slot below (Dekker): one of the two sides always sees the
    // other.
    done_[ordinal % kWindow].store(ordinal + 1, std::memory_order_seq_cst);
    // A mark stored while another context advances may land after that
    // context looked at its slot: after releasing the flag, look again, so
    // that a finished insert is never left unacknowledged.
    for (;;) {
      if (advancing_.exchange(true, std::memory_order_seq_cst)) return;  // another advances
      uint64_t low = acknowledged_.load(std::memory_order_relaxed);
      while (done_[low % kWindow].load(std::memory_order_acquire) == low + 1)
        ++low;
      acknowledged_.store(low, std::memory_order_release);
      advancing_.store(false, std::memory_order_seq_cst);
      if (done_[low % kWindow].load(std::memory_order_seq_cst) != low + 1) return;
    }
  }
  uint64_t acknowledged() const { return acknowledged_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> acknowledged_{0};
  std::atomic<bool> advancing_{false};
  std::unique_ptr<std::atomic<uint64_t>[]> done_ { new std::atomic<uint64_t>[ kWindow ]() };
};

// How many deletes this process issued for each loaded record (saturating
// at 255), so that a NotFound on a loaded key counts as lost
// (OpResult::missing_loaded) only when no delete can explain it: a lookup's
// when none was ever issued, a delete's when it was the first and still
// the only one. A count is raised before its delete is posted, so a racing
// operation's NotFound always sees it.
class DeleteCounts {
 public:
  explicit DeleteCounts(uint64_t records) : counts_(records) {}
  // Counts a delete of record `index` about to be posted; the count before.
  uint8_t Add(uint64_t index) {
    if (index >= counts_.size()) return 0;
    std::atomic<uint8_t>& count = counts_[index];
    uint8_t seen = count.load(std::memory_order_seq_cst);
    while (seen < 255 && !count.compare_exchange_weak(seen, seen + 1, std::memory_order_seq_cst)) {
    }
    return seen;
  }
  uint8_t Count(uint64_t index) const {
    return index < counts_.size() ? counts_[index].load(std::memory_order_seq_cst) : 0;
  }

 private:
  std::vector<std::atomic<uint8_t>> counts_;
};

// What one context keeps over a phase. Written only by its context; the
// progress reporter reads `done`.
struct alignas(64) ContextState {
  std::atomic<uint64_t> done{0};  // operations that ended
  std::array<OpResult, kOpTypes> ops{};
  std::vector<std::pair<uint64_t, TraceOp>> trace;  // (issue ticket, op)
  TimelineRecorder timeline;
  FailedByCode failed{};  // with the failure experiment
  // The failure experiment's kill time until the context passed it, then
  // nanoseconds::max(); always that outside the experiment's run phase.
  nanoseconds kill_at = nanoseconds::max();

  void Reset() {
    done.store(0, std::memory_order_relaxed);
    ops = {};
    trace.clear();
    failed = {};
  }
};

// One generated (or replayed) operation.
struct NextOp {
  OpType type = OpType::kRead;
  uint64_t number = 0;  // key number; UINT64_MAX for a replayed key
  bool fresh = false;   // an insert of a new key (ordinal in `ordinal`)
  uint64_t ordinal = 0;
  uint32_t scan_length = 0;
};

// Prints progress of a phase until stopped.
class Progress {
 public:
  // `extra`, if given, says more at the end of each line.
  Progress(const Environment& env, std::string phase, uint64_t total,
           const std::vector<std::vector<std::unique_ptr<ContextState>>>& states,
           std::function<std::string()> extra = {})
      : out_(env.progress),
        terminal_(env.progress_is_terminal),
        phase_(std::move(phase)),
        total_(total),
        states_(states),
        extra_(std::move(extra)) {
    if (out_ != nullptr) thread_ = std::thread([this] { Loop(); });
  }
  ~Progress() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      stopped_ = true;
    }
    wake_.notify_all();
    thread_.join();
    if (terminal_) std::fprintf(out_, "\r%*s\r", 78, "");
  }

 private:
  uint64_t Done() const {
    uint64_t done = 0;
    for (const auto& client : states_)
      for (const auto& state : client)
        done += state->done.load(std::memory_order_relaxed);
    return done;
  }
  void Loop() {
    const auto start = std::chrono::steady_clock::now();
    const auto period = terminal_ ? std::chrono::milliseconds(200) : std::chrono::seconds(5);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, period, [this] { return stopped_; })) {
      const uint64_t done = Done();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double rate = seconds > 0 ? done / seconds / 1e6 : 0;
      if (terminal_ && total_ > 0) {
        const int width = 30;
        const int filled = static_cast<int>(std::min<uint64_t>(done, total_) * width / total_);
        std::fprintf(out_, "\r  %-6s [%.*s%*s] %3d%% %llu ops %.2f Mops/s", phase_.c_str(), filled,
                     "##############################", width - filled, "",
                     static_cast<int>(std::min<uint64_t>(done, total_) * 100 / total_),
                     static_cast<unsigned long long>(done), rate);
      } else {
        std::fprintf(out_, "%s  %s: %llu ops (%.2f Mops/s)%s", terminal_ ? "\r" : "",
                     phase_.c_str(), static_cast<unsigned long long>(done), rate,
                     extra_ ? extra_().c_str() : "");
        if (!terminal_) std::fputc('\n', out_);
      }
      std::fflush(out_);
    }
  }

  std::FILE* const out_;
  const bool terminal_;
  const std::string phase_;
  const uint64_t total_;
  const std::vector<std::vector<std::unique_ptr<ContextState>>>& states_;
  const std::function<std::string()> extra_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopped_ = false;  // guarded by mutex_
  std::thread thread_;
};

class PointRun {
 public:
  PointRun(const PointConfig& config, uint64_t point, Environment& env)
      : config_(config),
        env_(env),
        prefix_(env.run_tag + ".p" + std::to_string(point)),
        insert_streams_(env.cluster != nullptr ? config.compute_nodes : 1) {}

  ~PointRun() {
    for (auto& index : indexes_)
      if (index) index->Close();
  }

  Status Open();
  StatusOr<PointResult> Run();

 private:
  enum class PhaseKind { kLoad, kWarmup, kRun };
  struct Phase {
    PhaseKind kind;
    std::string name;
    uint64_t operations;  // over all contexts of the cluster (0: by duration)
    nanoseconds duration{0};
  };

  uint32_t contexts_per_node() const { return config_.threads * config_.coroutines; }
  // Insert sequences of the run: one per compute-node process (the
  // in-process compute nodes of a local run share this process's).
  uint64_t insert_streams() const { return insert_streams_; }
  uint64_t total_contexts() const { return uint64_t{contexts_per_node()} * config_.compute_nodes; }
  // Waits for every compute node at `name`, up to the timeout plus
  // `slack` (the longer a phase may take on one node than on another).
  Status Barrier(const std::string& name,
                 std::chrono::milliseconds slack = std::chrono::milliseconds(0)) {
    return cluster_->Barrier(prefix_ + "." + name, config_.compute_nodes, env_.timeout + slack);
  }

  Status BulkLoad(PhaseResult* result);
  Status RunPhase(const Phase& phase, PhaseResult* result);
  Status RunContext(const Phase& phase, size_t client, Context& ctx);
  NextOp Generate(const Phase& phase, uint64_t global, uint64_t i, Rng& rng, KeyChooser& keys,
                  const ScanLengthChooser& lengths, InsertSequence& inserts);
  Status Execute(Context& ctx, RangeIndex& index, const NextOp& op, std::string_view key,
                 std::vector<KeyValue>* scan, OpResult* result, uint64_t value);
  // Node 0 merges every node's results of `phase` into it. With
  // `judge_late` (the run phase), every node publishes its results and
  // waits for every other node's, judging a late one through its lease
  // (AwaitPeer); otherwise the other nodes send theirs to node 0.
  Status Gather(PhaseResult* phase, bool judge_late, std::chrono::milliseconds slack);
  // Compute node `node`'s record `name`, waited for up to the timeout plus
  // `slack`, the node judged through its lease while it is late: none
  // when it died (PointConfig::expect_deaths; without it, an error naming
  // it).
  StatusOr<std::optional<std::string>> AwaitPeer(const std::string& name, uint32_t node,
                                                 std::chrono::milliseconds slack);
  // A file of this process's, FILE.<node> in a run of several processes.
  std::string NodePath(const std::string& base, uint32_t node) const {
    return env_.cluster != nullptr && config_.compute_nodes > 1 ? base + "." + std::to_string(node)
                                                                : base;
  }
  // Logs a write `op` of `value` that took [start_ns, now] and ended in
  // `status`; `missed`: it found no key (an update changed nothing).
  void LogWrite(const NextOp& op, std::string_view key, uint64_t value, const Status& status,
                bool missed, int64_t start_ns);
  // The final check of PointConfig::ack_log.
  Status CheckAcknowledged(PointResult* out);
  // The failure experiment: the first context to get here kills the node.
  void KillOnce(Context& ctx);
  // Operation `i` of a context of `client` ended at `end`, at or past the
  // context's next look: advances its timeline and, at or past the kill's
  // time, kills the node (KillOnce). False when the context's compute node
  // is the one killed: it stops.
  bool LookedAt(nanoseconds end, uint64_t i, size_t client, Context& ctx, ContextState& state);
  // Counts the context's failed operation when the phase goes on after
  // one (the failure experiment's run phase); otherwise fails the run.
  bool GoesOnAfter(const Status& status, const Phase& phase, OpType op, size_t client,
                   nanoseconds end, uint64_t i, ContextState& state);
  void MergeContexts(size_t client, PhaseResult* result);
  Status WriteTrace();
  // Bytes this process's clients have written so far (Stats::bytes_written).
  uint64_t BytesWritten() const;
  // Every client's reclamation counters, in client order.
  std::vector<ReclamationStats> ReclamationNow() const;
  // Runs `work` on the first context of every client that did not die
  // (the other contexts return at once): under any backend, with every
  // live client's lease kept.
  Status RunFirstContexts(const std::function<Status(size_t client, Context& ctx)>& work);
  // The churn's end: every retired object handed to the lease keepers,
  // then waits until each was reclaimed or the timeout passed. Whether
  // everything was.
  StatusOr<bool> Quiesce();
  // Compute node 0's MemoryReport, once every node finished the run.
  StatusOr<MemoryReport> ReportMemory(bool quiesced);
  void Fail(const Status& status) {
    std::lock_guard<std::mutex> guard(error_mutex_);
    if (first_error_.ok()) first_error_ = status;
    stop_.store(true, std::memory_order_relaxed);
  }

  const PointConfig& config_;
  Environment& env_;
  const std::string prefix_;
  const uint64_t insert_streams_;         // see insert_streams()
  std::unique_ptr<Cluster> own_cluster_;  // local
  Cluster* cluster_ = nullptr;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<RangeIndex>> indexes_;      // one handle per client
  uint32_t node_base_ = 0;                                // compute-node number of clients_[0]
  std::vector<std::shared_ptr<InsertSequence>> inserts_;  // per client
  // Deletes this process issued per loaded record (null: the mix has none).
  std::unique_ptr<DeleteCounts> deleted_;
  // Whether a NotFound on a loaded key is a lost key: not when another
  // process of the run may have deleted it.
  bool count_missing_ = true;
  std::vector<std::vector<std::unique_ptr<ContextState>>> states_;  // [client][context]
  std::unique_ptr<KeyChooser> key_prototype_;
  std::unique_ptr<ScanLengthChooser> scan_lengths_;
  std::unique_ptr<OperationChooser> operations_;
  // Records the load phase put in: key numbers insert_start ..
  // insert_start + records_loaded_ - 1 (none with --load none).
  uint64_t records_loaded_ = 0;
  // Per client: how many trace lines its contexts took.
  std::unique_ptr<std::atomic<uint64_t>[]> trace_cursors_;
  std::atomic<uint64_t> trace_ticket_{0};
  // The clock when this process started the phase: every context's deadline
  // and open-loop schedule count from it (a context that is first scheduled
  // late, behind coroutines that do not yield, must not get a later one).
  nanoseconds phase_start_{0};
  // The clock when the phase ended (FinishTiming): its timeline's end.
  nanoseconds phase_end_{0};
  double cpu_start_ = 0;
  // The failure experiment: whether a context killed the node (and when,
  // from the phase's start; written by that context, read once the phase's
  // contexts have returned).
  std::atomic<bool> kill_done_{false};
  nanoseconds killed_at_{-1};
  void FinishTiming(std::chrono::steady_clock::time_point wall_start, nanoseconds clock_start,
                    const std::vector<NicUsage>& before, PhaseResult* result);
  std::vector<std::pair<uint64_t, TraceOp>> trace_out_;
  std::unique_ptr<AckLogWriter> ack_log_;  // PointConfig::ack_log
  std::set<uint32_t> dead_;                // PointResult::dead
  // The churn's run phase: the bytes this process is to write (0: not a
  // churn phase) and BytesWritten() when it began.
  uint64_t churn_target_ = 0;
  uint64_t churn_start_ = 0;
  bool quiesced_ = false;  // MemoryReport::quiesced
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  Status first_error_;  // guarded by error_mutex_
};

Status PointRun::Open() {
  if (env_.cluster != nullptr) {
    cluster_ = env_.cluster;
  } else {
    DMIDX_RETURN_IF_ERROR(Cluster::Open(env_.cluster_options, &own_cluster_));
    cluster_ = own_cluster_.get();
  }
  const uint32_t clients = env_.cluster != nullptr ? 1 : config_.compute_nodes;
  ClientOptions options;
  options.threads = config_.threads;
  options.coroutines_per_thread = config_.coroutines;
  options.retry_backoff_min = config_.retry_backoff_min;
  options.retry_backoff_max = config_.retry_backoff_max;
  for (uint32_t i = 0; i < clients; ++i) {
    std::unique_ptr<Client> client;
    DMIDX_RETURN_IF_ERROR(cluster_->NewClient(options, &client));
    if (i == 0) node_base_ = client->compute_node_id();
    std::unique_ptr<RangeIndex> index;
    DMIDX_RETURN_IF_ERROR(config_.index->open(client.get(), prefix_ + "." + config_.index->name,
                                              config_.keys.bytes, config_.settings, &index));
    clients_.push_back(std::move(client));
    indexes_.push_back(std::move(index));
    // The in-process compute nodes share one sequence: reads on any of
    // them see every finished insert.
    inserts_.push_back(i == 0 ? std::make_shared<InsertSequence>() : inserts_.front());
    states_.emplace_back();
    for (uint32_t c = 0; c < contexts_per_node(); ++c)
      states_.back().push_back(std::make_unique<ContextState>());
  }
  if (env_.cluster != nullptr && node_base_ >= config_.compute_nodes) {
    return Status::InvalidArgument(
        "this process is compute node " + std::to_string(node_base_) + " but --compute-nodes is " +
        std::to_string(config_.compute_nodes) + ": every node must be given the same count");
  }
  trace_cursors_.reset(new std::atomic<uint64_t>[clients]());
  key_prototype_ = std::make_unique<KeyChooser>(config_.workload);
  scan_lengths_ = std::make_unique<ScanLengthChooser>(config_.workload);
  operations_ = std::make_unique<OperationChooser>(config_.workload);
  if (!config_.ack_log.empty()) {
    DMIDX_ASSIGN_OR_RETURN(ack_log_, AckLogWriter::Open(NodePath(config_.ack_log, node_base_)));
  }
  if (config_.workload.delete_proportion > 0) {
    deleted_ = std::make_unique<DeleteCounts>(config_.workload.record_count);
    count_missing_ = env_.cluster == nullptr || config_.compute_nodes == 1;
  }
  return Barrier("open");
}

// CPU time this process has used, in seconds.
double ProcessCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// The phase's time on the cluster's clock (virtual under sim), its wall
// time, and what each modelled NIC did over it.
void PointRun::FinishTiming(std::chrono::steady_clock::time_point wall_start,
                            nanoseconds clock_start, const std::vector<NicUsage>& before,
                            PhaseResult* result) {
  result->wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result->cpu_seconds = ProcessCpuSeconds() - cpu_start_;
  phase_end_ = cluster_->Now();
  result->seconds = std::chrono::duration<double>(phase_end_ - clock_start).count();
  const std::vector<NicUsage> after = cluster_->nic_usage();
  const double span_ns = result->seconds * 1e9;
  result->nics.clear();
  for (size_t i = 0; i < after.size() && span_ns > 0; ++i) {
    const NicUsage* old = nullptr;
    for (const NicUsage& earlier : before)
      if (earlier.name == after[i].name) old = &earlier;
    NicLoad load;
    load.name = after[i].name;
    load.engine = (after[i].engine_busy_ns - (old ? old->engine_busy_ns : 0)) / span_ns;
    load.link_in = (after[i].link_in_busy_ns - (old ? old->link_in_busy_ns : 0)) / span_ns;
    load.link_out = (after[i].link_out_busy_ns - (old ? old->link_out_busy_ns : 0)) / span_ns;
    result->nics.push_back(load);
  }
}

Status PointRun::BulkLoad(PhaseResult* result) {
  const auto start = std::chrono::steady_clock::now();
  cpu_start_ = ProcessCpuSeconds();
  const nanoseconds fabric_clock_start = cluster_->Now();
  const std::vector<NicUsage> nics_before = cluster_->nic_usage();
  if (node_base_ == 0) {
    const uint64_t records = config_.workload.LoadedRecords();
    const uint64_t first = config_.workload.insert_start;
    if (env_.progress != nullptr) {
      std::fprintf(env_.progress, "  load   generating and sorting %llu keys...%s",
                   static_cast<unsigned long long>(records),
                   env_.progress_is_terminal ? "\r" : "\n");
      std::fflush(env_.progress);
    }
    std::vector<KeyValue> rows(records);
    for (uint64_t n = 0; n < records; ++n) {
      config_.keys.Format(first + n, &rows[n].key);
      rows[n].value = first + n;
    }
    std::sort(rows.begin(), rows.end(),
              [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
    std::unique_ptr<Context> context;
    DMIDX_RETURN_IF_ERROR(clients_[0]->NewBlockingContext(&context));
    const IndexStats before = indexes_[0]->stats();
    const Stats fabric_before = clients_[0]->stats();
    const Status loaded = indexes_[0]->BulkLoad(*context, rows, config_.fill_factor);
    if (!loaded.ok()) {
      return Status(loaded.code(), "bulk load of " + std::to_string(records) +
                                       " records: " + std::string(loaded.message()));
    }
    result->operations = records;
    result->index = indexes_[0]->stats() - before;
    result->fabric = clients_[0]->stats() - fabric_before;
  }
  FinishTiming(start, fabric_clock_start, nics_before, result);
  return Status::Ok();
}

NextOp PointRun::Generate(const Phase& phase, uint64_t global, uint64_t i, Rng& rng,
                          KeyChooser& keys, const ScanLengthChooser& lengths,
                          InsertSequence& inserts) {
  NextOp op;
  const WorkloadSpec& spec = config_.workload;
  if (phase.kind == PhaseKind::kLoad) {
    op.type = OpType::kInsert;
    op.number = spec.insert_start + global + i * total_contexts();
    return op;
  }
  const uint64_t nodes = insert_streams();
  const uint64_t visible = records_loaded_ + inserts.acknowledged() * nodes;
  op.type = operations_->Next(rng);
  if (op.type == OpType::kInsert && rng.NextDouble() >= spec.insert_existing_proportion) {
    op.fresh = true;
    op.ordinal = inserts.Take();
    op.number = spec.record_count + (env_.cluster != nullptr ? node_base_ : 0) + op.ordinal * nodes;
    return op;
  }
  op.number = visible == 0 ? 0 : keys.Next(rng, visible);
  // The chooser's numbers are positions among the keys present: the
  // records from insert_start on, then other inserts' keys, spread over
  // the nodes. Map a position back to its key number.
  op.number = op.number < records_loaded_ ? spec.insert_start + op.number
                                          : spec.record_count + (op.number - records_loaded_);
  if (op.type == OpType::kScan) op.scan_length = lengths.Next(rng);
  return op;
}

Status PointRun::Execute(Context& ctx, RangeIndex& index, const NextOp& op, std::string_view key,
                         std::vector<KeyValue>* scan, OpResult* result, uint64_t value) {
  Status status;
  bool first_delete = false;  // a delete that was its key's first (DeleteCounts)
  switch (op.type) {
    case OpType::kRead: {
      uint64_t found = 0;
      status = index.Lookup(ctx, key, &found);
      break;
    }
    case OpType::kUpdate:
      status = index.Update(ctx, key, value);
      break;
    case OpType::kInsert:
      status = index.Insert(ctx, key, value);
      break;
    case OpType::kScan:
      status = index.Scan(ctx, key, op.scan_length, scan);
      result->scan_items += scan->size();
      break;
    case OpType::kReadModifyWrite: {
      uint64_t found = 0;
      status = index.Lookup(ctx, key, &found);
      // With an ack log every write's value is unique (bench/ack_log.h).
      if (status.ok()) status = index.Update(ctx, key, ack_log_ ? value : found + 1);
      break;
    }
    case OpType::kDelete:
      // Indexed from insert_start; a replayed key (UINT64_MAX) counts nothing.
      if (deleted_ != nullptr && op.number >= config_.workload.insert_start) {
        first_delete = deleted_->Add(op.number - config_.workload.insert_start) == 0;
      }
      status = index.Delete(ctx, key);
      break;
  }
  if (status.code() == StatusCode::kNotFound) {
    ++result->not_found;
    const uint64_t first = config_.workload.insert_start;
    const bool loaded = op.number >= first && op.number - first < records_loaded_;
    if (loaded && count_missing_) {
      // Lost unless a delete explains it: for a delete, one before it (or
      // racing it); for any other operation, any delete at all.
      const uint8_t deletes = deleted_ == nullptr ? 0 : deleted_->Count(op.number - first);
      if (op.type == OpType::kDelete ? first_delete && deletes == 1 : deletes == 0) {
        ++result->missing_loaded;
      }
    }
    return Status::Ok();
  }
  return status;
}

Status PointRun::RunContext(const Phase& phase, size_t client, Context& ctx) {
  const uint64_t local =
      static_cast<uint64_t>(ctx.thread_index()) * config_.coroutines + ctx.coroutine_index();
  const uint64_t global = (node_base_ + client) * uint64_t{contexts_per_node()} + local;
  if (config_.pin_threads && ctx.coroutine_index() == 0) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    CPU_SET((client * config_.threads + ctx.thread_index()) % cores, &cpus);
    (void)pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
  }
  ContextState& state = *states_[client][local];
  // Each context's share of the phase's operations: the first `extra`
  // contexts take one more.
  const uint64_t contexts = total_contexts();
  uint64_t quota = UINT64_MAX;
  if (phase.operations > 0) {
    quota = phase.operations / contexts + (global < phase.operations % contexts ? 1 : 0);
  }
  Rng rng(config_.seed * 0x9e3779b97f4a7c15ull + global * 1000003 +
          static_cast<uint64_t>(phase.kind));
  KeyChooser keys = *key_prototype_;
  const bool replay = config_.trace_in != nullptr && phase.kind == PhaseKind::kRun;
  const bool tracing = !config_.trace_out.empty() && phase.kind == PhaseKind::kRun;
  const std::vector<TraceOp>* trace = config_.trace_in;
  const uint64_t nodes = config_.compute_nodes;
  const double interval_ns = config_.target_rate > 0 && phase.kind != PhaseKind::kLoad
                                 ? static_cast<double>(contexts) / config_.target_rate * 1e9
                                 : 0;
  std::string key;
  std::vector<KeyValue> scan;
  // This client's index and insert sequence, looked up once.
  RangeIndex& index = *indexes_[client];
  InsertSequence& inserts = *inserts_[client];
  const nanoseconds start = phase_start_;
  const nanoseconds deadline = start + phase.duration;
  const bool timed = phase.duration.count() > 0;
  const bool load = phase.kind == PhaseKind::kLoad;
  const uint64_t record_count = config_.workload.record_count;
  // The failure experiment: the kill's time, until this context passed it.
  state.kill_at = config_.kill.has_value() && phase.kind == PhaseKind::kRun
                      ? start + config_.kill->at
                      : nanoseconds::max();
  // The one compare per operation beyond counting it: the end of the
  // timeline's window or the kill's time, whichever comes first.
  nanoseconds next_look = std::min(state.timeline.window_end(), state.kill_at);
  nanoseconds last_end = ctx.Now();
  for (uint64_t i = 0; i < quota && !stop_.load(std::memory_order_relaxed); ++i) {
    NextOp op;
    if (replay) {
      const uint64_t line = (node_base_ + client) + trace_cursors_[client].fetch_add(1) * nodes;
      if (line >= trace->size()) break;
      const TraceOp& traced = (*trace)[line];
      op.type = traced.op;
      op.number = UINT64_MAX;
      op.scan_length = traced.scan_length;
      key = traced.key;
    } else {
      op = Generate(phase, global, i, rng, keys, *scan_lengths_, inserts);
      if (load && op.number >= record_count) break;
      config_.keys.Format(op.number, &key);
    }
    // One clock read per operation (a read costs as much as the rest of
    // the bench's work per op): in a closed loop an operation starts when
    // the one before it ended, so its latency also holds the few tens of
    // ns of generating it.
    nanoseconds begin = last_end;
    if (interval_ns > 0) {
      // Contexts are staggered over one interval, so that requests do not
      // arrive in bursts of every context at once.
      const double offset = static_cast<double>(global) / static_cast<double>(contexts);
      const nanoseconds intended =
          start +
          nanoseconds(static_cast<int64_t>((static_cast<double>(i) + offset) * interval_ns));
      if (last_end < intended) ctx.SleepUntil(intended);
      begin = intended;
    }
    if (timed && begin >= deadline) break;
    if (tracing) {
      state.trace.emplace_back(trace_ticket_.fetch_add(1, std::memory_order_relaxed),
                               TraceOp{op.type, key, op.scan_length});
    }
    OpResult& result = state.ops[static_cast<size_t>(op.type)];
    uint64_t value = rng.Next();  // drawn with or without a log: the same ops follow
    int64_t start_ns = 0;
    const uint64_t not_found = result.not_found;
    if (ack_log_) {
      value = UniqueWriteValue(static_cast<uint32_t>(phase.kind), global, i);
      start_ns = RealtimeNanoseconds();
    }
    const Status status = Execute(ctx, index, op, key, &scan, &result, value);
    if (ack_log_) LogWrite(op, key, value, status, result.not_found != not_found, start_ns);
    const nanoseconds end = ctx.Now();
    last_end = end;
    ++result.operations;
    result.latency.Record(static_cast<uint64_t>((end - begin).count()));
    if (!status.ok()) [[unlikely]] {
      if (!GoesOnAfter(status, phase, op.type, client, end, i, state)) return Status::Ok();
    } else if (op.fresh) {
      // A failed insert is never acknowledged: reads then see fewer new
      // keys (InsertSequence), never one that may be missing.
      inserts.Acknowledge(op.ordinal);
    }
    state.done.store(i + 1, std::memory_order_relaxed);
    if (end >= next_look) [[unlikely]] {
      if (!LookedAt(end, i, client, ctx, state)) break;  // a dead node issues nothing more
      next_look = std::min(state.timeline.window_end(), state.kill_at);
      // The churn ends once this process wrote its share.
      if (churn_target_ != 0 && BytesWritten() - churn_start_ >= churn_target_) break;
    }
  }
  return Status::Ok();
}

void PointRun::LogWrite(const NextOp& op, std::string_view key, uint64_t value,
                        const Status& status, bool missed, int64_t start_ns) {
  if (op.type == OpType::kRead || op.type == OpType::kScan) return;
  const bool deleted = op.type == OpType::kDelete;
  // An update or read-modify-write that found no key wrote nothing.
  if (missed && !deleted) return;
  const char kind = !status.ok() ? 'F' : deleted ? 'D' : 'W';
  const Status logged = ack_log_->Append(
      {kind, std::string(key), deleted ? 0 : value, start_ns, RealtimeNanoseconds()});
  if (!logged.ok()) Fail(logged);
}

bool PointRun::GoesOnAfter(const Status& status, const Phase& phase, OpType op, size_t client,
                           nanoseconds end, uint64_t i, ContextState& state) {
  const bool counted = config_.kill.has_value() || config_.expect_deaths;
  if (!counted || phase.kind != PhaseKind::kRun) {
    Fail(Status(status.code(), std::string(phase.name) + " phase, " + OpTypeName(op) +
                                   " on compute node " + std::to_string(node_base_ + client) +
                                   ": " + std::string(status.message())));
    return false;
  }
  ++state.failed[static_cast<size_t>(status.code())];
  state.timeline.Ended(end, i);
  state.timeline.Failed(status.code());
  return true;
}

bool PointRun::LookedAt(nanoseconds end, uint64_t i, size_t client, Context& ctx,
                        ContextState& state) {
  state.timeline.Ended(end, i);
  if (end < state.kill_at) return true;
  state.kill_at = nanoseconds::max();
  KillOnce(ctx);
  return node_base_ + client != config_.kill->compute_node;
}

void PointRun::KillOnce(Context& ctx) {
  // One exchange per context over the phase, not per operation.
  if (kill_done_.exchange(true, std::memory_order_acq_rel)) return;
  const nanoseconds now = ctx.Now();
  const Status killed = env_.kill_compute_node(
      *cluster_, clients_[config_.kill->compute_node - node_base_]->compute_node_id());
  if (!killed.ok()) {
    Fail(killed.WithContext("killing compute node " + std::to_string(config_.kill->compute_node)));
    return;
  }
  killed_at_ = now - phase_start_;
}

Status PointRun::RunPhase(const Phase& phase, PhaseResult* result) {
  for (auto& client : states_)
    for (auto& state : client)
      state->Reset();
  std::vector<IndexStats> index_before;
  std::vector<Stats> fabric_before;
  std::vector<std::vector<uint64_t>> nodes_before;
  for (size_t i = 0; i < clients_.size(); ++i) {
    index_before.push_back(indexes_[i]->stats());
    fabric_before.push_back(clients_[i]->stats());
    nodes_before.push_back(clients_[i]->OpsPerMemoryNode());
  }
  const std::vector<ReclamationStats> reclamation_before = ReclamationNow();
  const bool churn = config_.write_bytes_multiple > 0 && phase.kind == PhaseKind::kRun;
  churn_target_ = 0;
  if (churn) {
    DMIDX_ASSIGN_OR_RETURN(const std::vector<PoolUsage> pools, cluster_->MemoryUsage());
    uint64_t pool_bytes = 0;
    for (const PoolUsage& pool : pools)
      pool_bytes += pool.pool_bytes;
    const double share = env_.cluster != nullptr ? config_.compute_nodes : 1;
    churn_target_ =
        std::max<uint64_t>(1, static_cast<uint64_t>(config_.write_bytes_multiple *
                                                    static_cast<double>(pool_bytes) / share));
    churn_start_ = BytesWritten();
  }
  DMIDX_RETURN_IF_ERROR(Barrier(phase.name));
  const auto start = std::chrono::steady_clock::now();
  cpu_start_ = ProcessCpuSeconds();
  phase_start_ = cluster_->Now();
  kill_done_.store(false, std::memory_order_relaxed);
  killed_at_ = nanoseconds(-1);
  const nanoseconds interval = config_.timeline_interval;
  const size_t expected_windows = interval.count() > 0 && phase.duration.count() > 0
                                      ? static_cast<size_t>(phase.duration / interval) + 2
                                      : 256;
  for (auto& client : states_)
    for (auto& state : client)
      state->timeline.Start(phase_start_, interval, expected_windows);
  const std::vector<NicUsage> nics_before = cluster_->nic_usage();
  {
    // This process's share of the phase.
    const uint64_t share =
        env_.cluster != nullptr ? phase.operations / config_.compute_nodes : phase.operations;
    std::function<std::string()> written;
    if (churn) {
      written = [this] {
        const uint64_t bytes = BytesWritten() - churn_start_;
        char text[96];
        std::snprintf(text, sizeof(text), ", wrote %.1f of %.1f MiB (%.0f%%)",
                      static_cast<double>(bytes) / (1 << 20),
                      static_cast<double>(churn_target_) / (1 << 20),
                      100.0 * static_cast<double>(bytes) / static_cast<double>(churn_target_));
        return std::string(text);
      };
    }
    Progress progress(env_, phase.name, phase.operations > 0 ? share : 0, states_,
                      std::move(written));
    std::vector<Client*> clients;
    std::vector<Client::Work> works;
    for (size_t i = 0; i < clients_.size(); ++i) {
      clients.push_back(clients_[i].get());
      works.push_back([this, &phase, i](Context& ctx) { return RunContext(phase, i, ctx); });
    }
    DMIDX_RETURN_IF_ERROR(RunClients(clients, works));
  }
  FinishTiming(start, phase_start_, nics_before, result);
  {
    std::lock_guard<std::mutex> guard(error_mutex_);
    if (!first_error_.ok()) return first_error_;
  }
  if (churn) {
    DMIDX_ASSIGN_OR_RETURN(quiesced_, Quiesce());
  }
  const std::vector<ReclamationStats> reclamation_after = ReclamationNow();
  for (size_t i = 0; i < clients_.size(); ++i) {
    ReclamationStats delta = reclamation_after[i];
    counters::Subtract(delta, reclamation_before[i], counters::kReclamationFields);
    result->reclamation += delta;
  }
  if (config_.kill.has_value() && phase.kind == PhaseKind::kRun) {
    KillResult& kill = result->kill.emplace();
    kill.compute_node = config_.kill->compute_node;
    kill.at = config_.kill->at;
    kill.killed_at = killed_at_;
    kill.recovery_fraction = config_.kill->recovery_fraction;
    kill.recovery_span = config_.kill->recovery_span;
  }
  for (size_t i = 0; i < clients_.size(); ++i) {
    result->index = Sum(result->index, indexes_[i]->stats() - index_before[i]);
    result->fabric += clients_[i]->stats() - fabric_before[i];
    const std::vector<uint64_t> nodes = clients_[i]->OpsPerMemoryNode();
    result->memory_node_ops.resize(nodes.size());
    for (size_t node = 0; node < nodes.size(); ++node) {
      result->memory_node_ops[node] +=
          nodes[node] - (node < nodes_before[i].size() ? nodes_before[i][node] : 0);
    }
    MergeContexts(i, result);
  }
  return Status::Ok();
}

void PointRun::MergeContexts(size_t client, PhaseResult* result) {
  const bool victim = result->kill.has_value() && node_base_ + client == result->kill->compute_node;
  for (auto& state : states_[client]) {
    uint64_t operations = 0;
    for (size_t t = 0; t < kOpTypes; ++t) {
      operations += state->ops[t].operations;
      result->ops[t].Merge(state->ops[t]);
    }
    result->operations += operations;
    Add(&result->failed, state->failed);
    const Timeline timeline = state->timeline.Finish(operations, phase_end_);
    result->timeline.Merge(timeline);
    if (victim) {
      result->kill->operations += operations;
      Add(&result->kill->failed, state->failed);
      result->kill->timeline.Merge(timeline);
    }
    if (!state->trace.empty()) {
      trace_out_.insert(trace_out_.end(), std::make_move_iterator(state->trace.begin()),
                        std::make_move_iterator(state->trace.end()));
    }
  }
}

Status PointRun::Gather(PhaseResult* phase, bool judge_late, std::chrono::milliseconds slack) {
  // In-process compute nodes merged already; processes of a run send theirs
  // to node 0. A node that died never publishes: the wait's timeout names
  // it, or, judging late nodes, its lease does.
  if (env_.cluster == nullptr || config_.compute_nodes == 1) return Status::Ok();
  const std::string record = prefix_ + "." + phase->name + ".";
  if (node_base_ != 0 || judge_late) {
    DMIDX_RETURN_IF_ERROR(
        cluster_->PutRecord(record + std::to_string(node_base_), ToJson(*phase).dump()));
    if (!judge_late) return Status::Ok();
  }
  for (uint32_t node = 0; node < config_.compute_nodes; ++node) {
    if (node == node_base_) continue;
    std::optional<std::string> bytes;
    if (judge_late) {
      DMIDX_ASSIGN_OR_RETURN(bytes, AwaitPeer(record + std::to_string(node), node, slack));
      if (!bytes) {
        dead_.insert(node);
        continue;
      }
    } else {
      StatusOr<std::string> got =
          cluster_->GetRecord(record + std::to_string(node), env_.timeout + slack);
      if (!got.ok()) {
        return Status(got.status().code(), "results of compute node " + std::to_string(node) +
                                               " (" + phase->name +
                                               " phase): " + std::string(got.status().message()));
      }
      bytes = std::move(*got);
    }
    if (node_base_ != 0) continue;  // only node 0 merges
    nlohmann::json json = nlohmann::json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
    DMIDX_ASSIGN_OR_RETURN(PhaseResult other, PhaseFromJson(json));
    phase->Merge(other);
  }
  return Status::Ok();
}

StatusOr<std::optional<std::string>> PointRun::AwaitPeer(const std::string& name, uint32_t node,
                                                         std::chrono::milliseconds slack) {
  const LeaseOptions& lease = cluster_->options().lease;
  const nanoseconds deadline = cluster_->Now() + env_.timeout + slack;
  // Each look for the record waits about a lease period; between two, the
  // node's lease is judged (a period or two when it lives).
  const auto poll = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(lease.period),
                               std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  std::unique_ptr<Context> ctx;
  DMIDX_RETURN_IF_ERROR(clients_[0]->NewBlockingContext(&ctx));
  const std::string whose = "results of compute node " + std::to_string(node) + " (run phase)";
  for (;;) {
    StatusOr<std::string> bytes = cluster_->GetRecord(name, poll);
    if (bytes.ok()) return std::optional<std::string>(std::move(*bytes));
    if (bytes.status().code() != StatusCode::kDeadlineExceeded) {
      return bytes.status().WithContext(whose);
    }
    StatusOr<bool> gone = clients_[0]->JudgeComputeNode(*ctx, node, deadline);
    if (!gone.ok()) return gone.status().WithContext(whose);
    if (!*gone) continue;
    // A node that published and then ended stops renewing too: its
    // record says it finished.
    bytes = cluster_->GetRecord(name, std::chrono::milliseconds(0));
    if (bytes.ok()) return std::optional<std::string>(std::move(*bytes));
    const std::string died =
        "compute node " + std::to_string(node) +
        " died during the run phase: its lease stood still for the lease timeout, and it was "
        "fenced and recovered";
    if (!config_.expect_deaths) {
      return Status::Unavailable(died + " (give --expect-deaths to finish the point without it)");
    }
    if (env_.progress != nullptr) std::fprintf(env_.progress, "  %s\n", died.c_str());
    return std::optional<std::string>();
  }
}

Status PointRun::CheckAcknowledged(PointResult* out) {
  AckCheck check(contexts_per_node());
  // A local run's compute nodes share this process's one log.
  const uint32_t logs = env_.cluster != nullptr ? config_.compute_nodes : 1;
  for (uint32_t node = 0; node < logs; ++node) {
    DMIDX_ASSIGN_OR_RETURN(const std::vector<AckRecord> records,
                           ReadAckLog(NodePath(config_.ack_log, node)));
    for (const AckRecord& record : records)
      check.Add(record);
  }
  std::unique_ptr<Context> ctx;
  DMIDX_RETURN_IF_ERROR(clients_[0]->NewBlockingContext(&ctx));
  const std::vector<std::string> keys = check.Keys();
  std::vector<std::string> problems;
  for (const std::string& key : keys) {
    uint64_t value = 0;
    const Status looked = indexes_[0]->Lookup(*ctx, key, &value);
    if (!looked.ok() && looked.code() != StatusCode::kNotFound) {
      return looked.WithContext("--ack-log check, looking a key up");
    }
    std::string problem =
        check.Verify(key, looked.ok() ? std::optional<uint64_t>(value) : std::nullopt, dead_);
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
  out->ack_checked_keys = keys.size();
  if (problems.empty()) return Status::Ok();
  std::string message = "--ack-log check: " + std::to_string(problems.size()) + " of " +
                        std::to_string(keys.size()) +
                        " keys lost an acknowledged write (the first: " + problems.front() + ")";
  return Status::DataLoss(message);
}

Status PointRun::WriteTrace() {
  std::sort(trace_out_.begin(), trace_out_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Each process of a cluster writes its own operations, to FILE.<node>.
  const std::string path = NodePath(config_.trace_out, node_base_);
  DMIDX_ASSIGN_OR_RETURN(auto writer, TraceWriter::Open(path, config_.keys));
  for (const auto& [ticket, op] : trace_out_) {
    DMIDX_RETURN_IF_ERROR(writer->Append(op.op, op.key, op.scan_length));
  }
  return writer->Close();
}

StatusOr<PointResult> PointRun::Run() {
  PointResult out;
  out.node = node_base_;
  out.merged = env_.cluster == nullptr || node_base_ == 0;
  const WorkloadSpec& spec = config_.workload;

  PhaseResult load;
  load.name = "load";
  if (config_.load == LoadMode::kBulk) {
    DMIDX_RETURN_IF_ERROR(Barrier("load"));
    DMIDX_RETURN_IF_ERROR(BulkLoad(&load));
  } else if (config_.load == LoadMode::kInsert) {
    DMIDX_RETURN_IF_ERROR(RunPhase({PhaseKind::kLoad, "load", spec.LoadedRecords(), {}}, &load));
  }
  // Node 0 bulk-loads while the others wait: allow it 5 us a record (it
  // loads about 2 M records a second on a small machine) over the timeout.
  DMIDX_RETURN_IF_ERROR(
      Barrier("loaded", std::chrono::milliseconds(spec.LoadedRecords() / 200 *
                                                  (config_.load == LoadMode::kBulk ? 1 : 0))));
  records_loaded_ = config_.load == LoadMode::kNone ? 0 : spec.LoadedRecords();
  DMIDX_RETURN_IF_ERROR(Gather(&load, /*judge_late=*/false, std::chrono::milliseconds(0)));
  if (config_.load != LoadMode::kNone) out.phases.push_back(std::move(load));
  // What the loaded records cost the pools (node 0: the memory is shared).
  uint64_t after_load = 0;
  if (out.merged) {
    DMIDX_ASSIGN_OR_RETURN(const std::vector<PoolUsage> pools, cluster_->MemoryUsage());
    for (const PoolUsage& pool : pools)
      after_load += pool.bytes_in_use;
  }

  if (config_.warmup_operations > 0) {
    PhaseResult warmup;
    warmup.name = "warmup";
    DMIDX_RETURN_IF_ERROR(
        RunPhase({PhaseKind::kWarmup, "warmup", config_.warmup_operations, {}}, &warmup));
    DMIDX_RETURN_IF_ERROR(Gather(&warmup, /*judge_late=*/false, std::chrono::milliseconds(0)));
    out.phases.push_back(std::move(warmup));
  }

  PhaseResult run;
  run.name = "run";
  trace_out_.clear();
  const bool bounded = config_.trace_in == nullptr && config_.duration.count() == 0 &&
                       config_.write_bytes_multiple == 0;
  const uint64_t run_operations = bounded ? spec.operation_count : 0;
  DMIDX_RETURN_IF_ERROR(RunPhase({PhaseKind::kRun, "run", run_operations,
                                  std::chrono::duration_cast<nanoseconds>(config_.duration)},
                                 &run));
  if (!config_.trace_out.empty()) DMIDX_RETURN_IF_ERROR(WriteTrace());
  out.own_run_operations = run.operations;
  out.own_run_failed = Total(run.failed);
  if (run.kill && run.kill->killed_at.count() >= 0) dead_.insert(run.kill->compute_node);
  // Every node's results, the end of the phase's barrier: a node may take
  // the phase's duration longer than another to get here.
  DMIDX_RETURN_IF_ERROR(Gather(&run, /*judge_late=*/true, config_.duration));
  out.phases.push_back(std::move(run));
  out.dead.assign(dead_.begin(), dead_.end());
  if (!config_.ack_log.empty()) DMIDX_RETURN_IF_ERROR(CheckAcknowledged(&out));
  if (out.merged) {
    DMIDX_ASSIGN_OR_RETURN(out.memory, ReportMemory(quiesced_));
    out.memory->bytes_in_use_after_load = after_load;
    out.memory->loaded_keys = records_loaded_;
  }
  return out;
}

uint64_t PointRun::BytesWritten() const {
  uint64_t bytes = 0;
  for (const auto& client : clients_)
    bytes += client->stats().bytes_written;
  return bytes;
}

std::vector<ReclamationStats> PointRun::ReclamationNow() const {
  std::vector<ReclamationStats> stats;
  for (const auto& client : clients_)
    stats.push_back(client->reclamation_stats());
  return stats;
}

Status PointRun::RunFirstContexts(const std::function<Status(size_t client, Context& ctx)>& work) {
  std::vector<Client*> clients;
  std::vector<Client::Work> works;
  for (size_t i = 0; i < clients_.size(); ++i) {
    if (dead_.contains(node_base_ + static_cast<uint32_t>(i))) continue;
    clients.push_back(clients_[i].get());
    works.push_back([&work, i](Context& ctx) {
      if (ctx.thread_index() != 0 || ctx.coroutine_index() != 0) return Status::Ok();
      return work(i, ctx);
    });
  }
  return RunClients(clients, works);
}

StatusOr<bool> PointRun::Quiesce() {
  for (const auto& client : clients_)
    DMIDX_RETURN_IF_ERROR(client->ReleaseRetired());
  // Each client's keeper frees its objects as its epochs move (a renewal
  // a lease period): look once a period.
  const nanoseconds period = cluster_->options().lease.period;
  const nanoseconds deadline = cluster_->Now() + env_.timeout;
  std::vector<uint8_t> done(clients_.size(), 0);
  DMIDX_RETURN_IF_ERROR(RunFirstContexts([&](size_t client, Context& ctx) {
    while (ctx.Now() < deadline) {
      const ReclamationStats stats = clients_[client]->reclamation_stats();
      if (stats.reclaimed_objects == stats.retired_objects) {
        done[client] = 1;
        break;
      }
      ctx.SleepUntil(ctx.Now() + period);
    }
    return Status::Ok();
  }));
  return std::all_of(done.begin(), done.end(), [](uint8_t one) { return one != 0; });
}

StatusOr<MemoryReport> PointRun::ReportMemory(bool quiesced) {
  MemoryReport report;
  report.quiesced = quiesced;
  // Counted by the first client that lives (the failure experiment may
  // have killed another).
  std::atomic<bool> counted{false};
  DMIDX_RETURN_IF_ERROR(RunFirstContexts([&](size_t client, Context& ctx) {
    if (counted.exchange(true)) return Status::Ok();
    StatusOr<uint64_t> live = CountKeys(ctx, *indexes_[client], config_.keys.bytes, kCountPage);
    if (!live.ok()) return live.status().WithContext("counting the live keys");
    report.live_keys = *live;
    return Status::Ok();
  }));
  DMIDX_ASSIGN_OR_RETURN(report.pools, cluster_->MemoryUsage());
  return report;
}

}  // namespace

uint64_t MemoryReport::PoolBytes() const {
  uint64_t bytes = 0;
  for (const PoolUsage& pool : pools)
    bytes += pool.pool_bytes;
  return bytes;
}

uint64_t MemoryReport::BytesInUse() const {
  uint64_t bytes = 0;
  for (const PoolUsage& pool : pools)
    bytes += pool.bytes_in_use;
  return bytes;
}

double MemoryReport::BytesPerLiveKey() const {
  return live_keys == 0 ? 0 : static_cast<double>(BytesInUse()) / static_cast<double>(live_keys);
}

double MemoryReport::BytesPerLoadedKey() const {
  return loaded_keys == 0
             ? 0
             : static_cast<double>(bytes_in_use_after_load) / static_cast<double>(loaded_keys);
}

StatusOr<uint64_t> CountKeys(Context& ctx, RangeIndex& index, uint32_t key_bytes, size_t page) {
  if (page == 0) return Status::InvalidArgument("CountKeys: a page of 0 pairs");
  std::string from(key_bytes, '\0');
  std::vector<KeyValue> pairs;
  uint64_t count = 0;
  bool first = true;  // `from` itself is a key to count, not the last one counted
  while (true) {
    DMIDX_RETURN_IF_ERROR(index.Scan(ctx, from, page + 1, &pairs));
    size_t skip = 0;
    if (!first && !pairs.empty() && pairs.front().key == from) skip = 1;
    count += pairs.size() - skip;
    if (pairs.size() < page + 1) return count;
    from = pairs.back().key;
    first = false;
  }
}

uint64_t MemoryNeeded(const PointConfig& config) {
  return config.index->pool_bytes(
      config.workload.LoadedRecords() + config.workload.ExpectedNewKeys(), config.keys.bytes,
      config.fill_factor, config.settings);
}

namespace {

Status CheckFailureExperiment(const PointConfig& config, const Environment& env) {
  const FailureExperiment& kill = *config.kill;
  if (!env.kill_compute_node || env.cluster != nullptr) {
    return Status::InvalidArgument(
        "the failure experiment kills a compute node of an in-process cluster (local or sim); "
        "on a verbs cluster, kill the compute node's process");
  }
  if (config.compute_nodes < 2) {
    return Status::InvalidArgument("the failure experiment needs at least 2 compute nodes");
  }
  if (kill.compute_node >= config.compute_nodes) {
    return Status::InvalidArgument("the failure experiment kills compute node " +
                                   std::to_string(kill.compute_node) + " of " +
                                   std::to_string(config.compute_nodes));
  }
  if (config.duration.count() == 0 || kill.at.count() <= 0 || kill.at >= config.duration) {
    return Status::InvalidArgument(
        "the failure experiment's kill must fall inside a run phase of a given duration");
  }
  if (config.timeline_interval.count() == 0 || kill.at < config.timeline_interval) {
    return Status::InvalidArgument(
        "the failure experiment needs a timeline with a window before the kill");
  }
  if (!(kill.recovery_fraction > 0 && kill.recovery_fraction <= 1) ||
      kill.recovery_span.count() <= 0) {
    return Status::InvalidArgument(
        "the failure experiment's recovery fraction must be in (0, 1] and its span positive");
  }
  return Status::Ok();
}

Status CheckChurn(const PointConfig& config) {
  const double multiple = config.write_bytes_multiple;
  if (!std::isfinite(multiple) || multiple < 0) {
    return Status::InvalidArgument("the churn's write bytes multiple must be a number >= 0, not " +
                                   std::to_string(multiple));
  }
  if (multiple == 0) return Status::Ok();
  if (config.duration.count() != 0 || config.trace_in != nullptr || config.kill.has_value()) {
    return Status::InvalidArgument(
        "the churn (a write bytes multiple) runs until it wrote its bytes: not with a duration, "
        "a trace to replay or the failure experiment");
  }
  if (config.timeline_interval.count() <= 0) {
    return Status::InvalidArgument(
        "the churn (a write bytes multiple) needs a timeline interval: it looks at the bytes "
        "written once a window");
  }
  return Status::Ok();
}

}  // namespace

Status CheckPoint(const PointConfig& config, const Environment& env) {
  DMIDX_RETURN_IF_ERROR(config.index->check(config.keys.bytes, config.settings));
  DMIDX_RETURN_IF_ERROR(config.workload.Validate());
  DMIDX_RETURN_IF_ERROR(config.keys.Validate());
  if (config.threads == 0 || config.coroutines == 0 || config.compute_nodes == 0) {
    return Status::InvalidArgument("compute nodes, threads and coroutines must be at least 1");
  }
  // Only the pools this process makes: a cluster over RDMA has the memory
  // nodes' own.
  if (env.cluster == nullptr && env.cluster_options.backend != FabricBackend::kVerbs) {
    const ClusterOptions& options = env.cluster_options;
    const uint64_t pool = options.memory_nodes * options.memory_node.pool_bytes;
    const uint64_t index_bytes = MemoryNeeded(config);
    // Each worker thread carves nodes from chunks of its own, one on each
    // memory node it allocates on (new siblings go next to the node they
    // split from), so up to threads x memory nodes chunks are held partly
    // used: with Sherman's 176 threads on 8 memory nodes, 11 GiB of 8 MiB
    // chunks.
    const uint64_t held = index_bytes == 0
                              ? 0
                              : uint64_t{config.compute_nodes} * config.threads *
                                    options.memory_nodes * options.memory_node.chunk_bytes;
    const uint64_t needed = index_bytes + held;
    // Nodes fill unevenly (chunks go round-robin): keep a quarter spare.
    if (needed > pool / 4 * 3) {
      const uint64_t per_node = (needed / 3 * 4 + options.memory_nodes - 1) / options.memory_nodes;
      return Status::InvalidArgument(
          std::to_string(config.workload.LoadedRecords()) + " records of " + config.index->name +
          " need about " + std::to_string(needed >> 20) + " MiB of pool (" +
          std::to_string(index_bytes >> 20) + " MiB of index, " + std::to_string(held >> 20) +
          " MiB of chunks that " + std::to_string(uint64_t{config.compute_nodes} * config.threads) +
          " worker threads may hold on every memory node); " +
          std::to_string(options.memory_nodes) + " memory nodes of " +
          std::to_string(options.memory_node.pool_bytes >> 20) +
          " MiB are too small: give --pool-bytes=" + std::to_string((per_node >> 20) + 1) +
          "M or more");
    }
  }
  if (config.timeline_interval.count() < 0) {
    return Status::InvalidArgument("the timeline interval must not be negative");
  }
  if (config.kill.has_value()) DMIDX_RETURN_IF_ERROR(CheckFailureExperiment(config, env));
  DMIDX_RETURN_IF_ERROR(CheckChurn(config));
  if (uint64_t{config.threads} * config.coroutines * config.compute_nodes >
      InsertSequence::kWindow) {
    return Status::InvalidArgument("at most " + std::to_string(InsertSequence::kWindow) +
                                   " contexts (compute nodes x threads x coroutines)");
  }
  return Status::Ok();
}

StatusOr<PointResult> RunPoint(const PointConfig& config, uint64_t point, Environment& env) {
  DMIDX_RETURN_IF_ERROR(CheckPoint(config, env));
  PointRun run(config, point, env);
  DMIDX_RETURN_IF_ERROR(run.Open());
  return run.Run();
}

}  // namespace dmidx::bench
