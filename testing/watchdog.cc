#include "testing/watchdog.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace dmidx::testing {
namespace {

std::string CurrentTestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : "(no test)";
}

}  // namespace

Watchdog::Watchdog(std::chrono::milliseconds limit, std::string name)
    : name_(name.empty() ? CurrentTestName() : std::move(name)),
      thread_([this, limit] { Watch(limit); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    done_ = true;
  }
  cancelled_.notify_one();
  thread_.join();
}

void Watchdog::Watch(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancelled_.wait_for(lock, limit, [this] { return done_; })) return;
  std::fprintf(stderr, "watchdog: %s still running after %lld ms (lost wake-up?)\n", name_.c_str(),
               static_cast<long long>(limit.count()));
  std::abort();
}

}  // namespace dmidx::testing
