#include "bench/timeline.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace dmidx::bench {

uint64_t Total(const FailedByCode& failed) {
  uint64_t total = 0;
  for (uint64_t count : failed)
    total += count;
  return total;
}

void Add(FailedByCode* sum, const FailedByCode& more) {
  for (size_t code = 0; code < kStatusCodes; ++code)
    (*sum)[code] += more[code];
}

std::string FailedText(const FailedByCode& failed) {
  std::string text;
  for (size_t code = 0; code < kStatusCodes; ++code) {
    if (failed[code] == 0) continue;
    if (!text.empty()) text += ", ";
    text += std::string(StatusCodeName(static_cast<StatusCode>(code))) + " " +
            std::to_string(failed[code]);
  }
  return text;
}

nlohmann::json FailedJson(const FailedByCode& failed) {
  nlohmann::json json = nlohmann::json::object();
  for (size_t code = 0; code < kStatusCodes; ++code) {
    if (failed[code] != 0)
      json[std::string(StatusCodeName(static_cast<StatusCode>(code)))] = failed[code];
  }
  return json;
}

FailedByCode FailedFromJson(const nlohmann::json& json) {
  FailedByCode failed{};
  for (const auto& [name, count] : json.items()) {
    size_t code = 0;
    while (code < kStatusCodes && name != StatusCodeName(static_cast<StatusCode>(code)))
      ++code;
    if (code == kStatusCodes) throw std::invalid_argument("unknown status code '" + name + "'");
    failed[code] = count.get<uint64_t>();
  }
  return failed;
}

void Timeline::Coarsen(int times) {
  for (int i = 0; i < times; ++i) {
    std::vector<TimelineWindow> halved((windows.size() + 1) / 2);
    for (size_t w = 0; w < windows.size(); ++w) {
      halved[w / 2].ops += windows[w].ops;
      Add(&halved[w / 2].failed, windows[w].failed);
    }
    windows = std::move(halved);
    interval *= 2;
  }
}

namespace {

// How many doublings take `fine` to `coarse` (both the recorders' base
// interval times a power of two).
int Doublings(nanoseconds fine, nanoseconds coarse) {
  const auto ratio = static_cast<uint64_t>(coarse.count() / fine.count());
  return std::bit_width(ratio) - 1;
}

}  // namespace

void Timeline::Merge(const Timeline& other) {
  if (other.interval.count() == 0) return;
  if (interval.count() == 0) {
    *this = other;
    return;
  }
  Timeline matched = other;
  if (matched.interval < interval) matched.Coarsen(Doublings(matched.interval, interval));
  if (interval < matched.interval) Coarsen(Doublings(interval, matched.interval));
  if (windows.size() < matched.windows.size()) windows.resize(matched.windows.size());
  for (size_t w = 0; w < matched.windows.size(); ++w) {
    windows[w].ops += matched.windows[w].ops;
    Add(&windows[w].failed, matched.windows[w].failed);
  }
}

Timeline Timeline::Minus(const Timeline& other) const {
  Timeline rest = *this;
  if (other.interval.count() == 0 || interval.count() == 0) return rest;
  Timeline part = other;
  if (part.interval < interval) part.Coarsen(Doublings(part.interval, interval));
  for (size_t w = 0; w < std::min(part.windows.size(), rest.windows.size()); ++w) {
    rest.windows[w].ops -= std::min(rest.windows[w].ops, part.windows[w].ops);
    for (size_t code = 0; code < kStatusCodes; ++code) {
      rest.windows[w].failed[code] -=
          std::min(rest.windows[w].failed[code], part.windows[w].failed[code]);
    }
  }
  return rest;
}

nlohmann::json TimelineJson(const Timeline& timeline) {
  nlohmann::json windows = nlohmann::json::array();
  for (size_t w = 0; w < timeline.windows.size(); ++w) {
    windows.push_back({{"start_ns", static_cast<int64_t>(w) * timeline.interval.count()},
                       {"ops", timeline.windows[w].ops},
                       {"failed", FailedJson(timeline.windows[w].failed)}});
  }
  return windows;
}

StatusOr<Timeline> TimelineFromJson(const nlohmann::json& windows, nanoseconds interval) {
  try {
    Timeline timeline;
    timeline.interval = interval;
    for (const auto& window : windows) {
      timeline.windows.push_back(
          {window.at("ops").get<uint64_t>(), FailedFromJson(window.at("failed"))});
    }
    return timeline;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("malformed timeline: ") + e.what());
  }
}

void TimelineRecorder::Start(nanoseconds start, nanoseconds interval, size_t expected_windows) {
  start_ = start;
  interval_ = interval;
  window_end_ = interval.count() > 0 ? start + interval : nanoseconds::max();
  ended_before_.clear();
  ended_before_.reserve(std::min(expected_windows, kMaxWindows));
  failures_.clear();
}

void TimelineRecorder::Advance(nanoseconds end, uint64_t n) {
  // Every window that ended before `end` held the n operations before it.
  while (end >= window_end_) {
    ended_before_.push_back(n);
    window_end_ += interval_;
    if (ended_before_.size() == kMaxWindows) Halve();
  }
}

void TimelineRecorder::Halve() {
  // Windows 2k and 2k + 1 become window k: it ended where 2k + 1 did. The
  // current window (kMaxWindows, even) becomes the first half of the next.
  std::vector<uint64_t> halved;
  halved.reserve(kMaxWindows);
  for (size_t w = 1; w < ended_before_.size(); w += 2)
    halved.push_back(ended_before_[w]);
  ended_before_ = std::move(halved);
  for (Failure& failure : failures_)
    failure.window /= 2;
  interval_ *= 2;
  window_end_ = start_ + interval_ * static_cast<int64_t>(ended_before_.size() + 1);
}

void TimelineRecorder::Failed(StatusCode code) {
  failures_.push_back({current(), code});
}

Timeline TimelineRecorder::Finish(uint64_t operations, nanoseconds end) const {
  Timeline timeline;
  if (interval_.count() == 0) return timeline;
  timeline.interval = interval_;
  const auto through_end = static_cast<size_t>(std::max<int64_t>(0, (end - start_) / interval_));
  timeline.windows.resize(std::max(through_end, current()) + 1);
  uint64_t before = 0;
  for (size_t w = 0; w < current(); ++w) {
    timeline.windows[w].ops = ended_before_[w] - before;
    before = ended_before_[w];
  }
  timeline.windows[current()].ops = operations - before;
  for (const Failure& failure : failures_) {
    TimelineWindow& window = timeline.windows[failure.window];
    --window.ops;
    ++window.failed[static_cast<size_t>(failure.code)];
  }
  return timeline;
}

Recovery MeasureRecovery(const Timeline& survivors, nanoseconds killed_at, nanoseconds phase_end,
                         double fraction, nanoseconds span) {
  Recovery recovery;
  recovery.fraction = fraction;
  recovery.span = span;
  const nanoseconds interval = survivors.interval;
  if (interval.count() == 0 || killed_at.count() < 0) return recovery;
  auto rate = [&](size_t first, size_t count) {
    uint64_t ops = 0;
    for (size_t w = first; w < first + count; ++w)
      ops += survivors.windows[w].ops;
    return static_cast<double>(ops) /
           std::chrono::duration<double>(interval * static_cast<int64_t>(count)).count();
  };
  // Windows 0 .. before - 1 ended by the kill; `whole` ended by the phase's end.
  const size_t whole =
      std::min(survivors.windows.size(), static_cast<size_t>(phase_end / interval));
  const size_t before = std::min(whole, static_cast<size_t>(killed_at / interval));
  if (before == 0) return recovery;
  recovery.baseline_ops_per_second = rate(0, before);
  recovery.measurable = recovery.baseline_ops_per_second > 0;
  if (!recovery.measurable) return recovery;
  // From the window holding the kill: one that is back already, mostly
  // after the kill, means no dip (time 0).
  const auto first_after = static_cast<size_t>(killed_at / interval);
  const auto needed = static_cast<size_t>(
      std::max<int64_t>(1, (span + interval - nanoseconds(1)) / interval));  // ceil
  for (size_t w = first_after; w < whole; ++w) {
    recovery.lowest_fraction =
        std::min(recovery.lowest_fraction, rate(w, 1) / recovery.baseline_ops_per_second);
  }
  // Back from the first span start from which every span until the
  // phase's end is back: a span that is back before a later collapse is
  // not a recovery.
  const double goal = fraction * recovery.baseline_ops_per_second;
  for (size_t w = whole; w-- > first_after;) {
    if (w + needed > whole) continue;  // no whole span starts here
    if (rate(w, needed) < goal) break;
    recovery.recovered = true;
    recovery.time = std::max(nanoseconds(0), interval * static_cast<int64_t>(w) - killed_at);
  }
  return recovery;
}

}  // namespace dmidx::bench
