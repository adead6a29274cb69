#include "tools/cli.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "lib/bootstrap/memcached_bootstrap.h"
#include "lib/memnode/memory_node.h"

namespace dmidx::tools {
namespace {

// Names and descriptions start in this column, as in the help texts the
// tools had before CLI11 ("  --memcached=HOST[:PORT]  ").
constexpr size_t kDescriptionColumn = 27;

// `text` with its lines broken at spaces to at most `width` characters
// (a longer word stays whole); its own line breaks are kept.
std::string Wrap(const std::string& text, size_t width) {
  std::string out;
  size_t line_start = 0;  // in out
  size_t last_space = std::string::npos;
  for (char c : text) {
    if (c == '\n') {
      out += c;
      line_start = out.size();
      last_space = std::string::npos;
      continue;
    }
    if (c == ' ') last_space = out.size();
    out += c;
    if (out.size() - line_start > width && last_space != std::string::npos) {
      out[last_space] = '\n';
      line_start = last_space + 1;
      last_space = std::string::npos;
    }
  }
  return out;
}

// The help layout of cli.h: usage first, flags as --flag=VALUE, a blank
// line between groups.
class ToolFormatter : public CLI::Formatter {
 public:
  ToolFormatter() { column_width(kDescriptionColumn); }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const override {
    std::string out = "Usage: " + name + " [options]\n";
    if (!app->get_description().empty()) out += "\n" + app->get_description() + "\n";
    for (const std::string& group : app->get_groups()) {
      const std::vector<const CLI::Option*> options =
          app->get_options([&group](const CLI::Option* option) {
            return option->get_group() == group && option->nonpositional();
          });
      if (group.empty() || options.empty()) continue;
      out += "\n" + group + ":\n";
      for (const CLI::Option* option : options) {
        out += make_option(option, false);
      }
    }
    if (!app->get_footer().empty()) out += "\n" + app->get_footer() + "\n";
    return out;
  }

  // Descriptions wrapped to 80 columns (CLI11 indents each line it finds).
  std::string make_option_desc(const CLI::Option* option) const override {
    return Wrap(CLI::Formatter::make_option_desc(option), 80 - kDescriptionColumn);
  }

  // "=TYPE" right after the name; nothing for flags, which take no value.
  std::string make_option_opts(const CLI::Option* option) const override {
    if (option->get_expected_max() == 0 || option->get_type_name().empty()) return "";
    // A short option takes its value as the next argument ("-P FILE"):
    // CLI11 would read "-P=FILE" as the value "=FILE".
    if (option->get_lnames().empty()) return " " + option->get_type_name();
    return "=" + option->get_type_name();
  }
};

// A check CLI11 runs on every value of an option before its callback: ""
// when the value is fine, else what is wrong with it (CLI11 puts "--flag: "
// in front and throws CLI::ValidationError).
using ValueCheck = std::function<std::string(const std::string&)>;

// An option whose values `check` accepts and `store` then takes (the last
// one, by SetUpTool's policy). The check is added without a description so
// that the help shows `type` alone.
CLI::Option* AddCheckedFlag(CLI::App& app, const std::string& name, const std::string& type,
                            ValueCheck check, std::function<void(const std::string&)> store,
                            const std::string& help) {
  CLI::Option* option = app.add_option_function<std::string>(name, std::move(store), help);
  option->type_name(type);
  option->check(std::move(check));
  return option;
}

// The same for a comma list (also repeated: the lists add up): `check` sees
// each item, `store` all of them.
CLI::Option* AddListFlag(CLI::App& app, const std::string& name, const std::string& type,
                         ValueCheck check,
                         std::function<void(const std::vector<std::string>&)> store,
                         const std::string& help) {
  CLI::Option* option =
      app.add_option_function<std::vector<std::string>>(name, std::move(store), help);
  option->type_name(type);
  option->delimiter(',');
  option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  option->check(std::move(check));
  return option;
}

std::string Quoted(const std::string& value) {
  return "'" + value + "'";
}

// argv[1..] in the reversed order CLI11's parse() takes. CLI11 reads
// "--flag=" as "--flag" and then takes the next argument as the value
// (so "--device= --port=2" would set the device to "--port=2"); getopt, and
// the tools' scripts, mean an empty value. "--flag" "" says that to CLI11.
std::vector<std::string> ReversedArguments(int argc, char** argv) {
  std::vector<std::string> arguments;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    flags_ended = flags_ended || argument == "--";
    if (!flags_ended && argument.size() > 3 && argument.starts_with("--") &&
        argument.find('=') == argument.size() - 1) {
      argument.pop_back();
      arguments.push_back(std::move(argument));
      arguments.emplace_back();
    } else {
      arguments.push_back(std::move(argument));
    }
  }
  std::reverse(arguments.begin(), arguments.end());
  return arguments;
}

}  // namespace

void SetUpTool(CLI::App& app, const std::string& footer) {
  app.formatter(std::make_shared<ToolFormatter>());
  app.footer(footer);
  // getopt's rule, which the tools' users and scripts know: the last value
  // of a repeated flag wins (CLI11's default is an error).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag();  // removes CLI11's "-h,--help"; AddHelpFlag adds --help
}

CLI::Option* AddHelpFlag(CLI::App& app, const std::string& group) {
  return app.set_help_flag("--help", "show this help")->group(group);
}

CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool* value,
                       const std::string& help) {
  // No "--name=false": a switch that takes a value is a second way to say
  // the same thing, and the tools never had it.
  return app.add_flag(name, *value, help)->disable_flag_override();
}

CLI::Option* AddSizeFlag(CLI::App& app, const std::string& name, uint64_t* bytes,
                         const SizeRule& rule, const std::string& help) {
  return AddCheckedFlag(
      app, name, "SIZE", [rule](const std::string& value) { return SizeProblem(value, rule); },
      [bytes](const std::string& value) { *bytes = *ParseSize(value); }, help);
}

CLI::Option* AddSizeListFlag(CLI::App& app, const std::string& name,
                             std::vector<std::string>* sizes, const SizeRule& rule,
                             const std::string& help) {
  return AddListFlag(
      app, name, "LIST", [rule](const std::string& value) { return SizeProblem(value, rule); },
      [sizes](const std::vector<std::string>& values) { *sizes = values; }, help);
}

CLI::Option* AddIntegerFlag(CLI::App& app, const std::string& name, uint64_t min, uint64_t max,
                            std::function<void(uint64_t)> store, const std::string& help) {
  return AddCheckedFlag(
      app, name, "N",
      [min, max](const std::string& value) { return IntegerProblem(value, min, max); },
      [store = std::move(store)](const std::string& value) {
        store(*ParseInteger(value, UINT64_MAX));
      },
      help);
}

CLI::Option* AddIntegerListFlag(CLI::App& app, const std::string& name, uint64_t min, uint64_t max,
                                std::function<void(std::vector<uint64_t>)> store,
                                const std::string& help) {
  return AddListFlag(
      app, name, "LIST",
      [min, max](const std::string& value) { return IntegerProblem(value, min, max); },
      [store = std::move(store)](const std::vector<std::string>& values) {
        std::vector<uint64_t> numbers;
        for (const std::string& value : values)
          numbers.push_back(*ParseInteger(value, UINT64_MAX));
        store(std::move(numbers));
      },
      help);
}

CLI::Option* AddNumberFlag(CLI::App& app, const std::string& name, double* value,
                           const NumberRule& rule, const std::string& help) {
  return AddCheckedFlag(
      app, name, "X", [rule](const std::string& text) { return NumberProblem(text, rule); },
      [value](const std::string& text) { *value = *ParseNumber(text); }, help);
}

CLI::Option* AddOnOffFlag(CLI::App& app, const std::string& name, bool* value,
                          const std::string& help) {
  return AddCheckedFlag(
      app, name, "on|off", [](const std::string& text) { return OnOffProblem(text); },
      [value](const std::string& text) { *value = *ParseOnOff(text); }, help);
}

CLI::Option* AddChoiceFlag(CLI::App& app, const std::string& name, std::vector<std::string> choices,
                           std::function<void(const std::string&)> store, const std::string& help) {
  std::string type;
  for (const std::string& choice : choices)
    type += (type.empty() ? "" : "|") + choice;
  return AddCheckedFlag(
      app, name, type,
      [choices, type](const std::string& value) -> std::string {
        for (const std::string& choice : choices) {
          if (value == choice) return "";
        }
        return Quoted(value) + " is not one of " + type;
      },
      std::move(store), help);
}

void AddClusterFlags(CLI::App& app, BootstrapOptions* bootstrap, VerbsOptions* verbs,
                     const std::string& group) {
  AddCheckedFlag(
      app, "--memcached", "HOST[:PORT]",
      [](const std::string& value) {
        StatusOr<bootstrap::ServerAddress> server = bootstrap::ParseServerAddress(value);
        return server.ok() ? std::string() : std::string(server.status().message());
      },
      [bootstrap](const std::string& value) { bootstrap->server = value; },
      "memcached server used for bootstrap\n(default 127.0.0.1:11211)")
      ->group(group);
  AddCheckedFlag(
      app, "--cluster", "NAME",
      [](const std::string& value) {
        const Status status = bootstrap::ValidateClusterName(value);
        return status.ok() ? std::string() : std::string(status.message());
      },
      [bootstrap](const std::string& value) { bootstrap->cluster = value; },
      "cluster name; clusters with different names share\n"
      "one memcached without interfering (default \"default\")")
      ->group(group);
  app.add_option("--device", verbs->device,
                 "RDMA device as ibv_devices lists it (default: the\nfirst with an active port)")
      ->type_name("NAME")
      ->group(group);
  AddIntegerFlag(app, "--port", &verbs->port, 1, 255, "device port (default 1)")->group(group);
  AddIntegerFlag(app, "--gid-index", &verbs->gid_index, 0, 255,
                 "GID index (default: the RoCE v2 IPv4-mapped GID if\nany, else 0)")
      ->group(group);
}

std::string PoolBytesProblem(const MemoryNodeOptions& options) {
  const uint64_t min = memnode::MinPoolBytes(options);
  if (options.pool_bytes >= min) return "";
  return "must be >= " + FormatSize(min) + " (the header, a catalog of " +
         std::to_string(options.catalog_entries) + " entries, one chunk of " +
         FormatSize(options.chunk_bytes) + " and a page of seal words), not " +
         FormatSize(options.pool_bytes);
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  // Extras are collected rather than thrown so that the message can say
  // which kind they are, as the tools always have.
  app.allow_extras();
  std::vector<std::string> arguments = ReversedArguments(argc, argv);
  try {
    app.parse(arguments);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& error) {
    // Everything else CLI11 throws while parsing is a bad command line: a
    // missing or rejected value, a value given to a flag.
    return BadFlag(app, error.what());
  }
  bool flags_ended = false;  // after "--" everything is an argument, as with getopt
  for (const std::string& extra : app.remaining()) {
    if (extra == "--" && !flags_ended) {
      flags_ended = true;
    } else if (!flags_ended && extra.starts_with("-")) {
      return BadFlag(app, "unknown flag " + extra.substr(0, extra.find('=')));
    } else {
      return BadFlag(app, "unexpected argument " + Quoted(extra));
    }
  }
  return std::nullopt;
}

int BadFlag(const CLI::App& app, const std::string& message) {
  std::fprintf(stderr, "%s: %s (run with --help)\n", app.get_name().c_str(), message.c_str());
  return 2;
}

}  // namespace dmidx::tools
