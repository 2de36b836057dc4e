// Seeded synthetic data on the device: weights, activations and benchmark
// inputs. Values are a hash of (seed, index), uniform in [-scale, scale), so
// the same seed gives the same data on every rank and every run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_uniform_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace pb
