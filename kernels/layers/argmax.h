// The first token (docs/design.md §2.1 "First token"): argmax over the landed
// last-token logits. Not a cut: one implementation, a C++ reference beside it,
// equal index for index.
//
//   logits [n] bf16  ->  index [1] int32 (device)
//
// Order: a larger value wins; equal values (+0 == -0 included) go to the LOWER
// index; NaN ranks below every number (below -inf too), so a NaN is chosen only
// when every element is NaN, and then the lowest index (0). n must be in
// [1, 2^31 - 1]. One 1024-thread block: each thread walks indices t, t + 1024,
// ... keeping its best (value, index); a shared-memory tree then merges them
// with the same order. The order is a total order on (value, index), so the
// result does not depend on how the walk or the tree is arranged.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

void argmax_bf16(const __nv_bfloat16* logits, int64_t n, int32_t* index, cudaStream_t stream);

namespace ref {
// The contract above on bf16 bit patterns.
int32_t argmax_bf16(const uint16_t* logits, int64_t n);
}  // namespace ref

}  // namespace pb
