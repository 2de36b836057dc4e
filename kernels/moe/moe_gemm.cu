#include "moe_gemm.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "check.h"
#include "gemm_fp8.h"
#include "launch.h"
#include "moe_gemm_cutlass.h"
#include "moe_route.h"
#if defined(PB_HAVE_CUTLASS)
#include "moe_gemm_fp8_cutlass.h"
#else
namespace pb {
class CutlassFp8GroupedGemm {};  // never made without CUTLASS (run_fp8 refuses first)
}  // namespace pb
#endif

namespace pb {

namespace {

constexpr size_t kStagingSlots = 4;

MoeGemmShape packed(MoeGemmShape s) {
  PB_CHECK(s.experts >= 1, "moe_gemm: experts must be positive");
  PB_CHECK(s.bands >= 1 && s.bands <= kMoeGemmMaxBands,
           "moe_gemm: bands must be 1 .. " + std::to_string(kMoeGemmMaxBands));
  PB_CHECK(s.n >= 0 && s.k >= 0, "moe_gemm: negative dimension");
  PB_CHECK(s.n % s.bands == 0, "moe_gemm: n does not split into `bands` equal row bands");
  const int64_t nb = s.n / s.bands;
  if (s.ldx == 0) s.ldx = s.k;
  if (s.ldy == 0) s.ldy = nb;
  PB_CHECK(s.ldx >= s.k && s.ldy >= nb, "moe_gemm: a row stride is below the row length");
  PB_CHECK(s.n <= INT32_MAX && s.k <= INT32_MAX && s.ldx <= INT32_MAX && s.ldy <= INT32_MAX,
           "moe_gemm: a dimension or stride exceeds cuBLAS's 32-bit range");
  return s;
}

// counts must be non-negative and each fit cuBLAS's int m.
void check_counts(const int32_t* counts, int experts) {
  PB_CHECK(counts != nullptr, "moe_gemm: counts is null");
  for (int e = 0; e < experts; ++e)
    PB_CHECK(counts[e] >= 0, "moe_gemm: counts[" + std::to_string(e) + "] is negative");
}

// The experts' row offsets, by value (4100 bytes of kernel parameters: CUDA
// 12.1+ takes up to 32764).
struct ExpertOffsets {
  int32_t v[kMoeMaxExperts + 1];
};

// Where expert e's scale block starts, in floats (moe_gemm.h): kb rounded up
// to 4 (16-byte starts) times (first_row + 3 e). With first_row = rows and
// e = experts, the floats of all blocks.
__host__ __device__ inline int64_t scale_block_start(int64_t kb, int64_t first_row, int64_t e) {
  return (kb + 3) / 4 * 4 * (first_row + 3 * e);
}

// One thread per (row, group), rows fastest (the writes of a group are
// contiguous); the offsets are searched in shared memory. A row that ends its
// expert also zeroes the expert's padding rows of its group.
__global__ void scales_by_expert_kernel(const float* __restrict__ sx, int64_t kb, int experts,
                                        ExpertOffsets offsets, float* __restrict__ out) {
  __shared__ int32_t off[kMoeMaxExperts + 1];
  for (int i = threadIdx.x; i <= experts; i += blockDim.x) off[i] = offsets.v[i];
  __syncthreads();
  const int64_t rows = off[experts], total = rows * kb;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i % rows, g = i / rows;
    int lo = 0, hi = experts - 1;  // the last e with off[e] <= r (empty experts share an offset)
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (off[mid] <= r) lo = mid;
      else hi = mid - 1;
    }
    const int64_t first = off[lo], count = off[lo + 1] - first, m4 = act_scale_ld(count);
    float* block = out + scale_block_start(kb, first, lo) + g * m4;
    block[r - first] = sx[r * kb + g];
    if (r - first == count - 1)
      for (int64_t p = count; p < m4; ++p) block[p] = 0.0f;
  }
}

// One 16 x 16 x 16 grouped call, bf16 A/B/C, f32 compute; the status says
// whether this cuBLAS takes it.
bool probe_grouped(const Blas& blas) {
  constexpr int d = 16;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void** ptrs = nullptr;
  PB_CUDA(cudaMalloc(&a, d * d * 2));
  PB_CUDA(cudaMalloc(&b, d * d * 2));
  PB_CUDA(cudaMalloc(&c, d * d * 2));
  PB_CUDA(cudaMalloc(&ptrs, 3 * sizeof(void*)));
  PB_CUDA(cudaMemset(a, 0, d * d * 2));
  PB_CUDA(cudaMemset(b, 0, d * d * 2));
  void* host[3] = {a, b, c};
  PB_CUDA(cudaMemcpy(ptrs, host, sizeof(host), cudaMemcpyHostToDevice));
  blas.bind(nullptr);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int m = d, n = d, k = d, ld = d, group = 1;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status = cublasGemmGroupedBatchedEx(
      static_cast<cublasHandle_t>(blas.handle()), &ta, &tb, &m, &n, &k, &alpha, (const void* const*)ptrs,
      CUDA_R_16BF, &ld, (const void* const*)(ptrs + 1), CUDA_R_16BF, &ld, &beta, (void* const*)(ptrs + 2),
      CUDA_R_16BF, &ld, 1, &group, CUBLAS_COMPUTE_32F);
  PB_CUDA(cudaDeviceSynchronize());
  PB_CUDA(cudaFree(ptrs));
  PB_CUDA(cudaFree(c));
  PB_CUDA(cudaFree(b));
  PB_CUDA(cudaFree(a));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) return false;
  PB_CUBLAS_CALL(status);
  return true;
}

}  // namespace

const char* moe_gemm_engine_name(MoeGemmEngine e) {
  switch (e) {
    case MoeGemmEngine::grouped: return "grouped";
    case MoeGemmEngine::loop: return "loop";
    case MoeGemmEngine::cutlass: return "cutlass";
  }
  return "?";
}

MoeGemmEngine moe_gemm_engine_from_name(const char* name) {
  const std::string n = name ? name : "";
  if (n == "grouped") return MoeGemmEngine::grouped;
  if (n == "loop") return MoeGemmEngine::loop;
  if (n == "cutlass") return MoeGemmEngine::cutlass;
  // auto: the fastest grouped engine this build and device have (H200: cutlass
  // 0.78 of the GEMM ceiling, cuBLAS grouped 0.36), else the per-expert loop.
  if (n == "auto") return cutlass_gemm_available() ? MoeGemmEngine::cutlass : MoeGemmEngine::loop;
  throw_error(__FILE__, __LINE__,
              "moe gemm engine '" + n + "' is not allowed; allowed values: auto, grouped, loop, cutlass");
}

#if !defined(PB_HAVE_CUTLASS)
// This build has no CUTLASS headers (cmake/cutlass.cmake): the engine refuses.
bool cutlass_grouped_device_ok() { return false; }
struct CutlassGroupedGemm::Impl {};
CutlassGroupedGemm::CutlassGroupedGemm(int) {
  throw_error(__FILE__, __LINE__,
              "moe_gemm cutlass: this build has no CUTLASS (run scripts/setup.sh, or carry .deps/, and rebuild)");
}
CutlassGroupedGemm::~CutlassGroupedGemm() = default;
void CutlassGroupedGemm::run(int, const int32_t*, int64_t, int64_t, const __nv_bfloat16* const*, int64_t,
                             const __nv_bfloat16* const*, int64_t, __nv_bfloat16* const*, int64_t, cudaStream_t) {
  throw_error(__FILE__, __LINE__, "moe_gemm cutlass: this build has no CUTLASS");
}
#endif

bool cutlass_gemm_available() {
#if defined(PB_HAVE_CUTLASS)
  return cutlass_grouped_device_ok();
#else
  return false;
#endif
}

bool cutlass_fp8_gemm_available() {
#if defined(PB_HAVE_CUTLASS)
  return cutlass_fp8_grouped_device_ok();
#else
  return false;
#endif
}

bool moe_gemm_engine_available(MoeGemmEngine engine, const Blas& blas) {
  switch (engine) {
    case MoeGemmEngine::grouped: return grouped_gemm_supported(blas);
    case MoeGemmEngine::loop: return true;
    case MoeGemmEngine::cutlass: return cutlass_gemm_available();
  }
  return false;
}

bool grouped_gemm_supported(const Blas& blas) {
  static int known = -1;  // -1 not asked yet, 0 no, 1 yes
  if (known < 0) known = probe_grouped(blas) ? 1 : 0;
  return known == 1;
}

// ---- The fp8 loop engine's scale blocks ----

int64_t moe_fp8_loop_scale_floats(int64_t rows, int experts, int64_t kb) {
  return scale_block_start(kb, rows, experts);
}

void moe_scales_by_expert(const float* sx, int64_t kb, const int32_t* offsets, int experts, float* out,
                          cudaStream_t stream) {
  PB_CHECK(experts >= 1 && experts <= kMoeMaxExperts,
           "moe_scales_by_expert: experts must be 1 .. " + std::to_string(kMoeMaxExperts) + ", got " +
               std::to_string(experts));
  PB_CHECK(kb >= 1, "moe_scales_by_expert: kb must be positive, got " + std::to_string(kb));
  PB_CHECK(offsets != nullptr && offsets[0] == 0, "moe_scales_by_expert: offsets must start at 0");
  ExpertOffsets o{};
  for (int e = 0; e <= experts; ++e) {
    PB_CHECK(e == 0 || offsets[e] >= offsets[e - 1],
             "moe_scales_by_expert: offsets must not decrease (offsets[" + std::to_string(e) + "])");
    o.v[e] = offsets[e];
  }
  const int64_t rows = offsets[experts];
  if (rows == 0) return;
  PB_CHECK(sx != nullptr && out != nullptr, "moe_scales_by_expert: null scales");
  PB_CHECK(aligned_to(out, 16), "moe_scales_by_expert: out must be 16-byte aligned (cuBLASLt's scale blocks)");
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((rows * kb + kThreads - 1) / kThreads, 4096);
  scales_by_expert_kernel<<<int(blocks), kThreads, 0, stream>>>(sx, kb, experts, o, out);
  PB_CUDA(cudaGetLastError());
}

// ---- MoeGroupSizes ----

MoeGroupSizes::MoeGroupSizes(int experts) : experts_(experts) {
  PB_CHECK(experts >= 1, "MoeGroupSizes: experts must be positive");
  PB_CUDA(cudaMallocHost(&host_, size_t(experts) * sizeof(int32_t)));
  PB_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
}

MoeGroupSizes::~MoeGroupSizes() {
  if (ready_) PB_CUDA_NOTHROW(cudaEventDestroy(ready_));
  if (host_) PB_CUDA_NOTHROW(cudaFreeHost(host_));
}

void MoeGroupSizes::fetch(const int32_t* device_counts, cudaStream_t stream) {
  PB_CHECK(device_counts != nullptr, "MoeGroupSizes::fetch: counts is null");
  PB_CUDA(cudaMemcpyAsync(host_, device_counts, size_t(experts_) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                          stream));
  PB_CUDA(cudaEventRecord(ready_, stream));
  fetched_ = true;
}

const int32_t* MoeGroupSizes::wait() {
  PB_CHECK(fetched_, "MoeGroupSizes::wait: nothing was fetched");
  PB_CUDA(cudaEventSynchronize(ready_));
  return host_;
}

// ---- MoeGemm ----

MoeGemm::MoeGemm(int experts)
    : experts_(experts), capacity_(size_t(kMoeGemmMaxBands) * size_t(experts)), slots_(kStagingSlots) {
  PB_CHECK(experts >= 1, "MoeGemm: experts must be positive");
  for (Slot& s : slots_) {
    PB_CUDA(cudaMallocHost(&s.host, 3 * capacity_ * sizeof(void*)));
    PB_CUDA(cudaMalloc(&s.device, 3 * capacity_ * sizeof(void*)));
    PB_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
}

MoeGemm::~MoeGemm() {
  if (loop_scales_) PB_CUDA_NOTHROW(cudaFree(loop_scales_));
  for (Slot& s : slots_) {
    if (s.done) PB_CUDA_NOTHROW(cudaEventDestroy(s.done));
    if (s.device) PB_CUDA_NOTHROW(cudaFree(s.device));
    if (s.host) PB_CUDA_NOTHROW(cudaFreeHost(s.host));
  }
}

MoeGemm::Slot& MoeGemm::take_slot(size_t problems) {
  if (problems > capacity_) {  // only the chunked experiment grows the ring
    for (Slot& s : slots_) {
      if (s.used) PB_CUDA(cudaEventSynchronize(s.done));
      s.used = false;
      PB_CUDA(cudaFree(s.device));
      PB_CUDA(cudaFreeHost(s.host));
      s.device = nullptr;
      s.host = nullptr;
    }
    capacity_ = problems;
    for (Slot& s : slots_) {
      PB_CUDA(cudaMallocHost(&s.host, 3 * capacity_ * sizeof(void*)));
      PB_CUDA(cudaMalloc(&s.device, 3 * capacity_ * sizeof(void*)));
    }
  }
  Slot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % slots_.size();
  if (slot.used) PB_CUDA(cudaEventSynchronize(slot.done));  // the device is done reading this slot
  return slot;
}

void MoeGemm::run(MoeGemmEngine engine, const Blas& blas, const int32_t* counts, const __nv_bfloat16* x,
                  const __nv_bfloat16* w, __nv_bfloat16* const* y, MoeGemmShape s, cudaStream_t stream) {
  s = packed(s);
  PB_CHECK(s.experts == experts_, "moe_gemm: shape's experts differ from this MoeGemm's");
  check_counts(counts, s.experts);
  int64_t rows = 0;
  for (int e = 0; e < s.experts; ++e) rows += counts[e];
  if (rows == 0 || s.n == 0) return;
  PB_CHECK(x != nullptr && w != nullptr && y != nullptr, "moe_gemm: null operand");
  for (int j = 0; j < s.bands; ++j) PB_CHECK(y[j] != nullptr, "moe_gemm: null output band");
  switch (engine) {
    case MoeGemmEngine::grouped: run_grouped(blas, counts, x, w, y, s, stream); break;
    case MoeGemmEngine::loop: run_loop(blas, counts, x, w, y, s, stream); break;
    case MoeGemmEngine::cutlass: run_cutlass(counts, x, w, y, s, stream); break;
  }
}

void MoeGemm::run_cutlass(const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                          __nv_bfloat16* const* y, const MoeGemmShape& s, cudaStream_t stream) {
  PB_CHECK(cutlass_gemm_available(),
           "moe_gemm cutlass: not available here (needs a build with CUTLASS and an sm_90 device; use grouped or "
           "loop)");
  if (!cutlass_) cutlass_ = std::make_unique<CutlassGroupedGemm>(kMoeGemmMaxBands * experts_);
  // One problem per non-empty expert and band, expert order, bands inside.
  const int64_t nb = s.n / s.bands;
  std::vector<int32_t> m;
  std::vector<const __nv_bfloat16*> a, b;
  std::vector<__nv_bfloat16*> d;
  int64_t row = 0;
  for (int e = 0; e < s.experts; ++e) {
    if (counts[e] == 0) continue;
    for (int j = 0; j < s.bands; ++j) {
      m.push_back(counts[e]);
      a.push_back(x + row * s.ldx);
      b.push_back(w + (int64_t(e) * s.n + j * nb) * s.k);
      d.push_back(y[j] + row * s.ldy);
    }
    row += counts[e];
  }
  cutlass_->run(int(m.size()), m.data(), nb, s.k, a.data(), s.ldx, b.data(), s.k, d.data(), s.ldy, stream);
}

void MoeGemm::run_fp8(MoeGemmEngine engine, const Blas& blas, const int32_t* counts, const __nv_fp8_e4m3* xq,
                      const float* sx, const __nv_fp8_e4m3* wq, const float* sw, __nv_bfloat16* const* y,
                      MoeGemmShape s, cudaStream_t stream, float* loop_scales) {
  s = packed(s);
  PB_CHECK(s.experts == experts_, "moe_gemm fp8: shape's experts differ from this MoeGemm's");
  PB_CHECK(engine != MoeGemmEngine::grouped,
           std::string("moe_gemm fp8: the ") + moe_gemm_engine_name(engine) +
               " engine has no fp8 form; allowed with fp8 experts: cutlass (moe_gemm: cutlass or auto), loop");
  PB_CHECK(engine == MoeGemmEngine::loop || cutlass_fp8_gemm_available(),
           "moe_gemm fp8: the cutlass fp8 engine is not available here (needs a build with CUTLASS and an sm_90 "
           "device)");
  check_counts(counts, s.experts);
  int64_t rows = 0;
  for (int e = 0; e < s.experts; ++e) rows += counts[e];
  if (rows == 0 || s.n == 0) return;
  PB_CHECK(xq && sx && wq && sw && y, "moe_gemm fp8: null operand");
  for (int j = 0; j < s.bands; ++j) PB_CHECK(y[j] != nullptr, "moe_gemm fp8: null output band");
  if (engine == MoeGemmEngine::loop) {
    run_fp8_loop(blas, counts, xq, sx, wq, sw, y, s, stream, loop_scales);
    return;
  }
#if defined(PB_HAVE_CUTLASS)
  if (!cutlass_fp8_) cutlass_fp8_ = std::make_unique<CutlassFp8GroupedGemm>(kMoeGemmMaxBands * experts_);
  const int64_t nb = s.n / s.bands, kb = s.k / 128;
  std::vector<int32_t> m;
  std::vector<const __nv_fp8_e4m3*> a, b;
  std::vector<const float*> sa, sb;
  std::vector<__nv_bfloat16*> d;
  int64_t row = 0;
  for (int e = 0; e < s.experts; ++e) {
    if (counts[e] == 0) continue;
    for (int j = 0; j < s.bands; ++j) {
      const int64_t w_row = int64_t(e) * s.n + j * nb;  // of the [E * n, k] weight rows
      m.push_back(counts[e]);
      a.push_back(xq + row * s.ldx);
      sa.push_back(sx + row * kb);
      b.push_back(wq + w_row * s.k);
      sb.push_back(sw + w_row / 128 * kb);
      d.push_back(y[j] + row * s.ldy);
    }
    row += counts[e];
  }
  cutlass_fp8_->run(int(m.size()), m.data(), nb, s.k, a.data(), s.ldx, sa.data(), kb, b.data(), s.k, sb.data(), kb,
                    d.data(), s.ldy, stream);
#else
  (void)stream;
#endif
}

void MoeGemm::run_fp8_loop(const Blas& blas, const int32_t* counts, const __nv_fp8_e4m3* xq, const float* sx,
                           const __nv_fp8_e4m3* wq, const float* sw, __nv_bfloat16* const* y, const MoeGemmShape& s,
                           cudaStream_t stream, float* scales) {
  const int64_t nb = s.n / s.bands, kb = s.k / kFp8Group;
  PB_CHECK(s.k % kFp8Group == 0 && kb % 4 == 0,
           "moe_gemm fp8 loop: k / 128 must be a multiple of 4 (cuBLASLt reads the weights' block scales with "
           "row stride round_up(k / 128, 4), the experts' are compact), got k = " + std::to_string(s.k));
  PB_CHECK(nb % kFp8Group == 0, "moe_gemm fp8 loop: n / bands must be a multiple of 128 (whole weight "
                                     "scale blocks), got " + std::to_string(nb));
  std::vector<int32_t> offsets(size_t(s.experts) + 1, 0);
  for (int e = 0; e < s.experts; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + counts[e];
  if (!scales) {
    const int64_t floats = moe_fp8_loop_scale_floats(offsets.back(), s.experts, kb);
    if (floats > loop_scales_floats_) {
      if (loop_scales_) PB_CUDA(cudaFree(loop_scales_));  // synchronizes: no GEMM still reads it
      loop_scales_ = nullptr;
      PB_CUDA(cudaMalloc(&loop_scales_, size_t(floats) * sizeof(float)));
      loop_scales_floats_ = floats;
    }
    scales = loop_scales_;
  }
  moe_scales_by_expert(sx, kb, offsets.data(), s.experts, scales, stream);
  Fp8Gemm& gemm = blas.fp8();
  for (int e = 0; e < s.experts; ++e) {
    if (counts[e] == 0) continue;
    const int64_t row = offsets[size_t(e)];
    Fp8GemmDims d;
    d.m = act_scale_ld(counts[e]);  // cuBLASLt's multiple of 4
    d.n = nb;
    d.k = s.k;
    d.ldx = s.ldx;
    d.ldw = s.k;
    d.ldy = s.ldy;
    const float* block = scales + scale_block_start(kb, row, e);
    for (int j = 0; j < s.bands; ++j) {
      const int64_t w_row = int64_t(e) * s.n + j * nb;  // of the [E * n, k] weight rows
      gemm_fp8_bf16out(gemm, xq + row * s.ldx, block, wq + w_row * s.k, sw + w_row / kFp8Group * kb,
                       y[j] + row * s.ldy, d, stream);
    }
  }
}

void MoeGemm::run_loop(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       __nv_bfloat16* const* y, const MoeGemmShape& s, cudaStream_t stream) {
  const int64_t nb = s.n / s.bands;
  int64_t row = 0;
  for (int e = 0; e < s.experts; ++e) {
    const int64_t m = counts[e];
    if (m == 0) continue;
    GemmDims d;
    d.m = m;
    d.n = nb;
    d.k = s.k;
    d.ldx = s.ldx;
    d.ldw = s.k;
    d.ldy = s.ldy;
    for (int j = 0; j < s.bands; ++j)
      gemm_bf16out(blas, x + row * s.ldx, w + (int64_t(e) * s.n + j * nb) * s.k, y[j] + row * s.ldy, d, stream);
    row += m;
  }
}

void MoeGemm::run_grouped(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x,
                          const __nv_bfloat16* w, __nv_bfloat16* const* y, const MoeGemmShape& s,
                          cudaStream_t stream) {
  PB_CHECK(grouped_gemm_supported(blas),
           "moe_gemm grouped: this cuBLAS does not run cublasGemmGroupedBatchedEx with bf16 A/B/C and f32 "
           "compute (use the loop engine)");
  Slot& slot = take_slot(size_t(s.bands) * size_t(s.experts));

  // Per non-empty expert: one group of `bands` problems. Column-major: m = nb
  // (weight rows of one band), n = rows of the expert, k; A = the band of w[e]
  // (op T), B = the expert's x rows (op N), C = its rows of y[band].
  const int E = s.experts;
  const int64_t nb = s.n / s.bands;
  const size_t P = capacity_;  // each pointer array's capacity
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m_arr, n_arr, k_arr, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  void** a_ptr = slot.host;
  void** b_ptr = slot.host + P;
  void** c_ptr = slot.host + 2 * P;
  int groups = 0;
  size_t problems = 0;
  int64_t row = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t rows = counts[e];
    if (rows == 0) continue;
    ta.push_back(CUBLAS_OP_T);
    tb.push_back(CUBLAS_OP_N);
    m_arr.push_back(int(nb));
    n_arr.push_back(int(rows));
    k_arr.push_back(int(s.k));
    lda.push_back(int(s.k));
    ldb.push_back(int(s.ldx));
    ldc.push_back(int(s.ldy));
    size.push_back(s.bands);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
    for (int j = 0; j < s.bands; ++j, ++problems) {
      a_ptr[problems] = const_cast<__nv_bfloat16*>(w + (int64_t(e) * s.n + j * nb) * s.k);
      b_ptr[problems] = const_cast<__nv_bfloat16*>(x + row * s.ldx);
      c_ptr[problems] = y[j] + row * s.ldy;
    }
    ++groups;
    row += rows;
  }
  // The three packed arrays of `problems` pointers each, at slot offsets 0, P, 2P.
  PB_CUDA(cudaMemcpyAsync(slot.device, slot.host, 3 * P * sizeof(void*), cudaMemcpyHostToDevice, stream));
  blas.bind(stream);
  PB_CUBLAS_CALL(cublasGemmGroupedBatchedEx(
      static_cast<cublasHandle_t>(blas.handle()), ta.data(), tb.data(), m_arr.data(), n_arr.data(), k_arr.data(),
      alpha.data(), (const void* const*)slot.device, CUDA_R_16BF, lda.data(),
      (const void* const*)(slot.device + P), CUDA_R_16BF, ldb.data(), beta.data(),
      (void* const*)(slot.device + 2 * P), CUDA_R_16BF, ldc.data(), groups, size.data(), CUBLAS_COMPUTE_32F));
  PB_CUDA(cudaEventRecord(slot.done, stream));
  slot.used = true;
}

void MoeGemm::run_grouped_chunks(const Blas& blas, const int32_t* counts, const __nv_bfloat16* x,
                                 const __nv_bfloat16* w, __nv_bfloat16* const* y, MoeGemmShape s, int chunk,
                                 cudaStream_t stream) {
  s = packed(s);
  PB_CHECK(s.experts == experts_, "moe_gemm: shape's experts differ from this MoeGemm's");
  PB_CHECK(chunk >= 1, "moe_gemm chunks: chunk must be positive");
  check_counts(counts, s.experts);
  PB_CHECK(grouped_gemm_supported(blas), "moe_gemm chunks: this cuBLAS refuses the grouped call");
  const int E = s.experts;
  const int64_t nb = s.n / s.bands;
  int64_t full = 0, rem = 0;  // full chunks, non-empty remainders
  for (int e = 0; e < E; ++e) {
    full += counts[e] / chunk;
    rem += counts[e] % chunk != 0;
  }
  if (full + rem == 0 || s.n == 0) return;
  Slot& slot = take_slot(size_t(s.bands) * size_t(full + rem));
  const size_t P = capacity_;
  void** a_ptr = slot.host;
  void** b_ptr = slot.host + P;
  void** c_ptr = slot.host + 2 * P;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m_arr, n_arr, k_arr, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  auto group = [&](int rows, int problems) {
    ta.push_back(CUBLAS_OP_T);
    tb.push_back(CUBLAS_OP_N);
    m_arr.push_back(int(nb));
    n_arr.push_back(rows);
    k_arr.push_back(int(s.k));
    lda.push_back(int(s.k));
    ldb.push_back(int(s.ldx));
    ldc.push_back(int(s.ldy));
    size.push_back(problems);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
  };
  size_t problems = 0;
  auto add = [&](int e, int64_t row) {
    for (int j = 0; j < s.bands; ++j, ++problems) {
      a_ptr[problems] = const_cast<__nv_bfloat16*>(w + (int64_t(e) * s.n + j * nb) * s.k);
      b_ptr[problems] = const_cast<__nv_bfloat16*>(x + row * s.ldx);
      c_ptr[problems] = y[j] + row * s.ldy;
    }
  };
  // Group 0: every full chunk of every expert; then one group per remainder.
  int64_t row = 0;
  if (full > 0) {
    for (int e = 0; e < E; ++e) {
      for (int64_t c = 0; c < counts[e] / chunk; ++c) add(e, row + c * chunk);
      row += counts[e];
    }
    group(chunk, int(full * s.bands));
  }
  row = 0;
  for (int e = 0; e < E; ++e) {
    const int r = counts[e] % chunk;
    if (r != 0) {
      add(e, row + counts[e] - r);
      group(r, s.bands);
    }
    row += counts[e];
  }
  PB_CUDA(cudaMemcpyAsync(slot.device, slot.host, 3 * P * sizeof(void*), cudaMemcpyHostToDevice, stream));
  blas.bind(stream);
  PB_CUBLAS_CALL(cublasGemmGroupedBatchedEx(
      static_cast<cublasHandle_t>(blas.handle()), ta.data(), tb.data(), m_arr.data(), n_arr.data(), k_arr.data(),
      alpha.data(), (const void* const*)slot.device, CUDA_R_16BF, lda.data(),
      (const void* const*)(slot.device + P), CUDA_R_16BF, ldb.data(), beta.data(),
      (void* const*)(slot.device + 2 * P), CUDA_R_16BF, ldc.data(), int(size.size()), size.data(),
      CUBLAS_COMPUTE_32F));
  PB_CUDA(cudaEventRecord(slot.done, stream));
  slot.used = true;
}

double moe_gemm_flops(const int32_t* counts, int experts, int64_t n, int64_t k) {
  double f = 0;
  for (int e = 0; e < experts; ++e) f += gemm_flops(counts[e], n, k);
  return f;
}

}  // namespace pb
