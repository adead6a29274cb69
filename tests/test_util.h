// Helpers shared by the test suites.
#ifndef DMIDX_TESTS_TEST_UTIL_H_
#define DMIDX_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "dmidx/options.h"

namespace dmidx::testing_util {

// Aborts the process if not destroyed within `limit`: a hang is a failure.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit = std::chrono::seconds(120))
      : name_(::testing::UnitTest::GetInstance()->current_test_info()->name()),
        thread_([this, limit] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cancelled_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "watchdog: %s still running after %lld s (lost wake-up?)\n",
                         name_.c_str(), static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      done_ = true;
    }
    cancelled_.notify_one();
    thread_.join();
  }

 private:
  const std::string name_;
  std::mutex mutex_;
  std::condition_variable cancelled_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;
};

// Every fault the local fabric can inject, at small settings: apply delays,
// torn READs and WRITEs, WRITEs overtaking READs/atomics.
inline LocalFabricOptions AllLocalFaults(std::chrono::microseconds max_delay) {
  LocalFabricOptions faults;
  faults.max_apply_delay = max_delay;
  faults.torn_reads = true;
  faults.torn_writes = true;
  faults.reorder_unfenced = true;
  return faults;
}

// A small in-process cluster: `memory_nodes` MNs of `pool_bytes`, 1 MiB
// chunks, no huge pages, all faults injected when `faults`.
inline ClusterOptions SmallLocalCluster(uint32_t memory_nodes, uint64_t pool_bytes, bool faults,
                                        std::chrono::microseconds max_delay) {
  ClusterOptions options;
  options.memory_nodes = memory_nodes;
  options.memory_node.pool_bytes = pool_bytes;
  options.memory_node.chunk_bytes = 1 << 20;
  options.memory_node.huge_pages = false;
  if (faults) options.local = AllLocalFaults(max_delay);
  return options;
}

}  // namespace dmidx::testing_util

#endif  // DMIDX_TESTS_TEST_UTIL_H_
