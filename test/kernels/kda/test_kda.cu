// The KDA core on the device (kda.h) against the float64 reference (kda_ref.h)
// on random inputs (never zeros; strong and weak decays both present):
//   - the forward (o and the final state) vs the sequential recurrence: 2 heads at
//     T = 1, 63, 65, 200 (with and without S_in), and 96 heads at T = 256; each with the
//     three walks (KdaWalk; the wgmma walk: forward only, on sm_90);
//   - the halves walk's o, S_out, M and D equal the head walk's bit for bit (96 heads, T = 200);
//   - two chunked segments, the second fed the first's final state, equal one
//     pass over the concatenation;
//   - the package: S_in·M + D equals the sequential state; M, D equal kda_package;
//     kda_fold of 3 packages equals the sequential state over the concatenation.
// Floors (kda.h): rel-L2 ≤ kKdaRelL2Floor (1.5e-2) and max |x − ref| ≤ kKdaMaxAbsFloor
// (3e-2) · max |ref|, for o, S, M and D alike. The row-stride gaps of q hold NaN,
// so a read outside a head's columns poisons the result.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gemm.h"
#include "gpu_test.h"
#include "kda.h"
#include "kda_ref.h"

namespace pb::test {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = kKdaHeadDim;

struct Close {
  double rel_l2 = 0, max_abs = 0, max_ref = 0;
  bool finite = true;
  // An all-zero reference (e.g. M after strong decays underflowed) has no relative scale:
  // then only max-abs counts, and it must be (almost) zero too.
  bool ok() const {
    if (max_ref == 0.0) return finite && max_abs <= 1e-30;
    return finite && rel_l2 <= kKdaRelL2Floor && max_abs <= kKdaMaxAbsFloor * max_ref;
  }
  std::string text() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "rel-L2 %.3g max-abs %.3g (max |ref| %.3g)%s", rel_l2, max_abs, max_ref,
                  finite ? "" : " NON-FINITE");
    return buf;
  }
};

template <class G>
Close compare(const std::vector<G>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  Close c;
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double gv = double(got[i]), d = gv - want[i];
    c.finite = c.finite && std::isfinite(gv);
    d2 += d * d;
    r2 += want[i] * want[i];
    c.max_abs = std::max(c.max_abs, std::fabs(d));
    c.max_ref = std::max(c.max_ref, std::fabs(want[i]));
  }
  c.rel_l2 = std::sqrt(d2) / std::max(std::sqrt(r2), 1e-300);
  return c;
}

std::vector<double> bf16_to_double(const std::vector<uint16_t>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = ref::bf16_to_f32(x[i]);
  return y;
}

// Inputs of `tokens` tokens and `heads` heads, host (bf16 bits / f32) and device.
struct Inputs {
  int64_t tokens = 0;
  int heads = 0;
  int64_t q_ld = 0, width = 0;
  std::vector<uint16_t> q, k, v, g, beta;  // q [T, q_ld] (gap NaN), others packed
  std::vector<float> A_log, dt_bias;
  DeviceBuffer<bf16> dq, dk, dv, dg, dbeta;
  DeviceBuffer<float> dA, ddt;

  // g pre-activations uniform in [g_lo, g_hi]: the default ±6 mixes strong and weak decays;
  // [-12, -8] keeps log α ≥ −0.08 per token, so the package's M stays far above underflow.
  Inputs(int64_t T, int H, uint64_t seed, float g_lo = -6.0f, float g_hi = 6.0f)
      : tokens(T), heads(H), q_ld(int64_t(H) * kD + 8), width(int64_t(H) * kD) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u1(-1.0f, 1.0f), ug(g_lo, g_hi), ub(-3.0f, 3.0f);
    auto bits = [](float x) { return ref::f32_to_bf16_rn(x); };
    q.assign(size_t(T * q_ld), uint16_t(0x7fc0));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < width; ++c) q[size_t(t * q_ld + c)] = bits(u1(rng));
    k.resize(size_t(T * width));
    v.resize(size_t(T * width));
    g.resize(size_t(T * width));
    beta.resize(size_t(T * H));
    for (auto& x : k) x = bits(u1(rng));
    for (auto& x : v) x = bits(u1(rng));
    for (auto& x : g) x = bits(ug(rng));
    for (auto& x : beta) x = bits(ub(rng));
    A_log.resize(size_t(H));
    dt_bias.resize(size_t(width));
    for (auto& x : A_log) x = 0.5f * u1(rng);
    for (auto& x : dt_bias) x = u1(rng);
    dq = DeviceBuffer<bf16>(q.size());
    dk = DeviceBuffer<bf16>(k.size());
    dv = DeviceBuffer<bf16>(v.size());
    dg = DeviceBuffer<bf16>(g.size());
    dbeta = DeviceBuffer<bf16>(beta.size());
    dA = DeviceBuffer<float>(A_log.size());
    ddt = DeviceBuffer<float>(dt_bias.size());
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    dg.upload(g);
    dbeta.upload(beta);
    dA.upload(A_log);
    ddt.upload(dt_bias);
  }

  // Device view of tokens [t0, ...).
  KdaInputs view(int64_t t0) const {
    KdaInputs in;
    in.q = dq.get() + t0 * q_ld;
    in.k = dk.get() + t0 * width;
    in.v = dv.get() + t0 * width;
    in.g = dg.get() + t0 * width;
    in.beta_pre = dbeta.get() + t0 * heads;
    in.q_ld = q_ld;
    in.k_ld = in.v_ld = in.g_ld = width;
    in.beta_ld = heads;
    in.A_log = dA.get();
    in.dt_bias = ddt.get();
    return in;
  }
};

// The reference's inputs of tokens [t0, t0 + n) (gates, norms in double).
struct RefInputs {
  std::vector<double> q, k, v, la, beta;
  ref::KdaShape shape;
};

RefInputs ref_inputs(const Inputs& in, int64_t t0, int64_t n) {
  RefInputs r;
  const int H = in.heads;
  const int64_t W = in.width;
  r.shape = ref::KdaShape{n, H, kD, kD};
  std::vector<float> qf(size_t(n * W)), kf(size_t(n * W)), gf(size_t(n * W)), bf(size_t(n * H));
  r.v.resize(size_t(n * W));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < W; ++c) {
      const size_t i = size_t(t * W + c), src = size_t((t0 + t) * W + c);
      qf[i] = ref::bf16_to_f32(in.q[size_t((t0 + t) * in.q_ld + c)]);
      kf[i] = ref::bf16_to_f32(in.k[src]);
      gf[i] = ref::bf16_to_f32(in.g[src]);
      r.v[i] = ref::bf16_to_f32(in.v[src]);
    }
    for (int h = 0; h < H; ++h) bf[size_t(t * H + h)] = ref::bf16_to_f32(in.beta[size_t((t0 + t) * H + h)]);
  }
  r.q.resize(qf.size());
  r.k.resize(kf.size());
  r.la.resize(gf.size());
  r.beta.resize(bf.size());
  ref::kda_l2norm(qf.data(), n * H, kD, r.q.data());
  ref::kda_l2norm(kf.data(), n * H, kD, r.k.data());
  ref::kda_gates(gf.data(), bf.data(), in.A_log.data(), in.dt_bias.data(), n, H, kD, r.la.data(), r.beta.data());
  return r;
}

std::vector<float> random_state(int H, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> s(size_t(H) * kD * kD);
  for (auto& x : s) x = u(rng);
  return s;
}

std::vector<double> to_double(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

struct GpuRun {
  std::vector<uint16_t> o;
  std::vector<float> S;
};

// kda_forward over tokens [t0, t0 + n) from S_in (empty = null).
GpuRun gpu_forward(const Inputs& in, int64_t t0, int64_t n, const std::vector<float>& S_in, KdaWalk walk) {
  const int H = in.heads;
  KdaWorkspace ws(std::max<int64_t>(n, 1), H);
  DeviceBuffer<bf16> o(size_t(std::max<int64_t>(n, 1) * in.width));
  DeviceBuffer<float> s_in(size_t(H) * kD * kD), s_out(size_t(H) * kD * kD);
  o.poison();
  s_out.poison();
  if (!S_in.empty()) s_in.upload(S_in);
  kda_forward(in.view(t0), n, H, ws, S_in.empty() ? nullptr : s_in.get(), o.get(), in.width, s_out.get(), nullptr,
              walk);
  PB_CUDA(cudaDeviceSynchronize());
  GpuRun r;
  r.o = o.download<uint16_t>();
  r.o.resize(size_t(n * in.width));
  r.S = s_out.download();
  return r;
}

void check_close(const Close& c, const std::string& what) {
  INFO(what << ": " << c.text());
  CHECK(c.ok());
  MESSAGE(what << ": " << c.text());
}

const char* walk_name(KdaWalk w) {
  return w == KdaWalk::kHead ? "head walk" : w == KdaWalk::kHalves ? "halves walk" : "wgmma walk";
}
// The forward's walks, and the package's (the wgmma walk covers the forward only).
constexpr KdaWalk kForwardWalks[] = {KdaWalk::kHead, KdaWalk::kHalves, KdaWalk::kWgmma};
constexpr KdaWalk kPackageWalks[] = {KdaWalk::kHead, KdaWalk::kHalves};

TEST_CASE("kda forward vs the sequential recurrence") {
  struct Case {
    int64_t tokens;
    int heads;
    bool s_in;
  };
  const Case cases[] = {{1, 2, false}, {63, 2, true}, {65, 2, false}, {200, 2, true}, {200, 3, false}, {256, 96, true}};
  uint64_t seed = 11;
  for (const Case& c : cases) {
    const std::string tag = "T " + std::to_string(c.tokens) + " H " + std::to_string(c.heads) +
                            (c.s_in ? " with S_in" : " from zero");
    const Inputs in(c.tokens, c.heads, seed++);
    const RefInputs r = ref_inputs(in, 0, c.tokens);
    const std::vector<float> S_in = c.s_in ? random_state(c.heads, seed++, 0.5f) : std::vector<float>{};
    const std::vector<double> S_in_d = to_double(S_in);
    std::vector<double> o_ref(size_t(c.tokens * in.width)), S_ref(size_t(c.heads) * kD * kD);
    ref::kda_sequential(r.q.data(), r.k.data(), r.v.data(), r.la.data(), r.beta.data(), r.shape,
                        ref::kda_default_scale(kD), c.s_in ? S_in_d.data() : nullptr, o_ref.data(), S_ref.data());
    for (KdaWalk walk : kForwardWalks) {
      if (walk == KdaWalk::kWgmma && !kda_wgmma_walk_supported()) continue;  // sm_90 only
      const GpuRun g = gpu_forward(in, 0, c.tokens, S_in, walk);
      check_close(compare(bf16_to_double(g.o), o_ref), tag + " o, " + walk_name(walk));
      check_close(compare(g.S, S_ref), tag + " S, " + walk_name(walk));
    }
  }
}

TEST_CASE("kda two segments threaded through S equal one pass") {
  const int H = 4;
  const int64_t T1 = 130, T2 = 70, T = T1 + T2;
  const Inputs in(T, H, 101);
  const std::vector<float> S0 = random_state(H, 102, 0.5f);
  const KdaWalk walk = kda_default_forward_walk();
  const GpuRun whole = gpu_forward(in, 0, T, S0, walk);
  const GpuRun first = gpu_forward(in, 0, T1, S0, walk);
  const GpuRun second = gpu_forward(in, T1, T2, first.S, walk);

  const RefInputs r = ref_inputs(in, 0, T);
  const std::vector<double> S0_d = to_double(S0);
  std::vector<double> o_ref(size_t(T * in.width)), S_ref(size_t(H) * kD * kD);
  ref::kda_sequential(r.q.data(), r.k.data(), r.v.data(), r.la.data(), r.beta.data(), r.shape,
                      ref::kda_default_scale(kD), S0_d.data(), o_ref.data(), S_ref.data());
  std::vector<uint16_t> o_split = first.o;
  o_split.insert(o_split.end(), second.o.begin(), second.o.end());
  check_close(compare(bf16_to_double(o_split), o_ref), "split o vs reference");
  check_close(compare(second.S, S_ref), "split S vs reference");
  check_close(compare(bf16_to_double(o_split), bf16_to_double(whole.o)), "split o vs one pass");
  check_close(compare(second.S, to_double(whole.S)), "split S vs one pass");
}

struct Package {
  std::vector<float> M, D;
};

Package gpu_package(const Inputs& in, int64_t t0, int64_t n, KdaWalk walk) {
  const int H = in.heads;
  KdaWorkspace ws(n, H);
  DeviceBuffer<float> M(size_t(H) * kD * kD), D(size_t(H) * kD * kD);
  M.poison();
  D.poison();
  kda_prepare(in.view(t0), n, H, ws, nullptr);
  kda_package(ws, n, M.get(), D.get(), nullptr, walk);
  PB_CUDA(cudaDeviceSynchronize());
  return Package{M.download(), D.download()};
}

// Weak decays (M well above underflow) and the default mix (M of the strong-decay
// channels underflows to 0 in the reference as on the device), each walk.
void check_package(bool weak, KdaWalk walk) {
  const int H = 3;
  const int64_t T = 150;
  const Inputs in = weak ? Inputs(T, H, 203, -12.0f, -8.0f) : Inputs(T, H, 201);
  const std::string tag = std::string(weak ? "weak decays, " : "mixed decays, ") + walk_name(walk);
  const Package pk = gpu_package(in, 0, T, walk);
  const RefInputs r = ref_inputs(in, 0, T);
  std::vector<double> M_ref(size_t(H) * kD * kD), D_ref(size_t(H) * kD * kD);
  ref::kda_package(r.k.data(), r.v.data(), r.la.data(), r.beta.data(), r.shape, kKdaChunkLen, M_ref.data(),
                   D_ref.data());
  const Close cm = compare(pk.M, M_ref);
  if (weak) {
    check_close(cm, "M vs ref::kda_package (" + tag + ")");
    INFO("M must be well above underflow with weak decays: max |M_ref| " << cm.max_ref);
    CHECK(cm.max_ref > 1e-2);
  } else if (cm.max_ref < 1e-6) {
    // strong decays: M (scale 1 at entry) decayed below f32 resolution of that scale; the
    // f32 walk may flush it to 0 where the float64 reference keeps 1e-30. Max-abs only.
    const std::string what = "M vs ref::kda_package (" + tag + ", underflowed: max-abs only): " + cm.text();
    INFO(what);
    CHECK((cm.finite && cm.max_abs <= 1e-6));
    MESSAGE(what);
  } else {
    check_close(cm, "M vs ref::kda_package (" + tag + ")");
  }
  check_close(compare(pk.D, D_ref), "D vs ref::kda_package (" + tag + ")");

  const std::vector<float> S_in = random_state(H, 202, 0.5f);
  const std::vector<double> S_in_d = to_double(S_in);
  std::vector<double> S_ref(size_t(H) * kD * kD);
  ref::kda_sequential(r.q.data(), r.k.data(), r.v.data(), r.la.data(), r.beta.data(), r.shape,
                      ref::kda_default_scale(kD), S_in_d.data(), nullptr, S_ref.data());
  std::vector<double> S_pk(S_ref.size());
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < kD; ++j)
      for (int c = 0; c < kD; ++c) {
        double acc = pk.D[(size_t(h) * kD + j) * kD + c];
        for (int a = 0; a < kD; ++a)
          acc += double(S_in[(size_t(h) * kD + j) * kD + a]) * double(pk.M[(size_t(h) * kD + a) * kD + c]);
        S_pk[(size_t(h) * kD + j) * kD + c] = acc;
      }
  check_close(compare(S_pk, S_ref), "S_in M + D vs sequential (" + tag + ")");
}

TEST_CASE("kda package: S_in M + D equals the sequential state") {
  for (KdaWalk walk : kPackageWalks) {
    check_package(true, walk);
    check_package(false, walk);
  }
}

TEST_CASE("kda fold of 3 packages equals the sequential state") {
  const int H = 2;
  const int64_t lens[3] = {100, 64, 77}, T = 241;
  const Inputs in(T, H, 301);
  std::vector<Package> pk;
  int64_t t0 = 0;
  for (int64_t n : lens) {
    // segment 0: the head walk, 1 and 2: the package's default (the halves walk)
    pk.push_back(gpu_package(in, t0, n, t0 == 0 ? KdaWalk::kHead : kKdaPackageWalk));
    t0 += n;
  }
  std::vector<DeviceBuffer<float>> dM, dD;
  std::vector<const float*> pM, pD;
  for (const Package& p : pk) {
    dM.emplace_back(p.M.size());
    dD.emplace_back(p.D.size());
    dM.back().upload(p.M);
    dD.back().upload(p.D);
  }
  for (size_t i = 0; i < pk.size(); ++i) {
    pM.push_back(dM[i].get());
    pD.push_back(dD[i].get());
  }
  DeviceBuffer<float> S(size_t(H) * kD * kD), scratch(size_t(H) * kD * kD);
  S.poison();
  Blas blas;
  kda_fold(blas, pM.data(), pD.data(), 3, H, S.get(), scratch.get(), nullptr);
  PB_CUDA(cudaDeviceSynchronize());

  const RefInputs r = ref_inputs(in, 0, T);
  std::vector<double> S_ref(size_t(H) * kD * kD);
  ref::kda_sequential(r.q.data(), r.k.data(), r.v.data(), r.la.data(), r.beta.data(), r.shape,
                      ref::kda_default_scale(kD), nullptr, nullptr, S_ref.data());
  check_close(compare(S.download(), S_ref), "fold of 3 packages vs sequential");

  // The forward of the third segment from the fold of the first two equals the tail of one pass.
  kda_fold(blas, pM.data(), pD.data(), 2, H, S.get(), scratch.get(), nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  const GpuRun tail = gpu_forward(in, lens[0] + lens[1], lens[2], S.download(), kda_default_forward_walk());
  std::vector<double> o_ref(size_t(T * in.width));
  ref::kda_sequential(r.q.data(), r.k.data(), r.v.data(), r.la.data(), r.beta.data(), r.shape,
                      ref::kda_default_scale(kD), nullptr, o_ref.data(), nullptr);
  const std::vector<double> o_tail(o_ref.begin() + (lens[0] + lens[1]) * in.width, o_ref.end());
  check_close(compare(bf16_to_double(tail.o), o_tail), "forward from the fold vs sequential tail");
}

// Bit patterns of a and b that differ (element count), and max |a − b| / max |b| over the
// finite elements (for the message when they differ); all elements of both must be finite.
struct BitDiff {
  int64_t differ = 0;
  bool finite = true;
  double rel = 0;
};
template <class T, class F>
BitDiff bit_diff(const std::vector<T>& a, const std::vector<T>& b, F value) {
  REQUIRE(a.size() == b.size());
  BitDiff d;
  double max_d = 0, max_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = value(a[i]), y = value(b[i]);
    d.finite = d.finite && std::isfinite(x) && std::isfinite(y);
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) ++d.differ;
    if (std::isfinite(x) && std::isfinite(y)) {
      max_d = std::max(max_d, std::fabs(x - y));
      max_b = std::max(max_b, std::fabs(y));
    }
  }
  d.rel = max_d / std::max(max_b, 1e-300);
  return d;
}

// bit_diff's value functions: bf16 bit patterns and f32.
double of_bf16(uint16_t x) { return double(ref::bf16_to_f32(x)); }
double of_f32(float x) { return double(x); }

void check_bits(const BitDiff& d, const std::string& what) {
  char buf[160];
  std::snprintf(buf, sizeof buf, ": %lld elements differ in their bits, max rel %.3g%s", (long long)d.differ, d.rel,
                d.finite ? "" : ", NON-FINITE");
  const std::string text = what + buf;
  INFO(text);
  CHECK(d.finite);
  CHECK(d.differ == 0);
  MESSAGE(text);
}

// kda_walk_half_kernel builds every element from the same bf16 operands by the same mma
// k-steps in the same order as kda_walk_kernel: the forward's o and S_out and the package's
// M and D equal bit for bit (one workspace, so both walks read the same products).
TEST_CASE("kda halves walk equals the head walk bit for bit") {
  const int H = 96;
  const int64_t T = 200;  // the last chunk is short
  const Inputs in(T, H, 401);
  const std::vector<float> S_in = random_state(H, 402, 0.5f);
  KdaWorkspace ws(T, H);
  kda_prepare(in.view(0), T, H, ws, nullptr);
  const size_t state = size_t(H) * kD * kD;
  DeviceBuffer<float> s_in(state), s_out(state), M(state), D(state);
  DeviceBuffer<bf16> o(size_t(T * in.width));
  s_in.upload(S_in);
  struct Out {
    std::vector<uint16_t> o;
    std::vector<float> S, M, D;
  };
  auto run = [&](KdaWalk walk) {
    o.poison();
    s_out.poison();
    M.poison();
    D.poison();
    kda_forward_state(ws, T, s_in.get(), o.get(), in.width, s_out.get(), nullptr, walk);
    kda_package(ws, T, M.get(), D.get(), nullptr, walk);
    PB_CUDA(cudaDeviceSynchronize());
    return Out{o.download<uint16_t>(), s_out.download(), M.download(), D.download()};
  };
  const Out head = run(KdaWalk::kHead), halves = run(KdaWalk::kHalves);
  check_bits(bit_diff(halves.o, head.o, of_bf16), "halves vs head walk: o");
  check_bits(bit_diff(halves.S, head.S, of_f32), "halves vs head walk: S_out");
  check_bits(bit_diff(halves.M, head.M, of_f32), "halves vs head walk: M");
  check_bits(bit_diff(halves.D, head.D, of_f32), "halves vs head walk: D");
}

TEST_CASE("kda launcher contract") {
  KdaWorkspace ws(64, 1);
  KdaInputs bad;
  CHECK_THROWS_AS(kda_prepare(bad, 10, 1, ws, nullptr), pb::Error);
  CHECK_THROWS_AS(kda_prepare(bad, 65, 1, ws, nullptr), pb::Error);
  CHECK_THROWS_AS(kda_prepare(bad, 10, 2, ws, nullptr), pb::Error);
  DeviceBuffer<float> M(size_t(kD) * kD), D(size_t(kD) * kD);
  CHECK_THROWS_AS(kda_package(ws, 10, M.get(), D.get(), nullptr, KdaWalk::kWgmma), pb::Error);  // forward only
}

}  // namespace
}  // namespace pb::test
