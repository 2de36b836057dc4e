// Plain C++ reference of AttnRes, term for term the contract in attnres.h:
// chunked slot partials, the balanced tree over 256 slots, the factored RMS
// score, the softmax and the FMA mix. Compiled without FMA contraction; every
// rsqrtf / expf comes from the Transcendentals argument.
#include <cstdint>
#include <cstring>
#include <vector>

#include "attnres.h"
#include "check.h"
#include "ref_math.h"

namespace pb::ref {

namespace {
constexpr int kSlots = kAttnResSlots;
constexpr int kChunk = 8;  // elements per chunk (one 16-byte load in the cut)
}  // namespace

float attnres_tree_sum(const float* slots) {
  float v[kSlots];
  std::memcpy(v, slots, sizeof v);
  for (int w = 1; w < kSlots; w *= 2)
    for (int s = 0; s < kSlots; s += 2 * w) v[s] = v[s] + v[s + w];
  return v[0];
}

void attnres_softmax(const float* s, int n, float* p, const Transcendentals& m) {
  PB_CHECK(n >= 1, "ref::attnres_softmax: n < 1");
  float mx = s[0];
  for (int c = 1; c < n; ++c) mx = s[c] > mx ? s[c] : mx;
  std::vector<float> e(size_t(n), 0.0f);
  float sum = 0.0f;
  for (int c = 0; c < n; ++c) {
    e[c] = m.exp(s[c] - mx);
    sum = sum + e[c];
  }
  for (int c = 0; c < n; ++c) p[c] = e[c] / sum;
}

void attnres(const uint16_t* snap, const uint16_t* partial, const float* sw, float* scores,
             uint16_t* out, const AttnResShape& shape, float eps, const Transcendentals& m) {
  const int64_t rows = shape.rows, hidden = shape.hidden;
  PB_CHECK(rows >= 0, "ref::attnres: rows < 0");
  PB_CHECK(shape.nb >= 1 && shape.nb <= kAttnResMaxBlocks, "ref::attnres: nb outside 1 .. 8");
  PB_CHECK(shape.snap_blocks >= shape.nb, "ref::attnres: snap_blocks < nb");
  PB_CHECK(hidden >= kChunk && hidden % kChunk == 0, "ref::attnres: hidden must be a multiple of 8");
  const int cands = shape.nb + 1;
  const int64_t chunks = hidden / kChunk;
  const float hidden_f = static_cast<float>(hidden);

  std::vector<const uint16_t*> x(size_t(cands), nullptr);
  float ss_slot[kSlots], dot_slot[kSlots], s[kAttnResMaxBlocks + 1], p[kAttnResMaxBlocks + 1];
  for (int64_t row = 0; row < rows; ++row) {
    for (int c = 0; c < cands; ++c)
      x[c] = c < shape.nb ? snap + (row * shape.snap_blocks + c) * hidden : partial + row * hidden;

    for (int c = 0; c < cands; ++c) {
      for (int t = 0; t < kSlots; ++t) ss_slot[t] = dot_slot[t] = 0.0f;
      for (int64_t j = 0; j < chunks; ++j) {  // ascending j: each slot's chunks in order
        const int slot = int(j % kSlots);
        for (int e = 0; e < kChunk; ++e) {
          const int64_t i = j * kChunk + e;
          const float xf = bf16_to_f32(x[c][i]);
          ss_slot[slot] = std::fma(xf, xf, ss_slot[slot]);
          dot_slot[slot] = std::fma(xf, sw[i], dot_slot[slot]);
        }
      }
      const float ss = attnres_tree_sum(ss_slot);
      const float dot = attnres_tree_sum(dot_slot);
      s[c] = dot * m.rsqrt(ss / hidden_f + eps);
      scores[row * cands + c] = s[c];
    }

    attnres_softmax(s, cands, p, m);
    for (int64_t i = 0; i < hidden; ++i) {
      float acc = 0.0f;
      for (int c = 0; c < cands; ++c) acc = std::fma(p[c], bf16_to_f32(x[c][i]), acc);
      out[row * hidden + i] = f32_to_bf16_rn(acc);
    }
  }
}

}  // namespace pb::ref
