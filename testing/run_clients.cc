#include "testing/run_clients.h"

#include <cstddef>
#include <thread>

namespace dmidx::testing {

std::vector<Status> RunClients(std::span<Client* const> clients, const ClientWork& work) {
  std::vector<Status> results(clients.size());
  std::vector<std::thread> threads;
  threads.reserve(clients.size());
  for (size_t index = 0; index < clients.size(); ++index) {
    threads.emplace_back([&, index] {
      const int client = static_cast<int>(index);
      results[index] = clients[index]->Run([&](Context& ctx) { return work(client, ctx); });
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  return results;
}

int ContextIndex(int client, const Context& ctx, const ClientOptions& shape) {
  const int threads = static_cast<int>(shape.threads);
  const int coroutines = static_cast<int>(shape.coroutines_per_thread);
  return (client * threads + ctx.thread_index()) * coroutines + ctx.coroutine_index();
}

}  // namespace dmidx::testing
