// Where a rank's wall time went in one rep, from its measured spans' starts
// and durations (schema 3: Span::start_us on the GPU's clock):
//   compute       GPU time in spans other than doorbell waits (fabric.wait*)
//   waits         GPU time in doorbell waits
//   launch gaps   GPU idle between the first span's start and the last one's
//                 end: launch-queue bubbles and, in a serialized run, the
//                 other ranks' turns
//   host          the wall outside the GPU's first-to-last span: host-side
//                 work before the first launch and after the last (the first
//                 token's read-back)
// The four add up to the wall. Spans of several streams count once where they
// overlap.
#pragma once

#include <string>
#include <vector>

#include "results.h"

namespace pb {

struct WallSplit {
  double compute_us = 0, wait_us = 0, launch_gap_us = 0, host_us = 0;
};

// The spans of one rank and rep (any order); false when a span has no start
// (files before schema 3, plans).
bool split_wall(const std::vector<Span>& spans, double wall_us, WallSplit& out);

// Per rank, medians over the variant's reps (RankRep wall_us, wait_us,
// launch_gap_us, host_us; compute the rest): a table, or "" when the file has
// no split. serialized: the launch gaps hold the other ranks' turns, said so.
std::string format_wall_split(const VariantResult& variant, bool serialized);

}  // namespace pb
