// dmidx-cluster-check: one compute node of a correctness check across a
// cluster. Every client (process) runs threads that hammer three shared words
// with one-sided ops, then all meet at a barrier and verify exact totals:
//
//   faa    FETCH_AND_ADD +1 per op
//   cas    read, then CAS v -> v+1, retried until it wins
//   data   guarded by a lock word: CAS lock 0 -> me, READ data, then
//          WRITE data+1 and WRITE lock = 0 in one ordered batch
//
// Each must end at clients x threads x ops. A wrong total means lost updates.
//
// Then a B+tree shared by all clients (256-byte nodes, so it splits often):
// every thread inserts `ops` keys of its own and upserts keys of a small
// range all share, and after a barrier each client checks, by Lookup and by
// one full Scan, that every key is there once with a value its writer
// wrote.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/keys.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "tools/cli.h"

namespace {

using dmidx::Status;
using dmidx::fabric::Op;
using dmidx::fabric::RemoteAddress;
using Clock = std::chrono::steady_clock;

constexpr char kDescription[] =
    R"(Joins a dmidx cluster as one compute node, runs threads doing FAA, CAS and
lock-protected READ/WRITE on shared words, waits for the other clients at a
barrier, and checks that the totals are exact. Then all clients insert into
one B+tree and check every key. Exits 0 when both are exact.)";
constexpr char kFooter[] =
    R"(Exit status: 0 when both checks are exact, 1 on a mismatch or any failure,
2 on bad flags.)";

struct Flags {
  dmidx::ClusterOptions cluster;
  uint32_t clients = 1;
  uint32_t threads = 2;
  uint64_t ops = 200;
  std::chrono::seconds timeout{60};
  bool die_after_start = false;
};

// The flags of dmidx-cluster-check into *flags, and the defaults of what
// they do not set.
void AddFlags(CLI::App& app, Flags* flags) {
  using dmidx::tools::AddIntegerFlag;
  flags->cluster.backend = dmidx::FabricBackend::kVerbs;
  flags->cluster.memory_node.pool_bytes = uint64_t{64} << 20;
  flags->cluster.memory_node.chunk_bytes = uint64_t{1} << 20;
  flags->cluster.memory_node.huge_pages = false;
  constexpr char kGroup[] = "Options";
  dmidx::tools::AddChoiceFlag(
      app, "--backend", {"verbs", "local"},
      [flags](const std::string& backend) {
        flags->cluster.backend =
            backend == "local" ? dmidx::FabricBackend::kLocal : dmidx::FabricBackend::kVerbs;
      },
      "verbs: join memory nodes through memcached\n"
      "(default); local: an in-process cluster (no RDMA)")
      ->group(kGroup);
  AddIntegerFlag(app, "--memory-nodes", &flags->cluster.memory_nodes, 1, 65535,
                 "memory nodes to wait for (default 1)")
      ->group(kGroup);
  AddIntegerFlag(app, "--clients", &flags->clients, 1, 255, "compute nodes taking part (default 1)")
      ->group(kGroup);
  AddIntegerFlag(app, "--threads", &flags->threads, 1, 255, "threads in this client (default 2)")
      ->group(kGroup);
  AddIntegerFlag(app, "--ops", &flags->ops, 1, 100000000,
                 "ops per thread on each word, and keys each thread\n"
                 "puts in the B+tree (default 200)")
      ->group(kGroup);
  AddIntegerFlag(
      app, "--timeout", 1, 86400,
      [flags](uint64_t seconds) { flags->timeout = std::chrono::seconds(seconds); },
      "bound on every wait: barriers, lock waits (default 60)")
      ->type_name("SECONDS")
      ->group(kGroup);
  dmidx::tools::AddSwitch(app, "--die-after-start", &flags->die_after_start,
                          "exit abruptly right after the start barrier (for\n"
                          "failure tests: the others must report it, not hang)")
      ->group(kGroup);
  dmidx::tools::AddHelpFlag(app, kGroup);
  dmidx::tools::AddClusterFlags(app, &flags->cluster.bootstrap, &flags->cluster.verbs,
                                "Cluster and device (verbs)");
}

// Returns nullopt when the tool should run, else its exit code.
std::optional<int> ParseFlags(int argc, char** argv, Flags* flags) {
  CLI::App app(kDescription, "dmidx-cluster-check");
  dmidx::tools::SetUpTool(app, kFooter);
  AddFlags(app, flags);
  if (const std::optional<int> exit_code = dmidx::tools::ParseCommandLine(app, argc, argv)) {
    return exit_code;
  }
  if (flags->cluster.backend == dmidx::FabricBackend::kLocal && flags->clients != 1) {
    return dmidx::tools::BadFlag(app,
                                 "--clients: must be 1 with --backend=local (one client in "
                                 "this process), not " +
                                     std::to_string(flags->clients));
  }
  flags->cluster.bootstrap.wait_timeout = flags->timeout;
  return std::nullopt;
}

// The B+tree phase: owned keys (client, thread, i) -> value derived from the
// key, and upserts of shared keys whose value names the key.
constexpr uint64_t kSharedKeys = 64;
uint64_t OwnedKey(uint64_t client, uint64_t thread, uint64_t i) {
  return (client << 48) | (thread << 32) | (i + kSharedKeys);  // --ops < 2^32 - 64
}
uint64_t SharedKey(uint64_t client, uint64_t thread, uint64_t i) {
  return (i * 7 + thread + client) % kSharedKeys;
}
uint64_t OwnedValue(uint64_t key) {
  return key * 0x9e3779b97f4a7c15ull;
}

Status FillTree(dmidx::BTree& tree, dmidx::Context& ctx, uint64_t ops, uint64_t client) {
  const auto thread = static_cast<uint64_t>(ctx.thread_index());
  for (uint64_t i = 0; i < ops; ++i) {
    const uint64_t key = OwnedKey(client, thread, i);
    DMIDX_RETURN_IF_ERROR(tree.Insert(ctx, dmidx::EncodeUint64Key(key), OwnedValue(key)));
    const uint64_t shared = SharedKey(client, thread, i);
    DMIDX_RETURN_IF_ERROR(
        tree.Insert(ctx, dmidx::EncodeUint64Key(shared), (shared << 32) | (client << 16) | i));
  }
  return Status::Ok();
}

// Every owned key of every client by Lookup, and the whole tree by one Scan:
// exactly the owned keys plus shared keys holding values made for them.
Status CheckTree(dmidx::BTree& tree, dmidx::Context& ctx, const Flags& flags) {
  uint64_t owned = 0;
  std::vector<bool> written(kSharedKeys);
  for (uint64_t client = 0; client < flags.clients; ++client) {
    for (uint64_t thread = 0; thread < flags.threads; ++thread) {
      for (uint64_t i = 0; i < flags.ops; ++i, ++owned) {
        written[SharedKey(client, thread, i)] = true;
        const uint64_t key = OwnedKey(client, thread, i);
        uint64_t value = 0;
        DMIDX_RETURN_IF_ERROR(tree.Lookup(ctx, dmidx::EncodeUint64Key(key), &value));
        if (value != OwnedValue(key)) {
          return Status::Internal("key " + std::to_string(key) + " holds " + std::to_string(value));
        }
      }
    }
  }
  std::vector<dmidx::KeyValue> all;
  DMIDX_RETURN_IF_ERROR(tree.Scan(ctx, dmidx::EncodeUint64Key(0), SIZE_MAX, &all));
  const auto shared = static_cast<uint64_t>(std::count(written.begin(), written.end(), true));
  for (size_t i = 0; i < all.size(); ++i) {
    const uint64_t key = dmidx::DecodeUint64Key(all[i].key);
    if (i > 0 && !(all[i - 1].key < all[i].key)) {
      return Status::Internal("scan out of order at key " + std::to_string(key));
    }
    if (key < kSharedKeys) {
      if (!written[key]) {
        return Status::Internal("shared key " + std::to_string(key) + " was never written");
      }
      if (all[i].value >> 32 != key) {
        return Status::Internal("shared key " + std::to_string(key) + " holds a value for key " +
                                std::to_string(all[i].value >> 32));
      }
    } else if (all[i].value != OwnedValue(key)) {
      return Status::Internal("scan: key " + std::to_string(key) + " holds " +
                              std::to_string(all[i].value));
    }
  }
  if (all.size() != owned + shared) {
    return Status::Internal("scan returned " + std::to_string(all.size()) + " keys, expected " +
                            std::to_string(owned) + " owned and " + std::to_string(shared) +
                            " shared");
  }
  return Status::Ok();
}

struct Words {
  RemoteAddress faa, cas, lock, data;
};

// One thread's share of the work on the three words.
Status Hammer(dmidx::runtime::ContextImpl& ctx, const Words& words, uint64_t ops, uint64_t owner,
              Clock::duration timeout) {
  auto* scratch = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  const uint16_t node = words.faa.node();
  for (uint64_t i = 0; i < ops; ++i) {
    const Op faa = Op::FetchAdd(words.faa, &scratch[0], 1);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&faa, 1}));

    // CAS loop: learn the value with a CAS that cannot succeed (0 -> 0 leaves
    // 0 alone), then try v -> v + 1 until no one else got there first.
    uint64_t seen = 0;
    for (;;) {
      const Op cas = Op::CompareSwap(words.cas, &scratch[1], seen, seen + 1);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&cas, 1}));
      if (scratch[1] == seen) break;
      seen = scratch[1];
    }

    // Lock, read, then write back and release in one ordered batch: WRITEs
    // of one connection land in order, so nobody sees the lock free before
    // the data is written.
    const Clock::time_point deadline = Clock::now() + timeout;
    for (;;) {
      const Op acquire = Op::CompareSwap(words.lock, &scratch[2], 0, owner);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&acquire, 1}));
      if (scratch[2] == 0) break;
      if (Clock::now() > deadline) {
        return Status::DeadlineExceeded("lock word held by client " + std::to_string(scratch[2]) +
                                        " for longer than the timeout (did it die?)");
      }
      std::this_thread::yield();
    }
    const Op read = Op::Read(words.data, &scratch[3], 8);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&read, 1}));
    scratch[4] = scratch[3] + 1;
    scratch[5] = 0;
    const Op release[2] = {Op::Write(words.data, &scratch[4], 8),
                           Op::Write(words.lock, &scratch[5], 8)};
    DMIDX_RETURN_IF_ERROR(ctx.Execute(node, release));
  }
  return Status::Ok();
}

int Fail(const Status& status) {
  std::fprintf(stderr, "dmidx-cluster-check: %s\n", status.ToString().c_str());
  return 1;
}

int Run(const Flags& flags) {
  std::unique_ptr<dmidx::Cluster> cluster;
  Status status = dmidx::Cluster::Open(flags.cluster, &cluster);
  if (!status.ok()) return Fail(status);
  dmidx::runtime::ClusterBackend& backend =
      static_cast<dmidx::runtime::ClusterImpl&>(*cluster).backend();

  std::unique_ptr<dmidx::Client> client;
  status = cluster->NewClient({.threads = flags.threads}, &client);
  if (!status.ok()) return Fail(status);
  auto& client_impl = static_cast<dmidx::runtime::ClientImpl&>(*client);
  const uint64_t me = client_impl.id();
  Words words;
  RemoteAddress* slots[] = {&words.faa, &words.cas, &words.lock, &words.data};
  const char* names[] = {"check/faa", "check/cas", "check/lock", "check/data"};
  for (int i = 0; i < 4; ++i) {
    auto slot = client_impl.CatalogWord(names[i], true);
    if (!slot.ok()) return Fail(slot.status());
    *slots[i] = *slot;
  }
  auto barrier = [&](const char* name) {
    return backend.Barrier(name, flags.clients, flags.timeout);
  };
  status = barrier("check-start");
  if (!status.ok()) return Fail(status);
  if (flags.die_after_start) {
    std::fprintf(stderr, "dmidx-cluster-check: client %llu dying on purpose\n",
                 static_cast<unsigned long long>(me));
    std::_Exit(9);
  }
  status = client->Run([&](dmidx::Context& context) {
    return Hammer(dmidx::runtime::ContextImpl::From(context), words, flags.ops, me + 1,
                  flags.timeout);
  });
  if (!status.ok()) return Fail(status);
  status = barrier("check-done");
  if (!status.ok()) return Fail(status);

  std::unique_ptr<dmidx::Context> context;
  status = client->NewBlockingContext(&context);
  if (!status.ok()) return Fail(status);
  auto& ctx = dmidx::runtime::ContextImpl::From(*context);
  auto* values = reinterpret_cast<uint64_t*>(ctx.scratch().data());
  const Op reads[3] = {Op::Read(words.faa, &values[0], 8), Op::Read(words.cas, &values[1], 8),
                       Op::Read(words.data, &values[2], 8)};
  status = ctx.Execute(words.faa.node(), reads);
  if (!status.ok()) return Fail(status);
  const uint64_t expected = uint64_t{flags.clients} * flags.threads * flags.ops;
  bool exact = values[0] == expected && values[1] == expected && values[2] == expected;
  std::printf(
      "dmidx-cluster-check: client %llu: faa=%llu cas=%llu data=%llu expected=%llu %s; "
      "%s\n",
      static_cast<unsigned long long>(me), static_cast<unsigned long long>(values[0]),
      static_cast<unsigned long long>(values[1]), static_cast<unsigned long long>(values[2]),
      static_cast<unsigned long long>(expected), exact ? "EXACT" : "MISMATCH",
      client->stats().ToString().c_str());
  std::fflush(stdout);

  dmidx::BTreeOptions tree_options;
  tree_options.node_bytes = 256;
  std::unique_ptr<dmidx::BTree> tree;
  status = dmidx::BTree::Open(client.get(), "check/btree", tree_options, &tree);
  if (!status.ok()) return Fail(status);
  status =
      client->Run([&](dmidx::Context& worker) { return FillTree(*tree, worker, flags.ops, me); });
  if (!status.ok()) return Fail(status);
  status = barrier("btree-done");
  if (!status.ok()) return Fail(status);
  status = CheckTree(*tree, *context, flags);
  std::printf("dmidx-cluster-check: client %llu: btree %s%s\n", static_cast<unsigned long long>(me),
              status.ok() ? "EXACT" : "FAILED: ", status.ok() ? "" : status.ToString().c_str());
  std::printf("%s", tree->stats().ToString().c_str());
  exact = exact && status.ok();
  // Nobody may leave (and take its memory registrations down) before all
  // have read the totals.
  status = barrier("check-verified");
  if (!status.ok()) return Fail(status);
  return exact ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (const std::optional<int> exit_code = ParseFlags(argc, argv, &flags)) return *exit_code;
  return Run(flags);
}
