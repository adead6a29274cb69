// What one post + poll costs: per op (READ of 8, 64 and 1024 bytes, WRITE of
// 64 bytes, CAS, FAA) and per batch (1, 4 or 16 READs behind one doorbell),
// through an Endpoint of a cluster's fabric, through each fabric backend
// driven directly (BM_Backend*: `local`, and `verbs` when this machine has an
// RDMA device; skipped with the reason otherwise; an 8-byte READ on `local`
// and `sim` also after another compute node was fenced), and through the blocking
// ContextImpl path that index code uses outside coroutines. Every benchmark
// also reports heap allocations per op (allocs_per_op), counted by the
// operator new of tests/allocation_counter.cc.
//
// On `local` these are CPU costs of the in-process backend, not network
// latencies: they bound how fast tests and the local bench can go.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "lib/fabric/fabric.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "tests/allocation_counter.h"
#include "tests/fabric_test_backends.h"

namespace dmidx {
namespace {

using fabric::Op;
using fabric::RemoteAddress;
using testing_support::AllocationMeter;

constexpr uint32_t kMaxBatch = 16;
constexpr uint32_t kBatchOpBytes = 64;
constexpr uint32_t kBenchComputeNode = 0;

ClusterOptions BenchClusterOptions() {
  ClusterOptions options;
  options.memory_nodes = 1;
  options.memory_node.pool_bytes = uint64_t{16} << 20;
  options.memory_node.chunk_bytes = uint64_t{1} << 20;
  options.memory_node.huge_pages = false;
  return options;
}

enum class OpKind { kRead, kWrite, kCompareSwap, kFetchAdd };

// Fills `ops` with `count` ops of `kind`, each on its own 1 KiB-spaced remote
// range and local buffer. A CAS always expects 0 and swaps in 0, so it
// succeeds every time and leaves the word unchanged.
void MakeOps(OpKind kind, uint32_t length, uint32_t count, RemoteAddress remote, uint8_t* local,
             std::vector<Op>* ops) {
  ops->clear();
  for (uint32_t i = 0; i < count; ++i) {
    const RemoteAddress target = remote + uint64_t{i} * 1024;
    uint8_t* buffer = local + size_t{i} * 1024;
    switch (kind) {
      case OpKind::kRead:
        ops->push_back(Op::Read(target, buffer, length));
        break;
      case OpKind::kWrite:
        ops->push_back(Op::Write(target, buffer, length));
        break;
      case OpKind::kCompareSwap:
        ops->push_back(Op::CompareSwap(target, reinterpret_cast<uint64_t*>(buffer), 0, 0));
        break;
      case OpKind::kFetchAdd:
        ops->push_back(Op::FetchAdd(target, reinterpret_cast<uint64_t*>(buffer), 1));
        break;
    }
  }
}

// Reports ops/s, payload bytes/s and heap allocations per op for
// `ops_per_iteration` ops of `bytes_per_op` bytes each per iteration.
void ReportOps(benchmark::State& state, uint32_t ops_per_iteration, uint32_t bytes_per_op,
               const AllocationMeter& meter) {
  const int64_t ops = static_cast<int64_t>(state.iterations()) * ops_per_iteration;
  state.SetItemsProcessed(ops);
  state.SetBytesProcessed(ops * bytes_per_op);
  state.counters["ops_per_batch"] = ops_per_iteration;
  state.counters["allocs_per_op"] =
      ops > 0 ? static_cast<double>(meter.allocations()) / static_cast<double>(ops) : 0.0;
}

// Posts one signaled batch and polls until it completes.
Status PostAndPoll(fabric::Endpoint& endpoint, uint16_t node, std::span<const Op> ops) {
  fabric::Completion completion;
  DMIDX_RETURN_IF_ERROR(endpoint.Post(node, ops, &completion));
  while (!completion.done())
    endpoint.Poll();
  return completion.status();
}

// ---- Endpoint driven directly ---------------------------------------------------

// A one-node cluster, one endpoint with a registered buffer, and one chunk of
// remote memory.
struct EndpointRig {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<fabric::Endpoint> endpoint;
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> buffer;
  RemoteAddress chunk;

  // On failure, marks `state` skipped and returns false.
  bool Open(benchmark::State& state) {
    Status status = Cluster::Open(BenchClusterOptions(), &cluster);
    if (!status.ok()) return Skip(state, status);
    auto& impl = static_cast<runtime::ClusterImpl&>(*cluster);
    auto connected = impl.fabric().Connect(kBenchComputeNode);
    if (!connected.ok()) return Skip(state, connected.status());
    endpoint = std::move(connected).value();
    constexpr size_t kBufferBytes = size_t{kMaxBatch} * 1024;
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kBufferBytes)));
    status = endpoint->RegisterLocal(buffer.get(), kBufferBytes);
    if (!status.ok()) return Skip(state, status);
    auto allocated = impl.controls()[0]->AllocateChunk();
    if (!allocated.ok()) return Skip(state, allocated.status());
    chunk = *allocated;
    return true;
  }

  Status PostAndPoll(std::span<const Op> ops) {
    return dmidx::PostAndPoll(*endpoint, chunk.node(), ops);
  }

  static bool Skip(benchmark::State& state, const Status& status) {
    state.SkipWithError(status.ToString().c_str());
    return false;
  }
};

void BM_EndpointOp(benchmark::State& state, OpKind kind, uint32_t length) {
  EndpointRig rig;
  if (!rig.Open(state)) return;
  std::vector<Op> ops;
  MakeOps(kind, length, 1, rig.chunk, rig.buffer.get(), &ops);
  const AllocationMeter meter;
  for (auto _ : state) {
    const Status status = rig.PostAndPoll(ops);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  ReportOps(state, 1, length, meter);
}
BENCHMARK_CAPTURE(BM_EndpointOp, read_8, OpKind::kRead, 8);
BENCHMARK_CAPTURE(BM_EndpointOp, read_64, OpKind::kRead, 64);
BENCHMARK_CAPTURE(BM_EndpointOp, read_1024, OpKind::kRead, 1024);
BENCHMARK_CAPTURE(BM_EndpointOp, write_64, OpKind::kWrite, 64);
BENCHMARK_CAPTURE(BM_EndpointOp, cas, OpKind::kCompareSwap, 8);
BENCHMARK_CAPTURE(BM_EndpointOp, faa, OpKind::kFetchAdd, 8);

// One doorbell carrying state.range(0) 64-byte READs.
void BM_EndpointBatch(benchmark::State& state) {
  const auto batch = static_cast<uint32_t>(state.range(0));
  EndpointRig rig;
  if (!rig.Open(state)) return;
  std::vector<Op> ops;
  MakeOps(OpKind::kRead, kBatchOpBytes, batch, rig.chunk, rig.buffer.get(), &ops);
  const AllocationMeter meter;
  for (auto _ : state) {
    const Status status = rig.PostAndPoll(ops);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  ReportOps(state, batch, kBatchOpBytes, meter);
}
BENCHMARK(BM_EndpointBatch)->Arg(1)->Arg(4)->Arg(16);

// ---- Each backend driven directly ------------------------------------------------

// A one-node backend built as the fabric tests build it, one endpoint with a
// registered buffer, and one chunk of remote memory.
struct BackendRig {
  std::unique_ptr<fabric_test::TestBackend> backend;
  std::unique_ptr<fabric::Endpoint> endpoint;
  std::vector<uint64_t> words = std::vector<uint64_t>(size_t{kMaxBatch} * 1024 / 8);
  RemoteAddress chunk;

  uint8_t* buffer() { return reinterpret_cast<uint8_t*>(words.data()); }

  // On failure or when the backend is not usable here, marks `state`
  // skipped and returns false.
  bool Open(benchmark::State& state, const char* name) {
    fabric_test::TestBackendOrSkip made = fabric_test::MakeTestBackend(name, {});
    if (!made.skip_reason.empty()) {
      state.SkipWithError(made.skip_reason.c_str());
      return false;
    }
    if (!made.status.ok()) return EndpointRig::Skip(state, made.status);
    backend = std::move(made.backend);
    auto connected = backend->fabric().Connect(kBenchComputeNode);
    if (!connected.ok()) return EndpointRig::Skip(state, connected.status());
    endpoint = std::move(connected).value();
    Status status = endpoint->RegisterLocal(buffer(), words.size() * sizeof(uint64_t));
    if (!status.ok()) return EndpointRig::Skip(state, status);
    auto allocated = backend->control(0).AllocateChunk();
    if (!allocated.ok()) return EndpointRig::Skip(state, allocated.status());
    chunk = *allocated;
    return true;
  }

  ~BackendRig() {
    if (endpoint) endpoint->Quiesce();
  }
};

// Posts `ops` as one signaled batch per iteration, polled to completion.
void RunPostPoll(benchmark::State& state, BackendRig& rig, std::span<const Op> ops) {
  const AllocationMeter meter;
  for (auto _ : state) {
    const Status status = PostAndPoll(*rig.endpoint, 0, ops);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  ReportOps(state, 1, ops[0].length, meter);
}

// One signaled single-op batch per iteration, polled to completion.
void BM_BackendPostPoll(benchmark::State& state, const char* backend, OpKind kind, uint32_t length,
                        uint8_t flags) {
  BackendRig rig;
  if (!rig.Open(state, backend)) return;
  std::vector<Op> ops;
  MakeOps(kind, length, 1, rig.chunk, rig.buffer(), &ops);
  ops[0].flags = flags;
  RunPostPoll(state, rig, ops);
}
// An 8-byte READ as above, after another compute node was fenced: a fence
// is the normal failure path, so it must not slow the survivors' posts.
void BM_BackendReadAfterFence(benchmark::State& state, const char* backend) {
  BackendRig rig;
  if (!rig.Open(state, backend)) return;
  const Status fenced = rig.backend->fabric().FenceComputeNode(kBenchComputeNode + 1);
  if (!fenced.ok()) {
    EndpointRig::Skip(state, fenced);
    return;
  }
  const Op read = Op::Read(rig.chunk, rig.buffer(), 8);
  RunPostPoll(state, rig, {&read, 1});
}
// 16 unsignaled one-WRITE batches and one signaled READ behind them, polled
// to completion: the cost of a post without a round trip of its own.
void BM_BackendUnsignaled(benchmark::State& state, const char* backend) {
  constexpr uint32_t kPosts = 16;
  BackendRig rig;
  if (!rig.Open(state, backend)) return;
  std::vector<Op> writes;
  MakeOps(OpKind::kWrite, kBatchOpBytes, kPosts, rig.chunk, rig.buffer(), &writes);
  const Op flush = Op::Read(rig.chunk, rig.buffer(), 8);
  const AllocationMeter meter;
  for (auto _ : state) {
    Status status;
    for (uint32_t i = 0; i < kPosts && status.ok(); ++i)
      status = rig.endpoint->Post(0, {&writes[i], 1}, nullptr);
    if (status.ok()) status = PostAndPoll(*rig.endpoint, 0, {&flush, 1});
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  ReportOps(state, kPosts + 1, kBatchOpBytes, meter);
}
#define DMIDX_BACKEND_BENCHMARKS(backend)                                                        \
  BENCHMARK_CAPTURE(BM_BackendPostPoll, backend##_read_8, #backend, OpKind::kRead, 8, 0);        \
  BENCHMARK_CAPTURE(BM_BackendPostPoll, backend##_read_64, #backend, OpKind::kRead, 64, 0);      \
  BENCHMARK_CAPTURE(BM_BackendPostPoll, backend##_write_64, #backend, OpKind::kWrite, 64, 0);    \
  BENCHMARK_CAPTURE(BM_BackendPostPoll, backend##_write_64_inline, #backend, OpKind::kWrite, 64, \
                    fabric::kInline);                                                            \
  BENCHMARK_CAPTURE(BM_BackendPostPoll, backend##_cas, #backend, OpKind::kCompareSwap, 8, 0);    \
  BENCHMARK_CAPTURE(BM_BackendUnsignaled, backend##_write_64, #backend)
DMIDX_BACKEND_BENCHMARKS(local);
DMIDX_BACKEND_BENCHMARKS(verbs);
BENCHMARK_CAPTURE(BM_BackendReadAfterFence, local_read_8, "local");
BENCHMARK_CAPTURE(BM_BackendReadAfterFence, sim_read_8, "sim");
BENCHMARK_CAPTURE(BM_BackendPostPoll, sim_read_8, "sim", OpKind::kRead, 8, 0);

// ---- Blocking ContextImpl path --------------------------------------------------

// A one-node cluster, a one-thread client and a blocking context on this
// thread, with one object of remote memory from the context's allocator.
struct ContextRig {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Client> client;
  std::unique_ptr<Context> context;
  RemoteAddress object;

  runtime::ContextImpl& ctx() const { return runtime::ContextImpl::From(*context); }

  bool Open(benchmark::State& state) {
    Status status = Cluster::Open(BenchClusterOptions(), &cluster);
    if (!status.ok()) return EndpointRig::Skip(state, status);
    status = cluster->NewClient(ClientOptions{}, &client);
    if (!status.ok()) return EndpointRig::Skip(state, status);
    status = client->NewBlockingContext(&context);
    if (!status.ok()) return EndpointRig::Skip(state, status);
    auto allocated = ctx().allocator().Allocate(size_t{kMaxBatch} * 1024, 4096);
    if (!allocated.ok()) return EndpointRig::Skip(state, allocated.status());
    object = *allocated;
    return true;
  }

  // Round trips and batches per iteration, from the context's own counters.
  void ReportStats(benchmark::State& state, const Stats& before) const {
    const Stats delta = context->stats() - before;
    state.counters["round_trips"] = benchmark::Counter(static_cast<double>(delta.round_trips),
                                                       benchmark::Counter::kAvgIterations);
    state.counters["batches"] =
        benchmark::Counter(static_cast<double>(delta.batches), benchmark::Counter::kAvgIterations);
  }
};

void BM_ContextExecuteOp(benchmark::State& state, OpKind kind, uint32_t length) {
  ContextRig rig;
  if (!rig.Open(state)) return;
  std::vector<Op> ops;
  MakeOps(kind, length, 1, rig.object, rig.ctx().scratch().data(), &ops);
  const Stats before = rig.context->stats();
  const AllocationMeter meter;
  for (auto _ : state) {
    const Status status = rig.ctx().Execute(rig.object.node(), ops);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  ReportOps(state, 1, length, meter);
  rig.ReportStats(state, before);
}
BENCHMARK_CAPTURE(BM_ContextExecuteOp, read_8, OpKind::kRead, 8);
BENCHMARK_CAPTURE(BM_ContextExecuteOp, read_64, OpKind::kRead, 64);
BENCHMARK_CAPTURE(BM_ContextExecuteOp, read_1024, OpKind::kRead, 1024);
BENCHMARK_CAPTURE(BM_ContextExecuteOp, write_64, OpKind::kWrite, 64);
BENCHMARK_CAPTURE(BM_ContextExecuteOp, cas, OpKind::kCompareSwap, 8);
BENCHMARK_CAPTURE(BM_ContextExecuteOp, faa, OpKind::kFetchAdd, 8);

void BM_ContextExecuteBatch(benchmark::State& state) {
  const auto batch = static_cast<uint32_t>(state.range(0));
  ContextRig rig;
  if (!rig.Open(state)) return;
  std::vector<Op> ops;
  MakeOps(OpKind::kRead, kBatchOpBytes, batch, rig.object, rig.ctx().scratch().data(), &ops);
  const Stats before = rig.context->stats();
  const AllocationMeter meter;
  for (auto _ : state) {
    const Status status = rig.ctx().Execute(rig.object.node(), ops);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  ReportOps(state, batch, kBatchOpBytes, meter);
  rig.ReportStats(state, before);
}
BENCHMARK(BM_ContextExecuteBatch)->Arg(1)->Arg(4)->Arg(16);

}  // namespace
}  // namespace dmidx
