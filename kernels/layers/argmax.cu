#include "argmax.h"

#include <cstdint>

#include "check.h"

namespace pb {

namespace {

constexpr int kThreads = 1024;

// (va, ia) ranks before (vb, ib) in argmax.h's order.
__device__ __forceinline__ bool ranks_before(float va, int32_t ia, float vb, int32_t ib) {
  const bool na = va != va, nb = vb != vb;
  if (na != nb) return nb;              // a number beats a NaN
  if (!na && va != vb) return va > vb;  // two numbers: the larger
  return ia < ib;                       // equal numbers, or two NaNs: the lower index
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const __nv_bfloat16* __restrict__ x, int64_t n,
                                                          int32_t* __restrict__ index) {
  __shared__ float best_v[kThreads];
  __shared__ int32_t best_i[kThreads];
  const int t = threadIdx.x;
  float v = __int_as_float(0x7fffffff);  // NaN at index INT32_MAX: ranks after everything real
  int32_t i = INT32_MAX;
  for (int64_t j = t; j < n; j += kThreads) {
    const float f = __bfloat162float(x[j]);
    if (ranks_before(f, int32_t(j), v, i)) {
      v = f;
      i = int32_t(j);
    }
  }
  best_v[t] = v;
  best_i[t] = i;
  __syncthreads();
  for (int s = kThreads / 2; s >= 1; s >>= 1) {
    if (t < s && ranks_before(best_v[t + s], best_i[t + s], best_v[t], best_i[t])) {
      best_v[t] = best_v[t + s];
      best_i[t] = best_i[t + s];
    }
    __syncthreads();
  }
  if (t == 0) *index = best_i[0];
}

}  // namespace

void argmax_bf16(const __nv_bfloat16* logits, int64_t n, int32_t* index, cudaStream_t stream) {
  PB_CHECK(n >= 1 && n <= INT32_MAX, "argmax_bf16: n must be in [1, 2^31 - 1]");
  PB_CHECK(logits != nullptr && index != nullptr, "argmax_bf16: null pointer");
  argmax_kernel<<<1, kThreads, 0, stream>>>(logits, n, index);
  PB_CUDA_LAUNCH();
}

}  // namespace pb
