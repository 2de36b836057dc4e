// AttnRes: scores over block snapshots, softmax, mix (docs/design.md §2.1).
// The contract, shapes and the reduction order are in attnres.h; in short:
//
//   snap [rows, snap_blocks, hidden], partial [rows, hidden] bf16, sw [hidden] f32
//   -> scores [rows, nb + 1] f32, out [rows, hidden] bf16
//   candidates x_0 .. x_{nb-1} = snap[row][c], x_nb = partial[row]  (C = nb + 1)
//   slot s (= thread s of 256) sums its chunks j = s, s + 256, ... (8 elements each,
//   ascending) with fma; tree256 over the slots (lanes xor 1 .. 16, then
//   ((W0+W1)+(W2+W3))+((W4+W5)+(W6+W7)) over the warps);
//   s_c = dot * rsqrtf(ss / float(hidden) + eps); p = softmax(s) (max by compare,
//   expf, ascending sum, IEEE division); out = bf16(fma chain of p_c * x_c, c ascending).
//
// Variants (attnres_baseline, attnres_cut, the dispatch attnres(Variant, ...)):
//   baseline  2 launches, 2-byte loads. scores: grid (rows, C) x 256 threads,
//             thread t walks slot t's chunks element by element; mix: grid
//             (rows, ceil(hidden / 256)) x 256, one element per thread, every
//             thread recomputes the row's softmax from the scores.
//   cut       1 launch (attnres_two_pass_kernel): a 256-thread block per row,
//             grid-stride over ceil(rows / 2) blocks, B = 4 blocks per SM at
//             C <= 3, else 2; the first S candidates staged per thread by
//             cp.async in shared memory, the rest read twice (the second an L2
//             hit); pass 1 sums, tree + per-warp softmax by shuffles, pass 2 mix.
// Both variants call the same device functions (accumulate, score_of, the
// softmax order, the mix FMA), compiled with --fmad=false and no fast-math.
#include "attnres.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "ptx.cuh"

namespace pb {

namespace {

using ptx::as_bf16x2;
using ptx::as_bits;
using ptx::cp_async_commit;
using ptx::cp_async_wait_group;
using ptx::prefetch_l2;

using bf16 = __nv_bfloat16;
using bf16x2 = __nv_bfloat162;

constexpr int kThreads = kAttnResSlots;  // thread t is slot t in both variants
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 8;                // elements per chunk: one 16-byte load
constexpr int kMaxCands = kAttnResMaxBlocks + 1;
constexpr int kCutChunks = int(kAttnResCutMaxHidden / (int64_t(kChunk) * kThreads));  // per slot
static_assert(kThreads == 256 && kWarps == 8,
              "attnres: the slot tree is written for 256 slots = 8 warps of 32 lanes");
static_assert(kCutChunks == 4, "attnres cut: hidden <= 8192 means at most 4 chunks per slot");

// ---------------------------------------------------------------------------
// Arithmetic shared by both variants.

// x_c of a row: snapshot block c for c < nb, the partial sum for c == nb.
__device__ __forceinline__ const bf16* candidate(const bf16* snap, const bf16* partial, int64_t row,
                                                 int c, int nb, int64_t snap_blocks,
                                                 int64_t hidden) {
  return c < nb ? snap + (row * snap_blocks + c) * hidden : partial + row * hidden;
}

// One element into its slot's sum of squares and dot with sw.
__device__ __forceinline__ void accumulate(float x, float w, float& ss, float& dot) {
  ss = __fmaf_rn(x, x, ss);
  dot = __fmaf_rn(x, w, dot);
}

// The tree over the 256 slot partials (slot = threadIdx.x) of N sums at once;
// every thread returns with the N totals in v. Lanes: xor butterfly 1, 2, 4,
// 8, 16 -- lane 0 adds left + right at every level of the pairwise tree over
// its warp's 32 slots, the other lanes add the same two values commuted, which
// gives the same bits. Warps: ((W0 + W1) + (W2 + W3)) + ((W4 + W5) + (W6 + W7)),
// after one __syncthreads.
template <int N>
__device__ __forceinline__ void block_tree_sum(float (&v)[N], float (*stage)[N]) {
#pragma unroll
  for (int lane_mask = 1; lane_mask <= 16; lane_mask <<= 1) {
#pragma unroll
    for (int q = 0; q < N; ++q) v[q] = v[q] + __shfl_xor_sync(0xffffffffu, v[q], lane_mask);
  }
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int q = 0; q < N; ++q) stage[threadIdx.x / 32][q] = v[q];
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < N; ++q) {
    v[q] = ((stage[0][q] + stage[1][q]) + (stage[2][q] + stage[3][q])) +
           ((stage[4][q] + stage[5][q]) + (stage[6][q] + stage[7][q]));
  }
}

__device__ __forceinline__ float score_of(float ss, float dot, float hidden_f, float eps) {
  return dot * rsqrtf(ss / hidden_f + eps);
}

// p[0 .. n-1] from s[0 .. n-1], n <= kMax: unrolled over kMax with c < n
// guards, so the cut (n == kMax == C) and the baseline mix (kMax = 9, runtime
// n) run the same operations in the same order.
template <int kMax>
__device__ __forceinline__ void softmax(const float (&s)[kMax], int n, float (&p)[kMax]) {
  float m = s[0];
#pragma unroll
  for (int c = 1; c < kMax; ++c)
    if (c < n) m = s[c] > m ? s[c] : m;
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kMax; ++c) {
    if (c < n) {
      p[c] = expf(s[c] - m);
      sum = sum + p[c];
    }
  }
#pragma unroll
  for (int c = 0; c < kMax; ++c)
    if (c < n) p[c] = p[c] / sum;
}

// ---------------------------------------------------------------------------
// baseline: two launches, 2-byte loads.

// grid (rows, C): block (row, c) reduces candidate c of the row.
__global__ void __launch_bounds__(kThreads)
    attnres_scores_baseline_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                                   const float* __restrict__ sw, float* __restrict__ scores,
                                   int64_t hidden, int nb, int64_t snap_blocks, float eps) {
  __shared__ float stage[kWarps][2];
  const int64_t row = blockIdx.x;
  const int c = blockIdx.y;
  const bf16* x = candidate(snap, partial, row, c, nb, snap_blocks, hidden);
  const int64_t chunks = hidden / kChunk;
  float v[2] = {0.0f, 0.0f};  // slot threadIdx.x: sum of squares, dot with sw
  for (int64_t j = threadIdx.x; j < chunks; j += kThreads) {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      const int64_t i = j * kChunk + e;
      accumulate(__bfloat162float(x[i]), sw[i], v[0], v[1]);
    }
  }
  block_tree_sum(v, stage);
  if (threadIdx.x == 0)
    scores[row * (nb + 1) + c] = score_of(v[0], v[1], static_cast<float>(hidden), eps);
}

// grid (rows, ceil(hidden / 256)): one element per thread.
__global__ void __launch_bounds__(kThreads)
    attnres_mix_baseline_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                                const float* __restrict__ scores, bf16* __restrict__ out,
                                int64_t hidden, int nb, int64_t snap_blocks) {
  const int64_t row = blockIdx.x;
  const int64_t i = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= hidden) return;
  const int cands = nb + 1;
  float s[kMaxCands], p[kMaxCands];
#pragma unroll
  for (int c = 0; c < kMaxCands; ++c) s[c] = c < cands ? scores[row * cands + c] : 0.0f;
  softmax(s, cands, p);
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxCands; ++c) {
    if (c < cands) {
      const float x = __bfloat162float(candidate(snap, partial, row, c, nb, snap_blocks, hidden)[i]);
      acc = __fmaf_rn(p[c], x, acc);
    }
  }
  out[row * hidden + i] = __float2bfloat16_rn(acc);
}

// ---------------------------------------------------------------------------
// cut: one fused launch, many rows in flight per SM.

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
// Waits until at most `pending` (0 .. 3) of this thread's newest commit groups
// are in flight; anything larger waits for all.
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 3: cp_async_wait_group<3>(); break;
    case 2: cp_async_wait_group<2>(); break;
    case 1: cp_async_wait_group<1>(); break;
    default: cp_async_wait_group<0>(); break;
  }
}

// A chunk's 8 elements, ascending, into the slot's two sums; w = sw of the chunk.
__device__ __forceinline__ void accumulate_chunk(const uint4 x, const float4 (&w)[2], float& ss,
                                                 float& dot) {
  float f[kChunk];
  ptx::unpack_bf16x8(x, f);
  const float wf[kChunk] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
#pragma unroll
  for (int e = 0; e < kChunk; ++e) accumulate(f[e], wf[e], ss, dot);
}

__device__ __forceinline__ void mix_chunk(float p, const uint4 x, float (&acc)[kChunk]) {
  float f[kChunk];
  ptx::unpack_bf16x8(x, f);
#pragma unroll
  for (int e = 0; e < kChunk; ++e) acc[e] = __fmaf_rn(p, f[e], acc[e]);
}

// sw of slot t's chunks j = t + 256 k (zeros past the end): every row uses them.
__device__ __forceinline__ void load_sw(const float* __restrict__ sw, int t, int chunks,
                                        float4 (&w)[kCutChunks][2]) {
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int j = t + k * kThreads;
    w[k][0] = j < chunks ? __ldg(reinterpret_cast<const float4*>(sw) + 2 * j) : zero;
    w[k][1] = j < chunks ? __ldg(reinterpret_cast<const float4*>(sw) + 2 * j + 1) : zero;
  }
}

// A 256-thread block per row (thread t = slot t), grid-stride over rows, B
// blocks per SM (8 B warps). Candidates c < S are staged in the block's shared
// memory, each thread cp.asyncing and reading back only its own chunks (so no
// barrier guards them); the last kL2 = C - S candidates are read from global
// memory twice, once per pass, the second read hitting L2.
// Pass 1, chunk by chunk (k = 0 .. 3, candidates inner, every candidate's two
// chains still ascending j): the sums. Tree: the lane butterfly, one barrier,
// then in every warp lane c (< C) finishes candidate c over the 8 warps, its
// score and, by shuffles, the softmax (the contract's order: max from s_0 up,
// ascending sum); warp 0 writes the scores. Pass 2, chunk by chunk: the mix
// (c ascending per element), a streaming store, and right after the thread's
// chunk k is mixed, the next row's chunk k of the staged candidates is
// cp.asynced into the same places (and the L2 candidates prefetched into L2),
// so the next row is in flight while this one finishes.
// cp.async groups: one per (row, k), possibly empty; when chunk k of a row is
// reduced, that row's 4 groups are the newest, so waiting until 3 - k are
// pending lands it.
// __launch_bounds__ asks for B blocks per SM: 4 at C <= 3, 2 at C >= 4 (sw's
// 8 float4 per thread and the 2 C sums then need more than 4 blocks allow).
constexpr int kTwoPassMaxL2 = 6;  // most candidates re-read from L2 (kernels for 0 .. 6)

template <int C, int kL2>
__global__ void __launch_bounds__(kThreads, C <= 3 ? 4 : 2)
    attnres_two_pass_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                            const float* __restrict__ sw, float* __restrict__ scores, bf16* __restrict__ out,
                            int64_t rows, int64_t hidden, int64_t snap_blocks, float eps) {
  constexpr int kNb = C - 1;
  constexpr int S = C - kL2;  // staged candidates 0 .. S-1
  static_assert(C >= 2 && C <= kMaxCands, "attnres two_pass: C outside 2 .. 9");
  static_assert(kL2 >= 0 && kL2 <= kTwoPassMaxL2 && S >= 1, "attnres two_pass: 1 <= S, kL2 <= 6");
  extern __shared__ uint4 held[];  // S x chunks: candidate c's chunk j at held[c chunks + j]
  __shared__ float stage[2][kWarps][2 * C];  // alternate rows: a fast warp may start the next tree

  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int chunks = int(hidden / kChunk);
  const int64_t first = blockIdx.x, step = gridDim.x;  // grid <= rows: every block has a row
  const float hidden_f = static_cast<float>(hidden);

  auto cand = [&](int64_t row, int c) {
    return reinterpret_cast<const uint4*>(candidate(snap, partial, row, c, kNb, snap_blocks, hidden));
  };
  // Row `row`'s chunk k (this thread's) of the staged candidates, one commit
  // group (empty when the block has no such row or no such chunk); the L2
  // candidates' chunk is prefetched into L2.
  auto stage_chunk = [&](int64_t row, int k) {
    const int j = t + k * kThreads;
    if (row < rows && j < chunks) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        if (c < S) cp_async16(held + size_t(c) * chunks + j, cand(row, c) + j);
        else prefetch_l2(cand(row, c) + j);
      }
    }
    cp_async_commit();
  };

#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) stage_chunk(first, k);

  // This thread's chunks of sw, read once per block: the staged candidates leave
  // little L1 at C >= 7, and re-reading sw per row through it then costs L2 traffic.
  float4 w[kCutChunks][2];
  load_sw(sw, t, chunks, w);

  int buf = 0;  // stage buffer of this row
  for (int64_t row = first; row < rows; row += step, buf ^= 1) {
    // ---- pass 1: slot t's sums, v[c] sum of squares, v[C + c] dot with sw ----
    float v[2 * C];
#pragma unroll
    for (int q = 0; q < 2 * C; ++q) v[q] = 0.0f;
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) {
      const int j = t + k * kThreads;
      uint4 u[kL2 > 0 ? kL2 : 1];
      if (j < chunks) {
#pragma unroll
        for (int c = S; c < C; ++c) u[c - S] = __ldcg(cand(row, c) + j);
      }
      cp_async_wait_pending(kCutChunks - 1 - k);  // k unrolled: one wait_group
      if (j < chunks) {
#pragma unroll
        for (int c = 0; c < C; ++c)
          accumulate_chunk(c < S ? held[size_t(c) * chunks + j] : u[c - S < 0 ? 0 : c - S], w[k], v[c], v[C + c]);
      }
    }
    // ---- tree, scores, softmax ----
#pragma unroll
    for (int lane_mask = 1; lane_mask <= 16; lane_mask <<= 1) {
#pragma unroll
      for (int q = 0; q < 2 * C; ++q) v[q] = v[q] + __shfl_xor_sync(0xffffffffu, v[q], lane_mask);
    }
    float(*st)[2 * C] = stage[buf];
    if (lane == 0) {
#pragma unroll
      for (int q = 0; q < 2 * C; ++q) st[warp][q] = v[q];
    }
    __syncthreads();
    float p[C];
    {
      const int c = lane < C ? lane : C - 1;  // lanes past C repeat candidate C - 1 (unused)
      const float ss = ((st[0][c] + st[1][c]) + (st[2][c] + st[3][c])) + ((st[4][c] + st[5][c]) + (st[6][c] + st[7][c]));
      const float dot = ((st[0][C + c] + st[1][C + c]) + (st[2][C + c] + st[3][C + c])) +
                        ((st[4][C + c] + st[5][C + c]) + (st[6][C + c] + st[7][C + c]));
      const float s = score_of(ss, dot, hidden_f, eps);
      if (warp == 0 && lane < C) scores[row * C + lane] = s;
      float m = __shfl_sync(0xffffffffu, s, 0);
#pragma unroll
      for (int q = 1; q < C; ++q) {
        const float sq = __shfl_sync(0xffffffffu, s, q);
        m = sq > m ? sq : m;
      }
      const float e = expf(s - m);
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < C; ++q) sum = sum + __shfl_sync(0xffffffffu, e, q);
      const float pl = e / sum;
#pragma unroll
      for (int q = 0; q < C; ++q) p[q] = __shfl_sync(0xffffffffu, pl, q);
    }

    // ---- pass 2: the mix, and the next row's staged chunks in flight ----
    uint4* dst = reinterpret_cast<uint4*>(out + row * hidden);
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) {
      const int j = t + k * kThreads;
      if (j < chunks) {
        uint4 u[kL2 > 0 ? kL2 : 1];
#pragma unroll
        for (int c = S; c < C; ++c) u[c - S] = __ldcs(cand(row, c) + j);
        float acc[kChunk];
#pragma unroll
        for (int e = 0; e < kChunk; ++e) acc[e] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) mix_chunk(p[c], c < S ? held[size_t(c) * chunks + j] : u[c - S < 0 ? 0 : c - S], acc);
        uint4 o;
        o.x = as_bits(__floats2bfloat162_rn(acc[0], acc[1]));
        o.y = as_bits(__floats2bfloat162_rn(acc[2], acc[3]));
        o.z = as_bits(__floats2bfloat162_rn(acc[4], acc[5]));
        o.w = as_bits(__floats2bfloat162_rn(acc[6], acc[7]));
        __stcs(dst + j, o);
      }
      stage_chunk(row + step, k);  // this thread's places of chunk k are read: refill them
    }
  }
  cp_async_wait_group<0>();  // the empty groups past the block's last row
}

// ---------------------------------------------------------------------------
// launchers

bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  return !overlaps(a, size_t(a_bytes), b, size_t(b_bytes));
}

// Checks the contract of attnres.h; false when there is nothing to do (rows == 0).
bool check_call(const std::string& who, const bf16* snap, const bf16* partial, const float* sw,
                const float* scores, const bf16* out, const AttnResShape& sh, float eps) {
  PB_CHECK(sh.rows >= 0, who + ": rows < 0");
  PB_CHECK(sh.rows <= INT_MAX, who + ": rows exceed the grid");
  PB_CHECK(sh.nb >= 1 && sh.nb <= kAttnResMaxBlocks, who + ": nb outside 1 .. 8");
  PB_CHECK(sh.snap_blocks >= sh.nb && sh.snap_blocks <= 65536,
           who + ": snap_blocks must be in nb .. 65536");
  PB_CHECK(sh.hidden >= kChunk && sh.hidden % kChunk == 0,
           who + ": hidden must be a positive multiple of 8");
  PB_CHECK((sh.hidden + kThreads - 1) / kThreads <= 65535, who + ": hidden exceeds the mix grid");
  PB_CHECK(eps >= 0.0f, who + ": eps must be >= 0");
  if (sh.rows == 0) return false;
  PB_CHECK(snap && partial && sw && scores && out, who + ": null pointer with rows > 0");
  const int64_t snap_bytes = ((sh.rows - 1) * sh.snap_blocks + sh.nb) * sh.hidden * 2;
  const int64_t row_bytes = sh.rows * sh.hidden * 2;
  const int64_t sw_bytes = sh.hidden * 4;
  const int64_t score_bytes = sh.rows * (sh.nb + 1) * 4;
  PB_CHECK(disjoint(out, row_bytes, snap, snap_bytes) && disjoint(out, row_bytes, partial, row_bytes) &&
               disjoint(out, row_bytes, sw, sw_bytes) && disjoint(out, row_bytes, scores, score_bytes),
           who + ": out overlaps an input or scores");
  PB_CHECK(disjoint(scores, score_bytes, snap, snap_bytes) &&
               disjoint(scores, score_bytes, partial, row_bytes) &&
               disjoint(scores, score_bytes, sw, sw_bytes),
           who + ": scores overlap an input");
  return true;
}

// The two_pass launch: B blocks per SM, S = as many staged candidates as B
// blocks' shared memory holds, a grid of ceil(rows / 2) blocks (about 2 rows
// each, the hardware starting a block as another finishes).
struct TwoPassPlan {
  int blocks_per_sm = 0;  // B
  int staged = 0;         // S
  size_t smem = 0;
};

constexpr int kRowsPerBlock = 2;
// B: 4 at C <= 3, 2 above (the kernel's launch bounds).
int two_pass_blocks_per_sm(int cands) { return cands <= 3 ? 4 : 2; }

TwoPassPlan two_pass_plan(const AttnResShape& sh) {
  int dev = 0, per_sm = 0, optin = 0, reserved = 0;
  PB_CUDA(cudaGetDevice(&dev));
  PB_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  PB_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  PB_CUDA(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  const int cands = sh.nb + 1;
  const size_t entry = size_t(sh.hidden) * sizeof(bf16);  // one staged candidate row
  const size_t stage = sizeof(float) * 2 * kWarps * 2 * size_t(cands);
  TwoPassPlan plan;
  plan.blocks_per_sm = two_pass_blocks_per_sm(cands);
  const size_t per_block = size_t(per_sm) / size_t(plan.blocks_per_sm);
  const size_t room = per_block > reserved + stage ? per_block - reserved - stage : 0;
  const size_t cap = size_t(optin) > stage ? size_t(optin) - stage : 0;
  plan.staged = int(std::min<size_t>(size_t(cands), std::min(room, cap) / entry));
  PB_CHECK(plan.staged >= 1 && cands - plan.staged <= kTwoPassMaxL2,
           "attnres_cut: shared memory stages " + std::to_string(plan.staged) + " of " + std::to_string(cands) +
               " candidate rows (at least 1, at most " + std::to_string(kTwoPassMaxL2) + " left to L2)");
  plan.smem = size_t(plan.staged) * entry;
  return plan;
}

template <int C, int kL2 = 0>
void launch_two_pass(const TwoPassPlan& plan, const bf16* snap, const bf16* partial, const float* sw, float* scores,
                     bf16* out, const AttnResShape& sh, float eps, cudaStream_t stream) {
  if constexpr (kL2 <= kTwoPassMaxL2 && kL2 < C) {
    if (C - plan.staged != kL2) {
      launch_two_pass<C, kL2 + 1>(plan, snap, partial, sw, scores, out, sh, eps, stream);
      return;
    }
    auto* kernel = attnres_two_pass_kernel<C, kL2>;
    const void* fn = reinterpret_cast<const void*>(kernel);
    int dev = 0, per_sm = 0, reserved = 0;
    PB_CUDA(cudaGetDevice(&dev));
    PB_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    PB_CUDA(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    cudaFuncAttributes attr{};
    PB_CUDA(cudaFuncGetAttributes(&attr, fn));
    PB_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem)));
    // Shared memory for B blocks and no more: the rest stays L1 (sw is read
    // through it every row). The driver rounds the carveout up.
    const size_t need = size_t(plan.blocks_per_sm) * (plan.smem + attr.sharedSizeBytes + size_t(reserved));
    const int percent = int(std::min<size_t>(100, (need * 100 + size_t(per_sm) - 1) / size_t(per_sm) + 1));
    PB_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
    int occ = 0;
    PB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, kThreads, plan.smem));
    PB_CHECK(occ >= 1, "attnres_cut: the kernel does not fit on a multiprocessor");
    const unsigned grid = unsigned((sh.rows + kRowsPerBlock - 1) / kRowsPerBlock);  // <= rows
    kernel<<<grid, kThreads, plan.smem, stream>>>(snap, partial, sw, scores, out, sh.rows, sh.hidden,
                                                  sh.snap_blocks, eps);
    PB_CUDA_LAUNCH();
  } else {
    PB_CHECK(false, "attnres_cut: no kernel for " + std::to_string(C - plan.staged) + " candidates re-read from L2");
  }
}

}  // namespace

void attnres_baseline_scores(const bf16* snap, const bf16* partial, const float* sw, float* scores,
                             const AttnResShape& sh, float eps, cudaStream_t stream) {
  const dim3 score_grid(unsigned(sh.rows), unsigned(sh.nb + 1));
  attnres_scores_baseline_kernel<<<score_grid, kThreads, 0, stream>>>(snap, partial, sw, scores,
                                                                       sh.hidden, sh.nb,
                                                                       sh.snap_blocks, eps);
  PB_CUDA_LAUNCH();
}

void attnres_baseline_mix(const bf16* snap, const bf16* partial, const float* scores, bf16* out,
                          const AttnResShape& sh, cudaStream_t stream) {
  const dim3 mix_grid(unsigned(sh.rows), unsigned((sh.hidden + kThreads - 1) / kThreads));
  attnres_mix_baseline_kernel<<<mix_grid, kThreads, 0, stream>>>(snap, partial, scores, out,
                                                                  sh.hidden, sh.nb, sh.snap_blocks);
  PB_CUDA_LAUNCH();
}

void attnres_baseline(const bf16* snap, const bf16* partial, const float* sw, float* scores,
                      bf16* out, const AttnResShape& sh, float eps, cudaStream_t stream,
                      const AttnResStep* step) {
  if (!check_call("attnres_baseline", snap, partial, sw, scores, out, sh, eps)) return;
  const auto run = [step](const char* name, const std::function<void()>& work) {
    if (step) (*step)(name, work);
    else work();
  };
  run("scores", [&] { attnres_baseline_scores(snap, partial, sw, scores, sh, eps, stream); });
  run("mix", [&] { attnres_baseline_mix(snap, partial, scores, out, sh, stream); });
}

void attnres_cut(const bf16* snap, const bf16* partial, const float* sw, float* scores, bf16* out,
                 const AttnResShape& sh, float eps, cudaStream_t stream) {
  if (!check_call("attnres_cut", snap, partial, sw, scores, out, sh, eps)) return;
  PB_CHECK(sh.hidden <= kAttnResCutMaxHidden, "attnres_cut: hidden must be <= 8192");
  PB_CHECK(aligned16(snap) && aligned16(partial) && aligned16(sw) && aligned16(out),
           "attnres_cut: snap, partial, sw and out must be 16-byte aligned");
  const TwoPassPlan plan = two_pass_plan(sh);
  const auto run = [&](auto cands) {
    launch_two_pass<decltype(cands)::value>(plan, snap, partial, sw, scores, out, sh, eps, stream);
  };
  switch (sh.nb + 1) {
    case 2: run(std::integral_constant<int, 2>{}); break;
    case 3: run(std::integral_constant<int, 3>{}); break;
    case 4: run(std::integral_constant<int, 4>{}); break;
    case 5: run(std::integral_constant<int, 5>{}); break;
    case 6: run(std::integral_constant<int, 6>{}); break;
    case 7: run(std::integral_constant<int, 7>{}); break;
    case 8: run(std::integral_constant<int, 8>{}); break;
    default: run(std::integral_constant<int, 9>{}); break;
  }
}

// ---- dispatch on the cut switch ----
void attnres(Variant v, const bf16* snap, const bf16* partial, const float* sw, float* scores,
             bf16* out, const AttnResShape& shape, float eps, cudaStream_t stream) {
  if (v == Variant::cut) attnres_cut(snap, partial, sw, scores, out, shape, eps, stream);
  else attnres_baseline(snap, partial, sw, scores, out, shape, eps, stream);
}

}  // namespace pb
