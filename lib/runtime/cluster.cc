#include <algorithm>
#include <cstring>
#include <memory_resource>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/runtime/client.h"

namespace dmidx {

Status Cluster::Open(const ClusterOptions& options, std::unique_ptr<Cluster>* cluster) {
  if (cluster == nullptr) return Status::InvalidArgument("Cluster::Open: null output pointer");
  DMIDX_ASSIGN_OR_RETURN(auto opened, runtime::ClusterImpl::Create(options));
  *cluster = std::move(opened);
  return Status::Ok();
}

Status RunClients(std::span<Client* const> clients, std::span<const Client::Work> work) {
  return runtime::RunClients(clients, work);
}

namespace runtime {

ComputeNode& ComputeNode::Of(Client& client) {
  return static_cast<ClientImpl&>(client);
}

namespace {

constexpr size_t kScratchAlignment = 4096;
constexpr size_t kMinStackBytes = 16 << 10;

Status ValidateClientOptions(const ClientOptions& options) {
  if (options.threads == 0) return Status::InvalidArgument("ClientOptions.threads must be >= 1");
  if (options.coroutines_per_thread == 0) {
    return Status::InvalidArgument("ClientOptions.coroutines_per_thread must be >= 1");
  }
  if (options.coroutine_stack_bytes < kMinStackBytes) {
    return Status::InvalidArgument("ClientOptions.coroutine_stack_bytes must be >= " +
                                   std::to_string(kMinStackBytes));
  }
  // Two contexts are the lease keeper's (lease_keeper.h).
  if (uint64_t{options.threads} * options.coroutines_per_thread > kMaxContextsPerComputeNode - 2) {
    return Status::InvalidArgument(
        "ClientOptions.threads x coroutines_per_thread must be at most " +
        std::to_string(kMaxContextsPerComputeNode - 2) +
        " (the contexts a compute node may have, less its lease keeper's)");
  }
  if (options.scratch_bytes_per_context < kScratchAlignment ||
      options.scratch_bytes_per_context % kScratchAlignment != 0) {
    return Status::InvalidArgument(
        "ClientOptions.scratch_bytes_per_context must be a non-zero multiple of 4096");
  }
  return Status::Ok();
}

}  // namespace

// ---- ClusterImpl -----------------------------------------------------------

StatusOr<std::unique_ptr<ClusterImpl>> ClusterImpl::Create(const ClusterOptions& options) {
  if (options.memory_nodes == 0 || options.memory_nodes >= fabric::RemoteAddress::kMaxNodes) {
    return Status::InvalidArgument("ClusterOptions.memory_nodes must be in [1, 65535], not " +
                                   std::to_string(options.memory_nodes));
  }
  DMIDX_RETURN_IF_ERROR(options.lease.Check());
  DMIDX_RETURN_IF_ERROR(options.reclamation.Check());
  DMIDX_ASSIGN_OR_RETURN(auto backend, ClusterBackend::Open(options));
  return std::unique_ptr<ClusterImpl>(new ClusterImpl(options, std::move(backend)));
}

ClusterImpl::~ClusterImpl() = default;

void ClusterImpl::AdoptOrphans(std::vector<RetiredObjects::Entry> entries) {
  std::lock_guard<std::mutex> guard(orphans_mutex_);
  orphans_.Adopt(std::move(entries));
}

std::vector<RetiredObjects::Entry> ClusterImpl::TakeOrphans() {
  std::lock_guard<std::mutex> guard(orphans_mutex_);
  return orphans_.TakeAll();
}

size_t ClusterImpl::orphans_waiting() const {
  std::lock_guard<std::mutex> guard(orphans_mutex_);
  return orphans_.waiting();
}

void ClusterImpl::AddClient(ClientImpl* client) {
  std::lock_guard<std::mutex> guard(clients_mutex_);
  open_clients_.insert(client);
}

void ClusterImpl::RemoveClient(ClientImpl* client) {
  std::lock_guard<std::mutex> guard(clients_mutex_);
  open_clients_.erase(client);
}

std::vector<ClientImpl*> ClusterImpl::OpenClients() const {
  std::vector<ClientImpl*> clients;
  {
    std::lock_guard<std::mutex> guard(clients_mutex_);
    clients.assign(open_clients_.begin(), open_clients_.end());
  }
  // In id order, not the pointers': a sim run's CPUs must not depend on
  // where the heap put the clients.
  std::sort(clients.begin(), clients.end(),
            [](const ClientImpl* a, const ClientImpl* b) { return a->id() < b->id(); });
  return clients;
}

Status ClusterImpl::NewClient(const ClientOptions& options, std::unique_ptr<Client>* client) {
  if (client == nullptr) return Status::InvalidArgument("NewClient: null output pointer");
  DMIDX_ASSIGN_OR_RETURN(auto made, ClientImpl::Create(this, options));
  *client = std::move(made);
  return Status::Ok();
}

// ---- ClientImpl ------------------------------------------------------------

StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Create(ClusterImpl* cluster,
                                                         const ClientOptions& options) {
  DMIDX_RETURN_IF_ERROR(ValidateClientOptions(options));
  DMIDX_ASSIGN_OR_RETURN(const uint32_t id, cluster->backend().AttachClient());
  if (id >= kMaxComputeNodes) {
    cluster->backend().DetachClient(id, /*settled=*/true);
    return Status::ResourceExhausted("compute node id " + std::to_string(id) +
                                     " is past the last one lock words can name (" +
                                     std::to_string(kMaxComputeNodes - 1) + ")");
  }
  // Detaches when it goes, a half-made one too.
  std::unique_ptr<ClientImpl> client(new ClientImpl(cluster, options, id));
  for (uint32_t t = 0; t < options.threads; ++t) {
    DMIDX_ASSIGN_OR_RETURN(
        auto worker, Worker::Create(client.get(), static_cast<int>(t),
                                    options.coroutines_per_thread, options.coroutines_per_thread));
    client->workers_.push_back(std::move(worker));
  }
  const bool virtual_time = cluster->backend().executor().virtual_time();
  client->membership_ = std::make_unique<Membership>(
      id, cluster->options().lease,
      [cluster](uint32_t node) { return cluster->fabric().FenceComputeNode(node); }, virtual_time);
  // A virtual clock moves only while the executor runs: the lease is then
  // renewed as background work of each Run (RunClients), not by a thread.
  DMIDX_ASSIGN_OR_RETURN(client->lease_, LeaseKeeper::Start(client.get(), cluster->options().lease,
                                                            client->membership_.get(),
                                                            /*own_thread=*/!virtual_time));
  cluster->AddClient(client.get());
  return client;
}

ClientImpl::ClientImpl(ClusterImpl* cluster, const ClientOptions& options, uint32_t id)
    : cluster_(cluster),
      options_(options),
      id_(id),
      draining_(cluster->controls().size()),
      empty_list_hints_(cluster->options().lease.period) {}

ClientImpl::~ClientImpl() {
  if (lease_) {
    cluster_->RemoveClient(this);
    lease_->Stop();  // no renewal nor reclamation runs while the workers go
  }
  workers_.clear();  // before another client may take this compute node's id
  // The workers left what they retired here: the last act of the keeper's.
  if (lease_) CloseReclamation(lease_->recovery_worker().context(0));
  lease_.reset();
  cluster_->backend().DetachClient(id_, Settled());
}

void ClientImpl::CloseReclamation(ContextImpl& ctx) {
  CollectRetired(ctx, epochs_.free_bound());
  std::vector<RetiredObjects::Entry> rest;
  {
    std::lock_guard<std::mutex> guard(adopted_mutex_);
    // The keeper's own worker's too (a recovery may retire): it goes next.
    adopted_.Adopt(ctx.worker().retired().TakeAll());
    rest = adopted_.TakeAll();
  }
  if (rest.empty()) return;
  epochs_.counters().handed_over.fetch_add(rest.size(), std::memory_order_relaxed);
  cluster_->AdoptOrphans(std::move(rest));
}

bool ClientImpl::Settled() const {
  if (failed_batch_.load(std::memory_order_relaxed)) return false;
  return membership_ == nullptr || !membership_->HasUnfinished();
}

Status ClientImpl::Run(const Work& work) {
  Client* self = this;
  return RunClients({&self, 1}, {&work, 1});
}

Status RunClients(std::span<Client* const> clients, std::span<const Client::Work> work) {
  if (clients.size() != work.size()) {
    return Status::InvalidArgument("RunClients: " + std::to_string(clients.size()) +
                                   " clients but " + std::to_string(work.size()) + " works");
  }
  if (clients.empty()) return Status::Ok();
  std::vector<ClientImpl*> impls;
  for (Client* client : clients) {
    auto* impl = static_cast<ClientImpl*>(client);
    if (!impls.empty() && &impl->cluster() != &impls.front()->cluster()) {
      return Status::FailedPrecondition("RunClients: the clients belong to different clusters");
    }
    impls.push_back(impl);
  }
  // Claim every client or none.
  for (size_t i = 0; i < impls.size(); ++i) {
    if (impls[i]->running_.exchange(true, std::memory_order_acquire)) {
      for (size_t j = 0; j < i; ++j)
        impls[j]->running_.store(false, std::memory_order_release);
      return Status::FailedPrecondition(
          "Client::Run is already running on this client (or it is listed twice)");
    }
  }
  // Each context writes only its own result.
  std::vector<Worker*> workers;
  std::map<const ContextImpl*, std::pair<size_t, Status*>> result_of;
  std::vector<std::vector<Status>> results(impls.size());
  for (size_t i = 0; i < impls.size(); ++i) {
    const uint32_t coroutines = impls[i]->options_.coroutines_per_thread;
    results[i].resize(impls[i]->workers_.size() * coroutines);
    for (size_t t = 0; t < impls[i]->workers_.size(); ++t) {
      Worker* worker = impls[i]->workers_[t].get();
      workers.push_back(worker);
      for (size_t c = 0; c < worker->context_count(); ++c)
        result_of[&worker->context(c)] = {i, &results[i][t * coroutines + c]};
    }
  }
  Executor& executor = impls.front()->cluster().backend().executor();
  std::vector<BackgroundWork> background;
  std::vector<LeaseKeeper*> renewing;
  if (executor.virtual_time()) {
    // Every open client's lease, in the run or not: virtual time moves for
    // all of them.
    for (ClientImpl* client : impls.front()->cluster().OpenClients()) {
      LeaseKeeper* lease = client->lease_.get();
      if (!lease->TryEnterRun()) continue;  // another run renews it
      renewing.push_back(lease);
      background.push_back(
          {&lease->worker(), [lease](ContextImpl& context, const std::atomic<bool>& stop) {
             lease->RenewUntil(context, stop);
           }});
      background.push_back(
          {&lease->recovery_worker(), [lease](ContextImpl& context, const std::atomic<bool>& stop) {
             lease->ResumeUntil(context, stop);
           }});
    }
  }
  executor.Run(
      workers,
      [&](ContextImpl& context) {
        const auto& [client, result] = result_of.at(&context);
        *result = work[client](context);
      },
      background);
  for (LeaseKeeper* lease : renewing)
    lease->LeaveRun();
  for (ClientImpl* impl : impls)
    impl->running_.store(false, std::memory_order_release);
  for (const std::vector<Status>& client_results : results) {
    for (const Status& status : client_results) {
      if (!status.ok()) return status;
    }
  }
  return Status::Ok();
}

Status ClientImpl::NewBlockingContext(std::unique_ptr<Context>* context) {
  if (context == nullptr) return Status::InvalidArgument("NewBlockingContext: null output pointer");
  DMIDX_ASSIGN_OR_RETURN(auto worker, Worker::Create(this, -1, 0, 1));
  DMIDX_ASSIGN_OR_RETURN(const ContextNumber number, TakeContextNumber());
  *context = std::make_unique<ContextImpl>(std::move(worker), number);
  return Status::Ok();
}

StatusOr<bool> ClientImpl::JudgeComputeNode(Context& ctx, uint32_t node,
                                            std::chrono::nanoseconds deadline) {
  ContextImpl& impl = ContextImpl::From(ctx);
  if (&impl.compute_node() != this) {
    return Status::InvalidArgument("JudgeComputeNode: the context belongs to another client");
  }
  return membership_->Judge(impl, node, deadline);
}

StatusOr<ContextNumber> ClientImpl::TakeContextNumber() {
  std::lock_guard<std::mutex> guard(numbers_mutex_);
  if (!free_numbers_.empty()) {
    const ContextNumber number = free_numbers_.back();
    free_numbers_.pop_back();
    return number;
  }
  if (numbers_made_ == kMaxContextsPerComputeNode) {
    return Status::ResourceExhausted("compute node " + std::to_string(id_) + " has " +
                                     std::to_string(kMaxContextsPerComputeNode) +
                                     " contexts alive, the most it may have");
  }
  return ContextNumber{numbers_made_++, 0};
}

void ClientImpl::GiveContextNumber(ContextNumber number) {
  std::lock_guard<std::mutex> guard(numbers_mutex_);
  free_numbers_.push_back(number);
}

Stats ClientImpl::stats() const {
  Stats total;
  for (const auto& worker : workers_)
    total += worker->stats();
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  total += retired_blocking_stats_;
  for (const Worker* worker : blocking_workers_)
    total += worker->stats();
  return total;
}

std::vector<uint64_t> ClientImpl::OpsPerMemoryNode() const {
  std::vector<uint64_t> ops;
  for (const auto& worker : workers_)
    worker->endpoint().counters().AddOpsPerNode(&ops);
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  for (const Worker* worker : blocking_workers_)
    worker->endpoint().counters().AddOpsPerNode(&ops);
  return ops;
}

StatusOr<fabric::RemoteAddress> ClientImpl::CatalogWord(std::string_view name, bool create) const {
  return cluster_->controls()[ClusterImpl::kCatalogNode]->CatalogWord(name, create);
}

std::shared_ptr<void> ClientImpl::SharedObject(std::type_index type, const std::string& name,
                                               const std::function<std::shared_ptr<void>()>& make,
                                               bool keep) {
  std::lock_guard<std::mutex> guard(shared_mutex_);
  std::weak_ptr<void>& known = shared_[{type, name}];
  std::shared_ptr<void> object = known.lock();
  if (!object) {
    object = make();
    known = object;
    if (keep) kept_.push_back(object);
  }
  return object;
}

void ClientImpl::AdoptRetired(std::vector<RetiredObjects::Entry> entries) {
  std::lock_guard<std::mutex> guard(adopted_mutex_);
  adopted_.Adopt(std::move(entries));
}

void ClientImpl::CollectRetired(ContextImpl& ctx, uint64_t workers_bound) {
  std::vector<RetiredObjects::Entry> due;
  // What closed clients left: freed here once due (the free bound is
  // global), and until then G is moved on for it.
  std::vector<RetiredObjects::Entry> orphans = cluster_->TakeOrphans();
  if (!orphans.empty()) {
    epochs_.counters().adopted.fetch_add(orphans.size(), std::memory_order_relaxed);
    epochs_.NoteRetired(orphans.back().epoch);
    AdoptRetired(std::move(orphans));
  }
  {
    std::lock_guard<std::mutex> guard(adopted_mutex_);
    adopted_.TakeDue(epochs_.free_bound(), &due);
  }
  // The workers' own lists (each behind its spin lock, for as short as it
  // takes to move the entries): an idle worker's objects come back too.
  // workers_ changes only when the client is made and when it closes,
  // never while the keeper runs.
  for (const auto& worker : workers_)
    worker->retired().TakeDue(workers_bound, &due);
  {
    // A blocking context's worker stays in the set until it goes.
    std::lock_guard<std::mutex> guard(blocking_mutex_);
    for (Worker* worker : blocking_workers_)
      worker->retired().TakeDue(workers_bound, &due);
  }
  ctx.worker().retired().TakeDue(workers_bound, &due);
  // Freed once no lock is held: a free may push a bundle and wait.
  for (const RetiredObjects::Entry& entry : due)
    RetiredObjects::GiveBack(entry, ctx.allocator(), &ctx);
  // The keeper allocates nothing: what it freed goes on to the shared
  // lists at once (a bundle per size and memory node), for every worker.
  if (!due.empty()) (void)ctx.allocator().ReleaseToShared(ctx);
  // Counted once there: an allocation waits for what is retired and not
  // yet counted (AwaitReclamation), and would give up on objects still on
  // their way.
  for (const RetiredObjects::Entry& entry : due)
    RetiredObjects::CountReclaimed(entry, epochs_.counters());
}

namespace {

// A worker's allocator: the cluster's reclamation options, the client's
// hints about its shared lists and its draining chunks.
RemoteAllocatorOptions AllocatorOptions(ClientImpl& client) {
  RemoteAllocatorOptions options =
      RemoteAllocatorOptions::From(client.cluster().options().reclamation);
  options.hints = &client.empty_list_hints();
  options.draining = &client.draining_chunks();
  return options;
}

}  // namespace

bool ClientImpl::AwaitReclamation(ContextImpl& ctx, std::chrono::nanoseconds deadline) {
  EpochCounters& counters = epochs_.counters();
  if (ctx.worker().retired().Collect(epochs_.free_bound(), ctx.allocator(), counters, &ctx) != 0) {
    return true;
  }
  const std::chrono::nanoseconds now = ctx.Now();
  if (now >= deadline) return false;
  // Retired (or adopted) and not yet freed, nor handed to another client.
  constexpr auto kRelaxed = std::memory_order_relaxed;
  const uint64_t done = counters.reclaimed.load(kRelaxed) + counters.handed_over.load(kRelaxed);
  const uint64_t taken = counters.retired.load(kRelaxed) + counters.adopted.load(kRelaxed);
  if (taken <= done && cluster_->orphans_waiting() == 0) return false;
  // No keeper moves the epoch on (a lost lease stopped it): nothing comes.
  if (lease_ == nullptr || !lease_->status().ok()) return false;
  const std::chrono::nanoseconds nap = std::max<std::chrono::nanoseconds>(
      cluster_->options().lease.period / 4, std::chrono::microseconds(1));
  ctx.SleepUntil(std::min(deadline, now + nap));
  return true;
}

namespace {

void AddSharedLists(const SharedListCounters& lists, ReclamationStats* stats) {
  stats->shared_bundles_popped += lists.bundles_popped;
  stats->shared_objects_popped += lists.objects_popped;
  stats->shared_bundles_pushed += lists.bundles_pushed;
  stats->shared_objects_pushed += lists.objects_pushed;
  stats->shared_objects_lost += lists.objects_lost;
  stats->shared_failures += lists.failures;
  stats->compaction_passes += lists.compaction_passes;
  stats->chunks_drained += lists.chunks_drained;
  stats->chunks_returned += lists.chunks_returned;
}

}  // namespace

ReclamationStats ClientImpl::reclamation_stats() const {
  const EpochCounters& epochs = epochs_.counters();
  constexpr auto kRelaxed = std::memory_order_relaxed;
  ReclamationStats stats{.retired_objects = epochs.retired.load(kRelaxed),
                         .retired_bytes = epochs.retired_bytes.load(kRelaxed),
                         .reclaimed_objects = epochs.reclaimed.load(kRelaxed),
                         .reclaimed_bytes = epochs.reclaimed_bytes.load(kRelaxed),
                         .epoch_advances = epochs.advances.load(kRelaxed),
                         .held_back = epochs.held_back.load(kRelaxed)};
  for (const auto& worker : workers_)
    AddSharedLists(worker->allocator().shared_counters(), &stats);
  if (lease_) {
    AddSharedLists(lease_->worker().allocator().shared_counters(), &stats);
    AddSharedLists(lease_->recovery_worker().allocator().shared_counters(), &stats);
  }
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  stats += retired_blocking_lists_;
  for (Worker* worker : blocking_workers_)
    AddSharedLists(worker->allocator().shared_counters(), &stats);
  return stats;
}

Status ClientImpl::ReleaseRetired() {
  if (running_.exchange(true, std::memory_order_acquire)) {
    return Status::FailedPrecondition("ReleaseRetired while the client runs");
  }
  // No worker thread runs: their rings are this thread's to take.
  for (const auto& worker : workers_)
    if (worker->retired().waiting() != 0) AdoptRetired(worker->retired().TakeAll());
  running_.store(false, std::memory_order_release);
  return Status::Ok();
}

StatusOr<std::vector<PoolUsage>> ClusterImpl::MemoryUsage() {
  std::vector<PoolUsage> usage;
  for (memnode::MemoryNodeControl* control : controls()) {
    StatusOr<PoolUsage> one = control->Usage();
    if (!one.ok()) {
      return one.status().WithContext("pool usage of memory node " +
                                      std::to_string(control->node_id()));
    }
    usage.push_back(*one);
  }
  return usage;
}

void ClientImpl::AttachBlockingWorker(Worker* worker) {
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  blocking_workers_.insert(worker);
}

void ClientImpl::DetachBlockingWorker(Worker* worker) {
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  retired_blocking_stats_ += worker->stats();
  AddSharedLists(worker->allocator().shared_counters(), &retired_blocking_lists_);
  blocking_workers_.erase(worker);
}

// ---- Worker ----------------------------------------------------------------

StatusOr<std::unique_ptr<Worker>> Worker::Create(ClientImpl* client, int thread_index,
                                                 uint32_t contexts, uint32_t scratch_regions) {
  DMIDX_ASSIGN_OR_RETURN(auto endpoint, client->cluster().fabric().Connect(client->id()));
  std::unique_ptr<Worker> worker(new Worker(client, client, thread_index, std::move(endpoint)));
  const size_t region_bytes = client->options().scratch_bytes_per_context;
  const size_t total = region_bytes * scratch_regions;
  worker->scratch_.reset(static_cast<uint8_t*>(std::aligned_alloc(kScratchAlignment, total)));
  if (!worker->scratch_) {
    return Status::ResourceExhausted("cannot allocate " + std::to_string(total) +
                                     " bytes of scratch memory");
  }
  std::memset(worker->scratch_.get(), 0, total);  // zero_word() included
  worker->scratch_region_bytes_ = region_bytes;
  DMIDX_RETURN_IF_ERROR(worker->endpoint_->RegisterLocal(worker->scratch_.get(), total));
  for (uint32_t c = 0; c < contexts; ++c) {
    DMIDX_ASSIGN_OR_RETURN(const ContextNumber number, client->TakeContextNumber());
    worker->contexts_.push_back(std::make_unique<ContextImpl>(worker.get(), static_cast<int>(c),
                                                              worker->scratch_region(c), number));
  }
  return worker;
}

Worker::Worker(ClientImpl* client, ComputeNode* compute_node, int thread_index,
               std::unique_ptr<fabric::Endpoint> endpoint)
    : client_(client),
      compute_node_(compute_node),
      clock_(&compute_node->clock()),
      thread_index_(thread_index),
      endpoint_(std::move(endpoint)),
      allocator_(client->cluster().controls(), thread_index < 0 ? 0 : thread_index,
                 AllocatorOptions(*client)) {
  allocator_.SetExhaustedWaiter([client](ContextImpl& ctx, std::chrono::nanoseconds deadline) {
    return client->AwaitReclamation(ctx, deadline);
  });
}

Worker::~Worker() {
  // What this thread freed goes back to the shared lists, so that it is
  // not lost with the thread, and its chunks are sealed, so that they can
  // go back to their memory nodes (a blocking context's own worker has no
  // context here: ~ContextImpl did both). No scheduler runs the context
  // now, so it waits by polling.
  if (!contexts_.empty()) (void)allocator_.ReleaseToShared(*contexts_.front());
  // Nothing may land in scratch memory or notify a context after this.
  endpoint_->Quiesce();
  // What it retired outlives it: the keeper frees it when its time comes.
  if (retired_.waiting() != 0) client_->AdoptRetired(retired_.TakeAll());
}

size_t Worker::coroutine_stack_bytes() const {
  return client_->options().coroutine_stack_bytes;
}

std::span<uint8_t> Worker::scratch_region(size_t i) const {
  return {scratch_.get() + i * scratch_region_bytes_, scratch_region_bytes_};
}

Stats Worker::stats() const {
  Stats stats;
  endpoint_->counters().AddTo(&stats);
  stats.round_trips = round_trips_.load(std::memory_order_relaxed);
  return stats;
}

// ---- ContextImpl -----------------------------------------------------------

ContextImpl::ContextImpl(std::unique_ptr<Worker> owned_worker, ContextNumber number)
    : worker_(owned_worker.get()),
      coroutine_index_(0),
      number_(number.value),
      lock_acquisitions_(number.lock_acquisitions),
      scratch_(owned_worker->scratch_region(0)),
      arena_(scratch()),
      owned_worker_(std::move(owned_worker)) {
  NoteFailuresOnClient();
  AttachEpochSlot();
  worker_->client().AttachBlockingWorker(worker_);
}

void ContextImpl::AttachEpochSlot() {
  EpochTable& epochs = worker_->client().epochs();
  epochs.Register(number_, &epoch_slot_, &cache_slot_);
  epoch_local_ = epochs.local_word();
}

void ContextImpl::Retire(fabric::RemoteAddress object, uint64_t bytes, uint64_t alignment) {
  EpochTable& epochs = worker_->client().epochs();
  const uint64_t local = epochs.local();
  epochs.NoteRetired(local + 1);  // the epoch RetiredObjects::Retire gives it
  worker_->retired().Retire({object, bytes, alignment, 0}, local, epochs.free_bound(), allocator(),
                            epochs.counters(), this);
}

void ContextImpl::NoteFailuresOnClient() {
  parker_.set_failure_flag(worker_->unsettles_on_failure() ? worker_->client().failed_batch_flag()
                                                           : nullptr);
}

void Worker::set_unsettles_on_failure(bool unsettles) {
  unsettles_on_failure_ = unsettles;
  for (const auto& context : contexts_)
    context->NoteFailuresOnClient();
}

ContextImpl::~ContextImpl() {
  if (owned_worker_) (void)allocator().ReleaseToShared(*this);
  worker_->client().epochs().Unregister(number_);
  worker_->client().GiveContextNumber({number_, lock_acquisitions_});
  if (owned_worker_) {
    owned_worker_->endpoint().Quiesce();
    worker_->client().DetachBlockingWorker(worker_);
  }
}

Status ContextImpl::Post(uint16_t node, std::span<const fabric::Op> ops,
                         fabric::Completion* completion) {
  if (recorded_posts_ != nullptr) [[unlikely]] {
    if (post_hook_) post_hook_(ops);
    recorded_posts_->insert(recorded_posts_->end(), ops.begin(), ops.end());
  }
  fabric::OpBytes bytes;
  if (Status posted = endpoint().Post(node, ops, completion, &bytes); !posted.ok()) [[unlikely]] {
    if (worker_->unsettles_on_failure()) worker_->client().NoteFailedBatch();
    return posted;
  }
  counters_.bytes_read += bytes.read;
  counters_.bytes_written += bytes.written;
  return Status::Ok();
}

Status ContextImpl::Wait(fabric::Completion& completion) {
  if (completion.batches() > 0) {
    worker_->CountRoundTrip();
    ++counters_.round_trips;
  }
  while (!completion.done())
    Park();
  return completion.status();
}

Status ContextImpl::Execute(uint16_t node, std::span<const fabric::Op> ops) {
  fabric::Completion completion(notifier());
  DMIDX_RETURN_IF_ERROR(Post(node, ops, &completion));
  return Wait(completion);
}

Status ContextImpl::ReadWords(fabric::RemoteAddress at, uint32_t count, uint64_t* out) {
  ScratchArena::Scope scope(arena_);
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, arena_.Words(count));
  const fabric::Op read = fabric::Op::Read(at, words, 8 * count);
  DMIDX_RETURN_IF_ERROR(Execute(at.node(), {&read, 1}));
  std::memcpy(out, words, 8 * count);
  return Status::Ok();
}

Status ContextImpl::ExecuteAll(std::span<fabric::Op> ops) {
  // Stable by node. Usually they are grouped already (one memory node);
  // otherwise one pass per memory node they address, lowest first, into a
  // buffer from this context's pools: no heap, and linear in the ops for
  // the few memory nodes a cluster has.
  auto node_of = [](const fabric::Op& op) { return op.remote.node(); };
  if (!std::is_sorted(ops.begin(), ops.end(), [&](const fabric::Op& a, const fabric::Op& b) {
        return node_of(a) < node_of(b);
      })) {
    std::pmr::vector<fabric::Op> sorted(memory());
    sorted.reserve(ops.size());
    uint32_t node = UINT32_MAX;  // the node being gathered
    for (const fabric::Op& op : ops)
      node = std::min<uint32_t>(node, node_of(op));
    while (node != UINT32_MAX) {
      uint32_t next = UINT32_MAX;
      for (const fabric::Op& op : ops) {
        if (node_of(op) == node) {
          sorted.push_back(op);
        } else if (node_of(op) > node) {
          next = std::min<uint32_t>(next, node_of(op));
        }
      }
      node = next;
    }
    std::copy(sorted.begin(), sorted.end(), ops.begin());
  }
  const size_t max_batch = std::max<uint32_t>(1, compute_node().capabilities().max_batch_ops);
  fabric::Completion completion(notifier());
  Status status;
  for (size_t begin = 0; begin < ops.size() && status.ok();) {
    size_t end = begin + 1;
    while (end < ops.size() && end - begin < max_batch &&
           ops[end].remote.node() == ops[begin].remote.node()) {
      ++end;
    }
    status = Post(ops[begin].remote.node(), ops.subspan(begin, end - begin), &completion);
    begin = end;
  }
  Status waited = Wait(completion);  // also after a failed post: let posted ones end
  return status.ok() ? waited : status;
}

void ContextImpl::Yield() {
  if (scheduler_ != nullptr) {
    scheduler_->Yield();
    return;
  }
  endpoint().Poll();
  std::this_thread::yield();
}

void ContextImpl::Backoff(uint32_t attempt) {
  const ClientOptions& options = worker_->client().options();
  const uint64_t floor = static_cast<uint64_t>(options.retry_backoff_min.count());
  const uint64_t cap = static_cast<uint64_t>(options.retry_backoff_max.count());
  if (floor == 0) return;
  const uint64_t bound = std::min(cap, floor << std::min<uint32_t>(attempt, 32));
  if (backoff_state_ == 0) {
    backoff_state_ = (uint64_t{compute_node().id()} << 40) ^ (uint64_t(thread_index() + 1) << 20) ^
                     uint64_t(coroutine_index() + 1);
  }
  // splitmix64: a seeded, repeatable jitter.
  uint64_t z = (backoff_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const uint64_t wait = bound / 2 + z % (bound - bound / 2 + 1);
  SleepUntil(Now() + std::chrono::nanoseconds(wait));
}

void ContextImpl::SleepUntil(std::chrono::nanoseconds deadline) {
  if (scheduler_ != nullptr) {
    scheduler_->SleepUntil(deadline);
    return;
  }
  // A blocking context: make progress once, then give the core away for
  // the rest (spinning here starves the lock holder on a small machine).
  endpoint().Poll();
  compute_node().clock().SleepUntil(deadline);
}

void ContextImpl::Park() {
  if (scheduler_ != nullptr) {
    scheduler_->Park();
    return;
  }
  // Blocking path: this thread drives the fabric itself.
  for (uint32_t spins = 0; !parker_.TryConsume(); ++spins) {
    endpoint().Poll();
    if (spins >= 16) std::this_thread::yield();
  }
}

}  // namespace runtime
}  // namespace dmidx
