#include "output_diff.h"

#include <vector>

#include "check.h"
#include "device_buffer.h"

namespace pb {

namespace {

__device__ __forceinline__ double widen(float v) { return v; }
__device__ __forceinline__ double widen(__nv_bfloat16 v) { return __bfloat162float(v); }

// Σ x·y, Σ x², Σ y², each warp's sums added into out[0..2].
template <class T>
__global__ void dot3_kernel(const T* x, const T* y, int64_t n, double* out) {
  double xy = 0, xx = 0, yy = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double a = widen(x[i]), b = widen(y[i]);
    xy += a * b;
    xx += a * a;
    yy += b * b;
  }
  for (int s = 16; s >= 1; s >>= 1) {
    xy += __shfl_xor_sync(0xffffffffu, xy, s);
    xx += __shfl_xor_sync(0xffffffffu, xx, s);
    yy += __shfl_xor_sync(0xffffffffu, yy, s);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(out, xy);
    atomicAdd(out + 1, xx);
    atomicAdd(out + 2, yy);
  }
}

template <class T>
double diff_of(const T* x, const T* y, int64_t n, cudaStream_t s) {
  PB_CHECK(n >= 0 && (n == 0 || (x && y)), "output_diff: null operand");
  DeviceBuffer<double> acc(3);
  PB_CUDA(cudaMemsetAsync(acc.get(), 0, acc.bytes(), s));
  if (n > 0) {
    dot3_kernel<<<1024, 256, 0, s>>>(x, y, n, acc.get());
    PB_CUDA_LAUNCH();
  }
  std::vector<double> h(3);
  PB_CUDA(cudaMemcpyAsync(h.data(), acc.get(), acc.bytes(), cudaMemcpyDeviceToHost, s));
  PB_CUDA(cudaStreamSynchronize(s));
  const double denom = h[1] + h[2];
  return denom > 0 ? 1.0 - 2.0 * h[0] / denom : 0.0;
}

}  // namespace

double output_diff(const float* x, const float* y, int64_t n, cudaStream_t s) { return diff_of(x, y, n, s); }
double output_diff(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, cudaStream_t s) {
  return diff_of(x, y, n, s);
}

}  // namespace pb
