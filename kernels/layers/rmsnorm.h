// RMSNorm (docs/design.md §2: eps 1e-5, f32 accumulate) on bf16 rows, with an
// optional f32 gain. Not a cut: one implementation, a C++ reference beside it
// that follows the same order, so the test holds the kernel to it bit for bit.
//
//   x    [rows, n] bf16, row stride ldx        gamma [n] f32 or nullptr (= 1)
//   out  [rows, n] bf16, row stride ldo        (may equal x: in place)
//
// Per row, f32(h) the exact widening, fma the single-rounding fused multiply-add:
//   chunk j = elements [8j, 8j + 8) (the last one may be short); slot
//   s = 0 .. 127 owns the chunks j = s, s + 128, ...; slot s: ss_s = +0.0f;
//   for its chunks ascending, elements ascending: ss_s = fma(f32(x_i), f32(x_i), ss_s).
//   ss = the xor butterfly over 32 lanes (strides 16, 8, 4, 2, 1: v += v^s in
//   that order), then ((W0 + W1) + (W2 + W3)) over the 4 warps' lane-0 sums.
//   scale = rsqrtf(ss / float(n) + eps)   (IEEE division)
//   out_i = bf16((f32(x_i) * scale) * gamma_i)   (gamma == nullptr: bf16(f32(x_i) * scale))
// One 128-thread block per row; 16-byte loads and stores when n % 8 == 0 and
// x, out, ldx, ldo are 16-byte aligned (in elements: ldx % 8 == 0), scalar otherwise
// (the same order either way).
//
// rmsnorm_fp8 (cut quant_fuse, docs/cuts.md): the same rows and, from the same
// registers, their fp8 twin, codes q [rows, n] e4m3 (row stride n) with one f32
// scale per row and 128 columns at s[r * s_row + g * s_group]: bit for bit
// rmsnorm() then quantize_act_fp8 (kernels/fp8/quant.h). out may be null (no
// bf16 rows wanted). Needs n % 128 == 0 and the vector path (x, out 16-byte
// rows); the group of chunks 16g .. 16g + 15 is one half warp's (fp8_device.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp8.h"

namespace pb {

namespace ref {
struct Transcendentals;
}

struct RmsNormShape {
  int64_t rows = 0, n = 0;
  int64_t ldx = 0, ldo = 0;  // 0 = n
};

constexpr float kRmsNormEps = 1e-5f;

void rmsnorm(const __nv_bfloat16* x, const float* gamma, __nv_bfloat16* out, RmsNormShape s, float eps,
             cudaStream_t stream);
void rmsnorm_fp8(const __nv_bfloat16* x, const float* gamma, __nv_bfloat16* out, __nv_fp8_e4m3* q, float* scales,
                 Fp8ScaleLayout layout, RmsNormShape s, float eps, cudaStream_t stream);

namespace ref {
// The contract above on bf16 bit patterns; rsqrtf from m.
void rmsnorm(const uint16_t* x, const float* gamma, uint16_t* out, RmsNormShape s, float eps,
             const Transcendentals& m);
}  // namespace ref

}  // namespace pb
