// The Open prologue every index shares, after the public Open's arguments
// and before its descriptor (OpenDescriptor, index/catalog.h): the null
// checks, the options every index has, and the handle's RDWC table.
//
//   DMIDX_RETURN_IF_ERROR(index::CheckOpen("Radix::Open", client, tree));
//   const auto common = index::CommonOptions::Of("RadixOptions", options);
//   DMIDX_RETURN_IF_ERROR(index::CheckCommonOptions(common));
//   ... OpenDescriptor ...
//   DMIDX_ASSIGN_OR_RETURN(index::RdwcDispatch rdwc,
//                          index::OpenRdwc(node, "radix/" + descriptor.ToString(), common));
#ifndef DMIDX_INDEX_OPEN_H_
#define DMIDX_INDEX_OPEN_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "dmidx/cluster.h"
#include "dmidx/status.h"
#include "index/index_handle.h"
#include "lib/runtime/compute_node.h"
#include "lock/rdwc.h"

namespace dmidx::index {

// The options every index has (dmidx/btree.h, dmidx/radix.h document
// them), as Open checks and uses them.
struct CommonOptions {
  std::string_view options_name;  // "BTreeOptions": names the fields in errors
  std::chrono::milliseconds lock_timeout;
  bool read_delegation;
  bool write_combining;
  size_t rdwc_table_entries;

  template <typename Options>
  static CommonOptions Of(std::string_view options_name, const Options& options) {
    // The bound the public options document is the table's.
    static_assert(Options::kMaxRdwcTableEntries == lock::Rdwc::kMaxTableEntries);
    return {options_name, options.lock_timeout, options.read_delegation, options.write_combining,
            options.rdwc_table_entries};
  }
};

// InvalidArgument, naming `open` ("BTree::Open"), for a null client or
// output pointer.
Status CheckOpen(std::string_view open, const Client* client, const void* out);

// InvalidArgument, naming the field, for a lock_timeout that is not
// positive, or (read delegation or write combining on) rdwc_table_entries
// outside 1..lock::Rdwc::kMaxTableEntries.
Status CheckCommonOptions(const CommonOptions& options);

// The handle's RDWC dispatch: with read delegation or write combining on,
// the table of `owner` (an index's name for it, "btree/<descriptor>") on
// `node`, shared by every handle of the owner there with that size.
StatusOr<RdwcDispatch> OpenRdwc(runtime::ComputeNode& node, const std::string& owner,
                                const CommonOptions& options);

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_OPEN_H_
