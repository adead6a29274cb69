#include "lib/memnode/memory_node.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace dmidx::memnode {
namespace {

constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// The pool header, at pool offset 0. Written once before the node is
// published and never changed, so it needs no atomics. It lets a person with
// a debugger or a dump of the pool tell what the bytes are; clients do not
// read its first kPoolHeaderWords words, to find the seal words.
//
//   0        8        12       14       16           24            32
//   +--------+--------+--------+--------+------------+-------------+
//   | magic  | version| node id| unused | pool_bytes | chunk_bytes |
//   +--------+--------+--------+--------+------------+-------------+
//   32             40             48                52       56
//   +--------------+--------------+-----------------+--------+-------------------+
//   | chunks_begin | total_chunks | catalog_entries | unused | lock_region_bytes |
//   +--------------+--------------+-----------------+--------+-------------------+
struct PoolHeader {
  static constexpr uint64_t kMagic = kPoolMagic;
  static constexpr uint32_t kVersion = 2;  // 2: seal words after the last chunk

  uint64_t magic;
  uint32_t version;
  uint16_t node_id;
  uint16_t unused0;
  uint64_t pool_bytes;
  uint64_t chunk_bytes;
  uint64_t chunks_begin;
  uint64_t total_chunks;
  uint32_t catalog_entries;
  uint32_t unused1;
  uint64_t lock_region_bytes;
};
static_assert(sizeof(PoolHeader) == 64);
static_assert(sizeof(PoolHeader) <= kHeaderBytes);
static_assert(offsetof(PoolHeader, pool_bytes) == 16);
static_assert(offsetof(PoolHeader, lock_region_bytes) == 56);
static_assert(offsetof(PoolHeader, chunk_bytes) == 8 * kPoolHeaderChunkBytesWord);
static_assert(offsetof(PoolHeader, chunks_begin) == 8 * kPoolHeaderChunksBeginWord);
static_assert(offsetof(PoolHeader, total_chunks) == 8 * kPoolHeaderTotalChunksWord);
static_assert(std::is_trivially_copyable_v<PoolHeader>);
static_assert(kHeaderBytes % kChunkAlignment == 0, "the catalog starts page aligned");

constexpr uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// First byte after the catalog, where chunk 0 starts.
uint64_t ChunksBegin(const MemoryNodeOptions& options) {
  return RoundUp(kHeaderBytes + uint64_t{options.catalog_entries} * sizeof(CatalogEntry),
                 kChunkAlignment);
}

std::string ErrnoText(int error) {
  return std::error_code(error, std::generic_category()).message();
}

Status ValidateRegionSizes(const MemoryNodeOptions& options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % kChunkAlignment != 0) {
    return Status::InvalidArgument(
        "MemoryNodeOptions::chunk_bytes must be a non-zero multiple of " +
        std::to_string(kChunkAlignment) + ", got " + std::to_string(options.chunk_bytes));
  }
  // The lock region holds 8-byte lock words that clients CAS.
  if (options.lock_region_bytes == 0 || options.lock_region_bytes % 8 != 0) {
    return Status::InvalidArgument(
        "MemoryNodeOptions::lock_region_bytes must be a non-zero multiple of 8, got " +
        std::to_string(options.lock_region_bytes));
  }
  if (options.lock_region_bytes > kMaxRegionBytes) {
    return Status::InvalidArgument(
        "MemoryNodeOptions::lock_region_bytes " + std::to_string(options.lock_region_bytes) +
        " exceeds what a remote address can reach (" + std::to_string(kMaxRegionBytes) + ")");
  }
  if (options.pool_bytes > kMaxRegionBytes) {
    return Status::InvalidArgument(
        "MemoryNodeOptions::pool_bytes " + std::to_string(options.pool_bytes) +
        " exceeds what a remote address can reach (" + std::to_string(kMaxRegionBytes) + ")");
  }
  return Status::Ok();
}

Status ValidateOptions(const MemoryNodeOptions& options) {
  DMIDX_RETURN_IF_ERROR(ValidateRegionSizes(options));
  if (options.catalog_entries == 0) {
    return Status::InvalidArgument("MemoryNodeOptions::catalog_entries must be at least 1");
  }
  if (options.pool_bytes < MinPoolBytes(options)) {
    return Status::InvalidArgument(
        "MemoryNodeOptions::pool_bytes " + std::to_string(options.pool_bytes) +
        " cannot hold the header, a catalog of " + std::to_string(options.catalog_entries) +
        " entries and one chunk of " + std::to_string(options.chunk_bytes) + " bytes");
  }
  return Status::Ok();
}

Status MapError(std::string_view what, uint64_t bytes, int error) {
  std::string message =
      std::string(what) + " of " + std::to_string(bytes) + " bytes failed: " + ErrnoText(error);
  if (error == ENOMEM) return Status::ResourceExhausted(message);
  return Status::IoError(message);
}

}  // namespace

uint64_t MinPoolBytes(const MemoryNodeOptions& options) {
  // The seal word gets a page of its own: sizes stay whole pages.
  const uint64_t chunks_begin = ChunksBegin(options) + kChunkAlignment;
  // Written as a subtraction so a huge chunk_bytes cannot overflow the sum.
  if (options.chunk_bytes > UINT64_MAX - chunks_begin) return UINT64_MAX;
  return chunks_begin + options.chunk_bytes;
}

StatusOr<Mapping> Mapping::Create(uint64_t bytes, bool huge_pages) {
  if (bytes == 0) return Status::InvalidArgument("cannot map 0 bytes");
  constexpr int kProtection = PROT_READ | PROT_WRITE;
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
  Mapping mapping;
  mapping.size_ = bytes;
  // The size check keeps the rounding below from overflowing.
  if (huge_pages && bytes <= UINT64_MAX - kHugePageBytes) {
    // Fails with ENOMEM at once when too few huge pages are reserved (no
    // MAP_NORESERVE, so a later fault cannot SIGBUS).
    void* data =
        mmap(nullptr, RoundUp(bytes, kHugePageBytes), kProtection, kFlags | MAP_HUGETLB, -1, 0);
    if (data != MAP_FAILED) {
      mapping.data_ = static_cast<uint8_t*>(data);
      mapping.huge_pages_ = true;
      return mapping;
    }
  }
  void* data = mmap(nullptr, bytes, kProtection, kFlags, -1, 0);
  if (data == MAP_FAILED) return MapError("mmap", bytes, errno);
  mapping.data_ = static_cast<uint8_t*>(data);
  // Transparent huge pages are only a hint: ignoring a failure costs TLB
  // misses, not correctness.
  if (huge_pages) (void)madvise(data, bytes, MADV_HUGEPAGE);
  return mapping;
}

Mapping::Mapping(Mapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      huge_pages_(std::exchange(other.huge_pages_, false)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    Mapping old(std::move(*this));  // unmapped when it goes out of scope
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    huge_pages_ = std::exchange(other.huge_pages_, false);
  }
  return *this;
}

Mapping::~Mapping() {
  if (data_ == nullptr) return;
  // A hugetlb mapping was made with the length rounded up to whole huge
  // pages, and munmap of it needs that same length.
  const uint64_t mapped = huge_pages_ ? RoundUp(size_, kHugePageBytes) : size_;
  munmap(data_, mapped);
}

StatusOr<std::unique_ptr<MemoryNode>> MemoryNode::Create(uint16_t id,
                                                         const MemoryNodeOptions& options) {
  DMIDX_RETURN_IF_ERROR(ValidateOptions(options));
  const std::string context = "memory node " + std::to_string(id);
  StatusOr<Mapping> pool = Mapping::Create(options.pool_bytes, options.huge_pages);
  if (!pool.ok()) return pool.status().WithContext(context + ": pool");
  // The lock region is small (on-chip sized), so huge pages would only waste memory.
  StatusOr<Mapping> lock_region = Mapping::Create(options.lock_region_bytes, false);
  if (!lock_region.ok()) return lock_region.status().WithContext(context + ": lock region");
  return std::unique_ptr<MemoryNode>(
      new MemoryNode(id, options, std::move(pool).value(), std::move(lock_region).value()));
}

MemoryNode::MemoryNode(uint16_t id, const MemoryNodeOptions& options, Mapping pool,
                       Mapping lock_region)
    : id_(id),
      options_(options),
      pool_(std::move(pool)),
      lock_region_(std::move(lock_region)),
      chunks_begin_(ChunksBegin(options)),
      // Each chunk takes its bytes and its seal word.
      total_chunks_((options.pool_bytes - chunks_begin_) / (options.chunk_bytes + kSealWordBytes)),
      chunk_in_use_(total_chunks_, false) {
  // Ascending order is already a valid min-heap under std::greater, so the
  // lowest free index is always at the front.
  free_chunk_indices_.reserve(total_chunks_);
  for (uint64_t index = 0; index < total_chunks_; ++index)
    free_chunk_indices_.push_back(index);

  const PoolHeader header{
      .magic = PoolHeader::kMagic,
      .version = PoolHeader::kVersion,
      .node_id = id,
      .unused0 = 0,
      .pool_bytes = options.pool_bytes,
      .chunk_bytes = options.chunk_bytes,
      .chunks_begin = chunks_begin_,
      .total_chunks = total_chunks_,
      .catalog_entries = options.catalog_entries,
      .unused1 = 0,
      .lock_region_bytes = options.lock_region_bytes,
  };
  // No fabric can reach the pool before Create() returns, so a plain copy
  // cannot race with remote word accesses.
  std::memcpy(pool_.data(), &header, sizeof(header));
}

uint64_t MemoryNode::free_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_chunk_indices_.size();
}

PoolUsage MemoryNode::Usage() const {
  const uint64_t free = free_chunks();
  return {.memory_node = id_,
          .pool_bytes = pool_bytes(),
          .chunk_bytes = options_.chunk_bytes,
          .total_chunks = total_chunks_,
          .free_chunks = free,
          .bytes_in_use = (total_chunks_ - free) * options_.chunk_bytes};
}

ChunkAccount MemoryNode::chunk_account() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {.chunk_bytes = options_.chunk_bytes,
          .total_chunks = total_chunks_,
          .chunks_allocated = chunks_allocated_,
          .chunks_freed = chunks_freed_};
}

StatusOr<fabric::RemoteAddress> MemoryNode::AllocateChunk() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_chunk_indices_.empty()) {
    return Status::ResourceExhausted("memory node " + std::to_string(id_) + ": all " +
                                     std::to_string(total_chunks_) + " chunks of " +
                                     std::to_string(options_.chunk_bytes) + " bytes are in use");
  }
  std::pop_heap(free_chunk_indices_.begin(), free_chunk_indices_.end(), std::greater<>());
  const uint64_t index = free_chunk_indices_.back();
  free_chunk_indices_.pop_back();
  chunk_in_use_[index] = true;
  ++chunks_allocated_;
  return fabric::RemoteAddress::Pool(id_, chunks_begin_ + index * options_.chunk_bytes);
}

Status MemoryNode::FreeChunk(fabric::RemoteAddress chunk) {
  const auto invalid = [&](std::string_view why) {
    return Status::InvalidArgument("memory node " + std::to_string(id_) + ": cannot free " +
                                   chunk.ToString() + ": " + std::string(why));
  };
  if (chunk.node() != id_) return invalid("it belongs to another memory node");
  if (chunk.region() != fabric::Region::kPool) return invalid("it is not in the pool");
  const uint64_t offset = chunk.offset();
  if (offset < chunks_begin_ || (offset - chunks_begin_) % options_.chunk_bytes != 0) {
    return invalid("it is not the start of a chunk");
  }
  const uint64_t index = (offset - chunks_begin_) / options_.chunk_bytes;
  if (index >= total_chunks_) return invalid("it is past the last chunk");

  std::lock_guard<std::mutex> lock(mutex_);
  if (!chunk_in_use_[index]) return invalid("the chunk is not allocated (double free?)");
  // Nobody WRITEs the seal word of a chunk being given back (its holder
  // sealed it before, and only a holder of the chunk seals it), so this
  // store races with no fabric op.
  std::atomic_ref<uint64_t>(
      *reinterpret_cast<uint64_t*>(
          pool_.data() + SealWordOffset(chunks_begin_, options_.chunk_bytes, total_chunks_, index)))
      .store(0, std::memory_order_relaxed);
  chunk_in_use_[index] = false;
  ++chunks_freed_;
  free_chunk_indices_.push_back(index);
  std::push_heap(free_chunk_indices_.begin(), free_chunk_indices_.end(), std::greater<>());
  return Status::Ok();
}

StatusOr<fabric::RemoteAddress> MemoryNode::CatalogWord(std::string_view name, bool create) {
  const std::string context = "memory node " + std::to_string(id_) + ": catalog";
  if (name.empty() || name.size() > CatalogEntry::kMaxNameBytes) {
    return Status::InvalidArgument(context + ": a name must have 1 to " +
                                   std::to_string(CatalogEntry::kMaxNameBytes) + " bytes, got " +
                                   std::to_string(name.size()));
  }
  // Names are stored NUL padded, so an embedded NUL would make two names equal.
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(context + ": a name must not contain a NUL byte");
  }

  // The mutex serializes every reader and writer of names, so two creators of
  // one name cannot both miss it. The root words next to the names are only
  // ever touched by the fabric; this function never reads or writes them.
  std::lock_guard<std::mutex> lock(mutex_);
  uint8_t* const catalog = pool_.data() + kHeaderBytes;
  const auto word_address = [&](uint32_t entry) {
    return fabric::RemoteAddress::Pool(
        id_, kHeaderBytes + uint64_t{entry} * sizeof(CatalogEntry) + offsetof(CatalogEntry, root));
  };
  for (uint32_t entry = 0; entry < catalog_used_; ++entry) {
    const char* stored = reinterpret_cast<const char*>(catalog + entry * sizeof(CatalogEntry));
    if (strnlen(stored, CatalogEntry::kMaxNameBytes + 1) == name.size() &&
        std::memcmp(stored, name.data(), name.size()) == 0) {
      return word_address(entry);
    }
  }
  if (!create) return Status::NotFound(context + ": no entry named \"" + std::string(name) + "\"");
  if (catalog_used_ == options_.catalog_entries) {
    return Status::ResourceExhausted(context + ": all " + std::to_string(catalog_used_) +
                                     " entries are in use");
  }
  // Entries are never removed and the pool was mapped zeroed, so the bytes
  // after the name are already the NUL padding.
  std::memcpy(catalog + catalog_used_ * sizeof(CatalogEntry), name.data(), name.size());
  return word_address(catalog_used_++);
}

}  // namespace dmidx::memnode
