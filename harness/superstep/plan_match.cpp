#include "plan_match.h"

#include "check.h"
#include "stats.h"

namespace pb {

std::vector<Launch> plan_slice(const RankPlan& p, int32_t layer, const std::string& first_kernel, size_t count) {
  std::vector<Launch> out;
  size_t i = 0;
  while (i < p.launches.size() && !(p.launches[i].layer == layer && p.launches[i].kernel == first_kernel)) ++i;
  for (; i < p.launches.size() && out.size() < count; ++i) out.push_back(p.launches[i]);
  return out;
}

std::string launch_list_difference(const std::vector<TimedLaunch>& got, const std::vector<Launch>& want) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (got[i].family != want[i].family || got[i].kernel != want[i].kernel)
      return "launch " + std::to_string(i) + ": recorded " + got[i].family + "/" + got[i].kernel + ", plan " +
             want[i].family + "/" + want[i].kernel;
  if (got.size() != want.size())
    return "recorded " + std::to_string(got.size()) + " launches, plan " + std::to_string(want.size());
  return "";
}

BlockTimes median_block_times(const std::vector<std::vector<TimedLaunch>>& reps) {
  PB_CHECK(!reps.empty(), "median_block_times: no reps");
  BlockTimes t;
  t.launches = reps[0];
  std::vector<double> totals;
  for (const auto& r : reps) {
    PB_CHECK(r.size() == reps[0].size(), "median_block_times: reps recorded different launch counts");
    double sum = 0;
    for (const auto& l : r) sum += l.ms;
    totals.push_back(sum);
  }
  for (size_t i = 0; i < t.launches.size(); ++i) {
    std::vector<double> ms;
    for (const auto& r : reps) ms.push_back(r[i].ms);
    t.launches[i].ms = median(ms);
  }
  t.total_ms = median(totals);
  return t;
}

}  // namespace pb
