#include "lib/fabric/fabric.h"

#include <iterator>
#include <string>

namespace dmidx::fabric {

const char* OpCodeName(OpCode code) {
  switch (code) {
    case OpCode::kRead:
      return "READ";
    case OpCode::kWrite:
      return "WRITE";
    case OpCode::kCompareSwap:
      return "CAS";
    case OpCode::kFetchAdd:
      return "FAA";
  }
  return "?";
}

std::string RemoteAddress::ToString() const {
  if (is_null()) return "null";
  char buffer[64];
  snprintf(buffer, sizeof(buffer), "mn%u:%s+0x%llx", unsigned{node()},
           region() == Region::kLock ? "lock" : "pool", static_cast<unsigned long long>(offset()));
  return buffer;
}

void EndpointCounters::AddOpsPerNode(std::vector<uint64_t>* ops) const {
  if (ops->size() < memory_nodes_) ops->resize(memory_nodes_);
  for (uint16_t node = 0; node < memory_nodes_; ++node) {
    (*ops)[node] += ops_to_node_[node].load(std::memory_order_relaxed);
  }
}

void EndpointCounters::AddTo(Stats* stats) const {
  stats->batches += batches_.load(std::memory_order_relaxed);
  stats->reads += reads_.load(std::memory_order_relaxed);
  stats->writes += writes_.load(std::memory_order_relaxed);
  stats->compare_swaps += compare_swaps_.load(std::memory_order_relaxed);
  stats->fetch_adds += fetch_adds_.load(std::memory_order_relaxed);
  stats->bytes_read += bytes_read_.load(std::memory_order_relaxed);
  stats->bytes_written += bytes_written_.load(std::memory_order_relaxed);
  stats->compare_swap_failures += compare_swap_failures_.load(std::memory_order_relaxed);
}

namespace {

Status OpError(size_t index, const Op& op, const std::string& what) {
  return Status::InvalidArgument("op " + std::to_string(index) + " (" + OpCodeName(op.code) + " " +
                                 op.remote.ToString() + "): " + what);
}

}  // namespace

Status ValidateBatch(uint16_t node, std::span<const Op> ops, uint16_t node_count,
                     const NodeLayout& layout, const FabricCapabilities& capabilities) {
  if (node >= node_count) {
    return Status::InvalidArgument("memory node " + std::to_string(node) +
                                   " does not exist; the cluster has " +
                                   std::to_string(node_count));
  }
  if (ops.empty()) return Status::InvalidArgument("empty batch");
  if (ops.size() > capabilities.max_batch_ops) {
    return Status::InvalidArgument("batch of " + std::to_string(ops.size()) +
                                   " ops exceeds the limit of " +
                                   std::to_string(capabilities.max_batch_ops));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.remote.node() != node) return OpError(i, op, "address is not on this batch's node");
    if (op.local == nullptr) return OpError(i, op, "null local buffer");
    const bool atomic = op.code == OpCode::kCompareSwap || op.code == OpCode::kFetchAdd;
    if (atomic) {
      if (op.length != 8) return OpError(i, op, "atomics act on exactly 8 bytes");
      if (op.remote.offset() % 8 != 0) return OpError(i, op, "atomic on a misaligned address");
      if (reinterpret_cast<uintptr_t>(op.local) % 8 != 0) {
        return OpError(i, op, "atomic result buffer is not 8-byte aligned");
      }
    } else {
      if (op.length == 0) return OpError(i, op, "zero length");
      if (op.length > capabilities.max_message_bytes) {
        return OpError(i, op,
                       "length " + std::to_string(op.length) + " exceeds the limit of " +
                           std::to_string(capabilities.max_message_bytes));
      }
    }
    if ((op.flags & kInline) &&
        (op.code != OpCode::kWrite || op.length > capabilities.max_inline_bytes)) {
      return OpError(i, op,
                     "inline is for WRITEs of at most " +
                         std::to_string(capabilities.max_inline_bytes) + " bytes");
    }
    const uint64_t region_bytes =
        op.remote.region() == Region::kLock ? layout.lock_region_bytes : layout.pool_bytes;
    if (op.remote.offset() > region_bytes || op.length > region_bytes - op.remote.offset()) {
      return OpError(i, op,
                     std::to_string(op.length) + " bytes run past the end of the " +
                         std::to_string(region_bytes) + "-byte region");
    }
  }
  return Status::Ok();
}

Status Endpoint::RegisterLocal(void* base, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(base);
  if (base == nullptr || bytes == 0 || bytes > UINTPTR_MAX - begin) {
    return Status::InvalidArgument("registering an empty, null or wrapping local region");
  }
  DMIDX_ASSIGN_OR_RETURN(const uint32_t key, DoRegister(base, bytes));
  registered_.Add(begin, bytes, key);
  return Status::Ok();
}

namespace {

std::vector<NodeLayout> LayoutsOf(const Fabric& fabric) {
  std::vector<NodeLayout> layouts(fabric.node_count());
  for (uint16_t node = 0; node < fabric.node_count(); ++node)
    layouts[node] = fabric.layout(node);
  return layouts;
}

}  // namespace

Endpoint::Endpoint(const Fabric& fabric, uint32_t compute_node)
    : counters_(fabric.node_count()),
      compute_node_(compute_node),
      capabilities_(fabric.capabilities()),
      layouts_(LayoutsOf(fabric)) {}

// The rules ValidateBatch spells out, as arithmetic combined with `&`
// (no branch to an error message, no call), plus the local buffer's
// registration as far as the last registered range found tells: a buffer
// elsewhere fails here and passes through Reject(), which looks it up.
bool Endpoint::Admit(uint16_t node, std::span<const Op> ops, EndpointCounters::Tally* tally) const {
  if (node >= layouts_.size() || ops.empty() || ops.size() > capabilities_.max_batch_ops) {
    return false;
  }
  const uint64_t pool_bytes = layouts_[node].pool_bytes;
  const uint64_t lock_bytes = layouts_[node].lock_region_bytes;
  const uint64_t max_message = capabilities_.max_message_bytes;
  const uint64_t max_inline = capabilities_.max_inline_bytes;
  EndpointCounters::Tally counts;
  bool ok = true;
  for (const Op& op : ops) {
    // An offset is below 2^48 and a length below 2^32: the sum cannot wrap.
    const uint64_t offset = op.remote.offset();
    const uint64_t length = op.length;
    const uint64_t region = op.remote.region() == Region::kLock ? lock_bytes : pool_bytes;
    const auto local = reinterpret_cast<uintptr_t>(op.local);
    const bool atomic = op.code == OpCode::kCompareSwap || op.code == OpCode::kFetchAdd;
    const bool write = op.code == OpCode::kWrite;
    const bool shape = atomic ? (length == 8) & (((offset | local) & 7) == 0)
                              : length - 1 < max_message;  // 1..max_message
    const bool inline_ok = ((op.flags & kInline) == 0) | (write & (length <= max_inline));
    // A null buffer fails InLastFound: RegisterLocal refuses a null base
    // and a wrapping range, so no registered range holds address 0.
    ok &= (op.remote.node() == node) & (offset + length <= region) & shape & inline_ok &
          registered_.InLastFound(local, length);
    // As BytesOf and CountPost count (an op code outside OpCode counts
    // nowhere).
    const auto code = static_cast<uint8_t>(op.code);
    if (code < std::size(counts.ops)) ++counts.ops[code];
    counts.bytes.read += atomic ? 8 : op.code == OpCode::kRead ? length : 0;
    counts.bytes.written += atomic ? 8 : write ? length : 0;
  }
  *tally = counts;
  return ok;
}

Status Endpoint::Reject(uint16_t node, std::span<const Op> ops) const {
  const auto nodes = static_cast<uint16_t>(layouts_.size());
  DMIDX_RETURN_IF_ERROR(
      ValidateBatch(node, ops, nodes, node < nodes ? layouts_[node] : NodeLayout{}, capabilities_));
  for (size_t i = 0; i < ops.size(); ++i) {
    if (registered_.Find(ops[i].local, ops[i].length) == nullptr) {
      return OpError(i, ops[i], "local buffer is not in memory registered with this endpoint");
    }
  }
  return Status::Ok();
}

Status Endpoint::Post(uint16_t node, std::span<const Op> ops, Completion* completion,
                      OpBytes* bytes) {
  EndpointCounters::Tally tally;
  if (!Admit(node, ops, &tally)) {
    // ValidateBatch and the registrations decide, and name the op and the
    // rule it breaks. A batch they pass (a buffer in another registered
    // range than the last one found) is posted as usual.
    DMIDX_RETURN_IF_ERROR(Reject(node, ops));
  }
  if (completion) completion->Expect();
  Status status = DoPost(node, ops, completion);
  if (!status.ok()) {
    if (completion) completion->Finish(status);
    return status;
  }
  counters_.CountPost(node, ops.size(), tally);
  if (bytes) {
    bytes->read += tally.bytes.read;
    bytes->written += tally.bytes.written;
  }
  return status;
}

Status Fabric::FenceComputeNode(uint32_t compute_node) {
  if (compute_node == kUnnamedComputeNode) {
    return Status::InvalidArgument(
        "FenceComputeNode: an endpoint of no compute node (Connect() without an id) cannot be "
        "fenced");
  }
  return DoFenceComputeNode(compute_node);
}

}  // namespace dmidx::fabric
