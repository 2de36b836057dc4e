#include "moe_gemm.h"

#include <cublas_v2.h>

#include <cstring>
#include <string>

#include "check.h"

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

const char* moe_gemm_engine_name(MoeGemmEngine e) { return e == MoeGemmEngine::grouped ? "grouped" : "loop"; }

MoeGemmEngine moe_gemm_engine_from_name(const char* name) {
  const std::string n = name ? name : "";
  if (n == "grouped") return MoeGemmEngine::grouped;
  if (n == "loop") return MoeGemmEngine::loop;
  throw_error(__FILE__, __LINE__, "moe gemm engine '" + n + "' is not allowed; allowed values: grouped, loop");
}

bool grouped_gemm_supported(const Blas& blas) {
  static int known = -1;  // -1 not asked yet, 0 no, 1 yes
  if (known < 0) known = probe_grouped(blas) ? 1 : 0;
  return known == 1;
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

MoeGemm::MoeGemm(int experts) : experts_(experts), slots_(kStagingSlots) {
  PB_CHECK(experts >= 1, "MoeGemm: experts must be positive");
  for (Slot& s : slots_) {
    const size_t problems = size_t(kMoeGemmMaxBands) * size_t(experts);
    PB_CUDA(cudaMallocHost(&s.host, 3 * problems * sizeof(void*)));
    PB_CUDA(cudaMalloc(&s.device, 3 * problems * sizeof(void*)));
    PB_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
}

MoeGemm::~MoeGemm() {
  for (Slot& s : slots_) {
    if (s.done) PB_CUDA_NOTHROW(cudaEventDestroy(s.done));
    if (s.device) PB_CUDA_NOTHROW(cudaFree(s.device));
    if (s.host) PB_CUDA_NOTHROW(cudaFreeHost(s.host));
  }
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
  if (engine == MoeGemmEngine::grouped) run_grouped(blas, counts, x, w, y, s, stream);
  else run_loop(blas, counts, x, w, y, s, stream);
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
  Slot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % slots_.size();
  if (slot.used) PB_CUDA(cudaEventSynchronize(slot.done));  // the device is done reading this slot

  // Per non-empty expert: one group of `bands` problems. Column-major: m = nb
  // (weight rows of one band), n = rows of the expert, k; A = the band of w[e]
  // (op T), B = the expert's x rows (op N), C = its rows of y[band].
  const int E = s.experts;
  const int64_t nb = s.n / s.bands;
  const size_t P = size_t(kMoeGemmMaxBands) * size_t(E);  // each pointer array's capacity
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

double moe_gemm_flops(const int32_t* counts, int experts, int64_t n, int64_t k) {
  double f = 0;
  for (int e = 0; e < experts; ++e) f += gemm_flops(counts[e], n, k);
  return f;
}

}  // namespace pb
