// FP8 quantization kernels. Contract in fp8.h, shapes and launch rules in quant.h.
//
//   quantize_act_fp8     x [m, k] bf16 -> q [m, k] e4m3 + s (1x128 groups, MN- or K-major)
//   quantize_weight_fp8  w [n, k] bf16 -> q [n, k] e4m3 + sw [n/128, ld_sw] (128x128 blocks)
//
// Both compute, per group / block, in f32:
//   amax  = NaN-propagating max of |x| (max.NaN.f32; the order does not matter)
//   scale = amax == 0 ? 1 : __fdiv_rn(amax, 448)
//   code  = cvt.rn.satfinite.e4m3x2.f32(__fdiv_rn(x, scale))
// which is ref::quantize_act_fp8 / ref::quantize_weight_fp8 bit for bit.
#include "quant.h"

#include <cuda_fp8.h>

#include <cstdint>

#include "check.h"
#include "launch.h"
#include "fp8_device.cuh"
#include "ptx.cuh"

namespace pb {

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kLanesPerGroup = 8;                        // activation: lanes sharing one 1x128 group
constexpr int kElemsPerLane = kFp8Group / kLanesPerGroup;  // 16: two 16-byte loads, one 16-byte store
constexpr int kGroupsPerWarp = 32 / kLanesPerGroup;      // 4
static_assert(kElemsPerLane == 16, "the activation kernel moves 16 elements per lane");

// Weight kernel: 16 lanes x 8 columns span the block's 128 columns; 16 rows per
// pass, 8 passes.
constexpr int kWeightColsPerThread = 8;
constexpr int kWeightThreadsPerRow = kFp8Group / kWeightColsPerThread;  // 16
constexpr int kWeightRowsPerPass = kThreads / kWeightThreadsPerRow;     // 16
constexpr int kWeightPasses = kFp8Group / kWeightRowsPerPass;           // 8
static_assert(kWeightPasses * kWeightRowsPerPass == kFp8Group, "the weight kernel covers a 128-row block");

// n consecutive bf16 -> f32 (exact); kVector: 16-byte loads (src 16-byte aligned).
template <bool kVector, int N>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* src, float (&v)[N]) {
  static_assert(N % 8 == 0, "whole 16-byte vectors");
  if constexpr (kVector) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const uint4 raw = reinterpret_cast<const uint4*>(src)[j];
      const float2 p0 = ptx::unpack_bf16x2(raw.x), p1 = ptx::unpack_bf16x2(raw.y);
      const float2 p2 = ptx::unpack_bf16x2(raw.z), p3 = ptx::unpack_bf16x2(raw.w);
      v[8 * j + 0] = p0.x;
      v[8 * j + 1] = p0.y;
      v[8 * j + 2] = p1.x;
      v[8 * j + 3] = p1.y;
      v[8 * j + 4] = p2.x;
      v[8 * j + 5] = p2.y;
      v[8 * j + 6] = p3.x;
      v[8 * j + 7] = p3.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = __bfloat162float(src[j]);
  }
}

// Encodes v / scale into N codes at dst (fp8_device.cuh's encode4); kVector: stores of N bytes at once
// (dst aligned to N bytes: 16 or 8).
template <bool kVector, int N>
__device__ __forceinline__ void store_codes(__nv_fp8_e4m3* dst, const float (&v)[N], float scale) {
  static_assert(N == 8 || N == 16, "8 or 16 codes");
  uint32_t words[N / 4];
#pragma unroll
  for (int j = 0; j < N / 4; ++j) words[j] = encode4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3], scale);
  if constexpr (kVector) {
    if constexpr (N == 16) *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
    else *reinterpret_cast<uint2*>(dst) = make_uint2(words[0], words[1]);
  } else {
    uint8_t* bytes = reinterpret_cast<uint8_t*>(dst);
#pragma unroll
    for (int j = 0; j < N; ++j) bytes[j] = uint8_t(words[j / 4] >> (8 * (j % 4)));
  }
}

// ---------------------------------------------------------------------------
// activations: 8 lanes per group, 4 groups per warp and step, grid-stride over
// the m * kbs groups. rows_fastest: group t is (r = t % m, g = t / m), else
// (r = t / kbs, g = t % kbs). The loop bound depends on the warp only, so the
// shuffles always run with the whole warp; lanes past the end compute on zeros
// and store nothing.
template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    quantize_act_kernel(const __nv_bfloat16* __restrict__ x, __nv_fp8_e4m3* __restrict__ q, float* __restrict__ s,
                        int64_t m, int64_t kbs, int64_t ldx, int64_t ldq, int64_t s_row, int64_t s_group,
                        bool rows_fastest) {
  const int lane = int(threadIdx.x) & 31;
  const int slot = lane / kLanesPerGroup;
  const int sub = lane % kLanesPerGroup;
  const int64_t total = m * kbs;
  const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + int64_t(threadIdx.x) / 32;
  const int64_t warp_stride = int64_t(gridDim.x) * kWarpsPerBlock * kGroupsPerWarp;
  for (int64_t first = warp * kGroupsPerWarp; first < total; first += warp_stride) {
    const int64_t t = first + slot;
    const bool valid = t < total;
    int64_t r = 0, g = 0;
    if (valid) {
      if (rows_fastest) {
        g = t / m;
        r = t - g * m;
      } else {
        r = t / kbs;
        g = t - r * kbs;
      }
    }
    const int64_t col = g * kFp8Group + sub * kElemsPerLane;
    float v[kElemsPerLane];
    if (valid) {
      load_bf16<kVector>(x + r * ldx + col, v);
    } else {
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) v[j] = 0.0f;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kElemsPerLane; ++j) amax = nan_max(amax, fabsf(v[j]));
#pragma unroll
    for (int off = kLanesPerGroup / 2; off >= 1; off /= 2)
      amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = group_scale(amax);
    if (valid) {
      store_codes<kVector>(q + r * ldq + col, v, scale);
      if (sub == 0) s[r * s_row + g * s_group] = scale;
    }
  }
}

// ---------------------------------------------------------------------------
// weights: one block per 128x128 block, grid-stride over the nbs * kbs blocks.
template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    quantize_weight_kernel(const __nv_bfloat16* __restrict__ w, __nv_fp8_e4m3* __restrict__ q,
                           float* __restrict__ sw, int64_t nbs, int64_t kbs, int64_t ldw, int64_t ldq,
                           int64_t ld_sw) {
  __shared__ float warp_amax[kWarpsPerBlock];
  const int tid = int(threadIdx.x);
  const int col = (tid % kWeightThreadsPerRow) * kWeightColsPerThread;
  const int row0 = tid / kWeightThreadsPerRow;
  for (int64_t blk = blockIdx.x; blk < nbs * kbs; blk += gridDim.x) {
    const int64_t nb = blk / kbs, kb = blk - nb * kbs;
    const __nv_bfloat16* src = w + nb * kFp8Group * ldw + kb * kFp8Group + col;
    __nv_fp8_e4m3* dst = q + nb * kFp8Group * ldq + kb * kFp8Group + col;
    float v[kWeightPasses][kWeightColsPerThread];
    float amax = 0.0f;
#pragma unroll
    for (int p = 0; p < kWeightPasses; ++p) {
      load_bf16<kVector>(src + int64_t(row0 + p * kWeightRowsPerPass) * ldw, v[p]);
#pragma unroll
      for (int j = 0; j < kWeightColsPerThread; ++j) amax = nan_max(amax, fabsf(v[p][j]));
    }
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (tid % 32 == 0) warp_amax[tid / 32] = amax;
    __syncthreads();
    amax = warp_amax[0];
#pragma unroll
    for (int i = 1; i < kWarpsPerBlock; ++i) amax = nan_max(amax, warp_amax[i]);
    __syncthreads();  // warp_amax is rewritten by the next block
    const float scale = group_scale(amax);
#pragma unroll
    for (int p = 0; p < kWeightPasses; ++p)
      store_codes<kVector>(dst + int64_t(row0 + p * kWeightRowsPerPass) * ldq, v[p], scale);
    if (tid == 0) {
      sw[nb * ld_sw + kb] = scale;
      if (kb == kbs - 1)
        for (int64_t pad = kbs; pad < ld_sw; ++pad) sw[nb * ld_sw + pad] = 1.0f;
    }
  }
}

// ---------------------------------------------------------------------------
// launchers

size_t span_bytes(int64_t rows, int64_t ld, int64_t cols, size_t elem) {
  return rows == 0 || cols == 0 ? 0 : (size_t(rows - 1) * size_t(ld) + size_t(cols)) * elem;
}

}  // namespace

void quantize_act_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* s, const ActQuantShape& shape,
                      cudaStream_t stream) {
  const ActQuantShape sh = checked_act_quant_shape(shape);
  const int64_t kbs = sh.k / kFp8Group;
  const int64_t groups = sh.m * kbs;
  if (groups == 0) return;
  PB_CHECK(x != nullptr && q != nullptr && s != nullptr, "quantize_act_fp8: null x, q or s with a non-empty shape");
  const size_t x_bytes = span_bytes(sh.m, sh.ldx, sh.k, 2);
  const size_t q_bytes = span_bytes(sh.m, sh.ldq, sh.k, 1);
  const int64_t s_last = (sh.m - 1) * sh.scales.s_row + (kbs - 1) * sh.scales.s_group;
  const size_t s_bytes = size_t(s_last + 1) * 4;
  PB_CHECK(!overlaps(q, q_bytes, x, x_bytes), "quantize_act_fp8: q overlaps x");
  PB_CHECK(!overlaps(s, s_bytes, x, x_bytes), "quantize_act_fp8: s overlaps x");
  PB_CHECK(!overlaps(s, s_bytes, q, q_bytes), "quantize_act_fp8: s overlaps q");
  PB_CHECK(aligned_to(s, 4), "quantize_act_fp8: s is not 4-byte aligned");

  const bool vector = aligned16(x) && aligned16(q) && sh.ldx % 8 == 0 && sh.ldq % 16 == 0;
  const bool rows_fastest = sh.scales.s_row == 1;  // MN-major: a warp's scale stores are contiguous
  const int64_t warps = (groups + kGroupsPerWarp - 1) / kGroupsPerWarp;
  const int64_t wanted = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (vector) {
    const int blocks = resident_grid(quantize_act_kernel<true>, kThreads, wanted);
    quantize_act_kernel<true><<<blocks, kThreads, 0, stream>>>(x, q, s, sh.m, kbs, sh.ldx, sh.ldq, sh.scales.s_row,
                                                               sh.scales.s_group, rows_fastest);
  } else {
    const int blocks = resident_grid(quantize_act_kernel<false>, kThreads, wanted);
    quantize_act_kernel<false><<<blocks, kThreads, 0, stream>>>(x, q, s, sh.m, kbs, sh.ldx, sh.ldq,
                                                                sh.scales.s_row, sh.scales.s_group, rows_fastest);
  }
  PB_CUDA_LAUNCH();
}

void quantize_weight_fp8(const __nv_bfloat16* w, __nv_fp8_e4m3* q, float* sw, const WeightQuantShape& shape,
                         cudaStream_t stream) {
  const WeightQuantShape sh = checked_weight_quant_shape(shape);
  const int64_t nbs = sh.n / kFp8Group, kbs = sh.k / kFp8Group;
  if (nbs == 0 || kbs == 0) return;
  PB_CHECK(w != nullptr && q != nullptr && sw != nullptr,
           "quantize_weight_fp8: null w, q or sw with a non-empty shape");
  const size_t w_bytes = span_bytes(sh.n, sh.ldw, sh.k, 2);
  const size_t q_bytes = span_bytes(sh.n, sh.ldq, sh.k, 1);
  const size_t s_bytes = size_t(nbs) * size_t(sh.ld_sw) * 4;
  PB_CHECK(!overlaps(q, q_bytes, w, w_bytes), "quantize_weight_fp8: q overlaps w");
  PB_CHECK(!overlaps(sw, s_bytes, w, w_bytes), "quantize_weight_fp8: sw overlaps w");
  PB_CHECK(!overlaps(sw, s_bytes, q, q_bytes), "quantize_weight_fp8: sw overlaps q");
  PB_CHECK(aligned_to(sw, 4), "quantize_weight_fp8: sw is not 4-byte aligned");

  const bool vector = aligned16(w) && aligned_to(q, 8) && sh.ldw % 8 == 0 && sh.ldq % 8 == 0;
  const int64_t blocks_wanted = nbs * kbs;
  if (vector) {
    const int blocks = resident_grid(quantize_weight_kernel<true>, kThreads, blocks_wanted);
    quantize_weight_kernel<true><<<blocks, kThreads, 0, stream>>>(w, q, sw, nbs, kbs, sh.ldw, sh.ldq, sh.ld_sw);
  } else {
    const int blocks = resident_grid(quantize_weight_kernel<false>, kThreads, blocks_wanted);
    quantize_weight_kernel<false><<<blocks, kThreads, 0, stream>>>(w, q, sw, nbs, kbs, sh.ldw, sh.ldq, sh.ld_sw);
  }
  PB_CUDA_LAUNCH();
}

}  // namespace pb
