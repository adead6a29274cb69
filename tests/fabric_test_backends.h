// Builds memory nodes and a fabric over them for the fabric conformance suite,
// by backend name, so the suite is written once and instantiated per backend.
//
//   TestBackendOptions options;
//   options.memory_nodes = 2;
//   options.faults.torn_reads = true;
//   TestBackendOrSkip made = MakeTestBackend("local", options);
//   if (!made.skip_reason.empty()) GTEST_SKIP() << made.skip_reason;
//   Fabric& fabric = made.backend->fabric();
//
// A backend that is unknown, not usable on this machine, or unable to inject a
// requested fault yields a skip reason instead of a backend. Adding a backend
// means adding one entry to the table in fabric_test_backends.cc.
#ifndef DMIDX_TESTS_FABRIC_TEST_BACKENDS_H_
#define DMIDX_TESTS_FABRIC_TEST_BACKENDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/options.h"
#include "dmidx/status.h"
#include "lib/fabric/fabric.h"
#include "lib/memnode/memory_node.h"

namespace dmidx::fabric_test {

// What a backend can do beyond the conformance contract. Tests that need one
// of these skip (or narrow themselves) on backends without it.
struct TestBackendTraits {
  // LocalFabricOptions::torn_reads / torn_writes / reorder_unfenced /
  // max_apply_delay (and stalls) can be switched on.
  bool can_tear_reads = false;
  bool can_tear_writes = false;
  bool can_reorder_unfenced = false;
  bool can_delay = false;
  // LocalFabricOptions::on_chip_lock_region decides what capabilities()
  // report about the lock region (a real NIC reports what it has).
  bool emulates_on_chip_lock_region = false;
  // With tearing off, one READ or WRITE copies its 8-byte words in ascending
  // address order. Not part of the fabric contract; it lets a test prove the
  // tearing switches really are off.
  bool copies_words_in_ascending_order_when_not_torn = false;
  // Ops are applied only inside some endpoint's Poll(), never at Post().
  bool applies_ops_only_in_poll = false;
};

// Memory-node shape small enough for tests: 2 MiB pool, 64 KiB lock region,
// 64 KiB chunks, 64 catalog entries, no huge pages.
MemoryNodeOptions SmallMemoryNodeOptions();

// What a test asks for.
struct TestBackendOptions {
  uint16_t memory_nodes = 1;
  MemoryNodeOptions memory_node = SmallMemoryNodeOptions();
  // Fault injection and emulation knobs. A backend that cannot honour a
  // requested one yields a skip reason (see TestBackendTraits).
  LocalFabricOptions faults;
};

// Memory nodes, their control paths and a fabric over them. Destroy every
// endpoint before this object.
class TestBackend {
 public:
  virtual ~TestBackend() = default;
  TestBackend(const TestBackend&) = delete;
  TestBackend& operator=(const TestBackend&) = delete;

  virtual const std::string& name() const = 0;
  virtual const TestBackendTraits& traits() const = 0;
  virtual fabric::Fabric& fabric() = 0;
  virtual uint16_t node_count() const = 0;
  // Control path of memory node `node` (< node_count()).
  virtual memnode::MemoryNodeControl& control(uint16_t node) = 0;
  // The memory node object itself when it lives in this process; nullptr when
  // it is reached only over the network.
  virtual memnode::MemoryNode* memory_node(uint16_t node) = 0;

 protected:
  TestBackend() = default;
};

// Exactly one of: backend set; skip_reason non-empty (the test cannot run
// here); status non-OK (the backend failed to start where it should have).
struct TestBackendOrSkip {
  std::unique_ptr<TestBackend> backend;
  std::string skip_reason;
  Status status;
};

// Names the conformance suite is instantiated with, in order. Every name is
// listed whether or not it is usable on this machine, so that an unusable one
// shows up as skipped rather than silently absent.
std::vector<std::string> ConformanceBackendNames();

// Traits of `name`; all false for an unknown name.
TestBackendTraits TraitsOf(std::string_view name);

TestBackendOrSkip MakeTestBackend(std::string_view name, const TestBackendOptions& options);

}  // namespace dmidx::fabric_test

#endif  // DMIDX_TESTS_FABRIC_TEST_BACKENDS_H_
