// A B+tree in the memory nodes of a cluster (after Sherman). Keys are fixed
// size byte strings per tree (dmidx/keys.h encodes integers), compared as
// unsigned bytes; values are any 8 bytes, 0 included.
//
//   std::unique_ptr<dmidx::BTree> tree;
//   dmidx::Status s = dmidx::BTree::Open(client.get(), "orders", {}, &tree);
//   s = client->Run([&](dmidx::Context& ctx) {
//     return tree->Insert(ctx, dmidx::EncodeUint64Key(42), 7);
//   });
//
// Every operation takes the caller's Context (a coroutine of Client::Run or
// a blocking context) and may be called from many contexts at once.
#ifndef DMIDX_BTREE_H_
#define DMIDX_BTREE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "dmidx/cluster.h"
#include "dmidx/status.h"

namespace dmidx {

struct BTreeOptions {
  // Key size of a new tree, 1..256 bytes. Opening an existing tree with a
  // different size is InvalidArgument. Default 8.
  uint32_t key_bytes = 8;
  // Node size of a new tree: a multiple of 64, at least 256. Larger nodes
  // mean fewer levels but more bytes per READ. Default 1024.
  uint32_t node_bytes = 1024;
  // Bytes of internal nodes this compute node caches (shared by its
  // threads); 0 turns the cache off. Default 16 MiB.
  size_t cache_bytes = size_t{16} << 20;
  // HOCL's local lock table (FIFO queues, handover of held locks) and how
  // many handovers in a row. Default on, 4.
  bool local_lock_table = true;
  uint32_t max_handovers = 4;
};

class BTree {
 public:
  // Opens the tree named `name` in `client`'s cluster, creating it (empty)
  // if it does not exist; several compute nodes opening one name share one
  // tree. The tree must not outlive the client.
  static Status Open(Client* client, std::string_view name, const BTreeOptions& options,
                     std::unique_ptr<BTree>* tree);

  virtual ~BTree() = default;
  BTree(const BTree&) = delete;
  BTree& operator=(const BTree&) = delete;

  // Sets `key` to `value`, adding it if absent.
  virtual Status Insert(Context& ctx, std::string_view key, uint64_t value) = 0;
  // Sets `key` to `value` if present; NotFound (nothing changed) otherwise.
  virtual Status Update(Context& ctx, std::string_view key, uint64_t value) = 0;
  // Removes `key`; NotFound if absent.
  virtual Status Delete(Context& ctx, std::string_view key) = 0;
  // NotFound if absent.
  virtual Status Lookup(Context& ctx, std::string_view key, uint64_t* value) = 0;

  virtual uint32_t key_bytes() const = 0;

 protected:
  BTree() = default;
};

}  // namespace dmidx

#endif  // DMIDX_BTREE_H_
