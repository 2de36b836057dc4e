// The sm_90 asynchronous copy unit (TMA) and its mbarriers (kda_walk_wgmma.cu's stages). Every
// call here needs sm_90.
//
//   mbar_init / mbar_fence_init      an mbarrier (shared::cta) expecting `count` arrivals
//   mbar_arrive(_expect_tx)          one arrival (and `bytes` of transactions to come)
//   mbar_try_wait / mbar_wait        the phase of `parity` completed (acquire); mbar_wait traps
//                                    after ~4 s rather than hang the device
//   bulk_copy_g2s                    1D bulk copy global -> shared, completing on an mbarrier
//   tensor_load_2d                   a 2D box of a tensor map (CUtensorMap in param, const or
//                                    global space) -> shared, completing on an mbarrier
#pragma once

#include <cstdint>

#include "ptx.cuh"

namespace pb::tma {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ptx::smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(ptx::smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(ptx::smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(ptx::smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns));
  return ns;
}
// Until the phase of `parity` has completed (acquire: the bytes a bulk copy
// delivered on it are visible). A wait of more than ~4 s (a call takes
// milliseconds) is a broken ring: trap (a launch error) rather than hang the
// device. The clock is read only every 65536 failed tries.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t tries = 0;
  uint64_t since = 0;
  while (!mbar_try_wait(bar, parity)) {
    if ((++tries & 0xffffu) == 0) {
      const uint64_t now = global_ns();
      if (since == 0) since = now;
      else if (now - since > 4000000000ull) __trap();
    }
  }
}
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                              uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          ptx::smem_addr(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(ptx::smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void tensor_load_2d(void* smem_dst, const void* tensor_map, int c0, int c1,
                                               uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          ptx::smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(c0), "r"(c1), "r"(ptx::smem_addr(bar))
      : "memory");
}

}  // namespace pb::tma
