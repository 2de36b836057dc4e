// Plain C++ reference of lse_merge (cut 4) and o_finalize; the contract is in
// lse_merge.h. Compiled with -ffp-contract=off: the contract's FMA is the
// explicit std::fma, nothing else fuses.
#include <cmath>
#include <cstdint>

#include "check.h"
#include "lse_merge.h"

namespace pb::ref {

void lse_merge(const uint16_t* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               MergeRows rows, int heads, bool reset, const Transcendentals& math) {
  PB_CHECK(rows.n >= 0 && heads >= 0, "ref::lse_merge: negative shape");
  PB_CHECK(rows.row0 >= 0 && rows.row0 + rows.n <= rows.acc_rows,
           "ref::lse_merge: rows [row0, row0 + n) outside the accumulator's rows");
  constexpr int d = kLseMergeHeadDim;
  for (int64_t q = 0; q < rows.n; ++q) {
    for (int head = 0; head < heads; ++head) {
      const int64_t lw_i = int64_t(head) * rows.n + q;
      const int64_t la_i = int64_t(head) * rows.acc_rows + rows.row0 + q;
      const int64_t win = (q * heads + head) * d;
      const int64_t acc = ((rows.row0 + q) * heads + head) * d;
      const float lw = lse_win[lw_i];
      if (reset) {
        for (int i = 0; i < d; ++i) o_acc[acc + i] = bf16_to_f32(o_win[win + i]);
        lse_acc[la_i] = lw;
        continue;
      }
      const float la = lse_acc[la_i];
      if (la == -INFINITY && lw == -INFINITY) continue;  // untouched
      const float m = std::fmax(la, lw);
      const float merged = m + math.log(math.exp(la - m) + math.exp(lw - m));
      const float w_acc = math.exp(la - merged);
      const float w_win = math.exp(lw - merged);
      for (int i = 0; i < d; ++i) {
        o_acc[acc + i] = std::fma(bf16_to_f32(o_win[win + i]), w_win, o_acc[acc + i] * w_acc);
      }
      lse_acc[la_i] = merged;
    }
  }
}

void lse_merge(const uint16_t* o_win, const float* lse_win, float* o_acc, float* lse_acc,
               int64_t t_q, int heads, bool reset, const Transcendentals& math) {
  lse_merge(o_win, lse_win, o_acc, lse_acc, MergeRows{t_q, 0, t_q}, heads, reset, math);
}

void o_finalize(const float* o_acc, uint16_t* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16_rn(o_acc[i]);
}

}  // namespace pb::ref
