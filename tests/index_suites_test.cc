// The index suites (tests/index_suites.h) over every registered index
// (registry/registry.h) in each of its configurations (its defaults, every
// technique off, ...), with each index's test hooks
// (tests/index_test_hooks.h). A new index joins with its registry row and
// its hooks; index_registry_test.cc fails until it has both.
#include "tests/index_suites.h"

#include "tests/index_test_hooks.h"

namespace dmidx::testing {
namespace {

DMIDX_INSTANTIATE_INDEX_SUITES(Registry, ::testing::ValuesIn(RegistryRows(IndexHooks())));

}  // namespace
}  // namespace dmidx::testing
