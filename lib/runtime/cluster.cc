#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "lib/bootstrap/memcached_handshake.h"
#include "lib/fabric/local_fabric.h"
#include "lib/fabric/verbs/verbs_fabric.h"
#include "lib/memnode/verbs_memory_server.h"
#include "lib/runtime/client.h"

namespace dmidx {

Status Cluster::Open(const ClusterOptions& options, std::unique_ptr<Cluster>* cluster) {
  if (cluster == nullptr) return Status::InvalidArgument("Cluster::Open: null output pointer");
  DMIDX_ASSIGN_OR_RETURN(auto opened, runtime::ClusterImpl::Create(options));
  *cluster = std::move(opened);
  return Status::Ok();
}

namespace runtime {

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
  std::unique_ptr<ClusterImpl> cluster(new ClusterImpl(options));
  switch (options.backend) {
    case FabricBackend::kLocal:
      DMIDX_RETURN_IF_ERROR(cluster->StartLocal());
      break;
    case FabricBackend::kVerbs:
      DMIDX_RETURN_IF_ERROR(cluster->StartVerbs());
      break;
    default:
      return Status::InvalidArgument("unknown fabric backend");
  }
  for (const auto& control : cluster->controls_) {
    cluster->control_pointers_.push_back(control.get());
  }
  return cluster;
}

Status ClusterImpl::StartLocal() {
  std::vector<fabric::LocalNodeMemory> regions;
  for (uint32_t id = 0; id < options_.memory_nodes; ++id) {
    auto node = memnode::MemoryNode::Create(static_cast<uint16_t>(id), options_.memory_node);
    if (!node.ok()) return node.status().WithContext("memory node " + std::to_string(id));
    regions.push_back({(*node)->pool_base(), (*node)->pool_bytes(), (*node)->lock_base(),
                       (*node)->lock_region_bytes()});
    controls_.push_back(std::make_unique<memnode::LocalMemoryNodeControl>(node->get()));
    memory_nodes_.push_back(std::move(node).value());
  }
  DMIDX_ASSIGN_OR_RETURN(fabric_, fabric::LocalFabric::Create(options_.local, std::move(regions)));
  return Status::Ok();
}

// Joins the run through memcached as a compute node, waits for every memory
// node's regions, then opens control paths and the fabric. Data queue pairs
// are connected later, by each thread on its first op to a node.
Status ClusterImpl::StartVerbs() {
  DMIDX_ASSIGN_OR_RETURN(auto device, fabric::verbs::Device::Open(options_.verbs));
  std::shared_ptr<fabric::verbs::Device> shared_device = std::move(device);
  DMIDX_ASSIGN_OR_RETURN(bootstrap_, bootstrap::MemcachedBootstrap::Connect(options_.bootstrap));
  DMIDX_ASSIGN_OR_RETURN(compute_node_id_, bootstrap_->Register(bootstrap::NodeRole::kCompute));
  handshake_ = std::make_unique<bootstrap::MemcachedHandshake>(bootstrap_.get(), compute_node_id_);
  std::vector<fabric::verbs::RegionInfo> regions;
  for (uint32_t id = 0; id < options_.memory_nodes; ++id) {
    const auto node = static_cast<uint16_t>(id);
    StatusOr<fabric::verbs::RegionInfo> info = bootstrap::ReadRegions(bootstrap_.get(), node);
    if (!info.ok()) {
      return info.status().WithContext("waiting for memory node " + std::to_string(id) + " of " +
                                       std::to_string(options_.memory_nodes) +
                                       " (is dmidx-memnode running?)");
    }
    regions.push_back(*info);
    DMIDX_ASSIGN_OR_RETURN(
        auto control, memnode::VerbsMemoryNodeControl::Create(node, shared_device, options_.verbs,
                                                              handshake_.get()));
    controls_.push_back(std::move(control));
  }
  DMIDX_ASSIGN_OR_RETURN(
      fabric_, fabric::verbs::VerbsFabric::Create(options_.verbs, shared_device, std::move(regions),
                                                  handshake_.get()));
  return Status::Ok();
}

ClusterImpl::~ClusterImpl() = default;

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
  std::unique_ptr<ClientImpl> client(new ClientImpl(cluster, options));
  for (uint32_t t = 0; t < options.threads; ++t) {
    DMIDX_ASSIGN_OR_RETURN(
        auto worker, Worker::Create(client.get(), static_cast<int>(t),
                                    options.coroutines_per_thread, options.coroutines_per_thread));
    client->workers_.push_back(std::move(worker));
  }
  return client;
}

ClientImpl::~ClientImpl() = default;

Status ClientImpl::Run(const Work& work) {
  if (running_.exchange(true, std::memory_order_acquire)) {
    return Status::FailedPrecondition("Client::Run is already running on this client");
  }
  const uint32_t coroutines = options_.coroutines_per_thread;
  std::vector<Status> results(workers_.size() * coroutines);
  std::vector<std::thread> threads;
  threads.reserve(workers_.size());
  for (size_t t = 0; t < workers_.size(); ++t) {
    threads.emplace_back([this, t, coroutines, &work, &results] {
      Worker& worker = *workers_[t];
      Scheduler scheduler(options_.coroutine_stack_bytes, [&worker] { worker.endpoint().Poll(); });
      for (uint32_t c = 0; c < coroutines; ++c) {
        ContextImpl& context = worker.context(c);
        context.set_scheduler(&scheduler);
        scheduler.Spawn(context.parker(), [&context, &work, &results, t, c, coroutines] {
          results[t * coroutines + c] = work(context);
        });
      }
      scheduler.Run();
      for (uint32_t c = 0; c < coroutines; ++c)
        worker.context(c).set_scheduler(nullptr);
      // Unsignaled ops posted at the end (e.g. lock releases) land before Run
      // returns, and no other thread still touches this worker's buffers.
      worker.endpoint().Quiesce();
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  running_.store(false, std::memory_order_release);
  for (const Status& status : results) {
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status ClientImpl::NewBlockingContext(std::unique_ptr<Context>* context) {
  if (context == nullptr) return Status::InvalidArgument("NewBlockingContext: null output pointer");
  DMIDX_ASSIGN_OR_RETURN(auto worker, Worker::Create(this, -1, 0, 1));
  *context = std::make_unique<ContextImpl>(std::move(worker));
  return Status::Ok();
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

StatusOr<fabric::RemoteAddress> ClientImpl::CatalogSlot(std::string_view name, bool create) const {
  return cluster_->controls()[ClusterImpl::kCatalogNode]->CatalogSlot(name, create);
}

void ClientImpl::AttachBlockingWorker(Worker* worker) {
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  blocking_workers_.insert(worker);
}

void ClientImpl::DetachBlockingWorker(Worker* worker) {
  std::lock_guard<std::mutex> guard(blocking_mutex_);
  retired_blocking_stats_ += worker->stats();
  blocking_workers_.erase(worker);
}

// ---- Worker ----------------------------------------------------------------

StatusOr<std::unique_ptr<Worker>> Worker::Create(ClientImpl* client, int thread_index,
                                                 uint32_t contexts, uint32_t scratch_slots) {
  DMIDX_ASSIGN_OR_RETURN(auto endpoint, client->cluster().fabric().Connect());
  std::unique_ptr<Worker> worker(new Worker(client, thread_index, std::move(endpoint)));
  const size_t slot_bytes = client->options().scratch_bytes_per_context;
  const size_t total = slot_bytes * scratch_slots;
  worker->scratch_.reset(static_cast<uint8_t*>(std::aligned_alloc(kScratchAlignment, total)));
  if (!worker->scratch_) {
    return Status::ResourceExhausted("cannot allocate " + std::to_string(total) +
                                     " bytes of scratch memory");
  }
  worker->scratch_slot_bytes_ = slot_bytes;
  DMIDX_RETURN_IF_ERROR(worker->endpoint_->RegisterLocal(worker->scratch_.get(), total));
  for (uint32_t c = 0; c < contexts; ++c) {
    worker->contexts_.push_back(
        std::make_unique<ContextImpl>(worker.get(), static_cast<int>(c), worker->scratch_slot(c)));
  }
  return worker;
}

Worker::Worker(ClientImpl* client, int thread_index, std::unique_ptr<fabric::Endpoint> endpoint)
    : client_(client),
      thread_index_(thread_index),
      endpoint_(std::move(endpoint)),
      allocator_(client->cluster().controls(), thread_index < 0 ? 0 : thread_index) {}

Worker::~Worker() {
  // Nothing may land in scratch memory or notify a context after this.
  endpoint_->Quiesce();
}

std::span<uint8_t> Worker::scratch_slot(size_t i) const {
  return {scratch_.get() + i * scratch_slot_bytes_, scratch_slot_bytes_};
}

Stats Worker::stats() const {
  Stats stats;
  endpoint_->counters().AddTo(&stats);
  stats.round_trips = round_trips_.load(std::memory_order_relaxed);
  return stats;
}

// ---- ContextImpl -----------------------------------------------------------

ContextImpl::ContextImpl(std::unique_ptr<Worker> owned_worker)
    : worker_(owned_worker.get()),
      coroutine_index_(0),
      scratch_(owned_worker->scratch_slot(0)),
      owned_worker_(std::move(owned_worker)) {
  worker_->client().AttachBlockingWorker(worker_);
}

ContextImpl::~ContextImpl() {
  if (owned_worker_) {
    owned_worker_->endpoint().Quiesce();
    worker_->client().DetachBlockingWorker(worker_);
  }
}

Status ContextImpl::Post(uint16_t node, std::span<const fabric::Op> ops,
                         fabric::Completion* completion) {
  DMIDX_RETURN_IF_ERROR(endpoint().Post(node, ops, completion));
  for (const fabric::Op& op : ops) {
    const fabric::OpBytes bytes = fabric::BytesOf(op);
    counters_.bytes_read += bytes.read;
    counters_.bytes_written += bytes.written;
  }
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

Status ContextImpl::ExecuteAll(std::vector<fabric::Op>* ops) {
  std::stable_sort(ops->begin(), ops->end(), [](const fabric::Op& a, const fabric::Op& b) {
    return a.remote.node() < b.remote.node();
  });
  const size_t max_batch = std::max<uint32_t>(1, client().cluster().capabilities().max_batch_ops);
  fabric::Completion completion(notifier());
  Status status;
  for (size_t begin = 0; begin < ops->size() && status.ok();) {
    size_t end = begin + 1;
    while (end < ops->size() && end - begin < max_batch &&
           (*ops)[end].remote.node() == (*ops)[begin].remote.node()) {
      ++end;
    }
    status = Post((*ops)[begin].remote.node(),
                  std::span<const fabric::Op>(ops->data() + begin, end - begin), &completion);
    begin = end;
  }
  Status waited = Wait(completion);  // also after a failed post: let posted ones end
  return status.ok() ? waited : status;
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
