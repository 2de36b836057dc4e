// Grouped expert GEMMs over the permuted rows (DESIGN.md §2.1 "MoE FFN" step 3).
// Not a cut: two engines of the same product, the grouped one for the
// superstep and the per-expert loop as the measured comparison.
//
//   x [V, k] bf16, row stride ldx     permuted rows (moe_permute's xp); expert e
//                                     owns rows [offsets[e], offsets[e] + counts[e])
//   w [E, n, k] bf16, packed          expert e's weight w[e] [n, k] (PyTorch
//                                     linear layout: out features x in features)
//   y [V, n] f32 or bf16, row stride ldy
//   y[r] = x[r] · w[e]ᵀ for every row r of expert e (f32 accumulate, beta 0)
//
// Engines:
//   grouped  one cublasGemmGroupedBatchedEx: one group of size 1 per non-empty
//            expert (m_e = counts[e] differs per expert), CUBLAS_COMPUTE_32F,
//            bf16 A/B, f32 or bf16 C. The installed cuBLAS (13.x, CUDA 13.0
//            here and on the device) declares it in cublas_api.h; its cuBLASLt
//            has no grouped matmul in this release (cublasLt.h has none), so
//            the cuBLAS API is the one that exists. Whether this cuBLAS takes a
//            given C type is asked once per process (grouped_gemm_supported):
//            a 16 x 16 x 16 probe call; NOT_SUPPORTED / INVALID_VALUE = no.
//   loop     one cublasGemmEx per non-empty expert (gemm.h's call, same operand
//            order), in expert order on the same stream.
// Empty experts launch nothing in either engine; rows of y that belong to no
// expert (>= V) are not written.
//
// Group sizes live on the device (moe_permute_plan's counts). Both engines need
// them on the host: MoeGroupSizes copies counts [E] into pinned memory once per
// MoE layer (cudaMemcpyAsync + an event, enqueued right after the plan) and the
// host waits on that event only when it builds the GEMM's arguments, so the
// device keeps running the launches queued in between (lat_down, permute). The
// host-side offsets are the exclusive scan of those counts: the same numbers
// as the device's offsets (moe_route.h).
//
// The grouped engine's pointer arrays (A, B, C per group) are built on the host
// and copied to the device (cudaMemcpyAsync from pinned memory, same stream)
// before the GEMM; a ring of staging slots, each guarded by an event recorded
// after its GEMM, keeps the host from rewriting a slot the device still reads.
//
// Row-major y = x·wᵀ is column-major yᵀ [n, m] = w [n, k] (op T) · xᵀ [k, m] (op N).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gemm.h"

namespace pb {

enum class MoeGemmEngine { grouped, loop };
enum class MoeGemmOut { f32, bf16 };

const char* moe_gemm_engine_name(MoeGemmEngine e);
// "grouped" or "loop"; throws pb::Error naming the allowed values otherwise.
MoeGemmEngine moe_gemm_engine_from_name(const char* name);

// Whether this process's cuBLAS runs cublasGemmGroupedBatchedEx for bf16 A/B
// with the given C type (asked once, then cached; needs a current device).
bool grouped_gemm_supported(const Blas& blas, MoeGemmOut out);

// counts [E] int32 on the device -> pinned host copy.
class MoeGroupSizes {
 public:
  explicit MoeGroupSizes(int experts);
  ~MoeGroupSizes();
  MoeGroupSizes(const MoeGroupSizes&) = delete;
  MoeGroupSizes& operator=(const MoeGroupSizes&) = delete;

  // Enqueues the copy of counts [E] on `stream` and an event after it.
  void fetch(const int32_t* device_counts, cudaStream_t stream);
  // Waits for the last fetch; returns counts [E] on the host.
  const int32_t* wait();
  int experts() const { return experts_; }

 private:
  int experts_;
  int32_t* host_ = nullptr;  // pinned [E]
  cudaEvent_t ready_ = nullptr;
  bool fetched_ = false;
};

struct MoeGemmShape {
  int experts = 0;      // E
  int64_t n = 0, k = 0;  // every expert's weight is [n, k]
  int64_t ldx = 0, ldy = 0;  // 0 = packed (k, n)
};

// Runs one of the two engines. One object per call site: it owns the grouped
// engine's staging ring.
class MoeGemm {
 public:
  explicit MoeGemm(int experts);
  ~MoeGemm();
  MoeGemm(const MoeGemm&) = delete;
  MoeGemm& operator=(const MoeGemm&) = delete;

  // counts: host copy [E] (MoeGroupSizes::wait). y is f32* for MoeGemmOut::f32,
  // __nv_bfloat16* for bf16. Launches on `stream`.
  void run(MoeGemmEngine engine, const Blas& blas, const int32_t* counts, const __nv_bfloat16* x,
           const __nv_bfloat16* w, void* y, MoeGemmOut out, MoeGemmShape s, cudaStream_t stream);

 private:
  struct Slot {
    void** host = nullptr;    // pinned [3 * E]: A, B, C pointers
    void** device = nullptr;  // [3 * E]
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  void run_grouped(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                   void* y, MoeGemmOut out, const MoeGemmShape& s, cudaStream_t stream);
  void run_loop(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                void* y, MoeGemmOut out, const MoeGemmShape& s, cudaStream_t stream);
  int experts_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
};

// Σ over experts of 2·counts[e]·n·k.
double moe_gemm_flops(const int32_t* counts, int experts, int64_t n, int64_t k);

}  // namespace pb
