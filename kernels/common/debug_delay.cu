#include "debug_delay.h"

#include <cstdint>

#include "check.h"

namespace pb {

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

void gpu_delay(double us, cudaStream_t stream) {
  PB_CHECK(us >= 0, "gpu_delay: negative delay");
  if (us == 0) return;
  spin_kernel<<<1, 1, 0, stream>>>(uint64_t(us * 1e3));
  PB_CUDA_LAUNCH();
}

}  // namespace pb
