// A recorded gang over other links (links.h): the link bytes an older run
// file's fabric spans take from its plan, what cannot be restored, and the
// projected TTFT over each link profile of the committed cp4-64k and cp8-128k
// runs (the link table of docs/results-h200.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>

#include "check.h"
#include "links.h"
#include "model.h"
#include "profile.h"
#include "projection.h"
#include "results.h"

using namespace pb;

namespace {

std::string committed(const std::string& name) { return std::string(PB_SOURCE_DIR) + "/results/h200/" + name; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

double ttft_over(const std::vector<LinkRow>& rows, const std::string& variant, const std::string& link) {
  for (const LinkRow& r : rows)
    if (r.variant == variant && r.link == link) return r.ttft_ms;
  FAIL("no row for ", variant, " over ", link);
  return 0;
}

}  // namespace

TEST_CASE("links: an older run's fabric spans take the link bytes of its plan, and its link projections follow") {
  const std::string file = committed("cp8-128k.h5");
  RunResult run = read_results(file);
  REQUIRE(run.text.count(kFabricSpanBytesKey) == 0);  // recorded before runs stored the link's bytes
  CHECK(contains(fabric_span_bytes(run), "copy cost"));
  const RunResult before = run;
  REQUIRE(restore_link_bytes(run, file));
  CHECK(fabric_span_bytes(run) == kFabricSpanBytesRestored);
  CHECK_FALSE(restore_link_bytes(run, file));  // once

  const ModelShape m = model_preset("k3");
  const double halo = 3.0 * m.hidden * 2;
  std::map<std::string, int> moved;  // fabric kernels that now carry bytes
  for (size_t v = 0; v < run.variants.size(); ++v) {
    const VariantResult& now = run.variants[v];
    const VariantResult& was = before.variants[v];
    REQUIRE(now.spans.size() == was.spans.size());
    for (size_t i = 0; i < now.spans.size(); ++i) {
      const Span& s = now.spans[i];
      if (s.family != "fabric") {
        CHECK(s.bytes == was.spans[i].bytes);  // only the fabric's bytes change
        continue;
      }
      if (s.kernel == "fabric.publish_halo") {
        CHECK(was.spans[i].bytes == 2 * halo);  // the copy's traffic (read + write)
        CHECK(s.bytes == halo);                 // what crosses the link
      }
      if (s.kernel == "fabric.wait_halo") CHECK(s.bytes == halo);
      if (s.kernel.find("free") != std::string::npos || s.kernel.find("release") != std::string::npos)
        CHECK(s.bytes == 0);  // doorbells only
      if (s.bytes > 0) ++moved[s.kernel];
    }
    // Replayed over its link with the restored bytes; the fabric as measured stays as it was.
    const Projection* nvlink = now.projection("nvlink4");
    REQUIRE(nvlink);
    REQUIRE(nvlink->link == "nvlink4");
    CHECK(nvlink->ttft_ms == doctest::Approx(project_variant(now, "nvlink4").ttft_ms));
    CHECK(nvlink->timeline.empty() == was.projection("nvlink4")->timeline.empty());
    CHECK(now.projection(kMeasuredLink)->ttft_ms == was.projection(kMeasuredLink)->ttft_ms);
  }
  for (const char* kernel : {"fabric.publish_halo", "fabric.wait_halo", "fabric.wait_state", "fabric.wait_window",
                             "fabric.wait_queries", "fabric.publish_return"}) {
    CAPTURE(kernel);
    CHECK(moved[kernel] > 0);
  }
}

TEST_CASE("links: bytes that cannot be matched to the plan stay as recorded, and the file says why") {
  const std::string file = committed("cp8-128k.h5");
  SUBCASE("no scenario") {
    RunResult run = read_results(file);
    run.text.erase("scenario_yaml");
    CHECK_FALSE(restore_link_bytes(run, file));
    CHECK(contains(fabric_span_bytes(run), "records no scenario"));
  }
  SUBCASE("a cut this build does not know") {
    RunResult run = read_results(file);
    run.variants.back().cuts += " warp=on";
    std::vector<double> bytes;
    for (const Span& s : run.variants.front().spans) bytes.push_back(s.bytes);
    CHECK_FALSE(restore_link_bytes(run, file));
    CHECK(contains(fabric_span_bytes(run), "recorded cut 'warp' is unknown to this build"));
    for (size_t i = 0; i < bytes.size(); ++i) CHECK(run.variants.front().spans[i].bytes == bytes[i]);  // in no variant
  }
  SUBCASE("the plan of the variant's recorded cuts, not of what its name means today") {
    // The file's "all" is six cuts; this build's "all" is eight, whose plan has other launches.
    RunResult run = read_results(file);
    CHECK(run.find_variant("all")->cuts.find("balance=on") == std::string::npos);
    CHECK(restore_link_bytes(run, file));
  }
  SUBCASE("a fabric span the plan does not have") {
    RunResult run = read_results(file);
    Span extra = run.variants.front().spans.front();
    extra.family = "fabric";
    extra.kernel = "fabric.wait_elsewhere";
    run.variants.front().spans.push_back(extra);
    CHECK_FALSE(restore_link_bytes(run, file));
    CHECK(contains(fabric_span_bytes(run), "fabric.wait_elsewhere"));
  }
  SUBCASE("a run missing a planned fabric launch") {
    RunResult run = read_results(file);
    std::vector<Span>& spans = run.variants.front().spans;
    const auto last = std::find_if(spans.rbegin(), spans.rend(), [](const Span& s) { return s.family == "fabric"; });
    spans.erase(std::next(last).base());
    CHECK_FALSE(restore_link_bytes(run, file));
    CHECK(contains(fabric_span_bytes(run), "were not recorded"));
  }
  SUBCASE("a file that records link bytes is left as it is") {
    RunResult run = read_results(file);
    run.text[kFabricSpanBytesKey] = kFabricSpanBytesLink;
    CHECK_FALSE(restore_link_bytes(run, file));
    CHECK(fabric_span_bytes(run) == kFabricSpanBytesLink);
  }
  SUBCASE("plans always recorded link bytes") {
    const RunResult plan = read_results(std::string(PB_SOURCE_DIR) + "/test/data/plan-smoke-cp2.h5");
    CHECK(fabric_span_bytes(plan) == kFabricSpanBytesLink);
  }
}

TEST_CASE("links: the committed cp4-64k and cp8-128k gangs over each link") {
  for (const char* name : {"cp4-64k.h5", "cp8-128k.h5"}) {
    CAPTURE(name);
    const std::string file = committed(name);
    const RunResult run = read_with_link_bytes(file);
    const std::vector<LinkRow> rows = link_rows(run, file);
    for (const char* variant : {"baseline", "all"}) {
      CAPTURE(variant);
      const double measured = ttft_over(rows, variant, kMeasuredLink);
      CHECK(measured == doctest::Approx(run.find_variant(variant)->projection(kMeasuredLink)->ttft_ms));
      // Slower links never project a faster gang; InfiniBand across trays costs the most.
      CHECK(ttft_over(rows, variant, "same-gpu") >= measured);
      CHECK(ttft_over(rows, variant, "nvlink5") >= ttft_over(rows, variant, "same-gpu"));
      CHECK(ttft_over(rows, variant, "nvlink4") >= ttft_over(rows, variant, "nvlink5"));
      CHECK(ttft_over(rows, variant, "ib400") > ttft_over(rows, variant, "nvlink4"));
    }
    // The cuts move more bytes over the link (cut 3's helped windows ship queries and returns), so a slow
    // link takes back more of their saving than it costs the baseline.
    const double base_ib = ttft_over(rows, "baseline", "ib400") / ttft_over(rows, "baseline", kMeasuredLink);
    const double all_ib = ttft_over(rows, "all", "ib400") / ttft_over(rows, "all", kMeasuredLink);
    CHECK(all_ib > base_ib);
    for (ReportFormat format : {ReportFormat::text, ReportFormat::markdown, ReportFormat::csv, ReportFormat::json}) {
      const std::string table = link_table(run, file, format);
      CHECK(contains(table, "ib400"));
      CHECK(contains(table, "baseline"));
    }
  }
}

TEST_CASE("links: a file without a projectable variant is a named error") {
  const std::string file = std::string(PB_SOURCE_DIR) + "/test/data/plan-smoke-cp2.h5";
  const RunResult plan = read_results(file);
  try {
    link_rows(plan, file);
    FAIL("expected an error");
  } catch (const Error& error) {
    CHECK(contains(error.what(), file));
    CHECK(contains(error.what(), "no variant can be projected"));
  }
}
