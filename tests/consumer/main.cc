// Builds against the installed package only (include/dmidx/), opens an
// in-process cluster and runs work on threads x coroutines.
#include <dmidx/dmidx.h>

#include <atomic>
#include <cstdio>

int main() {
  dmidx::ClusterOptions options;
  options.memory_nodes = 2;
  options.memory_node.pool_bytes = 16 << 20;
  options.memory_node.chunk_bytes = 1 << 20;
  options.memory_node.huge_pages = false;
  std::unique_ptr<dmidx::Cluster> cluster;
  dmidx::Status status = dmidx::Cluster::Open(options, &cluster);
  if (!status.ok()) {
    std::fprintf(stderr, "open: %s\n", status.ToString().c_str());
    return 1;
  }
  std::unique_ptr<dmidx::Client> client;
  status = cluster->NewClient({.threads = 2, .coroutines_per_thread = 4}, &client);
  if (!status.ok()) {
    std::fprintf(stderr, "client: %s\n", status.ToString().c_str());
    return 1;
  }
  std::atomic<int> ran{0};
  status = client->Run([&](dmidx::Context&) {
    ran.fetch_add(1);
    return dmidx::Status::Ok();
  });
  if (!status.ok() || ran.load() != 8) {
    std::fprintf(stderr, "run: %s, %d of 8 coroutines ran\n", status.ToString().c_str(),
                 ran.load());
    return 1;
  }
  std::printf("dmidx consumer: %u memory nodes, 8 coroutines ran\n", cluster->memory_node_count());
  return 0;
}
