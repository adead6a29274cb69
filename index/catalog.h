// Named indexes in the cluster catalog: the open-or-create-and-publish every
// index does on Open. An index's name maps to a catalog word (an 8-byte
// word on the catalog's memory node) that holds its descriptor's address, 0
// until someone created it.
//
//   DMIDX_ASSIGN_OR_RETURN(RemoteAddress descriptor,
//       index::OpenOrCreate(ctx, word, [&](ContextImpl& ctx, index::MadeObjects* made) {
//         ... allocate through `made`, write the empty index and its descriptor ...
//         return descriptor_address;
//       }));
#ifndef DMIDX_INDEX_CATALOG_H_
#define DMIDX_INDEX_CATALOG_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

// Remote objects a change made (an index's creation, a bulk load, a
// split): given back if the change fails before publishing them or loses
// the race to publish; kept once published (or when a publish may have
// landed: freeing a live object is worse than a leak).
class MadeObjects {
 public:
  // Allocates `bytes` (64-byte aligned) on `node` (any: round-robin).
  StatusOr<fabric::RemoteAddress> Allocate(runtime::ContextImpl& ctx, uint64_t bytes,
                                           std::optional<uint16_t> node = std::nullopt);
  // Takes on an object of `bytes` allocated elsewhere.
  void Add(fabric::RemoteAddress address, uint64_t bytes) { objects_.emplace_back(address, bytes); }
  void FreeAll(runtime::ContextImpl& ctx);
  void Keep() { objects_.clear(); }

 private:
  std::vector<std::pair<fabric::RemoteAddress, uint64_t>> objects_;  // address, bytes
};

// Makes an empty index and its descriptor (allocating through `made`) and
// returns the descriptor's address; nothing is published yet.
using CreateDescriptor =
    std::function<StatusOr<fabric::RemoteAddress>(runtime::ContextImpl&, MadeObjects*)>;

// The descriptor `catalog_word` names: read from the word or, when it is
// empty (0), made by `create` and published into the word with a CAS from 0.
// Of compute nodes racing to create one name exactly one wins; the others
// free what they made and return the winner's descriptor. An error before
// publishing frees what was made; a failed publish CAS keeps it (the CAS may
// have landed) and returns the error.
StatusOr<fabric::RemoteAddress> OpenOrCreate(runtime::ContextImpl& ctx,
                                             fabric::RemoteAddress catalog_word,
                                             const CreateDescriptor& create);

// Every index descriptor is 64 bytes and starts with this head (its
// `head` member); the rest is the index's own.
//
//   0       8           12      16                                     64
//   +-------+-----------+-------+--------------------------------------+
//   | magic | key bytes | flags | the index's own fields               |
//   +-------+-----------+-------+--------------------------------------+
inline constexpr uint32_t kDescriptorBytes = 64;
struct DescriptorHead {
  uint64_t magic;      // the index kind's (DescriptorSpec::magic)
  uint32_t key_bytes;  // the key size the index was created with
  uint32_t flags;      // the index's own: how it was created
};
static_assert(sizeof(DescriptorHead) == 16 && offsetof(DescriptorHead, key_bytes) == 8);
// Whether `Descriptor`, an index's own descriptor struct, is laid out as
// every descriptor must be: kDescriptorBytes long, its `head` first
// (OpenDescriptor checks it), and the word at `cas_offset` (the root the
// index CASes) 8-byte aligned.
template <typename Descriptor>
constexpr bool IsDescriptorLayout(size_t cas_offset) {
  return sizeof(Descriptor) == kDescriptorBytes && offsetof(Descriptor, head) == 0 &&
         cas_offset % 8 == 0;
}

// Which index Open is after.
struct DescriptorSpec {
  std::string_view folder;  // the catalog name's prefix: "btree", "radix"
  std::string_view kind;    // "B+tree", "radix tree": in errors
  std::string_view name;    // the index's name
  uint64_t magic;           // its kind's descriptor magic
  uint32_t key_bytes;       // the key size the handle is opened with
};

// A descriptor found (or made) by OpenDescriptor, and the context that read
// it, for the rest of the index's Open.
struct OpenedDescriptor {
  std::unique_ptr<Context> context;  // a blocking context of the client
  fabric::RemoteAddress address;
  alignas(8) std::array<uint8_t, kDescriptorBytes> image;  // as read

  runtime::ContextImpl& ctx() const { return runtime::ContextImpl::From(*context); }
  // The descriptor as the index's own struct (64 bytes, starting with the
  // DescriptorHead fields).
  template <typename Descriptor>
  Descriptor As() const {
    static_assert(sizeof(Descriptor) == kDescriptorBytes);
    Descriptor descriptor;
    std::memcpy(&descriptor, image.data(), sizeof(descriptor));
    return descriptor;
  }
};

// The Open prologue of every index: the catalog word "<folder>/<name>"
// opened or its descriptor created (OpenOrCreate with `create`), then read
// with a new blocking context of `client` and checked: FailedPrecondition
// when the word names no descriptor of this kind (another magic),
// InvalidArgument when the index exists with other keys. The index checks
// the rest of its fields itself.
StatusOr<OpenedDescriptor> OpenDescriptor(Client& client, const DescriptorSpec& spec,
                                          const CreateDescriptor& create);

// Writes a new descriptor `image` (kDescriptorBytes) at `address` in one
// round trip, from the context's scratch.
Status WriteDescriptor(runtime::ContextImpl& ctx, fabric::RemoteAddress address, const void* image);

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_CATALOG_H_
