// `plan --calibrate`: the roofline scaled by what the benchmarks measured, to
// predict the superstep per variant; and the measured run it is checked against.
//
// A benchmark row (results.h BenchRow, the /bench table of a kernels, attnres,
// fmha, kda or moe file) times one kernel at one case. Under the plan's profile
// its fraction of the ceiling is
//   f = roofline(row bytes, row FLOPs) / median,
// with the ceiling of the launch it calibrates (memory, tensor or f32, cost.h).
// A planned launch runs in roofline / f, f pooled over the rows that match it,
// most specific first:
//   name    the row's kernel is the launch's ("land.lat_down", "moe.permute");
//   case    the row's kernel is the launch's plus a case ("fmha.causal.16384",
//           "add2.w12288"): the one case nearest in roofline time;
//   family  rows of the launch's family whose kernel starts with the same
//           op ("land.n12288" for "land.q_b"), pooled;
// pooled = sum of rooflines / sum of medians. Only rows measured in the
// launch's state count:
//   "baseline" / "cut" (kernels, attnres benchmarks): the family's cut off / on;
//   "<block>.none" / "<block>.all" (moe benchmark blocks): the family's cut
//     off / on; for a family without a cut, "all" when every cut of the variant
//     is on, overlap aside (compute kernels run slower beside the cut kernels;
//     overlap changes no kernel); a MoE block of
//     another expert-GEMM engine is skipped;
//   an engine name ("cudnn", "cutlass", "native"): the scenario's engine for
//     that family (fmha, moe_gemm; kda: native). "auto" reads as what a build
//     with cuDNN and CUTLASS picks: cudnn, cutlass;
//   "bf16" / "fp8" (gemm benchmark), "<engine>_fp8" (the moe benchmark's fp8
//     experts, "cutlass_fp8"): measured in that precision. A tensor launch
//     takes rows of its own precision only (cost.h: tensor or tensor_fp8; a
//     row without a precision mark is bf16); other launches take either.
//   Other variants (alternative forms such as "cut.ring", "ceiling") are skipped.
// A launch no row matches keeps its roofline and is reported uncalibrated;
// fabric launches keep their link time.
//
// Two conventions of the benchmarks are honoured:
//   - a file that reports the same bytes for a case's baseline and cut rows
//     (kernels: land, conv, lse_merge, elementwise) times the baseline against
//     the cut's work. A baseline launch of that family is then calibrated from
//     the cut's roofline: scaled by (the family's roofline on this rank with the
//     cut on / with it off). Only conv's differs from 1: its baseline path moves
//     4.7x the cut's bytes.
//   - the kda benchmark names the block's state walk "kda.state" (its
//     "kda.forward" row is prepare + walk); the plan's "kda.forward" launch is
//     matched under that name.
// Files given later replace earlier rows of the same family, kernel and variant.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "plan.h"
#include "results.h"

namespace pb {

struct CalibrationRow {
  BenchRow row;
  std::string file;        // the file's name, without its folder
  bool same_work = false;  // a baseline row whose cut row reports the same bytes
};

struct Calibration {
  std::vector<std::string> files;
  std::vector<CalibrationRow> rows;
};

// Throws pb::Error naming the file when it cannot be read or has no /bench rows.
Calibration load_calibration(const std::vector<std::string>& paths);
// The same from results already in memory (name, result), in order.
Calibration make_calibration(const std::vector<std::pair<std::string, RunResult>>& files);

// One family of one rank: its roofline and calibrated time, and where the
// fractions came from ("kernels.h5 family", "moe.h5 name").
struct FamilyCalibration {
  double roofline_ms = 0;
  double calibrated_ms = 0;
  int launches = 0;
  int uncalibrated = 0;  // launches that kept their roofline
  std::set<std::string> sources;
};

struct RankCalibration {
  int rank = 0;
  std::vector<Span> spans;  // the plan's spans, time = calibrated
  std::map<std::string, FamilyCalibration> families;
  double roofline_ms = 0, calibrated_ms = 0;
};

// Rank `rank` of scenario s under `cuts`, calibrated (see the top of this file).
RankCalibration calibrate_rank(const Scenario& s, const CutSet& cuts, int rank, const Calibration& cal,
                               const GpuProfile& profile, const LinkProfile& link);

// A measured run's superstep for one variant: TTFT and the deep rank's families.
struct MeasuredSuperstep {
  size_t reps = 0;
  double ttft_ms = 0;   // median over the reps
  // The gang replayed from the spans (link measured, else the first recorded),
  // its median rep; NaN when the file holds no projection. With ranks taking
  // turns on one GPU, the TTFT above holds every rank's turns and this is the gang's.
  double projected_ms = 0;
  std::string projected_link;
  int deep_rank = 0;    // the rank with the largest median span sum
  double span_ms = 0;   // its median span sum
  std::map<std::string, double> family_ms;  // its families, median over reps
};

// Reads the run file; throws pb::Error naming it when it is no run, or a run of
// another scenario (name, cp, context, bucket) than s.
RunResult read_measured_run(const std::string& path, const Scenario& s);
// Throws pb::Error naming the variant and the ones present when it is absent.
MeasuredSuperstep measured_superstep(const RunResult& run, const std::string& variant);

// The calibrated table of one variant: the deep rank's families, roofline,
// fraction, calibrated ms and, with `measured`, the measured ms and the error.
std::string format_calibration_table(const std::vector<RankCalibration>& ranks, const std::string& title,
                                     const MeasuredSuperstep* measured);

}  // namespace pb
