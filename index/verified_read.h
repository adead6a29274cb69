// Read-verify-retry for remote objects whose image carries its own check (a
// checksum), shared by every index: a READ is retried while it fails its
// check, and an object that keeps failing while no writer is at work is
// reported damaged (DataLoss naming it) instead of being retried for ever.
//
//   DMIDX_RETURN_IF_ERROR(index::ReadVerified(
//       ctx, "leaf", address, buffer, bytes, [&] { return Verify(buffer); },
//       address + kRearOffset, [](uint64_t word) { return (word & kLocked) == 0; }));
#ifndef DMIDX_INDEX_VERIFIED_READ_H_
#define DMIDX_INDEX_VERIFIED_READ_H_

#include <cstdint>

#include "dmidx/status.h"
#include "lib/common/function_ref.h"
#include "lib/fabric/op.h"
#include "lib/fabric/remote_address.h"
#include "lib/runtime/context.h"

namespace dmidx::index {

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
};

// READs of one object that fail their check, in a row, before it gives
// up (a bound, so that a dead writer shows as an error).
inline constexpr int kMaxTornReads = 10000;
// Failed checks in a row before a reader looks at the object's lock word.
inline constexpr int kTornReadsBeforeCheck = 4;
// Checks in a row that must find the same failing image, with the lock word
// quiet before and after each READ, before the object is declared damaged.
inline constexpr int kDamageConfirmations = 2;

// Reads `object` into its buffer until the image verifies, once a READ of
// it failed its check (every READ posted here counts a read retry). After
// kTornReadsBeforeCheck failures every READ is bracketed by READs of the
// guard word: the same failing image kDamageConfirmations times in a row,
// with the word quiet before and after each READ, is an object damaged for
// good (a write-back that landed in part, say), not a torn READ: DataLoss
// naming the object. Retrying cannot mend it; repair needs a redo record.
// A word held by someone else all along (a dead holder) ends in Aborted
// after kMaxTornReads.
Status RereadUntilVerified(runtime::ContextImpl& ctx, const VerifiedRead& object);
// Round trips from the first READ of a damaged object (with its lock word
// quiet) to DataLoss: the first READ and the unchecked re-reads, then a
// READ bracketed by two reads of the word per confirmation.
inline constexpr int kDamageRoundTrips = kTornReadsBeforeCheck + 3 * kDamageConfirmations;

// The 8-byte word at `address`, read in one round trip.
StatusOr<uint64_t> ReadWord(runtime::ContextImpl& ctx, fabric::RemoteAddress address);

// One READ of `object`'s address into `buffer` that `verify()` accepts, the
// usual case, inline and apart from the retry loop; RereadUntilVerified
// (with the same arguments) when it fails.
template <typename Verify, typename Quiet>
Status ReadVerified(runtime::ContextImpl& ctx, const char* kind, fabric::RemoteAddress address,
                    uint8_t* buffer, uint32_t bytes, Verify&& verify, fabric::RemoteAddress guard,
                    Quiet&& quiet) {
  const fabric::Op read = fabric::Op::Read(address, buffer, bytes);
  DMIDX_RETURN_IF_ERROR(ctx.Execute(address.node(), {&read, 1}));
  if (verify()) return Status::Ok();
  ctx.Yield();
  return RereadUntilVerified(ctx, {kind, address, buffer, bytes, verify, guard, quiet});
}

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_VERIFIED_READ_H_
