// Cut 5 — the bf16 elementwise family (docs/design.md §4): add2, mul_sigmoid,
// situ, o_norm_gate. Baseline, cut and reference agree bit for bit.
//
// Flat operands are [n] bf16 (any n >= 0; a [b, n] activation is passed as
// b * n elements). sigmoid_f32(x) = 1.0f / (1.0f + expf(-x)), f32(h) the exact
// bf16 -> f32 widening, bf16(f) = __float2bfloat16_rn(f).
//
//   add2(a, b)          o = __hadd(a, b)
//   mul_sigmoid(a, g)   o = __hmul(a, bf16(sigmoid_f32(f32(g))))
//   situ(g, u)          s = 4.0f * tanhf(f32(g) / 4.0f) * sigmoid_f32(f32(g));
//                       t = 25.0f * tanhf(f32(u) / 25.0f); o = bf16(s * t)
//   o_norm_gate(x [rows, heads, 128], g [rows, heads * 128], gamma [128] f32, eps)
//     per (row, head), row_heads = rows * heads of them:
//     v_i = f32(x_i) * f32(x_i); for s = 64, 32, 16, 8, 4, 2, 1: v_i += v_{i^s}
//     (all i at once); sum = v_0 (every v_i holds the same bits);
//     scale = rsqrtf(sum / 128.0f + eps);
//     o_i = __hmul(bf16(f32(x_i) * scale * gamma_i), bf16(sigmoid_f32(f32(g_i))))
//
// Baselines: one element per thread, 2-byte loads and stores (o_norm_gate:
// a 128-thread block per (row, head)). Cuts: 16 bytes per thread per operand,
// grid-stride, scalar tail; misaligned pointers take the baseline kernel.
// mul_sigmoid and situ cuts (n >= 2^20) read bf16(sigmoid(g)), s(g) and t(u)
// from shared-memory tables built with the plain forms (elementwise.cuh);
// o_norm_gate's cut puts 4 lanes x 32 columns on a (row, head).
// o may be exactly one of the inputs (in place); partial overlaps are refused.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp8.h"
#include "variant.h"

namespace pb {

namespace ref {
struct Transcendentals;
}

void add2_baseline(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* o, int64_t n,
                   cudaStream_t stream);
void add2_cut(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* o, int64_t n,
              cudaStream_t stream);
void add2(Variant v, const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* o, int64_t n,
          cudaStream_t stream);

void mul_sigmoid_baseline(const __nv_bfloat16* a, const __nv_bfloat16* g, __nv_bfloat16* o,
                          int64_t n, cudaStream_t stream);
void mul_sigmoid_cut(const __nv_bfloat16* a, const __nv_bfloat16* g, __nv_bfloat16* o, int64_t n,
                     cudaStream_t stream);
void mul_sigmoid(Variant v, const __nv_bfloat16* a, const __nv_bfloat16* g, __nv_bfloat16* o,
                 int64_t n, cudaStream_t stream);
// mul_sigmoid over [rows, width] with its fp8 twin, as situ_fp8 below.
void mul_sigmoid_fp8(const __nv_bfloat16* a, const __nv_bfloat16* g, __nv_bfloat16* o, __nv_fp8_e4m3* q,
                     float* scales, Fp8ScaleLayout layout, int64_t rows, int64_t width, cudaStream_t stream);

void situ_baseline(const __nv_bfloat16* g, const __nv_bfloat16* u, __nv_bfloat16* o, int64_t n,
                   cudaStream_t stream);
void situ_cut(const __nv_bfloat16* g, const __nv_bfloat16* u, __nv_bfloat16* o, int64_t n,
              cudaStream_t stream);
void situ(Variant v, const __nv_bfloat16* g, const __nv_bfloat16* u, __nv_bfloat16* o, int64_t n,
          cudaStream_t stream);
// situ over [rows, width] (width % 128 == 0) with, from the same registers, its
// fp8 twin (cut quant_fuse): codes q [rows, width] e4m3 and one f32 scale per
// row and 128 columns at scales[r * s_row + g * s_group], bit for bit situ()
// then quantize_act_fp8 (kernels/fp8/quant.h); o may be null (no bf16 wanted).
// g, u, o 16-byte aligned, q 8-byte.
void situ_fp8(const __nv_bfloat16* g, const __nv_bfloat16* u, __nv_bfloat16* o, __nv_fp8_e4m3* q, float* scales,
              Fp8ScaleLayout layout, int64_t rows, int64_t width, cudaStream_t stream);

// x [row_heads, 128] bf16, g [row_heads, 128] bf16, gamma [128] f32, o [row_heads, 128] bf16;
// eps >= 0 (K3: 1e-5).
void o_norm_gate_baseline(const __nv_bfloat16* x, const __nv_bfloat16* g, const float* gamma,
                          __nv_bfloat16* o, int64_t row_heads, float eps, cudaStream_t stream);
void o_norm_gate_cut(const __nv_bfloat16* x, const __nv_bfloat16* g, const float* gamma,
                     __nv_bfloat16* o, int64_t row_heads, float eps, cudaStream_t stream);
void o_norm_gate(Variant v, const __nv_bfloat16* x, const __nv_bfloat16* g, const float* gamma,
                 __nv_bfloat16* o, int64_t row_heads, float eps, cudaStream_t stream);
// o_norm_gate over rows x heads (row_heads = rows * heads) with its fp8 twin
// (cut quant_fuse): each (row, head) is one 128-column group of codes q
// [rows, heads * 128], its scale at scales[row * s_row + head * s_group]; bit
// for bit o_norm_gate() then quantize_act_fp8. o may be null. x, g, gamma, o
// 16-byte aligned, q 8-byte.
void o_norm_gate_fp8(const __nv_bfloat16* x, const __nv_bfloat16* g, const float* gamma, __nv_bfloat16* o,
                     __nv_fp8_e4m3* q, float* scales, Fp8ScaleLayout layout, int64_t rows, int64_t heads, float eps,
                     cudaStream_t stream);

// Plain C++ references on bf16 bit patterns. Every expf / tanhf / rsqrtf of
// the contract is taken from m (ref_math.h).
namespace ref {
void add2(const uint16_t* a, const uint16_t* b, uint16_t* o, int64_t n);
void mul_sigmoid(const uint16_t* a, const uint16_t* g, uint16_t* o, int64_t n,
                 const Transcendentals& m);
void situ(const uint16_t* g, const uint16_t* u, uint16_t* o, int64_t n, const Transcendentals& m);
// o_norm_gate's xor butterfly over 128 values, strides 64 .. 1, literally.
float butterfly_sum128(const float* v);
void o_norm_gate(const uint16_t* x, const uint16_t* g, const float* gamma, uint16_t* o,
                 int64_t row_heads, float eps, const Transcendentals& m);
}  // namespace ref

}  // namespace pb
