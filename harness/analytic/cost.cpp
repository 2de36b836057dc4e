#include "cost.h"

#include <algorithm>
#include <cmath>

#include "check.h"

namespace pb {

double roofline_us(const Cost& c, const GpuProfile& p) {
  const double mem_us = c.bytes / (p.copy_tbps * 1e6);
  double rate = p.fp32_tflops;
  if (c.unit == Unit::tensor) rate = p.gemm_tflops;
  if (c.unit == Unit::tensor_fp8) rate = p.fp8_tflops;
  if (c.unit == Unit::tensor_fp4) {
    PB_CHECK(p.fp4_tflops > 0, "gpu_profile " + p.name + " has no FP4 rate (" + p.fp4_source + ")");
    rate = p.fp4_tflops;
  }
  const double flop_us = c.flops / (rate * 1e6);
  return std::max(mem_us, flop_us);
}

namespace cost {

namespace {
constexpr double kBf16 = 2, kF32 = 4;
Cost memory(double bytes, double flops = 0) { return {bytes, flops, Unit::memory}; }
}  // namespace

Cost gemm(int64_t m, int64_t n, int64_t k, int split_k, bool bf16_out) {
  double out = double(m) * n * (bf16_out ? kBf16 : kF32 * split_k);
  return {double(m) * k * kBf16 + double(n) * k * kBf16 + out, 2.0 * m * n * k, Unit::tensor};
}

namespace {
constexpr double kFp8 = 1;
double scale_groups(int64_t rows, int64_t k) { return double(rows) * double((k + 127) / 128); }
// A block-scaled activation [rows, k] (codes and scales), and a weight [rows, k].
double act_bytes(int64_t rows, int64_t k, Format f) {
  if (f == Format::fp4) return double(nvfp4_bytes(rows, k));
  return double(rows) * k * kFp8 + scale_groups(rows, k) * kF32;
}
double weight_bytes(int64_t rows, int64_t k, Format f) {
  if (f == Format::fp4) return act_bytes(rows, k, f);
  return double(rows) * k * kFp8 + scale_groups((rows + 127) / 128, k) * kF32;
}
Unit tensor_unit(Format f) { return f == Format::fp4 ? Unit::tensor_fp4 : Unit::tensor_fp8; }
}  // namespace

Cost gemm_fp8(int64_t m, int64_t n, int64_t k) {
  const double n_padded = double((n + 127) / 128 * 128);
  const double bytes = double(m) * k * kFp8 + scale_groups(m, k) * kF32 + double(n) * k * kFp8 +
                       scale_groups(int64_t(n_padded / 128), k) * kF32 + double(m) * n * kF32;
  return {bytes, 2.0 * m * n * k, Unit::tensor_fp8};
}

Cost quant_act(int64_t rows, int64_t k, Format f) {
  return memory(double(rows) * k * kBf16 + act_bytes(rows, k, f), 2.0 * rows * k);
}

Cost rmsnorm_fp8(int64_t rows, int64_t n, bool bf16_out) {
  Cost c = rmsnorm(rows, n);
  c.bytes += double(rows) * n * kFp8 + scale_groups(rows, n) * kF32 - (bf16_out ? 0.0 : double(rows) * n * kBf16);
  c.flops += 2.0 * rows * n;
  return c;
}

Cost elementwise_fp8(int64_t rows, int64_t width, double flops_per_element) {
  const double n = double(rows) * width;
  return memory(n * (2 * kBf16 + kFp8) + scale_groups(rows, width) * kF32, (flops_per_element + 2) * n);
}

Cost o_norm_gate_fp8(int64_t row_heads, int64_t head_dim) {
  const double n = double(row_heads) * head_dim;
  return memory(n * (2 * kBf16 + kFp8) + head_dim * kF32 + scale_groups(row_heads, head_dim) * kF32, n * 10);
}

Cost moe_gemm_scaled(int64_t rows, int64_t experts, int64_t n, int64_t k, Format f) {
  const double bytes = act_bytes(rows, k, f) + weight_bytes(experts * n, k, f) + double(rows) * n * kBf16;
  return {bytes, 2.0 * rows * n * k, tensor_unit(f)};
}

Cost gemm_f32_batched(int64_t batch, int64_t m, int64_t n, int64_t k) {
  double bytes = double(batch) * (double(m) * k + double(k) * n + 3.0 * m * n) * kF32;
  return {bytes, 2.0 * batch * m * n * k, Unit::fp32};
}

Cost land(int64_t rows, int split_k, int64_t n) {
  return memory(double(rows) * n * (kF32 * split_k + kBf16), double(rows) * n * split_k);
}

Cost elementwise(int64_t n, int inputs, double flops_per_element) {
  return memory(double(n) * kBf16 * (inputs + 1), double(n) * flops_per_element);
}

Cost o_norm_gate(int64_t row_heads, int64_t head_dim) {
  double n = double(row_heads) * head_dim;
  return memory(n * kBf16 * 3 + head_dim * kF32, n * 8);
}

Cost rmsnorm(int64_t rows, int64_t n) {
  return memory(double(rows) * n * kBf16 * 2 + n * kF32, double(rows) * n * 4);
}

Cost copy(double bytes_each_way) { return memory(2 * bytes_each_way); }

Cost conv_cut(int64_t tokens, int64_t inner) {
  double n = double(tokens) * inner;
  return memory(n * (kF32 + kBf16) + 4.0 * inner * kF32 + 2 * 3.0 * inner * kBf16, n * 12);
}

Cost conv_decode(int64_t tokens, int64_t inner) {
  double n = double(tokens) * inner;
  // reads 3 window slots + x_t, writes y
  return memory(n * kBf16 * 5 + 4.0 * inner * kF32, n * 12);
}

Cost lse_merge(int64_t t_q, int64_t heads, int64_t dv, bool reset) {
  double n = double(t_q) * heads * dv, rows = double(t_q) * heads;
  if (reset) return memory(n * (kBf16 + kF32) + rows * 2 * kF32, n);
  return memory(n * (kBf16 + 2 * kF32) + rows * 3 * kF32, n * 3);
}

Cost o_finalize(int64_t t_q, int64_t heads, int64_t dv) {
  double n = double(t_q) * heads * dv;
  return memory(n * (kF32 + kBf16));
}

Cost fmha(int64_t tq, int64_t tk, int64_t heads, int64_t dqk, int64_t dv, bool causal) {
  double flops = 2.0 * tq * tk * heads * (dqk + dv);
  if (causal) flops /= 2;
  double bytes = (double(tq) * dqk + double(tk) * dqk + double(tk) * dv + double(tq) * dv) * heads * kBf16 +
                 double(heads) * tq * kF32;
  return {bytes, flops, Unit::tensor};
}

Cost expand_k(int64_t tokens, int64_t heads, int64_t nope, int64_t rope) {
  double in = double(tokens) * (heads * nope + rope) * kBf16;
  double out = double(tokens) * heads * (nope + rope) * kBf16;
  return memory(in + out);
}

// Per chunk of c tokens and head (dk = dv = d), the chunked gated delta rule:
//   intra-chunk  K K^T, Q K^T           2 * 2 c^2 d
//                UT transform (solve)   c^3
//                W = A K, U = A V       2 * 2 c^2 d
//   inter-chunk  Q S, W S, K^T (U - W S) 3 * 2 c d^2
//                A_qk (U - W S)         2 c^2 d
// Bytes: q, k, v, gate pre-activation in, o out (bf16 [t, H, d] each), beta.
Cost kda_forward(int64_t tokens, int64_t heads, int64_t d, int64_t chunk) {
  double chunks = double((tokens + chunk - 1) / chunk) * heads;
  double c = double(chunk), dd = double(d);
  double per_chunk = 4 * c * c * dd + c * c * c + 4 * c * c * dd + 6 * c * dd * dd + 2 * c * c * dd;
  double bytes = double(tokens) * heads * d * kBf16 * 5 + double(tokens) * heads * kBf16 +
                 double(heads) * d * d * kF32;
  return {bytes, chunks * per_chunk, Unit::tensor};
}

// The affine package (M, D) of a segment (kernels/kda/kda_ref.h): the zero-state
// chunked pass for D (L, Aqk-free: K K^T 2c^2 d, UT solve c^3, W and U 4c^2 d,
// state update 4 c d^2) plus M's low-rank update per chunk M <- M G - (M W^T) K^
// (4 c d^2): 6 c^2 d + c^3 + 8 c d^2 per chunk and head.
Cost kda_package(int64_t tokens, int64_t heads, int64_t d, int64_t chunk) {
  double chunks = double((tokens + chunk - 1) / chunk) * heads;
  double c = double(chunk), dd = double(d);
  double per_chunk = 6 * c * c * dd + c * c * c + 8 * c * dd * dd;
  double bytes = double(tokens) * heads * d * kBf16 * 3 + 2.0 * heads * d * d * kF32;
  return {bytes, chunks * per_chunk, Unit::tensor};
}

// Intra-chunk: K K^T, Q K^T (4 c^2 d), the solve (c^3), W and U (4 c^2 d); reads
// q, k, v, gate pre-activation and beta, writes the chunk products (W, U, K^, Qg
// bf16 [c, d] each, Aqk bf16 [c, c], the decay f32 [d]).
Cost kda_prepare(int64_t tokens, int64_t heads, int64_t d, int64_t chunk) {
  double chunks = double((tokens + chunk - 1) / chunk) * heads;
  double c = double(chunk), dd = double(d);
  double in = double(tokens) * heads * d * kBf16 * 4 + double(tokens) * heads * kBf16;
  double out = chunks * (4 * c * dd * kBf16 + c * c * kBf16 + dd * kF32);
  return {in + out, chunks * (8 * c * c * dd + c * c * c), Unit::tensor};
}

// The walk: Q S, W S, K^T U (6 c d^2) and Aqk U (2 c^2 d); reads the chunk
// products and S_in, writes o.
Cost kda_walk(int64_t tokens, int64_t heads, int64_t d, int64_t chunk) {
  double chunks = double((tokens + chunk - 1) / chunk) * heads;
  double c = double(chunk), dd = double(d);
  double in = chunks * (4 * c * dd * kBf16 + c * c * kBf16 + dd * kF32) + double(heads) * d * d * kF32;
  return {in + double(tokens) * heads * d * kBf16, chunks * (6 * c * dd * dd + 2 * c * c * dd), Unit::tensor};
}

Cost kda_package_walk(int64_t tokens, int64_t heads, int64_t d, int64_t chunk) {
  double chunks = double((tokens + chunk - 1) / chunk) * heads;
  double c = double(chunk), dd = double(d);
  double in = chunks * (4 * c * dd * kBf16 + dd * kF32);
  return {in + 2.0 * heads * d * d * kF32, chunks * 8 * c * dd * dd, Unit::tensor};
}

Cost kda_fold(int64_t upstream, int64_t heads, int64_t d) {
  const double package = double(heads) * d * d * kF32;
  const double steps = double(std::max<int64_t>(upstream - 1, 0));
  return {package * 2 + steps * package * 4, steps * heads * 2.0 * d * d * d, Unit::fp32};
}

Cost kda_fold_more(int64_t more, int64_t heads, int64_t d) {
  const double package = double(heads) * d * d * kF32;
  return {double(more) * package * 4, double(more) * heads * 2.0 * d * d * d, Unit::fp32};
}

Cost attnres_scores(int64_t rows, int64_t hidden, int64_t candidates) {
  double n = double(rows) * hidden * candidates;
  return memory(n * kBf16 + hidden * kF32 + double(rows) * candidates * kF32, n * 4);
}

Cost attnres_mix(int64_t rows, int64_t hidden, int64_t candidates) {
  double n = double(rows) * hidden * candidates;
  return memory(n * kBf16 + double(rows) * candidates * kF32 + double(rows) * hidden * kBf16, n * 2);
}

Cost attnres_fused(int64_t rows, int64_t hidden, int64_t candidates) {
  double n = double(rows) * hidden * candidates;
  return memory(n * kBf16 + hidden * kF32 + double(rows) * candidates * kF32 + double(rows) * hidden * kBf16,
                n * 6);
}

Cost router_topk(int64_t tokens, int64_t experts, int64_t top_k) {
  return memory(double(tokens) * experts * kF32 + double(tokens) * top_k * (kF32 + 4),
                double(tokens) * experts * 8);
}

Cost moe_plan(int64_t tokens, int64_t top_k, int64_t experts) {
  const double assignments = double(tokens) * top_k;
  const double tiles = std::ceil(assignments / 1024);
  return memory(4.0 * assignments * 4 + 2.0 * tiles * experts * 4 + (2.0 * experts + 1) * 4);
}

Cost moe_permute(int64_t tokens, int64_t top_k, int64_t width) {
  return memory(2.0 * tokens * top_k * width * kBf16);
}

Cost moe_weight(int64_t rows, int64_t width) { return memory(2.0 * rows * width * kBf16, double(rows) * width); }

Cost moe_permute_scaled(int64_t tokens, int64_t top_k, int64_t width, Format f) {
  return memory(2.0 * act_bytes(tokens * top_k, width, f));
}

Cost moe_weight_scaled(int64_t rows, int64_t width, Format f) {
  return memory(double(rows) * width * kBf16 + act_bytes(rows, width, f), 3.0 * rows * width);
}

Cost moe_combine(int64_t tokens, int64_t top_k, int64_t width) {
  return memory(double(tokens) * top_k * width * kBf16 + double(tokens) * width * kBf16,
                double(tokens) * top_k * width);
}

Cost moe_gemm(int64_t rows, int64_t experts, int64_t n, int64_t k) {
  return {double(rows) * k * kBf16 + double(experts) * n * k * kBf16 + double(rows) * n * kBf16,
          2.0 * rows * n * k, Unit::tensor};
}

Cost embed(int64_t rows, int64_t hidden) { return memory(2.0 * rows * hidden * kBf16 + rows * 4.0); }

Cost argmax(int64_t n) { return memory(double(n) * kBf16, double(n)); }

}  // namespace cost
}  // namespace pb
