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
// (= the K_t = (I − β k kᵀ) Diag(α) K_{t−1} + β k vᵀ, o = K_tᵀ q · scale, with K = Sᵀ.)
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
//     (v2: the B operand is bf16(k̂·2^{b_e − b}) times a per-channel block factor, rounded again)
//   (I + L)^{-1}: 16x16 diagonal blocks f32 CUDA cores; off-diagonal blocks f32 (v1) or
//     tf32 mma with f32 accumulate (v2; 2^-11 operand truncation, below the bf16 A·β rounding)
//   W, Ũ (A·β as bf16), W S0ᵀ, Q S0ᵀ, Aqk U, Uᵀ K̂: bf16 operands, f32 accumulate
//   the state S, M, D: f32 across chunks (rounded to bf16 only as an mma operand)
//   fold: f32 (cuBLAS, no TF32)
//
// ---- Floors against the float64 reference (test/kernels/kda/test_kda.cu) ------------
//   o:    rel-L2 ≤ kKdaRelL2Floor and max |o − ref| ≤ kKdaMaxAbsFloor · max |ref|
//   S, M, D: rel-L2 ≤ kKdaRelL2Floor (per head stacked), max-abs ≤ kKdaMaxAbsFloor · max |ref|
// bf16 operands carry 2^−9 relative rounding; the floors allow a few of those.
//
// ---- What bounds it (16k tokens × 96 heads: 24576 (chunk, head) tiles; H200 ~3.3 TB/s) ----
//   bytes per tile   prepare: reads q, k, v, g 64 KB, writes W, Ũ, K̂, Qg 64 KB + Aqk 8 KB
//                    + Γ 0.5 KB = 136.5 KB → 3.35 GB → ≥ ~1.0 ms at 3.3 TB/s.
//                    walk (forward): reads the 72.5 KB, writes o 16 KB → 2.18 GB → ≥ ~0.66 ms.
//   So the workspace design cannot go below ~1.7 ms for kda.forward (0.22 of a 783 TFLOP/s
//   GEMM); the 0.20 bar (≤ 1.86 ms) needs both passes at ≥ 90% of DRAM bandwidth, or fewer
//   bytes (e.g. the walk computing Ũ = (Aβ) V from v itself: −16 KB per tile net).
//   prepare (measured v1: 2.73 ms; ncu 62.7% issue, IPC 2.51, DRAM 20%) is instruction bound:
//     4.82 M cycles × 2.51 IPC × 132 SMs / 24576 tiles ≈ 65 k warp-instructions per tile, of
//     which tensor-core work is ~0.5 k (L, Aqk: 10 block pairs × 16 mma; W, Ũ: 80 mma). The
//     scalar work by count (estimates): exponentials 8192 gates + 3·8192 (Qg, K̂, qe/ke)
//     + 8192 (k̂·2^b) + 20480 (the B operands of the 10 block pairs) ≈ 61 k ex2 per tile; the
//     f32 blockwise inverse ~7 k warp-instr (6 barriers); gates + cumsum ~8 k; norms ~3 k.
//     To reach ~1.0 ms it must drop to ≤ ~25 k warp-instr per tile: inverse off-diagonal
//     blocks on mma, the pair B operands as k̂·2^{b_{16(I+1)} − b} (computed once per
//     token and channel) times a per-channel block factor, 3+ CTAs/SM.
//   prepare v2 (KdaPrepare::kV2) does that: exponentials once per (token, channel) and per
//     (pair, channel), pair B operands rescaled from one bf16 tile, the inverse's off-diagonal
//     blocks on tf32 mma, bf16(A·β) built once in phase 4 for phase 5's ldmatrix, 73.75 KiB smem,
//     80 registers → 3 CTAs/SM (24 warps). H200, 16k x 96 heads: 1.36 ms first; ncu then counted
//     33.7 k warp-instructions per tile at IPC 2.43 (issue 60%). Cutting them to 26.5 k gained
//     nothing until g moved from 16 direct loads per thread (scheduled one at a time: 16 DRAM
//     round trips per tile) to cp.async beside q and k: 1.23 ms (results/h200/kda-prepare.txt).
//     What bounds it now is latency, not issue: five barrier-separated phases whose slowest warp
//     sets each phase, and each tile's loads exposed at its start (no room to stage the next
//     tile's 64 KB). ~1.25x its DRAM floor needs overlap across tiles (a persistent, pipelined
//     form) or more warps per SM, not fewer instructions.
//   walk, v1 (KdaWalk::kSlices, measured 1.43 ms): four 32-row CTAs per head each re-read
//     W, Qg, K̂, Aqk: 4× the L2 → SM traffic (7.1 GB; ncu L2 throughput 86%, hit rate 27%,
//     DRAM 3.05 TB/s).
//   walk, head (KdaWalk::kHead, the default): one 16-warp CTA per head reads each byte once;
//     per chunk 1696 mma.m16n8k16 (A 1024, B 160, C 512) ≈ 1.8 µs at ~1000 MAC/clk/SM vs
//     88.5 KB of traffic ≈ 2.6 µs at a 96-SM share of 3.3 TB/s → memory bound, expected
//     ~0.7–0.9 ms (96 of 132 SMs busy; loads of chunk n+1 in flight during chunk n).
//     The package runs 2 CTAs per head (D, M): 192 CTAs at 1 CTA/SM = 2 waves.
//     Measured 1.22 ms at 16k = 4.77 µs per chunk, while the chunk's mma work is ~1.5-1.8 µs
//     and its bytes ~2.6 µs at a 96-SM share: the per-chunk chain (A → barrier → B, C →
//     barrier) with 4 warps per scheduler is latency bound, and 36 SMs idle.
//   walk, halves (KdaWalk::kHalves; the KDA block's package): 2 CTAs per head by S rows (64 each, 16
//     warps: each warp's A, B and C tiles half the head walk's, so the chain halves), one stage
//     of tiles with the loads split by phase (W, Qg, Ũ's 64 columns after A, landing during B
//     and C; K̂, Aqk, Γ after C, landing during A); 88.5 KiB smem, 64 registers (ptxas, sm_90a),
//     no spills → 2 CTAs/SM, the forward's 192 CTAs all resident. L2 → SM bytes 1.78x the head
//     walk's (W, Qg, K̂, Aqk, Γ read by both halves), DRAM bytes unchanged → expected
//     ~0.7-0.8 ms. The package runs 4 CTAs per head (D and M halves): 384 CTAs, 264 resident,
//     two waves of half-length chains (the head walk's package: two waves of full-length ones).
//     Bit-identical to the head walk (same operands, same mma k-steps in the same order;
//     checked bit for bit by test_kda and the bench).
//     Measured at 16k x 96 heads (H200): forward walk 1290.7 µs against the head walk's 1232.3
//     (the exposed single-stage loads cost what the shorter chain saves), package 1285.8 µs
//     against 1497.7 (-14%: half-length chains in its two waves). So the forward keeps kHead
//     and the KDA block's package takes kHalves.
//   Shared-memory traffic of the head walk per chunk (counted from the code, an estimate for
//     ncu to confirm): A's ldmatrix.x4 (W, Qg, S0 twice; 16 warps re-read each other's
//     operands 4x) 256 KB, B 60 KB, C 128 KB, U and S0 (bf16) stores 64 KB, the cp.async
//     fill 74 KB: ~580 KB ≈ 4.5 k cycles at 128 B/clk ≈ 2.3-2.5 µs of the measured 4.8 µs,
//     against ~1 µs of tensor work. So the walk is bound by shared memory and the chunk's
//     barriers more than by mma or DRAM; warpgroup MMA (wgmma: 64-row tiles read once per
//     warpgroup from smem, S as its register accumulator) would cut the operand traffic
//     about 2.5x. The forward's 0.20 bar needs that and a prepare closer to its DRAM floor.
//   walk, wgmma (KdaWalk::kWgmma, forward only; the KDA block's forward on sm_90): one CTA of 2
//     warpgroups per head (163 KiB smem, 1 CTA/SM). The rows of S are independent, so warpgroup h
//     walks rows 64 h.. alone with S as its f32 accumulator, and every product is taken
//     transposed so that the state is wgmma's A operand from registers (Pᵀ = S0 Wᵀ, Oᵀ = S0 Qgᵀ,
//     S += Uᵀ K̂, Oᵀ += Uᵀ Aqkᵀ: the bf16-packed accumulator fragment is the A-register
//     fragment): the tensor core reads only the B tiles (112 KB per chunk), and the warpgroups
//     meet only at the one barrier per chunk that recycles a stage. W, Ũ, K̂, Qg and Γ arrive by
//     TMA (one thread, tensor maps with the 128-byte swizzle, an mbarrier per stage), Aqk's lower
//     triangle by cp.async; o leaves through a per-warp smem tile (stmatrix.trans) as 16-byte
//     stores of token rows. Per chunk and head 28 wgmma-units of m64n64k16 work (3.5 M MAC,
//     ~1.7 k cycles at 2048 MAC/clk/SM).
//     History, H200, 16k x 96 heads: the first form (4 warpgroups, S0 and U through smem as
//     shared operands, 195 KiB) ran 1042-1058 µs, bound by its chain: 909 µs with no loads (ncu:
//     tensor pipe 18% busy, half the stall cycles at CTA barriers). The register-operand form:
//     775 µs, 735.6 µs with Ũᵀ read by ldmatrix.trans (2-byte loads before); its chain alone
//     (PB_KDA_WALK_PROBE=1) 655 µs (2.6 µs per chunk), its loads alone (=2) 426 µs. Taking
//     Pᵀ and Oᵀ as one m64n128k16 over a [W; Qg] tile measured slower (770 µs), so the Oᵀ
//     wgmmas overlap the U step instead. S_out equals kHead's bit for bit at 16k.
//     ptxas serializes the wgmma pipeline when the next chunk's loads or o's stores sit between a
//     batch's issue and its wait (C7514), so those stay on the chain: with 17 cp.async per thread
//     (their address arithmetic) and 32 two-byte o stores per thread per chunk the walk ran
//     722 µs; o staged through smem 611 µs; + the tiles by TMA 562-589 µs (one A/B/C call and two
//     repeats, results/h200/kda-tma.txt). The forward (prepare + walk) then runs 1822-1868 µs =
//     0.204-0.213 of the same run's GEMM rate, the 0.20 bar; the prepare is 72% of it.
//     What bounds it: the prepare (latency-bound, ~1.3x its DRAM floor, above) and the walk's
//     per-chunk chain (Pᵀ → U → S update → barrier), ~2.2x its tensor work.
//   forward, pipelined (kda_forward_pipelined, H200, 16k x 96 heads; measured with the 722 µs
//     walk, before TMA; with the 562-589 µs walk it ties the plain forward): a walk CTA (~200
//     registers x 256 threads) leaves no room for a prepare CTA (80 x 256), so while a piece's
//     walk holds 96 SMs only 36 prepare the next piece, and the last piece's walk runs alone.
//     Equal pieces: ~25-30 µs per piece of landing and draining (4 pieces 1916.7 against 1960.1
//     µs). Two pieces at 4:1 (shrink 0.25): 1826-1971 µs over four cards, median 0.196 of the same
//     run's GEMM rate, the plain forward's median 0.189 (results/h200/kda-pipelined.txt). Bound:
//     the SM time of both passes on exclusive SMs plus their shared DRAM.
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

  DeviceBuffer<__nv_bfloat16> w, u, khat, qg;  // [H, chunks, 64, 128]
  DeviceBuffer<__nv_bfloat16> aqk;              // [H, chunks, 64, 64]
  DeviceBuffer<float> gamma;                    // [H, chunks, 128]

 private:
  int64_t max_tokens_ = 0;
  int heads_ = 0;
};

// The state walk's kernel (one dispatch in kda.cu; all give the same results up to f32
// summation order):
//   kHead    kda_walk_kernel: one CTA of 16 warps per head (per head and {D, M} for the
//            package), all 128 rows of S in registers; every workspace byte read once
//   kHalves  kda_walk_half_kernel: two CTAs of 16 warps per head (four for the package), 64
//            rows of S each, 2 CTAs/SM; bit-identical to kHead (each re-reads W, Qg, K̂, Aqk)
//   kWgmma   kda_walk_wgmma_kernel (kda_walk_wgmma.cu): one CTA of 2 warpgroups per head on
//            wgmma (sm_90a), each walking 64 rows of S as its f32 accumulator, the state the A
//            operand from registers; FORWARD ONLY (kda_package refuses it), equal to kHead up
//            to f32 summation order (on the H200 its S_out equalled kHead's bit for bit at
//            16k); 562-589 µs against kHead's ~1207 at 16k x 96 heads (H200)
enum class KdaWalk { kHead, kHalves, kWgmma };

// Whether KdaWalk::kWgmma runs on the current device (sm_90: wgmma); elsewhere it throws.
bool kda_wgmma_walk_supported();
// The defaults, what the superstep's KDA block runs. The forward: kWgmma on sm_90 (the
// fastest there), else kHead (e.g. sm_100: no wgmma). The package: kHalves (its two waves of
// half-length chains beat kHead's full-length ones; kWgmma covers the forward only).
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
