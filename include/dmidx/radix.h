// An adaptive radix tree in the memory nodes of a cluster (after SMART),
// behind the RangeIndex interface of dmidx/index.h: the same calls as the
// B+tree (dmidx/btree.h), so an engine switches index by name.
//
//   std::unique_ptr<dmidx::Radix> tree;
//   dmidx::Status s = dmidx::Radix::Open(client.get(), "orders", {}, &tree);
//   s = client->Run([&](dmidx::Context& ctx) {
//     return tree->Insert(ctx, dmidx::EncodeUint64Key(42), 7);
//   });
//
// Internal nodes are lock-free (changed by CAS only); each key has a leaf of
// its own, updated in place under a lock word at its rear. Every technique
// has a switch in RadixOptions; Baseline() turns them all off. See
// docs/radix.md for the layouts and protocols.
#ifndef DMIDX_RADIX_H_
#define DMIDX_RADIX_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "dmidx/cluster.h"
#include "dmidx/index.h"
#include "dmidx/status.h"

namespace dmidx {

struct RadixOptions {
  // The bounds of key_bytes, rdwc_table_entries and leaf_queue_buckets
  // below.
  static constexpr uint32_t kMaxKeyBytes = 128;
  static constexpr size_t kMaxRdwcTableEntries = size_t{1} << 20;
  static constexpr size_t kMaxLeafQueueBuckets = size_t{1} << 16;
  // The largest memory-node pool a radix tree addresses (child pointers
  // hold 32-bit offsets in 64-byte units): 256 GiB. Open refuses a cluster
  // with a larger one.
  static constexpr uint64_t kMaxPoolBytes = uint64_t{256} << 30;

  // Key size of a new tree, 1..kMaxKeyBytes (128) bytes (shorter keys,
  // e.g. strings, are zero-padded by the caller). Opening an existing tree with a different
  // size is InvalidArgument. Default 8.
  uint32_t key_bytes = 8;
  // Bytes of internal nodes this compute node caches for this tree (the ART
  // cache, shared by its threads and by its handles of the tree with the
  // same budget); 0 turns the cache off. Default 16 MiB.
  size_t cache_bytes = size_t{16} << 20;
  // Leaves updated in place under the lock word at their rear. Off: an
  // update writes a new leaf and swings its parent's slot to it with CAS
  // (out of place), which invalidates cached routes to the old leaf.
  // Default on.
  bool in_place_leaves = true;
  // With in-place leaves: the write-back and the lock release go out in
  // one batch (one round trip; the release is a second WRITE, ordered after
  // the first). Off: the release waits for the write-back to complete.
  // Default on.
  bool rear_embedded_lock = true;
  // Lookups of one key by several contexts of this compute node share one
  // READ (lock/rdwc.h). Default on.
  bool read_delegation = true;
  // Writes of one key by several contexts of this compute node fold into
  // one remote write, the last value winning. Default on.
  bool write_combining = true;
  // Entries of the compute node's RDWC table (keys hash to entries; an
  // entry busy with another key runs the operation alone): 1 to
  // kMaxRdwcTableEntries (2^20) when read_delegation or write_combining is
  // on; Open returns InvalidArgument otherwise. Default 4096.
  size_t rdwc_table_entries = 4096;
  // Internal nodes grow through 7 types (4, 8, ... 256 slots) and a READ
  // fetches only the slots the node's type uses. Off: every node has 256
  // slots and is read whole (the fixed-size ART of SMART's Figure 20).
  // Fixed when the tree is created. Default on.
  bool homogeneous_nodes = true;
  // With in-place leaves: how many times in a row a leaf's lock (its rear
  // word) passes from one context of this compute node to the next queued
  // for it, with the holder's image of the leaf and no remote op, before it
  // is released so that other compute nodes get their turn. 0: never handed
  // over (each holder releases, the next CASes again). More saves round
  // trips on a hot key and makes other compute nodes wait longer for it.
  // Contexts of a compute node queue for a leaf's lock whatever this is.
  // Default 4, as BTreeOptions::max_handovers.
  uint32_t max_handovers = 4;
  // Buckets of the compute node's table of leaf-lock queues: its contexts
  // wait for a leaf's lock in a FIFO queue of that leaf's own (taken when
  // the leaf is wanted, reused for another leaf once nobody waits), found
  // through a bucket (a short list behind a spin lock). Each bucket costs
  // about 1 KiB, its first queue included, made up front; a bucket makes
  // another queue only when more of its leaves are wanted at once than ever
  // before. More buckets: shorter lists, fewer threads sharing a flag. The
  // table is one per compute node, shared by all its radix trees (a leaf's
  // lock must have one queue there): the first tree opened on the compute
  // node sizes it, and later ones share it as it is. 1 to
  // kMaxLeafQueueBuckets (2^16: 64 MiB); Open returns InvalidArgument
  // otherwise.
  // Default 1024.
  size_t leaf_queue_buckets = 1024;
  // How long an update waits for a leaf's lock before it gives up with
  // DeadlineExceeded naming the holder's compute node, its detail()
  // StatusDetail::kLockTimeout. Default 10 s.
  std::chrono::milliseconds lock_timeout{10000};

  // Every technique off: out-of-place leaves, no cache, no RDWC, fixed-size
  // 256-slot nodes (SMART's naive ART with lock-free internal nodes).
  static RadixOptions Baseline() {
    return {.cache_bytes = 0,
            .in_place_leaves = false,
            .rear_embedded_lock = false,
            .read_delegation = false,
            .write_combining = false,
            .homogeneous_nodes = false};
  }
};

class Radix : public RangeIndex {
 public:
  // Opens the tree named `name` in `client`'s cluster, creating it (empty)
  // if it does not exist; several compute nodes opening one name share one
  // tree. Radix trees and B+trees have separate namespaces. The tree must
  // not outlive the client.
  static Status Open(Client* client, std::string_view name, const RadixOptions& options,
                     std::unique_ptr<Radix>* tree);

 protected:
  Radix() = default;
};

}  // namespace dmidx

#endif  // DMIDX_RADIX_H_
