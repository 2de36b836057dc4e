// Reps run at a sagging clock or at the power cap (harness/analysis/power_state.h).
#include <doctest/doctest.h>

#include <sstream>

#include "compare.h"
#include "power_state.h"
#include "temp_dir.h"

namespace {

pb::RankRep rep(int32_t r, int32_t rank, double sm, double capped) {
  pb::RankRep x;
  x.rep = r;
  x.rank = rank;
  x.sm_mhz = sm;
  x.power_capped = capped;
  return x;
}

}  // namespace

TEST_CASE("power state: sagged and capped reps are named, steady ones are not") {
  pb::VariantResult v;
  v.name = "all";
  v.rank_reps = {rep(0, 0, 1980, 0.0), rep(1, 0, 1700, 0.1), rep(2, 0, 1975, 0.9),
                 rep(0, 1, 1600, 0.0), rep(1, 1, 1590, 0.0)};  // rank 1 is slow throughout: its own best
  const std::vector<pb::PowerStateNote> notes = pb::power_state_notes(v);
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].rep == 1);
  CHECK(notes[0].sagged);
  CHECK_FALSE(notes[0].capped);
  CHECK(notes[0].best_sm_mhz == 1980);
  CHECK(notes[1].rep == 2);
  CHECK(notes[1].capped);
  CHECK_FALSE(notes[1].sagged);
  const std::string text = pb::format_power_state("all", notes);
  CHECK(text.find("all rep 1 rank 0: SM clock median 1700 MHz (best rep 1980), sagged") != std::string::npos);
  CHECK(text.find("at the power cap") != std::string::npos);
}

TEST_CASE("power state: files without clocks have nothing to say") {
  pb::VariantResult v;
  v.rank_reps = {pb::RankRep{}, pb::RankRep{}};  // NaN clocks
  CHECK(pb::power_state_notes(v).empty());
  CHECK(pb::format_power_state("x", {}).empty());
}

TEST_CASE("power state: compare prints the sagged reps of either side") {
  pb::test::TempDir dir;
  pb::RunResult run;
  run.kind = "run";
  pb::VariantResult v;
  v.name = "all";
  v.ttft_ms = {100.0, 130.0};
  v.rank_reps = {rep(0, 0, 1980, 0.0), rep(1, 0, 1500, 0.8)};
  run.variants.push_back(v);
  const std::string a = dir.file("a.h5"), b = dir.file("b.h5");
  pb::write_results(a, run, false);
  run.variants[0].rank_reps = {rep(0, 0, 1980, 0.0), rep(1, 0, 1975, 0.0)};
  pb::write_results(b, run, false);
  pb::CompareOptions o;
  o.file_a = a;
  o.file_b = b;
  std::ostringstream out;
  pb::run_compare(o, out);
  CHECK(out.str().find("GPU power state") != std::string::npos);
  CHECK(out.str().find("rep 1 rank 0: SM clock median 1500 MHz (best rep 1980), sagged, at the power cap") !=
        std::string::npos);
}
