// Small pieces every block shares: the cut switches as kernel variants, the
// synthetic weight fill, and the "GEMM -> land" pair under plan's names.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuts.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "fabric.h"
#include "gemm.h"
#include "land.h"
#include "random_fill.h"
#include "timeline.h"
#include "variant.h"

namespace pb {

inline Variant cut_variant(const CutSet& cuts, Cut c) { return cuts[c] ? Variant::cut : Variant::baseline; }
inline Variant land_variant(const CutSet& cuts) { return cut_variant(cuts, Cut::land); }
inline Variant elementwise_variant(const CutSet& cuts) { return cut_variant(cuts, Cut::elementwise); }

// The blocks' seeded synthetic weights, taken from `mem` (Home::weights) and
// written only by the rank that fills this GPU's weights (mem.fills_weights()).
struct WeightFill {
  DeviceMemory& mem;
  cudaStream_t stream;

  // [rows, fan_in] bf16, uniform in +-sqrt(3 / fan_in): unit variance in, unit
  // variance out (the router's logits come out ~N(0, 1) on unit-RMS rows, as
  // the synthetic router bias assumes, moe_route.h).
  DeviceBuffer<__nv_bfloat16> weight(const std::string& name, int64_t rows, int64_t fan_in, uint64_t seed) const {
    DeviceBuffer<__nv_bfloat16> w = mem.take<__nv_bfloat16>(name, rows * fan_in, Home::weights);
    if (mem.fills_weights()) fill_uniform_bf16(w.get(), rows * fan_in, seed, std::sqrt(3.0f / float(fan_in)), stream);
    return w;
  }
  // f32 vectors: uniform in +-scale, and all ones (RMSNorm gains).
  DeviceBuffer<float> uniform_f32(const std::string& name, int64_t n, uint64_t seed, float scale) const {
    DeviceBuffer<float> v = mem.take<float>(name, n, Home::weights);
    if (mem.fills_weights()) fill_uniform_f32(v.get(), n, seed, scale, stream);
    return v;
  }
  DeviceBuffer<float> ones_f32(const std::string& name, int64_t n) const {
    DeviceBuffer<float> v = mem.take<float>(name, n, Home::weights);
    if (mem.fills_weights()) fill_constant_f32(v.get(), n, n, 1, 1.0f, stream);
    return v;
  }
};

// "gemm.<what>" (x [m, k] · w [n, k]ᵀ -> f32 partial [m, n]) then "land.<what>"
// (the whole partial -> bf16 [m, n]), split_k = 1.
inline void gemm_land(Timeline& tl, const Blas& blas, Variant land_v, const std::string& what,
                      const __nv_bfloat16* x, const __nv_bfloat16* w, float* partial, __nv_bfloat16* out,
                      int64_t m, int64_t n, int64_t k) {
  cudaStream_t st = tl.stream();
  tl.launch("gemm", "gemm." + what, [&] {
    GemmDims d;
    d.m = m;
    d.n = n;
    d.k = k;
    gemm_f32out(blas, x, w, partial, d, st);
  });
  tl.launch("land", "land." + what, [&] { land(land_v, partial, out, LandShape{m, 1, n, 0, n}, st); });
}

// "land.<what>": columns [off, off + n) of a partial [rows, nt] -> bf16 [rows, n].
inline void land_band(Timeline& tl, Variant land_v, const std::string& what, const float* partial,
                      __nv_bfloat16* out, int64_t rows, int64_t nt, int64_t off, int64_t n) {
  cudaStream_t st = tl.stream();
  tl.launch("land", "land." + what, [&] { land(land_v, partial, out, LandShape{rows, 1, nt, off, n}, st); });
}

}  // namespace pb
