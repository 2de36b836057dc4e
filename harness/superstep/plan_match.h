// A block's recorded launches against plan's (harness/analytic/plan.cpp): the same
// families and kernels in the same order. Used by the block tests and by the
// `moe` benchmark, which also takes each launch's cost from the plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan.h"
#include "timeline.h"

namespace pb {

// `count` launches of p at `layer`, from its first launch named first_kernel
// (fewer when the plan ends first; none when it has no such launch).
std::vector<Launch> plan_slice(const RankPlan& p, int32_t layer, const std::string& first_kernel, size_t count);

// "" when got and want name the same family/kernel pairs in the same order;
// else a sentence naming the first difference.
std::string launch_list_difference(const std::vector<TimedLaunch>& got, const std::vector<Launch>& want);

// Per launch index, the median ms over reps (each rep a list of the same
// launches, as Timeline::collect returns them), and the median of the per-rep sums.
struct BlockTimes {
  std::vector<TimedLaunch> launches;  // names of rep 0, ms = median
  double total_ms = 0;                // median over reps of the sum of a rep's launches
};
BlockTimes median_block_times(const std::vector<std::vector<TimedLaunch>>& reps);

}  // namespace pb
