// Plain C++ references of cut 5 (bf16 elementwise family), term for term the
// contracts in elementwise.h. Compiled without FMA contraction; every
// expf / tanhf / rsqrtf comes from the Transcendentals argument.
#include <cstdint>
#include <cstring>

#include "check.h"
#include "elementwise.h"
#include "ref_math.h"

namespace pb::ref {

namespace {
constexpr int kHeadDim = 128;
}  // namespace

void add2(const uint16_t* a, const uint16_t* b, uint16_t* o, int64_t n) {
  PB_CHECK(n >= 0, "ref::add2: n < 0");
  for (int64_t i = 0; i < n; ++i) o[i] = bf16_add(a[i], b[i]);
}

void mul_sigmoid(const uint16_t* a, const uint16_t* g, uint16_t* o, int64_t n,
                 const Transcendentals& m) {
  PB_CHECK(n >= 0, "ref::mul_sigmoid: n < 0");
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t gate = f32_to_bf16_rn(sigmoid_f32(m, bf16_to_f32(g[i])));
    o[i] = bf16_mul(a[i], gate);
  }
}

void situ(const uint16_t* g, const uint16_t* u, uint16_t* o, int64_t n, const Transcendentals& m) {
  PB_CHECK(n >= 0, "ref::situ: n < 0");
  for (int64_t i = 0; i < n; ++i) {
    const float gf = bf16_to_f32(g[i]);
    const float uf = bf16_to_f32(u[i]);
    const float s = 4.0f * m.tanh(gf / 4.0f) * (1.0f / (1.0f + m.exp(-gf)));
    const float t = 25.0f * m.tanh(uf / 25.0f);
    o[i] = f32_to_bf16_rn(s * t);
  }
}

float butterfly_sum128(const float* v_in) {
  float v[kHeadDim];
  std::memcpy(v, v_in, sizeof v);
  for (int s = 64; s >= 1; s >>= 1) {
    float next[kHeadDim];
    for (int i = 0; i < kHeadDim; ++i) next[i] = v[i] + v[i ^ s];
    std::memcpy(v, next, sizeof v);
  }
  return v[0];
}

void o_norm_gate(const uint16_t* x, const uint16_t* g, const float* gamma, uint16_t* o,
                 int64_t row_heads, float eps, const Transcendentals& m) {
  PB_CHECK(row_heads >= 0, "ref::o_norm_gate: row_heads < 0");
  for (int64_t rh = 0; rh < row_heads; ++rh) {
    const int64_t e0 = rh * kHeadDim;
    float xf[kHeadDim], squares[kHeadDim];
    for (int i = 0; i < kHeadDim; ++i) {
      xf[i] = bf16_to_f32(x[e0 + i]);
      squares[i] = xf[i] * xf[i];
    }
    const float sum = butterfly_sum128(squares);
    const float scale = m.rsqrt(sum / 128.0f + eps);
    for (int i = 0; i < kHeadDim; ++i) {
      const uint16_t y = f32_to_bf16_rn(xf[i] * scale * gamma[i]);
      const uint16_t gate = f32_to_bf16_rn(sigmoid_f32(m, bf16_to_f32(g[e0 + i])));
      o[e0 + i] = bf16_mul(y, gate);
    }
  }
}

}  // namespace pb::ref
