// The Chrome trace of a run (harness/analysis/trace.h) on constructed files:
// valid JSON, every span on its rank's and stream's track at its time, every
// flow between two existing spans, the projected gang as further processes.
#include <doctest/doctest.h>
#include <zlib.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "projection.h"
#include "temp_dir.h"
#include "trace.h"

using json = nlohmann::json;

namespace {

// Two ranks, two reps: rank 0 rings rank 1's window doorbell at its span 1;
// rank 1 waits for it at its span 1. Rank 1 also has a second stream.
pb::RunResult make_run(bool with_starts) {
  pb::RunResult r;
  r.kind = "run";
  r.text["git_sha"] = "abc";
  pb::VariantResult v;
  v.name = "all";
  v.cuts = "land=on";
  for (int rep = 0; rep < 2; ++rep) {
    for (int rank = 0; rank < 2; ++rank) {
      const int64_t first = int64_t(v.spans.size());
      const double s = with_starts ? 0.0 : -1.0;
      v.spans.push_back({rep, rank, 0, "gemm", "gemm.wfu", 100.0, 2e9, 4e9, 0, with_starts ? 0.0 : s});
      v.spans.push_back({rep, rank, 0, "fabric", rank == 0 ? "fabric.publish_window" : "fabric.wait_window", 5.0,
                         rank == 0 ? 1e6 : 0.0, 0, 0, with_starts ? 110.0 : s});
      v.spans.push_back({rep, rank, 0, "fmha", "fmha.dense", 50.0, 1e8, 1e12, rank, with_starts ? 120.0 : s});
      if (rank == 0)
        v.bells.push_back({rep, 0, first + 1, pb::BellOpKind::ring, 1, 3, "window", 4096ull * uint64_t(rep + 1)});
      else
        v.bells.push_back({rep, 1, first + 1, pb::BellOpKind::wait, 0, 3, "window", 4096ull * uint64_t(rep + 1)});
    }
    v.ttft_ms.push_back(1.0);
  }
  r.variants.push_back(v);
  return r;
}

json parse(const std::string& text) {
  json doc = json::parse(text);  // throws on invalid JSON
  REQUIRE(doc.contains("traceEvents"));
  return doc;
}

std::vector<json> of_phase(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("trace: every span of the rep on its rank's and stream's track, at its measured time") {
  const pb::RunResult run = make_run(true);
  const json doc = parse(pb::trace_json(run, {}));
  CHECK(doc["otherData"]["rep"] == 1);  // the last rep by default
  const std::vector<json> spans = of_phase(doc, "X");
  REQUIRE(spans.size() == 6);
  std::set<std::pair<int, int>> tracks;
  for (const json& e : spans) {
    tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (e["name"] == "gemm.wfu") {
      CHECK(e["ts"] == 0.0);
      CHECK(e["dur"] == 100.0);
      CHECK(e["cat"] == "gemm");
      CHECK(e["args"]["TFLOP/s"].get<double>() == doctest::Approx(40.0));
      CHECK(e["args"]["TB/s"].get<double>() == doctest::Approx(20.0));
    }
  }
  CHECK(tracks == std::set<std::pair<int, int>>{{0, 0}, {1, 0}, {1, 1}});
  // Every track is named.
  std::set<std::pair<int, int>> named;
  for (const json& e : of_phase(doc, "M"))
    if (e["name"] == "thread_name") named.insert({e["pid"].get<int>(), e["tid"].get<int>()});
  CHECK(named == tracks);
}

TEST_CASE("trace: a flow from the ring to the wait it met, both on existing spans") {
  const pb::RunResult run = make_run(true);
  const json doc = parse(pb::trace_json(run, {"all", 0, ""}));
  const std::vector<json> starts = of_phase(doc, "s"), ends = of_phase(doc, "f");
  REQUIRE(starts.size() == 1);
  REQUIRE(ends.size() == 1);
  CHECK(starts[0]["id"] == ends[0]["id"]);
  const auto inside = [&](const json& point) {
    for (const json& e : of_phase(doc, "X"))
      if (e["pid"] == point["pid"] && e["tid"] == point["tid"] && e["ts"].get<double>() <= point["ts"].get<double>() &&
          point["ts"].get<double>() <= e["ts"].get<double>() + e["dur"].get<double>())
        return e["name"].get<std::string>();
    return std::string();
  };
  CHECK(inside(starts[0]) == "fabric.publish_window");
  CHECK(inside(ends[0]) == "fabric.wait_window");
  CHECK(starts[0]["pid"] == 0);
  CHECK(ends[0]["pid"] == 1);
  // The fabric bytes counter of rank 0.
  const std::vector<json> counters = of_phase(doc, "C");
  REQUIRE(counters.size() == 1);
  CHECK(counters[0]["args"]["bytes"] == 1e6);
}

TEST_CASE("trace: without start times the spans lie back to back per stream, and say so") {
  const pb::RunResult run = make_run(false);
  const json doc = parse(pb::trace_json(run, {}));
  std::map<std::string, double> rank1;
  for (const json& e : of_phase(doc, "X")) {
    CHECK(e["args"].contains("start"));
    if (e["pid"] == 1) rank1[e["name"]] = e["ts"];
  }
  CHECK(rank1["gemm.wfu"] == 0.0);
  CHECK(rank1["fabric.wait_window"] == 100.0);
  CHECK(rank1["fmha.dense"] == 0.0);  // alone on stream 1
}

TEST_CASE("trace: the projected gang as processes of its own") {
  pb::RunResult run = make_run(true);
  pb::Projection p;
  p.link = "measured";
  p.rep = 1;
  p.ttft_ms = 0.2;
  for (int64_t row = 6; row < 12; ++row) p.timeline.push_back({row, 10.0 * double(row), 10.0 * double(row) + 5});
  run.variants[0].projections.push_back(p);
  const json doc = parse(pb::trace_json(run, {}));
  int projected = 0;
  for (const json& e : of_phase(doc, "X"))
    if (e["pid"].get<int>() >= 1000) {
      ++projected;
      CHECK(e["dur"] == 5.0);
    }
  CHECK(projected == 6);
  CHECK(doc["otherData"]["projection"]["link"] == "measured");
  CHECK(of_phase(doc, "s").size() == 2);  // the measured flow and the projected one
}

TEST_CASE("trace: a slimmed file's projected gang is replayed, the same as the stored one") {
  pb::RunResult run = make_run(true);
  for (pb::BellOp& bell : run.variants[0].bells) bell.flag = 0;  // doorbell_index(2, sender 0, window)
  run.variants[0].projections.push_back(pb::project_variant(run.variants[0], "measured"));
  REQUIRE_FALSE(run.variants[0].projections[0].timeline.empty());
  const std::string full = pb::trace_json(run, {});
  pb::drop_projection_timelines(run);
  CHECK(pb::trace_json(run, {}) == full);
  CHECK(of_phase(parse(full), "X").size() == 12);  // six measured spans, six projected
}

TEST_CASE("trace: bad picks name what the file holds") {
  pb::RunResult run = make_run(true);
  CHECK_THROWS_WITH(pb::trace_json(run, {"none", -1, ""}), doctest::Contains("it holds all"));
  CHECK_THROWS_WITH(pb::trace_json(run, {"all", 7, ""}), doctest::Contains("reps 0..1"));
  run.variants.push_back(run.variants[0]);
  run.variants[1].name = "baseline";
  CHECK_THROWS_WITH(pb::trace_json(run, {}), doctest::Contains("--variant"));
  run.variants[1].spans.assign(1, pb::Span{});  // a plan: rep -1 only
  CHECK_THROWS_WITH(pb::trace_json(run, {"baseline", -1, ""}), doctest::Contains("no measured spans"));
}

TEST_CASE("trace: written plain or gzip-compressed, never over an existing file unless asked") {
  pb::test::TempDir dir;
  const std::string text = pb::trace_json(make_run(true), {});
  const std::string plain = dir.file("t.json"), packed = dir.file("t.json.gz");
  pb::write_trace(plain, text, false);
  pb::write_trace(packed, text, false);
  CHECK_THROWS_WITH(pb::write_trace(plain, text, false), doctest::Contains("--overwrite"));
  pb::write_trace(plain, text, true);
  gzFile f = gzopen(packed.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string back(text.size() + 16, '\0');
  const int n = gzread(f, back.data(), unsigned(back.size()));
  gzclose(f);
  back.resize(size_t(std::max(n, 0)));
  CHECK(back == text);
}
