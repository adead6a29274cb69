// The bench's timelines (bench/timeline.h): a context's recorder puts each
// operation and failure in the window its end falls in, doubles its
// interval past kMaxWindows, merges with others and survives JSON; the
// failure experiment's recovery time is read off the survivors' windows.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "bench/result.h"
#include "bench/timeline.h"

namespace dmidx::bench {
namespace {

using std::chrono::milliseconds;

std::vector<uint64_t> Ops(const Timeline& timeline) {
  std::vector<uint64_t> ops;
  for (const TimelineWindow& window : timeline.windows)
    ops.push_back(window.ops);
  return ops;
}

uint64_t FailedIn(const Timeline& timeline, size_t window, StatusCode code) {
  return timeline.windows[window].failed[static_cast<size_t>(code)];
}

TEST(BenchTimeline, OperationsAndFailuresLandInTheWindowTheirEndFallsIn) {
  TimelineRecorder recorder;
  const nanoseconds start = milliseconds(1000);
  recorder.Start(start, milliseconds(10), 8);
  // Ends at +1, +2, +15, +15 (fails), +41 (fails), +41 ms.
  const int64_t ends_ms[] = {1, 2, 15, 15, 41, 41};
  for (uint64_t i = 0; i < 6; ++i) {
    recorder.Ended(start + milliseconds(ends_ms[i]), i);
    if (i == 3) recorder.Failed(StatusCode::kUnavailable);
    if (i == 4) recorder.Failed(StatusCode::kDeadlineExceeded);
  }
  // The phase ends at +52 ms: windows 0..5, the last one short.
  const Timeline timeline = recorder.Finish(6, start + milliseconds(52));
  EXPECT_EQ(timeline.interval, milliseconds(10));
  EXPECT_EQ(Ops(timeline), (std::vector<uint64_t>{2, 1, 0, 0, 1, 0}));
  EXPECT_EQ(FailedIn(timeline, 1, StatusCode::kUnavailable), 1u);
  EXPECT_EQ(FailedIn(timeline, 4, StatusCode::kDeadlineExceeded), 1u);
  EXPECT_EQ(Total(timeline.windows[0].failed), 0u);
}

TEST(BenchTimeline, ARecorderWithoutAnIntervalKeepsNothing) {
  TimelineRecorder recorder;
  recorder.Start(nanoseconds(0), nanoseconds(0), 0);
  recorder.Ended(milliseconds(5), 0);
  const Timeline timeline = recorder.Finish(1, milliseconds(6));
  EXPECT_EQ(timeline.interval.count(), 0);
  EXPECT_TRUE(timeline.windows.empty());
}

TEST(BenchTimeline, ALongPhaseDoublesTheIntervalAndKeepsEveryOperation) {
  TimelineRecorder recorder;
  recorder.Start(nanoseconds(0), nanoseconds(10), 0);
  // One operation per 10 ns over 3 * kMaxWindows windows, one failure each
  // 1000.
  const uint64_t operations = 3 * TimelineRecorder::kMaxWindows;
  for (uint64_t i = 0; i < operations; ++i) {
    recorder.Ended(nanoseconds(10 * static_cast<int64_t>(i) + 5), i);
    if (i % 1000 == 0) recorder.Failed(StatusCode::kAborted);
  }
  const Timeline timeline = recorder.Finish(operations, nanoseconds(10 * operations));
  EXPECT_EQ(timeline.interval, nanoseconds(40));  // doubled twice
  EXPECT_LE(timeline.windows.size(), TimelineRecorder::kMaxWindows + 1);
  uint64_t ops = 0, failed = 0;
  for (const TimelineWindow& window : timeline.windows) {
    ops += window.ops;
    failed += Total(window.failed);
  }
  EXPECT_EQ(ops + failed, operations);
  EXPECT_EQ(failed, (operations + 999) / 1000);
  // Four operations per 40 ns window, failures included.
  EXPECT_EQ(timeline.windows[1].ops + Total(timeline.windows[1].failed), 4u);
  EXPECT_EQ(FailedIn(timeline, 250, StatusCode::kAborted), 1u) << "op 1000 ends at 10005 ns";
}

TEST(BenchTimeline, MergeFoldsTheFinerIntervalAndMinusTakesAPartAway) {
  Timeline fine{nanoseconds(10), {{1, {}}, {2, {}}, {3, {}}, {4, {}}, {5, {}}}};
  fine.windows[4].failed[static_cast<size_t>(StatusCode::kUnavailable)] = 2;
  Timeline coarse{nanoseconds(20), {{10, {}}, {20, {}}}};
  Timeline all;
  all.Merge(coarse);
  all.Merge(fine);
  EXPECT_EQ(all.interval, nanoseconds(20));
  EXPECT_EQ(Ops(all), (std::vector<uint64_t>{13, 27, 5}));
  EXPECT_EQ(FailedIn(all, 2, StatusCode::kUnavailable), 2u);
  const Timeline rest = all.Minus(fine);
  EXPECT_EQ(Ops(rest), (std::vector<uint64_t>{10, 20, 0}));
  EXPECT_EQ(Total(rest.windows[2].failed), 0u);
}

TEST(BenchTimeline, TimelinesAndFailuresSurviveJson) {
  Timeline timeline{milliseconds(10), {{7, {}}, {0, {}}}};
  timeline.windows[1].failed[static_cast<size_t>(StatusCode::kDeadlineExceeded)] = 3;
  const nlohmann::json json = TimelineJson(timeline);
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[1]["start_ns"], 10000000);
  EXPECT_EQ(json[1]["failed"]["DeadlineExceeded"], 3);
  StatusOr<Timeline> back = TimelineFromJson(json, milliseconds(10));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(Ops(*back), Ops(timeline));
  EXPECT_EQ(back->windows[1].failed, timeline.windows[1].failed);
  nlohmann::json bad = json;
  bad[0]["failed"]["NoSuchCode"] = 1;
  EXPECT_TRUE(TimelineFromJson(bad, milliseconds(10)).status().IsInvalidArgument());
}

// Survivors at 100 ops per 10 ms window, killed at 35 ms.
Timeline Survivors(std::vector<uint64_t> ops) {
  Timeline timeline{milliseconds(10), {}};
  for (uint64_t count : ops)
    timeline.windows.push_back({count, {}});
  return timeline;
}

TEST(BenchTimeline, RecoveryIsTheStartOfTheFirstSpanBackThatStaysBack) {
  // Baseline: windows 0..2 (ended by the kill at 35 ms), 100 per window.
  // The dip, then back from window 7 (70 ms) for two windows, then a
  // collapse in window 9 and back for good from window 10.
  const Timeline survivors = Survivors({100, 100, 100, 90, 0, 10, 50, 95, 100, 20, 100, 100, 100});
  const Recovery recovery =
      MeasureRecovery(survivors, milliseconds(35), milliseconds(130), 0.9, milliseconds(20));
  ASSERT_TRUE(recovery.measurable);
  EXPECT_DOUBLE_EQ(recovery.baseline_ops_per_second, 10000);
  ASSERT_TRUE(recovery.recovered);
  EXPECT_EQ(recovery.time, milliseconds(65)) << "window 10 starts 65 ms after the kill";
  EXPECT_DOUBLE_EQ(recovery.lowest_fraction, 0);
}

TEST(BenchTimeline, NoDipIsARecoveryOfZeroAndAPhaseEndingLowIsNone) {
  const Recovery none_lost =
      MeasureRecovery(Survivors({100, 100, 100, 100, 100, 100}), milliseconds(25), milliseconds(60),
                      0.9, milliseconds(10));
  ASSERT_TRUE(none_lost.recovered);
  EXPECT_EQ(none_lost.time.count(), 0);
  EXPECT_DOUBLE_EQ(none_lost.lowest_fraction, 1);
  // The last window is short (the phase ends at 55 ms): it is not judged.
  const Recovery low = MeasureRecovery(Survivors({100, 100, 100, 50, 80, 100}), milliseconds(25),
                                       milliseconds(55), 0.9, milliseconds(10));
  EXPECT_TRUE(low.measurable);
  EXPECT_FALSE(low.recovered);
  EXPECT_DOUBLE_EQ(low.lowest_fraction, 0.5);
  // No window ended before the kill: no baseline.
  EXPECT_FALSE(MeasureRecovery(Survivors({100, 100}), milliseconds(5), milliseconds(20), 0.9,
                               milliseconds(10))
                   .measurable);
}

TEST(BenchTimeline, APhaseWithAKillSurvivesJsonAndMerges) {
  PhaseResult phase;
  phase.name = "run";
  phase.seconds = 0.05;
  phase.operations = 500;
  phase.failed[static_cast<size_t>(StatusCode::kUnavailable)] = 4;
  phase.timeline = Survivors({100, 100, 100, 100, 96});
  phase.timeline.windows[4].failed[static_cast<size_t>(StatusCode::kUnavailable)] = 4;
  KillResult& kill = phase.kill.emplace();
  kill.compute_node = 2;
  kill.at = milliseconds(30);
  kill.killed_at = milliseconds(31);
  kill.recovery_span = milliseconds(10);
  kill.operations = 130;
  kill.failed[static_cast<size_t>(StatusCode::kUnavailable)] = 4;
  kill.timeline = Survivors({40, 40, 40, 6});
  kill.timeline.windows[3].failed[static_cast<size_t>(StatusCode::kUnavailable)] = 4;
  const nlohmann::json json = ToJson(phase);
  EXPECT_EQ(json["kill"]["survivors"]["operations"], 370);
  EXPECT_TRUE(json["kill"]["survivors"]["failed"].empty());
  EXPECT_EQ(json["kill"]["killed"]["failed"]["Unavailable"], 4);
  EXPECT_EQ(json["kill"]["killed_at_ns"], 31000000);
  EXPECT_EQ(json["timeline"].size(), 5u);
  EXPECT_EQ(json["timeline_interval_ns"], 10000000);
  StatusOr<PhaseResult> back = PhaseFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->kill.has_value());
  EXPECT_EQ(back->kill->killed_at, milliseconds(31));
  EXPECT_EQ(Ops(back->kill->timeline), Ops(kill.timeline));
  EXPECT_EQ(ToJson(*back), json);
  // A result without the fields (written before them) still reads.
  nlohmann::json old = json;
  for (const char* field : {"failed", "timeline", "timeline_interval_ns", "kill"})
    old.erase(field);
  StatusOr<PhaseResult> plain = PhaseFromJson(old);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->kill.has_value());
  EXPECT_EQ(plain->timeline.interval.count(), 0);
  // Merged with another node's share, windows and failures add.
  const PhaseResult other = *back;
  back->Merge(other);
  EXPECT_EQ(back->timeline.windows[0].ops, 200u);
  EXPECT_EQ(back->kill->operations, 260u);
  EXPECT_EQ(Total(back->failed), 8u);
}

}  // namespace
}  // namespace dmidx::bench
