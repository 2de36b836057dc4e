// `plan`: the analytic superstep. Every kernel launch of one superstep, per
// rank, in launch order (docs/design.md §2.1 and §3), with its bytes, FLOPs and
// roofline time on a GPU profile. The measured superstep emits the
// same list as timed spans; the same cost model (cost.h) rates both.
//
// Families, the anatomy's columns:
//   embed attnres rmsnorm gemm land conv kda fmha lse_merge o_finalize
//   elementwise moe moe_gemm mla fabric sample
// Kernel names are "<op>.<what>", e.g. "land.q_b", "fmha.dense", "conv.decode".
// Fabric launches (doorbells, waits) carry the bytes that cross the fabric and
// no roofline time: they are not work on this GPU; plan_spans costs their
// bytes over a link.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cost.h"
#include "profile.h"
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

// The bytes a span of this launch records (results.h Span::bytes): for the
// fabric the bytes that cross the link, for any other family its memory traffic.
inline double span_bytes(const Launch& l) { return l.family == "fabric" ? l.fabric_bytes : l.cost.bytes; }

// The launch list's form. `run` and `lane` record it (root number
// kLaunchListVersionKey), and a reader holding a file's launches against a
// plan plans them in the file's form: a change to the blocks' launch list
// bumps the version and keeps the older form planned.
//   1  (files without the key) a helped window's query copy inside
//      fabric.wait_queries; under quant_fuse mul_sigmoid and o_norm_gate wrote
//      bf16, quantized by quant.mla_o and quant.kda_o.
//   2  the copy is its own launch, fabric.stage_queries, after the wait (which
//      then moves no bytes), so a projection keeps its time; under quant_fuse
//      mul_sigmoid and o_norm_gate write the fp8 twin themselves.
constexpr int kLaunchListVersion = 2;
constexpr const char* kLaunchListVersionKey = "launch_list_version";
// The version a run or lane file recorded (1 when it records none).
int recorded_launch_list_version(const RunResult& run);

struct RankPlan {
  int rank = 0;
  std::vector<Segment> tokens;  // the token ranges it holds, in local row order (schedule.h rank_tokens)
  std::vector<Launch> launches;
  double fmha_pairs = 0;  // per MLA layer
};

// The launches of `rank` for one superstep of scenario s under cut set `cuts`,
// in the launch list's form `version` (1 .. kLaunchListVersion).
RankPlan plan_rank(const Scenario& s, const CutSet& cuts, int rank, int version = kLaunchListVersion);

// Spans (rep = -1) of a rank's plan on a profile: a launch's time is its
// roofline; a fabric launch's is its bytes over `link` (LinkProfile::transfer_us,
// 0 for a doorbell that moves no bytes), counted in the rank's total as if no
// compute hid it.
std::vector<Span> plan_spans(const RankPlan& plan, const GpuProfile& profile, const LinkProfile& link);
// The same over the profile's natural link (GpuProfile::link).
std::vector<Span> plan_spans(const RankPlan& plan, const GpuProfile& profile);

// The family whose launches a cut replaces or reschedules: land, conv,
// lse_merge, elementwise and attnres their own; stripe and balance: fmha;
// overlap (which moves launches past the waits): fabric.
std::string cut_family(Cut c);

// What the roofline sees of one cut that is on: the governed family over the
// whole gang (bytes, and the deepest rank's FLOPs for the FMHA cuts), planned
// with the variant's cuts and again with this one cut off. Cuts that refine
// this one are off on both sides (the stripe's effect is prefix -> stripe,
// balance's stripe -> balance).
struct CutEffect {
  Cut cut = Cut::land;
  std::string family;
  double bytes_off = 0, bytes_on = 0;
  double deep_flops_off = 0, deep_flops_on = 0;  // max over ranks of the family's FLOPs
  std::string unchanged = "no change";            // the FMHA cuts' mark when the FLOPs do not move, with why
  bool same_bytes() const { return bytes_on == bytes_off; }
  // The table's "cut" column: "same bytes [1]", "-79% bytes [2]", "deep rank -40% FLOPs", or for the FMHA
  // cuts `unchanged` ("no change at cp 1", "no change at odd cp", "no change under zigzag"); overlap's
  // "launch order only: its gain is in the projection".
  std::string mark() const;
};
// One entry per cut that is on in `cuts`, in kAllCuts order.
std::vector<CutEffect> cut_effects(const Scenario& s, const CutSet& cuts);
// The table's mark per family: the effects' marks, joined with "; " and each
// named by its cut where several cuts govern one family (stripe and balance).
std::map<std::string, std::string> cut_family_marks(const std::vector<CutEffect>& effects);
// The footnotes the marks refer to, for the effects present.
std::vector<std::string> cut_effect_notes(const std::vector<CutEffect>& effects);

// What the table prints beyond the numbers: a mark per family (a column), and
// lines under the table.
struct PlanTableNotes {
  std::map<std::string, std::string> family_marks;
  std::vector<std::string> lines;
  std::string timing = "events";  // measured spans: how they were timed (scenario key timing)
};

// The per-family table of a gang, as printed by `prefill-bench plan` (and by
// `run` for measured spans), from the gathered spans of ranks 0..cp-1: one
// column per rank, the deep rank (largest total) marked, with each rank's FMHA
// pairs per MLA layer.
std::string format_plan_table(const std::vector<Span>& spans, int cp, const std::vector<double>& fmha_pairs,
                              const GpuProfile& profile, const std::string& title,
                              const PlanTableNotes& notes = {});

}  // namespace pb
