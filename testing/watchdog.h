// A hang is a failure: a Watchdog aborts the process, naming the test, if it
// is not destroyed within its limit.
//
//   TEST(Foo, Bar) {
//     dmidx::testing::Watchdog watchdog(std::chrono::seconds(60));
//     ...  // anything that could wait forever on a lost wake-up
//   }
#ifndef DMIDX_TESTING_WATCHDOG_H_
#define DMIDX_TESTING_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace dmidx::testing {

class Watchdog {
 public:
  // Starts counting now. Call from a test body (the name of the running
  // test goes into the message), or anywhere with `name` given.
  explicit Watchdog(std::chrono::milliseconds limit = std::chrono::seconds(120),
                    std::string name = "");
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // Stops the count; returns at once.
  ~Watchdog();

 private:
  void Watch(std::chrono::milliseconds limit);

  const std::string name_;
  std::mutex mutex_;
  std::condition_variable cancelled_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_WATCHDOG_H_
