// The indexes the bench can drive, by name: every row of the index
// registry (registry/registry.h), where an index joins the bench with its
// technique switches, its ladder and its sizing, and the bench's own null
// index. The bench sees only RangeIndex (dmidx/index.h) and these rows.
#ifndef DMIDX_BENCH_REGISTRY_H_
#define DMIDX_BENCH_REGISTRY_H_

#include <span>
#include <string_view>

#include "dmidx/status.h"
#include "registry/registry.h"

namespace dmidx::bench {

using registry::IndexKind;
using registry::IndexOptionDoc;
using registry::IndexSettings;
using registry::LadderSettings;
using registry::LadderStep;

// The null index first (it does nothing: its throughput is the bench's own
// ceiling on this machine), then the registry's rows in its order.
std::span<const IndexKind> RegisteredIndexes();
// The entry `name`; InvalidArgument listing the names if none.
StatusOr<const IndexKind*> FindIndex(std::string_view name);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_REGISTRY_H_
