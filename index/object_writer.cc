#include "index/object_writer.h"

#include "index/restarts.h"

namespace dmidx::index {

StatusOr<fabric::RemoteAddress> ObjectWriter::Allocate(uint64_t bytes,
                                                       std::optional<uint16_t> near) {
  StatusOr<fabric::RemoteAddress> address = made_.Allocate(ctx_, bytes, near);
  if (near && !address.ok() && address.status().IsResourceExhausted()) {
    address = made_.Allocate(ctx_, bytes);
  }
  return address;
}

StatusOr<uint8_t*> ObjectWriter::Buffer(uint32_t bytes) {
  if (ctx_.arena().Fits(bytes, 64, kScratchReserveBytes) == 0) DMIDX_RETURN_IF_ERROR(Flush());
  return ctx_.arena().Bytes(bytes, 64);
}

Status ObjectWriter::Flush() {
  Status status;
  if (!ops_.empty()) status = ctx_.ExecuteAll(ops_);
  ops_.clear();
  scope_.reset();
  scope_.emplace(ctx_.arena());
  if (!status.ok()) made_.FreeAll(ctx_);
  return status;
}

}  // namespace dmidx::index
