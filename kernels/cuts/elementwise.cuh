// Cut 5 (bf16 elementwise family): the device arithmetic that elementwise.cu
// and test_elementwise share, so that the GPU test checks the very code the
// cut kernels run. Contracts in elementwise.h.
//
// Plain forms (the contracts, used by every baseline):
//   sigmoid_f32(x) = 1.0f / (1.0f + expf(-x))
//   situ_s(g) = 4.0f * tanhf(g / 4.0f) * (1.0f / (1.0f + expf(-g)))
//   situ_t(u) = 25.0f * tanhf(u / 25.0f),   situ o = bf16(situ_s(g) * situ_t(u))
//
// Fast forms of the cuts, each bit-identical to its plain form:
//   sigmoid_n       1.0f / d through fast_math::reciprocal_rn_1_to_2p126 when
//                   all of the group's d = 1 + expf(-x) lie in [1, 2^126),
//                   the IEEE division otherwise.
//   situ tables     s and t depend on a 16-bit input each, so they are tables
//                   (built in shared memory by every block with the plain
//                   forms): s per sign over bf16 magnitudes 0x3780 (2^-16) ..
//                   0x42FF (127.5), clamped above (s is 4 for g >= 36.25 and
//                   -0 for g <= -89, up to +-inf); t over magnitudes 0x3780 ..
//                   0x437F (255), clamped above (t = +-25 from |u| >= 226),
//                   t(-u) = -t(u). Magnitudes below 2^-16 (zeros included)
//                   and NaNs are out of table: the kernel computes those
//                   vectors with the plain form. 35 KiB.
//   gate table      mul_sigmoid's bf16(sigmoid_f32(g)), per sign over the same
//                   magnitudes, clamped on both sides (0.5 below 2^-16, 1 from
//                   g >= 8, 0 from g <= -89); only NaN is out of table. 11.5 KiB.
// The tables replace ~75 (situ) / ~12 (mul_sigmoid) instructions per element
// with index arithmetic and one shared-memory load per looked-up value.
// test_elementwise compares every fast form with its plain form on all 65536
// bf16 inputs (situ_s_fast, situ_t_fast, gate_bits_fast, sigmoid_n in groups
// of 1 and 8), which proves the cuts' arithmetic for every input.
#pragma once

#ifdef __CUDACC__

#include <cuda_bf16.h>

#include <cstdint>

#include "fast_math.cuh"

namespace pb::elementwise_detail {

// ---- plain forms ----

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float situ_s(float g) {
  return 4.0f * tanhf(g / 4.0f) * (1.0f / (1.0f + expf(-g)));
}
__device__ __forceinline__ float situ_t(float u) { return 25.0f * tanhf(u / 25.0f); }

// The exact bf16 -> f32 widening of a 16-bit pattern.
__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

// ---- sigmoid, fast ----

// The plain IEEE division, out of line: the rare out-of-range group pays a call.
static __device__ __noinline__ float reciprocal_ieee(float d) { return 1.0f / d; }

// x[k] = sigmoid_f32(x[k]) for the N values, bit for bit.
template <int N>
__device__ __forceinline__ void sigmoid_n(float (&x)[N]) {
  float d[N];
  bool in_range = true;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    d[k] = 1.0f + expf(-x[k]);
    in_range = in_range & (d[k] < 0x1p126f);  // d >= 1 always; false for +inf and NaN
  }
  if (in_range) {
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = fast_math::reciprocal_rn_1_to_2p126(d[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = reciprocal_ieee(d[k]);
  }
}

// ---- situ tables ----

constexpr uint32_t kSituLo = 0x3780;                     // bf16 magnitude of 2^-16
constexpr uint32_t kSituNaN = 0x7f80;                    // magnitudes above: NaN
constexpr uint32_t kSituSLast = 0x42FF - kSituLo;        // s clamps at |g| = 127.5
constexpr uint32_t kSituSPerSign = kSituSLast + 1;       // 2944
constexpr uint32_t kSituTLast = 0x437F - kSituLo;        // t clamps at |u| = 255
constexpr uint32_t kSituTEntries = kSituTLast + 1;       // 3072
constexpr int kSituTableFloats = int(2 * kSituSPerSign + kSituTEntries);  // 8960: 35 KiB
constexpr int kSituTOffset = int(2 * kSituSPerSign);     // t follows s (+ then -)

// tab[kSituTableFloats]: s for g >= 0, s for g < 0, then t; threads tid of
// nthreads share the work (the caller synchronizes).
__device__ __forceinline__ void situ_fill_tables(float* tab, int tid, int nthreads) {
  for (int i = tid; i < kSituTableFloats; i += nthreads) {
    if (i < kSituTOffset) {
      const uint32_t sign = i < int(kSituSPerSign) ? 0u : 0x8000u;
      const uint32_t mag = kSituLo + uint32_t(sign ? i - int(kSituSPerSign) : i);
      tab[i] = situ_s(bf16_bits_to_f32(sign | mag));
    } else {
      tab[i] = situ_t(bf16_bits_to_f32(kSituLo + uint32_t(i - kSituTOffset)));
    }
  }
}

// True when the 16-bit pattern h is out of table (|h| < 2^-16, zeros, NaN).
__device__ __forceinline__ bool situ_out_of_table(uint32_t h) {
  return (h & 0x7fffu) - kSituLo > kSituNaN - kSituLo;  // unsigned: below kSituLo wraps high
}

// s and t of an in-table pattern h (any 16-bit h reads inside the table).
__device__ __forceinline__ float situ_s_lookup(const float* tab, uint32_t h) {
  uint32_t off = min((h & 0x7fffu) - kSituLo, kSituSLast);
  if (h & 0x8000u) off += kSituSPerSign;
  return tab[off];
}
__device__ __forceinline__ float situ_t_lookup(const float* tab, uint32_t h) {
  const uint32_t off = min((h & 0x7fffu) - kSituLo, kSituTLast);
  return __uint_as_float(__float_as_uint(tab[kSituTOffset + off]) ^ ((h & 0x8000u) << 16));
}

// The fast forms as the kernel uses them: table in range, plain form outside.
__device__ __forceinline__ float situ_s_fast(const float* tab, uint32_t h) {
  return situ_out_of_table(h) ? situ_s(bf16_bits_to_f32(h)) : situ_s_lookup(tab, h);
}
__device__ __forceinline__ float situ_t_fast(const float* tab, uint32_t h) {
  return situ_out_of_table(h) ? situ_t(bf16_bits_to_f32(h)) : situ_t_lookup(tab, h);
}

// ---- mul_sigmoid gate table ----
// gate(g) = bits of bf16(sigmoid_f32(g)), per sign over bf16 magnitudes
// kSituLo .. 0x42FF, clamped on both sides (gate is 0.5 below 2^-16, 1 from
// g >= 8, 0 from g <= -89); only NaN is out of table.
constexpr uint32_t kGateLast = 0x42FF - kSituLo;
constexpr uint32_t kGatePerSign = kGateLast + 1;           // 2944
constexpr int kGateTableHalves = int(2 * kGatePerSign);    // 5888 uint16: 11.5 KiB

__device__ __forceinline__ uint32_t gate_bits_plain(uint32_t h) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(sigmoid_f32(bf16_bits_to_f32(h))));
}

__device__ __forceinline__ void gate_fill_table(uint16_t* tab, int tid, int nthreads) {
  for (int i = tid; i < kGateTableHalves; i += nthreads) {
    const uint32_t sign = i < int(kGatePerSign) ? 0u : 0x8000u;
    const uint32_t mag = kSituLo + uint32_t(sign ? i - int(kGatePerSign) : i);
    tab[i] = uint16_t(gate_bits_plain(sign | mag));
  }
}

__device__ __forceinline__ bool gate_out_of_table(uint32_t h) { return (h & 0x7fffu) > kSituNaN; }

__device__ __forceinline__ uint32_t gate_lookup(const uint16_t* tab, uint32_t h) {
  uint32_t off = min(max(h & 0x7fffu, kSituLo), 0x42FFu) - kSituLo;
  if (h & 0x8000u) off += kGatePerSign;
  return tab[off];
}

__device__ __forceinline__ uint32_t gate_bits_fast(const uint16_t* tab, uint32_t h) {
  return gate_out_of_table(h) ? gate_bits_plain(h) : gate_lookup(tab, h);
}

}  // namespace pb::elementwise_detail

#endif  // __CUDACC__
