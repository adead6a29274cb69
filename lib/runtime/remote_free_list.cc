#include "lib/runtime/remote_free_list.h"

#include <algorithm>
#include <string>

#include "lib/fabric/op.h"
#include "lib/runtime/arena.h"
#include "lib/runtime/context.h"
#include "lib/runtime/publish.h"

namespace dmidx::runtime {

using fabric::Op;
using fabric::RemoteAddress;

namespace {

constexpr uint64_t kOffsetMask = (uint64_t{1} << kHeadOffsetBits) - 1;
constexpr uint32_t kTagMask = (uint32_t{1} << kHeadTagBits) - 1;
constexpr uint64_t kHeadWordOffset = 8;  // within a directory entry

std::string ListName(uint16_t node, uint64_t key) {
  return std::string(IsDrainingList(key) ? "the draining list of " : "the free list of ") +
         std::to_string(ListObjectSize(key)) + "-byte objects of mn" + std::to_string(node);
}

// Whether a header READ holds a bundle of `size`-byte objects. A header
// read while its bundle was popped and reused may hold anything; its CAS
// then fails, so this only keeps such words from being looked at further.
bool PlausibleHeader(const uint64_t* header, uint64_t size) {
  const uint32_t count = static_cast<uint32_t>(header[1] & 0xff);
  if ((header[1] >> 8) != size || count == 0 || count > RemoteFreeLists::BundleCapacity(size)) {
    return false;
  }
  const auto plausible = [](uint64_t offset) {
    return offset % kListObjectAlignment == 0 && offset <= RemoteAddress::kMaxOffset;
  };
  if (!plausible(header[0])) return false;
  for (uint32_t i = 0; i + 1 < count; ++i) {
    if (header[kBundleFixedWords + i] == 0 || !plausible(header[kBundleFixedWords + i])) {
      return false;
    }
  }
  return true;
}

}  // namespace

ListHead ListHead::Of(uint64_t word) {
  return {(word & kOffsetMask) * kListObjectAlignment,
          static_cast<uint32_t>(word >> kHeadOffsetBits)};
}

uint64_t ListHead::word() const {
  return uint64_t{tag} << kHeadOffsetBits | offset / kListObjectAlignment;
}

ListHead ListHead::Next(uint64_t next_offset) const {
  return {next_offset, (tag + 1) & kTagMask};
}

RemoteFreeLists::RemoteFreeLists(std::vector<memnode::MemoryNodeControl*> nodes, PageSource pages)
    : nodes_(std::move(nodes)), pages_(std::move(pages)), directories_(nodes_.size()) {}

bool RemoteFreeLists::Shareable(RemoteAddress object, uint64_t size) {
  return !object.is_null() && object.region() == fabric::Region::kPool &&
         object.offset() % kListObjectAlignment == 0 && ListObjectSize(size) >= kMinListObjectBytes;
}

uint32_t RemoteFreeLists::BundleCapacity(uint64_t size) {
  const uint64_t words = ListObjectSize(size) / 8;
  if (words < kBundleFixedWords) return 1;
  return static_cast<uint32_t>(
      std::min<uint64_t>(kMaxBundleObjects, words - kBundleFixedWords + 1));
}

StatusOr<RemoteAddress> RemoteFreeLists::MakeDirectory(ContextImpl& ctx,
                                                       RemoteAddress catalog_word) {
  return MakeAndPublish(
      ctx, catalog_word, kDirectoryPageBytes, kDirectoryMagic,
      [&] { return pages_.take(catalog_word.node()); },
      [&](RemoteAddress page) { pages_.give_back(page); });
}

Status RemoteFreeLists::LoadDirectory(ContextImpl& ctx, uint16_t node) {
  DMIDX_ASSIGN_OR_RETURN(const RemoteAddress catalog_word,
                         nodes_[node]->CatalogWord(kFreeListCatalogName, /*create=*/true));
  DMIDX_ASSIGN_OR_RETURN(const uint64_t published, ctx.ReadWord(catalog_word));
  RemoteAddress directory = RemoteAddress::FromRaw(published);
  if (directory.is_null()) {
    DMIDX_ASSIGN_OR_RETURN(directory, MakeDirectory(ctx, catalog_word));
  }
  // Another coroutine of this thread may have loaded it meanwhile; both
  // found the one published directory.
  return ReadDirectory(ctx, node, directory);
}

Status RemoteFreeLists::ReadDirectory(ContextImpl& ctx, uint16_t node, RemoteAddress directory) {
  std::vector<uint64_t> words(kDirectoryBytes / 8);
  DMIDX_RETURN_IF_ERROR(ctx.ReadWords(directory, kDirectoryBytes / 8, words.data()));
  if (words[0] != kDirectoryMagic) {
    return Status::DataLoss("the free-list directory " + directory.ToString() + " of mn" +
                            std::to_string(node) + " does not start with its magic word");
  }
  Directory& loaded = directories_[node];
  loaded.sizes.resize(kDirectoryEntries);
  // A size word, once set, never changes: a size seen stays.
  uint64_t digest = 0;
  for (uint32_t entry = 1; entry < kDirectoryEntries; ++entry) {
    if (loaded.sizes[entry] == 0) loaded.sizes[entry] = words[2 * entry];
    digest = (digest ^ words[2 * entry + 1]) * 0x100000001b3ULL;  // FNV-1a's prime, by word
  }
  loaded.heads_digest = digest | 1;  // never 0, the value before a read
  loaded.address = directory;
  return Status::Ok();
}

StatusOr<RemoteAddress> RemoteFreeLists::DrainingTable(ContextImpl& ctx, uint16_t node) {
  if (directories_[node].address.is_null()) DMIDX_RETURN_IF_ERROR(LoadDirectory(ctx, node));
  return directories_[node].address + kDirectoryBytes;
}

StatusOr<std::vector<uint64_t>> RemoteFreeLists::Sizes(ContextImpl& ctx, uint16_t node) {
  const RemoteAddress known = directories_[node].address;
  DMIDX_RETURN_IF_ERROR(known.is_null() ? LoadDirectory(ctx, node)
                                        : ReadDirectory(ctx, node, known));
  std::vector<uint64_t> sizes;
  for (uint64_t size : directories_[node].sizes) {
    if (size != 0) sizes.push_back(size);
  }
  return sizes;
}

StatusOr<RemoteAddress> RemoteFreeLists::Head(ContextImpl& ctx, uint16_t node, uint64_t size,
                                              bool create) {
  const auto key = std::make_pair(node, size);
  const auto entry_head = [&](uint32_t entry) {
    return directories_[node].address + uint64_t{entry} * kDirectoryEntryBytes + kHeadWordOffset;
  };
  if (auto known = entries_.find(key); known != entries_.end()) return entry_head(known->second);
  if (directories_[node].address.is_null()) DMIDX_RETURN_IF_ERROR(LoadDirectory(ctx, node));
  // The first entry holding `size`, claiming the first free one on the way
  // (see the top of remote_free_list.h). Re-read from directories_ after
  // every round trip: other coroutines of this thread update it too.
  for (uint32_t entry = 1; entry < kDirectoryEntries; ++entry) {
    uint64_t seen = directories_[node].sizes[entry];
    if (seen == 0 && !create) {
      // Claimed since this allocator read it? (Entries are claimed in
      // order, so the first unclaimed one it knows is the one to check.)
      ScratchArena::Scope scope(ctx.arena());
      DMIDX_ASSIGN_OR_RETURN(uint64_t * word, ctx.arena().Words(1));
      const Op read = Op::Read(directories_[node].address + entry * kDirectoryEntryBytes, word, 8);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&read, 1}));
      if (*word == 0) return RemoteAddress();
      seen = directories_[node].sizes[entry] = *word;
    }
    if (seen == 0) {
      ScratchArena::Scope scope(ctx.arena());
      DMIDX_ASSIGN_OR_RETURN(uint64_t * found, ctx.arena().Words(1));
      const RemoteAddress size_word = directories_[node].address + entry * kDirectoryEntryBytes;
      const Op claim = Op::CompareSwap(size_word, found, 0, size);
      DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&claim, 1}));
      seen = *found == 0 ? size : *found;
      directories_[node].sizes[entry] = seen;
    }
    if (seen == size) {
      entries_[key] = entry;
      return entry_head(entry);
    }
  }
  return RemoteAddress();
}

StatusOr<RemoteFreeLists::Attempt> RemoteFreeLists::TryPop(ContextImpl& ctx,
                                                           RemoteAddress head_word, uint64_t size,
                                                           ListHead& head,
                                                           std::chrono::nanoseconds& seen_at,
                                                           std::vector<RemoteAddress>& out) {
  const uint16_t node = head_word.node();
  const uint32_t capacity = BundleCapacity(size);
  ScratchArena::Scope scope(ctx.arena());
  DMIDX_ASSIGN_OR_RETURN(uint64_t * header, ctx.arena().Words(kBundleFixedWords + capacity));
  uint64_t* found = header + kBundleFixedWords + capacity - 1;
  const Op read = Op::Read(RemoteAddress::Pool(node, head.offset), header,
                           8 * (kBundleFixedWords + capacity - 1));
  DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&read, 1}));
  // An implausible header, or a head seen too long ago for its tag to
  // vouch for it: read the head again.
  if (!PlausibleHeader(header, size) || ctx.Now() - seen_at > kMaxPopWindow) {
    return Attempt::kReread;
  }
  const ListHead next = head.Next(header[0]);
  // What a failed CAS finds was there after this time (conservative for
  // the window of the next attempt).
  const std::chrono::nanoseconds posted_at = ctx.Now();
  const Op take = Op::CompareSwap(head_word, found, head.word(), next.word());
  DMIDX_RETURN_IF_ERROR(ctx.Execute(node, {&take, 1}));
  if (*found != head.word()) {
    head = ListHead::Of(*found);
    seen_at = posted_at;
    return head.empty() ? Attempt::kEmpty : Attempt::kRetry;
  }
  const uint32_t count = static_cast<uint32_t>(header[1] & 0xff);
  out.push_back(RemoteAddress::Pool(node, head.offset));
  for (uint32_t i = 0; i + 1 < count; ++i)
    out.push_back(RemoteAddress::Pool(node, header[kBundleFixedWords + i]));
  head = next;
  return Attempt::kTaken;
}

Status RemoteFreeLists::Pop(ContextImpl& ctx, uint16_t node, uint64_t size,
                            std::vector<RemoteAddress>& out) {
  if (ListObjectSize(size) < kMinListObjectBytes) return Status::Ok();
  // A second or draining list only a push makes (remote_allocator.h): a
  // pop does not claim its entry (directory entries are few), and finds it
  // once some node claimed it.
  DMIDX_ASSIGN_OR_RETURN(
      const RemoteAddress head_word,
      Head(ctx, node, size, /*create=*/(size & (kAltListBit | kDrainingListBit)) == 0));
  if (head_word.is_null()) return Status::Ok();
  const auto key = std::make_pair(node, size);
  // A head read is what was there after the READ was posted.
  std::chrono::nanoseconds seen_at = ctx.Now();
  DMIDX_ASSIGN_OR_RETURN(uint64_t word, ctx.ReadWord(head_word));
  ListHead head = ListHead::Of(word);
  for (uint32_t attempt = 0; attempt < kMaxPopAttempts; ++attempt) {
    if (head.empty()) {
      guesses_[key] = head.word();
      return Status::Ok();
    }
    DMIDX_ASSIGN_OR_RETURN(const Attempt result, TryPop(ctx, head_word, size, head, seen_at, out));
    guesses_[key] = head.word();
    if (result == Attempt::kTaken || result == Attempt::kEmpty) return Status::Ok();
    ctx.Backoff(attempt);
    // After a failed CAS `head` is what it found; after an implausible
    // header or a stale head, the head is read again.
    if (result == Attempt::kReread) {
      seen_at = ctx.Now();
      DMIDX_ASSIGN_OR_RETURN(word, ctx.ReadWord(head_word));
      head = ListHead::Of(word);
    }
  }
  return Status::Aborted(ListName(node, size) + " stayed contended for " +
                         std::to_string(kMaxPopAttempts) + " pops");
}

std::pair<RemoteFreeLists::PushOutcome, Status> RemoteFreeLists::Push(
    ContextImpl& ctx, uint16_t node, uint64_t size, std::span<const RemoteAddress> objects,
    uint32_t attempts) {
  const uint32_t capacity = BundleCapacity(size);
  if (objects.empty() || objects.size() > capacity || ListObjectSize(size) < kMinListObjectBytes) {
    return {PushOutcome::kKept,
            Status::InvalidArgument("a bundle of " + std::to_string(objects.size()) +
                                    " objects for " + ListName(node, size))};
  }
  for (RemoteAddress object : objects) {
    if (object.node() != node || !Shareable(object, size)) {
      return {PushOutcome::kKept,
              Status::InvalidArgument(object.ToString() + " cannot go on " + ListName(node, size))};
    }
  }
  StatusOr<RemoteAddress> head_word = Head(ctx, node, size);
  if (!head_word.ok()) return {PushOutcome::kKept, head_word.status()};
  if (head_word->is_null()) {
    return {PushOutcome::kKept,
            Status::ResourceExhausted("the free-list directory of mn" + std::to_string(node) +
                                      " has no entry left for " + std::to_string(size) +
                                      "-byte objects")};
  }
  const auto key = std::make_pair(node, size);
  const auto count = static_cast<uint32_t>(objects.size());
  ScratchArena::Scope scope(ctx.arena());
  StatusOr<uint64_t*> header = ctx.arena().Words(kBundleFixedWords + count);
  if (!header.ok()) return {PushOutcome::kKept, header.status()};
  uint64_t* found = *header + kBundleFixedWords + count - 1;
  (*header)[1] = size << 8 | count;
  for (uint32_t i = 1; i < count; ++i)
    (*header)[kBundleFixedWords + i - 1] = objects[i].offset();
  const auto guess_of = guesses_.find(key);
  ListHead guess = ListHead::Of(guess_of == guesses_.end() ? 0 : guess_of->second);
  for (uint32_t attempt = 0; attempt < attempts; ++attempt) {
    // Written first in the batch: whole before the CAS can land.
    (*header)[0] = guess.offset;
    const ListHead pushed = guess.Next(objects[0].offset());
    const Op ops[] = {Op::Write(objects[0], *header, 8 * (kBundleFixedWords + count - 1)),
                      Op::CompareSwap(*head_word, found, guess.word(), pushed.word())};
    fabric::Completion completion(ctx.notifier());
    // Nothing posted: no earlier attempt's CAS landed either.
    if (Status posted = ctx.Post(node, ops, &completion); !posted.ok()) {
      return {PushOutcome::kKept, posted};
    }
    if (Status done = ctx.Wait(completion); !done.ok()) return {PushOutcome::kLost, done};
    if (*found == guess.word()) {
      guesses_[key] = pushed.word();
      return {PushOutcome::kPushed, Status::Ok()};
    }
    guess = ListHead::Of(*found);
    // As a pop does: without it the pushers of a hot list (every worker
    // giving its objects back at once) keep failing one another's CAS.
    if (attempt + 1 < attempts) ctx.Backoff(attempt);
  }
  guesses_[key] = guess.word();
  return {PushOutcome::kKept, Status::Aborted(ListName(node, size) + " stayed contended for " +
                                              std::to_string(attempts) + " pushes")};
}

}  // namespace dmidx::runtime
