#include "index/restarts.h"

#include <string>

#include "lock/redo_log.h"

namespace dmidx::index {

static_assert(kScratchReserveBytes >= lock::RedoLog::kRecoveryScratchBytes + 256,
              "a wait inside a greedy operation can recover a dead holder, with its words");

Status GaveUp(std::string_view what, std::string_view index) {
  return Status::Aborted(std::string(what) + " on " + std::string(index) + " gave up after " +
                         std::to_string(kMaxRestarts) + " restarts");
}

}  // namespace dmidx::index
