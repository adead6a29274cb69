// dmidx-memnode: a thin memory node. Offers its pool and lock region to the
// compute nodes of one cluster over RDMA and serves chunk and catalog
// requests; it runs no index logic.
#include <getopt.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "dmidx/options.h"
#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/bootstrap/memcached_handshake.h"
#include "lib/fabric/verbs/verbs_device.h"
#include "lib/memnode/memory_node.h"
#include "lib/memnode/verbs_memory_server.h"
#include "tools/command_line.h"

namespace {

using dmidx::Status;

constexpr char kUsagePrefix[] = R"(Usage: dmidx-memnode [options]

Runs one memory node of a dmidx cluster: registers a memory pool and a lock
region with the RDMA device, joins the cluster through memcached, answers
connection requests and serves chunk/catalog requests until SIGINT or
SIGTERM. Prints one line when ready.

Cluster and device:
)";
constexpr char kUsageSuffix[] =
    R"(  --new-run                start a new run of the cluster (a new epoch); give it
                           to exactly one process per run, started first
                           (default: join the current run)
Memory:
  --pool-bytes=SIZE        remote memory offered, e.g. 4G (default 1G)
  --lock-bytes=SIZE        lock region; NIC device memory when the device has
                           that much, host memory otherwise (default 256K)
  --chunk-bytes=SIZE       allocation granularity for clients, a multiple of
                           4K (default 8M)
  --catalog-entries=N      named roots the catalog holds (default 1024)
  --huge-pages=on|off      back the pool with 2 MiB pages when available
                           (default on)
  --help                   show this help

SIZE takes K, M, G, T suffixes (powers of 1024).
Exit status: 0 after a clean shutdown, 1 on any setup failure, 2 on bad flags.
)";

struct Flags {
  dmidx::bootstrap::BootstrapOptions bootstrap;
  dmidx::MemoryNodeOptions memory;
  dmidx::VerbsOptions verbs;
};

// Returns -1 when flags are fine, else the exit code.
int ParseFlags(int argc, char** argv, Flags* flags) {
  using dmidx::tools::ParseBool;
  using dmidx::tools::ParseInteger;
  using dmidx::tools::ParseSize;
  enum { kNewRun = 1, kPoolBytes, kLockBytes, kChunkBytes, kCatalogEntries, kHugePages };
  const std::string help =
      std::string(kUsagePrefix) + dmidx::tools::kClusterFlagsHelp + kUsageSuffix;
  return dmidx::tools::ParseCommandLine(
      "dmidx-memnode", argc, argv,
      {{"new-run", no_argument, nullptr, kNewRun},
       {"pool-bytes", required_argument, nullptr, kPoolBytes},
       {"lock-bytes", required_argument, nullptr, kLockBytes},
       {"chunk-bytes", required_argument, nullptr, kChunkBytes},
       {"catalog-entries", required_argument, nullptr, kCatalogEntries},
       {"huge-pages", required_argument, nullptr, kHugePages}},
      help, &flags->bootstrap, &flags->verbs,
      [&](int id, const std::string&, const std::string& value) -> std::string {
        switch (id) {
          case kNewRun:
            flags->bootstrap.start_new_run = true;
            return "";
          case kPoolBytes:
          case kLockBytes:
          case kChunkBytes: {
            const auto size = ParseSize(value);
            if (!size) return "'" + value + "' is not a size";
            (id == kPoolBytes   ? flags->memory.pool_bytes
             : id == kLockBytes ? flags->memory.lock_region_bytes
                                : flags->memory.chunk_bytes) = *size;
            return "";
          }
          case kCatalogEntries: {
            const auto n = ParseInteger(value, UINT32_MAX);
            if (!n || *n == 0) return "--catalog-entries needs a positive integer";
            flags->memory.catalog_entries = static_cast<uint32_t>(*n);
            return "";
          }
          case kHugePages: {
            const auto on = ParseBool(value);
            if (!on) return "--huge-pages takes on or off";
            flags->memory.huge_pages = *on;
            return "";
          }
        }
        return "unhandled flag";
      });
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
  const int parsed = ParseFlags(argc, argv, &flags);
  if (parsed >= 0) return parsed;
  return Run(flags);
}
