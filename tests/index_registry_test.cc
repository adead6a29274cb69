// The index registry (registry/registry.h): every row runs through every
// index suite, and what each row says of its index holds: each documented
// option is taken by check and open at its default, the ladder and the
// tested configurations are valid settings, sizing grows with the keys,
// and bad settings are refused naming the setting.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/keys.h"
#include "registry/registry.h"
#include "tests/index_suites.h"
#include "tests/index_test_hooks.h"

namespace dmidx::testing {
namespace {

using registry::IndexKind;
using registry::IndexSettings;

// The instantiated index suites ("Registry/IndexModelSuite") and the row
// names each runs (the parameter suffix of its tests' names).
std::map<std::string, std::set<std::string>> InstantiatedSuites() {
  std::map<std::string, std::set<std::string>> suites;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    const std::string name = suite.name();
    if (name.rfind("Registry/", 0) != 0) continue;
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const std::string test = suite.GetTestInfo(j)->name();
      suites[name].insert(test.substr(test.rfind('/') + 1));
    }
  }
  return suites;
}

TEST(IndexRegistry, EveryRowRunsThroughEverySuite) {
  const std::vector<IndexRow> rows = RegistryRows(IndexHooks());
  ASSERT_FALSE(registry::RegisteredIndexes().empty());
  std::set<std::string> kinds_with_rows;
  for (const IndexRow& row : rows)
    kinds_with_rows.insert(row.kind->name);
  for (const IndexKind& kind : registry::RegisteredIndexes())
    EXPECT_TRUE(kinds_with_rows.contains(kind.name)) << kind.name << " has no configuration";

  const auto suites = InstantiatedSuites();
  // The five suites of index_suites.h at least (others may join the macro).
  EXPECT_GE(suites.size(), 5u);
  for (const auto& [suite, names] : suites) {
    for (const IndexRow& row : rows)
      EXPECT_TRUE(names.contains(row.name)) << suite << " does not run " << row.name;
    EXPECT_EQ(names.size(), rows.size()) << suite << " runs rows the registry does not have";
  }
}

TEST(IndexRegistry, EveryIndexHasItsTestHooks) {
  for (const IndexKind& kind : registry::RegisteredIndexes())
    EXPECT_TRUE(IndexHooks().contains(kind.name))
        << kind.name << " has no test hooks in tests/index_test_hooks.cc";
  for (const IndexRow& row : RegistryRows(IndexHooks())) {
    EXPECT_TRUE(row.dump) << row.name << " has no dump hook";
    EXPECT_TRUE(row.walk) << row.name << " has no structure walk";
  }
}

// Schedule exploration (tests/sim_schedule.h) chooses among the registered
// indexes: each needs its exploration hooks, whose settings the index
// takes.
TEST(IndexRegistry, EveryIndexHasItsExploreHooks) {
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    const auto found = IndexExploreHooks().find(kind.name);
    ASSERT_NE(found, IndexExploreHooks().end())
        << kind.name << " has no exploration hooks in tests/index_test_hooks.cc";
    const ExploreHooks& hooks = found->second;
    EXPECT_TRUE(hooks.shaped) << kind.name;
    EXPECT_GT(hooks.merges_weight, 0u) << kind.name;
    EXPECT_GT(hooks.failure_spacing, 0u) << kind.name;
    EXPECT_TRUE(kind.check(8, hooks.all_on).ok()) << kind.name;
    // Mixed schedules set these as all_on or baseline has them.
    const registry::Configuration* baseline = nullptr;
    for (const registry::Configuration& configuration : kind.configurations)
      if (configuration.label == "baseline") baseline = &configuration;
    ASSERT_NE(baseline, nullptr) << kind.name;
    for (const std::string& name : hooks.fixed_at_creation)
      EXPECT_TRUE(baseline->settings.contains(name)) << kind.name << "." << name;
    for (const std::string& name : hooks.mixed_picks)
      EXPECT_TRUE(baseline->settings.contains(name)) << kind.name << "." << name;
    // Every handle of a shaped schedule gets settings the index takes.
    std::mt19937_64 rng(1);
    const ExploreShape shape = hooks.shaped(
        3, [&](uint32_t) { return registry::Merged(hooks.all_on, baseline->settings); }, rng);
    EXPECT_FALSE(shape.shape.empty()) << kind.name;
    ASSERT_EQ(shape.handles.size(), 3u) << kind.name;
    for (const auto& handles : shape.handles) {
      ASSERT_FALSE(handles.empty()) << kind.name;
      for (const IndexSettings& settings : handles)
        EXPECT_TRUE(kind.check(8, settings).ok()) << kind.name;
    }
  }
}

TEST(IndexRegistry, NamesAndLabelsAreUniqueAndFitTestNames) {
  std::set<std::string> names;
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    EXPECT_TRUE(names.insert(kind.name).second) << kind.name << " registered twice";
    EXPECT_EQ(registry::FindIndex(kind.name), &kind);
    EXPECT_FALSE(kind.description.empty()) << kind.name;
    ASSERT_FALSE(kind.configurations.empty()) << kind.name;
    EXPECT_EQ(kind.configurations.front().label, "") << kind.name << ": defaults come first";
    EXPECT_TRUE(kind.configurations.front().settings.empty()) << kind.name;
    std::set<std::string> labels;
    for (const registry::Configuration& configuration : kind.configurations) {
      EXPECT_TRUE(labels.insert(configuration.label).second) << kind.name;
      for (const char c : configuration.label)
        EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << configuration.label;
    }
  }
  EXPECT_EQ(registry::FindIndex("no such index"), nullptr);
  EXPECT_NE(registry::RegisteredNames().find("btree"), std::string::npos);
}

// Every setting a row names is a documented option, and check takes it.
void ExpectValid(const IndexKind& kind, const IndexSettings& settings, const std::string& what) {
  std::set<std::string> documented;
  for (const registry::IndexOptionDoc& option : kind.options)
    documented.insert(option.name);
  for (const auto& [name, value] : settings)
    EXPECT_TRUE(documented.contains(name)) << kind.name << " " << what << ": " << name;
  const Status status = kind.check(8, settings);
  EXPECT_TRUE(status.ok()) << kind.name << " " << what << ": " << status.ToString();
}

TEST(IndexRegistry, LadderConfigurationsAndSmallNodesAreValidSettings) {
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    EXPECT_EQ(kind.ladder.empty(), kind.ladder_source.empty()) << kind.name;
    for (size_t step = 0; step < kind.ladder.size(); ++step)
      ExpectValid(kind, registry::LadderSettings(kind, step), "ladder " + kind.ladder[step].label);
    for (const registry::Configuration& configuration : kind.configurations) {
      ExpectValid(kind, configuration.settings, "configuration '" + configuration.label + "'");
      ExpectValid(kind, registry::Merged(configuration.settings, kind.small_nodes),
                  "small nodes of '" + configuration.label + "'");
      EXPECT_GT(configuration.concurrency_scale, 0);
      EXPECT_LE(configuration.concurrency_scale, 1);
    }
    ExpectValid(kind, kind.small_nodes, "small_nodes");
    EXPECT_GE(kind.keys_per_leaf(8, kind.small_nodes), 1u) << kind.name;
    EXPECT_LE(kind.keys_per_leaf(8, kind.small_nodes), kind.keys_per_leaf(8, {})) << kind.name;
  }
}

// The "baseline" configuration is every technique off: each on/off option
// (documented default true or false) set to false.
TEST(IndexRegistry, BaselineTurnsEveryTechniqueOff) {
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    const registry::Configuration* baseline = nullptr;
    for (const registry::Configuration& configuration : kind.configurations)
      if (configuration.label == "baseline") baseline = &configuration;
    ASSERT_NE(baseline, nullptr) << kind.name << " has no baseline configuration";
    for (const registry::IndexOptionDoc& option : kind.options) {
      if (option.default_value != "true" && option.default_value != "false") continue;
      const auto setting = baseline->settings.find(option.name);
      ASSERT_NE(setting, baseline->settings.end()) << kind.name << "." << option.name;
      EXPECT_EQ(setting->second, "false") << kind.name << "." << option.name;
    }
  }
}

TEST(IndexRegistry, CheckRefusesBadSettingsNamingThem) {
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    const Status unknown = kind.check(8, {{"no_such_option", "1"}});
    EXPECT_TRUE(unknown.IsInvalidArgument()) << kind.name;
    EXPECT_EQ(unknown.message().find(kind.name + " has no option 'no_such_option'"), 0u)
        << unknown.ToString();
    for (const registry::IndexOptionDoc& option : kind.options) {
      const Status bad = kind.check(8, {{option.name, "not a value"}});
      EXPECT_TRUE(bad.IsInvalidArgument()) << kind.name << "." << option.name;
      EXPECT_EQ(bad.message().find(kind.name + "." + option.name + ": "), 0u) << bad.ToString();
    }
    EXPECT_TRUE(kind.check(0, {}).IsInvalidArgument()) << kind.name;
    EXPECT_TRUE(kind.check(kind.max_key_bytes + 1, {}).IsInvalidArgument()) << kind.name;
    EXPECT_TRUE(kind.check(1, {}).ok()) << kind.name;
  }
}

TEST(IndexRegistry, PoolBytesGrowWithTheKeys) {
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    const uint64_t small = kind.pool_bytes(1000, 8, 0.8, {});
    const uint64_t large = kind.pool_bytes(100000, 8, 0.8, {});
    EXPECT_GT(small, 0u) << kind.name;
    // At least the keys and values themselves.
    EXPECT_GE(large - small, 99000u * 16) << kind.name;
    EXPECT_GE(kind.pool_bytes(100000, 32, 0.8, {}), large) << kind.name;
  }
}

// Each documented option at its default, and each configuration, opens an
// index that stores a key.
TEST(IndexRegistry, OpenTakesEveryDocumentedDefaultAndConfiguration) {
  ClusterOptions options;
  options.memory_nodes = 1;
  options.memory_node.pool_bytes = 256 << 20;
  options.memory_node.huge_pages = false;
  std::unique_ptr<Cluster> cluster;
  ASSERT_TRUE(Cluster::Open(options, &cluster).ok());
  std::unique_ptr<Client> client;
  ASSERT_TRUE(cluster->NewClient({}, &client).ok());
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(client->NewBlockingContext(&ctx).ok());
  int opened = 0;
  auto store_one = [&](const IndexKind& kind, const IndexSettings& settings,
                       const std::string& what) {
    std::unique_ptr<RangeIndex> index;
    const std::string name = kind.name + "-" + std::to_string(opened++);
    const Status status = kind.open(client.get(), name, 8, settings, &index);
    ASSERT_TRUE(status.ok()) << kind.name << " " << what << ": " << status.ToString();
    ASSERT_TRUE(index->Insert(*ctx, EncodeUint64Key(7), 70).ok()) << kind.name << " " << what;
    uint64_t value = 0;
    ASSERT_TRUE(index->Lookup(*ctx, EncodeUint64Key(7), &value).ok()) << kind.name << " " << what;
    EXPECT_EQ(value, 70u) << kind.name << " " << what;
    index->Close();
  };
  for (const IndexKind& kind : registry::RegisteredIndexes()) {
    for (const registry::IndexOptionDoc& option : kind.options) {
      ExpectValid(kind, {{option.name, option.default_value}}, option.name + " default");
      store_one(kind, {{option.name, option.default_value}}, option.name + " default");
    }
    for (const registry::Configuration& configuration : kind.configurations)
      store_one(kind, configuration.settings, "configuration '" + configuration.label + "'");
    // What check refuses, open refuses with the same message.
    std::unique_ptr<RangeIndex> index;
    const Status refused = kind.open(client.get(), "refused", 8, {{"no_such_option", "1"}}, &index);
    EXPECT_EQ(refused.ToString(), kind.check(8, {{"no_such_option", "1"}}).ToString());
  }
}

}  // namespace
}  // namespace dmidx::testing
