// The command-line convention of every dmidx tool, on CLI11: flags are
// spelled --flag=VALUE (--flag VALUE works too), a flag given twice keeps
// its last value, --help prints a generated help whose layout is
//
//   Usage: TOOL [options]
//
//   <description>
//
//   <group>:
//     --flag=VALUE             what it does (default ...)
//
//   <footer>
//
// and a bad flag, a bad or missing value or a stray argument exits 2 with
// one line on stderr: "TOOL: <what is wrong, naming the flag> (run with
// --help)". Values are checked by the rules below (lib/common/values.h), the
// same in every tool and in its words:
//
//   dmidx-ycsb: --records: must be >= 0, not -5 (run with --help)
//   dmidx-memnode: --pool-bytes: '12Q' is not a size, e.g. 4096, 64K or 1G (run with --help)
//
// A tool checks every flag, and the flags that must go together, before it
// touches memcached, a device or a system limit: a bad command line is
// always the flag's error, never a later failure it caused.
//
// Typical main():
//
//   CLI::App app(kDescription, "dmidx-tool");
//   dmidx::tools::SetUpTool(app, kFooter);
//   dmidx::tools::AddClusterFlags(app, &options.bootstrap, &options.verbs);
//   dmidx::tools::AddSizeFlag(app, "--pool-bytes", &pool_bytes, {.min = 1}, "...")
//       ->group("Memory");
//   dmidx::tools::AddHelpFlag(app, "Memory");
//   if (std::optional<int> exit_code = dmidx::tools::ParseCommandLine(app, argc, argv)) {
//     return *exit_code;
//   }
#ifndef DMIDX_TOOLS_CLI_H_
#define DMIDX_TOOLS_CLI_H_

#include <CLI/CLI.hpp>
#include <cassert>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/options.h"
#include "lib/common/values.h"

namespace dmidx::tools {

// Gives `app` the convention above: the help layout, last value wins, and
// only --help (no -h; add it with AddHelpFlag after the other flags so that
// it is listed last). `footer` is printed after the flags.
void SetUpTool(CLI::App& app, const std::string& footer);

// Adds --help ("show this help") at the end of `group`.
CLI::Option* AddHelpFlag(CLI::App& app, const std::string& group);

// --name, a flag without a value: sets *value to true.
CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool* value,
                       const std::string& help);

// --name=SIZE (ParseSize) within `rule` into *bytes.
CLI::Option* AddSizeFlag(CLI::App& app, const std::string& name, uint64_t* bytes,
                         const SizeRule& rule, const std::string& help);
// --name=SIZE,SIZE,... (also repeated: the lists add up), each within
// `rule`, into *sizes as given ("16M"), for labels that show them so.
CLI::Option* AddSizeListFlag(CLI::App& app, const std::string& name,
                             std::vector<std::string>* sizes, const SizeRule& rule,
                             const std::string& help);

// --name=N, an integer in [min, max] (ParseInteger), passed to `store`.
CLI::Option* AddIntegerFlag(CLI::App& app, const std::string& name, uint64_t min, uint64_t max,
                            std::function<void(uint64_t)> store, const std::string& help);
// The same into *value; [min, max] must fit T.
template <std::integral T>
CLI::Option* AddIntegerFlag(CLI::App& app, const std::string& name, T* value, uint64_t min,
                            uint64_t max, const std::string& help) {
  assert(max <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
  return AddIntegerFlag(
      app, name, min, max, [value](uint64_t n) { *value = static_cast<T>(n); }, help);
}
// --name=N,N,... (also repeated: the lists add up), each in [min, max],
// passed to `store` as a whole.
CLI::Option* AddIntegerListFlag(CLI::App& app, const std::string& name, uint64_t min, uint64_t max,
                                std::function<void(std::vector<uint64_t>)> store,
                                const std::string& help);
// The same into *values; [min, max] must fit T.
template <std::integral T>
CLI::Option* AddIntegerListFlag(CLI::App& app, const std::string& name, std::vector<T>* values,
                                uint64_t min, uint64_t max, const std::string& help) {
  assert(max <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
  return AddIntegerListFlag(
      app, name, min, max,
      [values](std::vector<uint64_t> numbers) { values->assign(numbers.begin(), numbers.end()); },
      help);
}

// --name=X, a real number within `rule` (ParseNumber), into *value.
CLI::Option* AddNumberFlag(CLI::App& app, const std::string& name, double* value,
                           const NumberRule& rule, const std::string& help);

// --name=on|off (ParseOnOff) into *value.
CLI::Option* AddOnOffFlag(CLI::App& app, const std::string& name, bool* value,
                          const std::string& help);

// --name=A|B|..., one of `choices`, passed to `store`.
CLI::Option* AddChoiceFlag(CLI::App& app, const std::string& name, std::vector<std::string> choices,
                           std::function<void(const std::string&)> store, const std::string& help);

// The flags of every tool that joins a cluster, in `group`: which memcached
// and cluster (--memcached, --cluster, checked as the bootstrap will) into
// *bootstrap, which RDMA device (--device, --port, --gid-index) into *verbs.
// The help gives the defaults of BootstrapOptions and VerbsOptions.
void AddClusterFlags(CLI::App& app, BootstrapOptions* bootstrap, VerbsOptions* verbs,
                     const std::string& group = "Cluster and device");

// What is wrong with options.pool_bytes, in the words of a --pool-bytes
// error, "" when nothing is: a pool holds the header, the catalog and one
// chunk (memnode::MinPoolBytes).
std::string PoolBytesProblem(const MemoryNodeOptions& options);

// Parses the command line into the flags' targets. nullopt when the tool
// should run; otherwise the exit code main() should return: 0 after --help
// (printed to stdout), 2 after a bad command line (reported as above).
// Catches every CLI11 parse exception. Sets app.allow_extras() to find
// unknown flags and stray arguments itself.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

// Reports a bad command line found after parsing (flags that do not go
// together) like ParseCommandLine does; returns 2.
int BadFlag(const CLI::App& app, const std::string& message);

}  // namespace dmidx::tools

#endif  // DMIDX_TOOLS_CLI_H_
