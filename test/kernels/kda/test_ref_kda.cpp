// The float64 KDA core reference (kda_ref.h): the chunked WY/UT form against
// the token-by-token recurrence, state threading, the affine package
// S_out = S_in·M + D, the fold over ranks, the gates, and the FLOP counts.
// Random inputs throughout (never zeros), T not a multiple of the chunk,
// T < chunk, T = 1, dk != dv, and one dk = dv = 128 case.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cost.h"
#include "kda_ref.h"

namespace pb {
namespace {

using ref::KdaShape;

// max |a − b| / max |b|.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  REQUIRE(den > 0.0);
  return num / den;
}

std::vector<float> uniform(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<double> uniform_d(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Prepared core inputs from random pre-activations.
struct Inputs {
  KdaShape s;
  std::vector<double> q, k, v, la, beta;
  // g_lo/g_hi: range of the forget-gate pre-activation (decay strength).
  Inputs(int64_t T, int H, int dk, int dv, uint64_t seed, float g_lo = -3.0f, float g_hi = 3.0f,
         float a_log_lo = -1.0f, float a_log_hi = 1.0f) {
    s.tokens = T;
    s.heads = H;
    s.dk = dk;
    s.dv = dv;
    std::mt19937_64 rng(seed);
    const size_t nk = size_t(T) * H * dk, nv = size_t(T) * H * dv;
    auto qr = uniform(rng, nk, -1.0f, 1.0f), kr = uniform(rng, nk, -1.0f, 1.0f);
    auto vr = uniform(rng, nv, -1.0f, 1.0f);
    auto g = uniform(rng, nk, g_lo, g_hi), bp = uniform(rng, size_t(T) * H, -3.0f, 3.0f);
    auto a_log = uniform(rng, size_t(H), a_log_lo, a_log_hi);
    auto dt_bias = uniform(rng, size_t(H) * dk, -0.5f, 0.5f);
    q.resize(nk);
    k.resize(nk);
    la.resize(nk);
    beta.resize(size_t(T) * H);
    ref::kda_l2norm(qr.data(), T * H, dk, q.data());
    ref::kda_l2norm(kr.data(), T * H, dk, k.data());
    v.assign(vr.begin(), vr.end());
    ref::kda_gates(g.data(), bp.data(), a_log.data(), dt_bias.data(), T, H, dk, la.data(), beta.data());
  }
  size_t state_size() const { return size_t(s.heads) * s.dv * s.dk; }
  // Tokens [t0, t0 + n) as their own shape and pointers.
  KdaShape sub(int64_t n) const {
    KdaShape r = s;
    r.tokens = n;
    return r;
  }
  const double* qp(int64_t t0) const { return q.data() + t0 * s.heads * s.dk; }
  const double* kp(int64_t t0) const { return k.data() + t0 * s.heads * s.dk; }
  const double* vp(int64_t t0) const { return v.data() + t0 * s.heads * s.dv; }
  const double* lap(int64_t t0) const { return la.data() + t0 * s.heads * s.dk; }
  const double* bp(int64_t t0) const { return beta.data() + t0 * s.heads; }
};

struct Result {
  std::vector<double> o, S;
};

Result sequential(const Inputs& in, const double* S_in, double scale) {
  Result r{std::vector<double>(size_t(in.s.tokens) * in.s.heads * in.s.dv), std::vector<double>(in.state_size())};
  ref::kda_sequential(in.q.data(), in.k.data(), in.v.data(), in.la.data(), in.beta.data(), in.s, scale, S_in,
                      r.o.data(), r.S.data());
  return r;
}

Result chunked(const Inputs& in, const double* S_in, double scale, int chunk) {
  Result r{std::vector<double>(size_t(in.s.tokens) * in.s.heads * in.s.dv), std::vector<double>(in.state_size())};
  ref::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.la.data(), in.beta.data(), in.s, scale, chunk, S_in,
                   r.o.data(), r.S.data());
  return r;
}

constexpr double kTol = 1e-10;

}  // namespace

TEST_CASE("kda gates: alpha in (e^-5, 1), beta in (0, 1), the formula, and the L2 norm") {
  const int64_t T = 37;
  const int H = 3, dk = 16;
  std::mt19937_64 rng(11);
  auto g = uniform(rng, size_t(T) * H * dk, -8.0f, 8.0f);
  auto bp = uniform(rng, size_t(T) * H, -8.0f, 8.0f);
  auto a_log = uniform(rng, size_t(H), -2.0f, 2.0f);
  auto dt_bias = uniform(rng, size_t(H) * dk, -1.0f, 1.0f);
  std::vector<double> la(g.size()), beta(bp.size());
  ref::kda_gates(g.data(), bp.data(), a_log.data(), dt_bias.data(), T, H, dk, la.data(), beta.data());
  for (double x : la) {
    const double alpha = std::exp(x);
    CHECK(alpha > std::exp(-5.0));
    CHECK(alpha < 1.0);
  }
  for (double b : beta) {
    CHECK(b > 0.0);
    CHECK(b < 1.0);
  }
  // One element by hand: t = 5, h = 2, c = 7.
  const int64_t t = 5;
  const int h = 2, c = 7;
  const double x = std::exp(double(a_log[h])) * (double(g[(t * H + h) * dk + c]) + double(dt_bias[h * dk + c]));
  CHECK(la[(t * H + h) * dk + c] == doctest::Approx(-5.0 / (1.0 + std::exp(-x))).epsilon(1e-15));
  CHECK(beta[t * H + h] == doctest::Approx(1.0 / (1.0 + std::exp(-double(bp[t * H + h])))).epsilon(1e-15));

  // l2norm: ‖out‖² = Σx² / (Σx² + 1e-6), direction kept.
  auto raw = uniform(rng, size_t(4) * dk, -1.0f, 1.0f);
  std::vector<double> out(raw.size());
  ref::kda_l2norm(raw.data(), 4, dk, out.data());
  for (int r = 0; r < 4; ++r) {
    double ss = 0.0, nn = 0.0;
    for (int i = 0; i < dk; ++i) {
      ss += double(raw[r * dk + i]) * raw[r * dk + i];
      nn += out[r * dk + i] * out[r * dk + i];
    }
    CHECK(nn == doctest::Approx(ss / (ss + 1e-6)).epsilon(1e-14));
    CHECK(out[r * dk] == doctest::Approx(double(raw[r * dk]) / std::sqrt(ss + 1e-6)).epsilon(1e-14));
  }
}

TEST_CASE("kda sequential: one token by hand (value-major state, decay on the key side)") {
  Inputs in(1, 1, 4, 3, 5);
  std::mt19937_64 rng(6);
  auto S_in = uniform_d(rng, in.state_size(), -1.0, 1.0);
  const double scale = 0.37;
  Result r = sequential(in, S_in.data(), scale);
  // S = S_in Diag(α)(I − β k kᵀ) + β v kᵀ, o = scale · S q, written out.
  const int dk = 4, dv = 3;
  const double b = in.beta[0];
  for (int j = 0; j < dv; ++j) {
    double xk = 0.0;
    for (int c = 0; c < dk; ++c) xk += S_in[j * dk + c] * std::exp(in.la[c]) * in.k[c];
    double o = 0.0;
    for (int c = 0; c < dk; ++c) {
      const double s = S_in[j * dk + c] * std::exp(in.la[c]) - b * xk * in.k[c] + b * in.v[j] * in.k[c];
      CHECK(r.S[j * dk + c] == doctest::Approx(s).epsilon(1e-14));
      o += s * in.q[c];
    }
    CHECK(r.o[j] == doctest::Approx(scale * o).epsilon(1e-13));
  }
}

TEST_CASE("kda chunked == sequential (1e-10 relative), from a random S_in") {
  struct Cfg {
    int64_t T;
    int H, dk, dv, chunk;
  };
  const Cfg cfgs[] = {
      {1, 2, 16, 16, 64},   {5, 2, 16, 16, 64},   {63, 2, 16, 16, 64},  {64, 2, 16, 16, 64},
      {65, 2, 16, 16, 64},  {150, 2, 16, 16, 64}, {200, 2, 16, 16, 16}, {45, 2, 16, 16, 7},
      {9, 2, 16, 16, 1},    {100, 2, 16, 8, 64},  {77, 3, 8, 24, 16},   {70, 2, 128, 128, 64},
      {3, 1, 128, 128, 64},
  };
  uint64_t seed = 100;
  for (const Cfg& c : cfgs) {
    CAPTURE(c.T);
    CAPTURE(c.H);
    CAPTURE(c.dk);
    CAPTURE(c.dv);
    CAPTURE(c.chunk);
    Inputs in(c.T, c.H, c.dk, c.dv, ++seed);
    std::mt19937_64 rng(++seed);
    auto S_in = uniform_d(rng, in.state_size(), -1.0, 1.0);
    const double scale = ref::kda_default_scale(c.dk);
    Result a = sequential(in, S_in.data(), scale);
    Result b = chunked(in, S_in.data(), scale, c.chunk);
    CHECK(rel_err(b.o, a.o) < kTol);
    CHECK(rel_err(b.S, a.S) < kTol);
    // From the zero state (null S_in) too.
    Result a0 = sequential(in, nullptr, scale);
    Result b0 = chunked(in, nullptr, scale, c.chunk);
    CHECK(rel_err(b0.o, a0.o) < kTol);
    CHECK(rel_err(b0.S, a0.S) < kTol);
  }
}

TEST_CASE("kda chunked == sequential at the decay extremes (log alpha near -5 and near 0)") {
  // Strong: exp(A_log) ≈ 20, g + dt_bias ≥ 2 → log α ≈ −5 on every channel, so the
  // in-chunk cumulative decay reaches ≈ −320 over a 64-chunk (e^{+320} would overflow f32).
  Inputs strong(150, 2, 16, 16, 7, 2.5f, 4.0f, 3.0f, 3.0f);
  double lo = 0.0;
  for (double x : strong.la) lo = std::min(lo, x);
  CHECK(lo < -4.99);
  // Weak: exp(A_log) ≈ 20, g + dt_bias ≤ −2 → α ≈ 1 (a long memory).
  Inputs weak(150, 2, 16, 16, 8, -4.0f, -2.5f, 3.0f, 3.0f);
  for (Inputs* in : {&strong, &weak}) {
    std::mt19937_64 rng(9);
    auto S_in = uniform_d(rng, in->state_size(), -1.0, 1.0);
    const double scale = ref::kda_default_scale(16);
    Result a = sequential(*in, S_in.data(), scale);
    Result b = chunked(*in, S_in.data(), scale, 64);
    CHECK(rel_err(b.o, a.o) < kTol);
    CHECK(rel_err(b.S, a.S) < kTol);
    for (double x : b.o) CHECK(std::isfinite(x));
  }
}

TEST_CASE("kda chunked over two parts, threading the state, == one pass") {
  struct Cfg {
    int64_t T, split;
    int dk, dv, chunk;
  };
  const Cfg cfgs[] = {{150, 70, 16, 16, 64}, {150, 64, 16, 8, 64}, {40, 1, 16, 16, 64}, {130, 129, 8, 16, 16}};
  uint64_t seed = 300;
  for (const Cfg& c : cfgs) {
    CAPTURE(c.T);
    CAPTURE(c.split);
    Inputs in(c.T, 2, c.dk, c.dv, ++seed);
    std::mt19937_64 rng(++seed);
    auto S_in = uniform_d(rng, in.state_size(), -1.0, 1.0);
    const double scale = ref::kda_default_scale(c.dk);
    Result whole = chunked(in, S_in.data(), scale, c.chunk);
    std::vector<double> o(whole.o.size()), S = S_in;
    const int64_t row = int64_t(in.s.heads) * in.s.dv;
    // First part, then the second from the first's S_out (S_in aliasing S_out).
    ref::kda_chunked(in.qp(0), in.kp(0), in.vp(0), in.lap(0), in.bp(0), in.sub(c.split), scale, c.chunk, S.data(),
                     o.data(), S.data());
    ref::kda_chunked(in.qp(c.split), in.kp(c.split), in.vp(c.split), in.lap(c.split), in.bp(c.split),
                     in.sub(c.T - c.split), scale, c.chunk, S.data(), o.data() + c.split * row, S.data());
    CHECK(rel_err(o, whole.o) < kTol);
    CHECK(rel_err(S, whole.S) < kTol);
  }
}

TEST_CASE("kda package: S_in·M + D == the sequential final state, for random S_in") {
  struct Cfg {
    int64_t T;
    int H, dk, dv, chunk;
  };
  const Cfg cfgs[] = {{100, 2, 16, 8, 64}, {1, 2, 16, 16, 64}, {33, 2, 8, 16, 16}, {70, 1, 128, 128, 64}};
  uint64_t seed = 500;
  for (const Cfg& c : cfgs) {
    CAPTURE(c.T);
    CAPTURE(c.dk);
    CAPTURE(c.dv);
    Inputs in(c.T, c.H, c.dk, c.dv, ++seed);
    std::vector<double> M(size_t(c.H) * c.dk * c.dk), D(in.state_size());
    ref::kda_package(in.k.data(), in.v.data(), in.la.data(), in.beta.data(), in.s, c.chunk, M.data(), D.data());
    const double scale = ref::kda_default_scale(c.dk);
    CHECK(rel_err(D, sequential(in, nullptr, scale).S) < kTol);  // D: the state from zero
    for (int trial = 0; trial < 2; ++trial) {
      std::mt19937_64 rng(++seed);
      auto S_in = uniform_d(rng, in.state_size(), -2.0, 2.0);
      std::vector<double> S_out(in.state_size());
      const size_t sn = size_t(c.dv) * c.dk, mn = size_t(c.dk) * c.dk;
      for (int h = 0; h < c.H; ++h)
        for (int j = 0; j < c.dv; ++j)
          for (int col = 0; col < c.dk; ++col) {
            double acc = D[h * sn + j * c.dk + col];
            for (int a = 0; a < c.dk; ++a) acc += S_in[h * sn + j * c.dk + a] * M[h * mn + a * c.dk + col];
            S_out[h * sn + j * c.dk + col] = acc;
          }
      CHECK(rel_err(S_out, sequential(in, S_in.data(), scale).S) < kTol);
    }
    // ‖M‖ ≤ 1: no row of M has a larger norm than 1 (a row is M's image of a basis row vector).
    for (int h = 0; h < c.H; ++h)
      for (int a = 0; a < c.dk; ++a) {
        double nn = 0.0;
        for (int col = 0; col < c.dk; ++col) nn += M[h * size_t(c.dk) * c.dk + a * c.dk + col] * M[h * size_t(c.dk) * c.dk + a * c.dk + col];
        CHECK(nn <= 1.0 + 1e-12);
      }
  }
}

TEST_CASE("kda fold over segments == the sequential state over their concatenation; tail forward matches") {
  struct Cfg {
    std::vector<int64_t> seg;
    int dk, dv, chunk;
  };
  const Cfg cfgs[] = {{{37, 64, 100, 45}, 16, 16, 64}, {{1, 20, 65}, 16, 8, 16}, {{50, 3, 70, 9}, 8, 16, 64}};
  uint64_t seed = 700;
  for (const Cfg& c : cfgs) {
    int64_t T = 0;
    for (int64_t n : c.seg) T += n;
    CAPTURE(T);
    const int H = 2;
    Inputs in(T, H, c.dk, c.dv, ++seed);
    const double scale = ref::kda_default_scale(c.dk);
    const int nseg = int(c.seg.size());
    std::vector<std::vector<double>> Ms(nseg), Ds(nseg);
    std::vector<int64_t> start(nseg);
    int64_t t0 = 0;
    for (int j = 0; j < nseg; ++j) {
      start[j] = t0;
      Ms[j].resize(size_t(H) * c.dk * c.dk);
      Ds[j].resize(in.state_size());
      ref::kda_package(in.kp(t0), in.vp(t0), in.lap(t0), in.bp(t0), in.sub(c.seg[j]), c.chunk, Ms[j].data(),
                       Ds[j].data());
      t0 += c.seg[j];
    }
    std::vector<const double*> Mp(nseg), Dp(nseg);
    for (int j = 0; j < nseg; ++j) {
      Mp[j] = Ms[j].data();
      Dp[j] = Ds[j].data();
    }
    Result full = sequential(in, nullptr, scale);
    // All segments folded: the final state of the whole sequence.
    std::vector<double> S(in.state_size());
    ref::kda_fold(Mp.data(), Dp.data(), nseg, H, c.dk, c.dv, S.data());
    CHECK(rel_err(S, full.S) < kTol);
    // The last rank: fold the upstream segments, then its forward from that S_in.
    std::vector<double> S_in(in.state_size());
    ref::kda_fold(Mp.data(), Dp.data(), nseg - 1, H, c.dk, c.dv, S_in.data());
    const int64_t tl = start[nseg - 1], nl = c.seg[nseg - 1];
    {
      Inputs prefix = in;  // the upstream tokens alone, sequentially
      prefix.s.tokens = tl;
      CHECK(rel_err(S_in, sequential(prefix, nullptr, scale).S) < kTol);
    }
    const int64_t row = int64_t(H) * c.dv;
    std::vector<double> o(size_t(nl * row)), S_out(in.state_size());
    ref::kda_chunked(in.qp(tl), in.kp(tl), in.vp(tl), in.lap(tl), in.bp(tl), in.sub(nl), scale, c.chunk,
                     S_in.data(), o.data(), S_out.data());
    std::vector<double> tail(full.o.begin() + tl * row, full.o.end());
    CHECK(rel_err(o, tail) < kTol);
    CHECK(rel_err(S_out, full.S) < kTol);
  }
}

TEST_CASE("kda FLOP counts: dense-tile forward and package == cost.cpp's; exact counts") {
  for (int64_t T : {1, 64, 100, 16384})
    for (int c : {16, 64}) {
      CHECK(ref::kda_forward_flops(T, 96, 128, 128, c) == doctest::Approx(cost::kda_forward(T, 96, 128, c).flops));
      CHECK(ref::kda_forward_flops_exact(T, 96, 128, 128, c) < ref::kda_forward_flops(T, 96, 128, 128, c));
    }
  // One full K3 chunk of one head.
  CHECK(ref::kda_forward_flops(64, 1, 128, 128, 64) == 11796480.0);
  CHECK(ref::kda_forward_flops_exact(64, 1, 128, 128, 64) == 9024832.0);
  CHECK(ref::kda_package_flops(64, 1, 128, 128, 64) == 11796480.0);
  for (int64_t T : {1, 64, 100, 16384})
    CHECK(ref::kda_package_flops(T, 96, 128, 128, 64) == doctest::Approx(cost::kda_package(T, 96, 128, 64).flops));
  // The plan's split: prepare + walk == the forward; package walk = 8 c d^2 per chunk and head.
  for (int64_t T : {1, 64, 100, 16384}) {
    CHECK(cost::kda_prepare(T, 96, 128, 64).flops + cost::kda_walk(T, 96, 128, 64).flops ==
          doctest::Approx(cost::kda_forward(T, 96, 128, 64).flops));
    CHECK(cost::kda_package_walk(T, 96, 128, 64).flops == doctest::Approx(double((T + 63) / 64) * 96 * 8 * 64 * 128 * 128));
  }
}

}  // namespace pb
