#include "mla_expand.h"

#include <algorithm>
#include <cstdint>

#include "check.h"
#include "launch.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

ExpandKShape packed(ExpandKShape s) {
  if (s.ld_kvb == 0) s.ld_kvb = int64_t(s.heads) * (s.nope + s.v);
  if (s.ld_rope == 0) s.ld_rope = s.rope;
  PB_CHECK(s.tk >= 0 && s.heads >= 1 && s.nope >= 1 && s.rope >= 0 && s.v >= 0, "expand_k: bad shape");
  PB_CHECK(s.ld_kvb >= int64_t(s.heads) * (s.nope + s.v) && s.ld_rope >= s.rope, "expand_k: row stride below row");
  return s;
}

// One thread per group of W elements of k (W = 8: a 16-byte move; W = 1 scalar).
template <int W>
__global__ void expand_k_kernel(const bf16* __restrict__ kvb, const bf16* __restrict__ rope, bf16* __restrict__ k,
                                ExpandKShape s) {
  const int d = s.nope + s.rope;
  const int64_t groups_per_row = int64_t(s.heads) * d / W;
  const int64_t total = s.tk * groups_per_row;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < total; g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = g / groups_per_row;
    const int64_t e = (g % groups_per_row) * W;  // element within the token's [heads, d]
    const int h = int(e / d), c = int(e % d);
    const bf16* src = c < s.nope ? kvb + t * s.ld_kvb + int64_t(h) * (s.nope + s.v) + c
                                 : rope + t * s.ld_rope + (c - s.nope);
    bf16* dst = k + t * int64_t(s.heads) * d + e;
    if (W == 8) *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    else *dst = *src;
  }
}

}  // namespace

void expand_k(const bf16* kvb, const bf16* rope, bf16* k, ExpandKShape s, cudaStream_t stream) {
  s = packed(s);
  const int64_t elements = s.tk * s.heads * (s.nope + s.rope);
  if (elements == 0) return;
  PB_CHECK(kvb && k && (rope || s.rope == 0), "expand_k: null pointer");
  const bool vector = s.nope % 8 == 0 && s.rope % 8 == 0 && s.v % 8 == 0 && s.ld_kvb % 8 == 0 &&
                      s.ld_rope % 8 == 0 && aligned16(kvb) && aligned16(k) && (s.rope == 0 || aligned16(rope));
  const int threads = 256;
  const int64_t work = vector ? elements / 8 : elements;
  const unsigned blocks = unsigned(std::min<int64_t>((work + threads - 1) / threads, 132 * 16));
  if (vector) expand_k_kernel<8><<<blocks, threads, 0, stream>>>(kvb, rope, k, s);
  else expand_k_kernel<1><<<blocks, threads, 0, stream>>>(kvb, rope, k, s);
  PB_CUDA_LAUNCH();
}

namespace ref {

void expand_k(const uint16_t* kvb, const uint16_t* rope, uint16_t* k, ExpandKShape s) {
  s = packed(s);
  const int d = s.nope + s.rope;
  for (int64_t t = 0; t < s.tk; ++t)
    for (int h = 0; h < s.heads; ++h)
      for (int c = 0; c < d; ++c)
        k[(t * s.heads + h) * d + c] =
            c < s.nope ? kvb[t * s.ld_kvb + int64_t(h) * (s.nope + s.v) + c] : rope[t * s.ld_rope + (c - s.nope)];
}

}  // namespace ref

}  // namespace pb
