#include "timing.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "check.h"
#include "device_buffer.h"
#include "fp8.h"
#include "gemm.h"
#include "gemm_fp8.h"
#include "quant.h"
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

namespace {

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  PB_CUDA(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

}  // namespace

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
    us.push_back(elapsed_ms(start, stop) * 1e3);
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


namespace {

// An n^3 bf16 GEMM (f32 out) on random inputs, ready to launch.
class GemmProbe {
 public:
  GemmProbe(cudaStream_t stream, int n) : n_(n) {
    const size_t elems = size_t(n) * n;
    PB_CUDA(cudaMalloc(&a_, elems * 2));
    PB_CUDA(cudaMalloc(&b_, elems * 2));
    PB_CUDA(cudaMalloc(&c_, elems * 4));
    fill_uniform_bf16(a_, int64_t(elems), 1, 1.0f, stream);
    fill_uniform_bf16(b_, int64_t(elems), 2, 1.0f, stream);
    PB_CUBLAS(cublasCreate(&handle_));
    PB_CUBLAS(cublasSetStream(handle_, stream));
  }
  ~GemmProbe() {
    cublasDestroy(handle_);
    PB_CUDA_NOTHROW(cudaFree(a_));
    PB_CUDA_NOTHROW(cudaFree(b_));
    PB_CUDA_NOTHROW(cudaFree(c_));
  }
  GemmProbe(const GemmProbe&) = delete;
  GemmProbe& operator=(const GemmProbe&) = delete;

  void launch() {
    const float alpha = 1.0f, beta = 0.0f;
    PB_CUBLAS(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n_, n_, n_, &alpha, a_, CUDA_R_16BF, n_, b_,
                           CUDA_R_16BF, n_, &beta, c_, CUDA_R_32F, n_, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  double flops() const { return 2.0 * double(n_) * n_ * n_; }

 private:
  int n_;
  __nv_bfloat16 *a_ = nullptr, *b_ = nullptr;
  float* c_ = nullptr;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace

double measure_gemm_tflops(cudaStream_t stream, int n, int reps) {
  GemmProbe gemm(stream, n);
  const Timing t = time_launches([&](int, cudaStream_t) { gemm.launch(); }, 1, 3, reps, stream);
  return gemm.flops() / (t.median_us * 1e6);
}

double measure_fp8_gemm_tflops(Fp8Gemm& g, cudaStream_t s, int64_t n, int reps) {
  using fp8 = __nv_fp8_e4m3;
  DeviceBuffer<__nv_bfloat16> x(size_t(n * n));
  DeviceBuffer<fp8> xq(size_t(n * n)), wq(size_t(n * n));
  DeviceBuffer<float> sx(size_t(n / kFp8Group * act_scale_ld(n))), sw(size_t(n / kFp8Group * weight_scale_ld(n)));
  DeviceBuffer<float> y(size_t(n * n));
  fill_uniform_bf16(x.get(), n * n, 7, 1.0f, s);
  quantize_act_fp8(x.get(), xq.get(), sx.get(), {n, n, n, n, act_scales_mn_major(act_scale_ld(n))}, s);
  fill_uniform_bf16(x.get(), n * n, 8, 1.0f, s);
  quantize_weight_fp8(x.get(), wq.get(), sw.get(), {n, n, n, n, 0}, s);
  const Timing t = time_launches(
      [&](int, cudaStream_t st) { gemm_fp8_f32out(g, xq.get(), sx.get(), wq.get(), sw.get(), y.get(), {n, n, n}, st); },
      1, 3, reps, s);
  return gemm_flops(n, n, n) / (t.median_us * 1e6);
}

SustainedGemm measure_gemm_sustained(cudaStream_t stream, double seconds, int n) {
  PB_CHECK(seconds > 0, "measure_gemm_sustained: the window must be positive");
  constexpr int kChunk = 32;  // GEMMs enqueued at a time; two chunks in flight keep the GPU fed
  GemmProbe gemm(stream, n);
  gemm.launch();  // cuBLAS's first call picks its kernel: outside the window
  std::vector<cudaEvent_t> events;  // events[0]: the window's start; events[i + 1]: GEMM i's end
  auto record = [&] {
    cudaEvent_t e;
    PB_CUDA(cudaEventCreate(&e));
    PB_CUDA(cudaEventRecord(e, stream));
    events.push_back(e);
  };
  record();
  for (int chunk = 0;; ++chunk) {
    for (int i = 0; i < kChunk; ++i) {
      gemm.launch();
      record();
    }
    if (chunk == 0) continue;
    cudaEvent_t previous_end = events[events.size() - 1 - kChunk];  // the chunk before this one
    PB_CUDA(cudaEventSynchronize(previous_end));
    if (elapsed_ms(events[0], previous_end) >= seconds * 1e3) break;
  }
  PB_CUDA(cudaStreamSynchronize(stream));
  std::vector<WindowGemm> window;
  for (size_t i = 1; i < events.size(); ++i)
    window.push_back({elapsed_ms(events[0], events[i]), elapsed_ms(events[i - 1], events[i])});
  for (cudaEvent_t e : events) PB_CUDA(cudaEventDestroy(e));
  return sustained_gemm(window, gemm.flops());
}

}  // namespace pb
