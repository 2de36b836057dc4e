// The file of a sweep (prefill-bench sweep; docs/sweep.md): a results file of
// kind "sweep" (no variants of its own) that holds each point of the sweep:
//
//   /                      kind sweep, the scenario and the command as any run
//   /point_table           one row per point, in the sweep's order: id, context,
//                          cp, precision, status (measured, planned, failed)
//   /points/<id>           the point's own results file in summary: its root
//                          attributes (scenario, machine, TTFT form, MFU, a
//                          plan's calibrated_ms.*), each variant's ttft_ms and
//                          projections' reps and ranks, less the per-launch
//                          tables (spans, bells, outputs, projection timelines,
//                          paths and waits: the point's own file keeps them);
//                          attributes sweep_context, sweep_cp, sweep_precision,
//                          sweep_status, sweep_error (why it failed, or why it
//                          was planned), sweep_ttft_ms.<variant> (the point's
//                          TTFT: headline.h, a plan's planned one) and
//                          sweep_efficiency.<variant> (parallel_efficiency,
//                          rewritten for every point at each change)
//   /points/<id>/families  the deepest rank's time by family, per variant:
//                          variant, family, ms (measured: the median over reps
//                          of the superstep; a plan: the roofline),
//                          calibrated_ms (a calibrated plan's; NaN otherwise)
//
// A failed point's group holds only its attributes. Every change is written
// to <path>.tmp and renamed over the file, so a sweep cut short keeps its
// finished points.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pb {

struct SweepPointRecord {
  std::string id;
  int64_t context = 0;
  int32_t cp = 0;
  std::string precision;
  std::string status;  // measured, planned, failed
  std::string error;   // failed: why; planned: why it was not run ("" when asked for a plan)
  std::map<std::string, double> ttft_ms = {};     // per variant: the point's TTFT; none when failed
  std::map<std::string, double> efficiency = {};  // per variant: parallel_efficiency, as the file holds it
};

// Parallel efficiency over cp at a fixed context and precision, per point and
// variant: T(c0) x c0 / (T(cp) x cp), c0 the smallest cp of the points of that
// context and precision that have the variant's TTFT (T(1) / (cp T(cp)) when c0
// is 1). A point alone at its context and precision, or without the TTFT, has
// none. Reads only ttft_ms.
std::map<std::string, std::map<std::string, double>> parallel_efficiency(
    const std::vector<SweepPointRecord>& points);

// The sweep statuses a point may have.
std::vector<std::string> sweep_status_names();

struct SweepFamilyRow {
  std::string variant, family;
  double ms = 0;
  double calibrated_ms = 0;  // NaN: not calibrated
};

// Adds the point, replacing a point of the same id: point_file (a run or plan
// results file; "" for a failed point) in summary, its families and its
// ttft_ms; then every point's efficiency anew. `complete` marks the sweep file
// complete (every point measured or planned). Throws pb::Error naming the file.
void add_sweep_point(const std::string& sweep_path, const SweepPointRecord& point, const std::string& point_file,
                     const std::vector<SweepFamilyRow>& families, bool complete);

// The points in the order they were added, with their ttft_ms and efficiency.
// Throws pb::Error naming the file when it is not a sweep file.
std::vector<SweepPointRecord> read_sweep_points(const std::string& sweep_path);

}  // namespace pb
