#include "tests/fabric_test_backends.h"

#include <array>
#include <chrono>
#include <utility>

#include "lib/runtime/cluster_backend.h"

namespace dmidx::fabric_test {

namespace {

// A cluster backend (runtime/cluster_backend.h) seen through the harness.
class ClusterTestBackend final : public TestBackend {
 public:
  ClusterTestBackend(std::string name, const TestBackendTraits& traits,
                     std::unique_ptr<runtime::ClusterBackend> backend)
      : name_(std::move(name)), traits_(traits), backend_(std::move(backend)) {}

  const std::string& name() const override { return name_; }
  const TestBackendTraits& traits() const override { return traits_; }
  fabric::Fabric& fabric() override { return backend_->fabric(); }
  uint16_t node_count() const override { return backend_->fabric().node_count(); }
  memnode::MemoryNodeControl& control(uint16_t node) override {
    return *backend_->controls().at(node);
  }
  memnode::MemoryNode* memory_node(uint16_t node) override {
    return backend_->in_process_memory_node(node);
  }

 private:
  const std::string name_;
  const TestBackendTraits traits_;
  const std::unique_ptr<runtime::ClusterBackend> backend_;
};

// The cluster options a test's request maps to. Verbs memory nodes are
// served by the test process over the first active RDMA device.
ClusterOptions ClusterOptionsFor(FabricBackend backend, const TestBackendOptions& options) {
  ClusterOptions cluster;
  cluster.backend = backend;
  cluster.memory_nodes = options.memory_nodes;
  cluster.memory_node = options.memory_node;
  cluster.local = options.faults;
  cluster.verbs_in_process_memory_nodes = true;
  cluster.verbs.op_timeout = std::chrono::seconds(20);
  // Under emulation (Soft-RoCE in a TCG VM) an ACK often takes longer than
  // the default ~67 ms, and the requester then resends everything from the
  // oldest unacknowledged packet; the responder executes duplicate WRITEs
  // again, so an old WRITE can land after newer ones (rxe counts them as
  // duplicate_request). Real fabrics retransmit only on loss. ~1 s keeps
  // the emulated link from retransmitting spuriously.
  cluster.verbs.ack_timeout = 18;
  return cluster;
}

struct BackendEntry {
  std::string_view name;
  FabricBackend backend;
  TestBackendTraits traits;
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

// The local fabric's knobs, in virtual time; untorn by the knobs, an op
// longer than a 64-byte line still moves its lines at random times within
// its transfer (SimOptions::tear_lines, tests/sim_test.cc), as a NIC does.
constexpr TestBackendTraits kSimTraits = [] {
  TestBackendTraits traits = kLocalTraits;
  traits.copies_words_in_ascending_order_when_not_torn = false;
  return traits;
}();

// A real NIC: no fault injection, reports the device it has.
constexpr TestBackendTraits kVerbsTraits = {};

// Every backend the suite knows, in instantiation order.
constexpr std::array<BackendEntry, 3> kBackends = {{
    {"local", FabricBackend::kLocal, kLocalTraits},
    {"sim", FabricBackend::kSim, kSimTraits},
    {"verbs", FabricBackend::kVerbs, kVerbsTraits},
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
  if ((faults.max_apply_delay.count() != 0 || faults.stall_probability > 0) && !traits.can_delay) {
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
  auto backend = runtime::ClusterBackend::Open(ClusterOptionsFor(entry->backend, options));
  if (backend.ok()) {
    result.backend = std::make_unique<ClusterTestBackend>(std::string(name), entry->traits,
                                                          std::move(backend).value());
  } else if (backend.status().IsUnavailable()) {
    result.skip_reason = "backend '" + std::string(name) + "' cannot run here (" +
                         backend.status().ToString() +
                         "); run tools/softroce-vm.sh to test the verbs backend";
  } else {
    result.status = backend.status();
  }
  return result;
}

}  // namespace dmidx::fabric_test
