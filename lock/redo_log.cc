#include "lock/redo_log.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "lib/runtime/lease.h"
#include "lib/runtime/membership.h"
#include "lock/lock_queue.h"

namespace dmidx::lock {

namespace {

using fabric::Op;
using fabric::OpCode;
using fabric::RemoteAddress;
using runtime::ContextImpl;
using runtime::ScratchArena;

// The layout's version, in the shape word: a recoverer refuses a directory
// it cannot read rather than guess.
constexpr uint64_t kDirectoryVersion = 1;
// Recovery (RecoveryStep) READs a dead node's directory and records, and
// redoes a record's WRITEs, through buffers of this many bytes of the
// arena, so that it needs the same small amount of scratch whatever the
// record's size (up to kMaxSlotBytes): a survivor recovers from inside an
// operation that waits on the dead node's word, with that operation's
// buffers taken, and a client may have as little as 4 KiB of scratch. At
// most two such buffers and the lock word are held at once (about 520
// bytes). 256: the record of a radix update or of a B+tree entry, which
// fits in the smallest slot (kMinSlotBytes), is read whole in one READ.
constexpr uint32_t kRecoveryPiece = 256;
constexpr uint32_t kRecoveryPieceWords = kRecoveryPiece / 8;
static_assert(kRecoveryPiece % 8 == 0 && kRecoveryPiece >= kRecordWritesOffset);
// The header and the longest WRITE table: kept on the stack while a
// record is checked and redone (it may not fit in the first piece).
constexpr uint32_t kMaxTableBytes =
    kRecordWritesOffset + kRecordWriteBytes * RedoLog::kMaxRecordedWrites;
// A zeroed object is written from a zero buffer of at most this many bytes.
constexpr uint32_t kZeroPiece = 256;
constexpr uint64_t kSlotOffsetMask = fabric::RemoteAddress::kMaxOffset;

constexpr uint32_t Pad8(uint32_t bytes) {
  return (bytes + 7) & ~7u;
}

uint64_t Load64(const uint8_t* at) {
  uint64_t value;
  std::memcpy(&value, at, 8);
  return value;
}
void Store64(uint8_t* at, uint64_t value) {
  std::memcpy(at, &value, 8);
}

// The record hash's state after `bytes` bytes more, zero-padded to whole
// words (MixRecordWords).
uint64_t MixBytes(uint64_t state, const void* data, uint32_t bytes) {
  const auto* at = static_cast<const uint8_t*>(data);
  state = MixRecordWords(state, at, bytes / 8);
  if (bytes % 8 != 0) {
    uint64_t last = 0;
    std::memcpy(&last, at + bytes / 8 * 8, bytes % 8);
    state = checksum_internal::Mix(state, last);
  }
  return state;
}

// Copies `bytes` bytes to `to` and zeroes the rest of their last word:
// whole words by 8-byte loads and stores, no call for the few words a
// record copies.
void CopyPadded(uint8_t* to, const void* from, uint32_t bytes) {
  const auto* in = static_cast<const uint8_t*>(from);
  uint32_t i = 0;
  for (; i + 8 <= bytes; i += 8)
    Store64(to + i, Load64(in + i));
  if (i < bytes) {
    uint64_t last = 0;
    std::memcpy(&last, in + i, bytes - i);
    Store64(to + i, last);
  }
}

// Copies ops one by one: a few, so a loop beats a call to memmove.
Op* CopyOps(const Op* begin, const Op* end, Op* out) {
  for (const Op* op = begin; op != end; ++op)
    *out++ = *op;
  return out;
}

uint64_t ShapeWordFor(uint32_t memory_nodes) {
  return RedoLog::kNumbersPerPage | uint64_t{memory_nodes} << 16 | kDirectoryVersion << 48;
}

// A WRITE's entry in the record: its length (bits 0-31) and the offset of
// its bytes in the record (bits 32-63), after its address.
uint64_t WriteEntry(uint32_t length, uint32_t offset) {
  return length | uint64_t{offset} << 32;
}

// A record's header and WRITE table, as a recoverer READ them.
struct RecordTable {
  uint64_t words[kMaxTableBytes / 8] = {};
  uint32_t writes = 0, head = 0, bytes = 0;

  uint64_t Word(uint32_t offset) const { return words[offset / 8]; }
  // WRITE i's remote address, length and the offset of its bytes in the
  // record.
  RemoteAddress Address(uint32_t i) const {
    return RemoteAddress::FromRaw(Word(kRecordWritesOffset + kRecordWriteBytes * i));
  }
  uint32_t Length(uint32_t i) const {
    return static_cast<uint32_t>(Word(kRecordWritesOffset + kRecordWriteBytes * i + 8));
  }
  uint32_t Offset(uint32_t i) const {
    return static_cast<uint32_t>(Word(kRecordWritesOffset + kRecordWriteBytes * i + 8) >> 32);
  }
};

// Whether the record in `slot` (of `capacity` bytes) is whole: every field
// in range and the checksum right. False for a cleared slot, a torn record
// (its WRITE cut short by the death: nothing after it landed) or bytes
// that never were a record of this slot's (memory a slot took over). READ
// a piece at a time into `piece` (kRecoveryPiece bytes of the arena) and
// hashed as it is read: the head from its second word, then each WRITE's
// bytes that lie after the head, in table order. Every piece but a
// WRITE's last is of whole words, so the hash is the one Wrap computed
// over the record in one buffer. The header and table are kept in *table.
StatusOr<bool> WholeRecord(ContextImpl& ctx, RemoteAddress slot, uint32_t capacity, uint32_t number,
                           uint8_t* piece, RecordTable* table) {
  const uint16_t node = slot.node();
  auto read = [&](uint32_t offset, uint32_t length) {
    const Op op = Op::Read(slot + offset, piece, length);
    return ctx.Execute(node, {&op, 1});
  };
  // Grow makes no slot this small; a directory word that says so names no
  // record.
  if (capacity < kRecordWritesOffset) return false;
  const uint32_t first = std::min(capacity, kRecoveryPiece);
  DMIDX_RETURN_IF_ERROR(read(0, first));
  const uint64_t checksum = Load64(piece + kRecordChecksumOffset);
  if (checksum == 0) return false;  // cleared
  const uint64_t shape = Load64(piece + kRecordShapeOffset);
  const uint32_t writes = ShapeWrites(shape), head = ShapeHead(shape), bytes = ShapeBytes(shape);
  const uint32_t table_end = kRecordWritesOffset + kRecordWriteBytes * writes;
  if (writes == 0 || writes > RedoLog::kMaxRecordedWrites || ShapeNumber(shape) != number ||
      head < table_end || bytes < head || bytes > capacity) {
    return false;
  }
  if (RemoteAddress::FromRaw(Load64(piece + kRecordWordOffset)).node() != node) return false;
  table->writes = writes;
  table->head = head;
  table->bytes = bytes;
  // The head (header, table, copied bytes): its table kept, its words
  // hashed from the second on. The first piece holds its start already
  // (head <= bytes <= capacity).
  uint64_t hash = kRecordHashSeed;
  for (uint32_t at = 0; at < head; at += kRecoveryPiece) {
    const uint32_t length = std::min(kRecoveryPiece, head - at);
    if (at != 0) DMIDX_RETURN_IF_ERROR(read(at, length));
    if (at < table_end) {
      std::memcpy(reinterpret_cast<uint8_t*>(table->words) + at, piece,
                  std::min(length, table_end - at));
    }
    const uint32_t skip = at == 0 ? 8 : 0;  // the checksum's own word
    hash = MixRecordWords(hash, piece + skip, (length - skip) / 8);
  }
  for (uint32_t i = 0; i < writes; ++i) {
    const uint32_t length = table->Length(i), offset = table->Offset(i);
    const uint32_t end = offset < head ? head : bytes;
    if (table->Address(i).node() != node || length == 0 || offset % 8 != 0 || offset < table_end ||
        offset > end || end - offset < length) {
      return false;
    }
  }
  for (uint32_t i = 0; i < writes; ++i) {
    const uint32_t length = table->Length(i), offset = table->Offset(i);
    if (offset < head) continue;  // copied: hashed with the head
    for (uint32_t done = 0; done < length; done += kRecoveryPiece) {
      const uint32_t part = std::min(kRecoveryPiece, length - done);
      DMIDX_RETURN_IF_ERROR(read(offset + done, part));
      hash = MixBytes(hash, piece, part);
    }
  }
  return FinishRecordHash(hash) == checksum;
}

// Recovery of one slot of a dead compute node (RedoLog::RecoveryStep), in
// two kRecoveryPiece buffers and a word of the arena whatever the
// record's size.
Status RedoSlot(ContextImpl& ctx, uint32_t number, RemoteAddress slot, uint32_t capacity) {
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint8_t * pieces, ctx.arena().Bytes(2 * kRecoveryPiece, 8));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * found, ctx.arena().Words(1));
  RecordTable table;
  DMIDX_ASSIGN_OR_RETURN(const bool whole,
                         WholeRecord(ctx, slot, capacity, number, pieces, &table));
  if (!whole) return Status::Ok();
  const RemoteAddress word = RemoteAddress::FromRaw(table.Word(kRecordWordOffset));
  const uint64_t hold = table.Word(kRecordHoldOffset);
  const Op look = Op::Read(word, found, 8);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&look, 1}));
  // Released (the change landed whole), or someone else's since.
  if (*found != hold) return Status::Ok();
  // The redo, a piece at a time: a piece of a WRITE's bytes READ from the
  // slot, then WRITTEN to the WRITE's address at the same distance from
  // its start (pieces start at whole words of the record: its WRITEs'
  // bytes are 8-aligned there). Each round trip WRITEs the piece the one
  // before READ and READs the next into the other buffer: never a READ
  // and a WRITE of the same buffer in one batch, as a WRITE posted after
  // a READ may take its bytes before the READ's have arrived. Slot, word
  // and WRITEs are on one memory node (WholeRecord).
  struct Piece {
    uint32_t from = 0;  // in the record
    RemoteAddress to;
    uint32_t length = 0;
  };
  uint32_t write = 0, done = 0;  // the next piece: WRITE `write`'s bytes from `done`
  auto next = [&](Piece* piece) {
    while (write < table.writes && done == table.Length(write)) {
      ++write;
      done = 0;
    }
    if (write == table.writes) return false;
    const uint32_t length = std::min(kRecoveryPiece, table.Length(write) - done);
    *piece = {table.Offset(write) + done, table.Address(write) + done, length};
    done += length;
    return true;
  };
  uint8_t* const buffers[2] = {pieces, pieces + kRecoveryPiece};
  uint32_t current = 0;
  Piece pending;
  bool have = next(&pending);
  if (have) {
    const Op first = Op::Read(slot + pending.from, buffers[current], pending.length);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(slot.node(), {&first, 1}));
  }
  while (have) {
    Piece following;
    const bool more = next(&following);
    std::array<Op, 2> ops = {Op::Write(pending.to, buffers[current], pending.length)};
    if (more) ops[1] = Op::Read(slot + following.from, buffers[current ^ 1], following.length);
    // ExecuteAll: split if the fabric takes one op a batch.
    DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(std::span<Op>(ops.data(), more ? 2 : 1)));
    pending = following;
    have = more;
    current ^= 1;
  }
  // Every piece completed; then the word freed, from the hold value only
  // (a recoverer cut short after this redoes nothing: the word no longer
  // holds it; one cut short before it redoes it all again, the same
  // bytes).
  const Op free = Op::CompareSwap(word, found, hold, 0);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&free, 1}));
  if (*found == hold) ++ctx.counters().dead_holds_freed;
  return Status::Ok();
}

}  // namespace

std::shared_ptr<RedoLog> RedoLog::For(runtime::ComputeNode& node) {
  node.membership().AddPermanentRecoveryStep("lock: redo records", &RedoLog::RecoveryStep);
  return node.Kept(runtime::SharedKey<RedoLog>("lock/redo-log"),
                   [&] { return std::make_shared<RedoLog>(node); });
}

RedoLog::RedoLog(runtime::ComputeNode& node)
    : node_(node),
      nodes_(node.memory_node_count()),
      max_batch_ops_(std::max<uint32_t>(2, node.capabilities().max_batch_ops)),
      pages_(new std::atomic<Page*>[kDirectoryPages]()) {}

RedoLog::~RedoLog() = default;

uint64_t RedoLog::ShapeWord() const {
  return ShapeWordFor(nodes_);
}

StatusOr<uint32_t> RedoLog::WrapAny(ContextImpl& ctx, RemoteAddress word, uint64_t hold,
                                    std::span<const Op> change, uint32_t linked, uint32_t room,
                                    Op* batch, bool clear) {
  const uint16_t node = word.node();
  const auto n = static_cast<uint32_t>(change.size());
  // The head (header, WRITE table, copied bytes) and the long WRITEs'
  // bytes after it.
  uint32_t writes = 0, copied = 0, apart = 0, apart_writes = 0;
  bool valid = linked <= n;
  for (uint32_t i = 0; i < n; ++i) {
    const Op& op = change[i];
    valid &= op.remote.node() == node && (op.code == OpCode::kWrite || op.code == OpCode::kRead);
    if (i < linked || op.code != OpCode::kWrite) continue;
    ++writes;
    if (op.length <= kCopiedBytes) {
      copied += Pad8(op.length);
    } else {
      apart += Pad8(op.length);
      ++apart_writes;
    }
  }
  if (!valid || writes > kMaxRecordedWrites || n + 2 > room) [[unlikely]] {
    return Status::InvalidArgument(
        "a recorded change of " + std::to_string(n) + " ops (" + std::to_string(writes) +
        " WRITEs recorded, at most " + std::to_string(kMaxRecordedWrites) + "; room for " +
        std::to_string(room) + " ops with the record) must be WRITEs and READs on the lock word " +
        word.ToString() + "'s memory node");
  }
  if (writes == 0) {
    CopyOps(change.data(), change.data() + n, batch);
    return n;
  }
  // No room for WRITEs of their own: every WRITE's bytes in the head.
  const bool copy_all = n + 2 + apart_writes > room;
  if (copy_all) {
    copied += apart;
    apart = 0;
  }
  const uint32_t head = kRecordWritesOffset + kRecordWriteBytes * writes + copied;
  const uint32_t bytes = head + apart;
  if (bytes > kMaxSlotBytes) [[unlikely]] {
    return Status::ResourceExhausted("a redo record of " + std::to_string(bytes) +
                                     " bytes; at most " + std::to_string(kMaxSlotBytes));
  }
  const uint32_t number = ctx.number();
  Slot slot;
  if (const Page* page = pages_[number / kNumbersPerPage].load(std::memory_order_acquire)) {
    slot = page->slots[(number % kNumbersPerPage) * nodes_ + node];
  }
  if (slot.capacity < bytes) [[unlikely]] {
    DMIDX_ASSIGN_OR_RETURN(slot, Grow(ctx, node, bytes));
  }
  const RemoteAddress at = RemoteAddress::FromRaw(slot.address);
  DMIDX_ASSIGN_OR_RETURN(uint8_t * record, ctx.arena().Bytes(head, 8));
  Store64(record + kRecordWordOffset, word.raw());
  Store64(record + kRecordHoldOffset, hold);
  Store64(record + kRecordShapeOffset, RecordShape(writes, number, head, bytes));
  Op* out = CopyOps(change.data(), change.data() + linked, batch);
  *out++ = Op::Write(at, record, head);
  uint8_t* entry = record + kRecordWritesOffset;
  uint32_t copied_at = kRecordWritesOffset + kRecordWriteBytes * writes;
  uint32_t apart_at = head;
  std::array<const Op*, kMaxRecordedWrites> apart_ops;  // hashed after the head
  uint32_t folded = 0;
  for (uint32_t i = linked; i < n; ++i) {
    const Op& op = change[i];
    if (op.code != OpCode::kWrite) continue;
    Store64(entry, op.remote.raw());
    if (op.length <= kCopiedBytes || copy_all) {
      Store64(entry + 8, WriteEntry(op.length, copied_at));
      CopyPadded(record + copied_at, op.local, op.length);
      copied_at += Pad8(op.length);
    } else {
      Store64(entry + 8, WriteEntry(op.length, apart_at));
      *out++ = Op::Write(at + apart_at, op.local, op.length);
      apart_ops[folded++] = &op;
      apart_at += Pad8(op.length);
    }
    entry += kRecordWriteBytes;
  }
  uint64_t hash = MixRecordWords(kRecordHashSeed, record + 8, (head - 8) / 8);
  for (uint32_t i = 0; i < folded; ++i)
    hash = MixBytes(hash, apart_ops[i]->local, apart_ops[i]->length);
  Store64(record + kRecordChecksumOffset, FinishRecordHash(hash));
  out = CopyOps(change.data() + linked, change.data() + n, out);
  if (clear) *out++ = Op::Write(at + kRecordChecksumOffset, ctx.zero_word(), 8);
  return static_cast<uint32_t>(out - batch);
}

StatusOr<RedoLog::Slot> RedoLog::Grow(ContextImpl& ctx, uint16_t node, uint32_t bytes) {
  LocalLock::Guard guard(grow_lock_, ctx);
  DMIDX_RETURN_IF_ERROR(LoadRoot(ctx));
  const uint32_t number = ctx.number();
  const uint32_t p = number / kNumbersPerPage;
  const uint32_t index = (number % kNumbersPerPage) * nodes_ + node;
  Page* page = pages_[p].load(std::memory_order_acquire);
  if (page == nullptr && !remote_pages_[p].is_null()) {
    DMIDX_ASSIGN_OR_RETURN(page, LoadPage(ctx, p));
  }
  // A slot that keeps a record is neither written nor replaced (the
  // directory must go on naming it) until that record's word is freed.
  if (page != nullptr && page->slots[index].kept_capacity != 0) {
    DMIDX_RETURN_IF_ERROR(Unkeep(ctx, page->slots[index], node));
  }
  if (page != nullptr && page->slots[index].capacity >= bytes) {
    return page->slots[index];  // taken over with the directory
  }
  // What is missing, made and named in one round trip (two when the slot
  // is on another memory node than the directory). If it fails, nothing
  // made is freed: the directory may name it now.
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(4));
  uint8_t* zeros = nullptr;  // made for the first object zeroed
  std::vector<Op> ops;
  auto zeroed = [&](uint64_t size) -> StatusOr<RemoteAddress> {
    if (zeros == nullptr) {
      DMIDX_ASSIGN_OR_RETURN(zeros, ctx.arena().Bytes(kZeroPiece, 64));
      std::memset(zeros, 0, kZeroPiece);
    }
    DMIDX_ASSIGN_OR_RETURN(const RemoteAddress at,
                           ctx.allocator().Allocate(ctx, size, 64, lease_.node()));
    for (uint64_t done = 0; done < size; done += kZeroPiece) {
      ops.push_back(Op::Write(at + done, zeros,
                              static_cast<uint32_t>(std::min<uint64_t>(kZeroPiece, size - done))));
    }
    return at;
  };
  RemoteAddress root = root_;
  if (root.is_null()) {
    DMIDX_ASSIGN_OR_RETURN(root, zeroed(8 * kDirectoryPages));
  }
  std::unique_ptr<Page> fresh;
  if (page == nullptr) {
    fresh = std::make_unique<Page>();
    fresh->slots = std::make_unique<Slot[]>(size_t{kNumbersPerPage} * nodes_);
    DMIDX_ASSIGN_OR_RETURN(fresh->remote, zeroed(uint64_t{8} * kNumbersPerPage * nodes_));
    words[0] = fresh->remote.raw();
    ops.push_back(Op::Write(root + 8 * p, &words[0], 8));
  }
  if (root_.is_null()) {
    words[1] = root.raw();
    words[2] = ShapeWord();
    ops.push_back(Op::Write(lease_ + runtime::kLeaseRedoDirectoryOffset, &words[1], 16));
  }
  const uint32_t capacity = std::max(kMinSlotBytes, std::bit_ceil(bytes));
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress slot,
                         ctx.allocator().Allocate(ctx, capacity, 64, node));
  words[3] = EncodeSlot(slot, capacity);
  // The slot's first word cleared (its memory may hold anything, even a
  // whole record of this context's from when it was an earlier slot: it
  // must never be named uncleared), and its directory word after its
  // page's zeroes. Both on one memory node: one ordered batch. On two, no
  // order holds between them, so the clear goes first, alone: a second
  // round trip, only when a slot is made.
  const RemoteAddress page_remote = page != nullptr ? page->remote : fresh->remote;
  const Op clear = Op::Write(slot + kRecordChecksumOffset, ctx.zero_word(), 8);
  Status status;
  if (slot.node() == page_remote.node()) {
    ops.push_back(clear);
  } else {
    status = ctx.Execute(slot.node(), {&clear, 1});
  }
  ops.push_back(Op::Write(page_remote + 8 * index, &words[3], 8));
  if (status.ok()) status = ctx.ExecuteAll(ops);
  if (!status.ok()) {
    // Not used: the next record makes all that is missing again. The
    // directory may name what this made (the batch may have landed), so
    // none of it is freed, nor the old slot: a recoverer may read any of
    // them (a few hundred bytes lost per failed round trip here).
    if (page != nullptr) page->slots[index] = Slot{};
    return status;
  }
  root_ = root;
  if (page == nullptr) {
    remote_pages_[p] = fresh->remote;
    page = Publish(p, std::move(fresh));
  }
  const Slot old = std::exchange(page->slots[index], Slot{slot.raw(), capacity});
  // No longer named: the recoverer reads only what the directory names.
  if (old.address != 0) {
    (void)ctx.allocator().Free(ctx, RemoteAddress::FromRaw(old.address), old.capacity, 64);
  }
  return page->slots[index];
}

void RedoLog::KeepRecord(ContextImpl& ctx, RemoteAddress word, uint64_t hold) {
  LocalLock::Guard guard(grow_lock_, ctx);
  const uint32_t number = ctx.number();
  Page* page = pages_[number / kNumbersPerPage].load(std::memory_order_acquire);
  if (page == nullptr) return;  // no slot: no record was written
  Slot& slot = page->slots[(number % kNumbersPerPage) * nodes_ + word.node()];
  // Kept already: the failed batch carried no record there (Wrap refused
  // it), so the record kept is still the earlier one.
  if (slot.address == 0 || slot.kept_capacity != 0) return;
  slot.kept_capacity = slot.capacity;
  slot.capacity = 0;
  slot.kept_word = word.raw();
  slot.kept_hold = hold;
}

Status RedoLog::ReleaseHold(ContextImpl& ctx, RemoteAddress word, uint64_t hold, int posts,
                            const Op* clear) {
  Status released = lock::ReleaseHold(ctx, word, hold, posts, clear);
  if (!released.ok()) KeepRecord(ctx, word, hold);
  return released;
}

Status RedoLog::Unkeep(ContextImpl& ctx, Slot& slot, uint16_t node) {
  const RemoteAddress word = RemoteAddress::FromRaw(slot.kept_word);
  uint64_t held = 0;
  DMIDX_RETURN_IF_ERROR(ctx.ReadWords(word, 1, &held));
  if (held == slot.kept_hold) {
    return Status::Unavailable(
        "context " + std::to_string(ctx.number()) + "'s redo record on memory node " +
        std::to_string(node) + " is kept for lock word " + word.ToString() +
        ", which a write-back of its that failed every post left held (hold " +
        std::to_string(slot.kept_hold) +
        "): its recorded changes there wait for the recovery that completes that write-back "
        "(its client closed unsettled, or its compute node declared dead)");
  }
  // Freed: a recovery redid the record (or the hold was released after
  // all); the record can never match the word again (its hold value was
  // that acquisition's alone), so the slot takes records again.
  slot.capacity = std::exchange(slot.kept_capacity, 0);
  slot.kept_word = 0;
  slot.kept_hold = 0;
  return Status::Ok();
}

Status RedoLog::LoadRoot(ContextImpl& ctx) {
  if (root_loaded_) return Status::Ok();
  DMIDX_ASSIGN_OR_RETURN(lease_, node_.membership().LeaseRecordOf(ctx, node_.id()));
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * named, ctx.arena().Words(2));
  const Op read = Op::Read(lease_ + runtime::kLeaseRedoDirectoryOffset, named, 16);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(lease_.node(), {&read, 1}));
  remote_pages_.assign(kDirectoryPages, RemoteAddress());
  const RemoteAddress found = RemoteAddress::FromRaw(named[0]);
  if (!found.is_null() && named[1] == ShapeWord()) {
    // An earlier client's of this compute-node id (a verbs process opens
    // its next client with the id it had): its directory and slots are
    // taken over.
    DMIDX_ASSIGN_OR_RETURN(uint64_t * pages, ctx.arena().Words(kDirectoryPages));
    const Op pages_read = Op::Read(found, pages, 8 * kDirectoryPages);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(found.node(), {&pages_read, 1}));
    for (uint32_t p = 0; p < kDirectoryPages; ++p)
      remote_pages_[p] = RemoteAddress::FromRaw(pages[p]);
    root_ = found;
  }
  root_loaded_ = true;
  return Status::Ok();
}

StatusOr<RedoLog::Page*> RedoLog::LoadPage(ContextImpl& ctx, uint32_t p) {
  auto page = std::make_unique<Page>();
  page->slots = std::make_unique<Slot[]>(size_t{kNumbersPerPage} * nodes_);
  page->remote = remote_pages_[p];
  const uint64_t words = uint64_t{kNumbersPerPage} * nodes_;
  for (uint64_t first = 0; first < words; first += kRecoveryPieceWords) {
    const auto count =
        static_cast<uint32_t>(std::min<uint64_t>(kRecoveryPieceWords, words - first));
    std::array<uint64_t, kRecoveryPieceWords> entries;
    DMIDX_RETURN_IF_ERROR(ctx.ReadWords(page->remote + 8 * first, count, entries.data()));
    for (uint32_t i = 0; i < count; ++i) {
      if (entries[i] == 0) continue;
      const auto slot_node = static_cast<uint16_t>((first + i) % nodes_);
      page->slots[first + i] = {RemoteAddress::Pool(slot_node, entries[i] & kSlotOffsetMask).raw(),
                                static_cast<uint32_t>((entries[i] >> 48) * 64)};
    }
  }
  return Publish(p, std::move(page));
}

RedoLog::Page* RedoLog::Publish(uint32_t p, std::unique_ptr<Page> page) {
  Page* raw = page.get();
  owned_pages_.push_back(std::move(page));
  pages_[p].store(raw, std::memory_order_release);
  return raw;
}

Status RedoLog::Reserve(ContextImpl& ctx, uint16_t node, uint32_t change_bytes, uint32_t writes) {
  // Each WRITE's bytes padded to a word at most.
  const uint64_t bytes =
      kRecordWritesOffset + uint64_t{kRecordWriteBytes + 8} * writes + change_bytes;
  if (bytes > kMaxSlotBytes) {
    return Status::ResourceExhausted("a redo record of " + std::to_string(bytes) +
                                     " bytes; at most " + std::to_string(kMaxSlotBytes));
  }
  if (Writable(ctx.number(), node) >= bytes) return Status::Ok();
  return Grow(ctx, node, static_cast<uint32_t>(bytes)).status();
}

Status RedoLog::Prepare(ContextImpl& ctx, uint32_t bytes) {
  for (uint32_t node = 0; node < nodes_; ++node) {
    if (Writable(ctx.number(), static_cast<uint16_t>(node)) < bytes) {
      DMIDX_RETURN_IF_ERROR(Grow(ctx, static_cast<uint16_t>(node), bytes).status());
    }
  }
  return Status::Ok();
}

Status RedoLog::ClearSlots(ContextImpl& ctx) {
  LocalLock::Guard guard(grow_lock_, ctx);
  DMIDX_RETURN_IF_ERROR(LoadRoot(ctx));
  const uint32_t number = ctx.number();
  const RemoteAddress page = remote_pages_[number / kNumbersPerPage];
  if (page.is_null()) return Status::Ok();  // no slot of ctx's was ever named
  // The slots the directory names for ctx's number, not those this
  // client knows: a Grow that failed may have left an earlier slot named
  // (recovery reads what the directory names). One round trip each: the
  // entries, the named records' heads, their words, the clears.
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * entries, ctx.arena().Words(nodes_));
  DMIDX_RETURN_IF_ERROR(
      ctx.ReadWords(page + 8 * (uint64_t{number % kNumbersPerPage} * nodes_), nodes_, entries));
  constexpr uint32_t kHeadWords = kRecordHoldOffset / 8 + 1;
  DMIDX_ASSIGN_OR_RETURN(uint64_t * heads, ctx.arena().Words(nodes_ * kHeadWords));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(nodes_));
  std::vector<RemoteAddress> slots(nodes_);
  std::vector<Op> ops;
  for (uint32_t node = 0; node < nodes_; ++node) {
    if (entries[node] == 0) continue;
    slots[node] = RemoteAddress::Pool(static_cast<uint16_t>(node), entries[node] & kSlotOffsetMask);
    ops.push_back(Op::Read(slots[node], heads + node * kHeadWords, 8 * kHeadWords));
  }
  if (ops.empty()) return Status::Ok();
  DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(ops));
  // A whole record whose word still holds its value is a release that
  // failed every post: the word stays held, by a value this context's
  // next holds cannot take while it does, and the record stays for the
  // recovery that completes it. (A cleared or torn record is cleared
  // again: harmless.)
  // A word address that cannot be a lock word's (a torn or cleared head)
  // is not read: the record is cleared.
  const auto lock_word = [&](const uint64_t* head) {
    const RemoteAddress word = RemoteAddress::FromRaw(head[kRecordWordOffset / 8]);
    if (word.node() >= nodes_ || word.offset() % 8 != 0) return RemoteAddress();
    const fabric::NodeLayout layout = node_.layout(word.node());
    const uint64_t bytes =
        word.region() == fabric::Region::kLock ? layout.lock_region_bytes : layout.pool_bytes;
    return word.offset() + 8 <= bytes ? word : RemoteAddress();
  };
  ops.clear();
  for (uint32_t node = 0; node < nodes_; ++node) {
    const uint64_t* head = heads + node * kHeadWords;
    words[node] = 0;
    if (slots[node].is_null() || head[kRecordChecksumOffset / 8] == 0) continue;
    const RemoteAddress word = lock_word(head);
    if (!word.is_null()) ops.push_back(Op::Read(word, &words[node], 8));
  }
  if (!ops.empty()) DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(ops));
  ops.clear();
  for (uint32_t node = 0; node < nodes_; ++node) {
    const uint64_t* head = heads + node * kHeadWords;
    if (slots[node].is_null() || head[kRecordChecksumOffset / 8] == 0) continue;
    const uint64_t hold = head[kRecordHoldOffset / 8];
    if (hold != 0 && !lock_word(head).is_null() && words[node] == hold) continue;
    ops.push_back(Op::Write(slots[node] + kRecordChecksumOffset, ctx.zero_word(), 8));
  }
  if (ops.empty()) return Status::Ok();
  return ctx.ExecuteAll(ops);
}

RedoLog::SlotRef RedoLog::SlotOf(uint32_t number, uint16_t node) const {
  const Page* page = pages_[number / kNumbersPerPage].load(std::memory_order_acquire);
  if (page == nullptr) return {};
  const Slot& slot = page->slots[(number % kNumbersPerPage) * nodes_ + node];
  return {RemoteAddress::FromRaw(slot.address), std::max(slot.capacity, slot.kept_capacity)};
}

uint32_t RedoLog::Writable(uint32_t number, uint16_t node) const {
  const Page* page = pages_[number / kNumbersPerPage].load(std::memory_order_acquire);
  return page == nullptr ? 0 : page->slots[(number % kNumbersPerPage) * nodes_ + node].capacity;
}

namespace {

// Recovers every slot of the directory the lease record at `lease` names
// (compute node `whose`'s), as RedoLog::RecoveryStep says; with `clear`,
// then clears each slot's record.
Status RecoverDirectory(ContextImpl& ctx, RemoteAddress lease, uint32_t whose, bool clear) {
  const uint32_t nodes = ctx.compute_node().memory_node_count();
  std::array<uint64_t, 2> named;
  DMIDX_RETURN_IF_ERROR(ctx.ReadWords(lease + runtime::kLeaseRedoDirectoryOffset, 2, named.data()));
  const RemoteAddress root = RemoteAddress::FromRaw(named[0]);
  // Grow names root and shape by one 16-byte WRITE, which a death may
  // tear (8-byte atomicity only), and posts records only once it has
  // completed: either word still 0 means no directory yet, nothing
  // recorded.
  if (root.is_null() || named[1] == 0) return Status::Ok();
  if (named[1] != ShapeWordFor(nodes)) {
    return Status::DataLoss("compute node " + std::to_string(whose) +
                            "'s redo directory has shape " + std::to_string(named[1]) +
                            ", not this version's " + std::to_string(ShapeWordFor(nodes)));
  }
  // Root and pages a piece at a time, copied out of the arena: a slot's
  // recovery takes its buffers from all of it (kRecoveryPiece).
  std::array<uint64_t, kRecoveryPieceWords> pages, entries;
  const uint64_t words = uint64_t{RedoLog::kNumbersPerPage} * nodes;
  for (uint32_t p0 = 0; p0 < RedoLog::kDirectoryPages; p0 += kRecoveryPieceWords) {
    const uint32_t named_pages = std::min(kRecoveryPieceWords, RedoLog::kDirectoryPages - p0);
    DMIDX_RETURN_IF_ERROR(ctx.ReadWords(root + 8 * p0, named_pages, pages.data()));
    for (uint32_t k = 0; k < named_pages; ++k) {
      const uint32_t p = p0 + k;
      const RemoteAddress page = RemoteAddress::FromRaw(pages[k]);
      if (page.is_null()) continue;
      for (uint64_t first = 0; first < words; first += kRecoveryPieceWords) {
        const auto count =
            static_cast<uint32_t>(std::min<uint64_t>(kRecoveryPieceWords, words - first));
        DMIDX_RETURN_IF_ERROR(ctx.ReadWords(page + 8 * first, count, entries.data()));
        for (uint32_t i = 0; i < count; ++i) {
          if (entries[i] == 0) continue;
          const uint64_t index = first + i;
          const auto number = static_cast<uint32_t>(p * RedoLog::kNumbersPerPage + index / nodes);
          const RemoteAddress slot = RemoteAddress::Pool(static_cast<uint16_t>(index % nodes),
                                                         entries[i] & kSlotOffsetMask);
          const auto capacity = static_cast<uint32_t>((entries[i] >> 48) * 64);
          DMIDX_RETURN_IF_ERROR(RedoSlot(ctx, number, slot, capacity));
          if (clear) {
            const Op write = Op::Write(slot + kRecordChecksumOffset, ctx.zero_word(), 8);
            DMIDX_RETURN_IF_ERROR(ctx.Execute(slot.node(), {&write, 1}));
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status RedoLog::RecoveryStep(ContextImpl& ctx, uint32_t dead) {
  StatusOr<RemoteAddress> lease = ctx.compute_node().membership().LeaseRecordOf(ctx, dead);
  if (!lease.ok()) return lease.status().IsNotFound() ? Status::Ok() : lease.status();
  return RecoverDirectory(ctx, *lease, dead, /*clear=*/false);
}

Status RedoLog::TakeOver(ContextImpl& ctx) {
  LocalLock::Guard guard(grow_lock_, ctx);
  if (taken_over_) return Status::Ok();
  DMIDX_RETURN_IF_ERROR(LoadRoot(ctx));
  if (!root_.is_null()) {
    // An earlier client's directory, taken over: its records are finished
    // (redone where their word still holds their hold, the word freed)
    // and cleared before this client holds anything. Its contexts' numbers
    // and acquisition counts are this client's again, so a record of its
    // left whole by a landed release would match a hold of this client's.
    DMIDX_RETURN_IF_ERROR(RecoverDirectory(ctx, lease_, node_.id(), /*clear=*/true));
  }
  taken_over_ = true;
  return Status::Ok();
}

}  // namespace dmidx::lock
