// Device fills: seeded synthetic data (weights, activations, benchmark
// inputs) and constant fills. Values are a hash of (seed, index), uniform in [-scale, scale), so
// the same seed gives the same data on every rank and every run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_uniform_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

// p[r * pitch + c] = value for r < rows, c < cols (pitch in elements).
void fill_constant_f32(float* p, int64_t pitch, int64_t cols, int64_t rows, float value, cudaStream_t stream);

}  // namespace pb
