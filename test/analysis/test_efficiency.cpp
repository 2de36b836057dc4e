// The model FLOPs utilization (harness/analysis/efficiency.h): its
// arithmetic on constructed runs and plans, the peaks it divides by, and the
// committed cp8-128k run.
#include <cmath>
#include <string>

#include <doctest/doctest.h>

#include "check.h"
#include "efficiency.h"
#include "profile.h"
#include "synthetic_results.h"

TEST_CASE("efficiency: model FLOPs over every rank of one rep, over TTFT x GPUs x peak") {
  pb::RunResult run = pb::test::synthetic_run(1.0);  // two ranks, ten reps, an "NVIDIA H200"
  pb::VariantResult& v = run.variants[0];
  for (pb::Span& span : v.spans) span.flops = span.rep == 0 ? 1e13 : 7e13;  // rep 0: 3 launches x 2 ranks
  const pb::Efficiency e = pb::efficiency_of(run, v);
  CHECK(e.model_flops == 6e13);
  CHECK(e.gpus == 2);
  CHECK(e.profile == "h200");
  CHECK(e.ttft_ms == doctest::Approx(100.0));  // the median of reps_around(100, 0.5)
  CHECK(e.mfu_bf16_datasheet == doctest::Approx(6e13 / (0.1 * 2 * 989e12)));
  CHECK(std::isnan(e.mfu_fp8_datasheet));
  CHECK(e.mfu_burst == doctest::Approx(6e13 / (0.1 * 2 * 760e12)));
  CHECK(e.mfu_sustained == doctest::Approx(6e13 / (0.1 * 2 * 665e12)));
  CHECK(pb::describe_efficiency(e).rfind("MFU 30.3% of the datasheet bf16 peak (h200, 2 GPUs); 39.5% of the "
                                         "bf16 GEMM burst measured, 45.1% of the sustained; model 0.06 PFLOP",
                                         0) == 0);

  run.text["precision"] = "fp8";  // fp8 GEMMs: the fp8 peak too, and no bf16 ceiling
  const pb::Efficiency fp8 = pb::efficiency_of(run, v);
  CHECK(fp8.mfu_fp8_datasheet == doctest::Approx(6e13 / (0.1 * 2 * 1979e12)));
  CHECK(std::isnan(fp8.mfu_burst));

  run.text["gpus"] = "rank 0: Some Other GPU";  // no datasheet, the measured ceilings remain
  run.text["precision"] = "bf16";
  const pb::Efficiency other = pb::efficiency_of(run, v);
  CHECK(other.profile.empty());
  CHECK(std::isnan(other.mfu_bf16_datasheet));
  CHECK(other.mfu_burst > 0);
  v.ttft_ms.clear();  // no TTFT: no MFU
  CHECK(pb::describe_efficiency(pb::efficiency_of(run, v)).rfind("MFU: not known", 0) == 0);
}

TEST_CASE("efficiency: a plan divides by the rank that ends last, at its profile's peak") {
  pb::RunResult plan = pb::test::synthetic_without_ttft("plan");
  plan.text["gpu_profile"] = "gb300";
  pb::VariantResult& v = plan.variants[0];
  for (pb::Span& span : v.spans) span.flops = 1e12;
  const pb::Efficiency e = pb::efficiency_of(plan, v);
  // each rank: 10 reps of (500 + 300 + 40) us, all at rep -1 in a plan
  CHECK(e.ttft_ms == doctest::Approx(8.4));
  CHECK(e.model_flops == doctest::Approx(60e12));
  CHECK(e.mfu_bf16_datasheet == doctest::Approx(60e12 / (8.4e-3 * 2 * 2500e12)));
  CHECK(std::isnan(e.mfu_burst));  // a plan measured no ceiling
  pb::RunResult result;
  pb::record_efficiency(e, "baseline", result);
  CHECK(result.numbers.at("model_flops.baseline") == e.model_flops);
  CHECK(result.numbers.at("mfu_bf16_datasheet.baseline") == e.mfu_bf16_datasheet);
  CHECK(result.numbers.count("mfu_burst.baseline") == 0);
  plan.numbers["calibrated_ms.baseline"] = 16.8;  // a calibrated plan: its calibrated superstep
  CHECK(pb::efficiency_of(plan, v).ttft_ms == 16.8);
  CHECK(pb::efficiency_of(plan, v).mfu_bf16_datasheet == doctest::Approx(e.mfu_bf16_datasheet / 2));
}

TEST_CASE("efficiency: the datasheet peaks, and a device's profile by its name") {
  CHECK(pb::datasheet_peak("h200").bf16_tflops == 989);
  CHECK(pb::datasheet_peak("h200").fp8_tflops == 1979);
  CHECK(pb::datasheet_peak("gb300").bf16_tflops == 2500);
  CHECK_THROWS_AS(pb::datasheet_peak("a100"), pb::Error);
  CHECK(pb::profile_of_device("rank 0: NVIDIA H200 GPU-1234") == "h200");
  CHECK(pb::profile_of_device("NVIDIA H100 80GB HBM3") == "h100");
  CHECK(pb::profile_of_device("NVIDIA B300") == "gb300");
  CHECK(pb::profile_of_device("NVIDIA A100").empty());
}

TEST_CASE("efficiency: the committed cp8-128k run, its projected gang of 8 H200s") {
  const pb::RunResult run = pb::read_results(std::string(PB_SOURCE_DIR) + "/results/h200/cp8-128k.h5");
  const pb::Efficiency e = pb::efficiency_of(run, *run.find_variant("baseline"));
  CHECK(e.gpus == 8);
  CHECK(e.model_flops == doctest::Approx(4.0556e16).epsilon(1e-4));
  CHECK(e.ttft_ms == doctest::Approx(13059.4).epsilon(1e-5));  // the headline: the projected gang
  CHECK(e.mfu_bf16_datasheet == doctest::Approx(0.3925).epsilon(1e-3));
}
