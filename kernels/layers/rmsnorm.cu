#include "rmsnorm.h"

#include <cstdint>

#include "check.h"
#include "fp8_device.cuh"
#include "launch.h"
#include "quant.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;

// The butterfly over lanes, then the fixed tree over the 4 warps (see rmsnorm.h).
__device__ __forceinline__ float block_sum(float v, float* stage) {
  for (int s = 16; s >= 1; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) stage[warp] = v;
  __syncthreads();
  return (stage[0] + stage[1]) + (stage[2] + stage[3]);
}

// The fp8 twin of the output (rmsnorm_fp8), written beside or instead of it.
struct Fp8Out {
  __nv_fp8_e4m3* q = nullptr;  // [rows, n], row stride n
  float* s = nullptr;
  Fp8ScaleLayout layout;
};

template <bool kVector, bool kFp8>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const bf16* x, const float* __restrict__ gamma,
                                                           bf16* out, RmsNormShape s, float eps, Fp8Out f8) {
  __shared__ float stage[kThreads / 32];
  const bf16* xr = x + int64_t(blockIdx.x) * s.ldx;
  bf16* orow = out ? out + int64_t(blockIdx.x) * s.ldo : nullptr;
  const int64_t chunks = (s.n + 7) / 8;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < chunks; j += kThreads) {
    if (kVector) {
      const uint4 raw = *reinterpret_cast<const uint4*>(xr + 8 * j);
      const bf16* e = reinterpret_cast<const bf16*>(&raw);
      for (int i = 0; i < 8; ++i) {
        const float f = __bfloat162float(e[i]);
        ss = __fmaf_rn(f, f, ss);
      }
    } else {
      for (int64_t i = 8 * j; i < 8 * j + 8 && i < s.n; ++i) {
        const float f = __bfloat162float(xr[i]);
        ss = __fmaf_rn(f, f, ss);
      }
    }
  }
  const float scale = rsqrtf(__fdiv_rn(block_sum(ss, stage), float(s.n)) + eps);
  for (int64_t j = threadIdx.x; j < chunks; j += kThreads) {
    if (kVector) {
      const uint4 raw = *reinterpret_cast<const uint4*>(xr + 8 * j);
      const bf16* e = reinterpret_cast<const bf16*>(&raw);
      uint4 packed;
      bf16* o = reinterpret_cast<bf16*>(&packed);
      for (int i = 0; i < 8; ++i) {
        const float v = __fmul_rn(__bfloat162float(e[i]), scale);
        o[i] = __float2bfloat16_rn(gamma ? __fmul_rn(v, gamma[8 * j + i]) : v);
      }
      if (orow) *reinterpret_cast<uint4*>(orow + 8 * j) = packed;
      if constexpr (kFp8) {  // n % 128 == 0: chunks 16g .. 16g+15 are the 16 lanes of one half warp
        float f[8];
        for (int i = 0; i < 8; ++i) f[i] = __bfloat162float(o[i]);
        const float gs = half_warp_group_scale(f);
        *reinterpret_cast<uint2*>(f8.q + int64_t(blockIdx.x) * s.n + 8 * j) = encode8(f, gs);
        if (j % 16 == 0) f8.s[int64_t(blockIdx.x) * f8.layout.s_row + (j / 16) * f8.layout.s_group] = gs;
      }
    } else {
      for (int64_t i = 8 * j; i < 8 * j + 8 && i < s.n; ++i) {
        const float v = __fmul_rn(__bfloat162float(xr[i]), scale);
        orow[i] = __float2bfloat16_rn(gamma ? __fmul_rn(v, gamma[i]) : v);
      }
    }
  }
}

}  // namespace

void rmsnorm(const bf16* x, const float* gamma, bf16* out, RmsNormShape s, float eps, cudaStream_t stream) {
  if (s.ldx == 0) s.ldx = s.n;
  if (s.ldo == 0) s.ldo = s.n;
  PB_CHECK(s.rows >= 0 && s.n >= 1 && s.ldx >= s.n && s.ldo >= s.n, "rmsnorm: bad shape (rows >= 0, n >= 1, ld >= n)");
  PB_CHECK(s.rows <= INT32_MAX, "rmsnorm: rows above 2^31 - 1");
  PB_CHECK(eps >= 0, "rmsnorm: eps must be >= 0");
  if (s.rows == 0) return;
  PB_CHECK(x && out, "rmsnorm: null pointer");
  const bool vector = s.n % 8 == 0 && s.ldx % 8 == 0 && s.ldo % 8 == 0 && aligned16(x) && aligned16(out);
  if (vector) rmsnorm_kernel<true, false><<<unsigned(s.rows), kThreads, 0, stream>>>(x, gamma, out, s, eps, {});
  else rmsnorm_kernel<false, false><<<unsigned(s.rows), kThreads, 0, stream>>>(x, gamma, out, s, eps, {});
  PB_CUDA_LAUNCH();
}

void rmsnorm_fp8(const bf16* x, const float* gamma, bf16* out, __nv_fp8_e4m3* q, float* scales,
                 Fp8ScaleLayout layout, RmsNormShape s, float eps, cudaStream_t stream) {
  if (s.ldx == 0) s.ldx = s.n;
  if (s.ldo == 0) s.ldo = s.n;
  PB_CHECK(s.rows >= 0 && s.n >= 1 && s.ldx >= s.n && s.ldo >= s.n,
           "rmsnorm_fp8: bad shape (rows >= 0, n >= 1, ld >= n)");
  PB_CHECK(s.rows <= INT32_MAX, "rmsnorm_fp8: rows above 2^31 - 1");
  PB_CHECK(eps >= 0, "rmsnorm_fp8: eps must be >= 0");
  if (!check_fp8_twin("rmsnorm_fp8", q, scales, layout, s.rows, s.n)) return;
  PB_CHECK(x, "rmsnorm_fp8: null pointer");
  PB_CHECK(s.ldx % 8 == 0 && aligned16(x) && (!out || (s.ldo % 8 == 0 && aligned16(out))),
           "rmsnorm_fp8: x and out need 16-byte rows (ld % 8 == 0, 16-byte aligned)");
  rmsnorm_kernel<true, true><<<unsigned(s.rows), kThreads, 0, stream>>>(x, gamma, out, s, eps,
                                                                          Fp8Out{q, scales, layout});
  PB_CUDA_LAUNCH();
}

}  // namespace pb
