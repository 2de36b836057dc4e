// Dense projections (docs/design.md §2): cuBLAS, bf16 x bf16 with f32 accumulate.
// Row-major, PyTorch's linear layout: activations x [m, k] (row stride ldx),
// weights w [n, k] (out features x in features, row stride ldw), output
// y [m, n] (row stride ldy) = x · wᵀ, written (beta 0) as the f32 "partial"
// that a land (cut 1) turns into bf16, or straight to bf16 where the engine
// asks for it (kv_b). One cublasGemmEx per call, CUBLAS_COMPUTE_32F, default
// algorithm; the cuBLAS handle is per Blas object and bound to the call's stream.
//
//   gemm_f32out      y f32  [m, n]
//   gemm_bf16out     y bf16 [m, n]  (cuBLAS rounds its f32 accumulator once)
//   gemm_f32_batched y_b = x_b · w_b (f32, f32 math, no transposes): the KDA fold
//
// m == 0 or n == 0 launches nothing; k == 0 writes zeros (cuBLAS semantics).
// The fp8 projections (kernels/fp8/gemm_fp8.h) run on the Blas's Fp8Gemm,
// made on first use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

namespace pb {

class Fp8Gemm;

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  void* handle() const { return handle_; }  // cublasHandle_t
  void bind(cudaStream_t stream) const;
  // The cuBLASLt block-scaled FP8 GEMM (its handle, workspace and plans), made
  // on the first call; throws pb::Error where the device cannot run it.
  Fp8Gemm& fp8() const;

 private:
  void* handle_ = nullptr;
  mutable std::unique_ptr<Fp8Gemm> fp8_;
};

// Throws pb::Error naming the cuBLAS status.
void check_cublas(int status, const char* expr, const char* file, int line);
#define PB_CUBLAS_CALL(expr) ::pb::check_cublas(int(expr), #expr, __FILE__, __LINE__)

struct GemmDims {
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldw = 0, ldy = 0;  // 0 = packed (k, k, n)
};

void gemm_f32out(const Blas& blas, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, GemmDims d,
                 cudaStream_t stream);
void gemm_bf16out(const Blas& blas, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                  GemmDims d, cudaStream_t stream);

// Row-major f32: y_b [m, n] = x_b [m, k] · w_b [k, n] for b = 0 .. batch-1,
// each operand packed and strided by its own size.
void gemm_f32_batched(const Blas& blas, const float* x, const float* w, float* y, int64_t m, int64_t n,
                      int64_t k, int64_t batch, cudaStream_t stream);

// 2·m·n·k.
double gemm_flops(int64_t m, int64_t n, int64_t k);

}  // namespace pb
