// Cut 5 — bf16 elementwise family: add2, mul_sigmoid, situ, o_norm_gate.
// Contracts and shapes in elementwise.h; in short:
//
//   add2         a, b [n] bf16 -> o [n]   o = __hadd(a, b)
//   mul_sigmoid  a, g [n] bf16 -> o [n]   o = __hmul(a, bf16(sigmoid_f32(f32(g))))
//   situ         g, u [n] bf16 -> o [n]   o = bf16(4 tanh(g/4) sigmoid(g) * 25 tanh(u/25))
//   o_norm_gate  x [row_heads, 128], g [row_heads, 128] bf16, gamma [128] f32 -> o [row_heads, 128]
//                xor-butterfly sum of squares, scale = rsqrtf(sum / 128 + eps),
//                o = __hmul(bf16(x * scale * gamma), bf16(sigmoid_f32(g)))
//
// Variants (each op has <op>_baseline, <op>_cut and the dispatch <op>(Variant, ...)):
//   baseline  one element per thread, 2-byte loads and stores (the retired
//             TileLang kernels). o_norm_gate: a 128-thread block per
//             (row, head), butterfly strides 64 and 32 through shared memory,
//             16 .. 1 by warp shuffle.
//   cut       16 bytes per thread per operand (uint4 = 8 bf16), grid-stride,
//             the last n % 8 elements scalar; bf16x2 intrinsics (__hadd2,
//             __hmul2, cvt.rn.bf16x2) round exactly like their scalar forms.
//             Pointers not 16-byte aligned take the baseline kernel.
//             add2 (and mul_sigmoid, situ below kTableMinElements): the plain
//             arithmetic, one vector per thread per iteration.
//             mul_sigmoid, situ: table lookups (elementwise.cuh): the gate
//             bf16(sigmoid(g)), and situ's s(g) and t(u), each a function of
//             one bf16, come from tables every block builds in shared memory
//             with the plain forms; 1024-thread blocks, one resident wave,
//             the next iteration's loads issued before this one's arithmetic.
//             A vector with an out-of-table input (NaN; situ also |x| < 2^-16)
//             is computed with the plain form.
//             o_norm_gate: 4 lanes x 32 columns per (row, head), the
//             baseline's butterfly pair for pair (see o_norm_gate_cut_kernel),
//             sigmoid through elementwise_detail::sigmoid_n.
//   test_elementwise checks every table and fast form against its plain form
//   on all 65536 bf16 inputs, and baseline == cut == reference on data.
#include "elementwise.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "check.h"
#include "launch.h"
#include "elementwise.cuh"
#include "fp8_device.cuh"
#include "ptx.cuh"
#include "quant.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
using bf16x2 = __nv_bfloat162;

constexpr int kThreads = 256;
constexpr int kVec = 8;            // bf16 per 16-byte access
constexpr int kHeadDim = 128;      // o_norm_gate columns per (row, head)
constexpr int kNormLanes = 4;      // o_norm_gate cut: lanes per (row, head)
constexpr int kNormChunks = kHeadDim / (kNormLanes * kVec);  // 4 vectors per operand per lane
constexpr int kNormRowsPerBlock = kThreads / kNormLanes;     // 64
constexpr int kNormBlocksPerSm = 2;                          // the cut's grid: 2 blocks per SM
static_assert(kNormLanes == 4 && kNormChunks == 4,
              "o_norm_gate cut: chunk xor 2/1 is column xor 64/32, lane xor 2/1 is column xor 16/8");
static_assert(kThreads % 32 == 0 && 32 % kNormLanes == 0,
              "o_norm_gate cut: a (row, head) must sit inside one warp");
constexpr int kTableThreads = 1024;                        // the table kernels' block
constexpr int64_t kTableMinElements = int64_t(1) << 20;    // smaller calls skip the tables

// ---------------------------------------------------------------------------
// Arithmetic shared by both variants.

using elementwise_detail::sigmoid_f32;

__device__ __forceinline__ float situ_f32(float g, float u) {
  const float s = 4.0f * tanhf(g / 4.0f) * (1.0f / (1.0f + expf(-g)));
  const float t = 25.0f * tanhf(u / 25.0f);
  return s * t;
}

using ptx::as_bf16x2;
using ptx::as_bits;

// Each op in its scalar form (baseline, cut tail) and its bf16x2 form (cut).
struct Add2Op {
  __device__ bf16 operator()(bf16 a, bf16 b) const { return __hadd(a, b); }
  __device__ bf16x2 operator()(bf16x2 a, bf16x2 b) const { return __hadd2(a, b); }
};

struct MulSigmoidOp {
  __device__ bf16 operator()(bf16 a, bf16 g) const {
    return __hmul(a, __float2bfloat16_rn(sigmoid_f32(__bfloat162float(g))));
  }
  __device__ bf16x2 operator()(bf16x2 a, bf16x2 g) const {
    const bf16x2 gate = __floats2bfloat162_rn(sigmoid_f32(__bfloat162float(g.x)),
                                              sigmoid_f32(__bfloat162float(g.y)));
    return __hmul2(a, gate);
  }
};

struct SituOp {
  __device__ bf16 operator()(bf16 g, bf16 u) const {
    return __float2bfloat16_rn(situ_f32(__bfloat162float(g), __bfloat162float(u)));
  }
  __device__ bf16x2 operator()(bf16x2 g, bf16x2 u) const {
    return __floats2bfloat162_rn(situ_f32(__bfloat162float(g.x), __bfloat162float(u.x)),
                                 situ_f32(__bfloat162float(g.y), __bfloat162float(u.y)));
  }
};

// ---------------------------------------------------------------------------
// baseline: one element per thread, 2-byte loads and stores.

template <class Op>
__global__ void __launch_bounds__(kThreads)
    binary_baseline_kernel(Op op, const bf16* a, const bf16* b, bf16* o, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    o[i] = op(a[i], b[i]);
}

// 128 threads per (row, head); thread i owns column i.
__global__ void __launch_bounds__(kHeadDim)
    o_norm_gate_baseline_kernel(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                                int64_t row_heads, float eps) {
  // Two buffers: a stage's reads finish before the next stage's barrier, so
  // the next (row, head) may overwrite stage64 after the second barrier and
  // stage32 after its own first one.
  __shared__ float stage64[kHeadDim];
  __shared__ float stage32[kHeadDim];
  const int i = threadIdx.x;
  for (int64_t rh = blockIdx.x; rh < row_heads; rh += gridDim.x) {
    const int64_t e = rh * kHeadDim + i;
    const float xf = __bfloat162float(x[e]);
    float v = xf * xf;
    stage64[i] = v;
    __syncthreads();
    v = v + stage64[i ^ 64];
    stage32[i] = v;
    __syncthreads();
    v = v + stage32[i ^ 32];
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, s);
    const float scale = rsqrtf(v / 128.0f + eps);
    const bf16 y = __float2bfloat16_rn(xf * scale * gamma[i]);
    const bf16 gate = __float2bfloat16_rn(sigmoid_f32(__bfloat162float(g[e])));
    o[e] = __hmul(y, gate);
  }
}

// ---------------------------------------------------------------------------
// cut: 16 bytes per thread per operand.

template <class Op>
__global__ void __launch_bounds__(kThreads)
    binary_cut_kernel(Op op, const bf16* a, const bf16* b, bf16* o, int64_t n) {
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t vecs = n / kVec;
  for (int64_t v = first; v < vecs; v += stride) {
    const uint4 ua = reinterpret_cast<const uint4*>(a)[v];
    const uint4 ub = reinterpret_cast<const uint4*>(b)[v];
    uint4 uo;
    uo.x = as_bits(op(as_bf16x2(ua.x), as_bf16x2(ub.x)));
    uo.y = as_bits(op(as_bf16x2(ua.y), as_bf16x2(ub.y)));
    uo.z = as_bits(op(as_bf16x2(ua.z), as_bf16x2(ub.z)));
    uo.w = as_bits(op(as_bf16x2(ua.w), as_bf16x2(ub.w)));
    reinterpret_cast<uint4*>(o)[v] = uo;
  }
  const int64_t tail = vecs * kVec + first;  // the last n % 8 elements, threads 0 .. 6
  if (tail < n) o[tail] = op(a[tail], b[tail]);
}

// ---------------------------------------------------------------------------
// cut through tables (mul_sigmoid, situ). A VecOp names its table's size,
// how a block builds it, and the 8 outputs of one vector pair.

// mul_sigmoid: o = __hmul2(a, gate) with the gate bits from the table; a
// vector with a NaN gate input is computed with the plain form (MulSigmoidOp).
struct MulSigmoidTableVec {
  static constexpr int kTableBytes = elementwise_detail::kGateTableHalves * 2;
  static __device__ void fill(void* tab, int tid, int nthreads) {
    elementwise_detail::gate_fill_table(static_cast<uint16_t*>(tab), tid, nthreads);
  }
  __device__ uint4 operator()(const void* tab_bytes, uint4 a, uint4 g) const {
    namespace ed = elementwise_detail;
    const uint16_t* tab = static_cast<const uint16_t*>(tab_bytes);
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w};
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w};
    uint32_t ow[4];
    bool out_of_table = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t g0 = gw[k] & 0xffffu, g1 = gw[k] >> 16;  // g0 is the lower address
      out_of_table = out_of_table | ed::gate_out_of_table(g0) | ed::gate_out_of_table(g1);
      const uint32_t gate = ed::gate_lookup(tab, g0) | (ed::gate_lookup(tab, g1) << 16);
      ow[k] = as_bits(__hmul2(as_bf16x2(aw[k]), as_bf16x2(gate)));
    }
    if (out_of_table) {
#pragma unroll
      for (int k = 0; k < 4; ++k) ow[k] = as_bits(MulSigmoidOp{}(as_bf16x2(aw[k]), as_bf16x2(gw[k])));
    }
    return make_uint4(ow[0], ow[1], ow[2], ow[3]);
  }
};

// situ: o = bf16(s * t) with s(g) and t(u) from the tables; a vector with an
// out-of-table input is computed with the plain form (SituOp).
struct SituTableVec {
  static constexpr int kTableBytes = elementwise_detail::kSituTableFloats * 4;
  static __device__ void fill(void* tab, int tid, int nthreads) {
    elementwise_detail::situ_fill_tables(static_cast<float*>(tab), tid, nthreads);
  }
  __device__ uint4 operator()(const void* tab_bytes, uint4 g, uint4 u) const {
    namespace ed = elementwise_detail;
    const float* tab = static_cast<const float*>(tab_bytes);
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w};
    const uint32_t uw[4] = {u.x, u.y, u.z, u.w};
    uint32_t ow[4];
    bool out_of_table = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t g0 = gw[k] & 0xffffu, g1 = gw[k] >> 16;
      const uint32_t u0 = uw[k] & 0xffffu, u1 = uw[k] >> 16;
      out_of_table = out_of_table | ed::situ_out_of_table(g0) | ed::situ_out_of_table(g1) |
                     ed::situ_out_of_table(u0) | ed::situ_out_of_table(u1);
      const float o0 = ed::situ_s_lookup(tab, g0) * ed::situ_t_lookup(tab, u0);
      const float o1 = ed::situ_s_lookup(tab, g1) * ed::situ_t_lookup(tab, u1);
      ow[k] = as_bits(__floats2bfloat162_rn(o0, o1));
    }
    if (out_of_table) {
#pragma unroll
      for (int k = 0; k < 4; ++k) ow[k] = as_bits(SituOp{}(as_bf16x2(gw[k]), as_bf16x2(uw[k])));
    }
    return make_uint4(ow[0], ow[1], ow[2], ow[3]);
  }
};

// One vector per operand per thread per iteration, grid-stride; the next
// iteration's loads are issued before this one's lookups, and the first
// iteration's loads fly while the block builds its table.
template <class VecOp, class Op>
__global__ void __launch_bounds__(kTableThreads)
    binary_table_kernel(VecOp vop, Op op, const bf16* a, const bf16* b, bf16* o, int64_t n) {
  __shared__ alignas(16) unsigned char tab[VecOp::kTableBytes];
  const int64_t first = int64_t(blockIdx.x) * kTableThreads + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * kTableThreads;
  const int64_t vecs = n / kVec;
  const uint4* va = reinterpret_cast<const uint4*>(a);
  const uint4* vb = reinterpret_cast<const uint4*>(b);
  uint4* vo = reinterpret_cast<uint4*>(o);

  uint4 ra = make_uint4(0, 0, 0, 0), rb = ra;
  if (first < vecs) {
    ra = va[first];
    rb = vb[first];
  }
  VecOp::fill(tab, threadIdx.x, kTableThreads);
  __syncthreads();
  for (int64_t v = first; v < vecs; v += stride) {
    const int64_t next = v + stride;
    uint4 na = make_uint4(0, 0, 0, 0), nb = na;
    if (next < vecs) {
      na = va[next];
      nb = vb[next];
    }
    vo[v] = vop(tab, ra, rb);
    ra = na;
    rb = nb;
  }
  const int64_t tail = vecs * kVec + first;  // the last n % 8 elements, threads 0 .. 6
  if (tail < n) o[tail] = op(a[tail], b[tail]);
}

// o_norm_gate: 4 lanes x 32 columns per (row, head). Lane l holds chunks
// k = 0..3 of 8 columns each: column i = 32 * k + 8 * l + j, so column bits
// 6..5 are the chunk k, bits 4..3 the lane, bits 2..0 the slot j. The
// butterfly, pair for pair: column xor 64 / 32 = chunk xor 2 / 1 (in the
// thread), xor 16 / 8 = lane xor 2 / 1 (shuffles), xor 4 / 2 / 1 = slot xor
// 4 / 2 / 1 (in the thread). After a stage both members of a pair hold the
// same bits (a + b == b + a), so the thread keeps one value per pair:
// 32 -> 16 -> 8 values, 8 shuffles per lane stage (16 per 32 columns).
// Every load instruction of a warp reads 8 (row, head) x 64 contiguous bytes.
// The grid: at most kNormBlocksPerSm (2) resident blocks per SM, grid-stride.
// kFp8 (o_norm_gate_fp8, cut quant_fuse): a (row, head) is one 128-column
// group of the fp8 twin; its 4 lanes reduce the amax of the bf16 outputs
// (lane xor 1, 2), and each writes its 32 codes, lane 0 the scale; o may be
// null. The bf16 outputs are the same bits either way.
struct Fp8Twin {
  __nv_fp8_e4m3* q = nullptr;
  float* scales = nullptr;
  Fp8ScaleLayout layout{};
  int64_t heads = 1;  // groups per row
};
template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    o_norm_gate_cut_kernel(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                           int64_t row_heads, float eps, Fp8Twin twin) {
  const int lane = threadIdx.x % kNormLanes;
  const int group = threadIdx.x / kNormLanes;

  // gamma in shared memory: the 4 lanes of a group read 4 x 32 contiguous
  // bytes, every group the same ones (broadcast).
  __shared__ float4 gam_s[kHeadDim / 4];
  if (threadIdx.x < kHeadDim / 4) gam_s[threadIdx.x] = reinterpret_cast<const float4*>(gamma)[threadIdx.x];
  __syncthreads();

  // The loop bound is uniform over the block, so every lane reaches every
  // full-warp shuffle; a group past row_heads computes on zeros and stores nothing.
  const int64_t block_stride = int64_t(gridDim.x) * kNormRowsPerBlock;
  for (int64_t base = int64_t(blockIdx.x) * kNormRowsPerBlock; base < row_heads;
       base += block_stride) {
    const int64_t rh = base + group;
    const bool live = rh < row_heads;
    // uint4 index of chunk k: rh * 16 + 4 * k + lane
    const int64_t vec0 = rh * (kHeadDim / kVec) + lane;

    uint4 xv[kNormChunks], gv[kNormChunks];
#pragma unroll
    for (int k = 0; k < kNormChunks; ++k) {
      if (live) {
        xv[k] = reinterpret_cast<const uint4*>(x)[vec0 + 4 * k];
        gv[k] = reinterpret_cast<const uint4*>(g)[vec0 + 4 * k];
      } else {
        xv[k] = gv[k] = make_uint4(0, 0, 0, 0);
      }
    }

    // column xor 64, then 32: chunk xor 2, then 1
    float v[kVec];
    {
      float xf[kNormChunks][kVec];
#pragma unroll
      for (int k = 0; k < kNormChunks; ++k) ptx::unpack_bf16x8(xv[k], xf[k]);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float p0 = xf[0][j] * xf[0][j] + xf[2][j] * xf[2][j];
        const float p1 = xf[1][j] * xf[1][j] + xf[3][j] * xf[3][j];
        v[j] = p0 + p1;
      }
    }
    // column xor 16, then 8: lane xor 2, then 1
#pragma unroll
    for (int lane_mask = 2; lane_mask >= 1; lane_mask >>= 1) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = v[j] + __shfl_xor_sync(0xffffffffu, v[j], lane_mask);
    }
    // column xor 4, 2, 1: slot xor 4, 2, 1
    const float w0 = v[0] + v[4], w1 = v[1] + v[5], w2 = v[2] + v[6], w3 = v[3] + v[7];
    const float z0 = w0 + w2, z1 = w1 + w3;
    const float sum = z0 + z1;
    const float scale = rsqrtf(sum / 128.0f + eps);

    // The fp8 form computes every lane's outputs (a group past row_heads on
    // zeros) so the 4 lanes reach the amax shuffles together.
    uint4 out[kNormChunks];
    if (kFp8 || live) {
#pragma unroll
      for (int k = 0; k < kNormChunks; ++k) {
        float xf[kVec], gate[kVec];
        ptx::unpack_bf16x8(xv[k], xf);
        ptx::unpack_bf16x8(gv[k], gate);
        elementwise_detail::sigmoid_n(gate);
        const float4 glo = gam_s[8 * k + 2 * lane], ghi = gam_s[8 * k + 2 * lane + 1];
        const float gam[kVec] = {glo.x, glo.y, glo.z, glo.w, ghi.x, ghi.y, ghi.z, ghi.w};
        uint32_t words[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          const int j = 2 * p;
          const bf16x2 y = __floats2bfloat162_rn(xf[j] * scale * gam[j], xf[j + 1] * scale * gam[j + 1]);
          words[p] = as_bits(__hmul2(y, __floats2bfloat162_rn(gate[j], gate[j + 1])));
        }
        out[k] = make_uint4(words[0], words[1], words[2], words[3]);
        if (live && (!kFp8 || o)) reinterpret_cast<uint4*>(o)[vec0 + 4 * k] = out[k];
      }
    }
    if constexpr (kFp8) {
      float f[kNormChunks][kVec];
      float amax = 0.0f;
#pragma unroll
      for (int k = 0; k < kNormChunks; ++k) {
        ptx::unpack_bf16x8(out[k], f[k]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) amax = nan_max(amax, fabsf(f[k][j]));
      }
#pragma unroll
      for (int lane_mask = 2; lane_mask >= 1; lane_mask >>= 1)
        amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, lane_mask));
      const float gs = group_scale(amax);
      if (live) {
#pragma unroll
        for (int k = 0; k < kNormChunks; ++k) reinterpret_cast<uint2*>(twin.q)[vec0 + 4 * k] = encode8(f[k], gs);
        if (lane == 0) {
          const int64_t row = rh / twin.heads, head = rh - row * twin.heads;
          twin.scales[row * twin.layout.s_row + head * twin.layout.s_group] = gs;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// launchers

// o may be the very same buffer as an input, or disjoint from it.
bool same_or_disjoint(const void* in, const void* out, int64_t bytes) {
  return in == out || !overlaps(in, size_t(bytes), out, size_t(bytes));
}

// Checks a flat two-input call; false when there is nothing to do.
bool check_binary(const char* name, const bf16* a, const bf16* b, const bf16* o, int64_t n) {
  PB_CHECK(n >= 0, std::string(name) + ": n < 0");
  if (n == 0) return false;
  PB_CHECK(a != nullptr && b != nullptr && o != nullptr,
           std::string(name) + ": null pointer with n > 0");
  const int64_t bytes = n * int64_t(sizeof(bf16));
  PB_CHECK(same_or_disjoint(a, o, bytes) && same_or_disjoint(b, o, bytes),
           std::string(name) + ": o partially overlaps an input");
  return true;
}

bool check_o_norm_gate(const char* name, const bf16* x, const bf16* g, const float* gamma,
                       const bf16* o, int64_t row_heads, float eps) {
  PB_CHECK(row_heads >= 0, std::string(name) + ": row_heads < 0");
  PB_CHECK(eps >= 0.0f, std::string(name) + ": eps must be >= 0");
  if (row_heads == 0) return false;
  PB_CHECK(x != nullptr && g != nullptr && gamma != nullptr && o != nullptr,
           std::string(name) + ": null pointer with row_heads > 0");
  const int64_t bytes = row_heads * kHeadDim * int64_t(sizeof(bf16));
  PB_CHECK(same_or_disjoint(x, o, bytes) && same_or_disjoint(g, o, bytes),
           std::string(name) + ": o partially overlaps an input");
  return true;
}

// Baseline launches cover every element with one thread (capped at the grid limit).
template <class Op>
void launch_binary_baseline(Op op, const bf16* a, const bf16* b, bf16* o, int64_t n,
                            cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, INT_MAX);
  binary_baseline_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(op, a, b, o, n);
  PB_CUDA_LAUNCH();
}

template <class Op>
void launch_binary_cut(Op op, const bf16* a, const bf16* b, bf16* o, int64_t n,
                       cudaStream_t stream) {
  if (!(aligned16(a) && aligned16(b) && aligned16(o))) {
    launch_binary_baseline(op, a, b, o, n, stream);
    return;
  }
  const int64_t vecs = n / kVec;
  const int blocks = resident_grid(binary_cut_kernel<Op>, kThreads,
                                   (std::max<int64_t>(vecs, 1) + kThreads - 1) / kThreads);
  binary_cut_kernel<<<blocks, kThreads, 0, stream>>>(op, a, b, o, n);
  PB_CUDA_LAUNCH();
}

// Large calls through the tables; small ones (where every block building its
// table would cost more than the arithmetic it saves) through the plain cut.
template <class VecOp, class Op>
void launch_binary_table(Op op, const bf16* a, const bf16* b, bf16* o, int64_t n, cudaStream_t stream) {
  if (n < kTableMinElements || !(aligned16(a) && aligned16(b) && aligned16(o))) {
    launch_binary_cut(op, a, b, o, n, stream);  // misaligned: the baseline
    return;
  }
  const int64_t vecs = n / kVec;
  auto kernel = binary_table_kernel<VecOp, Op>;
  const int blocks = resident_grid(kernel, kTableThreads, (vecs + kTableThreads - 1) / kTableThreads);
  kernel<<<blocks, kTableThreads, 0, stream>>>(VecOp{}, op, a, b, o, n);
  PB_CUDA_LAUNCH();
}

// The fp8 producers of cut quant_fuse (situ_fp8, mul_sigmoid_fp8): the op's
// table cut vector by vector (VecOp), each vector's 8 values then quantized in
// its 128-column group, which is a half warp's 16 vectors (width % 128 == 0;
// the grid stride is a multiple of 32 and the vector count of 16, so a half
// warp runs or stops together).
template <class VecOp>
__global__ void __launch_bounds__(kTableThreads)
    binary_fp8_kernel(const bf16* a, const bf16* b, bf16* o, __nv_fp8_e4m3* q, float* scales, Fp8ScaleLayout layout,
                      int64_t n, int64_t width) {
  __shared__ alignas(16) unsigned char tab[VecOp::kTableBytes];
  VecOp::fill(tab, threadIdx.x, kTableThreads);
  __syncthreads();
  const int64_t vecs = n / kVec, stride = int64_t(gridDim.x) * kTableThreads;
  const uint4* va = reinterpret_cast<const uint4*>(a);
  const uint4* vb = reinterpret_cast<const uint4*>(b);
  for (int64_t v = int64_t(blockIdx.x) * kTableThreads + threadIdx.x; v < vecs; v += stride) {
    const uint4 ov = VecOp{}(tab, va[v], vb[v]);
    if (o) reinterpret_cast<uint4*>(o)[v] = ov;
    float f[kVec];
    ptx::unpack_bf16x8(ov, f);
    const float gs = half_warp_group_scale(f);
    reinterpret_cast<uint2*>(q)[v] = encode8(f, gs);
    if (v % 16 == 0) {
      const int64_t row = v * kVec / width, group = (v * kVec - row * width) / kFp8Group;
      scales[row * layout.s_row + group * layout.s_group] = gs;
    }
  }
}

template <class VecOp>
void launch_binary_fp8(const char* name, const bf16* a, const bf16* b, bf16* o, __nv_fp8_e4m3* q, float* scales,
                       Fp8ScaleLayout layout, int64_t rows, int64_t width, cudaStream_t stream) {
  if (!check_fp8_twin(name, q, scales, layout, rows, width)) return;
  PB_CHECK(a && b, std::string(name) + ": null pointer");
  PB_CHECK(aligned16(a) && aligned16(b) && (!o || aligned16(o)),
           std::string(name) + ": its inputs and o need 16-byte alignment");
  const int64_t vecs = rows * width / kVec;
  auto kernel = binary_fp8_kernel<VecOp>;
  const int blocks = resident_grid(kernel, kTableThreads, (vecs + kTableThreads - 1) / kTableThreads);
  kernel<<<blocks, kTableThreads, 0, stream>>>(a, b, o, q, scales, layout, rows * width, width);
  PB_CUDA_LAUNCH();
}

void launch_o_norm_gate_baseline(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                                 int64_t row_heads, float eps, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(row_heads, INT_MAX);
  o_norm_gate_baseline_kernel<<<unsigned(blocks), kHeadDim, 0, stream>>>(x, g, gamma, o,
                                                                          row_heads, eps);
  PB_CUDA_LAUNCH();
}

template <bool kFp8>
void launch_o_norm_gate_cut(const bf16* x, const bf16* g, const float* gamma, bf16* o, int64_t row_heads, float eps,
                            Fp8Twin twin, cudaStream_t stream) {
  auto kernel = o_norm_gate_cut_kernel<kFp8>;
  const int blocks =
      resident_grid(kernel, kThreads, (row_heads + kNormRowsPerBlock - 1) / kNormRowsPerBlock, kNormBlocksPerSm);
  kernel<<<blocks, kThreads, 0, stream>>>(x, g, gamma, o, row_heads, eps, twin);
  PB_CUDA_LAUNCH();
}

}  // namespace

// ---- add2 ----
void add2_baseline(const bf16* a, const bf16* b, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("add2_baseline", a, b, o, n)) launch_binary_baseline(Add2Op{}, a, b, o, n, stream);
}
void add2_cut(const bf16* a, const bf16* b, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("add2_cut", a, b, o, n)) launch_binary_cut(Add2Op{}, a, b, o, n, stream);
}

// ---- mul_sigmoid ----
void mul_sigmoid_baseline(const bf16* a, const bf16* g, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("mul_sigmoid_baseline", a, g, o, n))
    launch_binary_baseline(MulSigmoidOp{}, a, g, o, n, stream);
}
void mul_sigmoid_cut(const bf16* a, const bf16* g, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("mul_sigmoid_cut", a, g, o, n))
    launch_binary_table<MulSigmoidTableVec>(MulSigmoidOp{}, a, g, o, n, stream);
}

void mul_sigmoid_fp8(const bf16* a, const bf16* g, bf16* o, __nv_fp8_e4m3* q, float* scales,
                     Fp8ScaleLayout layout, int64_t rows, int64_t width, cudaStream_t stream) {
  launch_binary_fp8<MulSigmoidTableVec>("mul_sigmoid_fp8", a, g, o, q, scales, layout, rows, width, stream);
}

// ---- situ ----
void situ_baseline(const bf16* g, const bf16* u, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("situ_baseline", g, u, o, n)) launch_binary_baseline(SituOp{}, g, u, o, n, stream);
}
void situ_cut(const bf16* g, const bf16* u, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("situ_cut", g, u, o, n))
    launch_binary_table<SituTableVec>(SituOp{}, g, u, o, n, stream);
}

void situ_fp8(const bf16* g, const bf16* u, bf16* o, __nv_fp8_e4m3* q, float* scales, Fp8ScaleLayout layout,
              int64_t rows, int64_t width, cudaStream_t stream) {
  launch_binary_fp8<SituTableVec>("situ_fp8", g, u, o, q, scales, layout, rows, width, stream);
}

// ---- o_norm_gate ----
void o_norm_gate_baseline(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                          int64_t row_heads, float eps, cudaStream_t stream) {
  if (check_o_norm_gate("o_norm_gate_baseline", x, g, gamma, o, row_heads, eps))
    launch_o_norm_gate_baseline(x, g, gamma, o, row_heads, eps, stream);
}
void o_norm_gate_cut(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                     int64_t row_heads, float eps, cudaStream_t stream) {
  if (!check_o_norm_gate("o_norm_gate_cut", x, g, gamma, o, row_heads, eps)) return;
  if (!(aligned16(x) && aligned16(g) && aligned16(gamma) && aligned16(o))) {
    launch_o_norm_gate_baseline(x, g, gamma, o, row_heads, eps, stream);
    return;
  }
  launch_o_norm_gate_cut<false>(x, g, gamma, o, row_heads, eps, Fp8Twin{}, stream);
}

void o_norm_gate_fp8(const bf16* x, const bf16* g, const float* gamma, bf16* o, __nv_fp8_e4m3* q, float* scales,
                     Fp8ScaleLayout layout, int64_t rows, int64_t heads, float eps, cudaStream_t stream) {
  PB_CHECK(heads >= 1, "o_norm_gate_fp8: heads must be >= 1");
  if (!check_fp8_twin("o_norm_gate_fp8", q, scales, layout, rows, heads * kHeadDim)) return;
  PB_CHECK(x && g && gamma, "o_norm_gate_fp8: null pointer");
  PB_CHECK(eps >= 0, "o_norm_gate_fp8: eps must be >= 0");
  PB_CHECK(aligned16(x) && aligned16(g) && aligned16(gamma) && (!o || aligned16(o)),
           "o_norm_gate_fp8: x, g, gamma and o need 16-byte alignment");
  launch_o_norm_gate_cut<true>(x, g, gamma, o, rows * heads, eps, Fp8Twin{q, scales, layout, heads}, stream);
}

// ---- dispatch on the cut switch ----
void add2(Variant v, const bf16* a, const bf16* b, bf16* o, int64_t n, cudaStream_t stream) {
  if (v == Variant::cut) add2_cut(a, b, o, n, stream);
  else add2_baseline(a, b, o, n, stream);
}
void mul_sigmoid(Variant v, const bf16* a, const bf16* g, bf16* o, int64_t n, cudaStream_t stream) {
  if (v == Variant::cut) mul_sigmoid_cut(a, g, o, n, stream);
  else mul_sigmoid_baseline(a, g, o, n, stream);
}
void situ(Variant v, const bf16* g, const bf16* u, bf16* o, int64_t n, cudaStream_t stream) {
  if (v == Variant::cut) situ_cut(g, u, o, n, stream);
  else situ_baseline(g, u, o, n, stream);
}
void o_norm_gate(Variant v, const bf16* x, const bf16* g, const float* gamma, bf16* o,
                 int64_t row_heads, float eps, cudaStream_t stream) {
  if (v == Variant::cut) o_norm_gate_cut(x, g, gamma, o, row_heads, eps, stream);
  else o_norm_gate_baseline(x, g, gamma, o, row_heads, eps, stream);
}

}  // namespace pb
