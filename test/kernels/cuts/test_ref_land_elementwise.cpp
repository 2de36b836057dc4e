// The plain C++ references of cut 1 (land) and cut 5 (elementwise family),
// checked against hand-worked values and double-precision formulas. The GPU
// suites (test/kernels/cuts/test_land.cu, test_elementwise.cu) then hold the kernels to
// these references bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "check.h"
#include "elementwise.h"
#include "land.h"
#include "ref_math.h"

using namespace pb;

namespace {

float pow2(int e) { return std::ldexp(1.0f, e); }

// bf16 keeps 8 significant bits: one round-to-nearest moves a normal value by
// at most 2^-8 of itself.
constexpr double kBf16Rounding = 1.0 / 256.0;

bool within(double got, double want, double relative) {
  return std::fabs(got - want) <= relative * std::fabs(want) + 1e-30;
}

uint16_t bf16_of(float f) { return ref::f32_to_bf16_rn(f); }

}  // namespace

TEST_CASE("land ref: split_k = 1 is the bare round-to-nearest-even cast, -0 lands as +0") {
  const std::vector<float> p = {1.0f, 1.0f + pow2(-8), 1.0f + 3 * pow2(-8), -0.0f, 0.0f, -2.5f};
  std::vector<uint16_t> o(p.size(), 0xffff);
  ref::land(p.data(), o.data(), LandShape{1, 1, int64_t(p.size()), 0, int64_t(p.size())});
  CHECK(o[0] == 0x3f80);  // 1.0
  CHECK(o[1] == 0x3f80);  // 1 + 2^-8 is a tie: to even (1.0)
  CHECK(o[2] == 0x3f82);  // 1 + 3 * 2^-8 is a tie: to even (1 + 2^-6)
  CHECK(o[3] == 0x0000);  // 0.0f + -0.0f = +0
  CHECK(o[4] == 0x0000);
  CHECK(o[5] == 0xc020);  // -2.5
}

TEST_CASE("land ref: slabs are summed ascending from +0.0f") {
  // p [1, 3, 2]: column 0 = {1, -1, 2^-30}, column 1 = {-0, -0, -0}.
  const std::vector<float> p = {1.0f, -0.0f, -1.0f, -0.0f, pow2(-30), -0.0f};
  std::vector<uint16_t> o(2, 0xffff);
  ref::land(p.data(), o.data(), LandShape{1, 3, 2, 0, 2});
  // Ascending: (1 + -1) + 2^-30 = 2^-30 exactly; the reverse order would
  // lose 2^-30 against -1 and land 0.
  CHECK(o[0] == bf16_of(pow2(-30)));
  CHECK(o[0] == 0x3080);
  CHECK(o[1] == 0x0000);  // an all -0 column lands as +0
}

TEST_CASE("land ref: the column window [off, off + n) of every row and slab") {
  // p [2, 2, 5] with p[r][s][c] = 100 r + 10 s + c; land columns 1..3.
  std::vector<float> p(2 * 2 * 5);
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < 5; ++c) p[(r * 2 + s) * 5 + c] = float(100 * r + 10 * s + c);
  std::vector<uint16_t> o(2 * 3, 0xffff);
  ref::land(p.data(), o.data(), LandShape{2, 2, 5, 1, 3});
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      const float want = float((100 * r + (c + 1)) + (100 * r + 10 + (c + 1)));
      CHECK(o[r * 3 + c] == bf16_of(want));
    }
}

TEST_CASE("land ref: the shape check refuses broken shapes") {
  float p = 0.0f;
  uint16_t o = 0;
  CHECK_THROWS_AS(ref::land(&p, &o, LandShape{1, 0, 1, 0, 1}), pb::Error);   // split_k 0
  CHECK_THROWS_AS(ref::land(&p, &o, LandShape{1, 1, 4, 2, 3}), pb::Error);   // off + n > nt
  CHECK_THROWS_AS(ref::land(&p, &o, LandShape{-1, 1, 4, 0, 4}), pb::Error);  // rows < 0
  CHECK_NOTHROW(ref::land(&p, &o, LandShape{0, 1, 4, 0, 4}));                 // empty
}

TEST_CASE("add2 ref: hand-checked bf16 sums") {
  const std::vector<uint16_t> a = {0x3f80, 0x3f81, 0x3fc0, 0x8000, 0x8000, 0x3f80, 0x7f7f};
  const std::vector<uint16_t> b = {0x3b80, 0x3b80, 0x4010, 0x8000, 0x0000, 0xbf80, 0x7f7f};
  std::vector<uint16_t> o(a.size(), 0xffff);
  ref::add2(a.data(), b.data(), o.data(), int64_t(a.size()));
  CHECK(o[0] == 0x3f80);  // 1 + 2^-8: tie, to even -> 1
  CHECK(o[1] == 0x3f82);  // (1 + 2^-7) + 2^-8: tie, to even -> 1 + 2^-6
  CHECK(o[2] == 0x4070);  // 1.5 + 2.25 = 3.75
  CHECK(o[3] == 0x8000);  // -0 + -0 = -0
  CHECK(o[4] == 0x0000);  // -0 + +0 = +0
  CHECK(o[5] == 0x0000);  // 1 + -1 = +0
  CHECK(o[6] == 0x7f80);  // max + max overflows to +inf
}

TEST_CASE("mul_sigmoid and situ refs: within a bf16 rounding of the double formulas") {
  ref::HostMath m;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int n = 4096;
  std::vector<uint16_t> a(n), g(n), u(n), o_ms(n), o_situ(n);
  for (int i = 0; i < n; ++i) {
    a[i] = bf16_of(normal(rng));
    g[i] = bf16_of(normal(rng));
    u[i] = bf16_of(normal(rng) * 20.0f);
  }
  ref::mul_sigmoid(a.data(), g.data(), o_ms.data(), n, m);
  ref::situ(g.data(), u.data(), o_situ.data(), n, m);
  for (int i = 0; i < n; ++i) {
    const double af = ref::bf16_to_f32(a[i]);
    const double gf = ref::bf16_to_f32(g[i]);
    const double uf = ref::bf16_to_f32(u[i]);
    const double sig = 1.0 / (1.0 + std::exp(-gf));

    // mul_sigmoid rounds twice to bf16 (the gate, then the product).
    CHECK(within(ref::bf16_to_f32(o_ms[i]), af * sig, 2.01 * kBf16Rounding));
    // situ rounds once to bf16 after an f32 chain a few f32 ulps off.
    const double want_situ = 4.0 * std::tanh(gf / 4.0) * sig * 25.0 * std::tanh(uf / 25.0);
    CHECK(within(ref::bf16_to_f32(o_situ[i]), want_situ, 1.01 * kBf16Rounding));
  }
}

TEST_CASE("situ ref: spot values") {
  ref::HostMath m;
  // situ(0, u) = 0 * ... = 0; situ(g, 0) = +-0.
  const std::vector<uint16_t> g = {0x0000, 0x3f80, 0x4120};  // 0, 1, 10
  const std::vector<uint16_t> u = {0x3f80, 0x0000, 0x4120};  // 1, 0, 10
  std::vector<uint16_t> o(3, 0xffff);
  ref::situ(g.data(), u.data(), o.data(), 3, m);
  CHECK(o[0] == 0x0000);
  CHECK(o[1] == 0x0000);
  // g = u = 10: 4 tanh(2.5) sigmoid(10) * 25 tanh(0.4) ~= 37.3
  const double want = 4.0 * std::tanh(2.5) / (1.0 + std::exp(-10.0)) * 25.0 * std::tanh(0.4);
  CHECK(within(ref::bf16_to_f32(o[2]), want, 1.01 * kBf16Rounding));
}

TEST_CASE("o_norm_gate ref: the butterfly is a plain sum up to f32 rounding") {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 100; ++trial) {
    float v[128];
    double exact = 0.0;
    for (float& x : v) {
      const float s = normal(rng) * (trial % 3 == 0 ? 1000.0f : 1.0f);
      x = s * s;
      exact += double(x);
    }
    const float got = ref::butterfly_sum128(v);
    // 7 levels of f32 adds of non-negative terms: relative error <= 7 * 2^-24.
    CHECK(std::fabs(double(got) - exact) <= 7.0 * std::ldexp(exact, -24));
  }
  // Exact when every partial is representable.
  float ones[128];
  for (float& x : ones) x = 1.0f;
  CHECK(ref::butterfly_sum128(ones) == 128.0f);
}

TEST_CASE("o_norm_gate ref: within bf16 rounding of the double formula") {
  ref::HostMath m;
  std::mt19937_64 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int row_heads = 5;
  const float eps = 1e-5f;
  std::vector<uint16_t> x(row_heads * 128), g(row_heads * 128), o(row_heads * 128, 0xffff);
  std::vector<float> gamma(128);
  for (auto& e : x) e = bf16_of(normal(rng) * 2.0f);
  for (auto& e : g) e = bf16_of(normal(rng) * 3.0f);
  for (auto& e : gamma) e = 1.0f + 0.1f * normal(rng);
  ref::o_norm_gate(x.data(), g.data(), gamma.data(), o.data(), row_heads, eps, m);
  for (int rh = 0; rh < row_heads; ++rh) {
    double sum = 0.0;
    for (int i = 0; i < 128; ++i) {
      const double xf = ref::bf16_to_f32(x[rh * 128 + i]);
      sum += xf * xf;
    }
    const double scale = 1.0 / std::sqrt(sum / 128.0 + eps);
    for (int i = 0; i < 128; ++i) {
      const int e = rh * 128 + i;
      const double y = ref::bf16_to_f32(x[e]) * scale * gamma[i];
      const double sig = 1.0 / (1.0 + std::exp(-double(ref::bf16_to_f32(g[e]))));
      const double want = y * sig;
      // three bf16 roundings: y, the gate, the product.
      CHECK(within(ref::bf16_to_f32(o[e]), want, 3.01 * kBf16Rounding));
    }
  }
}
