// The launch order of a layer is written twice: in plan.cpp and in the blocks
// (harness/superstep/). `run` and `lane` hold the blocks to the plan on the
// GPU (plan_match.h); this holds the plan to the blocks on the CPU, with the
// launch lists the blocks recorded in the committed run and lane files: for
// every file, variant, rep and rank, the plan of the recorded scenario under
// the variant's recorded cuts must name the same families and kernels in the
// same order (a lane file: the MLA block of its first MLA layer). A change to
// plan.cpp that the blocks did not make fails here; one to the blocks that
// plan.cpp did not make fails the GPU suites' launch checks. The h200
// profile's memory a process adds beyond the budget (profile.h) is held to
// the same files.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "compare_detail.h"
#include "cuts.h"
#include "plan.h"
#include "profile.h"
#include "results.h"
#include "scenario.h"

using namespace pb;

namespace {

// "" when the recorded spans name the planned launches in order; else the first difference.
std::string difference(const std::vector<const Span*>& got, const std::vector<Launch>& want, size_t first) {
  if (first + got.size() > want.size())
    return "recorded " + std::to_string(got.size()) + " launches, the plan has " +
           std::to_string(want.size() - first) + " from there";
  for (size_t i = 0; i < got.size(); ++i) {
    const Launch& w = want[first + i];
    if (got[i]->family != w.family || got[i]->kernel != w.kernel || got[i]->layer != w.layer)
      return "launch " + std::to_string(i) + ": recorded " + got[i]->kernel + " (layer " +
             std::to_string(got[i]->layer) + "), planned " + w.kernel + " (layer " + std::to_string(w.layer) + ")";
  }
  return "";
}

}  // namespace

TEST_CASE("plan: every committed run and lane names the launches its plan names, in order") {
  const std::filesystem::path dir = std::filesystem::path(PB_SOURCE_DIR) / "results" / "h200";
  int files = 0, lists = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".h5") continue;
    const std::string file = entry.path().string();
    const RunResult run = read_results(file);
    if (run.kind != "run" && run.kind != "lane") continue;
    CAPTURE(file);
    Scenario s;
    std::string problem;
    REQUIRE_MESSAGE(compare_detail::recorded_scenario(run, file, &s, &problem), problem);
    ++files;
    for (const VariantResult& v : run.variants) {
      CAPTURE(v.name);
      const CutSet cuts = CutSet::from_description(v.cuts);
      std::map<std::pair<int32_t, int32_t>, std::vector<const Span*>> recorded;  // (rep, rank)
      for (const Span& span : v.spans) recorded[{span.rep, span.rank}].push_back(&span);
      std::map<int32_t, std::vector<Launch>> planned;
      for (const auto& [rep_rank, spans] : recorded) {
        const int32_t rank = rep_rank.second;
        if (!planned.count(rank)) planned[rank] = plan_rank(s, cuts, rank, recorded_launch_list_version(run)).launches;
        const std::vector<Launch>& want = planned[rank];
        size_t first = 0;
        if (run.kind == "lane") {  // the MLA block of the layer it ran, from its first launch
          const auto at = std::find_if(want.begin(), want.end(), [&](const Launch& l) {
            return l.layer == spans.front()->layer && l.kernel == spans.front()->kernel;
          });
          REQUIRE(at != want.end());
          first = size_t(at - want.begin());
        } else {
          CHECK(spans.size() == want.size());
        }
        CAPTURE(rep_rank.first);
        CAPTURE(rank);
        CHECK(difference(spans, want, first) == "");
        ++lists;
      }
    }
  }
  MESSAGE(files, " committed files, ", lists, " launch lists held to their plans");
  CHECK(files >= 20);
}

TEST_CASE("plan: the comparison fails on a list in another order, of another layer, or longer") {
  const std::string file = std::string(PB_SOURCE_DIR) + "/results/h200/cp4-64k.h5";
  const RunResult run = read_results(file);
  Scenario s;
  std::string problem;
  REQUIRE(compare_detail::recorded_scenario(run, file, &s, &problem));
  const VariantResult& v = run.variants.front();
  const std::vector<Launch> want =
      plan_rank(s, CutSet::from_description(v.cuts), 1, recorded_launch_list_version(run)).launches;
  std::vector<Span> spans;
  for (const Span& span : v.spans)
    if (span.rank == 1 && span.rep == v.spans.front().rep) spans.push_back(span);
  const auto pointers = [](const std::vector<Span>& list) {
    std::vector<const Span*> out;
    for (const Span& span : list) out.push_back(&span);
    return out;
  };
  REQUIRE(difference(pointers(spans), want, 0) == "");
  std::vector<Span> swapped = spans;
  const auto fabric = std::find_if(swapped.begin() + 1, swapped.end(), [](const Span& x) { return x.family == "fabric"; });
  REQUIRE(fabric != swapped.end());
  std::iter_swap(fabric, fabric - 1);
  CHECK(difference(pointers(swapped), want, 0) != "");
  std::vector<Span> moved = spans;
  moved[moved.size() / 2].layer += 1;
  CHECK(difference(pointers(moved), want, 0) != "");
  std::vector<Span> longer = spans;
  longer.push_back(spans.back());
  CHECK(difference(pointers(longer), want, 0) != "");
}

TEST_CASE("plan: a file of launch list version 1 matches that form of its plan only") {
  const auto list_of = [](const std::string& name, int rank) {
    const std::string file = std::string(PB_SOURCE_DIR) + "/results/h200/" + name;
    const RunResult run = read_results(file);
    REQUIRE(recorded_launch_list_version(run) == 1);
    Scenario s;
    std::string problem;
    REQUIRE(compare_detail::recorded_scenario(run, file, &s, &problem));
    const VariantResult& v = run.variants.back();  // all cuts
    std::vector<Span> spans;
    for (const Span& span : v.spans)
      if (span.rank == rank && span.rep == v.spans.front().rep) spans.push_back(span);
    return std::make_tuple(spans, s, CutSet::from_description(v.cuts));
  };
  const auto pointers = [](const std::vector<Span>& list) {
    std::vector<const Span*> out;
    for (const Span& span : list) out.push_back(&span);
    return out;
  };
  // the stripe's helped windows: their query copy inside the wait
  const auto [cp4, s4, cuts4] = list_of("cp4-64k.h5", 0);
  CHECK(difference(pointers(cp4), plan_rank(s4, cuts4, 0, 1).launches, 0) == "");
  CHECK(difference(pointers(cp4), plan_rank(s4, cuts4, 0).launches, 0) != "");
  // fp8 under quant_fuse: the output gates quantized by their own launches
  const auto [fp8, s1, cuts1] = list_of("cp1-16k-fp8-rerun.h5", 0);
  CHECK(difference(pointers(fp8), plan_rank(s1, cuts1, 0, 1).launches, 0) == "");
  CHECK(difference(pointers(fp8), plan_rank(s1, cuts1, 0).launches, 0) != "");
  CHECK_THROWS_WITH(plan_rank(s1, cuts1, 0, kLaunchListVersion + 1), doctest::Contains("launch list version"));
}

TEST_CASE("plan: each process's memory beyond the budget, on the h200 profile, is what the committed runs show") {
  const ProcessMemory figure = process_memory("h200");
  REQUIRE(figure.bytes > 0);
  const std::filesystem::path dir = std::filesystem::path(PB_SOURCE_DIR) / "results" / "h200";
  int measured = 0, before = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".h5") continue;
    const RunResult run = read_results(entry.path().string());
    if (run.kind != "run" || !run.numbers.count("memory_ranks_per_gpu")) continue;
    CAPTURE(entry.path().filename().string());
    const double planned = run.numbers.at("memory_weights_bytes") + run.numbers.at("memory_arena_bytes") +
                           run.numbers.at("memory_rank_bytes");
    double in_use = 0;  // rank 0's GPU, every process on it (cmd_run.cpp)
    for (const VariantResult& v : run.variants)
      for (const RankRep& r : v.rank_reps) in_use = std::max(in_use, r.peak_mem_bytes);
    const double per_process = (in_use - planned) / run.numbers.at("memory_ranks_per_gpu");
    if (run.numbers.count("device_stack_bytes_per_thread")) {  // the stack limit set, the memory read after the reps
      if (run.text.at("precision") == "bf16") {  // no fp8 engine loaded: the fp8 runs' figure bounds it
        CHECK(per_process <= figure.bytes);
        CHECK(per_process > figure.bytes * 0.85);
      } else {
        CHECK(per_process == doctest::Approx(figure.bytes).epsilon(0.075));
      }
      ++measured;
    } else {  // runs made at the default 1 KiB stack: its reservation on top
      CHECK(per_process > figure.bytes * 1.3);
      ++before;
    }
  }
  CHECK(measured >= 3);
  CHECK(before >= 9);
}
