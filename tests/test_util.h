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

}  // namespace dmidx::testing_util

#endif  // DMIDX_TESTS_TEST_UTIL_H_
