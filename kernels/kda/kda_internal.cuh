// Internal to the KDA kernels (kda.cu, kda_prepare.cu, kda_walks.cu, kda_walk_wgmma.cu): the
// launch parameters of the prepare and of the state walks, their launchers, and the device
// helpers the prepare and the walks share. Callers use kda.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kda.h"
#include "kda_tiles.h"
#include "ptx.cuh"

namespace pb {

// kda_prepare's parameters: the inputs of tokens [0, tokens) and the workspace's products.
struct PrepParams {
  KdaInputs in;
  int64_t tokens;
  int64_t ws_chunks;  // the workspace's chunk capacity (layout stride)
  float scale;
  __nv_bfloat16 *w, *u, *khat, *qg, *aqk;
  float* gamma;
};

// A state walk's parameters: the workspace's chunk products of one segment and the walk's
// inputs and outputs.
struct StateParams {
  const __nv_bfloat16 *w, *u, *khat, *qg, *aqk;  // [H, ws_chunks, 64, 128] (aqk: [.., 64, 64])
  const float* gamma;                            // [H, ws_chunks, 128]
  int64_t ws_chunks, tokens;
  int chunks;
  bool package;         // rows [D (dv); M (dk)]; else the forward's S
  const float* s_in;    // forward: S_in or null
  __nv_bfloat16* o;     // forward: o or null
  int64_t o_ld;
  float* s_out;  // forward: S_out or null; package: D
  float* m_out;  // package: M
};

// One prepare grid over the chunks of p (p.tokens ≥ 1): kda_prepare.cu.
void launch_prepare(const PrepParams& p, int heads, cudaStream_t stream);
// KdaWalk::kHead and KdaWalk::kHalves (kda_walks.cu), forward or package.
void launch_walk_head(const StateParams& p, int heads, cudaStream_t stream);
void launch_walk_halves(const StateParams& p, int heads, cudaStream_t stream);
// KdaWalk::kWgmma (kda_walk_wgmma.cu): the forward walk on warpgroup MMA, one CTA per head.
// p.package must be false. Checks that the current device is sm_90 (wgmma).
void launch_walk_wgmma(const StateParams& p, int heads, cudaStream_t stream);

// ---- shared by the prepare and the walks (kda_prepare.cu, kda_walks.cu) ----
namespace kda_detail {

using bf16 = __nv_bfloat16;
constexpr int kD = kKdaHeadDim;   // 128
constexpr int kC = kKdaChunkLen;  // 64
constexpr int kThreads = 256;
static_assert(kD == 128 && kC == 64, "kda: the tiling assumes dk = dv = 128 and chunk 64");

// Swizzled smem tiles (byte offsets; row_bytes a multiple of 128): 16-byte chunk j of row r sits
// at chunk j ^ (r & 7) of the row, so the 8 rows an ldmatrix (or a fragment load) touches fall
// in distinct bank groups.
using kda_tiles::lane_k_then_rows;
using kda_tiles::lane_rows_then_k;
using kda_tiles::RowChunk;
using kda_tiles::swz;
// element (r, c) of a bf16 [rows][128] tile
__device__ __forceinline__ uint32_t at_h128(int r, int c) { return swz(r, c >> 3, 256) + ((c & 7) << 1); }

template <class T>
__device__ __forceinline__ T& sm(unsigned char* base, uint32_t off) {
  return *reinterpret_cast<T*>(base + off);
}

// cp.async a [64][kCols] bf16 tile (row r at g + r * ld) into a swizzled smem tile;
// rows >= valid are zero-filled.
// Thread tid moves chunk tid % (kCols / 8) of rows tid / (kCols / 8) + k · kRowStep.
template <int kCols, int kNT = kThreads>
__device__ __forceinline__ void load_tile(unsigned char* s, const bf16* g, int64_t ld, int valid, int tid) {
  constexpr int kChunks = kCols / 8, kRowBytes = kCols * 2, kRowStep = kNT / kChunks;
  static_assert(kNT % kChunks == 0 && kC % kRowStep == 0, "load_tile: threads must cover whole rows");
  const int c = tid % kChunks, r0 = tid / kChunks;
  const bf16* src = g + int64_t(r0) * ld + c * 8;
#pragma unroll
  for (int k = 0; k < kC / kRowStep; ++k) {
    const int r = r0 + k * kRowStep;
    const bool ok = r < valid;
    ptx::cp_async_16(ptx::smem_addr(s + swz(r, c, kRowBytes)), ok ? src + int64_t(k * kRowStep) * ld : g, ok);
  }
}

}  // namespace kda_detail
}  // namespace pb
