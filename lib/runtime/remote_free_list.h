// Free lists in remote memory, one per memory node and object size, that
// any compute node takes objects from and gives them back to with
// one-sided CAS (docs/design.md, "Free lists in remote memory"). No
// memory-node CPU is on the path but for finding the directory once.
//
// Objects move in bundles: the first object of a bundle holds the next
// bundle's address and the offsets of the bundle's other objects, so one
// pop hands over up to kMaxBundleObjects objects and one push gives them
// back.
//
// Where the lists live: a directory of kDirectoryBytes on each memory
// node, made by the first compute node that needs it (zeroed, then
// published by a CAS from 0 in that node's catalog word kCatalogName, as
// lease pages are) and never moved. Entry 0 holds kDirectoryMagic; each
// other entry is a size word (0: free; else the size of the objects of
// its list, set once by a CAS from 0) and that list's head word.
//
//   directory:  0                16                        1024
//               +----------------+--------------+--//--+------------+
//               | magic |   0    | size | head  |      | size | head |
//               +----------------+--------------+--//--+------------+
//
// A size's entry is the first one whose size word holds it. A compute node
// claims one with a CAS of the first size word its copy of the directory
// shows 0; a CAS that fails returns the word there, which its copy then
// takes, and it goes on. Every word before a claimed entry was seen
// holding another size, and size words never change again, so two compute
// nodes never claim two entries for one size. A directory that is full
// leaves further sizes unshared (their objects stay in their allocator).
//
// A list is named by a key: the size of its objects, or, for a draining
// list, that size with kDrainingListBit set (DrainingList). A draining list
// holds the free objects of chunks a compactor is emptying
// (remote_allocator.h): allocators take from it only when the memory node
// has no chunk left. Both kinds share the directory and the formats below.
//
// Head word (every change is one CAS, so it is never torn):
//
//   63              41 40                                0
//   +-----------------+----------------------------------+
//   | tag (23 bits)   | first object's offset / 64 (41)  |
//   +-----------------+----------------------------------+
//
// Offset 0 (the memory node's header, never an object) is the empty list.
// Every successful CAS of a head adds 1 to its tag, pushes and pops alike.
// Objects whose offset is not a multiple of 64 stay off the lists, so 41
// bits hold every pool offset (RemoteAddress: 47 bits).
//
// Bundle header, in the bundle's first object (n objects, n - 1 offsets):
//
//   0          8                    16                16 + 8 (n - 1)
//   +----------+--------------------+------------------+
//   | next     | size << 8 | n      | offsets of the   |
//   | offset   |                    | other objects    |
//   +----------+--------------------+------------------+
//
// Push (1 round trip when the guess of the head is right): one batch of a
// WRITE of the header, its next the guessed head's object, then a CAS of
// the head from the guess to (first object, tag + 1). Ops of one batch are
// placed in post order, so the header is whole before the CAS can land,
// and a header torn by a death is never reachable. A failed CAS returns
// the head, the next guess: one more round trip per changed head.
//
// Pop (3 round trips): READ the head (B, t); READ B's header; CAS the head
// from (B, t) to (B's next, t + 1). A failed CAS returns the head, and the
// pop goes on from its header READ. Why the header it read is the one the
// CAS takes: the CAS succeeds only if the head still is (B, t), and since
// every successful CAS raises the tag, the head was (B, t) the whole time
// from the READ (or the failed CAS) that showed it to the CAS that won,
// unless 2^23 successful CASes wrapped the tag in between. While B is the
// head nobody writes its header (pushers own what they push; poppers own
// only what they popped), so the header READ in between, whatever words of
// it it got and in whatever order, got the words of that push. A header
// READ that raced with B's pop and reuse reads anything, and its CAS then
// fails. 23 bits suffice: a wrap needs 8.4 M successful CASes of one
// word within one popper's two round trips (about 4 us); a memory node's
// NIC serves CASes on one host-memory word a few million a second, so
// that window would have to last seconds. A pop whose window passes
// kMaxPopWindow on its own clock reads the head again instead of CASing.
//
// What failures lose (nothing is ever handed out twice):
// - a failed push batch: its bundle (at most kMaxBundleObjects objects),
//   which may or may not have landed and is given up either way;
// - a failed pop CAS batch: the bundle it was taking, if it landed;
// - a failed READ: nothing;
// - a compute node that dies: what its allocators held (their own free
//   objects, RemoteAllocatorOptions), a bundle it had popped, and one it
//   was pushing (its header WRITE may have landed; its CAS then did not,
//   or the bundle is on the list and fine).
//
// Not thread-safe: one per RemoteAllocator (so per worker thread); the
// coroutines of that thread may interleave in its calls, which keep no
// reference into its state across a round trip.
#ifndef DMIDX_RUNTIME_REMOTE_FREE_LIST_H_
#define DMIDX_RUNTIME_REMOTE_FREE_LIST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"
#include "lib/memnode/memory_node.h"

namespace dmidx::runtime {

class ContextImpl;

// The catalog word each memory node keeps its directory's address in.
inline constexpr char kFreeListCatalogName[] = "dmidx/free-lists";
inline constexpr uint64_t kDirectoryBytes = 1024;
inline constexpr uint32_t kDirectoryEntryBytes = 16;
inline constexpr uint32_t kDirectoryEntries = kDirectoryBytes / kDirectoryEntryBytes;
inline constexpr uint64_t kDirectoryMagic = 0x646d69647846524cULL;  // "dmidxFRL"
static_assert(kDirectoryBytes % kDirectoryEntryBytes == 0);
// The directory's page holds, after the directory, the memory node's
// draining table (remote_allocator.h), which so needs no catalog word and
// no chunk of its own.
inline constexpr uint64_t kDrainingTableBytes = 1024;
inline constexpr uint64_t kDirectoryPageBytes = kDirectoryBytes + kDrainingTableBytes;
static_assert(kDirectoryEntryBytes == 16, "size word at 0, head word at 8: both CASed");

// Head words.
inline constexpr int kHeadOffsetBits = 41;
inline constexpr int kHeadTagBits = 64 - kHeadOffsetBits;
inline constexpr uint64_t kListObjectAlignment = 64;
static_assert((fabric::RemoteAddress::kMaxOffset >> 6) < (uint64_t{1} << kHeadOffsetBits),
              "every 64-byte aligned pool offset fits the head word");
static_assert(kHeadTagBits == 23);

// List keys. Object sizes stay below 2^54, so a key shifted left by 8 (a
// bundle header's size word) keeps every bit.
inline constexpr uint64_t kDrainingListBit = uint64_t{1} << 54;
inline constexpr uint64_t DrainingList(uint64_t size) {
  return size | kDrainingListBit;
}
inline constexpr bool IsDrainingList(uint64_t key) {
  return (key & kDrainingListBit) != 0;
}
// A size's second list: a compactor's scan moves the bundles of one to
// the other as it sorts them, so allocators never find both empty while
// it runs.
inline constexpr uint64_t kAltListBit = uint64_t{1} << 53;
inline constexpr uint64_t AltList(uint64_t size) {
  return size | kAltListBit;
}
inline constexpr uint64_t ListObjectSize(uint64_t key) {
  return key & ~(kDrainingListBit | kAltListBit);
}

// Bundles.
inline constexpr uint32_t kMaxBundleObjects = 32;
inline constexpr uint32_t kBundleFixedWords = 2;  // next, size and count
inline constexpr uint64_t kMinListObjectBytes = 64;
static_assert(kMinListObjectBytes >= 8 * (kBundleFixedWords + 1),
              "the smallest bundle holds its header and one other object's offset");
static_assert(kMaxBundleObjects < 256, "the count is the size word's low byte");

// A pop that took longer than this from seeing the head to CASing it
// reads the head again (see the top of this file).
inline constexpr std::chrono::milliseconds kMaxPopWindow{100};
// Attempts of one pop or push before it gives up on a contended head (the
// allocator then carves, or keeps its objects). Each failed attempt backs
// off (ContextImpl::Backoff).
inline constexpr uint32_t kMaxPopAttempts = 32;
// Attempts of each push of a worker that goes (ReleaseToShared, and the
// compaction it ends with): what it kept would be stranded, and every
// failed CAS means another pop or push landed, so it goes on far longer:
// about 1017 x retry_backoff_max of backoff per bundle at most (65 ms at
// the default 64 us).
inline constexpr uint32_t kMaxGiveBackAttempts = 1024;

// A decoded head word.
struct ListHead {
  uint64_t offset = 0;  // of the first bundle's first object; 0: empty
  uint32_t tag = 0;

  static ListHead Of(uint64_t word);
  uint64_t word() const;
  bool empty() const { return offset == 0; }
  // The head after a successful CAS that makes `offset` the first bundle.
  ListHead Next(uint64_t next_offset) const;
};

class RemoteFreeLists {
 public:
  // Carves the directory's page (kDirectoryPageBytes, 64-byte aligned) on a node, or
  // takes it back when another compute node published one first. These
  // must not touch the shared lists (the allocator's own chunk carving).
  struct PageSource {
    std::function<StatusOr<fabric::RemoteAddress>(uint16_t node)> take;
    std::function<void(fabric::RemoteAddress page)> give_back;
  };

  // `nodes`: the control paths of every memory node by id (outliving
  // this), for the catalog word.
  RemoteFreeLists(std::vector<memnode::MemoryNodeControl*> nodes, PageSource pages);
  RemoteFreeLists(const RemoteFreeLists&) = delete;
  RemoteFreeLists& operator=(const RemoteFreeLists&) = delete;

  // `size` below may be any list key (the list's objects' size, or a
  // draining list's key).
  //
  // Whether an object of `size` bytes at `object` may go on a list: in a
  // pool, at an offset that is a multiple of 64, and at least
  // kMinListObjectBytes big.
  static bool Shareable(fabric::RemoteAddress object, uint64_t size);
  // The most objects a bundle of `size`-byte objects holds: its header
  // fits in its first object.
  static uint32_t BundleCapacity(uint64_t size);

  // Takes one bundle of `size`-byte objects from `node`'s list and appends
  // its objects to `out`: none when the list is empty (or its directory is
  // full). Errors leave `out` as it was. Aborted: the head changed under
  // every one of kMaxPopAttempts attempts, and nothing was taken; other
  // errors: a failed CAS batch may have taken a bundle nobody gets (see
  // the top of this file).
  Status Pop(ContextImpl& ctx, uint16_t node, uint64_t size,
             std::vector<fabric::RemoteAddress>& out);

  enum class PushOutcome : uint8_t {
    kPushed,  // on the list
    kKept,    // nothing landed: the objects are still the caller's
    kLost,    // a batch failed and may have landed: the caller forgets them
  };
  // Gives `objects` (1 to BundleCapacity(size), all on `node` and
  // Shareable) to `node`'s list of `size` as one bundle. The status says
  // why when the outcome is not kPushed; a head that stays contended for
  // `attempts` CASes keeps them.
  std::pair<PushOutcome, Status> Push(ContextImpl& ctx, uint16_t node, uint64_t size,
                                      std::span<const fabric::RemoteAddress> objects,
                                      uint32_t attempts = kMaxPopAttempts);

  // The keys of every list `node`'s directory has, read anew (the
  // directory is made if missing): for a compactor, which drains them all.
  StatusOr<std::vector<uint64_t>> Sizes(ContextImpl& ctx, uint16_t node);
  // A digest of every head word of `node`'s directory as the last read of
  // it (Sizes, or a load) found them: every push and pop of any list
  // changes it (each CAS of a head raises its tag). 0 before a read.
  uint64_t HeadsDigest(uint16_t node) const {
    return node < directories_.size() ? directories_[node].heads_digest : 0;
  }

  // Where `node`'s draining table is: in the directory's page (loaded, or
  // made, if this allocator has not seen it yet).
  StatusOr<fabric::RemoteAddress> DrainingTable(ContextImpl& ctx, uint16_t node);

  // The head word's address of `node`'s list of `size` (made if missing):
  // for tests that read or stage it. Null when the directory is full.
  StatusOr<fabric::RemoteAddress> HeadForTesting(ContextImpl& ctx, uint16_t node, uint64_t size) {
    return Head(ctx, node, size);
  }

 private:
  // Finds (or makes and publishes) `node`'s directory and reads it.
  Status LoadDirectory(ContextImpl& ctx, uint16_t node);
  // Reads `node`'s published `directory` and takes the sizes it shows.
  Status ReadDirectory(ContextImpl& ctx, uint16_t node, fabric::RemoteAddress directory);
  StatusOr<fabric::RemoteAddress> MakeDirectory(ContextImpl& ctx,
                                                fabric::RemoteAddress catalog_word);
  // The head word of `node`'s list of `size`, claiming an entry for it if
  // none has it (with `create`); null when the directory is full, or
  // without `create` when no entry this allocator knows of has it.
  StatusOr<fabric::RemoteAddress> Head(ContextImpl& ctx, uint16_t node, uint64_t size,
                                       bool create = true);
  // One pop attempt from a head already seen at `seen_at`: kTaken (`head`
  // is then the new head), kRetry or kEmpty when the CAS failed (`head` and
  // `seen_at` are then what it found and when), kReread when the head must
  // be read again.
  enum class Attempt : uint8_t { kTaken, kRetry, kEmpty, kReread };
  StatusOr<Attempt> TryPop(ContextImpl& ctx, fabric::RemoteAddress head_word, uint64_t size,
                           ListHead& head, std::chrono::nanoseconds& seen_at,
                           std::vector<fabric::RemoteAddress>& out);

  struct Directory {
    fabric::RemoteAddress address;  // null until loaded
    std::vector<uint64_t> sizes;    // kDirectoryEntries size words as last seen
    uint64_t heads_digest = 0;      // HeadsDigest
  };

  std::vector<memnode::MemoryNodeControl*> nodes_;
  PageSource pages_;
  std::vector<Directory> directories_;                         // by node
  std::map<std::pair<uint16_t, uint64_t>, uint32_t> entries_;  // (node, size) -> entry
  std::map<std::pair<uint16_t, uint64_t>, uint64_t> guesses_;  // last head word seen
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_REMOTE_FREE_LIST_H_
