// `prefill-bench plan`: the analytic superstep per rank, no GPU needed.
// Each rank plans itself (a single process plans every rank), the spans gather
// to rank 0, which prints the per-family table per variant and writes HDF5.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "check.h"
#include "commands.h"
#include "plan.h"
#include "profile.h"
#include "run_info.h"
#include "superstep.h"

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
  return parse_scenario(text, args.path, ScenarioOverrides{args.sets, args.cuts});
}

namespace {

std::vector<Span> plan_my_ranks(const Gang& gang, const Scenario& s, const CutSet& cuts,
                                const GpuProfile& profile) {
  std::vector<Span> spans;
  for (int r = 0; r < s.cp; ++r) {
    if (gang.size() > 1 && r != gang.rank()) continue;
    std::vector<Span> mine = plan_spans(plan_rank(s, cuts, r), profile);
    spans.insert(spans.end(), mine.begin(), mine.end());
  }
  return spans;
}

}  // namespace

int cmd_plan(const Gang& gang, const ScenarioArgs& args) {
  const Scenario s = load_scenario_on_gang(gang, args);
  const std::string problem = world_size_problem(s, gang.size(), /*plan=*/true);
  PB_CHECK(problem.empty(), problem);
  const GpuProfile profile = gpu_profile(args.profile.empty() ? s.gpu_profile : args.profile);

  RunResult result;
  result.kind = "plan";
  record_run_info(gang, args.command_line, result);
  record_scenario(s, result);
  result.text["gpu_profile"] = profile.name;
  result.text["gpu_profile_source"] = profile.source;
  result.numbers["copy_tbps"] = profile.copy_tbps;
  result.numbers["gemm_tflops"] = profile.gemm_tflops;
  result.numbers["fp32_tflops"] = profile.fp32_tflops;

  for (const auto& variant : s.variants) {
    std::vector<std::string> parts = gang.gather(pack_spans(plan_my_ranks(gang, s, variant.cuts, profile)));
    if (!gang.is_root()) continue;
    VariantResult v;
    v.name = variant.name;
    v.cuts = variant.cuts.describe();
    for (const auto& part : parts) {
      std::vector<Span> spans = unpack_spans(part);
      v.spans.insert(v.spans.end(), spans.begin(), spans.end());
    }
    std::vector<double> pairs;
    const Schedule sched = variant.cuts[Cut::stripe] ? Schedule::stripe : Schedule::prefix;
    for (int r = 0; r < s.cp; ++r) pairs.push_back(rank_attention(sched, s.cp, r).load_pairs);
    std::printf("%s\n", format_plan_table(v.spans, s.cp, pairs, profile,
                                          "plan " + s.name + ", variant " + v.name + " (" + v.cuts + ")")
                            .c_str());
    result.variants.push_back(std::move(v));
  }
  if (gang.is_root()) {
    Placement placement;
    placement.ranks_per_gpu = args.ranks_per_gpu > 0 ? args.ranks_per_gpu : (s.serialize_ranks ? s.cp : 1);
    placement.serialized = s.serialize_ranks;
    const MemoryBudget budget = superstep_memory_budget(s, placement);
    std::printf("%s", budget.table.c_str());
    result.numbers["memory_ranks_per_gpu"] = placement.ranks_per_gpu;
    result.numbers["memory_weights_bytes"] = double(budget.fullest.weights);
    result.numbers["memory_arena_bytes"] = double(budget.fullest.arena);
    result.numbers["memory_rank_bytes"] = double(budget.fullest.ranks);
    const std::string path = output_path(args.output, s.name, "plan");
    write_results(path, result, args.overwrite);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace pb
