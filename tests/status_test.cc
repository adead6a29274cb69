// Status, StatusOr, the error macros and Stats arithmetic.
#include "dmidx/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dmidx/stats.h"

namespace dmidx {
namespace {

struct NamedCode {
  StatusCode code;
  const char* name;
  Status (*make)(std::string_view);
};

const std::vector<NamedCode>& AllErrorCodes() {
  static const std::vector<NamedCode> codes = {
      {StatusCode::kInvalidArgument, "InvalidArgument", &Status::InvalidArgument},
      {StatusCode::kNotFound, "NotFound", &Status::NotFound},
      {StatusCode::kAlreadyExists, "AlreadyExists", &Status::AlreadyExists},
      {StatusCode::kOutOfRange, "OutOfRange", &Status::OutOfRange},
      {StatusCode::kResourceExhausted, "ResourceExhausted", &Status::ResourceExhausted},
      {StatusCode::kFailedPrecondition, "FailedPrecondition", &Status::FailedPrecondition},
      {StatusCode::kAborted, "Aborted", &Status::Aborted},
      {StatusCode::kUnavailable, "Unavailable", &Status::Unavailable},
      {StatusCode::kDeadlineExceeded, "DeadlineExceeded", &Status::DeadlineExceeded},
      {StatusCode::kNotSupported, "NotSupported", &Status::NotSupported},
      {StatusCode::kIoError, "IoError", &Status::IoError},
      {StatusCode::kInternal, "Internal", &Status::Internal},
      {StatusCode::kDataLoss, "DataLoss", &Status::DataLoss},
  };
  return codes;
}

TEST(StatusTest, DefaultIsOk) {
  const Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_EQ(status, Status::Ok());
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
}

TEST(StatusTest, EveryFactoryMakesItsCode) {
  for (const NamedCode& entry : AllErrorCodes()) {
    SCOPED_TRACE(entry.name);
    const Status status = entry.make("what went wrong");
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(status.code(), entry.code);
    EXPECT_EQ(status.message(), "what went wrong");
    EXPECT_EQ(StatusCodeName(entry.code), entry.name);
    EXPECT_EQ(status.ToString(), std::string(entry.name) + ": what went wrong");
    EXPECT_EQ(status, Status(entry.code, "what went wrong"));
  }
}

TEST(StatusTest, OkCodeWithMessageIsOk) {
  const Status status(StatusCode::kOk, "ignored");
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.ToString(), "OK");
}

TEST(StatusTest, EmptyMessageHasNoSeparator) {
  EXPECT_EQ(Status::NotFound("").ToString(), "NotFound");
}

TEST(StatusTest, Predicates) {
  EXPECT_TRUE(Status::Aborted("x").IsAborted());
  EXPECT_TRUE(Status::NotFound("x").IsNotFound());
  EXPECT_TRUE(Status::InvalidArgument("x").IsInvalidArgument());
  EXPECT_TRUE(Status::ResourceExhausted("x").IsResourceExhausted());
  EXPECT_TRUE(Status::Unavailable("x").IsUnavailable());
  // A lost CAS (retry) is distinct from an unreachable node.
  EXPECT_FALSE(Status::Aborted("x").IsUnavailable());
  EXPECT_FALSE(Status::Unavailable("x").IsAborted());
  EXPECT_FALSE(Status::Ok().IsAborted());
  EXPECT_TRUE(Status::DataLoss("x").IsDataLoss());
  // Damage that stays is not a transient failure to retry.
  EXPECT_FALSE(Status::DataLoss("x").IsAborted());
  EXPECT_FALSE(Status::Aborted("x").IsDataLoss());
}

// Codes cross process boundaries as numbers (memory-node control protocol,
// bootstrap handshake): new codes go last, old values never move.
TEST(StatusTest, CodeNumbersAreStable) {
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), 12);
  EXPECT_EQ(static_cast<int>(StatusCode::kDataLoss), 13);
}

TEST(StatusTest, EqualityComparesCodeAndMessage) {
  EXPECT_EQ(Status::Aborted("a"), Status::Aborted("a"));
  EXPECT_NE(Status::Aborted("a"), Status::Aborted("b"));
  EXPECT_NE(Status::Aborted("a"), Status::Unavailable("a"));
  EXPECT_NE(Status::Aborted(""), Status::Ok());
}

TEST(StatusTest, CopiesAndMovesKeepCodeAndMessage) {
  const Status original = Status::IoError("disk on fire");
  Status copy = original;
  EXPECT_EQ(copy, original);
  Status moved = std::move(copy);
  EXPECT_EQ(moved, original);
  Status assigned;
  assigned = original;
  EXPECT_EQ(assigned, original);
  assigned = Status::Ok();
  EXPECT_TRUE(assigned.ok());
  EXPECT_EQ(original.message(), "disk on fire");
}

TEST(StatusTest, WithContextPrefixesMessage) {
  const Status status = Status::Unavailable("connection refused");
  const Status wrapped = status.WithContext("memory node 3");
  EXPECT_EQ(wrapped.code(), StatusCode::kUnavailable);
  EXPECT_EQ(wrapped.message(), "memory node 3: connection refused");
  EXPECT_EQ(wrapped.ToString(), "Unavailable: memory node 3: connection refused");
  // The original is unchanged; contexts nest outermost first.
  EXPECT_EQ(status.message(), "connection refused");
  EXPECT_EQ(wrapped.WithContext("open").message(), "open: memory node 3: connection refused");
}

// A detail tells statuses of one code apart without their messages: made
// with the status, kept by copies, WithContext and StatusOr, part of ==,
// not shown by ToString; an OK status has none.
TEST(StatusTest, DetailStaysWithTheStatus) {
  const Status plain = Status::DeadlineExceeded("late");
  const Status marked(StatusCode::kDeadlineExceeded, "late", StatusDetail::kLockTimeout);
  EXPECT_EQ(plain.detail(), StatusDetail::kNone);
  EXPECT_EQ(marked.detail(), StatusDetail::kLockTimeout);
  EXPECT_EQ(Status().detail(), StatusDetail::kNone);
  EXPECT_EQ(Status(StatusCode::kOk, "", StatusDetail::kLockTimeout).detail(), StatusDetail::kNone);
  EXPECT_NE(marked, plain);
  EXPECT_EQ(marked.ToString(), plain.ToString());
  const Status copy = marked;
  EXPECT_EQ(copy, marked);
  const Status wrapped = marked.WithContext("update");
  EXPECT_EQ(wrapped.detail(), StatusDetail::kLockTimeout);
  EXPECT_EQ(wrapped.message(), "update: late");
  const StatusOr<int> failed = marked;
  EXPECT_EQ(failed.status().detail(), StatusDetail::kLockTimeout);
}

// IsFenced needs both the code and the mark, and survives WithContext.
TEST(StatusTest, IsFencedNeedsUnavailableMarkedFenced) {
  const Status fenced(StatusCode::kUnavailable, "compute node 3 was fenced", StatusDetail::kFenced);
  EXPECT_TRUE(IsFenced(fenced));
  EXPECT_TRUE(IsFenced(fenced.WithContext("lookup")));
  EXPECT_FALSE(IsFenced(Status::Unavailable("compute node 3 was fenced")));
  EXPECT_FALSE(IsFenced(Status(StatusCode::kAborted, "fenced", StatusDetail::kFenced)));
  EXPECT_FALSE(IsFenced(Status()));
}

TEST(StatusTest, WithContextKeepsOk) {
  const Status wrapped = Status::Ok().WithContext("anything");
  EXPECT_TRUE(wrapped.ok());
  EXPECT_EQ(wrapped.message(), "");
}

TEST(StatusOrTest, HoldsValue) {
  StatusOr<int> result = 42;
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result.status().ok());
  EXPECT_EQ(result.value(), 42);
  EXPECT_EQ(*result, 42);
  *result = 7;
  EXPECT_EQ(result.value(), 7);
}

TEST(StatusOrTest, HoldsError) {
  const StatusOr<std::string> result = Status::NotFound("no such key");
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status(), Status::NotFound("no such key"));
}

TEST(StatusOrTest, ArrowReachesMembers) {
  StatusOr<std::string> result = std::string("hello");
  EXPECT_EQ(result->size(), 5u);
  const StatusOr<std::string>& as_const = result;
  EXPECT_EQ(as_const->front(), 'h');
}

TEST(StatusOrTest, MoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> result = std::make_unique<int>(5);
  ASSERT_TRUE(result.ok());
  std::unique_ptr<int> taken = std::move(result).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 5);
}

#ifdef NDEBUG
TEST(StatusOrTest, OkStatusWithoutValueBecomesInternal) {
  const StatusOr<int> result = Status::Ok();
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInternal);
}
#else
TEST(StatusOrDeathTest, OkStatusWithoutValueAsserts) {
  EXPECT_DEATH({ const StatusOr<int> result = Status::Ok(); }, "needs a value");
}
#endif

// ---- macros -----------------------------------------------------------------

Status Succeed(int* calls) {
  ++*calls;
  return Status::Ok();
}

Status Fail(int* calls) {
  ++*calls;
  return Status::Aborted("lost the CAS");
}

Status TwoSteps(Status (*first)(int*), Status (*second)(int*), int* calls, bool* reached_end) {
  DMIDX_RETURN_IF_ERROR(first(calls));
  DMIDX_RETURN_IF_ERROR(second(calls));
  *reached_end = true;
  return Status::Ok();
}

TEST(MacroTest, ReturnIfErrorPassesOk) {
  int calls = 0;
  bool reached_end = false;
  EXPECT_TRUE(TwoSteps(&Succeed, &Succeed, &calls, &reached_end).ok());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(reached_end);
}

TEST(MacroTest, ReturnIfErrorStopsAtFirstError) {
  int calls = 0;
  bool reached_end = false;
  EXPECT_EQ(TwoSteps(&Fail, &Succeed, &calls, &reached_end), Status::Aborted("lost the CAS"));
  EXPECT_EQ(calls, 1);  // the second step never ran
  EXPECT_FALSE(reached_end);
}

TEST(MacroTest, ReturnIfErrorEvaluatesOnce) {
  int calls = 0;
  auto once = [&]() -> Status {
    DMIDX_RETURN_IF_ERROR(Succeed(&calls));
    return Status::Ok();
  };
  EXPECT_TRUE(once().ok());
  EXPECT_EQ(calls, 1);
}

StatusOr<int> Parse(bool good, int value) {
  if (!good) return Status::InvalidArgument("not a number");
  return value;
}

StatusOr<int> SumOfTwo(bool first_good, bool second_good) {
  DMIDX_ASSIGN_OR_RETURN(int a, Parse(first_good, 2));
  // Two uses in one function need distinct temporaries.
  DMIDX_ASSIGN_OR_RETURN(const int b, Parse(second_good, 3));
  return a + b;
}

TEST(MacroTest, AssignOrReturnDeclaresValue) {
  const StatusOr<int> sum = SumOfTwo(true, true);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 5);
}

TEST(MacroTest, AssignOrReturnReturnsError) {
  EXPECT_EQ(SumOfTwo(false, true).status(), Status::InvalidArgument("not a number"));
  EXPECT_EQ(SumOfTwo(true, false).status(), Status::InvalidArgument("not a number"));
}

Status AssignToExisting(bool good, int* out) {
  int value = -1;
  DMIDX_ASSIGN_OR_RETURN(value, Parse(good, 9));
  *out = value;
  return Status::Ok();
}

TEST(MacroTest, AssignOrReturnAssignsExistingVariable) {
  int out = 0;
  EXPECT_TRUE(AssignToExisting(true, &out).ok());
  EXPECT_EQ(out, 9);
  out = 0;
  EXPECT_TRUE(AssignToExisting(false, &out).IsInvalidArgument());
  EXPECT_EQ(out, 0);
}

StatusOr<std::unique_ptr<int>> MakeBox(int value) {
  return std::make_unique<int>(value);
}

StatusOr<int> Unbox() {
  DMIDX_ASSIGN_OR_RETURN(auto box, MakeBox(11));
  DMIDX_ASSIGN_OR_RETURN(std::unique_ptr<int> second, MakeBox(12));
  return *box + *second;
}

TEST(MacroTest, AssignOrReturnMovesMoveOnlyValues) {
  const StatusOr<int> sum = Unbox();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 23);
}

// ---- Stats ------------------------------------------------------------------

Stats Sample(uint64_t base) {
  Stats stats;
  stats.round_trips = base + 1;
  stats.batches = base + 2;
  stats.reads = base + 3;
  stats.writes = base + 4;
  stats.compare_swaps = base + 5;
  stats.fetch_adds = base + 6;
  stats.bytes_read = base + 7;
  stats.bytes_written = base + 8;
  stats.compare_swap_failures = base + 9;
  return stats;
}

TEST(StatsTest, DefaultIsZero) {
  const Stats stats;
  EXPECT_EQ(stats.ToString(),
            "round_trips=0 batches=0 reads=0 writes=0 compare_swaps=0 fetch_adds=0 "
            "bytes_read=0 bytes_written=0 compare_swap_failures=0");
}

TEST(StatsTest, ToStringNamesEveryCounter) {
  EXPECT_EQ(Sample(0).ToString(),
            "round_trips=1 batches=2 reads=3 writes=4 compare_swaps=5 fetch_adds=6 "
            "bytes_read=7 bytes_written=8 compare_swap_failures=9");
}

TEST(StatsTest, AddAddsEveryCounter) {
  const Stats sum = Sample(0) + Sample(100);
  EXPECT_EQ(sum.round_trips, 102u);
  EXPECT_EQ(sum.batches, 104u);
  EXPECT_EQ(sum.reads, 106u);
  EXPECT_EQ(sum.writes, 108u);
  EXPECT_EQ(sum.compare_swaps, 110u);
  EXPECT_EQ(sum.fetch_adds, 112u);
  EXPECT_EQ(sum.bytes_read, 114u);
  EXPECT_EQ(sum.bytes_written, 116u);
  EXPECT_EQ(sum.compare_swap_failures, 118u);

  Stats accumulated;
  accumulated += Sample(0);
  accumulated += Sample(100);
  EXPECT_EQ(accumulated, sum);
}

TEST(StatsTest, SubtractGivesDelta) {
  const Stats before = Sample(10);
  const Stats after = Sample(10) + Sample(1000);
  EXPECT_EQ(after - before, Sample(1000));
  EXPECT_EQ(after - after, Stats{});
  // The operands are taken by value and stay unchanged.
  EXPECT_EQ(before, Sample(10));
}

TEST(StatsTest, EqualityComparesEveryCounter) {
  Stats a = Sample(0);
  Stats b = Sample(0);
  EXPECT_EQ(a, b);
  b.compare_swap_failures += 1;
  EXPECT_NE(a, b);
  a.compare_swap_failures += 1;
  a.round_trips += 1;
  EXPECT_NE(a, b);
}

// A Constant's statuses carry its code and message, compare equal to the
// same status made the usual way, and stay valid after every copy is gone.
TEST(StatusTest, ConstantMakesTheSameStatusEveryTime) {
  static const Status::Constant kMissing(StatusCode::kNotFound, "key not in the tree");
  const Status first = kMissing.status();
  EXPECT_FALSE(first.ok());
  EXPECT_TRUE(first.IsNotFound());
  EXPECT_EQ(first.message(), "key not in the tree");
  EXPECT_EQ(first.ToString(), "NotFound: key not in the tree");
  EXPECT_EQ(first, Status::NotFound("key not in the tree"));
  EXPECT_NE(first, Status::NotFound("another message"));
  {
    Status copy = first;
    Status moved = std::move(copy);
    EXPECT_EQ(moved, first);
    EXPECT_EQ(moved.WithContext("lookup").ToString(), "NotFound: lookup: key not in the tree");
  }
  StatusOr<int> from_constant = kMissing.status();
  EXPECT_TRUE(from_constant.status().IsNotFound());
  EXPECT_EQ(kMissing.status(), first);
}

}  // namespace
}  // namespace dmidx
