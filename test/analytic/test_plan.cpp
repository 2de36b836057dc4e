// The plan against hand-computed numbers (docs/design.md §2.1, §3, §4 and the seed).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>

#include "attnres.h"
#include "calibration.h"
#include "check.h"
#include "plan.h"
#include "scenario.h"
#include "temp_dir.h"

using namespace pb;

namespace {

// Every cut, balance included (CutSet::all() holds the cuts the device blocks run).
// Every cut but overlap: the launch order the cases below spell out (overlap
// has its own case, which turns it on over these).
pb::CutSet all_but_overlap() { return pb::CutSet::all().without(pb::Cut::overlap); }

Scenario k3(int cp, int64_t context) {
  return parse_scenario("name: t\nmodel: {preset: k3}\ncp: " + std::to_string(cp) + "\ncontext: " +
                            std::to_string(context) + "\nbucket: 16896\n",
                        "t.yaml");
}

int count(const RankPlan& p, const std::string& kernel) {
  int n = 0;
  for (const auto& l : p.launches) n += l.kernel == kernel;
  return n;
}

int count_family(const RankPlan& p, const std::string& family) {
  int n = 0;
  for (const auto& l : p.launches) n += l.family == family;
  return n;
}

double family_flops(const RankPlan& p, const std::string& family) {
  double f = 0;
  for (const auto& l : p.launches)
    if (l.family == family) f += l.cost.flops;
  return f;
}

const Launch& first(const RankPlan& p, const std::string& kernel) {
  for (const auto& l : p.launches)
    if (l.kernel == kernel) return l;
  FAIL("no launch " << kernel);
  static Launch none;
  return none;
}

}  // namespace

TEST_CASE("one land launch's bytes are the seed's") {
  RankPlan p = plan_rank(k3(1, 16384), CutSet::none(), 0);
  // seed: nt=18432 n=18432 1.87 GB; nt=67584 n=33792 3.4 GB; n=12288 1.25 GB
  CHECK(first(p, "land.q_b").cost.bytes == 16896.0 * 18432 * (4 + 2));
  CHECK(first(p, "land.dense_gate").cost.bytes == 16896.0 * 33792 * 6);
  CHECK(first(p, "land.out_gate").cost.bytes == 16896.0 * 12288 * 6);
  CHECK(first(p, "land.q_b").cost.bytes / 1e9 == doctest::Approx(1.87).epsilon(0.01));
}

TEST_CASE("a GEMM's FLOPs and a roofline on the H200 profile") {
  RankPlan p = plan_rank(k3(1, 16384), CutSet::none(), 0);
  const Launch& g = first(p, "gemm.kda_q");
  CHECK(g.cost.flops == 2.0 * 16896 * 12288 * 7168);
  GpuProfile h200 = gpu_profile("h200");
  CHECK(roofline_us(g.cost, h200) == doctest::Approx(g.cost.flops / 797e6));
  const Launch& l = first(p, "land.q_b");
  CHECK(roofline_us(l.cost, h200) == doctest::Approx(l.cost.bytes / 4.25e6));
}

TEST_CASE("MoE FFN: the launch order the MoE block records (harness/superstep/moe_block.h), either engine") {
  for (const char* engine : {"grouped", "loop", "cutlass"}) {
    INFO("moe_gemm: " << engine);
    Scenario s = k3(1, 16384);
    REQUIRE(s.moe_gemm == "auto");  // the default
    s.moe_gemm = engine;
    RankPlan p = plan_rank(s, CutSet::none(), 0);
    size_t i = 0;
    while (i < p.launches.size() && !(p.launches[i].layer == 1 && p.launches[i].kernel == "rmsnorm.moe_in")) ++i;
    // The expert GEMMs write bf16 (kernels/moe/moe_gemm.h): no land.expert_* after them.
    const std::vector<std::string> want = {
        "rmsnorm.moe_in", "gemm.router", "moe.topk", "moe.plan", "gemm.lat_down", "land.lat_down", "moe.permute",
        "moe_gemm.gate_up", "situ", "moe.weight", "moe_gemm.down", "moe.combine", "rmsnorm.routed_latent",
        "gemm.lat_up", "land.lat_up", "gemm.shared", "land.shared_gate", "land.shared_up", "situ",
        "gemm.shared_down", "land.shared_down", "add2"};
    REQUIRE(i + want.size() <= p.launches.size());
    for (size_t j = 0; j < want.size(); ++j) CHECK(p.launches[i + j].kernel == want[j]);
    CHECK(first(p, "moe.plan").cost.bytes > 0);
    CHECK(count(p, "land.expert_gate") + count(p, "land.expert_up") + count(p, "land.expert_down") == 0);
    // Costs: V = 16384 * 16 rows; all 224 experts' weights read once; bf16 out.
    const double V = 16384.0 * 16;
    const Launch& gu = first(p, "moe_gemm.gate_up");
    CHECK(gu.cost.flops == 2.0 * V * 6144 * 3584);
    CHECK(gu.cost.bytes == V * 3584 * 2 + 224.0 * 6144 * 3584 * 2 + V * 6144 * 2);
    const Launch& dn = first(p, "moe_gemm.down");
    CHECK(dn.cost.flops == 2.0 * V * 3584 * 3072);
    CHECK(dn.cost.bytes == V * 3072 * 2 + 224.0 * 3584 * 3072 * 2 + V * 3584 * 2);
  }
}

TEST_CASE("layer structure: 69 KDA and 24 MLA layers, one dense FFN, 186 AttnRes calls") {
  RankPlan p = plan_rank(k3(1, 16384), all_but_overlap(), 0);
  CHECK(count(p, "kda.forward") == 69);
  CHECK(count(p, "gemm.wfu") == 24);
  CHECK(count(p, "gemm.dense_gate_up") == 1);
  CHECK(count(p, "moe_gemm.gate_up") == 92);
  CHECK(count(p, "moe.plan") == 92);
  CHECK(count(p, "attnres.fused") == 186);  // the AttnRes cut: one launch per call
  CHECK(count(p, "attnres.snapshot") == 8);  // layers 0, 12, ..., 84
  CHECK(count(p, "gemm.lm_head") == 1);
  CHECK(count(p, "o_norm_gate") == 69);
  CHECK(count(p, "mul_sigmoid") == 24);
  // add2: after every mixer but on the 8 snapshot layers, after every FFN,
  // and the MoE's routed + shared on 92 layers.
  CHECK(count(p, "add2") == (93 - 8) + 93 + 92);
  CHECK(count_family(p, "fabric") == 0);
}

TEST_CASE("AttnRes: 186 calls, attnres_launches() launches each, bytes from the cost model") {
  Scenario s = k3(1, 16384);
  RankPlan base = plan_rank(s, CutSet::none(), 0), cut = plan_rank(s, all_but_overlap(), 0);
  CHECK(count(base, "attnres.scores") == 186);
  CHECK(count(base, "attnres.mix") == 186);
  CHECK(count(base, "attnres.fused") == 0);
  CHECK(count(cut, "attnres.fused") == 186);
  CHECK(count(cut, "attnres.scores") + count(cut, "attnres.mix") == 0);
  // the planned launches are the kernels' own count (kernels/cuts/attnres.h)
  CHECK(count_family(base, "attnres") - count(base, "attnres.snapshot") == 186 * attnres_launches(Variant::baseline));
  CHECK(count_family(cut, "attnres") - count(cut, "attnres.snapshot") == 186 * attnres_launches(Variant::cut));
  // nb = 8 over 16896 rows: the fused launch reads the 9 candidates once, the baseline twice
  double base_bytes = 0, cut_bytes = 0;
  for (const auto& l : base.launches)
    if ((l.kernel == "attnres.scores" || l.kernel == "attnres.mix") && l.layer == 90) base_bytes += l.cost.bytes;
  for (const auto& l : cut.launches)
    if (l.kernel == "attnres.fused" && l.layer == 90) cut_bytes += l.cost.bytes;
  const double n = 16896.0 * 7168 * 9;  // layer 90: nb_in = 8, nb_mlp = 8
  CHECK(cut_bytes == 2 * (n * 2 + 7168 * 4 + 16896.0 * 9 * 4 + 16896.0 * 7168 * 2));
  CHECK(base_bytes == 2 * (2 * n * 2 + 7168 * 4 + 2 * 16896.0 * 9 * 4 + 16896.0 * 7168 * 2));
  // the first token's call on one row over all 8 blocks
  int one_row = 0;
  for (const auto& l : cut.launches)
    one_row += l.kernel == "attnres.fused" && l.layer == -1 && l.cost.bytes == 7168.0 * 9 * 2 + 7168 * 4 + 9 * 4 + 7168 * 2;
  CHECK(one_row == 1);
}

TEST_CASE("the first token runs on the last rank only") {
  Scenario s = k3(4, 65536);
  for (int r = 0; r < 4; ++r) CHECK(count(plan_rank(s, all_but_overlap(), r), "sample.argmax") == (r == 3 ? 1 : 0));
}

TEST_CASE("cut 2 replaces the conv path's landing, window copies, decode and carry copy by one launch") {
  Scenario s = k3(1, 16384);
  RankPlan base = plan_rank(s, CutSet::none(), 0), cut = plan_rank(s, all_but_overlap(), 0);
  CHECK(count_family(cut, "conv") == 69 * 3);
  CHECK(count(cut, "conv.chunk_q") == 69);
  CHECK(count(base, "conv.window_copy") == 69 * 3 * 6);
  CHECK(count(base, "conv.decode_v") == 69);
  CHECK(count(base, "conv.carry_copy") == 69 * 3);
}

TEST_CASE("deep-rank FMHA pairs at cp8 128k: 7.5 under the baseline, 4.5 under the stripe") {
  Scenario s = k3(8, 131072);
  const double pair = 2.0 * 16384 * 16384 * 96 * (192 + 128);  // one dense segment pair
  CutSet stripe = CutSet::none();
  stripe.set(Cut::stripe, true);
  RankPlan base7 = plan_rank(s, CutSet::none(), 7), stripe7 = plan_rank(s, stripe, 7);
  CHECK(base7.fmha_pairs == doctest::Approx(7.5));
  CHECK(stripe7.fmha_pairs == doctest::Approx(4.5));
  CHECK(family_flops(base7, "fmha") / (24 * pair) == doctest::Approx(7.5));
  CHECK(family_flops(stripe7, "fmha") / (24 * pair) == doctest::Approx(4.5));
  CHECK(family_flops(plan_rank(s, stripe, 0), "fmha") / (24 * pair) == doctest::Approx(3.5));
  // the baseline deep rank expands all 8 key segments, the stripe's only its kept ones and its own
  CHECK(count(base7, "gemm.kv_b") == 24 * 8);
  CHECK(count(stripe7, "gemm.kv_b") == 24 * 5);
  CHECK(count(stripe7, "lse_merge") == 24 * 8);  // every pair (7, k) merged once
}

TEST_CASE("cross-rank KDA: packages on all but the last rank, one fold of r packages on rank r") {
  Scenario s = k3(4, 65536);
  for (int r = 0; r < 4; ++r) {
    RankPlan p = plan_rank(s, all_but_overlap(), r);
    CHECK(count(p, "kda.package") == (r < 3 ? 69 : 0));
    CHECK(count(p, "kda.fold") == (r > 0 ? 69 : 0));  // one launch folds all r upstream packages
    CHECK(count(p, "kda.prepare") == 69);
    CHECK(count(p, "fabric.publish_halo") == (r < 3 ? 69 : 0));
    CHECK(count(p, "fabric.release_state") == (r > 0 ? 69 : 0));
    CHECK(count(p, "fabric.wait_halo") == (r > 0 ? 69 : 0));
    CHECK(count(p, "gemm.halo_qkv") == (r > 0 ? 69 : 0));
  }
}

TEST_CASE("plan spans: roofline time; fabric spans carry their bytes over the profile's link") {
  Scenario s = k3(2, 32768);
  GpuProfile h200 = gpu_profile("h200");
  const LinkProfile nvlink4 = link_profile("nvlink4");
  RankPlan p = plan_rank(s, CutSet::none(), 1);
  auto spans = plan_spans(p, h200);
  REQUIRE(spans.size() == p.launches.size());
  bool saw_fabric = false;
  for (size_t i = 0; i < spans.size(); ++i) {
    CHECK(spans[i].rep == -1);
    CHECK(spans[i].rank == 1);
    if (spans[i].family == "fabric") {
      saw_fabric = true;
      const double bytes = p.launches[i].fabric_bytes;
      CHECK(spans[i].bytes == bytes);
      CHECK(spans[i].time_us == (bytes > 0 ? 2.0 + bytes / 450e3 : 0.0));  // nvlink4: 450 GB/s, 2 us
      CHECK(spans[i].time_us == (bytes > 0 ? nvlink4.transfer_us(bytes) : 0.0));
    } else {
      CHECK(spans[i].time_us == doctest::Approx(roofline_us(p.launches[i].cost, h200)));
    }
  }
  CHECK(saw_fabric);
  std::vector<double> pairs = {0.5, 1.5};
  std::vector<Span> all = plan_spans(plan_rank(s, CutSet::none(), 0), h200);
  all.insert(all.end(), spans.begin(), spans.end());
  std::string table = format_plan_table(all, 2, pairs, h200, "t");
  CHECK(table.find("rank1*") != std::string::npos);
  CHECK(table.find("deep rank: 1") != std::string::npos);
  CHECK(table.find("fmha") != std::string::npos);
}

// ---- the fabric over a link ----

namespace {

double family_ms(const std::vector<Span>& spans, const std::string& family) {
  double ms = 0;
  for (const auto& s : spans)
    if (s.family == family) ms += s.time_us / 1e3;
  return ms;
}

double family_bytes(const std::vector<Span>& spans, const std::string& family) {
  double bytes = 0;
  for (const auto& s : spans)
    if (s.family == family) bytes += s.bytes;
  return bytes;
}

int transfers(const std::vector<Span>& spans) {
  int n = 0;
  for (const auto& s : spans) n += s.family == "fabric" && s.bytes > 0;
  return n;
}

}  // namespace

TEST_CASE("the fabric costs its bytes over the link: cp8 128k, rank 0 of the stripe, 72.9 GB") {
  Scenario s = k3(8, 131072);
  const RankPlan p = plan_rank(s, all_but_overlap().without(Cut::balance), 0);
  for (const char* name : {"same-gpu", "nvlink4", "nvlink5", "ib400"}) {
    INFO("link " << name);
    const LinkProfile link = link_profile(name);
    const std::vector<Span> spans = plan_spans(p, gpu_profile("h200"), link);
    const double bytes = family_bytes(spans, "fabric");
    CHECK(bytes / 1e9 == doctest::Approx(72.93).epsilon(0.001));  // the helper's queries read and results returned
    const double want_ms = (transfers(spans) * link.latency_us + bytes / (link.gbytes_per_s * 1e3)) / 1e3;
    CHECK(family_ms(spans, "fabric") > 0);
    CHECK(family_ms(spans, "fabric") == doctest::Approx(want_ms).epsilon(1e-9));
  }
  // nvlink4: 72.9 GB at 450 GB/s is 162 ms
  CHECK(family_ms(plan_spans(p, gpu_profile("h200")), "fabric") == doctest::Approx(162.5).epsilon(0.01));
  // a single rank moves nothing over the fabric
  CHECK(family_ms(plan_spans(plan_rank(k3(1, 16384), all_but_overlap(), 0), gpu_profile("h200")), "fabric") == 0);
}

TEST_CASE("each GPU profile's natural link; an unknown link names the allowed ones") {
  CHECK(gpu_profile("h200").link == "nvlink4");
  CHECK(gpu_profile("h100").link == "nvlink4");
  CHECK(gpu_profile("gb300").link == "nvlink5");
  CHECK(link_profile("nvlink5").gbytes_per_s == 900);
  CHECK(link_profile("ib400").gbytes_per_s == 50);
  CHECK_THROWS_WITH_AS(link_profile("pcie"), doctest::Contains("allowed: same-gpu, nvlink4, nvlink5, ib400"), Error);
  // the plan's default is the profile's link
  const RankPlan p = plan_rank(k3(2, 32768), CutSet::none(), 1);
  const std::vector<Span> gb300 = plan_spans(p, gpu_profile("gb300"));
  const std::vector<Span> nvlink5 = plan_spans(p, gpu_profile("gb300"), link_profile("nvlink5"));
  CHECK(family_ms(gb300, "fabric") == family_ms(nvlink5, "fabric"));
  CHECK(family_ms(gb300, "fabric") < family_ms(plan_spans(p, gpu_profile("h200")), "fabric"));
}

// ---- cuts the roofline cannot see ----

TEST_CASE("a cut that moves the same bytes is marked: land, lse_merge, elementwise; conv and attnres save bytes") {
  Scenario s = k3(1, 16384);
  const std::vector<CutEffect> effects = cut_effects(s, all_but_overlap());
  REQUIRE(effects.size() == 7);
  std::map<std::string, CutEffect> by_family;
  for (const auto& e : effects) by_family[e.family] = e;
  for (const char* same : {"land", "lse_merge", "elementwise"}) {
    INFO(same);
    CHECK(by_family[same].same_bytes());
    CHECK(by_family[same].bytes_on > 0);
    CHECK(by_family[same].mark() == "same bytes [1]");
  }
  CHECK_FALSE(by_family["conv"].same_bytes());
  CHECK(by_family["conv"].mark() == "-79% bytes [2]");
  CHECK(by_family["attnres"].mark() == "-45% bytes [2]");  // the fused kernel reads the candidates once: partly bytes
  CHECK(effects[int(Cut::stripe)].mark() == "no change at cp 1");
  CHECK(effects[int(Cut::balance)].mark() == "no change at cp 1");
  CHECK(cut_family_marks(effects).at("fmha") == "stripe no change at cp 1; balance no change at cp 1");
  CHECK(cut_effects(k3(3, 3 * 16384), all_but_overlap())[int(Cut::balance)].mark() == "no change at odd cp");
  Scenario zz = k3(8, 131072);
  zz.layout = Layout::zigzag;
  CHECK(cut_effects(zz, all_but_overlap())[int(Cut::stripe)].mark() == "no change under zigzag");
  // the stripe at cp8: the deep rank's FMHA goes from 7.5 to 4.5 pairs (balance off on both sides);
  // balance then from 4.5 to 4
  std::vector<CutEffect> cp8 = cut_effects(k3(8, 131072), all_but_overlap());
  CHECK(cp8[int(Cut::stripe)].mark() == "deep rank -40% FLOPs");
  CHECK(cp8[int(Cut::balance)].mark() == "deep rank -11% FLOPs");
  CHECK(cut_family_marks(cp8).at("fmha") == "stripe deep rank -40% FLOPs; balance deep rank -11% FLOPs");
  CHECK(cut_family_marks(cp8).at("land") == "same bytes [1]");
  // one cut alone: only its family is marked
  CutSet land = CutSet::none();
  land.set(Cut::land, true);
  REQUIRE(cut_effects(s, land).size() == 1);
  CHECK(cut_effects(s, CutSet::none()).empty());

  // the table says so, with the footnotes
  PlanTableNotes notes;
  for (const auto& e : effects) notes.family_marks[e.family] = e.mark();
  notes.lines = cut_effect_notes(effects);
  const GpuProfile h200 = gpu_profile("h200");
  const std::string table =
      format_plan_table(plan_spans(plan_rank(s, all_but_overlap(), 0), h200), 1, {0.5}, h200, "t", notes);
  CHECK(table.find("  cut\n") != std::string::npos);
  for (const char* family : {"land", "lse_merge", "elementwise"})
    CHECK(table.find(fmt::format("{:<14}", family)) != std::string::npos);
  CHECK(table.find("same bytes [1]") != std::string::npos);
  CHECK(table.find("[1] same bytes with the cut on and off: the roofline shows no saving") != std::string::npos);
  CHECK(table.find("`plan --calibrate`") != std::string::npos);
  // no cut on: no column, no footnote
  const std::string plain = format_plan_table(plan_spans(plan_rank(s, CutSet::none(), 0), h200), 1, {0.5}, h200, "t");
  CHECK(plain.find("  cut\n") == std::string::npos);
}

TEST_CASE("lse_merge: the call's first merge initializes the accumulator and moves fewer bytes") {
  Scenario s = k3(8, 131072);
  const RankPlan p = plan_rank(s, CutSet::none(), 3);  // 4 windows per layer: 1 reset + 3 folds
  const double n = 16384.0 * 96 * 128, rows = 16384.0 * 96;
  int resets = 0, folds = 0;
  for (const auto& l : p.launches) {
    if (l.kernel != "lse_merge" || l.layer != 3) continue;
    if (l.cost.bytes == n * 6 + rows * 8) ++resets;
    if (l.cost.bytes == n * 10 + rows * 12) ++folds;
  }
  CHECK(resets == 1);
  CHECK(folds == 3);
}

// ---- the GEMM ceilings ----

TEST_CASE("the GEMM ceilings: burst by default, sustained on the H200 from its measurement") {
  const GpuProfile h200 = gpu_profile("h200");
  CHECK(h200.gemm_ceiling == "burst");
  CHECK(h200.gemm_sustained_tflops == 659.0);
  CHECK(h200.gemm_sustained_source.rfind("measured", 0) == 0);
  CHECK(h200.gemm_sustained_source.find("700 W cap") != std::string::npos);
  const GpuProfile burst = at_gemm_ceiling(h200, "burst");
  CHECK(burst.gemm_tflops == 797.0);
  CHECK(burst.gemm_source == h200.gemm_source);
  const GpuProfile held = at_gemm_ceiling(h200, "sustained");
  CHECK(held.gemm_ceiling == "sustained");
  CHECK(held.gemm_tflops == 659.0);
  CHECK(held.gemm_source.rfind("sustained, measured", 0) == 0);
  CHECK(held.copy_tbps == h200.copy_tbps);  // only the tensor rate moves
  CHECK(held.fp32_tflops == h200.fp32_tflops);

  // A compute-bound GEMM takes 797/659 as long at the sustained ceiling; a memory-bound landing the same.
  const RankPlan p = plan_rank(k3(1, 16384), CutSet::none(), 0);
  const Launch& g = first(p, "gemm.kda_q");
  CHECK(roofline_us(g.cost, held) == doctest::Approx(g.cost.flops / 659e6));
  CHECK(roofline_us(g.cost, held) / roofline_us(g.cost, burst) == doctest::Approx(797.0 / 659.0));
  const Launch& l = first(p, "land.q_b");
  CHECK(roofline_us(l.cost, held) == roofline_us(l.cost, burst));

  // The burst profile lists the sustained figure too; the sustained one does not repeat it.
  CHECK(describe_figures(h200).find("  GEMM       659 TFLOP/s   sustained (plan --ceiling sustained), measured") !=
        std::string::npos);
  CHECK(describe_figures(held).find("  GEMM       659 TFLOP/s   sustained, measured") != std::string::npos);
  CHECK(describe_figures(held).find("797") == std::string::npos);
}

TEST_CASE("a GEMM ceiling a profile lacks, or an unknown one, names what is allowed") {
  for (const char* name : {"h100", "gb300"}) {
    INFO(name);
    CHECK(gpu_profile(name).gemm_sustained_tflops == 0);
    CHECK(describe_figures(gpu_profile(name)).find("sustained") == std::string::npos);
    CHECK_THROWS_WITH_AS(at_gemm_ceiling(gpu_profile(name), "sustained"),
                         doctest::Contains("has no sustained GEMM figure"), Error);
    CHECK_THROWS_WITH_AS(at_gemm_ceiling(gpu_profile(name), "sustained"), doctest::Contains("allowed for it: burst"),
                         Error);
  }
  CHECK_THROWS_WITH_AS(at_gemm_ceiling(gpu_profile("h200"), "peak"),
                       doctest::Contains("unknown GEMM ceiling 'peak'; allowed: burst, sustained"), Error);
}

TEST_CASE("the table names the GEMM ceiling of its roofline, or the timing of its measured spans") {
  const Scenario s = k3(1, 16384);
  const RankPlan p = plan_rank(s, CutSet::none(), 0);
  for (const char* ceiling : {"burst", "sustained"}) {
    const GpuProfile profile = at_gemm_ceiling(gpu_profile("h200"), ceiling);
    const std::string table = format_plan_table(plan_spans(p, profile), 1, {1.0}, profile, "t");
    INFO(table);
    CHECK(table.find(fmt::format("tensor work at the {} GEMM ceiling, {:.0f} TFLOP/s", ceiling, profile.gemm_tflops)) !=
          std::string::npos);
  }
  // Measured spans say how they were timed instead.
  std::vector<Span> measured = plan_spans(p, gpu_profile("h200"));
  for (Span& sp : measured) sp.rep = 0;
  PlanTableNotes cupti;
  cupti.timing = "cupti";
  CHECK(format_plan_table(measured, 1, {1.0}, gpu_profile("h200"), "t").find("(CUDA events around every launch)") !=
        std::string::npos);
  CHECK(format_plan_table(measured, 1, {1.0}, gpu_profile("h200"), "t", cupti)
            .find("(CUPTI's records of every launch's kernels)") != std::string::npos);

  const double burst = family_ms(plan_spans(p, gpu_profile("h200")), "gemm");
  const double held = family_ms(plan_spans(p, at_gemm_ceiling(gpu_profile("h200"), "sustained")), "gemm");
  CHECK(held > burst);
  CHECK(held <= burst * 797.0 / 659.0 * (1 + 1e-9));
}

// ---- datasheet figures ----

TEST_CASE("every profile figure says where it comes from; datasheet ones say so") {
  for (const char* name : {"h100", "gb300"}) {
    const GpuProfile p = gpu_profile(name);
    INFO(name);
    CHECK(is_datasheet(p.copy_source));
    CHECK(is_datasheet(p.gemm_source));
    CHECK(is_datasheet(p.fp32_source));
    CHECK(describe_figures(p).find("datasheet: NVIDIA") != std::string::npos);
    CHECK(p.note.find("datasheet peaks") != std::string::npos);
  }
  const GpuProfile h200 = gpu_profile("h200");
  CHECK(h200.copy_source.rfind("measured", 0) == 0);
  CHECK(h200.gemm_source.rfind("measured", 0) == 0);
  CHECK(is_datasheet(h200.fp32_source));
  CHECK(describe_figures(gpu_profile("gb300")).find("8.00 TB/s      datasheet: NVIDIA B300") != std::string::npos);
  for (const char* name : {"nvlink4", "nvlink5", "ib400"}) CHECK(is_datasheet(link_profile(name).source));
  CHECK_FALSE(link_profile("same-gpu").datasheet);
}

TEST_CASE("GB300: the cp1-16k roofline sits above the seed's 16k TTFT because the seed's 16k is a CP8 gang") {
  // The seed's fleet figures are CP8 (16k: 1,150 -> 946 ms). One GPU doing all
  // 16k tokens needs more than that even at datasheet peaks; eight GPUs of 2k
  // tokens each need well under it.
  const GpuProfile gb300 = gpu_profile("gb300");
  auto deep_ms = [&](const Scenario& s, const CutSet& cuts) {
    double deep = 0;
    for (int r = 0; r < s.cp; ++r) {
      double ms = 0;
      for (const auto& sp : plan_spans(plan_rank(s, cuts, r), gb300)) ms += sp.time_us / 1e3;
      deep = std::max(deep, ms);
    }
    return deep;
  };
  CHECK(deep_ms(k3(1, 16384), CutSet::none()) > 1150);
  CHECK(deep_ms(k3(1, 16384), CutSet::seed()) > 946);
  const Scenario cp8 = parse_scenario("name: t\nmodel: {preset: k3}\ncp: 8\ncontext: 16384\nbucket: 2048\n", "t.yaml");
  CHECK(deep_ms(cp8, CutSet::none()) < 1150);
  CHECK(deep_ms(cp8, CutSet::seed()) < 946);
  CHECK(gb300.note.find("CP8 gangs") != std::string::npos);
}

TEST_CASE("fp4 experts on GB300, on paper: NVFP4 bytes, the FP4 rate, and no rate on Hopper") {
  // NVFP4: half a byte a code and one e4m3 scale per 16 columns, activations and weights alike.
  const Cost g4 = cost::moe_gemm_scaled(1000, 8, 256, 512, Format::fp4);
  CHECK(g4.unit == Unit::tensor_fp4);
  CHECK(g4.bytes == doctest::Approx(1000 * 512 * 0.5 + 1000 * 32 + 8 * 256 * 512 * 0.5 + 8 * 256 * 32 + 1000 * 256 * 2));
  const Cost g8 = cost::moe_gemm_scaled(1000, 8, 256, 512, Format::fp8);
  CHECK(g8.unit == Unit::tensor_fp8);
  CHECK(g8.bytes == doctest::Approx(1000 * 512 + 1000 * 4 * 4 + 8 * 256 * 512 + 16 * 4 * 4 + 1000 * 256 * 2));
  CHECK(g4.flops == g8.flops);
  CHECK(cost::quant_act(64, 256, Format::fp4).bytes == doctest::Approx(64 * 256 * 2 + 64 * 128 + 64 * 16));
  // Hopper has no FP4 rate: the roofline refuses, naming the profile.
  CHECK_THROWS_WITH_AS(roofline_us(g4, gpu_profile("h200")), doctest::Contains("gpu_profile h200 has no FP4 rate"),
                       Error);
  const Precision fp4{Format::fp8, Format::fp4, Format::bf16};
  CHECK(precision_rate_problem(fp4, gpu_profile("h100")).find("allowed: gb300") != std::string::npos);
  CHECK(precision_rate_problem(fp4, gpu_profile("gb300")).empty());
  CHECK(precision_rate_problem(Precision{Format::fp8, Format::fp8, Format::bf16}, gpu_profile("h200")).empty());
  // cp8 16k on GB300: the expert GEMMs of every rank at the FP4 rate, below fp8's, the rest unchanged.
  const GpuProfile gb300 = gpu_profile("gb300");
  const auto rank0 = [&](const char* precision) {
    const Scenario s = parse_scenario(
        std::string("name: t\nmodel: {preset: k3}\ncp: 8\ncontext: 16384\nbucket: 2048\nprecision: ") + precision + "\n",
        "t.yaml");
    return plan_rank(s, CutSet::all(s.precision), 0);
  };
  const RankPlan p4 = rank0("fp4"), p8 = rank0("fp8");
  REQUIRE(p4.launches.size() == p8.launches.size());
  for (size_t i = 0; i < p4.launches.size(); ++i) {
    const Launch &a = p4.launches[i], &b = p8.launches[i];
    CAPTURE(a.kernel);
    CHECK(a.kernel == b.kernel);
    if (a.family == "moe_gemm") {
      CHECK(a.cost.unit == Unit::tensor_fp4);
      CHECK(a.cost.bytes < b.cost.bytes);
    } else if (a.kernel == "quant.moe_latent" || a.kernel == "moe.permute" || a.kernel == "moe.weight") {
      CHECK(a.cost.bytes < b.cost.bytes);
    } else {
      CHECK(a.cost.bytes == b.cost.bytes);
      CHECK(a.cost.unit == b.cost.unit);
    }
  }
  CHECK(family_ms(plan_spans(p4, gb300), "moe_gemm") < family_ms(plan_spans(p8, gb300), "moe_gemm"));
}

TEST_CASE("quant_fuse: the output gates write the fp8 twin (launch list 2); list 1 quantized them apart") {
  const Scenario s = parse_scenario(
      "name: t\nmodel: {preset: k3}\ncp: 1\ncontext: 16384\nbucket: 16384\nprecision: fp8\n", "t.yaml");
  const CutSet fused = CutSet::all(s.precision), apart = fused.without(Cut::quant_fuse);
  const RankPlan now = plan_rank(s, fused, 0), v1 = plan_rank(s, fused, 0, 1), off = plan_rank(s, apart, 0);
  for (const char* quant : {"quant.mla_o", "quant.kda_o"}) {
    CAPTURE(quant);
    CHECK(count(now, quant) == 0);
    CHECK(count(v1, quant) > 0);
    CHECK(count(v1, quant) == count(off, quant));
  }
  CHECK(now.launches.size() + size_t(count(v1, "quant.mla_o") + count(v1, "quant.kda_o")) == v1.launches.size());
  // The fused producer moves the bf16 op's bytes with its fp8 twin in place of the bf16 write, and less in
  // all than the op and its quant apart.
  const ModelShape& m = s.model;
  const auto bytes_of = [](const RankPlan& p, const std::string& kernel) {
    for (const Launch& l : p.launches)
      if (l.kernel == kernel) return l.cost.bytes;
    return -1.0;
  };
  const int64_t v_width = m.heads * m.v_head, rows = s.bucket;
  CHECK(bytes_of(now, "mul_sigmoid") == cost::elementwise_fp8(rows, v_width, 6).bytes);
  CHECK(bytes_of(now, "mul_sigmoid") < bytes_of(off, "mul_sigmoid") + bytes_of(off, "quant.mla_o"));
  CHECK(bytes_of(now, "o_norm_gate") == cost::o_norm_gate_fp8(rows * m.kda_heads, m.kda_head_dim).bytes);
  CHECK(bytes_of(now, "o_norm_gate") < bytes_of(off, "o_norm_gate") + bytes_of(off, "quant.kda_o"));
  // bf16 runs are untouched: the cut does not apply there, and the lists of both versions agree.
  const Scenario b = parse_scenario("name: t\nmodel: {preset: k3}\ncp: 1\ncontext: 16384\nbucket: 16384\n", "t.yaml");
  const RankPlan b2 = plan_rank(b, CutSet::all(b.precision), 0), b1 = plan_rank(b, CutSet::all(b.precision), 0, 1);
  REQUIRE(b2.launches.size() == b1.launches.size());
  for (size_t i = 0; i < b2.launches.size(); ++i) CHECK(b2.launches[i].cost.bytes == b1.launches[i].cost.bytes);
}

// ---- calibration ----

namespace {

// A bench row at `fraction` of the H200's copy ceiling.
BenchRow memory_row(const std::string& family, const std::string& kernel, const std::string& variant, double bytes,
                    double fraction) {
  BenchRow r;
  r.family = family;
  r.kernel = kernel;
  r.variant = variant;
  r.shape = "test";
  r.bytes = bytes;
  r.median_us = bytes / 4.25e6 / fraction;
  r.fraction = fraction;
  r.reps = 3;
  return r;
}

double launches_ms(const RankCalibration& c, const std::string& family) { return family_ms(c.spans, family); }

double roofline_ms(const Scenario& s, const CutSet& cuts, const std::string& family) {
  return family_ms(plan_spans(plan_rank(s, cuts, 0), gpu_profile("h200")), family);
}

}  // namespace

TEST_CASE("calibration: each family scaled by its measured fraction, from a kernels file written here") {
  test::TempDir dir("pb-test-plan");
  RunResult kernels;
  kernels.kind = "kernels";
  // land: the same bytes for baseline and cut (the benchmark's convention), 0.4 and 0.95 of the ceiling
  kernels.bench.push_back(memory_row("land", "land.n12288", "baseline", 1.25e9, 0.4));
  kernels.bench.push_back(memory_row("land", "land.n12288", "cut", 1.25e9, 0.95));
  // conv: the baseline path timed against the cut's bytes at 0.1 of the ceiling
  kernels.bench.push_back(memory_row("conv", "conv.qkv", "baseline", 3.7e9, 0.1));
  kernels.bench.push_back(memory_row("conv", "conv.qkv", "cut", 3.7e9, 0.9));
  kernels.bench.push_back(memory_row("land", "land.n12288", "cut.ring", 1.25e9, 0.01));  // an alternative: skipped
  const std::string path = dir.file("kernels.h5");
  write_results(path, kernels, false);

  const Calibration cal = load_calibration({path});
  REQUIRE(cal.rows.size() == 5);
  CHECK(cal.rows[0].file == "kernels.h5");
  CHECK(cal.rows[0].same_work);   // land baseline: its cut row has the same bytes
  CHECK_FALSE(cal.rows[1].same_work);

  Scenario s = k3(1, 16384);
  const GpuProfile h200 = gpu_profile("h200");
  const LinkProfile link = link_profile("nvlink4");
  const RankCalibration base = calibrate_rank(s, CutSet::none(), 0, cal, h200, link);
  const RankCalibration cut = calibrate_rank(s, all_but_overlap(), 0, cal, h200, link);
  CHECK(launches_ms(base, "land") == doctest::Approx(roofline_ms(s, CutSet::none(), "land") / 0.4));
  CHECK(launches_ms(cut, "land") == doctest::Approx(roofline_ms(s, all_but_overlap(), "land") / 0.95));
  // conv's baseline: the cut's roofline over the baseline's fraction (the benchmark's work is the cut's)
  CHECK(launches_ms(base, "conv") == doctest::Approx(roofline_ms(s, all_but_overlap(), "conv") / 0.1));
  CHECK(launches_ms(cut, "conv") == doctest::Approx(roofline_ms(s, all_but_overlap(), "conv") / 0.9));
  // the same bytes with the cut on and off: only calibration shows the land cut's gain
  CHECK(roofline_ms(s, CutSet::none(), "land") == roofline_ms(s, all_but_overlap(), "land"));
  CHECK(launches_ms(cut, "land") < 0.5 * launches_ms(base, "land"));
  // families without a row keep their roofline and are counted uncalibrated
  CHECK(launches_ms(base, "gemm") == doctest::Approx(roofline_ms(s, CutSet::none(), "gemm")));
  CHECK(base.families.at("gemm").uncalibrated == base.families.at("gemm").launches);
  CHECK(base.families.at("land").uncalibrated == 0);
  CHECK(base.families.at("land").sources.count("kernels.h5 family") == 1);
  double total = 0;
  for (const auto& sp : base.spans) total += sp.time_us / 1e3;
  CHECK(base.calibrated_ms == doctest::Approx(total));

  // a later file replaces a row of the same family, kernel and variant
  RunResult better;
  better.kind = "kernels";
  better.bench.push_back(memory_row("land", "land.n12288", "baseline", 1.25e9, 0.5));
  const std::string path2 = dir.file("better.h5");
  write_results(path2, better, false);
  const RankCalibration replaced =
      calibrate_rank(s, CutSet::none(), 0, load_calibration({path, path2}), h200, link);
  CHECK(launches_ms(replaced, "land") == doctest::Approx(roofline_ms(s, CutSet::none(), "land") / 0.5));

  // a file without bench rows is refused, naming it
  RunResult plan;
  plan.kind = "plan";
  write_results(dir.file("plan.h5"), plan, false);
  CHECK_THROWS_WITH_AS(load_calibration({dir.file("plan.h5")}), doctest::Contains("plan.h5' (kind 'plan') has no /bench"),
                       Error);
}

TEST_CASE("calibration: rows count only in the launch's state and engine") {
  RunResult moe;
  moe.kind = "moe";
  BenchRow gemm_cutlass = memory_row("gemm", "gemm.shared", "moe_block_cutlass.none", 1.25e9, 1);
  gemm_cutlass.flops = 2.98e12;
  gemm_cutlass.median_us = gemm_cutlass.flops / 797e6 / 0.5;  // tensor-bound: 0.5 of the GEMM ceiling
  BenchRow gemm_grouped = gemm_cutlass;
  gemm_grouped.variant = "moe_block.none";
  gemm_grouped.median_us *= 4;  // 0.125
  BenchRow gemm_all = gemm_cutlass;
  gemm_all.variant = "moe_block_cutlass.all";
  gemm_all.median_us /= 1.6;  // 0.8
  moe.bench = {gemm_cutlass, gemm_grouped, gemm_all};
  const Calibration cal = make_calibration({{"moe.h5", moe}});
  Scenario s = k3(1, 16384);
  s.moe_gemm = "auto";  // reads as cutlass
  const GpuProfile h200 = gpu_profile("h200");
  const LinkProfile link = link_profile("nvlink4");
  auto shared_ms = [&](const Scenario& sc, const CutSet& cuts) {
    double ms = 0;
    for (const auto& sp : calibrate_rank(sc, cuts, 0, cal, h200, link).spans)
      if (sp.kernel == "gemm.shared") ms += sp.time_us / 1e3;
    return ms;
  };
  double roof = 0;
  for (const auto& sp : plan_spans(plan_rank(s, CutSet::none(), 0), h200))
    if (sp.kernel == "gemm.shared") roof += sp.time_us / 1e3;
  CHECK(shared_ms(s, CutSet::none()) == doctest::Approx(roof / 0.5));
  CHECK(shared_ms(s, all_but_overlap()) == doctest::Approx(roof / 0.8));  // beside every cut: the ".all" rows
  CutSet land = CutSet::none();
  land.set(Cut::land, true);
  CHECK(shared_ms(s, land) == doctest::Approx(roof / 0.5));  // a mixed set reads the ".none" rows
  s.moe_gemm = "grouped";
  CHECK(shared_ms(s, CutSet::none()) == doctest::Approx(roof / 0.125));
  // the other gemm launches pool the family's rows of that state
  s.moe_gemm = "cutlass";
  const RankCalibration c = calibrate_rank(s, CutSet::none(), 0, cal, h200, link);
  CHECK(c.families.at("gemm").uncalibrated == 0);
  CHECK(c.families.at("gemm").calibrated_ms == doctest::Approx(c.families.at("gemm").roofline_ms / 0.5));
}

TEST_CASE("measured superstep: TTFT median, the deep rank's families, median over reps") {
  RunResult run;
  run.kind = "run";
  VariantResult v;
  v.name = "baseline";
  v.ttft_ms = {10, 30, 20};
  for (int rep = 0; rep < 3; ++rep)
    for (int rank = 0; rank < 2; ++rank) {
      v.spans.push_back({rep, rank, 0, "land", "land.q_b", 1000.0 * (rank + 1) * (rep + 1), 0, 0});
      v.spans.push_back({rep, rank, 0, "gemm", "gemm.q_b", 500.0 * (rank + 1), 0, 0});
    }
  run.variants.push_back(v);
  const MeasuredSuperstep m = measured_superstep(run, "baseline");
  CHECK(m.reps == 3);
  CHECK(m.ttft_ms == 20);
  CHECK(m.deep_rank == 1);
  CHECK(m.family_ms.at("land") == doctest::Approx(4.0));  // 2, 4, 6 ms
  CHECK(m.family_ms.at("gemm") == doctest::Approx(1.0));
  CHECK(m.span_ms == doctest::Approx(5.0));
  CHECK_THROWS_WITH_AS(measured_superstep(run, "all"), doctest::Contains("no variant 'all'; it has: baseline"), Error);
}

namespace {

// The committed H200 results, and the calibration their benchmark files give.
std::string committed_results_dir() { return std::string(PB_SOURCE_DIR) + "/results/h200/"; }
Calibration committed_calibration() {
  std::vector<std::string> files;
  for (const char* f : {"kernels.h5", "attnres.h5", "fmha.h5", "kda.h5", "moe.h5"})
    files.push_back(committed_results_dir() + f);
  return load_calibration(files);
}

}  // namespace

TEST_CASE("the calibrated plan of cp4-64k against the committed serialized run's projected gang: within 10%") {
  // Four ranks took turns on one GPU: the run's TTFT holds every rank's turns, and the gang's TTFT is
  // the projection; the plan's deepest calibrated rank predicts it.
  const std::string dir = committed_results_dir();
  const Calibration cal = committed_calibration();
  Scenario s = parse_scenario("name: ab-each-cut\nmodel: {preset: k3}\ncp: 4\ncontext: 65536\nbucket: 16896\n"
                              "variants: each-cut\nmoe_gemm: cutlass\nserialize_ranks: true\n",
                              "ab-each-cut.yaml");
  const RunResult run = read_measured_run(dir + "cp4-64k-each-cut.h5", s);
  const GpuProfile h200 = gpu_profile("h200");
  for (const auto& variant : s.variants) {
    double deepest = 0;
    for (int r = 0; r < s.cp; ++r)
      deepest = std::max(deepest, calibrate_rank(s, variant.cuts, r, cal, h200, link_profile("nvlink4")).calibrated_ms);
    const MeasuredSuperstep m = measured_superstep(run, variant.name);
    REQUIRE(m.projected_link == "measured");
    const double error = deepest / m.projected_ms - 1;
    MESSAGE(variant.name << ": calibrated deepest rank " << deepest << " ms, projected gang " << m.projected_ms
                         << " ms, error " << 100 * error << "%");
    CHECK(std::abs(error) < 0.10);
    CHECK(m.ttft_ms > 3 * m.projected_ms);  // the serialized TTFT: every rank's turns
  }
}

TEST_CASE("the calibrated plan of cp1-16k against the committed run: within 10% per variant") {
  // The committed H200 benchmark files and the each-cut run: every variant it has (a file made before
  // balance and overlap lacks those two).
  const std::string dir = committed_results_dir();
  const Calibration cal = committed_calibration();
  Scenario s = parse_scenario("name: cp1-16k\nmodel: {preset: k3}\ncp: 1\ncontext: 16384\nbucket: 16896\n"
                              "variants: each-cut\nmoe_gemm: cutlass\n",
                              "cp1-16k.yaml");
  const RunResult run = read_measured_run(dir + "cp1-16k-each-cut.h5", s);
  const GpuProfile h200 = gpu_profile("h200");
  REQUIRE(s.variants.size() == 10);
  for (const auto& variant : s.variants) {
    if (run.find_variant(variant.name) == nullptr) {  // a file from before the cut
      CHECK((variant.name == "balance" || variant.name == "overlap"));
      continue;
    }
    const RankCalibration c = calibrate_rank(s, variant.cuts, 0, cal, h200, link_profile("nvlink4"));
    const MeasuredSuperstep m = measured_superstep(run, variant.name);
    const double error = c.calibrated_ms / m.ttft_ms - 1;
    MESSAGE(variant.name << ": calibrated " << c.calibrated_ms << " ms, measured TTFT " << m.ttft_ms << " ms, error "
                         << 100 * error << "%");
    CHECK(std::abs(error) < 0.10);
    // calibration moves the prediction from the roofline toward the measurement
    CHECK(std::abs(c.roofline_ms / m.ttft_ms - 1) > std::abs(error));
  }
  // the run file of another scenario is refused
  Scenario other = s;
  other.context = 8192;
  CHECK_THROWS_WITH_AS(read_measured_run(dir + "cp1-16k-each-cut.h5", other),
                       doctest::Contains("measured scenario 'cp1-16k' cp 1 context 16384"), Error);
  CHECK_THROWS_WITH_AS(read_measured_run(dir + "kernels.h5", s), doctest::Contains("is a kernels file"), Error);
}

TEST_CASE("the calibrated plan of cp1-16k in fp8 against the committed fp8 run: within 5%, from fp8 rows only") {
  // The fp8 GEMMs take the gemm benchmark's fp8 rows and the moe benchmark's cutlass_fp8 rows; its bf16 rows
  // (the gemm benchmark's "bf16", the MoE blocks') calibrate bf16 launches only (docs/plan.md has the figures).
  const std::string dir = committed_results_dir();
  std::vector<std::string> files;
  for (const char* f : {"kernels.h5", "attnres.h5", "fmha.h5", "kda.h5", "moe.h5", "gemm.h5", "moe-fp8.h5"})
    files.push_back(dir + f);
  const Calibration cal = load_calibration(files);
  Scenario s = parse_scenario("name: cp1-16k\nmodel: {preset: k3}\ncp: 1\ncontext: 16384\nbucket: 16896\n"
                              "precision: fp8\nvariants:\n  - {name: baseline, cuts: none}\n  - {name: all, cuts: all}\n",
                              "cp1-16k.yaml");
  const RunResult run = read_measured_run(dir + "cp1-16k-fp8.h5", s);
  const GpuProfile h200 = gpu_profile("h200");
  for (const auto& variant : s.variants) {
    const RankCalibration c = calibrate_rank(s, variant.cuts, 0, cal, h200, link_profile("nvlink4"));
    const MeasuredSuperstep m = measured_superstep(run, variant.name);
    const double error = c.calibrated_ms / m.ttft_ms - 1;
    MESSAGE(variant.name << ": calibrated " << c.calibrated_ms << " ms, measured TTFT " << m.ttft_ms << " ms, error "
                         << 100 * error << "%");
    CHECK(std::abs(error) < 0.05);
    for (const char* family : {"gemm", "moe_gemm"}) {
      CAPTURE(family);
      const FamilyCalibration& f = c.families.at(family);
      CHECK(f.uncalibrated == 0);
      for (const std::string& source : f.sources)  // the expert GEMMs from the fp8 rows of moe-fp8.h5 alone
        if (std::string(family) == "moe_gemm") CHECK(source == "moe-fp8.h5 name");
    }
  }
}

// ---- balance (cut 7) and the zigzag layout ----

namespace {

Scenario with_layout(Scenario s, Layout layout) {
  s.layout = layout;
  return s;
}

// The launches of one MLA layer's attention, from the first window's keys (or
// its queries) to release_window: kernel names, and each FMHA's (tq, tk) read off its FLOPs.
std::vector<std::string> attention_launches(const RankPlan& p, const ModelShape& m) {
  int32_t layer = -1;
  for (const auto& l : p.launches)
    if (l.kernel == "gemm.wfu") {
      layer = l.layer;
      break;
    }
  std::vector<std::string> out;
  bool in = false;
  for (const auto& l : p.launches) {
    if (l.layer != layer) continue;
    if (l.kernel == "o_finalize") break;
    if (in && l.kernel != "fabric.release_window") {
      std::string name = l.kernel;
      if (l.family == "fmha") {
        // flops = 2 tq tk H (dqk + dv) (/2 causal); the query rows are in the bytes' tq * H * (dqk + dv) * 2 term
        const double per_row = double(m.heads) * (m.d_qk() + m.v_head) * 2;
        const double tk = 16384;  // every key segment here is whole
        const double tq = l.cost.flops / (per_row * tk) * (name == "fmha.causal" ? 2 : 1);
        name += fmt::format(" {:.0f}", tq);
      }
      if (l.kernel == "lse_merge") {  // a reset merge: 1 FLOP an element, 6 + 8 / dv bytes; else 3 and 10 + 12 / dv
        const double n = l.cost.flops, reset_rows = n / (double(m.heads) * m.v_head);
        const bool reset = l.cost.bytes == n * 6 + reset_rows * m.heads * 8;
        name += fmt::format(reset ? " init {:.0f}" : " {:.0f}", reset ? reset_rows : reset_rows / 3);
      }
      out.push_back(name);
    }
    if (l.kernel == "fabric.publish_window") in = true;
  }
  return out;
}

double fabric_total(const RankPlan& p) {
  double bytes = 0;
  for (const auto& l : p.launches) bytes += l.fabric_bytes;
  return bytes;
}

}  // namespace

TEST_CASE("balance at cp8 128k: every rank at 4.0 pairs, the FLOPs exact; at cp4 2.0") {
  const double pair = 2.0 * 16384 * 16384 * 96 * (192 + 128);
  for (int cp : {4, 8}) {
    const Scenario s = k3(cp, int64_t(cp) * 16384);
    for (int r = 0; r < cp; ++r) {
      CAPTURE(cp);
      CAPTURE(r);
      const RankPlan p = plan_rank(s, all_but_overlap(), r);
      CHECK(p.fmha_pairs == cp / 2.0);
      CHECK(family_flops(p, "fmha") == 24 * pair * cp / 2.0);
    }
  }
  // odd cp: balance changes nothing, launch by launch
  const Scenario cp3 = k3(3, 3 * 16384);
  for (int r = 0; r < 3; ++r) {
    const RankPlan a = plan_rank(cp3, all_but_overlap(), r), b = plan_rank(cp3, all_but_overlap().without(Cut::balance), r);
    REQUIRE(a.launches.size() == b.launches.size());
    for (size_t i = 0; i < a.launches.size(); ++i) {
      CHECK(a.launches[i].kernel == b.launches[i].kernel);
      CHECK(a.launches[i].cost.bytes == b.launches[i].cost.bytes);
    }
  }
}

TEST_CASE("balance at cp4: the helper runs the moved half first; the owner merges it in the kept pair's place") {
  const Scenario s = k3(4, 65536);
  // tq read off each FMHA and lse_merge (rows): 16384 whole, 8192 half
  const std::vector<std::string> helper = {
      "gemm.kv_b", "mla.expand_k",                                            // its own keys, first
      "fabric.wait_queries", "fabric.stage_queries", "fmha.helped 8192",
      "fabric.publish_return",                                              // rank 1's rows [8192, 16384)
      "fmha.causal 16384", "lse_merge init 16384",                          // its diagonal
      "fabric.wait_queries", "fabric.stage_queries", "fmha.helped 16384",
      "fabric.publish_return"};                                             // slot 0: rank 2 (the stripe's)
  CHECK(attention_launches(plan_rank(s, all_but_overlap(), 0), s.model) == helper);
  const std::vector<std::string> owner = {
      "fabric.wait_window", "gemm.kv_b", "mla.expand_k", "fmha.dense 8192", "lse_merge init 8192",  // (1, 0) rows [0, 8192)
      "fabric.wait_return", "lse_merge init 8192", "fabric.release_return",  // rows [8192, 16384) from rank 0
      "gemm.kv_b", "mla.expand_k", "fmha.causal 16384", "lse_merge 16384",                     // the diagonal
      "fabric.wait_queries", "fabric.stage_queries", "fmha.helped 16384",
      "fabric.publish_return"};                                                                // slot 0: rank 3
  CHECK(attention_launches(plan_rank(s, all_but_overlap(), 1), s.model) == owner);
}

TEST_CASE("stage_queries: a helped window's queries staged by their own launch, with their bytes") {
  Scenario s = k3(4, 65536);
  const RankPlan staged = plan_rank(s, all_but_overlap(), 0);
  const int helped = count(staged, "fmha.helped");
  REQUIRE(helped > 0);
  CHECK(count(staged, "fabric.stage_queries") == helped);
  const double queries = 8192.0 * 96 * 192 * 2;  // the first helped window: half of rank 1's rows
  for (size_t i = 1; i < staged.launches.size(); ++i) {
    const Launch& l = staged.launches[i];
    if (l.kernel != "fabric.stage_queries") continue;
    CHECK(staged.launches[i - 1].kernel == "fabric.wait_queries");
    CHECK(staged.launches[i - 1].fabric_bytes == 0);  // the wait moves nothing
    CHECK(staged.launches[i + 1].kernel == "fmha.helped");
    CHECK(l.fabric_bytes == queries);
    break;
  }
  // Read in place by the FMHA: no staging, the wait carries the bytes; the link's total is the same.
  s.helped_in_place = true;
  const RankPlan in_place = plan_rank(s, all_but_overlap(), 0);
  CHECK(count(in_place, "fabric.stage_queries") == 0);
  CHECK(fabric_total(in_place) == fabric_total(staged));
  // Launch list version 1 (files recorded before the split): the copy inside the wait, with its bytes.
  s.helped_in_place = false;
  const RankPlan v1 = plan_rank(s, all_but_overlap(), 0, 1);
  REQUIRE(v1.launches.size() == staged.launches.size() - size_t(helped));
  REQUIRE(v1.launches.size() == in_place.launches.size());
  for (size_t i = 0; i < v1.launches.size(); ++i) {
    CHECK(v1.launches[i].kernel == in_place.launches[i].kernel);
    CHECK(v1.launches[i].fabric_bytes == in_place.launches[i].fabric_bytes);
  }
  RunResult file;
  file.kind = "run";
  CHECK(recorded_launch_list_version(file) == 1);
  file.numbers[kLaunchListVersionKey] = kLaunchListVersion;
  CHECK(recorded_launch_list_version(file) == kLaunchListVersion);
  // Over a link the plan's time does not move: the same bytes, on the copy instead of the wait.
  const GpuProfile h200 = gpu_profile("h200");
  for (const char* link : {"nvlink4", "ib400"}) {
    CAPTURE(link);
    double a = 0, b = 0;
    for (const Span& x : plan_spans(staged, h200, link_profile(link))) a += x.time_us;
    for (const Span& x : plan_spans(in_place, h200, link_profile(link))) b += x.time_us;
    CHECK(a == doctest::Approx(b).epsilon(1e-12));
  }
}

TEST_CASE("balance moves half a window of queries and its (o, lse) rows: the helper's fabric bytes") {
  const Scenario s = k3(8, 131072);
  const CutSet stripe = all_but_overlap().without(Cut::balance);
  const double half = 8192, per_layer = half * 96 * 192 * 2 + half * 96 * 128 * 2 + 96 * half * 4;
  for (int r = 0; r < 8; ++r) {
    CAPTURE(r);
    const double extra = fabric_total(plan_rank(s, all_but_overlap(), r)) - fabric_total(plan_rank(s, stripe, r));
    CHECK(extra == (r % 2 == 0 ? 24 * per_layer : 0.0));  // the owner reads nothing new: its return wait has no bytes
  }
}

TEST_CASE("zigzag cp8 128k: every rank 4.0 pairs and the same FMHA FLOPs, nothing helped") {
  const Scenario s = with_layout(k3(8, 131072), Layout::zigzag);
  const double pair = 2.0 * 16384 * 16384 * 96 * (192 + 128);
  for (const CutSet& cuts : {CutSet::none(), all_but_overlap()})
    for (int r = 0; r < 8; ++r) {
      CAPTURE(r);
      const RankPlan p = plan_rank(s, cuts, r);
      CHECK(p.fmha_pairs == 4.0);
      CHECK(family_flops(p, "fmha") == 24 * 4 * pair);
      CHECK(count(p, "fmha.causal") == 24);
      CHECK(count(p, "fmha.dense") == 24 * 7);
      CHECK(count(p, "fmha.helped") + count(p, "fabric.wait_queries") + count(p, "fabric.wait_return") == 0);
      CHECK(count(p, "gemm.kv_b") == 24 * 8);
      CHECK(count(p, "lse_merge") == 24 * 8);
      REQUIRE(p.tokens.size() == 2);
      CHECK(p.tokens[0].begin == r * 8192);
      CHECK(p.tokens[1].begin == (15 - r) * 8192);
      // keys of k < r: only chunk k (8192 rows); of k > r: both chunks
      double window_bytes = 0;
      for (const auto& l : p.launches)
        if (l.kernel == "fabric.wait_window") window_bytes += l.fabric_bytes;
      CHECK(window_bytes == 24 * (r * 8192.0 + (7 - r) * 16384.0) * (512 + 64) * 2);
    }
}

TEST_CASE("zigzag KDA: two pieces a rank (one on rank cp - 1), their halos, packages and folds") {
  const Scenario s = with_layout(k3(4, 65536), Layout::zigzag);
  const int kda = 69;
  // rank: pieces, packages published, folds, halos received, halos sent
  const int want[4][5] = {{2, 1, 1, 1, 1}, {2, 2, 2, 2, 2}, {2, 2, 2, 2, 2}, {1, 1, 1, 1, 1}};
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    const RankPlan p = plan_rank(s, all_but_overlap(), r);
    CHECK(count(p, "kda.forward") == kda * want[r][0]);
    CHECK(count(p, "kda.prepare") == kda * want[r][0]);
    CHECK(count(p, "conv.chunk_q") == kda * want[r][0]);
    CHECK(count(p, "kda.package") == kda * want[r][1]);
    CHECK(count(p, "fabric.publish_state") == kda * want[r][1]);
    CHECK(count(p, "kda.fold") == kda * want[r][2]);
    CHECK(count(p, "fabric.wait_halo") == kda * want[r][3]);
    CHECK(count(p, "fabric.publish_halo") == kda * want[r][4]);
  }
  // rank 1's second piece continues its first piece's fold: its own package, then rank 2's, rank 3's, rank 2's
  // second: 4 more steps, 3 of them over the fabric
  const RankPlan p1 = plan_rank(s, all_but_overlap(), 1);
  const double package = 96.0 * 128 * 128 * 4;
  std::vector<double> waits, folds;
  for (const auto& l : p1.launches)
    if (l.layer == 0 && l.kernel == "fabric.wait_state") waits.push_back(l.fabric_bytes);
    else if (l.layer == 0 && l.kernel == "kda.fold") folds.push_back(l.cost.flops);
  CHECK(waits == std::vector<double>{2 * package, 3 * 2 * package});
  CHECK(folds == std::vector<double>{0.0, 4 * 96 * 2.0 * 128 * 128 * 128});
}

TEST_CASE("zigzag: the first token runs on rank 0, which holds the last chunk") {
  const Scenario s = with_layout(k3(4, 65536), Layout::zigzag);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    const RankPlan p = plan_rank(s, all_but_overlap(), r);
    CHECK(count(p, "sample.argmax") == (r == 0 ? 1 : 0));
    CHECK(count(p, "gemm.lm_head") == (r == 0 ? 1 : 0));
  }
  CHECK(plan_rank(s, all_but_overlap(), 0).tokens.back().begin + plan_rank(s, all_but_overlap(), 0).tokens.back().len == 65536);
}

TEST_CASE("zigzag at cp 1 is the contiguous plan, launch by launch") {
  const Scenario s = k3(1, 16384);
  const RankPlan a = plan_rank(s, all_but_overlap(), 0), b = plan_rank(with_layout(s, Layout::zigzag), all_but_overlap(), 0);
  REQUIRE(a.launches.size() == b.launches.size());
  for (size_t i = 0; i < a.launches.size(); ++i) {
    CHECK(a.launches[i].kernel == b.launches[i].kernel);
    CHECK(a.launches[i].cost.bytes == b.launches[i].cost.bytes);
    CHECK(a.launches[i].cost.flops == b.launches[i].cost.flops);
  }
}

namespace {

CutSet with_overlap(CutSet c) {
  c.set(Cut::overlap, true);
  return c;
}

// A layer's launches from its first launch of `first` to its first of `last`, both included.
std::vector<std::string> launches_between(const RankPlan& p, const std::string& first, const std::string& last) {
  int32_t layer = -1;
  std::vector<std::string> out;
  for (const auto& l : p.launches) {
    if (layer < 0 && l.kernel == first) layer = l.layer;
    if (layer < 0 || l.layer != layer) continue;
    out.push_back(l.kernel);
    if (l.kernel == last) break;
  }
  return out;
}

}  // namespace

TEST_CASE("overlap (cut 8): the same launches and costs in another order, per rank, every schedule and layout") {
  for (const Scenario& s : {k3(4, 65536), k3(8, 131072), with_layout(k3(4, 65536), Layout::zigzag), k3(1, 16384)})
    for (const CutSet& base : {CutSet::none(), all_but_overlap().without(Cut::balance), all_but_overlap()})
      for (int r = 0; r < s.cp; ++r) {
        CAPTURE(s.cp);
        CAPTURE(layout_name(s.layout));
        CAPTURE(base.describe());
        CAPTURE(r);
        const RankPlan plain = plan_rank(s, base, r), over = plan_rank(s, with_overlap(base), r);
        REQUIRE(plain.launches.size() == over.launches.size());
        CHECK(plain.fmha_pairs == over.fmha_pairs);
        auto key = [](const Launch& l) {
          return std::make_tuple(l.layer, l.kernel, l.cost.bytes, l.cost.flops, l.fabric_bytes);
        };
        std::vector<decltype(key(plain.launches[0]))> a, b;
        for (const auto& l : plain.launches) a.push_back(key(l));
        for (const auto& l : over.launches) b.push_back(key(l));
        CHECK(a != b);  // at cp 1 too: the KDA streams' GEMMs move ahead of the convs
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        CHECK(a == b);
      }
}

TEST_CASE("overlap at cp4: KDA sends its halo first and waits for the upstream's after its projections") {
  const Scenario s = k3(4, 65536);
  const CutSet cuts = with_overlap(all_but_overlap());
  const std::vector<std::string> kda = {
      "rmsnorm.kda_in", "fabric.wait_halo_free", "fabric.publish_halo",  // rank 2's carry, before this rank's work
      "gemm.kda_g", "gemm.kda_small", "land.beta", "land.f_a", "land.out_gate", "gemm.kda_f_b",
      "gemm.kda_q", "gemm.kda_k", "gemm.kda_v", "land.forget",
      "fabric.wait_halo", "gemm.halo_qkv", "land.halo_q", "land.halo_k", "land.halo_v", "fabric.release_halo",
      "conv.chunk_q", "conv.chunk_k", "conv.chunk_v", "kda.prepare"};
  CHECK(launches_between(plan_rank(s, cuts, 1), "rmsnorm.kda_in", "kda.prepare") == kda);
  const std::vector<std::string> plain = {
      "rmsnorm.kda_in", "gemm.kda_g", "gemm.kda_small", "land.beta", "land.f_a", "land.out_gate", "gemm.kda_f_b",
      "fabric.wait_halo_free", "fabric.publish_halo",
      "fabric.wait_halo", "gemm.halo_qkv", "land.halo_q", "land.halo_k", "land.halo_v", "fabric.release_halo",
      "gemm.kda_q", "conv.chunk_q", "gemm.kda_k", "conv.chunk_k", "gemm.kda_v", "conv.chunk_v", "land.forget",
      "kda.prepare"};
  CHECK(launches_between(plan_rank(s, all_but_overlap(), 1), "rmsnorm.kda_in", "kda.prepare") == plain);
}

TEST_CASE("overlap at cp4 under balance: the owner's diagonal (held) and helped window before the peer's keys") {
  const Scenario s = k3(4, 65536);
  const std::vector<std::string> owner = {
      "gemm.kv_b", "mla.expand_k", "fmha.causal 16384",                           // the diagonal, held
      "fabric.wait_queries", "fabric.stage_queries", "fmha.helped 16384",
      "fabric.publish_return",                                                    // slot 0: rank 3
      "fabric.wait_window", "gemm.kv_b", "mla.expand_k",                          // rank 0's keys
      "fmha.dense 8192", "lse_merge init 8192",                                   // (1, 0) rows [0, 8192)
      "fabric.wait_return", "lse_merge init 8192", "fabric.release_return",       // rows [8192, 16384) from rank 0
      "lse_merge 16384"};                                                         // the diagonal, in its place
  CHECK(attention_launches(plan_rank(s, with_overlap(all_but_overlap()), 1), s.model) == owner);
  // the gate lands before the wait for the window's readers
  const std::vector<std::string> head = {"rmsnorm.mla_in", "gemm.wfu", "land.q_a", "rmsnorm.q_a", "land.mla_gate",
                                         "fabric.wait_released", "land.kv_a"};
  CHECK(launches_between(plan_rank(s, with_overlap(all_but_overlap()), 1), "rmsnorm.mla_in", "land.kv_a") == head);
}
