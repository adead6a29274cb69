// Umbrella header: everything an engine needs.
#ifndef DMIDX_DMIDX_H_
#define DMIDX_DMIDX_H_

#include "dmidx/btree.h"
#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/keys.h"
#include "dmidx/options.h"
#include "dmidx/radix.h"
#include "dmidx/stats.h"
#include "dmidx/status.h"

#endif  // DMIDX_DMIDX_H_
