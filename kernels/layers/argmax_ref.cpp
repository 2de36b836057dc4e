// argmax.h's order on the host.
#include <cmath>

#include "argmax.h"
#include "check.h"
#include "ref_math.h"

namespace pb::ref {

int32_t argmax_bf16(const uint16_t* logits, int64_t n) {
  PB_CHECK(n >= 1 && n <= INT32_MAX, "ref::argmax_bf16: n must be in [1, 2^31 - 1]");
  int32_t best = 0;
  float bv = bf16_to_f32(logits[0]);
  for (int64_t j = 1; j < n; ++j) {
    const float v = bf16_to_f32(logits[j]);
    // Strictly better only: equal values and later NaNs keep the lower index.
    const bool better = std::isnan(bv) ? !std::isnan(v) : (!std::isnan(v) && v > bv);
    if (better) {
      best = int32_t(j);
      bv = v;
    }
  }
  return best;
}

}  // namespace pb::ref
