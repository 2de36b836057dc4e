// The expert GEMMs in FP8 with DeepSeek-V3 block scales: ONE CUTLASS 4.2 Hopper
// ptr-array grouped GEMM with blockwise scaling (TMA loads of the e4m3
// operands, wgmma, the scales promoted into the f32 accumulator once per
// 128-wide K block, warp specialized: one producer warp group, two cooperative
// consumer warp groups, a persistent grouped tile scheduler), compiled for
// sm_90a only, from the header-only CUTLASS/CuTe in .deps/cutlass. One
// instantiation: tile 128 (m) x 128 (n) x 128 (k), cluster 1 x 2 (the two CTAs
// of a cluster share the activation tile by TMA multicast).
//
// Problem i (one per non-empty expert and band, in the bf16 engine's order:
// expert e's band 0, band 1, then the next non-empty expert):
//   d_i [m_i, n] bf16, row stride ldd
//       = dequant(a_i [m_i, k] e4m3, row stride lda) · dequant(b_i [n, k] e4m3, row stride ldb)ᵀ
//   a_i (r, l) = code · sfa_i[r · ld_sfa + l / 128]          "1 x 128": one f32 per row and 128 columns
//   b_i (c, l) = code · sfb_i[(c / 128) · ld_sfb + l / 128]  "128 x 128": one f32 per block
// Both scale arrays are K-major (the K blocks of a row, or of a 128-row block,
// are contiguous). Arithmetic: for every 128-wide K block the tensor core sums
// the 128 code products into a fresh f32 register (its own limited-precision
// accumulation, see the test's floor), then acc += block_sum · (sfa · sfb)
// (f32, the scale product rounded to f32 first); alpha 1, no source; one round
// to nearest even into bf16 at the end.
//
// How the harness's tensors map onto this (no padding anywhere):
//   weights  w [E, n_total, k] e4m3, scales sw [E, n_total / 128, KB] f32, KB = k / 128:
//            band j (rows [j nb, (j+1) nb)) of expert e: b_i = w + (e n_total + j nb) k,
//            sfb_i = sw + (e n_total / 128 + j nb / 128) KB, ldb = k, ld_sfb = KB.
//   rows     x [V, lda] e4m3 (permuted; expert e owns rows [offset_e, offset_e + count_e)),
//            scales sx [V, KB] f32: a_i = x + offset_e lda, sfa_i = sx + offset_e KB,
//            ld_sfa = KB. Any row count, any offset: no alignment or padding of m_i.
//
// Why ld_sfa and ld_sfb must both be exactly k / 128: CUTLASS 4.2's grouped
// blockwise collective (sm90_mma_array_tma_gmma_ss_warpspecialized_fp8_
// blockwise_scaling.hpp) IGNORES the per-group layout_SFA / layout_SFB arrays of
// its arguments; on the device it rebuilds each group's scale layouts from the
// group's (M, N, K) with ScaleConfig::tile_atom_to_shape_SFA/SFB, i.e. compact:
// K-major SFA has row stride ceil(K / 128), K-major SFB has 128-row-block
// stride ceil(K / 128) (MN-major SFA would be per-group packed [KB, m_i], which
// the permuted rows cannot give without a per-expert transpose: K-major is the
// layout that needs nothing). So the harness's ld_sw ("KB rounded up to a
// multiple of 4", for cuBLASLt) fits only where KB % 4 == 0 (K3: k = 3584 ->
// 28, k = 3072 -> 24); a stride above KB is refused here, never misread.
// The scales are read with 4-byte cp.async, one f32 at a time, predicated on
// the group's rows and 128-row blocks: no 16-byte alignment, no padding, and no
// read past row m_i - 1 of sfa_i or block n / 128 - 1 of sfb_i.
//
// Contract (checked on the host before the launch, pb::Error naming the rule
// and the values): 1 <= problems <= max_problems; k and n positive multiples
// of 128 (the K block and SFB's N block; k below 2^31); lda, ldb multiples of
// 16 (16-byte TMA rows of e4m3) and >= k; ldd a multiple of 8 (16 bytes of
// bf16) and >= n; ld_sfa == ld_sfb == k / 128; per problem m_i >= 1, a_i, b_i,
// d_i 16-byte aligned, sfa_i, sfb_i non-null and 4-byte aligned. Rows past m_i
// and columns past n of d_i are not written (TMA bounds per problem).
// Built only with PB_HAVE_CUTLASS (cmake/cutlass.cmake): this header has no
// fallback definitions, so its users include it under that macro.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

namespace pb {

// Whether the current device runs the sm_90a kernel (compute capability 9.0).
bool cutlass_fp8_grouped_device_ok();

// The K-block width of both scale kinds and the row-block height of SFB.
constexpr int64_t kFp8ScaleBlock = 128;

class CutlassFp8GroupedGemm {
 public:
  // max_problems: the most problems one run may carry.
  explicit CutlassFp8GroupedGemm(int max_problems);
  ~CutlassFp8GroupedGemm();
  CutlassFp8GroupedGemm(const CutlassFp8GroupedGemm&) = delete;
  CutlassFp8GroupedGemm& operator=(const CutlassFp8GroupedGemm&) = delete;

  // One launch for `problems` problems on `stream` (contract above). The
  // per-problem arrays are staged in pinned memory and copied on the stream; a
  // ring of slots, each guarded by an event after its launch, keeps the host
  // from rewriting a slot the device still reads.
  void run(int problems, const int32_t* m, int64_t n, int64_t k, const __nv_fp8_e4m3* const* a, int64_t lda,
           const float* const* sfa, int64_t ld_sfa, const __nv_fp8_e4m3* const* b, int64_t ldb,
           const float* const* sfb, int64_t ld_sfb, __nv_bfloat16* const* d, int64_t ldd, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pb
