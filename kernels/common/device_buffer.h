// n elements of T in device memory: an owning allocation (freed with the
// buffer), or a view of memory owned elsewhere (DeviceBuffer::view: a region
// of a shared arena or weight set; a null view with a size is a buffer only
// counted, never placed).
#pragma once

#include <cuda_runtime.h>  // the typed cudaMalloc

#include <cstddef>
#include <utility>
#include <vector>

#include "check_cuda.h"

namespace pb {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n) PB_CUDA(cudaMalloc(&ptr_, n * sizeof(T)));
  }
  // Not owned: `ptr` stays valid for as long as its owner keeps it.
  static DeviceBuffer view(T* ptr, size_t n) {
    DeviceBuffer b;
    b.ptr_ = ptr;
    b.n_ = n;
    b.owns_ = false;
    return b;
  }
  ~DeviceBuffer() {
    if (ptr_ && owns_) PB_CUDA_NOTHROW(cudaFree(ptr_));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_), owns_(o.owns_) {
    o.ptr_ = nullptr;
    o.n_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    std::swap(owns_, o.owns_);
    return *this;
  }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  bool owns() const { return owns_; }

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
  bool owns_ = true;
};

}  // namespace pb
