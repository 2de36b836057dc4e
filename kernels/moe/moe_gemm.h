// Grouped expert GEMMs over the permuted rows (docs/design.md §2.1 "MoE FFN" step 3).
// Not a cut: two engines of the same product, the grouped one for the
// superstep and the per-expert loop as the measured comparison.
//
//   x [V, k] bf16, row stride ldx     permuted rows (moe_permute's xp); expert e
//                                     owns rows [offsets[e], offsets[e] + counts[e])
//   w [E, n, k] bf16, packed          expert e's weight w[e] [n, k] (PyTorch
//                                     linear layout: out features x in features)
//   bands                             1 or 2: w[e]'s rows split into `bands` row
//                                     bands of nb = n / bands rows each
//   y[j] [V, nb] bf16, row stride ldy band j's output (gate|up: y[0] = gate rows
//                                     0..I-1, y[1] = up rows I..2I-1, each a
//                                     contiguous [V, I] tensor SiTU reads as is)
//   y[j][r] = x[r] · w[e][j nb .. (j+1) nb)ᵀ for every row r of expert e:
//   f32 accumulate, beta 0, and cuBLAS rounds the f32 accumulator to bf16 once
//   (round to nearest even) - the same bits a land (cut 1) of an f32 partial
//   would give for the same accumulator, without the f32 round trip.
//
// Engines (all write bf16; none needs a landing after it):
//   grouped  ONE cublasGemmGroupedBatchedEx per call: one group per non-empty
//            expert (m_e = counts[e] differs per expert), group size = bands
//            (the bands of one expert share m, n, k and the strides), Atype =
//            Btype = Ctype = CUDA_R_16BF, CUBLAS_COMPUTE_32F, alpha 1, beta 0.
//            That type combination is one cuBLAS documents for the grouped API
//            (docs.nvidia.com/cuda/cublas "cublasGemmGroupedBatchedEx"; cuBLAS
//            12.5+, declared in this cuBLAS 13.1's cublas_api.h); bf16 A/B with
//            f32 C is NOT in its table (the H200 run's probe refused it). This
//            cuBLAS's cuBLASLt has no grouped matmul (cublasLt.h has none), so
//            the cuBLAS API is the one that exists. Whether cuBLAS takes the
//            call is still asked once per process (grouped_gemm_supported): a
//            16 x 16 x 16 probe; NOT_SUPPORTED / INVALID_VALUE = no.
//   loop     one cublasGemmEx per non-empty expert and band (gemm.h's
//            gemm_bf16out, same operand order), in expert order on the stream.
//   cutlass  ONE CUTLASS 3.x Hopper ptr-array grouped GEMM per call
//            (moe_gemm_cutlass.h: TMA + wgmma, warp specialized, persistent
//            grouped scheduler, sm_90a only), one problem per non-empty expert
//            and band; bf16 A/B/D, f32 accumulate, round to nearest even once.
//            Built only when cmake/cutlass.cmake finds the headers
//            (PB_HAVE_CUTLASS); cutlass_gemm_available() says whether this
//            build and device run it. Needs k, n / bands, ldx, ldy multiples
//            of 8 (TMA's 16-byte alignment).
// The fp8 engines (run_fp8, docs/design.md §12; codes and scales as fp8.h):
//   cutlass  ONE CUTLASS 4.2 grouped blockwise-scaled GEMM per call
//            (moe_gemm_fp8_cutlass.h); the superstep's.
//   loop     the A/B: ONE relayout of the activation scales into per-expert
//            MN-major blocks (moe_scales_by_expert), then one cuBLASLt
//            block-scaled GEMM (gemm_fp8.h) per non-empty expert and band, in
//            expert order on the stream. cuBLASLt takes m % 4 == 0 only, so
//            expert e's GEMM runs over m4 = round_up(counts[e], 4) rows from
//            its first: it reads up to 3 rows of codes past the expert's and
//            writes as many output rows past them. Inside the permuted rows
//            those belong to later experts, whose GEMMs rewrite them after
//            (expert order); past the last expert's rows, x and every y need
//            kMoeFp8LoopSlackRows readable and writable rows. The weights'
//            block scales are read with cuBLASLt's row stride round_up(k/128,
//            4), which is the compact K-major layout only when (k/128) % 4 ==
//            0: the engine refuses other k. Its scale blocks are the
//            caller's or the MoeGemm's (run_fp8). The superstep runs it under
//            moe_gemm: loop; `prefill-bench moe` times both engines.
// Bench-only experiment (not an engine, not in scenarios): run_grouped_chunks,
// the grouped cuBLAS call with every expert cut into chunk-row pieces, so that
// all full chunks form ONE group of identical (m, n, k) (cuBLAS batches best
// within a group); each expert's remainder is its own group. Exact: no padding
// rows, every output row written once.
// Empty experts launch nothing in either engine; rows of y that belong to no
// expert (>= V) and columns past nb of a padded ldy are not written.
//
// Group sizes live on the device (moe_permute_plan's counts). Both engines need
// them on the host: MoeGroupSizes copies counts [E] into pinned memory once per
// MoE layer (cudaMemcpyAsync + an event, enqueued right after the plan) and the
// host waits on that event only when it builds the GEMM's arguments, so the
// device keeps running the launches queued in between (lat_down, permute). The
// host-side offsets are the exclusive scan of those counts: the same numbers
// as the device's offsets (moe_route.h).
//
// The grouped engine's pointer arrays (A, B, C per problem, problems in group
// order: expert e's band 0, band 1, then the next non-empty expert) are built
// on the host and copied to the device (cudaMemcpyAsync from pinned memory,
// same stream) before the GEMM; a ring of staging slots, each guarded by an
// event recorded after its GEMM, keeps the host from rewriting a slot the
// device still reads.
//
// Row-major y = x·wᵀ is column-major yᵀ [nb, m] = w band [nb, k] (op T) · xᵀ [k, m] (op N).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gemm.h"

namespace pb {

enum class MoeGemmEngine { grouped, loop, cutlass };

constexpr int kMoeGemmMaxBands = 2;
// Rows past the last expert's that the fp8 loop engine reads (x) and writes (y).
constexpr int64_t kMoeFp8LoopSlackRows = 3;

// The fp8 loop engine's activation scales, per expert: expert e's block starts at
// float kbp * (offsets[e] + 3 e), kbp = round_up(kb, 4) (16-byte aligned), and
// holds its m4 = round_up(counts[e], 4) rows MN-major, scale (r, g) at
// g * m4 + r (cuBLASLt's VEC128 layout for that expert's GEMM); rows past
// counts[e] hold 0. floats: kbp * (rows + 3 * experts).
int64_t moe_fp8_loop_scale_floats(int64_t rows, int experts, int64_t kb);
// sx [rows, kb] f32, K-major (row stride kb) -> out in the layout above;
// offsets: the host's exclusive scan of counts, experts + 1 long (experts <=
// kMoeMaxExperts), offsets[experts] = rows. One launch.
void moe_scales_by_expert(const float* sx, int64_t kb, const int32_t* offsets, int experts, float* out,
                          cudaStream_t stream);

const char* moe_gemm_engine_name(MoeGemmEngine e);
// "grouped", "loop" or "cutlass"; throws pb::Error naming the allowed values otherwise.
MoeGemmEngine moe_gemm_engine_from_name(const char* name);

// Whether this process's cuBLAS runs cublasGemmGroupedBatchedEx with bf16
// A/B/C and f32 compute (asked once, then cached; needs a current device).
bool grouped_gemm_supported(const Blas& blas);

// Whether this build has the cutlass engine (PB_HAVE_CUTLASS) and the current
// device runs its sm_90a kernel.
bool cutlass_gemm_available();
// Whether this build has the cutlass fp8 engine (moe_gemm_fp8_cutlass.h) and
// the current device runs its sm_90a kernel.
bool cutlass_fp8_gemm_available();
// Whether `engine` runs here (grouped: grouped_gemm_supported; loop: always).
bool moe_gemm_engine_available(MoeGemmEngine engine, const Blas& blas);

class CutlassGroupedGemm;     // moe_gemm_cutlass.h
class CutlassFp8GroupedGemm;  // moe_gemm_fp8_cutlass.h

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
  int64_t ldx = 0, ldy = 0;  // 0 = packed (k, n / bands)
  int bands = 1;             // 1 .. kMoeGemmMaxBands; n must divide evenly
};

// Runs one of the engines. One object per call site: it owns the grouped
// engine's staging ring.
class MoeGemm {
 public:
  explicit MoeGemm(int experts);
  ~MoeGemm();
  MoeGemm(const MoeGemm&) = delete;
  MoeGemm& operator=(const MoeGemm&) = delete;

  // counts: host copy [E] (MoeGroupSizes::wait). y: s.bands outputs, band j
  // into y[j]. Launches on `stream`.
  void run(MoeGemmEngine engine, const Blas& blas, const int32_t* counts, const __nv_bfloat16* x,
           const __nv_bfloat16* w, __nv_bfloat16* const* y, MoeGemmShape s, cudaStream_t stream);

  // The fp8 expert GEMM (precision experts: fp8; docs/design.md §12): x's fp8
  // twin, codes [V, k] (row stride s.ldx) with one f32 scale per row and 128
  // columns, K-major, row stride k/128; the weights' codes [E, n, k] with their
  // 128x128 block scales [E, n/128, k/128] (K-major, no padding); y as run().
  // Engines cutlass and loop (the fp8 engines above; loop needs the slack rows
  // and (k/128) % 4 == 0); grouped is refused by name. loop_scales: the loop
  // engine's scale blocks, at least moe_fp8_loop_scale_floats(V, E, k/128)
  // floats, 16-byte aligned (the superstep's, from its memory plan); null
  // takes the MoeGemm's own, grown on demand (tests, benchmarks).
  void run_fp8(MoeGemmEngine engine, const Blas& blas, const int32_t* counts, const __nv_fp8_e4m3* xq,
               const float* sx, const __nv_fp8_e4m3* wq, const float* sw, __nv_bfloat16* const* y, MoeGemmShape s,
               cudaStream_t stream, float* loop_scales = nullptr);

  // The bench experiment (header above): one cublasGemmGroupedBatchedEx with
  // every expert's rows cut into `chunk`-row pieces (chunk >= 1).
  void run_grouped_chunks(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                          __nv_bfloat16* const* y, MoeGemmShape s, int chunk, cudaStream_t stream);

 private:
  struct Slot {
    void** host = nullptr;    // pinned [3 * P], P = capacity_: A, B, C pointers
    void** device = nullptr;  // [3 * P]
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  void run_grouped(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                   __nv_bfloat16* const* y, const MoeGemmShape& s, cudaStream_t stream);
  void run_loop(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                __nv_bfloat16* const* y, const MoeGemmShape& s, cudaStream_t stream);
  void run_cutlass(const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* const* y,
                   const MoeGemmShape& s, cudaStream_t stream);
  void run_fp8_loop(const Blas& blas, const int32_t* counts, const __nv_fp8_e4m3* xq, const float* sx,
                    const __nv_fp8_e4m3* wq, const float* sw, __nv_bfloat16* const* y, const MoeGemmShape& s,
                    cudaStream_t stream, float* scales);
  // Takes the next staging slot, grown (after the device is done with every
  // slot) to hold `problems` problems.
  Slot& take_slot(size_t problems);
  int experts_;
  size_t capacity_;  // problems per slot
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  std::unique_ptr<CutlassGroupedGemm> cutlass_;  // made on first use
  std::unique_ptr<CutlassFp8GroupedGemm> cutlass_fp8_;  // made on first fp8 use
  float* loop_scales_ = nullptr;  // the fp8 loop engine's scale blocks, grown on demand
  int64_t loop_scales_floats_ = 0;
};

// Σ over experts of 2·counts[e]·n·k (n: all bands together).
double moe_gemm_flops(const int32_t* counts, int experts, int64_t n, int64_t k);

}  // namespace pb
