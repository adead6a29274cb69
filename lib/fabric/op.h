// One-sided operations and the completion a batch of them reports to.
#ifndef DMIDX_FABRIC_OP_H_
#define DMIDX_FABRIC_OP_H_

#include <atomic>
#include <cstdint>
#include <mutex>

#include "dmidx/status.h"
#include "lib/fabric/remote_address.h"

namespace dmidx::fabric {

enum class OpCode : uint8_t { kRead, kWrite, kCompareSwap, kFetchAdd };

const char* OpCodeName(OpCode code);

// Op flags.
inline constexpr uint8_t kFence = 1;   // start only after every earlier READ and
                                       // atomic of the connection completed
inline constexpr uint8_t kInline = 2;  // WRITE payload copied at post; the source
                                       // may be reused as soon as Post returns

// One one-sided operation. `local` must lie in memory registered with the
// endpoint that posts it:
//   READ          remote[0, length) -> local[0, length)
//   WRITE         local[0, length) -> remote[0, length); without kInline the
//                 source must stay unchanged until the batch completes
//   CAS           if remote == compare then remote = operand; local <- old value
//   FAA           remote += operand; local <- old value
// Atomics act on one 8-byte, 8-byte-aligned word; length is 8.
struct Op {
  OpCode code = OpCode::kRead;
  uint8_t flags = 0;
  uint32_t length = 0;
  RemoteAddress remote;
  void* local = nullptr;
  uint64_t compare = 0;
  uint64_t operand = 0;

  static Op Read(RemoteAddress remote, void* destination, uint32_t length, uint8_t flags = 0) {
    return {OpCode::kRead, flags, length, remote, destination, 0, 0};
  }
  static Op Write(RemoteAddress remote, const void* source, uint32_t length, uint8_t flags = 0) {
    return {OpCode::kWrite, flags, length, remote, const_cast<void*>(source), 0, 0};
  }
  static Op CompareSwap(RemoteAddress remote, uint64_t* old_value, uint64_t compare, uint64_t swap,
                        uint8_t flags = 0) {
    return {OpCode::kCompareSwap, flags, 8, remote, old_value, compare, swap};
  }
  static Op FetchAdd(RemoteAddress remote, uint64_t* old_value, uint64_t add, uint8_t flags = 0) {
    return {OpCode::kFetchAdd, flags, 8, remote, old_value, 0, add};
  }
};

// Payload bytes an op moves each way, as the counters count them: a READ
// reads its length, a WRITE writes it, an atomic reads and writes 8.
struct OpBytes {
  uint64_t read = 0;
  uint64_t written = 0;
};
inline OpBytes BytesOf(const Op& op) {
  switch (op.code) {
    case OpCode::kRead:
      return {op.length, 0};
    case OpCode::kWrite:
      return {0, op.length};
    case OpCode::kCompareSwap:
    case OpCode::kFetchAdd:
      return {8, 8};
  }
  return {};
}

// Whoever waits on a completion: told when it is done. May be called from any
// thread, and possibly just after the waiter already saw done() and moved on:
// a notifier must outlive the endpoint's in-flight ops (the runtime keeps its
// parkers for the client's lifetime and quiesces endpoints before freeing
// them), and waiters must tolerate a spurious notification.
class Notifier {
 public:
  virtual void Notify() = 0;
  // A batch of a completion this notifier wakes failed: called by
  // Completion::Finish on its error path only (any thread, before the
  // batch is counted), so a successful batch pays nothing for it.
  virtual void Failed() {}

 protected:
  ~Notifier() = default;
};

// Tracks one or more signaled batches. Endpoint::Post() calls Expect() once
// per batch it posts; the backend calls Finish() once per batch, from any
// thread. When the last expected batch finished, the notifier is told (and
// maybe earlier too: a Finish() on another thread may see an older count of
// expected batches; waiters tolerate spurious wakes).
//
// The poster's side does no atomic read-modify-write: Expect() counts with
// a load and a store of a field only the owner writes, and done() compares
// it with `finished_`, which only Finish() increments.
//
// Ordering: Finish() writes the error (if any), then publishes the batch's
// effects on local buffers with a release increment of `finished_`; done()
// reads it with acquire, so a waiter that saw done() sees every byte the
// batches wrote into its buffers and every error they set (the increments
// form one release sequence), and status() needs no lock.
class Completion {
 public:
  explicit Completion(Notifier* notifier = nullptr) : notifier_(notifier) {}
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // Owner thread only.
  void Expect() {
    ++batches_;
    expected_.store(batches_, std::memory_order_relaxed);
  }
  // Batches expected since construction. Owner thread only.
  uint32_t batches() const { return batches_; }
  // Owner thread only.
  bool done() const { return finished_.load(std::memory_order_acquire) == batches_; }
  // The first error of any batch, or OK. Valid once done().
  const Status& status() const { return status_; }

  void Finish(const Status& status) {
    if (!status.ok()) {
      if (notifier_ != nullptr) notifier_->Failed();
      std::lock_guard<std::mutex> guard(error_mutex_);
      if (status_.ok()) status_ = status;
    }
    // The waiter may destroy this Completion as soon as the last batch is
    // counted, so read what is needed before the increment. The expected
    // count read is at most the final one, so the increment that finishes
    // the last batch always reaches it.
    Notifier* notifier = notifier_;
    const uint32_t expected = expected_.load(std::memory_order_relaxed);
    const uint32_t finished = finished_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (notifier && finished >= expected) notifier->Notify();
  }

 private:
  Notifier* const notifier_;
  std::atomic<uint32_t> finished_{0};
  std::atomic<uint32_t> expected_{0};  // batches_, for Finish() on any thread
  uint32_t batches_ = 0;               // touched by the poster's thread only
  std::mutex error_mutex_;             // orders concurrent failing Finish() calls
  Status status_;                      // written under error_mutex_, read once done()
};

}  // namespace dmidx::fabric

#endif  // DMIDX_FABRIC_OP_H_
