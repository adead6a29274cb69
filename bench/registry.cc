#include "bench/registry.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "registry/settings.h"

namespace dmidx::bench {
namespace {

// An index that does nothing: Lookup finds every key (value 0), writes
// succeed, scans return nothing. Its throughput is the bench's own ceiling
// on this machine (generating operations, timing and recording them).
class NullIndex final : public RangeIndex {
 public:
  explicit NullIndex(uint32_t key_bytes) : key_bytes_(key_bytes) {}
  Status Insert(Context&, std::string_view, uint64_t) override { return Status::Ok(); }
  Status Update(Context&, std::string_view, uint64_t) override { return Status::Ok(); }
  Status Delete(Context&, std::string_view) override { return Status::Ok(); }
  Status Lookup(Context&, std::string_view, uint64_t* value) override {
    *value = 0;
    return Status::Ok();
  }
  Status Scan(Context&, std::string_view, std::string_view, std::vector<KeyValue>* out) override {
    out->clear();
    return Status::Ok();
  }
  Status Scan(Context&, std::string_view, size_t, std::vector<KeyValue>* out) override {
    out->clear();
    return Status::Ok();
  }
  Status BulkLoad(Context&, std::span<const KeyValue>, double) override { return Status::Ok(); }
  void Close() override {}
  uint32_t key_bytes() const override { return key_bytes_; }
  IndexStats stats() const override { return {}; }

 private:
  const uint32_t key_bytes_;
};

IndexKind NullKind() {
  IndexKind kind;
  kind.name = "null";
  kind.description = "does nothing: the bench's own ceiling on this machine";
  // As long as the longest any index takes: the null index measures the
  // bench's own cost of the keys an index could have.
  for (const IndexKind& row : registry::RegisteredIndexes())
    kind.max_key_bytes = std::max(kind.max_key_bytes, row.max_key_bytes);
  kind.check = [max = kind.max_key_bytes](uint32_t key_bytes, const IndexSettings& settings) {
    DMIDX_RETURN_IF_ERROR(registry::CheckKeyBytes("null", key_bytes, max));
    if (settings.empty()) return Status::Ok();
    return registry::NoSuchOption("null", settings.begin()->first);
  };
  kind.open = [check = kind.check](Client*, std::string_view, uint32_t key_bytes,
                                   const IndexSettings& settings,
                                   std::unique_ptr<RangeIndex>* index) -> Status {
    DMIDX_RETURN_IF_ERROR(check(key_bytes, settings));
    *index = std::make_unique<NullIndex>(key_bytes);
    return Status::Ok();
  };
  kind.pool_bytes = [](uint64_t, uint32_t, double, const IndexSettings&) -> uint64_t { return 0; };
  return kind;
}

}  // namespace

std::span<const IndexKind> RegisteredIndexes() {
  static const std::vector<IndexKind> kinds = [] {
    std::vector<IndexKind> all = {NullKind()};
    for (const IndexKind& row : registry::RegisteredIndexes())
      all.push_back(row);
    return all;
  }();
  return kinds;
}

StatusOr<const IndexKind*> FindIndex(std::string_view name) {
  std::string names;
  for (const IndexKind& kind : RegisteredIndexes()) {
    if (kind.name == name) return &kind;
    names += (names.empty() ? "" : ", ") + kind.name;
  }
  return Status::InvalidArgument("unknown index '" + std::string(name) + "' (registered: " + names +
                                 ", or all)");
}

}  // namespace dmidx::bench
