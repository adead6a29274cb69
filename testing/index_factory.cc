#include "testing/index_factory.h"

namespace dmidx::testing {

std::vector<IndexRow> RegistryRows(const std::map<std::string, DumpIndex>& dumps) {
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
        const registry::IndexSettings settings =
            spec.small_nodes ? registry::Merged(configuration.settings, kind.small_nodes)
                             : configuration.settings;
        return kind.open(client, name, spec.key_bytes, settings, index);
      };
      row.leaf_capacity = [&kind, &configuration](uint32_t key_bytes) {
        return kind.keys_per_leaf(key_bytes,
                                  registry::Merged(configuration.settings, kind.small_nodes));
      };
      row.warm = configuration.warm;
      row.concurrency_scale = configuration.concurrency_scale;
      if (const auto dump = dumps.find(kind.name); dump != dumps.end()) row.dump = dump->second;
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
