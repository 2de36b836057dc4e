// The KDA core: kda_prepare (intra-chunk), the state walk (forward and
// package), the fold. Contract, precision and floors: kda.h; convention and
// stability: kda_ref.h.
//
// kda_prepare_kernel — grid (chunks, heads), 256 threads, 73.75 KiB smem, 3 CTAs/SM: b per
//   (token, channel) in registers, two ex2 per element, pair B operands rescaled per channel,
//   inverse off-diagonal blocks on tf32 mma (steps at its definition below).
// kda_walk_kernel — grid (heads, 1 or 2 for the package's D, M), 512 threads, 193 KiB, 1 CTA/SM
//   (KdaWalk::kHead; the forward's default off sm_90): all 128 rows of S per CTA, S in f32 registers
//   (warp: 32 rows × 32 key channels); two stages of workspace tiles, chunk n+1's cp.async
//   issued right after the barrier that opens chunk n. Per chunk: top barrier; A: P = W S0ᵀ,
//   O = Qg S0ᵀ (warp: 16 tokens × 32 rows), U = Ũ − P → sU; barrier; B: O += Aqk U → o;
//   C: S = S0 Γ + Uᵀ K̂, S (bf16) → sS for the next chunk.
// kda_walk_half_kernel — grid (heads, 2, or 4 for the package's D, M halves), 512 threads,
//   88.5 KiB, 64 registers, 2 CTAs/SM (KdaWalk::kHalves): 64 rows of S per CTA (warp: 16 rows ×
//   32 key channels), one stage of workspace tiles; W, Qg, Ũ's 64 columns of chunk n+1 issued
//   after A of chunk n, K̂, Aqk, Γ of chunk n at its top barrier. Same phases and barriers as
//   kda_walk_kernel, each warp's tiles halved; bit-identical results.
// KdaWalk::kWgmma (forward only): kda_walk_wgmma_kernel in kda_walk_wgmma.cu (launch_walk_wgmma,
//   kda_walk.h; StateParams in kda_state_params.h).
// Swizzled smem tiles: 16-byte chunk j of row r sits at chunk j ^ (r & 7) of the row,
// so the 8 rows an ldmatrix (or a fragment load) touches fall in distinct bank groups.
#include "kda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "check.h"
#include "ptx.cuh"
#include "kda_tiles.h"
#include "kda_state_params.h"
#include "kda_walk.h"

namespace pb {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = kKdaHeadDim;  // 128
constexpr int kC = kKdaChunkLen;  // 64
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 256;
static_assert(kD == 128 && kC == 64, "kda: the tiling assumes dk = dv = 128 and chunk 64");

using namespace ptx;  // the shared PTX wrappers (ptx.cuh)

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------
// Swizzled tiles (byte offsets; row_bytes a multiple of 128)
// ---------------------------------------------------------------------------

using kda_tiles::lane_k_then_rows;
using kda_tiles::lane_rows_then_k;
using kda_tiles::RowChunk;
using kda_tiles::swz;
// element (r, c) of a bf16 [rows][128] tile / f32 [rows][128] tile / f32 or bf16 [rows][64] tile
__device__ __forceinline__ uint32_t at_h128(int r, int c) { return swz(r, c >> 3, 256) + ((c & 7) << 1); }
__device__ __forceinline__ uint32_t at_f64(int r, int c) { return swz(r, c >> 2, 256) + ((c & 3) << 2); }

template <class T>
__device__ __forceinline__ T& sm(unsigned char* base, uint32_t off) {
  return *reinterpret_cast<T*>(base + off);
}

// cp.async a [64][kCols] bf16 tile (row r at g + r * ld) into a swizzled smem tile;
// rows >= valid are zero-filled.
// Thread tid moves chunk tid % (kCols / 8) of rows tid / (kCols / 8) + k · kRowStep.
template <int kCols, int kNT = kThreads>
__device__ __forceinline__ void load_tile(unsigned char* s, const bf16* g, int64_t ld, int valid, int tid) {
  constexpr int kChunks = kCols / 8, kRowBytes = kCols * 2, kRowStep = kNT / kChunks;
  static_assert(kNT % kChunks == 0 && kC % kRowStep == 0, "load_tile: threads must cover whole rows");
  const int c = tid % kChunks, r0 = tid / kChunks;
  const bf16* src = g + int64_t(r0) * ld + c * 8;
#pragma unroll
  for (int k = 0; k < kC / kRowStep; ++k) {
    const int r = r0 + k * kRowStep;
    const bool ok = r < valid;
    cp_async_16(smem_addr(s + swz(r, c, kRowBytes)), ok ? src + int64_t(k * kRowStep) * ld : g, ok);
  }
}

// ---------------------------------------------------------------------------
// The prepare's parameters
// ---------------------------------------------------------------------------

struct PrepParams {
  KdaInputs in;
  int64_t tokens;
  int64_t ws_chunks;  // the workspace's chunk capacity (layout stride)
  float scale;
  bf16 *w, *u, *khat, *qg, *aqk;
  float* gamma;
};

// ---------------------------------------------------------------------------
// kda_prepare_kernel: the chunk products, with the exponentials once per (token, channel) and
// per (block pair, channel), the (I + L)^{-1} off-diagonal blocks on tensor cores (tf32) and
// 73.75 KiB smem (3 CTAs/SM).
//   thread (qt, cp) = (tid >> 6, tid & 63) owns token block qt (rows 16qt..16qt+15) and
//   channels 2cp, 2cp+1 from the gates to the per-element products, b in registers:
//   0 cp.async g (into sX), then q, k; gates once g lands (one ex2 + one rcp each), in-block cumsum
//     loc (registers), block totals and first-row values → smem
//   1 block offsets off_J (prefix of the totals), norms (a thread per half row, rsqrt),
//     the pair factors F_{R,I}[c] = 2^{b_{16R} − b_{16I+15}} (10 × 128), Γ
//   2 per element: fr = 2^{b − b_a} (≤ 1), f1 = 2^{b_e − b} (≤ 1) (a, e: the block's first
//     and last row): qe = q̂ fr, ke = k̂ fr, kx = k̂ f1 → smem; Qg = scale·qe·2^{b_a},
//     K̂ = kx·2^{b_last − b_e} → workspace; kg = ke·2^{b_a} kept in registers (bf16x2)
//   3 the 10 pairs (R, I ≤ R) of L and Aqk: A operand qe/ke rows of block R, B operand
//     kx rows of block I times F_{R,I} per channel (≤ 1 for I < R, ≤ 2^{108} on the diagonal:
//     finite). Warps 0-3 take the diagonal pairs and then invert their 16x16 block (f32
//     substitution, written over L_RR); warps 4-7 the six off-diagonal pairs.
//   4 v → smem (cp.async, over kx), kg → smem (over ke); A_RI = −A_RR Σ_J L_RJ A_JI by
//     block distance on mma.m16n8k8.tf32 (warp = (R, I, 8-column half)), f32 in smem; each
//     final block also as Ab = bf16(A·β) (ab_at; the diagonal ones by the two warps idle at
//     distance 1)
//   5 W = (A·β) kg, Ũ = (A·β) V on mma.m16n8k16 (warp = product × column half × row blocks
//     {3, 0} or {2, 1}: 5 k-steps per warp), stored from the fragments
// ---------------------------------------------------------------------------

// d[16x8] += a[16x8] b[8x8], tf32 inputs (f32 bit patterns, low mantissa bits ignored).
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const float (&a)[4], float b0, float b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}
__device__ __forceinline__ float fast_rsqrt(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float2 mul2(float2 a, float2 b) { return make_float2(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y)); }
__device__ __forceinline__ float2 scale2(float2 a, float s) { return make_float2(__fmul_rn(a.x, s), __fmul_rn(a.y, s)); }
__device__ __forceinline__ uint32_t pack2(float2 v) { return pack_bf16x2(v.x, v.y); }

constexpr int kPrepPairs = 10;
// pair index → (R, I): the diagonal pairs first (warps 0-3), then the off-diagonal ones
__device__ __forceinline__ void prep_pair(int pr, int& R, int& I) {
  // R = {0,1,2,3,1,2,3,2,3,3}[pr], I = {0,1,2,3,0,1,2,0,1,0}[pr], two bits each (no local array)
  R = int((0xfb9e4u >> (2 * pr)) & 3u);
  I = int((0x124e4u >> (2 * pr)) & 3u);
}

// Ab = bf16(A·β) (A's column c scaled by β_c), phase 5's A operand: block (R, I ≤ R) row r, column
// c (< 16) as a bf16 [16][16] block in the 16-byte chunks 4R, 4R + 1 of rows 16 I + r of sQ's f32
// [64][64] tile, i.e. in its block (I, R), which holds no A (above the diagonal, or on it: the
// diagonal A blocks live in sL). ldmatrix-able: 8 rows of one chunk fall in 8 bank groups.
__device__ __forceinline__ uint32_t ab_at(int R, int I, int r, int c) {
  return swz(16 * I + r, 4 * R + (c >> 3), 256) + uint32_t(c & 7) * 2;
}

constexpr uint32_t kPrepQ = 0, kPrepK = 16384, kPrepX = 32768, kPrepL = 49152, kPrepF = 65536;
constexpr uint32_t kPrepTot = kPrepF + kPrepPairs * kD * 4, kPrepLoc0 = kPrepTot + 4 * kD * 4;
constexpr uint32_t kPrepBeta = kPrepLoc0 + 4 * kD * 4, kPrepInvQ = kPrepBeta + 256, kPrepInvK = kPrepInvQ + 256;
constexpr uint32_t kPrepSmem = kPrepInvK + 256;  // 75520 bytes: 3 CTAs/SM
static_assert(3 * (kPrepSmem + 1024) <= 228 * 1024, "kda_prepare_kernel: 3 CTAs/SM do not fit");

__global__ void __launch_bounds__(kThreads, 3) kda_prepare_kernel(const PrepParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sQ = smem + kPrepQ;  // q raw → qe → A off-diagonal blocks f32 [64][64] + Ab (ab_at)
  unsigned char* sK = smem + kPrepK;  // k raw → ke → kg
  unsigned char* sX = smem + kPrepX;  // g → kx → v
  unsigned char* sL = smem + kPrepL;  // L f32 [64][64] (A_RR on the diagonal blocks); dead after phase 4
  float* sF = reinterpret_cast<float*>(smem + kPrepF);      // [10][128]
  float* sTot = reinterpret_cast<float*>(smem + kPrepTot);  // [4][128] block sums of la2
  float* sLoc0 = reinterpret_cast<float*>(smem + kPrepLoc0);  // [4][128] la2 of each block's first row
  float* sBeta = reinterpret_cast<float*>(smem + kPrepBeta);
  float* sInvQ = reinterpret_cast<float*>(smem + kPrepInvQ);
  float* sInvK = reinterpret_cast<float*>(smem + kPrepInvK);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const RowChunk pa = lane_rows_then_k(lane), pb = lane_k_then_rows(lane);
  const int chunk = blockIdx.x, h = blockIdx.y;
  const int64_t t0 = int64_t(chunk) * kC;
  const int n = p.tokens - t0 < kC ? int(p.tokens - t0) : kC;
  const int64_t tile = (int64_t(h) * p.ws_chunks + chunk);
  const int qt = tid >> 6, cp = tid & 63;
  // this thread's (row 16qt + i, channels 2cp..): byte offset in a swizzled bf16 [64][128] tile
  const uint32_t ebase = uint32_t(16 * qt) * 256 + uint32_t(cp & 3) * 4;
  const int echunk = cp >> 2;
  auto eoff = [&](int i) { return ebase + uint32_t(i) * 256 + (uint32_t(echunk ^ (i & 7)) << 4); };

  // ---- 0. loads; gates and the in-block cumsum in registers ----
  // g first (its own group: the gates start when it lands, q and k may still be in flight)
  load_tile<kD>(sX, p.in.g + t0 * p.in.g_ld + int64_t(h) * kD, p.in.g_ld, n, tid);
  cp_async_commit();
  load_tile<kD>(sQ, p.in.q + t0 * p.in.q_ld + int64_t(h) * kD, p.in.q_ld, n, tid);
  load_tile<kD>(sK, p.in.k + t0 * p.in.k_ld + int64_t(h) * kD, p.in.k_ld, n, tid);
  cp_async_commit();
  if (tid < kC) {
    sBeta[tid] = tid < n ? sigmoid_f32(__bfloat162float(p.in.beta_pre[(t0 + tid) * p.in.beta_ld + h])) : 0.0f;
  }
  const float a = expf(p.in.A_log[h]);
  const float2 bias = *reinterpret_cast<const float2*>(p.in.dt_bias + int64_t(h) * kD + 2 * cp);
  cp_async_wait_group<1>();
  __syncthreads();
  float2 loc[16];  // inclusive cumsum of la2 within the block (log2 units)
  {
    const float c1 = -kLog2e * a;  // 2^{c1 (g + bias)} = e^{−a (g + bias)}
    const float2 cb = make_float2(__fmul_rn(c1, bias.x), __fmul_rn(c1, bias.y));
    float2 run = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      // la2 = −5 log2(e) · sigmoid(a (g + bias)); 0 past T (computed on g = 0, then dropped: no branch)
      const float2 gv = unpack_bf16x2(sm<uint32_t>(sX, eoff(i)));
      const bool valid = 16 * qt + i < n;
      float2 la;
      la.x = __fmul_rn(-5.0f * kLog2e, fast_rcp(__fadd_rn(1.0f, fast_exp2(__fmaf_rn(gv.x, c1, cb.x)))));
      la.y = __fmul_rn(-5.0f * kLog2e, fast_rcp(__fadd_rn(1.0f, fast_exp2(__fmaf_rn(gv.y, c1, cb.y)))));
      la = valid ? la : make_float2(0.0f, 0.0f);
      run = make_float2(__fadd_rn(run.x, la.x), __fadd_rn(run.y, la.y));
      loc[i] = run;
    }
    *reinterpret_cast<float2*>(sTot + qt * kD + 2 * cp) = run;
    *reinterpret_cast<float2*>(sLoc0 + qt * kD + 2 * cp) = loc[0];
  }
  cp_async_wait_all();
  __syncthreads();

  // ---- 1. offsets, norms, pair factors, Γ ----
  float2 off = make_float2(0.0f, 0.0f), blast;
  {
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int J = 0; J < 4; ++J) {
      if (J == qt) off = acc;
      const float2 t = *reinterpret_cast<const float2*>(sTot + J * kD + 2 * cp);
      acc = make_float2(__fadd_rn(acc.x, t.x), __fadd_rn(acc.y, t.y));
    }
    blast = acc;
  }
  // norms: a thread per half row (threads 0-127 q, 128-255 k; row (tid / 2) % 64, channels
  // 64 (tid % 2) ..), two accumulators; the odd thread walks its chunks from 4 on, so the 8
  // lanes of each 16-byte access phase hit 8 distinct bank groups
  {
    const int r = (tid >> 1) & (kC - 1), half = tid & 1;
    const unsigned char* t = tid < 2 * kC ? sQ : sK;
    float ss[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint4 raw = sm<uint4>(const_cast<unsigned char*>(t), swz(r, 8 * half + (j ^ (4 * half)), 256));
      const uint32_t w4[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 x = unpack_bf16x2(w4[e]);
        ss[e & 1] = __fmaf_rn(x.x, x.x, ss[e & 1]);
        ss[e & 1] = __fmaf_rn(x.y, x.y, ss[e & 1]);
      }
    }
    float s2 = __fadd_rn(ss[0], ss[1]);
    s2 = __fadd_rn(s2, __shfl_xor_sync(0xffffffffu, s2, 1));
    if (half == 0) (tid < 2 * kC ? sInvQ : sInvK)[r] = fast_rsqrt(__fadd_rn(s2, 1e-6f));
  }
  // F_{R,I}[c] = 2^{b_{16R} − b_{16I+15}}, b_{16R} = off_R + loc0_R, b_{16I+15} = off_{I+1}:
  // thread → channel tid % 128 of the pairs of parity tid / 128, prefix[J] = off_J
  {
    const int c = tid & (kD - 1);
    float prefix[5];
    prefix[0] = 0.0f;
#pragma unroll
    for (int J = 0; J < 4; ++J) prefix[J + 1] = __fadd_rn(prefix[J], sTot[J * kD + c]);
#pragma unroll
    for (int pr = 0; pr < kPrepPairs; ++pr) {
      if ((pr & 1) != (tid >> 7)) continue;  // warp-uniform; R, I are constants once unrolled
      int R, I;
      prep_pair(pr, R, I);
      sF[pr * kD + c] = fast_exp2(__fsub_rn(__fadd_rn(prefix[R], sLoc0[R * kD + c]), prefix[I + 1]));
    }
  }
  if (tid < kC) {
    *reinterpret_cast<float2*>(p.gamma + tile * kD + 2 * cp) = make_float2(fast_exp2(blast.x), fast_exp2(blast.y));
  }
  __syncthreads();

  // ---- 2. per-element products ----
  uint32_t kg[16];
  {
    const float2 ba = make_float2(__fadd_rn(loc[0].x, off.x), __fadd_rn(loc[0].y, off.y));
    const float2 be = make_float2(__fadd_rn(loc[15].x, off.x), __fadd_rn(loc[15].y, off.y));
    const float2 pa2 = make_float2(fast_exp2(ba.x), fast_exp2(ba.y));  // 2^{b_a}
    const float2 qe2 = make_float2(fast_exp2(__fsub_rn(blast.x, be.x)), fast_exp2(__fsub_rn(blast.y, be.y)));
    const float2 spa = scale2(pa2, p.scale);
    bf16* qgp = p.qg + (tile * kC + 16 * qt) * kD + 2 * cp;
    bf16* khp = p.khat + (tile * kC + 16 * qt) * kD + 2 * cp;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int r = 16 * qt + i;
      const float2 b = make_float2(__fadd_rn(loc[i].x, off.x), __fadd_rn(loc[i].y, off.y));
      const float2 fr = make_float2(fast_exp2(__fsub_rn(b.x, ba.x)), fast_exp2(__fsub_rn(b.y, ba.y)));
      const float2 f1 = make_float2(fast_exp2(__fsub_rn(be.x, b.x)), fast_exp2(__fsub_rn(be.y, b.y)));
      const uint32_t o = eoff(i);
      const float2 qn = scale2(unpack_bf16x2(sm<uint32_t>(sQ, o)), sInvQ[r]);
      const float2 kn = scale2(unpack_bf16x2(sm<uint32_t>(sK, o)), sInvK[r]);
      const float2 qe = mul2(qn, fr), ke = mul2(kn, fr), kx = mul2(kn, f1);
      sm<uint32_t>(sQ, o) = pack2(qe);
      sm<uint32_t>(sK, o) = pack2(ke);
      sm<uint32_t>(sX, o) = pack2(kx);
      kg[i] = pack2(mul2(ke, pa2));
      *reinterpret_cast<uint32_t*>(qgp + i * kD) = pack2(mul2(qe, spa));
      *reinterpret_cast<uint32_t*>(khp + i * kD) = pack2(mul2(kx, qe2));
    }
  }
  __syncthreads();

  // ---- 3. pairs: L (strictly lower, ·β_r) → sL, Aqk (lower, ·scale) → workspace; diagonal inverses ----
  // warps 0-3: pair warp (diagonal) only; warps 4-7: pairs warp and warp + 4 (< 10)
  for (int pr = warp; pr < kPrepPairs; pr += warp < 4 ? kPrepPairs : 4) {
    int R, I;
    prep_pair(pr, R, I);
    const float* Fp = sF + pr * kD;
    float accL[2][4] = {}, accQ[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t aK[4], aQ[4], b[4];
      ldmatrix_x4(smem_addr(sK + swz(16 * R + pa.row, 2 * ks + pa.chunk, 256)), aK);
      ldmatrix_x4(smem_addr(sQ + swz(16 * R + pa.row, 2 * ks + pa.chunk, 256)), aQ);
      ldmatrix_x4(smem_addr(sX + swz(16 * I + pb.row, 2 * ks + pb.chunk, 256)), b);
      const float2 f0 = *reinterpret_cast<const float2*>(Fp + 16 * ks + 2 * t4);
      const float2 f8 = *reinterpret_cast<const float2*>(Fp + 16 * ks + 8 + 2 * t4);
      b[0] = pack2(mul2(unpack_bf16x2(b[0]), f0));
      b[1] = pack2(mul2(unpack_bf16x2(b[1]), f8));
      b[2] = pack2(mul2(unpack_bf16x2(b[2]), f0));
      b[3] = pack2(mul2(unpack_bf16x2(b[3]), f8));
      mma_16816(accL[0], aK, b[0], b[1]);
      mma_16816(accL[1], aK, b[2], b[3]);
      mma_16816(accQ[0], aQ, b[0], b[1]);
      mma_16816(accQ[1], aQ, b[2], b[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * R + g + 8 * hr, i = 16 * I + 8 * nt + 2 * t4;
        const float br = sBeta[r];
        float2 lv, qv;
        lv.x = i < r ? __fmul_rn(br, accL[nt][2 * hr]) : 0.0f;
        lv.y = i + 1 < r ? __fmul_rn(br, accL[nt][2 * hr + 1]) : 0.0f;
        qv.x = i <= r ? __fmul_rn(p.scale, accQ[nt][2 * hr]) : 0.0f;
        qv.y = i + 1 <= r ? __fmul_rn(p.scale, accQ[nt][2 * hr + 1]) : 0.0f;
        sm<float2>(sL, at_f64(r, i)) = lv;
        *reinterpret_cast<uint32_t*>(p.aqk + (tile * kC + r) * kC + i) = pack2(qv);
      }
    if (R == I) {  // A_RR = (I + L_RR)^{-1} in place of L_RR; lane j < 16 owns column j
      __syncwarp();
      const int o = 16 * R, j = lane & 15;
      float x[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) x[i] = i == j ? 1.0f : 0.0f;
#pragma unroll
      for (int r = 1; r < 16; ++r) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < r; ++i) acc = __fmaf_rn(sm<float>(sL, at_f64(o + r, o + i)), x[i], acc);
        x[r] = r > j ? -acc : x[r];
      }
      __syncwarp();
      if (lane < 16) {
#pragma unroll
        for (int i = 0; i < 16; ++i) sm<float>(sL, at_f64(o + i, o + j)) = x[i];
      }
    }
  }
  __syncthreads();

  // ---- 4. v → sX, kg → sK; off-diagonal blocks of A on tf32 mma ----
  load_tile<kD>(sX, p.in.v + t0 * p.in.v_ld + int64_t(h) * kD, p.in.v_ld, n, tid);
  cp_async_commit();
#pragma unroll
  for (int i = 0; i < 16; ++i) sm<uint32_t>(sK, eoff(i)) = kg[i];
  {
    // A block (X, Y), element (r, c) in the block: the diagonal blocks live in sL, the others in sQ
    auto ablk = [&](int X, int Y, int r, int c) -> float& {
      return sm<float>(X == Y ? sL : sQ, at_f64(16 * X + r, 16 * Y + c));
    };
    for (int d = 1; d < 4; ++d) {
      const int units = 2 * (4 - d);
      if (d == 1 && warp >= units) {  // the two idle warps: Ab of the diagonal blocks
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int e = tid - units * 32 + 64 * k, R = e >> 7, r = (e >> 3) & 15, c = 2 * (e & 7);
          const float2 bt = *reinterpret_cast<const float2*>(sBeta + 16 * R + c);
          sm<uint32_t>(sQ, ab_at(R, R, r, c)) = pack2(mul2(sm<float2>(sL, at_f64(16 * R + r, 16 * R + c)), bt));
        }
      }
      if (warp < units) {
        const int I = warp >> 1, R = I + d, nt = warp & 1;
        float t[4] = {};
        for (int J = I; J < R; ++J)
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const int k0 = 16 * J + 8 * kk;
            const float a[4] = {sm<float>(sL, at_f64(16 * R + g, k0 + t4)), sm<float>(sL, at_f64(16 * R + g + 8, k0 + t4)),
                                sm<float>(sL, at_f64(16 * R + g, k0 + t4 + 4)),
                                sm<float>(sL, at_f64(16 * R + g + 8, k0 + t4 + 4))};
            mma_1688_tf32(t, a, ablk(J, I, 8 * kk + t4, 8 * nt + g), ablk(J, I, 8 * kk + t4 + 4, 8 * nt + g));
          }
        // T [16 x 8] → its final place (block (R, I), columns 8 nt..), then A_RI = −A_RR T
        *reinterpret_cast<float2*>(&ablk(R, I, g, 8 * nt + 2 * t4)) = make_float2(t[0], t[1]);
        *reinterpret_cast<float2*>(&ablk(R, I, g + 8, 8 * nt + 2 * t4)) = make_float2(t[2], t[3]);
        __syncwarp();
        float u[4] = {};
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const float a[4] = {ablk(R, R, g, 8 * kk + t4), ablk(R, R, g + 8, 8 * kk + t4), ablk(R, R, g, 8 * kk + t4 + 4),
                              ablk(R, R, g + 8, 8 * kk + t4 + 4)};
          mma_1688_tf32(u, a, ablk(R, I, 8 * kk + t4, 8 * nt + g), ablk(R, I, 8 * kk + t4 + 4, 8 * nt + g));
        }
        __syncwarp();
        const float2 a0 = make_float2(-u[0], -u[1]), a8 = make_float2(-u[2], -u[3]);
        *reinterpret_cast<float2*>(&ablk(R, I, g, 8 * nt + 2 * t4)) = a0;
        *reinterpret_cast<float2*>(&ablk(R, I, g + 8, 8 * nt + 2 * t4)) = a8;
        const float2 bt = *reinterpret_cast<const float2*>(sBeta + 16 * I + 8 * nt + 2 * t4);
        sm<uint32_t>(sQ, ab_at(R, I, g, 8 * nt + 2 * t4)) = pack2(mul2(a0, bt));
        sm<uint32_t>(sQ, ab_at(R, I, g + 8, 8 * nt + 2 * t4)) = pack2(mul2(a8, bt));
      }
      if (d == 3) cp_async_wait_all();
      __syncthreads();
    }
  }

  // ---- 5. W = (A·β) kg, Ũ = (A·β) v: warp = (product, column half, row-block pair {3, 0} or
  //         {2, 1}: R + 1 k-steps each, so every warp runs 5), stored from the fragments (each
  //         8-row x 16-byte piece completes its 32-byte sector with the next n-tile's store) ----
  {
    const int prod = warp >> 2, hf = warp & 1, R_first = 3 - ((warp >> 1) & 1);
    const unsigned char* sBop = prod == 0 ? sK : sX;
    bf16* const out0 = (prod == 0 ? p.w : p.u) + (tile * kC + g) * kD + 2 * t4 + 64 * hf;
#pragma unroll 1
    for (int job = 0; job < 2; ++job) {
      const int R = R_first ^ (3 * job);
      bf16* out = out0 + 16 * R * kD;
      float acc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
      for (int ks = 0; ks <= R; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(smem_addr(sQ + ab_at(R, ks, pa.row, 8 * pa.chunk)), a);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(smem_addr(sBop + swz(16 * ks + pa.row, 8 * hf + 2 * np + pa.chunk, 256)), b);
          mma_16816(acc[2 * np], a, b[0], b[1]);
          mma_16816(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          *reinterpret_cast<uint32_t*>(out + 8 * hr * kD + 8 * nt) = pack_bf16x2(acc[nt][2 * hr], acc[nt][2 * hr + 1]);
    }
  }
}

// Phase A of the halves walk, one warp's 16 tokens (16 tb..) × 16 S rows (16 dh..
// of the bf16 S0 tile sS, 256-byte swizzled rows): P += W S0ᵀ and, with o, O += Qg S0ᵀ, k over
// the 128 key channels in 8 steps of 16 (the B fragments shared by both products).
__device__ __forceinline__ void products_16x16(const unsigned char* sS, const unsigned char* sW,
                                               const unsigned char* sQg, int tb, int dh, RowChunk pa, RowChunk pb,
                                               bool with_o, float (&pw)[2][4], float (&acc_o)[2][4]) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t a[4], b[4];
    const int arow = 16 * tb + pa.row, achunk = 2 * ks + pa.chunk;
    ldmatrix_x4(smem_addr(sS + swz(16 * dh + pb.row, 2 * ks + pb.chunk, 256)), b);
    ldmatrix_x4(smem_addr(sW + swz(arow, achunk, 256)), a);
    mma_16816(pw[0], a, b[0], b[1]);
    mma_16816(pw[1], a, b[2], b[3]);
    if (with_o) {
      ldmatrix_x4(smem_addr(sQg + swz(arow, achunk, 256)), a);
      mma_16816(acc_o[0], a, b[0], b[1]);
      mma_16816(acc_o[1], a, b[2], b[3]);
    }
  }
}

// o of one warp's 16 tokens of chunk ch (16 tb..) × 8 NT columns from col0 (the m16n8 C
// fragments acc_o[nt]), bf16, rows < tokens.
template <int NT>
__device__ __forceinline__ void store_o(const StateParams& p, int ch, int tb, int col0, int g, int t4,
                                        const float (&acc_o)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t tok = int64_t(ch) * kC + 16 * tb + g + 8 * hr;
      if (tok < p.tokens) {
        const int col = col0 + 8 * nt + 2 * t4;
        *reinterpret_cast<uint32_t*>(p.o + tok * p.o_ld + col) = pack_bf16x2(acc_o[nt][2 * hr], acc_o[nt][2 * hr + 1]);
      }
    }
}

// ---------------------------------------------------------------------------
// kda_walk_kernel: the walk over chunks for all 128 rows of S (or of D, or of M)
// in one CTA, so every workspace byte crosses L2 → SM once.
// ---------------------------------------------------------------------------

constexpr int kWalkThreads = 512;  // 16 warps
// one stage (chunk) of workspace tiles; two stages: chunk n+1 lands while chunk n is computed
constexpr uint32_t kWkW = 0, kWkQg = 16384, kWkKh = 32768, kWkUt = 49152, kWkAqk = 65536, kWkGam = 73728;
constexpr uint32_t kWkStage = kWkGam + 512;                         // 74240
constexpr uint32_t kWkS = 2 * kWkStage, kWkU = kWkS + 32768;         // S0 bf16 [128][128], U bf16 [64][128]
constexpr uint32_t kWkSmem = kWkU + 16384;                           // 197632 bytes
static_assert(kWkSmem <= 227 * 1024, "kda_walk_kernel: shared memory over the sm_90 opt-in limit");

__global__ void __launch_bounds__(kWalkThreads, 1) kda_walk_kernel(const StateParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sS = smem + kWkS;  // bf16 [128 rows][128 key channels] swizzled: S0 as the B operand
  unsigned char* sU = smem + kWkU;  // bf16 [64 tokens][128 rows] swizzled

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const RowChunk pa = lane_rows_then_k(lane), pb = lane_k_then_rows(lane);  // ldmatrix lane patterns
  const int head = blockIdx.x;
  const bool is_m = p.package && blockIdx.y == 1;
  const bool with_u = !is_m;
  const bool with_o = !p.package && p.o != nullptr;
  const int tb = warp & 3, dq = warp >> 2;  // phases A, B: tokens 16 tb.., rows 32 dq..
  const int rq = warp & 3, cq = warp >> 2;  // phase C: rows 32 rq.., key channels 32 cq..

  // S rows 32rq + 16mt + g (+8), key channels 32cq + 8nt + 2t4 (+1): s[mt][nt][e]
  float s[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 32 * rq + 16 * mt + g + 8 * (e >> 1), col = 32 * cq + 8 * nt + 2 * t4 + (e & 1);
        float v0 = 0.0f;
        if (is_m) {
          v0 = row == col ? 1.0f : 0.0f;
        } else if (!p.package && p.s_in != nullptr) {
          v0 = p.s_in[(int64_t(head) * kD + row) * kD + col];
        }
        s[mt][nt][e] = v0;
      }
  auto store_s_bf16 = [&]() {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          sm<uint32_t>(sS, at_h128(32 * rq + 16 * mt + g + 8 * hr, 32 * cq + 8 * nt + 2 * t4)) =
              pack_bf16x2(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]);
  };
  store_s_bf16();

  const int64_t head_tile = int64_t(head) * p.ws_chunks;
  auto load_chunk = [&](int ch) {
    unsigned char* st = smem + uint32_t(ch & 1) * kWkStage;
    const int64_t t = head_tile + ch;
    load_tile<kD, kWalkThreads>(st + kWkW, p.w + t * kC * kD, kD, kC, tid);
    load_tile<kD, kWalkThreads>(st + kWkKh, p.khat + t * kC * kD, kD, kC, tid);
    if (with_u) load_tile<kD, kWalkThreads>(st + kWkUt, p.u + t * kC * kD, kD, kC, tid);
    if (with_o) {
      load_tile<kD, kWalkThreads>(st + kWkQg, p.qg + t * kC * kD, kD, kC, tid);
      load_tile<kC, kWalkThreads>(st + kWkAqk, p.aqk + t * kC * kC, kC, kC, tid);
    }
    if (tid < kD / 4) cp_async_16(smem_addr(st + kWkGam + 16 * tid), p.gamma + t * kD + 4 * tid, true);
    cp_async_commit();
  };
  if (p.chunks > 0) load_chunk(0);

  for (int ch = 0; ch < p.chunks; ++ch) {
    cp_async_wait_all();
    __syncthreads();  // chunk ch's stage and S0 (bf16) visible; the other stage and sU are free
    if (ch + 1 < p.chunks) load_chunk(ch + 1);
    const unsigned char* st = smem + uint32_t(ch & 1) * kWkStage;

    // ---- A: P = W S0ᵀ, O = Qg S0ᵀ (16 tokens × 32 rows per warp) ----
    float pw[4][4] = {}, acc_o[4][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4], b0[4], b1[4];
      const int arow = 16 * tb + pa.row, achunk = 2 * ks + pa.chunk;
      ldmatrix_x4(smem_addr(sS + swz(32 * dq + pb.row, 2 * ks + pb.chunk, 256)), b0);
      ldmatrix_x4(smem_addr(sS + swz(32 * dq + 16 + pb.row, 2 * ks + pb.chunk, 256)), b1);
      ldmatrix_x4(smem_addr(st + kWkW + swz(arow, achunk, 256)), a);
      mma_16816(pw[0], a, b0[0], b0[1]);
      mma_16816(pw[1], a, b0[2], b0[3]);
      mma_16816(pw[2], a, b1[0], b1[1]);
      mma_16816(pw[3], a, b1[2], b1[3]);
      if (with_o) {
        ldmatrix_x4(smem_addr(st + kWkQg + swz(arow, achunk, 256)), a);
        mma_16816(acc_o[0], a, b0[0], b0[1]);
        mma_16816(acc_o[1], a, b0[2], b0[3]);
        mma_16816(acc_o[2], a, b1[0], b1[1]);
        mma_16816(acc_o[3], a, b1[2], b1[3]);
      }
    }
    // U = Ũ − P → sU [token][row] bf16
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int tok = 16 * tb + g + 8 * hr, row = 32 * dq + 8 * nt + 2 * t4;
        float2 ut = make_float2(0.0f, 0.0f);
        if (with_u) ut = unpack_bf16x2(sm<uint32_t>(const_cast<unsigned char*>(st) + kWkUt, at_h128(tok, row)));
        sm<uint32_t>(sU, at_h128(tok, row)) =
            pack_bf16x2(__fsub_rn(ut.x, pw[nt][2 * hr]), __fsub_rn(ut.y, pw[nt][2 * hr + 1]));
      }
    __syncthreads();  // U visible; every read of S0 (bf16) done

    // ---- B: O += Aqk U over the token blocks I <= tb; store o ----
    if (with_o) {
      for (int I = 0; I <= tb; ++I) {
        uint32_t a[4], b0[4], b1[4];
        ldmatrix_x4(smem_addr(st + kWkAqk + swz(16 * tb + pa.row, 2 * I + pa.chunk, 128)), a);
        ldmatrix_x4_trans(smem_addr(sU + swz(16 * I + pa.row, 4 * dq + pa.chunk, 256)), b0);
        ldmatrix_x4_trans(smem_addr(sU + swz(16 * I + pa.row, 4 * dq + 2 + pa.chunk, 256)), b1);
        mma_16816(acc_o[0], a, b0[0], b0[1]);
        mma_16816(acc_o[1], a, b0[2], b0[3]);
        mma_16816(acc_o[2], a, b1[0], b1[1]);
        mma_16816(acc_o[3], a, b1[2], b1[3]);
      }
      store_o(p, ch, tb, head * kD + 32 * dq, g, t4, acc_o);
    }

    // ---- C: S = S0 Γ + Uᵀ K̂ (32 rows × 32 key channels per warp) ----
    const float* gam = reinterpret_cast<const float*>(st + kWkGam);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const float2 gm = *reinterpret_cast<const float2*>(gam + 32 * cq + 8 * nt + 2 * t4);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        s[mt][nt][0] = __fmul_rn(s[mt][nt][0], gm.x);
        s[mt][nt][1] = __fmul_rn(s[mt][nt][1], gm.y);
        s[mt][nt][2] = __fmul_rn(s[mt][nt][2], gm.x);
        s[mt][nt][3] = __fmul_rn(s[mt][nt][3], gm.y);
      }
    }
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t b0[4], b1[4];
      ldmatrix_x4_trans(smem_addr(st + kWkKh + swz(16 * ks + pa.row, 4 * cq + pa.chunk, 256)), b0);
      ldmatrix_x4_trans(smem_addr(st + kWkKh + swz(16 * ks + pa.row, 4 * cq + 2 + pa.chunk, 256)), b1);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t a[4];
        ldmatrix_x4_trans(smem_addr(sU + swz(16 * ks + pb.row, 4 * rq + 2 * mt + pb.chunk, 256)), a);
        mma_16816(s[mt][0], a, b0[0], b0[1]);
        mma_16816(s[mt][1], a, b0[2], b0[3]);
        mma_16816(s[mt][2], a, b1[0], b1[1]);
        mma_16816(s[mt][3], a, b1[2], b1[3]);
      }
    }
    store_s_bf16();  // S0 (bf16) was last read before the barrier above; the next top barrier publishes it
  }
  cp_async_wait_all();

  float* out = is_m ? p.m_out : p.s_out;
  if (out != nullptr) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = 32 * rq + 16 * mt + g + 8 * hr, col = 32 * cq + 8 * nt + 2 * t4;
          *reinterpret_cast<float2*>(out + (int64_t(head) * kD + row) * kD + col) =
              make_float2(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]);
        }
  }
}

// ---------------------------------------------------------------------------
// kda_walk_half_kernel: the walk over chunks for 64 of the 128 rows of S (or of D, or of M).
//
// The rows of S are independent in every product of the walk. With R = the CTA's rows
// row0 .. row0 + 63 (row0 = 0 or 64):
//   U[:, R] = Ũ[:, R] − W S0[R]ᵀ,   O[:, R] = Qg S0[R]ᵀ + Aqk U[:, R],   S[R] = S0[R] Γ + U[:, R]ᵀ K̂
// so the two halves of a head never communicate; each reads the chunk's W, Qg, K̂, Aqk, Γ
// whole and Ũ's columns R only (per head and chunk 2 × 64.5 KB from L2, 1.78x the head
// walk's 72.5 KB; DRAM bytes unchanged when the halves run together).
//
// Grid (heads, 2) for the forward: y = half (row0 = 64 y), S from S_in (or 0), o when o is set.
// Grid (heads, 4) for the package: y & 1 = half; y < 2: D (from 0, with Ũ), y ≥ 2: M (from I,
// Ũ = 0, no o).
// 512 threads (16 warps), __launch_bounds__(512, 2): ≤ 64 registers, 88.5 KiB smem → 2 CTAs
// per SM (2 × 512 threads × 64 registers = the 64 K register file; 2 × (88.5 + 1 reserved) KiB
// ≤ 228 KiB), so the forward's 192 CTAs of 96 heads are all resident. 16 warps rather than 8
// at ≤ 128 registers: with 8 warps each warp would hold the head walk's per-warp tiles
// (16 tokens × 32 rows in A and B, 32 rows × 32 key channels in C) and the per-chunk chain
// would not shorten; with 16 each warp's A, B and C tiles halve (A: 8 k-steps of 2 + 2 mma,
// C: 4 k-steps of 4 mma) and S takes 16 f32 registers per thread.
//
// Shared memory (swizzled tiles; byte offsets kHv*):
//   one stage of chunk n's tiles: W, Qg, K̂ bf16 [64 tokens][128] (256-byte rows),
//   Aqk bf16 [64][64] (128-byte rows), Ũ[:, R] bf16 [64 tokens][64 rows] (128-byte rows),
//   Γ f32 [128]; sS bf16 [64 rows][128 key channels] (S0[R] as the B operand of A);
//   sU bf16 [64 tokens][64 rows] (128-byte rows).
// Per chunk n (two barriers, as in kda_walk_kernel; the loads split in two cp.async groups,
// F(n) = W, Qg, Ũ[:, R] of chunk n and K(n) = K̂, Aqk, Γ of chunk n, so that each lands
// while the phases that do not read it run):
//   top: wait F(n); barrier (F(n) and sS visible; K̂, Aqk, Γ, sU free: B, C of n − 1 done);
//        issue K(n).
//   A:   P = W S0[R]ᵀ, O = Qg S0[R]ᵀ (warp: 16 tokens 16 tb.. × 16 rows 16 dh..), U = Ũ − P → sU;
//        wait K(n); barrier (sU and K(n) visible; W, Qg, Ũ, sS consumed); issue F(n + 1).
//   B:   O += Aqk U over the token blocks I ≤ tb → o.
//   C:   S = S0 Γ + Uᵀ K̂ (warp: 16 rows 16 rq.. × 32 key channels 32 cq..), S (bf16) → sS.
// So K(n) (24.5 KB) lands during A of chunk n and F(n + 1) (40 KB) during B and C of chunk n;
// at each wait exactly one group is in flight, and wait_group 0 is the exact wait.
//
// The results equal kda_walk_kernel's bit for bit: every element is built from the same
// bf16 operands by the same mma k-steps in the same order (P and O over ks = 0..7 from 0,
// then Aqk over I = 0..tb; S: __fmul_rn by Γ, then ks = 0..3) and the same __fsub_rn and
// bf16 roundings; only the warp and fragment position that hold it differ, and an mma's f32
// result for one element depends on that element's A row, B column and accumulator alone.
// ---------------------------------------------------------------------------

constexpr int kHvThreads = 512;  // 16 warps
// one stage of chunk tiles, then S0[R] (bf16), U[:, R] (bf16) and Γ
constexpr uint32_t kHvW = 0, kHvQg = 16384, kHvKh = 32768, kHvAqk = 49152, kHvUt = 57344;
constexpr uint32_t kHvS = 65536, kHvU = 81920, kHvGam = 90112;
constexpr uint32_t kHvSmem = kHvGam + 512;  // 90624 bytes = 88.5 KiB
// 2 CTAs per SM: sm_90's 228 KiB of shared memory per SM holds two, each with its 1 KiB
// system reserve; the registers (2 × 512 threads × 64) by __launch_bounds__(kHvThreads, 2).
static_assert(2 * (kHvSmem + 1024) <= 228 * 1024 && 2 * kHvThreads <= 2048,
              "kda_walk_half_kernel: two CTAs per SM must fit");

// element (r, c) of a bf16 [rows][64] tile
__device__ __forceinline__ uint32_t at_h64(int r, int c) { return swz(r, c >> 3, 128) + ((c & 7) << 1); }

__global__ void __launch_bounds__(kHvThreads, 2) kda_walk_half_kernel(const StateParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sW = smem + kHvW;
  unsigned char* sQg = smem + kHvQg;
  unsigned char* sKh = smem + kHvKh;
  unsigned char* sAqk = smem + kHvAqk;
  unsigned char* sUt = smem + kHvUt;  // Ũ[:, R]: bf16 [64 tokens][64 rows] swizzled
  unsigned char* sS = smem + kHvS;    // bf16 [64 rows][128 key channels] swizzled: S0[R] as the B operand
  unsigned char* sU = smem + kHvU;    // bf16 [64 tokens][64 rows] swizzled
  float* sGam = reinterpret_cast<float*>(smem + kHvGam);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const RowChunk pa = lane_rows_then_k(lane), pb = lane_k_then_rows(lane);  // ldmatrix lane patterns
  const int head = blockIdx.x;
  const bool is_m = p.package && blockIdx.y >= 2;
  const bool with_u = !is_m;
  const bool with_o = !p.package && p.o != nullptr;
  const int row0 = 64 * int(blockIdx.y & 1);
  const int tb = warp & 3, dh = warp >> 2;  // phases A, B: tokens 16 tb.., rows row0 + 16 dh..
  const int rq = warp & 3, cq = warp >> 2;  // phase C: rows row0 + 16 rq.., key channels 32 cq..

  // S rows row0 + 16rq + g (+8), key channels 32cq + 8nt + 2t4 (+1): s[nt][e]
  float s[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + 16 * rq + g + 8 * (e >> 1), col = 32 * cq + 8 * nt + 2 * t4 + (e & 1);
      float v0 = 0.0f;
      if (is_m) {
        v0 = row == col ? 1.0f : 0.0f;
      } else if (!p.package && p.s_in != nullptr) {
        v0 = p.s_in[(int64_t(head) * kD + row) * kD + col];
      }
      s[nt][e] = v0;
    }
  auto store_s_bf16 = [&]() {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        sm<uint32_t>(sS, at_h128(16 * rq + g + 8 * hr, 32 * cq + 8 * nt + 2 * t4)) =
            pack_bf16x2(s[nt][2 * hr], s[nt][2 * hr + 1]);
  };
  store_s_bf16();

  const int64_t head_tile = int64_t(head) * p.ws_chunks;
  // This thread's 16-byte copies, the same in every chunk. A [64][128] workspace tile is
  // contiguous: copy i is global element 8 i, smem row i / 16, chunk i % 16; the thread makes
  // copies tid and tid + 512 (8192 bytes on in both). Of a [64][64] tile (Aqk; Ũ[:, R], whose
  // rows lie 128 elements apart in global) it makes copy tid: row tid / 8, chunk tid % 8.
  const uint32_t cp128 = swz(tid >> 4, tid & 15, 256), cp64 = swz(tid >> 3, tid & 7, 128);
  const int cp_u = (tid >> 3) * kD + row0 + 8 * (tid & 7);
  auto copy128 = [&](unsigned char* dst, const bf16* tile) {
    cp_async_16(smem_addr(dst + cp128), tile + 8 * tid, true);
    cp_async_16(smem_addr(dst + cp128 + 8192), tile + 8 * tid + 4096, true);
  };
  auto load_f = [&](int ch) {  // group F: W, Qg, Ũ[:, R] of chunk ch (read in phase A)
    const int64_t t = head_tile + ch;
    copy128(sW, p.w + t * kC * kD);
    if (with_o) copy128(sQg, p.qg + t * kC * kD);
    if (with_u) cp_async_16(smem_addr(sUt + cp64), p.u + t * kC * kD + cp_u, true);
    cp_async_commit();
  };
  auto load_k = [&](int ch) {  // group K: K̂, Aqk, Γ of chunk ch (read in phases B, C)
    const int64_t t = head_tile + ch;
    copy128(sKh, p.khat + t * kC * kD);
    if (with_o) cp_async_16(smem_addr(sAqk + cp64), p.aqk + t * kC * kC + 8 * tid, true);
    if (tid < kD / 4) cp_async_16(smem_addr(sGam + 4 * tid), p.gamma + t * kD + 4 * tid, true);
    cp_async_commit();
  };
  if (p.chunks > 0) load_f(0);

  for (int ch = 0; ch < p.chunks; ++ch) {
    cp_async_wait_all();  // F(ch): the one group in flight
    __syncthreads();      // W, Qg, Ũ of ch and S0 (bf16) visible; K̂, Aqk, Γ, sU free (B, C of ch − 1 done)
    load_k(ch);

    // ---- A: P = W S0ᵀ, O = Qg S0ᵀ (16 tokens × 16 rows per warp) ----
    float pw[2][4] = {}, acc_o[2][4] = {};
    products_16x16(sS, sW, sQg, tb, dh, pa, pb, with_o, pw, acc_o);
    // U = Ũ − P → sU [token][row] bf16
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int tok = 16 * tb + g + 8 * hr, row = 16 * dh + 8 * nt + 2 * t4;
        float2 ut = make_float2(0.0f, 0.0f);
        if (with_u) ut = unpack_bf16x2(sm<uint32_t>(sUt, at_h64(tok, row)));
        sm<uint32_t>(sU, at_h64(tok, row)) =
            pack_bf16x2(__fsub_rn(ut.x, pw[nt][2 * hr]), __fsub_rn(ut.y, pw[nt][2 * hr + 1]));
      }
    cp_async_wait_all();  // K(ch): the one group in flight
    __syncthreads();      // U, K̂, Aqk, Γ visible; W, Qg, Ũ and S0 (bf16) consumed
    if (ch + 1 < p.chunks) load_f(ch + 1);

    // ---- B: O += Aqk U over the token blocks I <= tb; store o ----
    if (with_o) {
      for (int I = 0; I <= tb; ++I) {
        uint32_t a[4], b[4];
        ldmatrix_x4(smem_addr(sAqk + swz(16 * tb + pa.row, 2 * I + pa.chunk, 128)), a);
        ldmatrix_x4_trans(smem_addr(sU + swz(16 * I + pa.row, 2 * dh + pa.chunk, 128)), b);
        mma_16816(acc_o[0], a, b[0], b[1]);
        mma_16816(acc_o[1], a, b[2], b[3]);
      }
      store_o(p, ch, tb, head * kD + row0 + 16 * dh, g, t4, acc_o);
    }

    // ---- C: S = S0 Γ + Uᵀ K̂ (16 rows × 32 key channels per warp) ----
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const float2 gm = *reinterpret_cast<const float2*>(sGam + 32 * cq + 8 * nt + 2 * t4);
      s[nt][0] = __fmul_rn(s[nt][0], gm.x);
      s[nt][1] = __fmul_rn(s[nt][1], gm.y);
      s[nt][2] = __fmul_rn(s[nt][2], gm.x);
      s[nt][3] = __fmul_rn(s[nt][3], gm.y);
    }
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t a[4], b0[4], b1[4];
      ldmatrix_x4_trans(smem_addr(sKh + swz(16 * ks + pa.row, 4 * cq + pa.chunk, 256)), b0);
      ldmatrix_x4_trans(smem_addr(sKh + swz(16 * ks + pa.row, 4 * cq + 2 + pa.chunk, 256)), b1);
      ldmatrix_x4_trans(smem_addr(sU + swz(16 * ks + pb.row, 2 * rq + pb.chunk, 128)), a);
      mma_16816(s[0], a, b0[0], b0[1]);
      mma_16816(s[1], a, b0[2], b0[3]);
      mma_16816(s[2], a, b1[0], b1[1]);
      mma_16816(s[3], a, b1[2], b1[3]);
    }
    store_s_bf16();  // S0 (bf16) was last read before the barrier above; the next top barrier publishes it
  }
  cp_async_wait_all();

  float* out = is_m ? p.m_out : p.s_out;
  if (out != nullptr) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = row0 + 16 * rq + g + 8 * hr, col = 32 * cq + 8 * nt + 2 * t4;
        *reinterpret_cast<float2*>(out + (int64_t(head) * kD + row) * kD + col) =
            make_float2(s[nt][2 * hr], s[nt][2 * hr + 1]);
      }
  }
}

// y = x + d, n floats (n % 4 == 0, 16-byte aligned).
__global__ void add_f32_kernel(const float4* x, const float4* d, float4* y, int64_t n4) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = x[i], b = d[i];
    y[i] = make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

void check_rows(const void* p, int64_t ld, int64_t min_ld, const char* name) {
  PB_CHECK(p != nullptr, std::string("kda: ") + name + " is null");
  PB_CHECK(aligned16(p) && ld % 8 == 0, std::string("kda: ") + name +
                                            " must be 16-byte aligned with a row stride that is a multiple of 8");
  PB_CHECK(ld >= min_ld, std::string("kda: ") + name + " row stride is shorter than its row");
}

StateParams state_params(const KdaWorkspace& ws, int64_t tokens) {
  PB_CHECK(tokens >= 0 && tokens <= ws.max_tokens(), "kda: tokens exceed the workspace's capacity");
  StateParams p{};
  p.w = ws.w.get();
  p.u = ws.u.get();
  p.khat = ws.khat.get();
  p.qg = ws.qg.get();
  p.aqk = ws.aqk.get();
  p.gamma = ws.gamma.get();
  p.ws_chunks = ws.chunks();
  p.tokens = tokens;
  p.chunks = int((tokens + kC - 1) / kC);
  return p;
}

void launch_state(const StateParams& p, int heads, KdaWalk walk, cudaStream_t stream) {
  switch (walk) {
    case KdaWalk::kHead: {
      PB_CUDA(cudaFuncSetAttribute(kda_walk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWkSmem)));
      const dim3 grid(unsigned(heads), p.package ? 2u : 1u);
      kda_walk_kernel<<<grid, kWalkThreads, kWkSmem, stream>>>(p);
      break;
    }
    case KdaWalk::kHalves: {
      PB_CUDA(cudaFuncSetAttribute(kda_walk_half_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kHvSmem)));
      const dim3 grid(unsigned(heads), p.package ? 4u : 2u);
      kda_walk_half_kernel<<<grid, kHvThreads, kHvSmem, stream>>>(p);
      break;
    }
    case KdaWalk::kWgmma:
      launch_walk_wgmma(p, heads, stream);  // kda_walk_wgmma.cu (forward only)
      break;
    default:
      PB_CHECK(false, "kda: unknown walk");
  }
  PB_CUDA_LAUNCH();
}

// kda_prepare's parameters (the contract checks) for tokens [0, tokens); with no tokens, only
// heads and the capacity are checked.
PrepParams prepare_params(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws) {
  PB_CHECK(heads == ws.heads(), "kda_prepare: heads differ from the workspace's");
  PB_CHECK(tokens >= 0 && tokens <= ws.max_tokens(), "kda_prepare: tokens exceed the workspace's capacity");
  PrepParams p{};
  p.tokens = tokens;
  if (tokens == 0) return p;
  const int64_t width = int64_t(heads) * kD;
  check_rows(in.q, in.q_ld, width, "q");
  check_rows(in.k, in.k_ld, width, "k");
  check_rows(in.v, in.v_ld, width, "v");
  check_rows(in.g, in.g_ld, width, "g");
  PB_CHECK(in.beta_pre != nullptr && in.beta_ld >= heads, "kda: beta_pre is null or its row stride < heads");
  PB_CHECK(in.A_log != nullptr && in.dt_bias != nullptr, "kda: A_log and dt_bias are required");
  PB_CHECK((tokens + kC - 1) / kC <= INT32_MAX && heads <= 65535, "kda_prepare: grid too large");
  p.in = in;
  p.ws_chunks = ws.chunks();
  p.scale = 1.0f / sqrtf(float(kD));
  p.w = ws.w.get();
  p.u = ws.u.get();
  p.khat = ws.khat.get();
  p.qg = ws.qg.get();
  p.aqk = ws.aqk.get();
  p.gamma = ws.gamma.get();
  return p;
}

// One prepare grid over the chunks of p (p.tokens ≥ 1).
void launch_prepare(const PrepParams& p, int heads, cudaStream_t stream) {
  const dim3 grid{unsigned((p.tokens + kC - 1) / kC), unsigned(heads)};
  PB_CUDA(cudaFuncSetAttribute(kda_prepare_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPrepSmem)));
  kda_prepare_kernel<<<grid, kThreads, kPrepSmem, stream>>>(p);
  PB_CUDA_LAUNCH();
}

// The forward walk's parameters (the contract checks) over tokens [0, tokens).
StateParams forward_params(const KdaWorkspace& ws, int64_t tokens, const float* S_in, bf16* o, int64_t o_ld,
                           float* S_out) {
  StateParams p = state_params(ws, tokens);
  if (o != nullptr && tokens > 0) check_rows(o, o_ld, int64_t(ws.heads()) * kD, "o");
  PB_CHECK(S_in == nullptr || aligned16(S_in), "kda: S_in must be 16-byte aligned");
  PB_CHECK(S_out == nullptr || aligned16(S_out), "kda: S_out must be 16-byte aligned");
  p.package = false;
  p.s_in = S_in;
  p.o = o;
  p.o_ld = o_ld;
  p.s_out = S_out;
  return p;
}

}  // namespace

KdaWorkspace::KdaWorkspace(int64_t max_tokens, int heads) : max_tokens_(max_tokens), heads_(heads) {
  PB_CHECK(max_tokens >= 1 && heads >= 1, "KdaWorkspace: tokens and heads must be positive");
  const size_t tiles = size_t(heads) * size_t(chunks());
  w = DeviceBuffer<bf16>(tiles * kC * kD);
  u = DeviceBuffer<bf16>(tiles * kC * kD);
  khat = DeviceBuffer<bf16>(tiles * kC * kD);
  qg = DeviceBuffer<bf16>(tiles * kC * kD);
  aqk = DeviceBuffer<bf16>(tiles * kC * kC);
  gamma = DeviceBuffer<float>(tiles * kD);
}

size_t KdaWorkspace::bytes() const {
  return w.bytes() + u.bytes() + khat.bytes() + qg.bytes() + aqk.bytes() + gamma.bytes();
}

void kda_prepare(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws, cudaStream_t stream) {
  const PrepParams p = prepare_params(in, tokens, heads, ws);
  if (p.tokens > 0) launch_prepare(p, heads, stream);
}

void kda_forward_state(const KdaWorkspace& ws, int64_t tokens, const float* S_in, bf16* o, int64_t o_ld,
                       float* S_out, cudaStream_t stream, KdaWalk walk) {
  launch_state(forward_params(ws, tokens, S_in, o, o_ld, S_out), ws.heads(), walk, stream);
}

void kda_forward(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws, const float* S_in, bf16* o,
                 int64_t o_ld, float* S_out, cudaStream_t stream, KdaWalk walk) {
  kda_prepare(in, tokens, heads, ws, stream);
  kda_forward_state(ws, tokens, S_in, o, o_ld, S_out, stream, walk);
}

void kda_package(const KdaWorkspace& ws, int64_t tokens, float* M, float* D, cudaStream_t stream, KdaWalk walk) {
  PB_CHECK(walk != KdaWalk::kWgmma, "kda_package: the wgmma walk covers the forward only");
  StateParams p = state_params(ws, tokens);
  PB_CHECK(M != nullptr && D != nullptr && aligned16(M) && aligned16(D), "kda_package: M and D must be 16-byte aligned");
  p.package = true;
  p.s_out = D;
  p.m_out = M;
  launch_state(p, ws.heads(), walk, stream);
}

void kda_fold(const Blas& blas, const float* const* M, const float* const* D, int segments, int heads, float* S,
              float* scratch, cudaStream_t stream) {
  PB_CHECK(segments >= 1 && heads >= 1, "kda_fold: segments and heads must be positive");
  PB_CHECK(S != nullptr && scratch != nullptr && S != scratch && aligned16(S) && aligned16(scratch),
           "kda_fold: S and scratch must be distinct 16-byte aligned buffers");
  const int64_t n = int64_t(heads) * kD * kD;
  PB_CUDA(cudaMemcpyAsync(S, D[0], size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  for (int j = 1; j < segments; ++j) {
    PB_CHECK(aligned16(D[j]) && M[j] != nullptr, "kda_fold: M[j] null or D[j] misaligned");
    gemm_f32_batched(blas, S, M[j], scratch, kD, kD, kD, heads, stream);
    const int64_t n4 = n / 4;
    const int blocks = int(std::min<int64_t>((n4 + 255) / 256, 4096));
    add_f32_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(scratch),
                                                reinterpret_cast<const float4*>(D[j]), reinterpret_cast<float4*>(S), n4);
    PB_CUDA_LAUNCH();
  }
}

}  // namespace pb
