// Comparing results: the statistics, the regression decisions on synthetic
// samples, and run_compare on files (report sections, modes, exit codes).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "compare.h"
#include "results.h"
#include "stats.h"

namespace {

// Ten reps with median `center`, spread evenly over center ± 0.9 spread (fixed
// order, no RNG).
std::vector<double> reps_around(double center, double spread) {
  const double offsets[] = {-0.9, 0.5, -0.3, 0.7, -0.5, 0.3, 0.9, -0.7, 0.1, -0.1};
  std::vector<double> samples;
  for (double offset : offsets) samples.push_back(center + spread * offset);
  return samples;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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

namespace {

pb::Outputs make_outputs() {
  pb::Outputs outputs;
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

}  // namespace

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

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "pb-test-compare-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Two ranks, three families, ten reps; every time scaled by `scale`.
pb::VariantResult synthetic_variant(const std::string& name, double scale) {
  pb::VariantResult variant;
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

pb::RunResult synthetic_run(double scale) {
  pb::RunResult run;
  run.text["git_sha"] = "abc";
  run.variants.push_back(synthetic_variant("baseline", scale));
  run.variants.push_back(synthetic_variant("all", scale * 0.9));
  return run;
}

}  // namespace

TEST_CASE("run_compare: regression mode flags a slower candidate with exit code 1") {
  TempDir dir;
  pb::write_results(dir.file("base.h5"), synthetic_run(1.0), false);
  pb::write_results(dir.file("slow.h5"), synthetic_run(1.1), false);
  pb::write_results(dir.file("same.h5"), synthetic_run(1.0), false);

  pb::CompareOptions options;
  options.baseline_file = dir.file("base.h5");
  options.file_a = dir.file("slow.h5");
  std::ostringstream report;
  CHECK(pb::run_compare(options, report) == 1);
  const std::string text = report.str();
  CHECK(contains(text, "rank 0: time per superstep by family"));
  CHECK(contains(text, "rank 1: time per superstep by family"));
  CHECK(contains(text, "gemm"));
  CHECK(contains(text, "total"));
  CHECK(contains(text, "TTFT (ms)"));
  CHECK(contains(text, "REGRESSED"));
  CHECK(contains(text, "2 of 2 variants regressed"));
  CHECK(text.find("\n  gemm ") < text.find("\n  fmha "));  // slowest family first
  CHECK(text.find("\n  fmha ") < text.find("\n  land "));

  options.file_a = dir.file("same.h5");
  std::ostringstream same_report;
  CHECK(pb::run_compare(options, same_report) == 0);
  CHECK(contains(same_report.str(), "0 of 2 variants regressed"));
  CHECK(contains(same_report.str(), "bit-identical"));

  options.variant_a = "all";  // only the named variant
  std::ostringstream one_report;
  CHECK(pb::run_compare(options, one_report) == 0);
  CHECK(contains(one_report.str(), "0 of 1 variants regressed"));

  options.variant_a = "nonexistent";
  std::ostringstream unknown;
  CHECK_THROWS_AS(pb::run_compare(options, unknown), pb::Error);
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
