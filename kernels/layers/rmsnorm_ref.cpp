// The RMSNorm contract of rmsnorm.h on the host, term for term.
#include <cmath>
#include <vector>

#include "check.h"
#include "ref_math.h"
#include "rmsnorm.h"

namespace pb::ref {

void rmsnorm(const uint16_t* x, const float* gamma, uint16_t* out, RmsNormShape s, float eps,
             const Transcendentals& m) {
  if (s.ldx == 0) s.ldx = s.n;
  if (s.ldo == 0) s.ldo = s.n;
  PB_CHECK(s.rows >= 0 && s.n >= 1 && s.ldx >= s.n && s.ldo >= s.n, "ref::rmsnorm: bad shape");
  constexpr int kSlots = 128;
  const int64_t chunks = (s.n + 7) / 8;
  for (int64_t r = 0; r < s.rows; ++r) {
    const uint16_t* xr = x + r * s.ldx;
    float slot[kSlots];
    for (int t = 0; t < kSlots; ++t) {
      float ss = 0.0f;
      for (int64_t j = t; j < chunks; j += kSlots)
        for (int64_t i = 8 * j; i < 8 * j + 8 && i < s.n; ++i) {
          const float f = bf16_to_f32(xr[i]);
          ss = std::fma(f, f, ss);
        }
      slot[t] = ss;
    }
    float warp[4];
    for (int w = 0; w < 4; ++w) {
      float* v = slot + 32 * w;
      // Lane l ends with the same value for every l; follow lane 0's pairs.
      float lanes[32];
      for (int l = 0; l < 32; ++l) lanes[l] = v[l];
      for (int st = 16; st >= 1; st >>= 1) {
        float next[32];
        for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ st];
        for (int l = 0; l < 32; ++l) lanes[l] = next[l];
      }
      warp[w] = lanes[0];
    }
    const float ss = (warp[0] + warp[1]) + (warp[2] + warp[3]);
    const float scale = m.rsqrt(ss / float(s.n) + eps);
    for (int64_t i = 0; i < s.n; ++i) {
      const float v = bf16_to_f32(xr[i]) * scale;
      out[r * s.ldo + i] = f32_to_bf16_rn(gamma ? v * gamma[i] : v);
    }
  }
}

}  // namespace pb::ref
