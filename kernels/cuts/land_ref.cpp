// Plain C++ reference of cut 1 (land) and the shape check its launchers share.
//   p [rows, split_k, nt] f32 -> o [rows, n] bf16 bits, columns [off, off + n)
#include <cstdint>

#include "check.h"
#include "land.h"
#include "ref_math.h"

namespace pb {

void check_land_shape(const LandShape& s) {
  PB_CHECK(s.rows >= 0, "land: rows < 0");
  PB_CHECK(s.split_k >= 1, "land: split_k < 1");
  PB_CHECK(s.nt >= 0 && s.off >= 0 && s.n >= 0, "land: negative nt, off or n");
  PB_CHECK(s.n <= s.nt - s.off, "land: off + n > nt");
}

namespace ref {

void land(const float* p, uint16_t* o, const LandShape& s) {
  check_land_shape(s);
  const int64_t row_stride = int64_t(s.split_k) * s.nt;
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.n; ++c) {
      const float* src = p + r * row_stride + s.off + c;
      float acc = 0.0f;
      for (int k = 0; k < s.split_k; ++k) acc += src[int64_t(k) * s.nt];
      o[r * s.n + c] = f32_to_bf16_rn(acc);
    }
  }
}

}  // namespace ref
}  // namespace pb
