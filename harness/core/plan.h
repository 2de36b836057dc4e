// `plan`: the analytic superstep. Every kernel launch of one superstep, per
// rank, in launch order (docs/design.md §2.1 and §3), with its bytes, FLOPs and
// roofline time on a GPU profile. The measured superstep (issue 9) emits the
// same list as timed spans; the same cost model (cost.h) rates both.
//
// Families, the anatomy's columns:
//   embed attnres rmsnorm gemm land conv kda fmha lse_merge o_finalize
//   elementwise moe moe_gemm mla fabric sample
// Kernel names are "<op>.<what>", e.g. "land.q_b", "fmha.dense", "conv.decode".
// Fabric launches (doorbells, waits) carry the bytes that cross the fabric and
// no roofline time: they are not work on this GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost.h"
#include "cuts.h"
#include "results.h"
#include "scenario.h"
#include "schedule.h"

namespace pb {

struct Launch {
  int32_t layer = -1;  // -1: outside the layer loop
  std::string family;
  std::string kernel;
  Cost cost;
  double fabric_bytes = 0;
};

struct RankPlan {
  int rank = 0;
  Segment segment;
  std::vector<Launch> launches;
  double fmha_pairs = 0;  // per MLA layer
};

// The launches of `rank` for one superstep of scenario s under cut set `cuts`.
RankPlan plan_rank(const Scenario& s, const CutSet& cuts, int rank);

// Spans (rep = -1, time = roofline) of a rank's plan on a profile.
std::vector<Span> plan_spans(const RankPlan& plan, const GpuProfile& profile);

// The per-family roofline table of a gang, as printed by `prefill-bench plan`,
// from the gathered plan spans of ranks 0..cp-1: one column per rank, the deep
// rank (largest total) marked, with each rank's FMHA pairs per MLA layer.
std::string format_plan_table(const std::vector<Span>& spans, int cp, const std::vector<double>& fmha_pairs,
                              const GpuProfile& profile, const std::string& title);

}  // namespace pb
