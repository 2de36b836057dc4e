// Plain C++ references of the MoE routing kernels, their shared shape check,
// and the synthetic router. Contracts in moe_route.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "check.h"
#include "moe_route.h"
#include "ref_math.h"

namespace pb {

void check_moe_route_shape(const MoeRouteShape& s) {
  PB_CHECK(s.tokens >= 0, "moe_route: tokens < 0");
  PB_CHECK(s.experts >= 1 && s.experts <= kMoeMaxExperts, "moe_route: experts outside [1, 1024]");
  PB_CHECK(s.top_k >= 1 && s.top_k <= kMoeMaxTopK && s.top_k <= s.experts,
           "moe_route: top_k outside [1, min(experts, 32)]");
  PB_CHECK(s.tokens <= (int64_t(INT32_MAX) - 1) / s.top_k, "moe_route: tokens * top_k >= 2^31");
}

// ---- synthetic router ----

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) on a 2^-23 grid, exact in f32.
float hash_uniform(uint64_t seed, uint64_t i) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ i);
  return float(int32_t(h >> 40) - (1 << 23)) * 0x1p-23f;
}

}  // namespace

std::vector<float> synthetic_router_logits(int64_t tokens, int experts, uint64_t seed) {
  PB_CHECK(tokens >= 0 && experts >= 1, "synthetic_router_logits: bad shape");
  // Irwin-Hall: four U(-1, 1) have variance 4/3; times sqrt(3)/2 -> ~N(0, 1).
  const float scale = 0.8660254037844386f;
  std::vector<float> out(size_t(tokens) * size_t(experts));
  for (size_t i = 0; i < out.size(); ++i) {
    float v = 0.0f;
    for (uint64_t d = 0; d < 4; ++d) v += hash_uniform(seed, 4 * uint64_t(i) + d);
    out[i] = v * scale;
  }
  return out;
}

std::vector<float> synthetic_router_bias(int experts, uint64_t seed, float skew) {
  PB_CHECK(experts >= 1, "synthetic_router_bias: experts < 1");
  // Fisher-Yates with hash draws: order[r] is the expert of popularity rank r.
  std::vector<int> order(experts);
  std::iota(order.begin(), order.end(), 0);
  const uint64_t stream = splitmix64(seed ^ 0x5a17b1a5ull);
  for (int i = experts - 1; i > 0; --i) {
    const int j = int(splitmix64(stream + uint64_t(i)) % uint64_t(i + 1));
    std::swap(order[i], order[j]);
  }
  // bias = -skew * H_r, H_r = 1 + 1/2 + ... + 1/r (~ ln r + 0.577), summed in
  // double in ascending order: plain IEEE arithmetic, the same on every host.
  std::vector<float> bias(experts);
  double harmonic = 0.0;
  for (int r = 0; r < experts; ++r) {
    if (r > 0) harmonic += 1.0 / double(r);
    bias[order[r]] = float(-double(skew) * harmonic);
  }
  return bias;
}

double moe_load_imbalance(const int32_t* counts, int experts) {
  int64_t total = 0;
  int32_t most = 0;
  for (int e = 0; e < experts; ++e) {
    total += counts[e];
    most = std::max(most, counts[e]);
  }
  if (total == 0) return 0.0;
  return double(most) / (double(total) / double(experts));
}

namespace ref {

// ---- router_topk ----

void router_topk(const float* logits, const float* bias, int32_t* ids, float* weights,
                 const MoeRouteShape& s, const Transcendentals& m) {
  check_moe_route_shape(s);
  const int E = s.experts, k = s.top_k;
  std::vector<float> score(E), biased(E);
  std::vector<int32_t> order(E);
  // The tie rule as a strict total order: a number before NaN, larger b
  // first, then the lower index (b values compare as floats: +0 == -0).
  auto before = [&](int32_t a, int32_t b) {
    const bool nan_a = std::isnan(biased[a]), nan_b = std::isnan(biased[b]);
    if (nan_a != nan_b) return nan_b;
    if (!nan_a && biased[a] != biased[b]) return biased[a] > biased[b];
    return a < b;
  };
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int e = 0; e < E; ++e) {
      score[e] = sigmoid_f32(m, logits[t * E + e]);
      biased[e] = score[e] + bias[e];
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += score[order[j]];
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = score[order[j]] / (sum + 1e-20f);
    }
  }
}

// ---- moe_permute_plan ----

void moe_permute_plan(const int32_t* ids, const MoePlan& plan, const MoeRouteShape& s) {
  check_moe_route_shape(s);
  const int E = s.experts;
  const int64_t A = s.tokens * s.top_k;
  for (int e = 0; e < E; ++e) plan.counts[e] = 0;
  for (int64_t i = 0; i < A; ++i)
    if (ids[i] >= 0 && ids[i] < E) ++plan.counts[ids[i]];
  plan.offsets[0] = 0;
  for (int e = 0; e < E; ++e) plan.offsets[e + 1] = plan.offsets[e] + plan.counts[e];
  std::vector<int32_t> next(plan.offsets, plan.offsets + E);
  for (int64_t p = plan.offsets[E]; p < A; ++p) plan.perm_src[p] = -1;
  for (int64_t i = 0; i < A; ++i) {  // ascending i: stable by token, then slot
    const int32_t e = ids[i];
    if (e < 0 || e >= E) {
      plan.perm_dst[i] = -1;
      continue;
    }
    const int32_t p = next[e]++;
    plan.perm_src[p] = int32_t(i);
    plan.perm_dst[i] = p;
  }
}

// ---- row kernels ----

void moe_permute(const uint16_t* x, const int32_t* perm_src, uint16_t* xp, const MoeRouteShape& s,
                 int64_t width) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_permute: width < 0");
  const int64_t rows = s.tokens * s.top_k;
  for (int64_t p = 0; p < rows; ++p) {
    const int32_t src = perm_src[p];
    for (int64_t c = 0; c < width; ++c)
      xp[p * width + c] = src < 0 ? uint16_t(0) : x[int64_t(src / s.top_k) * width + c];
  }
}

void moe_weight(const uint16_t* y, const int32_t* perm_src, const float* weights, uint16_t* yw,
                const MoeRouteShape& s, int64_t width) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_weight: width < 0");
  const int64_t rows = s.tokens * s.top_k;
  for (int64_t p = 0; p < rows; ++p) {
    const int32_t src = perm_src[p];
    for (int64_t c = 0; c < width; ++c)
      yw[p * width + c] =
          src < 0 ? uint16_t(0) : f32_to_bf16_rn(bf16_to_f32(y[p * width + c]) * weights[src]);
  }
}

void moe_combine(const uint16_t* yd, const int32_t* perm_dst, uint16_t* out, const MoeRouteShape& s,
                 int64_t width) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_combine: width < 0");
  const int k = s.top_k;
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t c = 0; c < width; ++c) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int32_t d = perm_dst[t * k + j];
        if (d >= 0) acc += bf16_to_f32(yd[int64_t(d) * width + c]);
      }
      out[t * width + c] = f32_to_bf16_rn(acc);
    }
  }
}

}  // namespace ref
}  // namespace pb
