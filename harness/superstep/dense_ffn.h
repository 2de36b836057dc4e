// Layer 0's dense FFN (docs/design.md §2.1 "Dense FFN"), on one rank, b rows:
//   rmsnorm.dense_in; gemm.dense_gate_up (wgu [2 I, h], I = dense_inter) -> f32
//   [b, 2 I]; land.dense_gate (cols 0..I-1), land.dense_up (cols I..2I-1) —
//   the seed's nt = 67584 / n = 33792 landings at K3; situ; gemm.dense_down
//   (w_dn [h, I]) + land.dense_down -> out [b, h].
// Names and order are plan.cpp's dense_ffn(). The RMSNorm gain is 1. Weights
// are one seeded synthetic set (block_common.h). With fp8 projections
// (docs/design.md §12) quant.dense_in follows the RMSNorm and quant.dense_act
// the situ; under cut quant_fuse the two write the fp8 rows themselves.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "block_common.h"
#include "cuts.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "gemm.h"
#include "model.h"
#include "timeline.h"

namespace pb {

class DenseFfn {
 public:
  // Weights from `mem` (Home::weights, filled when mem.fills_weights()); the
  // buffers in the ffn lane (device_memory.h): the block runs within one turn.
  DenseFfn(const ModelShape& m, int64_t bucket, uint64_t seed, cudaStream_t stream,
           DeviceMemory& mem = DeviceMemory::standalone(), Format gemm = Format::bf16);
  // x, out [b, h] bf16, distinct; every launch through tl.
  void run(Timeline& tl, const Blas& blas, const CutSet& cuts, const __nv_bfloat16* x, __nv_bfloat16* out);

  const ProjWeight& w_gate_up() const { return wgu_; }  // [2 I, h]
  const ProjWeight& w_down() const { return wdn_; }     // [h, I]

 private:
  ModelShape m_;
  int64_t b_;
  ProjWeight wgu_, wdn_;
  DeviceBuffer<__nv_bfloat16> normed_, gate_, up_, act_;
  DeviceBuffer<float> partial_;
  Fp8Act normed_q_, act_q_;
};

}  // namespace pb
