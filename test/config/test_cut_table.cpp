// The cut table (harness/config/cuts.h) against every consumer that cannot
// derive a cut from it by itself: a new row with a consumer forgotten fails here.
//   - verify: the row's exactness has the floor it needs (bit_identical none,
//     the others a positive one);
//   - plan: the row's family is one plan's launches carry; an FMHA-moving cut's
//     family is fmha;
//   - calibration and `prefill-bench kernels`: a cut that rewrites kernels
//     (plan effect bytes) names a bench family, and the kernels benchmark runs it;
//   - the plot scripts: scripts/pbplot.py has a colour for the row's family;
//   - docs/cuts.md: a section "## <name>";
//   - the results file: cut_records() writes every row, in order.
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "check.h"
#include "cuts.h"
#include "kernels_bench.h"
#include "plan.h"
#include "scenario.h"

using namespace pb;

namespace {

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(PB_SOURCE_DIR) + "/" + relative);
  REQUIRE_MESSAGE(in.good(), "cannot read " << relative);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// The families a plan's launches carry, over every cut set that matters: a K3
// rank at cp 4 with every cut on and with none, in each precision.
std::set<std::string> planned_families() {
  std::set<std::string> families = {"fabric"};
  for (const char* precision : {"bf16", "fp8"}) {
    const Scenario s = parse_scenario(std::string("name: t\nmodel: {preset: k3, layers: 4}\ncp: 4\ncontext: 8192\n"
                                                  "precision: ") +
                                          precision + "\n",
                                      "t.yaml");
    for (const CutSet& cuts : {CutSet::none(), CutSet::all(s.precision)})
      for (int r = 0; r < s.cp; ++r)
        for (const auto& l : plan_rank(s, cuts, r).launches) families.insert(l.family);
  }
  return families;
}

}  // namespace

TEST_CASE("every cut of the table has what each consumer needs") {
  const std::string pbplot = read_source("scripts/pbplot.py");
  const std::string colours = pbplot.substr(pbplot.find("FAMILY_COLOURS"));
  const std::string cuts_md = read_source("docs/cuts.md");
  const std::vector<std::string> bench = kernels_bench_families();
  const std::set<std::string> families = planned_families();
  std::set<std::string> names;
  for (const CutInfo& info : cut_table()) {
    const std::string name = info.name;
    CAPTURE(name);
    CHECK(names.insert(name).second);
    // verify
    if (info.exactness == Exactness::bit_identical) CHECK(info.floor == 0);
    else CHECK(info.floor > 0);
    // plan
    CHECK(families.count(info.family) == 1);
    if (info.plan_effect == PlanEffect::fmha_flops) CHECK(std::string(info.family) == "fmha");
    // calibration and the kernels benchmark
    if (info.plan_effect == PlanEffect::bytes) {
      CHECK(*info.bench_family);
      CHECK(std::find(bench.begin(), bench.end(), std::string(info.bench_family)) != bench.end());
    }
    // plots
    CHECK_MESSAGE(colours.find("\"" + std::string(info.family) + "\":") != std::string::npos,
                  "scripts/pbplot.py's FAMILY_COLOURS lacks family " << info.family);
    // docs
    CHECK_MESSAGE(std::regex_search(cuts_md, std::regex("\n## " + name + "( |\n)")),
                  "docs/cuts.md has no section '## " << name << "'");
    // prerequisites name a cut of the table, never the cut itself
    Cut needs;
    if (cut_requires(info.id, &needs)) CHECK(needs != info.id);
  }
  const std::vector<CutRecord> records = cut_records();
  REQUIRE(records.size() == cut_table().size());
  for (size_t i = 0; i < records.size(); ++i) CHECK(records[i].name == cut_table()[i].name);
}

TEST_CASE("seed, all and each-cut come from the table") {
  int seed = 0;
  for (const CutInfo& info : cut_table()) seed += info.seed;
  CHECK(seed == 5);  // the seed PR's five
  for (const CutInfo& info : cut_table()) {
    CHECK(CutSet::seed()[info.id] == info.seed);
    CHECK(CutSet::all(Precision{})[info.id] == !info.needs_fp8);
    CHECK(CutSet::all(Precision{Format::fp8, Format::fp8, Format::bf16})[info.id]);
  }
}

TEST_CASE("a described cut set reads back as itself, and a cut this build does not know is named") {
  for (const pb::CutSet& cuts : {pb::CutSet::none(), pb::CutSet::all(), pb::CutSet::seed(),
                                 pb::CutSet::only(pb::Cut::balance), pb::CutSet::all().without(pb::Cut::stripe)}) {
    CAPTURE(cuts.describe());
    CHECK(pb::CutSet::from_description(cuts.describe()) == cuts);
  }
  // A file of an older build names fewer cuts; the ones it does not name are off.
  CHECK(pb::CutSet::from_description("land=on conv=off") == pb::CutSet::only(pb::Cut::land));
  CHECK(pb::CutSet::from_description("") == pb::CutSet::none());
  CHECK_THROWS_WITH_AS(pb::CutSet::from_description("land=on warp=on"),
                       doctest::Contains("recorded cut 'warp' is unknown to this build; it knows land, conv"),
                       pb::Error);
}
