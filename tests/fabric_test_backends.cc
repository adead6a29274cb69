#include "tests/fabric_test_backends.h"

#include <array>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "lib/fabric/local_fabric.h"
#include "lib/fabric/verbs/handshake.h"
#include "lib/fabric/verbs/verbs_fabric.h"
#include "lib/memnode/verbs_memory_server.h"

namespace dmidx::fabric_test {

namespace {

// What every backend built here shares: a name, traits, memory nodes of this
// process, their control paths and the fabric. Members are destroyed fabric
// first, then control paths, then the memory the fabric points into.
class InProcessTestBackend : public TestBackend {
 public:
  InProcessTestBackend(std::string name, const TestBackendTraits& traits)
      : name_(std::move(name)), traits_(traits) {}

  const std::string& name() const override { return name_; }
  const TestBackendTraits& traits() const override { return traits_; }
  fabric::Fabric& fabric() override { return *fabric_; }
  uint16_t node_count() const override { return static_cast<uint16_t>(nodes_.size()); }
  memnode::MemoryNodeControl& control(uint16_t node) override { return *controls_.at(node); }
  memnode::MemoryNode* memory_node(uint16_t node) override { return nodes_.at(node).get(); }

 protected:
  std::vector<std::unique_ptr<memnode::MemoryNode>> nodes_;
  std::vector<std::unique_ptr<memnode::MemoryNodeControl>> controls_;
  std::unique_ptr<fabric::Fabric> fabric_;

 private:
  const std::string name_;
  const TestBackendTraits traits_;
};

// In-process memory nodes under a LocalFabric.
class LocalTestBackend final : public InProcessTestBackend {
 public:
  using InProcessTestBackend::InProcessTestBackend;

  Status Start(const TestBackendOptions& options) {
    std::vector<fabric::LocalNodeMemory> memories;
    for (uint16_t id = 0; id < options.memory_nodes; ++id) {
      auto node = memnode::MemoryNode::Create(id, options.memory_node);
      if (!node.ok()) return node.status().WithContext("memory node " + std::to_string(id));
      memnode::MemoryNode& created = **node;
      memories.push_back({created.pool_base(), created.pool_bytes(), created.lock_base(),
                          created.lock_region_bytes()});
      controls_.push_back(std::make_unique<memnode::LocalMemoryNodeControl>(&created));
      nodes_.push_back(std::move(node).value());
    }
    auto fabric = fabric::LocalFabric::Create(options.faults, std::move(memories));
    if (!fabric.ok()) return fabric.status().WithContext("local fabric");
    fabric_ = std::move(fabric).value();
    return Status::Ok();
  }
};

TestBackendOrSkip MakeLocal(std::string_view name, const TestBackendTraits& traits,
                            const TestBackendOptions& options) {
  auto backend = std::make_unique<LocalTestBackend>(std::string(name), traits);
  TestBackendOrSkip result;
  result.status = backend->Start(options);
  if (result.status.ok()) result.backend = std::move(backend);
  return result;
}

// Memory nodes in this process served by VerbsMemoryServer over a real RDMA
// device, reached through a VerbsFabric: the same code paths as separate
// processes, minus memcached. DMIDX_TEST_MN_DEVICE and DMIDX_TEST_CN_DEVICE
// pick the devices (default: the first active one for both).
class VerbsTestBackend final : public InProcessTestBackend {
 public:
  using InProcessTestBackend::InProcessTestBackend;

  ~VerbsTestBackend() override {
    for (auto& server : servers_)
      server->Stop();
  }

  // Unavailable when there is no usable device (the caller skips then).
  Status Start(const TestBackendOptions& options) {
    VerbsOptions verbs;
    verbs.op_timeout = std::chrono::seconds(20);
    // Under emulation (Soft-RoCE in a TCG VM) an ACK often takes longer than
    // the default ~67 ms, and the requester then resends everything from the
    // oldest unacknowledged packet; the responder executes duplicate WRITEs
    // again, so an old WRITE can land after newer ones (rxe counts them as
    // duplicate_request). Real fabrics retransmit only on loss. ~1 s keeps
    // the emulated link from retransmitting spuriously.
    verbs.ack_timeout = 18;
    verbs.device = EnvOr("DMIDX_TEST_MN_DEVICE", "");
    DMIDX_ASSIGN_OR_RETURN(std::shared_ptr<fabric::verbs::Device> mn_device,
                           fabric::verbs::Device::Open(verbs));
    VerbsOptions client_verbs = verbs;
    client_verbs.device = EnvOr("DMIDX_TEST_CN_DEVICE", "");
    DMIDX_ASSIGN_OR_RETURN(std::shared_ptr<fabric::verbs::Device> cn_device,
                           fabric::verbs::Device::Open(client_verbs));
    std::vector<fabric::verbs::RegionInfo> regions;
    for (uint16_t id = 0; id < options.memory_nodes; ++id) {
      DMIDX_ASSIGN_OR_RETURN(auto node, memnode::MemoryNode::Create(id, options.memory_node));
      DMIDX_ASSIGN_OR_RETURN(auto server, memnode::VerbsMemoryServer::Create(
                                              node.get(), mn_device, verbs, handshake_.inbox(id)));
      server->Start();
      regions.push_back(server->regions());
      nodes_.push_back(std::move(node));
      servers_.push_back(std::move(server));
    }
    for (uint16_t id = 0; id < options.memory_nodes; ++id) {
      DMIDX_ASSIGN_OR_RETURN(auto control, memnode::VerbsMemoryNodeControl::Create(
                                               id, cn_device, client_verbs, &handshake_));
      controls_.push_back(std::move(control));
    }
    DMIDX_ASSIGN_OR_RETURN(fabric_, fabric::verbs::VerbsFabric::Create(
                                        client_verbs, cn_device, std::move(regions), &handshake_));
    return Status::Ok();
  }

 private:
  static std::string EnvOr(const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return value ? value : fallback;
  }

  fabric::verbs::InProcessHandshake handshake_;
  std::vector<std::unique_ptr<memnode::VerbsMemoryServer>> servers_;
};

TestBackendOrSkip MakeVerbs(std::string_view name, const TestBackendTraits& traits,
                            const TestBackendOptions& options) {
  auto backend = std::make_unique<VerbsTestBackend>(std::string(name), traits);
  TestBackendOrSkip result;
  Status status = backend->Start(options);
  if (status.ok()) {
    result.backend = std::move(backend);
  } else if (status.IsUnavailable()) {
    result.skip_reason = "no usable RDMA device here (" + status.ToString() +
                         "); run tools/softroce-vm.sh to test the verbs backend";
  } else {
    result.status = status;
  }
  return result;
}

struct BackendEntry {
  std::string_view name;
  TestBackendTraits traits;
  TestBackendOrSkip (*make)(std::string_view name, const TestBackendTraits& traits,
                            const TestBackendOptions& options);
};

constexpr TestBackendTraits kLocalTraits = {
    .can_tear_reads = true,
    .can_tear_writes = true,
    .can_reorder_unfenced = true,
    .can_delay = true,
    .emulates_on_chip_lock_region = true,
    .copies_words_in_ascending_order_when_not_torn = true,
    .applies_ops_only_in_poll = true,
};

// A real NIC: no fault injection, reports the device it has.
constexpr TestBackendTraits kVerbsTraits = {};

// Every backend the suite knows, in instantiation order.
constexpr std::array<BackendEntry, 2> kBackends = {{
    {"local", kLocalTraits, &MakeLocal},
    {"verbs", kVerbsTraits, &MakeVerbs},
}};

const BackendEntry* FindBackend(std::string_view name) {
  for (const BackendEntry& entry : kBackends) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

// Why `options` asks for something `name` cannot do; empty when it can.
std::string UnsupportedFault(std::string_view name, const TestBackendTraits& traits,
                             const LocalFabricOptions& faults) {
  const std::string prefix = "fabric backend '" + std::string(name) + "' cannot ";
  if (faults.torn_reads && !traits.can_tear_reads) return prefix + "inject torn READs";
  if (faults.torn_writes && !traits.can_tear_writes) return prefix + "inject torn WRITEs";
  if (faults.reorder_unfenced && !traits.can_reorder_unfenced) {
    return prefix + "reorder unfenced ops on purpose";
  }
  if (faults.max_apply_delay.count() != 0 && !traits.can_delay) {
    return prefix + "inject apply delays";
  }
  if (faults.on_chip_lock_region && !traits.emulates_on_chip_lock_region) {
    return prefix + "emulate an on-chip lock region";
  }
  return "";
}

}  // namespace

MemoryNodeOptions SmallMemoryNodeOptions() {
  MemoryNodeOptions options;
  options.pool_bytes = uint64_t{2} << 20;
  options.lock_region_bytes = uint64_t{64} << 10;
  options.chunk_bytes = uint64_t{64} << 10;
  options.huge_pages = false;
  options.catalog_entries = 64;
  return options;
}

std::vector<std::string> ConformanceBackendNames() {
  std::vector<std::string> names;
  for (const BackendEntry& entry : kBackends)
    names.emplace_back(entry.name);
  return names;
}

TestBackendTraits TraitsOf(std::string_view name) {
  const BackendEntry* entry = FindBackend(name);
  return entry ? entry->traits : TestBackendTraits{};
}

TestBackendOrSkip MakeTestBackend(std::string_view name, const TestBackendOptions& options) {
  TestBackendOrSkip result;
  const BackendEntry* entry = FindBackend(name);
  if (entry == nullptr) {
    result.skip_reason = "unknown fabric backend '" + std::string(name) + "'";
    return result;
  }
  result.skip_reason = UnsupportedFault(name, entry->traits, options.faults);
  if (!result.skip_reason.empty()) return result;
  return entry->make(name, entry->traits, options);
}

}  // namespace dmidx::fabric_test
