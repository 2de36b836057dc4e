// Plain C++ reference of conv_silu_chunk (cut 2); the contract is in
// conv_silu_chunk.h. Compiled with -ffp-contract=off: the contract's FMAs are
// the explicit std::fma calls, nothing else fuses.
#include <cmath>
#include <cstdint>

#include "check.h"
#include "conv_silu_chunk.h"

namespace pb::ref {

void conv_silu_chunk(const float* p, const float* cw, const uint16_t* carry, uint16_t* y,
                     uint16_t* next, const ConvShape& s, const Transcendentals& math) {
  PB_CHECK(s.tokens >= 0 && s.inner >= 0 && s.ld >= s.inner, "ref::conv_silu_chunk: bad shape");
  PB_CHECK(s.commit_rows >= 0 && s.commit_rows <= s.tokens,
           "ref::conv_silu_chunk: commit_rows outside [0, tokens]");
  PB_CHECK(s.commit_rows == 0 || next != nullptr, "ref::conv_silu_chunk: next is null");
  const int64_t inner = s.inner;
  for (int64_t c = 0; c < inner; ++c) {
    // window[j] = bf16 bits of the input at position t-3+j for the current row t.
    uint16_t window[3] = {carry[c], carry[inner + c], carry[2 * inner + c]};
    for (int64_t t = 0; t < s.tokens; ++t) {
      const uint16_t x = f32_to_bf16_rn(0.0f + p[t * s.ld + c]);
      float ca = 0.0f;
      ca = std::fma(bf16_to_f32(window[0]), cw[c], ca);
      ca = std::fma(bf16_to_f32(window[1]), cw[inner + c], ca);
      ca = std::fma(bf16_to_f32(window[2]), cw[2 * inner + c], ca);
      ca = std::fma(bf16_to_f32(x), cw[3 * inner + c], ca);
      const float sb = bf16_to_f32(f32_to_bf16_rn(ca));
      y[t * inner + c] = f32_to_bf16_rn(sb * (1.0f / (1.0f + math.exp(-sb))));
      window[0] = window[1];
      window[1] = window[2];
      window[2] = x;
      if (t == s.commit_rows - 1) {
        for (int j = 0; j < 3; ++j) next[j * inner + c] = window[j];
      }
    }
  }
}

}  // namespace pb::ref
