// What the kernels' launchers share (host code; the device-side bit helpers are in ptx.cuh):
//
//   aligned16(p), aligned_to(p, bytes)   p's address is a multiple of 16 / of bytes
//   overlaps(a, a_bytes, b, b_bytes)     the byte ranges [a, a + a_bytes) and [b, b + b_bytes)
//                                        share a byte (an empty range overlaps nothing)
//   resident_grid(kernel, threads, wanted, max_per_sm)
//                                        blocks for a grid-stride kernel: enough for `wanted`,
//                                        at most one resident wave of the current device (at
//                                        most max_per_sm blocks per SM), at least 1
//   driver_entry_point(symbol, who)      a CUDA driver function through the runtime (CUDA 12
//                                        ABI), so that nothing links libcuda; throws naming
//                                        `who` when the driver lacks it
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"

namespace pb {

inline bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
inline bool aligned16(const void* p) { return aligned_to(p, 16); }

inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

template <class Kernel>
int resident_grid(Kernel* kernel, int threads, int64_t wanted_blocks, int max_per_sm = INT_MAX) {
  int device = 0, sms = 0, blocks_per_sm = 0;
  PB_CUDA(cudaGetDevice(&device));
  PB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, reinterpret_cast<const void*>(kernel),
                                                        threads, 0));
  const int64_t resident = int64_t(sms) * std::min(std::max(blocks_per_sm, 1), max_per_sm);
  return int(std::max<int64_t>(1, std::min(wanted_blocks, resident)));
}

inline void* driver_entry_point(const char* symbol, const char* who) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  PB_CUDA(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found));
  PB_CHECK(fn != nullptr && found == cudaDriverEntryPointSuccess,
           std::string(who) + ": the CUDA driver has no " + symbol + " (CUDA 12 ABI): driver too old");
  return fn;
}

}  // namespace pb
