#include "testing/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace dmidx::testing {
namespace {

TEST(WatchdogTest, DestroyedInTimeDoesNothing) {
  const auto start = std::chrono::steady_clock::now();
  { Watchdog watchdog(std::chrono::seconds(60)); }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(WatchdogDeathTest, AbortsNamingTheTestWhenItOutlivesItsLimit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Watchdog watchdog(std::chrono::milliseconds(50));
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      "watchdog: WatchdogDeathTest.AbortsNamingTheTestWhenItOutlivesItsLimit still running "
      "after 50 ms");
}

}  // namespace
}  // namespace dmidx::testing
