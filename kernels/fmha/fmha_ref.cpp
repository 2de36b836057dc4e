// Plain C++ float64 reference of the FMHA forward with LSE; the contract is in
// fmha.h. Scores, softmax and output in double from the bf16 inputs, so it is
// the exact answer every engine is held to within the floors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "check.h"
#include "fmha.h"
#include "ref_math.h"

namespace pb::ref {

void fmha(const uint16_t* q, int64_t q_token_stride, int64_t q_head_stride, const uint16_t* k,
          int64_t k_token_stride, int64_t k_head_stride, const uint16_t* v, int64_t v_token_stride,
          int64_t v_head_stride, double* o, double* lse, const FmhaShape& s) {
  PB_CHECK(s.tq >= 0 && s.tk >= 0 && s.heads >= 0, "ref::fmha: negative shape");
  PB_CHECK(s.d_qk >= 1 && s.d_v >= 1, "ref::fmha: head dims must be positive");
  const double scale = s.scale;
  const int dqk = s.d_qk, dv = s.d_v;
  std::vector<double> qi(static_cast<size_t>(dqk)), kh(static_cast<size_t>(s.tk) * dqk),
      vh(static_cast<size_t>(s.tk) * dv), score(static_cast<size_t>(s.tk));
  for (int h = 0; h < s.heads; ++h) {
    for (int64_t j = 0; j < s.tk; ++j) {
      for (int c = 0; c < dqk; ++c) kh[j * dqk + c] = bf16_to_f32(k[j * k_token_stride + h * k_head_stride + c]);
      for (int c = 0; c < dv; ++c) vh[j * dv + c] = bf16_to_f32(v[j * v_token_stride + h * v_head_stride + c]);
    }
    for (int64_t i = 0; i < s.tq; ++i) {
      double* oi = o + (i * s.heads + h) * dv;
      // Keys [0, end): all of them, or (causal, bottom-right) j <= i + tk - tq.
      const int64_t end = s.causal ? std::clamp<int64_t>(i + s.tk - s.tq + 1, 0, s.tk) : s.tk;
      if (end == 0) {
        std::fill(oi, oi + dv, 0.0);
        lse[h * s.tq + i] = -std::numeric_limits<double>::infinity();
        continue;
      }
      for (int c = 0; c < dqk; ++c) qi[c] = bf16_to_f32(q[i * q_token_stride + h * q_head_stride + c]);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < end; ++j) {
        double dot = 0.0;
        for (int c = 0; c < dqk; ++c) dot += qi[c] * kh[j * dqk + c];
        score[j] = scale * dot;
        m = std::max(m, score[j]);
      }
      double sum = 0.0;
      std::fill(oi, oi + dv, 0.0);
      for (int64_t j = 0; j < end; ++j) {
        const double w = std::exp(score[j] - m);
        sum += w;
        for (int c = 0; c < dv; ++c) oi[c] += w * vh[j * dv + c];
      }
      for (int c = 0; c < dv; ++c) oi[c] /= sum;
      lse[h * s.tq + i] = m + std::log(sum);
    }
  }
}

}  // namespace pb::ref
