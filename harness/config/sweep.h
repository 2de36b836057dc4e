// The points of a scenario's sweep (scenario.h: Sweep; docs/sweep.md).
//
// Points are the product of the lists, precision outermost, then cp, then
// context (or segment), each list in its written order; a missing list is the
// scenario's own value. A point is the scenario plus --set overrides, after
// the scenario's own overrides (the later wins):
//   context=<c> cp=<n> bucket=<b> [precision=<p>] [serialize_ranks=true]
//   - bucket keeps the scenario's headroom over its segment: bucket =
//     segment x (bucket / segment of the scenario), rounded up to 128
//     (cp8-128k's 16896 over 16384 stays 16896 at 16384 tokens a rank);
//   - serialize_ranks=true where cp is more than the GPUs the sweep has: the
//     ranks of a GPU take turns, and the headline is the projected gang.
#pragma once

#include <string>
#include <vector>

#include "scenario.h"

namespace pb {

struct SweepPointSpec {
  std::string id;  // "ctx131072-cp8-bf16": the point's name in the sweep file
  int64_t context = 0;
  int cp = 0;
  std::string precision;          // as the point's scenario describes it (precision.h)
  std::vector<std::string> sets;  // the overrides that make the point
};

// Throws pb::Error when the scenario has no sweep, or gpus < 1.
std::vector<SweepPointSpec> sweep_points(const Scenario& scenario, int gpus);

}  // namespace pb
