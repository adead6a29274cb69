// Small helpers the tools' main() functions share for parsing flags.
#ifndef DMIDX_TOOLS_COMMAND_LINE_H_
#define DMIDX_TOOLS_COMMAND_LINE_H_

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace dmidx::tools {

// "4096", "64K", "256M", "1G", "2T" (binary units, case-insensitive); nullopt
// for anything else or an overflow.
inline std::optional<uint64_t> ParseSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t multiplier = 1;
  switch (text.back()) {
    case 'k':
    case 'K':
      multiplier = uint64_t{1} << 10;
      break;
    case 'm':
    case 'M':
      multiplier = uint64_t{1} << 20;
      break;
    case 'g':
    case 'G':
      multiplier = uint64_t{1} << 30;
      break;
    case 't':
    case 'T':
      multiplier = uint64_t{1} << 40;
      break;
    default:
      break;
  }
  if (multiplier != 1) text.remove_suffix(1);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string digits(text);
  errno = 0;
  const unsigned long long value = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno == ERANGE || value > UINT64_MAX / multiplier) return std::nullopt;
  return value * multiplier;
}

// A non-negative integer no larger than `max`; nullopt otherwise.
inline std::optional<uint64_t> ParseInteger(std::string_view text, uint64_t max) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string digits(text);
  errno = 0;
  const unsigned long long value = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno == ERANGE || value > max) return std::nullopt;
  return value;
}

// "on"/"off", "true"/"false", "1"/"0", "yes"/"no".
inline std::optional<bool> ParseBool(std::string_view text) {
  if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
  if (text == "off" || text == "false" || text == "0" || text == "no") return false;
  return std::nullopt;
}

}  // namespace dmidx::tools

#endif  // DMIDX_TOOLS_COMMAND_LINE_H_
