#include "bench/keys.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <string>

#include "bench/generators.h"

namespace dmidx::bench {

namespace {

// Reversed mail domains: keys share long prefixes, as user names in a
// directory do, so string keys exercise prefix-heavy comparisons.
constexpr std::string_view kPrefixes[] = {
    "com.gmail/",   "com.yahoo/", "com.hotmail/",      "com.outlook/",
    "net.comcast/", "de.web/",    "org.debian.lists/", "edu.mit.csail/",
};
constexpr std::string_view kUser = "user";
// Decimal digits of any uint64_t: 18446744073709551615 has 20.
constexpr size_t kDigits = 20;

constexpr size_t LongestPrefix() {
  size_t longest = 0;
  for (std::string_view prefix : kPrefixes)
    longest = std::max(longest, prefix.size());
  return longest;
}

// `value` as exactly kDigits decimal digits, zero-padded on the left, so
// that every number has its own digits and they sort numerically.
// Two digits a step from a table of "00".."99" (half the divisions; this
// is on every operation's path with string keys).
constexpr auto kDigitPairs = [] {
  std::array<char, 200> pairs{};
  for (int i = 0; i < 100; ++i) {
    pairs[2 * i] = static_cast<char>('0' + i / 10);
    pairs[2 * i + 1] = static_cast<char>('0' + i % 10);
  }
  return pairs;
}();

void WriteDigits(uint64_t value, char* out) {
  static_assert(kDigits % 2 == 0);
  for (size_t i = kDigits; i > 0; i -= 2) {
    std::memcpy(out + i - 2, &kDigitPairs[2 * (value % 100)], 2);
    value /= 100;
  }
}

}  // namespace

const char* KeyKindName(KeyKind kind) {
  switch (kind) {
    case KeyKind::kInteger:
      return "integer";
    case KeyKind::kString:
      return "string";
  }
  return "unknown";
}

std::optional<KeyKind> ParseKeyKind(std::string_view name) {
  if (name == "integer") return KeyKind::kInteger;
  if (name == "string") return KeyKind::kString;
  return std::nullopt;
}

uint32_t KeyFormat::MinBytes() const {
  return kind == KeyKind::kInteger
             ? 8
             : static_cast<uint32_t>(LongestPrefix() + kUser.size() + kDigits);
}

Status KeyFormat::Validate() const {
  if (bytes >= MinBytes()) return Status::Ok();
  return Status::InvalidArgument(std::string(KeyKindName(kind)) + " keys of " +
                                 std::to_string(bytes) + " bytes are too small; the minimum is " +
                                 std::to_string(MinBytes()) + " bytes");
}

void KeyFormat::FormatAny(uint64_t number, std::string* out) const {
  const uint64_t hash = Mix64(number);
  const uint64_t value = ordered ? number : hash;
  if (kind == KeyKind::kInteger) {
    // EncodeUint64Key's layout (dmidx/keys.h), written in place: zeros, then
    // the 8 bytes big-endian, so byte order is numeric order. Eight-byte
    // keys (on every operation's path) skip clearing the buffer.
    if (bytes == 8) {
      if (out->size() != 8) out->resize(8);
    } else {
      out->assign(bytes, '\0');
    }
    if (bytes < 8) return;  // Validate() rejects this format
    const uint64_t big_endian = __builtin_bswap64(value);
    std::memcpy(out->data() + bytes - 8, &big_endian, 8);
    return;
  }
  // Assigning into *out reuses its buffer: no allocation once it has held
  // a key of this size.
  out->assign(bytes, '\0');
  char* key = out->data();
  // The hash's top byte picks the prefix, spread over keys whatever the
  // insert order.
  const std::string_view prefix = kPrefixes[(hash >> 56) % std::size(kPrefixes)];
  if (bytes < MinBytes()) return;  // Validate() rejects this format
  std::memcpy(key, prefix.data(), prefix.size());
  std::memcpy(key + prefix.size(), kUser.data(), kUser.size());
  WriteDigits(value, key + prefix.size() + kUser.size());
}

std::string KeyFormat::Format(uint64_t number) const {
  std::string key;
  Format(number, &key);
  return key;
}

}  // namespace dmidx::bench
