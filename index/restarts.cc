#include "index/restarts.h"

#include <string>

namespace dmidx::index {

Status GaveUp(std::string_view what, std::string_view index) {
  return Status::Aborted(std::string(what) + " on " + std::string(index) + " gave up after " +
                         std::to_string(kMaxRestarts) + " restarts");
}

}  // namespace dmidx::index
