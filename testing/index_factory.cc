#include "testing/index_factory.h"

namespace dmidx::testing {

std::unique_ptr<RangeIndex> OpenIndexOrFail(const IndexRow& row, Client* client,
                                            std::string_view name, const IndexSpec& spec) {
  std::unique_ptr<RangeIndex> index;
  const Status status = row.open(client, name, spec, &index);
  EXPECT_TRUE(status.ok()) << row.name << " " << name << ": " << status.ToString();
  if (!status.ok()) index.reset();
  return index;
}

}  // namespace dmidx::testing
