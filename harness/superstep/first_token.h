// The first token (docs/design.md §2.1 "First token"), on the last rank's last row:
//   rmsnorm.final (1 row, gain 1); gemm.lm_head (lm_head [vocab, h]) -> f32
//   [1, vocab]; land.lm_head -> logits bf16 [vocab]; sample.argmax -> the token
//   id (argmax.h: ties to the lower index, NaN below every number).
// The AttnRes call over the final blocks that precedes it in plan.cpp's
// first_token() is not this block's (the AttnRes block issues it); run() starts
// at rmsnorm.final. Names and order are plan.cpp's.
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

class FirstToken {
 public:
  // The lm head from `mem` (Home::weights, filled when mem.fills_weights()),
  // its few buffers the rank's own.
  FirstToken(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem = DeviceMemory::standalone());
  // last_row [1, h] bf16 (the final hidden state's last live row).
  void run(Timeline& tl, const Blas& blas, const CutSet& cuts, const __nv_bfloat16* last_row);
  // After run() and a stream sync.
  int32_t token() const;                                         // reads the device id
  const __nv_bfloat16* logits() const { return logits_.get(); }  // [vocab]
  const __nv_bfloat16* lm_head() const { return lm_head_.bf.get(); }  // [vocab, h]

 private:
  ModelShape m_;
  ProjWeight lm_head_;  // bf16 in every precision
  DeviceBuffer<__nv_bfloat16> normed_, logits_;
  DeviceBuffer<float> partial_;
  DeviceBuffer<int32_t> token_;
};

}  // namespace pb
