// ref::rmsnorm (host math) against float64, so the reference the GPU test
// holds the kernel to is itself a sound RMSNorm: within 2 bf16 ulps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ref_math.h"
#include "rmsnorm.h"

TEST_CASE("ref::rmsnorm is an RMSNorm within 2 bf16 ulps") {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {1, 7, 8, 130, 1536, 7168}) {
    const int64_t rows = 3;
    std::vector<uint16_t> x(size_t(rows * n)), out(x.size());
    std::vector<float> g(static_cast<size_t>(n));
    for (auto& v : x) v = pb::ref::f32_to_bf16_rn(normal(rng));
    for (auto& v : g) v = normal(rng);
    pb::ref::rmsnorm(x.data(), g.data(), out.data(), {rows, n, n, n}, pb::kRmsNormEps, pb::ref::HostMath{});
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += std::pow(double(pb::ref::bf16_to_f32(x[size_t(r * n + i)])), 2);
      const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        const double exact = pb::ref::bf16_to_f32(x[size_t(r * n + i)]) * scale * g[size_t(i)];
        CHECK(std::fabs(pb::ref::bf16_to_f32(out[size_t(r * n + i)]) - exact) <= std::ldexp(std::fabs(exact), -6) + 1e-30);
      }
    }
  }
}
