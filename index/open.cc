#include "index/open.h"

#include <memory>
#include <string>

#include "lock/rdwc.h"

namespace dmidx::index {

Status CheckOpen(std::string_view open, const Client* client, const void* out) {
  if (client == nullptr || out == nullptr) {
    return Status::InvalidArgument(std::string(open) + ": null client or output pointer");
  }
  return Status::Ok();
}

Status CheckCommonOptions(const CommonOptions& options) {
  if (options.lock_timeout.count() <= 0) {
    return Status::InvalidArgument(std::string(options.options_name) +
                                   ".lock_timeout must be positive");
  }
  if (options.read_delegation || options.write_combining) {
    return lock::Rdwc::CheckTableEntries(options.rdwc_table_entries,
                                         std::string(options.options_name) + ".rdwc_table_entries");
  }
  return Status::Ok();
}

StatusOr<RdwcDispatch> OpenRdwc(runtime::ComputeNode& node, const std::string& owner,
                                const CommonOptions& options) {
  RdwcDispatch dispatch;
  dispatch.reads = options.read_delegation;
  dispatch.writes = options.write_combining;
  dispatch.lock_timeout = options.lock_timeout;
  if (dispatch.reads || dispatch.writes) {
    DMIDX_ASSIGN_OR_RETURN(
        dispatch.table,
        lock::Rdwc::Shared(node, owner, options.rdwc_table_entries,
                           std::string(options.options_name) + ".rdwc_table_entries"));
  }
  return dispatch;
}

}  // namespace dmidx::index
