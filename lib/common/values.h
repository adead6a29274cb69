// The value rules of textual settings: every tool's flags and the index
// registry's settings (registry/registry.h). Integers, sizes with binary
// units, real numbers, on/off, and what to tell the user when a value
// breaks them. No dependencies, so builds without verbs use them too.
#ifndef DMIDX_COMMON_VALUES_H_
#define DMIDX_COMMON_VALUES_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace dmidx {

// Value rules.
//
// A decimal integer (digits only: no sign, no spaces, no 0x) no larger than
// `max`; nullopt otherwise.
std::optional<uint64_t> ParseInteger(std::string_view text, uint64_t max);
// "4096", "64K", "256M", "1G", "2T" (binary units, case-insensitive);
// nullopt for anything else or an overflow.
std::optional<uint64_t> ParseSize(std::string_view text);
// A finite or infinite decimal number ("0.5", "1e9", "-3", "inf"; no hex,
// no leading '+' or space); nullopt for anything else, and for NaN.
// Magnitudes beyond a double are infinite, below its smallest are zero.
std::optional<double> ParseNumber(std::string_view text);
// "on"/"off", "true"/"false", "1"/"0", "yes"/"no".
std::optional<bool> ParseOnOff(std::string_view text);

// Bounds of a size: min <= bytes <= max and bytes a multiple of `multiple`.
struct SizeRule {
  uint64_t min = 0;
  uint64_t max = std::numeric_limits<uint64_t>::max();
  uint64_t multiple = 1;
};

// Bounds of a real number: min <= x (min < x when min_excluded) and x <= max.
// An infinite max only asks for a finite number.
struct NumberRule {
  double min = 0;
  double max = std::numeric_limits<double>::infinity();
  bool min_excluded = false;
};

// What is wrong with `text` as a value of a rule, in the user's terms, as
// an error message reads it after "--flag: " (or "index.option: "); "" when
// nothing is. The value as given ends the message:
//
//   must be >= 1, not 0             below min (a negative number too)
//   must be <= 255, not 300         above max (an overflow too)
//   must be a multiple of 4K, not 5000
//   '12Q' is not a size, e.g. 4096, 64K or 1G
//   'abc' is not an integer         'abc' is not a number
//   'inf' is not a finite number
//   'maybe' is not on or off (nor true/false, yes/no, 1/0)
//
// Bounds are written as the values are: sizes with the largest unit that
// divides them (FormatSize), numbers without a needless exponent.
std::string IntegerProblem(std::string_view text, uint64_t min, uint64_t max);
std::string SizeProblem(std::string_view text, const SizeRule& rule);
std::string NumberProblem(std::string_view text, const NumberRule& rule);
std::string OnOffProblem(std::string_view text);

// `bytes` as ParseSize reads it back, with the largest binary unit that
// divides it: 8388608 -> "8M", 4096 -> "4K", 1000 -> "1000".
std::string FormatSize(uint64_t bytes);
// `value` as text: integers in full ("1000000000"), others as %g ("0.001").
std::string FormatNumber(double value);

}  // namespace dmidx

#endif  // DMIDX_COMMON_VALUES_H_
