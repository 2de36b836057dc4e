// A sweep's points (harness/config/sweep.h) from the scenario key, and the
// sweep file (harness/results/sweep_file.h): points added, replaced, read
// back in order, summarized, and refused where they are not a sweep's.
#include <cmath>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "check.h"
#include "results.h"
#include "scenario.h"
#include "sweep.h"
#include "sweep_file.h"
#include "synthetic_results.h"
#include "temp_dir.h"

namespace {

const char* kBase =
    "name: s\nmodel: {preset: tiny}\ncp: 8\ncontext: 131072\nbucket: 16896\n"
    "variants:\n  - {name: baseline, cuts: none}\n";

pb::Scenario with_sweep(const std::string& sweep) { return pb::parse_scenario(std::string(kBase) + sweep, "s.yaml"); }

}  // namespace

TEST_CASE("sweep: points are the lists' product, precision, then cp, then context") {
  const pb::Scenario s = with_sweep("sweep:\n  context: [16384, 131072]\n  cp: [4, 8]\n  precision: [bf16, fp8]\n");
  const std::vector<pb::SweepPointSpec> points = pb::sweep_points(s, 1);
  REQUIRE(points.size() == 8);
  CHECK(points[0].id == "ctx16384-cp4-bf16");
  CHECK(points[1].id == "ctx131072-cp4-bf16");
  CHECK(points[2].id == "ctx16384-cp8-bf16");
  CHECK(points[7].id == "ctx131072-cp8-fp8");
  // cp8-128k's bucket headroom (16896 over 16384) is kept, rounded up to 128
  CHECK(points[3].sets == std::vector<std::string>{"context=131072", "cp=8", "bucket=16896", "precision=bf16",
                                                   "serialize_ranks=true"});
  CHECK(points[0].sets[2] == "bucket=4224");  // 4096 x 33/32
  CHECK(points[2].sets[2] == "bucket=2176");  // 2048 x 33/32 = 2112, rounded up to 128
  // enough GPUs: not serialized
  const std::vector<pb::SweepPointSpec> eight_gpus = pb::sweep_points(s, 8);
  for (const auto& set : eight_gpus[3].sets) CHECK(set != "serialize_ranks=true");
}

TEST_CASE("sweep: segment gives the tokens a rank; a missing list keeps the scenario's value") {
  const pb::Scenario s = with_sweep("sweep:\n  segment: 16384\n  cp: [1, 2]\n");
  const std::vector<pb::SweepPointSpec> points = pb::sweep_points(s, 1);
  REQUIRE(points.size() == 2);
  CHECK(points[0].context == 16384);
  CHECK(points[1].context == 32768);
  CHECK(points[1].precision == "bf16");
  CHECK(points[1].id == "ctx32768-cp2-bf16");
  CHECK(pb::sweep_points(with_sweep("sweep: {precision: fp8}\n"), 1)[0].sets[0] == "context=131072");
}

TEST_CASE("sweep: the key's errors name the file, the key and what is allowed") {
  CHECK_THROWS_WITH_AS(with_sweep("sweep: {tokens: [1]}\n"),
                       doctest::Contains("sweep.tokens: unknown key 'tokens'; allowed keys under sweep: context, "
                                         "segment, cp, precision"),
                       pb::Error);
  CHECK_THROWS_WITH_AS(with_sweep("sweep: {context: [1024], segment: [128]}\n"),
                       doctest::Contains("give context (tokens in all) or segment"), pb::Error);
  CHECK_THROWS_WITH_AS(with_sweep("sweep: {cp: [65]}\n"), doctest::Contains("sweep.cp[0]: must be between 1 and 64"),
                       pb::Error);
  CHECK_THROWS_WITH_AS(with_sweep("sweep: {precision: [fp16]}\n"),
                       doctest::Contains("sweep.precision[0]: 'fp16' is not allowed; allowed values: bf16, fp8, fp4"),
                       pb::Error);
  CHECK_THROWS_WITH_AS(with_sweep("sweep: {cp: []}\n"), doctest::Contains("sweep.cp: expected a non-empty list"),
                       pb::Error);
  CHECK_THROWS_WITH_AS(pb::sweep_points(pb::parse_scenario(kBase, "s.yaml"), 1),
                       doctest::Contains("s.yaml: the scenario has no sweep"), pb::Error);
  CHECK_THROWS_WITH_AS(pb::sweep_points(with_sweep("sweep: {context: [1001], cp: [8]}\n"), 1),
                       doctest::Contains("sweep point context 1001 is not divisible by cp 8"), pb::Error);
}

TEST_CASE("sweep file: points in order, replaced in place, summarized, and only in a sweep file") {
  pb::test::TempDir dir;
  const std::string sweep = dir.file("sweep.h5"), point = dir.file("point.h5");
  pb::RunResult root;
  root.kind = "sweep";
  root.complete = false;
  pb::write_results(sweep, root, false);
  pb::RunResult run = pb::test::synthetic_run(1.0);
  for (pb::Span& span : run.variants[0].spans) span.flops = 1;
  pb::write_results(point, run, false);

  const std::vector<pb::SweepFamilyRow> families = {{"baseline", "gemm", 5.0, std::nan("")},
                                                    {"baseline", "fmha", 3.0, 2.5}};
  pb::add_sweep_point(sweep, {"b", 512, 2, "bf16", "failed", "exit 3: no CUDA device"}, "", {}, false);
  pb::add_sweep_point(sweep, {"a", 256, 1, "bf16", "measured", ""}, point, families, false);
  pb::add_sweep_point(sweep, {"b", 512, 2, "bf16", "planned", "the scenario does not fit on GPU 0"}, point, families,
                      true);
  const std::vector<pb::SweepPointRecord> points = pb::read_sweep_points(sweep);
  REQUIRE(points.size() == 2);
  CHECK(points[0].id == "a");  // b was replaced: it now comes after a
  CHECK(points[1].id == "b");
  CHECK(points[1].status == "planned");
  CHECK(points[1].error == "the scenario does not fit on GPU 0");
  CHECK(points[0].context == 256);
  CHECK(points[1].cp == 2);
  const pb::RunResult read = pb::read_results(sweep);  // a results file all the same
  CHECK(read.kind == "sweep");
  CHECK(read.complete);
  CHECK(std::filesystem::file_size(sweep) < std::filesystem::file_size(point) * 3);  // summaries, no spans
  CHECK_FALSE(std::filesystem::exists(sweep + ".tmp"));

  CHECK_THROWS_WITH_AS(pb::add_sweep_point(sweep, {"c/d", 1, 1, "bf16", "measured", ""}, point, {}, false),
                       doctest::Contains("sweep point id 'c/d'"), pb::Error);
  CHECK_THROWS_WITH_AS(pb::add_sweep_point(sweep, {"c", 1, 1, "bf16", "done", ""}, point, {}, false),
                       doctest::Contains("status 'done'; allowed: measured, planned, failed"), pb::Error);
  CHECK_THROWS_WITH_AS(pb::read_sweep_points(point), doctest::Contains("not a sweep file"), pb::Error);
  CHECK_THROWS_WITH_AS(pb::add_sweep_point(point, {"c", 1, 1, "bf16", "failed", ""}, "", {}, false),
                       doctest::Contains("not a sweep file"), pb::Error);
  CHECK(pb::read_sweep_points(sweep).size() == 2);  // a refused change leaves the file as it was
}

TEST_CASE("sweep file: parallel efficiency over cp at each context and precision, stored and kept current") {
  const auto point = [](const std::string& id, int64_t context, int32_t cp, const std::string& precision,
                        std::map<std::string, double> ttft) {
    pb::SweepPointRecord p{id, context, cp, precision, "planned", ""};
    p.ttft_ms = std::move(ttft);
    return p;
  };
  // 64k: cp 2 takes 100 ms, cp 4 60 ms (2 x 100 / (4 x 60) = 0.8333), cp 8 25 ms (200 / 200 = 1);
  // 128k alone at its context; an fp8 point of the same context apart; "all" only where both have it.
  const std::vector<pb::SweepPointRecord> points = {
      point("c64-2", 65536, 2, "bf16", {{"baseline", 100.0}, {"all", 80.0}}),
      point("c64-4", 65536, 4, "bf16", {{"baseline", 60.0}}),
      point("c64-8", 65536, 8, "bf16", {{"baseline", 25.0}, {"all", 40.0}}),
      point("c128-8", 131072, 8, "bf16", {{"baseline", 90.0}}),
      point("c64-4-fp8", 65536, 4, "fp8", {{"baseline", 30.0}})};
  const auto e = pb::parallel_efficiency(points);
  CHECK(e.at("c64-2").at("baseline") == doctest::Approx(1.0));
  CHECK(e.at("c64-4").at("baseline") == doctest::Approx(200.0 / 240.0));
  CHECK(e.at("c64-8").at("baseline") == doctest::Approx(1.0));
  CHECK(e.at("c64-8").at("all") == doctest::Approx(160.0 / 320.0));
  CHECK(e.at("c64-4").count("all") == 0);
  CHECK(e.count("c128-8") == 0);
  CHECK(e.count("c64-4-fp8") == 0);

  // In the file: each point's TTFT, and every point's efficiency recomputed as points arrive.
  pb::test::TempDir dir;
  const std::string sweep = dir.file("sweep.h5"), run_file = dir.file("point.h5");
  pb::RunResult root;
  root.kind = "sweep";
  pb::write_results(sweep, root, false);
  pb::write_results(run_file, pb::test::synthetic_run(1.0), false);
  pb::add_sweep_point(sweep, points[0], run_file, {}, false);
  CHECK(pb::read_sweep_points(sweep).at(0).efficiency.empty());  // alone so far
  pb::add_sweep_point(sweep, points[1], run_file, {}, false);
  pb::add_sweep_point(sweep, points[2], run_file, {}, true);
  const std::vector<pb::SweepPointRecord> read = pb::read_sweep_points(sweep);
  REQUIRE(read.size() == 3);
  CHECK(read[0].ttft_ms == points[0].ttft_ms);
  CHECK(read[1].efficiency.at("baseline") == doctest::Approx(200.0 / 240.0));
  CHECK(read[0].efficiency.at("all") == doctest::Approx(1.0));
  CHECK(read[2].efficiency.at("all") == doctest::Approx(0.5));
  // A replaced point moves every efficiency of its context: cp 2 now 50 ms, so cp 4's is 100 / 240.
  pb::SweepPointRecord faster = points[0];
  faster.ttft_ms = {{"baseline", 50.0}};
  pb::add_sweep_point(sweep, faster, run_file, {}, true);
  for (const pb::SweepPointRecord& p : pb::read_sweep_points(sweep))
    if (p.id == "c64-4") CHECK(p.efficiency.at("baseline") == doctest::Approx(100.0 / 240.0));
}
