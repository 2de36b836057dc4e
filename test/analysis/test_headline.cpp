// The headline TTFT and the cold-start rule (harness/analysis/headline.h), on
// constructed runs: which form a file's TTFT takes, the samples it yields,
// and when a variant's samples may hold a cold start.
#include <cmath>

#include <doctest/doctest.h>

#include "check.h"
#include "headline.h"
#include "synthetic_results.h"

using pb::TtftForm;

TEST_CASE("headline: the recorded form, else memory_ranks_per_gpu with a measured projection") {
  pb::RunResult run = pb::test::synthetic_run(1.0);
  const pb::VariantResult& v = run.variants[0];
  CHECK(pb::ttft_form(run, v) == TtftForm::measured);  // nothing recorded, one rank per GPU
  CHECK(pb::headline_ttft(run, v).ms == v.ttft_ms);
  run.numbers["memory_ranks_per_gpu"] = 2;  // shared, but no projection: still measured
  CHECK(pb::ttft_form(run, v) == TtftForm::measured);
  pb::Projection gang;
  gang.link = "measured";
  gang.reps = {{0, 55.0, 100.0, 1.0}, {1, 54.0, 101.0, 1.0}};
  run.variants[0].projections.push_back(gang);
  CHECK(pb::ttft_form(run, run.variants[0]) == TtftForm::projected);
  CHECK(pb::headline_ttft(run, run.variants[0]).ms == std::vector<double>{55.0, 54.0});
  run.text["ttft_headline"] = "measured";  // the recorded form wins
  CHECK(pb::ttft_form(run, run.variants[0]) == TtftForm::measured);
  run.text["ttft_headline"] = "wall";
  CHECK_THROWS_WITH_AS(pb::ttft_form(run, run.variants[0]),
                       "root text 'ttft_headline' is 'wall'; allowed: measured, projected", pb::Error);
  CHECK(pb::ttft_form_of_run(true, 4) == TtftForm::projected);
  CHECK(pb::ttft_form_of_run(true, 1) == TtftForm::measured);
  CHECK(pb::ttft_form_of_run(false, 8) == TtftForm::measured);
}

TEST_CASE("headline: a plan's TTFT is planned: the calibrated deepest rank, else the roofline's deepest rank") {
  pb::RunResult plan;
  plan.kind = "plan";
  plan.text["ttft_headline"] = "measured";  // a plan's form does not depend on what else the file says
  pb::VariantResult v;
  v.name = "all";
  for (const auto& [rank, us] : {std::pair{0, 300.0}, {0, 400.0}, {1, 650.0}, {2, 100.0}}) {
    pb::Span s;
    s.rep = -1;
    s.rank = rank;
    s.time_us = us;
    v.spans.push_back(s);
  }
  plan.variants.push_back(v);
  CHECK(pb::ttft_form(plan, v) == TtftForm::planned);
  CHECK(pb::headline_ttft(plan, v).ms == std::vector<double>{0.7});  // rank 0 ends last: 700 us
  plan.numbers["calibrated_ms.all"] = 0.9;
  CHECK(pb::headline_ttft(plan, v).ms == std::vector<double>{0.9});
  plan.numbers["calibrated_ms.all"] = -1;  // not a value: the roofline's
  CHECK(pb::headline_ttft(plan, v).ms == std::vector<double>{0.7});
  CHECK(std::string(pb::ttft_form_label(TtftForm::planned)) == "planned TTFT");
  pb::VariantResult empty;
  empty.name = "none";
  CHECK(pb::headline_ttft(plan, empty).ms.empty());
}

TEST_CASE("headline: a cold start: the first variant without warm-up, or a slow first rep") {
  // the first variant with warmup 0, whatever its samples
  CHECK(pb::cold_start_reason(true, 0, {100, 100, 100}) == "ran first with no warm-up rep (warmup: 0)");
  CHECK(pb::cold_start_reason(true, 0, {}) == "ran first with no warm-up rep (warmup: 0)");
  CHECK(pb::cold_start_reason(false, 0, {100}) == "");  // later variants ran after it
  CHECK(pb::cold_start_reason(true, 1, {100}) == "");   // one rep: nothing to measure it against
  // the first rep against the median of the others: the excess must pass 3%
  CHECK(pb::cold_start_reason(false, 1, {103.0, 100, 99, 101}) == "");  // +3.0%: at the limit, not over
  CHECK(pb::cold_start_reason(false, 1, {110, 100, 99, 101}) ==
        "ran its first rep 10.0% slower than the median of its other reps (110.0 vs 100.0 ms)");
  CHECK(pb::cold_start_reason(false, 1, {90, 100, 99, 101}) == "");  // faster is not cold
  CHECK(pb::cold_start_reason(false, 1, {std::nan(""), 100}) == "");  // no sample, no claim
}

TEST_CASE("headline: the recorded cold starts round-trip, and a bad line is named") {
  const std::map<std::string, std::string> reasons = {{"baseline", "ran first with no warm-up rep (warmup: 0)"},
                                                      {"land", "ran its first rep 4.0% slower: x"}};
  const std::string text = pb::format_cold_starts(reasons);
  CHECK(text == "baseline: ran first with no warm-up rep (warmup: 0)\nland: ran its first rep 4.0% slower: x");
  CHECK(pb::parse_cold_starts(text) == reasons);
  CHECK(pb::parse_cold_starts("").empty());
  CHECK_THROWS_WITH_AS(pb::parse_cold_starts("baseline: ok\nnonsense"),
                       "root text 'cold_start': line 'nonsense' is not '<variant>: <why>'", pb::Error);
}
