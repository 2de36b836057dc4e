// AttnRes: scores over block snapshots, softmax, mix (docs/design.md §2.1, issue 8).
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
//   cut       1 launch, two_pass (the default): a 256-thread block per row,
//             grid-stride over ceil(rows / 2) blocks, B = 4 blocks per SM at
//             C <= 3, else 2 (B 2 .. 4, any rows per block or one persistent
//             wave on request); the first S candidates staged per thread by
//             cp.async in shared memory, the rest read twice (the second an L2 hit);
//             pass 1 sums, tree + per-warp softmax by shuffles, pass 2 mix; see
//             attnres_two_pass_kernel (kAhead = 2: two rows staged ahead;
//             kHint: L2 eviction priorities; the bench's cut.ahead, cut.hint).
//   cut, ring (A/B: the bench's cut.ring row) 1 launch, persistent:
//             min(rows, #SMs) blocks, block b takes rows
//             b, b + G, ... A ring of candidate rows (entries of hidden * 2 bytes,
//             as many as the block's shared memory holds: 16 at hidden 7168,
//             14 at 8192; at least C) in shared memory: item n of the block =
//             (its row n / C, candidate n % C) lands in entry n % ring. Thread
//             t is slot t and reads its chunks (16 bytes) of the C entries of a
//             row: the sums of candidate c as soon as it landed, the tree (one
//             barrier, two stage buffers alternating by row), scores + softmax
//             in every thread (thread 0 writes the scores), then the mix with c
//             outer and the 4 chunks' accumulators in registers (per element
//             still c ascending), releasing each entry when mixed, so the next
//             rows' candidates are in flight while this row computes.
//             Loader tma (cut.ring): warp 8 (one thread) issues one
//             cp.async.bulk per item; entry q has a full mbarrier (1 arrive +
//             the bytes) and an empty one (8 arrives, one per slot warp after
//             mixing it). Loader cp_async (for A/B): every thread cp.asyncs its
//             own chunks, one commit group per item, and reads only those back;
//             item n + ring is issued right after the thread mixed item n.
// Both variants call the same device functions (accumulate, block_tree_sum,
// score_of, softmax, the mix FMA), compiled with --fmad=false and no fast-math.
#include "attnres.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "ptx.cuh"
#include "tma.cuh"

namespace pb {

namespace {

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

// Barrier 1 over the 8 slot warps only (the tma loader warp never joins).
__device__ __forceinline__ void slot_warps_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
}

// The tree over the 256 slot partials (slot = threadIdx.x) of N sums at once;
// every thread returns with the N totals in v. Lanes: xor butterfly 1, 2, 4,
// 8, 16 -- lane 0 adds left + right at every level of the pairwise tree over
// its warp's 32 slots, the other lanes add the same two values commuted, which
// gives the same bits. Warps: ((W0 + W1) + (W2 + W3)) + ((W4 + W5) + (W6 + W7)).
// One barrier: __syncthreads, or with kSlotWarps barrier 1 over warps 0 .. 7
// only (the tma cut's loader warp is warp 8). stage must not be written again
// before every thread has read it (the cut alternates two per row).
template <int N, bool kSlotWarps = false>
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
  if constexpr (kSlotWarps) slot_warps_sync();
  else __syncthreads();
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
// cut: one fused launch, persistent blocks, a ring of candidate rows on chip.
//
// Items are (row, candidate) pairs: block b takes rows b, b + G, b + 2G, ...
// (G = gridDim.x) and, per row, candidates c = 0 .. C-1; item n of the block
// goes to ring entry n % ring (one candidate row, hidden * 2 bytes, chunk j at
// entry[j]). A row's C entries stay until its mix is done, so ring >= C; the
// rest stream the next rows in while this one is reduced and mixed.

constexpr int kRingMax = 32;         // ring entries, tma loader (mbarriers per entry)
constexpr int kRingMaxCpAsync = 16;  // ring entries, cp.async loader (wait_group counts <= 15)
constexpr int kLoaderThread = kThreads;      // tma loader: thread 256, lane 0 of warp 8
constexpr int kTmaThreads = kThreads + 32;   // 8 slot warps + the loader warp

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
// Waits until at most `pending` (0 .. 15) of this thread's newest commit groups
// are in flight; anything larger waits for all.
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 15: cp_async_wait_group<15>(); break;
    case 14: cp_async_wait_group<14>(); break;
    case 13: cp_async_wait_group<13>(); break;
    case 12: cp_async_wait_group<12>(); break;
    case 11: cp_async_wait_group<11>(); break;
    case 10: cp_async_wait_group<10>(); break;
    case 9: cp_async_wait_group<9>(); break;
    case 8: cp_async_wait_group<8>(); break;
    case 7: cp_async_wait_group<7>(); break;
    case 6: cp_async_wait_group<6>(); break;
    case 5: cp_async_wait_group<5>(); break;
    case 4: cp_async_wait_group<4>(); break;
    case 3: cp_async_wait_group<3>(); break;
    case 2: cp_async_wait_group<2>(); break;
    case 1: cp_async_wait_group<1>(); break;
    default: cp_async_wait_group<0>(); break;
  }
}

using namespace tma;  // mbarriers and the bulk copy (tma.cuh)

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

// Slot t's chunks of one candidate row on chip (x[j] = chunk j), ascending j,
// into its two sums: the loads first, then the one fma chain per sum.
__device__ __forceinline__ void accumulate_entry(const uint4* x, int t, int chunks,
                                                 const float4 (&w)[kCutChunks][2], float& ss, float& dot) {
  uint4 u[kCutChunks];
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int j = t + k * kThreads;
    if (j < chunks) u[k] = x[j];
  }
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int j = t + k * kThreads;
    if (j < chunks) accumulate_chunk(u[k], w[k], ss, dot);
  }
}

// acc of slot t's chunks += p * this candidate (one more fma per element; the
// caller goes c ascending).
__device__ __forceinline__ void mix_entry(float p, const uint4* x, int t, int chunks,
                                          float (&acc)[kCutChunks][kChunk]) {
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int j = t + k * kThreads;
    if (j < chunks) mix_chunk(p, x[j], acc[k]);
  }
}

__device__ __forceinline__ void store_row(const float (&acc)[kCutChunks][kChunk], uint4* dst, int t,
                                          int chunks) {
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int j = t + k * kThreads;
    if (j >= chunks) continue;
    uint4 o;
    o.x = as_bits(__floats2bfloat162_rn(acc[k][0], acc[k][1]));
    o.y = as_bits(__floats2bfloat162_rn(acc[k][2], acc[k][3]));
    o.z = as_bits(__floats2bfloat162_rn(acc[k][4], acc[k][5]));
    o.w = as_bits(__floats2bfloat162_rn(acc[k][6], acc[k][7]));
    dst[j] = o;
  }
}

// After the tree: the scores (thread 0 writes them) and the softmax, the same
// bits in every thread.
template <int C>
__device__ __forceinline__ void scores_softmax(const float (&v)[2 * C], float* __restrict__ scores, int64_t row,
                                               float hidden_f, float eps, float (&p)[C]) {
  float s[C];
#pragma unroll
  for (int c = 0; c < C; ++c) s[c] = score_of(v[c], v[C + c], hidden_f, eps);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) scores[row * C + c] = s[c];
  }
  softmax(s, C, p);
}

// Ring entry of candidate c of a row whose candidate 0 sits at q0 (ring >= C).
__device__ __forceinline__ int entry_of(int q0, int c, int ring) {
  const int q = q0 + c;
  return q < ring ? q : q - ring;
}

// tma loader. Threads 0 .. 255 are the slots; thread 256 (warp 8) issues one
// bulk copy per item, in item order: entry q's `full` barrier (count 1 + the
// bytes) completes when the row has landed, its `empty` barrier (count 8, one
// arrive per slot warp after it mixed the entry) when it may be refilled.
// Round r of entry q is phase r of both barriers (parity r & 1).
template <int C>
__global__ void __launch_bounds__(kTmaThreads, 1)
    attnres_ring_tma_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                            const float* __restrict__ sw, float* __restrict__ scores, bf16* __restrict__ out,
                            int64_t rows, int64_t hidden, int64_t snap_blocks, float eps, int ring) {
  constexpr int kNb = C - 1;
  static_assert(C >= 2 && C <= kMaxCands, "attnres cut: C outside 2 .. 9");
  extern __shared__ uint4 entries[];  // ring x chunks
  __shared__ uint64_t full[kRingMax], empty[kRingMax];
  __shared__ float stage[2][kWarps][2 * C];  // alternate rows: a fast warp may start the next tree

  const int t = threadIdx.x;
  const int chunks = int(hidden / kChunk);
  const int64_t first = blockIdx.x, step = gridDim.x;
  const int64_t my_rows = (rows - 1 - first) / step + 1;  // grid <= rows: at least one

  if (t == 0) {
    for (int q = 0; q < ring; ++q) {
      mbar_init(&full[q], 1);
      mbar_init(&empty[q], kWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (t >= kThreads) {
    if (t == kLoaderThread) {
      const uint32_t bytes = uint32_t(hidden) * 2u;
      int q = 0;
      uint32_t parity = 0;  // of the round being filled
      bool refill = false;  // round >= 1: wait until round - 1 was mixed
      for (int64_t i = 0; i < my_rows; ++i) {
        const int64_t row = first + i * step;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          if (refill) mbar_wait(&empty[q], parity ^ 1u);
          mbar_arrive_expect_tx(&full[q], bytes);
          bulk_copy_g2s(entries + size_t(q) * chunks, candidate(snap, partial, row, c, kNb, snap_blocks, hidden),
                        bytes, &full[q]);
          if (++q == ring) {
            q = 0;
            parity ^= 1u;
            refill = true;
          }
        }
      }
    }
    return;  // the loader warp takes no part in the slot barrier
  }

  float4 w[kCutChunks][2];
  load_sw(sw, t, chunks, w);
  const float hidden_f = static_cast<float>(hidden);
  int q0 = 0;            // entry of the row's candidate 0
  uint32_t parity0 = 0;  // its round's parity
  for (int64_t i = 0; i < my_rows; ++i) {
    const int64_t row = first + i * step;
    float v[2 * C];  // slot t's sums: v[c] sum of squares, v[C + c] dot with sw of candidate c
#pragma unroll
    for (int q = 0; q < 2 * C; ++q) v[q] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int q = entry_of(q0, c, ring);
      mbar_wait(&full[q], q0 + c < ring ? parity0 : parity0 ^ 1u);
      accumulate_entry(entries + size_t(q) * chunks, t, chunks, w, v[c], v[C + c]);
    }
    block_tree_sum<2 * C, true>(v, stage[i & 1]);
    float p[C];
    scores_softmax<C>(v, scores, row, hidden_f, eps, p);

    float acc[kCutChunks][kChunk];
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k)
#pragma unroll
      for (int e = 0; e < kChunk; ++e) acc[k][e] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int q = entry_of(q0, c, ring);
      mix_entry(p[c], entries + size_t(q) * chunks, t, chunks, acc);
      __syncwarp();
      if (t % 32 == 0) mbar_arrive(&empty[q]);  // this warp is done with entry q
    }
    store_row(acc, reinterpret_cast<uint4*>(out + row * hidden), t, chunks);
    q0 += C;
    if (q0 >= ring) {
      q0 -= ring;
      parity0 ^= 1u;
    }
  }
}

// cp.async loader: no loader warp and no mbarriers. Every thread copies only
// its own chunks (cp.async, one commit group per item, an empty group past the
// block's last item) and reads back only those, so the ring needs no barrier
// between threads: item n + ring is issued into entry n's place right after
// this thread mixed item n. When item n = i C + c is reduced, ring + i C groups
// were committed, so waiting until ring - 1 - c are pending lands it.
template <int C>
__global__ void __launch_bounds__(kThreads, 1)
    attnres_ring_cp_async_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                                 const float* __restrict__ sw, float* __restrict__ scores,
                                 bf16* __restrict__ out, int64_t rows, int64_t hidden, int64_t snap_blocks,
                                 float eps, int ring) {
  constexpr int kNb = C - 1;
  static_assert(C >= 2 && C <= kMaxCands, "attnres cut: C outside 2 .. 9");
  extern __shared__ uint4 entries[];  // ring x chunks
  __shared__ float stage[2][kWarps][2 * C];

  const int t = threadIdx.x;
  const int chunks = int(hidden / kChunk);
  const int64_t first = blockIdx.x, step = gridDim.x;
  const int64_t my_rows = (rows - 1 - first) / step + 1;
  const int64_t items = my_rows * C;

  auto issue = [&](int64_t n, int q) {
    if (n < items) {
      const int64_t row = first + (n / C) * step;
      const uint4* src =
          reinterpret_cast<const uint4*>(candidate(snap, partial, row, int(n % C), kNb, snap_blocks, hidden));
      uint4* dst = entries + size_t(q) * chunks;
#pragma unroll
      for (int k = 0; k < kCutChunks; ++k) {
        const int j = t + k * kThreads;
        if (j < chunks) cp_async16(dst + j, src + j);
      }
    }
    cp_async_commit();
  };
  for (int q = 0; q < ring; ++q) issue(q, q);

  float4 w[kCutChunks][2];
  load_sw(sw, t, chunks, w);
  const float hidden_f = static_cast<float>(hidden);
  int q0 = 0;
  for (int64_t i = 0; i < my_rows; ++i) {
    const int64_t row = first + i * step;
    float v[2 * C];
#pragma unroll
    for (int q = 0; q < 2 * C; ++q) v[q] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      cp_async_wait_pending(ring - 1 - c);
      accumulate_entry(entries + size_t(entry_of(q0, c, ring)) * chunks, t, chunks, w, v[c], v[C + c]);
    }
    block_tree_sum<2 * C, false>(v, stage[i & 1]);
    float p[C];
    scores_softmax<C>(v, scores, row, hidden_f, eps, p);

    float acc[kCutChunks][kChunk];
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k)
#pragma unroll
      for (int e = 0; e < kChunk; ++e) acc[k][e] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int q = entry_of(q0, c, ring);
      mix_entry(p[c], entries + size_t(q) * chunks, t, chunks, acc);
      issue(i * C + c + ring, q);
    }
    store_row(acc, reinterpret_cast<uint4*>(out + row * hidden), t, chunks);
    q0 += C;
    if (q0 >= ring) q0 -= ring;
  }
  cp_async_wait_group<0>();  // the empty tail groups
}

// ---------------------------------------------------------------------------
// two_pass: many rows in flight per SM, no ring shared between threads.
// A 256-thread block per row (thread t = slot t), grid-stride over rows, B
// blocks per SM (2 .. 4; 8 B warps). Candidates c < S are staged in the
// block's shared memory, each thread cp.asyncing and reading back only its own
// chunks (so no barrier guards them); the last kL2 = C - S candidates are read
// from global memory twice, once per pass, the second read hitting L2.
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
constexpr int kTwoPassMaxL2 = 6;  // candidates re-read from L2 (B = 4 at C = 9: S = 3)


// L2 eviction priorities (kHint): createpolicy, then loads, cp.asyncs, stores
// and prefetches that carry it. Only where data stays in L2 changes, never what
// is read or written.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void prefetch_l2_evict_last(const void* p) {
  asm volatile("prefetch.global.L2::evict_last [%0];\n" ::"l"(p));
}
__device__ __forceinline__ void cp_async16_hint(void* smem_dst, const void* gmem_src, uint64_t pol) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "l"(pol)
               : "memory");
}
__device__ __forceinline__ uint4 ld_cg_hint(const uint4* p, uint64_t pol) {
  uint4 u;
  asm volatile("ld.global.cg.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p), "l"(pol));
  return u;
}
__device__ __forceinline__ void st_cs_hint(uint4* p, uint4 u, uint64_t pol) {
  asm volatile("st.global.cs.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(p), "r"(u.x), "r"(u.y),
               "r"(u.z), "r"(u.w), "l"(pol)
               : "memory");
}

// kAhead (1 or 2): rows staged ahead. held holds kAhead row buffers of S
// candidates; the block's i-th row uses buffer i % kAhead, and right after
// chunk k of it is mixed, row i + kAhead's chunk k goes into its places. The
// prologue stages the first kAhead rows, so when chunk k of row i is reduced
// 4 (i + kAhead) groups were committed and waiting until 4 kAhead - 1 - k are
// pending lands it.
// kHint: L2 eviction priorities -- the re-read candidates' prefetch and first
// read evict_last (they are read again), their second read, the staged
// cp.asyncs and the output stores evict_first (read once).
// Registers: 64 per thread (4 blocks per SM) at C <= 3; 128 (2 blocks per SM, the
// default B there) at C >= 4, where sw's 32 registers no longer fit in 64.
template <int C, int kL2, int kAhead = 1, bool kHint = false>
__global__ void __launch_bounds__(kThreads, C <= 3 ? 4 : 2)
    attnres_two_pass_kernel(const bf16* __restrict__ snap, const bf16* __restrict__ partial,
                            const float* __restrict__ sw, float* __restrict__ scores, bf16* __restrict__ out,
                            int64_t rows, int64_t hidden, int64_t snap_blocks, float eps) {
  constexpr int kNb = C - 1;
  constexpr int S = C - kL2;  // staged candidates 0 .. S-1
  static_assert(C >= 2 && C <= kMaxCands, "attnres two_pass: C outside 2 .. 9");
  static_assert(kL2 >= 0 && kL2 <= kTwoPassMaxL2 && S >= 1, "attnres two_pass: 1 <= S, kL2 <= 6");
  static_assert(kAhead == 1 || kAhead == 2, "attnres two_pass: 1 or 2 rows staged ahead");
  extern __shared__ uint4 held[];  // kAhead x S x chunks: buffer b's candidate c, chunk j at held[(b S + c) chunks + j]
  __shared__ float stage[2][kWarps][2 * C];  // alternate rows: a fast warp may start the next tree

  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int chunks = int(hidden / kChunk);
  const int64_t first = blockIdx.x, step = gridDim.x;  // grid <= rows: every block has a row
  const float hidden_f = static_cast<float>(hidden);
  const float4* sw4 = reinterpret_cast<const float4*>(sw);
  uint64_t pol_first = 0, pol_last = 0;
  if constexpr (kHint) {
    pol_first = l2_policy_evict_first();
    pol_last = l2_policy_evict_last();
  }

  auto cand = [&](int64_t row, int c) {
    return reinterpret_cast<const uint4*>(candidate(snap, partial, row, c, kNb, snap_blocks, hidden));
  };
  // Row `row`'s chunk k (this thread's) of the staged candidates into buffer
  // b, one commit group (empty when the block has no such row or no such
  // chunk); the L2 candidates' chunk is prefetched into L2.
  auto stage_chunk = [&](int64_t row, int k, int b) {
    const int j = t + k * kThreads;
    if (row < rows && j < chunks) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        if (c < S) {
          uint4* dst = held + (size_t(b) * S + c) * chunks + j;
          if constexpr (kHint) cp_async16_hint(dst, cand(row, c) + j, pol_first);
          else cp_async16(dst, cand(row, c) + j);
        } else {
          if constexpr (kHint) prefetch_l2_evict_last(cand(row, c) + j);
          else prefetch_l2(cand(row, c) + j);
        }
      }
    }
    cp_async_commit();
  };

#pragma unroll
  for (int a = 0; a < kAhead; ++a)
#pragma unroll
    for (int k = 0; k < kCutChunks; ++k) stage_chunk(first + a * step, k, a);

  // This thread's chunks of sw, read once per block: the staged candidates leave
  // little L1 at C >= 7 (B = 2: ~200 KB of shared memory), and re-reading sw's 28 KB
  // per row through it then costs L2 traffic.
  float4 w[kCutChunks][2];
#pragma unroll
  for (int k = 0; k < kCutChunks; ++k) {
    const int j = t + k * kThreads;
    w[k][0] = j < chunks ? __ldg(sw4 + 2 * j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    w[k][1] = j < chunks ? __ldg(sw4 + 2 * j + 1) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  int buf = 0;  // stage buffer of this row
  int hb = 0;   // held buffer of this row
  for (int64_t row = first; row < rows; row += step, buf ^= 1) {
    const uint4* h = held + size_t(hb) * S * chunks;
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
        for (int c = S; c < C; ++c) {
          if constexpr (kHint) u[c - S] = ld_cg_hint(cand(row, c) + j, pol_last);
          else u[c - S] = __ldcg(cand(row, c) + j);
        }
      }
      cp_async_wait_pending(kAhead * kCutChunks - 1 - k);  // k unrolled: one wait_group
      if (j < chunks) {
#pragma unroll
        for (int c = 0; c < C; ++c)
          accumulate_chunk(c < S ? h[size_t(c) * chunks + j] : u[c - S < 0 ? 0 : c - S], w[k], v[c], v[C + c]);
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
        for (int c = S; c < C; ++c) {
          if constexpr (kHint) u[c - S] = ld_cg_hint(cand(row, c) + j, pol_first);
          else u[c - S] = __ldcs(cand(row, c) + j);
        }
        float acc[kChunk];
#pragma unroll
        for (int e = 0; e < kChunk; ++e) acc[e] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) mix_chunk(p[c], c < S ? h[size_t(c) * chunks + j] : u[c - S < 0 ? 0 : c - S], acc);
        uint4 o;
        o.x = as_bits(__floats2bfloat162_rn(acc[0], acc[1]));
        o.y = as_bits(__floats2bfloat162_rn(acc[2], acc[3]));
        o.z = as_bits(__floats2bfloat162_rn(acc[4], acc[5]));
        o.w = as_bits(__floats2bfloat162_rn(acc[6], acc[7]));
        if constexpr (kHint) st_cs_hint(dst + j, o, pol_first);
        else __stcs(dst + j, o);
      }
      stage_chunk(row + kAhead * step, k, hb);  // this thread's places of chunk k are read: refill them
    }
    if (++hb == kAhead) hb = 0;
  }
  cp_async_wait_group<0>();  // the empty groups past the block's last row
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

// The persistent grid and the ring for one call: one block per SM (at most one
// per row), as many ring entries (candidate rows of hidden * 2 bytes) as the
// block's shared memory holds, at most `cap` and at least C.
struct RingLaunch {
  unsigned grid = 0;
  int ring = 0;
  size_t smem = 0;
};

template <class Kernel>
RingLaunch ring_launch(Kernel* kernel, const AttnResShape& sh, int cap) {
  int dev = 0, sms = 0, optin = 0;
  PB_CUDA(cudaGetDevice(&dev));
  PB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  PB_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes attr{};
  PB_CUDA(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)));
  const size_t entry = size_t(sh.hidden) * sizeof(bf16);
  const size_t room = size_t(optin) > attr.sharedSizeBytes ? size_t(optin) - attr.sharedSizeBytes : 0;
  RingLaunch l;
  l.ring = int(std::min<size_t>(size_t(cap), room / entry));
  PB_CHECK(l.ring >= sh.nb + 1, "attnres_cut: shared memory holds fewer than nb + 1 candidate rows (" +
                                    std::to_string(l.ring) + ")");
  l.smem = size_t(l.ring) * entry;
  l.grid = unsigned(std::min<int64_t>(sh.rows, std::max(sms, 1)));
  // Opt in above the 48 KB default (every call: cheap, and right on any device),
  // and take the largest shared-memory carveout.
  PB_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem)));
  PB_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                               cudaFuncAttributePreferredSharedMemoryCarveout,
                               int(cudaSharedmemCarveoutMaxShared)));
  return l;
}

// The two_pass launch: B blocks per SM (the occupancy the kernel reaches, at
// most B, on the persistent wave), S = as many staged candidates as B blocks'
// shared memory holds (kAhead row buffers of S each), the grid (one persistent
// wave, or ceil(rows / rows_per_block) blocks).
struct TwoPassPlan {
  int blocks_per_sm = 0;
  int rows_per_block = kAttnResPersistent;  // or n >= 1: a grid of ceil(rows / n) blocks
  int staged = 0;  // S
  int ahead = 1;   // rows staged ahead (row buffers)
  bool hint = false;
  size_t smem = 0;
};

// The defaults, from the H200 runs at hidden 7168 (results/h200/attnres.txt):
// a grid of ceil(rows / 2) blocks, B = 4 at C <= 3 (64 registers) and 2 above.
// At C = 2 it measured 0.93-0.96 of copy against 0.85-0.90 for one persistent
// wave (which paid a 10-19 us intercept in time against rows); at C = 3 .. 9
// it was ahead of the persistent wave by 1-4%. B = 3 on the persistent wave at
// C <= 3.
constexpr int kDefaultRowsPerBlock = 2;
int two_pass_default_blocks(int cands, int rows_per_block) {
  if (cands >= 4) return 2;
  return rows_per_block == kAttnResPersistent ? 3 : 4;
}

TwoPassPlan two_pass_plan(const AttnResShape& sh, int blocks_per_sm, int rows_per_block, int ahead, bool hint) {
  int dev = 0, per_sm = 0, optin = 0, reserved = 0;
  PB_CUDA(cudaGetDevice(&dev));
  PB_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  PB_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  PB_CUDA(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  const int cands = sh.nb + 1;
  const size_t entry = size_t(sh.hidden) * sizeof(bf16) * size_t(ahead);  // one candidate in every row buffer
  const size_t stage = sizeof(float) * 2 * kWarps * 2 * size_t(cands);
  auto staged_at = [&](int b) {
    const size_t per_block = size_t(per_sm) / size_t(b);
    const size_t room = per_block > reserved + stage ? per_block - reserved - stage : 0;
    const size_t cap = size_t(optin) > stage ? size_t(optin) - stage : 0;
    return int(std::min<size_t>(size_t(cands), std::min(room, cap) / entry));
  };
  TwoPassPlan plan;
  plan.ahead = ahead;
  plan.hint = hint;
  PB_CHECK(rows_per_block == 0 || rows_per_block == kAttnResPersistent || rows_per_block >= 1,
           "attnres_cut two_pass: rows_per_block must be 0 (default), kAttnResPersistent or >= 1");
  plan.rows_per_block = rows_per_block == 0 ? kDefaultRowsPerBlock : rows_per_block;
  if (blocks_per_sm == 0) {
    plan.blocks_per_sm = two_pass_default_blocks(cands, plan.rows_per_block);
  } else {
    PB_CHECK(blocks_per_sm >= 2 && blocks_per_sm <= 4, "attnres_cut two_pass: blocks_per_sm outside 2 .. 4");
    plan.blocks_per_sm = blocks_per_sm;
  }
  plan.staged = staged_at(plan.blocks_per_sm);
  PB_CHECK(plan.staged >= 1 && cands - plan.staged <= kTwoPassMaxL2,
           "attnres_cut two_pass: shared memory stages " + std::to_string(plan.staged) + " of " +
               std::to_string(cands) + " candidate rows (at least 1, at most " + std::to_string(kTwoPassMaxL2) +
               " left to L2)");
  plan.smem = size_t(plan.staged) * entry;
  return plan;
}

template <int C, int kAhead, bool kHint, int kL2 = 0>
void launch_two_pass(const TwoPassPlan& plan, const bf16* snap, const bf16* partial, const float* sw, float* scores,
                     bf16* out, const AttnResShape& sh, float eps, cudaStream_t stream) {
  if constexpr (kL2 <= kTwoPassMaxL2 && kL2 < C) {
    if (C - plan.staged != kL2) {
      launch_two_pass<C, kAhead, kHint, kL2 + 1>(plan, snap, partial, sw, scores, out, sh, eps, stream);
      return;
    }
    auto* kernel = attnres_two_pass_kernel<C, kL2, kAhead, kHint>;
    const void* fn = reinterpret_cast<const void*>(kernel);
    int dev = 0, sms = 0, per_sm = 0, reserved = 0;
    PB_CUDA(cudaGetDevice(&dev));
    PB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
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
    PB_CHECK(occ >= 1, "attnres_cut two_pass: the kernel does not fit on a multiprocessor");
    // Persistent: one resident wave; else ceil(rows / n) blocks, the hardware
    // starting each as an earlier one finishes.
    const int64_t blocks = plan.rows_per_block == kAttnResPersistent
                               ? int64_t(std::max(sms, 1)) * std::min(occ, plan.blocks_per_sm)
                               : (sh.rows + plan.rows_per_block - 1) / plan.rows_per_block;
    const unsigned grid = unsigned(std::min<int64_t>(sh.rows, blocks));
    kernel<<<grid, kThreads, plan.smem, stream>>>(snap, partial, sw, scores, out, sh.rows, sh.hidden,
                                                  sh.snap_blocks, eps);
    PB_CUDA_LAUNCH();
  } else {
    PB_CHECK(false, "attnres_cut two_pass: no kernel for " + std::to_string(C - plan.staged) +
                        " candidates re-read from L2");
  }
}

template <int C>
void launch_ring(AttnResLoader loader, int blocks_per_sm, int rows_per_block, const bf16* snap,
                 const bf16* partial, const float* sw, float* scores, bf16* out, const AttnResShape& sh, float eps,
                 cudaStream_t stream) {
  switch (loader) {
    case AttnResLoader::two_pass:
      launch_two_pass<C, 1, false>(two_pass_plan(sh, blocks_per_sm, rows_per_block, 1, false), snap, partial, sw,
                                   scores, out, sh, eps, stream);
      return;
    case AttnResLoader::two_pass_ahead:
      launch_two_pass<C, 2, false>(two_pass_plan(sh, blocks_per_sm, rows_per_block, 2, false), snap, partial, sw,
                                   scores, out, sh, eps, stream);
      return;
    case AttnResLoader::two_pass_hint:
      launch_two_pass<C, 1, true>(two_pass_plan(sh, blocks_per_sm, rows_per_block, 1, true), snap, partial, sw,
                                  scores, out, sh, eps, stream);
      return;
    default: break;
  }
  if (loader == AttnResLoader::tma) {
    const RingLaunch l = ring_launch(attnres_ring_tma_kernel<C>, sh, kRingMax);
    attnres_ring_tma_kernel<C><<<l.grid, kTmaThreads, l.smem, stream>>>(snap, partial, sw, scores, out, sh.rows,
                                                                        sh.hidden, sh.snap_blocks, eps, l.ring);
  } else {
    const RingLaunch l = ring_launch(attnres_ring_cp_async_kernel<C>, sh, kRingMaxCpAsync);
    attnres_ring_cp_async_kernel<C><<<l.grid, kThreads, l.smem, stream>>>(
        snap, partial, sw, scores, out, sh.rows, sh.hidden, sh.snap_blocks, eps, l.ring);
  }
  PB_CUDA_LAUNCH();
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
                 const AttnResShape& sh, float eps, cudaStream_t stream, AttnResLoader loader, int blocks_per_sm,
                 int rows_per_block) {
  if (!check_call("attnres_cut", snap, partial, sw, scores, out, sh, eps)) return;
  PB_CHECK(sh.hidden <= kAttnResCutMaxHidden, "attnres_cut: hidden must be <= 8192");
  PB_CHECK(aligned16(snap) && aligned16(partial) && aligned16(sw) && aligned16(out),
           "attnres_cut: snap, partial, sw and out must be 16-byte aligned");
  const auto run = [&](auto cands) {
    launch_ring<decltype(cands)::value>(loader, blocks_per_sm, rows_per_block, snap, partial, sw, scores, out, sh,
                                        eps, stream);
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
  // The cut: two_pass at its default grid and B.
  if (v == Variant::cut) attnres_cut(snap, partial, sw, scores, out, shape, eps, stream);
  else attnres_baseline(snap, partial, sw, scores, out, shape, eps, stream);
}

int attnres_launches(Variant v) { return v == Variant::cut ? 1 : 2; }

}  // namespace pb
