// The registry's rows, one function per index (registry/<name>_kind.cc);
// registry.cc lists them.
#ifndef DMIDX_REGISTRY_KINDS_H_
#define DMIDX_REGISTRY_KINDS_H_

#include "registry/registry.h"

namespace dmidx::registry {

IndexKind BTreeKind();
IndexKind RadixKind();

}  // namespace dmidx::registry

#endif  // DMIDX_REGISTRY_KINDS_H_
