// RDWC: read delegation and write combining (SMART §4.2), for any index.
//
// A compute-node-wide table of `table_entries` entries, hashed by key. Each
// entry holds at most one read group and one write group, each for one key
// (the group's "unique key": a context whose key hashes to a entry busy with
// another key has a hash conflict and runs its operation alone). A group
// leaves its entry when its window closes (or its leader ends without
// closing it): while its leader finishes, the next arrival for the entry,
// of its key or another, leads a new group, and never joins the closed one.
// A new leader of the key of a closed group still running waits for that
// group to finish before it runs its body, and arrivals meanwhile join the
// new group: one READ (and one write-back) per key in flight per compute
// node, each shared by everyone who arrived while the previous one flew
// (with a warm cache a lookup's window would otherwise close at once). A
// entry tracks one running group, so keys that share a entry may each have
// one in flight unawaited. The indexes close their windows before their
// first remote op (allowed: earlier than required), so joiners gather
// while the previous group of the key flies.
//
// Read delegation. The first context to Read() a key leads: it runs the
// index's lookup `body`. Contexts that Read() the same key while the
// group's window is open join it: they park (no remote op) and take the
// leader's result. The leader closes the window with window.Close() right
// before it posts the READ whose result it will return (the leaf READ),
// so every joiner joined before that READ was posted and returns after it
// completed: the READ lies inside every joiner's interval, and the shared
// result is linearizable for them too, whatever other compute nodes write
// meanwhile. (SMART's window runs to the end of the leader's search; that
// lets a joiner that arrives after another compute node's write completed
// take a value read before it. Closing at the READ makes the §4.2.4 rule
// hold by construction: a read that starts after a write completed joins
// no group whose READ was posted before the write completed.) A body that
// never calls Close(), or ends with an error other than NotFound, shares
// nothing: its joiners run their own body. That holds for a lock timeout
// too: a lookup takes a lock only to prove an object it read damaged
// (index/verified_read.h), so its joiners have waited for no lock (each
// meets that lock itself if the damage is real).
//
// Write combining. The first context to Write() a key leads: it runs the
// index's update `body`. Contexts that Write() the same key while the
// window is open deposit their value and park. The leader closes the window
// with window.Close(), which returns the value to write: the last deposited
// (arrival order; its own if none), right before it posts the write-back.
// If the leader's body returns OK after closing, every joiner's write took
// effect in that one remote write (in arrival order, the last one's value
// remains) and they return OK. A leader's lock timeout (the key's lock
// stayed held past lock_timeout: lock::IsLockTimeout, not any other
// DeadlineExceeded) goes to every joiner and to the waiting leader of the
// key's next group, each of which takes it only if its own deadline, its
// arrival plus its handle's lock_timeout, had passed when the leader gave
// up: it waited for that holder since it arrived, so the waiters who
// arrived with the leader share one timeout, as a lock's local queue does.
// A waiter that arrived later has not waited its lock_timeout: it runs
// its own body (the next group's leader leads it), whose first lock counts
// its deadline from the waiter's arrival (lock::LockDeadline). Otherwise
// (another error, NotFound, or no Close: e.g. the key turned out absent
// and the leader inserted it) joiners run their own body.
//
// Thread-safe; waits park the context (ctx.Park()), so coroutines of one
// thread can lead and join each other's groups. Each context may be in one
// group at a time. Counters: ctx.counters().delegated_reads and
// combined_writes count the joiners that took a result or whose value was
// written by a leader (or that took its lock timeout); a hash conflict is
// counted in stats().conflicts.
#ifndef DMIDX_LOCK_RDWC_H_
#define DMIDX_LOCK_RDWC_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "dmidx/status.h"
#include "lib/common/function_ref.h"
#include "lib/runtime/context.h"

namespace dmidx::lock {

struct RdwcStats {
  uint64_t reads_led = 0;        // Read() calls that ran their body as leader
  uint64_t reads_delegated = 0;  // Read() calls that took a leader's result
  uint64_t writes_led = 0;       // Write() calls that ran their body as leader
  uint64_t writes_combined = 0;  // Write() calls folded into a leader's write (or its timeout)
  uint64_t conflicts = 0;        // calls that found their entry busy with another key
  uint64_t fallbacks = 0;        // joiners that ran their own body instead
};

class Rdwc {
 public:
  // The most entries a table may have: 2^20, 256 times the default 4096 and
  // about 40 MiB of entries, far more than the keys a compute node's contexts
  // can have in flight. (It also keeps the round-up to a power of two
  // defined: std::bit_ceil of a value above 2^63 is not.)
  static constexpr size_t kMaxTableEntries = size_t{1} << 20;
  // `table_entries` in 1..kMaxTableEntries entries (rounded up to a power of
  // two).
  explicit Rdwc(size_t table_entries);
  // InvalidArgument, naming `option` and the bound, unless `table_entries`
  // is in 1..kMaxTableEntries.
  static Status CheckTableEntries(size_t table_entries, std::string_view option);
  // The table of `owner` (an index's name for it, e.g. "btree/<descriptor>")
  // on compute node `node`, with `table_entries` entries: shared by every
  // handle of the owner on the node with that size. InvalidArgument, naming
  // `option`, for a size CheckTableEntries refuses.
  static StatusOr<std::shared_ptr<Rdwc>> Shared(runtime::ComputeNode& node,
                                                const std::string& owner, size_t table_entries,
                                                std::string_view option);
  ~Rdwc();
  Rdwc(const Rdwc&) = delete;
  Rdwc& operator=(const Rdwc&) = delete;

  // Handed to a leader's body.
  class ReadWindow {
   public:
    // Ends joining; call right before posting the READ whose result the
    // body returns. Idempotent.
    virtual void Close() = 0;

   protected:
    ~ReadWindow() = default;
  };
  class WriteWindow {
   public:
    // Ends joining and returns the value to write (see above). Idempotent:
    // later calls return the same value.
    virtual uint64_t Close() = 0;

   protected:
    ~WriteWindow() = default;
  };

  // Run before Read()/Write() returns, so referenced rather than owned.
  using ReadBody = FunctionRef<Status(ReadWindow& window, uint64_t* value)>;
  using WriteBody = FunctionRef<Status(WriteWindow& window)>;

  // Lookup of `key` (any length) through the table: runs `body` (as leader
  // or after a fallback) or takes a leader's result. *value is set when the
  // returned status is OK.
  Status Read(runtime::ContextImpl& ctx, std::string_view key, uint64_t* value, ReadBody body);
  // Write of `value` to `key` through the table. `lock_timeout` is the
  // caller's (its index's option): how long it waits for the key's lock,
  // counted from its arrival here when it waited in a group whose leader
  // met that lock's timeout.
  Status Write(runtime::ContextImpl& ctx, std::string_view key, uint64_t value,
               std::chrono::nanoseconds lock_timeout, WriteBody body);

  RdwcStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dmidx::lock

#endif  // DMIDX_LOCK_RDWC_H_
