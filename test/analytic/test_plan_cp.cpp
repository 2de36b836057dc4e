// The plan across ranks (docs/design.md §3): cut 7's balance, the zigzag
// layout, cut 8's overlap and the helped windows' fabric, launch by launch.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "plan.h"
#include "plan_test.h"
#include "scenario.h"

using namespace pb;
using namespace pb::plan_test;

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
