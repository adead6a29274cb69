#include "lib/runtime/cluster_backend.h"

#include <charconv>

namespace dmidx::runtime {

StatusOr<std::unique_ptr<ClusterBackend>> ClusterBackend::Open(const ClusterOptions& options) {
  switch (options.backend) {
    case FabricBackend::kLocal:
      return OpenLocalBackend(options);
    case FabricBackend::kVerbs:
      return OpenVerbsBackend(options);
    case FabricBackend::kSim:
      return OpenSimBackend(options);
  }
  return Status::InvalidArgument("unknown fabric backend " +
                                 std::to_string(static_cast<int>(options.backend)));
}

Status ClusterBackend::PutRecord(std::string_view name, std::string_view bytes) {
  {
    std::lock_guard<std::mutex> guard(records_mutex_);
    records_[std::string(name)] = std::string(bytes);
  }
  records_changed_.notify_all();
  return Status::Ok();
}

StatusOr<std::string> ClusterBackend::GetRecord(std::string_view name,
                                                std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(records_mutex_);
  auto found = records_.end();
  const bool present = records_changed_.wait_for(lock, timeout, [&] {
    found = records_.find(name);
    return found != records_.end();
  });
  if (!present) {
    return Status::DeadlineExceeded("record '" + std::string(name) + "' did not appear within " +
                                    std::to_string(timeout.count()) + " ms");
  }
  return found->second;
}

StatusOr<uint64_t> ClusterBackend::IncrementRecord(std::string_view name) {
  std::lock_guard<std::mutex> guard(records_mutex_);
  std::string& value = records_[std::string(name)];
  uint64_t current = 0;
  if (!value.empty()) {
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), current);
    if (error != std::errc() || end != value.data() + value.size()) {
      return Status::FailedPrecondition("record '" + std::string(name) + "' is not a counter");
    }
  }
  value = std::to_string(current + 1);
  return current + 1;
}

StatusOr<uint32_t> ClusterBackend::AttachClient() {
  DMIDX_ASSIGN_OR_RETURN(const uint32_t id, DoAttachClient());
  bool closed = false;
  {
    std::lock_guard<std::mutex> guard(closed_ids_mutex_);
    closed = closed_ids_.contains(id);
  }
  if (!closed) return id;
  DoDetachClient();
  return Status::FailedPrecondition(
      "compute node " + std::to_string(id) +
      "'s last client closed unsettled (a batch of it failed, or a recovery it began was left "
      "unfinished), so it may have left words held that only a recovery of compute node " +
      std::to_string(id) +
      " ends, once its lease times out: no client opens as that node again; open the cluster "
      "again to come back as a new compute node");
}

void ClusterBackend::DetachClient(uint32_t id, bool settled) {
  if (!settled && ClosesUnsettledIds()) {
    std::lock_guard<std::mutex> guard(closed_ids_mutex_);
    closed_ids_.insert(id);
  }
  DoDetachClient();
}

}  // namespace dmidx::runtime
