// Layer 0's dense FFN (docs/design.md §2.1 "Dense FFN"), on one rank, b rows:
//   rmsnorm.dense_in; gemm.dense_gate_up (wgu [2 I, h], I = dense_inter) -> f32
//   [b, 2 I]; land.dense_gate (cols 0..I-1), land.dense_up (cols I..2I-1) —
//   the seed's nt = 67584 / n = 33792 landings at K3; situ; gemm.dense_down
//   (w_dn [h, I]) + land.dense_down -> out [b, h].
// Names and order are plan.cpp's dense_ffn(). The RMSNorm gain is 1. Weights
// are one seeded synthetic set (block_common.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

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
           DeviceMemory& mem = DeviceMemory::standalone());
  // x, out [b, h] bf16, distinct; every launch through tl.
  void run(Timeline& tl, const Blas& blas, const CutSet& cuts, const __nv_bfloat16* x, __nv_bfloat16* out);

  const __nv_bfloat16* w_gate_up() const { return wgu_.get(); }  // [2 I, h]
  const __nv_bfloat16* w_down() const { return wdn_.get(); }     // [h, I]

 private:
  ModelShape m_;
  int64_t b_;
  DeviceBuffer<__nv_bfloat16> wgu_, wdn_, normed_, gate_, up_, act_;
  DeviceBuffer<float> partial_;
};

}  // namespace pb
