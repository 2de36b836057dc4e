// Shared pieces of the GPU test suites (CTest label `gpu`).
//
// Every suite links gpu_test_main.cpp, which exits with code 77 (CTest: skipped)
// when no CUDA device is visible, so CI on a machine without a GPU reports the
// suites as skipped rather than passed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "device_math.h"
#include "ref_math.h"

namespace pb::test {

// Owning device allocation of n elements of T.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n) PB_CUDA(cudaMalloc(&ptr_, n * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (ptr_) PB_CUDA_NOTHROW(cudaFree(ptr_));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }

  // Fill every byte with 0xff: NaN in bf16 and f32, so an element a kernel
  // forgot to write never matches a reference bit pattern.
  void poison() { PB_CUDA(cudaMemset(ptr_, 0xff, n_ * sizeof(T))); }

  template <class H>
  void upload(const std::vector<H>& host) {
    static_assert(sizeof(H) == sizeof(T), "host and device element sizes differ");
    PB_CHECK(host.size() == n_, "upload size mismatch");
    PB_CUDA(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class H = T>
  std::vector<H> download() const {
    static_assert(sizeof(H) == sizeof(T), "host and device element sizes differ");
    std::vector<H> host(n_);
    PB_CUDA(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// bf16 bit patterns: mostly N(0, scale), with negatives, -0, +0 and large
// magnitudes (|x| up to 2^20 * scale) sprinkled in.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale = 1.0f);
// f32 values drawn the same way.
std::vector<float> random_f32(size_t n, uint64_t seed, float scale = 1.0f);

// First index where two bit patterns differ, or -1 (NaN matches NaN of any
// payload: the host and the device spell NaN differently). Reports the values.
int64_t first_bit_mismatch(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                           std::string* report);
int64_t first_bit_mismatch(const std::vector<float>& got, const std::vector<float>& want,
                           std::string* report);

}  // namespace pb::test
