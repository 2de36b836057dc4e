// Host-side building blocks of the plain C++ reference implementations.
//
// bf16 values travel as their 16-bit patterns (uint16_t). The conversions
// reproduce the device's exactly:
//   bf16_to_f32      the bit shift the hardware does
//   f32_to_bf16_rn   __float2bfloat16_rn (cvt.rn.bf16.f32): round to nearest
//                    even, overflow to inf, NaN to the canonical 0x7fff
//
// Transcendentals. The kernels call CUDA's expf, tanhf, logf and rsqrtf; the
// host libm rounds differently in the last ulp, so the references take these
// four primitives from a Transcendentals object. HostMath uses libm (CPU
// tests, agreement within a bf16 ulp); the GPU tests pass a table filled with
// the device's own results for exactly the arguments the reference asks for
// (test/support/device_math.h), so every other rounding of a contract is checked
// bit for bit.
//
// Every reference is compiled without FMA contraction (-ffp-contract=off); an
// FMA in a contract is written std::fma here and __fmaf_rn in the kernel.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pb::ref {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// bf16 -> f32 -> op -> bf16: exact for + and * of two bf16 values (24 >= 2*8+2
// bits, so the double rounding is innocuous), which is what __hadd / __hmul do.
inline uint16_t bf16_add(uint16_t a, uint16_t b) {
  return f32_to_bf16_rn(bf16_to_f32(a) + bf16_to_f32(b));
}
inline uint16_t bf16_mul(uint16_t a, uint16_t b) {
  return f32_to_bf16_rn(bf16_to_f32(a) * bf16_to_f32(b));
}

struct Transcendentals {
  virtual ~Transcendentals() = default;
  virtual float exp(float x) const = 0;
  virtual float tanh(float x) const = 0;
  virtual float log(float x) const = 0;
  virtual float rsqrt(float x) const = 0;
};

struct HostMath final : Transcendentals {
  float exp(float x) const override { return std::exp(x); }
  float tanh(float x) const override { return std::tanh(x); }
  float log(float x) const override { return std::log(x); }
  float rsqrt(float x) const override { return 1.0f / std::sqrt(x); }
};

// 1 / (1 + exp(-x)) with IEEE division, as the kernels spell sigmoid in f32.
inline float sigmoid_f32(const Transcendentals& m, float x) { return 1.0f / (1.0f + m.exp(-x)); }

// ||a - b|| / ||b|| over two equally long bf16 arrays (in double).
inline double rel_l2_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / (den > 1e-300 ? den : 1e-300));
}

}  // namespace pb::ref
