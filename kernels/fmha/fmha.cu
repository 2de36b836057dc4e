// FMHA forward with LSE: the native engine, the cuDNN stubs (without cuDNN)
// and the one dispatch point. The contract and the floors are in fmha.h.
//
// Native kernel: FlashAttention-2 forward on mma.sync.m16n8k16 bf16 -> f32
// (sm_80+; the same code runs on sm_90a).
//   grid     (ceil(tq / 128) query tiles, heads); causal grids walk the query
//            tiles from the last (the longest key range) to the first
//   CTA      4 warps x 32 query rows (two m16 tiles each) = 128 rows; key tile 64
//   smem     Q [128][d_qk], K [64][d_qk], V [64][d_v] bf16, one buffer each,
//            every row padded by 16 bytes (92 KiB at 192/128, 68 KiB at 128/128):
//            2 CTAs per SM on sm_90. The row pitch is an odd number of 16-byte
//            chunks, so the 8 rows of an ldmatrix 8x8 (and the 8 chunks of a
//            cp.async row) fall in 8 distinct bank groups: no bank conflicts,
//            and every smem address is a per-thread base plus an immediate.
//   pipeline (per key tile, walked from the last to the first)
//              wait K[t]; sync; cp.async V[t]     S = Q K[t]^T
//              wait V[t]; sync; cp.async K[t-1]   mask, online softmax, O += P V[t]
//            so each load overlaps the other product (FA2's schedule).
//   causal   key tiles past the CTA's last visible key are never visited; the
//            mask runs only on tiles that cross the diagonal or the tk tail.
//   epilogue o = bf16(acc / l) staged through the warp's own Q rows in smem,
//            written as 16-byte rows; lse by the first lane of each quad.
//
// Per thread: acc 2 x 16 x 4 = 128 f32 (d_v = 128), S 2 x 8 x 4 = 64 f32; Q
// fragments are reloaded from smem at every k step (FA2's layout).
#include "fmha.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "ptx.cuh"

namespace pb {

const char* fmha_engine_name(FmhaEngine e) { return e == FmhaEngine::cudnn ? "cudnn" : "native"; }

FmhaEngine fmha_engine_from_name(const std::string& name) {
  if (name == "native") return FmhaEngine::native;
  if (name == "auto") return fmha_cudnn_available() ? FmhaEngine::cudnn : FmhaEngine::native;
  PB_CHECK(name == "cudnn", "fmha engine '" + name + "' is not allowed; allowed: native, cudnn, auto");
  PB_CHECK(fmha_cudnn_available(), "fmha: cudnn was asked for, but this build has no cuDNN engine "
                                   "(cuDNN 9 or the cudnn-frontend headers were not found at configure time)");
  return FmhaEngine::cudnn;
}

namespace {

using bf16 = __nv_bfloat16;

using namespace ptx;  // the shared PTX wrappers (ptx.cuh)

// ---------------------------------------------------------------------------
// Tiles
// ---------------------------------------------------------------------------

template <int kDqk, int kDv>
struct FmhaConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMTiles = 2;                       // m16 tiles per warp
  static constexpr int kWarpRows = 16 * kMTiles;          // 32
  static constexpr int kBlockM = kWarps * kWarpRows;      // 128 query rows per CTA
  static constexpr int kBlockN = 64;                      // keys per tile
  static constexpr int kNTiles = kBlockN / 8;             // n8 tiles of S per m16 tile
  static constexpr int kDTiles = kDv / 8;                 // n8 tiles of O per m16 tile
  static constexpr int kPitchQK = kDqk + 8;  // smem row pitch (elements) of Q and K
  static constexpr int kPitchV = kDv + 8;    // of V and of the o staging rows
  static constexpr size_t kSmemQ = size_t(kBlockM) * kPitchQK;
  static constexpr size_t kSmemK = size_t(kBlockN) * kPitchQK;
  static constexpr size_t kSmemV = size_t(kBlockN) * kPitchV;
  static constexpr size_t kSmemBytes = (kSmemQ + kSmemK + kSmemV) * sizeof(bf16);

  static_assert(kDqk % 64 == 0 && kDv % 64 == 0, "fmha: rows are whole passes of 8 threads x 16 bytes");
  static_assert((kPitchQK / 8) % 2 == 1 && (kPitchV / 8) % 2 == 1,
                "fmha: an odd pitch in 16-byte chunks keeps 8 consecutive rows in distinct bank groups");
  static_assert(kPitchV <= kPitchQK, "fmha: the epilogue stages o in the warp's own Q rows");
  static_assert(kBlockN % 16 == 0, "fmha: key tile is a multiple of the mma k (16)");
  static_assert(kWarpRows * (kDv / 8) % 32 == 0, "fmha: o rows split evenly over a warp");
};

// cp.async a [kRows][kD] tile whose row r is at g + r * stride into smem rows
// of kPitch elements; rows >= valid are zero-filled (their source pointer is
// clamped to g, which is valid). Eight threads share a row (16 bytes each, 128
// contiguous bytes per pass): thread tid owns rows tid / 8 + kRowStep * i and
// chunks tid % 8 + 8 * j, so its addresses are a per-thread base plus steps.
template <int kRows, int kD, int kPitch, int kThreads>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* g, int64_t stride, int valid, int tid) {
  constexpr int kRowStep = kThreads / 8;
  static_assert(kRows % kRowStep == 0, "fmha: tile rows split evenly over the CTA");
  const int r0 = tid >> 3, c0 = tid & 7;
  const bf16* src = g + (int64_t(r0) * stride + c0 * 8);
  const uint32_t dst = smem_addr(s + r0 * kPitch + c0 * 8);
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool ok = r0 + i * kRowStep < valid;
#pragma unroll
    for (int j = 0; j < kD / 64; ++j) {
      cp_async_16(dst + 2 * (i * kRowStep * kPitch + j * 64), ok ? src + j * 64 : g, ok);
    }
    src += kRowStep * stride;
  }
}

struct FmhaParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;
  int64_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs;
  int tq, tk, heads;
  bool causal;
  float scale_log2;  // f32(scale * log2(e))
};

// ---------------------------------------------------------------------------
// Native kernel
// ---------------------------------------------------------------------------

template <int kDqk, int kDv>
__global__ void __launch_bounds__(FmhaConfig<kDqk, kDv>::kThreads, 2) fmha_native_kernel(const FmhaParams p) {
  using C = FmhaConfig<kDqk, kDv>;
  constexpr int kMT = C::kMTiles, kBN = C::kBlockN, kNT = C::kNTiles, kDT = C::kDTiles;
  constexpr int kPQ = C::kPitchQK, kPV = C::kPitchV;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + C::kSmemQ;
  bf16* sV = sK + C::kSmemK;

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;  // mma groupID, thread in group
  const int head = blockIdx.y;
  const int q_tile = p.causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q0 = q_tile * C::kBlockM;
  const int q_rows = min(C::kBlockM, p.tq - q0);
  const int diag = p.tk - p.tq;  // query i sees keys j <= i + diag (causal)
  // Keys [0, key_end) hold every key any row of this CTA sees.
  const int key_end = p.causal ? min(p.tk, q0 + q_rows + diag) : p.tk;
  float* lse_out = p.lse + int64_t(head) * p.tq;
  bf16* o_out = p.o + (int64_t(q0) * p.heads + head) * kDv;

  if (key_end <= 0) {  // no row of this CTA sees a key: o = 0, lse = -inf
    constexpr int kChunks = kDv / 8;
    for (int i = tid; i < q_rows * kChunks; i += C::kThreads) {
      const int r = i / kChunks, c = i - r * kChunks;
      *reinterpret_cast<uint4*>(o_out + int64_t(r) * p.heads * kDv + c * 8) = make_uint4(0, 0, 0, 0);
    }
    for (int r = tid; r < q_rows; r += C::kThreads) lse_out[q0 + r] = -INFINITY;
    return;
  }
  const int n_tiles = (key_end + kBN - 1) / kBN;
  const bf16* k_head = p.k + int64_t(head) * p.k_hs;
  const bf16* v_head = p.v + int64_t(head) * p.v_hs;

  // This lane's ldmatrix row address in each operand (lane l names row l % 8
  // of 8x8 matrix l / 8; the fragment layouts are at the loops below); the
  // loops add compile-time offsets.
  const int lrow = lane & 7, lmat = lane >> 3;
  // Q, A operand: matrices (rows 0-7, chunk 2ks), (8-15, 2ks), (0-7, 2ks+1), (8-15, 2ks+1).
  const uint32_t q_lane = smem_addr(sQ + (warp * C::kWarpRows + lrow + (lmat & 1) * 8) * kPQ + (lmat >> 1) * 8);
  // K, B operand: matrices (keys 0-7, chunk 2ks), (0-7, 2ks+1), (8-15, 2ks), (8-15, 2ks+1).
  const uint32_t k_lane = smem_addr(sK + (lrow + (lmat >> 1) * 8) * kPQ + (lmat & 1) * 8);
  // V, B operand transposed: matrices (keys 0-7, chunk 2dp), (8-15, 2dp), (0-7, 2dp+1), (8-15, 2dp+1).
  const uint32_t v_lane = smem_addr(sV + (lrow + (lmat & 1) * 8) * kPV + (lmat >> 1) * 8);

  float acc[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.0f;
  // Per row (mt, half: row g or g + 8): running max m of the raw scores and
  // this thread's share of l = sum p. ms = m * scale_log2 is recomputed (the
  // same rounding every time) rather than kept.
  float row_m[kMT][2], row_l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_m[mt][h] = -INFINITY;
      row_l[mt][h] = 0.0f;
    }

  load_tile<C::kBlockM, kDqk, kPQ, C::kThreads>(sQ, p.q + int64_t(head) * p.q_hs + int64_t(q0) * p.q_ts, p.q_ts,
                                           q_rows, tid);
  {
    const int k0 = (n_tiles - 1) * kBN;
    load_tile<kBN, kDqk, kPQ, C::kThreads>(sK, k_head + int64_t(k0) * p.k_ts, p.k_ts, p.tk - k0, tid);
  }
  cp_async_commit();

  // One key tile; kMask: the tile crosses the tk tail or (causal) the diagonal
  // of the CTA's first row. Such tiles are the first ones the walk meets
  // (the highest keys), so the walk runs the masked body, then the plain one.
  auto process_tile = [&](const int tile, auto mask_tag) {
    constexpr bool kMask = decltype(mask_tag)::value;
    const int k0 = tile * kBN;
    cp_async_wait_all();
    __syncthreads();  // K[tile] (and Q) visible; every warp is done with V of the previous tile
    load_tile<kBN, kDv, kPV, C::kThreads>(sV, v_head + int64_t(k0) * p.v_ts, p.v_ts, p.tk - k0, tid);
    cp_async_commit();

    // ---- S = Q K^T: s[mt][nt] is the m16n8 tile (rows mt*16.., keys nt*8..) ----
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks) {
      uint32_t a[kMT][4];  // Q rows mt*16.., dims 16ks..
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) ldmatrix_x4(q_lane + 2 * (mt * 16 * kPQ + ks * 16), a[mt]);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];  // keys 16np..: b0 b1 of n-tiles 2np (b[0], b[1]) and 2np+1 (b[2], b[3])
        ldmatrix_x4(k_lane + 2 * (np * 16 * kPQ + ks * 16), b);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    cp_async_wait_all();
    __syncthreads();  // V[tile] visible; every warp is done with K[tile]
    if (tile > 0) {
      const int kn = k0 - kBN;
      load_tile<kBN, kDqk, kPQ, C::kThreads>(sK, k_head + int64_t(kn) * p.k_ts, p.k_ts, p.tk - kn, tid);
    }
    cp_async_commit();

    // ---- mask: keys past tk, and (causal) keys past the row's diagonal ----
    // Element e of s[mt][nt]: row mt*16 + g + 8*(e >= 2), key nt*8 + 2*t4 + (e & 1).
    if (kMask) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = q0 + warp * C::kWarpRows + mt * 16 + g + ((e >> 1) << 3);
            const int key = k0 + nt * 8 + 2 * t4 + (e & 1);
            if (key >= p.tk || (p.causal && key > row + diag)) s[mt][nt][e] = -INFINITY;
          }
    }

    // ---- online softmax (base 2, scale folded into the exponent); s becomes p ----
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_m[mt][h];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // mx is the row's max so far (the quad holds the row's 64 keys). A row
        // that has seen only masked keys keeps mx = -inf: ms = 0 makes its
        // p = exp2(-inf) = 0, and alpha = 0 keeps acc and l at 0.
        const float m_old = row_m[mt][h];
        const float ms = mx == -INFINITY ? 0.0f : __fmul_rn(mx, p.scale_log2);
        const float alpha = m_old == -INFINITY ? 0.0f : fast_exp2(__fsub_rn(__fmul_rn(m_old, p.scale_log2), ms));
        row_m[mt][h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float pe = fast_exp2(__fmaf_rn(s[mt][nt][e], p.scale_log2, -ms));
            s[mt][nt][e] = pe;
            sum = __fadd_rn(sum, pe);
          }
        row_l[mt][h] = __fadd_rn(__fmul_rn(row_l[mt][h], alpha), sum);
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          acc[mt][dt][2 * h] = __fmul_rn(acc[mt][dt][2 * h], alpha);
          acc[mt][dt][2 * h + 1] = __fmul_rn(acc[mt][dt][2 * h + 1], alpha);
        }
      }
    }

    // ---- O += P V: P as bf16 A fragments straight from the S accumulators
    // (keys 16ks..16ks+15 are n-tiles 2ks -> regs 0, 1 and 2ks+1 -> regs 2, 3),
    // V through ldmatrix.trans ----
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pa[mt][0] = pack_bf16x2(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        pa[mt][1] = pack_bf16x2(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        pa[mt][2] = pack_bf16x2(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        pa[mt][3] = pack_bf16x2(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];  // keys 16ks..: b0 b1 of d-tiles 2dp (b[0], b[1]) and 2dp+1 (b[2], b[3])
        ldmatrix_x4_trans(v_lane + 2 * (ks * 16 * kPV + dp * 16), b);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816(acc[mt][2 * dp], pa[mt], b[0], b[1]);
          mma_16816(acc[mt][2 * dp + 1], pa[mt], b[2], b[3]);
        }
      }
    }
  };
  // Tiles with k0 + kBN - 1 > mask_from need the mask: past tk - 1, or past
  // q0 + diag, the last key the CTA's first row sees.
  const int mask_from = p.causal ? min(p.tk - 1, q0 + diag) : p.tk - 1;
  int tile = n_tiles - 1;
  for (; tile >= 0 && tile * kBN + kBN - 1 > mask_from; --tile) process_tile(tile, std::true_type{});
  for (; tile >= 0; --tile) process_tile(tile, std::false_type{});
  // Nothing is in flight: the last iteration committed an empty group.

  // ---- epilogue: o = bf16(acc / l), lse = (ms + log2 l) ln 2 ----
  // The warp's own Q rows (only this warp ever read them) stage its o rows.
  __syncwarp();
  bf16* sO = sQ + warp * C::kWarpRows * kPQ;  // [32][kDv], pitch kPV
  const int warp_q0 = q0 + warp * C::kWarpRows;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_l[mt][h];
      l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
      l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
      const bool empty = row_m[mt][h] == -INFINITY;  // the row saw no key
      const float inv = empty ? 0.0f : __fdiv_rn(1.0f, l);
      const int r = mt * 16 + h * 8 + g;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<uint32_t*>(sO + r * kPV + dt * 8 + 2 * t4) =
            pack_bf16x2(__fmul_rn(acc[mt][dt][2 * h], inv), __fmul_rn(acc[mt][dt][2 * h + 1], inv));
      }
      if (t4 == 0 && warp_q0 + r < p.tq) {
        lse_out[warp_q0 + r] =
            empty ? -INFINITY
                  : __fmul_rn(__fadd_rn(__fmul_rn(row_m[mt][h], p.scale_log2), log2f(l)), 0.693147180559945309f);
      }
    }
  __syncwarp();
  constexpr int kChunks = kDv / 8;
#pragma unroll
  for (int it = 0; it < C::kWarpRows * kChunks / 32; ++it) {
    const int i = lane + it * 32;
    const int r = i / kChunks, c = i - r * kChunks;
    if (warp_q0 + r < p.tq) {
      *reinterpret_cast<uint4*>(o_out + (int64_t(warp * C::kWarpRows + r) * p.heads) * kDv + c * 8) =
          *reinterpret_cast<const uint4*>(sO + r * kPV + c * 8);
    }
  }
}

// ---------------------------------------------------------------------------
// Launcher
// ---------------------------------------------------------------------------

template <int kDqk, int kDv>
void launch_native(const FmhaParams& p, cudaStream_t stream) {
  using C = FmhaConfig<kDqk, kDv>;
  auto kernel = fmha_native_kernel<kDqk, kDv>;
  PB_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
  const dim3 grid(unsigned((p.tq + C::kBlockM - 1) / C::kBlockM), unsigned(p.heads));
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  PB_CUDA_LAUNCH();
}

}  // namespace

void fmha_native(const FmhaTensors& t, const FmhaShape& s, cudaStream_t stream) {
  const bool k3 = s.d_qk == 192 && s.d_v == 128, generic = s.d_qk == 128 && s.d_v == 128;
  PB_CHECK(k3 || generic, "fmha_native: head dims (d_qk, d_v) must be (192, 128) or (128, 128), got (" +
                              std::to_string(s.d_qk) + ", " + std::to_string(s.d_v) + ")");
  PB_CHECK(s.tq >= 0 && s.tk >= 0 && s.tq < (int64_t(1) << 30) && s.tk < (int64_t(1) << 30),
           "fmha_native: tq and tk must lie in [0, 2^30)");
  PB_CHECK(s.heads >= 1 && s.heads <= 65535, "fmha_native: heads must lie in [1, 65535]");
  PB_CHECK(std::isfinite(s.scale) && s.scale > 0.0f, "fmha_native: scale must be finite and positive");
  if (s.tq == 0) return;
  PB_CHECK(t.q && t.o && t.lse, "fmha_native: null q, o or lse");
  PB_CHECK(s.tk == 0 || (t.k && t.v), "fmha_native: null k or v");
  PB_CHECK(aligned16(t.q) && aligned16(t.k) && aligned16(t.v) && aligned16(t.o),
           "fmha_native: q, k, v and o must be 16-byte aligned");
  for (int64_t stride : {t.q_token_stride, t.q_head_stride, t.k_token_stride, t.k_head_stride,
                         t.v_token_stride, t.v_head_stride}) {
    PB_CHECK(stride % 8 == 0, "fmha_native: token and head strides must be multiples of 8 elements (16 bytes)");
  }
  FmhaParams p;
  p.q = t.q;
  p.k = t.k;
  p.v = t.v;
  p.o = t.o;
  p.lse = t.lse;
  p.q_ts = t.q_token_stride;
  p.q_hs = t.q_head_stride;
  p.k_ts = t.k_token_stride;
  p.k_hs = t.k_head_stride;
  p.v_ts = t.v_token_stride;
  p.v_hs = t.v_head_stride;
  p.tq = int(s.tq);
  p.tk = int(s.tk);
  p.heads = s.heads;
  p.causal = s.causal;
  p.scale_log2 = float(double(s.scale) * 1.4426950408889634074);
  if (k3) {
    launch_native<192, 128>(p, stream);
  } else {
    launch_native<128, 128>(p, stream);
  }
}

#ifndef PB_HAVE_CUDNN
bool fmha_cudnn_available() { return false; }

std::string fmha_cudnn_version() { return "none: built without cuDNN"; }

FmhaPlanMemory fmha_cudnn_plan_memory() { return {}; }

void fmha_cudnn(const FmhaTensors&, const FmhaShape&, cudaStream_t) {
  PB_CHECK(false, "fmha_cudnn: built without cuDNN (PB_HAVE_CUDNN is not defined)");
}
#endif

// ---------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------

void fmha(FmhaEngine e, const FmhaTensors& t, const FmhaShape& s, cudaStream_t stream) {
  if (e == FmhaEngine::cudnn) {
    fmha_cudnn(t, s, stream);
  } else {
    fmha_native(t, s, stream);
  }
}

}  // namespace pb
