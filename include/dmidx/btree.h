// A B+tree in the memory nodes of a cluster (after Sherman), behind the
// RangeIndex interface of dmidx/index.h.
//
//   std::unique_ptr<dmidx::BTree> tree;
//   dmidx::Status s = dmidx::BTree::Open(client.get(), "orders", {}, &tree);
//   s = client->Run([&](dmidx::Context& ctx) {
//     return tree->Insert(ctx, dmidx::EncodeUint64Key(42), 7);
//   });
//
// Every technique of the paper has a switch in BTreeOptions; Baseline()
// turns them all off (the paper's FG+), so its breakdown can be measured.
#ifndef DMIDX_BTREE_H_
#define DMIDX_BTREE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/status.h"

namespace dmidx {

struct BTreeOptions {
  // The bounds of key_bytes, node_bytes and rdwc_table_entries below.
  static constexpr uint32_t kMaxKeyBytes = 256;
  static constexpr uint32_t kMinNodeBytes = 256;
  static constexpr uint32_t kMaxNodeBytes = 65536;
  static constexpr uint32_t kNodeBytesMultiple = 64;
  static constexpr size_t kMaxRdwcTableEntries = size_t{1} << 20;

  // Key size of a new tree, 1..kMaxKeyBytes (256) bytes. Opening an
  // existing tree with a different size is InvalidArgument. Default 8.
  uint32_t key_bytes = 8;
  // Node size of a new tree: a multiple of 64 in [256, 65536] that holds at
  // least four entries of key_bytes keys (at the default 1024, keys of up
  // to 152 bytes). Larger nodes
  // mean fewer levels but more bytes per READ; ClientOptions::
  // scratch_bytes_per_context must hold four nodes (an operation's node
  // buffers) plus 320 bytes (the lock layer's words and the runtime's
  // constants; Open says so otherwise); more lets scans read more leaves
  // per round trip and bulk loads write more nodes per round trip. Default
  // 1024.
  uint32_t node_bytes = 1024;
  // Bytes of internal nodes this compute node caches for this tree (shared
  // by its threads, and by its handles of the tree with the same budget);
  // 0 turns the cache off. Default 16 MiB.
  size_t cache_bytes = size_t{16} << 20;
  // HOCL's local lock table (FIFO queues, handover of held locks) and how
  // many handovers in a row. Off: every context CASes the global lock word
  // itself. The table belongs to the compute node: trees whose lock words
  // coincide share entries, and a release hands over by the releasing
  // handle's limit. Default on, 4.
  bool local_lock_table = true;
  uint32_t max_handovers = 4;
  // Command combination: the lock CAS and the node READ in one batch, the
  // write-back and the lock release in one batch, a split's sibling and
  // node WRITEs with the release in one batch. Off: each op waits for the
  // one before it. Default on.
  bool combine_commands = true;
  // Global lock words in the memory nodes' lock region (NIC device memory
  // when the fabric offers it, see FabricCapabilities), or, off, in a table
  // in pool memory (host memory, as the paper's baseline). Fixed when the
  // tree is created: every compute node must use the same words, so opening
  // a tree with the other setting is InvalidArgument. Default on.
  bool on_chip_locks = true;
  // An insert, update or delete without a split writes back only the entry,
  // the bitmap and the checksum (16 bytes plus the entry). Off: the whole
  // node. Default on.
  bool entry_level_write_back = true;
  // Read delegation and write combining (SMART's RDWC, lock/rdwc.h; not in
  // Sherman): lookups of one key by several contexts of this compute node
  // share one leaf READ, and writes of one key fold into one write-back,
  // the last value winning. rdwc_table_entries: entries of the compute
  // node's table (keys hash to entries), 1 to 2^20 (1048576) when either is
  // on (kMaxRdwcTableEntries); Open returns InvalidArgument otherwise.
  // Default off, 4096.
  bool read_delegation = false;
  bool write_combining = false;
  size_t rdwc_table_entries = 4096;
  // How long an operation waits for a node's lock before it gives up with
  // DeadlineExceeded naming the holder's compute node, its detail()
  // StatusDetail::kLockTimeout (a holder that died never releases). Shorter reports a dead peer
  // sooner; too short fails operations under heavy contention. Default 10 s.
  std::chrono::milliseconds lock_timeout{10000};
  // A delete that leaves its leaf with fewer keys than this percentage of
  // the leaf's slots merges the leaf with a sibling under the same parent
  // when both fit in one node (the right one into the left one), and an
  // internal node left that empty by the merge merges in turn; a root with
  // one child left collapses into it (docs/btree.md, "Merges"). Lower
  // keeps sparser leaves (fewer merges, more memory); higher merges more
  // often, and a merged leaf may split again sooner. 0 turns merging off
  // (leaves stay in the chain when emptied). 0 to 50; default 25.
  uint32_t merge_below_percent = 25;
  static constexpr uint32_t kMaxMergeBelowPercent = 50;

  // Every technique off, as the paper's FG+ baseline: no cache, no local
  // lock table, no combination, locks in pool memory, whole-node writes.
  static BTreeOptions Baseline() {
    return {.cache_bytes = 0,
            .local_lock_table = false,
            .combine_commands = false,
            .on_chip_locks = false,
            .entry_level_write_back = false};
  }
};

class BTree : public RangeIndex {
 public:
  // Opens the tree named `name` in `client`'s cluster, creating it (empty)
  // if it does not exist; several compute nodes opening one name share one
  // tree, and one cluster holds any number of trees. The tree must not
  // outlive the client.
  static Status Open(Client* client, std::string_view name, const BTreeOptions& options,
                     std::unique_ptr<BTree>* tree);
  // InvalidArgument, saying which, for options no tree can have: key_bytes
  // or node_bytes out of their bounds, nodes that hold fewer than four
  // entries, a lock_timeout that is not positive, rdwc_table_entries out of
  // bounds with read delegation or write combining on, a
  // merge_below_percent above 50. Open checks these
  // first, touching nothing; it then also needs room for four nodes in the
  // client's scratch (see node_bytes).
  static Status CheckOptions(const BTreeOptions& options);

 protected:
  BTree() = default;
};

}  // namespace dmidx

#endif  // DMIDX_BTREE_H_
