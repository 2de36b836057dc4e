// Where a rank's wall went (harness/analysis/wall_split.h), on constructed spans.
#include <doctest/doctest.h>

#include "wall_split.h"

namespace {

pb::Span span(const char* family, const char* kernel, double start, double time, int stream = 0) {
  pb::Span s;
  s.family = family;
  s.kernel = kernel;
  s.start_us = start;
  s.time_us = time;
  s.stream = stream;
  return s;
}

}  // namespace

TEST_CASE("wall split: compute, waits, launch gaps and host add up to the wall") {
  // GPU: gemm 0-100, gap 100-110, wait 110-150, land 150-170; wall 200.
  const std::vector<pb::Span> spans = {span("gemm", "gemm.wfu", 0, 100), span("fabric", "fabric.wait_window", 110, 40),
                                       span("land", "land.q_a", 150, 20)};
  pb::WallSplit w;
  REQUIRE(pb::split_wall(spans, 200, w));
  CHECK(w.compute_us == doctest::Approx(120));
  CHECK(w.wait_us == doctest::Approx(40));
  CHECK(w.launch_gap_us == doctest::Approx(10));
  CHECK(w.host_us == doctest::Approx(30));
  CHECK(w.compute_us + w.wait_us + w.launch_gap_us + w.host_us == doctest::Approx(200));
}

TEST_CASE("wall split: overlapping streams count once; a fabric span that does not wait is compute") {
  const std::vector<pb::Span> spans = {span("gemm", "gemm.a", 0, 100), span("fabric", "fabric.publish_window", 50, 80, 1)};
  pb::WallSplit w;
  REQUIRE(pb::split_wall(spans, 130, w));
  CHECK(w.compute_us == doctest::Approx(130));
  CHECK(w.wait_us == 0);
  CHECK(w.launch_gap_us == 0);
  CHECK(w.host_us == 0);
}

TEST_CASE("wall split: spans without a start (older files, plans) cannot be split") {
  std::vector<pb::Span> spans = {span("gemm", "gemm.a", 0, 100)};
  spans[0].start_us = -1;
  pb::WallSplit w;
  CHECK_FALSE(pb::split_wall(spans, 100, w));
  CHECK(pb::split_wall({}, 50, w));
  CHECK(w.host_us == 50);
}

TEST_CASE("wall split: the per-rank table of medians, and nothing for files without the split") {
  pb::VariantResult v;
  v.name = "all";
  for (int rep = 0; rep < 3; ++rep) {
    pb::RankRep r;
    r.rep = rep;
    r.rank = 0;
    r.wall_us = 200e3;
    r.wait_us = 40e3;
    r.launch_gap_us = 10e3;
    r.host_us = 30e3 + rep;
    v.rank_reps.push_back(r);
  }
  const std::string table = pb::format_wall_split(v, true);
  CHECK(table.find("the other ranks' turns") != std::string::npos);
  CHECK(table.find("200.00     120.00      40.00        10.00      30.00") != std::string::npos);
  v.rank_reps[0].launch_gap_us = v.rank_reps[1].launch_gap_us = v.rank_reps[2].launch_gap_us = pb::kNoValue;
  CHECK(pb::format_wall_split(v, false).empty());
}
