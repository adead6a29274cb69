#include "index/verified_read.h"

#include <cstring>
#include <string>
#include <vector>

#include "lib/runtime/arena.h"
#include "lock/lock_queue.h"

namespace dmidx::index {

using fabric::Op;

Status RereadUntilVerified(runtime::ContextImpl& ctx, const VerifiedRead& object) {
  const Op read = Op::Read(object.address, object.buffer, object.bytes);
  std::vector<uint8_t> failed_image;  // of the last quiet check
  int confirmations = 0;
  // Waits on a named holder (made at the first), which count no attempt.
  std::optional<lock::LockRetry> wait;
  for (int attempt = 1; attempt < kMaxTornReads; ++attempt) {
    ++ctx.counters().read_retries;
    const bool check = attempt >= kTornReadsBeforeCheck;
    bool quiet_before = false;
    if (check) {
      DMIDX_ASSIGN_OR_RETURN(const uint64_t word, ctx.ReadWord(object.guard));
      quiet_before = object.quiet(word);
    }
    DMIDX_RETURN_IF_ERROR(ctx.Execute(object.address.node(), {&read, 1}));
    if (object.verify()) return Status::Ok();
    if (!check) {
      ctx.Yield();
      continue;
    }
    DMIDX_ASSIGN_OR_RETURN(const uint64_t word_after, ctx.ReadWord(object.guard));
    if (!quiet_before || !object.quiet(word_after)) {
      confirmations = 0;  // a writer is (or was) at work: maybe a torn READ
      failed_image.clear();
      const std::optional<uint32_t> holder =
          object.quiet(word_after) ? std::nullopt : object.holder(word_after);
      if (!holder) {
        ctx.Yield();
        continue;
      }
      // Held by a named holder: waited on, and recovered if it died.
      if (!wait) {
        wait.emplace(ctx, nullptr, lock::LockDeadline(ctx, ctx.Now(), object.wait_timeout));
      }
      DMIDX_ASSIGN_OR_RETURN(const bool again, wait->WaitHeld(object.guard, word_after, holder));
      if (!again) {
        return lock::LockTimeout(
            std::string(object.kind) + " " + object.address.ToString() +
            " failed its checksum while compute node " + std::to_string(*holder) +
            " held lock word " + object.guard.ToString() + " for longer than " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::milliseconds>(object.wait_timeout)
                    .count()) +
            " ms (did its holder die?)");
      }
      --attempt;
      continue;
    }
    const bool same = failed_image.size() == object.bytes &&
                      std::memcmp(failed_image.data(), object.buffer, object.bytes) == 0;
    confirmations = same ? confirmations + 1 : 1;
    if (confirmations < kDamageConfirmations) {
      failed_image.assign(object.buffer, object.buffer + object.bytes);
      continue;
    }
    // A free word before and after each READ proves nothing: a writer may
    // have taken the lock, written half its batch and released it between
    // the two READs of the word, twice, leaving the same half image. Only
    // an image read under a hold (the caller's own, or taken here) is
    // proof.
    DMIDX_ASSIGN_OR_RETURN(const LockedRead locked, object.read_locked());
    if (locked == LockedRead::kRead) {
      if (object.verify()) return Status::Ok();
      return Status::DataLoss(std::string(object.kind) + " " + object.address.ToString() +
                              " fails its checksum under its lock (a write-back that landed in "
                              "part?); it stays damaged until repaired");
    }
    confirmations = 0;  // a writer holds it: the failures were torn READs, maybe
    failed_image.clear();
    ctx.Yield();
  }
  return Status::Aborted(std::string(object.kind) + " " + object.address.ToString() +
                         " failed its checksum " + std::to_string(kMaxTornReads) +
                         " times in a row while lock word " + object.guard.ToString() +
                         " was held");
}

}  // namespace dmidx::index
