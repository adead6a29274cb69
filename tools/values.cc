#include "tools/values.h"

#include <charconv>

namespace dmidx::tools {

std::optional<uint64_t> ParseInteger(std::string_view text, uint64_t max) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || ptr != end || value > max) return std::nullopt;
  return value;
}

std::optional<uint64_t> ParseSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int shift = 0;
  switch (text.back()) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift != 0) text.remove_suffix(1);
  const std::optional<uint64_t> value = ParseInteger(text, UINT64_MAX >> shift);
  if (!value) return std::nullopt;
  return *value << shift;
}

std::optional<bool> ParseOnOff(std::string_view text) {
  if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
  if (text == "off" || text == "false" || text == "0" || text == "no") return false;
  return std::nullopt;
}

}  // namespace dmidx::tools
