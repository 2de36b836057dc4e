// Scenario parsing: the shipped scenarios load, and a table of bad inputs
// gives errors that name the file, line, key and allowed values.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "check.h"
#include "scenario.h"

using namespace pb;

namespace {

const char* kGood = R"(name: t
model: {preset: tiny}
cp: 2
context: 512
bucket: 256
)";

// kGood with widths fp8 takes (the tiny preset's f_rank is 32).
const std::string kGoodFp8 = R"(name: t
model: {preset: tiny, f_rank: 128}
cp: 2
context: 512
bucket: 256
)";

std::string error_of(const std::string& text, const ScenarioOverrides& o = {}) {
  try {
    parse_scenario(text, "bad.yaml", o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("the shipped scenarios load and validate") {
  for (const char* name : {"smoke", "smoke-cp2", "smoke-cp4", "cp1-16k", "cp4-64k", "cp8-128k", "ab-each-cut", "verify-k3-cp4"}) {
    CAPTURE(name);
    Scenario s = load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/" + name + ".yaml");
    CHECK(s.name == name);
    CHECK(s.context % s.cp == 0);
    CHECK(s.segment() <= s.bucket);
    CHECK(s.bucket % kBucketTile == 0);
    CHECK(!s.variants.empty());
  }
  Scenario k3 = load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/cp8-128k.yaml");
  CHECK(k3.model.hidden == 7168);
  CHECK(k3.model.layers == 93);
  CHECK(k3.bucket == 16896);
  CHECK(k3.segment() == 16384);
  CHECK(k3.turn_settle_ms == 50);
  Scenario ab = load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/ab-each-cut.yaml");
  CHECK(ab.variants.size() == 2 + kCutCount - 1);  // baseline, all, and each cut but fp8's quant_fuse
  CHECK(ab.variants[0].name == "baseline");
  CHECK(ab.variants[0].cuts == CutSet::none());
  CHECK(ab.variants[1].cuts == CutSet::all(Precision{}));
}

TEST_CASE("a good scenario parses with defaults") {
  Scenario s = parse_scenario(kGood, "good.yaml");
  CHECK(s.cp == 2);
  CHECK(s.model.preset == "tiny");
  CHECK(s.split_k == 1);
  CHECK(s.fabric == "auto");
  CHECK(s.moe_gemm == "auto");
  CHECK(s.turn_settle_ms == 0);
  CHECK(s.share_memory == "vmm");
  CHECK(s.timing == "events");
  CHECK(s.ceiling_sustained_s == kDefaultCeilingSustainedS);
  REQUIRE(s.variants.size() == 1);
  CHECK(s.variants[0].name == "baseline");
  CHECK(s.variants[0].cuts == CutSet::none());
}

TEST_CASE("the bucket defaults to the segment rounded up to the tile") {
  Scenario s = parse_scenario("name: t\ncp: 3\ncontext: 3000\n", "t.yaml");
  CHECK(s.bucket == 1024);
}

TEST_CASE("cut sets in every spelling") {
  auto cuts_of = [](const std::string& spelling) {
    return parse_scenario(std::string(kGood) + "cuts: " + spelling + "\n", "t.yaml").variants.at(0).cuts;
  };
  CHECK(cuts_of("all") == CutSet::all(Precision{}));
  CHECK_FALSE(cuts_of("all")[Cut::quant_fuse]);  // bf16: the fp8 cut does not apply
  CHECK(cuts_of("none") == CutSet::none());
  CHECK(cuts_of("seed") == CutSet::seed());
  CutSet lc;
  lc.set(Cut::land, true);
  lc.set(Cut::conv, true);
  CHECK(cuts_of("[land, conv]") == lc);
  CHECK(cuts_of("{land: on, conv: true, stripe: off}") == lc);
  CHECK(parse_cut_list("land,conv", "--cuts", Precision{}) == lc);
  // seed: the five of the seed; all adds attnres and balance
  CHECK_FALSE(CutSet::seed()[Cut::attnres]);
  CHECK_FALSE(CutSet::seed()[Cut::balance]);
  int seed_count = 0;
  for (Cut c : kAllCuts) seed_count += CutSet::seed()[c];
  CHECK(seed_count == 5);
  for (Cut c : kAllCuts) CHECK(CutSet::all()[c]);
  CHECK(CutSet::all().problem().empty());
  CHECK_FALSE(CutSet::seed()[Cut::overlap]);
  CHECK(cuts_of("[overlap]")[Cut::overlap]);
  CHECK(CutSet::none().without(Cut::overlap).problem().empty());
  CutSet sb;
  sb.set(Cut::stripe, true);
  sb.set(Cut::balance, true);
  CHECK(cuts_of("[stripe, balance]") == sb);
  CHECK(parse_cut_list("stripe,balance", "--cuts", Precision{}) == sb);
  // turning the stripe off turns balance off with it
  CHECK(CutSet::all().without(Cut::stripe)[Cut::balance] == false);
  CHECK(CutSet::all().without(Cut::balance)[Cut::stripe] == true);
}

TEST_CASE("each-cut has a variant per cut; balance runs on the stripe it refines") {
  const Scenario s = parse_scenario(std::string(kGood) + "variants: each-cut\n", "t.yaml");
  REQUIRE(s.variants.size() == 2 + kCutCount - 1);  // quant_fuse needs fp8
  const Scenario f = parse_scenario(kGoodFp8 + "precision: fp8\nvariants: each-cut\n", "t.yaml");
  REQUIRE(f.variants.size() == 2 + kCutCount);
  CHECK(f.variants[1].cuts == CutSet::all());
  CHECK(f.variants.back().name == "quant_fuse");
  CutSet sb;
  sb.set(Cut::stripe, true);
  sb.set(Cut::balance, true);
  for (const VariantSpec& v : s.variants) {
    CHECK(v.cuts.problem().empty());
    if (v.name == "balance") CHECK(v.cuts == sb);
  }
}

TEST_CASE("layout: contiguous by default, zigzag by key or override") {
  CHECK(parse_scenario(kGood, "t.yaml").layout == Layout::contiguous);
  CHECK(parse_scenario(std::string(kGood) + "layout: zigzag\n", "t.yaml").layout == Layout::zigzag);
  ScenarioOverrides o;
  o.sets = {"layout=zigzag"};
  CHECK(parse_scenario(kGood, "t.yaml", o).layout == Layout::zigzag);
}

TEST_CASE("debug.untested_blocks is gone: every cut and layout runs on the device") {
  CHECK_THROWS_WITH_AS(parse_scenario("name: t\nmodel: {preset: tiny}\ncp: 1\ncontext: 256\ndebug: {untested_blocks: true}\n", "t.yaml"),
                       doctest::Contains("debug.untested_blocks"), pb::Error);
}

TEST_CASE("command-line overrides apply before validation") {
  ScenarioOverrides o;
  o.sets = {"cp=4", "model.layers=3", "context=1024"};
  o.cuts = "land,stripe";
  Scenario s = parse_scenario(kGood, "good.yaml", o);
  CHECK(s.cp == 4);
  CHECK(s.model.layers == 3);
  REQUIRE(s.variants.size() == 1);
  CHECK(s.variants[0].cuts[Cut::land]);
  CHECK(s.variants[0].cuts[Cut::stripe]);
  CHECK_FALSE(s.variants[0].cuts[Cut::conv]);
  CHECK(contains(s.overrides, "--set cp=4"));
}

TEST_CASE("warmup_layers: every layer by default, the first N when set") {
  CHECK(parse_scenario(kGood, "good.yaml").warmup_layers == 0);
  ScenarioOverrides o;
  o.sets = {"warmup_layers=3"};
  CHECK(parse_scenario(kGood, "good.yaml", o).warmup_layers == 3);
  o.sets = {"model.layers=8", "warmup_layers=8"};
  CHECK(parse_scenario(kGood, "good.yaml", o).warmup_layers == 8);
}

TEST_CASE("--variants runs some of the scenario's variants, in the order given") {
  ScenarioOverrides o;
  o.sets = {"variants=each-cut"};
  o.variants = {"land", "baseline"};
  Scenario s = parse_scenario(kGood, "good.yaml", o);
  REQUIRE(s.variants.size() == 2);
  CHECK(s.variants[0].name == "land");
  CHECK(s.variants[0].cuts[Cut::land]);
  CHECK(s.variants[1].name == "baseline");
  CHECK(contains(s.overrides, "--variants land,baseline"));
  o.variants = {"land", "fast"};
  const std::string unknown = error_of(kGood, o);
  CHECK(contains(unknown, "--variants: 'fast' is not a variant of bad.yaml"));
  CHECK(contains(unknown, "its variants: baseline, all, land, conv"));
  o.variants = {"land", "land"};
  CHECK(contains(error_of(kGood, o), "'land' is named twice"));
  o.variants = {"land"};
  o.cuts = "conv";
  CHECK(contains(error_of(kGood, o), "give --cuts (one cut set) or --variants"));
}

TEST_CASE("moe_gemm picks the expert GEMM engine") {
  CHECK(parse_scenario(std::string(kGood) + "moe_gemm: loop\n", "t.yaml").moe_gemm == "loop");
  CHECK(parse_scenario(std::string(kGood) + "moe_gemm: grouped\n", "t.yaml").moe_gemm == "grouped");
  CHECK(parse_scenario(std::string(kGood) + "moe_gemm: cutlass\n", "t.yaml").moe_gemm == "cutlass");
  CHECK_THROWS(parse_scenario(std::string(kGood) + "moe_gemm: cublaslt\n", "t.yaml"));
  ScenarioOverrides o;
  o.sets = {"moe_gemm=loop"};
  CHECK(parse_scenario(kGood, "good.yaml", o).moe_gemm == "loop");
}

TEST_CASE("share_memory picks how the ranks of one GPU share memory") {
  CHECK(parse_scenario(std::string(kGood) + "share_memory: ipc\n", "t.yaml").share_memory == "ipc");
  CHECK(parse_scenario(std::string(kGood) + "share_memory: vmm\n", "t.yaml").share_memory == "vmm");
  ScenarioOverrides o;
  o.sets = {"share_memory=ipc"};
  CHECK(parse_scenario(kGood, "good.yaml", o).share_memory == "ipc");
}

TEST_CASE("timing picks how spans are timed; ceiling_sustained_s the sustained GEMM window") {
  CHECK(parse_scenario(std::string(kGood) + "timing: cupti\n", "t.yaml").timing == "cupti");
  CHECK(parse_scenario(std::string(kGood) + "ceiling_sustained_s: 0\n", "t.yaml").ceiling_sustained_s == 0);
  CHECK(parse_scenario(std::string(kGood) + "ceiling_sustained_s: 60\n", "t.yaml").ceiling_sustained_s == 60);
  ScenarioOverrides o;
  o.sets = {"timing=cupti", "ceiling_sustained_s=2.5"};
  const Scenario s = parse_scenario(kGood, "good.yaml", o);
  CHECK(s.timing == "cupti");
  CHECK(s.ceiling_sustained_s == 2.5);
}

struct BadCase {
  const char* what;
  std::string text;
  std::vector<std::string> must_contain;
  ScenarioOverrides overrides = {};
};

TEST_CASE("bad inputs give errors naming file, line, key and allowed values") {
  const std::string g = kGood;
  std::vector<BadCase> cases = {
      {"unknown top-level key", g + "cpp: 3\n", {"bad.yaml:6:1", "unknown key 'cpp'", "allowed keys", "context"}},
      {"unknown model key", "name: t\nmodel: {preset: tiny, hiden: 8}\ncp: 1\ncontext: 8\n",
       {"bad.yaml:2", "model.hiden", "allowed keys under model", "hidden"}},
      {"wrong type", "name: t\ncp: four\ncontext: 8\n", {"bad.yaml:2:5", "cp", "expected an integer", "'four'"}},
      {"wrong type (map for int)", "name: t\ncp: {a: 1}\ncontext: 8\n", {"cp", "expected an integer", "a map"}},
      {"context not divisible by cp", "name: t\ncp: 3\ncontext: 1000\n",
       {"bad.yaml:3", "context", "not divisible by cp 3"}},
      {"segment larger than bucket", "name: t\ncp: 2\ncontext: 1024\nbucket: 256\n",
       {"bad.yaml:4", "bucket", "segment", "512", "larger than the bucket 256"}},
      {"bucket not a multiple of the tile", "name: t\ncp: 1\ncontext: 100\nbucket: 200\n",
       {"bad.yaml:4", "bucket", "not a multiple of the kernel tile 128"}},
      {"cp out of range", "name: t\ncp: 0\ncontext: 8\n", {"cp", "between 1 and 64", "got 0"}},
      {"reps out of range", g + "reps: 0\n", {"bad.yaml:6", "reps", "between 1 and 100000"}},
      {"warmup_layers deeper than the model", g + "warmup_layers: 5\n",
       {"bad.yaml:6", "warmup_layers", "between 0 and 4", "got 5"}},
      {"split_k out of range", g + "split_k: 64\n", {"split_k", "between 1 and 16"}},
      {"turn_settle_ms out of range", g + "turn_settle_ms: -5\n", {"bad.yaml:6", "turn_settle_ms", "between 0 and 10000"}},
      {"model value out of range", "name: t\nmodel: {layers: 0}\ncp: 1\ncontext: 8\n",
       {"model.layers", "between 1 and 1024"}},
      {"unknown preset", "name: t\nmodel: {preset: k4}\ncp: 1\ncontext: 8\n",
       {"model.preset", "'k4' is not allowed", "k3, tiny"}},
      {"bad fabric", g + "fabric: tcp\n", {"bad.yaml:6:9", "fabric", "'tcp'", "ipc, nccl, auto"}},
      {"bad fmha engine", g + "fmha: flash\n", {"fmha", "native, cudnn, auto"}},
      {"bad moe_gemm engine", g + "moe_gemm: cublaslt\n", {"bad.yaml:6", "moe_gemm", "'cublaslt'", "auto, grouped, loop, cutlass"}},
      {"bad timing", g + "timing: nsys\n", {"bad.yaml:6", "timing", "'nsys'", "events, cupti"}},
      {"ceiling_sustained_s out of range", g + "ceiling_sustained_s: 601\n",
       {"bad.yaml:6", "ceiling_sustained_s", "between 0", "and 600"}},
      {"bad share_memory", g + "share_memory: nvshmem\n", {"bad.yaml:6", "share_memory", "'nvshmem'", "vmm, ipc"}},
      {"bad gpu profile", g + "gpu_profile: a100\n", {"gpu_profile", "h200, h100, gb300"}},
      {"unknown cut", g + "cuts: [land, fast]\n", {"cuts[1]", "unknown cut 'fast'", "lse_merge"}},
      {"bad cut switch", g + "cuts: {land: maybe}\n", {"cuts.land", "true or false"}},
      {"variants without cuts", g + "variants: [{name: a}]\n", {"variants[0]", "'name' and 'cuts'"}},
      {"duplicate variant", g + "variants: [{name: a, cuts: all}, {name: a, cuts: none}]\n",
       {"variants[1].name", "duplicate"}},
      {"cuts and variants both", g + "cuts: all\nvariants: each-cut\n", {"cuts", "not both"}},
      {"missing name", "cp: 1\ncontext: 8\n", {"bad.yaml", "name", "missing"}},
      {"missing context", "name: t\ncp: 1\n", {"context", "missing"}},
      {"not YAML", "name: [t\n", {"bad.yaml:", "not valid YAML"}},
      {"inconsistent model", "name: t\nmodel: {preset: tiny, top_k: 9}\ncp: 1\ncontext: 8\n",
       {"model", "top_k must not exceed model.experts"}},
      {"bad override value", g, {"command line override 'cp=x'", "cp", "expected an integer"},
       ScenarioOverrides{{"cp=x"}, "", {}}},
      {"override breaks divisibility", g, {"override 'cp=3'", "not divisible", "bad.yaml:4"}, ScenarioOverrides{{"cp=3"}, "", {}}},
      {"bad --cuts", g, {"--cuts land,fast", "unknown cut 'fast'"}, ScenarioOverrides{{}, "land,fast", {}}},
      {"debug key", g + "debug: {delay: 3}\n", {"debug.delay", "delay_family, delay_us"}},
      {"bad layout", g + "layout: diagonal\n", {"bad.yaml:6:9", "layout", "'diagonal'", "contiguous, zigzag"}},
      {"zigzag needs 2 cp chunks", "name: t\ncp: 4\ncontext: 1028\nlayout: zigzag\n",
       {"bad.yaml:4", "layout", "2*cp = 8 equal chunks", "context 1028", "layout contiguous"}},
      {"zigzag by override", g, {"override 'cp=3'", "layout", "2*cp = 6"}, ScenarioOverrides{{"cp=3", "context=765", "layout=zigzag"}, "", {}}},
      {"balance without the stripe", g + "cuts: [land, balance]\n",
       {"bad.yaml:6", "cuts", "cut balance refines cut stripe and needs it on"}},
      {"balance switched on, stripe off", g + "cuts: {stripe: off, balance: on}\n", {"cuts", "needs it on"}},
      {"a variant with balance alone", g + "variants: [{name: b, cuts: balance}]\n",
       {"variants[0].cuts", "needs it on"}},
      {"--cuts balance", g, {"--cuts balance", "needs it on"}, ScenarioOverrides{{}, "balance", {}}},
      {"precision unknown", g + "precision: fp16\n", {"bad.yaml:6", "precision", "'fp16'", "allowed values: bf16, fp8, fp4"}},
      {"fp4 dense GEMMs", g + "precision: {gemm: fp4}\n", {"bad.yaml:6", "precision.gemm", "'fp4'", "allowed values: bf16, fp8"}},
      {"fp4 experts' widths", "name: t\nmodel: {preset: tiny, expert_inter: 200}\ncp: 1\ncontext: 8\nprecision: {experts: fp4}\n",
       {"bad.yaml:5", "precision", "fp4 needs whole 128-column groups", "model.expert_inter", "is 200"}},
      {"precision part unknown", g + "precision: {gemm: fp8, router: fp8}\n",
       {"bad.yaml:6", "precision.router", "gemm, experts, fmha"}},
      {"precision part value", g + "precision: {experts: int8}\n", {"precision.experts", "'int8'", "bf16, fp8, fp4"}},
      {"fp8 attention", g + "precision: {fmha: fp8}\n", {"precision.fmha", "not built", "allowed: bf16"}},
      {"precision list", g + "precision: [fp8]\n", {"precision", "expected bf16, fp8, fp4, or a map"}},
      {"quant_fuse in bf16", g + "cuts: [quant_fuse]\n", {"cuts", "quant_fuse applies only where a part is fp8 or fp4", "precision: fp8"}},
      {"--cuts quant_fuse in bf16", g, {"--cuts quant_fuse", "applies only where a part is fp8 or fp4"}, ScenarioOverrides{{}, "quant_fuse", {}}},
      {"a part of a single-value key", g + "precision: fp8\n",
       {"override 'precision.gemm=bf16'", "precision is a single value here (fp8), not a map",
        "precision=<value> or precision={gemm: ..., ...}"},
       ScenarioOverrides{{"precision.gemm=bf16"}, "", {}}},
  };
  for (const auto& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    std::string err = error_of(c.text, c.overrides);
    CAPTURE(err);
    REQUIRE_FALSE(err.empty());
    for (const auto& needle : c.must_contain) CHECK(contains(err, needle));
  }
}

TEST_CASE("precision: bf16 by default, fp8 by word, map or override; all follows it") {
  CHECK(parse_scenario(kGood, "t.yaml").precision == Precision{});
  const Scenario f = parse_scenario(kGoodFp8 + "precision: fp8\ncuts: all\n", "t.yaml");
  CHECK(f.precision.gemm == Format::fp8);
  CHECK(f.precision.experts == Format::fp8);
  CHECK(f.precision.fmha == Format::bf16);
  CHECK(f.precision.describe() == "fp8");
  CHECK(f.variants.at(0).cuts == CutSet::all());
  CHECK(f.variants.at(0).name == "all");
  const Scenario m = parse_scenario(std::string(kGood) + "precision: {experts: fp8}\n", "t.yaml");
  CHECK(m.precision.gemm == Format::bf16);
  CHECK(m.precision.experts == Format::fp8);
  CHECK(m.precision.describe() == "gemm=bf16 experts=fp8 fmha=bf16");
  const Scenario o = parse_scenario(kGoodFp8, "t.yaml", ScenarioOverrides{{"precision=fp8"}, "quant_fuse", {}});
  CHECK_THROWS_WITH_AS(parse_scenario(std::string(kGood) + "precision: fp8\n", "t.yaml"),
                       doctest::Contains("model.f_rank (the KDA forget gate's second projection's input) is 32"),
                       Error);
  CHECK(o.precision.describe() == "fp8");
  CHECK(o.variants.at(0).cuts[Cut::quant_fuse]);
}

TEST_CASE("precision fp4: NVFP4 experts beside fp8 dense GEMMs, planned only") {
  const Scenario w = parse_scenario(kGoodFp8 + "precision: fp4\ncuts: all\n", "t.yaml");
  CHECK(w.precision == Precision{Format::fp8, Format::fp4, Format::bf16});
  CHECK(w.precision.describe() == "fp4");
  CHECK(w.precision.any_scaled());
  CHECK(w.precision.any_fp8());  // its dense GEMMs are fp8
  CHECK(w.variants.at(0).cuts[Cut::quant_fuse]);  // quant_fuse applies to fp4 experts
  const Scenario m = parse_scenario(std::string(kGood) + "precision: {experts: fp4}\ncuts: all\n", "t.yaml");
  CHECK(m.precision.describe() == "gemm=bf16 experts=fp4 fmha=bf16");
  CHECK(m.variants.at(0).cuts[Cut::quant_fuse]);
  // run, lane and verify refuse it before any device work, naming the key and why.
  const std::string why = precision_planned_only(m.precision);
  CHECK(contains(why, "precision.experts fp4"));
  CHECK(contains(why, kPlannedOnlyMessage));
  CHECK(contains(why, "allowed here: precision.experts bf16, fp8"));
  CHECK(precision_planned_only(Precision{Format::fp8, Format::fp8, Format::bf16}).empty());
  // Format names round-trip.
  for (const std::string& name : format_names()) {
    Format f;
    REQUIRE(format_from_name(name, &f));
    CHECK(format_name(f) == name);
  }
}

TEST_CASE("recorded overrides read back as given: --set, --cuts, --variants") {
  const std::vector<ScenarioOverrides> forms = {
      {},
      {{"reps=1"}, "", {}},
      {{"serialize_ranks=true", "turn_settle_ms=0", "warmup_layers=2", "reps=1", "variants=each-cut"}, "", {"baseline", "land", "conv"}},
      {{"model.layers=3"}, "land,conv", {}},
      {{"precision=fp8", "model.f_rank=128"}, "", {}},
  };
  for (const ScenarioOverrides& o : forms) {
    const Scenario s = parse_scenario(kGood, "t.yaml", o);
    CAPTURE(s.overrides);
    const ScenarioOverrides back = overrides_from_text(s.overrides);
    CHECK(back.sets == o.sets);
    CHECK(back.cuts == o.cuts);
    CHECK(back.variants == o.variants);
    CHECK(parse_scenario(kGood, "t.yaml", back).overrides == s.overrides);
  }
  CHECK_THROWS_WITH_AS(overrides_from_text("reps=1"), doctest::Contains("does not start with --set"), Error);
}

TEST_CASE("the world size must equal cp, except a single-process plan") {
  Scenario s = parse_scenario(kGood, "good.yaml");
  CHECK(world_size_problem(s, 2, false).empty());
  CHECK(world_size_problem(s, 1, true).empty());
  std::string err = world_size_problem(s, 4, false);
  CHECK(contains(err, "cp 2"));
  CHECK(contains(err, "4 ranks"));
  CHECK(contains(err, "mpirun -np 2"));
  CHECK_FALSE(world_size_problem(s, 1, false).empty());
}
