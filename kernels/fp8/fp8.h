// FP8 block quantization, DeepSeek-V3's recipe (arXiv 2412.19437 §3.3): the
// e4m3 encoding and the scale layouts shared by the quantization kernels
// (quant.h), their C++ references (quant_ref.h) and the cuBLASLt block-scaled
// GEMM (gemm_fp8.h). Host and device.
//
// ---- Element types --------------------------------------------------------
//   codes   __nv_fp8_e4m3, 1 byte: sign, 4 exponent bits (bias 7), 3 mantissa bits
//   scales  f32
// A code c stands for value(c) · scale, value(c) the exact e4m3 value
// (ref::e4m3_value): normals 2^(e-7)·(1 + m/8), subnormals m·2^-9 (e = 0),
// 0x7F / 0xFF NaN (e4m3 has no infinities), largest finite ±448 (0x7E / 0xFE).
//
// ---- e4m3 encoding of an f32 value v: e4m3(v) -----------------------------
//   round to nearest even onto the e4m3 grid (bias 7, subnormals in 2^-9 steps,
//   max finite 448), saturating: |v| > 448 (±inf included) -> ±448 (finite);
//   NaN -> NaN (0x7F / 0xFF with sign); ±0 keep their sign, and so does a value
//   that rounds to zero (-2^-11 -> 0x80).
//   This is __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3) on the device
//   (cvt.rn.satfinite.e4m3x2.f32). Which of the two NaN codes comes out is not
//   part of the contract (the device's cvt may not keep a NaN's sign): tests
//   compare NaN codes as equal.
//
// ---- Scale of a group (1×128 activations) or block (128×128 weights) ------
//   amax  = max |x| over the group in f32 (bf16 -> f32 is exact), NaN-propagating:
//           any NaN in the group makes amax NaN
//   scale = amax == 0 ? 1.0f : amax / 448.0f          (f32 IEEE division, RN)
//   code  = e4m3(x / scale)                           (f32 IEEE division, RN)
// So: an all-zero group (±0) has scale 1 and ±0 codes; a NaN group has scale
// NaN and every code NaN; a group holding ±inf has scale inf, its finite
// elements encode to ±0 and its ±inf elements (inf/inf) to NaN; the largest
// finite bf16 (0x7F7F, 3.39e38) works: scale 7.57e35, codes ±448 at the max.
//
// ---- Activation scales: x [m, k] in 1×128 groups along K ------------------
//   KB = k / 128 groups per row; the scale of row r, group g (columns
//   128g .. 128g+127) sits at s[r * s_row + g * s_group]:
//     MN-major (token-contiguous; what cuBLASLt's VEC128_32F reads for the
//       operand that holds the tokens): s_row = 1, s_group = lds, lds >= m,
//       lds % 4 == 0. The GEMM (gemm_fp8.h) wants lds == act_scale_ld(m) =
//       m rounded up to a multiple of 4.
//     K-major (one row's scales contiguous): s_row >= KB, s_group = 1.
//
// ---- Weight scales: w [n, k] in 128×128 blocks -----------------------------
//   NB = n / 128, KB = k / 128; block (nb, kb) = rows 128nb .., columns 128kb ..;
//   its scale sits at sw[nb * ld_sw + kb], ld_sw >= KB (K-major). cuBLASLt's
//   BLK128x128_32F reads exactly ld_sw = weight_scale_ld(k) = KB rounded up to
//   a multiple of 4; the entries kb in [KB, ld_sw) are padding, written 1.0f.
//   A band of weight rows [n0, n0 + nb) with n0 % 128 == 0 is the block rows
//   [n0/128, ..): codes w + n0 * ldw, scales sw + (n0 / 128) * ld_sw.
//
// All indexing is int64 (K3: n up to 67584, k up to 33792, m up to 2^20).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#if defined(__CUDACC__)
#define PB_FP8_HD __host__ __device__
#else
#define PB_FP8_HD
#endif

namespace pb {

constexpr int kFp8Group = 128;          // elements per activation group, block edge of weights
constexpr float kE4m3Max = 448.0f;      // largest finite e4m3

// Where one activation row's and one group's scales step (s[r * s_row + g * s_group]).
struct Fp8ScaleLayout {
  int64_t s_row = 0;
  int64_t s_group = 0;
};

// s[g * lds + r]: token-contiguous, what cuBLASLt's VEC128_32F reads (lds = act_scale_ld(m)).
PB_FP8_HD inline Fp8ScaleLayout act_scales_mn_major(int64_t lds) { return Fp8ScaleLayout{1, lds}; }
// s[r * ld + g]: one row's scales contiguous (ld >= k / 128).
PB_FP8_HD inline Fp8ScaleLayout act_scales_k_major(int64_t ld) { return Fp8ScaleLayout{ld, 1}; }

// m rounded up to a multiple of 4: the group stride cuBLASLt's VEC128_32F reads
// activation scales with (MN-major), and so the lds the GEMM requires.
PB_FP8_HD inline int64_t act_scale_ld(int64_t m) { return (m + 3) / 4 * 4; }

// k / 128 rounded up to a multiple of 4: the block-row stride cuBLASLt's
// BLK128x128_32F reads weight scales with.
PB_FP8_HD inline int64_t weight_scale_ld(int64_t k) { return ((k + kFp8Group - 1) / kFp8Group + 3) / 4 * 4; }

}  // namespace pb
