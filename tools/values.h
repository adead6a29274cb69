// The value rules of every dmidx tool's flags (and of the bench's index
// settings): integers, sizes with binary units, on/off. No dependencies, so
// builds without verbs use them too.
#ifndef DMIDX_TOOLS_VALUES_H_
#define DMIDX_TOOLS_VALUES_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace dmidx::tools {

// Value rules.
//
// A decimal integer (digits only: no sign, no spaces, no 0x) no larger than
// `max`; nullopt otherwise.
std::optional<uint64_t> ParseInteger(std::string_view text, uint64_t max);
// "4096", "64K", "256M", "1G", "2T" (binary units, case-insensitive);
// nullopt for anything else or an overflow.
std::optional<uint64_t> ParseSize(std::string_view text);
// "on"/"off", "true"/"false", "1"/"0", "yes"/"no".
std::optional<bool> ParseOnOff(std::string_view text);

}  // namespace dmidx::tools

#endif  // DMIDX_TOOLS_VALUES_H_
