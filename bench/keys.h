// The keys a run uses: key number n (0, 1, 2, ... in load and insert order)
// becomes index key bytes.
//
//   integer  8 bytes (or more, zero-extended on the left): the big-endian
//            encoding (dmidx/keys.h) of Mix64(n), or of n with ordered
//            inserts (YCSB's insertorder), so byte order is numeric order.
//   string   e-mail-like text with realistic shared prefixes: a reversed
//            domain from a small fixed list (chosen by n's hash), '/',
//            "user", then the 20 decimal digits (zero-padded) of
//            Mix64(n) (of n when ordered), padded with zero bytes to
//            `bytes`, e.g. "com.gmail/user00001234567890123456".
//            Needs at least MinBytes() bytes so that distinct numbers give
//            distinct keys.
// Mix64 (generators.h) is a bijection, so distinct numbers always give
// distinct keys (YCSB hashes key numbers with FNV, which may collide), and
// costs a third of FNV's time on every operation's path.
#ifndef DMIDX_BENCH_KEYS_H_
#define DMIDX_BENCH_KEYS_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "bench/generators.h"
#include "dmidx/status.h"

namespace dmidx::bench {

enum class KeyKind : uint8_t { kInteger, kString };
const char* KeyKindName(KeyKind kind);  // "integer", "string"
std::optional<KeyKind> ParseKeyKind(std::string_view name);

struct KeyFormat {
  KeyKind kind = KeyKind::kInteger;
  // Key size in bytes: >= 8 for integers, >= MinBytes() for strings.
  uint32_t bytes = 8;
  bool ordered = false;

  // Smallest `bytes` this kind allows.
  uint32_t MinBytes() const;
  // InvalidArgument saying the smallest allowed size when bytes is too small.
  Status Validate() const;
  // Replaces *out with the key of `number`, reusing its buffer (no
  // allocation once *out has held a key of this size). Precondition:
  // Validate() is OK.
  // Inline for the common case (an 8-byte integer key into a buffer that
  // holds one already): it is on every operation's path.
  void Format(uint64_t number, std::string* out) const {
    if (kind == KeyKind::kInteger && bytes == 8 && out->size() == 8) {
      // EncodeUint64Key's layout (dmidx/keys.h): big-endian.
      const uint64_t big_endian = __builtin_bswap64(ordered ? number : Mix64(number));
      std::memcpy(out->data(), &big_endian, 8);
      return;
    }
    FormatAny(number, out);
  }
  std::string Format(uint64_t number) const;

 private:
  void FormatAny(uint64_t number, std::string* out) const;
};

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_KEYS_H_
