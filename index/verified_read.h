// Read-verify-retry for remote objects whose image carries its own check (a
// checksum), shared by every index: a READ is retried while it fails its
// check, and an object whose image still fails when read under its lock is
// reported damaged (DataLoss naming it) instead of being retried for ever.
//
//   const auto read_locked = [&]() -> StatusOr<index::LockedRead> {
//     ... take the leaf's lock with a READ of it, let it go ...
//     return index::LockedRead::kRead;
//   };
//   DMIDX_RETURN_IF_ERROR(index::ReadVerified(
//       ctx, "leaf", address, buffer, bytes, [&] { return Verify(buffer); },
//       address + kRearOffset, [](uint64_t word) { return (word & kLocked) == 0; },
//       read_locked));
#ifndef DMIDX_INDEX_VERIFIED_READ_H_
#define DMIDX_INDEX_VERIFIED_READ_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "dmidx/status.h"
#include "lib/common/function_ref.h"
#include "lib/fabric/op.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

// What VerifiedRead::read_locked did.
enum class LockedRead {
  // `buffer` holds an image READ while the object's lock was held by the
  // caller: no writer was mid-write, so an image failing its check is
  // damage.
  kRead,
  // Another holder has the lock (a writer at work): nothing was read.
  kBusy,
};

// One object READ that verifies, and what tells a torn READ from damage.
// Only a writer holding the object's lock word `guard` changes a reachable
// object, so a READ is torn only while that word is held: `quiet(word)` is
// true for a value of the word under which no writer is mid-write (free,
// say, or the caller's own hold). It refers to the callables (FunctionRef):
// name them before the struct, or build it in the call's argument.
// ReadVerified takes the same as arguments.
struct VerifiedRead {
  const char* kind;  // names the object in errors: "node", "leaf"
  fabric::RemoteAddress address;
  uint8_t* buffer;  // receives `bytes`, from the context's arena
  uint32_t bytes;
  FunctionRef<bool()> verify;  // checks the image in `buffer`
  fabric::RemoteAddress guard;
  FunctionRef<bool(uint64_t)> quiet;
  // The proof of damage, called only once the checks of `guard` found the
  // same failing image with the word quiet around each READ, which does
  // not prove by itself that no writer was at work when the word's quiet
  // value is "free": a whole lock cycle (take, write-back, release) fits
  // between two READs of the word, which reads free both times, and a
  // write-back's image halfway (the first WRITE of its batch landed, the
  // next not) repeats exactly when the writer repeats its change. So the
  // tree takes the object's lock (its own kind: HOCL, a rear word), READs
  // the object into `buffer` under it and lets it go: kRead. A caller
  // whose quiet value is its own hold made every READ under it already:
  // kUnderOwnHold, which posts nothing.
  FunctionRef<StatusOr<LockedRead>()> read_locked;
  // The compute node a value of `guard` names as its holder (nullopt for
  // a word that names none). A reader whose image keeps failing while the
  // word is held waits on that holder as a lock waiter would
  // (lock::LockRetry::WaitHeld): its lease is judged after a period, and a
  // dead holder is declared, fenced and recovered, which finishes the
  // write-back it left half-placed from its redo record. Until
  // `wait_timeout` has passed since the wait began.
  FunctionRef<std::optional<uint32_t>(uint64_t)> holder;
  std::chrono::nanoseconds wait_timeout;
};

// read_locked for a caller that holds the object's lock (its `quiet` is its
// own hold): the last READ was made under it.
inline constexpr auto kUnderOwnHold = []() -> StatusOr<LockedRead> { return LockedRead::kRead; };

// READs of one object that fail their check, in a row, before it gives
// up (a bound, so that a dead writer shows as an error).
inline constexpr int kMaxTornReads = 10000;
// Failed checks in a row before a reader looks at the object's lock word.
inline constexpr int kTornReadsBeforeCheck = 4;
// Checks in a row that must find the same failing image, with the lock word
// quiet before and after each READ, before the object is read under its
// lock (read_locked): a filter, so that torn READs under a busy writer
// rarely cost a lock.
inline constexpr int kDamageConfirmations = 2;

// Reads `object` into its buffer until the image verifies, once a READ of
// it failed its check (every READ posted here counts a read retry). After
// kTornReadsBeforeCheck failures every READ is bracketed by READs of the
// guard word. Once the same failing image came kDamageConfirmations times in
// a row, with the word quiet before and after each READ, the object is read
// under its lock (read_locked): an image that verifies there is returned
// (Ok), one that fails is an object damaged for good (a write-back that
// landed in part, say), not a torn READ: DataLoss naming the object.
// Retrying cannot mend it; repair needs a redo record. A lock that is busy
// (kBusy) starts the confirmations over. A word held by a named holder is
// waited on (VerifiedRead::holder): a dead one is recovered; one that holds
// it past `wait_timeout` ends the read in a lock timeout naming it. A word
// held, but naming no holder, all along ends in Aborted after
// kMaxTornReads; read_locked's error (a lock timeout, say) is returned as
// it is.
Status RereadUntilVerified(runtime::ContextImpl& ctx, const VerifiedRead& object);
// Round trips from the first READ of a damaged object (with its lock word
// quiet) to DataLoss for a caller holding its lock (kUnderOwnHold): the
// first READ and the unchecked re-reads, then a READ bracketed by two
// reads of the word per confirmation. A caller without the lock adds what
// its read_locked costs (both trees: 2 when the lock is free, its CAS with
// the READ behind it, and its release).
inline constexpr int kDamageRoundTrips = kTornReadsBeforeCheck + 3 * kDamageConfirmations;

// One READ of `object`'s address into `buffer` that `verify()` accepts, the
// usual case, inline and apart from the retry loop; RereadUntilVerified
// (with the same arguments) when it fails.
template <typename Verify, typename Quiet, typename ReadLocked, typename Holder>
Status ReadVerified(runtime::ContextImpl& ctx, const char* kind, fabric::RemoteAddress address,
                    uint8_t* buffer, uint32_t bytes, Verify&& verify, fabric::RemoteAddress guard,
                    Quiet&& quiet, ReadLocked&& read_locked, Holder&& holder,
                    std::chrono::nanoseconds wait_timeout) {
  const fabric::Op read = fabric::Op::Read(address, buffer, bytes);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(address.node(), {&read, 1}));
  if (verify()) return Status::Ok();
  ctx.Yield();
  return RereadUntilVerified(
      ctx, {kind, address, buffer, bytes, verify, guard, quiet, read_locked, holder, wait_timeout});
}

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_VERIFIED_READ_H_
