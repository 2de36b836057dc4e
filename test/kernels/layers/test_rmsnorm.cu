// RMSNorm on the device == ref::rmsnorm bit for bit (rsqrtf from the device),
// on the vector path and the scalar fallback (n % 8 != 0, padded strides,
// misaligned rows), with and without gamma, in place, outputs poisoned; and
// within 2 bf16 ulps of a float64 RMSNorm (the order is sound, not just fixed).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test.h"
#include "rmsnorm.h"

using namespace pb;
using namespace pb::test;

namespace {

struct Case {
  int64_t rows, n, ldx, ldo;
  int shift;  // elements the x and out base pointers move (1: misaligned)
  bool gamma, in_place;
};

void check_case(const Case& c, uint64_t seed) {
  INFO("rows " << c.rows << " n " << c.n << " ldx " << c.ldx << " ldo " << c.ldo << " shift " << c.shift
               << " gamma " << c.gamma << " in_place " << c.in_place << " seed " << seed);
  const int64_t ldo = c.in_place ? c.ldx : c.ldo;
  const std::vector<uint16_t> x = random_bf16(size_t(c.shift + c.rows * c.ldx), seed, 2.0f);
  const std::vector<float> g = random_f32(size_t(c.n), seed + 1, 1.5f);
  DeviceBuffer<__nv_bfloat16> dx(x.size()), dout(size_t(c.shift + c.rows * ldo));
  DeviceBuffer<float> dg(g.size());
  dx.upload(x);
  dg.upload(g);
  dout.poison();
  __nv_bfloat16* out = c.in_place ? dx.get() + c.shift : dout.get() + c.shift;
  const RmsNormShape s{c.rows, c.n, c.ldx, ldo};
  rmsnorm(dx.get() + c.shift, c.gamma ? dg.get() : nullptr, out, s, kRmsNormEps, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> got_all = c.in_place ? dx.download<uint16_t>() : dout.download<uint16_t>();
  std::vector<uint16_t> want(size_t(c.rows * ldo), 0xffff);
  if (c.in_place) want.assign(x.begin() + c.shift, x.end());
  evaluate_with_device_math([&](const ref::Transcendentals& m) {
    ref::rmsnorm(x.data() + c.shift, c.gamma ? g.data() : nullptr, want.data(), s, kRmsNormEps, m);
    return 0;
  });
  const std::vector<uint16_t> got(got_all.begin() + c.shift, got_all.end());
  std::string report;
  const int64_t bad = first_bit_mismatch(got, want, &report);
  CHECK_MESSAGE(bad < 0, report);
  // Against float64: within 2 bf16 ulps of the exact norm.
  int64_t far = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      const double v = ref::bf16_to_f32(x[size_t(c.shift + r * c.ldx + i)]);
      ss += v * v;
    }
    const double scale = 1.0 / std::sqrt(ss / double(c.n) + double(kRmsNormEps));
    for (int64_t i = 0; i < c.n; ++i) {
      const double exact = ref::bf16_to_f32(x[size_t(c.shift + r * c.ldx + i)]) * scale * (c.gamma ? g[size_t(i)] : 1.0);
      const double v = ref::bf16_to_f32(got[size_t(r * ldo + i)]);
      if (std::fabs(v - exact) > std::ldexp(std::fabs(exact), -6) + 1e-30) ++far;
    }
  }
  CHECK(far == 0);
}

}  // namespace

TEST_CASE("rmsnorm: device == reference bit for bit; near float64") {
  const Case cases[] = {
      {37, 7168, 7168, 7168, 0, true, false},  {5, 1536, 1600, 1544, 0, true, false},
      {9, 512, 576, 512, 0, false, false},     {3, 3584, 3584, 3584, 0, true, true},
      {4, 1000, 1000, 1000, 0, true, false},   {6, 13, 17, 15, 0, true, false},
      {5, 1536, 1536, 1536, 1, true, false},   {2, 1, 1, 1, 0, false, false},
      {3, 8200, 8200, 8200, 0, true, false},
  };
  uint64_t seed = 3;
  for (const Case& c : cases) check_case(c, seed += 17);
}
