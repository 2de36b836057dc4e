// The cuBLAS projection wrapper (kernels/common/gemm.h) against a double reference:
// row-major x·wᵀ with f32 and bf16 outputs, odd sizes and padded strides, and
// the batched f32 product the KDA fold uses. Floors: cuBLAS accumulates in f32
// (its blocking order is its own), so |got - ref| <= 1e-5 · Σ|x||w| per element
// for f32 outputs, plus half a bf16 ulp of |ref| for bf16 outputs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gemm.h"
#include "gpu_test.h"

using namespace pb;
using namespace pb::test;

namespace {

double bf16_value(uint16_t b) { return double(pb::ref::bf16_to_f32(b)); }

// Σ_l a[l]·b[l] over k bf16 values in double, and Σ|a[l]·b[l]| into *mag.
double dot_bf16(const uint16_t* a, const uint16_t* b, int64_t k, double* mag) {
  double sum = 0;
  *mag = 0;
  for (int64_t l = 0; l < k; ++l) {
    const double p = bf16_value(a[l]) * bf16_value(b[l]);
    sum += p;
    *mag += std::fabs(p);
  }
  return sum;
}

struct Case {
  int64_t m, n, k, ldx, ldw, ldy;
};

void check_projection(const Case& c, bool bf16_out, uint64_t seed) {
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " ldx " << c.ldx << " ldw " << c.ldw << " ldy " << c.ldy
            << (bf16_out ? " bf16 out" : " f32 out"));
  const std::vector<uint16_t> x = random_bf16(size_t(c.m * c.ldx), seed, 0.5f);
  const std::vector<uint16_t> w = random_bf16(size_t(c.n * c.ldw), seed + 1, 0.5f);
  DeviceBuffer<__nv_bfloat16> dx(x.size()), dw(w.size());
  dx.upload(x);
  dw.upload(w);
  Blas blas;
  const GemmDims d{c.m, c.n, c.k, c.ldx, c.ldw, c.ldy};
  std::vector<double> got(size_t(c.m * c.ldy));
  if (bf16_out) {
    DeviceBuffer<__nv_bfloat16> dy(got.size());
    dy.poison();
    gemm_bf16out(blas, dx.get(), dw.get(), dy.get(), d, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = dy.download<uint16_t>();
    for (size_t i = 0; i < y.size(); ++i) got[i] = bf16_value(y[i]);
  } else {
    DeviceBuffer<float> dy(got.size());
    dy.poison();
    gemm_f32out(blas, dx.get(), dw.get(), dy.get(), d, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<float> y = dy.download();
    for (size_t i = 0; i < y.size(); ++i) got[i] = y[i];
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double mag = 0;
      const double ref = dot_bf16(&x[size_t(i * c.ldx)], &w[size_t(j * c.ldw)], c.k, &mag);
      const double tol = 1e-5 * mag + (bf16_out ? std::ldexp(std::fabs(ref), -8) : 0.0) + 1e-30;
      const double g = got[size_t(i * c.ldy + j)];
      if (!(std::fabs(g - ref) <= tol) && bad++ < 5) FAIL_CHECK("y[" << i << "][" << j << "] = " << g << ", ref " << ref);
    }
  CHECK(bad == 0);
  // Padding columns between n and ldy stay untouched (poison = NaN).
  for (int64_t i = 0; i < c.m && c.ldy > c.n; ++i) CHECK(std::isnan(got[size_t(i * c.ldy + c.n)]));
}

}  // namespace

TEST_CASE("gemm: x·wᵀ, f32 and bf16 outputs, odd shapes and strides") {
  const Case cases[] = {
      {1, 1, 1, 1, 1, 1},     {7, 13, 29, 29, 29, 13}, {33, 65, 130, 136, 144, 72},
      {128, 96, 512, 512, 512, 96}, {5, 300, 64, 80, 64, 301},
  };
  uint64_t seed = 11;
  for (const Case& c : cases) {
    check_projection(c, false, seed);
    check_projection(c, true, seed + 7);
    seed += 100;
  }
}

TEST_CASE("gemm: batched f32 x·w per batch entry") {
  const int64_t m = 17, n = 24, k = 31, batch = 3;
  const std::vector<float> x = random_f32(size_t(batch * m * k), 5, 0.5f), w = random_f32(size_t(batch * k * n), 6, 0.5f);
  DeviceBuffer<float> dx(x.size()), dw(w.size()), dy(size_t(batch * m * n));
  dx.upload(x);
  dw.upload(w);
  dy.poison();
  Blas blas;
  gemm_f32_batched(blas, dx.get(), dw.get(), dy.get(), m, n, k, batch, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  int64_t bad = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double p = double(x[size_t((b * m + i) * k + l)]) * double(w[size_t((b * k + l) * n + j)]);
          ref += p;
          mag += std::fabs(p);
        }
        if (!(std::fabs(y[size_t((b * m + i) * n + j)] - ref) <= 1e-5 * mag + 1e-30) && bad++ < 5)
          FAIL_CHECK("batch " << b << " y[" << i << "][" << j << "] = " << y[size_t((b * m + i) * n + j)] << ", ref " << ref);
      }
  CHECK(bad == 0);
}

// A kernel reading a GEMM's output: y_copy = y.
__global__ void copy_f32_kernel(const float* __restrict__ y, float* __restrict__ out, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = y[i];
}

// The superstep's pattern, for compute-sanitizer's initcheck (scripts/dev/sanitize.sh
// runs this suite under it): cuBLAS writes a fresh, never-initialized f32 output at
// the KDA block's small-projection shape (256 wide, K3's 7168 deep), and one of our
// kernels then reads all of it. The values prove that cuBLAS wrote every element,
// so a report of uninitialized reads here is the tool not seeing cuBLAS's stores.
TEST_CASE("gemm: our kernel reads a fresh f32 output that cuBLAS wrote whole") {
  const int64_t m = 320, n = 256, k = 7168;
  const std::vector<uint16_t> x = random_bf16(size_t(m * k), 31, 0.5f), w = random_bf16(size_t(n * k), 32, 0.5f);
  DeviceBuffer<__nv_bfloat16> dx(x.size()), dw(w.size());
  dx.upload(x);
  dw.upload(w);
  DeviceBuffer<float> dy(size_t(m * n)), dcopy(size_t(m * n));  // dy: never written before the GEMM
  Blas blas;
  gemm_f32out(blas, dx.get(), dw.get(), dy.get(), {m, n, k}, nullptr);
  copy_f32_kernel<<<unsigned((m * n + 255) / 256), 256>>>(dy.get(), dcopy.get(), m * n);
  PB_CUDA(cudaGetLastError());
  PB_CUDA(cudaDeviceSynchronize());
  const std::vector<float> y = dcopy.download();
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double mag = 0;
      const double ref = dot_bf16(&x[size_t(i * k)], &w[size_t(j * k)], k, &mag);
      if (!(std::fabs(y[size_t(i * n + j)] - ref) <= 1e-5 * mag + 1e-30) && bad++ < 5)
        FAIL_CHECK("y[" << i << "][" << j << "] = " << y[size_t(i * n + j)] << ", ref " << ref);
    }
  CHECK(bad == 0);
}
