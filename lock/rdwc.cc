#include "lock/rdwc.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>  // std::lock_guard
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "lib/common/spin_lock.h"
#include "lock/lock_queue.h"
#include "lock/mix.h"

namespace dmidx::lock {

namespace {

// A context waiting in a group. Lives on the joiner's own stack while it
// waits; every field is guarded by its entry's lock. The leader fills in the
// outcome and sets `done` in one critical section, then never touches the
// record again, so the joiner may return as soon as it reads `done`.
struct Joiner {
  explicit Joiner(runtime::ContextImpl* context) : ctx(context) {}

  runtime::ContextImpl* const ctx;
  Joiner* next = nullptr;
  bool done = false;
  bool shared = false;  // the leader's outcome is this joiner's (else: run own body)
  // A write leader's lock timeout (IsLockTimeout): when it gave up, by its
  // clock. The waiter takes it (`status`) only if its own deadline had
  // passed by then (TakesLockTimeout), else runs its own body.
  std::optional<std::chrono::nanoseconds> timed_out_at;
  Status status;       // the leader's status, when shared or timed out
  uint64_t value = 0;  // read: the leader's value (status OK); write: unused
};

// Whether a write waiter that arrived at `arrival` with its handle's
// `lock_timeout` takes the lock timeout its leader met: only if its own
// deadline, arrival + lock_timeout, had passed when the leader gave up. It
// waited for the same holder since it arrived, so it would have given up
// by then on its own, as the waiters of a lock's local queue do, each
// deadline counting from its own arrival. One that arrived later has not
// waited its lock_timeout yet: it runs its own body, whose first lock
// counts its deadline from the arrival (WaitedSince).
bool TakesLockTimeout(const Joiner& waiter, std::chrono::nanoseconds arrival,
                      std::chrono::nanoseconds lock_timeout) {
  return waiter.timed_out_at && arrival + lock_timeout <= *waiter.timed_out_at;
}

// While a body runs for a context that waited in a group since `arrival`
// (unset: it did not wait), the first lock the body takes counts its
// deadline from the arrival (ContextImpl::set_lock_wait_origin,
// lock::LockDeadline); nothing of it outlives the body. Only a wait that
// ended in the leader's lock timeout counts (LockWaitSince): one that
// ended otherwise (a slow leader, an error of another kind) waited for no
// lock the waiter knows to be held, and its body's first lock gets a
// lock_timeout of its own.
std::optional<std::chrono::nanoseconds> LockWaitSince(
    const Joiner& waiter, std::optional<std::chrono::nanoseconds> arrival) {
  return waiter.timed_out_at ? arrival : std::nullopt;
}

class WaitedSince {
 public:
  WaitedSince(runtime::ContextImpl& ctx, std::optional<std::chrono::nanoseconds> arrival)
      : ctx_(ctx) {
    if (arrival) ctx_.set_lock_wait_origin(arrival);
  }
  ~WaitedSince() { ctx_.set_lock_wait_origin(std::nullopt); }
  WaitedSince(const WaitedSince&) = delete;
  WaitedSince& operator=(const WaitedSince&) = delete;

 private:
  runtime::ContextImpl& ctx_;
};

struct Group;

struct Entry {
  // Held for a few dozen instructions at a time and never across a Park:
  // a spin lock, one exchange to take uncontended (lib/common/spin_lock.h).
  SpinLock lock;
  // The groups open for joining, or null. A group leaves its entry when its
  // window closes (or its leader ends without closing), so a closed group
  // still running is found by nobody: later arrivals start a new group.
  Group* read = nullptr;   // guarded by lock
  Group* write = nullptr;  // guarded by lock
  // The last group that closed its window and has not finished yet, or
  // null. A new leader of the same key waits for it before running its
  // body, so arrivals meanwhile join the new leader's group instead of
  // each sending a READ (or write) of their own.
  Group* read_running = nullptr;   // guarded by lock
  Group* write_running = nullptr;  // guarded by lock
};

// What read and write groups share. Lives on the leader's stack for the
// length of its Read()/Write() call; others reach it only through its entry,
// under the entry's lock, while it is open.
struct Group {
  Group(Entry* group_entry, Group* Entry::*open_member, Group* Entry::*running_member,
        std::string_view group_key)
      : entry(group_entry), open(open_member), running(running_member), key(group_key) {}

  // Caller holds entry->lock.
  void Append(Joiner* joiner) {
    (tail ? tail->next : head) = joiner;
    tail = joiner;
  }
  // Caller holds entry->lock. Later arrivals no longer find this group.
  void Detach() {
    if (entry->*open == this) entry->*open = nullptr;
  }
  // Caller holds entry->lock. The window closed: this group runs on, and a
  // new leader of its key waits for it (WaitForPrior).
  void MarkRunning() {
    Detach();
    // A group of another key (a hash conflict) may run too: it keeps the
    // place, and this key's next leader does not wait.
    if (entry->*running == nullptr) entry->*running = this;
  }

  // Detaches the group and hands every joiner the outcome: the leader's
  // status and value if `shared`, else a fallback to its own body. A write
  // leader's lock timeout, given up at `timed_out_at`, goes to every joiner
  // and to the next group's waiting leader with that time: each takes it
  // only if its own deadline had passed by then (TakesLockTimeout), so the
  // waiters who arrived with the leader share its timeout instead of each
  // waiting a lock_timeout of its own behind a dead holder, and a later
  // one does not fail having waited less.
  void Finish(bool shared, const Status& status, uint64_t value,
              std::optional<std::chrono::nanoseconds> timed_out_at) {
    assert(!(shared && timed_out_at));
    std::lock_guard<SpinLock> guard(entry->lock);
    Detach();
    if (entry->*running == this) entry->*running = nullptr;
    if (successor != nullptr) {
      successor->timed_out_at = timed_out_at;
      if (timed_out_at) successor->status = status;
      successor->done = true;
      successor->ctx->Unpark();  // under the lock, as below
    }
    for (Joiner* joiner = head; joiner != nullptr;) {
      Joiner* next = joiner->next;
      joiner->shared = shared;
      joiner->timed_out_at = timed_out_at;
      if (shared || timed_out_at) {
        joiner->status = status;
        joiner->value = value;
      }
      joiner->done = true;
      // Still under the lock: the joiner cannot see `done` and return (its
      // record and perhaps its context gone) before this Unpark is done.
      joiner->ctx->Unpark();
      joiner = next;
    }
  }

  Entry* const entry;
  Group* Entry::*const open;     // &Entry::read or &Entry::write
  Group* Entry::*const running;  // &Entry::read_running or &Entry::write_running
  const std::string_view key;    // the leader's key: alive for the leader's call
  Joiner* head = nullptr;        // guarded by entry->lock, in arrival order
  Joiner* tail = nullptr;        // guarded by entry->lock
  Joiner* successor = nullptr;   // the next group's leader, waiting; guarded by entry->lock
  bool closed = false;           // the leader's own flag: only its body touches it
};

class ReadGroup final : public Group, public Rdwc::ReadWindow {
 public:
  ReadGroup(Entry* group_entry, std::string_view group_key)
      : Group(group_entry, &Entry::read, &Entry::read_running, group_key) {}

  void Close() override {
    if (closed) return;
    std::lock_guard<SpinLock> guard(entry->lock);
    MarkRunning();
    closed = true;
  }
};

class WriteGroup final : public Group, public Rdwc::WriteWindow {
 public:
  WriteGroup(Entry* group_entry, std::string_view group_key, uint64_t leader_value)
      : Group(group_entry, &Entry::write, &Entry::write_running, group_key),
        last_value(leader_value) {}

  uint64_t Close() override {
    if (closed) return close_value_;
    std::lock_guard<SpinLock> guard(entry->lock);
    MarkRunning();
    close_value_ = last_value;
    closed = true;
    return close_value_;
  }

  // The last deposited value (the leader's own until a joiner deposits).
  uint64_t last_value;  // guarded by entry->lock

 private:
  uint64_t close_value_ = 0;  // the leader's own, set by Close()
};

// Windows of a body run alone (a hash conflict or a fallback): nobody can
// join, and the value to write is the caller's own.
class SoloReadWindow final : public Rdwc::ReadWindow {
 public:
  void Close() override {}
};

class SoloWriteWindow final : public Rdwc::WriteWindow {
 public:
  explicit SoloWriteWindow(uint64_t value) : value_(value) {}
  uint64_t Close() override { return value_; }

 private:
  const uint64_t value_;
};

enum class Role { kLeader, kJoiner, kConflict };

// Caller holds group->entry->lock. Makes `group` the entry's open group if
// there is none; joins the open one if it is for the same key. A new
// leader whose key's previous group still runs registers `waiter` as that
// group's successor (the caller then waits for it before its body).
Role Enter(Group* group, Joiner* joiner, Joiner* waiter, bool* wait) {
  Group*& open = group->entry->*group->open;
  *wait = false;
  if (open == nullptr) {
    open = group;
    Group* prior = group->entry->*group->running;
    if (prior != nullptr && prior->key == group->key && prior->successor == nullptr) {
      prior->successor = waiter;
      *wait = true;
    }
    return Role::kLeader;
  }
  if (open->key != group->key) return Role::kConflict;
  open->Append(joiner);
  return Role::kJoiner;
}

// Parks until the leader has set `joiner->done`. Reading it under the lock
// orders everything the leader wrote before Finish() before what follows.
void AwaitLeader(Entry& entry, Joiner& joiner) {
  for (;;) {
    {
      std::lock_guard<SpinLock> guard(entry.lock);
      if (joiner.done) return;
    }
    joiner.ctx->Park();
  }
}

void Count(std::atomic<uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

struct Rdwc::Impl {
  explicit Impl(size_t entries) : mask(entries - 1), table(new Entry[entries]) {}

  Entry& EntryFor(std::string_view key) {
    uint64_t hash;
    if (key.size() == 8) {  // the common key size: one word, no call
      std::memcpy(&hash, key.data(), 8);
    } else {
      hash = std::hash<std::string_view>{}(key);
    }
    return table[Mix(hash) & mask];
  }

  const size_t mask;
  const std::unique_ptr<Entry[]> table;
  // Statistics only: nothing is ordered by them.
  std::atomic<uint64_t> reads_led{0};
  std::atomic<uint64_t> reads_delegated{0};
  std::atomic<uint64_t> writes_led{0};
  std::atomic<uint64_t> writes_combined{0};
  std::atomic<uint64_t> conflicts{0};
  std::atomic<uint64_t> fallbacks{0};
};

Rdwc::Rdwc(size_t table_entries) {
  assert(CheckTableEntries(table_entries, "table_entries").ok());
  impl_ =
      std::make_unique<Impl>(std::bit_ceil(std::clamp<size_t>(table_entries, 1, kMaxTableEntries)));
}

Rdwc::~Rdwc() = default;

Status Rdwc::CheckTableEntries(size_t table_entries, std::string_view option) {
  if (table_entries == 0) {
    return Status::InvalidArgument(std::string(option) +
                                   " must be positive with read delegation or write combining on");
  }
  if (table_entries > kMaxTableEntries) {
    return Status::InvalidArgument(std::string(option) + " is " + std::to_string(table_entries) +
                                   "; it must be at most " + std::to_string(kMaxTableEntries));
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<Rdwc>> Rdwc::Shared(runtime::ComputeNode& node, const std::string& owner,
                                             size_t table_entries, std::string_view option) {
  DMIDX_RETURN_IF_ERROR(CheckTableEntries(table_entries, option));
  return node.Shared(runtime::SharedKey<Rdwc>(owner + "/rdwc/" + std::to_string(table_entries)),
                     [&] { return std::make_shared<Rdwc>(table_entries); });
}

Status Rdwc::Read(runtime::ContextImpl& ctx, std::string_view key, uint64_t* value, ReadBody body) {
  Entry& entry = impl_->EntryFor(key);
  ReadGroup group(&entry, key);
  Joiner joiner(&ctx);
  Joiner waiter(&ctx);
  Role role;
  bool wait = false;
  {
    std::lock_guard<SpinLock> guard(entry.lock);
    role = Enter(&group, &joiner, &waiter, &wait);
  }
  if (role == Role::kLeader) {
    // The key's READ in flight: collect joiners meanwhile. Then run the
    // body, whatever that READ's outcome: a read group shares nothing with
    // the next but the wait.
    if (wait) AwaitLeader(entry, waiter);
    Count(impl_->reads_led);
    uint64_t result = 0;
    const Status status = body(group, &result);
    // Shared only if the window closed before the READ whose result this is
    // (so the READ lies inside every joiner's interval) and the result is
    // an answer: a value or NotFound. Never a DeadlineExceeded, not even a
    // lock timeout: a lookup takes a lock only to prove an object it read
    // damaged (index/verified_read.h's read_locked: the B+tree's HOCL
    // Acquire, which can time out; the radix tree's one CAS of the rear
    // word, which reports a busy word and never times out), so a joiner
    // has waited for no lock: it runs its own body (and meets that lock
    // itself if the damage is real).
    group.Finish(group.closed && (status.ok() || status.IsNotFound()), status, result,
                 std::nullopt);
    if (status.ok()) *value = result;
    return status;
  }
  if (role == Role::kJoiner) {
    AwaitLeader(entry, joiner);
    if (joiner.shared) {
      Count(impl_->reads_delegated);
      ++ctx.counters().delegated_reads;
      if (joiner.status.ok()) *value = joiner.value;
      return joiner.status;
    }
    Count(impl_->fallbacks);
  } else {
    Count(impl_->conflicts);
  }
  SoloReadWindow solo;
  return body(solo, value);
}

Status Rdwc::Write(runtime::ContextImpl& ctx, std::string_view key, uint64_t value,
                   std::chrono::nanoseconds lock_timeout, WriteBody body) {
  Entry& entry = impl_->EntryFor(key);
  WriteGroup group(&entry, key, value);
  Joiner joiner(&ctx);
  Joiner waiter(&ctx);
  Role role;
  bool wait = false;
  {
    std::lock_guard<SpinLock> guard(entry.lock);
    role = Enter(&group, &joiner, &waiter, &wait);
    // Deposit in arrival order: the open group's last value becomes ours.
    if (role == Role::kJoiner) static_cast<WriteGroup*>(entry.write)->last_value = value;
  }
  // A context that waits reads the clock once it has entered (a little
  // after it arrived: its deadline errs late, never early); a leader that
  // does not wait never reads it.
  std::optional<std::chrono::nanoseconds> arrival;
  if (role == Role::kLeader) {
    if (wait) {  // the key's write in flight: collect joiners meanwhile
      arrival = ctx.Now();
      AwaitLeader(entry, waiter);
      if (TakesLockTimeout(waiter, *arrival, lock_timeout)) {
        group.Finish(false, waiter.status, 0, waiter.timed_out_at);
        Count(impl_->writes_combined);  // it took a leader's outcome, as a joiner does
        ++ctx.counters().combined_writes;
        return waiter.status;
      }
    }
    Count(impl_->writes_led);
    Status status;
    {
      WaitedSince waited(ctx, LockWaitSince(waiter, arrival));
      status = body(group);
    }
    std::optional<std::chrono::nanoseconds> timed_out_at;
    if (IsLockTimeout(status)) timed_out_at = ctx.Now();
    // Every joiner's value was in the window when it closed, and the write
    // of Close()'s value succeeded: all of them took effect in it.
    group.Finish(group.closed && status.ok(), status, 0, timed_out_at);
    return status;
  }
  if (role == Role::kJoiner) {
    arrival = ctx.Now();
    AwaitLeader(entry, joiner);
    if (joiner.shared || TakesLockTimeout(joiner, *arrival, lock_timeout)) {
      Count(impl_->writes_combined);
      ++ctx.counters().combined_writes;
      return joiner.status;
    }
    Count(impl_->fallbacks);
  } else {
    Count(impl_->conflicts);
  }
  WaitedSince waited(ctx, LockWaitSince(joiner, arrival));
  SoloWriteWindow solo(value);
  return body(solo);
}

RdwcStats Rdwc::stats() const {
  RdwcStats stats;
  stats.reads_led = impl_->reads_led.load(std::memory_order_relaxed);
  stats.reads_delegated = impl_->reads_delegated.load(std::memory_order_relaxed);
  stats.writes_led = impl_->writes_led.load(std::memory_order_relaxed);
  stats.writes_combined = impl_->writes_combined.load(std::memory_order_relaxed);
  stats.conflicts = impl_->conflicts.load(std::memory_order_relaxed);
  stats.fallbacks = impl_->fallbacks.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace dmidx::lock
