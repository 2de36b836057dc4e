// FMHA forward with log-sum-exp: the MLA attention load (docs/design.md §2.1 MLA
// step 5, §3, §4 "FMHA contract").
//
//   q    [tq, heads, d_qk] bf16   element (i, h, c) at q[i * q_token_stride + h * q_head_stride + c]
//   k    [tk, heads, d_qk] bf16   element (j, h, c) at k[j * k_token_stride + h * k_head_stride + c]
//   v    [tk, heads, d_v]  bf16   element (j, h, c) at v[j * v_token_stride + h * v_head_stride + c]
//   o    [tq, heads, d_v]  bf16   dense (the lse_merge o_win layout)
//   lse  [heads, tq]       f32    natural log (base e), head-major (the lse_merge lse_win layout)
//
// Token and head strides are free (a peer's published q window is read in
// place; in the superstep v is the strided view of the kv_b output: token
// stride heads * 256, head stride 256), but every pointer must be 16-byte
// aligned and every stride a multiple of 8 elements (16-byte rows: cp.async).
//
// Math, per head and query row i (s_ij = scale * q_i . k_j, accumulated in f32):
//   visible keys   dense: every j < tk; causal: j <= i + tk - tq (bottom-right
//                  aligned: the last query sees every key)
//   o_i            = sum_j softmax_j(s_ij) v_j, rounded to bf16
//   lse_i          = ln sum_j exp(s_ij)
//   a row that sees no key (causal with tq > tk, or tk == 0): o_i = 0, lse_i = -inf.
// scale is a runtime f32, finite and > 0 (the superstep passes bf16(192^-0.5)).
// Head dims: (d_qk, d_v) = (192, 128) (K3's MLA) or (128, 128); the launcher
// throws pb::Error on anything else.
//
// Engines (one dispatch point: fmha):
//   native  FlashAttention-2-style kernel on mma.sync m16n8k16 (sm_80+), in
//           fmha.cu. Online softmax in base 2: per row the running max m of
//           the raw scores, ms = m * scale_log2 (scale_log2 = f32(scale *
//           log2(e))), p = 2^fma(s, scale_log2, -ms) (ex2.approx.ftz),
//           l = sum p (f32, unrounded p); P enters the PV product as bf16. At
//           the end o = bf16(acc * (1 / l)) and lse = (ms + log2f(l)) * f32(ln 2).
//   cudnn   cuDNN SDPA through the frontend graph API (kernels/fmha/fmha_cudnn.cu,
//           built only with PB_HAVE_CUDNN); fmha_cudnn_available() says
//           whether this build has it; fmha_cudnn() throws pb::Error otherwise.
//
// Floors (not bit-exact: test/kernels/fmha/test_fmha.cu holds every engine to them,
// against ref::fmha in float64 on the same bf16 inputs):
//   o    ||o - ref||_2 / ||ref||_2 <= 1e-2 over the tensor, and
//        |o - ref| <= 2e-2 * max|ref| per element (bf16 output, bf16 P in P.V)
//   lse  |lse - ref| <= 1e-3 absolute
//   rows that see no key: o == 0 exactly and lse == -inf, in both.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace pb {

struct FmhaTensors {
  const __nv_bfloat16* q;  // [tq, heads, d_qk]
  int64_t q_token_stride, q_head_stride;
  const __nv_bfloat16* k;  // [tk, heads, d_qk]
  int64_t k_token_stride, k_head_stride;
  const __nv_bfloat16* v;  // [tk, heads, d_v]
  int64_t v_token_stride, v_head_stride;
  __nv_bfloat16* o;  // [tq, heads, d_v] dense
  float* lse;        // [heads, tq] natural log
};

struct FmhaShape {
  int64_t tq = 0, tk = 0;
  int heads = 0;
  int d_qk = 192, d_v = 128;
  bool causal = false;  // bottom-right aligned: query i sees keys j <= i + tk - tq
  float scale = 0.0f;   // softmax scale applied to q . k
};

// Floors of every engine against ref::fmha (see above).
constexpr double kFmhaRelL2Floor = 1e-2;
constexpr double kFmhaElementFloor = 2e-2;  // times max|ref| of the tensor
constexpr double kFmhaLseFloor = 1e-3;      // absolute, natural log

enum class FmhaEngine { native, cudnn };
const char* fmha_engine_name(FmhaEngine e);
// A scenario's `fmha:` value: "native", "cudnn" (pb::Error when this build
// has no cuDNN engine), or "auto" (cudnn when available, else native).
FmhaEngine fmha_engine_from_name(const std::string& name);

// The native kernel. Contract checks (pb::Error): head dims, alignment,
// strides, scale, shape ranges (tq, tk < 2^30, 1 <= heads <= 65535).
// tq == 0 launches nothing.
void fmha_native(const FmhaTensors& t, const FmhaShape& s, cudaStream_t stream);

// cuDNN engine: false when built without cuDNN (then fmha_cudnn throws pb::Error).
bool fmha_cudnn_available();
// The cuDNN library loaded at run time ("9.14.0"), or "none: " and why.
std::string fmha_cudnn_version();
// What the cuDNN engine's plans hold in device memory, outside any planned
// budget: one plan per call geometry, each with its workspace and, where
// cuDNN cannot write the lse in place, its stats scratch. Counted since the
// process started (plans are kept until it exits); zeros without cuDNN.
struct FmhaPlanMemory {
  int64_t plans = 0;
  int64_t bytes = 0;
};
FmhaPlanMemory fmha_cudnn_plan_memory();
void fmha_cudnn(const FmhaTensors& t, const FmhaShape& s, cudaStream_t stream);

// The one dispatch point.
void fmha(FmhaEngine e, const FmhaTensors& t, const FmhaShape& s, cudaStream_t stream);

namespace ref {
// float64 reference on the host: bf16 inputs as bit patterns with the same
// strides as FmhaTensors; o [tq, heads, d_v] and lse [heads, tq] (natural log)
// in double. s_ij = double(scale) * sum_c q_ic k_jc; rows that see no key get
// o = 0, lse = -inf. Any d_qk, d_v >= 1 (the tests use tiny ones).
void fmha(const uint16_t* q, int64_t q_token_stride, int64_t q_head_stride, const uint16_t* k,
          int64_t k_token_stride, int64_t k_head_stride, const uint16_t* v, int64_t v_token_stride,
          int64_t v_head_stride, double* o, double* lse, const FmhaShape& s);
}  // namespace ref

}  // namespace pb
