// The expert GEMMs (kernels/moe_gemm.h): the grouped engine and the per-expert
// loop against a float64 reference and against each other, on uneven groups
// with empty experts, padded strides, f32 and bf16 outputs; rows past the
// experts' must stay untouched; the staging ring survives more back-to-back
// calls than it has slots; argmax (kernels/argmax.h) against its reference.
//
// Floors, per element, with mag = Σ_i |x_i w_i| (every bf16 product is exact
// in f32, so any f32 summation order is within (k + 2) · 2^-24 · mag of the
// exact sum):
//   f32 out   |y - ref| <= (k + 2) · 2^-24 · mag
//   bf16 out  the same plus 2^-8 · |ref| (the final rounding, with margin)
//   grouped vs loop: within the sum of their two floors. They are bit-identical
//   only when cuBLAS picks the same kernel (and split) for each expert's shape;
//   the grouped API chooses its own kernels, so bit identity is reported
//   (MESSAGE), not required.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "argmax.h"
#include "gemm.h"
#include "gpu_test.h"
#include "moe_gemm.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;

constexpr int64_t kGuardRows = 3;  // poisoned rows after the experts' rows

double value(uint16_t b) { return double(ref::bf16_to_f32(b)); }

struct GroupCase {
  std::vector<int32_t> counts;  // [E]
  int64_t n, k, ldx, ldy;
};

struct Operands {
  std::vector<uint16_t> x, w;  // x [V + guard, ldx], w [E, n, k]
  DeviceBuffer<bf16> dx, dw;
};

int64_t total_rows(const GroupCase& c) { return std::accumulate(c.counts.begin(), c.counts.end(), int64_t(0)); }

Operands make_operands(const GroupCase& c, uint64_t seed) {
  Operands o;
  const int64_t V = total_rows(c), E = int64_t(c.counts.size());
  o.x = random_bf16(size_t((V + kGuardRows) * c.ldx), seed, 0.5f);
  o.w = random_bf16(size_t(E * c.n * c.k), seed + 1, 0.5f);
  o.dx = DeviceBuffer<bf16>(o.x.size());
  o.dw = DeviceBuffer<bf16>(o.w.size());
  o.dx.upload(o.x);
  o.dw.upload(o.w);
  return o;
}

// y [V + guard, ldy] as doubles, after one engine's run into a poisoned buffer.
// Poison: 0xff bytes (NaN in both types).
std::vector<double> run_engine(MoeGemm& gemm, MoeGemmEngine e, const Blas& blas, const GroupCase& c,
                               const Operands& o, MoeGemmOut out, std::vector<uint8_t>* raw) {
  const int64_t rows = total_rows(c) + kGuardRows;
  const MoeGemmShape shape{int(c.counts.size()), c.n, c.k, c.ldx, c.ldy};
  std::vector<double> got(size_t(rows * c.ldy));
  if (out == MoeGemmOut::f32) {
    DeviceBuffer<float> dy(got.size());
    dy.poison();
    gemm.run(e, blas, c.counts.data(), o.dx.get(), o.dw.get(), dy.get(), out, shape, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<float> y = dy.download();
    for (size_t i = 0; i < y.size(); ++i) got[i] = y[i];
    raw->assign(reinterpret_cast<const uint8_t*>(y.data()), reinterpret_cast<const uint8_t*>(y.data() + y.size()));
  } else {
    DeviceBuffer<bf16> dy(got.size());
    dy.poison();
    gemm.run(e, blas, c.counts.data(), o.dx.get(), o.dw.get(), dy.get(), out, shape, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = dy.download<uint16_t>();
    for (size_t i = 0; i < y.size(); ++i) got[i] = value(y[i]);
    raw->assign(reinterpret_cast<const uint8_t*>(y.data()), reinterpret_cast<const uint8_t*>(y.data() + y.size()));
  }
  return got;
}

double floor_of(double ref, double mag, int64_t k, MoeGemmOut out) {
  const double f32 = double(k + 2) * std::ldexp(1.0, -24) * mag;
  return out == MoeGemmOut::f32 ? f32 : f32 + std::ldexp(1.0, -8) * std::fabs(ref);
}

// Checks `got` against float64: the experts' rows and columns within the
// floor, the padding columns and the guard rows untouched (NaN).
void check_against_reference(const std::vector<double>& got, const GroupCase& c, const Operands& o,
                             MoeGemmOut out, const char* engine) {
  INFO(engine << (out == MoeGemmOut::f32 ? " f32 out" : " bf16 out"));
  int64_t bad = 0, written_padding = 0;
  int64_t row = 0;
  for (size_t e = 0; e < c.counts.size(); ++e)
    for (int32_t r = 0; r < c.counts[e]; ++r, ++row)
      for (int64_t j = 0; j < c.ldy; ++j) {
        const double g = got[size_t(row * c.ldy + j)];
        if (j >= c.n) {
          written_padding += !std::isnan(g);
          continue;
        }
        double ref = 0, mag = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          const double p = value(o.x[size_t(row * c.ldx + l)]) * value(o.w[size_t((int64_t(e) * c.n + j) * c.k + l)]);
          ref += p;
          mag += std::fabs(p);
        }
        if (!(std::fabs(g - ref) <= floor_of(ref, mag, c.k, out))) {
          if (bad == 0) MESSAGE("first bad: expert " << e << " row " << row << " col " << j << " got " << g << " ref " << ref);
          ++bad;
        }
      }
  CHECK(bad == 0);
  CHECK(written_padding == 0);
  int64_t guard_written = 0;
  for (int64_t i = row * c.ldy; i < int64_t(got.size()); ++i) guard_written += !std::isnan(got[size_t(i)]);
  CHECK_MESSAGE(guard_written == 0, "rows past the experts' were written");
}

void check_engines(const GroupCase& c, MoeGemmOut out, uint64_t seed) {
  INFO("E " << c.counts.size() << " V " << total_rows(c) << " n " << c.n << " k " << c.k << " ldx " << c.ldx
            << " ldy " << c.ldy);
  const Operands o = make_operands(c, seed);
  Blas blas;
  MoeGemm gemm(int(c.counts.size()));
  std::vector<uint8_t> raw_loop, raw_grouped;
  const std::vector<double> loop = run_engine(gemm, MoeGemmEngine::loop, blas, c, o, out, &raw_loop);
  check_against_reference(loop, c, o, out, "loop");
  const bool grouped = grouped_gemm_supported(blas, out);
  if (out == MoeGemmOut::bf16) CHECK_MESSAGE(grouped, "cublasGemmGroupedBatchedEx refuses bf16 A/B/C");
  if (!grouped) {
    MESSAGE("cublasGemmGroupedBatchedEx refuses bf16 A/B with this C type: grouped engine not checked");
    return;
  }
  const std::vector<double> g = run_engine(gemm, MoeGemmEngine::grouped, blas, c, o, out, &raw_grouped);
  check_against_reference(g, c, o, out, "grouped");
  MESSAGE("grouped vs loop: " << (raw_grouped == raw_loop ? "bit-identical" : "differ in bits (both within the floor)"));
}

}  // namespace

TEST_CASE("moe_gemm: grouped cuBLAS support for bf16 A/B") {
  Blas blas;
  const bool f32 = grouped_gemm_supported(blas, MoeGemmOut::f32);
  const bool bf = grouped_gemm_supported(blas, MoeGemmOut::bf16);
  MESSAGE("cublasGemmGroupedBatchedEx bf16 A/B: f32 C " << (f32 ? "supported" : "NOT supported") << ", bf16 C "
                                                        << (bf ? "supported" : "NOT supported"));
  CHECK(bf);
  // The MoE block needs f32 C (the f32 partial that land, cut 1, turns into bf16);
  // without it the block falls back to the loop engine.
  CHECK_MESSAGE(f32, "no grouped bf16 -> f32 GEMM: the MoE block runs the per-expert loop");
}

TEST_CASE("moe_gemm: uneven and empty groups, both engines, both outputs == float64") {
  const std::vector<GroupCase> cases = {
      {{5, 0, 1, 17, 0, 33, 2}, 48, 40, 40, 48},          // packed, empty experts in the middle
      {{0, 0, 64, 3, 0, 129, 0, 1}, 96, 72, 80, 112},     // padded strides, empty first and last
      {{300, 0, 7, 0, 0, 0, 45, 12, 0, 1, 0, 0, 0, 90, 2, 0}, 256, 512, 512, 256},  // one big group
      {{1}, 8, 8, 8, 8},                                    // a single row
  };
  uint64_t seed = 100;
  for (const GroupCase& c : cases)
    for (MoeGemmOut out : {MoeGemmOut::f32, MoeGemmOut::bf16}) check_engines(c, out, seed += 10);
}

TEST_CASE("moe_gemm: every expert empty launches nothing") {
  const GroupCase c{{0, 0, 0}, 16, 16, 16, 16};
  const Operands o = make_operands(c, 7);
  Blas blas;
  MoeGemm gemm(3);
  for (MoeGemmEngine e : {MoeGemmEngine::loop, MoeGemmEngine::grouped}) {
    if (e == MoeGemmEngine::grouped && !grouped_gemm_supported(blas, MoeGemmOut::f32)) continue;
    std::vector<uint8_t> raw;
    const std::vector<double> y = run_engine(gemm, e, blas, c, o, MoeGemmOut::f32, &raw);
    int64_t written = 0;
    for (double v : y) written += !std::isnan(v);
    CHECK(written == 0);
  }
}

TEST_CASE("moe_gemm: back-to-back grouped calls past the staging ring, different groups each") {
  Blas blas;
  if (!grouped_gemm_supported(blas, MoeGemmOut::f32)) {
    MESSAGE("no grouped bf16 -> f32 GEMM: skipped");
    return;
  }
  constexpr int kCalls = 9;  // more than the ring's slots
  const int E = 6;
  const int64_t n = 32, k = 24;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> rows(0, 40);
  std::vector<GroupCase> cases;
  std::vector<Operands> ops;
  std::vector<DeviceBuffer<float>> ys;
  for (int i = 0; i < kCalls; ++i) {
    GroupCase c{std::vector<int32_t>(E), n, k, k, n};
    for (auto& v : c.counts) v = rows(rng) % 3 == 0 ? 0 : rows(rng);
    c.counts[size_t(i % E)] = 17;  // never all empty
    cases.push_back(c);
    ops.push_back(make_operands(c, 300 + i));
    ys.emplace_back(size_t((total_rows(c) + kGuardRows) * n));
    ys.back().poison();
  }
  PB_CUDA(cudaDeviceSynchronize());
  cudaStream_t st;
  PB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  MoeGemm gemm(E);
  // No host sync between the calls: each must keep its own pointer arrays.
  for (int i = 0; i < kCalls; ++i)
    gemm.run(MoeGemmEngine::grouped, blas, cases[size_t(i)].counts.data(), ops[size_t(i)].dx.get(),
             ops[size_t(i)].dw.get(), ys[size_t(i)].get(), MoeGemmOut::f32, MoeGemmShape{E, n, k, k, n}, st);
  PB_CUDA(cudaStreamSynchronize(st));
  PB_CUDA(cudaStreamDestroy(st));
  for (int i = 0; i < kCalls; ++i) {
    INFO("call " << i);
    const std::vector<float> y = ys[size_t(i)].download();
    check_against_reference(std::vector<double>(y.begin(), y.end()), cases[size_t(i)], ops[size_t(i)],
                            MoeGemmOut::f32, "grouped");
  }
}

TEST_CASE("MoeGroupSizes: the device counts arrive on the host") {
  const std::vector<int32_t> counts = {3, 0, 9, 1234567, 0, 7};
  DeviceBuffer<int32_t> d(counts.size());
  d.upload(counts);
  cudaStream_t st;
  PB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  MoeGroupSizes sizes(int(counts.size()));
  sizes.fetch(d.get(), st);
  const int32_t* h = sizes.wait();
  CHECK(std::vector<int32_t>(h, h + counts.size()) == counts);
  PB_CUDA(cudaStreamDestroy(st));
}

TEST_CASE("moe_gemm checks its contract") {
  Blas blas;
  MoeGemm gemm(2);
  const std::vector<int32_t> counts = {1, -1};
  DeviceBuffer<bf16> x(64), w(128);
  DeviceBuffer<float> y(64);
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, counts.data(), x.get(), w.get(), y.get(), MoeGemmOut::f32,
                        MoeGemmShape{2, 8, 8, 0, 0}, nullptr));
  const std::vector<int32_t> ok = {1, 1};
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y.get(), MoeGemmOut::f32,
                        MoeGemmShape{3, 8, 8, 0, 0}, nullptr));  // experts differ from the object's
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y.get(), MoeGemmOut::f32,
                        MoeGemmShape{2, 8, 8, 4, 0}, nullptr));  // ldx < k
  CHECK_THROWS(moe_gemm_engine_from_name("cutlass"));
}

// ---- argmax ----

namespace {

int32_t device_argmax(const std::vector<uint16_t>& x) {
  DeviceBuffer<bf16> d(x.size());
  d.upload(x);
  DeviceBuffer<int32_t> idx(1);
  idx.poison();
  argmax_bf16(d.get(), int64_t(x.size()), idx.get(), nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  return idx.download()[0];
}

}  // namespace

TEST_CASE("argmax_bf16: device == reference on random logits, ties, NaN and signed zeros") {
  constexpr uint16_t kNaN = 0x7fc0, kNegInf = 0xff80, kPosZero = 0x0000, kNegZero = 0x8000;
  for (size_t n : {size_t(1), size_t(7), size_t(1024), size_t(1025), size_t(5000), size_t(163840)}) {
    INFO("n " << n);
    std::vector<uint16_t> x = random_bf16(n, 900 + n, 1.0f);
    CHECK(device_argmax(x) == ref::argmax_bf16(x.data(), int64_t(n)));
    // The maximum at several places: the lowest index wins.
    const uint16_t top = ref::f32_to_bf16_rn(3.0e38f);
    for (size_t i : {n - 1, n / 2, n / 3}) x[i] = top;
    CHECK(device_argmax(x) == int32_t(n / 3 < n / 2 ? n / 3 : n / 2 < n - 1 ? n / 2 : n - 1));
    CHECK(device_argmax(x) == ref::argmax_bf16(x.data(), int64_t(n)));
    // NaN everywhere but one -inf: the -inf wins.
    std::vector<uint16_t> nan(n, kNaN);
    nan[n - 1] = kNegInf;
    CHECK(device_argmax(nan) == int32_t(n - 1));
    // All NaN: index 0.
    CHECK(device_argmax(std::vector<uint16_t>(n, kNaN)) == 0);
    // Signed zeros tie: the lowest index, whichever sign comes first.
    std::vector<uint16_t> zeros(n, ref::f32_to_bf16_rn(-1.0f));
    zeros[n - 1] = kPosZero;
    if (n > 1) zeros[n / 2] = kNegZero;
    CHECK(device_argmax(zeros) == int32_t(n > 1 ? n / 2 : n - 1));
  }
}
