#include "timing.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "check.h"
#include "random_fill.h"
#include "stats.h"

namespace pb {

#define PB_CUBLAS(expr)                                                                        \
  do {                                                                                         \
    cublasStatus_t pb_st_ = (expr);                                                            \
    if (pb_st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::pb::throw_error(__FILE__, __LINE__, std::string(#expr) + ": cuBLAS status " +          \
                                                std::to_string(int(pb_st_)));                  \
  } while (0)

Timing time_launches(const std::function<void(int, cudaStream_t)>& launch, int slots, int warmup, int reps,
                     cudaStream_t stream, int settle_ms) {
  PB_CHECK(slots >= 1 && reps >= 1, "time_launches: slots and reps must be positive");
  for (int i = 0; i < warmup; ++i) launch(i % slots, stream);
  cudaEvent_t start, stop;
  PB_CUDA(cudaEventCreate(&start));
  PB_CUDA(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    if (settle_ms > 0) {
      PB_CUDA(cudaStreamSynchronize(stream));
      std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    }
    PB_CUDA(cudaEventRecord(start, stream));
    launch((warmup + i) % slots, stream);
    PB_CUDA(cudaEventRecord(stop, stream));
    PB_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    PB_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1e3);
  }
  PB_CUDA(cudaEventDestroy(start));
  PB_CUDA(cudaEventDestroy(stop));
  Timing t;
  t.median_us = median(us);
  t.min_us = *std::min_element(us.begin(), us.end());
  t.max_us = *std::max_element(us.begin(), us.end());
  t.reps = reps;
  return t;
}

int rotation_slots(double bytes) {
  int device = 0, l2 = 0;
  PB_CUDA(cudaGetDevice(&device));
  PB_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return std::max(2, int(std::ceil(3.0 * l2 / std::max(bytes, 1.0))));
}

double measure_copy_tbps(cudaStream_t stream, int reps) {
  const size_t bytes = size_t(2) << 30;  // 2 GiB each way, far past L2
  void *src = nullptr, *dst = nullptr;
  PB_CUDA(cudaMalloc(&src, bytes));
  PB_CUDA(cudaMalloc(&dst, bytes));
  PB_CUDA(cudaMemsetAsync(src, 0x5a, bytes, stream));
  Timing t = time_launches(
      [&](int, cudaStream_t s) { PB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); }, 1,
      3, reps, stream);
  PB_CUDA(cudaFree(src));
  PB_CUDA(cudaFree(dst));
  return 2.0 * bytes / (t.median_us * 1e6);
}


double measure_gemm_tflops(cudaStream_t stream, int n, int reps) {
  const size_t elems = size_t(n) * n;
  __nv_bfloat16 *a = nullptr, *b = nullptr;
  float* c = nullptr;
  PB_CUDA(cudaMalloc(&a, elems * 2));
  PB_CUDA(cudaMalloc(&b, elems * 2));
  PB_CUDA(cudaMalloc(&c, elems * 4));
  fill_uniform_bf16(a, int64_t(elems), 1, 1.0f, stream);
  fill_uniform_bf16(b, int64_t(elems), 2, 1.0f, stream);
  cublasHandle_t handle;
  PB_CUBLAS(cublasCreate(&handle));
  PB_CUBLAS(cublasSetStream(handle, stream));
  const float alpha = 1.0f, beta = 0.0f;
  Timing t = time_launches(
      [&](int, cudaStream_t) {
        PB_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                               CUDA_R_16BF, n, &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
      },
      1, 3, reps, stream);
  PB_CUBLAS(cublasDestroy(handle));
  PB_CUDA(cudaFree(a));
  PB_CUDA(cudaFree(b));
  PB_CUDA(cudaFree(c));
  return 2.0 * double(n) * n * n / (t.median_us * 1e6);
}

}  // namespace pb
