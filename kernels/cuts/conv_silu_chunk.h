// conv_silu_chunk (cut 2): KDA's chunked short causal conv (4 taps, 3 carried)
// + SiLU, straight from the f32 projection partial. docs/design.md §4 "Cut 2".
//
//   p      [tokens, ld] f32     the band: columns 0..inner of each row, row stride ld floats
//   cw     [4, inner] f32       taps; cw[3] multiplies the current token
//   carry  [3, inner] bf16      conv inputs at positions -3, -2, -1
//   y      [tokens, inner] bf16
//   next   [3, inner] bf16      conv inputs at positions commit_rows-3 .. commit_rows-1
//                               (positions < 0 come from carry); written when
//                               commit_rows > 0, may be null when commit_rows == 0.
//                               Must not overlap carry (ping-pong two buffers).
//
// Per (t, c):  x_t = bf16(0.0f + p[t][c]);  w_j = x_{t-3+j} (carry[t+j][c] when t-3+j < 0)
//   ca = 0.0f; ca = fma(f32(w_0), cw[0][c], ca); ... fma(f32(w_2), cw[2][c], ca);
//   ca = fma(f32(x_t), cw[3][c], ca);
//   sb = f32(bf16(ca));  y = bf16(sb * (1.0f / (1.0f + expf(-sb))))
// Each `ca += f32(w) * cw` is one round-to-nearest FMA (__fmaf_rn / std::fma):
// the engine's default-contracted spelling. Every variant and the reference
// compute exactly this, so their outputs are bit-identical.
//
// Variants (pb::Variant, one dispatch point: conv_silu_chunk):
//   baseline  the retired chunked-prefill path, several launches: land the band
//             to bf16 (the land kernel, cut 1 switch), build every row's 3-slot
//             window with (up to) six strided cudaMemcpy2DAsync copies, a batched decode
//             conv over the materialized windows (one element per thread), then
//             one cudaMemcpyAsync of the commit row's successor window to next.
//   cut       one launch: a block owns a column slice and a run of 16 rows,
//             reads the f32 partial rows t-3..t directly, slides the window
//             through register-resident taps and writes next itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "ref_math.h"
#include "variant.h"

namespace pb {

struct ConvShape {
  int64_t tokens;       // rows of p and y
  int64_t inner;        // channels (12288 for K3's q/k/v)
  int64_t ld;           // row stride of p in floats, >= inner
  int64_t commit_rows;  // 0 <= commit_rows <= tokens; next = inputs before position commit_rows
};

// Scratch of the baseline path. Both regions must be 16-byte aligned.
//   landed   [tokens, inner] bf16          the band landed to bf16
//   windows  [tokens + 1, 3, inner] bf16   window of row t = inputs at t-3, t-2, t-1;
//                                          row `tokens` is the successor window of the
//                                          last row, so next = windows[commit_rows].
struct ConvBaselineScratch {
  __nv_bfloat16* landed;
  __nv_bfloat16* windows;
};

// Bytes for both regions, laid out by conv_baseline_scratch_from.
size_t conv_baseline_scratch_bytes(const ConvShape& s);
// Carves the scratch out of one allocation of conv_baseline_scratch_bytes(s)
// bytes (base 256-byte aligned, as cudaMalloc returns).
ConvBaselineScratch conv_baseline_scratch_from(void* base, const ConvShape& s);

// The baseline is several launches; `step` (may be null) runs each one as
// step(name, work) with name "land", "window_copy", "decode" or "carry_copy",
// so a caller can time them one by one. Null runs them directly.
using ConvStep = std::function<void(const char* name, const std::function<void()>& work)>;

void conv_silu_chunk_baseline(const float* p, const float* cw, const __nv_bfloat16* carry,
                              __nv_bfloat16* y, __nv_bfloat16* next, const ConvShape& s,
                              const ConvBaselineScratch& scratch, Variant land_variant,
                              cudaStream_t stream, const ConvStep* step = nullptr);

void conv_silu_chunk_cut(const float* p, const float* cw, const __nv_bfloat16* carry,
                         __nv_bfloat16* y, __nv_bfloat16* next, const ConvShape& s,
                         cudaStream_t stream);

// The one dispatch point on the cut switch. scratch and land_variant are used
// by the baseline only (scratch may be {nullptr, nullptr} for the cut).
void conv_silu_chunk(Variant v, const float* p, const float* cw, const __nv_bfloat16* carry,
                     __nv_bfloat16* y, __nv_bfloat16* next, const ConvShape& s,
                     const ConvBaselineScratch& scratch, Variant land_variant,
                     cudaStream_t stream, const ConvStep* step = nullptr);

namespace ref {
// Plain C++ reference of the contract above; bf16 as 16-bit patterns. next may
// be null when commit_rows == 0. Positions < 0 copy the carry's bits.
void conv_silu_chunk(const float* p, const float* cw, const uint16_t* carry, uint16_t* y,
                     uint16_t* next, const ConvShape& s, const Transcendentals& math);
}  // namespace ref

}  // namespace pb
