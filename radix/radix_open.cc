// Creating and opening a radix tree: the descriptor in the catalog, and the
// per-compute-node parts (ART cache, RDWC table) every handle shares.
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "index/catalog.h"
#include "index/open.h"
#include "radix/radix_impl.h"

namespace dmidx::radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// Finds or creates the descriptor of tree `name`.
struct OpenedRadix {
  RemoteAddress descriptor;
  uint32_t key_bytes;
  bool fixed_size;
};

StatusOr<OpenedRadix> OpenDescriptor(Client& client, std::string_view name,
                                     const RadixOptions& options) {
  if (options.key_bytes == 0 || options.key_bytes > kMaxKeyBytes) {
    return Status::InvalidArgument("RadixOptions.key_bytes must be 1.." +
                                   std::to_string(kMaxKeyBytes) + ", not " +
                                   std::to_string(options.key_bytes));
  }
  runtime::ComputeNode& compute_node = runtime::ComputeNode::Of(client);
  for (uint16_t node = 0; node < compute_node.memory_node_count(); ++node) {
    if (compute_node.layout(node).pool_bytes > kMaxPoolBytes) {
      return Status::InvalidArgument(
          "radix trees address pools of at most 256 GiB (32-bit offsets in 64-byte units); "
          "memory node " +
          std::to_string(node) + " has " + std::to_string(compute_node.layout(node).pool_bytes) +
          " bytes");
    }
  }
  // An operation's buffers: up to four nodes (a delete's descent, the
  // node around the leaf, a merge's descent and its image), a few leaves,
  // and words (a merge CASes up to 257 slots), with what nested scopes
  // take (index::kScratchReserveBytes); a split's new node images are
  // written as many per round trip as fit.
  const LeafShape shape(options.key_bytes);
  const size_t scratch_needed = 4 * size_t{kNodeBytes} + 4 * size_t{shape.bytes()} +
                                8 * (kMaxSlots + 1) + index::kScratchReserveBytes +
                                ContextImpl::kRuntimeScratchBytes;
  if (scratch_needed > client.options().scratch_bytes_per_context) {
    return Status::InvalidArgument("radix trees with " + std::to_string(options.key_bytes) +
                                   "-byte keys need ClientOptions.scratch_bytes_per_context >= " +
                                   std::to_string(scratch_needed));
  }
  DMIDX_ASSIGN_OR_RETURN(
      const index::OpenedDescriptor opened,
      index::OpenDescriptor(
          client, {"radix", "radix tree", name, kDescriptorMagic, options.key_bytes},
          [&](ContextImpl& creating, index::MadeObjects* made) -> StatusOr<RemoteAddress> {
            DMIDX_ASSIGN_OR_RETURN(RemoteAddress address,
                                   made->Allocate(creating, sizeof(Descriptor)));
            Descriptor desc{};
            desc.head = {.magic = kDescriptorMagic,
                         .key_bytes = options.key_bytes,
                         .flags = options.homogeneous_nodes ? 0 : kFixedSizeNodes};
            DMIDX_RETURN_IF_ERROR(index::WriteDescriptor(creating, address, &desc));
            return address;
          }));
  const auto desc = opened.As<Descriptor>();
  const bool fixed_size = (desc.head.flags & kFixedSizeNodes) != 0;
  if (fixed_size == options.homogeneous_nodes) {
    return Status::InvalidArgument("radix tree '" + std::string(name) + "' exists with " +
                                   (fixed_size
                                        ? "fixed-size nodes; open it with homogeneous_nodes = false"
                                        : "adaptive nodes; open it with homogeneous_nodes = true"));
  }
  return OpenedRadix{opened.address, desc.head.key_bytes, fixed_size};
}

}  // namespace
}  // namespace dmidx::radix

namespace dmidx {

Status Radix::Open(Client* client, std::string_view name, const RadixOptions& options,
                   std::unique_ptr<Radix>* tree) {
  DMIDX_RETURN_IF_ERROR(index::CheckOpen("Radix::Open", client, tree));
  const auto common = index::CommonOptions::Of("RadixOptions", options);
  DMIDX_RETURN_IF_ERROR(index::CheckCommonOptions(common));
  if (options.leaf_queue_buckets == 0 ||
      options.leaf_queue_buckets > RadixOptions::kMaxLeafQueueBuckets) {
    return Status::InvalidArgument(
        "RadixOptions.leaf_queue_buckets is " + std::to_string(options.leaf_queue_buckets) +
        "; it must be 1 to " + std::to_string(RadixOptions::kMaxLeafQueueBuckets));
  }
  runtime::ComputeNode& node = runtime::ComputeNode::Of(*client);
  DMIDX_ASSIGN_OR_RETURN(radix::OpenedRadix opened, radix::OpenDescriptor(*client, name, options));
  // Per compute node, not per handle: the ART cache (per tree and budget)
  // and the RDWC table (per tree and size).
  const std::string tree_key = opened.descriptor.ToString();
  std::shared_ptr<radix::RadixCache> cache;
  if (options.cache_bytes > 0) {
    cache = node.Shared(
        runtime::SharedKey<radix::RadixCache>("radix/cache/" + tree_key + "/" +
                                              std::to_string(options.cache_bytes)),
        [&] { return std::make_shared<radix::RadixCache>(options.cache_bytes, node.epochs()); });
  }
  DMIDX_ASSIGN_OR_RETURN(index::RdwcDispatch rdwc,
                         index::OpenRdwc(node, "radix/" + tree_key, common));
  *tree = std::make_unique<radix::RadixImpl>(node, std::string(name), opened.key_bytes,
                                             opened.fixed_size, opened.descriptor, options,
                                             std::move(cache), std::move(rdwc));
  return Status::Ok();
}

}  // namespace dmidx
