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
#include <getopt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/keys.h"
#include "lib/fabric/op.h"
#include "lib/runtime/client.h"
#include "lib/runtime/context.h"
#include "tools/command_line.h"

namespace {

using dmidx::Status;
using dmidx::fabric::Op;
using dmidx::fabric::RemoteAddress;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] = R"(Usage: dmidx-cluster-check [options]

Joins a dmidx cluster as one compute node, runs threads doing FAA, CAS and
lock-protected READ/WRITE on shared words, waits for the other clients at a
barrier, and checks that the totals are exact. Then all clients insert into
one B+tree and check every key. Exits 0 when both are exact.

  --backend=verbs|local    verbs: join memory nodes through memcached
                           (default); local: an in-process cluster (no RDMA)
  --memory-nodes=N         memory nodes to wait for (default 1)
  --clients=N              compute nodes taking part (default 1)
  --threads=N              threads in this client (default 2)
  --ops=N                  ops per thread on each word, and keys each thread
                           puts in the B+tree (default 200)
  --timeout=SECONDS        bound on every wait: barriers, lock waits (default 60)
  --die-after-start        exit abruptly right after the start barrier (for
                           failure tests: the others must report it, not hang)
  --help                   show this help
Cluster and device (verbs):
)";

struct Flags {
  dmidx::ClusterOptions cluster;
  uint32_t clients = 1;
  uint32_t threads = 2;
  uint64_t ops = 200;
  std::chrono::seconds timeout{60};
  bool die_after_start = false;
};

int BadFlag(const std::string& message) {
  return dmidx::tools::BadFlag("dmidx-cluster-check", message);
}

int ParseFlags(int argc, char** argv, Flags* flags) {
  enum { kBackend = 1, kMemoryNodes, kClients, kThreads, kOps, kTimeout, kDie };
  flags->cluster.backend = dmidx::FabricBackend::kVerbs;
  flags->cluster.memory_node.pool_bytes = uint64_t{64} << 20;
  flags->cluster.memory_node.chunk_bytes = uint64_t{1} << 20;
  flags->cluster.memory_node.huge_pages = false;
  const int parsed = dmidx::tools::ParseCommandLine(
      "dmidx-cluster-check", argc, argv,
      {{"backend", required_argument, nullptr, kBackend},
       {"memory-nodes", required_argument, nullptr, kMemoryNodes},
       {"clients", required_argument, nullptr, kClients},
       {"threads", required_argument, nullptr, kThreads},
       {"ops", required_argument, nullptr, kOps},
       {"timeout", required_argument, nullptr, kTimeout},
       {"die-after-start", no_argument, nullptr, kDie}},
      std::string(kUsage) + dmidx::tools::kClusterFlagsHelp, &flags->cluster.bootstrap,
      &flags->cluster.verbs,
      [&](int id, const std::string& name, const std::string& value) -> std::string {
        switch (id) {
          case kBackend:
            if (value == "verbs") {
              flags->cluster.backend = dmidx::FabricBackend::kVerbs;
            } else if (value == "local") {
              flags->cluster.backend = dmidx::FabricBackend::kLocal;
            } else {
              return "--backend takes verbs or local";
            }
            return "";
          case kDie:
            flags->die_after_start = true;
            return "";
        }
        const uint64_t max = id == kOps           ? 100000000
                             : id == kMemoryNodes ? 65535
                             : id == kTimeout     ? 86400
                                                  : 255;
        const auto n = dmidx::tools::ParseInteger(value, max);
        if (!n || *n == 0) {
          return "bad value '" + value + "' for --" + name + " (an integer in [1, " +
                 std::to_string(max) + "])";
        }
        if (id == kMemoryNodes) flags->cluster.memory_nodes = static_cast<uint32_t>(*n);
        if (id == kClients) flags->clients = static_cast<uint32_t>(*n);
        if (id == kThreads) flags->threads = static_cast<uint32_t>(*n);
        if (id == kOps) flags->ops = *n;
        if (id == kTimeout) flags->timeout = std::chrono::seconds(*n);
        return "";
      });
  if (parsed >= 0) return parsed;
  if (flags->cluster.backend == dmidx::FabricBackend::kLocal && flags->clients != 1) {
    return BadFlag("--backend=local runs one client; --clients must be 1");
  }
  flags->cluster.bootstrap.wait_timeout = flags->timeout;
  return -1;
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
    auto slot = client_impl.CatalogSlot(names[i], true);
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
  const int parsed = ParseFlags(argc, argv, &flags);
  if (parsed >= 0) return parsed;
  return Run(flags);
}
