// The bit mixer every hashed table of lock/ uses (HOCL's lock words, the
// local queues, RDWC's slots): murmur3's 64-bit finalizer, so that nearby
// addresses and keys spread over the whole table.
#ifndef DMIDX_LOCK_MIX_H_
#define DMIDX_LOCK_MIX_H_

#include <cstdint>

namespace dmidx::lock {

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_MIX_H_
