// The index suites: checks every RangeIndex must pass, written once as
// TEST_P over an IndexRow (testing/index_factory.h) and instantiated with
// DMIDX_INSTANTIATE_INDEX_SUITES over every registered index's rows
// (tests/index_suites_test.cc). Nothing here names an index type.
//
//   IndexModelSuite        sequential model checks, 100k mixed operations,
//                          every operation from coroutines
//   IndexBulkLoadSuite     loads of every size, fill factor and key size;
//                          bad input; non-empty indexes
//   IndexConcurrencySuite  a linearizability history with faults, hot keys,
//                          concurrent inserts, scans under splits
//   IndexCostSuite         round trips and bytes of warm single operations
//   IndexFaultSuite        a write with one batch failing at every step
//                          leaves its key usable
//   IndexChurnSuite        inserts, updates and deletes writing ten
//                          times the pool: what is freed is reused
//   IndexContractSuite     what dmidx/index.h promises on errors: scans
//                          failing mid-way, damaged nodes, a dead lock
//                          holder, a batch failing in each step of splits,
//                          merges and bulk loads
#ifndef DMIDX_TESTS_INDEX_SUITES_H_
#define DMIDX_TESTS_INDEX_SUITES_H_

#include <gtest/gtest.h>

#include "testing/index_factory.h"

namespace dmidx::testing {

class IndexModelSuite : public ::testing::TestWithParam<IndexRow> {};
class IndexBulkLoadSuite : public ::testing::TestWithParam<IndexRow> {};
class IndexConcurrencySuite : public ::testing::TestWithParam<IndexRow> {};
class IndexCostSuite : public ::testing::TestWithParam<IndexRow> {};
class IndexFaultSuite : public ::testing::TestWithParam<IndexRow> {};
class IndexContractSuite : public ::testing::TestWithParam<IndexRow> {};
class IndexChurnSuite : public ::testing::TestWithParam<IndexRow> {};

}  // namespace dmidx::testing

// Instantiates every index suite with the rows `generator` yields (a
// ::testing::Values or ValuesIn expression), test names prefixed `prefix`.
#define DMIDX_INSTANTIATE_INDEX_SUITES(prefix, generator)                                        \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexModelSuite, generator, ::dmidx::testing::RowName);       \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexBulkLoadSuite, generator, ::dmidx::testing::RowName);    \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexConcurrencySuite, generator, ::dmidx::testing::RowName); \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexCostSuite, generator, ::dmidx::testing::RowName);        \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexFaultSuite, generator, ::dmidx::testing::RowName);       \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexContractSuite, generator, ::dmidx::testing::RowName);    \
  INSTANTIATE_TEST_SUITE_P(prefix, IndexChurnSuite, generator, ::dmidx::testing::RowName)

#endif  // DMIDX_TESTS_INDEX_SUITES_H_
