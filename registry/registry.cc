#include "registry/registry.h"

#include "registry/kinds.h"
#include "registry/settings.h"

namespace dmidx::registry {

std::span<const IndexKind> RegisteredIndexes() {
  static const std::vector<IndexKind> kinds = {BTreeKind(), RadixKind()};
  return kinds;
}

const IndexKind* FindIndex(std::string_view name) {
  for (const IndexKind& kind : RegisteredIndexes()) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

std::string RegisteredNames() {
  std::string names;
  for (const IndexKind& kind : RegisteredIndexes())
    names += (names.empty() ? "" : ", ") + kind.name;
  return names;
}

IndexSettings LadderSettings(const IndexKind& kind, size_t step) {
  IndexSettings settings;
  for (size_t i = 0; i <= step && i < kind.ladder.size(); ++i)
    settings = Merged(std::move(settings), kind.ladder[i].settings);
  return settings;
}

IndexSettings Merged(IndexSettings base, const IndexSettings& over) {
  for (const auto& [name, value] : over)
    base[name] = value;
  return base;
}

Status BadSetting(std::string_view index, std::string_view name, std::string_view problem) {
  return Status::InvalidArgument(std::string(index) + "." + std::string(name) + ": " +
                                 std::string(problem));
}

Status NoSuchOption(std::string_view index, std::string_view name) {
  return Status::InvalidArgument(std::string(index) + " has no option '" + std::string(name) +
                                 "' (see dmidx-ycsb --help for the index options)");
}

Status CheckKeyBytes(std::string_view index, uint32_t key_bytes, uint32_t max) {
  if (key_bytes >= 1 && key_bytes <= max) return Status::Ok();
  return Status::InvalidArgument(std::string(index) + " takes keys of 1 to " + std::to_string(max) +
                                 " bytes, not " + std::to_string(key_bytes));
}

std::string Bool(bool value) {
  return value ? "true" : "false";
}

std::string TakeMilliseconds(const std::string& value, std::chrono::milliseconds* field) {
  uint64_t ms = 0;
  std::string problem = TakeInteger(value, 1, UINT32_MAX, &ms);
  *field = std::chrono::milliseconds(ms);
  return problem;
}

std::string TakeOnOff(const std::string& value, bool* field) {
  std::string problem = OnOffProblem(value);
  if (problem.empty()) *field = *ParseOnOff(value);
  return problem;
}

}  // namespace dmidx::registry
