// How far one output lies from another, as DeepGEMM measures it:
//   diff = 1 - 2<x,y> / (|x|^2 + |y|^2)      (0: equal; ~|x-y|^2 / 2|x|^2 when close)
// over n elements, summed in double on the device. The fp8 benchmarks judge
// an fp8 output against the bf16 one of the same inputs by it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

// What the quantization of random operands costs an fp8 GEMM's output against
// the bf16 product of the same operands (DeepGEMM's test floor).
constexpr double kFp8GemmDiffFloor = 1e-3;

double output_diff(const float* x, const float* y, int64_t n, cudaStream_t stream);
double output_diff(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, cudaStream_t stream);

}  // namespace pb
