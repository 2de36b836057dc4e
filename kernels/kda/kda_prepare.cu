// kda_prepare_kernel and its launch: the intra-chunk pass of the KDA core (kda.h), per
// (chunk, head) and independent of the state: gates, the in-chunk log2-decay cumsum, L2 norms,
// L and Aqk, A = (I + L)^{-1}, W and Ũ, written to the workspace. Grid (chunks, heads), 256
// threads, 73.75 KiB smem, 3 CTAs/SM; the steps are at the kernel's definition below.
#include <cmath>
#include <cstdint>

#include "check.h"
#include "kda_internal.cuh"

namespace pb {
namespace {

using namespace kda_detail;
using namespace ptx;  // the shared PTX wrappers (ptx.cuh)

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
// element (r, c) of an f32 or bf16 [rows][64] tile
__device__ __forceinline__ uint32_t at_f64(int r, int c) { return swz(r, c >> 2, 256) + ((c & 3) << 2); }

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

}  // namespace

void launch_prepare(const PrepParams& p, int heads, cudaStream_t stream) {
  const dim3 grid{unsigned((p.tokens + kC - 1) / kC), unsigned(heads)};
  PB_CUDA(cudaFuncSetAttribute(kda_prepare_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPrepSmem)));
  kda_prepare_kernel<<<grid, kThreads, kPrepSmem, stream>>>(p);
  PB_CUDA_LAUNCH();
}

}  // namespace pb
