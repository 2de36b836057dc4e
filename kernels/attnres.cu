// AttnRes: scores over block snapshots, softmax, mix (DESIGN.md §2.1, issue 8).
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
//   cut       1 launch, grid rows x 256 threads, one row per block. Thread t is
//             slot t: it loads its chunks (16 bytes each, at most 4 per
//             candidate) of the C candidates once, candidates 0 .. C-3 into
//             shared memory by cp.async (one commit group per candidate, so the
//             sums of candidate c start while c+1 .. are still in flight) and the
//             last two into registers; it reads back only its own chunks, so no
//             barrier guards the staged data. Then the same tree (one barrier for
//             all 2C sums), every thread computes the same scores and softmax,
//             thread 0 writes the scores, and each thread mixes and stores its
//             chunks with 16-byte stores.
//             Shared memory (C - 2) * hidden * 2 bytes: 100 KB at C = 9, hidden
//             7168, so two blocks share an SM; at most 128 registers per thread.
// Both variants call the same device functions (accumulate, block_tree_sum,
// score_of, softmax, the mix FMA), compiled with --fmad=false and no fast-math.
#include "attnres.h"

#include <climits>
#include <cstdint>
#include <string>

#include "check.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
using bf16x2 = __nv_bfloat162;

constexpr int kThreads = kAttnResSlots;  // thread t is slot t in both variants
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 8;                // elements per chunk: one 16-byte load
constexpr int kMaxCands = kAttnResMaxBlocks + 1;
constexpr int kCutChunks = int(kAttnResCutMaxHidden / (int64_t(kChunk) * kThreads));  // per slot
constexpr int kCutRegCands = 2;          // the cut keeps the last two candidates in registers
constexpr int kCutMinBlocksPerSm = 2;
static_assert(kThreads == 256 && kWarps == 8,
              "attnres: the slot tree is written for 256 slots = 8 warps of 32 lanes");
static_assert(kCutChunks == 4, "attnres cut: hidden <= 8192 means at most 4 chunks per slot");
static_assert(kMaxCands - kCutRegCands <= 7,
              "attnres cut: cp_async_wait_pending covers at most 7 commit groups");

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
// gives the same bits. Warps: ((W0 + W1) + (W2 + W3)) + ((W4 + W5) + (W6 + W7)).
// One barrier; stage is used once per block.
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
// cut: one fused launch, a row per block, its candidates held on chip.

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Waits until at most `pending` of this thread's newest commit groups are in
// flight (a constant after unrolling; anything else waits for all).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 6: cp_async_wait<6>(); break;
    case 5: cp_async_wait<5>(); break;
    case 4: cp_async_wait<4>(); break;
    case 3: cp_async_wait<3>(); break;
    case 2: cp_async_wait<2>(); break;
    case 1: cp_async_wait<1>(); break;
    default: cp_async_wait<0>(); break;
  }
}

__device__ __forceinline__ uint32_t as_bits(bf16x2 h) {
  uint32_t bits;
  memcpy(&bits, &h, sizeof bits);
  return bits;
}

// 8 bf16 of a 16-byte chunk, in address order.
__device__ __forceinline__ void unpack8(const uint4 u, float (&f)[kChunk]) {
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    bf16x2 h;
    memcpy(&h, &words[k], sizeof h);  // .x is the lower address
    f[2 * k] = __bfloat162float(h.x);
    f[2 * k + 1] = __bfloat162float(h.y);
  }
}

// A chunk's 8 elements, ascending, into the slot's two sums; w = sw of the chunk.
__device__ __forceinline__ void accumulate_chunk(const uint4 x, const float4 (&w)[2], float& ss,
                                                 float& dot) {
  float f[kChunk];
  unpack8(x, f);
  const float wf[kChunk] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
#pragma unroll
  for (int e = 0; e < kChunk; ++e) accumulate(f[e], wf[e], ss, dot);
}

__device__ __forceinline__ void mix_chunk(float p, const uint4 x, float (&acc)[kChunk]) {
  float f[kChunk];
  unpack8(x, f);
#pragma unroll
  for (int e = 0; e < kChunk; ++e) acc[e] = __fmaf_rn(p, f[e], acc[e]);
}

// C = nb + 1 candidates. Thread t owns chunks j = t + 256 k, k < kCutChunks, j < chunks.
// Dynamic shared memory: staged[c][j], c < C - 2, 16 bytes each.
template <int C>
__global__ void __launch_bounds__(kThreads, kCutMinBlocksPerSm)
    attnres_fused_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                         const float* __restrict__ sw, float* __restrict__ scores,
                         bf16* __restrict__ out, int64_t hidden, int64_t snap_blocks, float eps) {
  constexpr int kNb = C - 1;
  constexpr int kStaged = C - kCutRegCands;  // candidates 0 .. kStaged-1 in shared memory
  static_assert(C >= kCutRegCands && C <= kMaxCands, "attnres cut: C outside 2 .. 9");
  extern __shared__ uint4 staged[];
  __shared__ float stage[kWarps][2 * C];

  const int64_t row = blockIdx.x;
  const int t = threadIdx.x;
  const int64_t chunks = hidden / kChunk;

  // 1. Candidates 0 .. kStaged-1 into shared memory, one commit group each.
#pragma unroll
  for (int c = 0; c < kStaged; ++c) {
    const uint4* src = reinterpret_cast<const uint4*>(candidate(snap, partial, row, c, kNb, snap_blocks, hidden));
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) {
      const int64_t j = t + int64_t(k) * kThreads;
      if (j < chunks) cp_async16(&staged[c * chunks + j], src + j);
    }
    cp_async_commit();
  }
  // 2. The last kCutRegCands candidates into registers (streaming loads).
  uint4 held[kCutRegCands][kCutChunks];
#pragma unroll
  for (int r = 0; r < kCutRegCands; ++r) {
    const uint4* src = reinterpret_cast<const uint4*>(
        candidate(snap, partial, row, kStaged + r, kNb, snap_blocks, hidden));
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) {
      const int64_t j = t + int64_t(k) * kThreads;
      held[r][k] = j < chunks ? __ldcs(src + j) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  // 3. sw of my chunks (shared by every row: L2-resident).
  float4 w[kCutChunks][2];
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int64_t j = t + int64_t(k) * kThreads;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    w[k][0] = j < chunks ? __ldg(reinterpret_cast<const float4*>(sw) + 2 * j) : zero;
    w[k][1] = j < chunks ? __ldg(reinterpret_cast<const float4*>(sw) + 2 * j + 1) : zero;
  }

  // 4. Slot t's sums: v[c] sum of squares, v[C + c] dot with sw of candidate c.
  float v[2 * C];
#pragma unroll
  for (int q = 0; q < 2 * C; ++q) v[q] = 0.0f;
#pragma unroll
  for (int c = 0; c < kStaged; ++c) {
    cp_async_wait_pending(kStaged - 1 - c);  // candidate c's group has landed
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) {
      const int64_t j = t + int64_t(k) * kThreads;
      if (j < chunks) accumulate_chunk(staged[c * chunks + j], w[k], v[c], v[C + c]);
    }
  }
#pragma unroll
  for (int r = 0; r < kCutRegCands; ++r) {
    const int c = kStaged + r;
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) {
      const int64_t j = t + int64_t(k) * kThreads;
      if (j < chunks) accumulate_chunk(held[r][k], w[k], v[c], v[C + c]);
    }
  }

  // 5. The tree, the scores (thread 0 writes them), the softmax: the same bits in every thread.
  block_tree_sum(v, stage);
  const float hidden_f = static_cast<float>(hidden);
  float s[C], p[C];
#pragma unroll
  for (int c = 0; c < C; ++c) s[c] = score_of(v[c], v[C + c], hidden_f, eps);
  if (t == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) scores[row * C + c] = s[c];
  }
  softmax(s, C, p);

  // 6. Mix my chunks, c ascending, and store them.
  uint4* dst = reinterpret_cast<uint4*>(out + row * hidden);
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int64_t j = t + int64_t(k) * kThreads;
    if (j >= chunks) continue;
    float acc[kChunk];
#pragma unroll
    for (int e = 0; e < kChunk; ++e) acc[e] = 0.0f;
#pragma unroll
    for (int c = 0; c < kStaged; ++c) mix_chunk(p[c], staged[c * chunks + j], acc);
#pragma unroll
    for (int r = 0; r < kCutRegCands; ++r) mix_chunk(p[kStaged + r], held[r][k], acc);
    uint4 o;
    o.x = as_bits(__floats2bfloat162_rn(acc[0], acc[1]));
    o.y = as_bits(__floats2bfloat162_rn(acc[2], acc[3]));
    o.z = as_bits(__floats2bfloat162_rn(acc[4], acc[5]));
    o.w = as_bits(__floats2bfloat162_rn(acc[6], acc[7]));
    dst[j] = o;
  }
}

// ---------------------------------------------------------------------------
// launchers

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x + uintptr_t(a_bytes) <= y || y + uintptr_t(b_bytes) <= x;
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

template <int C>
void launch_fused(const bf16* snap, const bf16* partial, const float* sw, float* scores, bf16* out,
                  const AttnResShape& sh, float eps, cudaStream_t stream) {
  const int64_t chunks = sh.hidden / kChunk;
  const size_t smem = size_t(C - kCutRegCands) * size_t(chunks) * sizeof(uint4);
  // Opt in above the 48 KB default (every call: cheap, and right on any device),
  // and prefer the largest shared-memory carveout so two blocks share an SM.
  PB_CUDA(cudaFuncSetAttribute(attnres_fused_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(smem)));
  PB_CUDA(cudaFuncSetAttribute(attnres_fused_kernel<C>,
                               cudaFuncAttributePreferredSharedMemoryCarveout,
                               int(cudaSharedmemCarveoutMaxShared)));
  attnres_fused_kernel<C><<<unsigned(sh.rows), kThreads, smem, stream>>>(
      snap, partial, sw, scores, out, sh.hidden, sh.snap_blocks, eps);
  PB_CUDA_LAUNCH();
}

}  // namespace

void attnres_baseline(const bf16* snap, const bf16* partial, const float* sw, float* scores,
                      bf16* out, const AttnResShape& sh, float eps, cudaStream_t stream) {
  if (!check_call("attnres_baseline", snap, partial, sw, scores, out, sh, eps)) return;
  const dim3 score_grid(unsigned(sh.rows), unsigned(sh.nb + 1));
  attnres_scores_baseline_kernel<<<score_grid, kThreads, 0, stream>>>(snap, partial, sw, scores,
                                                                       sh.hidden, sh.nb,
                                                                       sh.snap_blocks, eps);
  PB_CUDA_LAUNCH();
  const dim3 mix_grid(unsigned(sh.rows), unsigned((sh.hidden + kThreads - 1) / kThreads));
  attnres_mix_baseline_kernel<<<mix_grid, kThreads, 0, stream>>>(snap, partial, scores, out,
                                                                  sh.hidden, sh.nb, sh.snap_blocks);
  PB_CUDA_LAUNCH();
}

void attnres_cut(const bf16* snap, const bf16* partial, const float* sw, float* scores, bf16* out,
                 const AttnResShape& sh, float eps, cudaStream_t stream) {
  if (!check_call("attnres_cut", snap, partial, sw, scores, out, sh, eps)) return;
  PB_CHECK(sh.hidden <= kAttnResCutMaxHidden, "attnres_cut: hidden must be <= 8192");
  PB_CHECK(aligned16(snap) && aligned16(partial) && aligned16(sw) && aligned16(out),
           "attnres_cut: snap, partial, sw and out must be 16-byte aligned");
  switch (sh.nb + 1) {
    case 2: launch_fused<2>(snap, partial, sw, scores, out, sh, eps, stream); break;
    case 3: launch_fused<3>(snap, partial, sw, scores, out, sh, eps, stream); break;
    case 4: launch_fused<4>(snap, partial, sw, scores, out, sh, eps, stream); break;
    case 5: launch_fused<5>(snap, partial, sw, scores, out, sh, eps, stream); break;
    case 6: launch_fused<6>(snap, partial, sw, scores, out, sh, eps, stream); break;
    case 7: launch_fused<7>(snap, partial, sw, scores, out, sh, eps, stream); break;
    case 8: launch_fused<8>(snap, partial, sw, scores, out, sh, eps, stream); break;
    default: launch_fused<9>(snap, partial, sw, scores, out, sh, eps, stream); break;
  }
}

// ---- dispatch on the cut switch ----
void attnres(Variant v, const bf16* snap, const bf16* partial, const float* sw, float* scores,
             bf16* out, const AttnResShape& shape, float eps, cudaStream_t stream) {
  if (v == Variant::cut) attnres_cut(snap, partial, sw, scores, out, shape, eps, stream);
  else attnres_baseline(snap, partial, sw, scores, out, shape, eps, stream);
}

int attnres_launches(Variant v) { return v == Variant::cut ? 1 : 2; }

}  // namespace pb
