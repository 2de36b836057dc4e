// Comparing results: the statistics, the regression decisions on synthetic
// samples, and run_compare on files (report sections, modes, the gate's exit
// codes and what it says it judged), and --max-regression's grammar.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "compare.h"
#include "plan.h"
#include "results.h"
#include "scenario.h"
#include "stats.h"
#include "synthetic_results.h"
#include "temp_dir.h"

namespace {

using pb::test::make_outputs;
using pb::test::reps_around;
using pb::test::synthetic_run;
using pb::test::TempDir;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The gate's options: candidate against baseline, both files of dir.
pb::CompareOptions gate_options(const TempDir& dir, const std::string& baseline, const std::string& candidate) {
  pb::CompareOptions options;
  options.baseline_file = dir.file(baseline);
  options.file_a = dir.file(candidate);
  return options;
}

}  // namespace

// ---- statistics ----

TEST_CASE("stats: quantiles interpolate like numpy, summaries give min/median/max") {
  const std::vector<double> values = {3, 1, 4, 1, 5, 9, 2, 6};
  CHECK(pb::quantile(values, 0) == doctest::Approx(1));
  CHECK(pb::quantile(values, 0.25) == doctest::Approx(1.75));
  CHECK(pb::quantile(values, 0.9) == doctest::Approx(6.9));
  CHECK(pb::median(values) == doctest::Approx(3.5));
  CHECK(pb::median({7}) == 7);
  const pb::Summary summary = pb::summarize(values);
  CHECK(summary.count == 8);
  CHECK(summary.min == 1);
  CHECK(summary.median == doctest::Approx(3.5));
  CHECK(summary.max == 9);
  CHECK(pb::summarize({}).count == 0);
  CHECK_THROWS_AS(pb::median({}), pb::Error);
}

TEST_CASE("stats: one-sided U test matches scipy (exact and with ties)") {
  // scipy.stats.mannwhitneyu(b, a, alternative='greater', method=...)
  pb::UTest test = pb::mann_whitney_greater({1, 2, 3}, {4, 5, 6});
  CHECK(test.exact);
  CHECK(test.u == 9);
  CHECK(test.p_value == doctest::Approx(0.05));

  test = pb::mann_whitney_greater({1, 3, 5, 7, 9}, {2, 4, 6, 8, 10, 12});
  CHECK(test.u == 20);
  CHECK(test.p_value == doctest::Approx(0.21428571428571427));

  test = pb::mann_whitney_greater({1.5, 2.5, 3.1, 0.2, 4.4, 5.0, 6.1}, {2.0, 3.0, 4.0, 5.5, 6.5, 7.5, 8.5, 9.0});
  CHECK(test.u == 43);
  CHECK(test.p_value == doctest::Approx(0.04693084693084693));

  test = pb::mann_whitney_greater({1, 2, 2, 3, 3, 3, 4}, {2, 3, 3, 4, 4, 5, 5, 6});  // ties: normal approximation
  CHECK_FALSE(test.exact);
  CHECK(test.u == 45);
  CHECK(test.p_value == doctest::Approx(0.02494221848996294));

  CHECK(pb::mann_whitney_greater({5, 5}, {5, 5, 5}).p_value == 1);  // all tied: no evidence
  CHECK(pb::mann_whitney_greater({}, {1}).p_value == 1);
}

TEST_CASE("stats: the smallest p-value the exact test can reach") {
  CHECK(pb::smallest_p_value(1, 1) == doctest::Approx(0.5));
  CHECK(pb::smallest_p_value(3, 3) == doctest::Approx(0.05));
  CHECK(pb::smallest_p_value(3, 4) == doctest::Approx(1.0 / 35));
  CHECK(pb::smallest_p_value(0, 5) == 1);
}

// ---- regression decisions on synthetic TTFT samples (threshold 3%, alpha 0.05) ----

TEST_CASE("judge: equal samples are not a regression") {
  const pb::RegressionVerdict verdict = pb::judge_regression(reps_around(100, 0.5), reps_around(100, 0.5), 0.03, 0.05);
  CHECK(verdict.judged);
  CHECK_FALSE(verdict.regressed);
  CHECK(verdict.delta == doctest::Approx(0));
}

TEST_CASE("judge: a faster candidate is not a regression") {
  const pb::RegressionVerdict verdict = pb::judge_regression(reps_around(100, 0.5), reps_around(90, 0.5), 0.03, 0.05);
  CHECK_FALSE(verdict.regressed);
  CHECK(verdict.delta == doctest::Approx(-0.1));
  CHECK(contains(verdict.reason, "faster"));
}

TEST_CASE("judge: 10% slower with tight noise is a regression") {
  const pb::RegressionVerdict verdict = pb::judge_regression(reps_around(100, 0.5), reps_around(110, 0.5), 0.03, 0.05);
  CHECK(verdict.regressed);
  CHECK(verdict.delta == doctest::Approx(0.1));
  CHECK(verdict.method == "exact U test");
  CHECK(verdict.p_value < 1e-4);
}

TEST_CASE("judge: a noisy candidate whose median is 5% higher is not flagged") {
  const std::vector<double> base = reps_around(100, 10);
  std::vector<double> cand = reps_around(105, 10);
  std::rotate(cand.begin(), cand.begin() + 3, cand.end());
  const pb::RegressionVerdict verdict = pb::judge_regression(base, cand, 0.03, 0.05);
  CHECK(verdict.delta == doctest::Approx(0.05));
  CHECK_FALSE(verdict.regressed);
  CHECK(verdict.p_value >= 0.05);
  CHECK(contains(verdict.reason, "within the noise"));
}

TEST_CASE("judge: a tight slowdown below the threshold is not flagged") {
  const pb::RegressionVerdict verdict =
      pb::judge_regression(reps_around(100, 0.05), reps_around(102, 0.05), 0.03, 0.05);
  CHECK(verdict.delta == doctest::Approx(0.02));
  CHECK_FALSE(verdict.regressed);
  CHECK_FALSE(std::isnan(verdict.p_value));  // the U test ran
  CHECK(contains(verdict.reason, "within the allowed"));
}

TEST_CASE("judge: a slowdown that only grazes the threshold within the noise is not flagged") {
  // median +3.2%, but reps spread ±1%: not clearly beyond baseline x 1.03.
  const pb::RegressionVerdict verdict = pb::judge_regression(reps_around(100, 1), reps_around(103.2, 1), 0.03, 0.05);
  CHECK(verdict.delta > 0.03);
  CHECK_FALSE(verdict.regressed);
}

TEST_CASE("judge: too few reps for the U test require disjoint ranges") {
  SUBCASE("one rep each, clearly slower") {
    const pb::RegressionVerdict verdict = pb::judge_regression({100}, {110}, 0.03, 0.05);
    CHECK(verdict.regressed);
    CHECK(verdict.method == "too few reps for the U test");
    CHECK(contains(verdict.reason, "too few reps for the U test"));
  }
  SUBCASE("2 + 2 reps, disjoint") {
    const pb::RegressionVerdict verdict = pb::judge_regression({100, 100.2}, {110, 110.3}, 0.03, 0.05);
    CHECK(verdict.regressed);
    CHECK(std::isnan(verdict.p_value));
  }
  SUBCASE("3 + 3 reps, overlapping, median +3.8%") {
    const pb::RegressionVerdict verdict = pb::judge_regression({100, 105, 110}, {106, 109, 112}, 0.03, 0.05);
    CHECK(verdict.delta == doctest::Approx(109.0 / 105 - 1));
    CHECK_FALSE(verdict.regressed);
    CHECK(verdict.method == "too few reps for the U test");
    CHECK(contains(verdict.reason, "overlap"));
  }
  SUBCASE("3 + 4 reps are enough for the U test") {
    const pb::RegressionVerdict verdict =
        pb::judge_regression({100, 100.1, 100.2}, {110, 110.1, 110.2, 110.3}, 0.03, 0.05);
    CHECK(verdict.method == "exact U test");
    CHECK(verdict.regressed);
  }
}

TEST_CASE("judge: no samples on one side is not judged") {
  const pb::RegressionVerdict verdict = pb::judge_regression({100, 101}, {}, 0.03, 0.05);
  CHECK_FALSE(verdict.judged);
  CHECK_FALSE(verdict.regressed);
  CHECK(contains(verdict.reason, "candidate"));
}

// ---- family times and outputs ----

TEST_CASE("family times: per-rep sums, median over reps; plans sum") {
  pb::VariantResult measured;
  for (int rep = 0; rep < 3; ++rep) {
    measured.spans.push_back({rep, 0, 0, "gemm", "gemm.qkv", 10.0 + rep, 0, 0});
    measured.spans.push_back({rep, 0, 1, "gemm", "gemm.qkv", 10.0 + rep, 0, 0});
    measured.spans.push_back({rep, 1, 0, "gemm", "gemm.qkv", 99.0, 0, 0});  // another rank
  }
  measured.spans.push_back({2, 0, 0, "land", "land.q_band", 6.0, 0, 0});  // only in rep 2: 0, 0, 6
  const std::map<std::string, double> times = pb::family_times_us(measured, 0);
  CHECK(times.at("gemm") == doctest::Approx(22.0));
  CHECK(times.at("land") == doctest::Approx(0.0));
  CHECK(pb::family_times_us(measured, 1).at("gemm") == doctest::Approx(99.0));

  pb::VariantResult plan;
  plan.spans.push_back({-1, 0, 0, "fmha", "fmha.dense", 30.0, 0, 0});
  plan.spans.push_back({-1, 0, 1, "fmha", "fmha.dense", 31.0, 0, 0});
  CHECK(pb::family_times_us(plan, 0).at("fmha") == doctest::Approx(61.0));
}

TEST_CASE("waiting vs compute: fabric.wait* spans by the peer their bells name, the rest compute") {
  pb::VariantResult v;
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t first = int64_t(v.spans.size());
    v.spans.push_back({rep, 1, 0, "fabric", "fabric.wait_window", 5.0 + rep, 0, 0});   // on rank 0
    v.spans.push_back({rep, 1, 0, "fmha", "fmha.dense", 40.0, 0, 0});
    v.spans.push_back({rep, 1, 0, "fabric", "fabric.wait_released", 2.0, 0, 0});        // on ranks 2 and 3
    v.spans.push_back({rep, 1, 0, "fabric", "fabric.publish_window", 1.0, 0, 0});       // a ring: compute
    v.spans.push_back({rep, 0, 0, "fabric", "fabric.wait_return", 100.0, 0, 0});        // another rank
    v.bells.push_back({rep, 1, first, pb::BellOpKind::wait, 0, 0, "window", 4096});
    v.bells.push_back({rep, 1, first + 2, pb::BellOpKind::wait, 2, 0, "released", 0});
    v.bells.push_back({rep, 1, first + 2, pb::BellOpKind::wait, 3, 0, "released", 0});
    v.bells.push_back({rep, 1, first + 3, pb::BellOpKind::ring, 0, 0, "window", 4096});
  }
  v.spans.push_back({2, 1, 0, "fabric", "fabric.wait_halo", 9.0, 0, 0});  // rep 2 only, no bells: 0, 0, 9
  const pb::WaitSplit split = pb::wait_split_us(v, 1);
  CHECK(split.wait_us == doctest::Approx(8.0));  // 7, 8, 20
  CHECK(split.compute_us == doctest::Approx(41.0));
  REQUIRE(split.wait_by_peer_us.size() == 2);
  CHECK(split.wait_by_peer_us.at(0) == doctest::Approx(6.0));
  CHECK(split.wait_by_peer_us.at(-1) == doctest::Approx(2.0));  // several peers, or none named: 2, 2, 11
  CHECK(pb::wait_split_us(v, 0).wait_us == doctest::Approx(100.0));
  // a plan: its fabric waits, no bells
  pb::VariantResult plan;
  plan.spans.push_back({-1, 0, 3, "fabric", "fabric.wait_window", 3.0, 0, 0});
  plan.spans.push_back({-1, 0, 3, "gemm", "gemm.kv_b", 4.0, 0, 0});
  CHECK(pb::wait_split_us(plan, 0).wait_us == doctest::Approx(3.0));
  CHECK(pb::wait_split_us(plan, 0).compute_us == doctest::Approx(4.0));
  CHECK(pb::wait_split_us(plan, 0).wait_by_peer_us.at(-1) == doctest::Approx(3.0));
}

TEST_CASE("outputs: bit-identical vs differing checksums") {
  const pb::Outputs a = make_outputs();
  pb::OutputsVerdict verdict = pb::compare_outputs(a, a);
  CHECK(verdict.recorded);
  CHECK(verdict.bit_identical);
  CHECK(verdict.hidden_rel_l2 == 0);

  pb::Outputs b = make_outputs();
  b.checksums[6] = 99;  // rank 1, layer 2
  b.hidden_samples[0] = 1.5f;
  verdict = pb::compare_outputs(a, b);
  CHECK_FALSE(verdict.bit_identical);
  REQUIRE(verdict.ranks.size() == 2);
  CHECK(verdict.ranks[0].identical == 4);
  CHECK(verdict.ranks[0].first_differing_layer == -1);
  CHECK(verdict.ranks[1].identical == 3);
  CHECK(verdict.ranks[1].first_differing_layer == 2);
  CHECK(verdict.hidden_rel_l2 == doctest::Approx(0.5 / std::sqrt(204.0)));
  CHECK(verdict.token_a == verdict.token_b);
}

// ---- run_compare on files ----

TEST_CASE("run_compare: regression mode flags a slower candidate with exit code 1") {
  TempDir dir;
  pb::write_results(dir.file("base.h5"), synthetic_run(1.0), false);
  pb::write_results(dir.file("slow.h5"), synthetic_run(1.1), false);
  pb::write_results(dir.file("same.h5"), synthetic_run(1.0), false);

  pb::CompareOptions options = gate_options(dir, "base.h5", "slow.h5");
  std::ostringstream quiet;  // by default one line per variant
  CHECK(pb::run_compare(options, quiet) == 1);
  CHECK_FALSE(contains(quiet.str(), "time per superstep"));
  CHECK(contains(quiet.str(), "    all       REGRESSED  TTFT: median +10.00% > allowed +3.00%"));
  CHECK(contains(quiet.str(), "(--verbose: each judged variant's whole comparison"));

  options.verbose = true;
  std::ostringstream report;
  CHECK(pb::run_compare(options, report) == 1);
  const std::string text = report.str();
  CHECK(contains(text, "rank 0: time per superstep by family"));
  CHECK(contains(text, "rank 1: time per superstep by family"));
  CHECK(contains(text, "gemm"));
  CHECK(contains(text, "total"));
  CHECK(contains(text, "TTFT (ms)"));
  CHECK(contains(text, "REGRESSED"));
  CHECK(contains(text, "result: REGRESSED (exit 1): 2 of 2 judged variants regressed: baseline, all"));
  CHECK(text.find("\n  gemm ") < text.find("\n  fmha "));  // slowest family first
  CHECK(text.find("\n  fmha ") < text.find("\n  land "));

  options.file_a = dir.file("same.h5");
  std::ostringstream same_report;
  CHECK(pb::run_compare(options, same_report) == 0);
  CHECK(contains(same_report.str(), "result: pass (exit 0): 0 of 2 judged variants regressed"));
  CHECK(contains(same_report.str(), "bit-identical"));

  options.only = {"all"};  // only the named variant; the other is listed, not judged
  std::ostringstream one_report;
  CHECK(pb::run_compare(options, one_report) == 0);
  CHECK(contains(one_report.str(), "  judged: 1\n    all "));
  CHECK(contains(one_report.str(), "baseline  not named by --only (listed only)"));
  CHECK(contains(one_report.str(), "0 of 1 judged variants regressed"));

  options.only.clear();
  options.variant_a = "all";  // --variants is not the gate's
  std::ostringstream variants;
  CHECK_THROWS_AS(pb::run_compare(options, variants), pb::Error);
}

TEST_CASE("gate: the machines side by side, and --normalize sustained") {
  TempDir dir;
  pb::write_results(dir.file("base.h5"), synthetic_run(1.0), false);
  pb::RunResult slower = synthetic_run(1.05);  // the same work on a machine 5% slower
  pb::test::set_machine(&slower, 665 / 1.05, 1455);
  pb::write_results(dir.file("slower.h5"), slower, false);
  pb::RunResult bare = synthetic_run(1.0);
  bare.numbers.clear();
  pb::write_results(dir.file("bare.h5"), bare, false);

  pb::CompareOptions options = gate_options(dir, "base.h5", "slower.h5");
  std::ostringstream raw;
  CHECK(pb::run_compare(options, raw) == 1);
  CHECK(contains(raw.str(), "machines (baseline | candidate):\n  GPU"));
  CHECK(contains(raw.str(), "NVIDIA H200 | NVIDIA H200"));
  CHECK(contains(raw.str(), "    at SM clock, MHz                      1605 | 1455          (-9.3%)"));
  CHECK(contains(raw.str(), "the machines differ by more than the allowance: the sustained ceilings differ by -4.8% "
                            "(allowed 3.0%); --normalize sustained"));

  options.normalize = "sustained";
  std::ostringstream normalized;
  CHECK(pb::run_compare(options, normalized) == 0);
  CHECK(contains(normalized.str(), "    all       ok         TTFT, normalized to the baseline's sustained GEMM ceiling "
                                   "(B x 0.9524): median "));
  CHECK(contains(normalized.str(), "result: pass (exit 0): 0 of 2 judged variants regressed"));

  options.verbose = true;  // the verdict line of the whole report names the form too
  std::ostringstream verbose;
  CHECK(pb::run_compare(options, verbose) == 0);
  CHECK(contains(verbose.str(), "TTFT, normalized to the baseline's sustained GEMM ceiling (B x 0.9524) verdict: ok"));

  options.file_a = dir.file("base.h5");  // the same machine: within the allowance, the factor 1
  std::ostringstream same;
  CHECK(pb::run_compare(options, same) == 0);
  CHECK(contains(same.str(), "the sustained ceilings differ by +0.0%, within the allowance"));

  options.file_a = dir.file("bare.h5");  // no ceiling recorded: cannot normalize
  std::ostringstream bare_report;
  CHECK(pb::run_compare(options, bare_report) == 2);
  CHECK(contains(bare_report.str(), "the candidate records no sustained GEMM ceiling: the gate cannot see"));
  CHECK(contains(bare_report.str(), "records no sustained GEMM ceiling (root number gemm_tflops_sustained)"));

  options.normalize = "clock";
  std::ostringstream bad;
  CHECK_THROWS_WITH_AS(pb::run_compare(options, bad), "--normalize 'clock': give none or sustained", pb::Error);
  options.normalize = "sustained";
  options.baseline_file.clear();
  CHECK_THROWS_AS(pb::run_compare(options, bad), pb::Error);  // only the gate normalizes
}

TEST_CASE("gate: the libraries each file loaded, named where they differ, in every form") {
  TempDir dir;
  pb::RunResult base = synthetic_run(1.0), cand = synthetic_run(1.0);
  base.text["cudnn_version"] = "9.14.0";
  cand.text["cudnn_version"] = "9.19.0";
  base.text["nccl_version"] = cand.text["nccl_version"] = "2.28.9";
  cand.text["cublas_version"] = "13.1.0";  // recorded by one file only: not a difference
  pb::write_results(dir.file("base.h5"), base, false);
  pb::write_results(dir.file("cand.h5"), cand, false);
  pb::CompareOptions options = gate_options(dir, "base.h5", "cand.h5");
  std::ostringstream text;
  CHECK(pb::run_compare(options, text) == 0);
  CHECK(contains(text.str(), "  the libraries differ: cuDNN 9.14.0 | 9.19.0\n"));
  CHECK_FALSE(contains(text.str(), "the launch lists differ"));
  CHECK_FALSE(contains(text.str(), "NCCL 2.28.9 |"));
  CHECK_FALSE(contains(text.str(), "cuBLAS"));
  options.format = "markdown";
  std::ostringstream markdown;
  CHECK(pb::run_compare(options, markdown) == 0);
  CHECK(contains(markdown.str(), "- the libraries differ: cuDNN 9.14.0 | 9.19.0\n\n| variant |"));
  options.format = "json";
  std::ostringstream json;
  CHECK(pb::run_compare(options, json) == 0);
  const nlohmann::json doc = nlohmann::json::parse(json.str());
  CHECK(doc["machines"]["baseline"]["libraries"]["cuDNN"] == "9.14.0");
  CHECK(doc["machines"]["candidate"]["libraries"]["cuDNN"] == "9.19.0");
  CHECK(doc["machines"]["baseline"]["libraries"]["cuBLAS"].is_null());
  CHECK(doc["machines"]["baseline"]["launch_list_version"] == 1);  // recorded by neither: form 1
  // the same libraries: nothing said
  options.format = "text";
  options.file_a = dir.file("base.h5");
  std::ostringstream same;
  CHECK(pb::run_compare(options, same) == 0);
  CHECK_FALSE(contains(same.str(), "the libraries differ"));
}

TEST_CASE("gate: launch lists of another form are named, not judged") {
  TempDir dir;
  pb::RunResult base = synthetic_run(1.0), cand = synthetic_run(1.0);
  cand.numbers[pb::kLaunchListVersionKey] = pb::kLaunchListVersion;
  pb::write_results(dir.file("base.h5"), base, false);
  pb::write_results(dir.file("cand.h5"), cand, false);
  pb::CompareOptions options = gate_options(dir, "base.h5", "cand.h5");
  std::ostringstream text;
  CHECK(pb::run_compare(options, text) == 0);  // the same TTFT: the form alone fails nothing
  CHECK(contains(text.str(), fmt::format("  the launch lists differ: form 1 | {} (harness/analytic/plan.h",
                                         pb::kLaunchListVersion)));
  options.format = "json";
  std::ostringstream json;
  CHECK(pb::run_compare(options, json) == 0);
  CHECK(nlohmann::json::parse(json.str())["machines"]["candidate"]["launch_list_version"] == pb::kLaunchListVersion);
}

TEST_CASE("compare: savings against a reference that may hold a cold start are warned of") {
  TempDir dir;
  pb::write_results(dir.file("warm.h5"), synthetic_run(1.0), false);  // warmup 1, the first rep the fastest
  pb::RunResult cold = synthetic_run(1.0);
  cold.text["scenario_overrides"] = "--set warmup=0";  // the baseline ran first, cold
  pb::write_results(dir.file("cold.h5"), cold, false);
  pb::RunResult slow_first = synthetic_run(1.0);
  slow_first.variants[1].ttft_ms[0] = 120;  // "all": its first rep 33% over its others' median
  pb::write_results(dir.file("slow-first.h5"), slow_first, false);

  pb::CompareOptions options;
  options.file_a = dir.file("warm.h5");
  std::ostringstream warm;
  CHECK(pb::run_compare(options, warm) == 0);
  CHECK(contains(warm.str(), "savings against 'baseline'"));
  CHECK_FALSE(contains(warm.str(), "cold"));

  options.file_a = dir.file("cold.h5");
  std::ostringstream savings;
  CHECK(pb::run_compare(options, savings) == 0);
  CHECK(contains(savings.str(), "cold\n"));
  CHECK(contains(savings.str(), "warning: the reference 'baseline' in " + dir.file("cold.h5") +
                                    " may hold a cold start: it ran first with no warm-up rep (warmup: 0)"));
  options.variant_a = "baseline";  // the A/B of two variants warns of a cold A too
  options.variant_b = "all";
  std::ostringstream ab;
  CHECK(pb::run_compare(options, ab) == 0);
  CHECK(contains(ab.str(), "warning: the reference 'baseline'"));

  options = pb::CompareOptions{};
  options.file_a = dir.file("slow-first.h5");
  options.reference = "all";
  std::ostringstream slow;
  CHECK(pb::run_compare(options, slow) == 0);
  CHECK(contains(slow.str(), "warning: the reference 'all' in " + dir.file("slow-first.h5") +
                                 " may hold a cold start: it ran its first rep"));

  cold.text["cold_start"] = "all: recorded by the run";  // a recorded flag is the file's word
  pb::write_results(dir.file("recorded.h5"), cold, false);
  options.file_a = dir.file("recorded.h5");
  std::ostringstream recorded;
  CHECK(pb::run_compare(options, recorded) == 0);
  CHECK(contains(recorded.str(), "the reference 'all' in " + dir.file("recorded.h5") +
                                     " may hold a cold start: it recorded by the run"));
}

TEST_CASE("run_compare: two files pair same-named variants; one file compares two variants") {
  TempDir dir;
  pb::write_results(dir.file("a.h5"), synthetic_run(1.0), false);
  pb::RunResult other = synthetic_run(1.0);
  other.variants[1].name = "renamed";
  pb::write_results(dir.file("b.h5"), other, false);

  pb::CompareOptions options;
  options.file_a = dir.file("a.h5");
  options.file_b = dir.file("b.h5");
  std::ostringstream pairwise;
  CHECK(pb::run_compare(options, pairwise) == 0);
  CHECK(contains(pairwise.str(), "=== baseline vs baseline ==="));
  CHECK_FALSE(contains(pairwise.str(), "renamed"));

  options.file_b.clear();
  options.variant_a = "baseline";
  options.variant_b = "all";
  std::ostringstream within;
  CHECK(pb::run_compare(options, within) == 0);  // not regression mode: never 1
  const std::string text = within.str();
  CHECK(contains(text, "=== baseline vs all ==="));
  CHECK(contains(text, "B/A"));
  CHECK(contains(text, "0.900"));  // every family 10% faster in "all"
  CHECK(contains(text, "faster"));
}

TEST_CASE("run_compare: outputs verdict, identical and differing with argmax agreement") {
  TempDir dir;
  pb::RunResult run = synthetic_run(1.0);
  pb::Outputs& changed = run.variants[1].outputs;
  changed.checksums[1] = 1234;  // rank 0, layer 1
  changed.last_logits[2] = 0.25f;
  run.variants[1].outputs.first_token = -1;  // fall back to the argmax of the logits
  pb::write_results(dir.file("run.h5"), run, false);

  pb::CompareOptions options;
  options.file_a = dir.file("run.h5");
  options.variant_a = "baseline";
  options.variant_b = "all";
  std::ostringstream differ;
  pb::run_compare(options, differ);
  const std::string text = differ.str();
  CHECK(contains(text, "outputs: differ"));
  CHECK(contains(text, "rank 0: 3 of 4 layers bit-identical; 1 differ, first differing layer 1"));
  CHECK(contains(text, "rank 1: 4 of 4 layers bit-identical"));
  CHECK(contains(text, "last logits rel-L2"));
  CHECK(contains(text, "first token (argmax): A 1, B 1: agree"));

  options.variant_b = "baseline";
  std::ostringstream same;
  pb::run_compare(options, same);
  CHECK(contains(same.str(), "outputs: bit-identical (2 ranks x 4 layers)"));
}

TEST_CASE("run_compare: unreadable files are errors naming the file") {
  TempDir dir;
  pb::CompareOptions options;
  options.baseline_file = dir.file("nope.h5");
  options.file_a = dir.file("nope-either.h5");
  std::ostringstream report;
  try {
    pb::run_compare(options, report);
    FAIL("expected an error");
  } catch (const pb::Error& error) {
    CHECK(contains(error.what(), "nope.h5"));
  }
}

// ---- the gate: what it judges, what it cannot (exit 2) ----

namespace {

// The gate's files (synthetic_results.h) in a temporary folder.
struct GateFiles {
  TempDir dir;
  GateFiles() {
    for (const auto& [name, run] : pb::test::gate_files()) pb::write_results(dir.file(name), run, false);
  }
  // run_compare --baseline base.h5 <candidate>: the exit code, the report in *text.
  int judge(const std::string& candidate, std::string* text, const std::vector<std::string>& only = {},
            const std::string& baseline = "base.h5") const {
    pb::CompareOptions options;
    options.baseline_file = dir.file(baseline);
    options.file_a = dir.file(candidate);
    options.only = only;
    std::ostringstream report;
    const int code = pb::run_compare(options, report);
    *text = report.str();
    return code;
  }
  // Writes `run` as `name`, then judges it against base.h5.
  int judge(const std::string& name, const pb::RunResult& run, std::string* text) const {
    pb::write_results(dir.file(name), run, false);
    return judge(name, text);
  }
};

}  // namespace

TEST_CASE("gate: pass, regressed, and overrides outside the identity") {
  const GateFiles files;
  std::string text;
  CHECK(files.judge("same.h5", &text) == pb::kComparePass);
  CHECK(contains(text, "  judged: 2\n"));
  CHECK(contains(text, "  not judged: 0\n"));
  CHECK(contains(text, "result: pass (exit 0)"));

  CHECK(files.judge("slow.h5", &text) == pb::kCompareRegressed);
  CHECK(contains(text, "REGRESSED  TTFT: median +10.00% > allowed +3.00%"));

  CHECK(files.judge("fewer-reps.h5", &text) == pb::kComparePass);  // reps, warmup: not the scenario's identity
}

TEST_CASE("gate: a candidate without TTFT samples cannot be judged (plan, lane)") {
  const GateFiles files;
  std::string text;
  CHECK(files.judge("plan.h5", &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "the files hold different kinds: the baseline is a 'run' file, the candidate a 'plan' file"));
  CHECK(contains(text, "plan.h5' holds no TTFT samples (a 'plan' file; the gate judges 'run' files)"));
  CHECK(contains(text, "result: cannot judge (exit 2): no variant judged"));
  CHECK_FALSE(contains(text, "==="));  // nothing compared

  CHECK(files.judge("lane.h5", &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "the candidate a 'lane' file"));

  CHECK(files.judge("plan.h5", &text, {}, "plan.h5") == pb::kCompareCannotJudge);  // same kind, still no TTFT
  CHECK(contains(text, "the baseline '"));
  CHECK_FALSE(contains(text, "different kinds"));
}

TEST_CASE("gate: a file marked incomplete cannot be judged, as candidate or as baseline") {
  const GateFiles files;
  std::string text;
  CHECK(files.judge("incomplete.h5", &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "the candidate '"));
  CHECK(contains(text, "incomplete.h5' is marked incomplete (a run cut short)"));
  CHECK(files.judge("same.h5", &text, {}, "incomplete.h5") == pb::kCompareCannotJudge);
  CHECK(contains(text, "the baseline '"));
}

TEST_CASE("gate: scenarios that differ in identity cannot be judged") {
  const GateFiles files;
  std::string text;
  CHECK(files.judge("other-scenario.h5", &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "the scenarios differ (baseline vs candidate): model.layers 4 vs 3"));

  pb::RunResult renamed = synthetic_run(1.0);  // name, cp, context and bucket through the recorded YAML
  renamed.text["scenario_yaml"] = "name: renamed\nmodel: {preset: tiny}\ncp: 1\ncontext: 256\nbucket: 384\n";
  CHECK(files.judge("renamed.h5", renamed, &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "name synthetic vs renamed; cp 2 vs 1; context 512 vs 256; bucket 256 vs 384"));

  pb::RunResult unreadable = synthetic_run(1.0);
  unreadable.text["scenario_yaml"] = "name: [";
  CHECK(files.judge("unreadable.h5", unreadable, &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "cannot read the scenario recorded in '"));

  pb::RunResult none = synthetic_run(1.0);
  none.text.erase("scenario_yaml");
  CHECK(files.judge("none.h5", none, &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "none.h5' records no scenario (a 'run' file)"));
}

TEST_CASE("gate: a baseline variant missing from the candidate cannot be judged, unless --only leaves it out") {
  const GateFiles files;
  std::string text;
  CHECK(files.judge("no-all.h5", &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "  judged: 1\n    baseline  ok "));
  CHECK(contains(text, "    all       missing from the candidate\n"));
  CHECK(contains(text, "result: cannot judge (exit 2): 1 variant(s) to judge could not be judged: all (--only a,b "
                       "names the variants to judge); 0 of 1 judged variants regressed"));

  CHECK(files.judge("no-all.h5", &text, {"baseline"}) == pb::kComparePass);
  CHECK(files.judge("no-all.h5", &text, {"baseline", "all"}) == pb::kCompareCannotJudge);
  CHECK(contains(text, "all       named by --only, missing from the candidate"));
  CHECK(files.judge("same.h5", &text, {"nope"}) == pb::kCompareCannotJudge);
  CHECK(contains(text, "nope      named by --only, in neither file"));
  CHECK(files.judge("base.h5", &text, {"all"}, "no-all.h5") == pb::kCompareCannotJudge);
  CHECK(contains(text, "named by --only, missing from the baseline"));

  // A candidate variant the baseline lacks is listed, and changes nothing.
  CHECK(files.judge("same.h5", &text, {}, "no-all.h5") == pb::kComparePass);
  CHECK(contains(text, "all       not in the baseline (listed only)"));
}

TEST_CASE("gate: a variant whose cuts differ is not judged; a regression still exits 1") {
  const GateFiles files;
  std::string text;
  CHECK(files.judge("other-cuts.h5", &text) == pb::kCompareCannotJudge);
  CHECK(contains(text, "all       the cuts differ: baseline 'land=on', candidate 'land=on conv=on'"));

  pb::RunResult slow_no_all = synthetic_run(1.1);
  slow_no_all.variants.pop_back();
  CHECK(files.judge("slow-no-all.h5", slow_no_all, &text) == pb::kCompareRegressed);
  CHECK(contains(text, "result: REGRESSED (exit 1): 1 of 1 judged variants regressed: baseline; also, 1 variant(s) "
                       "to judge could not be judged: all"));
}

TEST_CASE("gate: --only belongs to the regression check") {
  pb::CompareOptions options;
  options.file_a = "a.h5";
  options.only = {"all"};
  std::ostringstream report;
  CHECK_THROWS_WITH_AS(pb::run_compare(options, report), doctest::Contains("--only names the variants"), pb::Error);
}

TEST_CASE("--max-regression: a percent in [0, 100) or a fraction in [0, 1), nothing else") {
  CHECK(pb::parse_max_regression("3%") == doctest::Approx(0.03));
  CHECK(pb::parse_max_regression("0.03") == doctest::Approx(0.03));
  CHECK(pb::parse_max_regression("2.5%") == doctest::Approx(0.025));
  CHECK(pb::parse_max_regression(".5%") == doctest::Approx(0.005));
  CHECK(pb::parse_max_regression("0") == 0);
  CHECK(pb::parse_max_regression("0%") == 0);
  CHECK(pb::parse_max_regression("99.9%") == doctest::Approx(0.999));
  CHECK(pb::parse_max_regression("0.999") == doctest::Approx(0.999));
  for (const char* refused : {"3", "1", "1.0", "100%", "abc", "-1%", "-0.03", "3%%", "%", "", ".", "1e-2", " 3%",
                              "3 %", "0.0.3", "+3%", "3%x", "nan", "inf"}) {
    CAPTURE(refused);
    CHECK_THROWS_WITH_AS(pb::parse_max_regression(refused),
                         doctest::Contains("give a percent in [0, 100) such as 3% or 2.5%, or a fraction in [0, 1) "
                                           "such as 0.03"),
                         pb::Error);
  }
}

TEST_CASE("lane files: times per MLA layer, no TTFT") {
  TempDir dir;
  pb::write_results(dir.file("lane.h5"), pb::test::synthetic_without_ttft("lane"), false);
  pb::CompareOptions options;
  options.file_a = dir.file("lane.h5");
  options.variant_a = "baseline";
  options.variant_b = "all";
  std::ostringstream pair;
  CHECK(pb::run_compare(options, pair) == 0);
  CHECK(contains(pair.str(), "kind lane, one MLA layer"));
  CHECK(contains(pair.str(), "rank 0: time per MLA layer by family"));
  CHECK(contains(pair.str(), "no TTFT: a lane file holds one MLA layer"));
  CHECK_FALSE(contains(pair.str(), "TTFT (ms)"));
  CHECK_FALSE(contains(pair.str(), "superstep"));

  options.variant_a.clear();
  options.variant_b.clear();
  std::ostringstream savings;
  CHECK(pb::run_compare(options, savings) == 0);
  CHECK(contains(savings.str(), "(per MLA layer: the deep rank's spans, median over reps)"));
  CHECK(contains(savings.str(), "layer ms"));
  CHECK_FALSE(contains(savings.str(), "TTFT"));
  CHECK_FALSE(contains(savings.str(), "superstep"));
}

// ---- the gate reads every file the README makes ----

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The override forms of the README, docs and committed files' command lines.
std::vector<pb::ScenarioOverrides> override_forms() {
  std::vector<pb::ScenarioOverrides> forms;
  forms.push_back({});
  forms.push_back({{"variants=each-cut"}, "", {}});
  forms.push_back({{"variants=each-cut", "warmup_layers=4"}, "", {"baseline", "land", "conv"}});
  forms.push_back({{"serialize_ranks=true", "turn_settle_ms=0", "warmup=0", "reps=1"}, "", {}});
  forms.push_back({{"serialize_ranks=true", "turn_settle_ms=0", "warmup_layers=4", "reps=1", "variants=each-cut"},
                   "",
                   {"stripe", "balance"}});
  forms.push_back({{}, "seed", {}});
  forms.push_back({{}, "land,conv", {}});
  forms.push_back({{}, "{land: on, stripe: on}", {}});
  forms.push_back({{"model.layers=8"}, "[land, conv]", {}});
  forms.push_back({{"fabric=auto", "emulate_hosts=2"}, "", {}});
  forms.push_back({{"precision=fp8", "reps=2"}, "", {}});
  forms.push_back({{"precision={gemm: fp8, experts: bf16, fmha: bf16}"}, "", {}});
  forms.push_back({{"name=x y", "debug.delay_family=gemm", "debug.delay_us=5"}, "", {}});
  return forms;
}

}  // namespace

TEST_CASE("gate: every scenario and override form round-trips through the recorded text and judges itself") {
  TempDir dir;
  int judged = 0, refused = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PB_SOURCE_DIR) + "/scenarios")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string yaml = read_text(entry.path());
    for (const pb::ScenarioOverrides& form : override_forms()) {
      pb::Scenario scenario;
      try {
        scenario = pb::parse_scenario(yaml, entry.path().string(), form);
      } catch (const pb::Error&) {
        ++refused;  // a form this scenario refuses (run would too): nothing recorded
        continue;
      }
      CAPTURE(entry.path().filename().string());
      CAPTURE(scenario.overrides);
      // the recorded text parses back to the same scenario
      const pb::Scenario again =
          pb::parse_scenario(yaml, entry.path().string(), pb::overrides_from_text(scenario.overrides));
      CHECK(again.overrides == scenario.overrides);
      REQUIRE(again.variants.size() == scenario.variants.size());
      for (size_t i = 0; i < again.variants.size(); ++i) {
        CHECK(again.variants[i].name == scenario.variants[i].name);
        CHECK(again.variants[i].cuts.describe() == scenario.variants[i].cuts.describe());
      }
      CHECK(again.cp == scenario.cp);
      CHECK(again.context == scenario.context);
      CHECK(again.model.layers == scenario.model.layers);
      // a run file recording it: the gate judges it against itself
      pb::RunResult run = synthetic_run(1.0);
      run.text["scenario_yaml"] = yaml;
      run.text["scenario_overrides"] = scenario.overrides;
      run.variants.clear();
      for (const pb::VariantSpec& spec : scenario.variants) {
        run.variants.push_back(pb::test::synthetic_variant(spec.name, 1.0));
        run.variants.back().cuts = spec.cuts.describe();
      }
      const std::string file = dir.file("round-trip.h5");
      pb::write_results(file, run, /*overwrite=*/true);
      pb::CompareOptions options;
      options.baseline_file = file;
      options.file_a = file;
      std::ostringstream report;
      CHECK(pb::run_compare(options, report) == pb::kComparePass);
      ++judged;
    }
  }
  MESSAGE(judged << " scenario x override forms judged themselves; " << refused << " refused by their scenario");
  CHECK(judged >= 60);
}

TEST_CASE("gate: every committed run file judges itself") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PB_SOURCE_DIR) + "/results/h200")) {
    if (entry.path().extension() != ".h5") continue;
    const pb::RunResult run = pb::read_results(entry.path().string());
    if (run.kind != "run" || !run.complete) continue;
    CAPTURE(entry.path().filename().string());
    pb::CompareOptions options;
    options.baseline_file = entry.path().string();
    options.file_a = entry.path().string();
    std::ostringstream report;
    CHECK(pb::run_compare(options, report) == pb::kComparePass);
    if (report.str().find("result: pass") == std::string::npos) MESSAGE(report.str());
    ++files;
  }
  MESSAGE(files << " committed run files judged themselves");
  CHECK(files >= 15);
}
