#include "embed.h"

#include <algorithm>

#include "check.h"
#include "launch.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

template <int W>
__global__ void embed_gather_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids,
                                    bf16* __restrict__ out, int64_t rows, int64_t hidden) {
  const int64_t per_row = hidden / W, total = rows * per_row;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < total; g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = g / per_row, c = (g % per_row) * W;
    const bf16* src = table + int64_t(ids[r]) * hidden + c;
    bf16* dst = out + r * hidden + c;
    if (W == 8) *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    else *dst = *src;
  }
}

__host__ __device__ inline uint64_t mix(uint64_t i, uint16_t bits) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull + bits + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void checksum_kernel(const uint16_t* __restrict__ x, int64_t n, unsigned long long* out) {
  unsigned long long sum = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    sum += mix(uint64_t(i), x[i]);
  for (int s = 16; s >= 1; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (threadIdx.x % 32 == 0) atomicAdd(out, sum);
}

}  // namespace

void embed_gather(const bf16* table, const int32_t* ids, bf16* out, int64_t rows, int64_t hidden,
                  cudaStream_t stream) {
  PB_CHECK(rows >= 0 && hidden >= 1, "embed_gather: bad shape");
  if (rows == 0) return;
  const bool vector = hidden % 8 == 0 && aligned16(table) && aligned16(out);
  const int64_t work = rows * (vector ? hidden / 8 : hidden);
  const unsigned blocks = unsigned(std::min<int64_t>((work + 255) / 256, 132 * 16));
  if (vector) embed_gather_kernel<8><<<blocks, 256, 0, stream>>>(table, ids, out, rows, hidden);
  else embed_gather_kernel<1><<<blocks, 256, 0, stream>>>(table, ids, out, rows, hidden);
  PB_CUDA_LAUNCH();
}

void checksum_bf16(const bf16* x, int64_t n, unsigned long long* out, cudaStream_t stream) {
  PB_CHECK(n >= 0, "checksum_bf16: negative length");
  PB_CUDA(cudaMemsetAsync(out, 0, sizeof(unsigned long long), stream));
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 8));
  checksum_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const uint16_t*>(x), n, out);
  PB_CUDA_LAUNCH();
}

namespace ref {
uint64_t checksum_bf16(const uint16_t* x, int64_t n) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += mix(uint64_t(i), x[i]);
  return sum;
}
}  // namespace ref

}  // namespace pb
