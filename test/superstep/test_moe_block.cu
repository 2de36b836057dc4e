// The MoE block, the dense FFN and the first token (harness/superstep/) on the
// tiny model (b = 256 bucket rows, T = 200 live rows) against a C++ reference
// of each whole block, their launch lists against plan.cpp's, cut on/off bit
// identity, and the permutation round trip on the device.
//
// The reference mirrors each block stage by stage: RMSNorm, router top-k,
// plan, permute, SiTU, weight, combine, land and add2 are the kernels' own
// contracts (kernels/*_ref.cpp, device expf / tanhf / rsqrtf through
// evaluate_with_device_math), so they round exactly as the device does; only
// the GEMMs differ (float64 sums rounded to f32 here, cuBLAS's f32 order
// there). The router runs on the device's logits, so both sides route the
// same tokens to the same experts (ids and weights compared bit for bit; the
// logits themselves within the GEMM floor (k + 2) · 2^-24 · Σ|x w|).
// Block floor, over the whole [b, h] output:
//   rel-L2(out - ref) <= 5e-3  and  max |out - ref| <= 2e-2 · max |ref|
// (a GEMM difference flips an occasional bf16 rounding, 2^-8 relative, which
// the later stages carry).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "argmax.h"
#include "dense_ffn.h"
#include "elementwise.h"
#include "first_token.h"
#include "gpu_test.h"
#include "land.h"
#include "model.h"
#include "moe_block.h"
#include "moe_route.h"
#include "plan.h"
#include "plan_match.h"
#include "rmsnorm.h"
#include "scenario.h"
#include "timeline.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;
using Bits = std::vector<uint16_t>;

constexpr int64_t kBucket = 256, kTokens = 200;
constexpr uint64_t kSeed = 77;

double value(uint16_t b) { return double(ref::bf16_to_f32(b)); }

// N(0, 1) activations as bf16, never exactly zero.
Bits normal_bf16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Bits out(n);
  for (auto& v : out) {
    float f = normal(rng);
    if (f == 0.0f) f = 0.5f;
    v = ref::f32_to_bf16_rn(f);
  }
  return out;
}

Scenario tiny_scenario() {
  return parse_scenario("name: t\nmodel: {preset: tiny}\ncp: 1\ncontext: " + std::to_string(kTokens) +
                            "\nbucket: " + std::to_string(kBucket) + "\n",
                        "t.yaml");
}

// ---- reference stages ----

// f32 [m, n] = x [m, k] · w [n, k]ᵀ, each element the float64 sum rounded once.
std::vector<float> ref_gemm(const Bits& x, const Bits& w, int64_t m, int64_t n, int64_t k) {
  std::vector<float> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += value(x[size_t(i * k + l)]) * value(w[size_t(j * k + l)]);
      y[size_t(i * n + j)] = float(s);
    }
  return y;
}

Bits ref_land(const std::vector<float>& p, int64_t rows, int64_t nt, int64_t off, int64_t n) {
  Bits o(size_t(rows * n));
  ref::land(p.data(), o.data(), LandShape{rows, 1, nt, off, n});
  return o;
}

Bits ref_rmsnorm(const Bits& x, int64_t rows, int64_t n) {
  return evaluate_with_device_math([&](const ref::Transcendentals& m) {
    Bits o(size_t(rows * n));
    ref::rmsnorm(x.data(), nullptr, o.data(), RmsNormShape{rows, n, 0, 0}, kRmsNormEps, m);
    return o;
  });
}

Bits ref_situ(const Bits& g, const Bits& u) {
  return evaluate_with_device_math([&](const ref::Transcendentals& m) {
    Bits o(g.size());
    ref::situ(g.data(), u.data(), o.data(), int64_t(g.size()), m);
    return o;
  });
}

Bits ref_add2(const Bits& a, const Bits& b) {
  Bits o(a.size());
  ref::add2(a.data(), b.data(), o.data(), int64_t(a.size()));
  return o;
}

// ---- comparisons ----

struct Diff {
  double rel_l2 = 0, max_abs = 0, max_ref = 0;
  int64_t non_finite = 0;
};

Diff diff_of(const Bits& got, const Bits& want) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = value(got[i]), w = value(want[i]);
    if (!std::isfinite(g) || !std::isfinite(w)) {
      ++d.non_finite;
      continue;
    }
    num += (g - w) * (g - w);
    den += w * w;
    d.max_abs = std::max(d.max_abs, std::fabs(g - w));
    d.max_ref = std::max(d.max_ref, std::fabs(w));
  }
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

void check_block_floor(const Bits& got, const Bits& want, const char* what) {
  const Diff d = diff_of(got, want);
  INFO(what << ": rel-L2 " << d.rel_l2 << ", max |d| " << d.max_abs << " of max |ref| " << d.max_ref);
  MESSAGE(what << ": rel-L2 " << d.rel_l2 << ", max |d| / max |ref| " << d.max_abs / d.max_ref);
  CHECK(d.non_finite == 0);
  CHECK(d.rel_l2 <= 5e-3);
  CHECK(d.max_abs <= 2e-2 * d.max_ref);
}

template <class T>
std::vector<T> download_n(const T* p, int64_t n) {
  std::vector<T> h(static_cast<size_t>(n));
  PB_CUDA(cudaMemcpy(h.data(), p, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

struct Fixture {
  ModelShape m = model_preset("tiny");
  cudaStream_t st = nullptr;
  Blas blas;
  Bits x_host;
  DeviceBuffer<bf16> x, out;
  Fixture() {
    PB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    x_host = normal_bf16(size_t(kBucket * m.hidden), 11);
    x = DeviceBuffer<bf16>(x_host.size());
    out = DeviceBuffer<bf16>(x_host.size());
    x.upload(x_host);
  }
  ~Fixture() { PB_CUDA_NOTHROW(cudaStreamDestroy(st)); }
  Bits out_host() { return out.download<uint16_t>(); }
};

// The whole MoE block on the host, routed by the device's logits (see the top).
Bits moe_reference(const ModelShape& m, const MoeBlock& block, const Bits& x) {
  const int64_t b = kBucket, T = kTokens, h = m.hidden, E = m.experts, k = m.top_k, lat = m.moe_latent,
                I = m.expert_inter, S = m.shared_inter;
  const MoeWeights& w = block.weights();
  const Bits router = w.router.download<uint16_t>(), lat_down = w.lat_down.bf.download<uint16_t>(),
             gu = w.expert_gate_up.bf.download<uint16_t>(), dn = w.expert_down.bf.download<uint16_t>(),
             lat_up = w.lat_up.bf.download<uint16_t>(), sgu = w.shared_gate_up.bf.download<uint16_t>(),
             sdn = w.shared_down.bf.download<uint16_t>();
  const std::vector<float> bias = w.router_bias.download();

  const Bits normed = ref_rmsnorm(x, b, h);
  // Router logits: the device's within the GEMM floor.
  const std::vector<float> logits = download_n(block.logits(), b * E);
  {
    int64_t bad = 0;
    for (int64_t i = 0; i < b; ++i)
      for (int64_t e = 0; e < E; ++e) {
        double s = 0, mag = 0;
        for (int64_t l = 0; l < h; ++l) {
          const double p = value(normed[size_t(i * h + l)]) * value(router[size_t(e * h + l)]);
          s += p;
          mag += std::fabs(p);
        }
        bad += !(std::fabs(double(logits[size_t(i * E + e)]) - s) <= double(h + 2) * std::ldexp(1.0, -24) * mag);
      }
    CHECK_MESSAGE(bad == 0, "router logits outside the GEMM floor");
  }
  const MoeRouteShape rs{T, int(E), int(k)};
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<float> topw(size_t(T * k));
  evaluate_with_device_math([&](const ref::Transcendentals& mm) {
    ref::router_topk(logits.data(), bias.data(), ids.data(), topw.data(), rs, mm);
    return 0;
  });
  CHECK(download_n(block.ids(), T * k) == ids);
  const std::vector<float> dev_topw = download_n(block.topk_weights(), T * k);
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(dev_topw, topw, &report) == -1, "routing weights: ", report);

  std::vector<int32_t> counts(static_cast<size_t>(E)), offsets(static_cast<size_t>(E + 1)),
      src(static_cast<size_t>(T * k)), dst(static_cast<size_t>(T * k));
  ref::moe_permute_plan(ids.data(), MoePlan{counts.data(), offsets.data(), src.data(), dst.data()}, rs);
  CHECK(block.counts() == counts);
  const int64_t V = offsets[size_t(E)];

  const Bits latent = ref_land(ref_gemm(normed, lat_down, b, lat, h), b, lat, 0, lat);
  Bits xp(size_t(T * k * lat));
  ref::moe_permute(latent.data(), src.data(), xp.data(), rs, lat);
  // Expert GEMMs row by row: permuted row p belongs to the expert whose range holds it.
  std::vector<float> gu_part(size_t(V * 2 * I));
  Bits act_w(size_t(T * k * I), 0);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t p = offsets[size_t(e)]; p < offsets[size_t(e + 1)]; ++p) {
      const Bits row(xp.begin() + p * lat, xp.begin() + (p + 1) * lat);
      const Bits we(gu.begin() + e * 2 * I * lat, gu.begin() + (e + 1) * 2 * I * lat);
      const std::vector<float> r = ref_gemm(row, we, 1, 2 * I, lat);
      std::copy(r.begin(), r.end(), gu_part.begin() + p * 2 * I);
    }
  // The expert GEMMs write bf16 themselves (cuBLAS rounds its f32 accumulator
  // once, RNE): the same rounding as land (cut 1) of that f32 value.
  const Bits gate = ref_land(gu_part, V, 2 * I, 0, I), up = ref_land(gu_part, V, 2 * I, I, I);
  Bits act = ref_situ(gate, up);
  act.resize(size_t(T * k * I), 0);
  ref::moe_weight(act.data(), src.data(), topw.data(), act_w.data(), rs, I);
  std::vector<float> d_part(size_t(V * lat));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t p = offsets[size_t(e)]; p < offsets[size_t(e + 1)]; ++p) {
      const Bits row(act_w.begin() + p * I, act_w.begin() + (p + 1) * I);
      const Bits we(dn.begin() + e * lat * I, dn.begin() + (e + 1) * lat * I);
      const std::vector<float> r = ref_gemm(row, we, 1, lat, I);
      std::copy(r.begin(), r.end(), d_part.begin() + p * lat);
    }
  Bits yd = ref_land(d_part, V, lat, 0, lat);
  yd.resize(size_t(T * k * lat), 0);
  Bits routed_latent(size_t(b * lat), 0);  // rows T..b-1 stay +0
  ref::moe_combine(yd.data(), dst.data(), routed_latent.data(), rs, lat);
  const Bits routed_norm = ref_rmsnorm(routed_latent, b, lat);
  const Bits routed = ref_land(ref_gemm(routed_norm, lat_up, b, h, lat), b, h, 0, h);
  const std::vector<float> sp = ref_gemm(normed, sgu, b, 2 * S, h);
  const Bits sh_act = ref_situ(ref_land(sp, b, 2 * S, 0, S), ref_land(sp, b, 2 * S, S, S));
  const Bits shared = ref_land(ref_gemm(sh_act, sdn, b, h, S), b, h, 0, h);
  return ref_add2(routed, shared);
}

Bits dense_reference(const ModelShape& m, const DenseFfn& dense, const Bits& x) {
  const int64_t b = kBucket, h = m.hidden, I = m.dense_inter;
  const Bits wgu = download_n(reinterpret_cast<const uint16_t*>(dense.w_gate_up().bf.get()), 2 * I * h);
  const Bits wdn = download_n(reinterpret_cast<const uint16_t*>(dense.w_down().bf.get()), h * I);
  const Bits normed = ref_rmsnorm(x, b, h);
  const std::vector<float> p = ref_gemm(normed, wgu, b, 2 * I, h);
  const Bits act = ref_situ(ref_land(p, b, 2 * I, 0, I), ref_land(p, b, 2 * I, I, I));
  return ref_land(ref_gemm(act, wdn, b, h, I), b, h, 0, h);
}

std::vector<TimedLaunch> names_of_run(cudaStream_t st, const std::function<void(Timeline&)>& run) {
  Timeline tl(st, false);
  run(tl);
  return tl.collect();
}

}  // namespace

TEST_CASE("MoE block (tiny): launch list == plan, == C++ reference, cut on/off bit-identical, every engine") {
  Fixture f;
  MoeBlock block(f.m, kBucket, kTokens, kSeed, f.st);
  const RankPlan plan = plan_rank(tiny_scenario(), CutSet::all(), 0);

  const auto got = names_of_run(f.st, [&](Timeline& tl) {
    block.run(tl, f.blas, CutSet::none(), MoeGemmEngine::grouped, f.x.get(), kTokens, f.out.get());
  });
  const std::string diff = launch_list_difference(got, plan_slice(plan, 1, "rmsnorm.moe_in", got.size()));
  CHECK_MESSAGE(diff.empty(), diff);
  const Bits out_none = f.out_host();

  const Bits want = moe_reference(f.m, block, f.x_host);
  check_block_floor(out_none, want, "MoE block, cuts none");
  MESSAGE("load imbalance max/mean " << block.load_imbalance());

  Timeline tl(f.st, false);
  f.out.poison(f.st);
  block.run(tl, f.blas, CutSet::all(), MoeGemmEngine::grouped, f.x.get(), kTokens, f.out.get());
  tl.collect();
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(f.out_host(), out_none, &report) == -1, "cuts all vs none: ", report);

  f.out.poison(f.st);
  block.run(tl, f.blas, CutSet::all(), MoeGemmEngine::loop, f.x.get(), kTokens, f.out.get());
  tl.collect();
  const Bits out_loop = f.out_host();
  check_block_floor(out_loop, want, "MoE block, per-expert loop");
  MESSAGE("block grouped vs loop: " << (out_loop == out_none ? "bit-identical" : "differ in bits"));

  CHECK_MESSAGE(cutlass_gemm_available(), "the cutlass engine is not in this build (carry .deps/) or device");
  if (cutlass_gemm_available()) {
    f.out.poison(f.st);
    block.run(tl, f.blas, CutSet::all(), MoeGemmEngine::cutlass, f.x.get(), kTokens, f.out.get());
    tl.collect();
    const Bits out_cutlass = f.out_host();
    check_block_floor(out_cutlass, want, "MoE block, cutlass engine");
    MESSAGE("block cutlass vs loop: " << (out_cutlass == out_loop ? "bit-identical" : "differ in bits"));
  }

  // Fewer live tokens than before: the rows past T of the combine are zero again.
  f.out.poison(f.st);
  block.run(tl, f.blas, CutSet::all(), MoeGemmEngine::grouped, f.x.get(), 37, f.out.get());
  tl.collect();
  int64_t nan = 0;
  for (uint16_t v : f.out_host()) nan += (v & 0x7fff) > 0x7f80;
  CHECK(nan == 0);
}

TEST_CASE("dense FFN (tiny): launch list == plan, == C++ reference, cut on/off bit-identical") {
  Fixture f;
  DenseFfn dense(f.m, kBucket, kSeed, f.st);
  const RankPlan plan = plan_rank(tiny_scenario(), CutSet::all(), 0);
  const auto got = names_of_run(f.st, [&](Timeline& tl) { dense.run(tl, f.blas, CutSet::none(), f.x.get(), f.out.get()); });
  const std::string diff = launch_list_difference(got, plan_slice(plan, 0, "rmsnorm.dense_in", got.size()));
  CHECK_MESSAGE(diff.empty(), diff);
  const Bits out_none = f.out_host();
  check_block_floor(out_none, dense_reference(f.m, dense, f.x_host), "dense FFN");
  f.out.poison(f.st);
  names_of_run(f.st, [&](Timeline& tl) { dense.run(tl, f.blas, CutSet::all(), f.x.get(), f.out.get()); });
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(f.out_host(), out_none, &report) == -1, "cuts all vs none: ", report);
}

TEST_CASE("first token (tiny): launch list == plan, logits == reference, argmax == reference") {
  Fixture f;
  FirstToken first(f.m, kSeed, f.st);
  const RankPlan plan = plan_rank(tiny_scenario(), CutSet::all(), 0);
  const bf16* last = f.x.get() + (kTokens - 1) * f.m.hidden;
  const auto got = names_of_run(f.st, [&](Timeline& tl) { first.run(tl, f.blas, CutSet::none(), last); });
  // plan's first token starts with AttnRes (not this block's): compare from rmsnorm.final.
  const std::string diff = launch_list_difference(got, plan_slice(plan, -1, "rmsnorm.final", got.size()));
  CHECK_MESSAGE(diff.empty(), diff);
  const int64_t h = f.m.hidden, V = f.m.vocab;
  const Bits logits = download_n(reinterpret_cast<const uint16_t*>(first.logits()), V);
  const int32_t token = first.token();
  CHECK(token == ref::argmax_bf16(logits.data(), V));

  const Bits row(f.x_host.begin() + (kTokens - 1) * h, f.x_host.begin() + kTokens * h);
  const Bits normed = ref_rmsnorm(row, 1, h);
  const Bits head = download_n(reinterpret_cast<const uint16_t*>(first.lm_head()), V * h);
  int64_t bad = 0;
  for (int64_t j = 0; j < V; ++j) {
    double s = 0, mag = 0;
    for (int64_t l = 0; l < h; ++l) {
      const double p = value(normed[size_t(l)]) * value(head[size_t(j * h + l)]);
      s += p;
      mag += std::fabs(p);
    }
    const double floor = double(h + 2) * std::ldexp(1.0, -24) * mag + std::ldexp(1.0, -8) * std::fabs(s);
    bad += !(std::fabs(value(logits[size_t(j)]) - s) <= floor);
  }
  CHECK(bad == 0);

  names_of_run(f.st, [&](Timeline& tl) { first.run(tl, f.blas, CutSet::all(), last); });
  CHECK(download_n(reinterpret_cast<const uint16_t*>(first.logits()), V) == logits);
  CHECK(first.token() == token);
}

TEST_CASE("permutation round trip on the device: combine(permute(x)) == bf16(k * x)") {
  struct RoundTrip {
    int64_t T;
    int E, k;
  };
  for (const RoundTrip& c : {RoundTrip{200, 8, 2}, RoundTrip{300, 224, 16}, RoundTrip{5, 3, 3}}) {
    const int64_t T = c.T;
    const int E = c.E, k = c.k;
    INFO("T " << c.T << " E " << c.E << " k " << c.k);
    const MoeRouteShape rs{T, E, k};
    // Each token picks k distinct experts at random.
    std::mt19937 rng(unsigned(T * 31 + E));
    std::vector<int32_t> ids(size_t(T * k));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> all(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) all[size_t(e)] = e;
      std::shuffle(all.begin(), all.end(), rng);
      for (int j = 0; j < k; ++j) ids[size_t(t * k + j)] = all[size_t(j)];
    }
    const int64_t W = 136;  // a multiple of 8: the 16-byte row path
    const Bits x = normal_bf16(size_t(T * W), 5);
    DeviceBuffer<int32_t> d_ids{ids.size()}, counts{size_t(E)}, offsets{size_t(E + 1)}, src{ids.size()},
        dst{ids.size()};
    d_ids.upload(ids);
    const size_t ws_bytes = moe_permute_plan_workspace_bytes(rs);
    DeviceBuffer<int32_t> ws((ws_bytes + 3) / 4 + 1);
    DeviceBuffer<bf16> dx(x.size()), xp(size_t(T * k * W)), back(x.size());
    dx.upload(x);
    back.poison();
    moe_permute_plan(d_ids.get(), MoePlan{counts.get(), offsets.get(), src.get(), dst.get()}, ws.get(), ws.bytes(),
                     rs, nullptr);
    moe_permute(dx.get(), src.get(), xp.get(), rs, W, nullptr);
    moe_combine(xp.get(), dst.get(), back.get(), rs, W, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    Bits want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = ref::f32_to_bf16_rn(float(k) * ref::bf16_to_f32(x[i]));
    std::string report;
    CHECK_MESSAGE(first_bit_mismatch(back.download<uint16_t>(), want, &report) == -1, report);
  }
}
