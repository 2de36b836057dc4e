// conv_silu_chunk (cut 2): chunked 4-tap causal conv + SiLU from the f32 partial.
//
// Variants (run either through pb::conv_silu_chunk(Variant, ...)):
//   baseline  land (cut 1's kernel, by its own switch) + up to six cudaMemcpy2DAsync
//             window copies + batched decode conv + one carry copy
//   cut       one launch: 16-row runs, window sliding through registers
// Contract (conv_silu_chunk.h has the layouts):
//   p [tokens, ld] f32 (columns 0..inner), cw [4, inner] f32, carry [3, inner] bf16
//   -> y [tokens, inner] bf16, next [3, inner] bf16 (inputs at commit_rows-3..commit_rows-1)
//   x_t = bf16(0.0f + p[t][c]); w_j = x_{t-3+j} (carry when t-3+j < 0)
//   ca = 0.0f; ca = fma(f32(w_j), cw[j][c], ca) for j = 0, 1, 2; ca = fma(f32(x_t), cw[3][c], ca)
//   sb = f32(bf16(ca)); y = bf16(sb * (1.0f / (1.0f + expf(-sb))))
// Why the variants agree bit for bit (--fmad=false, no fast-math):
//   - both accumulate through conv_acc (explicit FMAs) and call the same expf;
//   - every bf16(...) is a round-to-nearest-even cvt; the cut's vector path
//     rounds two values per instruction (cvt.rn.bf16x2.f32), which rounds each
//     half exactly as cvt.rn.bf16.f32 does;
//   - 1.0f / d: the baseline divides; the cut takes the division's own
//     in-range path (fast_math::reciprocal_rn_1_to_2p126) when all of a
//     thread's d lie in [1, 2^126), and divides otherwise. test_conv_silu_chunk
//     checks that path against 1.0f / d for every float of that range.
#include "conv_silu_chunk.h"

#include <climits>
#include <cstdint>

#include "check.h"
#include "launch.h"
#include "fast_math.cuh"
#include "land.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kConvTaps = 4;        // cw rows; the window carries kConvTaps - 1 inputs
constexpr int kConvWindow = kConvTaps - 1;

// The landing x = bf16(0.0f + p) is spelled inline at each use: starting
// from +0.0f lands a -0 partial as +0, as the land kernel does.

// ca over the window (w0, w1, w2) and the current input x: ascending taps, one
// round-to-nearest FMA each, from +0.0f.
__device__ __forceinline__ float conv_acc(float w0, float w1, float w2, float x, float k0, float k1,
                                          float k2, float k3) {
  float ca = __fmaf_rn(w0, k0, 0.0f);
  ca = __fmaf_rn(w1, k1, ca);
  ca = __fmaf_rn(w2, k2, ca);
  return __fmaf_rn(x, k3, ca);
}

// SiLU of sb = f32(bf16(ca)), before the final rounding: IEEE division, full expf.
__device__ __forceinline__ float conv_silu(float sb) { return sb * (1.0f / (1.0f + expf(-sb))); }

// One element, scalar conversions, IEEE division: the baseline decode conv.
__device__ __forceinline__ bf16 conv_tap4_silu(float w0, float w1, float w2, float x, float k0,
                                               float k1, float k2, float k3) {
  const float ca = conv_acc(w0, w1, w2, x, k0, k1, k2, k3);
  return __float2bfloat16_rn(conv_silu(__bfloat162float(__float2bfloat16_rn(ca))));
}

// ---------------------------------------------------------------------------
// Baseline: the batched decode conv over materialized windows.
// windows [tokens + 1, 3, inner] bf16, landed [tokens, inner] bf16 -> y [tokens, inner].
// One element per thread, 2-byte loads and stores.
// ---------------------------------------------------------------------------

constexpr int kDecodeThreads = 256;

__global__ void __launch_bounds__(kDecodeThreads)
conv_decode_batched_kernel(const bf16* __restrict__ windows, const bf16* __restrict__ landed,
                           const float* __restrict__ cw, bf16* __restrict__ y, int64_t tokens,
                           int64_t inner) {
  const int64_t e = int64_t(blockIdx.x) * kDecodeThreads + threadIdx.x;
  if (e >= tokens * inner) return;
  const int64_t t = e / inner;
  const int64_t c = e - t * inner;
  const bf16* w = windows + t * kConvWindow * inner + c;
  y[e] = conv_tap4_silu(__bfloat162float(w[0]), __bfloat162float(w[inner]),
                        __bfloat162float(w[2 * inner]), __bfloat162float(landed[e]), cw[c],
                        cw[inner + c], cw[2 * inner + c], cw[3 * inner + c]);
}

// ---------------------------------------------------------------------------
// Cut: one launch. Block b owns column slice b % slices (kCutThreads * kCols
// columns) and row run b / slices (kRunRows rows); consecutive blocks walk the
// column slices of one run, so a run's 3 halo rows were read moments before by
// the previous run's blocks and come from L2. Taps and window sit in
// registers; each thread keeps kPrefetchRows partial rows in flight and slides
// the window down its run, so every partial element is read once (plus the
// halo) and every output written once. kCols = 4: float4 partial and tap
// loads, 8-byte bf16 loads and stores, conversions two columns at a time;
// kCols = 1: the scalar fallback for unaligned pointers or inner, ld % 4 != 0.
// ---------------------------------------------------------------------------

constexpr int kRunRows = 16;
constexpr int kPrefetchRows = 8;  // partial rows in flight per thread
constexpr int kCutThreads = 128;
constexpr int kCutMinBlocks = 5;  // per SM (20 warps): the launch bounds cap registers at 96
constexpr int kVecCols = 4;
static_assert(kRunRows >= kConvWindow, "conv cut: a run's halo must lie in the previous run");
static_assert(kPrefetchRows <= kRunRows, "conv cut: prefetch within the run");

template <int kCols>
__device__ __forceinline__ void load_f32(const float* src, float (&v)[kCols]) {
  static_assert(kCols == 1 || kCols == 4, "conv cut: 1 or 4 columns per thread");
  if constexpr (kCols == 4) {
    const float4 q = *reinterpret_cast<const float4*>(src);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  } else {
    v[0] = *src;
  }
}

// Two bf16 packed in 32 bits (the lower address in the low half), widened to
// f32 exactly: one shift or mask each.
__device__ __forceinline__ float bf16x2_lo(uint32_t u) {
  float f;
  asm("shl.b32 %0, %1, 16;" : "=f"(f) : "r"(u));
  return f;
}
__device__ __forceinline__ float bf16x2_hi(uint32_t u) {
  float f;
  asm("and.b32 %0, %1, 0xffff0000;" : "=f"(f) : "r"(u));
  return f;
}

// bits of bf16(lo) in the low half, bf16(hi) in the high half (cvt.rn.bf16x2.f32).
__device__ __forceinline__ uint32_t bf16x2_rn_bits(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return reinterpret_cast<const uint32_t&>(h);
}

template <int kCols>
__device__ __forceinline__ void load_bf16_as_f32(const bf16* src, float (&v)[kCols]) {
  if constexpr (kCols == 4) {
    const uint2 q = *reinterpret_cast<const uint2*>(src);
    v[0] = bf16x2_lo(q.x); v[1] = bf16x2_hi(q.x); v[2] = bf16x2_lo(q.y); v[3] = bf16x2_hi(q.y);
  } else {
    v[0] = __bfloat162float(*src);
  }
}

// v = f32(bf16(v)), elementwise.
template <int kCols>
__device__ __forceinline__ void round_to_bf16(float (&v)[kCols]) {
  if constexpr (kCols % 2 == 0) {
#pragma unroll
    for (int k = 0; k < kCols; k += 2) {
      const uint32_t u = bf16x2_rn_bits(v[k], v[k + 1]);
      v[k] = bf16x2_lo(u);
      v[k + 1] = bf16x2_hi(u);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kCols; ++k) v[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
  }
}

// The plain IEEE division, out of line: the rare out-of-range case costs a
// call instead of an inlined division per row in the unrolled run.
__device__ __noinline__ float reciprocal_ieee(float d) { return 1.0f / d; }

// v = conv_silu(v) = v * (1.0f / (1.0f + expf(-v))), elementwise, bit for bit.
// d = 1 + expf(-v) is >= 1 (or NaN); when every d of the thread is below
// 2^126 the reciprocal is fast_math::reciprocal_rn_1_to_2p126 (the in-range
// path of the IEEE division, without its per-element range check and branch),
// otherwise the plain division.
template <int kCols>
__device__ __forceinline__ void silu_cols(float (&v)[kCols]) {
  float d[kCols];
  bool in_range = true;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    d[k] = 1.0f + expf(-v[k]);
    in_range = in_range & (d[k] < 0x1p126f);  // false for +inf and NaN
  }
  if (in_range) {
#pragma unroll
    for (int k = 0; k < kCols; ++k) v[k] = v[k] * fast_math::reciprocal_rn_1_to_2p126(d[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kCols; ++k) v[k] = v[k] * reciprocal_ieee(d[k]);
  }
}

// dst[k] = bf16(v[k]).
template <int kCols>
__device__ __forceinline__ void store_bf16_rn(bf16* dst, const float (&v)[kCols]) {
  if constexpr (kCols == 4) {  // one 64-bit scalar: a uint2 store gets split into two 4-byte STGs
    *reinterpret_cast<uint64_t*>(dst) =
        uint64_t(bf16x2_rn_bits(v[0], v[1])) | (uint64_t(bf16x2_rn_bits(v[2], v[3])) << 32);
  } else {
    *dst = __float2bfloat16_rn(v[0]);
  }
}

template <int kCols>
__device__ __forceinline__ void copy_bf16(bf16* dst, const bf16* src) {
  if constexpr (kCols == 4) {
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
  } else {
    *dst = *src;
  }
}

// One row of the run: x = bf16(0.0f + p) from the partial, y from the window
// and x, then slide the window by one position.
template <int kCols>
__device__ __forceinline__ void conv_row(const float (&part)[kCols],
                                         float (&win)[kConvWindow][kCols],
                                         const float (&tap)[kConvTaps][kCols], bf16* dst) {
  float x[kCols], v[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) x[k] = 0.0f + part[k];
  round_to_bf16<kCols>(x);  // x_t
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    v[k] = conv_acc(win[0][k], win[1][k], win[2][k], x[k], tap[0][k], tap[1][k], tap[2][k],
                    tap[3][k]);
  }
  round_to_bf16<kCols>(v);  // sb = f32(bf16(ca))
  silu_cols<kCols>(v);
  store_bf16_rn<kCols>(dst, v);
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    win[0][k] = win[1][k];
    win[1][k] = win[2][k];
    win[2][k] = x[k];
  }
}

template <int kCols>
__global__ void __launch_bounds__(kCutThreads, kCutMinBlocks)
conv_silu_chunk_cut_kernel(const float* __restrict__ p, const float* __restrict__ cw,
                           const bf16* __restrict__ carry, bf16* __restrict__ y,
                           bf16* __restrict__ next, int64_t tokens, int64_t inner, int64_t ld,
                           int64_t commit_rows, int64_t slices) {
  const int64_t slice = int64_t(blockIdx.x) % slices;
  const int64_t run = int64_t(blockIdx.x) / slices;
  const int64_t c = (slice * kCutThreads + threadIdx.x) * kCols;
  if (c >= inner) return;
  const int64_t t0 = run * kRunRows;
  const int rows = int(tokens - t0 < kRunRows ? tokens - t0 : kRunRows);
  const float* src = p + t0 * ld + c;  // partial row t0
  bf16* dst = y + t0 * inner + c;       // output row t0

  // A full run keeps kPrefetchRows partial rows in flight: the first ones are
  // issued with the halo and taps, and each row's slot is refilled with the
  // row kPrefetchRows further down as soon as it has been consumed.
  float part[kPrefetchRows][kCols];
  if (rows == kRunRows) {
#pragma unroll
    for (int i = 0; i < kPrefetchRows; ++i) load_f32<kCols>(src + i * ld, part[i]);
  }
  // win[j] holds the inputs at positions t-3+j for the row t about to be computed.
  float win[kConvWindow][kCols];
  if (t0 == 0) {
#pragma unroll
    for (int j = 0; j < kConvWindow; ++j) load_bf16_as_f32<kCols>(carry + j * inner + c, win[j]);
  } else {  // t0 >= kRunRows >= kConvWindow: the halo rows are all inside the segment
#pragma unroll
    for (int j = 0; j < kConvWindow; ++j) {
      load_f32<kCols>(src - (kConvWindow - j) * ld, win[j]);
#pragma unroll
      for (int k = 0; k < kCols; ++k) win[j][k] = 0.0f + win[j][k];
      round_to_bf16<kCols>(win[j]);
    }
  }
  float tap[kConvTaps][kCols];
#pragma unroll
  for (int j = 0; j < kConvTaps; ++j) load_f32<kCols>(cw + j * inner + c, tap[j]);

  if (rows == kRunRows) {
#pragma unroll
    for (int i = 0; i < kRunRows; ++i) {
      conv_row<kCols>(part[i % kPrefetchRows], win, tap, dst + i * inner);
      if (i + kPrefetchRows < kRunRows) {
        load_f32<kCols>(src + (i + kPrefetchRows) * ld, part[i % kPrefetchRows]);
      }
    }
  } else {  // the call's last, partial run: one row at a time
#pragma unroll 1
    for (int i = 0; i < rows; ++i) {
      load_f32<kCols>(src + i * ld, part[0]);
      conv_row<kCols>(part[0], win, tap, dst + i * inner);
    }
  }

  // next = the successor window of the last commit row (positions
  // commit_rows-3 .. commit_rows-1), written by the run that holds that row:
  // positions before the segment copy the carry's bits, the others land the
  // partial again (rows of this run or its halo, fresh in L1/L2). Kept out of
  // the row loop so the loop's code stays small.
  if (commit_rows > t0 && commit_rows <= t0 + rows) {
#pragma unroll
    for (int j = 0; j < kConvWindow; ++j) {
      const int64_t pos = commit_rows - kConvWindow + j;
      if (pos < 0) {
        copy_bf16<kCols>(next + j * inner + c, carry + (pos + kConvWindow) * inner + c);
      } else {
        float v[kCols];
        load_f32<kCols>(p + pos * ld + c, v);
#pragma unroll
        for (int k = 0; k < kCols; ++k) v[k] = 0.0f + v[k];
        store_bf16_rn<kCols>(next + j * inner + c, v);
      }
    }
  }
}

constexpr size_t kScratchAlign = 256;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t landed_bytes(const ConvShape& s) {
  return size_t(s.tokens) * size_t(s.inner) * sizeof(bf16);
}

size_t windows_bytes(const ConvShape& s) {
  return size_t(s.tokens + 1) * kConvWindow * size_t(s.inner) * sizeof(bf16);
}

void check_conv_contract(const float* p, const float* cw, const bf16* carry, const bf16* y,
                         const bf16* next, const ConvShape& s) {
  PB_CHECK(s.tokens >= 0 && s.inner >= 0, "conv_silu_chunk: negative shape");
  PB_CHECK(s.ld >= s.inner, "conv_silu_chunk: ld < inner");
  PB_CHECK(s.commit_rows >= 0 && s.commit_rows <= s.tokens,
           "conv_silu_chunk: commit_rows outside [0, tokens]");
  if (s.tokens == 0 || s.inner == 0) return;
  PB_CHECK(p && cw && carry && y, "conv_silu_chunk: null p, cw, carry or y");
  PB_CHECK(s.commit_rows == 0 || next, "conv_silu_chunk: next is null but commit_rows > 0");
  if (s.commit_rows > 0) {
    const size_t window = kConvWindow * size_t(s.inner) * sizeof(bf16);
    PB_CHECK(!overlaps(next, window, carry, window), "conv_silu_chunk: next overlaps carry");
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------

size_t conv_baseline_scratch_bytes(const ConvShape& s) {
  return round_up(landed_bytes(s), kScratchAlign) + windows_bytes(s);
}

ConvBaselineScratch conv_baseline_scratch_from(void* base, const ConvShape& s) {
  char* b = static_cast<char*>(base);
  char* windows = b + round_up(landed_bytes(s), kScratchAlign);
  return {reinterpret_cast<bf16*>(b), reinterpret_cast<bf16*>(windows)};
}

void conv_silu_chunk_baseline(const float* p, const float* cw, const bf16* carry, bf16* y,
                              bf16* next, const ConvShape& s, const ConvBaselineScratch& scratch,
                              Variant land_variant, cudaStream_t stream, const ConvStep* step) {
  const auto run = [step](const char* name, const std::function<void()>& work) {
    if (step) (*step)(name, work);
    else work();
  };
  check_conv_contract(p, cw, carry, y, next, s);
  if (s.tokens == 0 || s.inner == 0) return;
  PB_CHECK(scratch.landed && scratch.windows, "conv_silu_chunk_baseline: null scratch");
  PB_CHECK(aligned_to(scratch.landed, 16) && aligned_to(scratch.windows, 16),
           "conv_silu_chunk_baseline: scratch not 16-byte aligned");

  // (1) Land the band: landed [tokens, inner] = bf16(0.0f + p[:, 0:inner]).
  LandShape band{};
  band.rows = s.tokens;
  band.split_k = 1;
  band.nt = s.ld;
  band.off = 0;
  band.n = s.inner;
  run("land", [&] { land(land_variant, p, scratch.landed, band, stream); });

  // (2) Materialize every row's window: windows[t][j] = input at position t-3+j,
  // for t = 0..tokens. Per slot j, rows t >= 3-j come from landed row t-3+j
  // (one strided copy) and rows t < 3-j from carry row t+j (another).
  const size_t row_bytes = size_t(s.inner) * sizeof(bf16);
  const size_t window_pitch = kConvWindow * row_bytes;
  const int64_t window_rows = s.tokens + 1;
  for (int j = 0; j < kConvWindow; ++j) {
    const int64_t first_landed = kConvWindow - j;  // first row whose slot j is in the segment
    const int64_t from_carry = first_landed < window_rows ? first_landed : window_rows;
    if (from_carry > 0) {
      run("window_copy", [&] {
        PB_CUDA(cudaMemcpy2DAsync(scratch.windows + j * s.inner, window_pitch, carry + j * s.inner,
                                  row_bytes, row_bytes, size_t(from_carry), cudaMemcpyDeviceToDevice,
                                  stream));
      });
    }
    const int64_t from_landed = window_rows - first_landed;
    if (from_landed > 0) {
      run("window_copy", [&] {
        PB_CUDA(cudaMemcpy2DAsync(scratch.windows + (first_landed * kConvWindow + j) * s.inner,
                                  window_pitch, scratch.landed, row_bytes, row_bytes,
                                  size_t(from_landed), cudaMemcpyDeviceToDevice, stream));
      });
    }
  }

  // (3) The batched decode conv over the windows.
  const int64_t elements = s.tokens * s.inner;
  const int64_t blocks = (elements + kDecodeThreads - 1) / kDecodeThreads;
  PB_CHECK(blocks <= INT_MAX, "conv_silu_chunk_baseline: grid too large");
  run("decode", [&] {
    conv_decode_batched_kernel<<<unsigned(blocks), kDecodeThreads, 0, stream>>>(
        scratch.windows, scratch.landed, cw, y, s.tokens, s.inner);
    PB_CUDA_LAUNCH();
  });

  // (4) The last commit row's successor window is the next carry.
  if (s.commit_rows > 0) {
    run("carry_copy", [&] {
      PB_CUDA(cudaMemcpyAsync(next, scratch.windows + s.commit_rows * kConvWindow * s.inner,
                              window_pitch, cudaMemcpyDeviceToDevice, stream));
    });
  }
}

void conv_silu_chunk_cut(const float* p, const float* cw, const bf16* carry, bf16* y, bf16* next,
                         const ConvShape& s, cudaStream_t stream) {
  check_conv_contract(p, cw, carry, y, next, s);
  if (s.tokens == 0 || s.inner == 0) return;

  const bool vec = s.inner % kVecCols == 0 && s.ld % kVecCols == 0 && aligned_to(p, 16) &&
                   aligned_to(cw, 16) && aligned_to(carry, 8) && aligned_to(y, 8) &&
                   (next == nullptr || aligned_to(next, 8));
  const int cols = vec ? kVecCols : 1;
  const int64_t slice_cols = int64_t(kCutThreads) * cols;
  const int64_t slices = (s.inner + slice_cols - 1) / slice_cols;
  const int64_t runs = (s.tokens + kRunRows - 1) / kRunRows;
  PB_CHECK(runs <= INT_MAX / slices, "conv_silu_chunk_cut: grid too large");
  const unsigned blocks = unsigned(slices * runs);
  if (vec) {
    conv_silu_chunk_cut_kernel<kVecCols><<<blocks, kCutThreads, 0, stream>>>(
        p, cw, carry, y, next, s.tokens, s.inner, s.ld, s.commit_rows, slices);
  } else {
    conv_silu_chunk_cut_kernel<1><<<blocks, kCutThreads, 0, stream>>>(
        p, cw, carry, y, next, s.tokens, s.inner, s.ld, s.commit_rows, slices);
  }
  PB_CUDA_LAUNCH();
}

// ---------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------

void conv_silu_chunk(Variant v, const float* p, const float* cw, const bf16* carry, bf16* y,
                     bf16* next, const ConvShape& s, const ConvBaselineScratch& scratch,
                     Variant land_variant, cudaStream_t stream, const ConvStep* step) {
  if (v == Variant::cut) {
    conv_silu_chunk_cut(p, cw, carry, y, next, s, stream);
  } else {
    conv_silu_chunk_baseline(p, cw, carry, y, next, s, scratch, land_variant, stream, step);
  }
}

}  // namespace pb
