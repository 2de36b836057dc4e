#include "random_fill.h"

#include <algorithm>

#include "check.h"

namespace pb {

namespace {

__device__ float uniform_of(uint64_t seed, int64_t i) {
  uint64_t h = (uint64_t(i) + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull ^ seed * 0x94d049bb133111ebull;
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return float(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f;  // [-1, 1)
}

template <class T>
__global__ void fill_uniform(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = uniform_of(seed, i) * scale;
    if constexpr (sizeof(T) == 2) p[i] = __float2bfloat16_rn(v);
    else p[i] = v;
  }
}

__global__ void fill_constant(float* p, int64_t pitch, int64_t cols, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[(i / cols) * pitch + i % cols] = value;
}

int fill_blocks(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  fill_uniform<<<fill_blocks(n), 256, 0, stream>>>(p, n, seed, scale);
  PB_CUDA_LAUNCH();
}

void fill_uniform_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  fill_uniform<<<fill_blocks(n), 256, 0, stream>>>(p, n, seed, scale);
  PB_CUDA_LAUNCH();
}

void fill_constant_f32(float* p, int64_t pitch, int64_t cols, int64_t rows, float value, cudaStream_t stream) {
  PB_CHECK(cols >= 0 && rows >= 0 && pitch >= cols, "fill_constant_f32: bad shape");
  const int64_t n = cols * rows;
  if (n == 0) return;
  fill_constant<<<fill_blocks(n), 256, 0, stream>>>(p, pitch, cols, n, value);
  PB_CUDA_LAUNCH();
}

}  // namespace pb
