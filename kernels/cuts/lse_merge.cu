// lse_merge (cut 4) and o_finalize.
//
// Variants: baseline (128-thread block per row, one element per thread) and cut
// (16 lanes per row, 16-byte loads, a warp per 32-row tile of one head). Run
// either through pb::lse_merge(Variant, ...);
// the contract is in lse_merge.h:
//   o_win [t_q, h, 128] bf16, lse_win [h, t_q] f32 (natural log)
//   -> o_acc [t_q, h, 128] f32, lse_acc [h, t_q] f32, in place
//   m = fmaxf(la, lw); merged = m + logf(expf(la - m) + expf(lw - m));
//   acc = __fmaf_rn(f32(o), expf(lw - merged), __fmul_rn(acc, expf(la - merged))); lse = merged
//   la == lw == -inf: row untouched; reset: acc = f32(o), lse = lw.
// Over a row range (MergeRows): the launchers offset o_acc and lse_acc by row0,
// and the kernels read lse_acc with head stride acc_rows (lse_win's is t_q).
// Both variants call the same device functions (merge_weights, merge_element),
// compiled with --fmad=false and no fast-math, so they agree bit for bit.
//
// o_finalize: o [n] bf16 = __float2bfloat16_rn(o_acc [n] f32); one version.
#include "lse_merge.h"

#include <climits>
#include <cmath>
#include <cstdint>

#include "check.h"
#include "launch.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kHeadDim = kLseMergeHeadDim;

struct MergeWeights {
  float acc;     // expf(la - merged)
  float win;     // expf(lw - merged)
  float merged;  // the new lse
};

// True when the row keeps its bits: both sides -inf (no probability mass).
__device__ __forceinline__ bool merge_untouched(float la, float lw) {
  return la == -INFINITY && lw == -INFINITY;
}

__device__ __forceinline__ MergeWeights merge_weights(float la, float lw) {
  const float m = fmaxf(la, lw);
  const float merged = m + logf(expf(la - m) + expf(lw - m));
  return {expf(la - merged), expf(lw - merged), merged};
}

__device__ __forceinline__ float merge_element(float acc, float o, const MergeWeights& w) {
  return __fmaf_rn(o, w.win, __fmul_rn(acc, w.acc));
}

// ---------------------------------------------------------------------------
// Baseline: one 128-thread block per (q, head) row, one element per thread.
// Block b is row b = q * heads + head.
// ---------------------------------------------------------------------------

__global__ void __launch_bounds__(kHeadDim)
lse_merge_baseline_kernel(const bf16* __restrict__ o_win, const float* __restrict__ lse_win,
                          float* __restrict__ o_acc, float* __restrict__ lse_acc, int64_t t_q,
                          int64_t acc_stride, int heads, bool reset) {
  const int64_t row = blockIdx.x;
  const int64_t q = row / heads;
  const int64_t head = row - q * heads;
  const int64_t li = head * t_q + q;
  const int64_t la_i = head * acc_stride + q;
  const int64_t e = row * kHeadDim + threadIdx.x;
  const float lw = lse_win[li];
  const float o = __bfloat162float(o_win[e]);
  if (reset) {
    o_acc[e] = o;
    if (threadIdx.x == 0) lse_acc[la_i] = lw;
    return;
  }
  const float la = lse_acc[la_i];
  __syncthreads();  // every thread has read la before thread 0 overwrites it
  if (merge_untouched(la, lw)) return;
  const MergeWeights w = merge_weights(la, lw);
  o_acc[e] = merge_element(o_acc[e], o, w);
  if (threadIdx.x == 0) lse_acc[la_i] = w.merged;
}

// ---------------------------------------------------------------------------
// Cut: 16 lanes per row, 8 elements per lane (one 16-byte bf16 load, two
// float4 accumulator loads and stores); the two rows in flight in a warp are
// its two half-warps.
//
// Scheduling: a warp owns a tile of 32 rows, the 32 consecutive q
// (qb * 32 .. qb * 32 + 31) of one head; tile t is (qb, head) = (t / heads,
// t % heads), so the warps of a block (and neighbouring blocks) take
// neighbouring heads of the same q: adjacent 256 / 512-byte rows in memory. A
// 256-thread block walks 8 tiles (256 rows); the grid covers every tile once.
//   - lse: lane s loads the pair of the tile's slot s (lse_win / lse_acc are
//     [h, t_q], so the warp's 32 loads are one coalesced 128-byte line),
//     computes that row's weights once (merge_weights, the same expression),
//     and alone writes its merged lse (one coalesced 128-byte store per tile).
//     The data lanes take the two weights from lane s by __shfl_sync (bits
//     unchanged) and whether the row is touched from a __ballot_sync.
//   - data: 16 row pairs per tile, in batches of kCutPairs pairs whose loads
//     (kCutPairs x 48 bytes per lane) are all issued before any of their math;
//     batch 0's loads go out before the lse math, so its latency overlaps.
// The lse read and write of a row are by the same lane, and every lane writes
// only the o_acc columns it read: no barrier needed.
//
// For t_q < 32 most lanes of a tile idle (tiles never span heads).
// ---------------------------------------------------------------------------

constexpr int kCutLanes = 16;
constexpr int kCutCols = kHeadDim / kCutLanes;
constexpr int kCutThreads = 256;
constexpr int kCutWarps = kCutThreads / 32;
constexpr int kTileRows = 32;                 // rows per warp tile: one lse slot per lane
constexpr int kTilePairs = kTileRows / 2;     // row pairs per tile (one row per half-warp)
constexpr int kCutPairs = 8;                  // row pairs whose loads are in flight together
static_assert(kCutCols == 8, "lse_merge cut: one uint4 of bf16 per lane");
static_assert(2 * kCutLanes == 32, "lse_merge cut: a warp is two rows of 16 lanes");
static_assert(kTilePairs % kCutPairs == 0, "lse_merge cut: whole batches per tile");

// One lane's share of one row: 8 bf16 and their 8 f32 accumulators.
struct CutFrag {
  uint4 o;
  float4 a0, a1;
};

__device__ __forceinline__ float4 merge4(float4 a, float o0, float o1, float o2, float o3,
                                         const MergeWeights& w) {
  return make_float4(merge_element(a.x, o0, w), merge_element(a.y, o1, w),
                     merge_element(a.z, o2, w), merge_element(a.w, o3, w));
}

__global__ void __launch_bounds__(kCutThreads)
lse_merge_cut_kernel(const bf16* __restrict__ o_win, const float* __restrict__ lse_win,
                     float* __restrict__ o_acc, float* __restrict__ lse_acc, int64_t t_q,
                     int64_t acc_stride, int heads, bool reset) {
  const int64_t tiles = (t_q + kTileRows - 1) / kTileRows * heads;
  const int64_t t = int64_t(blockIdx.x) * kCutWarps + threadIdx.x / 32;
  if (t >= tiles) return;  // warp-uniform
  const int lane32 = threadIdx.x % 32;
  const int half = lane32 / kCutLanes;
  const int lane = lane32 % kCutLanes;

  // Tile (qb, head): slot s is q = qb * 32 + s, row q * heads + head; slots
  // [0, live) exist.
  const int64_t qb = t / heads;
  const int64_t head = t - qb * heads;
  const int64_t live = t_q - qb * kTileRows;
  const bool full = live >= kTileRows;
  // Element offset of this lane's columns in slot s: base + s * step.
  const int64_t base = (qb * kTileRows * heads + head) * kHeadDim + lane * kCutCols;
  const int64_t step = int64_t(heads) * kHeadDim;

  const bool mine_live = lane32 < live;
  const int64_t li = head * t_q + qb * kTileRows + lane32;  // this lane's slot's lse
  const int64_t la_i = head * acc_stride + qb * kTileRows + lane32;
  float lw = 0.0f, la = 0.0f;
  if (mine_live) {
    lw = lse_win[li];
    if (!reset) la = lse_acc[la_i];
  }

  MergeWeights w{0.0f, 0.0f, 0.0f};
  unsigned touched = 0;  // bit s: slot s is merged (not untouched)
#pragma unroll
  for (int b = 0; b < kTilePairs / kCutPairs; ++b) {
    CutFrag f[kCutPairs];
#pragma unroll
    for (int k = 0; k < kCutPairs; ++k) {
      const int s = 2 * (b * kCutPairs + k) + half;
      if (full || s < live) {
        const int64_t e = base + s * step;
        f[k].o = *reinterpret_cast<const uint4*>(o_win + e);
        if (!reset) {
          f[k].a0 = *reinterpret_cast<const float4*>(o_acc + e);
          f[k].a1 = *reinterpret_cast<const float4*>(o_acc + e + 4);
        }
      }
    }
    if (b == 0) {  // this lane's slot: weights once per row, its lse written once
      bool mine = false;
      if (mine_live) {
        if (reset) {
          lse_acc[la_i] = lw;
        } else if (!merge_untouched(la, lw)) {
          w = merge_weights(la, lw);
          lse_acc[la_i] = w.merged;
          mine = true;
        }
      }
      touched = __ballot_sync(0xffffffffu, mine);
    }
#pragma unroll
    for (int k = 0; k < kCutPairs; ++k) {
      const int s = 2 * (b * kCutPairs + k) + half;
      const MergeWeights ws{__shfl_sync(0xffffffffu, w.acc, s),
                            __shfl_sync(0xffffffffu, w.win, s), 0.0f};
      if (!(full || s < live)) continue;
      const int64_t e = base + s * step;
      float o[kCutCols];
      const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&f[k].o);
#pragma unroll
      for (int j = 0; j < kCutCols / 2; ++j) {
        const float2 v = __bfloat1622float2(o2[j]);
        o[2 * j] = v.x;
        o[2 * j + 1] = v.y;
      }
      if (reset) {
        *reinterpret_cast<float4*>(o_acc + e) = make_float4(o[0], o[1], o[2], o[3]);
        *reinterpret_cast<float4*>(o_acc + e + 4) = make_float4(o[4], o[5], o[6], o[7]);
      } else if ((touched >> s) & 1u) {
        *reinterpret_cast<float4*>(o_acc + e) = merge4(f[k].a0, o[0], o[1], o[2], o[3], ws);
        *reinterpret_cast<float4*>(o_acc + e + 4) = merge4(f[k].a1, o[4], o[5], o[6], o[7], ws);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// o_finalize: 8 elements per thread; two float4 loads and one 16-byte store
// when both pointers are 16-byte aligned, scalar otherwise and for the tail.
// ---------------------------------------------------------------------------

constexpr int kFinalizeThreads = 256;
constexpr int kFinalizeCols = 8;

__global__ void __launch_bounds__(kFinalizeThreads)
o_finalize_kernel(const float* __restrict__ acc, bf16* __restrict__ o, int64_t n, bool vec) {
  const int64_t i0 = (int64_t(blockIdx.x) * kFinalizeThreads + threadIdx.x) * kFinalizeCols;
  if (i0 >= n) return;
  if (vec && i0 + kFinalizeCols <= n) {
    const float4 lo = *reinterpret_cast<const float4*>(acc + i0);
    const float4 hi = *reinterpret_cast<const float4*>(acc + i0 + 4);
    uint4 out;
    *reinterpret_cast<__nv_bfloat162*>(&out.x) = __floats2bfloat162_rn(lo.x, lo.y);
    *reinterpret_cast<__nv_bfloat162*>(&out.y) = __floats2bfloat162_rn(lo.z, lo.w);
    *reinterpret_cast<__nv_bfloat162*>(&out.z) = __floats2bfloat162_rn(hi.x, hi.y);
    *reinterpret_cast<__nv_bfloat162*>(&out.w) = __floats2bfloat162_rn(hi.z, hi.w);
    *reinterpret_cast<uint4*>(o + i0) = out;
    return;
  }
  const int64_t end = i0 + kFinalizeCols < n ? i0 + kFinalizeCols : n;
  for (int64_t i = i0; i < end; ++i) o[i] = __float2bfloat16_rn(acc[i]);
}

// Checks the common contract; returns false for an empty shape.
bool check_merge_contract(const char* who, const bf16* o_win, const float* lse_win,
                          const float* o_acc, const float* lse_acc, MergeRows rows, int heads) {
  PB_CHECK(rows.n >= 0 && heads >= 0, std::string(who) + ": negative shape");
  PB_CHECK(rows.row0 >= 0 && rows.row0 + rows.n <= rows.acc_rows,
           std::string(who) + ": rows [row0, row0 + n) = [" + std::to_string(rows.row0) + ", " +
               std::to_string(rows.row0 + rows.n) + ") outside the accumulator's " + std::to_string(rows.acc_rows) +
               " rows");
  if (rows.n == 0 || heads == 0) return false;
  PB_CHECK(o_win && lse_win && o_acc && lse_acc, std::string(who) + ": null pointer");
  return true;
}

// The accumulator's first row of the range.
float* acc_rows_at(float* o_acc, MergeRows rows, int heads) { return o_acc + rows.row0 * heads * kHeadDim; }

}  // namespace

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------

void lse_merge_baseline(const bf16* o_win, const float* lse_win, float* o_acc, float* lse_acc,
                        MergeRows rows, int heads, bool reset, cudaStream_t stream) {
  if (!check_merge_contract("lse_merge_baseline", o_win, lse_win, o_acc, lse_acc, rows, heads)) return;
  PB_CHECK(rows.n <= INT_MAX / heads, "lse_merge_baseline: t_q * heads exceeds the 1D grid");
  const unsigned blocks = unsigned(rows.n * heads);
  lse_merge_baseline_kernel<<<blocks, kHeadDim, 0, stream>>>(o_win, lse_win, acc_rows_at(o_acc, rows, heads),
                                                             lse_acc + rows.row0, rows.n, rows.acc_rows, heads, reset);
  PB_CUDA_LAUNCH();
}

void lse_merge_baseline(const bf16* o_win, const float* lse_win, float* o_acc, float* lse_acc,
                        int64_t t_q, int heads, bool reset, cudaStream_t stream) {
  lse_merge_baseline(o_win, lse_win, o_acc, lse_acc, MergeRows{t_q, 0, t_q}, heads, reset, stream);
}

void lse_merge_cut(const bf16* o_win, const float* lse_win, float* o_acc, float* lse_acc,
                   MergeRows rows, int heads, bool reset, cudaStream_t stream) {
  if (!check_merge_contract("lse_merge_cut", o_win, lse_win, o_acc, lse_acc, rows, heads)) return;
  float* acc = acc_rows_at(o_acc, rows, heads);
  PB_CHECK(aligned_to(o_win, 16) && aligned_to(acc, 16),
           "lse_merge_cut: o_win and o_acc must be 16-byte aligned");
  const int64_t tiles = (rows.n + kTileRows - 1) / kTileRows * heads;
  const int64_t blocks = (tiles + kCutWarps - 1) / kCutWarps;
  PB_CHECK(blocks <= INT_MAX, "lse_merge_cut: grid too large");
  lse_merge_cut_kernel<<<unsigned(blocks), kCutThreads, 0, stream>>>(o_win, lse_win, acc, lse_acc + rows.row0, rows.n,
                                                                     rows.acc_rows, heads, reset);
  PB_CUDA_LAUNCH();
}

void lse_merge_cut(const bf16* o_win, const float* lse_win, float* o_acc, float* lse_acc,
                   int64_t t_q, int heads, bool reset, cudaStream_t stream) {
  lse_merge_cut(o_win, lse_win, o_acc, lse_acc, MergeRows{t_q, 0, t_q}, heads, reset, stream);
}

void o_finalize(const float* o_acc, bf16* o, int64_t n, cudaStream_t stream) {
  PB_CHECK(n >= 0, "o_finalize: negative size");
  if (n == 0) return;
  PB_CHECK(o_acc && o, "o_finalize: null pointer");
  const bool vec = aligned_to(o_acc, 16) && aligned_to(o, 16);
  const int64_t per_block = int64_t(kFinalizeThreads) * kFinalizeCols;
  const int64_t blocks = (n + per_block - 1) / per_block;
  PB_CHECK(blocks <= INT_MAX, "o_finalize: grid too large");
  o_finalize_kernel<<<unsigned(blocks), kFinalizeThreads, 0, stream>>>(o_acc, o, n, vec);
  PB_CUDA_LAUNCH();
}

// ---------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------

void lse_merge(Variant v, const bf16* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               MergeRows rows, int heads, bool reset, cudaStream_t stream) {
  if (v == Variant::cut) {
    lse_merge_cut(o_win, lse_win, o_acc, lse_acc, rows, heads, reset, stream);
  } else {
    lse_merge_baseline(o_win, lse_win, o_acc, lse_acc, rows, heads, reset, stream);
  }
}

void lse_merge(Variant v, const bf16* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               int64_t t_q, int heads, bool reset, cudaStream_t stream) {
  lse_merge(v, o_win, lse_win, o_acc, lse_acc, MergeRows{t_q, 0, t_q}, heads, reset, stream);
}

}  // namespace pb
