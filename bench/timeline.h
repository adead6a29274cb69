// Throughput over time: a phase's operations per window of the cluster's
// clock (virtual time under sim, real time otherwise), counted per context
// while the phase runs and merged when it ends; and the failure
// experiment's recovery time, read off a timeline.
//
//   TimelineRecorder recorder;               // one per context
//   recorder.Start(phase_start, 10ms, 100);
//   for (uint64_t i = 0; ...; ++i) {
//     ... run operation i, then read the clock: end ...
//     recorder.Ended(end, i);                // one compare while in a window
//     if (!status.ok()) recorder.Failed(status.code());  // after Ended()
//   }
//   Timeline mine = recorder.Finish(n, phase_end);
//
// A window counts the operations that ended in it: `ops` those that
// succeeded (NotFound included, as everywhere in the bench), `failed` the
// others by status code. Windows are [start + w * interval, start + (w + 1)
// * interval) from the phase's start, up to the one holding the phase's
// end, which is shorter than the others (or empty).
#ifndef DMIDX_BENCH_TIMELINE_H_
#define DMIDX_BENCH_TIMELINE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dmidx/status.h"

namespace dmidx::bench {

using std::chrono::nanoseconds;

inline constexpr size_t kStatusCodes = static_cast<size_t>(StatusCode::kDataLoss) + 1;

// Operations that failed, by status code (index: StatusCode).
using FailedByCode = std::array<uint64_t, kStatusCodes>;
uint64_t Total(const FailedByCode& failed);
void Add(FailedByCode* sum, const FailedByCode& more);
// "Unavailable 3, DeadlineExceeded 1", in code order; "" for none.
std::string FailedText(const FailedByCode& failed);
// {"Unavailable": 3, ...}: only the codes that occurred.
nlohmann::json FailedJson(const FailedByCode& failed);
// The inverse; throws nlohmann's exceptions on a malformed object and
// std::invalid_argument on an unknown code name.
FailedByCode FailedFromJson(const nlohmann::json& json);

struct TimelineWindow {
  uint64_t ops = 0;  // operations that ended in the window and succeeded
  FailedByCode failed{};
};

struct Timeline {
  // The windows' length; 0: no timeline was kept.
  nanoseconds interval{0};
  std::vector<TimelineWindow> windows;

  // Adds another context's or compute node's timeline of the same phase,
  // window by window. The coarser interval wins (recorders double theirs
  // in long phases: the finer one is folded into it); so does the longer.
  void Merge(const Timeline& other);
  // `other` taken away, window by window (the survivors: all minus the
  // killed node). `other` must be a part of this timeline.
  Timeline Minus(const Timeline& other) const;
  // Doubles the interval `times` times, adding windows pairwise.
  void Coarsen(int times);
};

// Windows as JSON, [{"start_ns", "ops", "failed": {code: count}}, ...],
// and back (InvalidArgument for a malformed array).
nlohmann::json TimelineJson(const Timeline& timeline);
StatusOr<Timeline> TimelineFromJson(const nlohmann::json& windows, nanoseconds interval);

// One context's timeline while its phase runs. Ended() is the hot path: a
// compare of the operation's end with the current window's end, and only
// when a window ended does it record how many operations ended before (a
// caller may make the compare itself, against window_end(), and call
// Ended() only past it); failures, rare, go to a list. Not thread-safe:
// one per context.
class TimelineRecorder {
 public:
  // At most this many windows are kept: past it the recorder doubles its
  // interval (and Timeline::Merge folds the other contexts' windows to
  // match), so that a long phase keeps a bounded timeline.
  static constexpr size_t kMaxWindows = 4096;

  // A phase starting at `start` on the cluster's clock, in windows of
  // `interval` (0: records nothing); `expected_windows` are reserved.
  void Start(nanoseconds start, nanoseconds interval, size_t expected_windows);
  // Operation number `n` of this context in the phase (from 0) ended at
  // `end`; every operation before it ended earlier.
  void Ended(nanoseconds end, uint64_t n) {
    if (end >= window_end_) [[unlikely]]
      Advance(end, n);
  }
  // The operation last passed to Ended() failed with `code`.
  void Failed(StatusCode code);
  // Where the current window ends (nanoseconds::max() without an interval):
  // Ended() of an earlier end does nothing.
  nanoseconds window_end() const { return window_end_; }
  // This context's timeline: `operations` ended in all, and the phase
  // ended at `end` (its last window holds `end`).
  Timeline Finish(uint64_t operations, nanoseconds end) const;

 private:
  void Advance(nanoseconds end, uint64_t n);
  void Halve();
  size_t current() const { return ended_before_.size(); }

  nanoseconds start_{0};
  nanoseconds interval_{0};
  nanoseconds window_end_ = nanoseconds::max();
  // ended_before_[w]: operations that ended before window w + 1 began.
  std::vector<uint64_t> ended_before_;
  struct Failure {
    uint64_t window;
    StatusCode code;
  };
  std::vector<Failure> failures_;
};

// How long the survivors of a killed compute node took to get their
// throughput back, measured in whole windows of their timeline: the mean
// over the windows that ended by the kill is the baseline; recovered at
// the start of the first window, from the one holding the kill on, from
// which the survivors' mean over `span` (rounded up to whole windows, all
// of them ended within the phase) is at least `fraction` of the baseline,
// and stays so: so is every later span that ends within the phase.
// The time is counted from the kill to that window's start (0 if that is
// the window holding the kill: no dip worth a window), so it is exact to
// within one window.
struct Recovery {
  double fraction = 0.9;
  nanoseconds span{0};
  bool measurable = false;  // a window ended before the kill (a baseline)
  double baseline_ops_per_second = 0;
  bool recovered = false;
  nanoseconds time{0};  // from the kill; when recovered
  // The survivors' lowest throughput in a whole window from the one
  // holding the kill on, as a fraction of the baseline (how deep the dip
  // went); 1 when none ended within the phase.
  double lowest_fraction = 1;
};
Recovery MeasureRecovery(const Timeline& survivors, nanoseconds killed_at, nanoseconds phase_end,
                         double fraction, nanoseconds span);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_TIMELINE_H_
