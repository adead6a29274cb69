// A thin memory node: owns the pool and the lock region, hands out chunks,
// keeps the catalog of named roots. It runs no index logic.
//
// Pool layout (offsets from the pool base):
//
//   0            4096                      chunks_begin                seals
//   +------------+-------------------------+---------+--//--+---------+-----------------+
//   | header     | catalog: entries x 64 B | chunk 0 |      | chunk   | seal words:     |
//   |            |                         |         |      | n - 1   | n x 8 B         |
//   +------------+-------------------------+---------+--//--+---------+-----------------+
//
// chunks_begin is the end of the catalog rounded up to 4 KiB; every chunk is
// chunk_bytes long and 4 KiB aligned. The header at offset 0 also keeps the
// raw remote address 0 (node 0, pool, offset 0) from ever naming an object.
//
// Seal words (one per chunk, right after the last chunk, so that no chunk
// ever holds them): compute nodes WRITE there how many objects they carved
// from a chunk once they stop carving it, and a compactor that holds that
// many free objects of it gives the chunk back (docs/design.md, "Chunks
// back to the memory node"). The memory node only zeroes a chunk's word
// when the chunk comes back (FreeChunk); compute nodes find the table from
// the header (chunks_begin, chunk_bytes, total_chunks), which they READ.
//
// Thread-safe: every method may be called concurrently.
#ifndef DMIDX_MEMNODE_MEMORY_NODE_H_
#define DMIDX_MEMNODE_MEMORY_NODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/options.h"
#include "dmidx/stats.h"
#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::memnode {

// One catalog entry: a name and the 8-byte catalog word clients CAS over
// the fabric (an index's descriptor address). A word starts at 0 (null).
//
//   0                                 56            64
//   +---------------------------------+-------------+
//   | name, NUL padded (<= 55 bytes)  | word        |
//   +---------------------------------+-------------+
struct CatalogEntry {
  static constexpr size_t kMaxNameBytes = 55;
  char name[56];
  uint64_t root;
};
static_assert(sizeof(CatalogEntry) == 64);
static_assert(offsetof(CatalogEntry, root) == 56);
static_assert(offsetof(CatalogEntry, root) % 8 == 0, "the catalog word is CASed");

inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint64_t kChunkAlignment = MemoryNodeOptions::kChunkAlignment;
inline constexpr uint64_t kSealWordBytes = 8;

// The pool header's words a compute node READs (over the fabric) to find
// the chunks and their seal words: the first kPoolHeaderWords words of the
// header. Word 0 is kPoolMagic, word 1's low 32 bits the version, then
// (by word index) chunk_bytes, chunks_begin and total_chunks.
inline constexpr uint64_t kPoolMagic = 0x32'58'44'49'4d'44'4e'4d;  // "MNDMIDX2", little-endian
inline constexpr uint32_t kPoolHeaderWords = 6;
inline constexpr uint32_t kPoolHeaderChunkBytesWord = 3;
inline constexpr uint32_t kPoolHeaderChunksBeginWord = 4;
inline constexpr uint32_t kPoolHeaderTotalChunksWord = 5;

// Where the seal word of the chunk at `index` is, in a pool of
// `total_chunks` chunks of `chunk_bytes` from `chunks_begin`.
constexpr uint64_t SealWordOffset(uint64_t chunks_begin, uint64_t chunk_bytes,
                                  uint64_t total_chunks, uint64_t index) {
  return chunks_begin + total_chunks * chunk_bytes + index * kSealWordBytes;
}

// Chunks handed out and given back over a memory node's life (Usage() is
// what the control path reports of the pool now).
struct ChunkAccount {
  uint64_t chunk_bytes = 0;
  uint64_t total_chunks = 0;
  uint64_t chunks_allocated = 0;  // AllocateChunk calls that got a chunk
  uint64_t chunks_freed = 0;      // FreeChunk calls that took one back
  uint64_t chunks_in_use() const { return chunks_allocated - chunks_freed; }
  uint64_t bytes_in_use() const { return chunks_in_use() * chunk_bytes; }
};
// The most bytes a pool or a lock region may have: what a remote address's
// offset reaches (128 TiB).
inline constexpr uint64_t kMaxRegionBytes = MemoryNodeOptions::kMaxRegionBytes;
static_assert(kMaxRegionBytes == fabric::RemoteAddress::kMaxOffset + 1);

// The smallest pool_bytes `options` allow: the header, a catalog of
// options.catalog_entries entries, one chunk of options.chunk_bytes and a
// page for its seal word (UINT64_MAX if that overflows). Create refuses a smaller pool; tools check
// their flags with it before they start anything.
uint64_t MinPoolBytes(const MemoryNodeOptions& options);

// An anonymous mapping, unmapped on destruction.
class Mapping {
 public:
  // Maps `bytes` of zeroed memory; with `huge_pages`, tries 2 MiB pages first
  // and falls back to normal pages.
  static StatusOr<Mapping> Create(uint64_t bytes, bool huge_pages);
  Mapping() = default;
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  ~Mapping();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool huge_pages() const { return huge_pages_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool huge_pages_ = false;
};

class MemoryNode {
 public:
  // Validates `options` (InvalidArgument naming the bad field) and maps the
  // pool and lock region.
  static StatusOr<std::unique_ptr<MemoryNode>> Create(uint16_t id,
                                                      const MemoryNodeOptions& options);

  uint16_t id() const { return id_; }
  const MemoryNodeOptions& options() const { return options_; }
  uint8_t* pool_base() const { return pool_.data(); }
  uint64_t pool_bytes() const { return pool_.size(); }
  uint8_t* lock_base() const { return lock_region_.data(); }
  uint64_t lock_region_bytes() const { return lock_region_.size(); }
  bool huge_pages_in_use() const { return pool_.huge_pages(); }
  uint64_t chunk_bytes() const { return options_.chunk_bytes; }
  uint64_t total_chunks() const { return total_chunks_; }
  uint64_t free_chunks() const;
  // The pool's size, its chunks, and how many are handed out now
  // (ControlType::kPoolUsage): the one place that reads what is free.
  PoolUsage Usage() const;
  uint64_t chunks_begin() const { return chunks_begin_; }
  // Chunks handed out and taken back so far.
  ChunkAccount chunk_account() const;

  // Hands out one chunk (zeroed on first use, as the pool was mapped zeroed;
  // a returned chunk comes back with its old contents). ResourceExhausted
  // when every chunk is out: memory is never reused silently.
  StatusOr<fabric::RemoteAddress> AllocateChunk();
  // Takes back a chunk from AllocateChunk() and zeroes its seal word, so
  // that its next holder starts unsealed. InvalidArgument for an address
  // that is not the start of a chunk of this node, or a chunk not handed out.
  Status FreeChunk(fabric::RemoteAddress chunk);

  // The address of the catalog word named `name`. With `create`, a missing name
  // gets a new entry (its word 0); without, it is NotFound. InvalidArgument
  // for an empty name or one longer than CatalogEntry::kMaxNameBytes;
  // ResourceExhausted when the catalog is full. Two concurrent calls for the
  // same name get the same word.
  StatusOr<fabric::RemoteAddress> CatalogWord(std::string_view name, bool create);

 private:
  MemoryNode(uint16_t id, const MemoryNodeOptions& options, Mapping pool, Mapping lock_region);

  const uint16_t id_;
  const MemoryNodeOptions options_;
  Mapping pool_;
  Mapping lock_region_;
  uint64_t chunks_begin_ = 0;
  uint64_t total_chunks_ = 0;

  mutable std::mutex mutex_;
  std::vector<uint64_t> free_chunk_indices_;  // guarded by mutex_
  std::vector<bool> chunk_in_use_;            // guarded by mutex_
  uint32_t catalog_used_ = 0;                 // guarded by mutex_
  uint64_t chunks_allocated_ = 0;             // guarded by mutex_
  uint64_t chunks_freed_ = 0;                 // guarded by mutex_
};

// The control path a compute node uses to reach a memory node's CPU: chunk
// allocation and catalog look-ups. For the local fabric it is a direct call;
// the verbs fabric sends messages to the memory-node daemon. Thread-safe.
class MemoryNodeControl {
 public:
  virtual ~MemoryNodeControl() = default;
  virtual uint16_t node_id() const = 0;
  virtual uint64_t chunk_bytes() const = 0;
  virtual StatusOr<fabric::RemoteAddress> AllocateChunk() = 0;
  virtual Status FreeChunk(fabric::RemoteAddress chunk) = 0;
  // Chunks the memory node has left to hand out.
  virtual StatusOr<uint64_t> FreeChunks() = 0;
  virtual StatusOr<fabric::RemoteAddress> CatalogWord(std::string_view name, bool create) = 0;
  // What the node's pool holds now (MemoryNode::Usage).
  virtual StatusOr<PoolUsage> Usage() = 0;
};

// Control path to a MemoryNode in this process.
class LocalMemoryNodeControl final : public MemoryNodeControl {
 public:
  explicit LocalMemoryNodeControl(MemoryNode* node) : node_(node) {}
  uint16_t node_id() const override { return node_->id(); }
  uint64_t chunk_bytes() const override { return node_->chunk_bytes(); }
  StatusOr<fabric::RemoteAddress> AllocateChunk() override { return node_->AllocateChunk(); }
  Status FreeChunk(fabric::RemoteAddress chunk) override { return node_->FreeChunk(chunk); }
  StatusOr<uint64_t> FreeChunks() override { return node_->free_chunks(); }
  StatusOr<fabric::RemoteAddress> CatalogWord(std::string_view name, bool create) override {
    return node_->CatalogWord(name, create);
  }
  StatusOr<PoolUsage> Usage() override { return node_->Usage(); }

 private:
  MemoryNode* node_;
};

}  // namespace dmidx::memnode

#endif  // DMIDX_MEMNODE_MEMORY_NODE_H_
