// `plan --calibrate` (harness/analytic/calibration.h): families scaled by the
// benchmarks' measured fractions, and the calibrated plan against the committed
// measured runs.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "calibration.h"
#include "check.h"
#include "plan.h"
#include "plan_test.h"
#include "scenario.h"
#include "temp_dir.h"

using namespace pb;
using namespace pb::plan_test;

namespace {

// A bench row at `fraction` of the H200's copy ceiling.
BenchRow memory_row(const std::string& family, const std::string& kernel, const std::string& variant, double bytes,
                    double fraction) {
  BenchRow r;
  r.family = family;
  r.kernel = kernel;
  r.variant = variant;
  r.shape = "test";
  r.bytes = bytes;
  r.median_us = bytes / 4.25e6 / fraction;
  r.fraction = fraction;
  r.reps = 3;
  return r;
}

double launches_ms(const RankCalibration& c, const std::string& family) { return family_ms(c.spans, family); }

double roofline_ms(const Scenario& s, const CutSet& cuts, const std::string& family) {
  return family_ms(plan_spans(plan_rank(s, cuts, 0), gpu_profile("h200")), family);
}

}  // namespace

TEST_CASE("calibration: each family scaled by its measured fraction, from a kernels file written here") {
  test::TempDir dir("pb-test-plan");
  RunResult kernels;
  kernels.kind = "kernels";
  // land: the same bytes for baseline and cut (the benchmark's convention), 0.4 and 0.95 of the ceiling
  kernels.bench.push_back(memory_row("land", "land.n12288", "baseline", 1.25e9, 0.4));
  kernels.bench.push_back(memory_row("land", "land.n12288", "cut", 1.25e9, 0.95));
  // conv: the baseline path timed against the cut's bytes at 0.1 of the ceiling
  kernels.bench.push_back(memory_row("conv", "conv.qkv", "baseline", 3.7e9, 0.1));
  kernels.bench.push_back(memory_row("conv", "conv.qkv", "cut", 3.7e9, 0.9));
  kernels.bench.push_back(memory_row("land", "land.n12288", "cut.ring", 1.25e9, 0.01));  // an alternative: skipped
  const std::string path = dir.file("kernels.h5");
  write_results(path, kernels, false);

  const Calibration cal = load_calibration({path});
  REQUIRE(cal.rows.size() == 5);
  CHECK(cal.rows[0].file == "kernels.h5");
  CHECK(cal.rows[0].same_work);   // land baseline: its cut row has the same bytes
  CHECK_FALSE(cal.rows[1].same_work);

  Scenario s = k3(1, 16384);
  const GpuProfile h200 = gpu_profile("h200");
  const LinkProfile link = link_profile("nvlink4");
  const RankCalibration base = calibrate_rank(s, CutSet::none(), 0, cal, h200, link);
  const RankCalibration cut = calibrate_rank(s, all_but_overlap(), 0, cal, h200, link);
  CHECK(launches_ms(base, "land") == doctest::Approx(roofline_ms(s, CutSet::none(), "land") / 0.4));
  CHECK(launches_ms(cut, "land") == doctest::Approx(roofline_ms(s, all_but_overlap(), "land") / 0.95));
  // conv's baseline: the cut's roofline over the baseline's fraction (the benchmark's work is the cut's)
  CHECK(launches_ms(base, "conv") == doctest::Approx(roofline_ms(s, all_but_overlap(), "conv") / 0.1));
  CHECK(launches_ms(cut, "conv") == doctest::Approx(roofline_ms(s, all_but_overlap(), "conv") / 0.9));
  // the same bytes with the cut on and off: only calibration shows the land cut's gain
  CHECK(roofline_ms(s, CutSet::none(), "land") == roofline_ms(s, all_but_overlap(), "land"));
  CHECK(launches_ms(cut, "land") < 0.5 * launches_ms(base, "land"));
  // families without a row keep their roofline and are counted uncalibrated
  CHECK(launches_ms(base, "gemm") == doctest::Approx(roofline_ms(s, CutSet::none(), "gemm")));
  CHECK(base.families.at("gemm").uncalibrated == base.families.at("gemm").launches);
  CHECK(base.families.at("land").uncalibrated == 0);
  CHECK(base.families.at("land").sources.count("kernels.h5 family") == 1);
  double total = 0;
  for (const auto& sp : base.spans) total += sp.time_us / 1e3;
  CHECK(base.calibrated_ms == doctest::Approx(total));

  // a later file replaces a row of the same family, kernel and variant
  RunResult better;
  better.kind = "kernels";
  better.bench.push_back(memory_row("land", "land.n12288", "baseline", 1.25e9, 0.5));
  const std::string path2 = dir.file("better.h5");
  write_results(path2, better, false);
  const RankCalibration replaced =
      calibrate_rank(s, CutSet::none(), 0, load_calibration({path, path2}), h200, link);
  CHECK(launches_ms(replaced, "land") == doctest::Approx(roofline_ms(s, CutSet::none(), "land") / 0.5));

  // a file without bench rows is refused, naming it
  RunResult plan;
  plan.kind = "plan";
  write_results(dir.file("plan.h5"), plan, false);
  CHECK_THROWS_WITH_AS(load_calibration({dir.file("plan.h5")}), doctest::Contains("plan.h5' (kind 'plan') has no /bench"),
                       Error);
}

TEST_CASE("calibration: rows count only in the launch's state and engine") {
  RunResult moe;
  moe.kind = "moe";
  BenchRow gemm_cutlass = memory_row("gemm", "gemm.shared", "moe_block_cutlass.none", 1.25e9, 1);
  gemm_cutlass.flops = 2.98e12;
  gemm_cutlass.median_us = gemm_cutlass.flops / 797e6 / 0.5;  // tensor-bound: 0.5 of the GEMM ceiling
  BenchRow gemm_grouped = gemm_cutlass;
  gemm_grouped.variant = "moe_block.none";
  gemm_grouped.median_us *= 4;  // 0.125
  BenchRow gemm_all = gemm_cutlass;
  gemm_all.variant = "moe_block_cutlass.all";
  gemm_all.median_us /= 1.6;  // 0.8
  moe.bench = {gemm_cutlass, gemm_grouped, gemm_all};
  const Calibration cal = make_calibration({{"moe.h5", moe}});
  Scenario s = k3(1, 16384);
  s.moe_gemm = "auto";  // reads as cutlass
  const GpuProfile h200 = gpu_profile("h200");
  const LinkProfile link = link_profile("nvlink4");
  auto shared_ms = [&](const Scenario& sc, const CutSet& cuts) {
    double ms = 0;
    for (const auto& sp : calibrate_rank(sc, cuts, 0, cal, h200, link).spans)
      if (sp.kernel == "gemm.shared") ms += sp.time_us / 1e3;
    return ms;
  };
  double roof = 0;
  for (const auto& sp : plan_spans(plan_rank(s, CutSet::none(), 0), h200))
    if (sp.kernel == "gemm.shared") roof += sp.time_us / 1e3;
  CHECK(shared_ms(s, CutSet::none()) == doctest::Approx(roof / 0.5));
  CHECK(shared_ms(s, all_but_overlap()) == doctest::Approx(roof / 0.8));  // beside every cut: the ".all" rows
  CutSet land = CutSet::none();
  land.set(Cut::land, true);
  CHECK(shared_ms(s, land) == doctest::Approx(roof / 0.5));  // a mixed set reads the ".none" rows
  s.moe_gemm = "grouped";
  CHECK(shared_ms(s, CutSet::none()) == doctest::Approx(roof / 0.125));
  // the other gemm launches pool the family's rows of that state
  s.moe_gemm = "cutlass";
  const RankCalibration c = calibrate_rank(s, CutSet::none(), 0, cal, h200, link);
  CHECK(c.families.at("gemm").uncalibrated == 0);
  CHECK(c.families.at("gemm").calibrated_ms == doctest::Approx(c.families.at("gemm").roofline_ms / 0.5));
}

TEST_CASE("measured superstep: TTFT median, the deep rank's families, median over reps") {
  RunResult run;
  run.kind = "run";
  VariantResult v;
  v.name = "baseline";
  v.ttft_ms = {10, 30, 20};
  for (int rep = 0; rep < 3; ++rep)
    for (int rank = 0; rank < 2; ++rank) {
      v.spans.push_back({rep, rank, 0, "land", "land.q_b", 1000.0 * (rank + 1) * (rep + 1), 0, 0});
      v.spans.push_back({rep, rank, 0, "gemm", "gemm.q_b", 500.0 * (rank + 1), 0, 0});
    }
  run.variants.push_back(v);
  const MeasuredSuperstep m = measured_superstep(run, "baseline");
  CHECK(m.reps == 3);
  CHECK(m.ttft_ms == 20);
  CHECK(m.deep_rank == 1);
  CHECK(m.family_ms.at("land") == doctest::Approx(4.0));  // 2, 4, 6 ms
  CHECK(m.family_ms.at("gemm") == doctest::Approx(1.0));
  CHECK(m.span_ms == doctest::Approx(5.0));
  CHECK_THROWS_WITH_AS(measured_superstep(run, "all"), doctest::Contains("no variant 'all'; it has: baseline"), Error);
}

namespace {

// The committed H200 results, and the calibration their benchmark files give.
std::string committed_results_dir() { return std::string(PB_SOURCE_DIR) + "/results/h200/"; }
Calibration committed_calibration() {
  std::vector<std::string> files;
  for (const char* f : {"kernels.h5", "attnres.h5", "fmha.h5", "kda.h5", "moe.h5"})
    files.push_back(committed_results_dir() + f);
  return load_calibration(files);
}

// The K3 each-cut scenario a committed run file was made from (cutlass expert engine).
Scenario each_cut_k3(const std::string& name, int cp, int64_t context, const std::string& more = "") {
  return parse_scenario(fmt::format("name: {}\nmodel: {{preset: k3}}\ncp: {}\ncontext: {}\nbucket: 16896\n"
                                    "variants: each-cut\nmoe_gemm: cutlass\n{}",
                                    name, cp, context, more),
                        name + ".yaml");
}

}  // namespace

TEST_CASE("the calibrated plan of cp4-64k against the committed serialized run's projected gang: within 10%") {
  // Four ranks took turns on one GPU: the run's TTFT holds every rank's turns, and the gang's TTFT is
  // the projection; the plan's deepest calibrated rank predicts it.
  const std::string dir = committed_results_dir();
  const Calibration cal = committed_calibration();
  const Scenario s = each_cut_k3("ab-each-cut", 4, 65536, "serialize_ranks: true\n");
  const RunResult run = read_measured_run(dir + "cp4-64k-each-cut.h5", s);
  const GpuProfile h200 = gpu_profile("h200");
  for (const auto& variant : s.variants) {
    double deepest = 0;
    for (int r = 0; r < s.cp; ++r)
      deepest = std::max(deepest, calibrate_rank(s, variant.cuts, r, cal, h200, link_profile("nvlink4")).calibrated_ms);
    const MeasuredSuperstep m = measured_superstep(run, variant.name);
    REQUIRE(m.projected_link == "measured");
    const double error = deepest / m.projected_ms - 1;
    MESSAGE(variant.name << ": calibrated deepest rank " << deepest << " ms, projected gang " << m.projected_ms
                         << " ms, error " << 100 * error << "%");
    CHECK(std::abs(error) < 0.10);
    CHECK(m.ttft_ms > 3 * m.projected_ms);  // the serialized TTFT: every rank's turns
  }
}

TEST_CASE("the calibrated plan of cp1-16k against the committed run: within 10% per variant") {
  // The committed H200 benchmark files and the each-cut run: every variant it has (a file made before
  // balance and overlap lacks those two).
  const std::string dir = committed_results_dir();
  const Calibration cal = committed_calibration();
  const Scenario s = each_cut_k3("cp1-16k", 1, 16384);
  const RunResult run = read_measured_run(dir + "cp1-16k-each-cut.h5", s);
  const GpuProfile h200 = gpu_profile("h200");
  REQUIRE(s.variants.size() == 10);
  for (const auto& variant : s.variants) {
    if (run.find_variant(variant.name) == nullptr) {  // a file from before the cut
      CHECK((variant.name == "balance" || variant.name == "overlap"));
      continue;
    }
    const RankCalibration c = calibrate_rank(s, variant.cuts, 0, cal, h200, link_profile("nvlink4"));
    const MeasuredSuperstep m = measured_superstep(run, variant.name);
    const double error = c.calibrated_ms / m.ttft_ms - 1;
    MESSAGE(variant.name << ": calibrated " << c.calibrated_ms << " ms, measured TTFT " << m.ttft_ms << " ms, error "
                         << 100 * error << "%");
    CHECK(std::abs(error) < 0.10);
    // calibration moves the prediction from the roofline toward the measurement
    CHECK(std::abs(c.roofline_ms / m.ttft_ms - 1) > std::abs(error));
  }
  // the run file of another scenario is refused
  Scenario other = s;
  other.context = 8192;
  CHECK_THROWS_WITH_AS(read_measured_run(dir + "cp1-16k-each-cut.h5", other),
                       doctest::Contains("measured scenario 'cp1-16k' cp 1 context 16384"), Error);
  CHECK_THROWS_WITH_AS(read_measured_run(dir + "kernels.h5", s), doctest::Contains("is a kernels file"), Error);
}

TEST_CASE("the calibrated plan of cp1-16k in fp8 against the committed fp8 run: within 5%, from fp8 rows only") {
  // The fp8 GEMMs take the gemm benchmark's fp8 rows and the moe benchmark's cutlass_fp8 rows; its bf16 rows
  // (the gemm benchmark's "bf16", the MoE blocks') calibrate bf16 launches only (docs/plan.md has the figures).
  const std::string dir = committed_results_dir();
  std::vector<std::string> files;
  for (const char* f : {"kernels.h5", "attnres.h5", "fmha.h5", "kda.h5", "moe.h5", "gemm.h5", "moe-fp8.h5"})
    files.push_back(dir + f);
  const Calibration cal = load_calibration(files);
  Scenario s = parse_scenario("name: cp1-16k\nmodel: {preset: k3}\ncp: 1\ncontext: 16384\nbucket: 16896\n"
                              "precision: fp8\nvariants:\n  - {name: baseline, cuts: none}\n  - {name: all, cuts: all}\n",
                              "cp1-16k.yaml");
  const RunResult run = read_measured_run(dir + "cp1-16k-fp8.h5", s);
  const GpuProfile h200 = gpu_profile("h200");
  for (const auto& variant : s.variants) {
    const RankCalibration c = calibrate_rank(s, variant.cuts, 0, cal, h200, link_profile("nvlink4"));
    const MeasuredSuperstep m = measured_superstep(run, variant.name);
    const double error = c.calibrated_ms / m.ttft_ms - 1;
    MESSAGE(variant.name << ": calibrated " << c.calibrated_ms << " ms, measured TTFT " << m.ttft_ms << " ms, error "
                         << 100 * error << "%");
    CHECK(std::abs(error) < 0.05);
    for (const char* family : {"gemm", "moe_gemm"}) {
      CAPTURE(family);
      const FamilyCalibration& f = c.families.at(family);
      CHECK(f.uncalibrated == 0);
      for (const std::string& source : f.sources)  // the expert GEMMs from the fp8 rows of moe-fp8.h5 alone
        if (std::string(family) == "moe_gemm") CHECK(source == "moe-fp8.h5 name");
    }
  }
}
