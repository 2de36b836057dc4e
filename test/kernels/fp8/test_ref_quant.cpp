// The plain C++ references of the FP8 quantization (kernels/fp8/quant_ref.h):
// the hand-written e4m3 encoder against hand-checked codes and against a
// brute-force nearest-code search, and the scale rules and layouts of fp8.h.
// The GPU suite (test/kernels/fp8/test_quant.cu) then holds the kernels to
// these references bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "fp8.h"
#include "quant_ref.h"
#include "ref_math.h"

using namespace pb;

namespace {

float pow2(int e) { return std::ldexp(1.0f, e); }
float nan_f() { return std::numeric_limits<float>::quiet_NaN(); }
float inf_f() { return std::numeric_limits<float>::infinity(); }
uint16_t bf16_of(float f) { return ref::f32_to_bf16_rn(f); }
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The nearest finite e4m3 code to v by exhaustive search (ties: the even
// mantissa), saturating to ±448; an oracle independent of the encoder's
// bit arithmetic.
uint8_t nearest_code(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(double(v));
  if (a >= 448.0) return uint8_t(sign | 0x7e);
  uint8_t best = 0;
  double best_err = a;  // code 0
  for (int c = 1; c <= 0x7e; ++c) {
    const double err = std::fabs(double(ref::e4m3_value(uint8_t(c))) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = uint8_t(c);
      best_err = err;
    }
  }
  return uint8_t(sign | best);
}

std::string hex(uint8_t c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

}  // namespace

TEST_CASE("e4m3 ref: hand-checked codes") {
  CHECK(ref::e4m3_encode(0.0f) == 0x00);
  CHECK(ref::e4m3_encode(-0.0f) == 0x80);
  CHECK(ref::e4m3_encode(1.0f) == 0x38);     // exponent 7 (bias 7), mantissa 0
  CHECK(ref::e4m3_encode(-1.0f) == 0xb8);
  CHECK(ref::e4m3_encode(1.125f) == 0x39);
  CHECK(ref::e4m3_encode(1.75f) == 0x3e);
  CHECK(ref::e4m3_encode(2.0f) == 0x40);
  CHECK(ref::e4m3_encode(0.5f) == 0x30);
  CHECK(ref::e4m3_encode(416.0f) == 0x7d);   // 1.625 * 2^8
  CHECK(ref::e4m3_encode(448.0f) == 0x7e);   // largest finite
  CHECK(ref::e4m3_encode(-448.0f) == 0xfe);
  CHECK(ref::e4m3_encode(pow2(-6)) == 0x08);  // smallest normal
  CHECK(ref::e4m3_encode(pow2(-7)) == 0x04);  // an f32 normal that is an e4m3 subnormal: 4 * 2^-9
}

TEST_CASE("e4m3 ref: round to nearest, ties to even") {
  CHECK(ref::e4m3_encode(1.0625f) == 0x38);                 // 1 + 1/16: tie between 1 (m 0) and 1.125 (m 1) -> 1
  CHECK(ref::e4m3_encode(1.0625f + pow2(-20)) == 0x39);     // just above the tie -> up
  CHECK(ref::e4m3_encode(1.0625f - pow2(-20)) == 0x38);     // just below -> down
  CHECK(ref::e4m3_encode(1.1875f) == 0x3a);                 // tie between m 1 and m 2 -> m 2
  CHECK(ref::e4m3_encode(-1.1875f) == 0xba);
  CHECK(ref::e4m3_encode(1.9375f) == 0x40);                 // tie between 1.875 (m 7) and 2.0: carries into the next binade
  CHECK(ref::e4m3_encode(432.0f) == 0x7e);                  // tie between 416 (m 5) and 448 (m 6) -> 448
  CHECK(ref::e4m3_encode(424.0f) == 0x7d);                  // below the tie -> 416
  // Subnormal steps of 2^-9.
  CHECK(ref::e4m3_encode(1.5f * pow2(-9)) == 0x02);         // tie between 1 and 2 -> 2
  CHECK(ref::e4m3_encode(2.5f * pow2(-9)) == 0x02);         // tie between 2 and 3 -> 2
  CHECK(ref::e4m3_encode(7.5f * pow2(-9)) == 0x08);         // tie between 7 (largest subnormal) and 2^-6 -> 2^-6
  CHECK(ref::e4m3_encode(pow2(-10)) == 0x00);               // half the smallest subnormal: tie -> 0
  CHECK(ref::e4m3_encode(pow2(-10) * 1.001f) == 0x01);
  CHECK(ref::e4m3_encode(-pow2(-10) * 1.001f) == 0x81);
}

TEST_CASE("e4m3 ref: subnormals, signed zeros, saturation, NaN") {
  for (int m = 1; m < 8; ++m) {
    CHECK(ref::e4m3_encode(float(m) * pow2(-9)) == uint8_t(m));
    CHECK(ref::e4m3_encode(-float(m) * pow2(-9)) == uint8_t(0x80 | m));
  }
  CHECK(ref::e4m3_encode(-pow2(-11)) == 0x80);                      // rounds to zero, keeps the sign
  CHECK(ref::e4m3_encode(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(ref::e4m3_encode(-std::numeric_limits<float>::denorm_min()) == 0x80);
  CHECK(ref::e4m3_encode(std::numeric_limits<float>::min()) == 0x00);  // 2^-126
  // |v| > 448 saturates to ±448, infinities included.
  CHECK(ref::e4m3_encode(448.0001f) == 0x7e);
  CHECK(ref::e4m3_encode(464.0f) == 0x7e);  // would be the tie with 480, which e4m3 does not have
  CHECK(ref::e4m3_encode(480.0f) == 0x7e);
  CHECK(ref::e4m3_encode(1e30f) == 0x7e);
  CHECK(ref::e4m3_encode(-1e30f) == 0xfe);
  CHECK(ref::e4m3_encode(std::numeric_limits<float>::max()) == 0x7e);
  CHECK(ref::e4m3_encode(inf_f()) == 0x7e);
  CHECK(ref::e4m3_encode(-inf_f()) == 0xfe);
  // NaN -> 0x7F, with the sign bit 0xFF.
  CHECK(ref::e4m3_encode(nan_f()) == 0x7f);
  CHECK(ref::e4m3_encode(-nan_f()) == 0xff);
  CHECK(ref::e4m3_is_nan(0x7f));
  CHECK(ref::e4m3_is_nan(0xff));
  CHECK_FALSE(ref::e4m3_is_nan(0x7e));
}

TEST_CASE("e4m3 ref: decode, and every code round-trips") {
  CHECK(ref::e4m3_value(0x7e) == 448.0f);
  CHECK(ref::e4m3_value(0xfe) == -448.0f);
  CHECK(ref::e4m3_value(0x01) == pow2(-9));
  CHECK(ref::e4m3_value(0x08) == pow2(-6));
  CHECK(ref::e4m3_value(0x38) == 1.0f);
  CHECK(std::isnan(ref::e4m3_value(0x7f)));
  CHECK(std::isnan(ref::e4m3_value(0xff)));
  CHECK(bits_of(ref::e4m3_value(0x80)) == 0x80000000u);  // -0
  for (int c = 0; c < 256; ++c) {
    if (ref::e4m3_is_nan(uint8_t(c))) continue;
    INFO("code " << hex(uint8_t(c)));
    CHECK(ref::e4m3_encode(ref::e4m3_value(uint8_t(c))) == uint8_t(c));
  }
  // Values are strictly increasing with the code (the encoding is contiguous).
  for (int c = 1; c <= 0x7e; ++c) CHECK(ref::e4m3_value(uint8_t(c)) > ref::e4m3_value(uint8_t(c - 1)));
}

TEST_CASE("e4m3 ref: every midpoint between neighbours goes to the even code") {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = ref::e4m3_value(uint8_t(c)), hi = ref::e4m3_value(uint8_t(c + 1));
    const float mid = (lo + hi) / 2;  // exact: 5 significant bits
    INFO("between " << hex(uint8_t(c)) << " and " << hex(uint8_t(c + 1)));
    const uint8_t even = (c % 2 == 0) ? uint8_t(c) : uint8_t(c + 1);
    CHECK(ref::e4m3_encode(mid) == even);
    CHECK(ref::e4m3_encode(-mid) == uint8_t(0x80 | even));
    CHECK(ref::e4m3_encode(std::nextafter(mid, 0.0f)) == uint8_t(c));
    CHECK(ref::e4m3_encode(std::nextafter(mid, 1000.0f)) == uint8_t(c + 1));
  }
}

TEST_CASE("e4m3 ref: agrees with a brute-force nearest-code search") {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> wide(-600.0f, 600.0f);
  std::uniform_int_distribution<int> expo(-14, 9);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    float v = (i % 2) ? wide(rng) : std::ldexp(mant(rng), expo(rng)) * ((i % 4) < 2 ? 1.0f : -1.0f);
    INFO("v = " << v);
    CHECK(ref::e4m3_encode(v) == nearest_code(v));
  }
}

TEST_CASE("fp8 scale rule and the padded strides") {
  CHECK(ref::fp8_scale(0.0f) == 1.0f);
  CHECK(ref::fp8_scale(448.0f) == 1.0f);
  CHECK(ref::fp8_scale(896.0f) == 2.0f);
  CHECK(ref::fp8_scale(1.0f) == 1.0f / 448.0f);  // IEEE division, round to nearest
  CHECK(std::isnan(ref::fp8_scale(nan_f())));
  CHECK(ref::fp8_scale(inf_f()) == inf_f());
  const float max_bf16 = ref::bf16_to_f32(0x7f7f);
  CHECK(ref::fp8_scale(max_bf16) == max_bf16 / 448.0f);
  CHECK(ref::fp8_scale(max_bf16) > 7.5e35f);
  CHECK(ref::fp8_scale(max_bf16) < 7.6e35f);

  CHECK(weight_scale_ld(128) == 4);
  CHECK(weight_scale_ld(512) == 4);
  CHECK(weight_scale_ld(640) == 8);
  CHECK(weight_scale_ld(1152) == 12);
  CHECK(weight_scale_ld(7168) == 56);
  CHECK(weight_scale_ld(33792) == 264);
  CHECK(act_scale_ld(1) == 4);
  CHECK(act_scale_ld(37) == 40);
  CHECK(act_scale_ld(256) == 256);
  const Fp8ScaleLayout mn = act_scales_mn_major(40), km = act_scales_k_major(9);
  CHECK(mn.s_row == 1);
  CHECK(mn.s_group == 40);
  CHECK(km.s_row == 9);
  CHECK(km.s_group == 1);
}

TEST_CASE("activation ref: special groups") {
  // 5 rows x 1 group: zeros (with a -0), NaN, +inf, the largest finite bf16, amax exactly 448.
  const int64_t m = 5, k = 128;
  std::vector<uint16_t> x(size_t(m * k));
  for (int l = 0; l < k; ++l) {
    x[size_t(0 * k + l)] = (l == 3) ? 0x8000 : 0x0000;
    x[size_t(1 * k + l)] = bf16_of(float(l) - 64.0f);
    x[size_t(2 * k + l)] = bf16_of(float(l % 7) - 3.0f);
    x[size_t(3 * k + l)] = bf16_of(float(l) * 0.25f);
    x[size_t(4 * k + l)] = bf16_of(float(l) - 100.0f);
  }
  x[size_t(1 * k + 77)] = 0x7fc0;  // NaN
  x[size_t(2 * k + 5)] = 0x7f80;   // +inf
  x[size_t(3 * k + 9)] = 0x7f7f;   // largest finite bf16
  x[size_t(3 * k + 10)] = 0xff7f;  // and its negative
  x[size_t(4 * k + 0)] = bf16_of(-448.0f);
  std::vector<uint8_t> q(x.size(), 0x5a);
  std::vector<float> s(8, -7.0f);
  ref::quantize_act_fp8(x.data(), q.data(), s.data(), ActQuantShape{m, k, 0, 0, act_scales_mn_major(8)});

  // All zero: scale 1, codes keep the zeros' signs.
  CHECK(s[0] == 1.0f);
  for (int l = 0; l < k; ++l) CHECK(q[size_t(l)] == (l == 3 ? 0x80 : 0x00));
  // NaN anywhere: scale NaN, every code NaN.
  CHECK(std::isnan(s[1]));
  for (int l = 0; l < k; ++l) CHECK(ref::e4m3_is_nan(q[size_t(k + l)]));
  // +inf: scale inf, finite elements ±0 (signs kept), the inf element NaN.
  CHECK(s[2] == inf_f());
  for (int l = 0; l < k; ++l) {
    const uint8_t c = q[size_t(2 * k + l)];
    if (l == 5) CHECK(ref::e4m3_is_nan(c));
    else CHECK(c == (float(l % 7) - 3.0f < 0 ? 0x80 : 0x00));
  }
  // Largest finite bf16: scale max / 448, codes ±448 at the max.
  const float max_bf16 = ref::bf16_to_f32(0x7f7f);
  CHECK(s[3] == max_bf16 / 448.0f);
  CHECK(q[size_t(3 * k + 9)] == 0x7e);
  CHECK(q[size_t(3 * k + 10)] == 0xfe);
  CHECK(q[size_t(3 * k + 0)] == 0x00);
  // amax 448: scale 1, the codes are e4m3(x) itself.
  CHECK(s[4] == 1.0f);
  for (int l = 0; l < k; ++l) CHECK(q[size_t(4 * k + l)] == ref::e4m3_encode(ref::bf16_to_f32(x[size_t(4 * k + l)])));
  // Padding scales (rows 5..7 of lds 8) untouched.
  for (int i = 5; i < 8; ++i) CHECK(s[size_t(i)] == -7.0f);
}

TEST_CASE("activation ref: both scale layouts, strides, and dequantization within half a step") {
  const int64_t m = 3, k = 384, ldx = 400, ldq = 392, kbs = 3;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(size_t(m * ldx), 0xffff);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) x[size_t(r * ldx + c)] = bf16_of(normal(rng) * float(1 + 100 * ((r + c / 128) % 3)));
  x[size_t(1 * ldx + 200)] = bf16_of(5000.0f);  // an outlier in group (1, 1)

  std::vector<uint8_t> q_mn(size_t(m * ldq), 0x5a), q_k(size_t(m * ldq), 0x5a);
  std::vector<float> s_mn(size_t(kbs * 4), -7.0f), s_k(size_t(m * 5), -7.0f);
  ref::quantize_act_fp8(x.data(), q_mn.data(), s_mn.data(), ActQuantShape{m, k, ldx, ldq, act_scales_mn_major(4)});
  ref::quantize_act_fp8(x.data(), q_k.data(), s_k.data(), ActQuantShape{m, k, ldx, ldq, act_scales_k_major(5)});
  CHECK(q_mn == q_k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t g = 0; g < kbs; ++g) {
      const float scale = s_mn[size_t(g * 4 + r)];
      CHECK(std::memcmp(&scale, &s_k[size_t(r * 5 + g)], 4) == 0);
      float amax = 0.0f;
      for (int l = 0; l < 128; ++l) amax = std::max(amax, std::fabs(ref::bf16_to_f32(x[size_t(r * ldx + g * 128 + l)])));
      CHECK(scale == amax / 448.0f);
      for (int l = 0; l < 128; ++l) {
        const int64_t c = g * 128 + l;
        const double v = ref::bf16_to_f32(x[size_t(r * ldx + c)]);
        const double deq = double(ref::e4m3_value(q_mn[size_t(r * ldq + c)])) * scale;
        // Half a step: 2^-4 of |v| in the normal range, 2^-10 * scale below it.
        CHECK(std::fabs(deq - v) <= std::ldexp(std::fabs(v), -4) * (1 + 1e-6) + std::ldexp(double(scale), -10));
      }
    }
    for (int64_t c = k; c < ldq; ++c) CHECK(q_mn[size_t(r * ldq + c)] == 0x5a);  // row padding untouched
  }
  CHECK(s_mn[3] == -7.0f);            // MN-major padding row 3
  for (int64_t r = 0; r < m; ++r) {
    CHECK(s_k[size_t(r * 5 + 3)] == -7.0f);  // K-major padding groups 3, 4
    CHECK(s_k[size_t(r * 5 + 4)] == -7.0f);
  }
}

TEST_CASE("weight ref: 128x128 blocks, per-block scales, padding written 1.0f") {
  const int64_t n = 256, k = 384, ldw = 392, ldq = 400, ld_sw = 4;  // KB 3 -> one padding entry per block row
  std::vector<uint16_t> w(size_t(n * ldw), 0xffff);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      w[size_t(r * ldw + c)] = bf16_of(float((r * 7 + c * 3) % 19) - 9.0f + float(r / 128) * 0.5f);
  w[size_t(200 * ldw + 300)] = bf16_of(-1000.0f);  // block (1, 2) amax 1000
  w[size_t(10 * ldw + 130)] = 0x7fc1;              // block (0, 1) NaN
  std::vector<uint8_t> q(size_t(n * ldq), 0x5a);
  std::vector<float> sw(size_t(2 * ld_sw), -7.0f);
  ref::quantize_weight_fp8(w.data(), q.data(), sw.data(), WeightQuantShape{n, k, ldw, ldq, ld_sw});
  CHECK(sw[0] == 9.0f / 448.0f);               // block (0, 0): amax 9
  CHECK(std::isnan(sw[1]));                    // block (0, 1): NaN
  CHECK(sw[2] == 9.0f / 448.0f);
  CHECK(sw[3] == 1.0f);                        // padding
  CHECK(sw[4] == 9.5f / 448.0f);               // block (1, 0): amax 9.5
  CHECK(sw[6] == 1000.0f / 448.0f);
  CHECK(sw[7] == 1.0f);
  CHECK(q[size_t(200 * ldq + 300)] == 0xfe);   // the block's max encodes to -448
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 128; c < 256; ++c) CHECK(ref::e4m3_is_nan(q[size_t(r * ldq + c)]));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = k; c < ldq; ++c) CHECK(q[size_t(r * ldq + c)] == 0x5a);
  // Default strides: ld_sw = weight_scale_ld(k).
  std::vector<uint8_t> q2(size_t(n * k));
  std::vector<float> sw2(size_t(2 * weight_scale_ld(k)), -7.0f);
  std::vector<uint16_t> packed(size_t(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) packed[size_t(r * k + c)] = w[size_t(r * ldw + c)];
  ref::quantize_weight_fp8(packed.data(), q2.data(), sw2.data(), WeightQuantShape{n, k});
  for (size_t i = 0; i < sw2.size(); ++i) CHECK(std::memcmp(&sw2[i], &sw[i], 4) == 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) CHECK(q2[size_t(r * k + c)] == q[size_t(r * ldq + c)]);
}

TEST_CASE("quantization refs refuse broken shapes, naming the dimension") {
  uint16_t x = 0;
  uint8_t q = 0;
  float s = 0.0f;
  auto what = [](auto&& body) -> std::string {
    try {
      body();
    } catch (const pb::Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{1, 100, 0, 0, act_scales_mn_major(4)}); })
            .find("k = 100") != std::string::npos);
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{-1, 128, 0, 0, act_scales_mn_major(4)}); })
            .find("m = -1") != std::string::npos);
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{8, 128, 64, 0, act_scales_mn_major(8)}); })
            .find("ldx = 64") != std::string::npos);
  // MN-major with lds < m, or not a multiple of 4; K-major with s_row < k/128; neither.
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{8, 128, 0, 0, act_scales_mn_major(4)}); })
            .find("neither MN-major") != std::string::npos);
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{5, 128, 0, 0, act_scales_mn_major(6)}); })
            .find("neither MN-major") != std::string::npos);
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{5, 384, 0, 0, act_scales_k_major(2)}); })
            .find("s_row >= k/128 = 3") != std::string::npos);
  CHECK(what([&] { ref::quantize_act_fp8(&x, &q, &s, ActQuantShape{5, 384, 0, 0, Fp8ScaleLayout{2, 3}}); })
            .find("neither MN-major") != std::string::npos);
  CHECK(what([&] { ref::quantize_weight_fp8(&x, &q, &s, WeightQuantShape{100, 128}); }).find("n = 100") !=
        std::string::npos);
  CHECK(what([&] { ref::quantize_weight_fp8(&x, &q, &s, WeightQuantShape{128, 200}); }).find("k = 200") !=
        std::string::npos);
  CHECK(what([&] { ref::quantize_weight_fp8(&x, &q, &s, WeightQuantShape{128, 256, 0, 0, 1}); })
            .find("ld_sw = 1") != std::string::npos);
  // Empty shapes write nothing.
  CHECK_NOTHROW(ref::quantize_act_fp8(nullptr, nullptr, nullptr, ActQuantShape{0, 256, 0, 0, act_scales_mn_major(4)}));
  CHECK_NOTHROW(ref::quantize_weight_fp8(nullptr, nullptr, nullptr, WeightQuantShape{0, 256}));
}

// A second, outside oracle: cuda_fp8.hpp's host emulation of the conversion
// (the reference itself must not call it). NaN codes compare equal: the
// emulation canonicalizes a NaN's sign away.
TEST_CASE("e4m3 ref: agrees with cuda_fp8.hpp's host emulation across the f32 range") {
  int64_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
    float v;
    const uint32_t bits = uint32_t(u);
    std::memcpy(&v, &bits, 4);
    const uint8_t mine = ref::e4m3_encode(v);
    const uint8_t theirs = uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
    if (ref::e4m3_is_nan(mine) && ref::e4m3_is_nan(theirs)) continue;
    if (mine != theirs) {
      FAIL_CHECK("v = " << v << " (bits " << bits << "): ref " << hex(mine) << ", cuda_fp8.hpp " << hex(theirs));
      break;
    }
    ++checked;
  }
  CHECK(checked > 1000000);
}
