// prefill-bench: the K3 context-parallel prefill superstep, rebuilt as a
// benchmark harness. One MPI rank per GPU.
//
//   prefill-bench plan     scenario.yaml   analytic superstep per rank (no GPU)
//   prefill-bench run      scenario.yaml   measured superstep, HDF5 results
//   prefill-bench lane     scenario.yaml   one MLA layer across the CP gang (FMHA loads, waits)
//   prefill-bench compare  A.h5 [B.h5]     per-family A/B, TTFT, outputs verdict
//   prefill-bench compare  --baseline B.h5 run.h5 --max-regression 3% [--only a,b]
//                                          the regression gate: exit 0 pass, 1 regressed, 2 cannot judge
//   prefill-bench kernels                  the cut kernels' benchmark
//   prefill-bench fmha                     the FMHA engines' benchmark
//   prefill-bench kda                      the KDA core's benchmark
//   prefill-bench moe                      the MoE block, dense FFN and first token
//   prefill-bench gemm                     the superstep's dense GEMMs, bf16 beside fp8
//   prefill-bench verify   scenario.yaml   bit-identity / floor gates
//   prefill-bench trace    run.h5          one rep as Chrome trace JSON (Perfetto)
//   prefill-bench slim     run.h5          the file less its projections' timelines (for committing)
//   prefill-bench ranks    scenario.yaml   the scenario's rank count (scripts)
//   prefill-bench --version                version, git sha, build options
//
// Lists are comma-separated: --engine native,cudnn, --tokens 4096,16384.
// Errors print "[rank r on host] error: <what>" and exit 2 (compare's gate
// also exits 2 when it cannot judge); PB_DEBUG=1 adds the source location.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "check.h"
#include "child_process.h"
#include "commands.h"
#include "gang.h"
#include "text.h"

namespace {

std::string joined_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

// The scenario and its overrides; `cuts`: also --cuts and --variants (commands that run variants).
void add_scenario_input(CLI::App* sub, pb::ScenarioArgs& args, bool cuts) {
  sub->add_option("scenario", args.path, "scenario YAML file")->required();
  sub->add_option("--set", args.sets, "override a scenario key: key=value (model.layers=8); repeat for more")
      ->allow_extra_args(false);
  if (!cuts) return;
  sub->add_option("--cuts", args.cuts, "run one cut set: all, none, seed, or a list like land,conv");
  sub->add_option("--variants", args.variants, "run only these of the scenario's variants, a,b, in this order")
      ->delimiter(',');
}

void add_output_options(CLI::App* sub, std::string& output, bool& overwrite, const std::string& default_path) {
  sub->add_option("--output,-o", output, "results file (default " + default_path + ")");
  sub->add_flag("--overwrite", overwrite, "replace an existing results file");
}

// A comma-separated list (space-separated values are accepted too unless
// the option turns off extra arguments, as compare's do before its files).
template <typename T>
CLI::Option* add_list(CLI::App* sub, const std::string& name, std::vector<T>& values, const std::string& help) {
  return sub->add_option(name, values, help)->delimiter(',');
}

}  // namespace

int main(int argc, char** argv) {
  pb::remember_environment();  // before MPI_Init: what `sweep` gives its children
  pb::Gang gang(&argc, &argv);
  CLI::App app{"prefill-bench: the K3 CP prefill superstep with switchable cuts"};
  app.require_subcommand(1);
  app.set_version_flag("--version", pb::version_text(), "print the version, git sha and build options");
  app.footer("Lists are comma-separated (--engine native,cudnn). Errors exit 2.\n"
             "Environment: PB_DEBUG=1 adds the source file and line to error messages.");

  pb::ScenarioArgs plan_args, run_args, lane_args, verify_args;
  CLI::App* plan = app.add_subcommand("plan", "analytic superstep per rank: launches, bytes, FLOPs, roofline");
  add_scenario_input(plan, plan_args, /*cuts=*/true);
  plan->add_option("--profile", plan_args.profile, "GPU profile for the roofline: h200, h100, gb300");
  plan->add_option("--ceiling", plan_args.ceiling,
                   "the GEMM ceiling of the roofline: burst (default), or sustained (what the card holds through a "
                   "superstep; h200 only)");
  plan->add_option("--ranks-per-gpu", plan_args.ranks_per_gpu,
                   "the memory budget's placement (default: cp with serialize_ranks, else 1)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--link", plan_args.link, "fabric link: same-gpu, nvlink4, nvlink5, ib400 (default: the profile's)");
  add_list(plan, "--calibrate", plan_args.calibrate, "benchmark files, a.h5,b.h5: scale by measured fractions");
  plan->add_option("--measured", plan_args.measured, "a run of this scenario to check the calibrated plan against");
  add_output_options(plan, plan_args.output, plan_args.overwrite, "none: the plan is printed, not written");
  pb::SweepArgs sweep_args;
  CLI::App* sweep = app.add_subcommand("sweep", "every point of the scenario's sweep: a run each (mpirun -np <cp>), "
                                                "or a plan; one file");
  add_scenario_input(sweep, sweep_args.scenario, /*cuts=*/true);
  sweep->add_flag("--plan", sweep_args.plan_only, "plan every point (no GPU), as `plan` does");
  sweep->add_option("--gpus", sweep_args.gpus, "GPUs a point runs on (default 1): points of more ranks run serialized")
      ->check(CLI::PositiveNumber);
  sweep->add_option("--profile", sweep_args.scenario.profile, "planned points: the GPU profile (plan --profile)");
  add_list(sweep, "--calibrate", sweep_args.scenario.calibrate, "planned points: benchmark files (plan --calibrate)");
  add_output_options(sweep, sweep_args.scenario.output, sweep_args.scenario.overwrite,
                     "runs/<name>-sweep-<time>.h5; an existing file of this sweep resumes");
  CLI::App* run = app.add_subcommand("run", "measured superstep on the GPUs (one rank per GPU)");
  add_scenario_input(run, run_args, /*cuts=*/true);
  add_output_options(run, run_args.output, run_args.overwrite, "runs/<name>-run-<time>.h5");
  CLI::App* verify = app.add_subcommand(
      "verify", "bit identity of cuts 1, 2, 4, 5, attnres per layer; stripe and CP-N vs CP-1 within the floor");
  add_scenario_input(verify, verify_args, /*cuts=*/false);
  CLI::App* lane = app.add_subcommand(
      "lane", "one MLA layer across the CP gang: per-rank FMHA time vs the schedule, waits, fabric bytes");
  add_scenario_input(lane, lane_args, /*cuts=*/true);
  add_output_options(lane, lane_args.output, lane_args.overwrite, "runs/<name>-lane-<time>.h5");
  lane->add_option("--fmha-tolerance", lane_args.fmha_tolerance,
                   "exit 1 when a rank's FMHA time is off pairs x the pair's time by more than this fraction "
                   "(default 0.10)")
      ->check(CLI::PositiveNumber);

  pb::ScenarioArgs ranks_args;
  CLI::App* ranks = app.add_subcommand("ranks", "print the scenario's rank count (cp), for launch scripts");
  add_scenario_input(ranks, ranks_args, /*cuts=*/false);

  pb::CompareOptions cmp;
  std::vector<std::string> files, variants;
  std::string max_regression = "3%";
  CLI::App* compare = app.add_subcommand("compare", "compare two results files, or two variants of one");
  compare->add_option("files", files, "A.h5 [B.h5]; with --baseline: the candidate run.h5")->required()->expected(1, 2);
  compare->add_option("--baseline", cmp.baseline_file, "regression gate: judge the candidate against this file");
  compare->add_option("--max-regression", max_regression,
                      "allowed TTFT slowdown: a percent in [0, 100) like 3% or a fraction in [0, 1) like 0.03 "
                      "(default 3%)");
  add_list(compare, "--only", cmp.only, "with --baseline: judge only these variants, a,b (each in both files)")
      ->allow_extra_args(false);
  add_list(compare, "--variants", variants, "A,B: compare two variants (inside one file, or A of file A with B of B)")
      ->allow_extra_args(false);
  compare->add_option("--alpha", cmp.alpha, "significance level of the noise test (default 0.05)");
  compare->add_option("--reference", cmp.reference,
                      "one file, no --variants: the variant savings are computed against (default baseline)");
  compare->add_option("--format", cmp.format, "text (default), markdown (a pull request's table), csv, json")
      ->check(CLI::IsMember({"text", "markdown", "csv", "json"}));
  compare->add_flag("--links", cmp.links,
                   "one file: the projected gang's TTFT over each link profile (measured, same-gpu, nvlink4, "
                   "nvlink5, ib400), in any --format");
  compare->add_flag("--verbose", cmp.verbose,
                   "with --baseline: each judged variant's whole comparison, not one line (families, waits, "
                   "projections, outputs)");
  compare->add_option("--normalize", cmp.normalize,
                      "with --baseline: none (default), or sustained: judge the candidate's TTFT times the ratio of "
                      "the two files' sustained GEMM ceilings (compute-bound time only)")
      ->check(CLI::IsMember({"none", "sustained"}));
  compare->footer("With --baseline, exit 0: every judged variant within the allowance; 1: a variant regressed;\n"
                  "2: cannot judge (files of different kinds or scenarios, incomplete, no TTFT samples,\n"
                  "a baseline variant missing from the candidate without --only) or an error.");

  pb::TraceArgs trace_args;
  CLI::App* trace = app.add_subcommand("trace", "one rep of a results file as Chrome trace JSON (Perfetto, chrome://tracing)");
  trace->add_option("file", trace_args.input, "run or lane results file (.h5)")->required();
  trace->add_option("--variant", trace_args.options.variant, "the variant (default: the file's only one)");
  trace->add_option("--rep", trace_args.options.rep, "the rep (default: the last)");
  trace->add_option("--projection", trace_args.options.projection,
                    "the projected gang's link to draw (default: measured, when the file holds one)");
  trace->add_option("--output,-o", trace_args.output, "output .json or .json.gz (default <file>.trace.json.gz)");
  trace->add_flag("--overwrite", trace_args.overwrite, "replace an existing output file");

  pb::SlimArgs slim_args;
  CLI::App* slim = app.add_subcommand("slim", "a results file less its projections' per-span timelines "
                                              "(every measurement stays; trace replays them)");
  slim->add_option("file", slim_args.input, "run or lane results file (.h5)")->required();
  slim->add_option("--output,-o", slim_args.output, "output .h5 (default <file>-slim.h5)");
  slim->add_flag("--overwrite", slim_args.overwrite, "replace an existing output file");

  pb::KernelsBenchOptions kopt;
  CLI::App* kernels = app.add_subcommand("kernels", "baseline vs cut of the memory-bound cut kernels");
  const std::vector<std::string> bench_families = pb::kernels_bench_families();
  add_list(kernels, "--family", kopt.families, "a list of " + pb::join(bench_families) + " (default: all)")
      ->check(CLI::IsMember(bench_families));
  kernels->add_option("--rows", kopt.rows, "rows (the bucket; default 16896)");
  kernels->add_option("--reps", kopt.reps, "timed repetitions, median reported (default 30)");
  kernels->add_option("--warmup", kopt.warmup, "untimed repetitions first (default 3)");
  add_output_options(kernels, kopt.output, kopt.overwrite, "runs/kernels-bench-<time>.h5");

  pb::FmhaBenchOptions fopt;
  CLI::App* fmha = app.add_subcommand("fmha", "the FMHA engines at the MLA shapes (96 heads, d 192/128)");
  add_list(fmha, "--tokens", fopt.tokens, "Tq = Tk values (default 4096,8192,16384)");
  fmha->add_option("--heads", fopt.heads, "heads (default 96)");
  add_list(fmha, "--engine", fopt.engines, "native,cudnn (default: native, and cudnn when built with it)")
      ->check(CLI::IsMember({"native", "cudnn"}));
  add_list(fmha, "--mask", fopt.masks, "dense,causal (default: both)")->check(CLI::IsMember({"dense", "causal"}));
  fmha->add_option("--reps", fopt.reps, "timed repetitions, median reported (default 20)");
  fmha->add_option("--warmup", fopt.warmup, "untimed repetitions first (default 3)");
  add_output_options(fmha, fopt.output, fopt.overwrite, "runs/fmha-bench-<time>.h5");

  pb::KdaBenchOptions dopt;
  CLI::App* kda = app.add_subcommand("kda", "the KDA core at K3 widths (96 heads, d 128, chunk 64)");
  add_list(kda, "--tokens", dopt.tokens, "segment lengths (default 4096,16384)");
  kda->add_option("--heads", dopt.heads, "heads (default 96)");
  kda->add_option("--reps", dopt.reps, "timed repetitions, median reported (default 20)");
  kda->add_option("--warmup", dopt.warmup, "untimed repetitions first (default 3)");
  add_output_options(kda, dopt.output, dopt.overwrite, "runs/kda-bench-<time>.h5");
  pb::MoeBenchOptions mopt;
  CLI::App* moe = app.add_subcommand("moe", "expert GEMMs (grouped vs loop), MoE block, dense FFN, first token at K3");
  moe->add_option("--tokens", mopt.tokens, "T, the segment's live rows (default 16384)");
  moe->add_option("--bucket", mopt.bucket, "b, rows of norms / dense GEMMs / landings (default 16896)");
  moe->add_option("--reps", mopt.reps, "expert GEMM repetitions, median reported (default 20)");
  moe->add_option("--block-reps", mopt.block_reps, "block repetitions, per-launch medians (default 10)");
  moe->add_option("--warmup", mopt.warmup, "untimed expert GEMM repetitions first (default 3)");
  moe->add_option("--seed", mopt.seed, "synthetic weights, inputs and router (default 1234)");
  add_output_options(moe, mopt.output, mopt.overwrite, "runs/moe-bench-<time>.h5");
  pb::GemmBenchOptions gopt;
  CLI::App* gemm = app.add_subcommand("gemm", "the superstep's dense weight GEMMs at K3 shapes, bf16 beside fp8");
  gemm->add_option("--tokens", gopt.tokens, "m, the rows of every GEMM (default 16384)");
  add_list(gemm, "--precision", gopt.precisions, "bf16,fp8 (default both)")->check(CLI::IsMember({"bf16", "fp8"}));
  add_list(gemm, "--gemm", gopt.gemms, "the GEMMs by name (default all)")->check(CLI::IsMember(pb::gemm_bench_names()));
  gemm->add_option("--reps", gopt.reps, "timed repetitions, median reported (default 20)");
  gemm->add_option("--warmup", gopt.warmup, "untimed repetitions first (default 3)");
  gemm->add_option("--fp8-algos", gopt.fp8_algos,
                   "fp8: also time cuBLASLt's next heuristic algorithms, up to this many in all (default 1: the "
                   "first, the one the superstep runs)")
      ->check(CLI::Range(1, 16));
  add_output_options(gemm, gopt.output, gopt.overwrite, "runs/gemm-bench-<time>.h5");

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
    if (*gemm) {
      gopt.command_line = command_line;
      return pb::cmd_gemm(gang, gopt);
    }
    if (*sweep) {
      sweep_args.scenario.command_line = command_line;
      return pb::cmd_sweep(gang, sweep_args);
    }
    if (*trace) return pb::cmd_trace(gang, trace_args);
    if (*slim) return pb::cmd_slim(gang, slim_args);
    if (*ranks) {
      std::printf("%d\n", pb::load_scenario_on_gang(gang, ranks_args).cp);
      return 0;
    }
    if (*compare) {
      cmp.file_a = files[0];
      if (files.size() > 1) cmp.file_b = files[1];
      cmp.max_regression = pb::parse_max_regression(max_regression);
      if (!variants.empty()) {
        PB_CHECK(variants.size() == 2, "--variants takes two names: A,B");
        cmp.variant_a = variants[0];
        cmp.variant_b = variants[1];
      }
      return pb::cmd_compare(gang, cmp);
    }
  } catch (const std::exception& e) {
    gang.fail(e.what(), 2);
  }
  return 0;
}
