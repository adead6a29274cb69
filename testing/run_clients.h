// Runs several clients together, as separate compute nodes would.
//
//   std::vector<dmidx::Client*> clients = {a.get(), b.get()};
//   std::vector<dmidx::Status> results =
//       dmidx::testing::RunClients(clients, [&](int client, dmidx::Context& ctx) {
//         return index[client]->Insert(ctx, key, value);
//       });
//
// Every multi-client test goes through RunClients, so that how clients run
// together is the runtime's business (runtime::RunClients hands every
// client's workers to the cluster's executor at once).
#ifndef DMIDX_TESTING_RUN_CLIENTS_H_
#define DMIDX_TESTING_RUN_CLIENTS_H_

#include <functional>
#include <span>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/status.h"

namespace dmidx::testing {

// The work of one context: `client` is the index of its client in the span
// given to RunClients.
using ClientWork = std::function<Status(int client, Context& ctx)>;

// Runs work(client, ctx) on every context of every client at once (each
// client's Client::Run, all of them started together) and returns when all
// have ended: each client's Run status, in the order of `clients`. `work`
// is called from many threads at once.
std::vector<Status> RunClients(std::span<Client* const> clients, const ClientWork& work);

// The index of `ctx` among the contexts of all clients when every client
// has `shape`'s threads and coroutines per thread: 0 ..
// clients * threads * coroutines - 1, unique per context.
int ContextIndex(int client, const Context& ctx, const ClientOptions& shape);

// Runs body(t) on `threads` plain threads (no client), released together so
// that their calls really overlap, and returns when all have ended.
void RunThreadsTogether(int threads, const std::function<void(int thread)>& body);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_RUN_CLIENTS_H_
