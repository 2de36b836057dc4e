// MLA key expansion (docs/design.md §2.1 MLA mixer step 5): the kv_b projection of
// a key segment's latents gives, per head, the key's NoPE half and the value;
// the rope half (never rotated: NoPE) is one 64-wide row per token, broadcast
// over heads. expand_k builds the FMHA's K; V is read in place as a strided
// view of kv_b's output (token stride heads·(nope + v), head stride nope + v,
// offset nope).
//
//   kvb   [tk, heads, nope + v] bf16 (row stride ld_kvb >= heads·(nope + v))
//   rope  [tk, rope] bf16 (row stride ld_rope)
//   k     [tk, heads, nope + rope] bf16, packed
//   k[t][h][c] = kvb[t][h][c] for c < nope, rope[t][c - nope] otherwise: a bit copy.
// 16-byte moves when nope, rope, ld_kvb, ld_rope are multiples of 8 elements and
// the pointers 16-byte aligned; 2-byte moves otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

struct ExpandKShape {
  int64_t tk = 0;
  int heads = 0, nope = 0, rope = 0, v = 0;
  int64_t ld_kvb = 0, ld_rope = 0;  // 0 = packed
};

void expand_k(const __nv_bfloat16* kvb, const __nv_bfloat16* rope, __nv_bfloat16* k, ExpandKShape s,
              cudaStream_t stream);

namespace ref {
void expand_k(const uint16_t* kvb, const uint16_t* rope, uint16_t* k, ExpandKShape s);
}

}  // namespace pb
