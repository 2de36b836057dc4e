// The cutlass engine of the expert GEMMs (moe_gemm.h): ONE CUTLASS 3.x Hopper
// grouped GEMM, the ptr-array kernel (TMA loads and stores, wgmma, warp
// specialized: one producer warp group, two cooperative consumer warp groups,
// a persistent grouped tile scheduler), compiled for sm_90a only, from the
// header-only CUTLASS/CuTe in .deps/cutlass (cmake/cutlass.cmake). One
// instantiation:
//   problem i:  d_i [m_i, n] bf16 (row stride ldd) = a_i [m_i, k] bf16 (row
//               stride lda) · b_i [n, k]ᵀ bf16 (row stride ldb, PyTorch linear
//               layout), f32 accumulate, alpha 1, no source (beta 0), one
//               round to nearest even into bf16 in the epilogue.
//   tile 128 (m: the expert's rows) x 256 (n) x 64 (k), cluster 1 x 2 (the
//   two CTAs of a cluster share the activation tile by TMA multicast).
// Contract (checked before the launch): n, k, lda, ldb, ldd multiples of 8
// (16-byte TMA alignment), every pointer 16-byte aligned, m_i >= 1. Rows past
// m_i are neither read into the result nor written (TMA bounds per problem).
// Only moe_gemm.cu includes this file, and only when PB_HAVE_CUTLASS is set.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

namespace pb {

// Whether the current device runs the sm_90a kernel (compute capability 9.0).
bool cutlass_grouped_device_ok();

class CutlassGroupedGemm {
 public:
  // max_problems: the most problems one run may carry.
  explicit CutlassGroupedGemm(int max_problems);
  ~CutlassGroupedGemm();
  CutlassGroupedGemm(const CutlassGroupedGemm&) = delete;
  CutlassGroupedGemm& operator=(const CutlassGroupedGemm&) = delete;

  // One launch for `problems` problems (1 .. max_problems) on `stream`. The
  // problem arrays are staged in pinned memory and copied on the stream; a ring
  // of slots, each guarded by an event after its launch, keeps the host from
  // rewriting a slot the device still reads.
  void run(int problems, const int32_t* m, int64_t n, int64_t k, const __nv_bfloat16* const* a, int64_t lda,
           const __nv_bfloat16* const* b, int64_t ldb, __nv_bfloat16* const* d, int64_t ldd, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pb
