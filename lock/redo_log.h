// Redo records of the changes made under a remote lock word (docs/design.md,
// "Compute-node failures", Records): what lets a survivor finish a
// write-back that a compute node left half-placed when it died. Written
// once for every lock word: HOCL's (the B+tree's leaf and node
// write-backs) and the radix tree's rear words (its in-place updates). The
// record is blind to what the bytes mean.
//
// The batch. A change under a hold of `word` is posted as
//   [linked WRITEs][record][the change's WRITEs][clear?][release]
// all on the word's memory node and one queue pair, which places WRITEs in
// post order. The record says what the change is meant to leave: the word,
// the value it holds during the change, and each WRITE's address, length
// and bytes, under a checksum. So:
//   - a death before the record is whole leaves no valid record, and
//     nothing after it landed: the object is as it was;
//   - once the release landed, the word no longer holds the hold value;
//   - in between, the record is whole and the word holds its hold value:
//     recovery writes the bytes again (redo), then frees the word.
// A record must never match its word again after its change completed:
// a later hold of the word under the same value that died before its own
// record landed would have the old bytes redone over others' changes.
// Hold values are unique per acquisition (NextAcquisition: HOCL's tag and
// the radix rear word's hold carry the context number and the low bits
// of its acquisition count), so the release's landing ends the record,
// and the batch clears its record (the `clear?`) only where the word goes
// on holding that value:
//   - kept for the next holder of a local handover chain, which keeps its
//     first holder's value across the critical sections of several
//     contexts, each recording in its own slot;
//   - held by a holder the word was handed to (its value is the chain's,
//     another context's acquisition, whose wrap clears only that
//     context's slots);
//   - a write-back before the release (HierarchicalLock::WriteBack).
// The acquisition bits come round every 2^kHoldAcquisitionBits: as they
// pass 0, NextAcquisition clears the context's slots first (ClearSlots).
// A client that takes over an earlier client's directory of its id, whose
// numbers and counts start again, finishes and clears every record there
// before its first lock (TakeOver). A release by CAS after a failed batch
// (ReleaseHold) repeats the batch's clear, if any, before the CAS; a
// release that fails every post leaves the word held with its record
// whole, as a dead holder's: only a recovery completes and frees it.
//
// A record left whole under a word still held keeps its slot (KeepRecord):
// the context goes on after such a failure, and its next recorded change
// on that memory node would write its own record over it, leaving the
// word held with no record to finish what the failed batch left half
// placed (a merge's left holding the right's entries beside a live right:
// recovery would free the words as void holds). So until the word no
// longer holds the record's value (a recovery redid and freed it: a
// successor's TakeOver, a survivor's RecoveryStep), the context's
// recorded changes on that memory node fail with Unavailable, naming the
// word, and nothing of them is posted. Why not another slot, or finishing
// the change itself: the directory names one slot per (number, memory
// node), and one more per kept record would make every recoverer read
// more; a holder that re-posts until its batch lands may never see it land
// (a queue pair in the error state) and would need fencing to stop. A
// context whose batches fail every post has a connection a successor
// client replaces anyway (its client closes unsettled). The fast path
// pays nothing: a kept slot's capacity reads as 0 (Slot), so Wrap's
// inline path falls to the slow one, which checks it (one READ of the
// word, only then).
//
// Linked objects (lock::LinkedObjects: a B+tree split's new right node)
// are written before the record: they are whole whenever the record is,
// and after their link landed someone else may change them under their
// own lock, so the record leaves them out and recovery never redoes them.
//
// Where. One slot per (compute node, context number, memory node): a
// context records on a memory node in its slot there, and contexts that
// share a number never live at once (runtime::ContextNumber). Slots are
// made at a context's first recorded change on a memory node and grown
// (a new one, the old freed) when a record outgrows them, to a power of
// two of at least kMinSlotBytes. A directory names them: a root of
// kDirectoryPages words, each naming a page of kNumbersPerPage x (memory
// nodes) words, one per (number, memory node): the slot's offset in that
// memory node's pool and its capacity (EncodeSlot). Root and pages sit on
// the memory node of the compute node's lease record, whose third word
// names the root and whose fourth its shape (runtime/lease.h). A slot's
// directory word is written, and its WRITE completed, before the first
// record in it is posted: one round trip, only when a slot is made or
// grows (plus the root's and a page's, once). The log lives as long as
// its client (runtime::ComputeNode::Kept). A client that finds its lease
// record naming a directory already (a verbs process's next client, which
// resumes its id's lease) takes it over, slots and all (TakeOver).
//
// Record layout (in a slot, from its start; 8-byte words, little-endian):
//
//   0   checksum  of bytes [8, head) and each recorded WRITE's bytes;
//                 never 0 (0: cleared, or never written)
//   8   word      the lock word's address (RemoteAddress, raw)
//   16  hold      what the word holds while the change is under way
//   24  shape     recorded WRITEs n (bits 0-7) | context number (8-23) |
//                 head words (24-43) | record words (44-63) (RecordShape)
//   32  WRITE i   16 bytes each: its remote address (8), its length (4),
//                 the offset of its bytes in the record (4)
//   32 + 16 n     the bytes of the WRITEs of at most kCopiedBytes each,
//                 copied, each from an 8-aligned offset, zero-padded: the
//                 head ends here, and is the record's first WRITE
//   head          the bytes of the longer WRITEs, each 8-aligned, written
//                 from the change's own buffers by a WRITE each
//
// Why short WRITEs are copied: a radix update's 16 bytes, a B+tree entry
// and its leaf's checksum cost the copy of a few words, where a WRITE of
// their own would cost a work request (a message at the NIC, whose rate
// bounds the radix tree, and about 64 client instructions to post). A
// node image is written from its own buffer.
//
// Cost on the fast path: no round trip; the batch gains the record's
// WRITE(s) and the clear; the client copies the short WRITEs' words and
// hashes them with the header as it stores them (WrapShort; about 150
// client instructions for a radix update's record, 240 for a B+tree
// entry's, besides the two ops' post: docs/cpu-cost.md).
#ifndef DMIDX_LOCK_REDO_LOG_H_
#define DMIDX_LOCK_REDO_LOG_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "dmidx/status.h"
#include "lib/common/checksum.h"
#include "lib/fabric/op.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/compute_node.h"
#include "lib/runtime/context.h"
#include "lock/local_lock.h"

namespace dmidx::lock {

// The record layout's fixed part (the diagram above).
inline constexpr uint32_t kRecordChecksumOffset = 0;
inline constexpr uint32_t kRecordWordOffset = 8;
inline constexpr uint32_t kRecordHoldOffset = 16;
inline constexpr uint32_t kRecordShapeOffset = 24;
inline constexpr uint32_t kRecordWritesOffset = 32;
inline constexpr uint32_t kRecordWriteBytes = 16;
static_assert(kRecordWritesOffset % 8 == 0 && kRecordWriteBytes % 8 == 0);
// The shape word: `writes` WRITEs recorded by context `number`, a head of
// `head` bytes and a record of `bytes` (both multiples of 8, at most
// 8 MiB).
inline constexpr uint64_t RecordShape(uint32_t writes, uint32_t number, uint32_t head,
                                      uint32_t bytes) {
  return writes | uint64_t{number} << 8 | uint64_t{head / 8} << 24 | uint64_t{bytes / 8} << 44;
}
inline constexpr uint32_t ShapeWrites(uint64_t shape) {
  return shape & 0xff;
}
inline constexpr uint32_t ShapeNumber(uint64_t shape) {
  return (shape >> 8) & 0xffff;
}
inline constexpr uint32_t ShapeHead(uint64_t shape) {
  return ((shape >> 24) & 0xfffff) * 8;
}
inline constexpr uint32_t ShapeBytes(uint64_t shape) {
  return static_cast<uint32_t>(shape >> 44) * 8;
}
static_assert(ShapeHead(RecordShape(3, 65535, 1 << 20, 1 << 20)) == 1 << 20);
static_assert(ShapeBytes(RecordShape(3, 65535, 8, 1 << 20)) == 1 << 20);
static_assert(ShapeNumber(RecordShape(15, 65535, 8, 8)) == 65535);

// The record's checksum: 8-byte words in one lane of lib/common/checksum.h's
// mix (xor, multiply by an odd constant, rotate: a bijection per word, so
// any one word changed changes it), then an avalanche. One lane, where
// ChecksumWords keeps four: a record is a few dozen words, and the lanes'
// set-up and folding cost more than they save there. A torn record, any
// mix of old and new words, passes only by collision (about 2^-63).
inline constexpr uint64_t kRecordHashSeed = 0x27d4eb2f165667c5ull;
inline uint64_t MixRecordWords(uint64_t state, const uint8_t* data, size_t words) {
  auto word = [data](size_t i) {
    uint64_t value;
    std::memcpy(&value, data + 8 * i, 8);
    return value;
  };
  size_t i = 0;
  // Four a round: a node image's 128 words cost the loop's overhead a
  // quarter as often.
  for (; i + 4 <= words; i += 4) {
    state = checksum_internal::Mix(state, word(i));
    state = checksum_internal::Mix(state, word(i + 1));
    state = checksum_internal::Mix(state, word(i + 2));
    state = checksum_internal::Mix(state, word(i + 3));
  }
  for (; i < words; ++i)
    state = checksum_internal::Mix(state, word(i));
  return state;
}
// Never 0: a cleared record (checksum word 0) never passes.
inline uint64_t FinishRecordHash(uint64_t state) {
  state ^= state >> 29;
  state *= checksum_internal::kMultiplyA;
  state ^= state >> 32;
  return state | 1;
}

class RedoLog {
 public:
  // WRITEs one record holds at most (HOCL's write-back limit).
  static constexpr uint32_t kMaxRecordedWrites = 15;
  // WRITEs of at most this many bytes are copied into the record's head.
  static constexpr uint32_t kCopiedBytes = 64;
  // The smallest slot, and the largest (a larger record is refused).
  static constexpr uint32_t kMinSlotBytes = 256;
  static constexpr uint32_t kMaxSlotBytes = uint32_t{1} << 20;
  // The directory's shape: context numbers per page, pages in the root.
  static constexpr uint32_t kNumbersPerPage = 256;
  static constexpr uint32_t kDirectoryPages = runtime::kMaxContextsPerComputeNode / kNumbersPerPage;
  // Ops Wrap adds to a change at most: the record's WRITEs and the clear.
  static constexpr uint32_t kMaxAddedOps = 1 + kMaxRecordedWrites + 1;

  // Hold values (HOCL's tag, the radix tree's locked word) carry at least
  // this many low bits of the holder context's lock acquisition.
  static constexpr int kHoldAcquisitionBits = 24;

  // ctx's next lock acquisition (ContextImpl::NextLockAcquisition), for a
  // hold value of its own. Each time the bits a hold value keeps of it
  // come round to 0, ctx's slots are cleared first (ClearSlots): a record
  // left whole by a release (whose landing alone makes it stale, the word
  // no longer holding its value) can then never match a later hold of
  // the same value. An error of that clear: the acquisition is given back.
  StatusOr<uint64_t> NextAcquisition(runtime::ContextImpl& ctx) {
    const uint64_t acquisition = ctx.NextLockAcquisition();
    if ((acquisition & ((uint64_t{1} << kHoldAcquisitionBits) - 1)) == 0) [[unlikely]] {
      const Status cleared = ClearSlots(ctx);
      if (!cleared.ok()) {
        ctx.RetractLockAcquisition();
        return cleared;
      }
    }
    return acquisition;
  }
  // Clears the record in each of ctx's slots (one round trip, none if it
  // has none).
  Status ClearSlots(runtime::ContextImpl& ctx);

  // The compute node's log, shared by its lock users and kept until its
  // client goes (made by the first; registers the recovery step, once per
  // compute node, for as long as its membership: RecoveryStep).
  static std::shared_ptr<RedoLog> For(runtime::ComputeNode& node);

  explicit RedoLog(runtime::ComputeNode& node);
  ~RedoLog();
  RedoLog(const RedoLog&) = delete;
  RedoLog& operator=(const RedoLog&) = delete;

  // Writes into `batch` the change `change` (ops on `word`'s memory node)
  // with its record, under ctx's hold of `word`, which holds `hold` now
  // and until the change's WRITEs have landed:
  //   [change[0, linked)] [record] [change[linked, n)] [clear if `clear`]
  // and returns the number of ops written: at most `room` (the caller's
  // array; at least change.size() + kMaxAddedOps always suffices) and at
  // most one less than the fabric's max_batch_ops (room for a release
  // after it). The first `linked` ops (LinkedObjects) are left out of the
  // record; so are READs, which change nothing (atomics are refused:
  // posted again, one would apply twice). When the WRITEs of their own
  // would not fit in `room`, every WRITE is copied into the head. The
  // record's head takes
  // ctx's arena: keep the caller's scope open until the batch has
  // completed (and every post of it again). The clear, if asked for, is
  // the last op written, and goes again before a release by CAS
  // (ReleaseHold). A caller asks for it when its word keeps `hold` after
  // the batch (a hold kept for a local handover chain, whose next holders
  // write records of their own under the same value, or a write-back
  // before the release); a batch whose word is then released needs none:
  // once the release landed, the word no longer holds `hold`, which is
  // this acquisition's alone (NextAcquisition), so the record can never
  // match it again.
  //
  // The first record of ctx's number on the memory node, or one larger
  // than its slot, makes the slot first (RedoLog's header: one round trip,
  // more the first time on a compute node). InvalidArgument for an atomic,
  // an op on another memory node (on the short path the fabric refuses
  // the batch instead), more than kMaxRecordedWrites WRITEs or no room; ResourceExhausted for a
  // record over kMaxSlotBytes or no memory for its slot; a failed round trip's error. Nothing is
  // posted then, and the caller still releases its hold.
  //
  // Inline for the common change (a few short WRITEs of whole words, a
  // slot made already: a radix update, a B+tree entry), the rest out of
  // line, so that a record costs the fast path little (tools/cpu-cost.sh).
  StatusOr<uint32_t> Wrap(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold,
                          std::span<const fabric::Op> change, uint32_t linked, uint32_t room,
                          fabric::Op* batch, bool clear) {
    room = std::min(room, max_batch_ops_ - 1);
    if (linked == 0 && change.size() + 2 <= room) {
      uint32_t wrapped = 0;
      if (change.size() == 1) wrapped = WrapShort<1>(ctx, word, hold, change.data(), batch, clear);
      if (change.size() == 2) wrapped = WrapShortPair(ctx, word, hold, change.data(), batch, clear);
      if (wrapped != 0) [[likely]]
        return wrapped;
    }
    return WrapAny(ctx, word, hold, change, linked, room, batch, clear);
  }

  // Makes ctx's slot on memory node `node` large enough now for the record
  // of a change of `writes` WRITEs of `change_bytes` bytes in all (a round
  // trip when it is missing or smaller), so that Wrap needs no memory for
  // it later: for a caller whose write-back must not fail for want of a
  // slot (a bulk load's leftmost leaf, written after its root was
  // published). ResourceExhausted when no memory is left for it.
  Status Reserve(runtime::ContextImpl& ctx, uint16_t node, uint32_t change_bytes,
                 uint32_t writes = 1);

  // After a batch of ctx's that carried a record under a hold of `word`
  // (holding `hold`) failed, and `word` may go on holding `hold` (a
  // release by CAS that failed every post, a write-back before the release
  // that failed, a hold kept by HierarchicalLock::KeepHeld): ctx's slot on
  // word's memory node keeps that record for a recovery. ctx's later
  // recorded changes there (Wrap, Reserve, Prepare) fail with Unavailable,
  // posting nothing, until a READ of `word` finds it no longer holding
  // `hold` (freed by the recovery that completed the change): then the
  // slot is ctx's again. No remote op here.
  void KeepRecord(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold);

  // lock::ReleaseHold (a CAS from `hold` to 0, after `clear`, posted
  // `posts` times in all while it fails) after a failed batch of ctx's
  // whose record names `word` and `hold`: when every post fails, the
  // record is kept (KeepRecord). Its status.
  Status ReleaseHold(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold,
                     int posts, const fabric::Op* clear);

  // Makes ctx's slots on every memory node now, of at least `bytes` (Wrap
  // would at ctx's first recorded change on each, and grow one for a
  // larger record): a round trip for each slot missing or smaller. For
  // tests that count a change's round trips, batches or allocations, and
  // callers that want none on a first change.
  Status Prepare(runtime::ContextImpl& ctx, uint32_t bytes = kMinSlotBytes);

  // Before the first lock acquisition of this client (the Open prologue of
  // both indexes, index::OpenDescriptor, calls it; once per client, later
  // calls return at once): loads this compute node's directory naming and,
  // when an earlier client of its id left a directory (a verbs process's
  // earlier client: this one takes its slots over), recovers every record
  // there as RecoveryStep would (whole and its word still held: redone,
  // the word freed) and clears it. An earlier client's contexts' numbers
  // and lock acquisitions start again in this one, so a record it left
  // whole (a landed release needs no clear: Wrap) would otherwise match a
  // hold of this client's of the same value.
  Status TakeOver(runtime::ContextImpl& ctx);

  // The recovery step (Membership::AddPermanentRecoveryStep): for compute
  // node `dead`, fenced, reads its directory and every slot it names; for
  // each whole record (its checksum holds) whose word still holds the
  // record's hold value, writes the record's bytes again, then frees the
  // word by a CAS from that value (counted in dead_holds_freed). Cleared
  // and torn records, and records whose word holds anything else, are
  // left. Idempotent: a dead, fenced node never takes a word again, so a
  // word once freed never holds its value again. Holds nothing of a
  // RedoLog: it needs only what remote memory says.
  //
  // Scratch: it runs inside the operation that waits on the dead node's
  // word, on top of that operation's buffers, so it takes little of ctx's
  // arena, and the same whatever the record's size: directory and records
  // are READ in 256-byte pieces, a record hashed piece by piece as it is
  // read (checked whole before anything is redone), and redone piece by
  // piece, every piece completed before the word is freed; at most about
  // 520 bytes of the arena at once. A directory whose naming in the lease
  // record was torn by the death (root or shape word still 0) holds no
  // record: nothing to do. DataLoss for a shape of another version.
  static Status RecoveryStep(runtime::ContextImpl& ctx, uint32_t dead);
  // The most of ctx's arena RecoveryStep takes at once (above), rounded up.
  static constexpr size_t kRecoveryScratchBytes = 640;

  // Directory words: a slot's pool offset (bits 0-46) and its capacity in
  // 64-byte units (bits 48-63); 0: no slot.
  static uint64_t EncodeSlot(fabric::RemoteAddress slot, uint32_t capacity) {
    return slot.offset() | uint64_t{capacity / 64} << 48;
  }

  // The slot of context number `number` on memory node `node` (null until
  // made) and its capacity. For the context holding `number` (and tests,
  // while it runs nothing).
  struct SlotRef {
    fabric::RemoteAddress address;
    uint32_t capacity = 0;
  };
  SlotRef SlotOf(uint32_t number, uint16_t node) const;
  // Whether ctx's slot on `node` keeps a record (KeepRecord): for tests.
  bool KeepsRecord(uint32_t number, uint16_t node) const {
    return SlotOf(number, node).capacity != 0 && Writable(number, node) == 0;
  }

 private:
  struct Slot {
    uint64_t address = 0;  // raw RemoteAddress; 0: none yet
    // 0 while the slot keeps a record (KeepRecord), so that every path
    // that writes a record in it takes the slow one (Grow), which checks.
    uint32_t capacity = 0;
    uint32_t kept_capacity = 0;  // the capacity while kept; 0: not kept
    uint64_t kept_word = 0;      // while kept: the record's word (raw) and hold
    uint64_t kept_hold = 0;
  };
  // A page of the directory: this node's copy, and where it sits remotely.
  struct Page {
    fabric::RemoteAddress remote;
    std::unique_ptr<Slot[]> slots;  // kNumbersPerPage x nodes_
  };
  // Wrap for a change of N WRITEs (1 or 2: a radix update, a B+tree
  // entry and its leaf's header), each of whole words and copied, into
  // ctx's slot as it is: the ops written, or 0 (nothing written) when the
  // change or the slot does not allow it. Unrolled for N, with no call.
  // (Forced inline: GCC's own choice flipped with unrelated changes and
  // cost the radix tree's update a call, about 28 instructions.)
  template <size_t N>
  [[gnu::always_inline]] uint32_t WrapShort(runtime::ContextImpl& ctx, fabric::RemoteAddress word,
                                            uint64_t hold, const fabric::Op* change,
                                            fabric::Op* batch, bool clear) {
    // An op on another memory node than the word's is not looked for here:
    // the fabric refuses the batch it would be in (ValidateBatch).
    const uint16_t node = word.node();
    uint32_t data = 0;
    bool short_writes = true;
    for (size_t i = 0; i < N; ++i) {
      const fabric::Op& op = change[i];
      short_writes &= (op.code == fabric::OpCode::kWrite) & (op.length % 8 == 0) &
                      (op.length - 1 < kCopiedBytes);
      data += op.length;
    }
    constexpr uint32_t kTable = kRecordWritesOffset + kRecordWriteBytes * N;
    const uint32_t head = kTable + data;
    const uint32_t number = ctx.number();
    const Page* page = pages_[number / kNumbersPerPage].load(std::memory_order_acquire);
    if (!short_writes || page == nullptr) return 0;
    const Slot slot = page->slots[(number % kNumbersPerPage) * nodes_ + node];
    if (slot.capacity < head) return 0;
    StatusOr<uint64_t*> words = ctx.arena().Words(head / 8);
    if (!words.ok()) return 0;
    uint64_t* const record = *words;
    // Each word hashed as it is stored, in the record's order.
    uint64_t hash = kRecordHashSeed;
    auto put = [&](size_t index, uint64_t value) {
      record[index] = value;
      hash = checksum_internal::Mix(hash, value);
    };
    put(kRecordWordOffset / 8, word.raw());
    put(kRecordHoldOffset / 8, hold);
    put(kRecordShapeOffset / 8, RecordShape(N, number, head, head));
    uint32_t at = kTable;
    for (size_t i = 0; i < N; ++i) {
      put(kRecordWritesOffset / 8 + 2 * i, change[i].remote.raw());
      put(kRecordWritesOffset / 8 + 2 * i + 1, change[i].length | uint64_t{at} << 32);
      at += change[i].length;
    }
    at = kTable;
    for (size_t i = 0; i < N; ++i) {
      // Word by word: a few words, where a call to memcpy costs more.
      const auto* from = static_cast<const uint8_t*>(change[i].local);
      const uint8_t* const end = from + change[i].length;
      for (uint64_t* to = record + at / 8; from != end; from += 8, ++to) {
        uint64_t value;
        std::memcpy(&value, from, 8);
        *to = value;
        hash = checksum_internal::Mix(hash, value);
      }
      at += change[i].length;
    }
    record[kRecordChecksumOffset / 8] = FinishRecordHash(hash);
    const fabric::RemoteAddress slot_address = fabric::RemoteAddress::FromRaw(slot.address);
    batch[0] = fabric::Op::Write(slot_address, record, head);
    for (size_t i = 0; i < N; ++i)
      batch[1 + i] = change[i];
    if (!clear) return N + 1;
    batch[N + 1] = fabric::Op::Write(slot_address, ctx.zero_word(), 8);
    return N + 2;
  }
  // WrapShort<2> (a B+tree entry and its leaf's header) behind a call:
  // inlined into Wrap it cost the B+tree's update about 18 instructions
  // more than the call, and inside WrapAny about 85 (tools/cpu-cost.sh).
  [[gnu::noinline]] uint32_t WrapShortPair(runtime::ContextImpl& ctx, fabric::RemoteAddress word,
                                           uint64_t hold, const fabric::Op* change,
                                           fabric::Op* batch, bool clear) {
    return WrapShort<2>(ctx, word, hold, change, batch, clear);
  }
  // The capacity a record may use in the slot of `number` on `node` now:
  // 0 with no slot, or one that keeps a record.
  uint32_t Writable(uint32_t number, uint16_t node) const;
  // Wrap for any change, its slot made or grown first if need be.
  StatusOr<uint32_t> WrapAny(runtime::ContextImpl& ctx, fabric::RemoteAddress word, uint64_t hold,
                             std::span<const fabric::Op> change, uint32_t linked, uint32_t room,
                             fabric::Op* batch, bool clear);
  // The slot of ctx's number on `node`, of at least `bytes` capacity
  // (made or grown: the slow path, under grow_lock_). What the directory
  // lacks for it (root, page, slot) is written in one round trip, in one
  // ordered batch on the directory's memory node (and the slot's clear on
  // its own): zeroed root and page first, then the words that name them.
  StatusOr<Slot> Grow(runtime::ContextImpl& ctx, uint16_t node, uint32_t bytes);
  // Under grow_lock_, for ctx's `slot` on memory node `node` that keeps a
  // record (KeepRecord): READs the record's word; holding the record's
  // hold still, Unavailable naming it; otherwise (a recovery completed
  // the change and freed it) the slot is ctx's again: Ok.
  Status Unkeep(runtime::ContextImpl& ctx, Slot& slot, uint16_t node);
  // Under grow_lock_, once: this compute node's lease record, and the
  // directory it names (an earlier client's of its id, taken over: its
  // root READ), if any.
  Status LoadRoot(runtime::ContextImpl& ctx);
  // Under grow_lock_: page `p` of a directory taken over, READ.
  StatusOr<Page*> LoadPage(runtime::ContextImpl& ctx, uint32_t p);
  // Under grow_lock_: publishes `page` as page `p`.
  Page* Publish(uint32_t p, std::unique_ptr<Page> page);
  // The shape word the lease record's fourth word holds.
  uint64_t ShapeWord() const;

  runtime::ComputeNode& node_;
  const uint32_t nodes_;          // memory nodes
  const uint32_t max_batch_ops_;  // the fabric's (at least 2)
  // Pages by number / kNumbersPerPage, published (release) once filled; a
  // slot is written only by the context holding its number (under
  // grow_lock_) and read by it.
  std::unique_ptr<std::atomic<Page*>[]> pages_;
  // The slow path's: one context of the compute node at a time (it parks
  // the others, so round trips may be made under it).
  LocalLock grow_lock_;
  bool root_loaded_ = false;     // guarded by grow_lock_
  bool taken_over_ = false;      // guarded by grow_lock_: TakeOver done
  fabric::RemoteAddress lease_;  // guarded by grow_lock_: this node's lease record
  fabric::RemoteAddress root_;   // guarded by grow_lock_: null until made
  std::vector<fabric::RemoteAddress> remote_pages_;  // guarded by grow_lock_
  std::vector<std::unique_ptr<Page>> owned_pages_;   // guarded by grow_lock_
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_REDO_LOG_H_
