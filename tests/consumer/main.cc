// Builds against the installed package only (include/dmidx/), opens an
// in-process cluster, runs work on threads x coroutines, and drives a
// B+tree through the RangeIndex interface as an engine would.
#include <dmidx/dmidx.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <vector>

int main() {
  dmidx::ClusterOptions options;
  options.memory_nodes = 2;
  options.memory_node.pool_bytes = 16 << 20;
  options.memory_node.chunk_bytes = 1 << 20;
  options.memory_node.huge_pages = false;
  options.lease.period = std::chrono::milliseconds(100);
  options.lease.timeout = std::chrono::seconds(1);
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
  std::unique_ptr<dmidx::BTree> tree;
  status = dmidx::BTree::Open(client.get(), "consumer", {}, &tree);
  dmidx::RangeIndex& index = *tree;
  std::vector<dmidx::KeyValue> page;
  if (status.ok()) {
    status = client->Run([&](dmidx::Context& ctx) -> dmidx::Status {
      const uint64_t me = static_cast<uint64_t>(ctx.thread_index() * 4 + ctx.coroutine_index());
      return index.Insert(ctx, dmidx::EncodeUint64Key(me), me * 10);
    });
  }
  if (status.ok()) {
    std::unique_ptr<dmidx::Context> ctx;
    status = client->NewBlockingContext(&ctx);
    if (status.ok()) {
      status = index.Scan(*ctx, dmidx::EncodeUint64Key(2), dmidx::EncodeUint64Key(5), &page);
    }
  }
  if (!status.ok() || page.size() != 4 || page[0].value != 20) {
    std::fprintf(stderr, "btree: %s, %zu keys scanned\n", status.ToString().c_str(), page.size());
    return 1;
  }
  std::printf("dmidx consumer: %u memory nodes, 8 coroutines ran, scanned %zu keys\n",
              cluster->memory_node_count(), page.size());
  return 0;
}
