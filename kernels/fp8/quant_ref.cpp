// Plain C++ references of the FP8 quantization kernels (quant.h, contract in
// fp8.h) and the shape checks their launchers share. The e4m3 encoder is
// written from the format with integer arithmetic on the f32 bits; nothing
// from cuda_fp8.h is called.
#include "quant_ref.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "check.h"
#include "launch.h"
#include "ref_math.h"

namespace pb {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// (rows - 1) * ld + cols fits in int64 (a buffer's extent in elements).
bool extent_fits(int64_t rows, int64_t ld, int64_t cols) {
  return rows <= 1 || ld <= (std::numeric_limits<int64_t>::max() - cols) / (rows - 1);
}

}  // namespace

bool check_fp8_twin(const char* who, const void* q, const float* scales, Fp8ScaleLayout layout, int64_t rows,
                    int64_t k) {
  const std::string name(who);
  PB_CHECK(rows >= 0 && k >= 0, name + ": negative shape");
  PB_CHECK(k % kFp8Group == 0, name + ": width " + str(k) + " is not a multiple of 128");
  const int64_t kb = k / kFp8Group;
  PB_CHECK((layout.s_row == 1 && layout.s_group >= rows) || (layout.s_group == 1 && layout.s_row >= kb),
           name + ": the scale layout is neither MN-major (s_group >= rows) nor K-major (s_row >= width/128)");
  if (rows == 0 || k == 0) return false;
  PB_CHECK(q && scales, name + ": null pointer");
  PB_CHECK(aligned_to(q, 8) && aligned_to(scales, 4), name + ": q needs 8-byte alignment, scales 4-byte");
  return true;
}

ActQuantShape checked_act_quant_shape(ActQuantShape s) {
  const char* who = "quantize_act_fp8: ";
  PB_CHECK(s.m >= 0, who + std::string("m = ") + str(s.m) + " is negative");
  PB_CHECK(s.k >= 0 && s.k % kFp8Group == 0,
           who + std::string("k = ") + str(s.k) + " is not a multiple of 128 (one scale per 1x128 group)");
  if (s.ldx == 0) s.ldx = s.k;
  if (s.ldq == 0) s.ldq = s.k;
  PB_CHECK(s.ldx >= s.k, who + std::string("ldx = ") + str(s.ldx) + " is below k = " + str(s.k));
  PB_CHECK(s.ldq >= s.k, who + std::string("ldq = ") + str(s.ldq) + " is below k = " + str(s.k));
  const int64_t kb = s.k / kFp8Group;
  const Fp8ScaleLayout& l = s.scales;
  const bool mn_major = l.s_row == 1 && l.s_group >= s.m && l.s_group >= 1 && l.s_group % 4 == 0;
  const bool k_major = l.s_group == 1 && l.s_row >= kb && l.s_row >= 1;
  PB_CHECK(mn_major || k_major,
           who + std::string("scale layout s_row = ") + str(l.s_row) + ", s_group = " + str(l.s_group) +
               " is neither MN-major (s_row 1, s_group >= m = " + str(s.m) +
               " and a multiple of 4) nor K-major (s_group 1, s_row >= k/128 = " + str(kb) + ")");
  PB_CHECK(extent_fits(s.m, s.ldx, s.k) && extent_fits(s.m, s.ldq, s.k) &&
               extent_fits(s.m, l.s_row, 1 + (kb > 0 ? (kb - 1) * l.s_group : 0)),
           who + std::string("the buffers' extents overflow int64"));
  return s;
}

WeightQuantShape checked_weight_quant_shape(WeightQuantShape s) {
  const char* who = "quantize_weight_fp8: ";
  PB_CHECK(s.n >= 0 && s.n % kFp8Group == 0,
           who + std::string("n = ") + str(s.n) + " is not a multiple of 128 (128x128 scale blocks)");
  PB_CHECK(s.k >= 0 && s.k % kFp8Group == 0,
           who + std::string("k = ") + str(s.k) + " is not a multiple of 128 (128x128 scale blocks)");
  if (s.ldw == 0) s.ldw = s.k;
  if (s.ldq == 0) s.ldq = s.k;
  if (s.ld_sw == 0) s.ld_sw = weight_scale_ld(s.k);
  PB_CHECK(s.ldw >= s.k, who + std::string("ldw = ") + str(s.ldw) + " is below k = " + str(s.k));
  PB_CHECK(s.ldq >= s.k, who + std::string("ldq = ") + str(s.ldq) + " is below k = " + str(s.k));
  PB_CHECK(s.ld_sw >= s.k / kFp8Group,
           who + std::string("ld_sw = ") + str(s.ld_sw) + " is below k/128 = " + str(s.k / kFp8Group));
  PB_CHECK(extent_fits(s.n, s.ldw, s.k) && extent_fits(s.n, s.ldq, s.k) &&
               extent_fits(s.n / kFp8Group, s.ld_sw, s.ld_sw),
           who + std::string("the buffers' extents overflow int64"));
  return s;
}

namespace ref {

namespace {

float nan_f32() { return std::numeric_limits<float>::quiet_NaN(); }

// max(a, b) that returns NaN when either is NaN.
float nan_max(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return nan_f32();
  return a > b ? a : b;
}

}  // namespace

uint8_t e4m3_encode(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);  // NaN
  if (a > 0x43e00000u) return uint8_t(sign | 0x7eu);  // |v| > 448 = 0x43e00000, inf included: ±448
  // |v| = mant * 2^(exp2 - 23): exp2 the unbiased exponent of the leading bit
  // (f32 subnormals and zero: mant without the hidden bit, exp2 = -126).
  const int biased = int(a >> 23);
  const uint32_t mant = biased == 0 ? (a & 0x7fffffu) : ((a & 0x7fffffu) | 0x800000u);
  const int exp2 = biased == 0 ? -126 : biased - 127;
  // e4m3 spacing around |v|: 2^(e - 3) in the normal binade 2^e (e >= -6),
  // 2^-9 below 2^-6 (subnormals).
  const int e = exp2 >= -6 ? exp2 : -6;
  const int shift = (e - 3) - (exp2 - 23);  // >= 20: mant >> shift counts the spacings
  uint32_t steps = 0;
  if (shift < 32) {
    steps = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (steps & 1u))) ++steps;  // round to nearest, ties to even
  }  // else: mant < 2^24 <= half a spacing, rounds to 0
  // In the normal range steps is 8 .. 16 (1.mmm in eighths; 16 carries into the
  // next binade), below it 0 .. 8 (8 = the smallest normal 2^-6): the codes are
  // contiguous, so the code is the binade's first code plus the steps above it.
  const uint32_t first = exp2 >= -6 ? uint32_t(e + 6) << 3 : 0u;
  return uint8_t(sign | (first + steps));
}

float e4m3_value(uint8_t code) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int e = (code >> 3) & 0xf, m = code & 0x7;
  if (e == 15 && m == 7) return nan_f32();
  if (e == 0) return sign * std::ldexp(float(m), -9);  // subnormal: m * 2^-9
  return sign * std::ldexp(float(8 + m), e - 10);      // (1 + m/8) * 2^(e-7)
}

float fp8_scale(float amax) { return amax == 0.0f ? 1.0f : amax / kE4m3Max; }

void quantize_act_fp8(const uint16_t* x, uint8_t* q, float* s, const ActQuantShape& shape) {
  const ActQuantShape sh = checked_act_quant_shape(shape);
  const int64_t groups = sh.k / kFp8Group;
  for (int64_t r = 0; r < sh.m; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* src = x + r * sh.ldx + g * kFp8Group;
      uint8_t* dst = q + r * sh.ldq + g * kFp8Group;
      float amax = 0.0f;
      for (int l = 0; l < kFp8Group; ++l) amax = nan_max(amax, std::fabs(bf16_to_f32(src[l])));
      const float scale = fp8_scale(amax);
      s[r * sh.scales.s_row + g * sh.scales.s_group] = scale;
      for (int l = 0; l < kFp8Group; ++l) dst[l] = e4m3_encode(bf16_to_f32(src[l]) / scale);
    }
  }
}

void quantize_weight_fp8(const uint16_t* w, uint8_t* q, float* sw, const WeightQuantShape& shape) {
  const WeightQuantShape sh = checked_weight_quant_shape(shape);
  const int64_t nbs = sh.n / kFp8Group, kbs = sh.k / kFp8Group;
  for (int64_t nb = 0; nb < nbs; ++nb) {
    for (int64_t kb = 0; kb < kbs; ++kb) {
      float amax = 0.0f;
      for (int64_t i = 0; i < kFp8Group; ++i) {
        const uint16_t* src = w + (nb * kFp8Group + i) * sh.ldw + kb * kFp8Group;
        for (int l = 0; l < kFp8Group; ++l) amax = nan_max(amax, std::fabs(bf16_to_f32(src[l])));
      }
      const float scale = fp8_scale(amax);
      sw[nb * sh.ld_sw + kb] = scale;
      for (int64_t i = 0; i < kFp8Group; ++i) {
        const uint16_t* src = w + (nb * kFp8Group + i) * sh.ldw + kb * kFp8Group;
        uint8_t* dst = q + (nb * kFp8Group + i) * sh.ldq + kb * kFp8Group;
        for (int l = 0; l < kFp8Group; ++l) dst[l] = e4m3_encode(bf16_to_f32(src[l]) / scale);
      }
    }
    for (int64_t kb = kbs; kb < sh.ld_sw; ++kb) sw[nb * sh.ld_sw + kb] = 1.0f;
  }
}

}  // namespace ref
}  // namespace pb
