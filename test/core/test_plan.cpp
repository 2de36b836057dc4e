// The plan against hand-computed numbers (docs/design.md §2.1, §3, §4 and the seed).
#include <doctest/doctest.h>

#include <string>

#include "attnres.h"
#include "plan.h"
#include "scenario.h"

using namespace pb;

namespace {

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

TEST_CASE("MoE FFN: the launch order the MoE block records (harness/blocks/moe_block.h), either engine") {
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
  RankPlan p = plan_rank(k3(1, 16384), CutSet::all(), 0);
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
  RankPlan base = plan_rank(s, CutSet::none(), 0), cut = plan_rank(s, CutSet::all(), 0);
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
  for (int r = 0; r < 4; ++r) CHECK(count(plan_rank(s, CutSet::all(), r), "sample.argmax") == (r == 3 ? 1 : 0));
}

TEST_CASE("cut 2 replaces the conv path's landing, window copies, decode and carry copy by one launch") {
  Scenario s = k3(1, 16384);
  RankPlan base = plan_rank(s, CutSet::none(), 0), cut = plan_rank(s, CutSet::all(), 0);
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
    RankPlan p = plan_rank(s, CutSet::all(), r);
    CHECK(count(p, "kda.package") == (r < 3 ? 69 : 0));
    CHECK(count(p, "kda.fold") == (r > 0 ? 69 : 0));  // one launch folds all r upstream packages
    CHECK(count(p, "kda.prepare") == 69);
    CHECK(count(p, "fabric.publish_halo") == (r < 3 ? 69 : 0));
    CHECK(count(p, "fabric.release_state") == (r > 0 ? 69 : 0));
    CHECK(count(p, "fabric.wait_halo") == (r > 0 ? 69 : 0));
    CHECK(count(p, "gemm.halo_qkv") == (r > 0 ? 69 : 0));
  }
}

TEST_CASE("plan spans: roofline time, fabric spans carry bytes and no time") {
  Scenario s = k3(2, 32768);
  GpuProfile h200 = gpu_profile("h200");
  RankPlan p = plan_rank(s, CutSet::none(), 1);
  auto spans = plan_spans(p, h200);
  REQUIRE(spans.size() == p.launches.size());
  bool saw_fabric = false;
  for (size_t i = 0; i < spans.size(); ++i) {
    CHECK(spans[i].rep == -1);
    CHECK(spans[i].rank == 1);
    if (spans[i].family == "fabric") {
      saw_fabric = true;
      CHECK(spans[i].time_us == 0);
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
