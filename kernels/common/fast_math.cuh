// Exact fast forms of IEEE float operations that nvcc (--fmad=false, no
// fast-math) spells as long sequences with a slow-path branch. Each form
// returns the very bits of the plain expression on its stated domain, and a
// GPU test checks it on every float of that domain:
//   reciprocal_rn_1_to_2p126   test_conv_silu_chunk (every float in [1, 2^126))
#pragma once

#ifdef __CUDACC__

namespace pb::fast_math {

// 1.0f / d rounded to nearest even, for 1 <= d < 2^126: the in-range path of
// the IEEE division nvcc emits for `1.0f / d` (MUFU.RCP, then one Newton step
// r + r * (1 - d * r) with FMAs) without its per-element range check. Callers
// check the range (d < 0x1p126f is false for +inf and NaN) and divide
// otherwise.
__device__ __forceinline__ float reciprocal_rn_1_to_2p126(float d) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  const float t = __fmaf_rn(d, r, -1.0f);
  return __fmaf_rn(r, -t, r);
}

}  // namespace pb::fast_math

#endif  // __CUDACC__
