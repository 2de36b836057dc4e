// The expert GEMMs (kernels/moe/moe_gemm.h): every engine (grouped cuBLAS, cutlass,
// the per-expert loop) and the bench's chunked grouped experiment against a
// float64 reference and against the loop, on uneven groups
// with empty experts, padded strides, one band and two (gate | up into two
// outputs); rows past the experts' and padding columns must stay untouched;
// the staging ring survives more back-to-back calls than it has slots; argmax
// (kernels/layers/argmax.h) against its reference.
//
// Floor, per element, with mag = Σ_i |x_i w_i| (every bf16 product is exact in
// f32, so any f32 summation order is within (k + 2) · 2^-24 · mag of the exact
// sum; the one rounding to bf16 adds at most 2^-9 |y|, taken with margin):
//   |y - ref| <= 2^-8 · |ref| + (k + 2) · 2^-24 · mag
// Engine vs loop: each within the floor; bit identity holds only when both
// accumulate in the same order (cuBLAS picks its kernel and split on its own;
// the cutlass kernel walks k in 64-wide wgmma steps), so it is reported
// (MESSAGE), not required. The cutlass engine must be available here: a build
// without the CUTLASS headers fails its availability case.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
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
  int64_t n, k, ldx, ldy;       // ldy: of each band's output [V, n / bands]
  int bands;
};

struct Operands {
  std::vector<uint16_t> x, w;  // x [V + guard, ldx], w [E, n, k]
  DeviceBuffer<bf16> dx, dw;
};

int64_t total_rows(const GroupCase& c) { return std::accumulate(c.counts.begin(), c.counts.end(), int64_t(0)); }
MoeGemmShape shape_of(const GroupCase& c) { return {int(c.counts.size()), c.n, c.k, c.ldx, c.ldy, c.bands}; }

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

// One poisoned output per band, [V + guard, ldy] each (poison: 0xff bytes, NaN).
struct Outputs {
  std::vector<DeviceBuffer<bf16>> bands;
  std::vector<bf16*> ptrs;
  Outputs(const GroupCase& c, cudaStream_t st) {
    for (int j = 0; j < c.bands; ++j) {
      bands.emplace_back(size_t((total_rows(c) + kGuardRows) * c.ldy));
      bands.back().poison(st);
      ptrs.push_back(bands.back().get());
    }
  }
  // Band after band, raw bits.
  std::vector<uint16_t> download() {
    std::vector<uint16_t> all;
    for (auto& b : bands) {
      const std::vector<uint16_t> h = b.download<uint16_t>();
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  }
};

std::vector<uint16_t> run_engine(MoeGemm& gemm, MoeGemmEngine e, const Blas& blas, const GroupCase& c,
                                 const Operands& o) {
  Outputs y(c, nullptr);
  gemm.run(e, blas, c.counts.data(), o.dx.get(), o.dw.get(), y.ptrs.data(), shape_of(c), nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  return y.download();
}

// Checks the bands' raw bits against float64: the experts' rows and columns
// within the floor, the padding columns and the guard rows untouched (NaN).
void check_against_reference(const std::vector<uint16_t>& got, const GroupCase& c, const Operands& o,
                             const char* engine) {
  INFO(engine);
  const int64_t V = total_rows(c), nb = c.n / c.bands, band_elems = (V + kGuardRows) * c.ldy;
  REQUIRE(int64_t(got.size()) == band_elems * c.bands);
  int64_t bad = 0, written_padding = 0, guard_written = 0;
  for (int j = 0; j < c.bands; ++j) {
    const uint16_t* y = got.data() + j * band_elems;
    int64_t row = 0;
    for (size_t e = 0; e < c.counts.size(); ++e)
      for (int32_t r = 0; r < c.counts[e]; ++r, ++row)
        for (int64_t col = 0; col < c.ldy; ++col) {
          const double g = value(y[row * c.ldy + col]);
          if (col >= nb) {
            written_padding += !std::isnan(g);
            continue;
          }
          const int64_t wrow = int64_t(e) * c.n + j * nb + col;  // the weight row of this band's column
          double ref = 0, mag = 0;
          for (int64_t l = 0; l < c.k; ++l) {
            const double p = value(o.x[size_t(row * c.ldx + l)]) * value(o.w[size_t(wrow * c.k + l)]);
            ref += p;
            mag += std::fabs(p);
          }
          const double floor = std::ldexp(1.0, -8) * std::fabs(ref) + double(c.k + 2) * std::ldexp(1.0, -24) * mag;
          if (!(std::fabs(g - ref) <= floor)) {
            if (bad == 0)
              MESSAGE("first bad: band " << j << " expert " << e << " row " << row << " col " << col << " got " << g
                                         << " ref " << ref);
            ++bad;
          }
        }
    for (int64_t i = row * c.ldy; i < band_elems; ++i) guard_written += !std::isnan(value(y[i]));
  }
  CHECK(bad == 0);
  CHECK(written_padding == 0);
  CHECK_MESSAGE(guard_written == 0, "rows past the experts' were written");
}

std::vector<uint16_t> run_chunks(MoeGemm& gemm, const Blas& blas, const GroupCase& c, const Operands& o, int chunk) {
  Outputs y(c, nullptr);
  gemm.run_grouped_chunks(blas, c.counts.data(), o.dx.get(), o.dw.get(), y.ptrs.data(), shape_of(c), chunk, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  return y.download();
}

// Bit identity vs the loop, per variant: grouped, cutlass, chunks (chunk 16).
struct Identity {
  int grouped = 0, cutlass = 0, chunks = 0;
};

void check_engines(const GroupCase& c, uint64_t seed, Identity& same) {
  INFO("E " << c.counts.size() << " V " << total_rows(c) << " n " << c.n << " k " << c.k << " ldx " << c.ldx
            << " ldy " << c.ldy << " bands " << c.bands);
  const Operands o = make_operands(c, seed);
  Blas blas;
  MoeGemm gemm(int(c.counts.size()));
  const std::vector<uint16_t> loop = run_engine(gemm, MoeGemmEngine::loop, blas, c, o);
  check_against_reference(loop, c, o, "loop");
  REQUIRE_MESSAGE(grouped_gemm_supported(blas), "cublasGemmGroupedBatchedEx refuses bf16 A/B/C, f32 compute");
  const std::vector<uint16_t> grouped = run_engine(gemm, MoeGemmEngine::grouped, blas, c, o);
  check_against_reference(grouped, c, o, "grouped");
  same.grouped += grouped == loop;
  const std::vector<uint16_t> chunks = run_chunks(gemm, blas, c, o, 16);
  check_against_reference(chunks, c, o, "grouped chunks of 16");
  same.chunks += chunks == loop;
  if (cutlass_gemm_available()) {
    const std::vector<uint16_t> cutlass = run_engine(gemm, MoeGemmEngine::cutlass, blas, c, o);
    check_against_reference(cutlass, c, o, "cutlass");
    same.cutlass += cutlass == loop;
  }
}

}  // namespace

TEST_CASE("moe_gemm: cublasGemmGroupedBatchedEx takes bf16 A/B/C with f32 compute") {
  Blas blas;
  const bool ok = grouped_gemm_supported(blas);
  MESSAGE("cublasGemmGroupedBatchedEx bf16 A/B/C, CUBLAS_COMPUTE_32F: " << (ok ? "supported" : "NOT supported"));
  CHECK(ok);
}

TEST_CASE("moe_gemm: the cutlass engine is built and runs on this device") {
  MESSAGE("cutlass engine: " << (cutlass_gemm_available() ? "available" : "NOT available (no CUTLASS in this build, "
                                                                       "or not an sm_90 device)"));
  CHECK(cutlass_gemm_available());
}

TEST_CASE("moe_gemm: uneven and empty groups, one and two bands, every engine == float64") {
  const std::vector<GroupCase> cases = {
      {{5, 0, 1, 17, 0, 33, 2}, 48, 40, 40, 48, 1},          // packed, empty experts in the middle
      {{5, 0, 1, 17, 0, 33, 2}, 96, 40, 40, 48, 2},          // the same as gate | up bands
      {{0, 0, 64, 3, 0, 129, 0, 1}, 96, 72, 80, 112, 1},     // padded strides, empty first and last
      {{0, 0, 64, 3, 0, 129, 0, 1}, 192, 72, 80, 112, 2},    // padded, two bands
      {{300, 0, 7, 0, 0, 0, 45, 12, 0, 1, 0, 0, 0, 90, 2, 0}, 512, 512, 512, 256, 2},  // one big group
      {{1}, 8, 8, 8, 8, 1},                                    // a single row
  };
  uint64_t seed = 100;
  Identity same;
  for (const GroupCase& c : cases) check_engines(c, seed += 10, same);
  MESSAGE("bit for bit == loop: grouped " << same.grouped << ", cutlass " << same.cutlass << ", grouped chunks "
                                          << same.chunks << " of " << cases.size() << " cases");
}

TEST_CASE("moe_gemm: every expert empty launches nothing") {
  const GroupCase c{{0, 0, 0}, 16, 16, 16, 8, 2};
  const Operands o = make_operands(c, 7);
  Blas blas;
  MoeGemm gemm(3);
  for (MoeGemmEngine e : {MoeGemmEngine::loop, MoeGemmEngine::grouped, MoeGemmEngine::cutlass}) {
    if (!moe_gemm_engine_available(e, blas)) continue;
    const std::vector<uint16_t> y = run_engine(gemm, e, blas, c, o);
    int64_t written = 0;
    for (uint16_t v : y) written += !std::isnan(value(v));
    CHECK(written == 0);
  }
}

TEST_CASE("moe_gemm: back-to-back grouped and cutlass calls past the staging rings, different groups each") {
  Blas blas;
  REQUIRE(grouped_gemm_supported(blas));
  for (MoeGemmEngine engine : {MoeGemmEngine::grouped, MoeGemmEngine::cutlass}) {
  if (!moe_gemm_engine_available(engine, blas)) continue;
  INFO("engine " << moe_gemm_engine_name(engine));
  constexpr int kCalls = 9;  // more than the ring's slots
  const int E = 6;
  const int64_t n = 64, k = 24;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> rows(0, 40);
  cudaStream_t st;
  PB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::vector<GroupCase> cases;
  std::vector<Operands> ops;
  std::vector<Outputs> ys;
  for (int i = 0; i < kCalls; ++i) {
    const int bands = 1 + i % 2;
    GroupCase c{std::vector<int32_t>(E), n, k, k, n / bands, bands};
    for (auto& v : c.counts) v = rows(rng) % 3 == 0 ? 0 : rows(rng);
    c.counts[size_t(i % E)] = 17;  // never all empty
    cases.push_back(c);
    ops.push_back(make_operands(c, 300 + i));
    ys.emplace_back(c, st);
  }
  PB_CUDA(cudaStreamSynchronize(st));
  MoeGemm gemm(E);
  // No host sync between the calls: each must keep its own pointer arrays.
  for (int i = 0; i < kCalls; ++i)
    gemm.run(engine, blas, cases[size_t(i)].counts.data(), ops[size_t(i)].dx.get(),
             ops[size_t(i)].dw.get(), ys[size_t(i)].ptrs.data(), shape_of(cases[size_t(i)]), st);
  PB_CUDA(cudaStreamSynchronize(st));
  PB_CUDA(cudaStreamDestroy(st));
  for (int i = 0; i < kCalls; ++i) {
    INFO("call " << i);
    check_against_reference(ys[size_t(i)].download(), cases[size_t(i)], ops[size_t(i)],
                            moe_gemm_engine_name(engine));
  }
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
  DeviceBuffer<bf16> x(64), w(256), y0(64), y1(64);
  bf16* const y[2] = {y0.get(), y1.get()};
  bf16* const null_band[2] = {y0.get(), nullptr};
  const std::vector<int32_t> ok = {1, 1};
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, counts.data(), x.get(), w.get(), y, MoeGemmShape{2, 8, 8, 0, 0, 1},
                        nullptr));  // a negative count
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y, MoeGemmShape{3, 8, 8, 0, 0, 1},
                        nullptr));  // experts differ from the object's
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y, MoeGemmShape{2, 8, 8, 4, 0, 1},
                        nullptr));  // ldx < k
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y, MoeGemmShape{2, 9, 8, 0, 0, 2},
                        nullptr));  // n does not split into two bands
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y, MoeGemmShape{2, 9, 8, 0, 0, 3},
                        nullptr));  // more bands than kMoeGemmMaxBands
  CHECK_THROWS(gemm.run(MoeGemmEngine::loop, blas, ok.data(), x.get(), w.get(), y, MoeGemmShape{2, 8, 8, 0, 2, 2},
                        nullptr));  // ldy < n / bands
  CHECK_THROWS(gemm.run(MoeGemmEngine::grouped, blas, ok.data(), x.get(), w.get(), null_band,
                        MoeGemmShape{2, 8, 8, 0, 0, 2}, nullptr));  // a null band
  CHECK_THROWS(moe_gemm_engine_from_name("cublaslt"));
  CHECK(moe_gemm_engine_from_name("cutlass") == MoeGemmEngine::cutlass);
  CHECK_THROWS(gemm.run_grouped_chunks(blas, ok.data(), x.get(), w.get(), y, MoeGemmShape{2, 8, 8, 0, 0, 1}, 0,
                                       nullptr));  // chunk 0
  if (cutlass_gemm_available()) {
    DeviceBuffer<bf16> w12(2 * 8 * 12), x12(2 * 12);
    CHECK_THROWS(gemm.run(MoeGemmEngine::cutlass, blas, ok.data(), x12.get(), w12.get(), y,
                          MoeGemmShape{2, 8, 12, 0, 0, 1}, nullptr));  // k not a multiple of 8 (TMA)
  }
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
