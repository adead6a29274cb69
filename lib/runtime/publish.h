#ifndef DMIDX_RUNTIME_PUBLISH_H_
#define DMIDX_RUNTIME_PUBLISH_H_

#include <cstdint>
#include <functional>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::runtime {

class ContextImpl;

// A new object of `bytes` (a multiple of 8, at least 8) from `take`, zero
// but for its first word, which is `first_word`, published by a CAS of
// `word` from 0 unless another compute node published one first: returns
// the object published. The new object goes to `give_back` when its WRITEs
// failed or it lost the race; after a failed CAS it is kept (the CAS may
// have landed, and it may be the published one). The lease directory and
// pages and the free-list directories are made so.
StatusOr<fabric::RemoteAddress> MakeAndPublish(
    ContextImpl& ctx, fabric::RemoteAddress word, uint64_t bytes, uint64_t first_word,
    const std::function<StatusOr<fabric::RemoteAddress>()>& take,
    const std::function<void(fabric::RemoteAddress)>& give_back);

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_PUBLISH_H_
