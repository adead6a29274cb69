// dmidx-memnode: a thin memory node. Offers its pool and lock region to the
// compute nodes of one cluster over RDMA and serves chunk and catalog
// requests; it runs no index logic.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "dmidx/options.h"
#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/bootstrap/memcached_handshake.h"
#include "lib/fabric/verbs/verbs_device.h"
#include "lib/memnode/memory_node.h"
#include "lib/memnode/verbs_memory_server.h"
#include "tools/cli.h"

namespace {

using dmidx::Status;

constexpr char kDescription[] =
    R"(Runs one memory node of a dmidx cluster: registers a memory pool and a lock
region with the RDMA device, joins the cluster through memcached, answers
connection requests and serves chunk/catalog requests until SIGINT or
SIGTERM. Prints one line when ready.)";
constexpr char kFooter[] = R"(SIZE takes K, M, G, T suffixes (powers of 1024).
Exit status: 0 after a clean shutdown, 1 on any setup failure, 2 on bad flags.)";

struct Flags {
  dmidx::bootstrap::BootstrapOptions bootstrap;
  dmidx::MemoryNodeOptions memory;
  dmidx::VerbsOptions verbs;
};

// The flags of dmidx-memnode into *flags.
void AddFlags(CLI::App& app, Flags* flags) {
  using dmidx::tools::AddSizeFlag;
  constexpr char kClusterGroup[] = "Cluster and device";
  constexpr char kMemoryGroup[] = "Memory";
  dmidx::tools::AddClusterFlags(app, &flags->bootstrap, &flags->verbs, kClusterGroup);
  dmidx::tools::AddSwitch(app, "--new-run", &flags->bootstrap.start_new_run,
                          "start a new run of the cluster (a new epoch); give it\n"
                          "to exactly one process per run, started first\n"
                          "(default: join the current run)")
      ->group(kClusterGroup);
  using dmidx::memnode::kChunkAlignment;
  using dmidx::memnode::kMaxRegionBytes;
  AddSizeFlag(app, "--pool-bytes", &flags->memory.pool_bytes, {.max = kMaxRegionBytes},
              "remote memory offered, e.g. 4G; at least the header,\n"
              "the catalog and one chunk (default 1G)")
      ->group(kMemoryGroup);
  // Lock words are 8 bytes.
  AddSizeFlag(app, "--lock-bytes", &flags->memory.lock_region_bytes,
              {.min = 8, .max = kMaxRegionBytes, .multiple = 8},
              "lock region, a multiple of 8; NIC device memory when\n"
              "the device has that much, host memory otherwise\n(default 256K)")
      ->group(kMemoryGroup);
  AddSizeFlag(app, "--chunk-bytes", &flags->memory.chunk_bytes,
              {.min = kChunkAlignment, .max = kMaxRegionBytes, .multiple = kChunkAlignment},
              "allocation granularity for clients, a multiple of\n4K (default 8M)")
      ->group(kMemoryGroup);
  dmidx::tools::AddIntegerFlag(app, "--catalog-entries", &flags->memory.catalog_entries, 1,
                               UINT32_MAX, "named roots the catalog holds (default 1024)")
      ->group(kMemoryGroup);
  dmidx::tools::AddOnOffFlag(app, "--huge-pages", &flags->memory.huge_pages,
                             "back the pool with 2 MiB pages when available\n(default on)")
      ->group(kMemoryGroup);
  dmidx::tools::AddHelpFlag(app, kMemoryGroup);
}

// The flags that go together: the pool holds the header, the catalog and a
// chunk. Returns nullopt when they do, else the exit code after the error.
std::optional<int> CheckFlags(const CLI::App& app, const Flags& flags) {
  const std::string pool = dmidx::tools::PoolBytesProblem(flags.memory);
  if (!pool.empty()) return dmidx::tools::BadFlag(app, "--pool-bytes: " + pool);
  return std::nullopt;
}

// RDMA registration pins memory; say how to fix a low limit before trying.
Status CheckMemlockLimit(uint64_t needed) {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return Status::Ok();
  }
  if (limit.rlim_cur >= needed) return Status::Ok();
  return Status::ResourceExhausted(
      "locked-memory limit ('ulimit -l') is " + std::to_string(limit.rlim_cur >> 10) +
      " KiB but registering the pool needs " + std::to_string(needed >> 10) +
      " KiB: run 'ulimit -l unlimited' in the shell that starts dmidx-memnode (as root), or "
      "raise memlock in /etc/security/limits.conf");
}

int Fail(const Status& status) {
  std::fprintf(stderr, "dmidx-memnode: %s\n", status.ToString().c_str());
  return 1;
}

int Run(const Flags& flags) {
  // Block the shutdown signals first, so every thread inherits the mask and
  // sigwait() below is the only one that sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Status status = CheckMemlockLimit(flags.memory.pool_bytes);
  if (!status.ok()) return Fail(status);
  auto bootstrap = dmidx::bootstrap::MemcachedBootstrap::Connect(flags.bootstrap);
  if (!bootstrap.ok()) return Fail(bootstrap.status());
  auto device = dmidx::fabric::verbs::Device::Open(flags.verbs);
  if (!device.ok()) return Fail(device.status());
  std::shared_ptr<dmidx::fabric::verbs::Device> shared_device = std::move(device).value();
  auto id = (*bootstrap)->Register(dmidx::bootstrap::NodeRole::kMemory);
  if (!id.ok()) return Fail(id.status());
  const auto node_id = static_cast<uint16_t>(*id);
  auto node = dmidx::memnode::MemoryNode::Create(node_id, flags.memory);
  if (!node.ok()) return Fail(node.status());
  dmidx::bootstrap::MemcachedHandshakeInbox inbox(bootstrap->get(), node_id);
  auto server =
      dmidx::memnode::VerbsMemoryServer::Create(node->get(), shared_device, flags.verbs, &inbox);
  if (!server.ok()) return Fail(server.status());
  status = dmidx::bootstrap::PublishRegions(bootstrap->get(), (*server)->regions());
  if (!status.ok()) return Fail(status);
  (*server)->Start();

  std::printf(
      "dmidx-memnode: memory node %u of cluster '%s' ready (epoch %llu): %llu MiB pool%s on %s "
      "port %u gid %d, lock region of %llu KiB in %s\n",
      unsigned{node_id}, flags.bootstrap.cluster.c_str(),
      static_cast<unsigned long long>((*bootstrap)->epoch()),
      static_cast<unsigned long long>(flags.memory.pool_bytes >> 20),
      (*node)->huge_pages_in_use() ? " (huge pages)" : "", shared_device->name().c_str(),
      unsigned{shared_device->port()}, shared_device->gid_index(),
      static_cast<unsigned long long>(flags.memory.lock_region_bytes >> 10),
      (*server)->lock_region_on_chip() ? "NIC device memory" : "host memory");
  std::fflush(stdout);

  int signal = 0;
  sigwait(&signals, &signal);
  (*server)->Stop();
  std::printf(
      "dmidx-memnode: memory node %u stopping on %s after %llu connections, %llu control "
      "requests\n",
      unsigned{node_id}, strsignal(signal),
      static_cast<unsigned long long>((*server)->connections()),
      static_cast<unsigned long long>((*server)->control_requests()));
  const Status served = (*server)->error();
  if (!served.ok())
    std::fprintf(stderr, "dmidx-memnode: while serving: %s\n", served.ToString().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app(kDescription, "dmidx-memnode");
  dmidx::tools::SetUpTool(app, kFooter);
  AddFlags(app, &flags);
  if (const std::optional<int> exit_code = dmidx::tools::ParseCommandLine(app, argc, argv)) {
    return *exit_code;
  }
  if (const std::optional<int> exit_code = CheckFlags(app, flags)) return *exit_code;
  return Run(flags);
}
