// The FP8 expert GEMM (kernels/moe/moe_gemm_fp8_cutlass.h: CUTLASS 4.2's Hopper
// ptr-array grouped GEMM with 1x128 / 128x128 block scales) against a float64
// GEMM of the DEQUANTIZED operands, at scaled-down K3 shapes: gate|up (two
// bands of one weight into two outputs) and down (one band), skewed expert
// counts with 1-row experts, counts that are not multiples of 8 or 128, empty
// experts skipped as the bf16 engine skips them, padded row strides, one case
// at the real KB = 28 (k = 3584); the staging ring past its slots; the host
// contract. The same cases (at k with KB % 4 == 0) on the loop engine
// (MoeGemm::run_fp8, one cuBLASLt GEMM per expert and band over m rounded up
// to 4), whose rows past the experts' it may write stay within its slack; its
// scale relayout (moe_scales_by_expert) bit for bit against a host one.
//
// Operands: e4m3 codes, three in four a quantized N(0, 1) with ±4 sigma at
// ±448 (what a block quantizer writes), one in four any finite code (so ±448,
// the subnormals and ±0 all occur; never the NaN codes 0x7f / 0xff). Scales:
// positive f32, 2^U(-8, 1) (2.7 decades), with outliers ×2^±12 in some rows
// and blocks. The output is poisoned (0xff bytes: NaN) before the run: rows past
// the experts', and the padding columns of a padded ldy, must stay NaN.
//
// Floor. ref = Σ_l a(r, l) b(c, l) in float64 of the dequantized values,
// mag = Σ_l |a(r, l) b(c, l)|. The kernel sums each 128-wide K block of exact
// code products on the tensor core in 4 wgmma steps of 32; Hopper's FP8 MMA
// aligns a step's products and the running sum to the largest exponent and
// keeps about 13 fraction bits (truncating; DeepSeek-V3 §3.3 measured "around
// 14 bits"), so a step errs by at most 33 · 2^-13 of the largest magnitude in
// it, which is below the block's Σ|products|: a block errs by at most
// 4 · 33 · 2^-13 < 2^-5.9 of its own Σ|a b|. Promoting the block into the f32
// accumulator (block sum × (sfa · sfb), f32, no FMA in this build) adds
// ~3 · 2^-24 per block; the bf16 round adds at most 2^-8 |y|. Per element:
//   |got - ref| <= 2^-8 · |ref| + 2^-5 · mag                        (1)
// (the model's worst case with a factor 2 of margin; realistic sign-mixed data
// stays far below it: the suite prints the largest share of (1) used). Per
// problem, over its m_i x n elements:
//   ||got - ref||_2 <= (2^-8 + 2^-10) · ||ref||_2                    (2)
// 2^-8 (3.9e-3) bounds the bf16 rounding alone (its expected RMS is ~1.6e-3
// for these values); 2^-10 is the budget for the tensor core's truncation,
// whose expected RMS is ~5e-4 relative. Expected measure of (2): ~2e-3.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.h"

#if defined(PB_HAVE_CUTLASS)
#include "gemm_fp8.h"
#include "moe_gemm.h"
#include "moe_gemm_fp8_cutlass.h"
#endif

using namespace pb;
using namespace pb::test;

#if !defined(PB_HAVE_CUTLASS)

TEST_CASE("moe_gemm fp8 cutlass: the kernel is built") {
  MESSAGE("this build has no CUTLASS (cmake/cutlass.cmake): the FP8 grouped GEMM is not built");
  CHECK(false);
}

#else

namespace {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;

constexpr int64_t kGuardRows = 3;  // poisoned output rows after the experts' rows
constexpr int64_t kBlock = kFp8ScaleBlock;

// The value of an e4m3 code (OCP E4M3 "fn": bias 7, no infinities, 0x7f/0xff NaN).
double e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(double(8 + m), e - 10);
  return (c & 0x80) ? -mag : mag;
}

bool e4m3_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }

// Nearest e4m3 code to v (|v| <= 448), ties to the even code.
uint8_t e4m3_nearest(double v) {
  static const std::vector<double> positive = [] {
    std::vector<double> p;
    for (int c = 0; c <= 0x7e; ++c) p.push_back(e4m3_value(uint8_t(c)));
    return p;
  }();
  const double a = std::min(std::fabs(v), 448.0);
  const auto hi = std::lower_bound(positive.begin(), positive.end(), a);
  int c = int(hi - positive.begin());
  if (c > 0 && (hi == positive.end() || a - positive[size_t(c - 1)] < *hi - a ||
                (a - positive[size_t(c - 1)] == *hi - a && (c - 1) % 2 == 0)))
    --c;
  return uint8_t(c | (v < 0 ? 0x80 : 0));
}

uint8_t random_code(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 3), any(0, 253);
  if (pick(rng) == 0) {
    const int c = any(rng);  // 0 .. 253 -> every code but 0x7f and 0xff
    return uint8_t(c < 0x7f ? c : c + 1);
  }
  std::normal_distribution<double> normal(0.0, 112.0);  // 4 sigma = 448
  return e4m3_nearest(normal(rng));
}

float random_scale(std::mt19937_64& rng, double outlier_rate) {
  std::uniform_real_distribution<double> expo(-8.0, 1.0), u(0.0, 1.0);
  double s = std::exp2(expo(rng));
  if (u(rng) < outlier_rate) s *= u(rng) < 0.5 ? 4096.0 : 1.0 / 4096.0;
  return float(s);
}

struct Fp8Case {
  std::vector<int32_t> counts;  // [E]
  int64_t n_total, k;           // every expert's weight is [n_total, k]
  int64_t ldx, ldy;             // ldy: of each band's output [V, n_total / bands]
  int bands;
};

int64_t total_rows(const Fp8Case& c) { return std::accumulate(c.counts.begin(), c.counts.end(), int64_t(0)); }

// Host codes and scales, and their device copies, in the harness's layouts:
//   x [V, ldx] e4m3, sx [V, KB] f32 (K-major 1x128), w [E, n_total, k] e4m3,
//   sw [E, n_total / 128, KB] f32 (K-major 128x128), KB = k / 128.
struct Operands {
  std::vector<uint8_t> x, w;
  std::vector<float> sx, sw;
  DeviceBuffer<uint8_t> dx, dw;
  DeviceBuffer<float> dsx, dsw;
};

// slack_rows: rows of random codes after the V rows (the loop engine reads them).
Operands make_operands(const Fp8Case& c, uint64_t seed, int64_t slack_rows = 0) {
  Operands o;
  std::mt19937_64 rng(seed);
  const int64_t V = total_rows(c), E = int64_t(c.counts.size()), KB = c.k / kBlock;
  o.x.assign(size_t((V + slack_rows) * c.ldx), 0);
  for (int64_t r = 0; r < V + slack_rows; ++r)
    for (int64_t l = 0; l < c.ldx; ++l) o.x[size_t(r * c.ldx + l)] = l < c.k ? random_code(rng) : 0x7f;  // NaN pad
  o.w.resize(size_t(E * c.n_total * c.k));
  for (auto& v : o.w) v = random_code(rng);
  o.sx.resize(size_t(V * KB));
  for (auto& v : o.sx) v = random_scale(rng, 0.02);
  o.sw.resize(size_t(E * (c.n_total / kBlock) * KB));
  for (auto& v : o.sw) v = random_scale(rng, 0.1);
  // One planted outlier of each kind, wherever the draw put none.
  if (V > 0) o.sx[0] *= 4096.0f;
  o.sw[o.sw.size() - 1] *= 1.0f / 4096.0f;
  o.dx = DeviceBuffer<uint8_t>(o.x.size());
  o.dw = DeviceBuffer<uint8_t>(o.w.size());
  o.dsx = DeviceBuffer<float>(o.sx.size());
  o.dsw = DeviceBuffer<float>(o.sw.size());
  if (!o.x.empty()) o.dx.upload(o.x);
  o.dw.upload(o.w);
  if (!o.sx.empty()) o.dsx.upload(o.sx);
  o.dsw.upload(o.sw);
  return o;
}

// One poisoned output per band, [V + writable + guard, ldy] each: the engine
// may write the `writable` rows after the experts' (the loop engine's slack),
// and no row after those.
struct Outputs {
  std::vector<DeviceBuffer<bf16>> bands;
  std::vector<bf16*> ptrs;
  int64_t writable = 0;
  Outputs(const Fp8Case& c, cudaStream_t st, int64_t writable_rows = 0) : writable(writable_rows) {
    for (int j = 0; j < c.bands; ++j) {
      bands.emplace_back(size_t((total_rows(c) + writable + kGuardRows) * c.ldy));
      bands.back().poison(st);
      ptrs.push_back(bands.back().get());
    }
  }
};

// The problems of one call, in the bf16 engine's order (expert e's band 0,
// band 1, then the next non-empty expert); empty experts get none.
struct Problems {
  std::vector<int32_t> m;
  std::vector<const fp8*> a, b;
  std::vector<const float*> sfa, sfb;
  std::vector<bf16*> d;
};

Problems problems_of(const Fp8Case& c, const Operands& o, const Outputs& y) {
  Problems p;
  const int64_t nb = c.n_total / c.bands, KB = c.k / kBlock;
  const auto* x = reinterpret_cast<const fp8*>(o.dx.get());
  const auto* w = reinterpret_cast<const fp8*>(o.dw.get());
  int64_t offset = 0;
  for (size_t e = 0; e < c.counts.size(); ++e) {
    const int64_t count = c.counts[e];
    if (count > 0)
      for (int j = 0; j < c.bands; ++j) {
        p.m.push_back(int32_t(count));
        p.a.push_back(x + offset * c.ldx);
        p.sfa.push_back(o.dsx.get() + offset * KB);
        p.b.push_back(w + (int64_t(e) * c.n_total + j * nb) * c.k);
        p.sfb.push_back(o.dsw.get() + (int64_t(e) * c.n_total / kBlock + j * nb / kBlock) * KB);
        p.d.push_back(y.ptrs[size_t(j)] + offset * c.ldy);
      }
    offset += count;
  }
  return p;
}

void run_case(CutlassFp8GroupedGemm& gemm, const Fp8Case& c, const Problems& p, cudaStream_t st) {
  const int64_t KB = c.k / kBlock;
  gemm.run(int(p.m.size()), p.m.data(), c.n_total / c.bands, c.k, p.a.data(), c.ldx, p.sfa.data(), KB, p.b.data(),
           c.k, p.sfb.data(), KB, p.d.data(), c.ldy, st);
}

struct Worst {
  double rel_l2 = 0;      // largest ||got - ref|| / ||ref|| over problems
  double floor_use = 0;   // largest |got - ref| / floor (1) over elements
  double err_per_mag = 0; // largest (|got - ref| - 2^-8 |ref|) / mag
  int64_t elements = 0, equal_to_rounded_ref = 0;
};

// Checks every band's output against float64 of the dequantized operands.
void check_against_reference(const Fp8Case& c, const Operands& o, Outputs& y, Worst& worst) {
  const int64_t V = total_rows(c), nb = c.n_total / c.bands, KB = c.k / kBlock;
  // Dequantized operands, row by row.
  std::vector<double> xd(size_t(V * c.k)), wd(o.w.size());
  for (int64_t r = 0; r < V; ++r)
    for (int64_t l = 0; l < c.k; ++l)
      xd[size_t(r * c.k + l)] = e4m3_value(o.x[size_t(r * c.ldx + l)]) * double(o.sx[size_t(r * KB + l / kBlock)]);
  for (size_t e = 0; e < c.counts.size(); ++e)
    for (int64_t row = 0; row < c.n_total; ++row)
      for (int64_t l = 0; l < c.k; ++l) {
        const size_t i = size_t((int64_t(e) * c.n_total + row) * c.k + l);
        wd[i] = e4m3_value(o.w[i]) *
                double(o.sw[size_t((int64_t(e) * (c.n_total / kBlock) + row / kBlock) * KB + l / kBlock)]);
      }
  int64_t bad = 0, bad_l2 = 0, padding_written = 0, guard_written = 0;
  for (int j = 0; j < c.bands; ++j) {
    const std::vector<uint16_t> got = y.bands[size_t(j)].download<uint16_t>();
    int64_t row = 0;
    for (size_t e = 0; e < c.counts.size(); ++e) {
      double err2 = 0, ref2 = 0;
      for (int32_t r = 0; r < c.counts[e]; ++r, ++row) {
        const double* xr = xd.data() + row * c.k;
        for (int64_t col = 0; col < c.ldy; ++col) {
          const double g = double(ref::bf16_to_f32(got[size_t(row * c.ldy + col)]));
          if (col >= nb) {
            padding_written += !std::isnan(g);
            continue;
          }
          const double* wr = wd.data() + (int64_t(e) * c.n_total + j * nb + col) * c.k;
          double refv = 0, mag = 0;
          for (int64_t l = 0; l < c.k; ++l) {
            const double pr = xr[l] * wr[l];
            refv += pr;
            mag += std::fabs(pr);
          }
          const double err = std::fabs(g - refv);
          const double floor = std::ldexp(std::fabs(refv), -8) + std::ldexp(mag, -5);
          ++worst.elements;
          worst.equal_to_rounded_ref += got[size_t(row * c.ldy + col)] == ref::f32_to_bf16_rn(float(refv));
          if (!(err <= floor)) {
            if (bad == 0)
              MESSAGE("first bad: band " << j << " expert " << e << " row " << row << " col " << col << " got " << g
                                         << " ref " << refv << " mag " << mag);
            ++bad;
          }
          if (floor > 0) worst.floor_use = std::max(worst.floor_use, err / floor);
          if (mag > 0)
            worst.err_per_mag = std::max(worst.err_per_mag, (err - std::ldexp(std::fabs(refv), -8)) / mag);
          err2 += (g - refv) * (g - refv);
          ref2 += refv * refv;
        }
      }
      if (c.counts[e] > 0) {
        const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
        worst.rel_l2 = std::max(worst.rel_l2, std::isnan(rel) ? INFINITY : rel);
        if (!(rel <= std::ldexp(1.0, -8) + std::ldexp(1.0, -10))) {
          MESSAGE("band " << j << " expert " << e << ": relative L2 error " << rel << " above 2^-8 + 2^-10");
          ++bad_l2;
        }
      }
    }
    for (int64_t i = (row + y.writable) * c.ldy; i < int64_t(got.size()); ++i)
      guard_written += !std::isnan(double(ref::bf16_to_f32(got[size_t(i)])));
  }
  CHECK_MESSAGE(bad == 0, bad << " elements outside floor (1)");
  CHECK_MESSAGE(bad_l2 == 0, bad_l2 << " problems outside floor (2)");
  CHECK_MESSAGE(padding_written == 0, "columns past n of a padded ldy were written");
  CHECK_MESSAGE(guard_written == 0, "rows past the experts' (and past the engine's slack) were written");
}

std::string describe(const Fp8Case& c) {
  std::string s = "counts {";
  for (size_t e = 0; e < c.counts.size(); ++e) s += (e ? ", " : "") + std::to_string(c.counts[e]);
  return s + "} n_total " + std::to_string(c.n_total) + " k " + std::to_string(c.k) + " ldx " +
         std::to_string(c.ldx) + " ldy " + std::to_string(c.ldy) + " bands " + std::to_string(c.bands);
}

void report(const Worst& w) {
  MESSAGE("worst relative L2 " << w.rel_l2 << " (floor 2^-8 + 2^-10 = " << std::ldexp(1.0, -8) + std::ldexp(1.0, -10)
                               << "); largest share of floor (1) used " << w.floor_use
                               << "; largest (|err| - 2^-8 |ref|) / mag " << w.err_per_mag << "; " << w.equal_to_rounded_ref
                               << " of " << w.elements << " elements equal bf16_rn(float(ref))");
}

// Cases both engines take (K block counts in multiples of 4, the loop engine's rule).
std::vector<Fp8Case> both_engines_cases() {
  return {
      // gate|up: two bands of 128, k 512 (KB 4), 1-row experts, empties, ldy padded by 8 columns
      {{37, 0, 1, 200, 0, 9, 1, 130}, 256, 512, 512, 136, 2},
      // down: one band of 256, k 1024 (KB 8), a padded ldx, the first expert large
      {{300, 1, 0, 0, 5, 77, 0, 2}, 256, 1024, 1040, 256, 1},
      // gate|up with two bands of 256 (two N tiles each), empty first and last, counts 1 .. 3 mod 4
      {{0, 129, 3, 0, 66, 1, 7, 0}, 512, 512, 512, 256, 2},
      // the real K block count of K3's k = 3584 (KB 28)
      {{33, 0, 64}, 256, 3584, 3584, 128, 2},
      // one row
      {{1}, 128, 512, 512, 128, 1},
  };
}

}  // namespace

TEST_CASE("moe_gemm fp8 cutlass: the host e4m3 decoding agrees with cuda_fp8.h") {
  for (int c = 0; c < 256; ++c) {
    __nv_fp8_e4m3 v;
    v.__x = __nv_fp8_storage_t(c);
    const float f = float(v);
    if (e4m3_nan(uint8_t(c))) {
      CHECK(std::isnan(f));
      continue;
    }
    INFO("code " << c);
    CHECK(double(f) == e4m3_value(uint8_t(c)));
    CHECK(e4m3_nearest(e4m3_value(uint8_t(c))) == (c == 0x80 ? 0x00 : c));  // -0 comes back as +0
  }
  CHECK(e4m3_value(0x7e) == 448.0);
  CHECK(e4m3_value(0x01) == std::ldexp(1.0, -9));
}

TEST_CASE("moe_gemm fp8 cutlass: the kernel is built and runs on this device") {
  MESSAGE("fp8 grouped cutlass kernel: " << (cutlass_fp8_grouped_device_ok() ? "runs here" : "NOT an sm_90 device"));
  CHECK(cutlass_fp8_grouped_device_ok());
}

TEST_CASE("moe_gemm fp8 cutlass: skewed experts, gate|up and down, == float64 of the dequantized operands") {
  REQUIRE(cutlass_fp8_grouped_device_ok());
  std::vector<Fp8Case> cases = both_engines_cases();
  // K block counts the loop engine refuses: 3, and 1 (one row, one K block, one N tile)
  cases.push_back({{300, 1, 0, 0, 5, 77, 0, 2}, 256, 384, 400, 256, 1});
  cases.push_back({{1}, 128, 128, 128, 128, 1});
  uint64_t seed = 4000;
  Worst worst;
  for (const Fp8Case& c : cases) {
    INFO(describe(c));
    const Operands o = make_operands(c, seed += 17);
    Outputs y(c, nullptr);
    const Problems p = problems_of(c, o, y);
    CutlassFp8GroupedGemm gemm(int(c.counts.size()) * c.bands);
    run_case(gemm, c, p, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    check_against_reference(c, o, y, worst);
  }
  report(worst);
}

TEST_CASE("moe_gemm fp8 cutlass: back-to-back calls past the staging ring, different groups each") {
  REQUIRE(cutlass_fp8_grouped_device_ok());
  constexpr int kCalls = 7;  // more than the ring's 4 slots
  const int E = 5;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> rows(0, 150);
  cudaStream_t st;
  PB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::vector<Fp8Case> cases;
  std::vector<Operands> ops;
  std::vector<Outputs> ys;
  std::vector<Problems> probs;
  for (int i = 0; i < kCalls; ++i) {
    const int bands = 1 + i % 2;
    Fp8Case c{std::vector<int32_t>(E), 256, 256, 256, 256 / bands, bands};
    for (auto& v : c.counts) v = rows(rng) % 3 == 0 ? 0 : rows(rng);
    c.counts[size_t(i % E)] = 1 + i;  // never all empty
    cases.push_back(c);
    ops.push_back(make_operands(c, 700 + i));
    ys.emplace_back(c, st);
  }
  for (int i = 0; i < kCalls; ++i) probs.push_back(problems_of(cases[size_t(i)], ops[size_t(i)], ys[size_t(i)]));
  PB_CUDA(cudaStreamSynchronize(st));
  CutlassFp8GroupedGemm gemm(E * 2);  // two bands at most
  // No host sync between the calls: each must keep its own staged arrays.
  for (int i = 0; i < kCalls; ++i) run_case(gemm, cases[size_t(i)], probs[size_t(i)], st);
  PB_CUDA(cudaStreamSynchronize(st));
  PB_CUDA(cudaStreamDestroy(st));
  Worst worst;
  for (int i = 0; i < kCalls; ++i) {
    INFO("call " << i << ": " << describe(cases[size_t(i)]));
    check_against_reference(cases[size_t(i)], ops[size_t(i)], ys[size_t(i)], worst);
  }
  report(worst);
}

TEST_CASE("moe_gemm fp8 cutlass checks its contract") {
  REQUIRE(cutlass_fp8_grouped_device_ok());
  CutlassFp8GroupedGemm gemm(2);
  DeviceBuffer<uint8_t> a(512 * 512), b(512 * 512);
  DeviceBuffer<float> sa(512 * 4), sb(4 * 4);
  DeviceBuffer<bf16> d(512 * 256);
  for (auto* buf : {static_cast<void*>(a.get()), static_cast<void*>(b.get())}) PB_CUDA(cudaMemset(buf, 0, 512 * 512));
  PB_CUDA(cudaMemset(sa.get(), 0, sa.bytes()));
  PB_CUDA(cudaMemset(sb.get(), 0, sb.bytes()));
  const fp8* pa[2] = {reinterpret_cast<const fp8*>(a.get()), reinterpret_cast<const fp8*>(a.get())};
  const fp8* pb[2] = {reinterpret_cast<const fp8*>(b.get()), reinterpret_cast<const fp8*>(b.get())};
  const float* psa[2] = {sa.get(), sa.get()};
  const float* psb[2] = {sb.get(), sb.get()};
  bf16* pd[2] = {d.get(), d.get() + 8 * 256};
  const int32_t m[2] = {4, 4};
  // (problems, n, k, lda, ld_sfa, ldb, ld_sfb, ldd) with every pointer valid.
  auto call = [&](int problems, const int32_t* ms, int64_t n, int64_t k, int64_t lda, int64_t ld_sfa, int64_t ldb,
                  int64_t ld_sfb, int64_t ldd) {
    gemm.run(problems, ms, n, k, pa, lda, psa, ld_sfa, pb, ldb, psb, ld_sfb, pd, ldd, nullptr);
  };
  CHECK_THROWS_WITH_AS(call(1, m, 256, 320, 320, 2, 320, 2, 256), doctest::Contains("k = 320"), pb::Error);
  CHECK_THROWS_WITH_AS(call(1, m, 256, 64, 64, 1, 64, 1, 256), doctest::Contains("multiple of 128"), pb::Error);
  CHECK_THROWS_WITH_AS(call(1, m, 192, 256, 256, 2, 256, 2, 192), doctest::Contains("n = 192"), pb::Error);
  CHECK_THROWS_WITH_AS(call(1, m, 256, 384, 384, 4, 384, 4, 256), doctest::Contains("ld_sfb = 4"),
                       pb::Error);  // the cuBLASLt-style rounded-up KB (4 for k = 384) is not what CUTLASS reads
  CHECK_THROWS_WITH_AS(call(1, m, 256, 256, 264, 2, 256, 2, 256), doctest::Contains("lda = 264"), pb::Error);
  CHECK_THROWS_WITH_AS(call(1, m, 256, 256, 256, 2, 256, 2, 252), doctest::Contains("ldd"), pb::Error);
  CHECK_THROWS_WITH_AS(call(1, m, 256, 512, 256, 4, 512, 4, 256), doctest::Contains("below the row length"),
                       pb::Error);
  CHECK_THROWS_WITH_AS(call(3, m, 256, 256, 256, 2, 256, 2, 256), doctest::Contains("problems must be 1 .. 2"),
                       pb::Error);
  CHECK_THROWS_WITH_AS(call(0, m, 256, 256, 256, 2, 256, 2, 256), doctest::Contains("got 0"), pb::Error);
  const int32_t empty[2] = {4, 0};
  CHECK_THROWS_WITH_AS(call(2, empty, 256, 256, 256, 2, 256, 2, 256), doctest::Contains("problem 1 has m = 0"),
                       pb::Error);
  pa[1] = reinterpret_cast<const fp8*>(a.get() + 8);
  CHECK_THROWS_WITH_AS(call(2, m, 256, 256, 256, 2, 256, 2, 256), doctest::Contains("not 16-byte aligned"), pb::Error);
  pa[1] = pa[0];
  psb[1] = nullptr;
  CHECK_THROWS_WITH_AS(call(2, m, 256, 256, 256, 2, 256, 2, 256), doctest::Contains("scale pointer"), pb::Error);
  psb[1] = psb[0];
  // The same arguments, valid, run.
  d.poison();
  call(2, m, 256, 256, 256, 2, 256, 2, 256);
  PB_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = d.download<uint16_t>();
  int64_t nonzero = 0;
  for (int64_t r : {0, 1, 2, 3, 8, 9, 10, 11})
    for (int64_t c = 0; c < 256; ++c) nonzero += out[size_t(r * 256 + c)] != 0;
  CHECK(nonzero == 0);  // zero codes and zero scales: +0 everywhere the two problems write
  int64_t touched = 0;
  for (int64_t i = 4 * 256; i < 8 * 256; ++i) touched += out[size_t(i)] != 0xffff;
  CHECK(touched == 0);  // rows 4 .. 7 (past problem 0's m = 4) keep the poison
}


// ---- The loop engine (MoeGemm::run_fp8 with MoeGemmEngine::loop) ----

TEST_CASE("moe_scales_by_expert: per-expert MN-major blocks, zero padding rows, == the host relayout") {
  const std::vector<int32_t> counts = {5, 0, 1, 8, 0, 0, 3, 130, 2};
  const int E = int(counts.size());
  std::vector<int32_t> off(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) off[size_t(e) + 1] = off[size_t(e)] + counts[size_t(e)];
  const int64_t V = off.back();
  for (const int64_t kb : {1, 3, 28}) {
    INFO("kb " << kb);
    std::mt19937_64 rng(900 + uint64_t(kb));
    std::vector<float> sx(size_t(V * kb));
    for (auto& v : sx) v = random_scale(rng, 0.05);
    const int64_t floats = moe_fp8_loop_scale_floats(V, E, kb);
    const int64_t kbp = (kb + 3) / 4 * 4;
    CHECK(floats == kbp * (V + 3 * E));
    std::vector<float> want(size_t(floats), std::nanf(""));  // untouched: NaN (the poison below)
    for (int e = 0; e < E; ++e) {
      const int64_t m4 = (counts[size_t(e)] + 3) / 4 * 4, start = kbp * (off[size_t(e)] + 3 * e);
      for (int64_t g = 0; g < kb; ++g)
        for (int64_t r = 0; r < m4; ++r)
          want[size_t(start + g * m4 + r)] = r < counts[size_t(e)] ? sx[size_t((off[size_t(e)] + r) * kb + g)] : 0.0f;
    }
    DeviceBuffer<float> dsx{sx.size()}, out{size_t(floats)};
    dsx.upload(sx);
    out.poison();
    moe_scales_by_expert(dsx.get(), kb, off.data(), E, out.get(), nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<uint32_t> got = out.download<uint32_t>();
    int64_t differ = 0;
    for (int64_t i = 0; i < floats; ++i) {
      uint32_t w;
      std::memcpy(&w, &want[size_t(i)], 4);
      differ += std::isnan(want[size_t(i)]) ? got[size_t(i)] != 0xffffffffu : got[size_t(i)] != w;
    }
    CHECK_MESSAGE(differ == 0, differ << " of " << floats << " floats differ from the host relayout");
  }
  DeviceBuffer<float> dummy(64);
  const int32_t bad_start[3] = {1, 2, 3}, falling[3] = {0, 4, 2};
  CHECK_THROWS_WITH_AS(moe_scales_by_expert(dummy.get(), 1, bad_start, 2, dummy.get(), nullptr),
                       doctest::Contains("start at 0"), pb::Error);
  CHECK_THROWS_WITH_AS(moe_scales_by_expert(dummy.get(), 1, falling, 2, dummy.get(), nullptr),
                       doctest::Contains("offsets[2]"), pb::Error);
  CHECK_THROWS_WITH_AS(moe_scales_by_expert(dummy.get(), 1, falling, 0, dummy.get(), nullptr),
                       doctest::Contains("experts must be 1 .."), pb::Error);
  CHECK_THROWS_WITH_AS(moe_scales_by_expert(dummy.get(), 1, off.data(), E, dummy.get() + 1, nullptr),
                       doctest::Contains("16-byte aligned"), pb::Error);
}

TEST_CASE("moe_gemm fp8 loop: skewed experts, gate|up and down, == float64 of the dequantized operands") {
  std::string why;
  REQUIRE_MESSAGE(fp8_block_scaling_supported(&why), why);
  const std::vector<Fp8Case> cases = both_engines_cases();
  Blas blas;
  uint64_t seed = 5000;
  Worst worst;
  for (const Fp8Case& c : cases) {
    INFO(describe(c));
    const Operands o = make_operands(c, seed += 17, kMoeFp8LoopSlackRows);
    Outputs y(c, nullptr, kMoeFp8LoopSlackRows);
    MoeGemm gemm(int(c.counts.size()));
    const MoeGemmShape shape{int(c.counts.size()), c.n_total, c.k, c.ldx, c.ldy, c.bands};
    gemm.run_fp8(MoeGemmEngine::loop, blas, c.counts.data(), reinterpret_cast<const fp8*>(o.dx.get()), o.dsx.get(),
                 reinterpret_cast<const fp8*>(o.dw.get()), o.dsw.get(), y.ptrs.data(), shape, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    check_against_reference(c, o, y, worst);
  }
  report(worst);
}

TEST_CASE("moe_gemm fp8 loop: a caller's scale blocks, and its refusals") {
  std::string why;
  REQUIRE_MESSAGE(fp8_block_scaling_supported(&why), why);
  Blas blas;
  const Fp8Case c{{3, 0, 6}, 256, 512, 512, 256, 1};
  const Operands o = make_operands(c, 77, kMoeFp8LoopSlackRows);
  Outputs y(c, nullptr, kMoeFp8LoopSlackRows);
  MoeGemm gemm(3);
  const MoeGemmShape shape{3, c.n_total, c.k, 0, 0, 1};
  const auto* xq = reinterpret_cast<const fp8*>(o.dx.get());
  const auto* wq = reinterpret_cast<const fp8*>(o.dw.get());
  DeviceBuffer<float> scales{size_t(moe_fp8_loop_scale_floats(total_rows(c), 3, c.k / kBlock))};
  gemm.run_fp8(MoeGemmEngine::loop, blas, c.counts.data(), xq, o.dsx.get(), wq, o.dsw.get(), y.ptrs.data(), shape,
               nullptr, scales.get());
  PB_CUDA(cudaDeviceSynchronize());
  Worst worst;
  check_against_reference(c, o, y, worst);
  // k = 384: KB 3, whose cuBLASLt weight-scale rows (4) are not the compact ones (3).
  const MoeGemmShape k384{3, 256, 384, 512, 256, 1};
  CHECK_THROWS_WITH_AS(gemm.run_fp8(MoeGemmEngine::loop, blas, c.counts.data(), xq, o.dsx.get(), wq, o.dsw.get(),
                                    y.ptrs.data(), k384, nullptr),
                       doctest::Contains("k = 384"), pb::Error);
  CHECK_THROWS_WITH_AS(gemm.run_fp8(MoeGemmEngine::grouped, blas, c.counts.data(), xq, o.dsx.get(), wq, o.dsw.get(),
                                    y.ptrs.data(), shape, nullptr),
                       doctest::Contains("grouped engine has no fp8 form"), pb::Error);
}

#endif  // PB_HAVE_CUTLASS
