// Kept for tests not yet moved to the testing library (hocl_test.cc): the
// watchdog and local-cluster helpers under their old names. New code
// includes testing/watchdog.h and testing/local_cluster.h.
#ifndef DMIDX_TESTS_TEST_UTIL_H_
#define DMIDX_TESTS_TEST_UTIL_H_

#include "testing/local_cluster.h"
#include "testing/watchdog.h"

namespace dmidx::testing_util {

using ::dmidx::testing::AllLocalFaults;
using ::dmidx::testing::SmallLocalCluster;
using ::dmidx::testing::Watchdog;

}  // namespace dmidx::testing_util

#endif  // DMIDX_TESTS_TEST_UTIL_H_
