#include "testing/index_factory.h"

namespace dmidx::testing {

std::vector<IndexRow> RegistryRows(const std::map<std::string, IndexTestHooks>& hooks) {
  std::vector<IndexRow> rows;
  for (const registry::IndexKind& kind : registry::RegisteredIndexes()) {
    for (const registry::Configuration& configuration : kind.configurations) {
      IndexRow row;
      row.kind = &kind;
      row.configuration = &configuration;
      row.name = configuration.label.empty() ? kind.name : kind.name + "_" + configuration.label;
      row.open = [&kind, &configuration](Client* client, std::string_view name,
                                         const IndexSpec& spec,
                                         std::unique_ptr<RangeIndex>* index) {
        registry::IndexSettings settings =
            spec.small_nodes ? registry::Merged(configuration.settings, kind.small_nodes)
                             : configuration.settings;
        if (spec.lock_timeout)
          settings["lock_timeout_ms"] = std::to_string(spec.lock_timeout->count());
        return kind.open(client, name, spec.key_bytes, settings, index);
      };
      row.leaf_capacity = [&kind, &configuration](uint32_t key_bytes) {
        return kind.keys_per_leaf(key_bytes,
                                  registry::Merged(configuration.settings, kind.small_nodes));
      };
      row.warm = configuration.warm;
      row.concurrency_scale = configuration.concurrency_scale;
      if (const auto found = hooks.find(kind.name); found != hooks.end()) {
        row.dump = found->second.dump;
        row.walk = found->second.walk;
        if (found->second.known_defects)
          row.known_defects = found->second.known_defects(configuration.settings);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::unique_ptr<RangeIndex> OpenIndexOrFail(const IndexRow& row, Client* client,
                                            std::string_view name, const IndexSpec& spec) {
  std::unique_ptr<RangeIndex> index;
  const Status status = row.open(client, name, spec, &index);
  EXPECT_TRUE(status.ok()) << row.name << " " << name << ": " << status.ToString();
  if (!status.ok()) index.reset();
  return index;
}

}  // namespace dmidx::testing
