// doctest main for the GPU suites: exit 77 (CTest SKIP_RETURN_CODE) when no
// CUDA device is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device visible (%s)\n",
                err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
