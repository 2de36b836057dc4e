#include "wall_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "stats.h"

namespace pb {

namespace {

bool is_wait(const Span& s) { return s.family == "fabric" && s.kernel.rfind("fabric.wait", 0) == 0; }

// The length of the union of [start, end) intervals.
double union_length(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, open = 0, close = 0;
  bool any = false;
  for (const auto& [a, b] : intervals) {
    if (!any || a > close) {
      if (any) total += close - open;
      open = a;
      close = b;
      any = true;
    } else {
      close = std::max(close, b);
    }
  }
  return any ? total + close - open : 0.0;
}

}  // namespace

bool split_wall(const std::vector<Span>& spans, double wall_us, WallSplit& out) {
  out = WallSplit{};
  if (spans.empty()) {
    out.host_us = wall_us;
    return true;
  }
  std::vector<std::pair<double, double>> all, waits;
  double first = 0, last = 0;
  bool any = false;
  for (const Span& s : spans) {
    if (s.start_us < 0) return false;
    const double end = s.start_us + s.time_us;
    all.emplace_back(s.start_us, end);
    if (is_wait(s)) waits.emplace_back(s.start_us, end);
    first = any ? std::min(first, s.start_us) : s.start_us;
    last = any ? std::max(last, end) : end;
    any = true;
  }
  const double busy = union_length(all);
  out.wait_us = union_length(waits);
  out.compute_us = std::max(0.0, busy - out.wait_us);
  out.launch_gap_us = std::max(0.0, (last - first) - busy);
  out.host_us = std::max(0.0, wall_us - (last - first));
  return true;
}

std::string format_wall_split(const VariantResult& variant, bool serialized) {
  std::map<int32_t, std::vector<const RankRep*>> by_rank;
  for (const RankRep& r : variant.rank_reps)
    if (!std::isnan(r.launch_gap_us)) by_rank[r.rank].push_back(&r);
  if (by_rank.empty()) return "";
  const auto median_of = [](const std::vector<const RankRep*>& reps, double RankRep::*field) {
    std::vector<double> v;
    for (const RankRep* r : reps) v.push_back(r->*field);
    return median(v);
  };
  std::string out = fmt::format("where the wall went, variant {} (ms, median over reps){}\n", variant.name,
                                serialized ? "; launch gaps hold the other ranks' turns (serialized)" : "");
  out += fmt::format("  {:>6} {:>10} {:>10} {:>10} {:>12} {:>10}\n", "rank", "wall", "compute", "waits", "launch gaps",
                     "host");
  for (const auto& [rank, reps] : by_rank) {
    const double wall = median_of(reps, &RankRep::wall_us), wait = median_of(reps, &RankRep::wait_us);
    const double gaps = median_of(reps, &RankRep::launch_gap_us), host = median_of(reps, &RankRep::host_us);
    out += fmt::format("  {:>6} {:>10.2f} {:>10.2f} {:>10.2f} {:>12.2f} {:>10.2f}\n", rank, wall / 1e3,
                       (wall - wait - gaps - host) / 1e3, wait / 1e3, gaps / 1e3, host / 1e3);
  }
  return out;
}

}  // namespace pb
