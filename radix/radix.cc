// The radix tree client: descents, lookups and updates of present keys, and
// the handle. docs/radix.md has the protocols; radix/layout.h the layouts.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "index/verified_read.h"
#include "radix/radix_impl.h"

namespace dmidx {

namespace radix {

using fabric::Op;
using fabric::RemoteAddress;
using runtime::ContextImpl;

namespace {

uint64_t LoadWord(const uint8_t* bytes) {
  uint64_t word;
  std::memcpy(&word, bytes, 8);
  return word;
}

}  // namespace

RemoteAddress NodeImage::reverse() const {
  return RemoteAddress::FromRaw(LoadWord(bytes + kReverseOffset));
}
Slot NodeImage::slot(uint32_t index) const {
  return Slot(LoadWord(bytes + kSlotsOffset + 8 * index));
}
// A torn READ may show a later slot filled and an earlier one still empty,
// so every slot of the type is looked at.
int NodeImage::Find(uint8_t partial) const {
  const uint32_t slots = capacity();
  for (uint32_t i = 0; i < slots; ++i) {
    const Slot s = slot(i);
    if (s.used() && s.partial() == partial) return static_cast<int>(i);
  }
  return -1;
}
int NodeImage::FirstEmpty() const {
  const uint32_t slots = capacity();
  for (uint32_t i = 0; i < slots; ++i) {
    if (slot(i).empty()) return static_cast<int>(i);
  }
  return -1;
}
uint32_t NodeImage::LiveCount() const {
  uint32_t live = 0;
  const uint32_t slots = capacity();
  for (uint32_t i = 0; i < slots; ++i)
    live += slot(i).live() ? 1 : 0;
  return live;
}

RemoteAddress LeafImage::reverse() const {
  return RemoteAddress::FromRaw(LoadWord(bytes + kLeafReverseOffset));
}
uint64_t LeafImage::rear(const LeafShape& shape) const {
  return LoadWord(bytes + shape.rear_offset());
}
uint64_t LeafImage::value() const {
  return LoadWord(bytes + kLeafValueOffset);
}
std::string_view LeafImage::key(const LeafShape& shape) const {
  return {reinterpret_cast<const char*>(bytes + kLeafKeyOffset), shape.key_bytes()};
}
bool LeafImage::Verify(const LeafShape& shape) const {
  return LoadWord(bytes + kLeafChecksumOffset) == LeafChecksum(shape, bytes);
}

RadixImpl::RadixImpl(runtime::ComputeNode& node, std::string name, uint32_t key_bytes,
                     bool fixed_size, RemoteAddress descriptor, const RadixOptions& options,
                     std::shared_ptr<RadixCache> cache, index::RdwcDispatch rdwc)
    : IndexHandle(node, "radix tree", name, key_bytes, std::move(rdwc)),
      name_(std::move(name)),
      shape_(key_bytes),
      fixed_size_(fixed_size),
      descriptor_(descriptor),
      options_(options),
      cache_(std::move(cache)),
      leaf_queues_(
          node.Shared(runtime::SharedKey<lock::LocalLockTable>("radix/leaf-queues"),
                      [&] { return lock::LocalLockTable::Recycling(options.leaf_queue_buckets); })),
      redo_(lock::RedoLog::For(node)),
      node_hold_(LockedBy(node.id(), 0, 0)) {}

void RadixImpl::Invalidate(ContextImpl& ctx, const Cursor& cursor) {
  if (cache_ && !cursor.cached_node.is_null()) cache_->Invalidate(cursor.cached_node);
  ++ctx.counters().cache_stale;
}

StatusOr<bool> RadixImpl::ReadNode(ContextImpl& ctx, Cursor* cursor, NodeImage* node) {
  const RemoteAddress address = cursor->slot.child();
  uint8_t type = fixed_size_ ? kMaxType : std::max<uint8_t>(cursor->slot.type(), 1);
  const Op read = Op::Read(address, node->bytes, NodeReadBytes(type));
  DMIDX_RETURN_IF_ERROR(ctx.Execute(address.node(), {&read, 1}));
  node->address = address;
  node->header = Header::Unpack(LoadWord(node->bytes + kHeaderOffset));
  if (cursor->from_cache && node->reverse() != cursor->parent) return false;
  // A type switch raised the header before the slot that led here: the
  // new slots are behind the ones read.
  if (node->header.type > type && node->header.type <= kMaxType) {
    // Through the cache, the cached parent's slot is stale: a reverse check
    // (type change) that the extra READ repairs. Read afresh, the parent's
    // slot lags (a type switch raced a header split that copied the old
    // type): raise it, unsignaled, so later readers need no second READ.
    // The cursor then holds the raised word: a CAS of the slot this
    // context posts later (a merge, a header split) follows the repair on
    // the same connection and must expect it.
    if (cursor->from_cache) {
      Invalidate(ctx, *cursor);
    } else if (!cursor->slot_address.is_null()) {
      const Slot raised = cursor->slot.WithType(node->header.type);
      const Op repair = Op::CompareSwap(cursor->slot_address, ctx.discard_word(),
                                        cursor->slot.word(), raised.word());
      DMIDX_RETURN_IF_ERROR(ctx.Post(cursor->slot_address.node(), {&repair, 1}, nullptr));
      cursor->slot = raised;
    }
    const uint32_t have = NodeReadBytes(type);
    const Op rest =
        Op::Read(address + have, node->bytes + have, NodeReadBytes(node->header.type) - have);
    DMIDX_RETURN_IF_ERROR(ctx.Execute(address.node(), {&rest, 1}));
  }
  return true;
}

// Round trip 3 of a header split (docs/radix.md), done by whoever finds it
// missing: the node's reverse pointer names the parent this descent came
// from (read afresh), so the split that took it was published (its slot
// CAS landed: the parent was reachable), and the header bytes before
// cursor.depth were matched above. The splitter's own trim races it; under
// the claim (TrimHeader) only one of them can land. A trim that fails for
// any reason is left to the next descent; this one goes on skipping the
// matched bytes either way.
Status RadixImpl::HelpTrim(ContextImpl& ctx, const Cursor& cursor, const NodeImage& node,
                           std::string_view key) {
  const Header& header = node.header;
  const uint32_t drop = cursor.depth - header.depth;
  for (uint32_t i = 0; i < drop; ++i) {
    // Bytes that disagree with the path: not a split's leftover (a stale
    // route); leave it.
    if (header.partial[i] != static_cast<uint8_t>(key[header.depth + i])) return Status::Ok();
  }
  // A type switch of the node changes its header between the READ and the
  // CAS: trim what it holds then (a few times; a freeze or a move ends it).
  Header current = header;
  for (int attempt = 0; attempt < kBatchRetries; ++attempt) {
    const StatusOr<Trim> trim =
        TrimHeader(ctx, node.address, cursor.parent, &current, cursor.depth);
    if (!trim.ok() || *trim != Trim::kHeaderChanged || current.deleted() ||
        current.type > kMaxType || current.depth >= cursor.depth) {
      break;
    }
  }
  return Status::Ok();
}

// Two round trips: claim the node's reverse pointer from `parent`, then,
// in one batch, CAS the header and give the claim back. While the claim is
// held the node is `parent`'s child and nothing moves it: no merge of the
// parent can give the node back, by a header merge, a header word equal to
// the untrimmed one (a trim of that would cut the bytes a merge put there),
// and no other trim or header split of the node runs.
StatusOr<RadixImpl::Trim> RadixImpl::TrimHeader(ContextImpl& ctx, RemoteAddress node,
                                                RemoteAddress parent, Header* current,
                                                uint32_t depth) {
  const RemoteAddress reverse = node + kReverseOffset;
  const uint64_t claim = Claim(ctx);
  const StatusOr<uint64_t> claimed = CompareSwap(ctx, reverse, parent.raw(), claim);
  if (!claimed.ok()) {
    (void)CompareSwapRetrying(ctx, reverse, claim, parent.raw());
    return claimed.status();
  }
  if (*claimed != parent.raw()) return Trim::kNotChild;
  Header trimmed = *current;
  const uint32_t drop = depth - current->depth;
  trimmed.depth = static_cast<uint8_t>(depth);
  trimmed.count = static_cast<uint8_t>(current->count - drop);
  trimmed.partial = {};
  for (uint32_t i = 0; i < trimmed.count; ++i)
    trimmed.partial[i] = current->partial[drop + i];
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * found, ctx.arena().Words(1));
  const Op ops[2] = {Op::CompareSwap(node + kHeaderOffset, found, current->Pack(), trimmed.Pack()),
                     Op::CompareSwap(reverse, ctx.discard_word(), claim, parent.raw())};
  const Status status = ctx.Execute(node.node(), ops);
  if (!status.ok()) {
    (void)CompareSwapRetrying(ctx, reverse, claim, parent.raw());
    return status;
  }
  if (*found == current->Pack()) return Trim::kDone;
  *current = Header::Unpack(*found);  // a type switch, a freeze: look again
  return Trim::kHeaderChanged;
}

// Only a writer holding the rear word (kLocked) changes a reachable leaf's
// checksum, value or key (a new leaf is written before it is reachable; a
// delete or an out-of-place update only marks the rear word, and splits and
// merges move only the reverse pointer, which the checksum leaves out): a
// rear word without kLocked, or the caller's own hold `held`, means no
// writer is mid-write. Without a hold, damage is told from a torn READ
// under the rear lock (ReadLeafUnderLock).
Status RadixImpl::ReadLeaf(ContextImpl& ctx, RemoteAddress address, LeafImage* leaf, uint64_t held,
                           bool image_failed, lock::LockTurn* turn) {
  const auto verify = [&] { return leaf->Verify(shape_); };
  const auto quiet = [held](uint64_t word) { return (word & kLocked) == 0 || word == held; };
  const auto read_locked = [&]() -> StatusOr<index::LockedRead> {
    if (held != 0) return index::kUnderOwnHold();
    return ReadLeafUnderLock(ctx, address, leaf, turn);
  };
  const RemoteAddress rear = address + shape_.rear_offset();
  const auto holder = [](uint64_t word) { return HolderOf(word); };
  if (image_failed) {
    return index::RereadUntilVerified(
        ctx, {"leaf", address, leaf->bytes, shape_.bytes(), verify, rear, quiet, read_locked,
              holder, options_.lock_timeout});
  }
  return index::ReadVerified(ctx, "leaf", address, leaf->bytes, shape_.bytes(), verify, rear, quiet,
                             read_locked, holder, options_.lock_timeout);
}

// This compute node's turn at the rear word (`turn`, the caller's, when it
// has one without the word), then the rear lock's CAS with the leaf READ
// behind it in one batch (as LockLeaf's), then the release. A word kept for
// this turn by a local holder is held already (its image, or a READ).
// kBusy while another writer holds the word, or while an out-of-place
// update's replaced mark is on it (its CAS cannot take a marked word; a
// mark undone lets writers in again). A deleted leaf's mark is final and
// was written under the lock, after every write-back before it had
// landed: the READ behind the CAS that found it is as good as one under
// the lock.
StatusOr<index::LockedRead> RadixImpl::ReadLeafUnderLock(ContextImpl& ctx, RemoteAddress address,
                                                         LeafImage* leaf, lock::LockTurn* turn) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  DMIDX_ASSIGN_OR_RETURN(const uint64_t hold, NewHold(ctx));
  const RemoteAddress rear = address + shape_.rear_offset();
  const Op read = Op::Read(address, leaf->bytes, shape_.bytes());
  lock::LockTurn own;
  if (turn == nullptr) {
    DMIDX_RETURN_IF_ERROR(lock::LockTurn::Take(*leaf_queues_, ctx, rear, &read, ctx.Now(), &own));
    turn = &own;
    if (own.handed_over()) {
      Status status;
      if (!own.image_taken()) status = ctx.Execute(address.node(), {&read, 1});
      const Status released = own.Release(ctx);
      DMIDX_RETURN_IF_ERROR(status.ok() ? released : status);
      return index::LockedRead::kRead;
    }
  }
  const Op ops[2] = {Op::CompareSwap(rear, old, 0, hold), read};
  const Status status = ctx.Execute(address.node(), ops);
  if (!status.ok()) {
    // The CAS may have landed: the hold is this attempt's alone.
    (void)turn->Release(ctx, hold);
    return status;
  }
  if (*old == kDeletedLeaf) return index::LockedRead::kRead;
  if (*old != 0) return index::LockedRead::kBusy;
  turn->Took(hold);
  DMIDX_RETURN_IF_ERROR(turn->Release(ctx));
  return index::LockedRead::kRead;
}

StatusOr<Landing> RadixImpl::Descend(ContextImpl& ctx, std::string_view key, bool use_cache) {
  DMIDX_ASSIGN_OR_RETURN(uint8_t * buffer, ctx.arena().Bytes(kNodeBytes, 64));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
  const uint32_t key_bytes = shape_.key_bytes();
  for (index::Restarts restarts; restarts.NextAfterBackoff(ctx);) {
    Landing landing;
    Cursor& cursor = landing.cursor;
    bool have_cursor = false;
    uint8_t cached_type = 0;  // the cached image's type, when the node itself is read
    if (use_cache && cache_) {
      if (std::optional<RadixCache::Route> route = cache_->Find(key, ctx.cache_slot())) {
        ++ctx.counters().cache_hits;
        cursor.from_cache = true;
        cursor.cached_node = route->node;
        cursor.parent = route->node;
        if (route->index >= 0) {
          cursor.slot_address = route->node + kSlotsOffset + 8 * route->index;
          cursor.slot = route->slot;
          cursor.depth = route->branch + 1;
          landing.node.address = route->node;
          landing.node.header = route->header;  // as cached; no fresh image at hand
        } else {
          // The key's slot is not in the cached image: read the node itself
          // (its prefix matched through the cache key).
          cursor.slot = Slot::ToNode(0, route->header.type, route->node);
          cursor.depth = route->branch;
          cached_type = route->header.type;
          cursor.parent = RemoteAddress();
          cursor.from_cache = false;
        }
        have_cursor = true;
      } else {
        ++ctx.counters().cache_misses;
      }
    }
    if (!have_cursor) {
      const Op read = Op::Read(root_slot(), word, 8);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(root_slot().node(), {&read, 1}));
      cursor = Cursor{root_slot(), Slot(*word), descriptor_, 0, false, RemoteAddress()};
    }
    // Set when the cursor is the node itself, reached through the cache.
    bool cached_itself = have_cursor && cursor.slot_address.is_null();
    bool restart_needed = false;
    while (!restart_needed) {
      const Slot slot = cursor.slot;
      if (slot.empty()) {
        landing.kind = Landing::kEmptyRoot;
        return landing;
      }
      if (slot.frozen()) {  // a merge is removing the node holding it: look again
        if (cursor.from_cache || cached_itself || landing.holder.slot_address.is_null()) {
          // The node's cached image (or route) is stale: look afresh.
          if (cache_ && !landing.node.address.is_null()) cache_->Invalidate(landing.node.address);
          ++ctx.counters().cache_stale;
          use_cache = false;
        } else if (landing.node.bytes != nullptr) {
          DMIDX_RETURN_IF_ERROR(
              AwaitMerge(ctx, landing.node.address, landing.node.reverse().raw(), landing.holder));
        }
        restart_needed = true;
        continue;
      }
      if (slot.tombstone()) {
        landing.kind = Landing::kTombstone;
        return landing;
      }
      if (slot.leaf()) {
        landing.kind = Landing::kLeaf;
        return landing;
      }
      NodeImage& node = landing.node;
      node.bytes = buffer;
      DMIDX_ASSIGN_OR_RETURN(const bool fresh, ReadNode(ctx, &cursor, &node));
      if (!fresh) {
        Invalidate(ctx, cursor);
        use_cache = false;
        restart_needed = true;
        continue;
      }
      const Header& header = node.header;
      const uint32_t branch = header.branch();
      // Deleted (or frozen by a merge): from the cache, the entry is stale;
      // otherwise the parent is about to change, look again.
      // A header deeper than the bytes matched so far: a header split
      // trimmed it and the slot that led here is no longer its parent's.
      if (header.deleted() || header.type > kMaxType || branch >= key_bytes ||
          (!cached_itself && header.depth > cursor.depth) ||
          (cached_itself && branch != cursor.depth)) {
        if (cursor.from_cache || cached_itself) {
          Invalidate(ctx, cursor);
          use_cache = false;
        } else if (header.deleted()) {
          DMIDX_RETURN_IF_ERROR(AwaitMerge(ctx, node.address, node.reverse().raw(), cursor));
        }
        restart_needed = true;
        continue;
      }
      // The cached image of the node itself had fewer slots: a type change
      // (the entry is replaced just below).
      if (cached_itself && header.type != cached_type) ++ctx.counters().cache_stale;
      // Header bytes before cursor.depth were matched above this node: a
      // header split published its new parent and has not trimmed it yet
      // (help it), or a merge extended it (its reverse pointer names the
      // merged node's parent, not the slot this descent came through).
      // (A claim there instead: a split, trim or merge in flight, waited
      // for, and a dead one's ended for it, AwaitClaim, so that the next
      // descent can trim. A descent reads on from cursor.depth either way:
      // a live claim that outlasts lock_timeout only slows it.)
      if (!cached_itself && !cursor.from_cache && header.depth < cursor.depth) {
        if (node.reverse() == cursor.parent) {
          DMIDX_RETURN_IF_ERROR(HelpTrim(ctx, cursor, node, key));
        } else if (node.reverse().raw() & kClaimedBit) {
          const Status waited =
              AwaitClaim(ctx, node.address, node.reverse().raw(), cursor, /*node=*/true);
          if (!waited.ok() && !lock::IsLockTimeout(waited)) return waited;
        }
      }
      const uint32_t from = cached_itself ? branch : cursor.depth;
      for (uint32_t pos = from; pos < branch; ++pos) {
        if (static_cast<uint8_t>(key[pos]) != header.partial[pos - header.depth]) {
          landing.kind = Landing::kHeaderMismatch;
          landing.mismatch = pos;
          landing.holder = cursor;
          if (cached_itself) landing.holder.slot_address = RemoteAddress();
          return landing;
        }
      }
      if (cache_) cache_->Put(key.substr(0, branch), node.address, node.bytes, ctx.epoch());
      const int index = node.Find(static_cast<uint8_t>(key[branch]));
      landing.holder = cursor;
      if (cached_itself) landing.holder.slot_address = RemoteAddress();
      if (index < 0) {
        landing.kind = Landing::kNoSlot;
        return landing;
      }
      cursor = Cursor{node.address + kSlotsOffset + 8 * static_cast<uint32_t>(index),
                      node.slot(static_cast<uint32_t>(index)),
                      node.address,
                      branch + 1,
                      false,
                      RemoteAddress()};
      cached_itself = false;
    }
  }
  return index::GaveUp("descent", core_.label());
}

Status RadixImpl::LookupKey(ContextImpl& ctx, std::string_view key, uint64_t* value) {
  return EachDescent(
      ctx, key, "lookup", [&](const Landing& landing, LeafImage& leaf) -> std::optional<Status> {
        if (landing.kind != Landing::kLeaf) return NotInTree();
        const Cursor& cursor = landing.cursor;
        DMIDX_RETURN_IF_ERROR(ReadLeaf(ctx, cursor.slot.child(), &leaf));
        const uint64_t rear = leaf.rear(shape_);
        if (cursor.from_cache && (leaf.reverse() != cursor.parent || (rear & kObsolete))) {
          Invalidate(ctx, cursor);
          return std::nullopt;
        }
        // Deleted: gone. Replaced out of place: the slot that led here
        // (read in this descent) held the old leaf, so the update had not
        // taken effect then, and the value read is the key's as it was
        // then or later (an in-place write lands before the mark, and
        // none after): no wait for the update, or for its dead owner.
        if ((rear & kObsolete) && !(rear & kReplaced)) return NotInTree();
        if (leaf.key(shape_) != key) return NotInTree();
        *value = leaf.value();
        return Status::Ok();
      });
}

Status RadixImpl::WriteKey(ContextImpl& ctx, std::string_view key, uint64_t value, Change change) {
  return EachDescent(ctx, key, "write",
                     [&](const Landing& landing, LeafImage& leaf) -> std::optional<Status> {
                       StatusOr<Outcome> outcome = WriteAt(ctx, landing, key, value, change, &leaf);
                       if (!outcome.ok()) return outcome.status();
                       if (*outcome == Outcome::kDone) return Status::Ok();
                       return std::nullopt;
                     });
}

// One attempt of a write where the descent landed: kDone, kRestart, or
// NotFound (an update of an absent key).
StatusOr<RadixImpl::Outcome> RadixImpl::WriteAt(ContextImpl& ctx, const Landing& landing,
                                                std::string_view key, uint64_t value, Change change,
                                                LeafImage* leaf) {
  const bool update = change == Change::kUpdate;
  switch (landing.kind) {
    case Landing::kEmptyRoot:
    case Landing::kTombstone:
      if (update) return NotInTree();
      return InsertIntoSlot(ctx, landing, key, value);
    case Landing::kNoSlot:
      if (update) return NotInTree();
      return InsertIntoNode(ctx, landing, key, value);
    case Landing::kHeaderMismatch:
      if (update) return NotInTree();
      return SplitHeader(ctx, landing, key, value);
    case Landing::kLeaf:
      break;
  }
  DMIDX_ASSIGN_OR_RETURN(const Outcome outcome,
                         options_.in_place_leaves
                             ? UpdateInPlace(ctx, landing.cursor, key, value, leaf)
                             : UpdateOutOfPlace(ctx, landing, key, value, leaf));
  if (outcome != Outcome::kAbsent && outcome != Outcome::kSplit) return outcome;
  if (update) return NotInTree();
  // A deleted leaf's slot takes the new leaf; another key's leaf splits.
  return outcome == Outcome::kAbsent ? InsertIntoSlot(ctx, landing, key, value)
                                     : SplitLeaf(ctx, landing, *leaf, key, value);
}

// Takes this compute node's turn at the leaf's rear word, then the rear
// lock: CAS of the rear word with the leaf READ in the same batch (the READ
// follows the CAS on the connection, so once the CAS won it sees the leaf
// as it stays until the release), retried by lock::LockRetry's rule while
// another writer holds it, up to lock_timeout. Held by another, the READ
// may be torn; it is read until it verifies, since its key tells whether to
// wait at all. A rear word handed over through the turn is held already,
// with its image: no round trip. Every error return leaves the word as it
// found it: a lock batch that failed may have landed its CAS, and a word
// this context holds is released before an error goes up.
StatusOr<RadixImpl::LeafLock> RadixImpl::LockLeaf(ContextImpl& ctx, const Cursor& cursor,
                                                  std::string_view key, LeafImage* leaf,
                                                  lock::LockTurn* turn) {
  const RemoteAddress address = cursor.slot.child();
  const RemoteAddress rear = address + shape_.rear_offset();
  // Scratch and hold first: nothing may fail once a handed word is taken
  // below. One hold for every attempt: at most one of them takes the word.
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  DMIDX_ASSIGN_OR_RETURN(const uint64_t hold, NewHold(ctx));
  const Op read = Op::Read(address, leaf->bytes, shape_.bytes());
  const std::chrono::nanoseconds start = ctx.Now();
  // One deadline for the queue and the CAS, as HOCL's: local waiters
  // behind a dead holder find it passed when their turn comes, instead of
  // each waiting lock_timeout in turn (the queue is this leaf's own, so
  // only its waiters do).
  const std::chrono::nanoseconds deadline = lock::LockDeadline(ctx, start, options_.lock_timeout);
  DMIDX_RETURN_IF_ERROR(lock::LockTurn::Take(*leaf_queues_, ctx, rear, &read, start, turn));
  bool handed = turn->handed_over();
  // The wait is recorded on every exit.
  lock::LockRetry retry(ctx, turn, deadline);
  struct RecordWait {
    ContextImpl& ctx;
    std::chrono::nanoseconds start, queued;
    ~RecordWait() { ctx.RecordLockWait(ctx.Now() - start, queued); }
  } record{ctx, start, turn->queued()};
  for (;;) {
    if (handed) {
      *old = 0;  // as if the CAS won, with the READ's image
      // The word handed over holds the chain's hold (its first holder's):
      // quiet for the read's damage check, or a damaged leaf is never told
      // apart from a torn READ.
      if (!turn->image_taken()) {
        DMIDX_RETURN_IF_ERROR(ReadLeaf(ctx, address, leaf, turn->hold()));
      }
    } else {
      const Op ops[2] = {Op::CompareSwap(rear, old, 0, hold), read};
      const Status status = ctx.Execute(address.node(), ops);
      if (!status.ok()) {
        // The CAS may have landed: take the word back if it is this
        // attempt's (the hold is its alone: a hold an earlier release of
        // this compute node left behind stays, with its record).
        (void)turn->Release(ctx, hold);
        return status;
      }
      if (*old == 0) turn->Took(hold);
    }
    // A handed-over image is the leaf as the last holder wrote it back, but
    // for its reverse pointer, which a split or merge may have moved since
    // (docs/radix.md): it cannot vouch for a route from the cache.
    const bool image_handed = handed;
    handed = false;
    const bool held = *old == 0;
    if (!held && (*old & kObsolete)) {
      if (cursor.from_cache) {
        Invalidate(ctx, cursor);
        return LeafLock::kRestart;
      }
      if (!(*old & kReplaced)) return LeafLock::kDeleted;
      DMIDX_RETURN_IF_ERROR(AwaitReplaced(ctx, cursor, *old));
      return LeafLock::kRestart;
    }
    if (!leaf->Verify(shape_)) {
      // Not held: damage is confirmed under the rear lock, taken through
      // this turn.
      const Status status = ReadLeaf(ctx, address, leaf, held ? turn->hold() : 0,
                                     /*image_failed=*/true, turn);
      if (!status.ok()) {
        if (held) (void)turn->Release(ctx);
        return status;
      }
    }
    if (leaf->key(shape_) != key) {
      // Waited for: a release lost with a failed unsignaled batch would
      // leave the key locked for good.
      if (held) DMIDX_RETURN_IF_ERROR(turn->Release(ctx));
      if (cursor.from_cache && (image_handed || leaf->reverse() != cursor.parent)) {
        Invalidate(ctx, cursor);
        return LeafLock::kRestart;
      }
      return LeafLock::kOtherKey;
    }
    if (held) return LeafLock::kHeld;
    const uint64_t found = *old;
    DMIDX_ASSIGN_OR_RETURN(const bool again, retry.WaitHeld(rear, found, HolderOf(found)));
    if (!again) return LeafLockTimeout(address, HolderOf(found));
  }
}

// Lock with the leaf READ, then the write-back of checksum and value,
// after its redo record (lock/redo_log.h), with the record's clear, and the
// release: the release is a WRITE in the same batch (rear_embedded_lock)
// or waits for the rest. A batch that fails is finished by
// FinishWriteBack, so the key is never left locked by a live compute node.
StatusOr<RadixImpl::Outcome> RadixImpl::UpdateInPlace(ContextImpl& ctx, const Cursor& cursor,
                                                      std::string_view key, uint64_t value,
                                                      LeafImage* leaf) {
  lock::LockTurn turn;
  DMIDX_ASSIGN_OR_RETURN(const LeafLock lock, LockLeaf(ctx, cursor, key, leaf, &turn));
  switch (lock) {
    case LeafLock::kRestart:
      return Outcome::kRestart;
    case LeafLock::kDeleted:
      return Outcome::kAbsent;
    case LeafLock::kOtherKey:
      return Outcome::kSplit;
    case LeafLock::kHeld:
      break;
  }
  const RemoteAddress address = cursor.slot.child();
  const RemoteAddress rear = address + shape_.rear_offset();
  std::memcpy(leaf->bytes + kLeafValueOffset, &value, 8);
  const uint64_t checksum = LeafChecksum(shape_, leaf->bytes);
  std::memcpy(leaf->bytes + kLeafChecksumOffset, &checksum, 8);
  const Op write = Op::Write(address + kLeafChecksumOffset, leaf->bytes + kLeafChecksumOffset, 16);
  // [record][write], with the record's clear when the word is kept for
  // the next local holder (lock/redo_log.h: its hold goes on), then the
  // release: storage only, the ops are copied in.
  union OpStorage {
    OpStorage() {}
    Op ops[kInPlaceBatchOps];
  } storage;
  Op* const batch = storage.ops;
  const uint64_t hold = turn.hold();
  // The record is cleared when the word goes on held by its hold: kept
  // for the next local holder, or handed to this one (a chain's hold is
  // its first holder's acquisition's, whose wrap clears only its own
  // slots: lock/redo_log.h, Wrap).
  const bool handed = turn.handed_over();
  const bool keep = turn.KeepForNext(options_.max_handovers);
  const bool clear = keep || handed;
  // The record's head lives in the arena until the batch has ended.
  runtime::ScratchArena::Scope scope(ctx.arena());
  const StatusOr<uint32_t> wrapped =
      redo_->Wrap(ctx, rear, hold, {&write, 1}, 0, kInPlaceBatchOps - 1, batch, clear);
  if (!wrapped.ok()) {
    (void)turn.Release(ctx);
    return wrapped.status();
  }
  const std::span<const Op> write_back(batch, *wrapped);
  const Op* const cleared = clear ? &write_back.back() : nullptr;
  const Op release = Op::Write(rear, ctx.zero_word(), 8);
  Status status;
  if (keep) {
    // Keep the rear word for the next local holder: once the write-back has
    // landed, the image is the leaf as it stands.
    status = ctx.Execute(address.node(), write_back);
    if (status.ok()) {
      const lock::ObjectImage image{address, leaf->bytes, shape_.bytes()};
      turn.Leave(&image);
      return Outcome::kDone;
    }
    turn.Dropped();  // FinishWriteBack releases it
  } else if (options_.rear_embedded_lock) {
    batch[write_back.size()] = release;
    status = ctx.Execute(address.node(), std::span<const Op>(batch, write_back.size() + 1));
  } else {
    status = ctx.Execute(address.node(), write_back);
    if (status.ok()) status = ctx.Execute(address.node(), {&release, 1});
  }
  if (!status.ok()) {
    DMIDX_RETURN_IF_ERROR(FinishWriteBack(ctx, address, hold, write_back, cleared, status));
  }
  return Outcome::kDone;
}

Status RadixImpl::FinishWriteBack(ContextImpl& ctx, RemoteAddress leaf, uint64_t hold,
                                  std::span<const Op> write_back, const Op* clear, Status failure) {
  // With the turn held, nobody else of this compute node takes the word,
  // and no other node can while it is ours.
  const RemoteAddress rear = leaf + shape_.rear_offset();
  union OpStorage {
    OpStorage() {}
    Op ops[kInPlaceBatchOps];
  } storage;
  std::copy(write_back.begin(), write_back.end(), storage.ops);
  storage.ops[write_back.size()] = Op::Write(rear, ctx.zero_word(), 8);
  const Status status =
      lock::PostAgainHeld(ctx, rear, hold, std::span<const Op>(storage.ops, write_back.size() + 1),
                          {}, /*with_release=*/true, kBatchRetries, failure);
  // Never landed: the word is freed anyway (by CAS from the hold), so no
  // live compute node keeps the key locked; the leaf's checksum tells a
  // reader whether the WRITE tore it.
  // If that fails too, the record stays whole for a recovery: the slot
  // keeps it (RedoLog::KeepRecord).
  if (!status.ok()) (void)redo_->ReleaseHold(ctx, rear, hold, lock::kReleasePosts, clear);
  return status;
}

// Out of place: WRITE a new leaf, and in one batch on the old leaf claim
// its reverse pointer (this context's claim: no split or merge can move it
// now, so its slot stays where it is) and CAS its rear word from 0 to this
// context's replaced mark (writers and readers then wait for the slot);
// then swing the slot to the new leaf. A CAS that lost gives back what the
// other took: a replaced mark undone is invisible (whoever saw it waits
// and reads again). Claim and mark name this context, so after a batch
// that failed (whatever of it landed) each is given back by a CAS that
// can only undo this context's own.
StatusOr<RadixImpl::Outcome> RadixImpl::UpdateOutOfPlace(ContextImpl& ctx, const Landing& landing,
                                                         std::string_view key, uint64_t value,
                                                         LeafImage* leaf) {
  const Cursor& cursor = landing.cursor;
  const RemoteAddress old_leaf = cursor.slot.child();
  const RemoteAddress reverse = old_leaf + kLeafReverseOffset;
  const RemoteAddress rear = old_leaf + shape_.rear_offset();
  DMIDX_ASSIGN_OR_RETURN(uint8_t * image, ctx.arena().Bytes(shape_.bytes(), 64));
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(2));
  const uint64_t parent = cursor.parent.raw();
  const uint64_t claim = Claim(ctx);
  const uint64_t replaced_mark = Replaced(ctx);
  // No local queue: alone.
  lock::LockRetry retry(ctx, nullptr, lock::LockDeadline(ctx, ctx.Now(), options_.lock_timeout));
  for (;;) {
    DMIDX_RETURN_IF_ERROR(ReadLeaf(ctx, old_leaf, leaf));
    const uint64_t rear_word = leaf->rear(shape_);
    if (cursor.from_cache && (leaf->reverse() != cursor.parent || (rear_word & kObsolete))) {
      Invalidate(ctx, cursor);
      return Outcome::kRestart;
    }
    if (rear_word & kObsolete) {
      if (!(rear_word & kReplaced)) return Outcome::kAbsent;
      DMIDX_RETURN_IF_ERROR(AwaitReplaced(ctx, cursor, rear_word));
      return Outcome::kRestart;
    }
    if (leaf->key(shape_) != key) return Outcome::kSplit;
    if (rear_word == 0) {
      DMIDX_ASSIGN_OR_RETURN(const Op write,
                             NewLeaf(ctx, key, value, cursor.parent, cursor.parent.node(), image));
      // Gives back what this attempt took (each undo a no-op where its
      // CAS did not land) and the new leaf, never reachable.
      auto give_back = [&](bool claimed, bool replaced) {
        if (claimed) (void)CompareSwapRetrying(ctx, reverse, claim, parent);
        if (replaced) (void)CompareSwapRetrying(ctx, rear, replaced_mark, 0);
        (void)ctx.allocator().Free(ctx, write.remote, shape_.bytes());
      };
      std::array<Op, 3> ops = {write, Op::CompareSwap(reverse, &old[0], parent, claim),
                               Op::CompareSwap(rear, &old[1], 0, replaced_mark)};
      const Status status = ctx.ExecuteAll(ops);
      if (!status.ok()) {
        give_back(true, true);
        return status;
      }
      const bool claimed = old[0] == parent;
      const bool replaced = old[1] == 0;
      if (claimed && replaced) {
        const Slot desired = Slot::ToLeaf(cursor.slot.partial(), write.remote);
        const StatusOr<uint64_t> found =
            CompareSwap(ctx, cursor.slot_address, cursor.slot.word(), desired.word());
        if (found.ok() && *found == cursor.slot.word()) {
          RetireLeaf(ctx, old_leaf);
          return Outcome::kDone;
        }
        if (!found.ok()) {
          // Landed or not: the slot says. It leads to the claimed old leaf
          // until this update moves it (nothing else can).
          const StatusOr<uint64_t> now = ReadWordRetrying(ctx, cursor.slot_address);
          if (now.ok() && *now == desired.word()) {
            RetireLeaf(ctx, old_leaf);
            return Outcome::kDone;
          }
          if (!now.ok() || Slot(*now).child() != old_leaf) return found.status();
          give_back(true, true);
          return found.status();
        }
        // The slot the route named does not lead to the leaf (a stale
        // cached image of a parent the leaf's reverse pointer names for a
        // moment, while a merge holds it): look again.
        give_back(true, true);
        ++ctx.counters().cas_retries;
        return Outcome::kRestart;
      }
      ++ctx.counters().cas_retries;
      give_back(claimed, replaced);
      // Lost to a change moving the leaf (waited for while it holds the
      // leaf claimed), or to a delete: look again.
      if (!claimed) {
        DMIDX_RETURN_IF_ERROR(AwaitClaim(ctx, old_leaf, old[0], cursor, /*node=*/false));
      }
      if (!claimed || (old[1] & kObsolete)) return Outcome::kRestart;
    }
    // An in-place writer of another compute node holds the leaf (or this
    // attempt's claim or mark lost a race: the word may read free).
    DMIDX_ASSIGN_OR_RETURN(const bool again, retry.WaitHeld(rear, rear_word, HolderOf(rear_word)));
    if (!again) return LeafLockTimeout(old_leaf, HolderOf(rear_word));
  }
}

Status RadixImpl::AwaitOwner(ContextImpl& ctx, RemoteAddress watched, uint64_t found,
                             const Cursor& via, uint32_t owner, const char* kind,
                             RemoteAddress object, const char* what, FunctionRef<Status()> end) {
  lock::LockRetry retry(ctx, nullptr, lock::LockDeadline(ctx, ctx.Now(), options_.lock_timeout));
  // The change ends when `watched` changes or its slot swing lands: the
  // slot shows it, unless the node holding it was merged away (a dead
  // node's slots stay as they were).
  const bool in_node = via.parent != descriptor_;
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * words, ctx.arena().Words(3));
  Op reads[3] = {Op::Read(watched, &words[0], 8), Op::Read(via.slot_address, &words[1], 8),
                 Op::Read(via.parent + kHeaderOffset, &words[2], 8)};
  auto in_flight = [&]() -> StatusOr<bool> {
    DMIDX_RETURN_IF_ERROR(ctx.ExecuteAll(std::span<Op>(reads, in_node ? 3 : 2)));
    if (words[0] != found || words[1] != via.slot.word()) return false;
    return !in_node || !Header::Unpack(words[2]).deleted();
  };
  DMIDX_ASSIGN_OR_RETURN(const bool again, retry.WaitOwned(owner, in_flight, end));
  if (again) return Status::Ok();
  return lock::LockTimeout(std::string(kind) + " " + object.ToString() + " of " + core_.label() +
                           " stayed " + what + " by compute node " + std::to_string(owner) +
                           " for over " + std::to_string(options_.lock_timeout.count()) + " ms");
}

Status RadixImpl::AwaitReplaced(ContextImpl& ctx, const Cursor& cursor, uint64_t rear) {
  const RemoteAddress leaf = cursor.slot.child();
  // (A mark that comes and goes is a live update's whose claim lost.)
  return AwaitOwner(ctx, leaf + shape_.rear_offset(), rear, cursor, OwnerOf(rear), "leaf", leaf,
                    "replaced", [&]() -> Status {
                      // Still in the slot: nothing moved the old leaf (the
                      // claim holds it in place), and its new leaf was never
                      // reachable.
                      DMIDX_ASSIGN_OR_RETURN(
                          const uint64_t mark,
                          CompareSwapRetrying(ctx, leaf + shape_.rear_offset(), rear, 0));
                      if (mark == rear) ++ctx.counters().dead_holds_freed;
                      return CompareSwapRetrying(ctx, leaf + kLeafReverseOffset,
                                                 ClaimOfReplaced(rear), cursor.parent.raw())
                          .status();
                    });
}

Status RadixImpl::AwaitClaim(ContextImpl& ctx, RemoteAddress object, uint64_t claim,
                             const Cursor& via, bool node) {
  if (via.from_cache || via.slot_address.is_null() || claim == 0 || claim == descriptor_.raw()) {
    return Status::Ok();
  }
  uint64_t owner_word = claim;
  if (!(claim & kClaimedBit)) {
    // Moved to a split's new node: its maker, if it names one.
    DMIDX_ASSIGN_OR_RETURN(owner_word,
                           ReadWordRetrying(ctx, RemoteAddress::FromRaw(claim) + kMakerOffset));
    if (!(owner_word & kClaimedBit)) return Status::Ok();
  }
  static_assert(kLeafReverseOffset == kReverseOffset);
  return AwaitOwner(ctx, object + kReverseOffset, claim, via, OwnerOf(owner_word),
                    node ? "node" : "leaf", object, "claimed (or moved)", [&]() -> Status {
                      // A node's claim may be a merge's, its freeze landed whole, in part
                      // or not at all (or a trim's): undone whole (UndoMerge gives back
                      // what holds the claim's values only, then the claim).
                      if (node && (claim & kClaimedBit))
                        return UndoMerge(ctx, object, claim, via.parent);
                      DMIDX_ASSIGN_OR_RETURN(const uint64_t found,
                                             CompareSwapRetrying(ctx, object + kReverseOffset,
                                                                 claim, via.parent.raw()));
                      if (found == claim) ++ctx.counters().dead_holds_freed;
                      return Status::Ok();
                    });
}

Status RadixImpl::AwaitMerge(ContextImpl& ctx, RemoteAddress node, uint64_t claim,
                             const Cursor& via) {
  if (via.from_cache || via.slot_address.is_null() || !(claim & kClaimedBit)) {
    return Status::Ok();  // look afresh
  }
  return AwaitOwner(ctx, node + kReverseOffset, claim, via, OwnerOf(claim), "node", node, "frozen",
                    [&] { return UndoMerge(ctx, node, claim, via.parent); });
}

Status RadixImpl::AwaitKey(ContextImpl& ctx, std::string_view key) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  return Descend(ctx, key, /*use_cache=*/false).status();
}

Status RadixImpl::LeafLockTimeout(RemoteAddress leaf, std::optional<uint32_t> holder) const {
  return lock::LockTimeout("leaf " + leaf.ToString() + " of " + core_.label() + " stayed locked" +
                           (holder ? " by compute node " + std::to_string(*holder) : "") +
                           " for over " + std::to_string(options_.lock_timeout.count()) + " ms");
}

StatusOr<uint64_t> RadixImpl::CompareSwap(ContextImpl& ctx, RemoteAddress word, uint64_t expected,
                                          uint64_t desired) {
  runtime::ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * old, ctx.arena().Words(1));
  const Op cas = Op::CompareSwap(word, old, expected, desired);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(word.node(), {&cas, 1}));
  return *old;
}

StatusOr<uint64_t> RadixImpl::CompareSwapRetrying(ContextImpl& ctx, RemoteAddress word,
                                                  uint64_t expected, uint64_t desired) {
  StatusOr<uint64_t> found = CompareSwap(ctx, word, expected, desired);
  for (int attempt = 0; !found.ok() && attempt < kBatchRetries; ++attempt) {
    found = CompareSwap(ctx, word, expected, desired);
  }
  return found;
}

Status RadixImpl::ReadWordsRetrying(ContextImpl& ctx, RemoteAddress at, uint32_t count,
                                    uint64_t* out) {
  Status status = ctx.ReadWords(at, count, out);
  for (int attempt = 0; !status.ok() && attempt < kBatchRetries; ++attempt)
    status = ctx.ReadWords(at, count, out);
  return status;
}

}  // namespace radix

template class index::IndexHandle<Radix, radix::RadixImpl>;

}  // namespace dmidx
