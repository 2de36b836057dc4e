// The FP8 quantization kernels (kernels/fp8/quant.h) on the device, bit for
// bit against the C++ references (quant_ref.h) on random bf16 inputs with
// outliers in some groups, odd row counts, tails, padded and misaligned
// strides (the scalar fallback), both activation scale layouts, and groups
// holding NaN, ±inf, only zeros, or the largest finite bf16.
//
// Every run writes into a buffer poisoned beforehand, and runs twice with two
// poisons (0xFF, which is also an e4m3 / f32 NaN, and 0x5A): the whole
// buffer, padding and guards included, must equal the reference's buffer
// poisoned the same way. An element the kernel forgot shows up as the poison
// in one of the two runs (NaN codes compare equal: 0x7F == 0xFF), a stray
// store as a changed padding or guard byte.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <ios>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "quant.h"
#include "quant_ref.h"

using namespace pb;
using namespace pb::test;

namespace {

constexpr uint8_t kPoisons[2] = {0xff, 0x5a};
constexpr size_t kGuard = 64;  // poisoned elements after each output

uint16_t bf16_of(float f) { return ref::f32_to_bf16_rn(f); }

float poison_f32(uint8_t byte) {
  uint32_t u = 0x01010101u * byte;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void fill_bytes(void* p, size_t bytes, uint8_t byte) {
  PB_CUDA(cudaMemset(p, byte, bytes));
}

// First index where two code buffers differ (NaN codes 0x7F and 0xFF equal), or -1.
int64_t first_code_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, std::string* report) {
  if (got.size() != want.size()) {
    *report = "sizes differ";
    return 0;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i] || (ref::e4m3_is_nan(got[i]) && ref::e4m3_is_nan(want[i]))) continue;
    char buf[96];
    std::snprintf(buf, sizeof buf, "byte %zu: got 0x%02x, want 0x%02x", i, got[i], want[i]);
    *report = buf;
    return int64_t(i);
  }
  return -1;
}

// bf16 rows [rows, ld]: per group N(0, 1) times 2^(-6 .. 6), an outlier (x1000)
// in about a quarter of the groups, ±0 sprinkled; the padding columns hold
// values too (a kernel reading them would change the amax).
std::vector<uint16_t> make_rows(int64_t rows, int64_t ld, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-6, 6), pick(0, 127), coin(0, 3);
  std::vector<uint16_t> x(size_t(rows * ld));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g * 128 < ld; ++g) {
      const float mag = std::ldexp(1.0f, expo(rng));
      const int outlier = coin(rng) == 0 ? pick(rng) : -1;
      for (int64_t l = 0; l < 128 && g * 128 + l < ld; ++l) {
        float v = normal(rng) * mag;
        if (l == outlier) v *= 1000.0f;
        if (pick(rng) == 0) v = (pick(rng) % 2) ? -0.0f : 0.0f;
        x[size_t(r * ld + g * 128 + l)] = bf16_of(v);
      }
    }
    for (int64_t c = k; c < ld; ++c) x[size_t(r * ld + c)] = bf16_of(1e30f);  // never part of a group
  }
  return x;
}

// Seed 2 and up mix in the shared generator's distribution (outliers everywhere).
std::vector<uint16_t> make_input(int64_t rows, int64_t ld, int64_t k, uint64_t seed) {
  std::vector<uint16_t> x = make_rows(rows, ld, k, seed);
  if (seed % 2 == 0) {
    const std::vector<uint16_t> other = random_bf16(x.size(), seed, 0.5f);
    for (size_t i = 0; i < x.size(); i += 3) x[i] = other[i];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = k; c < ld; ++c) x[size_t(r * ld + c)] = bf16_of(1e30f);
  }
  return x;
}

// Special groups where the shape has room: all zeros (one -0), a NaN, the
// largest finite bf16 (and its negative), -inf.
void plant_specials(std::vector<uint16_t>& x, int64_t rows, int64_t ld, int64_t k, int64_t row_block) {
  const int64_t groups = k / 128;
  auto group = [&](int64_t r, int64_t g) { return &x[size_t(r * ld + g * 128)]; };
  auto rows_of = [&](int64_t i) { return i * row_block; };  // weights: the first row of block row i
  if (rows_of(0) < rows) {
    for (int64_t i = 0; i < row_block; ++i)
      for (int l = 0; l < 128; ++l) group(rows_of(0) + i, 0)[l] = (l == 7 && i == 0) ? 0x8000 : 0x0000;
  }
  if (rows_of(1) < rows && groups >= 1) group(rows_of(1), groups > 1 ? 1 : 0)[77] = 0x7fc0;  // NaN
  if (rows_of(2) < rows && groups >= 1) {
    group(rows_of(2), 0)[3] = 0x7f7f;   // largest finite bf16
    group(rows_of(2), 0)[90] = 0xff7f;  // and its negative
  }
  if (rows_of(3) < rows && groups >= 1) group(rows_of(3), groups - 1)[127] = 0xff80;  // -inf
}

// ---------------------------------------------------------------------------
// activations

struct ActCase {
  const char* what;
  int64_t m, k, ldx, ldq;
  bool mn_major;
  int64_t s_ld;      // MN-major: lds (group stride); K-major: s_row
  int x_shift = 0;   // elements the input's base pointer is moved by (1: misaligned)
  int q_shift = 0;   // bytes the codes' base pointer is moved by (8: not 16-byte aligned)
};

std::string describe(const ActCase& c, uint64_t seed) {
  return std::string(c.what) + ": m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " ldx " +
         std::to_string(c.ldx) + " ldq " + std::to_string(c.ldq) + (c.mn_major ? " MN-major lds " : " K-major s_row ") +
         std::to_string(c.s_ld) + " x_shift " + std::to_string(c.x_shift) + " q_shift " + std::to_string(c.q_shift) +
         " seed " + std::to_string(seed);
}

void check_act_case(const ActCase& c, uint64_t seed) {
  INFO(describe(c, seed));
  const ActQuantShape shape{c.m, c.k, c.ldx, c.ldq, c.mn_major ? act_scales_mn_major(c.s_ld) : act_scales_k_major(c.s_ld)};
  const int64_t kbs = c.k / 128;
  std::vector<uint16_t> x = make_input(c.m, c.ldx, c.k, seed);
  plant_specials(x, c.m, c.ldx, c.k, 1);
  std::vector<uint16_t> x_dev(size_t(c.x_shift) + x.size(), 0);
  std::copy(x.begin(), x.end(), x_dev.begin() + c.x_shift);
  DeviceBuffer<__nv_bfloat16> dx(x_dev.size());
  dx.upload(x_dev);

  const size_t q_elems = size_t(c.q_shift) + size_t(c.m * c.ldq) + kGuard;
  const size_t s_elems = size_t(c.mn_major ? kbs * c.s_ld : c.m * c.s_ld) + kGuard;
  DeviceBuffer<__nv_fp8_e4m3> dq(q_elems);
  DeviceBuffer<float> ds(s_elems);
  for (uint8_t poison : kPoisons) {
    INFO("poison 0x" << std::hex << int(poison) << std::dec);
    std::vector<uint8_t> want_q(q_elems, poison);
    std::vector<float> want_s(s_elems, poison_f32(poison));
    ref::quantize_act_fp8(x.data(), want_q.data() + c.q_shift, want_s.data(), shape);

    fill_bytes(dq.get(), dq.bytes(), poison);
    fill_bytes(ds.get(), ds.bytes(), poison);
    quantize_act_fp8(dx.get() + c.x_shift, dq.get() + c.q_shift, ds.get(), shape, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    std::string report;
    CHECK_MESSAGE(first_code_mismatch(dq.download<uint8_t>(), want_q, &report) == -1, "codes: ", report);
    CHECK_MESSAGE(first_bit_mismatch(ds.download(), want_s, &report) == -1, "scales: ", report);
  }
}

// ---------------------------------------------------------------------------
// weights

struct WeightCase {
  const char* what;
  int64_t n, k, ldw, ldq, ld_sw;
  int q_shift = 0;  // bytes (4: not 8-byte aligned)
};

void check_weight_case(const WeightCase& c, uint64_t seed) {
  INFO(std::string(c.what) << ": n " << c.n << " k " << c.k << " ldw " << c.ldw << " ldq " << c.ldq << " ld_sw "
                           << c.ld_sw << " q_shift " << c.q_shift << " seed " << seed);
  const WeightQuantShape shape{c.n, c.k, c.ldw, c.ldq, c.ld_sw};
  std::vector<uint16_t> w = make_input(c.n, c.ldw, c.k, seed);
  plant_specials(w, c.n, c.ldw, c.k, 128);
  DeviceBuffer<__nv_bfloat16> dw(w.size());
  dw.upload(w);
  const size_t q_elems = size_t(c.q_shift) + size_t(c.n * c.ldq) + kGuard;
  const size_t s_elems = size_t(c.n / 128 * c.ld_sw) + kGuard;
  DeviceBuffer<__nv_fp8_e4m3> dq(q_elems);
  DeviceBuffer<float> ds(s_elems);
  for (uint8_t poison : kPoisons) {
    INFO("poison 0x" << std::hex << int(poison) << std::dec);
    std::vector<uint8_t> want_q(q_elems, poison);
    std::vector<float> want_s(s_elems, poison_f32(poison));
    ref::quantize_weight_fp8(w.data(), want_q.data() + c.q_shift, want_s.data(), shape);

    fill_bytes(dq.get(), dq.bytes(), poison);
    fill_bytes(ds.get(), ds.bytes(), poison);
    quantize_weight_fp8(dw.get(), dq.get() + c.q_shift, ds.get(), shape, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    std::string report;
    CHECK_MESSAGE(first_code_mismatch(dq.download<uint8_t>(), want_q, &report) == -1, "codes: ", report);
    CHECK_MESSAGE(first_bit_mismatch(ds.download(), want_s, &report) == -1, "scales: ", report);
  }
}

std::string error_message(const std::function<void()>& body) {
  try {
    body();
  } catch (const pb::Error& e) {
    return e.what();
  }
  return "(no pb::Error)";
}

}  // namespace

TEST_CASE("quantize_act_fp8: vector path, both scale layouts, bit-identical to the reference") {
  const std::vector<ActCase> cases = {
      {"packed, MN-major", 64, 1024, 1024, 1024, true, 64},
      {"odd rows, MN-major, padded lds", 37, 384, 384, 384, true, 44},
      {"odd rows, K-major", 37, 384, 384, 384, false, 3},
      {"K-major, padded row of scales", 33, 640, 640, 640, false, 7},
      {"one row, one group", 1, 128, 128, 128, true, 4},
      {"one row, K-major", 1, 256, 256, 256, false, 2},
      {"9 groups: a warp's last step half empty", 3, 384, 384, 384, true, 4},
      {"padded row strides", 29, 512, 520, 528, true, 32},
      {"padded row strides, K-major", 29, 512, 520, 528, false, 4},
  };
  for (const ActCase& c : cases)
    for (uint64_t seed : {1u, 2u}) check_act_case(c, seed);
}

TEST_CASE("quantize_act_fp8: the scalar fallback, bit-identical to the reference") {
  const std::vector<ActCase> cases = {
      {"ldx % 8 != 0", 17, 256, 259, 256, true, 20},
      {"ldq % 16 != 0", 17, 256, 256, 264, false, 2},
      {"misaligned x", 16, 256, 256, 256, true, 16, 1, 0},
      {"misaligned q", 16, 256, 256, 256, false, 2, 0, 8},
      {"odd rows, odd strides", 5, 384, 385, 389, true, 8},
  };
  for (const ActCase& c : cases)
    for (uint64_t seed : {3u, 4u}) check_act_case(c, seed);
}

TEST_CASE("quantize_act_fp8: grid-stride past one resident wave, K3 sizes") {
  check_act_case({"more groups than one wave of warps, MN-major", 16384, 2048, 2048, 2048, true, 16384}, 5);
  check_act_case({"more groups than one wave of warps, K-major", 16383, 2048, 2048, 2048, false, 16}, 6);
  check_act_case({"K3 hidden size", 2048, 7168, 7168, 7168, true, 2048}, 7);
}

TEST_CASE("quantize_weight_fp8: 128x128 blocks, padding 1.0f, bit-identical to the reference") {
  const std::vector<WeightCase> cases = {
      {"one block", 128, 128, 128, 128, 4},
      {"k/128 = 3: one padding scale per block row", 256, 384, 384, 384, 4},
      {"padded strides, ld_sw above the minimum", 384, 1152, 1160, 1168, 16},
      {"scalar: odd ldw", 128, 1024, 1031, 1024, 8},
      {"scalar: q not 8-byte aligned", 256, 512, 512, 520, 4, 4},
  };
  for (const WeightCase& c : cases)
    for (uint64_t seed : {11u, 12u}) check_weight_case(c, seed);
  check_weight_case({"K3-like, more blocks than one resident wave", 4096, 7168, 7168, 7168, 56}, 13);
}

TEST_CASE("fp8 quantization launchers check their contract") {
  DeviceBuffer<__nv_bfloat16> x(4096);
  DeviceBuffer<__nv_fp8_e4m3> q(4096);
  DeviceBuffer<float> s(256);
  CHECK(error_message([&] {
          quantize_act_fp8(x.get(), q.get(), s.get(), ActQuantShape{4, 100, 0, 0, act_scales_mn_major(4)}, nullptr);
        }).find("k = 100") != std::string::npos);
  CHECK(error_message([&] {
          quantize_weight_fp8(x.get(), q.get(), s.get(), WeightQuantShape{100, 128}, nullptr);
        }).find("n = 100") != std::string::npos);
  CHECK(error_message([&] {
          quantize_weight_fp8(x.get(), q.get(), s.get(), WeightQuantShape{128, 96}, nullptr);
        }).find("k = 96") != std::string::npos);
  CHECK(error_message([&] {
          quantize_act_fp8(x.get(), q.get(), s.get(), ActQuantShape{8, 128, 0, 0, act_scales_mn_major(4)}, nullptr);
        }).find("neither MN-major") != std::string::npos);
  CHECK(error_message([&] {
          quantize_act_fp8(nullptr, q.get(), s.get(), ActQuantShape{4, 128, 0, 0, act_scales_mn_major(4)}, nullptr);
        }).find("null") != std::string::npos);
  // q inside x's range
  CHECK(error_message([&] {
          quantize_act_fp8(x.get(), reinterpret_cast<__nv_fp8_e4m3*>(x.get() + 64), s.get(),
                           ActQuantShape{4, 128, 0, 0, act_scales_mn_major(4)}, nullptr);
        }).find("q overlaps x") != std::string::npos);
  // scales inside q's range
  CHECK(error_message([&] {
          quantize_act_fp8(x.get(), q.get(), reinterpret_cast<float*>(q.get() + 64),
                           ActQuantShape{4, 128, 0, 0, act_scales_mn_major(4)}, nullptr);
        }).find("s overlaps q") != std::string::npos);
  // Empty shapes launch nothing, even on null pointers.
  CHECK_NOTHROW(quantize_act_fp8(nullptr, nullptr, nullptr, ActQuantShape{0, 256, 0, 0, act_scales_mn_major(4)}, nullptr));
  CHECK_NOTHROW(quantize_act_fp8(nullptr, nullptr, nullptr, ActQuantShape{4, 0, 0, 0, act_scales_mn_major(4)}, nullptr));
  CHECK_NOTHROW(quantize_weight_fp8(nullptr, nullptr, nullptr, WeightQuantShape{0, 256}, nullptr));
  PB_CUDA(cudaDeviceSynchronize());
}
