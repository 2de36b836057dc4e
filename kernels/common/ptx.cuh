// PTX wrappers the kernels share (sm_80+; fmha.cu, the KDA kernels, attnres.cu).
//
//   smem_addr          generic -> shared-window address of p
//   cp_async_16        16 bytes global -> shared; !valid reads nothing and zero-fills
//   cp_async_commit / cp_async_wait_all / cp_async_wait_group<N> (all but the N newest groups landed)
//   prefetch_l2        the line holding p into L2 (a hint: nothing is read into registers)
//   ldmatrix_x4(_trans) four 8x8 b16 tiles from shared memory
//   mma_16816          d[16x8] += a[16x16] b[16x8], bf16 in, f32 accumulate
//   fast_exp2          2^x by ex2.approx.ftz.f32 (rel. error 2^-22; a denormal
//                      result flushes to +0, 2^-inf = +0)
//   pack_bf16x2        two f32 -> bf16x2 (round to nearest), lo in the low half
//   unpack_bf16x2      bf16x2 -> two f32 (exact), the low half in .x
//   unpack_bf16x8      a 16-byte word of 8 bf16 -> 8 f32 (exact), in address order
//   as_bits / as_bf16x2  the bit pattern of a bf16x2 as a 32-bit word and back (.x in the low half)
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace pb::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x = lo (low half)
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}
__device__ __forceinline__ void unpack_bf16x8(const uint4 u, float (&f)[8]) {
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 p = unpack_bf16x2(words[k]);  // .x is the lower address
    f[2 * k] = p.x;
    f[2 * k + 1] = p.y;
  }
}
__device__ __forceinline__ uint32_t as_bits(__nv_bfloat162 h) {
  uint32_t bits;
  memcpy(&bits, &h, sizeof bits);
  return bits;
}
__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t bits) {
  __nv_bfloat162 h;
  memcpy(&h, &bits, sizeof h);
  return h;
}

}  // namespace pb::ptx
