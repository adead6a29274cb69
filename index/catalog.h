// Named indexes in the cluster catalog: the open-or-create-and-publish every
// index does on Open. An index's name maps to a catalog slot (an 8-byte
// word on the catalog's memory node) that holds its descriptor's address, 0
// until someone created it.
//
//   DMIDX_ASSIGN_OR_RETURN(RemoteAddress descriptor,
//       index::OpenOrCreate(ctx, slot, [&](ContextImpl& ctx, index::MadeObjects* made) {
//         ... allocate through `made`, write the empty index and its descriptor ...
//         return descriptor_address;
//       }));
#ifndef DMIDX_INDEX_CATALOG_H_
#define DMIDX_INDEX_CATALOG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

// Remote objects a creation made: given back if the creation fails before
// publishing or loses the race to publish; kept once published (or when a
// publish may have landed: freeing a live index is worse than a leak).
class MadeObjects {
 public:
  // Allocates `bytes` (64-byte aligned) on `node` (any: round-robin).
  StatusOr<fabric::RemoteAddress> Allocate(runtime::ContextImpl& ctx, uint64_t bytes,
                                           std::optional<uint16_t> node = std::nullopt);
  void FreeAll(runtime::ContextImpl& ctx);
  void Keep() { objects_.clear(); }

 private:
  std::vector<std::pair<fabric::RemoteAddress, uint64_t>> objects_;  // address, bytes
};

// Makes an empty index and its descriptor (allocating through `made`) and
// returns the descriptor's address; nothing is published yet.
using CreateDescriptor =
    std::function<StatusOr<fabric::RemoteAddress>(runtime::ContextImpl&, MadeObjects*)>;

// The descriptor `slot` names: read from the slot or, when the slot is
// empty, made by `create` and published into the slot with a CAS from 0.
// Of compute nodes racing to create one name exactly one wins; the others
// free what they made and return the winner's descriptor. An error before
// publishing frees what was made; a failed publish CAS keeps it (the CAS may
// have landed) and returns the error.
StatusOr<fabric::RemoteAddress> OpenOrCreate(runtime::ContextImpl& ctx, fabric::RemoteAddress slot,
                                             const CreateDescriptor& create);

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_CATALOG_H_
