// MoE routing (docs/design.md §2.1 "MoE FFN"): the router's top-k, the
// permutation plan, and the row kernels around the grouped expert GEMMs.
// Not a cut: one implementation each, a plain C++ reference beside it; the
// contracts below are exact, and test_moe_route holds the kernels to the
// references bit for bit.
//
//   logits   [T, E] f32     router GEMM output on the live tokens
//   bias     [E] f32        selection bias (changes which experts, not the weights)
//   ids      [T, k] int32   selected experts, best first
//   weights  [T, k] f32     routing weights of those slots
//   counts   [E] int32      assignments routed to each expert
//   offsets  [E + 1] int32  exclusive scan of counts: expert e owns permuted
//                           rows [offsets[e], offsets[e + 1]); offsets[E] = V
//   perm_src [T * k] int32  permuted row p holds assignment i = t * k + j
//                           (token t = i / k, slot j = i % k); -1 for p >= V
//   perm_dst [T, k] int32   permuted row of assignment (t, j); -1 if dropped
//   x   [T, W] bf16      -> xp  [T * k, W] bf16   moe_permute (latent rows)
//   y   [T * k, N] bf16  -> yw  [T * k, N] bf16   moe_weight (SiTU output)
//   yd  [T * k, W] bf16  -> out [T, W] bf16       moe_combine (down-proj output)
// and their fp8 forms, for the fp8 expert GEMMs (kernels/fp8/fp8.h: e4m3 codes,
// one f32 scale per row and 128 columns, K-major with row stride exactly W/128):
//   xq [T, W] e4m3, sx [T, W/128] f32
//                        -> xpq [T * k, W] e4m3, spq [T * k, W/128] f32
//                                                 moe_permute_fp8
//   y   [T * k, N] bf16  -> q [T * k, N] e4m3, sq [T * k, N/128] f32
//                                                 moe_weight_fp8
//
// router_topk, per token t (f32 throughout, IEEE division, no FMA):
//   s_e = 1.0f / (1.0f + expf(-logits[t][e]))       unbiased sigmoid score
//   b_e = s_e + bias[e]                              biased score
//   Experts are ranked by b descending; equal b (+0 == -0) rank by the LOWER
//   expert index first; a NaN b ranks below every number (-inf too), NaNs
//   among themselves by index. ids[t][j] = the expert of rank j, j < k.
//   sum = 0.0f; for j = 0 .. k-1 ascending: sum += s_{ids[t][j]}
//   weights[t][j] = s_{ids[t][j]} / (sum + 1e-20f)
// The weights come from the UNBIASED scores; with finite logits they sum to 1
// within 1e-6 (a few f32 ulps). The 1e-20 guard only matters when every
// selected s underflows to 0: every weight is then 0, not NaN.
//
// moe_permute_plan: assignment i = t * k + j is valid when 0 <= ids[i] < E;
// invalid ones are dropped (perm_dst = -1, not counted). Within expert e the
// valid assignments keep ascending i, i.e. the permuted order is by expert,
// then token ascending, then slot ascending: the r-th of them lands on row
// offsets[e] + r. Rows [V, T * k) of perm_src are -1. The device builds it by
// counting (per-tile histograms, a scan over tiles and experts, a stable
// scatter): integer work only, so every run gives the same plan. Its
// workspace needs no zeroing: every word is written before it is read.
//
// Row kernels, f32(h) the exact bf16 widening, bf16(f) = __float2bfloat16_rn:
//   moe_permute  xp[p][c] = x[perm_src[p] / k][c]                 (bit copy)
//   moe_weight   yw[p][c] = bf16(f32(y[p][c]) * weights[perm_src[p]])
//   moe_combine  acc = 0.0f; for j = 0 .. k-1 ascending, if d = perm_dst[t][j] >= 0:
//                  acc += f32(yd[d][c]);   out[t][c] = bf16(acc)
// Rows with perm_src[p] = -1 come out +0 in moe_permute and moe_weight. The
// routing weight is applied before the down projection (docs/design.md §2), so the
// combine is a plain sum: no weights, no FMA; an all -0 sum lands as +0.
// Row kernels move 16 bytes (8 bf16) per access when the width is a multiple
// of 8 and the row pointers are 16-byte aligned, 2 bytes otherwise.
//
// The fp8 row kernels, width W (or N) a multiple of 128, scales K-major
// (row r's group g at s[r * (W/128) + g]):
//   moe_permute_fp8  xpq[p][c] = xq[perm_src[p] / k][c],
//                    spq[p][g] = sx[perm_src[p] / k][g]           (bit copies)
//                    Quantization is per row, so this is moe_permute followed
//                    by quantize_act_fp8 (K-major), bit for bit.
//   moe_weight_fp8   v = f32(bf16(f32(y[p][c]) * weights[perm_src[p]])), i.e.
//                    moe_weight's output, then fp8.h's 1x128 group rule on it
//                    (fp8_device.cuh, the one implementation): sq[p][g] = the
//                    group's scale, q[p][c] = e4m3(v / sq[p][g]). Bit for bit
//                    moe_weight followed by quantize_act_fp8 (K-major); no bf16
//                    is written.
// Rows with perm_src[p] = -1 are the +0 rows of moe_permute / moe_weight
// quantized: codes 0x00 (+0) and scale 1.0f in every group.
// moe_permute_fp8 moves 16 codes per access (8, 16 or 32 lanes a row, the
// row's scales copied alongside) when xq and xpq are 16-byte aligned, single
// bytes otherwise. moe_weight_fp8 gives each 128-column group to a half warp,
// 8 values a lane: 16-byte bf16 loads and 8-byte code stores when y is 16-byte
// and q 8-byte aligned, single elements otherwise (same arithmetic, same
// results). Both need W % 128 == 0 and 4-byte aligned scales (refused
// otherwise, a pb::Error naming the rule); their outputs overlap no input
// (no in-place form).
//
// Preconditions (checked by every launcher with PB_CHECK): T >= 0,
// 1 <= E <= 1024, 1 <= k <= min(E, 32), T * k < 2^31, width >= 0, non-null
// pointers unless the work is empty, outputs not overlapping inputs
// (moe_weight may run in place: yw == y exactly). The row kernels trust the
// plan they are given (perm_src in [-1, T * k), perm_dst in [-1, T * k)).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pb {

namespace ref {
struct Transcendentals;
}

struct MoeRouteShape {
  int64_t tokens;  // T: live tokens (rows of logits and of the latent)
  int experts;     // E: routed experts, 1 .. 1024
  int top_k;       // k: experts per token, 1 .. min(E, 32)
};

constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeMaxTopK = 32;

// Throws pb::Error when the shape breaks the preconditions above.
void check_moe_route_shape(const MoeRouteShape& s);

// The plan's outputs: device pointers for moe_permute_plan, host pointers for
// ref::moe_permute_plan.
struct MoePlan {
  int32_t* counts;    // [E]
  int32_t* offsets;   // [E + 1]
  int32_t* perm_src;  // [T * k]
  int32_t* perm_dst;  // [T, k]
};

// logits [T, E] f32, bias [E] f32 -> ids [T, k] int32, weights [T, k] f32.
// One warp per token: scores and order keys in shared memory, k rounds of a
// warp-wide max over (biased score, lowest index).
void router_topk(const float* logits, const float* bias, int32_t* ids, float* weights,
                 const MoeRouteShape& s, cudaStream_t stream);

// Device scratch moe_permute_plan needs: [ceil(T * k / 1024), E] int32.
size_t moe_permute_plan_workspace_bytes(const MoeRouteShape& s);
// ids [T, k] int32 -> plan (three launches: tile histograms, scan, scatter).
void moe_permute_plan(const int32_t* ids, const MoePlan& plan, void* workspace,
                      size_t workspace_bytes, const MoeRouteShape& s, cudaStream_t stream);

// x [T, W] bf16 -> xp [T * k, W] bf16.
void moe_permute(const __nv_bfloat16* x, const int32_t* perm_src, __nv_bfloat16* xp,
                 const MoeRouteShape& s, int64_t width, cudaStream_t stream);
// y [T * k, N] bf16, weights [T, k] f32 -> yw [T * k, N] bf16 (yw may be y).
void moe_weight(const __nv_bfloat16* y, const int32_t* perm_src, const float* weights,
                __nv_bfloat16* yw, const MoeRouteShape& s, int64_t width, cudaStream_t stream);
// yd [T * k, W] bf16 -> out [T, W] bf16.
void moe_combine(const __nv_bfloat16* yd, const int32_t* perm_dst, __nv_bfloat16* out,
                 const MoeRouteShape& s, int64_t width, cudaStream_t stream);

// xq [T, W] e4m3 + sx [T, W/128] f32 -> xpq [T * k, W] e4m3 + spq [T * k, W/128] f32
// (W = width, a multiple of 128; scales K-major, row stride W/128).
void moe_permute_fp8(const __nv_fp8_e4m3* xq, const float* sx, const int32_t* perm_src,
                     __nv_fp8_e4m3* xpq, float* spq, const MoeRouteShape& s, int64_t width,
                     cudaStream_t stream);
// y [T * k, N] bf16, weights [T, k] f32 -> q [T * k, N] e4m3 + sq [T * k, N/128] f32
// (N = width, a multiple of 128; scales K-major, row stride N/128).
void moe_weight_fp8(const __nv_bfloat16* y, const int32_t* perm_src, const float* weights,
                    __nv_fp8_e4m3* q, float* sq, const MoeRouteShape& s, int64_t width,
                    cudaStream_t stream);

// ---- synthetic router (host): reproducible, skewed expert load ----
//
// synthetic_router_logits: [T, E] f32, each ~N(0, 1): the sum of four hash
// uniforms of (seed, t * E + e), scaled; integer hashing and exact-order f32
// arithmetic only, so every platform draws the same values.
// synthetic_router_bias: Zipf-like. A seeded shuffle gives each expert a
// popularity rank r (0 = hottest); bias = -skew * H_r with H_r = 1 + 1/2 +
// ... + 1/r ~ ln(r) + 0.577 (H_0 = 0). An additive bias shifts an expert's
// selection odds about exponentially, so loads fall off as a power of the
// rank. Calibrated on N(0, 1) logits (sigmoid scores spread ~0.2): with the
// default skew 0.025, T = 16384, E = 224, k = 16 the load imbalance max/mean
// tokens per expert is ~3.0 (seed 1: 3.01; the least loaded expert gets ~0.65
// of the mean, the 90th percentile ~1.46). skew 0 gives ~1.08 (sampling noise
// only). Logits with a larger spread need a proportionally larger skew; a
// router GEMM gives N(0, 1)-like logits on unit-RMS normed rows with weights
// uniform in +-sqrt(3 / hidden).
constexpr float kSyntheticRouterSkew = 0.025f;
std::vector<float> synthetic_router_logits(int64_t tokens, int experts, uint64_t seed);
std::vector<float> synthetic_router_bias(int experts, uint64_t seed,
                                         float skew = kSyntheticRouterSkew);
// max / mean of counts [E] (mean = sum / E); 0 when no assignment is counted.
double moe_load_imbalance(const int32_t* counts, int experts);

namespace ref {
// Plain C++ references; bf16 travels as 16-bit patterns, m supplies expf.
void router_topk(const float* logits, const float* bias, int32_t* ids, float* weights,
                 const MoeRouteShape& s, const Transcendentals& m);
void moe_permute_plan(const int32_t* ids, const MoePlan& plan, const MoeRouteShape& s);
void moe_permute(const uint16_t* x, const int32_t* perm_src, uint16_t* xp, const MoeRouteShape& s,
                 int64_t width);
void moe_weight(const uint16_t* y, const int32_t* perm_src, const float* weights, uint16_t* yw,
                const MoeRouteShape& s, int64_t width);
void moe_combine(const uint16_t* yd, const int32_t* perm_dst, uint16_t* out, const MoeRouteShape& s,
                 int64_t width);
}  // namespace ref

}  // namespace pb
