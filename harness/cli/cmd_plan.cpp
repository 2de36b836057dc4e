// `prefill-bench plan`: the analytic superstep per rank, no GPU needed.
// Each rank plans itself (a single process plans every rank), the spans gather
// to rank 0, which prints the per-family table per variant and writes HDF5.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "calibration.h"
#include "check.h"
#include "commands.h"
#include "efficiency.h"
#include "headline.h"
#include "stats.h"
#include "plan.h"
#include "profile.h"
#include "run_info.h"
#include "superstep.h"
#include "text.h"

namespace pb {

Scenario load_scenario_on_gang(const Gang& gang, const ScenarioArgs& args) {
  std::string text;
  if (gang.is_root()) {
    std::ifstream in(args.path);
    PB_CHECK(in.good(), "cannot read scenario file '" + args.path + "'");
    std::stringstream buf;
    buf << in.rdbuf();
    text = buf.str();
  }
  text = gang.broadcast(text);
  return parse_scenario(text, args.path, ScenarioOverrides{args.sets, args.cuts, args.variants});
}

namespace {

std::vector<Span> plan_my_ranks(const Gang& gang, const Scenario& s, const CutSet& cuts, const GpuProfile& profile,
                                const LinkProfile& link) {
  std::vector<Span> spans;
  for (int r = 0; r < s.cp; ++r) {
    if (gang.size() > 1 && r != gang.rank()) continue;
    std::vector<Span> mine = plan_spans(plan_rank(s, cuts, r), profile, link);
    spans.insert(spans.end(), mine.begin(), mine.end());
  }
  return spans;
}

// The profile's figures and the link, each with its source, printed once and recorded.
std::string describe_costing(const GpuProfile& profile, const LinkProfile& link, bool link_chosen) {
  std::string out = "profile " + profile.name + ":\n" + describe_figures(profile);
  out += fmt::format("  link  {:>8.0f} GB/s      {} ({}; {:.0f} us per transfer): fabric bytes cost "
                     "latency + bytes / rate, counted in the total as if no compute hid them\n",
                     link.gbytes_per_s, link.name, link.source, link.latency_us);
  if (!link_chosen) out += "  (the profile's natural link; --link same-gpu|nvlink4|nvlink5|ib400 picks another)\n";
  if (!profile.note.empty()) out += "  note: " + profile.note + "\n";
  return out;
}

void record_costing(const GpuProfile& profile, const LinkProfile& link, RunResult& result) {
  result.text["gpu_profile"] = profile.name;
  result.text["gpu_profile_source"] = profile.source;
  result.text["copy_tbps_source"] = profile.copy_source;
  result.text["gemm_tflops_source"] = profile.gemm_source;
  result.text["fp32_tflops_source"] = profile.fp32_source;
  if (!profile.note.empty()) result.text["gpu_profile_note"] = profile.note;
  result.numbers["copy_tbps"] = profile.copy_tbps;
  result.numbers["gemm_tflops"] = profile.gemm_tflops;  // the ceiling the roofline used
  result.text["gemm_ceiling"] = profile.gemm_ceiling;
  if (profile.gemm_sustained_tflops > 0) {
    result.numbers["gemm_tflops_sustained"] = profile.gemm_sustained_tflops;
    result.text["gemm_tflops_sustained_source"] = profile.gemm_sustained_source;
  }
  result.numbers["fp32_tflops"] = profile.fp32_tflops;
  result.text["link"] = link.name;
  result.text["link_source"] = link.source;
  result.numbers["link_gbytes_per_s"] = link.gbytes_per_s;
  result.numbers["link_latency_us"] = link.latency_us;
}

PlanTableNotes cut_notes(const Scenario& s, const CutSet& cuts) {
  PlanTableNotes notes;
  const std::vector<CutEffect> effects = cut_effects(s, cuts);
  notes.family_marks = cut_family_marks(effects);
  notes.lines = cut_effect_notes(effects);
  return notes;
}

}  // namespace

int cmd_plan(const Gang& gang, const ScenarioArgs& args) {
  const Scenario s = load_scenario_on_gang(gang, args);
  const std::string problem = world_size_problem(s, gang.size(), /*plan=*/true);
  PB_CHECK(problem.empty(), problem);
  const GpuProfile profile =
      at_gemm_ceiling(gpu_profile(args.profile.empty() ? s.gpu_profile : args.profile), args.ceiling);
  const std::string no_rate = precision_rate_problem(s.precision, profile);
  PB_CHECK(no_rate.empty(), s.source + ": " + no_rate + " (gpu_profile, or plan --profile)");
  const LinkProfile link = link_profile(args.link.empty() ? profile.link : args.link);
  PB_CHECK(args.measured.empty() || !args.calibrate.empty(), "--measured compares a calibrated plan: give --calibrate too");
  // A plan prints; it writes a results file only where -o names one. Only
  // rank 0 reads and writes files: the output is refused, and the
  // calibration and measured files read, before any table is printed.
  const std::string path = args.output;
  Calibration calibration;
  RunResult measured_run;
  if (gang.is_root()) {
    if (!path.empty()) check_results_path(path, args.overwrite);
    if (!args.calibrate.empty()) calibration = load_calibration(args.calibrate);
    if (!args.measured.empty()) measured_run = read_measured_run(args.measured, s);
  }

  RunResult result;
  result.kind = "plan";
  record_run_info(gang, args.command_line, result);
  record_scenario(s, result);
  record_costing(profile, link, result);
  if (!args.calibrate.empty()) result.text["calibration_files"] = join(args.calibrate);
  if (!args.measured.empty()) result.text["measured_file"] = args.measured;
  if (gang.is_root()) std::printf("%s\n", describe_costing(profile, link, !args.link.empty()).c_str());

  std::string summary;
  for (const auto& variant : s.variants) {
    std::vector<std::string> parts = gang.gather(pack_spans(plan_my_ranks(gang, s, variant.cuts, profile, link)));
    if (!gang.is_root()) continue;
    VariantResult v;
    v.name = variant.name;
    v.cuts = variant.cuts.describe();
    for (const auto& part : parts) {
      std::vector<Span> spans = unpack_spans(part);
      v.spans.insert(v.spans.end(), spans.begin(), spans.end());
    }
    std::vector<double> pairs;
    const Schedule sched = attention_schedule(variant.cuts, s.layout, s.cp);
    for (int r = 0; r < s.cp; ++r) pairs.push_back(rank_attention(sched, s.cp, r).load_pairs);
    const std::string title = "plan " + s.name + ", variant " + v.name + " (" + v.cuts + "), " +
                              schedule_name(sched) + " schedule, layout " + layout_name(s.layout);
    std::printf("%s\n", format_plan_table(v.spans, s.cp, pairs, profile, title, cut_notes(s, variant.cuts)).c_str());
    const Efficiency roofline = efficiency_of(result, v);
    std::printf("variant %s, the roofline's %s\n\n", v.name.c_str(), describe_efficiency(roofline).c_str());
    if (!args.calibrate.empty()) {
      std::vector<RankCalibration> ranks;
      for (int r = 0; r < s.cp; ++r) ranks.push_back(calibrate_rank(s, variant.cuts, r, calibration, profile, link));
      const RankCalibration& deep = *std::max_element(
          ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.calibrated_ms < b.calibrated_ms; });
      result.numbers["calibrated_ms." + v.name] = deep.calibrated_ms;
      for (const auto& [family, f] : deep.families)
        result.numbers["calibrated_ms." + v.name + "." + family] = f.calibrated_ms;
      const bool has_measured = !args.measured.empty() && measured_run.find_variant(v.name) != nullptr;
      MeasuredSuperstep m;
      if (has_measured) {
        try {
          m = measured_superstep(measured_run, v.name);
        } catch (const Error& error) {  // the run's variant: name its file
          throw Error("'" + args.measured + "': " + error.what());
        }
        // The measured run's headline TTFT (headline.h): the projected gang's for ranks that took turns.
        const double measured_ms = median(headline_ttft(measured_run, *measured_run.find_variant(v.name)).ms);
        result.numbers["measured_ttft_ms." + v.name] = measured_ms;
        result.numbers["calibration_error." + v.name] = deep.calibrated_ms / measured_ms - 1;
        for (const auto& [family, ms] : m.family_ms) result.numbers["measured_ms." + v.name + "." + family] = ms;
        summary += fmt::format("  {:<14}{:>12.1f}{:>12.1f}{:>+9.1f}%\n", v.name, deep.calibrated_ms, measured_ms,
                               100 * (deep.calibrated_ms / measured_ms - 1));
      } else if (!args.measured.empty()) {
        summary += fmt::format("  {:<14}{:>12.1f}{:>12}\n", v.name, deep.calibrated_ms, "not measured");
      }
      std::printf("%s\n", format_calibration_table(ranks, "calibrated " + s.name + ", variant " + v.name + " (from " +
                                                               join(calibration.files) + ")",
                                                   has_measured ? &m : nullptr)
                              .c_str());
      std::printf("variant %s, calibrated: %s\n\n", v.name.c_str(), describe_efficiency(efficiency_of(result, v)).c_str());
    }
    record_efficiency(efficiency_of(result, v), v.name, result);  // calibrated where it was
    result.variants.push_back(std::move(v));
  }
  if (gang.is_root()) {
    if (!summary.empty())
      std::printf("calibrated superstep against the measured TTFT (%s; its headline: the projected gang's where "
                  "its ranks took turns):\n  %-14s%12s%12s%10s\n%s\n",
                  args.measured.c_str(), "variant", "calibrated", "measured", "error", summary.c_str());
    Placement placement;
    placement.ranks_per_gpu = args.ranks_per_gpu > 0 ? args.ranks_per_gpu : (s.serialize_ranks ? s.cp : 1);
    placement.serialized = s.serialize_ranks;
    const MemoryBudget budget = superstep_memory_budget(s, placement);
    std::printf("%s", budget.table.c_str());
    const ProcessMemory per_process = process_memory(profile.name);
    if (per_process.bytes > 0) {
      const double processes = per_process.bytes * budget.fullest_processes;
      std::printf("  + %d process(es) x %.2f GB (each one's CUDA context and library workspaces; %s, %s) = %.1f GB\n",
                  budget.fullest_processes, per_process.bytes / 1e9, profile.name.c_str(),
                  per_process.source.substr(0, per_process.source.find(':')).c_str(),
                  (double(budget.fullest.total()) + processes) / 1e9);
      result.numbers["memory_processes_bytes"] = processes;
      result.text["memory_processes_source"] = per_process.source;
    } else {
      std::printf("  plus each process's CUDA context and library workspaces (%s: %s)\n", profile.name.c_str(),
                  per_process.source.c_str());
    }
    result.numbers["memory_ranks_per_gpu"] = placement.ranks_per_gpu;
    result.numbers["memory_weights_bytes"] = double(budget.fullest.weights);
    result.numbers["memory_arena_bytes"] = double(budget.fullest.arena);
    result.numbers["memory_rank_bytes"] = double(budget.fullest.ranks);
    if (!path.empty()) {
      write_results(path, result, args.overwrite);
      std::printf("wrote %s\n", path.c_str());
    }
  }
  return 0;
}

}  // namespace pb
