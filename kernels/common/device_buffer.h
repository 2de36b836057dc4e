// An owning device allocation of n elements of T, for the harness and the tests.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "check.h"

namespace pb {

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
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
    o.ptr_ = nullptr;
    o.n_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  // Fill every byte with 0xff: NaN in bf16 and f32, so an element a kernel
  // forgot to write never matches a reference bit pattern. Ordered on
  // `stream`: pass the stream the kernel under test runs on (a non-blocking
  // stream does not wait for the legacy default stream).
  void poison(cudaStream_t stream = nullptr) { PB_CUDA(cudaMemsetAsync(ptr_, 0xff, bytes(), stream)); }

  template <class H>
  void upload(const std::vector<H>& host) {
    static_assert(sizeof(H) == sizeof(T), "host and device element sizes differ");
    PB_CHECK(host.size() == n_, "upload size mismatch");
    PB_CUDA(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  template <class H = T>
  std::vector<H> download() const {
    static_assert(sizeof(H) == sizeof(T), "host and device element sizes differ");
    std::vector<H> host(n_);
    PB_CUDA(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace pb
