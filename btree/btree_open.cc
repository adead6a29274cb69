// Creating and opening a B+tree: the descriptor in the catalog, where the
// tree's global lock words live, and the per-compute-node parts (local lock
// table, index cache, RDWC table) every handle shares.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "btree/btree_impl.h"
#include "index/catalog.h"
#include "index/open.h"

namespace dmidx::btree {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

// The lock words every memory node's lock region holds (the smallest region
// bounds them all, so that every node hashes alike).
uint64_t LockRegionWords(const runtime::ComputeNode& compute_node) {
  uint64_t words = UINT64_MAX;
  for (uint16_t node = 0; node < compute_node.memory_node_count(); ++node) {
    words = std::min(words, compute_node.layout(node).lock_region_bytes / 8);
  }
  return words;
}

// Writes zeros over [address, address + bytes) from as much of the
// context's arena as is free.
Status Zero(ContextImpl& ctx, RemoteAddress address, uint64_t bytes) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  const size_t room = ctx.arena().Fits(64, 64) * 64;
  const size_t span = static_cast<size_t>(std::min<uint64_t>(bytes, room));
  DMIDX_ASSIGN_OR_RETURN(uint8_t * buffer, ctx.arena().Bytes(std::max<size_t>(span, 8), 64));
  std::span<uint8_t> zeros(buffer, span);
  std::memset(zeros.data(), 0, zeros.size());
  for (uint64_t done = 0; done < bytes;) {
    const auto length = static_cast<uint32_t>(std::min<uint64_t>(bytes - done, zeros.size()));
    const Op write = Op::Write(address + done, zeros.data(), length);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(address.node(), {&write, 1}));
    done += length;
  }
  return Status::Ok();
}

// The pool-memory lock table of a new tree: as many zeroed words on every
// memory node as its lock region has (fewer when a chunk cannot hold that
// many), and a directory of their bases. Returns the directory's address
// and the words per node. Scratch: the directory image at its start.
StatusOr<std::pair<RemoteAddress, uint64_t>> CreatePoolLockTable(ContextImpl& ctx, uint16_t near,
                                                                 index::MadeObjects* made) {
  const runtime::ComputeNode& compute_node = ctx.compute_node();
  const uint32_t nodes = compute_node.memory_node_count();
  uint64_t words = LockRegionWords(compute_node);
  std::vector<uint64_t> bases;
  for (uint16_t node = 0; node < nodes; ++node) {
    StatusOr<RemoteAddress> base = made->Allocate(ctx, words * 8, node);
    // InvalidArgument on the first node: more than a chunk holds; halve.
    while (node == 0 && !base.ok() && base.status().IsInvalidArgument() && words > 1) {
      words /= 2;
      base = made->Allocate(ctx, words * 8, node);
    }
    DMIDX_RETURN_IF_ERROR(base.status());
    bases.push_back(base->raw());
  }
  for (uint16_t node = 0; node < nodes; ++node) {
    DMIDX_RETURN_IF_ERROR(Zero(ctx, RemoteAddress::FromRaw(bases[node]), words * 8));
  }
  DMIDX_ASSIGN_OR_RETURN(RemoteAddress directory, made->Allocate(ctx, 8 * uint64_t{nodes}, near));
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * image, ctx.arena().Words(nodes));
  std::copy(bases.begin(), bases.end(), image);
  const Op write = Op::Write(directory, image, 8 * nodes);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(directory.node(), {&write, 1}));
  return std::make_pair(directory, words);
}

// Creates an empty tree (root leaf, descriptor, the pool lock table if
// asked for) and returns its descriptor's address, not yet published.
StatusOr<RemoteAddress> CreateTree(ContextImpl& ctx, const NodeShape& shape,
                                   const BTreeOptions& options, index::MadeObjects* made) {
  DMIDX_ASSIGN_OR_RETURN(RemoteAddress root, made->Allocate(ctx, shape.node_bytes()));
  DMIDX_ASSIGN_OR_RETURN(RemoteAddress descriptor, made->Allocate(ctx, 64, root.node()));
  Descriptor desc{};
  desc.head = {.magic = kDescriptorMagic, .key_bytes = shape.key_bytes(), .flags = 0};
  desc.root = root.raw();
  desc.node_bytes = shape.node_bytes();
  if (!options.on_chip_locks) {
    DMIDX_ASSIGN_OR_RETURN(auto table, CreatePoolLockTable(ctx, root.node(), made));
    desc.head.flags |= kPoolLocks;
    desc.lock_directory = table.first.raw();
    desc.lock_words = table.second;
  }
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(shape.node_bytes(), 64));
  NodeView leaf(shape, image);
  leaf.InitLeaf("", "", RemoteAddress());
  leaf.Seal();
  const Op write = Op::Write(root, image, shape.node_bytes());
  DMIDX_RETURN_IF_ERROR(ctx.Execute(root.node(), {&write, 1}));
  // The descriptor after the root it names.
  DMIDX_RETURN_IF_ERROR(index::WriteDescriptor(ctx, descriptor, &desc));
  return descriptor;
}

StatusOr<lock::GlobalLockTable> ReadLockTable(ContextImpl& ctx, const Descriptor& desc) {
  const runtime::ComputeNode& compute_node = ctx.compute_node();
  lock::GlobalLockTable table;
  if ((desc.head.flags & kPoolLocks) == 0) {
    for (uint16_t node = 0; node < compute_node.memory_node_count(); ++node) {
      table.bases.push_back(RemoteAddress::Lock(node, 0));
    }
    table.words_per_node = LockRegionWords(compute_node);
    return table;
  }
  const uint32_t nodes = compute_node.memory_node_count();
  const RemoteAddress directory = RemoteAddress::FromRaw(desc.lock_directory);
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * image, ctx.arena().Words(nodes));
  const Op read = Op::Read(directory, image, 8 * nodes);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(directory.node(), {&read, 1}));
  for (uint32_t node = 0; node < nodes; ++node) {
    table.bases.push_back(RemoteAddress::FromRaw(image[node]));
  }
  table.words_per_node = desc.lock_words;
  return table;
}

// The descriptor of tree `name`, found or created, and the lock table its
// options ask for (creating the pool lock table with a new tree).
struct OpenedTree {
  RemoteAddress descriptor;
  NodeShape shape;
  lock::GlobalLockTable locks;
};

StatusOr<OpenedTree> OpenDescriptor(Client& client, std::string_view name,
                                    const BTreeOptions& options) {
  DMIDX_ASSIGN_OR_RETURN(NodeShape shape, NodeShape::Make(options.node_bytes, options.key_bytes));
  runtime::ComputeNode& compute_node = runtime::ComputeNode::Of(client);
  // An operation's node buffers and the lock layer's words; creating the
  // tree also needs the descriptor and a lock directory next to a node.
  const size_t scratch_needed =
      std::max<size_t>(kMaxNodeBuffers * static_cast<size_t>(shape.node_bytes()),
                       shape.node_bytes() + 8 * size_t{compute_node.memory_node_count()} + 128) +
      index::kScratchReserveBytes + ContextImpl::kRuntimeScratchBytes;
  if (scratch_needed > client.options().scratch_bytes_per_context) {
    return Status::InvalidArgument(
        "node_bytes " + std::to_string(shape.node_bytes()) + " with " +
        std::to_string(compute_node.memory_node_count()) +
        " memory nodes needs ClientOptions.scratch_bytes_per_context >= " +
        std::to_string(scratch_needed));
  }
  DMIDX_ASSIGN_OR_RETURN(
      const index::OpenedDescriptor opened,
      index::OpenDescriptor(client, {"btree", "B+tree", name, kDescriptorMagic, shape.key_bytes()},
                            [&](ContextImpl& creating, index::MadeObjects* made) {
                              return CreateTree(creating, shape, options, made);
                            }));
  const auto desc = opened.As<Descriptor>();
  const std::string tree = "B+tree '" + std::string(name) + "'";
  if (desc.node_bytes != shape.node_bytes()) {
    return Status::InvalidArgument(tree + " exists with " + std::to_string(desc.node_bytes) +
                                   "-byte nodes, not " + std::to_string(shape.node_bytes()));
  }
  const bool pool_locks = (desc.head.flags & kPoolLocks) != 0;
  if (pool_locks == options.on_chip_locks) {
    return Status::InvalidArgument(tree + " exists with its locks in " +
                                   (pool_locks
                                        ? "pool memory; open it with on_chip_locks = false"
                                        : "the lock region; open it with on_chip_locks = true"));
  }
  DMIDX_ASSIGN_OR_RETURN(lock::GlobalLockTable locks, ReadLockTable(opened.ctx(), desc));
  return OpenedTree{opened.address, shape, std::move(locks)};
}

}  // namespace
}  // namespace dmidx::btree

namespace dmidx {

Status BTree::CheckOptions(const BTreeOptions& options) {
  DMIDX_RETURN_IF_ERROR(btree::NodeShape::Make(options.node_bytes, options.key_bytes).status());
  if (options.merge_below_percent > BTreeOptions::kMaxMergeBelowPercent) {
    return Status::InvalidArgument("BTreeOptions::merge_below_percent must be in [0, " +
                                   std::to_string(BTreeOptions::kMaxMergeBelowPercent) + "], not " +
                                   std::to_string(options.merge_below_percent));
  }
  return index::CheckCommonOptions(index::CommonOptions::Of("BTreeOptions", options));
}

Status BTree::Open(Client* client, std::string_view name, const BTreeOptions& options,
                   std::unique_ptr<BTree>* tree) {
  DMIDX_RETURN_IF_ERROR(index::CheckOpen("BTree::Open", client, tree));
  DMIDX_RETURN_IF_ERROR(CheckOptions(options));
  runtime::ComputeNode& node = runtime::ComputeNode::Of(*client);
  DMIDX_ASSIGN_OR_RETURN(btree::OpenedTree opened, btree::OpenDescriptor(*client, name, options));
  const uint64_t owner_tag = node.id() + 1;
  DMIDX_RETURN_IF_ERROR(lock::HierarchicalLock::ValidateOwnerTag(owner_tag));
  // Per compute node, not per handle: the local lock table (all trees) and
  // the index cache (per tree and budget).
  auto local_locks = node.Shared(runtime::SharedKey<lock::LocalLockTable>("hocl/local-lock-table"),
                                 [] { return std::make_shared<lock::LocalLockTable>(); });
  std::shared_ptr<btree::BTreeCache> cache;
  if (options.cache_bytes > 0) {
    cache = node.Shared(
        runtime::SharedKey<btree::BTreeCache>("btree/cache/" + opened.descriptor.ToString() + "/" +
                                              std::to_string(options.cache_bytes)),
        [&] {
          return std::make_shared<btree::BTreeCache>(opened.shape, options.cache_bytes,
                                                     node.epochs());
        });
  }
  DMIDX_ASSIGN_OR_RETURN(index::RdwcDispatch rdwc,
                         index::OpenRdwc(node, "btree/" + opened.descriptor.ToString(),
                                         index::CommonOptions::Of("BTreeOptions", options)));
  *tree = std::make_unique<btree::BTreeImpl>(
      node, std::string(name), opened.shape, opened.descriptor, std::move(opened.locks), options,
      owner_tag, std::move(local_locks), std::move(cache), std::move(rdwc));
  return Status::Ok();
}

}  // namespace dmidx
