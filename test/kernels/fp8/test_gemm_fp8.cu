// The cuBLASLt block-scaled FP8 GEMM (kernels/fp8/gemm_fp8.h) against a
// float64 GEMM of the DEQUANTIZED operands: the codes (quantized on the host by
// the C++ references) times their scales,
//   ref[r][c] = Σ_g sx[g][r] · sw[c/128][g] · Σ_{l in g} value(xq[r][l]) · value(wq[c][l]),
// on K3-like shapes small enough for a test, k = 128, k/128 not a multiple of
// 4 (the weight scales' padded stride), padded row strides, a band of weight
// rows written into a column slice of a wider output, f32 and bf16 outputs.
// Outputs are poisoned (NaN) first: every element of the window must be
// written, every element outside it untouched.
//
// The floor: per element
//   |got - ref| <= 2^-9 · mag   (+ 2^-8 · |ref| for bf16 outputs, its rounding)
// with mag = Σ_g sx·sw · Σ_l |value(xq)·value(wq)|, the same sum without
// cancellation. Hopper's FP8 MMA adds each K=32 slice into the running
// 128-wide block partial keeping ~14 significant bits (DeepSeek-V3 §3.3), the
// terms aligned to the largest one and cut, so the cuts lean one way; cuBLASLt
// then promotes the block partial, times its two scales, into f32 (2^-24
// steps). 2^-9 holds what the H200 measured with these data (Gaussian codes,
// an outlier x50 in some groups; docs/design.md §12) with margin, and is still
// five hundred times below what a wrong scale layout or stride or swapped
// operand roles give (O(1) of mag). Each case prints its largest
// |got - ref| / mag and its relative L2 error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gemm_fp8.h"
#include "gpu_test.h"
#include "quant.h"
#include "quant_ref.h"

using namespace pb;
using namespace pb::test;

namespace {

constexpr double kFloor = 1.0 / 512.0;         // 2^-9 of mag
constexpr double kBf16Rounding = 1.0 / 256.0;  // 2^-8 of |ref|, bf16 outputs only

uint16_t bf16_of(float f) { return ref::f32_to_bf16_rn(f); }

bool have_fp8_gemm() {
  std::string why;
  if (fp8_block_scaling_supported(&why)) return true;
  MESSAGE("skipped: " << why);
  // The refusal is clean and says why.
  CHECK_THROWS_AS(Fp8Gemm{}, pb::Error);
  return false;
}

std::string error_message(const std::function<void()>& body) {
  try {
    body();
  } catch (const pb::Error& e) {
    return e.what();
  }
  return "(no pb::Error)";
}

// bf16 [rows, k]: N(0, sigma) times 2^(-4 .. 4) per 128-column group (or per
// 128x128 block: block_rows 128), an outlier (x50) in some groups.
std::vector<uint16_t> make_bf16(int64_t rows, int64_t k, int64_t block_rows, float sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_int_distribution<int> expo(-4, 4), pick(0, 127), coin(0, 5);
  const int64_t kbs = k / 128;
  std::vector<float> mags(size_t(((rows + block_rows - 1) / block_rows) * kbs));
  for (float& v : mags) v = std::ldexp(1.0f, expo(rng));
  std::vector<uint16_t> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < kbs; ++g) {
      const int outlier = coin(rng) == 0 ? pick(rng) : -1;
      for (int l = 0; l < 128; ++l) {
        float v = normal(rng) * mags[size_t((r / block_rows) * kbs + g)];
        if (l == outlier) v *= 50.0f;
        x[size_t(r * k + g * 128 + l)] = bf16_of(v);
      }
    }
  return x;
}

struct GemmCase {
  const char* what;
  int64_t m, n, k;
  int64_t ldx, ldw, ldy;  // as passed (0 = packed)
  int64_t n_rows = 0;     // rows of the whole quantized weight (0 = n); the GEMM uses rows [n0, n0 + n)
  int64_t n0 = 0;         // first weight row of the band, a multiple of 128
  int64_t c0 = 0;         // first output column written (y + c0), c0 + n <= ldy
};

std::string describe(const GemmCase& c) {
  return std::string(c.what) + ": m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
         std::to_string(c.k) + " ldx " + std::to_string(c.ldx) + " ldw " + std::to_string(c.ldw) + " ldy " +
         std::to_string(c.ldy) + " weight rows " + std::to_string(c.n_rows) + " band from " + std::to_string(c.n0) +
         " into columns from " + std::to_string(c.c0);
}

// One case's operands, quantized on the host, their device copies and the
// float64 reference.
struct Problem {
  GemmCase c;
  int64_t ldx, ldw, ldy, lds, ld_sw, n_rows;
  std::vector<uint8_t> xq, wq;
  std::vector<float> sx, sw;
  std::vector<double> ref, mag;  // [m, n]
  DeviceBuffer<__nv_fp8_e4m3> dxq, dwq;
  DeviceBuffer<float> dsx, dsw;
};

std::unique_ptr<Problem> make_problem(const GemmCase& c, uint64_t seed) {
  auto p = std::make_unique<Problem>();
  p->c = c;
  p->ldx = c.ldx ? c.ldx : c.k;
  p->ldw = c.ldw ? c.ldw : c.k;
  p->ldy = c.ldy ? c.ldy : c.n;
  p->lds = act_scale_ld(c.m);
  p->ld_sw = weight_scale_ld(c.k);
  p->n_rows = c.n_rows ? c.n_rows : c.n;
  const int64_t kbs = c.k / 128;

  const std::vector<uint16_t> x = make_bf16(c.m, c.k, 1, 1.0f, seed);
  const std::vector<uint16_t> w = make_bf16(p->n_rows, c.k, 128, 0.05f, seed + 1);
  p->xq.assign(size_t(c.m * p->ldx), 0x7e);  // the padding between k and ldx is never part of the product
  p->wq.assign(size_t(p->n_rows * p->ldw), 0x7e);
  p->sx.assign(size_t(kbs * p->lds), 0.0f);
  p->sw.assign(size_t(p->n_rows / 128 * p->ld_sw), 0.0f);
  ref::quantize_act_fp8(x.data(), p->xq.data(), p->sx.data(),
                        ActQuantShape{c.m, c.k, c.k, p->ldx, act_scales_mn_major(p->lds)});
  ref::quantize_weight_fp8(w.data(), p->wq.data(), p->sw.data(),
                           WeightQuantShape{p->n_rows, c.k, c.k, p->ldw, p->ld_sw});

  // Decoded codes, then the float64 GEMM of the dequantized band.
  double value[256];
  for (int i = 0; i < 256; ++i) value[i] = double(ref::e4m3_value(uint8_t(i)));
  std::vector<double> xv(size_t(c.m * c.k)), wv(size_t(c.n * c.k));
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t l = 0; l < c.k; ++l) xv[size_t(r * c.k + l)] = value[p->xq[size_t(r * p->ldx + l)]];
  for (int64_t j = 0; j < c.n; ++j)
    for (int64_t l = 0; l < c.k; ++l) wv[size_t(j * c.k + l)] = value[p->wq[size_t((c.n0 + j) * p->ldw + l)]];
  p->ref.assign(size_t(c.m * c.n), 0.0);
  p->mag.assign(size_t(c.m * c.n), 0.0);
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0, mag = 0;
      const double* xr = &xv[size_t(r * c.k)];
      const double* wr = &wv[size_t(j * c.k)];
      for (int64_t g = 0; g < kbs; ++g) {
        double part = 0, part_mag = 0;
        for (int64_t l = g * 128; l < g * 128 + 128; ++l) {
          part += xr[l] * wr[l];
          part_mag += std::fabs(xr[l] * wr[l]);
        }
        const double scale = double(p->sx[size_t(g * p->lds + r)]) *
                             double(p->sw[size_t((c.n0 + j) / 128 * p->ld_sw + g)]);
        sum += part * scale;
        mag += part_mag * std::fabs(scale);
      }
      p->ref[size_t(r * c.n + j)] = sum;
      p->mag[size_t(r * c.n + j)] = mag;
    }

  p->dxq = DeviceBuffer<__nv_fp8_e4m3>(p->xq.size());
  p->dwq = DeviceBuffer<__nv_fp8_e4m3>(p->wq.size());
  p->dsx = DeviceBuffer<float>(p->sx.size());
  p->dsw = DeviceBuffer<float>(p->sw.size());
  p->dxq.upload(p->xq);
  p->dwq.upload(p->wq);
  p->dsx.upload(p->sx);
  p->dsw.upload(p->sw);
  return p;
}

Fp8GemmDims dims_of(const Problem& p) { return Fp8GemmDims{p.c.m, p.c.n, p.c.k, p.c.ldx, p.c.ldw, p.ldy}; }

// Runs the GEMM into a poisoned [m, ldy] output and checks it against the
// reference: the window [c0, c0 + n) within the floor, the rest untouched.
void run_and_check(Fp8Gemm& gemm, const Problem& p, bool bf16_out) {
  const GemmCase& c = p.c;
  INFO(describe(c) << (bf16_out ? ", bf16 out" : ", f32 out"));
  const size_t y_elems = size_t(c.m * p.ldy);
  std::vector<double> got(y_elems);
  std::vector<bool> poison_kept(y_elems);
  const __nv_fp8_e4m3* wq = p.dwq.get() + c.n0 * p.ldw;
  const float* sw = p.dsw.get() + c.n0 / 128 * p.ld_sw;
  if (bf16_out) {
    DeviceBuffer<__nv_bfloat16> dy(y_elems);
    dy.poison();
    gemm_fp8_bf16out(gemm, p.dxq.get(), p.dsx.get(), wq, sw, dy.get() + c.c0, dims_of(p), nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = dy.download<uint16_t>();
    for (size_t i = 0; i < y_elems; ++i) {
      got[i] = ref::bf16_to_f32(y[i]);
      poison_kept[i] = y[i] == 0xffff;
    }
  } else {
    DeviceBuffer<float> dy(y_elems);
    dy.poison();
    gemm_fp8_f32out(gemm, p.dxq.get(), p.dsx.get(), wq, sw, dy.get() + c.c0, dims_of(p), nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<uint32_t> y = dy.download<uint32_t>();
    for (size_t i = 0; i < y_elems; ++i) {
      float f;
      std::memcpy(&f, &y[i], 4);
      got[i] = f;
      poison_kept[i] = y[i] == 0xffffffffu;
    }
  }
  int64_t bad = 0, stray = 0;
  double worst = 0, err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t col = 0; col < p.ldy; ++col) {
      const size_t i = size_t(r * p.ldy + col);
      if (col < c.c0 || col >= c.c0 + c.n) {
        if (!poison_kept[i] && stray++ < 3) FAIL_CHECK("y[" << r << "][" << col << "] outside the window was written");
        continue;
      }
      const int64_t j = col - c.c0;
      const double want = p.ref[size_t(r * c.n + j)], mag = p.mag[size_t(r * c.n + j)];
      const double err = std::fabs(got[i] - want);
      const double tol = kFloor * mag + (bf16_out ? kBf16Rounding * std::fabs(want) : 0.0) + 1e-30;
      if (!(err <= tol) && bad++ < 5)
        FAIL_CHECK("y[" << r << "][" << col << "] = " << got[i] << ", ref " << want << ", |err| " << err << " > "
                        << tol << " (mag " << mag << ")");
      if (mag > 0 && err / mag > worst) worst = err / mag;
      err2 += (got[i] - want) * (got[i] - want);
      ref2 += want * want;
    }
  CHECK(bad == 0);
  CHECK(stray == 0);
  MESSAGE(describe(c) << (bf16_out ? ", bf16 out" : ", f32 out") << ": max |err|/mag " << worst << " (floor "
                      << kFloor << "), relative L2 error " << std::sqrt(err2 / (ref2 > 0 ? ref2 : 1)));
}

void check_case(Fp8Gemm& gemm, const GemmCase& c, uint64_t seed) {
  const std::unique_ptr<Problem> p = make_problem(c, seed);
  run_and_check(gemm, *p, false);
  run_and_check(gemm, *p, true);
}

}  // namespace

TEST_CASE("gemm_fp8: K3-like shapes, f32 and bf16 outputs, against the dequantized float64 GEMM") {
  if (!have_fp8_gemm()) return;
  Fp8Gemm gemm;
  const GemmCase cases[] = {
      {"packed", 256, 512, 1024, 0, 0, 0},
      {"padded row strides", 384, 512, 1024, 1040, 1056, 520},
      {"k = 128: one scale group", 256, 256, 128, 0, 0, 0},
      {"k/128 = 9: weight scales padded to 12 per block row", 128, 384, 1152, 0, 0, 0},
      {"k/128 = 5, padded to 8", 64, 128, 640, 0, 0, 0},
      {"n = 200: a partial weight block", 128, 200, 512, 0, 0, 200, 256, 0, 0},
  };
  uint64_t seed = 21;
  for (const GemmCase& c : cases) {
    check_case(gemm, c, seed);
    seed += 10;
  }
}

TEST_CASE("gemm_fp8: a band of weight rows into a column slice of a wider output") {
  if (!have_fp8_gemm()) return;
  Fp8Gemm gemm;
  // Weight rows [384, 640) of a 1024-row weight (scales sw + 3 * ld_sw),
  // written to columns [384, 640) of a 1024-wide output (y + 384, ldy 1024).
  check_case(gemm, {"band into a column slice", 256, 256, 1024, 0, 1040, 1024, 1024, 384, 384}, 71);
  // The same band at column 0 of a packed output.
  check_case(gemm, {"band, packed output", 128, 256, 1024, 0, 0, 0, 1024, 768, 0}, 72);
}

TEST_CASE("gemm_fp8: plans are cached per shape and output type") {
  if (!have_fp8_gemm()) return;
  Fp8Gemm gemm;
  const std::unique_ptr<Problem> p = make_problem({"cache", 128, 256, 512, 0, 0, 0}, 81);
  run_and_check(gemm, *p, false);
  CHECK(gemm.cached_plans() == 1);
  run_and_check(gemm, *p, false);
  CHECK(gemm.cached_plans() == 1);
  run_and_check(gemm, *p, true);
  CHECK(gemm.cached_plans() == 2);
  CHECK(gemm.workspace_bytes() == Fp8Gemm::kDefaultWorkspaceBytes);
}

TEST_CASE("gemm_fp8: the heuristic's later algorithms hold the same floor; a rank out of range is named") {
  // Refused before the device is asked (so on any machine): the rank's range.
  CHECK(error_message([] { Fp8Gemm g(Fp8Gemm::kDefaultWorkspaceBytes, -1); }).find("heuristic_rank must be 0 .. 15") !=
        std::string::npos);
  CHECK(error_message([] { Fp8Gemm g(Fp8Gemm::kDefaultWorkspaceBytes, Fp8Gemm::kMaxHeuristicRank); })
            .find("got 16") != std::string::npos);
  if (!have_fp8_gemm()) return;
  const std::unique_ptr<Problem> p = make_problem({"k3-like", 512, 768, 1536, 0, 0, 0}, 91);
  int ran = 0;
  for (int rank = 1; rank < 4; ++rank) {
    Fp8Gemm gemm(Fp8Gemm::kDefaultWorkspaceBytes, rank);
    const std::string why = error_message([&] { run_and_check(gemm, *p, false); });
    if (why != "(no pb::Error)") {  // cuBLASLt has fewer algorithms for this shape: it says how many
      CHECK(why.find("rank " + std::to_string(rank) + " asked") != std::string::npos);
      break;
    }
    run_and_check(gemm, *p, true);
    ++ran;
  }
  MESSAGE(ran << " later algorithm(s) checked");
}

TEST_CASE("gemm_fp8: end to end from bf16, through the quantization kernels") {
  if (!have_fp8_gemm()) return;
  // x [m, k] and w [n, k] in bf16 -> quantize_act_fp8 / quantize_weight_fp8 on
  // the device -> the GEMM, against the float64 product of the bf16 inputs.
  // DeepGEMM's measure 1 - 2<y, ref> / (|y|^2 + |ref|^2) includes the e4m3
  // rounding of both operands (~3e-2 rms per element, so ~1e-3 here); a
  // layout error would put it near 1.
  const int64_t m = 256, n = 512, k = 1024;
  const std::vector<uint16_t> x = make_bf16(m, k, 1, 1.0f, 91), w = make_bf16(n, k, 128, 0.05f, 92);
  DeviceBuffer<__nv_bfloat16> dx(x.size()), dw(w.size());
  dx.upload(x);
  dw.upload(w);
  DeviceBuffer<__nv_fp8_e4m3> xq(size_t(m * k)), wq(size_t(n * k));
  DeviceBuffer<float> sx(size_t(k / 128 * act_scale_ld(m))), sw(size_t(n / 128 * weight_scale_ld(k)));
  DeviceBuffer<float> y(size_t(m * n));
  y.poison();
  quantize_act_fp8(dx.get(), xq.get(), sx.get(), ActQuantShape{m, k, 0, 0, act_scales_mn_major(act_scale_ld(m))},
                   nullptr);
  quantize_weight_fp8(dw.get(), wq.get(), sw.get(), WeightQuantShape{n, k}, nullptr);
  Fp8Gemm gemm;
  gemm_fp8_f32out(gemm, xq.get(), sx.get(), wq.get(), sw.get(), y.get(), Fp8GemmDims{m, n, k}, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = y.download();
  double dot = 0, got2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t l = 0; l < k; ++l)
        want += double(ref::bf16_to_f32(x[size_t(r * k + l)])) * double(ref::bf16_to_f32(w[size_t(j * k + l)]));
      const double g = got[size_t(r * n + j)];
      dot += g * want;
      got2 += g * g;
      ref2 += want * want;
    }
  const double diff = 1.0 - 2.0 * dot / (got2 + ref2);
  MESSAGE("end to end: DeepGEMM diff " << diff);
  CHECK(diff < 1e-2);
}

TEST_CASE("gemm_fp8: the host checks name the violated rule") {
  if (!have_fp8_gemm()) return;
  Fp8Gemm gemm;
  DeviceBuffer<__nv_fp8_e4m3> xq(1 << 20), wq(1 << 20);
  DeviceBuffer<float> sx(1 << 16), sw(1 << 16), y(1 << 20);
  DeviceBuffer<__nv_bfloat16> yb(1 << 20);
  auto run = [&](Fp8GemmDims d) { gemm_fp8_f32out(gemm, xq.get(), sx.get(), wq.get(), sw.get(), y.get(), d, nullptr); };
  CHECK(error_message([&] { run({64, 128, 100}); }).find("k = 100") != std::string::npos);
  CHECK(error_message([&] { run({64, 128, 0}); }).find("k = 0") != std::string::npos);
  CHECK(error_message([&] { run({6, 128, 256}); }).find("m = 6") != std::string::npos);
  CHECK(error_message([&] { run({64, 130, 256}); }).find("n = 130") != std::string::npos);
  CHECK(error_message([&] { run({64, 128, 256, 264}); }).find("ldx = 264") != std::string::npos);
  CHECK(error_message([&] { run({64, 128, 256, 256, 200}); }).find("ldw = 200") != std::string::npos);
  CHECK(error_message([&] { run({64, 128, 256, 256, 256, 130}); }).find("ldy = 130") != std::string::npos);
  CHECK(error_message([&] { run({64, 128, 256, 0, 0, 0, 68}); }).find("lds = 68") != std::string::npos);
  CHECK(error_message([&] { run({64, 128, 256, 0, 0, 0, 0, 2}); }).find("ld_sw = 2") != std::string::npos);
  // bf16 output rows must be 16-byte multiples: ldy % 8.
  CHECK(error_message([&] {
          gemm_fp8_bf16out(gemm, xq.get(), sx.get(), wq.get(), sw.get(), yb.get(), {64, 128, 256, 0, 0, 132}, nullptr);
        }).find("ldy = 132") != std::string::npos);
  CHECK(error_message([&] {
          gemm_fp8_f32out(gemm, xq.get() + 1, sx.get(), wq.get(), sw.get(), y.get(), {64, 128, 256}, nullptr);
        }).find("xq is not 16-byte aligned") != std::string::npos);
  CHECK(error_message([&] {
          gemm_fp8_f32out(gemm, xq.get(), sx.get() + 1, wq.get(), sw.get(), y.get(), {64, 128, 256}, nullptr);
        }).find("sx") != std::string::npos);
  CHECK(error_message([&] {
          gemm_fp8_f32out(gemm, xq.get(), sx.get(), wq.get(), sw.get(), y.get() + 2, {64, 128, 256}, nullptr);
        }).find("y is not 16-byte aligned") != std::string::npos);
  CHECK(error_message([&] {
          gemm_fp8_f32out(gemm, xq.get(), sx.get(), wq.get(), sw.get(), reinterpret_cast<float*>(xq.get()),
                          {64, 128, 256}, nullptr);
        }).find("y overlaps xq") != std::string::npos);
  CHECK(error_message([&] {
          gemm_fp8_f32out(gemm, nullptr, sx.get(), wq.get(), sw.get(), y.get(), {64, 128, 256}, nullptr);
        }).find("null") != std::string::npos);
  // m == 0 or n == 0 launches nothing, even on null pointers.
  CHECK_NOTHROW(gemm_fp8_f32out(gemm, nullptr, nullptr, nullptr, nullptr, nullptr, {0, 128, 256}, nullptr));
  CHECK_NOTHROW(gemm_fp8_f32out(gemm, nullptr, nullptr, nullptr, nullptr, nullptr, {64, 0, 256}, nullptr));
  CHECK(gemm.cached_plans() == 0);
  PB_CUDA(cudaDeviceSynchronize());
}

// Probes: shapes the documented rules admit but other users found fragile
// (Transformer Engine requires the VEC128-scaled operand's outer dimension,
// here m, and the output's leading dimension to be multiples of 8). A failure
// here is reported, not fatal: it answers whether the rule should be % 8.
TEST_CASE("gemm_fp8 probe: m % 8 == 4" * doctest::may_fail()) {
  if (!have_fp8_gemm()) return;
  Fp8Gemm gemm;
  check_case(gemm, {"probe m 260", 260, 256, 512, 0, 0, 0}, 101);
  check_case(gemm, {"probe m 4", 4, 256, 512, 0, 0, 0}, 102);
}

TEST_CASE("gemm_fp8 probe: n % 8 == 4" * doctest::may_fail()) {
  if (!have_fp8_gemm()) return;
  Fp8Gemm gemm;
  check_case(gemm, {"probe n 260", 128, 260, 512, 0, 0, 264, 384, 0, 0}, 111);
}
