#include "testing/run_clients.h"

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "lib/runtime/client.h"

namespace dmidx::testing {

// On the runtime's one way to run clients together (runtime::RunClients),
// so the clients' coroutines go to the cluster's executor in one go. Each
// context writes only its own result slot; a client's status is the first
// non-OK one in (thread, coroutine) order, as Client::Run reports.
std::vector<Status> RunClients(std::span<Client* const> clients, const ClientWork& work) {
  std::vector<std::vector<Status>> slots(clients.size());
  std::atomic<bool> ran{false};
  std::vector<Client::Work> works;
  for (size_t index = 0; index < clients.size(); ++index) {
    const ClientOptions& shape = clients[index]->options();
    slots[index].resize(size_t{shape.threads} * shape.coroutines_per_thread);
    works.push_back([&, index](Context& ctx) {
      const int client = static_cast<int>(index);
      const size_t slot =
          size_t(ctx.thread_index()) * shape.coroutines_per_thread + size_t(ctx.coroutine_index());
      ran.store(true, std::memory_order_relaxed);
      Status status = work(client, ctx);
      slots[index][slot] = status;
      return status;
    });
  }
  const Status together = runtime::RunClients(clients, works);
  std::vector<Status> results(clients.size());
  for (size_t index = 0; index < clients.size(); ++index) {
    for (const Status& status : slots[index]) {
      if (!status.ok()) {
        results[index] = status;
        break;
      }
    }
  }
  // Refused before anything ran (a client already running, say): every
  // client reports why.
  if (!together.ok() && !ran.load()) {
    for (Status& result : results) {
      if (result.ok()) result = together;
    }
  }
  return results;
}

int ContextIndex(int client, const Context& ctx, const ClientOptions& shape) {
  const int threads = static_cast<int>(shape.threads);
  const int coroutines = static_cast<int>(shape.coroutines_per_thread);
  return (client * threads + ctx.thread_index()) * coroutines + ctx.coroutine_index();
}

void RunThreadsTogether(int threads, const std::function<void(int thread)>& body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads)
        std::this_thread::yield();
      body(t);
    });
  }
  for (std::thread& thread : running)
    thread.join();
}

}  // namespace dmidx::testing
