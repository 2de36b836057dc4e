// Plain C++ float64 reference of the KDA core (docs/design.md §2.1 KDA mixer step 8,
// §3 "KDA across ranks"): a gated delta rule with a per-key-channel decay.
// Host code only (no CUDA header); the GPU tests convert their bf16 data to the
// float / double arrays taken here.
//
// ---- Shapes (house notation, row-major, last index fastest) ----------------
//   T tokens, H heads, dk key/query channels, dv value channels (K3: 96, 128, 128)
//   g          [T, H*dk] float   forget-gate pre-activation (= [T, H, dk])
//   beta_pre   [T, H]    float   beta pre-activation
//   A_log      [H]       float
//   dt_bias    [H*dk]    float
//   log_alpha  [T, H, dk] double log-decay, in (-5, 0)
//   beta       [T, H]    double in (0, 1)
//   q, k       [T, H, dk] double L2-normalized (kda_l2norm)
//   v          [T, H, dv] double
//   o          [T, H, dv] double
//   S          [H, dv, dk] double  the recurrent state, VALUE-MAJOR: S[h][j][c]
//                                   couples value channel j with key channel c
//   M          [H, dk, dk] double  package transition (acts on the key side)
//   D          [H, dv, dk] double  package offset (= the state from zero)
//
// ---- The convention (per head; vectors are columns) -------------------------
// With the state stored value-major (S = [dv, dk], the transpose of the
// key-major [dk, dv] memory of flash-linear-attention), one token is
//   S_t = S_{t-1} · Diag(α_t) · (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ
//   o_t = scale · S_t q_t                           (o_t [dv], q_t [dk])
// i.e. with the key-major state K_t = S_tᵀ [dk, dv], exactly the key-major form
//   K_t = (I − β_t k_t k_tᵀ) Diag(α_t) K_{t−1} + β_t k_t v_tᵀ,  o_t = K_tᵀ q_t · scale:
// the decay multiplies the KEY side,
// α_t per key channel, applied BEFORE the delta-rule read (the read sees the
// decayed state: u_t = β_t (v_t − S_{t−1} Diag(α_t) k_t), S_t = S_{t−1} Diag(α_t)
// + u_t k_tᵀ). Because the map is affine in S with the state on the LEFT,
//   S_out = S_in · M + D,   M = Π_{t=1..T} Diag(α_t)(I − β_t k_t k_tᵀ)  [dk, dk]
// (product in token order, left to right), D = S_out from S_in = 0  [dv, dk]:
// DESIGN's "S_out = S_in·M + D" reads literally, and the fold over ranks is
//   S = D_0;  S = S·M_j + D_j   (j = 1..r−1, one [dv,dk]x[dk,dk] GEMM per head).
// ‖M‖₂ ≤ 1 (each factor is a product of a diagonal in (0,1) and I − β k kᵀ with
// β‖k‖² < 1), so folding never amplifies: the fold is non-expansive.
//
// ---- Gates and normalization (all in double here) ---------------------------
//   log α[t,h,c] = −5 · sigmoid(exp(A_log[h]) · (g[t,h·dk+c] + dt_bias[h·dk+c]))
//   α = exp(log α) ∈ (e^−5, 1);   β[t,h] = sigmoid(beta_pre[t,h]) ∈ (0, 1)
//   sigmoid(x) = 1 / (1 + exp(−x))
//   l2norm(x) = x / sqrt(Σ x² + 1e-6)     (eps 1e-6 ADDED to the sum of squares,
//              as flash-linear-attention's l2norm; the kernel does this in f32)
//   scale = dk^−0.5 (K3: 128^−0.5); applied to the output (o = scale · S q).
//
// ---- The chunked WY/UT form (kda_chunked; chunk C, last chunk may be short) --
// Per head and chunk of n ≤ C tokens r = 0..n−1 with entry state S0 [dv, dk]:
//   b_r = Σ_{i≤r} log α_i      [dk] cumulative log-decay inside the chunk (≤ 0,
//                              non-increasing in r)
//   L[r,i]   = β_r Σ_c k_r[c] k_i[c] e^{b_r[c]−b_i[c]}    i < r (strictly lower)
//   Aqk[r,i] =     Σ_c q_r[c] k_i[c] e^{b_r[c]−b_i[c]}    i ≤ r
//   A = (I + L)^{-1}  by forward substitution (unit lower triangular)
//   W  = A · diag(β) · (K ∘ e^{b})         [n, dk]   (row i: k_i ∘ e^{b_i})
//   Ũ  = A · diag(β) · V                   [n, dv]
//   U  = Ũ − W · S0ᵀ                       [n, dv]   (the delta-rule "new values")
//   o_r = scale · ( S0 (q_r ∘ e^{b_r}) + Σ_{i≤r} Aqk[r,i] u_i )
//   K̂  = K ∘ e^{b_{n−1} − b}               [n, dk]   (row i: k_i ∘ e^{b_{n−1}−b_i})
//   S_next = S0 · Diag(e^{b_{n−1}}) + Uᵀ K̂  = S0 · (Γ − Wᵀ K̂) + Ũᵀ K̂
// so the chunk's transition is Tc = Γ − Wᵀ K̂ [dk, dk] (Γ = Diag(e^{b_{n−1}})), and
// kda_package accumulates M ← M·Γ − (M·Wᵀ)·K̂ (low rank: 4 C dk² per chunk, no
// dk³ product) and D ← D·Tc + Ũᵀ K̂ (the zero-state forward without outputs).
//
// Stability. Every exponential is of a non-positive number: the decay between
// two positions is formed as e^{b_r − b_i} (difference first, then exp, i ≤ r),
// and e^{b_r}, e^{b_{n−1}−b_i} are ≤ 1. Nothing overflows; underflow only drops
// terms that are genuinely below 2^−126 (f32) of a unit-bounded state. The
// factored form e^{b_r}·e^{−b_i} (what lets a kernel use GEMMs for L and Aqk)
// needs e^{+|b_i|}: with log α down to −5 per token, |b| reaches 320 over a
// 64-chunk, past f32's e^88.7; the reference never forms it. A kernel that
// factors must anchor inside sub-chunks whose span keeps |b_r − b_anchor| < ~80
// (16 tokens × 5 = 80: sub-chunks of 16 anchored at their first token), and use
// the direct difference across sub-chunks. The lower bound −5 is what makes
// such a bound exist. W and Ũ are bounded too: −W·S0ᵀ is S0's share of the
// delta values u_r = β_r (v_r − S_{r−1} Diag(α_r) k_r), and S0 ↦ S_{r−1} is
// non-expansive, so ‖w_r‖₂ ≤ β_r < 1; likewise ‖ũ_r‖ ≤ Σ_{i≤r} β_i ‖v_i‖.
// (A itself is not used outside these products.)
//
// ---- FLOPs (per head and chunk of c tokens; a multiply-add = 2) -------------
// kda_forward_flops counts dense c x c tiles, the way a tensor-core kernel
// computes them (masked), and for dk = dv = d equals harness/analytic/cost.cpp's
// kda_forward exactly:
//   K Kᵀ, Q Kᵀ (with decays)     2·2 c² dk
//   UT transform (solve)         c³
//   W = A K̃, Ũ = A V             2 c² dk + 2 c² dv
//   Q S, W S, K̂ᵀ U               3 · 2 c dk dv
//   Aqk U                        2 c² dv
//   = 6 c² dk + 4 c² dv + c³ + 6 c dk dv        (d: 10 c² d + c³ + 6 c d²)
// times ceil(T/c)·H. The reference itself, exploiting the triangles, does per
// chunk of n tokens (n = c except the tail):
//   (3n² + n) dk + 2 n(n+1) dv + (n³ − n)/3 + 6 n dk dv
// (plus the per-pair per-channel exponentials, not counted): kda_forward_flops_exact.
//
// kda_package_flops (dense tiles, this algorithm) per chunk:
//   K Kᵀ 2c²dk, solve c³, W 2c²dk, Ũ 2c²dv, W Dᵀ 2c dk dv, K̂ᵀ U 2c dk dv,
//   M Wᵀ 2c dk², (M Wᵀ) K̂ 2c dk²
//   = 4 c² dk + 2 c² dv + c³ + 4 c dk dv + 4 c dk²   (d: 6 c² d + c³ + 8 c d²)
// cost.cpp's kda_package counts 2 d³ + 4 c d² per chunk (an explicit d x d
// transition and a d³ product, no intra-chunk work for D). For the lead to
// update cost.cpp: with c = 64, d = 128 this algorithm is 11,796,480 FLOPs per
// chunk and head vs cost.cpp's 8,388,608; if the forward reuses the package
// pass's L/A/W/Ũ (they do not depend on the state), the package's marginal cost
// is only 4 c dk dv + 4 c dk² = 8 c d² (8,388,608 at K3: numerically the same
// as cost.cpp's, since 2 d³ = 4 c d² when d = 2c, but not the same formula).
#pragma once

#include <cstdint>

namespace pb::ref {

constexpr double kKdaDecayBound = 5.0;  // log α = −5·sigmoid(·) ∈ (−5, 0)
constexpr double kKdaL2Eps = 1e-6;      // added to Σ x² before the square root
constexpr int kKdaChunk = 64;

struct KdaShape {
  int64_t tokens = 0;  // T
  int heads = 0;       // H
  int dk = 0;          // key / query channels per head
  int dv = 0;          // value channels per head
};

// scale = dk^−0.5 (K3: 128^−0.5).
double kda_default_scale(int dk);

// log_alpha [T, H, dk], beta [T, H] from the pre-activations (shapes above).
// Either output may be null.
void kda_gates(const float* g, const float* beta_pre, const float* A_log, const float* dt_bias,
               int64_t tokens, int heads, int dk, double* log_alpha, double* beta);

// out[r] = x[r] / sqrt(Σ x[r]² + 1e-6) for each of `rows` rows of d channels
// (q or k: rows = T·H, d = dk).
void kda_l2norm(const float* x, int64_t rows, int d, double* out);

// The ground truth: token by token, as the convention above reads.
//   S_in  [H, dv, dk] or null (= zeros);  S_out [H, dv, dk] or null;  o [T, H, dv] or null.
// S_in may alias S_out.
void kda_sequential(const double* q, const double* k, const double* v, const double* log_alpha,
                    const double* beta, const KdaShape& s, double scale, const double* S_in,
                    double* o, double* S_out);

// The chunked WY/UT form (chunk ≥ 1, any T ≥ 0). Same arguments and outputs as
// kda_sequential; q may be null when o is null.
void kda_chunked(const double* q, const double* k, const double* v, const double* log_alpha,
                 const double* beta, const KdaShape& s, double scale, int chunk, const double* S_in,
                 double* o, double* S_out);

// The segment's affine package from the zero state, chunked:
//   M [H, dk, dk], D [H, dv, dk] with S_out = S_in · M + D for every S_in.
void kda_package(const double* k, const double* v, const double* log_alpha, const double* beta,
                 const KdaShape& s, int chunk, double* M, double* D);

// S [H, dv, dk] = D_0;  S = S · M_j + D_j  for j = 1..segments−1
// (M[j] [H, dk, dk], D[j] [H, dv, dk]; M[0] is not read and may be null).
void kda_fold(const double* const* M, const double* const* D, int segments, int heads, int dk,
              int dv, double* S);

// FLOP counts (see the block above).
double kda_forward_flops(int64_t tokens, int heads, int dk, int dv, int chunk);
double kda_forward_flops_exact(int64_t tokens, int heads, int dk, int dv, int chunk);
double kda_package_flops(int64_t tokens, int heads, int dk, int dv, int chunk);

}  // namespace pb::ref
