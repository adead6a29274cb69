// Index keys are fixed-size byte strings per index, ordered as unsigned
// big-endian bytes (memcmp order). These helpers encode integers so that
// that byte order is the numeric order.
#ifndef DMIDX_KEYS_H_
#define DMIDX_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace dmidx {

// `value` as `key_bytes` (>= 8) bytes: zeros, then 8 bytes big-endian.
// Byte order of the results is numeric order. key_bytes < 8 keeps only the
// low key_bytes bytes (order holds for values below 2^(8*key_bytes)).
inline std::string EncodeUint64Key(uint64_t value, size_t key_bytes = 8) {
  std::string key(key_bytes, '\0');
  for (size_t i = 0; i < key_bytes && i < 8; ++i) {
    key[key_bytes - 1 - i] = static_cast<char>((value >> (8 * i)) & 0xff);
  }
  return key;
}

// Signed integers: the sign bit flipped, so negative values sort first.
inline std::string EncodeInt64Key(int64_t value, size_t key_bytes = 8) {
  return EncodeUint64Key(static_cast<uint64_t>(value) ^ (uint64_t{1} << 63), key_bytes);
}

// Inverse of EncodeUint64Key: the last min(8, size) bytes, big-endian.
inline uint64_t DecodeUint64Key(const std::string& key) {
  uint64_t value = 0;
  const size_t n = key.size() < 8 ? key.size() : 8;
  for (size_t i = 0; i < n; ++i) {
    value |= uint64_t{static_cast<uint8_t>(key[key.size() - 1 - i])} << (8 * i);
  }
  return value;
}

inline int64_t DecodeInt64Key(const std::string& key) {
  return static_cast<int64_t>(DecodeUint64Key(key) ^ (uint64_t{1} << 63));
}

}  // namespace dmidx

#endif  // DMIDX_KEYS_H_
