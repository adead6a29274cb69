#include "lib/common/values.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dmidx {
namespace {

bool AllDigits(std::string_view text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

// The binary unit a size ends with (K, M, G, T, either case): its shift,
// 0 when there is none.
int UnitShift(std::string_view text) {
  if (text.empty()) return 0;
  switch (text.back()) {
    case 'k':
    case 'K':
      return 10;
    case 'm':
    case 'M':
      return 20;
    case 'g':
    case 'G':
      return 30;
    case 't':
    case 'T':
      return 40;
    default:
      return 0;
  }
}

// Messages are built by appending to one string: GCC 12 at -O3 reports a
// false -Wrestrict inside operator+ on a temporary made from a string_view.
std::string Quoted(std::string_view text) {
  std::string out = "'";
  out.append(text).append("'");
  return out;
}

std::string AtLeast(const std::string& bound, std::string_view text, bool excluded = false) {
  std::string out = excluded ? "must be > " : "must be >= ";
  out.append(bound).append(", not ").append(text);
  return out;
}

std::string AtMost(const std::string& bound, std::string_view text) {
  std::string out = "must be <= ";
  out.append(bound).append(", not ").append(text);
  return out;
}

}  // namespace

std::optional<uint64_t> ParseInteger(std::string_view text, uint64_t max) {
  if (!AllDigits(text)) return std::nullopt;
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || ptr != end || value > max) return std::nullopt;
  return value;
}

std::optional<uint64_t> ParseSize(std::string_view text) {
  const int shift = UnitShift(text);
  if (shift != 0) text.remove_suffix(1);
  const std::optional<uint64_t> value = ParseInteger(text, UINT64_MAX >> shift);
  if (!value) return std::nullopt;
  return *value << shift;
}

std::optional<double> ParseNumber(std::string_view text) {
  // from_chars decides what is a number (decimal, no '+', no space, no
  // hex); strtod gives its value also when it is out of a double's range,
  // where from_chars gives none.
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || ptr != end ||
      (error != std::errc() && error != std::errc::result_out_of_range)) {
    return std::nullopt;
  }
  if (error == std::errc::result_out_of_range)
    value = std::strtod(std::string(text).c_str(), nullptr);
  if (std::isnan(value)) return std::nullopt;
  return value;
}

std::optional<bool> ParseOnOff(std::string_view text) {
  if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
  if (text == "off" || text == "false" || text == "0" || text == "no") return false;
  return std::nullopt;
}

std::string IntegerProblem(std::string_view text, uint64_t min, uint64_t max) {
  if (const std::optional<uint64_t> value = ParseInteger(text, UINT64_MAX)) {
    if (*value < min) return AtLeast(std::to_string(min), text);
    if (*value > max) return AtMost(std::to_string(max), text);
    return "";
  }
  if (AllDigits(text)) return AtMost(std::to_string(max), text);  // beyond 64 bits
  if (text.starts_with('-') && AllDigits(text.substr(1))) return AtLeast(std::to_string(min), text);
  return Quoted(text) + " is not an integer";
}

std::string SizeProblem(std::string_view text, const SizeRule& rule) {
  if (const std::optional<uint64_t> bytes = ParseSize(text)) {
    if (*bytes < rule.min) return AtLeast(FormatSize(rule.min), text);
    if (*bytes > rule.max) return AtMost(FormatSize(rule.max), text);
    if (rule.multiple > 1 && *bytes % rule.multiple != 0) {
      std::string out = "must be a multiple of ";
      out.append(FormatSize(rule.multiple)).append(", not ").append(text);
      return out;
    }
    return "";
  }
  std::string_view number = text;
  if (UnitShift(number) != 0) number.remove_suffix(1);
  if (AllDigits(number)) return AtMost(FormatSize(rule.max), text);  // beyond 64 bits
  if (number.starts_with('-') && AllDigits(number.substr(1))) {
    return AtLeast(FormatSize(rule.min), text);
  }
  return Quoted(text) + " is not a size, e.g. 4096, 64K or 1G";
}

std::string NumberProblem(std::string_view text, const NumberRule& rule) {
  const std::optional<double> value = ParseNumber(text);
  if (!value) return Quoted(text) + " is not a number";
  if (*value < rule.min || (rule.min_excluded && *value == rule.min)) {
    return AtLeast(FormatNumber(rule.min), text, rule.min_excluded);
  }
  if (*value > rule.max) return AtMost(FormatNumber(rule.max), text);
  if (!std::isfinite(*value)) return Quoted(text) + " is not a finite number";
  return "";
}

std::string OnOffProblem(std::string_view text) {
  if (ParseOnOff(text)) return "";
  return Quoted(text) + " is not on or off (nor true/false, yes/no, 1/0)";
}

std::string FormatSize(uint64_t bytes) {
  if (bytes == 0) return "0";
  constexpr char kUnits[] = "TGMK";
  for (int i = 0; i < 4; ++i) {
    const int shift = 40 - 10 * i;
    if (bytes % (uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + kUnits[i];
  }
  return std::to_string(bytes);
}

std::string FormatNumber(double value) {
  char text[32];
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%g", value);
  }
  return text;
}

}  // namespace dmidx
