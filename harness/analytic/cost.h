// The one cost model: bytes (each input read once, each output written once)
// and FLOPs of every kernel the superstep launches. The plan uses it for its
// roofline; the kernels benchmark and every measured span use it for achieved
// TB/s, TFLOP/s and the fraction of the ceiling. bf16 = 2 bytes, f32 = 4.
#pragma once

#include <cstdint>

#include "profile.h"

namespace pb {

// Which ceiling binds a launch's FLOPs: the copy rate alone, the bf16 tensor
// GEMM, the fp8 (block-scaled) tensor GEMM, the fp4 (NVFP4) tensor GEMM, plain f32.
enum class Unit { memory, tensor, tensor_fp8, tensor_fp4, fp32 };

struct Cost {
  double bytes = 0;
  double flops = 0;
  Unit unit = Unit::memory;  // which ceiling binds the FLOPs
};

// The roofline time of a cost on a profile, in microseconds: the larger of
// bytes / copy rate and FLOPs / the unit's rate. Throws pb::Error for tensor
// work in a format the profile has no rate for (fp4 on Hopper).
double roofline_us(const Cost& c, const GpuProfile& p);

namespace cost {

// GEMM bf16 [m, k] x [n, k]^T -> f32 partial [m, split_k, n] (or bf16 out).
Cost gemm(int64_t m, int64_t n, int64_t k, int split_k = 1, bool bf16_out = false);
// GEMM e4m3 [m, k] x [n, k]^T with DeepSeek-V3 block scales (1x128 activation
// scales, 128x128 weight scales padded to whole blocks) -> f32 partial [m, n].
Cost gemm_fp8(int64_t m, int64_t n, int64_t k);
// The block-scaled formats' operands (precision.h), read or written once:
//   fp8  e4m3 codes, 1 byte; activations one f32 scale per row and 128 columns,
//        weights one f32 scale per 128x128 block
//   fp4  NVFP4: e2m1 codes, half a byte; one e4m3 scale (1 byte) per row and 16
//        columns, activations and weights alike (the per-tensor f32 not counted)
// quantize_act_fp8 (fp8) or its NVFP4 form: bf16 [rows, k] -> codes and scales.
Cost quant_act(int64_t rows, int64_t k, Format f = Format::fp8);
// rmsnorm_fp8: the RMSNorm that writes the fp8 twin (and its bf16 rows when asked).
Cost rmsnorm_fp8(int64_t rows, int64_t n, bool bf16_out);
// situ_fp8, mul_sigmoid_fp8: a two-input elementwise op over [rows, width]
// writing only the fp8 twin.
Cost elementwise_fp8(int64_t rows, int64_t width, double flops_per_element);
// Batched f32 GEMM (the KDA state fold): batch x [m, k] x [k, n] + [m, n].
Cost gemm_f32_batched(int64_t batch, int64_t m, int64_t n, int64_t k);
// land: f32 [rows, split_k, nt] columns [off, off+n) -> bf16 [rows, n].
Cost land(int64_t rows, int split_k, int64_t n);
// elementwise: `inputs` bf16 operands of n elements -> one bf16 output.
Cost elementwise(int64_t n, int inputs, double flops_per_element);
Cost o_norm_gate(int64_t row_heads, int64_t head_dim);
// o_norm_gate_fp8: o_norm_gate writing only the fp8 twin.
Cost o_norm_gate_fp8(int64_t row_heads, int64_t head_dim);
Cost rmsnorm(int64_t rows, int64_t n);
Cost copy(double bytes_each_way);  // a device copy: read + write
// conv_silu_chunk (cut): f32 partial in, bf16 out, carry in / next out.
Cost conv_cut(int64_t tokens, int64_t inner);
// the baseline conv path's batched decode conv over materialized windows.
Cost conv_decode(int64_t tokens, int64_t inner);
// lse_merge folds a window into the f32 accumulator (reads and writes it);
// reset (the first window of a call) initializes it: the accumulator is written, never read.
Cost lse_merge(int64_t t_q, int64_t heads, int64_t dv, bool reset = false);
Cost o_finalize(int64_t t_q, int64_t heads, int64_t dv);
// FMHA: flops 2 Tq Tk H (dqk + dv), halved for a causal square window.
Cost fmha(int64_t tq, int64_t tk, int64_t heads, int64_t dqk, int64_t dv, bool causal);
// K [t, H, dqk] from the kv_b output's nope half and the shared rope.
Cost expand_k(int64_t tokens, int64_t heads, int64_t nope, int64_t rope);
// KDA core, chunked WY form (chunk c, dk = dv = d). See cost.cpp for the count.
Cost kda_forward(int64_t tokens, int64_t heads, int64_t d, int64_t chunk);
Cost kda_package(int64_t tokens, int64_t heads, int64_t d, int64_t chunk);
// kda_forward split the way the kernels run it (the sum equals kda_forward):
// kda_prepare the state-independent intra-chunk part, kda_walk the state walk.
Cost kda_prepare(int64_t tokens, int64_t heads, int64_t d, int64_t chunk);
Cost kda_walk(int64_t tokens, int64_t heads, int64_t d, int64_t chunk);
// The package walk over kda_prepare's products (its marginal cost: 8 c d^2 per chunk and head).
Cost kda_package_walk(int64_t tokens, int64_t heads, int64_t d, int64_t chunk);
// Rank r's fold of r upstream packages: S = D_0; r - 1 batched [d, d] x [d, d] GEMMs + adds.
Cost kda_fold(int64_t upstream, int64_t heads, int64_t d);
// A fold continued from a state already folded: `more` packages, one batched
// [d, d] x [d, d] GEMM + add each (S = S·M + D; S read and written, M and D read).
Cost kda_fold_more(int64_t more, int64_t heads, int64_t d);
// AttnRes: scores read nb+1 candidates, mix reads them again.
Cost attnres_scores(int64_t rows, int64_t hidden, int64_t candidates);
Cost attnres_mix(int64_t rows, int64_t hidden, int64_t candidates);
// AttnRes fused (the cut): each candidate read once, sw, scores and out written once.
Cost attnres_fused(int64_t rows, int64_t hidden, int64_t candidates);
// MoE routing pieces.
Cost router_topk(int64_t tokens, int64_t experts, int64_t top_k);
// moe_permute_plan: ids read twice (tile histograms, scatter), perm_src and
// perm_dst written, the [tiles, E] workspace written and read, counts/offsets.
Cost moe_plan(int64_t tokens, int64_t top_k, int64_t experts);
Cost moe_permute(int64_t tokens, int64_t top_k, int64_t width);
Cost moe_weight(int64_t rows, int64_t width);
// Their block-scaled forms (cut quant_fuse with fp8 or fp4 experts, moe_route.h):
// the permuted rows as codes with K-major scales; the weighted rows written as them.
Cost moe_permute_scaled(int64_t tokens, int64_t top_k, int64_t width, Format f);
Cost moe_weight_scaled(int64_t rows, int64_t width, Format f);
Cost moe_combine(int64_t tokens, int64_t top_k, int64_t width);
// Expert GEMMs (kernels/moe/moe_gemm.h), either engine: rows [V, k] bf16 read once,
// every expert's weight [n, k] bf16 read once (all E: an upper bound when some
// expert gets no rows), bf16 [V, n] out (all bands together); 2 V n k FLOPs.
Cost moe_gemm(int64_t rows, int64_t experts, int64_t n, int64_t k);
// The same block-scaled (fp8: moe_gemm.h run_fp8; fp4: planned only): rows and
// weights as codes with their scales read once, bf16 out.
Cost moe_gemm_scaled(int64_t rows, int64_t experts, int64_t n, int64_t k, Format f);
Cost embed(int64_t rows, int64_t hidden);
Cost argmax(int64_t n);

}  // namespace cost
}  // namespace pb
