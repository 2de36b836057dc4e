// lse_merge (cut 4): fold one attention window into the f32 log-sum-exp
// accumulator; o_finalize: cast the accumulator to bf16. docs/design.md §4 "Cut 4".
//
//   o_win    [t_q, h, 128] bf16   the window's attention output
//   lse_win  [h, t_q] f32         its log-sum-exp, natural log (base e), head-major
//   o_acc    [t_q, h, 128] f32    accumulator, updated in place
//   lse_acc  [h, t_q] f32         accumulator's log-sum-exp, natural log, updated in place
//
// Per row (q, head), la = lse_acc[head][q], lw = lse_win[head][q]:
//   reset:       acc = f32(o); lse_acc = lw                 (the first window initializes)
//   la == lw == -inf:  row untouched (acc and lse_acc keep their bits)
//   otherwise:   m = fmaxf(la, lw); merged = m + logf(expf(la - m) + expf(lw - m))
//                w_acc = expf(la - merged); w_win = expf(lw - merged)
//                acc = fma(f32(o), w_win, acc * w_acc)
//                      (__fmaf_rn(f32(o), w_win, __fmul_rn(acc, w_acc)) / std::fma)
//                lse_acc = merged
// "acc * expf(la - merged) + f32(o) * expf(lw - merged)" is spelled as one
// round-to-nearest FMA over a rounded product (the default-contracted form);
// max is fmaxf (a NaN lse loses to a number). Any other ±inf / NaN lse simply
// flows through this expression. Baseline, cut and reference are bit-identical.
//
// Variants (pb::Variant, one dispatch point: lse_merge):
//   baseline  a 128-thread block per (q, head) row, one element per thread,
//             2-byte loads; 1D grid of t_q * h blocks.
//   cut       16 lanes per row, each one 16-byte bf16 load and two float4
//             accumulator loads/stores. A warp owns a tile of 32 consecutive q
//             of one head; a 256-thread block walks 8 tiles (256 rows). Lane s
//             loads the lse pair of the tile's row s (one coalesced line per
//             tile), computes that row's weights once (the same expression) and
//             alone writes its merged lse; the row's 16 data lanes take the
//             weights by __shfl_sync. Eight row pairs' loads are in flight
//             before their math. o_win and o_acc must be 16-byte aligned.
//
// A window over part of the accumulator's rows (MergeRows): the window's n
// rows, o_win [n, h, 128] and lse_win [h, n], fold into accumulator rows
// [row0, row0 + n) of o_acc [acc_rows, h, 128] and lse_acc [h, acc_rows]; the
// per-row map above is unchanged (row q of the window meets accumulator row
// row0 + q). The t_q forms are {t_q, 0, t_q}. o_acc + row0 * h * 128 must be
// 16-byte aligned for the cut (it is when o_acc is).
//
//   o_finalize   o [n] bf16 = __float2bfloat16_rn(acc [n] f32)   (n = t_q * h * 128)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ref_math.h"
#include "variant.h"

namespace pb {

constexpr int kLseMergeHeadDim = 128;

struct MergeRows {
  int64_t n = 0;         // the window's rows
  int64_t row0 = 0;      // the accumulator row its row 0 merges into
  int64_t acc_rows = 0;  // the accumulator's rows (lse_acc's head stride)
};

void lse_merge_baseline(const __nv_bfloat16* o_win, const float* lse_win, float* o_acc,
                        float* lse_acc, MergeRows rows, int heads, bool reset, cudaStream_t stream);
void lse_merge_baseline(const __nv_bfloat16* o_win, const float* lse_win, float* o_acc,
                        float* lse_acc, int64_t t_q, int heads, bool reset, cudaStream_t stream);

void lse_merge_cut(const __nv_bfloat16* o_win, const float* lse_win, float* o_acc,
                   float* lse_acc, MergeRows rows, int heads, bool reset, cudaStream_t stream);
void lse_merge_cut(const __nv_bfloat16* o_win, const float* lse_win, float* o_acc,
                   float* lse_acc, int64_t t_q, int heads, bool reset, cudaStream_t stream);

// The one dispatch point on the cut switch.
void lse_merge(Variant v, const __nv_bfloat16* o_win, const float* lse_win, float* o_acc,
               float* lse_acc, MergeRows rows, int heads, bool reset, cudaStream_t stream);
void lse_merge(Variant v, const __nv_bfloat16* o_win, const float* lse_win, float* o_acc,
               float* lse_acc, int64_t t_q, int heads, bool reset, cudaStream_t stream);

// o [n] bf16 = bf16_rn(o_acc [n] f32). 16-byte path when both pointers are
// 16-byte aligned, scalar otherwise and for the tail.
void o_finalize(const float* o_acc, __nv_bfloat16* o, int64_t n, cudaStream_t stream);

namespace ref {
void lse_merge(const uint16_t* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               MergeRows rows, int heads, bool reset, const Transcendentals& math);
void lse_merge(const uint16_t* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               int64_t t_q, int heads, bool reset, const Transcendentals& math);
void o_finalize(const float* o_acc, uint16_t* o, int64_t n);
}  // namespace ref

}  // namespace pb
