// n elements of T in device memory: an owning allocation (freed with the
// buffer), or a view of memory owned elsewhere (DeviceBuffer::view: a region
// of a shared arena or weight set; a null view with a size is a buffer only
// counted, never placed).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "check_cuda.h"

namespace pb {

// "1234567 bytes (0.00 GB)"
inline std::string bytes_and_gb(size_t bytes) {
  char gb[32];
  std::snprintf(gb, sizeof gb, "%.2f", double(bytes) / 1e9);
  return std::to_string(bytes) + " bytes (" + gb + " GB)";
}

// The error for an allocation that does not fit: the buffer, the bytes asked,
// and what the current device has free of its total.
inline std::string out_of_device_memory(const std::string& what, size_t bytes) {
  std::string message = "out of device memory: " + (what.empty() ? std::string("a buffer") : what) + " asks " +
                        bytes_and_gb(bytes);
  int device = -1;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaGetDevice(&device) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    message += ", and GPU " + std::to_string(device) + " has " + bytes_and_gb(free_bytes) + " free of " +
               bytes_and_gb(total_bytes);
  return message;
}

// cudaMalloc of `bytes` for `what` (a name for messages; may be empty): an
// allocation that does not fit is out_of_device_memory's error, never a bare
// CUDA error code. The context stays usable after it.
inline void* device_allocate(size_t bytes, const std::string& what) {
  void* ptr = nullptr;
  const cudaError_t rc = cudaMalloc(&ptr, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it for the next call
    ::pb::throw_error(__FILE__, __LINE__, out_of_device_memory(what, bytes));
  }
  PB_CUDA(rc);
  return ptr;
}

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `what` names the buffer in an out-of-memory error (device_allocate).
  explicit DeviceBuffer(size_t n, const std::string& what = "") : n_(n) {
    PB_CHECK(n <= SIZE_MAX / sizeof(T),
             "DeviceBuffer " + what + ": " + std::to_string(n) + " elements overflow size_t");
    if (n) ptr_ = static_cast<T*>(device_allocate(n * sizeof(T), what));
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
