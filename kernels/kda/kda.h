// The KDA core on the GPU (docs/design.md §2.1 KDA mixer step 8, §3 "KDA across
// ranks"): the chunked gated delta rule in the WY/UT form, its affine package
// (M, D) and the fold of packages. The float64 ground truth, the convention and
// the stability argument are in kda_ref.h; this header repeats what a caller
// needs. One family, no variants; kda.cu holds the entry points, kda_prepare.cu and
// kda_walks.cu / kda_walk_wgmma.cu the kernels.
//
// ---- Shapes (row-major, last index fastest; dk = dv = 128 fixed) -----------
//   q, k, v   [T, H*128] bf16   conv + SiLU outputs, row strides q_ld, k_ld, v_ld
//   g         [T, H*128] bf16   forget-gate pre-activation (landed), row stride g_ld
//   beta_pre  [T, H]     bf16   beta pre-activation (landed), row stride beta_ld
//   A_log     [H] f32,  dt_bias [H*128] f32
//   S_in, S_out [H, dv, dk] f32  the state, VALUE-MAJOR (S[h][j][c]); S_in null = zeros
//   o         [T, H*128] bf16   row stride o_ld
//   M [H, dk, dk] f32, D [H, dv, dk] f32   S_out = S_in · M + D over the segment
//
// ---- The convention (exactly kda_ref.h's; per head, vectors are columns) ----
//   log α_t = −5 · sigmoid(exp(A_log) · (g_t + dt_bias))  per key channel,  β_t = sigmoid(beta_pre_t)
//   q_t, k_t ← x / sqrt(Σ x² + 1e-6)  (f32)
//   S_t = S_{t−1} · Diag(α_t) · (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ     (S [dv, dk])
//   o_t = scale · S_t q_t,  scale = 128^−0.5
// (Equivalently, with K = Sᵀ: K_t = (I − β k kᵀ) Diag(α) K_{t−1} + β k vᵀ, o = K_tᵀ q · scale.)
//
// ---- The passes (chunk C = 64; the last chunk may be short) ----------------
//   kda_prepare         per (chunk, head), independent of the state: gates, the
//                       in-chunk log2-decay cumsum b, L2 norms, L and Aqk on tensor
//                       cores, A = (I + L)^{-1} (f32, blockwise), W = A diag(β) (K∘e^b),
//                       Ũ = A diag(β) V on tensor cores; writes the chunk products
//                       below to the workspace. Zero-padded rows past T are exact no-ops.
//   kda_forward_state   sequential over chunks, parallel over heads (KdaWalk below):
//                       U = Ũ − W S0ᵀ,  o = Qg S0ᵀ + Aqk U,  S ← S0 Γ + Uᵀ K̂.
//   kda_package         the same walk over the stacked rows [D; M] (D from 0 with Ũ,
//                       M from I with Ũ = 0: M ← M Γ − (M Wᵀ) K̂), reusing kda_prepare's
//                       products (marginal cost 8 C d² per chunk and head).
//   kda_fold            S = D_0; S = S · M_j + D_j (cuBLAS f32 batched GEMM + an add).
//   Workspace per (head, chunk), head-major: W, Ũ, K̂ = K∘e^{b_last − b},
//   Qg = scale·Q∘e^{b} [64, 128] bf16; Aqk·scale [64, 64] bf16 (lower block triangle
//   only: the 16x16 blocks above the diagonal are never written nor read);
//   Γ = e^{b_last} [128] f32.
//
// ---- Precision per product ---------------------------------------------------
//   gates, cumsum, norms, exponentials (ex2.approx of log2-scaled differences,
//   every exponent ≤ 0 except inside a 16-token block, ≤ 75·log2 e): f32
//   K Kᵀ, Q Kᵀ with decays: bf16 operands (factored around 16-token anchors), f32 accumulate
//     (the B operand is bf16(k̂·2^{b_e − b}) times a per-channel block factor, rounded again)
//   (I + L)^{-1}: 16x16 diagonal blocks f32 CUDA cores; off-diagonal blocks tf32 mma with f32
//     accumulate (2^-11 operand truncation, below the bf16 A·β rounding)
//   W, Ũ (A·β as bf16), W S0ᵀ, Q S0ᵀ, Aqk U, Uᵀ K̂: bf16 operands, f32 accumulate
//   the state S, M, D: f32 across chunks (rounded to bf16 only as an mma operand)
//   fold: f32 (cuBLAS, no TF32)
//
// ---- Floors against the float64 reference (test/kernels/kda/test_kda.cu) ------------
//   o:    rel-L2 ≤ kKdaRelL2Floor and max |o − ref| ≤ kKdaMaxAbsFloor · max |ref|
//   S, M, D: rel-L2 ≤ kKdaRelL2Floor (per head stacked), max-abs ≤ kKdaMaxAbsFloor · max |ref|
// bf16 operands carry 2^−9 relative rounding; the floors allow a few of those.
//
// ---- Bytes per (chunk, head) tile ----------------------------------------------------
//   prepare: reads q, k, v, g (64 KB), writes W, Ũ, K̂, Qg (64 KB), Aqk (8 KB), Γ (0.5 KB);
//   forward walk: reads W, Ũ, K̂, Qg, Aqk, Γ (72.5 KB), writes o (16 KB). The package walk
//   reads W, Ũ, K̂, Γ and writes only M, D. These set the DRAM floor of each pass.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_buffer.h"
#include "gemm.h"

namespace pb {

constexpr int kKdaHeadDim = 128;  // dk = dv
constexpr int kKdaChunkLen = 64;
constexpr double kKdaRelL2Floor = 1.5e-2;
constexpr double kKdaMaxAbsFloor = 3e-2;

struct KdaInputs {
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* k = nullptr;
  const __nv_bfloat16* v = nullptr;
  const __nv_bfloat16* g = nullptr;
  const __nv_bfloat16* beta_pre = nullptr;
  int64_t q_ld = 0, k_ld = 0, v_ld = 0, g_ld = 0, beta_ld = 0;  // row strides in elements
  const float* A_log = nullptr;    // [H]
  const float* dt_bias = nullptr;  // [H*128]
};

// The chunk products of one segment (capacity max_tokens, heads).
class KdaWorkspace {
 public:
  KdaWorkspace() = default;
  KdaWorkspace(int64_t max_tokens, int heads);
  int64_t max_tokens() const { return max_tokens_; }
  int heads() const { return heads_; }
  int64_t chunks() const { return (max_tokens_ + kKdaChunkLen - 1) / kKdaChunkLen; }
  size_t bytes() const;
  // What KdaWorkspace(max_tokens, heads) allocates, without a device.
  static size_t bytes_for(int64_t max_tokens, int heads);

  DeviceBuffer<__nv_bfloat16> w, u, khat, qg;  // [H, chunks, 64, 128]
  DeviceBuffer<__nv_bfloat16> aqk;              // [H, chunks, 64, 64]
  DeviceBuffer<float> gamma;                    // [H, chunks, 128]

 private:
  int64_t max_tokens_ = 0;
  int heads_ = 0;
};

// The state walk's kernel (one dispatch in kda.cu; all give the same results up to f32
// summation order):
//   kHead    kda_walk_kernel (kda_walks.cu): one CTA of 16 warps per head (per head and
//            {D, M} for the package), all 128 rows of S in registers; every workspace byte
//            read once
//   kHalves  kda_walk_half_kernel (kda_walks.cu): two CTAs of 16 warps per head (four for the
//            package), 64 rows of S each, 2 CTAs/SM; bit-identical to kHead (each re-reads W,
//            Qg, K̂, Aqk, so the chain per chunk is half as long)
//   kWgmma   kda_walk_wgmma_kernel (kda_walk_wgmma.cu): one CTA of 2 warpgroups per head on
//            wgmma (sm_90a), each walking 64 rows of S as its f32 accumulator, the state the A
//            operand from registers; FORWARD ONLY (kda_package refuses it), equal to kHead up
//            to f32 summation order
enum class KdaWalk { kHead, kHalves, kWgmma };

// Whether KdaWalk::kWgmma runs on the current device (sm_90: wgmma); elsewhere it throws.
bool kda_wgmma_walk_supported();
// The defaults, what the superstep's KDA block runs. The forward: kWgmma on sm_90 (the
// fastest there), else kHead (no wgmma, e.g. sm_100). The package: kHalves (its half-length
// chains beat kHead's; kWgmma covers the forward only).
KdaWalk kda_default_forward_walk();
constexpr KdaWalk kKdaPackageWalk = KdaWalk::kHalves;

// Gates, norms and the state-independent chunk products of tokens [0, tokens).
void kda_prepare(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws, cudaStream_t stream);

// The forward from S_in (null = zeros): o (may be null: state only), S_out (may be null;
// may alias S_in). tokens ≤ the tokens kda_prepare saw.
void kda_forward_state(const KdaWorkspace& ws, int64_t tokens, const float* S_in, __nv_bfloat16* o, int64_t o_ld,
                       float* S_out, cudaStream_t stream, KdaWalk walk);

// prepare + forward_state.
void kda_forward(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws, const float* S_in,
                 __nv_bfloat16* o, int64_t o_ld, float* S_out, cudaStream_t stream, KdaWalk walk);

// The segment's package from kda_prepare's products: M [H, dk, dk], D [H, dv, dk].
void kda_package(const KdaWorkspace& ws, int64_t tokens, float* M, float* D, cudaStream_t stream, KdaWalk walk);

// S [H, dv, dk] = D[0];  S = S · M[j] + D[j] for j = 1..segments−1 (M[0] not read).
// M, D: host arrays of device pointers. scratch: [H, dv, dk] f32, distinct from S.
void kda_fold(const Blas& blas, const float* const* M, const float* const* D, int segments, int heads, float* S,
              float* scratch, cudaStream_t stream);

}  // namespace pb
