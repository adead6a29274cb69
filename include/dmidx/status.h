// Status and StatusOr: the one error convention of dmidx.
//
// Every fallible call returns a [[nodiscard]] Status or StatusOr<T>; no
// exception crosses the API. A Status is cheap to copy when OK (no heap).
//
// Codes that matter to callers:
//   kAborted            a lost CAS or failed consistency check: retry is safe.
//   kUnavailable        a memory node or peer cannot be reached: retrying the
//                       same call will not help until the cluster changes.
//   kResourceExhausted  a pool, catalog or queue is full: nothing was changed.
//   kInvalidArgument    the caller broke a precondition: nothing was changed.
//   kDataLoss           stored data is damaged for good (e.g. an index node
//                       that fails its checksum while nobody writes it);
//                       retrying will not help, repair will.
#ifndef DMIDX_STATUS_H_
#define DMIDX_STATUS_H_

#include <cassert>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace dmidx {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kOutOfRange,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kUnavailable,
  kDeadlineExceeded,
  kNotSupported,
  kIoError,
  kInternal,
  kDataLoss,  // last: codes travel as numbers between processes
};

// Returns the name of `code`, e.g. "InvalidArgument".
std::string_view StatusCodeName(StatusCode code);

// What a status says beyond its code, for code that must tell statuses of
// one code apart without reading their messages. Copies and WithContext()
// keep it; ToString() does not show it. Between processes only the code
// travels, except in a memory node's refusals (its control replies and
// connection answers carry the detail, so a fenced node learns it was).
enum class StatusDetail : int {
  kNone = 0,
  // DeadlineExceeded: a lock an index operation waited for stayed held past
  // the index's lock timeout (its holder died, say), not any other wait
  // that timed out (an op on the fabric, the bootstrap). Made by the lock
  // layer (lock/lock_queue.h: LockTimeout).
  kLockTimeout,
  // Unavailable: the compute node that posted the op was fenced (another
  // node judged it dead and cut it off the memory nodes), so nothing it
  // posts lands any more; the message names the fenced compute node. Every
  // later op of that node fails the same way: its client must reopen, as a
  // new compute node. Made by the fabric (fabric.h: FenceComputeNode); on
  // `verbs`, by a memory node refusing a fenced node's connection or
  // control request (ops on a queue pair the fence broke report
  // Unavailable without it: the node cannot tell that from a lost link).
  kFenced,
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string_view message, StatusDetail detail = StatusDetail::kNone);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string_view m) { return {StatusCode::kInvalidArgument, m}; }
  static Status NotFound(std::string_view m) { return {StatusCode::kNotFound, m}; }
  static Status AlreadyExists(std::string_view m) { return {StatusCode::kAlreadyExists, m}; }
  static Status OutOfRange(std::string_view m) { return {StatusCode::kOutOfRange, m}; }
  static Status ResourceExhausted(std::string_view m) {
    return {StatusCode::kResourceExhausted, m};
  }
  static Status FailedPrecondition(std::string_view m) {
    return {StatusCode::kFailedPrecondition, m};
  }
  static Status Aborted(std::string_view m) { return {StatusCode::kAborted, m}; }
  static Status Unavailable(std::string_view m) { return {StatusCode::kUnavailable, m}; }
  static Status DeadlineExceeded(std::string_view m) { return {StatusCode::kDeadlineExceeded, m}; }
  static Status NotSupported(std::string_view m) { return {StatusCode::kNotSupported, m}; }
  static Status IoError(std::string_view m) { return {StatusCode::kIoError, m}; }
  static Status Internal(std::string_view m) { return {StatusCode::kInternal, m}; }
  static Status DataLoss(std::string_view m) { return {StatusCode::kDataLoss, m}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // kNone when OK.
  StatusDetail detail() const { return state_ ? state_->detail : StatusDetail::kNone; }
  // The message without the code name; empty when OK.
  std::string_view message() const { return state_ ? std::string_view(state_->message) : ""; }
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>" (code and
  // detail kept); OK stays OK.
  Status WithContext(std::string_view context) const;

  bool IsAborted() const { return code() == StatusCode::kAborted; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }
  bool IsInvalidArgument() const { return code() == StatusCode::kInvalidArgument; }
  bool IsResourceExhausted() const { return code() == StatusCode::kResourceExhausted; }
  bool IsUnavailable() const { return code() == StatusCode::kUnavailable; }
  bool IsDataLoss() const { return code() == StatusCode::kDataLoss; }

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.detail() == b.detail() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
    StatusDetail detail = StatusDetail::kNone;
  };

 public:
  // A non-OK status made once and returned often, such as a key not found
  // on an index's operation path: a Status taken from it shares its state
  // without owning it, so making, copying and dropping one neither
  // allocates nor touches a reference count. The state is made once and
  // never freed, so such a Status stays valid even after the Constant's
  // own static storage is torn down at exit.
  //
  //   static const Status::Constant kNotInTree(StatusCode::kNotFound, "key not in the tree");
  //   return kNotInTree.status();
  class Constant {
   public:
    Constant(StatusCode code, std::string_view message)
        : state_(new State{code, std::string(message)}) {  // never freed, by design
      assert(code != StatusCode::kOk && "a Constant is an error");
    }
    Constant(const Constant&) = delete;
    Constant& operator=(const Constant&) = delete;
    Status status() const {
      Status status;
      // The aliasing constructor with an empty owner: a non-null pointer
      // and no control block.
      status.state_ = std::shared_ptr<const State>(std::shared_ptr<const State>(), state_);
      return status;
    }

   private:
    const State* const state_;
  };

 private:
  std::shared_ptr<const State> state_;  // null when OK; immutable, so sharing is safe
};

// Whether `status` says its compute node was fenced (StatusDetail::kFenced;
// WithContext keeps the mark).
inline bool IsFenced(const Status& status) {
  return status.code() == StatusCode::kUnavailable && status.detail() == StatusDetail::kFenced;
}

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr needs a value or a non-OK status");
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // Preconditions: ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace dmidx

// Returns from the enclosing function when `expr` yields a non-OK Status.
#define DMIDX_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::dmidx::Status dmidx_status_ = (expr);        \
    if (!dmidx_status_.ok()) return dmidx_status_; \
  } while (false)

#define DMIDX_CONCAT_INNER_(a, b) a##b
#define DMIDX_CONCAT_(a, b) DMIDX_CONCAT_INNER_(a, b)

// `DMIDX_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or
// returns its Status.
#define DMIDX_ASSIGN_OR_RETURN(lhs, expr) \
  DMIDX_ASSIGN_OR_RETURN_IMPL_(DMIDX_CONCAT_(dmidx_statusor_, __LINE__), lhs, expr)
#define DMIDX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // DMIDX_STATUS_H_
