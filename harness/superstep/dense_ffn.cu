#include "dense_ffn.h"

#include <algorithm>

#include "block_common.h"
#include "check.h"
#include "elementwise.h"
#include "rmsnorm.h"

namespace pb {

DenseFfn::DenseFfn(const ModelShape& m, int64_t bucket, uint64_t seed, cudaStream_t stream, DeviceMemory& mem,
                   Format gemm)
    : m_(m), b_(bucket) {
  PB_CHECK(bucket >= 1, "DenseFfn: bucket must be positive");
  const int64_t h = m.hidden, I = m.dense_inter, b = bucket;
  const WeightFill fill{mem, stream};
  wgu_ = fill.proj("dense.w_gate_up", 2 * I, h, seed * 1000003ull + 21, gemm);
  wdn_ = fill.proj("dense.w_down", h, I, seed * 1000003ull + 22, gemm);
  mem.begin_block("dense_ffn");
  normed_ = mem.take<__nv_bfloat16>("normed", b * h, Home::ffn);
  gate_ = mem.take<__nv_bfloat16>("gate", b * I, Home::ffn);
  up_ = mem.take<__nv_bfloat16>("up", b * I, Home::ffn);
  act_ = mem.take<__nv_bfloat16>("act", b * I, Home::ffn);
  partial_ = mem.take<float>("partial", std::max(b * 2 * I, b * h), Home::ffn);
  normed_q_ = Fp8Act::take(mem, "normed", b, h, Home::ffn, gemm);
  act_q_ = Fp8Act::take(mem, "act", b, I, Home::ffn, gemm);
  if (!mem.counting_only()) PB_CUDA(cudaStreamSynchronize(stream));
}

void DenseFfn::run(Timeline& tl, const Blas& blas, const CutSet& cuts, const __nv_bfloat16* x,
                   __nv_bfloat16* out) {
  PB_CHECK(x != nullptr && out != nullptr && x != out, "DenseFfn::run: x and out must be distinct buffers");
  const int64_t h = m_.hidden, I = m_.dense_inter, b = b_;
  const Variant lv = land_variant(cuts), ev = elementwise_variant(cuts);
  cudaStream_t st = tl.stream();
  float* partial = partial_.get();
  const bool fp8 = wgu_.format == Format::fp8, fuse = fp8 && cuts[Cut::quant_fuse];
  if (fuse) {
    tl.launch("rmsnorm", "rmsnorm.dense_in", [&] {
      rmsnorm_fp8(x, nullptr, nullptr, normed_q_.codes.get(), normed_q_.scales.get(), normed_q_.layout, {b, h, 0, 0},
                  float(m_.rms_eps), st);
    });
  } else {
    tl.launch("rmsnorm", "rmsnorm.dense_in",
              [&] { rmsnorm(x, nullptr, normed_.get(), {b, h, 0, 0}, float(m_.rms_eps), st); });
    if (fp8) quant_act(tl, "dense_in", normed_.get(), b, h, normed_q_);
  }
  tl.launch("gemm", "gemm.dense_gate_up", [&] {
    GemmDims d;
    d.m = b;
    d.n = 2 * I;
    d.k = h;
    proj_gemm(blas, wgu_, 0, normed_.get(), normed_q_, partial, d, st);
  });
  land_band(tl, lv, "dense_gate", partial, gate_.get(), b, 2 * I, 0, I);
  land_band(tl, lv, "dense_up", partial, up_.get(), b, 2 * I, I, I);
  if (fuse) {
    tl.launch("elementwise", "situ", [&] {
      situ_fp8(gate_.get(), up_.get(), nullptr, act_q_.codes.get(), act_q_.scales.get(), act_q_.layout, b, I, st);
    });
  } else {
    tl.launch("elementwise", "situ", [&] { situ(ev, gate_.get(), up_.get(), act_.get(), b * I, st); });
    if (fp8) quant_act(tl, "dense_act", act_.get(), b, I, act_q_);
  }
  gemm_land(tl, blas, lv, "dense_down", act_.get(), act_q_, wdn_, partial, out, b, h, I);
}

}  // namespace pb
