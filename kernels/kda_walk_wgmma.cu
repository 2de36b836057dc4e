// KdaWalk::kWgmma: the forward state walk on Hopper warpgroup MMA (sm_90a wgmma.mma_async).
// Contract, precision and floors: kda.h; the arithmetic is kda_walk_kernel's (kda.cu):
//   per chunk, with S0 the state before it (S [128 rows j][128 key channels c], f32):
//     P = W S0ᵀ,  U = bf16(Ũ − P),  O = Qg S0ᵀ + Aqk U → o (bf16),  S = S0 ∘ Γ + Uᵀ K̂,
//   bf16 operands, f32 accumulation, S kept in f32 across chunks (its bf16 copy is the
//   operand of the next chunk). Same roundings as kHead (__fsub_rn for U, __fmul_rn by Γ,
//   bf16 round-to-nearest of U, S0 and o); the k-order of the f32 sums is the tensor core's
//   own, so results equal kHead's up to f32 summation order, not bit for bit.
//
// kda_walk_wgmma_kernel — grid (heads), 512 threads = 4 warpgroups, 195 KiB smem (199680 B
//   dynamic), 128 registers (ptxas sm_90a; 0 spills, 2 named barriers), 1 CTA/SM, forward only.
//   One CTA per head reads each workspace byte once (as kHead); each wgmma reads its A and B
//   tiles from smem once per warpgroup (no per-warp ldmatrix re-reads), and S lives in the
//   accumulators of two warpgroups, so the U and S0 stores are the only fragment traffic.
//   WG0  P = W S0ᵀ: 8 wgmma m64n128k16 (A = W K-major, B = S0 K-major), f32 accumulator
//        64 tokens × 128 rows; then U = Ũ − P → sU (bf16), fence.proxy.async, arrive on the
//        U barrier.
//   WG1  O = Qg S0ᵀ: 8 wgmma (A = Qg K-major, B = S0 K-major), waited; U barrier;
//        O += Aqk U: 4 wgmma (A = Aqk K-major, B = U MN-major: transpose-B); o rows < tokens.
//   WG2, WG3  S rows 64 h .. 64 h + 63 (h = WG − 2) as the f32 accumulator (64 per thread);
//        S ∘= Γ before the U barrier; after it S += Uᵀ K̂: 4 wgmma (A = Uᵀ, MN-major from
//        sU: transpose-A; B = K̂ MN-major: transpose-B); then S (bf16) → sS, fence.proxy.async.
//   Accumulator element i (0..63) of thread (warp w of the WG, lane = 4 g + t): row
//   16 w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t + (i & 1) (the m16n8 C fragment per
//   8-column block; CLayout_64xN of cute/atom/mma_traits_sm90_gmma.hpp).
// Aqk's upper 16x16 blocks are never written by kda_prepare: the kernel never loads them; their
// smem (both stages) is zeroed once at entry, so the four k-steps of Aqk U add exact zeros there.
//
// Shared memory (kda_tiles.h wgwalk::, from a 1024-aligned base; 195 KiB with the alignment
// slack): two stages of chunk tiles { W, Ũ, K̂, Qg bf16 [64 tok][128]; Aqk bf16 [64][64]; Γ f32
// [128] }, sS bf16 [128 rows][128 key channels] (S0), sU bf16 [64 tok][128 rows].
// Every bf16 tile is wgmma-canonical with the 128-byte swizzle (kda_tiles.h wg_at): 64-column
// blocks of 128-byte rows, 16-byte chunk j of row r at j ^ (r & 7). Descriptors (wgwalk::desc_*):
// layout type 1 (128B swizzle), base offset 0, start address >> 4;
//   K-major operands (W, Qg, S0, Aqk): SBO = 1024 (8 rows), LBO unused (16); k-step ks at
//     +32 (ks % 4) bytes within the row, column block ks / 4;
//   MN-major operands (U as B and as Aᵀ, K̂): SBO = 1024 (8 tokens of K), LBO = 8192 (the next
//     64 columns of M or N); k-step ks at +2048 ks (16 token rows).
// The CPU test test/cpu/test_kda_tiles.cpp checks every descriptor of every k-step against
// the tiles as written (the canonical-layout address model in kda_tiles.h).
//
// Loads: per chunk every thread issues ≤ 10 cp.async of 16 bytes (W, Ũ, K̂, Qg whole, all 64
// rows as kHead; Aqk's lower block triangle; Γ), written through wg_at; without o, Qg and Aqk
// are not loaded and WG1 only takes part in the barriers.
// Per chunk n (stage n & 1), two barriers:
//   top: every thread waits its cp.async groups, fence.proxy.async, __syncthreads (chunk n's
//        stage and sS visible to the tensor core; chunk n − 1 fully consumed); every thread
//        issues chunk n + 1's cp.async into the other stage (lands during chunk n).
//   WG0: P; U → sU; arrive(U).     WG1: Qg S0ᵀ (waited); sync(U).     WG2/3: S ∘= Γ; sync(U).
//   WG1: Aqk U; o.                 WG2/3: Uᵀ K̂ (waited); S (bf16) → sS; fence.proxy.async.
// sS is overwritten only after the U barrier, which WG0 and WG1 pass with their S0 wgmmas
// completed; sU and the stage are overwritten only after the next top barrier, which every
// reader passes with its wgmmas completed (wgmma.wait_group 0).
// Workspace rows past `tokens` are zero (kda_prepare), so they add nothing; o rows ≥ tokens
// are not written. S_out may alias S_in (each thread reads its elements before any write).
// sm_90 only: the body is compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL; other device targets
// trap), and launch_walk_wgmma refuses other devices and the package.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>

#include "check.h"
#include "kda.h"
#include "kda_tiles.h"
#include "kda_walk.h"
#include "ptx.cuh"

namespace pb {
namespace {

using bf16 = __nv_bfloat16;
using namespace ptx;
using kda_tiles::wg_at;
namespace ww = kda_tiles::wgwalk;

constexpr int kD = kKdaHeadDim;   // 128
constexpr int kC = kKdaChunkLen;  // 64
constexpr int kWgThreads = 512;   // 4 warpgroups
constexpr uint32_t kWgSmem = ww::kEnd + 1024;  // + slack to align the base to 1024 bytes
static_assert(kD == 128 && kC == 64, "kda wgmma walk: the tiling assumes dk = dv = 128 and chunk 64");
static_assert(kWgSmem <= 227 * 1024, "kda wgmma walk: shared memory over the sm_90 opt-in limit");

// Device helpers: compiled for sm_90a only (wgmma); the host pass and other targets see none.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ float2 unpack2(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMA.
__device__ __forceinline__ void acc_fence(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// d[64 x 128] += A[64 x 16] B[16 x 128], bf16 from shared memory (descriptors), f32 accumulate.
// kTransA / kTransB: 0 = K-major, 1 = MN-major (the PTX imm-trans-a / imm-trans-b).
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB)
      : "memory");
}
#endif

__global__ void __launch_bounds__(kWgThreads, 1) kda_walk_wgmma_kernel(const StateParams p, int probe) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // The dynamic window's base is 1024-aligned in practice; declared 128 so that the compiler
  // keeps the padding computation (0 when aligned; kWgSmem carries the 1 KiB slack).
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t base = smem_addr(smem);  // 1024-aligned
  unsigned char* sS = smem + ww::kS;
  unsigned char* sU = smem + ww::kU;

  const int tid = threadIdx.x, wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int head = blockIdx.x;
  const bool with_o = p.o != nullptr;
  const int64_t head_tile = int64_t(head) * p.ws_chunks;

  // Aqk's upper 16x16 blocks (16-byte chunk j of row r with j / 2 > r / 16), both stages: zero
  for (int i = tid; i < 2 * kC * 8; i += kWgThreads) {
    const int s = i / (kC * 8), r = (i >> 3) % kC, j = i & 7;
    if ((j >> 1) > (r >> 4))
      *reinterpret_cast<uint4*>(smem + s * ww::kStage + ww::kAqk + wg_at(r, 8 * j, kC)) = make_uint4(0, 0, 0, 0);
  }

  auto load_chunk = [&](int ch) {
    if (probe == 1 && ch >= 2) {  // diagnostic: chunk ch computes on chunk ch - 2's tiles
      cp_async_commit();
      return;
    }
    unsigned char* st = smem + uint32_t(ch & 1) * ww::kStage;
    const int64_t t = head_tile + ch;
#pragma unroll
    for (int tile = 0; tile < 4; ++tile) {  // W, Ũ, K̂, Qg at 16384 tile (1024 chunks each)
      if (tile == 3 && !with_o) break;
      const bf16* src = (tile == 0 ? p.w : tile == 1 ? p.u : tile == 2 ? p.khat : p.qg) + t * kC * kD;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = tid + kWgThreads * k, r = i >> 4, j = i & 15;
        cp_async_16(smem_addr(st + tile * 16384 + wg_at(r, 8 * j, kC)), src + r * kD + 8 * j, true);
      }
    }
    if (with_o) {  // Aqk: the lower block triangle only (one chunk per thread)
      const int r = tid >> 3, j = tid & 7;
      if ((j >> 1) <= (r >> 4))
        cp_async_16(smem_addr(st + ww::kAqk + wg_at(r, 8 * j, kC)), p.aqk + t * kC * kC + r * kC + 8 * j, true);
    }
    if (tid < kD / 4) cp_async_16(smem_addr(st + ww::kGam + 16 * tid), p.gamma + t * kD + 4 * tid, true);
    cp_async_commit();
  };

  // The role's f32 accumulator: WG0 P, WG1 O (64 tokens × 128 rows), WG2/3 S (64 rows × 128 keys).
  float acc[64];
  const int h = wg - 2;  // WG2/3: S rows 64 h ..
  auto s_row = [&](int i) { return 64 * h + 16 * wq + g + 8 * ((i >> 1) & 1); };
  auto col_of = [&](int i) { return 8 * (i >> 2) + 2 * t4; };  // even column of pair i, i + 1
  auto store_s_bf16 = [&]() {
#pragma unroll
    for (int i = 0; i < 64; i += 2)
      *reinterpret_cast<uint32_t*>(sS + wg_at(s_row(i), col_of(i), kD)) = pack_bf16x2(acc[i], acc[i + 1]);
  };
  // acc = X S0ᵀ for the [64 tokens][128] tile X at shared address x (W for WG0, Qg for WG1):
  // 8 wgmma over the 128 key channels, waited, so S0 (bf16) is read when it returns.
  auto times_s0 = [&](uint32_t x) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    acc_fence(acc);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) wgmma_m64n128k16<0, 0>(acc, ww::desc_tok_k(x, ks), ww::desc_s0(base, ks));
    wg_commit();
    wg_wait0();
    acc_fence(acc);
  };
  if (wg >= 2) {
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
      float2 v = make_float2(0.0f, 0.0f);
      if (p.s_in != nullptr)
        v = *reinterpret_cast<const float2*>(p.s_in + (int64_t(head) * kD + s_row(i)) * kD + col_of(i));
      acc[i] = v.x;
      acc[i + 1] = v.y;
    }
    store_s_bf16();
  }
  fence_proxy_async();  // the zeroed Aqk blocks and S0 (bf16), for the tensor core
  if (p.chunks > 0) load_chunk(0);

  for (int ch = 0; ch < p.chunks; ++ch) {
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();  // chunk ch's stage and S0 (bf16) visible; the other stage and sU free
    if (ch + 1 < p.chunks) load_chunk(ch + 1);
    if (probe == 2) continue;
    const uint32_t st = base + uint32_t(ch & 1) * ww::kStage;
    const unsigned char* stp = smem + uint32_t(ch & 1) * ww::kStage;

    if (wg == 0) {
      // ---- P = W S0ᵀ; U = Ũ − P → sU ----
      times_s0(st + ww::kW);
#pragma unroll
      for (int i = 0; i < 64; i += 2) {
        const uint32_t off = wg_at(16 * wq + g + 8 * ((i >> 1) & 1), col_of(i), kC);
        const float2 ut = unpack2(*reinterpret_cast<const uint32_t*>(stp + ww::kUt + off));
        *reinterpret_cast<uint32_t*>(sU + off) = pack_bf16x2(__fsub_rn(ut.x, acc[i]), __fsub_rn(ut.y, acc[i + 1]));
      }
      fence_proxy_async();
      bar_arrive(1, kWgThreads);  // U ready (WG0's reads of S0 are complete)
    } else if (wg == 1) {
      // ---- O = Qg S0ᵀ; after U: O += Aqk U → o ----
      if (with_o) {
        times_s0(st + ww::kQg);  // S0 (bf16) read: WG2/3 overwrite it after the U barrier
      }
      bar_sync(1, kWgThreads);
      if (with_o) {
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < kC / 16; ++ks)
          wgmma_m64n128k16<0, 1>(acc, ww::desc_aqk(st, ks), ww::desc_u_b(base, ks));
        wg_commit();
        wg_wait0();
        acc_fence(acc);
#pragma unroll
        for (int i = 0; i < 64; i += 2) {
          const int64_t tok = int64_t(ch) * kC + 16 * wq + g + 8 * ((i >> 1) & 1);
          if (tok < p.tokens)
            *reinterpret_cast<uint32_t*>(p.o + tok * p.o_ld + head * kD + col_of(i)) =
                pack_bf16x2(acc[i], acc[i + 1]);
        }
      }
    } else {
      // ---- S = S0 ∘ Γ + Uᵀ K̂ (rows 64 h ..) ----
      const float* gam = reinterpret_cast<const float*>(stp + ww::kGam);
#pragma unroll
      for (int nb = 0; nb < 16; ++nb) {
        const float2 gm = *reinterpret_cast<const float2*>(gam + 8 * nb + 2 * t4);
        acc[4 * nb + 0] = __fmul_rn(acc[4 * nb + 0], gm.x);
        acc[4 * nb + 1] = __fmul_rn(acc[4 * nb + 1], gm.y);
        acc[4 * nb + 2] = __fmul_rn(acc[4 * nb + 2], gm.x);
        acc[4 * nb + 3] = __fmul_rn(acc[4 * nb + 3], gm.y);
      }
      bar_sync(1, kWgThreads);
      acc_fence(acc);
      wg_fence();
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks)
        wgmma_m64n128k16<1, 1>(acc, ww::desc_u_a(base, h, ks), ww::desc_kh(st, ks));
      wg_commit();
      wg_wait0();
      acc_fence(acc);
      store_s_bf16();  // after the U barrier: every S0 (bf16) read of this chunk is complete
      fence_proxy_async();  // the next top barrier publishes it
    }
  }
  cp_async_wait_all();

  if (wg >= 2 && p.s_out != nullptr) {
#pragma unroll
    for (int i = 0; i < 64; i += 2)
      *reinterpret_cast<float2*>(p.s_out + (int64_t(head) * kD + s_row(i)) * kD + col_of(i)) =
          make_float2(acc[i], acc[i + 1]);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: no wgmma (launch_walk_wgmma refuses devices other than sm_90)
#endif
}

// PB_KDA_WALK_PROBE (diagnostic, wrong results): 1 = chunks 2.. load nothing and compute on the
// two stages already loaded (the per-chunk chain alone); 2 = every chunk loads and computes
// nothing (the loads alone). Unset or 0: the walk.
int walk_probe() {
  const char* e = std::getenv("PB_KDA_WALK_PROBE");
  return e && (e[0] == '1' || e[0] == '2') ? e[0] - '0' : 0;
}

}  // namespace

bool kda_wgmma_walk_supported() {
  int dev = 0, major = 0, minor = 0;
  PB_CUDA(cudaGetDevice(&dev));
  PB_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  PB_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;
}

KdaWalk kda_fastest_forward_walk() { return kda_wgmma_walk_supported() ? KdaWalk::kWgmma : KdaWalk::kHead; }

void launch_walk_wgmma(const StateParams& p, int heads, cudaStream_t stream) {
  PB_CHECK(!p.package, "kda_package: the wgmma walk covers the forward only");
  PB_CHECK(kda_wgmma_walk_supported(), "kda: the wgmma walk (KdaWalk::kWgmma) needs an sm_90 GPU");
  PB_CUDA(cudaFuncSetAttribute(kda_walk_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWgSmem)));
  kda_walk_wgmma_kernel<<<unsigned(heads), kWgThreads, kWgSmem, stream>>>(p, walk_probe());
  PB_CUDA_LAUNCH();
}

}  // namespace pb
