// The plain C++ references of the MoE routing pieces (kernels/moe/moe_route.h):
// the top-k tie rule on constructed exact ties, renormalized weights, the
// permutation plan's order and inverse, the row references, and the skewed
// synthetic router. The GPU suite (test/kernels/moe/test_moe_route.cu) then holds the
// kernels to these references bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "check.h"
#include "moe_route.h"
#include "ref_math.h"

using namespace pb;

namespace {

// Logits whose sigmoid is exact in f32 on the host: sigmoid(0) = 0.5,
// sigmoid(100) = 1 (exp(-100) vanishes next to 1), sigmoid(-200) = 0 (exp(200)
// overflows to inf).
constexpr float kHalf = 0.0f, kOne = 100.0f, kZero = -200.0f;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, const std::vector<float>& bias,
             const MoeRouteShape& s) {
  Routed r{std::vector<int32_t>(size_t(s.tokens * s.top_k)),
           std::vector<float>(size_t(s.tokens * s.top_k))};
  ref::router_topk(logits.data(), bias.data(), r.ids.data(), r.weights.data(), s, ref::HostMath{});
  return r;
}

struct HostPlan {
  std::vector<int32_t> counts, offsets, perm_src, perm_dst;
  explicit HostPlan(const MoeRouteShape& s)
      : counts(size_t(s.experts), -7),
        offsets(size_t(s.experts + 1), -7),
        perm_src(size_t(s.tokens * s.top_k), -7),
        perm_dst(size_t(s.tokens * s.top_k), -7) {}
  MoePlan view() { return {counts.data(), offsets.data(), perm_src.data(), perm_dst.data()}; }
};

HostPlan plan_of(const std::vector<int32_t>& ids, const MoeRouteShape& s) {
  HostPlan p(s);
  ref::moe_permute_plan(ids.data(), p.view(), s);
  return p;
}

std::vector<uint16_t> random_rows(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (auto& v : out) v = ref::f32_to_bf16_rn(normal(rng));
  return out;
}

// The tie rule written a second way: a stable sort by "ranks before", where
// only a number before NaN and a larger b count; equal b keep index order.
std::vector<int32_t> brute_force_topk(const float* logits, const float* bias, int experts, int k) {
  std::vector<float> b(experts);
  for (int e = 0; e < experts; ++e) b[e] = ref::sigmoid_f32(ref::HostMath{}, logits[e]) + bias[e];
  std::vector<int32_t> order(experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    if (std::isnan(b[x]) || std::isnan(b[y])) return !std::isnan(b[x]) && std::isnan(b[y]);
    return b[x] > b[y];
  });
  order.resize(size_t(k));
  return order;
}

}  // namespace

TEST_CASE("router_topk ref: exact ties go to the lower expert index") {
  const MoeRouteShape s{1, 8, 4};
  SUBCASE("all scores equal: experts 0..k-1, equal weights") {
    const Routed r = route(std::vector<float>(8, kHalf), std::vector<float>(8, 0.0f), s);
    CHECK(r.ids == std::vector<int32_t>{0, 1, 2, 3});
    for (float w : r.weights) CHECK(w == 0.25f);
  }
  SUBCASE("a three-way tie of b = 1 from different unbiased scores") {
    // b: e1 = 0.5 + 0.5, e4 = 1 + 0, e6 = 0 + 1 (all exactly 1.0f); e7 = 0.75 leads.
    std::vector<float> logits(8, kZero), bias(8, 0.0f);
    logits[1] = kHalf, bias[1] = 0.5f;
    logits[4] = kOne;
    bias[6] = 1.0f;
    logits[7] = kHalf, bias[7] = 0.25f;
    const Routed r = route(logits, bias, s);
    CHECK(r.ids == std::vector<int32_t>{1, 4, 6, 7});
    // Weights from the unbiased scores 0.5, 1, 0, 0.5: sum 2.
    CHECK(r.weights == std::vector<float>{0.25f, 0.5f, 0.0f, 0.25f});
  }
  SUBCASE("NaN ranks below -inf; NaNs among themselves by index") {
    std::vector<float> logits(8, kHalf), bias(8, -INFINITY);
    logits[0] = logits[3] = NAN;  // b NaN
    bias[5] = 0.0f;               // the only finite b
    const Routed r = route(logits, bias, s);
    // 5 first, then the -inf experts by index (1, 2, 4), NaNs (0, 3) last.
    CHECK(r.ids == std::vector<int32_t>{5, 1, 2, 4});
    const Routed nan_only = route(std::vector<float>(8, NAN), std::vector<float>(8, 0.0f), s);
    CHECK(nan_only.ids == std::vector<int32_t>{0, 1, 2, 3});
  }
  SUBCASE("slot order is rank order: the larger biased score first") {
    std::vector<float> logits(8, kHalf), bias(8, 0.0f);
    for (int e = 0; e < 8; ++e) bias[e] = 0.125f * float((e * 5) % 8);  // a permutation of 0..7/8
    const Routed r = route(logits, bias, s);
    CHECK(r.ids == std::vector<int32_t>{3, 6, 1, 4});  // (e*5)%8 = 7, 6, 5, 4
  }
  SUBCASE("many ties on a large router match a stable sort") {
    const MoeRouteShape big{64, 224, 16};
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int> pick(0, 2), quarter(0, 4);
    const float exact[3] = {kHalf, kOne, kZero};
    std::vector<float> logits(size_t(big.tokens * big.experts)), bias(size_t(big.experts));
    for (float& v : logits) v = exact[pick(rng)];
    for (float& v : bias)
      v = 0.25f * float(quarter(rng));  // b in {0, 0.25, .., 2}: ties everywhere
    const Routed r = route(logits, bias, big);
    for (int64_t t = 0; t < big.tokens; ++t) {
      const std::vector<int32_t> want =
          brute_force_topk(&logits[size_t(t * big.experts)], bias.data(), big.experts, big.top_k);
      CHECK(std::equal(want.begin(), want.end(), r.ids.begin() + t * big.top_k));
    }
  }
}

TEST_CASE("router_topk ref: weights are the renormalized unbiased scores") {
  const MoeRouteShape s{500, 224, 16};
  const std::vector<float> logits = synthetic_router_logits(s.tokens, s.experts, 3);
  const std::vector<float> bias = synthetic_router_bias(s.experts, 3);
  const Routed r = route(logits, bias, s);
  for (int64_t t = 0; t < s.tokens; ++t) {
    double sum = 0.0, score_sum = 0.0;
    for (int j = 0; j < s.top_k; ++j) {
      sum += r.weights[t * s.top_k + j];
      score_sum += 1.0 / (1.0 + std::exp(-double(logits[t * s.experts + r.ids[t * s.top_k + j]])));
    }
    CHECK(std::fabs(sum - 1.0) <= 1e-6);
    for (int j = 0; j < s.top_k; ++j) {
      const double s_j =
          1.0 / (1.0 + std::exp(-double(logits[t * s.experts + r.ids[t * s.top_k + j]])));
      CHECK(std::fabs(r.weights[t * s.top_k + j] - s_j / score_sum) <= 1e-6);
    }
    // distinct experts, all in range
    std::vector<int32_t> ids(r.ids.begin() + t * s.top_k, r.ids.begin() + (t + 1) * s.top_k);
    std::sort(ids.begin(), ids.end());
    CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
    CHECK(ids.front() >= 0);
    CHECK(ids.back() < s.experts);
  }
}

TEST_CASE("router_topk ref: the 1e-20 guard keeps all-zero scores at weight 0") {
  const MoeRouteShape s{1, 8, 2};
  const Routed r = route(std::vector<float>(8, kZero), std::vector<float>(8, 0.0f), s);
  CHECK(r.ids == std::vector<int32_t>{0, 1});
  CHECK(r.weights == std::vector<float>{0.0f, 0.0f});  // 0 / (0 + 1e-20), not NaN
}

TEST_CASE("moe_permute_plan ref: counts, offsets, order by expert, token, slot, and the inverse") {
  const MoeRouteShape s{257, 224, 16};
  const std::vector<float> logits = synthetic_router_logits(s.tokens, s.experts, 5);
  const Routed r = route(logits, synthetic_router_bias(s.experts, 5), s);
  const int64_t A = s.tokens * s.top_k;
  HostPlan p = plan_of(r.ids, s);
  CHECK(std::accumulate(p.counts.begin(), p.counts.end(), int64_t(0)) == A);
  CHECK(p.offsets[0] == 0);
  for (int e = 0; e < s.experts; ++e) CHECK(p.offsets[e + 1] - p.offsets[e] == p.counts[e]);
  CHECK(p.offsets[s.experts] == A);
  for (int64_t q = 0; q < A; ++q) {
    const int32_t i = p.perm_src[q];
    REQUIRE(i >= 0);
    REQUIRE(i < A);
    CHECK(p.perm_dst[i] == q);  // inverse
    const int32_t e = r.ids[i];
    CHECK(q >= p.offsets[e]);
    CHECK(q < p.offsets[e + 1]);
    if (q > p.offsets[e]) CHECK(p.perm_src[q - 1] < i);  // within an expert: token, then slot
  }
}

TEST_CASE("moe_permute_plan ref: duplicate experts keep slot order; invalid ids are dropped") {
  const MoeRouteShape s{3, 4, 3};
  // token 0: {2, 2, 0}, token 1: {-1, 2, 7}, token 2: {0, 3, 2}
  const std::vector<int32_t> ids = {2, 2, 0, -1, 2, 7, 0, 3, 2};
  HostPlan p = plan_of(ids, s);
  CHECK(p.counts == std::vector<int32_t>{2, 0, 4, 1});
  CHECK(p.offsets == std::vector<int32_t>{0, 2, 2, 6, 7});
  CHECK(p.perm_src == std::vector<int32_t>{2, 6, 0, 1, 4, 8, 7, -1, -1});
  CHECK(p.perm_dst == std::vector<int32_t>{2, 3, 0, -1, 4, -1, 1, 6, 5});
}

TEST_CASE("moe_permute / moe_weight / moe_combine ref") {
  const MoeRouteShape s{33, 8, 2};
  const int64_t W = 12, A = s.tokens * s.top_k;
  const std::vector<float> logits = synthetic_router_logits(s.tokens, s.experts, 9);
  const Routed r = route(logits, std::vector<float>(size_t(s.experts), 0.0f), s);
  HostPlan p = plan_of(r.ids, s);
  const std::vector<uint16_t> x = random_rows(size_t(s.tokens * W), 11);

  std::vector<uint16_t> xp(size_t(A * W), 0xdead);
  ref::moe_permute(x.data(), p.perm_src.data(), xp.data(), s, W);
  SUBCASE("permute then inverse-permute is the identity") {
    for (int64_t t = 0; t < s.tokens; ++t)
      for (int j = 0; j < s.top_k; ++j) {
        const int32_t q = p.perm_dst[t * s.top_k + j];
        CHECK(std::equal(x.begin() + t * W, x.begin() + (t + 1) * W, xp.begin() + q * W));
      }
  }
  SUBCASE("weight: bf16(f32(y) * w) of the row's assignment") {
    std::vector<uint16_t> yw(xp.size());
    ref::moe_weight(xp.data(), p.perm_src.data(), r.weights.data(), yw.data(), s, W);
    for (int64_t q = 0; q < A; ++q)
      for (int64_t c = 0; c < W; ++c)
        CHECK(yw[q * W + c] ==
              ref::f32_to_bf16_rn(ref::bf16_to_f32(xp[q * W + c]) * r.weights[p.perm_src[q]]));
    // weight, then combine: each token's rows scaled by weights summing to ~1
    std::vector<uint16_t> out(size_t(s.tokens * W));
    ref::moe_combine(yw.data(), p.perm_dst.data(), out.data(), s, W);
    for (int64_t t = 0; t < s.tokens; ++t)
      for (int64_t c = 0; c < W; ++c) {
        float acc = 0.0f;
        for (int j = 0; j < s.top_k; ++j)
          acc += ref::bf16_to_f32(yw[p.perm_dst[t * s.top_k + j] * W + c]);
        CHECK(out[t * W + c] == ref::f32_to_bf16_rn(acc));
        // a bf16 rounding per weighted copy, one for the sum
        const float xv = ref::bf16_to_f32(x[t * W + c]);
        CHECK(std::fabs(ref::bf16_to_f32(out[t * W + c]) - xv) <= std::fabs(xv) * 3.0f / 256.0f);
      }
  }
  SUBCASE("combine of the unweighted copies is k * x (a plain sum in slot order)") {
    std::vector<uint16_t> out(size_t(s.tokens * W));
    ref::moe_combine(xp.data(), p.perm_dst.data(), out.data(), s, W);
    for (int64_t i = 0; i < s.tokens * W; ++i)
      CHECK(out[i] == ref::f32_to_bf16_rn(2.0f * ref::bf16_to_f32(x[i])));
  }
}

TEST_CASE("row refs: dropped assignments give zero rows and add nothing") {
  const MoeRouteShape s{2, 4, 2};
  const int64_t W = 3;
  const std::vector<int32_t> ids = {1, 9, 3, 1};  // assignment 1 dropped
  HostPlan p = plan_of(ids, s);
  CHECK(p.perm_src.back() == -1);
  const std::vector<uint16_t> x = {0x3f80, 0x4000, 0xc040, 0x4080, 0x40a0, 0x80ff};
  std::vector<uint16_t> xp(size_t(4 * W), 0xdead), yw(size_t(4 * W), 0xdead), out(size_t(2 * W));
  ref::moe_permute(x.data(), p.perm_src.data(), xp.data(), s, W);
  for (int64_t c = 0; c < W; ++c) CHECK(xp[3 * W + c] == 0);
  const std::vector<float> w = {0.5f, 0.5f, 0.25f, 0.75f};
  ref::moe_weight(xp.data(), p.perm_src.data(), w.data(), yw.data(), s, W);
  for (int64_t c = 0; c < W; ++c) CHECK(yw[3 * W + c] == 0);
  ref::moe_combine(xp.data(), p.perm_dst.data(), out.data(), s, W);
  for (int64_t c = 0; c < W; ++c) CHECK(out[c] == x[c]);  // token 0: slot 0 alone
  // an all -0 sum lands as +0: -0 + -0 from acc = +0.0f is +0
  const std::vector<uint16_t> negzero(size_t(4 * W), 0x8000);
  ref::moe_combine(negzero.data(), p.perm_dst.data(), out.data(), s, W);
  for (uint16_t v : out) CHECK(v == 0x0000);
}

TEST_CASE("moe_route refs check their shapes") {
  int32_t ids[4] = {0, 0, 0, 0};
  float f[4] = {0, 0, 0, 0};
  CHECK_THROWS_AS(ref::router_topk(f, f, ids, f, MoeRouteShape{1, 4, 5}, ref::HostMath{}),
                  pb::Error);  // k > E
  CHECK_THROWS_AS(check_moe_route_shape(MoeRouteShape{1, 0, 1}), pb::Error);
  CHECK_THROWS_AS(check_moe_route_shape(MoeRouteShape{1, 2048, 16}), pb::Error);
  CHECK_THROWS_AS(check_moe_route_shape(MoeRouteShape{1, 224, 33}), pb::Error);
  CHECK_THROWS_AS(check_moe_route_shape(MoeRouteShape{-1, 224, 16}), pb::Error);
  CHECK_THROWS_AS(check_moe_route_shape(MoeRouteShape{int64_t(1) << 27, 224, 16}), pb::Error);
  CHECK_NOTHROW(check_moe_route_shape(MoeRouteShape{0, 224, 16}));
  CHECK_NOTHROW(check_moe_route_shape(MoeRouteShape{16384, 1024, 32}));
}

TEST_CASE("synthetic router: skewed, reproducible load at T = 16384, E = 224, k = 16") {
  const MoeRouteShape s{16384, 224, 16};
  auto counts_of = [&](uint64_t seed, float skew) {
    const std::vector<float> logits = synthetic_router_logits(s.tokens, s.experts, seed);
    const Routed r = route(logits, synthetic_router_bias(s.experts, seed, skew), s);
    return plan_of(r.ids, s).counts;
  };
  const std::vector<int32_t> counts = counts_of(1, kSyntheticRouterSkew);
  const double imbalance = moe_load_imbalance(counts.data(), s.experts);
  MESSAGE("synthetic router seed 1, skew ", kSyntheticRouterSkew,
          ": imbalance max/mean = ", imbalance, " (max ",
          *std::max_element(counts.begin(), counts.end()), ", min ",
          *std::min_element(counts.begin(), counts.end()), ", mean ",
          double(s.tokens * s.top_k) / s.experts, ")");
  CHECK(imbalance > 1.5);
  CHECK(imbalance < 4.0);
  CHECK(*std::min_element(counts.begin(), counts.end()) > 0);  // no idle expert
  CHECK(counts_of(1, kSyntheticRouterSkew) == counts);         // reproducible
  CHECK(synthetic_router_bias(s.experts, 1) == synthetic_router_bias(s.experts, 1));
  CHECK(synthetic_router_bias(s.experts, 2) != synthetic_router_bias(s.experts, 1));
  CHECK(counts_of(2, kSyntheticRouterSkew) != counts);
  // skew 0: only sampling noise
  const std::vector<int32_t> flat = counts_of(1, 0.0f);
  CHECK(moe_load_imbalance(flat.data(), s.experts) < 1.2);
}
