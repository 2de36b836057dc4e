// MoE routing on the device. Contracts and shapes in moe_route.h.
//
//   router_topk       one warp per token. Lanes stride the experts: each
//                     writes s_e and an order key of b_e to shared memory and
//                     keeps its best (key, lowest index) pair; k rounds of a
//                     warp-wide max pick the slots in rank order, the winner's
//                     lane retires it and rescans its own experts. Every lane
//                     adds the k scores in slot order, so the sum is the
//                     reference's sequential one.
//   moe_permute_plan  counting, integer only, three launches:
//                     1. histogram: one warp per tile of 1024 assignments,
//                        shared-memory counts -> tile_counts [tiles, E];
//                     2. scan (one block): per expert, an exclusive scan over
//                        the tiles (in place: each tile's base within the
//                        expert), counts, then an exclusive scan over the
//                        experts -> offsets; perm_src rows past V get -1;
//                     3. scatter: one warp per tile walks it in order, 32 at a
//                        time; __match_any_sync groups equal experts, a lane's
//                        rank among its lower-lane peers gives its row, and
//                        the group's first lane advances the expert's cursor.
//                     Rows within an expert thus keep ascending assignment
//                     index, the order the reference produces.
//   moe_permute, moe_weight, moe_combine
//                     one block per row (grid-stride past 65535 rows), threads
//                     across the row in 16-byte chunks (8 bf16); widths that
//                     are not a multiple of 8 or unaligned pointers take the
//                     same kernels instantiated for 2-byte chunks.
//   moe_permute_fp8   a few lanes per row (8, 16 or 32: as many as the row
//                     has 16-byte chunks, at most a warp), grid-stride over
//                     the rows; 16 codes per access (1 on the scalar path),
//                     the row's W/128 scales copied by its first lanes.
//   moe_weight_fp8    flat over the 8-value vectors of [T * k, N]: each
//                     thread widens 8 bf16, multiplies, rounds to bf16 and
//                     widens back (moe_weight's arithmetic), then the half
//                     warp holding the 16 vectors of one 128-column group
//                     takes its scale (half_warp_group_scale) and encodes
//                     (encode8). Scales are K-major with row stride N/128,
//                     so vector v's group is v / 16 exactly. The block size
//                     and the grid stride are multiples of 32 and N/8 of 16:
//                     a half warp always runs one group, and stops together.
#include "moe_route.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "check.h"
#include "fp8_device.cuh"
#include "launch.h"

namespace pb {

namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------
// router_topk

constexpr int kRouterMaxWarps = 8;           // tokens per block, at most
constexpr int kRouterSmemBytes = 48 * 1024;  // per block: [warps, E] keys + [warps, E] scores
static_assert(kMoeMaxExperts * 8 <= kRouterSmemBytes, "router: one warp's scores must fit");

__device__ __forceinline__ float router_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Larger key = ranked earlier. 0 marks a taken expert, 1 a NaN score; numbers
// map monotonically onto [0x007fffff (-inf), 0xff800000 (+inf)], -0 onto +0.
__device__ __forceinline__ uint32_t order_key(float b) {
  if (b != b) return 1u;
  if (b == 0.0f) b = 0.0f;
  const uint32_t u = __float_as_uint(b);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (key, expert) packed so that the larger value wins: the key, then the
// lower expert index. Every live candidate is >= 2^32; 0 means none.
__device__ __forceinline__ uint64_t candidate(uint32_t key, int e) {
  return (uint64_t(key) << 32) | uint64_t(~uint32_t(e));
}

__device__ __forceinline__ uint64_t larger(uint64_t a, uint64_t b) { return a > b ? a : b; }

__device__ __forceinline__ uint64_t lane_best(const uint32_t* key, int experts, int lane) {
  uint64_t best = 0;
  for (int e = lane; e < experts; e += kWarp)
    if (key[e] != 0u) best = larger(best, candidate(key[e], e));
  return best;
}

__device__ __forceinline__ uint64_t warp_max(uint64_t v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    const uint64_t other = __shfl_xor_sync(kFullMask, (unsigned long long)v, offset);
    v = larger(v, other);
  }
  return v;
}

__global__ void __launch_bounds__(kRouterMaxWarps* kWarp)
    router_topk_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                       int32_t* __restrict__ ids, float* __restrict__ weights, int64_t tokens,
                       int experts, int k) {
  extern __shared__ uint32_t router_smem[];
  const int warps = blockDim.x / kWarp;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  uint32_t* key = router_smem + warp * experts;
  float* score = reinterpret_cast<float*>(router_smem + warps * experts) + warp * experts;

  for (int64_t t = int64_t(blockIdx.x) * warps + warp; t < tokens;
       t += int64_t(gridDim.x) * warps) {
    const float* row = logits + t * experts;
    uint64_t best = 0;
    for (int e = lane; e < experts; e += kWarp) {
      const float s = router_sigmoid(row[e]);
      const uint32_t kk = order_key(s + bias[e]);
      score[e] = s;
      key[e] = kk;
      best = larger(best, candidate(kk, e));
    }
    __syncwarp();

    float sum = 0.0f, my_score = 0.0f;
    int32_t my_id = 0;
    for (int j = 0; j < k; ++j) {
      const uint64_t win = warp_max(best);  // every lane holds the winner
      const int e = int(~uint32_t(win));
      const float s = score[e];
      sum += s;
      if (lane == j) {
        my_id = e;
        my_score = s;
      }
      if (lane == e % kWarp) {  // the lane that owns expert e retires it
        key[e] = 0u;
        best = lane_best(key, experts, lane);
      }
    }
    if (lane < k) {
      ids[t * k + lane] = my_id;
      weights[t * k + lane] = my_score / (sum + 1e-20f);
    }
    __syncwarp();  // this token's shared reads before the next token's writes
  }
}

// ---------------------------------------------------------------------------
// moe_permute_plan

constexpr int kPlanTile = 1024;  // assignments per warp tile (32 steps of 32)
constexpr int kPlanWarps = 8;    // tiles per block in the histogram and the scatter
constexpr int kScanThreads = 1024;
constexpr int kScanBatch = 8;  // tile counts loaded ahead per expert column
static_assert(kMoeMaxExperts <= kScanThreads, "plan scan: one thread per expert");

__global__ void __launch_bounds__(kPlanWarps* kWarp)
    plan_histogram_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ tile_counts,
                          int64_t assignments, int experts, int64_t tiles) {
  extern __shared__ int32_t hist_smem[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t tile = int64_t(blockIdx.x) * kPlanWarps + warp;
  if (tile >= tiles) return;  // warp-uniform; no block barrier below
  int32_t* hist = hist_smem + warp * experts;
  for (int e = lane; e < experts; e += kWarp) hist[e] = 0;
  __syncwarp();
  const int64_t begin = tile * kPlanTile;
  const int64_t end = assignments < begin + kPlanTile ? assignments : begin + kPlanTile;
  for (int64_t i = begin + lane; i < end; i += kWarp) {
    const int32_t e = ids[i];
    if (e >= 0 && e < experts) atomicAdd(&hist[e], 1);
  }
  __syncwarp();
  for (int e = lane; e < experts; e += kWarp) tile_counts[tile * experts + e] = hist[e];
}

// Warp-inclusive scan of v (all 32 lanes take part).
__device__ __forceinline__ int32_t warp_inclusive_scan(int32_t v, int lane) {
#pragma unroll
  for (int offset = 1; offset < kWarp; offset <<= 1) {
    const int32_t up = __shfl_up_sync(kFullMask, v, offset);
    if (lane >= offset) v += up;
  }
  return v;
}

__global__ void __launch_bounds__(kScanThreads)
    plan_scan_kernel(int32_t* __restrict__ tile_counts, int32_t* __restrict__ counts,
                     int32_t* __restrict__ offsets, int32_t* __restrict__ perm_src,
                     int64_t assignments, int experts, int64_t tiles) {
  __shared__ int32_t warp_totals[kScanThreads / kWarp];
  const int e = threadIdx.x;
  const int lane = e % kWarp, warp = e / kWarp, warps = blockDim.x / kWarp;

  // Column e: exclusive scan over the tiles, in place.
  int32_t total = 0;
  if (e < experts) {
    int32_t* column = tile_counts + e;
    for (int64_t t0 = 0; t0 < tiles; t0 += kScanBatch) {
      int32_t v[kScanBatch];
#pragma unroll
      for (int u = 0; u < kScanBatch; ++u) v[u] = t0 + u < tiles ? column[(t0 + u) * experts] : 0;
#pragma unroll
      for (int u = 0; u < kScanBatch; ++u) {
        if (t0 + u < tiles) column[(t0 + u) * experts] = total;
        total += v[u];
      }
    }
    counts[e] = total;
  }

  // Exclusive scan of the totals over the experts.
  const int32_t inclusive = warp_inclusive_scan(total, lane);
  if (lane == kWarp - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int32_t w = warp_inclusive_scan(lane < warps ? warp_totals[lane] : 0, lane);
    if (lane < warps) warp_totals[lane] = w;
  }
  __syncthreads();
  const int32_t exclusive = (warp > 0 ? warp_totals[warp - 1] : 0) + inclusive - total;
  if (e < experts) offsets[e] = exclusive;
  if (e == experts - 1) offsets[experts] = exclusive + total;

  const int64_t valid = warp_totals[warps - 1];
  for (int64_t p = valid + threadIdx.x; p < assignments; p += blockDim.x) perm_src[p] = -1;
}

__global__ void __launch_bounds__(kPlanWarps* kWarp)
    plan_scatter_kernel(const int32_t* __restrict__ ids, const int32_t* __restrict__ tile_base,
                        const int32_t* __restrict__ offsets, int32_t* __restrict__ perm_src,
                        int32_t* __restrict__ perm_dst, int64_t assignments, int experts,
                        int64_t tiles) {
  extern __shared__ int32_t cursor_smem[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t tile = int64_t(blockIdx.x) * kPlanWarps + warp;
  if (tile >= tiles) return;                       // warp-uniform; no block barrier below
  int32_t* cursor = cursor_smem + warp * experts;  // next row of each expert
  for (int e = lane; e < experts; e += kWarp)
    cursor[e] = offsets[e] + tile_base[tile * experts + e];
  __syncwarp();

  const uint32_t lower_lanes = (1u << lane) - 1u;
  const int64_t begin = tile * kPlanTile;
  const int64_t end = assignments < begin + kPlanTile ? assignments : begin + kPlanTile;
  for (int64_t i0 = begin; i0 < end; i0 += kWarp) {
    const int64_t i = i0 + lane;
    const bool live = i < end;
    const int32_t e = live ? ids[i] : -1;
    const bool valid = live && e >= 0 && e < experts;
    const uint32_t peers = __match_any_sync(kFullMask, valid ? e : -1);
    if (valid) {
      const int32_t p = cursor[e] + __popc(peers & lower_lanes);
      perm_src[p] = int32_t(i);
      perm_dst[i] = p;
    } else if (live) {
      perm_dst[i] = -1;
    }
    __syncwarp();  // every lane has read its cursor before the first of each group moves it
    if (valid && (peers & lower_lanes) == 0u) cursor[e] += __popc(peers);
    __syncwarp();
  }
}

// ---------------------------------------------------------------------------
// row kernels: kVec bf16 per access, 16 bytes (8) or 2 bytes (1)

constexpr int kRowMaxThreads = 256;
constexpr int64_t kRowMaxBlocks = 65535;

template <int kVec>
struct Chunk;
template <>
struct Chunk<8> {
  using type = uint4;
};
template <>
struct Chunk<1> {
  using type = unsigned short;
};

template <int kVec>
__device__ __forceinline__ void widen(typename Chunk<kVec>::type raw, float (&f)[kVec]) {
  __nv_bfloat16 h[kVec];
  memcpy(h, &raw, sizeof raw);
#pragma unroll
  for (int j = 0; j < kVec; ++j) f[j] = __bfloat162float(h[j]);
}

template <int kVec>
__device__ __forceinline__ typename Chunk<kVec>::type narrow(const float (&f)[kVec]) {
  __nv_bfloat16 h[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) h[j] = __float2bfloat16_rn(f[j]);
  typename Chunk<kVec>::type raw;
  memcpy(&raw, h, sizeof raw);
  return raw;
}

template <int kVec>
__global__ void __launch_bounds__(kRowMaxThreads)
    moe_permute_kernel(const typename Chunk<kVec>::type* __restrict__ x,
                       const int32_t* __restrict__ perm_src,
                       typename Chunk<kVec>::type* __restrict__ xp, int64_t rows, int k,
                       int64_t chunks) {
  using C = typename Chunk<kVec>::type;
  for (int64_t p = blockIdx.x; p < rows; p += gridDim.x) {
    const int32_t src = perm_src[p];
    C* out = xp + p * chunks;
    if (src < 0) {
      for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) out[c] = C{};
    } else {
      const C* in = x + int64_t(src / k) * chunks;
      for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) out[c] = in[c];
    }
  }
}

// y and yw may be the same buffer (in place): no __restrict__ on them.
template <int kVec>
__global__ void __launch_bounds__(kRowMaxThreads)
    moe_weight_kernel(const typename Chunk<kVec>::type* y, const int32_t* __restrict__ perm_src,
                      const float* __restrict__ weights, typename Chunk<kVec>::type* yw,
                      int64_t rows, int64_t chunks) {
  using C = typename Chunk<kVec>::type;
  for (int64_t p = blockIdx.x; p < rows; p += gridDim.x) {
    const int32_t src = perm_src[p];
    C* out = yw + p * chunks;
    if (src < 0) {
      for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) out[c] = C{};
      continue;
    }
    const float w = weights[src];
    const C* in = y + p * chunks;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      float f[kVec];
      widen<kVec>(in[c], f);
#pragma unroll
      for (int j = 0; j < kVec; ++j) f[j] = f[j] * w;
      out[c] = narrow<kVec>(f);
    }
  }
}

template <int kVec>
__global__ void __launch_bounds__(kRowMaxThreads)
    moe_combine_kernel(const typename Chunk<kVec>::type* __restrict__ yd,
                       const int32_t* __restrict__ perm_dst,
                       typename Chunk<kVec>::type* __restrict__ out, int64_t tokens, int k,
                       int64_t chunks) {
  __shared__ int32_t dst[kMoeMaxTopK];
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    if (threadIdx.x < k) dst[threadIdx.x] = perm_dst[t * k + threadIdx.x];
    __syncthreads();
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      float acc[kVec];
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
      for (int j = 0; j < k; ++j) {  // slot order: the contract's summation order
        const int32_t d = dst[j];
        if (d < 0) continue;
        float f[kVec];
        widen<kVec>(yd[int64_t(d) * chunks + c], f);
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] += f[v];
      }
      out[t * chunks + c] = narrow<kVec>(acc);
    }
    __syncthreads();  // dst is rewritten for the next row
  }
}

// ---------------------------------------------------------------------------
// fp8 row kernels

// C: uint4 (16 codes per access) or uint8_t (1). A group of 2^lanes_log2
// lanes per row; chunks = C's per row, kbs = scales per row (W / 128).
template <class C>
__global__ void __launch_bounds__(kRowMaxThreads)
    moe_permute_fp8_kernel(const C* __restrict__ xq, const float* __restrict__ sx,
                           const int32_t* __restrict__ perm_src, C* __restrict__ xpq,
                           float* __restrict__ spq, int64_t rows, int k, int64_t chunks,
                           int64_t kbs, int lanes_log2) {
  const int lanes = 1 << lanes_log2;
  const int lane = int(threadIdx.x) & (lanes - 1);
  const int64_t rows_per_block = int64_t(blockDim.x) >> lanes_log2;
  for (int64_t p = int64_t(blockIdx.x) * rows_per_block + (threadIdx.x >> lanes_log2); p < rows;
       p += int64_t(gridDim.x) * rows_per_block) {
    const int32_t src = perm_src[p];
    C* out = xpq + p * chunks;
    float* s_out = spq + p * kbs;
    if (src < 0) {  // moe_permute's +0 row, quantized: codes +0, scale 1
      for (int64_t c = lane; c < chunks; c += lanes) out[c] = C{};
      for (int64_t g = lane; g < kbs; g += lanes) s_out[g] = 1.0f;
    } else {
      const int64_t t = src / k;
      const C* in = xq + t * chunks;
      const float* s_in = sx + t * kbs;
#pragma unroll 4
      for (int64_t c = lane; c < chunks; c += lanes) out[c] = in[c];
      for (int64_t g = lane; g < kbs; g += lanes) s_out[g] = s_in[g];
    }
  }
}

// vecs = T * k * N / 8 vectors of 8 values; row_vecs = N / 8 (a multiple of 16).
template <bool kVector>
__global__ void __launch_bounds__(kRowMaxThreads)
    moe_weight_fp8_kernel(const __nv_bfloat16* __restrict__ y, const int32_t* __restrict__ perm_src,
                          const float* __restrict__ weights, __nv_fp8_e4m3* __restrict__ q,
                          float* __restrict__ sq, int64_t vecs, int64_t row_vecs) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vecs; v += stride) {
    const int32_t src = perm_src[v / row_vecs];  // one row per half warp: uniform
    float f[8];
    if (src < 0) {
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = 0.0f;  // moe_weight's +0 row
    } else {
      const float w = weights[src];
      if constexpr (kVector) {
        widen<8>(reinterpret_cast<const uint4*>(y)[v], f);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = __bfloat162float(y[v * 8 + j]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = __bfloat162float(__float2bfloat16_rn(__fmul_rn(f[j], w)));
    }
    const float scale = half_warp_group_scale(f);
    const uint2 codes = encode8(f, scale);
    if constexpr (kVector) {
      reinterpret_cast<uint2*>(q)[v] = codes;
    } else {
      uint8_t* bytes = reinterpret_cast<uint8_t*>(q) + v * 8;
#pragma unroll
      for (int j = 0; j < 8; ++j) bytes[j] = uint8_t((j < 4 ? codes.x : codes.y) >> (8 * (j % 4)));
    }
    if (v % 16 == 0) sq[v / 16] = scale;
  }
}

// ---------------------------------------------------------------------------
// launch helpers

struct Span {
  const void* ptr;
  size_t bytes;
};

// Throws when an output overlaps another output or an input (inputs may
// share memory with each other: they are only read).
void check_outputs(const char* what, std::initializer_list<Span> outputs,
                   std::initializer_list<Span> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (auto p = o + 1; p != outputs.end(); ++p)
      PB_CHECK(!overlaps(o->ptr, o->bytes, p->ptr, p->bytes), std::string(what) + ": outputs overlap");
    for (const Span& in : inputs)
      PB_CHECK(!overlaps(o->ptr, o->bytes, in.ptr, in.bytes), std::string(what) + ": an output overlaps an input");
  }
}

struct RowGrid {
  dim3 grid, block;
};

RowGrid row_grid(int64_t rows, int64_t chunks) {
  const int64_t threads = std::min<int64_t>(
      kRowMaxThreads, std::max<int64_t>(kWarp, (chunks + kWarp - 1) / kWarp * kWarp));
  return {dim3(unsigned(std::min(rows, kRowMaxBlocks))), dim3(unsigned(threads))};
}

int64_t plan_tiles(const MoeRouteShape& s) {
  return (s.tokens * s.top_k + kPlanTile - 1) / kPlanTile;
}

}  // namespace

// ---------------------------------------------------------------------------
// launchers

void router_topk(const float* logits, const float* bias, int32_t* ids, float* weights,
                 const MoeRouteShape& s, cudaStream_t stream) {
  check_moe_route_shape(s);
  if (s.tokens == 0) return;
  PB_CHECK(logits && bias && ids && weights, "router_topk: null pointer with tokens > 0");
  const size_t tk = size_t(s.tokens) * size_t(s.top_k);
  check_outputs("router_topk", {{ids, tk * 4}, {weights, tk * 4}},
                {{logits, size_t(s.tokens) * s.experts * 4}, {bias, size_t(s.experts) * 4}});
  const int warps = std::max(1, std::min(kRouterMaxWarps, kRouterSmemBytes / (8 * s.experts)));
  const int64_t blocks = std::min<int64_t>((s.tokens + warps - 1) / warps, kRowMaxBlocks);
  const size_t smem = size_t(warps) * size_t(s.experts) * 8;
  router_topk_kernel<<<unsigned(blocks), warps * kWarp, smem, stream>>>(
      logits, bias, ids, weights, s.tokens, s.experts, s.top_k);
  PB_CUDA_LAUNCH();
}

size_t moe_permute_plan_workspace_bytes(const MoeRouteShape& s) {
  check_moe_route_shape(s);
  return size_t(plan_tiles(s)) * size_t(s.experts) * sizeof(int32_t);
}

void moe_permute_plan(const int32_t* ids, const MoePlan& plan, void* workspace,
                      size_t workspace_bytes, const MoeRouteShape& s, cudaStream_t stream) {
  const size_t need = moe_permute_plan_workspace_bytes(s);
  const int64_t assignments = s.tokens * s.top_k;
  const int64_t tiles = plan_tiles(s);
  PB_CHECK(workspace_bytes >= need,
           "moe_permute_plan: workspace smaller than moe_permute_plan_workspace_bytes");
  PB_CHECK(plan.counts && plan.offsets, "moe_permute_plan: null counts or offsets");
  PB_CHECK(assignments == 0 || (ids && plan.perm_src && plan.perm_dst && workspace),
           "moe_permute_plan: null ids, perm_src, perm_dst or workspace with tokens > 0");
  const size_t a4 = size_t(assignments) * 4;
  check_outputs("moe_permute_plan",
                {{plan.counts, size_t(s.experts) * 4},
                 {plan.offsets, size_t(s.experts + 1) * 4},
                 {plan.perm_src, a4},
                 {plan.perm_dst, a4},
                 {workspace, need}},
                {{ids, a4}});
  int32_t* tile_counts = static_cast<int32_t*>(workspace);
  const size_t warp_smem = size_t(kPlanWarps) * size_t(s.experts) * 4;
  const unsigned tile_blocks = unsigned((tiles + kPlanWarps - 1) / kPlanWarps);
  if (tiles > 0) {
    plan_histogram_kernel<<<tile_blocks, kPlanWarps * kWarp, warp_smem, stream>>>(
        ids, tile_counts, assignments, s.experts, tiles);
    PB_CUDA_LAUNCH();
  }
  const int scan_threads = (s.experts + kWarp - 1) / kWarp * kWarp;
  plan_scan_kernel<<<1, scan_threads, 0, stream>>>(tile_counts, plan.counts, plan.offsets,
                                                   plan.perm_src, assignments, s.experts, tiles);
  PB_CUDA_LAUNCH();
  if (tiles > 0) {
    plan_scatter_kernel<<<tile_blocks, kPlanWarps * kWarp, warp_smem, stream>>>(
        ids, tile_counts, plan.offsets, plan.perm_src, plan.perm_dst, assignments, s.experts,
        tiles);
    PB_CUDA_LAUNCH();
  }
}

void moe_permute(const __nv_bfloat16* x, const int32_t* perm_src, __nv_bfloat16* xp,
                 const MoeRouteShape& s, int64_t width, cudaStream_t stream) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_permute: width < 0");
  const int64_t rows = s.tokens * s.top_k;
  if (rows == 0 || width == 0) return;
  PB_CHECK(x && perm_src && xp, "moe_permute: null pointer with a non-empty shape");
  check_outputs("moe_permute", {{xp, size_t(rows) * width * 2}},
                {{x, size_t(s.tokens) * width * 2}, {perm_src, size_t(rows) * 4}});
  if (width % 8 == 0 && aligned16(x) && aligned16(xp)) {
    const RowGrid g = row_grid(rows, width / 8);
    moe_permute_kernel<8><<<g.grid, g.block, 0, stream>>>(reinterpret_cast<const uint4*>(x),
                                                          perm_src, reinterpret_cast<uint4*>(xp),
                                                          rows, s.top_k, width / 8);
  } else {
    const RowGrid g = row_grid(rows, width);
    moe_permute_kernel<1><<<g.grid, g.block, 0, stream>>>(
        reinterpret_cast<const unsigned short*>(x), perm_src, reinterpret_cast<unsigned short*>(xp),
        rows, s.top_k, width);
  }
  PB_CUDA_LAUNCH();
}

void moe_weight(const __nv_bfloat16* y, const int32_t* perm_src, const float* weights,
                __nv_bfloat16* yw, const MoeRouteShape& s, int64_t width, cudaStream_t stream) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_weight: width < 0");
  const int64_t rows = s.tokens * s.top_k;
  if (rows == 0 || width == 0) return;
  PB_CHECK(y && perm_src && weights && yw, "moe_weight: null pointer with a non-empty shape");
  const size_t row_bytes = size_t(rows) * width * 2;
  check_outputs("moe_weight", {{yw, row_bytes}},
                {{y, yw == y ? 0 : row_bytes},  // in place (yw == y) is allowed
                 {perm_src, size_t(rows) * 4},
                 {weights, size_t(rows) * 4}});
  if (width % 8 == 0 && aligned16(y) && aligned16(yw)) {
    const RowGrid g = row_grid(rows, width / 8);
    moe_weight_kernel<8>
        <<<g.grid, g.block, 0, stream>>>(reinterpret_cast<const uint4*>(y), perm_src, weights,
                                         reinterpret_cast<uint4*>(yw), rows, width / 8);
  } else {
    const RowGrid g = row_grid(rows, width);
    moe_weight_kernel<1><<<g.grid, g.block, 0, stream>>>(
        reinterpret_cast<const unsigned short*>(y), perm_src, weights,
        reinterpret_cast<unsigned short*>(yw), rows, width);
  }
  PB_CUDA_LAUNCH();
}

void moe_combine(const __nv_bfloat16* yd, const int32_t* perm_dst, __nv_bfloat16* out,
                 const MoeRouteShape& s, int64_t width, cudaStream_t stream) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_combine: width < 0");
  if (s.tokens == 0 || width == 0) return;
  PB_CHECK(yd && perm_dst && out, "moe_combine: null pointer with a non-empty shape");
  const int64_t rows = s.tokens * s.top_k;
  check_outputs("moe_combine", {{out, size_t(s.tokens) * width * 2}},
                {{yd, size_t(rows) * width * 2}, {perm_dst, size_t(rows) * 4}});
  if (width % 8 == 0 && aligned16(yd) && aligned16(out)) {
    const RowGrid g = row_grid(s.tokens, width / 8);
    moe_combine_kernel<8><<<g.grid, g.block, 0, stream>>>(reinterpret_cast<const uint4*>(yd),
                                                          perm_dst, reinterpret_cast<uint4*>(out),
                                                          s.tokens, s.top_k, width / 8);
  } else {
    const RowGrid g = row_grid(s.tokens, width);
    moe_combine_kernel<1><<<g.grid, g.block, 0, stream>>>(
        reinterpret_cast<const unsigned short*>(yd), perm_dst,
        reinterpret_cast<unsigned short*>(out), s.tokens, s.top_k, width);
  }
  PB_CUDA_LAUNCH();
}

void moe_permute_fp8(const __nv_fp8_e4m3* xq, const float* sx, const int32_t* perm_src,
                     __nv_fp8_e4m3* xpq, float* spq, const MoeRouteShape& s, int64_t width,
                     cudaStream_t stream) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_permute_fp8: width < 0");
  PB_CHECK(width % kFp8Group == 0, "moe_permute_fp8: width " + std::to_string(width) +
                                       " is not a multiple of 128 (one scale per 128 columns)");
  const int64_t rows = s.tokens * s.top_k;
  if (rows == 0 || width == 0) return;
  PB_CHECK(xq && sx && perm_src && xpq && spq,
           "moe_permute_fp8: null pointer with a non-empty shape");
  PB_CHECK(aligned_to(sx, 4) && aligned_to(spq, 4),
           "moe_permute_fp8: sx or spq is not 4-byte aligned");
  const int64_t kbs = width / kFp8Group;
  check_outputs("moe_permute_fp8",
                {{xpq, size_t(rows) * size_t(width)}, {spq, size_t(rows) * size_t(kbs) * 4}},
                {{xq, size_t(s.tokens) * size_t(width)},
                 {sx, size_t(s.tokens) * size_t(kbs) * 4},
                 {perm_src, size_t(rows) * 4}});
  if (aligned16(xq) && aligned16(xpq)) {
    const int64_t chunks = width / 16;  // a multiple of 8
    const int lanes_log2 = chunks <= 8 ? 3 : chunks <= 16 ? 4 : 5;
    const int64_t rows_per_block = kRowMaxThreads >> lanes_log2;
    const int blocks = resident_grid(moe_permute_fp8_kernel<uint4>, kRowMaxThreads,
                                     (rows + rows_per_block - 1) / rows_per_block);
    moe_permute_fp8_kernel<uint4><<<blocks, kRowMaxThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(xq), sx, perm_src, reinterpret_cast<uint4*>(xpq), spq, rows,
        s.top_k, chunks, kbs, lanes_log2);
  } else {
    const int lanes_log2 = 5;
    const int64_t rows_per_block = kRowMaxThreads >> lanes_log2;
    const int blocks = resident_grid(moe_permute_fp8_kernel<uint8_t>, kRowMaxThreads,
                                     (rows + rows_per_block - 1) / rows_per_block);
    moe_permute_fp8_kernel<uint8_t><<<blocks, kRowMaxThreads, 0, stream>>>(
        reinterpret_cast<const uint8_t*>(xq), sx, perm_src, reinterpret_cast<uint8_t*>(xpq), spq,
        rows, s.top_k, width, kbs, lanes_log2);
  }
  PB_CUDA_LAUNCH();
}

void moe_weight_fp8(const __nv_bfloat16* y, const int32_t* perm_src, const float* weights,
                    __nv_fp8_e4m3* q, float* sq, const MoeRouteShape& s, int64_t width,
                    cudaStream_t stream) {
  check_moe_route_shape(s);
  PB_CHECK(width >= 0, "moe_weight_fp8: width < 0");
  PB_CHECK(width % kFp8Group == 0, "moe_weight_fp8: width " + std::to_string(width) +
                                       " is not a multiple of 128 (one scale per 128 columns)");
  const int64_t rows = s.tokens * s.top_k;
  if (rows == 0 || width == 0) return;
  PB_CHECK(y && perm_src && weights && q && sq,
           "moe_weight_fp8: null pointer with a non-empty shape");
  PB_CHECK(aligned_to(sq, 4), "moe_weight_fp8: sq is not 4-byte aligned");
  const size_t elems = size_t(rows) * size_t(width);
  check_outputs("moe_weight_fp8", {{q, elems}, {sq, elems / kFp8Group * 4}},
                {{y, elems * 2}, {perm_src, size_t(rows) * 4}, {weights, size_t(rows) * 4}});
  const int64_t vecs = rows * width / 8, row_vecs = width / 8;
  const int64_t wanted = (vecs + kRowMaxThreads - 1) / kRowMaxThreads;
  if (aligned16(y) && aligned_to(q, 8)) {
    const int blocks = resident_grid(moe_weight_fp8_kernel<true>, kRowMaxThreads, wanted);
    moe_weight_fp8_kernel<true>
        <<<blocks, kRowMaxThreads, 0, stream>>>(y, perm_src, weights, q, sq, vecs, row_vecs);
  } else {
    const int blocks = resident_grid(moe_weight_fp8_kernel<false>, kRowMaxThreads, wanted);
    moe_weight_fp8_kernel<false>
        <<<blocks, kRowMaxThreads, 0, stream>>>(y, perm_src, weights, q, sq, vecs, row_vecs);
  }
  PB_CUDA_LAUNCH();
}

}  // namespace pb
