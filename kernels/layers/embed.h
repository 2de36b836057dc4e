// Embedding gather and the layer-output checksum (docs/design.md §2.1, §6).
//
// embed_gather: out [rows, hidden] bf16, out[r] = table[ids[r]] (a bit copy of
//   one [hidden] bf16 row per token; ids in [0, vocab), checked by the caller).
//   16-byte moves when hidden % 8 == 0 and the pointers are 16-byte aligned.
// checksum_bf16: a 64-bit fingerprint of n bf16 words, independent of the
//   launch's blocking: sum over i (mod 2^64) of mix(i, bits_i), mix a 64-bit
//   hash of the index and the 16 bits. Equal buffers give equal sums; a single
//   changed bit changes the sum except with probability ~2^-64. *out is
//   written (not accumulated).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

void embed_gather(const __nv_bfloat16* table, const int32_t* ids, __nv_bfloat16* out, int64_t rows, int64_t hidden,
                  cudaStream_t stream);

void checksum_bf16(const __nv_bfloat16* x, int64_t n, unsigned long long* out, cudaStream_t stream);

namespace ref {
uint64_t checksum_bf16(const uint16_t* x, int64_t n);
}

}  // namespace pb
