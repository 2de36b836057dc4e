// Guarded device outputs for the GPU suites: an output of n elements at
// element offset `shift`, poisoned with one byte value before the kernel runs,
// with `shift` poisoned elements before it and kGuardElems after it. result()
// downloads the n outputs and fails the test case if any byte outside them
// changed, so a missed store (poison left) or a stray one (guard hit) shows.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "check.h"
#include "device_buffer.h"

namespace pb::test {

constexpr size_t kGuardElems = 64;

// A device copy of `host` (T and H of one size: bf16 and uint16_t, fp8 and uint8_t).
template <class T, class H>
DeviceBuffer<T> to_device(const std::vector<H>& host) {
  DeviceBuffer<T> d(host.size());
  if (!host.empty()) d.upload(host);
  return d;
}

template <class T, class H = T>
struct Guarded {
  DeviceBuffer<T> buf;
  size_t shift, n;
  int byte;
  Guarded(size_t n_, int byte_, size_t shift_ = 0)
      : buf(shift_ + n_ + kGuardElems), shift(shift_), n(n_), byte(byte_) {
    PB_CUDA(cudaMemsetAsync(buf.get(), byte, buf.bytes(), nullptr));
  }
  T* get() const { return buf.get() + shift; }
  // After the kernels: the n outputs; flags any store outside them.
  std::vector<H> result(const char* what) const {
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<H> all = buf.template download<H>();
    const auto* bytes = reinterpret_cast<const unsigned char*>(all.data());
    bool intact = true;
    for (size_t i = 0; i < shift * sizeof(T); ++i) intact &= bytes[i] == byte;
    for (size_t i = (shift + n) * sizeof(T); i < all.size() * sizeof(T); ++i)
      intact &= bytes[i] == byte;
    CHECK_MESSAGE(intact, what, ": store outside the output");
    return std::vector<H>(all.begin() + ptrdiff_t(shift), all.begin() + ptrdiff_t(shift + n));
  }
};

}  // namespace pb::test
