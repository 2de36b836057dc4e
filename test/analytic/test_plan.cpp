// The plan against hand-computed numbers (docs/design.md §2.1, §4, §12 and the
// seed): launch lists, costs, the fabric over a link, ceilings and profiles.
// The plan across ranks is test_plan_cp, calibration test_calibration.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "attnres.h"
#include "check.h"
#include "plan.h"
#include "plan_test.h"
#include "scenario.h"

using namespace pb;
using namespace pb::plan_test;

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
