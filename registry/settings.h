// What the registry's rows (registry/*_kind.cc) share to read textual
// settings into an options struct: the value rules of lib/common/values.h,
// applied field by field, and the errors every row words the same way.
#ifndef DMIDX_REGISTRY_SETTINGS_H_
#define DMIDX_REGISTRY_SETTINGS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/status.h"
#include "lib/common/values.h"
#include "registry/registry.h"

namespace dmidx::registry {

// `problem` with a setting's value, named as the bench's flags name it:
// "btree.node_bytes: must be >= 256, not 0".
Status BadSetting(std::string_view index, std::string_view name, std::string_view problem);
// InvalidArgument for a setting `index` does not have.
Status NoSuchOption(std::string_view index, std::string_view name);
// InvalidArgument unless index `index` takes keys of `key_bytes` (1..max).
Status CheckKeyBytes(std::string_view index, uint32_t key_bytes, uint32_t max);
// "true" or "false", as defaults are written.
std::string Bool(bool value);

// A row's open: index type `Index` (BTree, Radix) opened with `options`
// (its settings read, or the error that reading them gave) and keys of
// `key_bytes`.
template <typename Index, typename Options>
Status OpenWith(Client* client, std::string_view name, uint32_t key_bytes,
                StatusOr<Options> options, std::unique_ptr<RangeIndex>* index) {
  DMIDX_RETURN_IF_ERROR(options.status());
  options->key_bytes = key_bytes;
  std::unique_ptr<Index> opened;
  DMIDX_RETURN_IF_ERROR(Index::Open(client, name, *options, &opened));
  *index = std::move(opened);
  return Status::Ok();
}

// Each reads `value` into *field by one rule: what is wrong with it, ""
// when nothing is (and *field is set).
template <typename T>
std::string TakeInteger(const std::string& value, uint64_t min, uint64_t max, T* field) {
  std::string problem = IntegerProblem(value, min, max);
  if (problem.empty()) *field = static_cast<T>(*ParseInteger(value, max));
  return problem;
}
template <typename T>
std::string TakeSize(const std::string& value, const SizeRule& rule, T* field) {
  std::string problem = SizeProblem(value, rule);
  if (problem.empty()) *field = static_cast<T>(*ParseSize(value));
  return problem;
}
std::string TakeMilliseconds(const std::string& value, std::chrono::milliseconds* field);
std::string TakeOnOff(const std::string& value, bool* field);

// The on/off settings of an options struct: the field of each name.
template <typename Options>
using Switch = std::pair<std::string_view, bool Options::*>;
// The field of the switch `name`; nullptr if there is none.
template <typename Options, size_t N>
bool Options::*SwitchNamed(const Switch<Options> (&switches)[N], std::string_view name) {
  for (const auto& [switch_name, field] : switches) {
    if (switch_name == name) return field;
  }
  return nullptr;
}

// `options` as settings, as far as its cache_bytes and on/off `switches`
// go (each of them given, default or not): a configuration given as an
// options struct (Options::Baseline()) instead of spelled out again.
template <typename Options, size_t N>
IndexSettings SettingsOf(const Options& options, const Switch<Options> (&switches)[N]) {
  IndexSettings settings = {{"cache_bytes", std::to_string(options.cache_bytes)}};
  for (const auto& [name, field] : switches)
    settings.emplace(name, Bool(options.*field));
  return settings;
}

}  // namespace dmidx::registry

#endif  // DMIDX_REGISTRY_SETTINGS_H_
