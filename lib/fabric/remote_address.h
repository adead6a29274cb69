// A 64-bit pointer into the memory of a memory node.
//
//   63            48 47 46                                          0
//  +----------------+--+---------------------------------------------+
//  | memory node id |R | offset within the region (47 bits)          |
//  +----------------+--+---------------------------------------------+
//
// R selects the region: 0 = the MN's pool, 1 = its lock region. The raw value
// 0 is null; pool offset 0 of node 0 is the MN header, never an object, so no
// valid object address is 0.
#ifndef DMIDX_FABRIC_REMOTE_ADDRESS_H_
#define DMIDX_FABRIC_REMOTE_ADDRESS_H_

#include <cstdint>
#include <string>

namespace dmidx::fabric {

enum class Region : uint8_t { kPool = 0, kLock = 1 };

class RemoteAddress {
 public:
  static constexpr int kOffsetBits = 47;
  static constexpr uint64_t kMaxOffset = (uint64_t{1} << kOffsetBits) - 1;
  static constexpr uint32_t kMaxNodes = 1u << 16;

  constexpr RemoteAddress() = default;  // null

  static constexpr RemoteAddress FromRaw(uint64_t raw) { return RemoteAddress(raw); }
  // Preconditions: offset <= kMaxOffset.
  static constexpr RemoteAddress Pool(uint16_t node, uint64_t offset) {
    return RemoteAddress(Pack(node, Region::kPool, offset));
  }
  static constexpr RemoteAddress Lock(uint16_t node, uint64_t offset) {
    return RemoteAddress(Pack(node, Region::kLock, offset));
  }

  constexpr uint64_t raw() const { return raw_; }
  constexpr bool is_null() const { return raw_ == 0; }
  constexpr uint16_t node() const { return static_cast<uint16_t>(raw_ >> 48); }
  constexpr Region region() const {
    return ((raw_ >> kOffsetBits) & 1) ? Region::kLock : Region::kPool;
  }
  constexpr uint64_t offset() const { return raw_ & kMaxOffset; }

  // Same node and region, offset moved by `delta` bytes. The caller keeps the
  // result within the region.
  constexpr RemoteAddress operator+(uint64_t delta) const {
    return RemoteAddress(Pack(node(), region(), offset() + delta));
  }

  friend constexpr bool operator==(RemoteAddress a, RemoteAddress b) = default;
  friend constexpr auto operator<=>(RemoteAddress a, RemoteAddress b) = default;

  // "mn3:pool+0x1000", "mn0:lock+0x40" or "null".
  std::string ToString() const;

 private:
  constexpr explicit RemoteAddress(uint64_t raw) : raw_(raw) {}
  static constexpr uint64_t Pack(uint16_t node, Region region, uint64_t offset) {
    return (uint64_t{node} << 48) | (uint64_t{region == Region::kLock} << kOffsetBits) |
           (offset & kMaxOffset);
  }

  uint64_t raw_ = 0;
};

static_assert(sizeof(RemoteAddress) == 8);
static_assert(RemoteAddress::Pool(0, 0).is_null());
static_assert(RemoteAddress::Pool(0xffff, RemoteAddress::kMaxOffset).node() == 0xffff);
static_assert(RemoteAddress::Lock(7, 0x40).region() == Region::kLock);
static_assert(RemoteAddress::Lock(7, 0x40).offset() == 0x40);

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_REMOTE_ADDRESS_H_
