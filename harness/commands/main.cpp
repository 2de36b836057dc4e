// prefill-bench: the K3 context-parallel prefill superstep, rebuilt as a
// benchmark harness. One MPI rank per GPU.
//
//   prefill-bench plan     scenario.yaml   analytic superstep per rank (no GPU)
//   prefill-bench run      scenario.yaml   measured superstep, HDF5 results
//   prefill-bench lane     scenario.yaml   one MLA layer across the CP gang (FMHA loads, waits)
//   prefill-bench compare  A.h5 [B.h5]     per-family A/B, TTFT, outputs verdict
//   prefill-bench compare  --baseline B.h5 run.h5 --max-regression 3%
//   prefill-bench kernels                  the cut kernels' benchmark
//   prefill-bench fmha                     the FMHA engines' benchmark
//   prefill-bench kda                      the KDA core's benchmark
//   prefill-bench moe                      the MoE block, dense FFN and first token
//   prefill-bench verify   scenario.yaml   bit-identity / floor gates
//   prefill-bench trace    run.h5          one rep as Chrome trace JSON (Perfetto)
//   prefill-bench ranks    scenario.yaml   the scenario's rank count (scripts)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "check.h"
#include "commands.h"
#include "gang.h"

namespace {

std::string joined_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

void add_scenario_options(CLI::App* sub, pb::ScenarioArgs& args) {
  sub->add_option("scenario", args.path, "scenario YAML file")->required();
  sub->add_option("--set", args.sets, "override a scenario key: key=value (model.layers=8)");
  sub->add_option("--cuts", args.cuts, "run one cut set: all, none, seed, or a list like land,conv");
  sub->add_option("--output,-o", args.output, "results file (default runs/<name>-<kind>-<time>.h5)");
  sub->add_flag("--overwrite", args.overwrite, "replace an existing results file");
}

double parse_fraction(const std::string& text) {
  std::string t = text;
  bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  size_t used = 0;
  double v = std::stod(t, &used);
  PB_CHECK(used == t.size() && v >= 0, "--max-regression: '" + text + "' is not a fraction like 3% or 0.03");
  return percent ? v / 100 : v;
}

}  // namespace

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  CLI::App app{"prefill-bench: the K3 CP prefill superstep with switchable cuts"};
  app.require_subcommand(1);

  pb::ScenarioArgs plan_args, run_args, lane_args, verify_args;
  CLI::App* plan = app.add_subcommand("plan", "analytic superstep per rank: launches, bytes, FLOPs, roofline");
  add_scenario_options(plan, plan_args);
  plan->add_option("--profile", plan_args.profile, "GPU profile for the roofline: h200, h100, gb300");
  plan->add_option("--ranks-per-gpu", plan_args.ranks_per_gpu,
                   "the memory budget's placement (default: cp with serialize_ranks, else 1)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--link", plan_args.link, "fabric link: same-gpu, nvlink4, nvlink5, ib400 (default: the profile's)");
  plan->add_option("--calibrate", plan_args.calibrate, "benchmark files, comma-separated: scale by measured fractions")
      ->delimiter(',');
  plan->add_option("--measured", plan_args.measured, "a run of this scenario to check the calibrated plan against");
  CLI::App* run = app.add_subcommand("run", "measured superstep on the GPUs (one rank per GPU)");
  add_scenario_options(run, run_args);
  CLI::App* verify = app.add_subcommand(
      "verify", "bit identity of cuts 1, 2, 4, 5, attnres per layer; stripe and CP-N vs CP-1 within the floor");
  add_scenario_options(verify, verify_args);
  CLI::App* lane = app.add_subcommand(
      "lane", "one MLA layer across the CP gang: per-rank FMHA time vs the schedule, waits, fabric bytes");
  add_scenario_options(lane, lane_args);

  pb::ScenarioArgs ranks_args;
  CLI::App* ranks = app.add_subcommand("ranks", "print the scenario's rank count (cp), for launch scripts");
  add_scenario_options(ranks, ranks_args);

  pb::CompareOptions cmp;
  std::vector<std::string> files;
  std::string max_regression = "3%", variants;
  CLI::App* compare = app.add_subcommand("compare", "compare two results files, or two variants of one");
  compare->add_option("files", files, "A.h5 [B.h5]")->required()->expected(1, 2);
  compare->add_option("--baseline", cmp.baseline_file, "committed baseline: judge the run against it");
  compare->add_option("--max-regression", max_regression, "TTFT regression threshold (default 3%)");
  compare->add_option("--variants", variants, "A,B: compare two variants (inside one file)");
  compare->add_option("--alpha", cmp.alpha, "significance level of the noise test (default 0.05)");

  pb::TraceArgs trace_args;
  CLI::App* trace = app.add_subcommand("trace", "one rep of a results file as Chrome trace JSON (Perfetto, chrome://tracing)");
  trace->add_option("file", trace_args.input, "run or lane results file (.h5)")->required();
  trace->add_option("--variant", trace_args.options.variant, "the variant (default: the file's only one)");
  trace->add_option("--rep", trace_args.options.rep, "the rep (default: the last)");
  trace->add_option("--projection", trace_args.options.projection,
                    "the projected gang's link to draw (default: measured, when the file holds one)");
  trace->add_option("--output,-o", trace_args.output, "output .json or .json.gz (default <file>.trace.json.gz)");
  trace->add_flag("--overwrite", trace_args.overwrite, "replace an existing output file");

  pb::KernelsBenchOptions kopt;
  CLI::App* kernels = app.add_subcommand("kernels", "baseline vs cut of the memory-bound cut kernels");
  kernels->add_option("--family", kopt.families, "land, conv, lse_merge, elementwise, attnres (default: all)");
  kernels->add_option("--rows", kopt.rows, "rows (the bucket; default 16896)");
  kernels->add_option("--reps", kopt.reps, "timed repetitions, median reported (default 30)");
  kernels->add_option("--warmup", kopt.warmup, "untimed repetitions first (default 3)");
  kernels->add_option("--output,-o", kopt.output, "results file (default runs/kernels-bench-<time>.h5)");
  kernels->add_flag("--overwrite", kopt.overwrite, "replace an existing results file");

  pb::FmhaBenchOptions fopt;
  CLI::App* fmha = app.add_subcommand("fmha", "the FMHA engines at the MLA shapes (96 heads, d 192/128)");
  fmha->add_option("--tokens", fopt.tokens, "Tq = Tk values (default 4096 8192 16384)");
  fmha->add_option("--heads", fopt.heads, "heads (default 96)");
  fmha->add_option("--engine", fopt.engines, "native, cudnn (default: native, and cudnn when built with it)");
  fmha->add_option("--mask", fopt.masks, "dense, causal (default: both)");
  fmha->add_option("--reps", fopt.reps, "timed repetitions, median reported (default 20)");
  fmha->add_option("--warmup", fopt.warmup, "untimed repetitions first (default 3)");
  fmha->add_option("--output,-o", fopt.output, "results file (default runs/fmha-bench-<time>.h5)");
  fmha->add_flag("--overwrite", fopt.overwrite, "replace an existing results file");

  pb::KdaBenchOptions dopt;
  CLI::App* kda = app.add_subcommand("kda", "the KDA core at K3 widths (96 heads, d 128, chunk 64)");
  kda->add_option("--tokens", dopt.tokens, "segment lengths (default 4096 16384)");
  kda->add_option("--heads", dopt.heads, "heads (default 96)");
  kda->add_option("--reps", dopt.reps, "timed repetitions, median reported (default 20)");
  kda->add_option("--warmup", dopt.warmup, "untimed repetitions first (default 3)");
  kda->add_option("--output,-o", dopt.output, "results file (default runs/kda-bench-<time>.h5)");
  kda->add_flag("--overwrite", dopt.overwrite, "replace an existing results file");
  pb::MoeBenchOptions mopt;
  CLI::App* moe = app.add_subcommand("moe", "expert GEMMs (grouped vs loop), MoE block, dense FFN, first token at K3");
  moe->add_option("--tokens", mopt.tokens, "T, the segment's live rows (default 16384)");
  moe->add_option("--bucket", mopt.bucket, "b, rows of norms / dense GEMMs / landings (default 16896)");
  moe->add_option("--reps", mopt.reps, "expert GEMM repetitions, median reported (default 20)");
  moe->add_option("--block-reps", mopt.block_reps, "block repetitions, per-launch medians (default 10)");
  moe->add_option("--warmup", mopt.warmup, "untimed expert GEMM repetitions first (default 3)");
  moe->add_option("--seed", mopt.seed, "synthetic weights, inputs and router (default 1234)");
  moe->add_option("--output,-o", mopt.output, "results file (default runs/moe-bench-<time>.h5)");
  moe->add_flag("--overwrite", mopt.overwrite, "replace an existing results file");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = gang.is_root() ? app.exit(e) : (e.get_exit_code() ? 2 : 0);
    return code == 0 ? 0 : 2;
  }

  const std::string command_line = joined_command_line(argc, argv);
  try {
    if (*plan) {
      plan_args.command_line = command_line;
      return pb::cmd_plan(gang, plan_args);
    }
    if (*run) {
      run_args.command_line = command_line;
      return pb::cmd_run(gang, run_args);
    }
    if (*verify) {
      verify_args.command_line = command_line;
      return pb::cmd_verify(gang, verify_args);
    }
    if (*lane) {
      lane_args.command_line = command_line;
      return pb::cmd_lane(gang, lane_args);
    }
    if (*kernels) {
      kopt.command_line = command_line;
      return pb::cmd_kernels(gang, kopt);
    }
    if (*fmha) {
      fopt.command_line = command_line;
      return pb::cmd_fmha(gang, fopt);
    }
    if (*kda) {
      dopt.command_line = command_line;
      return pb::cmd_kda(gang, dopt);
    }
    if (*moe) {
      mopt.command_line = command_line;
      return pb::cmd_moe(gang, mopt);
    }
    if (*trace) return pb::cmd_trace(gang, trace_args);
    if (*ranks) {
      std::printf("%d\n", pb::load_scenario_on_gang(gang, ranks_args).cp);
      return 0;
    }
    if (*compare) {
      cmp.file_a = files[0];
      if (files.size() > 1) cmp.file_b = files[1];
      cmp.max_regression = parse_fraction(max_regression);
      if (!variants.empty()) {
        auto comma = variants.find(',');
        PB_CHECK(comma != std::string::npos, "--variants takes two names: A,B");
        cmp.variant_a = variants.substr(0, comma);
        cmp.variant_b = variants.substr(comma + 1);
      }
      return pb::cmd_compare(gang, cmp);
    }
  } catch (const std::exception& e) {
    gang.fail(e.what(), 2);
  }
  return 0;
}
