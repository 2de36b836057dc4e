#include "gemm.h"

#include <cublas_v2.h>

#include "check.h"
#include "gemm_fp8.h"

namespace pb {

void check_cublas(int status, const char* expr, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_error(file, line, std::string(expr) + ": " + cublasGetStatusName(cublasStatus_t(status)) + " (" +
                                cublasGetStatusString(cublasStatus_t(status)) + ")");
}

Blas::Blas() {
  cublasHandle_t h = nullptr;
  PB_CUBLAS_CALL(cublasCreate(&h));
  handle_ = h;
}

Blas::~Blas() {
  fp8_.reset();
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

Fp8Gemm& Blas::fp8() const {
  if (!fp8_) fp8_ = std::make_unique<Fp8Gemm>();
  return *fp8_;
}

void Blas::bind(cudaStream_t stream) const {
  PB_CUBLAS_CALL(cublasSetStream(static_cast<cublasHandle_t>(handle_), stream));
}

namespace {

GemmDims packed(GemmDims d) {
  if (d.ldx == 0) d.ldx = d.k;
  if (d.ldw == 0) d.ldw = d.k;
  if (d.ldy == 0) d.ldy = d.n;
  PB_CHECK(d.m >= 0 && d.n >= 0 && d.k >= 0, "gemm: negative dimension");
  PB_CHECK(d.ldx >= d.k && d.ldw >= d.k && d.ldy >= d.n, "gemm: a row stride is below the row length");
  PB_CHECK(d.m <= INT32_MAX && d.n <= INT32_MAX && d.k <= INT32_MAX && d.ldx <= INT32_MAX &&
               d.ldw <= INT32_MAX && d.ldy <= INT32_MAX,
           "gemm: a dimension or stride exceeds cuBLAS's 32-bit range");
  return d;
}

// Row-major y = x·wᵀ is column-major yᵀ [n, m] = w [n, k]·xᵀ: w as op T over its
// column-major [k, n] storage, x as op N over its column-major [k, m] storage.
void gemm_any(const Blas& blas, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, cudaDataType y_type,
              GemmDims d, cudaStream_t stream) {
  d = packed(d);
  if (d.m == 0 || d.n == 0) return;
  blas.bind(stream);
  const float alpha = 1.0f, beta = 0.0f;
  PB_CUBLAS_CALL(cublasGemmEx(static_cast<cublasHandle_t>(blas.handle()), CUBLAS_OP_T, CUBLAS_OP_N, int(d.n),
                              int(d.m), int(d.k), &alpha, w, CUDA_R_16BF, int(d.ldw), x, CUDA_R_16BF, int(d.ldx),
                              &beta, y, y_type, int(d.ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void gemm_f32out(const Blas& blas, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, GemmDims d,
                 cudaStream_t stream) {
  gemm_any(blas, x, w, y, CUDA_R_32F, d, stream);
}

void gemm_bf16out(const Blas& blas, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                  GemmDims d, cudaStream_t stream) {
  gemm_any(blas, x, w, y, CUDA_R_16BF, d, stream);
}

// Row-major y [m, n] = x [m, k]·w [k, n] is column-major yᵀ [n, m] = wᵀ [n, k]·xᵀ [k, m],
// both already in column-major form over their row-major storage: no transposes.
void gemm_f32_batched(const Blas& blas, const float* x, const float* w, float* y, int64_t m, int64_t n,
                      int64_t k, int64_t batch, cudaStream_t stream) {
  PB_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0, "gemm_f32_batched: negative dimension");
  PB_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && batch <= INT32_MAX,
           "gemm_f32_batched: a dimension exceeds cuBLAS's 32-bit range");
  if (m == 0 || n == 0 || batch == 0) return;
  blas.bind(stream);
  const float alpha = 1.0f, beta = 0.0f;
  PB_CUBLAS_CALL(cublasGemmStridedBatchedEx(static_cast<cublasHandle_t>(blas.handle()), CUBLAS_OP_N, CUBLAS_OP_N,
                                            int(n), int(m), int(k), &alpha, w, CUDA_R_32F, int(n), n * k, x,
                                            CUDA_R_32F, int(k), m * k, &beta, y, CUDA_R_32F, int(n), m * n,
                                            int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

double gemm_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * double(m) * double(n) * double(k); }

}  // namespace pb
