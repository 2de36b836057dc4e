// Synthetic results for the compare tests (test/analysis/test_compare.cpp) and the
// gate's command-line tests (test/cli/write_gate_files.cpp): runs with
// known TTFT samples, spans and outputs, and the set of files that exercises
// each of the gate's verdicts. No RNG: every value is fixed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "results.h"

namespace pb::test {

// Ten reps with median `center`, spread evenly over center ± 0.9 spread (fixed order).
inline std::vector<double> reps_around(double center, double spread) {
  const double offsets[] = {-0.9, 0.5, -0.3, 0.7, -0.5, 0.3, 0.9, -0.7, 0.1, -0.1};
  std::vector<double> samples;
  for (double offset : offsets) samples.push_back(center + spread * offset);
  return samples;
}

inline Outputs make_outputs() {
  Outputs outputs;
  outputs.ranks = 2;
  outputs.layers = 4;
  outputs.checksums = {11, 12, 13, 14, 21, 22, 23, 24};
  outputs.sample_rows = 1;
  outputs.sample_cols = 4;
  outputs.hidden_samples = {1, 2, 3, 4, 5, 6, 7, 8};
  outputs.last_logits = {0.1f, 3.0f, 0.2f};
  outputs.first_token = 1;
  return outputs;
}

// The scenario every synthetic run records (tiny model, two ranks).
inline const char* synthetic_scenario_yaml() {
  return "name: synthetic\n"
         "model: {preset: tiny}\n"
         "cp: 2\n"
         "context: 512\n"
         "variants:\n"
         "  - {name: baseline, cuts: none}\n"
         "  - {name: all, cuts: all}\n";
}

// Two ranks, three families, ten reps; every time scaled by `scale`.
inline VariantResult synthetic_variant(const std::string& name, double scale) {
  VariantResult variant;
  variant.name = name;
  variant.cuts = name == "baseline" ? "land=off" : "land=on";
  const std::vector<double> ttft = reps_around(100 * scale, 0.5);
  for (int rep = 0; rep < 10; ++rep) {
    for (int rank = 0; rank < 2; ++rank) {
      variant.spans.push_back({rep, rank, 0, "gemm", "gemm.qkv", 500 * scale, 0, 0});
      variant.spans.push_back({rep, rank, 0, "fmha", "fmha.dense", 300 * scale, 0, 0});
      variant.spans.push_back({rep, rank, 0, "land", "land.q_band", 40 * scale, 0, 0});
      variant.rank_reps.push_back({rep, rank, 900 * scale, 5, 1e9, 1e10});
    }
    variant.ttft_ms.push_back(ttft[size_t(rep)]);
  }
  variant.outputs = make_outputs();
  return variant;
}

// The machine a synthetic run records (the gate prints it; compare.h): bf16
// GEMM ceilings, burst and sustained, and the sustained window's clock and power.
inline void set_machine(RunResult* run, double sustained_tflops, double sm_mhz) {
  run->text["gpus"] = "rank 0: NVIDIA H200 GPU-00000000-0000-0000-0000-000000000000 bus 0000:00:06.0 on test";
  run->numbers["gemm_tflops"] = 760;
  run->numbers["gemm_tflops_sustained"] = sustained_tflops;
  run->numbers["gemm_sustained_sm_mhz"] = sm_mhz;
  run->numbers["gemm_sustained_power_w"] = 700;
}

// A measured run of the synthetic scenario: "baseline" and "all" (10% faster),
// on a machine with a sustained ceiling of 665 TFLOP/s at 1605 MHz.
inline RunResult synthetic_run(double scale) {
  RunResult run;
  run.kind = "run";
  set_machine(&run, 665, 1605);
  run.text["git_sha"] = "abc";
  run.text["scenario_yaml"] = synthetic_scenario_yaml();
  run.text["scenario_overrides"] = "";
  run.variants.push_back(synthetic_variant("baseline", scale));
  run.variants.push_back(synthetic_variant("all", scale * 0.9));
  return run;
}

// The same scenario as another kind (plan: rep -1 spans; lane: one layer's
// spans): neither holds TTFT samples or outputs.
inline RunResult synthetic_without_ttft(const std::string& kind) {
  RunResult run = synthetic_run(1.0);
  run.kind = kind;
  for (VariantResult& variant : run.variants) {
    variant.ttft_ms.clear();
    variant.outputs = Outputs{};
    if (kind == "plan")
      for (Span& span : variant.spans) span.rep = -1;
  }
  return run;
}

// The files of the gate's tests, by name; the baseline is "base.h5".
inline std::vector<std::pair<std::string, RunResult>> gate_files() {
  std::vector<std::pair<std::string, RunResult>> files;
  files.emplace_back("base.h5", synthetic_run(1.0));
  files.emplace_back("same.h5", synthetic_run(1.0));      // pass
  files.emplace_back("slow.h5", synthetic_run(1.1));      // both variants 10% slower: regressed
  RunResult incomplete = synthetic_run(1.0);
  incomplete.complete = false;
  files.emplace_back("incomplete.h5", incomplete);
  files.emplace_back("plan.h5", synthetic_without_ttft("plan"));
  files.emplace_back("lane.h5", synthetic_without_ttft("lane"));
  RunResult other = synthetic_run(1.0);
  other.text["scenario_overrides"] = "--set model.layers=3 --set reps=2";
  files.emplace_back("other-scenario.h5", other);
  RunResult fewer_reps = synthetic_run(1.0);  // overrides outside the identity: still comparable
  fewer_reps.text["scenario_overrides"] = "--set reps=2 --set warmup=0";
  files.emplace_back("fewer-reps.h5", fewer_reps);
  RunResult no_all = synthetic_run(1.0);
  no_all.variants.pop_back();
  files.emplace_back("no-all.h5", no_all);
  // The same work on a machine whose sustained ceiling is 5% lower: TTFT 5%
  // slower, regressed raw, within the allowance with --normalize sustained.
  RunResult slower_machine = synthetic_run(1.05);
  set_machine(&slower_machine, 665 / 1.05, 1455);
  files.emplace_back("slower-machine.h5", slower_machine);
  RunResult no_ceiling = synthetic_run(1.0);  // a file without the machine's ceilings
  no_ceiling.numbers.clear();
  files.emplace_back("no-ceiling.h5", no_ceiling);
  RunResult other_cuts = synthetic_run(1.0);
  other_cuts.variants[1].cuts = "land=on conv=on";
  files.emplace_back("other-cuts.h5", other_cuts);
  return files;
}

}  // namespace pb::test
