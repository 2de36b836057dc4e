// FP8 quantization kernels (DeepSeek-V3's recipe): bf16 -> e4m3 codes + f32
// scales. The encoding, the scale rule and the scale layouts are in fp8.h;
// the plain C++ references, bit for bit the same, are in quant_ref.h.
//
//   quantize_act_fp8     x [m, k] bf16 (row stride ldx) -> q [m, k] e4m3 (row stride ldq),
//                        one scale per row and 1×128 group along K at
//                        s[r * s_row + g * s_group] (MN-major or K-major, fp8.h)
//   quantize_weight_fp8  w [n, k] bf16 (row stride ldw) -> q [n, k] e4m3 (row stride ldq),
//                        one scale per 128×128 block at sw[nb * ld_sw + kb],
//                        padding kb in [k/128, ld_sw) written 1.0f
//
// Preconditions (checked by every launcher, a pb::Error naming the rule):
//   activations: m >= 0; k % 128 == 0 (k == 0: nothing to do); ldx >= k, ldq >= k
//     (0 = k); the scale layout is MN-major (s_row == 1, s_group >= m,
//     s_group % 4 == 0) or K-major (s_group == 1, s_row >= k/128);
//   weights: n % 128 == 0, k % 128 == 0 (each named when it fails); ldw, ldq >= k
//     (0 = k); ld_sw >= k/128 (0 = weight_scale_ld(k));
//   both: pointers non-null unless there is nothing to write; the output ranges
//     (codes, scales) overlap neither each other nor the input.
// m == 0 (n == 0, or k == 0) launches nothing.
//
// Activation kernel (the bandwidth-bound one): each warp takes 4 groups at a
// time, 8 lanes per group, 16 elements per lane (two 16-byte loads, one
// 16-byte store), amax by xor shuffles within the 8 lanes, grid-stride over
// the m * k/128 groups (int64). Groups are walked rows-fastest when the scales
// are MN-major (a warp's 4 scale stores are contiguous), groups-fastest when
// K-major. The vector path needs x and q 16-byte aligned, ldx % 8 == 0 and
// ldq % 16 == 0; anything else runs the same kernel with scalar loads and
// stores (same arithmetic, same results), never a refusal.
// Weight kernel (run once at weight fill; not tuned): one 256-thread block per
// 128×128 block, grid-stride over the blocks; 16-byte loads and 8-byte stores
// when w is 16-byte aligned, q 8-byte aligned, ldw % 8 == 0 and ldq % 8 == 0,
// scalar otherwise (same results).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp8.h"

namespace pb {

struct ActQuantShape {
  int64_t m = 0, k = 0;
  int64_t ldx = 0, ldq = 0;  // 0 = k
  Fp8ScaleLayout scales;     // act_scales_mn_major(lds) or act_scales_k_major(ld)
};

struct WeightQuantShape {
  int64_t n = 0, k = 0;
  int64_t ldw = 0, ldq = 0;  // 0 = k
  int64_t ld_sw = 0;         // 0 = weight_scale_ld(k)
};

// The shapes with their 0 = default strides filled in; throw pb::Error naming
// the broken precondition (the pointer checks are the launchers').
ActQuantShape checked_act_quant_shape(ActQuantShape s);
WeightQuantShape checked_weight_quant_shape(WeightQuantShape s);

// The checks of a producer's fp8 twin (cut quant_fuse: rmsnorm_fp8, situ_fp8,
// mul_sigmoid_fp8, o_norm_gate_fp8 write it beside or instead of their bf16
// rows): codes q [rows, k], one scale per row and 128 columns at
// scales[r * s_row + g * s_group]. rows, k >= 0; k % 128 == 0; the layout
// MN-major (s_row 1, s_group >= rows) or K-major (s_group 1, s_row >= k/128);
// then, unless there is nothing to write (false), q and scales non-null, q
// 8-byte and scales 4-byte aligned. pb::Error names `who` and the rule.
bool check_fp8_twin(const char* who, const void* q, const float* scales, Fp8ScaleLayout layout, int64_t rows,
                    int64_t k);

void quantize_act_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* s, const ActQuantShape& shape,
                      cudaStream_t stream);
void quantize_weight_fp8(const __nv_bfloat16* w, __nv_fp8_e4m3* q, float* sw, const WeightQuantShape& shape,
                         cudaStream_t stream);

}  // namespace pb
