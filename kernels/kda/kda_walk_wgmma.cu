// KdaWalk::kWgmma: the forward state walk on Hopper warpgroup MMA (sm_90a wgmma.mma_async).
// Contract, precision and floors: kda.h; the arithmetic is kda_walk_kernel's (kda_walks.cu):
//   per chunk, with S0 the state before it (S [128 rows j][128 key channels c], f32):
//     P = W S0ᵀ,  U = bf16(Ũ − P),  O = Qg S0ᵀ + Aqk U → o (bf16),  S = S0 ∘ Γ + Uᵀ K̂,
//   bf16 operands, f32 accumulation, S kept in f32 across chunks (its bf16 copy is the
//   operand of the next chunk). Same roundings as kHead (__fsub_rn for U, __fmul_rn by Γ,
//   bf16 round-to-nearest of U, S0 and o); the k-order of the f32 sums is the tensor core's
//   own, so results equal kHead's up to f32 summation order.
//
// kda_walk_wgmma_kernel — grid (heads), 256 threads = 2 warpgroups, 163 KiB smem (two stages of
//   chunk tiles, eight 2 KiB o staging tiles, alignment slack), 1 CTA/SM, forward only. The rows
//   of S are independent (each row evolves on its own), so warpgroup h walks rows 64 h .. 64 h +
//   63 alone, S as its f32 m64n128 accumulator (64 per thread); the two warpgroups meet only at
//   the per-chunk barrier that recycles a stage. Every product is taken transposed so that the
//   state is the A operand, read from registers: the m64nN accumulator fragment (element i of
//   thread (warp w, lane 4 g + t): row 16 w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t +
//   (i & 1)) packed to bf16 pairs is exactly wgmma's A-register fragment of k-step ks (pairs
//   8 ks + 0, 2, 4, 6).
//   Per chunk and warpgroup:
//     Pᵀ = S0 Wᵀ          8 wgmma m64n64k16 (A = bf16 S0 registers, B = W [64 tok][128] K-major)
//     Oᵀ = S0 Qgᵀ         8 wgmma m64n64k16 (B = Qg K-major), runs during the U step [o only]
//     Uᵀ = bf16(Ũᵀ − Pᵀ)  in registers (Ũᵀ's fragments by ldmatrix.trans from the [tok][128 rows] tile)
//     S = S ∘ Γ + Uᵀ K̂    4 wgmma m64n128k16 (A = Uᵀ registers, B = K̂ [64 tok][128] MN-major)
//     Oᵀ += Uᵀ Aqkᵀ       4 wgmma m64n64k16 (B = Aqk [64 t][64 s] K-major)        [o only]
//     o[t][64 h + r] = bf16(Oᵀ[r][t]) for tokens < `tokens`: each warp stores its Oᵀ fragment
//                         transposed into its own staging tile (4 stmatrix.x4.trans: 8x8 blocks of
//                         8 channels x 8 tokens land as token rows, wgwalk::obuf_at), then every
//                         lane stores 16-byte halves of token rows (4 per chunk, not 32 2-byte ones)
//   The tensor core reads only the B tiles from shared memory (112 KB per chunk). (ptxas
//   serializes the wgmma pipeline (C7514) when other work, the loads or the o stores, is placed
//   between a batch's issue and its wait, so none is.)
// Aqk's upper 16x16 blocks are never written by kda_prepare: the kernel never loads them; their
// smem (both stages) is zeroed once at entry, so the k-steps of Uᵀ Aqkᵀ add exact zeros there.
//
// Shared memory (kda_tiles.h wgwalk::, from a 1024-aligned base): two stages of chunk tiles
// { W, Ũ, K̂, Qg bf16 [64 tok][128]; Aqk bf16 [64][64]; Γ f32 [128] }, each bf16 tile
// wgmma-canonical with the 128-byte swizzle (kda_tiles.h wg_at: 64-column blocks of 128-byte
// rows, 16-byte chunk j of row r at j ^ (r & 7)). Descriptors (wgwalk::desc_*): layout type 1
// (128B swizzle), base offset 0; K-major B (W, Qg, Aqk): SBO = 1024 (8 rows), k-step ks at
// +32 (ks % 4) bytes, column block ks / 4; MN-major B (K̂): SBO = 1024 (8 tokens of K), LBO =
// 8192 (the next 64 columns of N), k-step ks at +2048 ks. test/kernels/kda/test_kda_tiles.cpp checks
// every descriptor of every k-step against the tiles as written.
//
// Loads: W, Ũ, K̂, Qg whole (all 64 rows, as kHead) by TMA: thread 0 issues two 64 x 64 boxes
// per tile (launch_walk_wgmma's tensor maps, 128-byte swizzle: a box lands as one column block of
// wg_at's layout) and Γ by a 512-byte bulk copy, all completing on the stage's mbarrier; Aqk's
// lower block triangle by ≤ 2 cp.async of 16 bytes per thread. Without o, Qg and Aqk are not
// loaded. Per chunk n (stage n & 1), one barrier: every thread waits its cp.async group and the
// stage's mbarrier (phase n / 2), fence.proxy.async, __syncthreads (chunk n's stage visible to
// the tensor core; every read of chunk n − 1 done, so the other stage is free); then chunk
// n + 1's loads.
// Workspace rows past `tokens` are zero (kda_prepare), so they add nothing; o rows ≥ tokens
// are not written. S_out may alias S_in (each thread reads its elements before any write).
// sm_90 only: the body is compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL; other device targets
// trap), and launch_walk_wgmma refuses other devices and the package.

#include <cuda.h>  // CUtensorMap and its encoder's signature (reached through the runtime: no -lcuda)
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "check.h"
#include "kda.h"
#include "kda_tiles.h"
#include "kda_internal.cuh"
#include "launch.h"
#include "ptx.cuh"
#include "tma.cuh"

namespace pb {
namespace {

using bf16 = __nv_bfloat16;
using namespace ptx;
using namespace tma;
using kda_tiles::wg_at;
namespace ww = kda_tiles::wgwalk;

constexpr int kD = kKdaHeadDim;   // 128
constexpr int kC = kKdaChunkLen;  // 64
static_assert(kD == 128 && kC == 64, "kda wgmma walk: the tiling assumes dk = dv = 128 and chunk 64");

// Device helpers: compiled for sm_90a only (wgmma); the host pass and other targets see none.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// d[64 x 64] += A[64 x 16] B[16 x 64]: A bf16 from registers (the m16n8k16 A fragment of each
// warp's 16 rows), B bf16 from shared memory (descriptor; kTransB: 0 K-major, 1 MN-major).
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(kTransB)
      : "memory");
}
// d[64 x 128] += A[64 x 16] B[16 x 128], A from registers as above.
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(kTransB)
      : "memory");
}
template <int N>
__device__ __forceinline__ void acc_fence_n(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// four 8x8 b16 matrices to shared memory, each transposed: lane 8 m + i gives the address of
// row i of matrix m, which receives column i of the fragment r[m] (row lane / 4, columns
// 2 (lane % 4), + 1: the m16n8 accumulator layout).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
#endif

constexpr int kWalkWarpgroups = 2;
constexpr int kWalkThreads = 128 * kWalkWarpgroups;
// after the two stages, each warp's o staging tile [64 tok][16 channels] bf16 (ww::obuf_at)
constexpr uint32_t kWalkObuf = 2 * ww::kStage, kWalkObufWarp = kC * 16 * 2;
constexpr uint32_t kWalkSmem = kWalkObuf + (kWalkThreads / 32) * kWalkObufWarp + 1024;  // + slack to align to 1024
static_assert(kWalkSmem <= 227 * 1024, "kda wgmma walk: shared memory over the sm_90 opt-in limit");

// The TMA descriptors of W, Ũ, K̂, Qg (in that order): each product as a [rows, 128] bf16 tensor
// from the StateParams base pointer, 64-column x 64-row boxes landing with the 128-byte swizzle,
// i.e. a box is one column block of wg_at's layout.
struct WalkMaps {
  CUtensorMap tile[4];
};

__global__ void __launch_bounds__(kWalkThreads, 1)
    kda_walk_wgmma_kernel(const StateParams p, const __grid_constant__ WalkMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t base = smem_addr(smem);  // 1024-aligned

  const int tid = threadIdx.x, h = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int head = blockIdx.x;
  const bool with_o = p.o != nullptr;
  const int64_t head_tile = int64_t(head) * p.ws_chunks;
  __shared__ uint64_t landed[2];  // per stage: W, Ũ, K̂, Qg and Γ by TMA (one arrival + their bytes)
  if (tid == 0) {
    mbar_init(&landed[0], 1);
    mbar_init(&landed[1], 1);
    mbar_fence_init();
  }

  // Aqk's upper 16x16 blocks (16-byte chunk j of row r with j / 2 > r / 16), both stages: zero
  for (int i = tid; i < 2 * kC * 8; i += kWalkThreads) {
    const int st = i / (kC * 8), r = (i >> 3) % kC, j = i & 7;
    if ((j >> 1) > (r >> 4))
      *reinterpret_cast<uint4*>(smem + st * ww::kStage + ww::kAqk + wg_at(r, 8 * j, kC)) = make_uint4(0, 0, 0, 0);
  }

  auto load_chunk = [&](int ch) {
    unsigned char* st = smem + uint32_t(ch & 1) * ww::kStage;
    const int64_t t = head_tile + ch;
    if (tid == 0) {  // W, Ũ, K̂, Qg at 16384 tile (two 64-column boxes each), Γ: one thread, by TMA
      uint64_t* bar = &landed[ch & 1];
      mbar_arrive_expect_tx(bar, (with_o ? 4u : 3u) * 16384u + uint32_t(kD * sizeof(float)));
      const int row = int(t * kC);
#pragma unroll
      for (int tile = 0; tile < 4; ++tile) {
        if (tile == 3 && !with_o) break;
        tensor_load_2d(st + tile * 16384, &maps.tile[tile], 0, row, bar);
        tensor_load_2d(st + tile * 16384 + 8192, &maps.tile[tile], 64, row, bar);
      }
      bulk_copy_g2s(st + ww::kGam, p.gamma + t * kD, uint32_t(kD * sizeof(float)), bar);
    }
    if (with_o) {  // Aqk: the lower block triangle only
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = tid + kWalkThreads * k, r = i >> 3, j = i & 7;
        if ((j >> 1) <= (r >> 4))
          cp_async_16(smem_addr(st + ww::kAqk + wg_at(r, 8 * j, kC)), p.aqk + t * kC * kC + r * kC + 8 * j, true);
      }
    }
    cp_async_commit();
  };

  // This warpgroup's S rows as the f32 accumulator of m64n128: element i of thread (warp wq,
  // lane 4 g + t4) is row 64 h + 16 wq + g + 8 ((i >> 1) & 1), key channel 8 (i >> 2) + 2 t4 + (i & 1).
  // Pᵀ, Oᵀ (m64n64): the same rows, token 8 (i >> 2) + 2 t4 + (i & 1).
  float s[64];
  auto row_of = [&](int i) { return 64 * h + 16 * wq + g + 8 * ((i >> 1) & 1); };
  auto col_of = [&](int i) { return 8 * (i >> 2) + 2 * t4; };  // even column of pair i, i + 1
  // Ũᵀ's A fragment of k-step ks (tokens 16 ks ..) by ldmatrix.x4.trans from the Ũ [tok][128 rows]
  // tile: matrix m = lane / 8 holds tokens 16 ks + 8 (m / 2) + 0..7 (the smem rows, this lane's
  // row lane % 8) × rows 64 h + 16 wq + 8 (m % 2) + 0..7, so register q of the result is the
  // pair (tokens 16 ks + 8 (q / 2) + 2 t4, + 1) of row 64 h + 16 wq + g + 8 (q % 2): ua[ks][q].
  auto ut_lane_offset = [&](int ks) {
    const int m = lane >> 3;
    return wg_at(16 * ks + 8 * (m >> 1) + (lane & 7), 64 * h + 16 * wq + 8 * (m & 1), kC);
  };
#pragma unroll
  for (int i = 0; i < 64; i += 2) {
    float2 v = make_float2(0.0f, 0.0f);
    if (p.s_in != nullptr) v = *reinterpret_cast<const float2*>(p.s_in + (int64_t(head) * kD + row_of(i)) * kD + col_of(i));
    s[i] = v.x;
    s[i + 1] = v.y;
  }
  fence_proxy_async();  // the zeroed Aqk blocks, for the tensor core
  __syncthreads();      // the mbarriers initialized before anyone waits on them
  if (p.chunks > 0) load_chunk(0);

  for (int ch = 0; ch < p.chunks; ++ch) {
    cp_async_wait_all();                                               // Aqk
    mbar_wait(&landed[ch & 1], uint32_t(ch >> 1) & 1u);  // the TMA tiles and Γ
    fence_proxy_async();
    __syncthreads();  // chunk ch's stage visible to the tensor core; chunk ch - 1's stage consumed
    if (ch + 1 < p.chunks) load_chunk(ch + 1);  // into the other stage, consumed by chunk ch - 1
    const uint32_t st = base + uint32_t(ch & 1) * ww::kStage;
    const unsigned char* stp = smem + uint32_t(ch & 1) * ww::kStage;

    // Pᵀ = S0 Wᵀ, Oᵀ = S0 Qgᵀ: S0 (bf16) as A fragments, k-step ks (key channels 16 ks ..) =
    // pairs 8 ks + {0, 2, 4, 6}
    uint32_t sa[8][4];
#pragma unroll
    for (int ks = 0; ks < 8; ++ks)
#pragma unroll
      for (int q = 0; q < 4; ++q) sa[ks][q] = pack_bf16x2(s[8 * ks + 2 * q], s[8 * ks + 2 * q + 1]);
    float pt[32], ot[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) pt[i] = ot[i] = 0.0f;
    acc_fence_n(pt);
    acc_fence_n(ot);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) wgmma_rs_m64n64k16<0>(pt, sa[ks], ww::desc_tok_k(st + ww::kW, ks));
    wg_commit();
    if (with_o) {
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) wgmma_rs_m64n64k16<0>(ot, sa[ks], ww::desc_tok_k(st + ww::kQg, ks));
      wg_commit();
    }
    if (with_o) wg_wait1();  // Pᵀ done (Oᵀ may still run)
    else wg_wait0();
    acc_fence_n(pt);

    // Uᵀ = bf16(Ũᵀ − Pᵀ) as A fragments (k-step ks = tokens 16 ks ..)
    uint32_t ua[4][4];
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t ut[4];
      ldmatrix_x4_trans(st + ww::kUt + ut_lane_offset(ks), ut);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 u = unpack_bf16x2(ut[q]);
        const int i = 8 * ks + 2 * q;
        ua[ks][q] = pack_bf16x2(__fsub_rn(u.x, pt[i]), __fsub_rn(u.y, pt[i + 1]));
      }
    }
    // S ∘= Γ; S += Uᵀ K̂, Oᵀ += Uᵀ Aqkᵀ
    const float* gam = reinterpret_cast<const float*>(stp + ww::kGam);
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
      const float2 gm = *reinterpret_cast<const float2*>(gam + 8 * nb + 2 * t4);
      s[4 * nb + 0] = __fmul_rn(s[4 * nb + 0], gm.x);
      s[4 * nb + 1] = __fmul_rn(s[4 * nb + 1], gm.y);
      s[4 * nb + 2] = __fmul_rn(s[4 * nb + 2], gm.x);
      s[4 * nb + 3] = __fmul_rn(s[4 * nb + 3], gm.y);
    }
    acc_fence_n(s);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_rs_m64n128k16<1>(s, ua[ks], ww::desc_kh(st, ks));
    wg_commit();
    if (with_o) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) wgmma_rs_m64n64k16<0>(ot, ua[ks], ww::desc_aqk(st, ks));
      wg_commit();
    }
    wg_wait0();
    acc_fence_n(s);
    if (with_o) {
      // o = Oᵀ transposed through this warp's tile: block (token block nb, channel half hh) of
      // the fragment (pairs i = 4 nb + 2 hh, + 1) is one 8x8 stmatrix.trans, landing as 8 token
      // rows of 8 channels; then each lane stores whole 16-byte halves of token rows
      acc_fence_n(ot);
      const uint32_t ob = base + kWalkObuf + uint32_t(tid >> 5) * kWalkObufWarp;
      const int m = lane >> 3, i8 = lane & 7;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t r[4];
#pragma unroll
        for (int mm = 0; mm < 4; ++mm) {
          const int i = 4 * (2 * q + (mm >> 1)) + 2 * (mm & 1);
          r[mm] = pack_bf16x2(ot[i], ot[i + 1]);
        }
        stmatrix_x4_trans(ob + ww::obuf_at(8 * (2 * q + (m >> 1)) + i8, m & 1), r);
      }
      __syncwarp();
      const unsigned char* obp = smem + kWalkObuf + uint32_t(tid >> 5) * kWalkObufWarp;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int tok = 16 * k + (lane >> 1), half = lane & 1;
        const int64_t t = int64_t(ch) * kC + tok;
        const uint4 v = *reinterpret_cast<const uint4*>(obp + ww::obuf_at(tok, half));
        if (t < p.tokens)
          *reinterpret_cast<uint4*>(p.o + t * p.o_ld + head * kD + 64 * h + 16 * wq + 8 * half) = v;
      }
    }
  }
  cp_async_wait_all();

  if (p.s_out != nullptr) {
#pragma unroll
    for (int i = 0; i < 64; i += 2)
      *reinterpret_cast<float2*>(p.s_out + (int64_t(head) * kD + row_of(i)) * kD + col_of(i)) = make_float2(s[i], s[i + 1]);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: no wgmma (launch_walk_wgmma refuses devices other than sm_90)
#endif
}

}  // namespace

bool kda_wgmma_walk_supported() {
  int dev = 0, major = 0, minor = 0;
  PB_CUDA(cudaGetDevice(&dev));
  PB_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  PB_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;
}

KdaWalk kda_default_forward_walk() { return kda_wgmma_walk_supported() ? KdaWalk::kWgmma : KdaWalk::kHead; }

namespace {

// The driver's cuTensorMapEncodeTiled, found once through the runtime.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled fn =
      reinterpret_cast<EncodeTiled>(driver_entry_point("cuTensorMapEncodeTiled", "kda wgmma walk"));
  return fn;
}

// One workspace product, [rows, 128] bf16 from `base`, in 64 x 64 boxes with the 128-byte swizzle.
CUtensorMap tile_map(const bf16* base, int64_t rows) {
  PB_CHECK(rows >= 1 && rows <= INT32_MAX, "kda wgmma walk: workspace rows outside the TMA coordinates");
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(kD), cuuint64_t(rows)};
  const cuuint64_t row_bytes[1] = {cuuint64_t(kD) * sizeof(bf16)};
  const cuuint32_t box[2] = {64, cuuint32_t(kC)}, unit[2] = {1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, row_bytes,
                                    box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PB_CHECK(r == CUDA_SUCCESS,
           "kda wgmma walk: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ")");
  return m;
}

}  // namespace

void launch_walk_wgmma(const StateParams& p, int heads, cudaStream_t stream) {
  PB_CHECK(!p.package, "kda_package: the wgmma walk covers the forward only");
  PB_CHECK(kda_wgmma_walk_supported(), "kda: the wgmma walk (KdaWalk::kWgmma) needs an sm_90 GPU");
  // rows the walk may touch from the (possibly moved) bases: up to the last head's last chunk
  const int64_t rows = std::max<int64_t>((int64_t(heads - 1) * p.ws_chunks + p.chunks) * kC, kC);
  WalkMaps maps;
  maps.tile[0] = tile_map(p.w, rows);
  maps.tile[1] = tile_map(p.u, rows);
  maps.tile[2] = tile_map(p.khat, rows);
  maps.tile[3] = tile_map(p.qg != nullptr ? p.qg : p.w, rows);
  PB_CUDA(cudaFuncSetAttribute(kda_walk_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWalkSmem)));
  kda_walk_wgmma_kernel<<<unsigned(heads), kWalkThreads, kWalkSmem, stream>>>(p, maps);
  PB_CUDA_LAUNCH();
}

}  // namespace pb
