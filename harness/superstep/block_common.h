// Small pieces every block shares: the cut switches as kernel variants, the
// synthetic weight fill, a projection's weight in the run's precision, an
// activation's fp8 twin, and the "GEMM -> land" pair under plan's names.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuts.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "fabric.h"
#include "fp8.h"
#include "gemm.h"
#include "gemm_fp8.h"
#include "land.h"
#include "precision.h"
#include "quant.h"
#include "random_fill.h"
#include "timeline.h"
#include "variant.h"

namespace pb {

inline Variant cut_variant(const CutSet& cuts, Cut c) { return cuts[c] ? Variant::cut : Variant::baseline; }
inline Variant land_variant(const CutSet& cuts) { return cut_variant(cuts, Cut::land); }
inline Variant elementwise_variant(const CutSet& cuts) { return cut_variant(cuts, Cut::elementwise); }

// A projection's weight [rows, fan_in] in the run's GEMM format (precision.h):
// bf16, or e4m3 codes with one f32 scale per 128x128 block (kernels/fp8/fp8.h),
// quantized once from the same seeded bf16 values, so a bf16 run and an fp8
// run compute the same model. The codes' rows are padded to a multiple of 128
// with zeros (a partial block's scale is its real rows' amax). fp4 (experts,
// planned only) is sized and never filled: e2m1 codes two a byte, then one e4m3
// scale per row and 16 columns, in one buffer.
struct ProjWeight {
  Format format = Format::bf16;
  int64_t rows = 0, fan_in = 0;
  int64_t ld_sw = 0;                  // fp8: the scales' block-row stride
  DeviceBuffer<__nv_bfloat16> bf;     // bf16: [rows, fan_in]
  DeviceBuffer<__nv_fp8_e4m3> codes;  // fp8: [rows rounded up to 128, fan_in]
  DeviceBuffer<float> scales;         // fp8: [ceil(rows / 128), ld_sw]
  DeviceBuffer<uint8_t> nvfp4;        // fp4: [rows, fan_in / 2] codes, then [rows, fan_in / 16] scales

  size_t bytes() const { return bf.bytes() + codes.bytes() + scales.bytes() + nvfp4.bytes(); }
  const __nv_bfloat16* bf_rows(int64_t row0) const { return bf.get() + row0 * fan_in; }
  const __nv_fp8_e4m3* code_rows(int64_t row0) const { return codes.get() + row0 * fan_in; }
  // row0 % 128 == 0: the first scale row of a band starting at row0.
  const float* scale_rows(int64_t row0) const { return scales.get() + row0 / kFp8Group * ld_sw; }
};

// An activation's fp8 twin: codes [rows, k] e4m3 and one f32 scale per row and
// 128 columns, MN-major for the dense GEMM (lds = act_scale_ld(rows)) or
// K-major for the expert GEMMs (a row's k/128 scales contiguous), from
// `quant.<what>` (quantize_act_fp8) or a producer that writes it (cut quant_fuse).
// fp4 experts (planned only) size an NVFP4 twin instead: codes and e4m3 scales
// per 16 columns in one buffer, taken only when counting.
struct Fp8Act {
  DeviceBuffer<__nv_fp8_e4m3> codes;
  DeviceBuffer<float> scales;
  DeviceBuffer<uint8_t> nvfp4;
  int64_t rows = 0, k = 0;
  Fp8ScaleLayout layout;

  // Null buffers (rows = 0) when the run's format is bf16.
  static Fp8Act take(DeviceMemory& mem, const std::string& name, int64_t rows, int64_t k, Home home, Format format,
                     bool k_major = false) {
    Fp8Act a;
    if (format == Format::bf16) return a;
    PB_CHECK(k % kFp8Group == 0, std::string(format_name(format)) + " activation " + name + ": width " +
                                     std::to_string(k) + " is not a multiple of 128 (whole scale groups)");
    a.rows = rows;
    a.k = k;
    if (format == Format::fp4) {
      PB_CHECK(mem.counting_only(), "activation " + name + ": " + precision_planned_only(Precision{Format::bf16, format}));
      a.nvfp4 = mem.take<uint8_t>(name + "_nvfp4", nvfp4_bytes(rows, k), home);
      return a;
    }
    const int64_t kb = k / kFp8Group, lds = act_scale_ld(rows);
    a.layout = k_major ? act_scales_k_major(kb) : act_scales_mn_major(lds);
    a.codes = mem.take<__nv_fp8_e4m3>(name + "_e4m3", rows * k, home);
    a.scales = mem.take<float>(name + "_scales", k_major ? rows * kb : kb * lds, home);
    return a;
  }
  ActQuantShape shape(int64_t m, int64_t ldx) const { return ActQuantShape{m, k, ldx, k, layout}; }
};

// "quant.<what>": x [m, k] bf16 (row stride ldx; 0 = k) -> its fp8 twin.
inline void quant_act(Timeline& tl, const std::string& what, const __nv_bfloat16* x, int64_t m, int64_t ldx,
                      Fp8Act& q) {
  PB_CHECK(m <= q.rows, "quant." + what + ": more rows than its fp8 buffer holds");
  tl.launch("quant", "quant." + what,
            [&] { quantize_act_fp8(x, q.codes.get(), q.scales.get(), q.shape(m, ldx ? ldx : q.k), tl.stream()); });
}

// y [m, n] f32 (row stride d.ldy) = x [m, k] · w rows [row0, row0 + n)ᵀ: cuBLAS
// bf16 (x, row stride d.ldx), or cuBLASLt fp8 on x's twin (xq, quantized from
// the same rows) when the weight is fp8.
inline void proj_gemm(const Blas& blas, const ProjWeight& w, int64_t row0, const __nv_bfloat16* x, const Fp8Act& xq,
                      float* y, GemmDims d, cudaStream_t st) {
  PB_CHECK(d.k == w.fan_in && row0 + d.n <= w.rows, "proj_gemm: the GEMM does not fit its weight");
  if (w.format == Format::bf16) {
    d.ldw = w.fan_in;
    gemm_f32out(blas, x, w.bf_rows(row0), y, d, st);
    return;
  }
  PB_CHECK(xq.k == d.k && d.m <= xq.rows, "proj_gemm: the fp8 weight's input has no fp8 twin of its shape");
  PB_CHECK(row0 % kFp8Group == 0, "proj_gemm: an fp8 weight band must start on a 128-row block");
  Fp8GemmDims f;
  f.m = d.m;
  f.n = d.n;
  f.k = d.k;
  f.ldx = xq.k;
  f.ldw = w.fan_in;
  f.ldy = d.ldy ? d.ldy : d.n;
  f.lds = act_scale_ld(d.m);
  f.ld_sw = w.ld_sw;
  PB_CHECK(xq.layout.s_row == 1 && xq.layout.s_group == f.lds,
           "proj_gemm: the input's fp8 scales are not laid out for this GEMM's rows");
  gemm_fp8_f32out(blas.fp8(), xq.codes.get(), xq.scales.get(), w.code_rows(row0), w.scale_rows(row0), y, f, st);
}

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
  // A projection's weight in `format`: weight() itself for bf16; for fp8 the
  // same seeded values staged in a transient bf16 buffer, quantized in 128x128
  // blocks, scales at block-row stride ld_sw (0: what the dense GEMM reads,
  // weight_scale_ld(fan_in)).
  ProjWeight proj(const std::string& name, int64_t rows, int64_t fan_in, uint64_t seed, Format format,
                  int64_t ld_sw = 0) const {
    ProjWeight w;
    w.format = format;
    w.rows = rows;
    w.fan_in = fan_in;
    if (format == Format::bf16) {
      w.bf = weight(name, rows, fan_in, seed);
      return w;
    }
    if (format == Format::fp4) {
      PB_CHECK(mem.counting_only(), "weight " + name + ": " + precision_planned_only(Precision{Format::bf16, format}));
      w.nvfp4 = mem.take<uint8_t>(name + "_nvfp4", nvfp4_bytes(rows, fan_in), Home::weights);
      return w;
    }
    PB_CHECK(fan_in % kFp8Group == 0, "weight " + name + ": fp8 needs its fan-in (" + std::to_string(fan_in) +
                                          ") a multiple of 128 (one scale per 128x128 block)");
    const int64_t padded = (rows + kFp8Group - 1) / kFp8Group * kFp8Group;
    w.ld_sw = ld_sw ? ld_sw : weight_scale_ld(fan_in);
    w.codes = mem.take<__nv_fp8_e4m3>(name, padded * fan_in, Home::weights);
    w.scales = mem.take<float>(name + "_scales", padded / kFp8Group * w.ld_sw, Home::weights);
    if (mem.fills_weights()) {
      DeviceBuffer<__nv_bfloat16> staged(size_t(padded * fan_in), "the bf16 staging of weight " + name);
      fill_uniform_bf16(staged.get(), rows * fan_in, seed, std::sqrt(3.0f / float(fan_in)), stream);
      if (padded > rows)
        PB_CUDA(cudaMemsetAsync(staged.get() + rows * fan_in, 0, size_t((padded - rows) * fan_in) * 2, stream));
      quantize_weight_fp8(staged.get(), w.codes.get(), w.scales.get(),
                          WeightQuantShape{padded, fan_in, fan_in, fan_in, w.ld_sw}, stream);
      PB_CUDA(cudaStreamSynchronize(stream));  // the staging buffer is freed on return
    }
    return w;
  }
};

// "gemm.<what>" (x [m, k] · w [n, k]ᵀ -> f32 partial [m, n], in w's format)
// then "land.<what>" (the whole partial -> bf16 [m, n]), split_k = 1.
inline void gemm_land(Timeline& tl, const Blas& blas, Variant land_v, const std::string& what,
                      const __nv_bfloat16* x, const Fp8Act& xq, const ProjWeight& w, float* partial,
                      __nv_bfloat16* out, int64_t m, int64_t n, int64_t k) {
  cudaStream_t st = tl.stream();
  tl.launch("gemm", "gemm." + what, [&] {
    GemmDims d;
    d.m = m;
    d.n = n;
    d.k = k;
    proj_gemm(blas, w, 0, x, xq, partial, d, st);
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
