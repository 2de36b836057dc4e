// AttnRes: attention residuals over block snapshots (docs/design.md §2.1), a
// switchable cut. Baseline, cut and reference agree bit for bit on every input.
//
//   snap     [rows, snap_blocks, hidden] bf16   block-interleaved per row; blocks 0 .. nb-1 used
//   partial  [rows, hidden] bf16                the current partial sum P
//   sw       [hidden] f32                       the call site's score weights
//   scores   [rows, nb + 1] f32                 written (one per candidate)
//   out      [rows, hidden] bf16                written
//
// Per row, C = nb + 1 candidates, c ascending: x_c = snap[row][c] for c < nb,
// x_nb = partial[row]. f32(h) is the exact bf16 -> f32 widening, fma the
// single-rounding fused multiply-add (__fmaf_rn / std::fma), bf16(f) =
// __float2bfloat16_rn(f).
//
// Scores, the reduction order (both sums of every candidate):
//   chunk j = elements [8j, 8j + 8), j = 0 .. hidden/8 - 1; slot s = 0 .. 255
//   owns the chunks j = s, s + 256, s + 512, ... (j % 256 == s).
//   Slot s: ss_s = +0.0f, dot_s = +0.0f; for its chunks in ascending j, for
//   i = 8j .. 8j + 7 ascending: ss_s = fma(f32(x_i), f32(x_i), ss_s);
//   dot_s = fma(f32(x_i), sw_i, dot_s). A slot with no chunk keeps +0.0f.
//   Across slots a balanced pairwise tree in slot order (tree256):
//   for w = 1, 2, 4, ..., 128: v[s] = v[s] + v[s + w] for s = 0, 2w, 4w, ...;
//   the sum is v[0]. (On the device: xor butterfly over lanes 1, 2, 4, 8, 16,
//   then ((W0 + W1) + (W2 + W3)) + ((W4 + W5) + (W6 + W7)) over the 8 warps.)
//   ss = tree256(ss_s), dot = tree256(dot_s);
//   s_c = dot * rsqrtf(ss / float(hidden) + eps)
//   (= sum_i x_i * rsqrt(mean(x^2) + eps) * sw_i, the weightless RMS norm
//   factored out of the dot; / is IEEE division).
// Softmax over the C scores:
//   m = s_0; for c = 1 .. C-1: m = s_c > m ? s_c : m;
//   e_c = expf(s_c - m); sum = +0.0f; for c ascending: sum = sum + e_c;
//   p_c = e_c / sum (IEEE division).
// Mix, per element i:
//   acc = +0.0f; for c ascending: acc = fma(p_c, f32(x_c,i), acc); out_i = bf16(acc).
//
// Variants (pb::Variant, one dispatch point: attnres):
//   baseline  two launches, 2-byte loads (the engine's shape).
//             scores: grid (rows, C), a 256-thread block per (row, candidate),
//             thread t is slot t and walks its chunks element by element.
//             mix: grid (rows, ceil(hidden / 256)), one element per thread,
//             each thread recomputes the softmax from the row's C scores.
//   cut       one fused launch (the two_pass kernel): a 256-thread block per
//             row (thread t = slot t), grid-stride over ceil(rows / 2) blocks,
//             B = 4 blocks per SM at C <= 3, 2 at C = 4 .. 9 (the register
//             budget of the kernel's launch bounds). Candidates c < S (as many
//             as 1 / B of an SM's shared memory holds) are staged in shared
//             memory by cp.async, each thread copying and reading back only its
//             own chunks; the last C - S are read from global memory in both
//             passes, the second read an L2 hit. Each thread holds its chunks of
//             sw in registers for all its rows. Pass 1 (chunk k outer,
//             candidates inner): the sums; the tree (lanes, one barrier; lane c
//             of every warp finishes candidate c over the 8 warps, its score,
//             and the softmax by shuffles); pass 2 (chunk outer): the mix, per
//             element c ascending, streaming 16-byte stores; each thread's chunk
//             k places are refilled with the block's next row as soon as they
//             are mixed.
//
// Contract (PB_CHECK in the launchers): rows >= 0 (0 launches nothing),
// 1 <= nb <= 8, snap_blocks >= nb, hidden % 8 == 0 and hidden >= 8, eps >= 0,
// rows <= INT_MAX; cut only: hidden <= 8192 (4 chunks per slot), snap,
// partial, sw, out 16-byte aligned, and a device whose shared memory stages at
// least 1 and all but 6 candidate rows in 1 / B of an SM's. out and scores
// overlap no input and not each other (no in-place call).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "variant.h"

namespace pb {

namespace ref {
struct Transcendentals;
}

struct AttnResShape {
  int64_t rows = 0;
  int64_t hidden = 0;
  int nb = 0;                // snapshot blocks used, 1 .. 8 (candidates nb + 1)
  int64_t snap_blocks = 8;   // block stride of the snapshot layout
};

constexpr int kAttnResMaxBlocks = 8;
constexpr int kAttnResSlots = 256;           // partial sums per reduction (threads per block)
constexpr int64_t kAttnResCutMaxHidden = 8192;  // 4 chunks of 8 per slot

// The baseline is two launches; `step` (may be null) runs each as step(name,
// work) with name "scores" then "mix", so a caller can time them one by one.
using AttnResStep = std::function<void(const char* name, const std::function<void()>& work)>;
void attnres_baseline(const __nv_bfloat16* snap, const __nv_bfloat16* partial, const float* sw,
                      float* scores, __nv_bfloat16* out, const AttnResShape& shape, float eps,
                      cudaStream_t stream, const AttnResStep* step = nullptr);
// The fused cut (two_pass, above); what attnres(Variant::cut, ...) runs.
void attnres_cut(const __nv_bfloat16* snap, const __nv_bfloat16* partial, const float* sw,
                 float* scores, __nv_bfloat16* out, const AttnResShape& shape, float eps,
                 cudaStream_t stream);
// The one dispatch point on the cut switch.
void attnres(Variant v, const __nv_bfloat16* snap, const __nv_bfloat16* partial, const float* sw,
             float* scores, __nv_bfloat16* out, const AttnResShape& shape, float eps,
             cudaStream_t stream);
// Kernel launches per call (rows > 0): 2 for the baseline (scores, mix), 1 for the fused cut.
inline int attnres_launches(Variant v) { return v == Variant::cut ? 1 : 2; }

// Plain C++ reference on bf16 bit patterns, the contract above term for term;
// rsqrtf and expf come from m (ref_math.h).
namespace ref {
// tree256: the balanced pairwise tree over 256 slot partials, literally.
float attnres_tree_sum(const float* slots);
// p[0 .. n-1] = softmax of s[0 .. n-1] as spelled above.
void attnres_softmax(const float* s, int n, float* p, const Transcendentals& m);
void attnres(const uint16_t* snap, const uint16_t* partial, const float* sw, float* scores,
             uint16_t* out, const AttnResShape& shape, float eps, const Transcendentals& m);
}  // namespace ref

}  // namespace pb
