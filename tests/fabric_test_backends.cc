#include "tests/fabric_test_backends.h"

#include <array>
#include <utility>

#include "fabric/local_fabric.h"

namespace dmidx::fabric_test {

namespace {

// In-process memory nodes under a LocalFabric.
class LocalTestBackend final : public TestBackend {
 public:
  LocalTestBackend(std::string name, const TestBackendTraits& traits)
      : name_(std::move(name)), traits_(traits) {}

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

  const std::string& name() const override { return name_; }
  const TestBackendTraits& traits() const override { return traits_; }
  fabric::Fabric& fabric() override { return *fabric_; }
  uint16_t node_count() const override { return static_cast<uint16_t>(nodes_.size()); }
  memnode::MemoryNodeControl& control(uint16_t node) override { return *controls_.at(node); }
  memnode::MemoryNode* memory_node(uint16_t node) override { return nodes_.at(node).get(); }

 private:
  const std::string name_;
  const TestBackendTraits traits_;
  std::vector<std::unique_ptr<memnode::MemoryNode>> nodes_;
  std::vector<std::unique_ptr<memnode::LocalMemoryNodeControl>> controls_;
  // Declared last so it is destroyed before the memory it points into.
  std::unique_ptr<fabric::LocalFabric> fabric_;
};

TestBackendOrSkip MakeLocal(std::string_view name, const TestBackendTraits& traits,
                            const TestBackendOptions& options) {
  auto backend = std::make_unique<LocalTestBackend>(std::string(name), traits);
  TestBackendOrSkip result;
  result.status = backend->Start(options);
  if (result.status.ok()) result.backend = std::move(backend);
  return result;
}

TestBackendOrSkip MakeVerbs(std::string_view, const TestBackendTraits&, const TestBackendOptions&) {
  TestBackendOrSkip result;
  result.skip_reason =
      "fabric backend 'verbs' is not built into this test yet (no rdma-core backend)";
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
