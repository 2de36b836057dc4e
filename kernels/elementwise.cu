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
//             o_norm_gate: 16 lanes x 8 columns per (row, head), column
//             i = lane * 8 + j, so column xor 64/32/16/8 is lane xor 8/4/2/1
//             and column xor 4/2/1 is slot j^4/j^2/j^1: the baseline's
//             butterfly pair for pair. 256 threads = 16 (row, head) per block.
//             Pointers not 16-byte aligned take the baseline kernel.
#include "elementwise.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "check.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
using bf16x2 = __nv_bfloat162;

constexpr int kThreads = 256;
constexpr int kVec = 8;            // bf16 per 16-byte access
constexpr int kHeadDim = 128;      // o_norm_gate columns per (row, head)
constexpr int kNormLanes = kHeadDim / kVec;             // 16 lanes per (row, head) in the cut
constexpr int kNormRowsPerBlock = kThreads / kNormLanes;  // 16
static_assert(kNormLanes == 16, "o_norm_gate cut: lane xor 8/4/2/1 covers column xor 64/32/16/8");
static_assert(kThreads % 32 == 0 && 32 % kNormLanes == 0,
              "o_norm_gate cut: a (row, head) must sit inside one warp");

// ---------------------------------------------------------------------------
// Arithmetic shared by both variants.

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float situ_f32(float g, float u) {
  const float s = 4.0f * tanhf(g / 4.0f) * (1.0f / (1.0f + expf(-g)));
  const float t = 25.0f * tanhf(u / 25.0f);
  return s * t;
}

__device__ __forceinline__ bf16x2 as_bf16x2(uint32_t bits) {
  bf16x2 h;
  memcpy(&h, &bits, sizeof h);
  return h;
}
__device__ __forceinline__ uint32_t as_bits(bf16x2 h) {
  uint32_t bits;
  memcpy(&bits, &h, sizeof bits);
  return bits;
}

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

__device__ __forceinline__ void unpack8(const uint4 u, float (&f)[kVec]) {
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const bf16x2 h = as_bf16x2(words[k]);  // .x is the lower address
    f[2 * k] = __bfloat162float(h.x);
    f[2 * k + 1] = __bfloat162float(h.y);
  }
}

// 16 lanes x 8 columns per (row, head): lane l holds columns l*8 .. l*8+7.
__global__ void __launch_bounds__(kThreads)
    o_norm_gate_cut_kernel(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                           int64_t row_heads, float eps) {
  const int lane = threadIdx.x % kNormLanes;
  const int group = threadIdx.x / kNormLanes;

  float gam[kVec];
  {
    const float4 lo = reinterpret_cast<const float4*>(gamma)[2 * lane];
    const float4 hi = reinterpret_cast<const float4*>(gamma)[2 * lane + 1];
    gam[0] = lo.x; gam[1] = lo.y; gam[2] = lo.z; gam[3] = lo.w;
    gam[4] = hi.x; gam[5] = hi.y; gam[6] = hi.z; gam[7] = hi.w;
  }

  // The loop bound is uniform over the block, so every lane reaches every
  // full-warp shuffle; a group past row_heads computes on zeros and stores nothing.
  const int64_t block_stride = int64_t(gridDim.x) * kNormRowsPerBlock;
  for (int64_t base = int64_t(blockIdx.x) * kNormRowsPerBlock; base < row_heads;
       base += block_stride) {
    const int64_t rh = base + group;
    const bool live = rh < row_heads;
    const int64_t vec = rh * kNormLanes + lane;  // uint4 index of columns lane*8 .. lane*8+7

    float xf[kVec], gf[kVec];
    if (live) {
      unpack8(reinterpret_cast<const uint4*>(x)[vec], xf);
      unpack8(reinterpret_cast<const uint4*>(g)[vec], gf);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) xf[j] = gf[j] = 0.0f;
    }

    float v[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = xf[j] * xf[j];
    // column xor 64, 32, 16, 8  ==  lane xor 8, 4, 2, 1
#pragma unroll
    for (int lane_mask = 8; lane_mask >= 1; lane_mask >>= 1) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = v[j] + __shfl_xor_sync(0xffffffffu, v[j], lane_mask);
    }
    // column xor 4, 2, 1  ==  slot xor 4, 2, 1 (every slot updated from the old values)
#pragma unroll
    for (int slot_mask = 4; slot_mask >= 1; slot_mask >>= 1) {
      float w[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) w[j] = v[j] + v[j ^ slot_mask];
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = w[j];
    }
    const float scale = rsqrtf(v[0] / 128.0f + eps);

    if (live) {
      uint32_t words[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int j = 2 * k;
        const bf16x2 y = __floats2bfloat162_rn(xf[j] * scale * gam[j],
                                               xf[j + 1] * scale * gam[j + 1]);
        const bf16x2 gate = __floats2bfloat162_rn(sigmoid_f32(gf[j]), sigmoid_f32(gf[j + 1]));
        words[k] = as_bits(__hmul2(y, gate));
      }
      reinterpret_cast<uint4*>(o)[vec] = make_uint4(words[0], words[1], words[2], words[3]);
    }
  }
}

// ---------------------------------------------------------------------------
// launchers

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// o may be the very same buffer as an input, or disjoint from it.
bool same_or_disjoint(const void* in, const void* out, int64_t bytes) {
  const uintptr_t i = reinterpret_cast<uintptr_t>(in), o = reinterpret_cast<uintptr_t>(out);
  return i == o || i + uintptr_t(bytes) <= o || o + uintptr_t(bytes) <= i;
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

// Blocks for a grid-stride kernel: enough for the work, at most one resident wave.
template <class Kernel>
int resident_grid(Kernel kernel, int threads, int64_t wanted_blocks) {
  int device = 0, sms = 0, blocks_per_sm = 0;
  PB_CUDA(cudaGetDevice(&device));
  PB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, 0));
  const int64_t resident = int64_t(sms) * std::max(blocks_per_sm, 1);
  return int(std::max<int64_t>(1, std::min(wanted_blocks, resident)));
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

void launch_o_norm_gate_baseline(const bf16* x, const bf16* g, const float* gamma, bf16* o,
                                 int64_t row_heads, float eps, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(row_heads, INT_MAX);
  o_norm_gate_baseline_kernel<<<unsigned(blocks), kHeadDim, 0, stream>>>(x, g, gamma, o,
                                                                          row_heads, eps);
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
    launch_binary_cut(MulSigmoidOp{}, a, g, o, n, stream);
}

// ---- situ ----
void situ_baseline(const bf16* g, const bf16* u, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("situ_baseline", g, u, o, n)) launch_binary_baseline(SituOp{}, g, u, o, n, stream);
}
void situ_cut(const bf16* g, const bf16* u, bf16* o, int64_t n, cudaStream_t stream) {
  if (check_binary("situ_cut", g, u, o, n)) launch_binary_cut(SituOp{}, g, u, o, n, stream);
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
  const int blocks = resident_grid(o_norm_gate_cut_kernel, kThreads,
                                   (row_heads + kNormRowsPerBlock - 1) / kNormRowsPerBlock);
  o_norm_gate_cut_kernel<<<blocks, kThreads, 0, stream>>>(x, g, gamma, o, row_heads, eps);
  PB_CUDA_LAUNCH();
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
