// Plain C++ reference of lse_merge (cut 4) and o_finalize; the contract is in
// lse_merge.h. Compiled with -ffp-contract=off: the contract's FMA is the
// explicit std::fma, nothing else fuses.
#include <cmath>
#include <cstdint>

#include "check.h"
#include "lse_merge.h"

namespace pb::ref {

void lse_merge(const uint16_t* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               int64_t t_q, int heads, bool reset, const Transcendentals& math) {
  PB_CHECK(t_q >= 0 && heads >= 0, "ref::lse_merge: negative shape");
  constexpr int d = kLseMergeHeadDim;
  for (int64_t q = 0; q < t_q; ++q) {
    for (int head = 0; head < heads; ++head) {
      const int64_t li = int64_t(head) * t_q + q;
      const int64_t row = (q * heads + head) * d;
      const float lw = lse_win[li];
      if (reset) {
        for (int i = 0; i < d; ++i) o_acc[row + i] = bf16_to_f32(o_win[row + i]);
        lse_acc[li] = lw;
        continue;
      }
      const float la = lse_acc[li];
      if (la == -INFINITY && lw == -INFINITY) continue;  // untouched
      const float m = std::fmax(la, lw);
      const float merged = m + math.log(math.exp(la - m) + math.exp(lw - m));
      const float w_acc = math.exp(la - merged);
      const float w_win = math.exp(lw - merged);
      for (int i = 0; i < d; ++i) {
        o_acc[row + i] = std::fma(bf16_to_f32(o_win[row + i]), w_win, o_acc[row + i] * w_acc);
      }
      lse_acc[li] = merged;
    }
  }
}

void o_finalize(const float* o_acc, uint16_t* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16_rn(o_acc[i]);
}

}  // namespace pb::ref
