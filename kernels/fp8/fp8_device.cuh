// The device side of fp8.h's group rule, shared by the quantization kernels
// (quant.cu) and the producers that write their output in fp8 themselves (cut
// quant_fuse: rmsnorm_fp8, situ_fp8): one implementation, so a fused producer
// is bit for bit its bf16 output quantized by quantize_act_fp8.
//   amax  = NaN-propagating max of |x| over the group (max.NaN.f32: the order
//           does not matter)
//   scale = amax == 0 ? 1 : __fdiv_rn(amax, 448)
//   code  = cvt.rn.satfinite.e4m3x2.f32(__fdiv_rn(x, scale))
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "fp8.h"

namespace pb {

__device__ __forceinline__ float nan_max(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

__device__ __forceinline__ float group_scale(float amax) {
  return amax == 0.0f ? 1.0f : __fdiv_rn(amax, kE4m3Max);
}

// Four codes, element 0 in the low byte.
__device__ __forceinline__ uint32_t encode4(float a, float b, float c, float d, float scale) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, scale), __fdiv_rn(b, scale)),
                                               __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(c, scale), __fdiv_rn(d, scale)),
                                               __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// A 128-column group held 8 values a lane by 16 consecutive lanes of a half
// warp (both halves of the warp in step, or one half alone): the group's scale,
// reduced over the half warp, and this lane's 8 codes (element 0 in the low
// byte of .x).
__device__ __forceinline__ float half_warp_group_scale(const float (&v)[8]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = nan_max(amax, fabsf(v[i]));
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
#pragma unroll
  for (int off = 8; off >= 1; off /= 2) amax = nan_max(amax, __shfl_xor_sync(mask, amax, off));
  return group_scale(amax);
}

__device__ __forceinline__ uint2 encode8(const float (&v)[8], float scale) {
  return make_uint2(encode4(v[0], v[1], v[2], v[3], scale), encode4(v[4], v[5], v[6], v[7], scale));
}

}  // namespace pb
