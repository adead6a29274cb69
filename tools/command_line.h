// Small helpers the tools' main() functions share for parsing flags.
#ifndef DMIDX_TOOLS_COMMAND_LINE_H_
#define DMIDX_TOOLS_COMMAND_LINE_H_

#include <getopt.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/options.h"
#include "lib/bootstrap/memcached_bootstrap.h"

namespace dmidx::tools {

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

// "4096", "64K", "256M", "1G", "2T" (binary units, case-insensitive); nullopt
// for anything else or an overflow.
inline std::optional<uint64_t> ParseSize(std::string_view text) {
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

// Prints "PROGRAM: MESSAGE (see --help)" and returns 2, the exit code of a
// bad flag.
inline int BadFlag(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s (see --help)\n", program, message.c_str());
  return 2;
}

// "on"/"off", "true"/"false", "1"/"0", "yes"/"no".
inline std::optional<bool> ParseBool(std::string_view text) {
  if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
  if (text == "off" || text == "false" || text == "0" || text == "no") return false;
  return std::nullopt;
}

// The flags every tool that joins a cluster takes: which memcached and
// cluster, which RDMA device. Ids start at kClusterFlagBase; a tool's own
// ids must stay below it.
inline constexpr int kClusterFlagBase = 900;
enum ClusterFlag : int {
  kMemcachedFlag = kClusterFlagBase,
  kClusterNameFlag,
  kDeviceFlag,
  kPortFlag,
  kGidIndexFlag,
  kClusterFlagEnd,
};

inline constexpr char kClusterFlagsHelp[] =
    R"(  --memcached=HOST[:PORT]  memcached server used for bootstrap
                           (default 127.0.0.1:11211)
  --cluster=NAME           cluster name; clusters with different names share
                           one memcached without interfering (default "default")
  --device=NAME            RDMA device as ibv_devices lists it (default: the
                           first with an active port)
  --port=N                 device port (default 1)
  --gid-index=N            GID index (default: the RoCE v2 IPv4-mapped GID if
                           any, else 0)
)";

// `own` (without its terminator) followed by the cluster flags and the
// terminator getopt_long needs.
inline std::vector<option> WithClusterFlags(std::vector<option> own) {
  for (option flag : {option{"memcached", required_argument, nullptr, kMemcachedFlag},
                      option{"cluster", required_argument, nullptr, kClusterNameFlag},
                      option{"device", required_argument, nullptr, kDeviceFlag},
                      option{"port", required_argument, nullptr, kPortFlag},
                      option{"gid-index", required_argument, nullptr, kGidIndexFlag},
                      option{nullptr, 0, nullptr, 0}}) {
    own.push_back(flag);
  }
  return own;
}

inline bool IsClusterFlag(int id) {
  return id >= kClusterFlagBase && id < kClusterFlagEnd;
}

// Applies cluster flag `id`; returns an error message, or "" when fine.
inline std::string ApplyClusterFlag(int id, const std::string& value, BootstrapOptions* bootstrap,
                                    VerbsOptions* verbs) {
  switch (id) {
    case kMemcachedFlag:
      if (auto server = bootstrap::ParseServerAddress(value); !server.ok()) {
        return "--memcached: " + std::string(server.status().message());
      }
      bootstrap->server = value;
      return "";
    case kClusterNameFlag:
      if (Status s = bootstrap::ValidateClusterName(value); !s.ok()) {
        return "--cluster: " + std::string(s.message());
      }
      bootstrap->cluster = value;
      return "";
    case kDeviceFlag:
      verbs->device = value;
      return "";
    case kPortFlag: {
      const auto n = ParseInteger(value, 255);
      if (!n || *n == 0) return "--port needs an integer in [1, 255]";
      verbs->port = static_cast<uint8_t>(*n);
      return "";
    }
    case kGidIndexFlag: {
      const auto n = ParseInteger(value, 255);
      if (!n) return "--gid-index needs an integer in [0, 255]";
      verbs->gid_index = static_cast<int>(*n);
      return "";
    }
    default:
      return "not a cluster flag";
  }
}

// Parses a tool's command line: `own` flags (ids below kClusterFlagBase,
// no terminator; --help is added here) and the cluster flags, which go to
// `bootstrap` and `verbs`. Every own flag goes to `on_flag(id, name,
// value)` (name without the dashes), which returns "" or an error message. --help prints `help`.
// Returns -1 when the tool should run, 0 after --help, 2 (with a message naming `program`) on a bad
// flag or a stray argument.
template <typename OnFlag>
int ParseCommandLine(const char* program, int argc, char** argv, std::vector<option> own,
                     const std::string& help, BootstrapOptions* bootstrap, VerbsOptions* verbs,
                     OnFlag on_flag) {
  constexpr int kHelp = kClusterFlagBase - 1;
  own.push_back({"help", no_argument, nullptr, kHelp});
  const std::vector<option> options = WithClusterFlags(std::move(own));
  opterr = 0;
  optind = 1;
  int id;
  int index = 0;
  while ((id = getopt_long(argc, argv, "", options.data(), &index)) != -1) {
    const std::string value = optarg ? optarg : "";
    std::string error;
    if (id == kHelp) {
      std::fputs(help.c_str(), stdout);
      return 0;
    } else if (IsClusterFlag(id)) {
      error = ApplyClusterFlag(id, value, bootstrap, verbs);
    } else if (id == '?' || id == ':') {
      const char* name = argv[optind - 1];
      error = std::string("unknown flag or missing value: ") + (name ? name : "?");
    } else {
      error = on_flag(id, std::string(options[index].name), value);
    }
    if (!error.empty()) return BadFlag(program, error);
  }
  if (optind < argc) {
    return BadFlag(program, std::string("unexpected argument '") + argv[optind] + "'");
  }
  return -1;
}

}  // namespace dmidx::tools

#endif  // DMIDX_TOOLS_COMMAND_LINE_H_
