// Cut 1 — land: f32 GEMM partials -> bf16. Contract and shapes in land.h.
//
//   p [rows, split_k, nt] f32 -> o [rows, n] bf16, columns [off, off + n)
//   acc = 0.0f; acc += p[r][s][off + c] for s ascending; o = __float2bfloat16_rn(acc)
//
// Variants (pb::land(Variant, ...) dispatches):
//   baseline  one output element per thread, 2-byte store; blockIdx.x walks
//             256-column tiles, blockIdx.y rows (grid-stride past 65535 rows).
//   cut       8 columns per thread: two float4 loads per slab, one 16-byte
//             store; grid-stride over rows x n/8 with a runtime row count.
//             Needs p, o 16-byte aligned and nt % 4 == off % 4 == n % 8 == 0;
//             anything else takes the scalar baseline kernel.
// Both sum the slabs in the same order into the same f32 register and round
// once with cvt.rn, so they are bit-identical to each other and to ref::land.
#include "land.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "check.h"
#include "launch.h"
#include "ptx.cuh"

namespace pb {

namespace {

using ptx::pack_bf16x2;

constexpr int kThreads = 256;
constexpr int kColumnsPerThread = 8;  // cut: two float4 loads per slab, one uint4 store
constexpr int64_t kMaxGridY = 65535;

// ---------------------------------------------------------------------------
// baseline: one output element per thread.
__global__ void __launch_bounds__(kThreads)
    land_baseline_kernel(const float* __restrict__ p, __nv_bfloat16* __restrict__ o, int64_t rows,
                         int split_k, int64_t nt, int64_t off, int64_t n) {
  const int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= n) return;
  const int64_t row_stride = int64_t(split_k) * nt;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* src = p + r * row_stride + off + c;
    float acc = 0.0f;
    for (int s = 0; s < split_k; ++s) acc += src[int64_t(s) * nt];
    o[r * n + c] = __float2bfloat16_rn(acc);
  }
}

// ---------------------------------------------------------------------------
// cut: 8 columns per thread, 16-byte accesses, grid-stride over rows x n/8.
__global__ void __launch_bounds__(kThreads)
    land_cut_kernel(const float* __restrict__ p, __nv_bfloat16* __restrict__ o, int64_t rows,
                    int split_k, int64_t nt, int64_t off, int64_t n) {
  const int64_t vecs_per_row = n / kColumnsPerThread;
  const int64_t total = rows * vecs_per_row;
  int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= total) return;
  // The flat index advances by a fixed stride; step (row, vec) by the same
  // amount instead of dividing every iteration.
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t stride_rows = stride / vecs_per_row;
  const int64_t stride_vecs = stride - stride_rows * vecs_per_row;
  int64_t row = idx / vecs_per_row;
  int64_t vec = idx - row * vecs_per_row;
  const int64_t row_stride = int64_t(split_k) * nt;

  for (; idx < total; idx += stride) {
    const float* src = p + row * row_stride + off + vec * kColumnsPerThread;
    float acc[kColumnsPerThread];
#pragma unroll
    for (int j = 0; j < kColumnsPerThread; ++j) acc[j] = 0.0f;
    // Not unrolled: few registers and full occupancy for split_k = 1, the
    // engine's only landing.
#pragma unroll 1
    for (int s = 0; s < split_k; ++s) {
      const float4 lo = *reinterpret_cast<const float4*>(src + int64_t(s) * nt);
      const float4 hi = *reinterpret_cast<const float4*>(src + int64_t(s) * nt + 4);
      acc[0] += lo.x;
      acc[1] += lo.y;
      acc[2] += lo.z;
      acc[3] += lo.w;
      acc[4] += hi.x;
      acc[5] += hi.y;
      acc[6] += hi.z;
      acc[7] += hi.w;
    }
    uint4 packed;
    packed.x = pack_bf16x2(acc[0], acc[1]);
    packed.y = pack_bf16x2(acc[2], acc[3]);
    packed.z = pack_bf16x2(acc[4], acc[5]);
    packed.w = pack_bf16x2(acc[6], acc[7]);
    *reinterpret_cast<uint4*>(o + row * n + vec * kColumnsPerThread) = packed;

    row += stride_rows;
    vec += stride_vecs;
    if (vec >= vecs_per_row) {
      vec -= vecs_per_row;
      ++row;
    }
  }
}

// ---------------------------------------------------------------------------
// launchers

// Checks the shape and the pointers; false when there is nothing to land.
bool check_land_call(const float* p, const __nv_bfloat16* o, const LandShape& s) {
  check_land_shape(s);
  if (s.rows == 0 || s.n == 0) return false;
  PB_CHECK(p != nullptr && o != nullptr, "land: null p or o with a non-empty shape");
  const size_t p_bytes = size_t(s.rows) * size_t(s.split_k) * size_t(s.nt) * 4;
  const size_t o_bytes = size_t(s.rows) * size_t(s.n) * 2;
  PB_CHECK(!overlaps(o, o_bytes, p, p_bytes), "land: o overlaps p");
  return true;
}

void launch_baseline(const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream) {
  const int64_t column_tiles = (s.n + kThreads - 1) / kThreads;
  PB_CHECK(column_tiles <= INT_MAX, "land_baseline: n too large for the grid");
  const dim3 grid(unsigned(column_tiles), unsigned(std::min(s.rows, kMaxGridY)));
  land_baseline_kernel<<<grid, kThreads, 0, stream>>>(p, o, s.rows, s.split_k, s.nt, s.off, s.n);
  PB_CUDA_LAUNCH();
}

}  // namespace

void land_baseline(const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream) {
  if (!check_land_call(p, o, s)) return;
  launch_baseline(p, o, s, stream);
}

void land_cut(const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream) {
  if (!check_land_call(p, o, s)) return;
  const bool vectorizable = aligned16(p) && aligned16(o) && s.nt % 4 == 0 && s.off % 4 == 0 &&
                            s.n % kColumnsPerThread == 0;
  if (!vectorizable) {
    launch_baseline(p, o, s, stream);
    return;
  }
  const int64_t vecs = s.rows * (s.n / kColumnsPerThread);
  const int blocks = resident_grid(land_cut_kernel, kThreads, (vecs + kThreads - 1) / kThreads);
  land_cut_kernel<<<blocks, kThreads, 0, stream>>>(p, o, s.rows, s.split_k, s.nt, s.off, s.n);
  PB_CUDA_LAUNCH();
}

void land(Variant v, const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream) {
  if (v == Variant::cut) land_cut(p, o, s, stream);
  else land_baseline(p, o, s, stream);
}

}  // namespace pb
