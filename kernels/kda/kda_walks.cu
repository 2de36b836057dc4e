// The state walks on mma.sync (KdaWalk::kHead, KdaWalk::kHalves) and their launches: per
// chunk, with S0 the state before it (S [128 rows j][128 key channels c], f32),
//   U = Ũ − W S0ᵀ,  O = Qg S0ᵀ + Aqk U → o (bf16),  S = S0 Γ + Uᵀ K̂,
// over the stacked rows [D; M] for the package (D from 0 with Ũ, M from I with Ũ = 0). bf16
// operands, f32 accumulation, S kept in f32 across chunks (its bf16 copy is the operand of the
// next chunk). Contract, precision and floors: kda.h.
//
// kda_walk_kernel — grid (heads, 1 or 2 for the package's D, M), 512 threads, 193 KiB, 1 CTA/SM
//   (KdaWalk::kHead): all 128 rows of S per CTA, S in f32 registers (warp: 32 rows × 32 key
//   channels); two stages of workspace tiles, chunk n+1's cp.async issued right after the
//   barrier that opens chunk n. Per chunk: top barrier; A: P = W S0ᵀ, O = Qg S0ᵀ (warp: 16
//   tokens × 32 rows), U = Ũ − P → sU; barrier; B: O += Aqk U → o; C: S = S0 Γ + Uᵀ K̂, S (bf16)
//   → sS for the next chunk.
// kda_walk_half_kernel — grid (heads, 2, or 4 for the package's D, M halves), 512 threads,
//   88.5 KiB, 2 CTAs/SM (KdaWalk::kHalves): 64 rows of S per CTA (warp: 16 rows × 32 key
//   channels), one stage of workspace tiles; W, Qg, Ũ's 64 columns of chunk n+1 issued after A
//   of chunk n, K̂, Aqk, Γ of chunk n at its top barrier. Same phases and barriers as
//   kda_walk_kernel, each warp's tiles halved; bit-identical results.
#include <cstdint>

#include "check.h"
#include "kda_internal.cuh"

namespace pb {
namespace {

using namespace kda_detail;
using namespace ptx;  // the shared PTX wrappers (ptx.cuh)

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

}  // namespace

void launch_walk_head(const StateParams& p, int heads, cudaStream_t stream) {
  PB_CUDA(cudaFuncSetAttribute(kda_walk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWkSmem)));
  const dim3 grid(unsigned(heads), p.package ? 2u : 1u);
  kda_walk_kernel<<<grid, kWalkThreads, kWkSmem, stream>>>(p);
  PB_CUDA_LAUNCH();
}

void launch_walk_halves(const StateParams& p, int heads, cudaStream_t stream) {
  PB_CUDA(cudaFuncSetAttribute(kda_walk_half_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kHvSmem)));
  const dim3 grid(unsigned(heads), p.package ? 4u : 2u);
  kda_walk_half_kernel<<<grid, kHvThreads, kHvSmem, stream>>>(p);
  PB_CUDA_LAUNCH();
}

}  // namespace pb
