#include "index/index_core.h"

#include <algorithm>
#include <utility>

#include "lib/common/counter_fields.h"
#include "lib/common/relaxed_counters.h"

namespace dmidx::index {

IndexCore::IndexCore(runtime::ComputeNode& node, std::string kind, std::string name,
                     uint32_t key_bytes)
    : serial_(node.NewSerial()),
      label_(std::move(kind) + " '" + std::move(name) + "'"),
      key_bytes_(key_bytes) {}

IndexCore::~IndexCore() = default;

Status IndexCore::WrongKeySize(size_t size) const {
  return Status::InvalidArgument("key of " + std::to_string(size) + " bytes; " + label_ + " has " +
                                 std::to_string(key_bytes_) + "-byte keys");
}

IndexCore::Shard& IndexCore::NewShard(void*& local) {
  auto shard = std::make_unique<Shard>();
  local = shard.get();
  std::lock_guard<std::mutex> guard(shards_mutex_);
  shards_.push_back(std::move(shard));
  return *static_cast<Shard*>(local);
}

void IndexCore::Charge(runtime::ContextImpl& ctx, IndexOp op, const OpCounters& before) {
  void*& local = ctx.worker().LocalObject(serial_);
  Shard& shard = local != nullptr ? *static_cast<Shard*>(local) : NewShard(local);
  ChargeOwnedRelaxed(&shard.by_op[static_cast<size_t>(op)], ctx.counters(), before);
  const auto waited = static_cast<uint64_t>(ctx.TakeLongestLockWait().count());
  if (waited > shard.longest_lock_wait_ns) {
    std::atomic_ref<uint64_t>(shard.longest_lock_wait_ns).store(waited, std::memory_order_relaxed);
  }
}

IndexStats IndexCore::stats() const {
  IndexStats sum;
  std::lock_guard<std::mutex> guard(shards_mutex_);
  for (const auto& shard : shards_) {
    for (size_t i = 0; i < kIndexOpKinds; ++i)
      sum.by_op[i] += LoadRelaxed(shard->by_op[i]);
    sum.longest_lock_wait_ns =
        std::max(sum.longest_lock_wait_ns,
                 std::atomic_ref<uint64_t>(const_cast<uint64_t&>(shard->longest_lock_wait_ns))
                     .load(std::memory_order_relaxed));
  }
  return sum;
}

Status IndexCore::CheckBulkLoad(std::span<const KeyValue> sorted, double fill_factor) const {
  if (!(fill_factor > 0 && fill_factor <= 1)) {
    return Status::InvalidArgument("BulkLoad fill factor " + std::to_string(fill_factor) +
                                   " is not in (0, 1]");
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (Status key = CheckKey(sorted[i].key); !key.ok()) {
      return Status::InvalidArgument("BulkLoad entry " + std::to_string(i) + ": " +
                                     std::string(key.message()));
    }
    if (i > 0 && !(sorted[i - 1].key < sorted[i].key)) {
      return Status::InvalidArgument("BulkLoad input is not strictly ascending at entry " +
                                     std::to_string(i));
    }
  }
  return Status::Ok();
}

}  // namespace dmidx::index
