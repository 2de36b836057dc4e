// The fp8 row kernels of MoE routing (kernels/moe/moe_route.h) against the
// kernels they fuse, bit for bit, scales K-major (row stride W/128):
//   moe_permute_fp8(quantize_act_fp8(x)) == quantize_act_fp8(moe_permute(x))
//   moe_weight_fp8(y)                    == quantize_act_fp8(moe_weight(y))
// codes (NaN codes compare equal: fp8.h leaves their sign open) and scales.
// Plans: the real path (router_topk on synthetic logits, then
// moe_permute_plan, all on the device), and one made by hand with -1 rows
// scattered among shuffled assignments, whose rows must come out codes 0x00
// and scale 1.0f. Inputs: random bf16 with outliers (gpu_test.h), a NaN row
// and a zero row; router weights or random ones (signs, -0, 1e30: products
// overflow bf16 to inf, and NaN). T in {1, 37, 300}, k in {2, 16}, widths
// 128, 256, 3072 and 3584 (T <= 37). Outputs are poisoned with 0x7b bytes and
// guarded on both sides: a scale of 0x7b7b7b7b (1.3e36) is beyond any group's
// (at most 3.39e38 / 448 = 7.6e35), and a NaN poison would hide in NaN rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fp8.h"
#include "gpu_test.h"
#include "guarded.h"
#include "moe_route.h"
#include "quant.h"
#include "quant_ref.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;

constexpr int kPoison = 0x7b;

// Codes and K-major scales of [rows, width].
struct Fp8Rows {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

void check_same(const Fp8Rows& got, const Fp8Rows& want, int64_t width, const char* what) {
  INFO(what);
  REQUIRE(got.codes.size() == want.codes.size());
  int64_t bad = -1;
  for (size_t i = 0; i < got.codes.size() && bad < 0; ++i)
    if (got.codes[i] != want.codes[i] &&
        !(ref::e4m3_is_nan(got.codes[i]) && ref::e4m3_is_nan(want.codes[i])))
      bad = int64_t(i);
  CHECK_MESSAGE(bad < 0, "codes differ at row "
                             << bad / width << " column " << bad % width << ": got "
                             << int(got.codes[size_t(std::max<int64_t>(bad, 0))]) << ", want "
                             << int(want.codes[size_t(std::max<int64_t>(bad, 0))]));
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(got.scales, want.scales, &report) < 0, "scales: ", report);
}

// The -1 rows of perm_src: codes 0x00 and scales 1.0f.
void check_dropped_rows(const Fp8Rows& got, const std::vector<int32_t>& perm_src, int64_t width,
                        const char* what) {
  const int64_t kbs = width / kFp8Group;
  int64_t bad = -1;
  for (size_t p = 0; p < perm_src.size() && bad < 0; ++p) {
    if (perm_src[p] >= 0) continue;
    for (int64_t c = 0; c < width; ++c)
      if (got.codes[p * size_t(width) + size_t(c)] != 0) bad = int64_t(p);
    for (int64_t g = 0; g < kbs; ++g)
      if (got.scales[p * size_t(kbs) + size_t(g)] != 1.0f) bad = int64_t(p);
  }
  CHECK_MESSAGE(bad < 0, what, ": row ", bad,
                " has perm_src -1 but is not codes 0x00, scales 1.0f");
}

std::string describe(const MoeRouteShape& s, int64_t width) {
  return "T " + std::to_string(s.tokens) + " E " + std::to_string(s.experts) + " k " +
         std::to_string(s.top_k) + " width " + std::to_string(width);
}

size_t assignments(const MoeRouteShape& s) { return size_t(s.tokens) * size_t(s.top_k); }

// Random rows with outliers; row 1 all NaN and row 2 all zeros where there are that many.
std::vector<uint16_t> rows_with_specials(int64_t rows, int64_t width, uint64_t seed) {
  std::vector<uint16_t> x = random_bf16(size_t(rows * width), seed, 1.5f);
  for (int64_t c = 0; c < width && rows > 2; ++c) {
    x[size_t(1 * width + c)] = 0x7fc0;  // NaN
    x[size_t(2 * width + c)] = 0;
  }
  return x;
}

// ---- plans ----

struct Plan {
  std::vector<int32_t> perm_src;
  std::vector<float> weights;  // [T, k]
  const char* name;
};

// router_topk on synthetic logits, then moe_permute_plan, on the device.
Plan router_plan(const MoeRouteShape& s, uint64_t seed) {
  const auto logits = to_device<float>(synthetic_router_logits(s.tokens, s.experts, seed));
  const auto bias = to_device<float>(synthetic_router_bias(s.experts, seed));
  DeviceBuffer<int32_t> ids(assignments(s)), counts(size_t(s.experts)),
      offsets(size_t(s.experts) + 1);
  DeviceBuffer<int32_t> perm_src(assignments(s)), perm_dst(assignments(s));
  DeviceBuffer<float> weights(assignments(s));
  const size_t ws_bytes = moe_permute_plan_workspace_bytes(s);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  router_topk(logits.get(), bias.get(), ids.get(), weights.get(), s, nullptr);
  moe_permute_plan(ids.get(), {counts.get(), offsets.get(), perm_src.get(), perm_dst.get()},
                   ws.get(), ws_bytes, s, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  return {perm_src.download(), weights.download(), "router plan"};
}

// Shuffled assignments with about one row in four -1 (the last row always),
// the first row live; random weights, every 13th 1e30 (products overflow bf16
// to inf) and every 29th NaN.
Plan hand_plan(const MoeRouteShape& s, uint64_t seed) {
  const size_t A = assignments(s);
  std::vector<int32_t> perm_src(A);
  for (size_t i = 0; i < A; ++i) perm_src[i] = int32_t(i);
  std::mt19937_64 rng(seed);
  std::shuffle(perm_src.begin(), perm_src.end(), rng);
  std::uniform_int_distribution<int> quarter(0, 3);
  for (int32_t& p : perm_src)
    if (quarter(rng) == 0) p = -1;
  perm_src.back() = -1;
  if (A > 1 && perm_src.front() < 0)
    perm_src.front() = 0;  // a repeat at worst: the row kernels allow it
  std::vector<float> weights = random_f32(A, seed + 1, 0.5f);
  for (size_t i = 0; i < A; ++i) {
    if (i % 13 == 5) weights[i] = 1e30f;
    if (i % 29 == 3) weights[i] = NAN;
  }
  return {perm_src, weights, "hand plan with -1 rows"};
}

// ---- the two compositions ----

// x [T, W] -> (moe_permute then quantize_act_fp8) vs (quantize_act_fp8 then moe_permute_fp8).
// shift_in / shift_out: byte offsets of xq / xpq (off 16 bytes: the scalar path);
// the scale pointers move by as many floats, staying 4-byte aligned.
void check_permute(const Plan& plan, const MoeRouteShape& s, int64_t width, uint64_t seed,
                   size_t shift_in = 0, size_t shift_out = 0) {
  INFO(describe(s, width) << " " << plan.name << " shift_in " << shift_in << " shift_out "
                          << shift_out);
  const int64_t T = s.tokens, rows = int64_t(assignments(s)), kbs = width / kFp8Group;
  const auto x = to_device<bf16>(rows_with_specials(T, width, seed));
  const auto perm_src = to_device<int32_t>(plan.perm_src);

  // want: moe_permute, then quantize_act_fp8 (K-major).
  DeviceBuffer<bf16> xp(size_t(rows * width));
  Guarded<fp8, uint8_t> want_q(size_t(rows * width), kPoison);
  Guarded<float> want_s(size_t(rows * kbs), kPoison);
  moe_permute(x.get(), perm_src.get(), xp.get(), s, width, nullptr);
  quantize_act_fp8(xp.get(), want_q.get(), want_s.get(),
                   {rows, width, width, width, act_scales_k_major(kbs)}, nullptr);

  // got: quantize_act_fp8 of x, then moe_permute_fp8.
  Guarded<fp8, uint8_t> xq(size_t(T * width), kPoison, shift_in);
  Guarded<float> sx(size_t(T * kbs), kPoison, shift_in);
  quantize_act_fp8(x.get(), xq.get(), sx.get(), {T, width, width, width, act_scales_k_major(kbs)},
                   nullptr);
  Guarded<fp8, uint8_t> got_q(size_t(rows * width), kPoison, shift_out);
  Guarded<float> got_s(size_t(rows * kbs), kPoison, shift_out);
  moe_permute_fp8(xq.get(), sx.get(), perm_src.get(), got_q.get(), got_s.get(), s, width, nullptr);

  const Fp8Rows want{want_q.result("reference codes"), want_s.result("reference scales")};
  const Fp8Rows got{got_q.result("moe_permute_fp8 codes"), got_s.result("moe_permute_fp8 scales")};
  check_same(got, want, width, "moe_permute_fp8 == quantize_act_fp8(moe_permute)");
  check_dropped_rows(got, plan.perm_src, width, "moe_permute_fp8");
}

// y [T * k, N] -> (moe_weight then quantize_act_fp8) vs moe_weight_fp8.
// shift_in: elements of y (off 16 bytes: the scalar path); shift_out: bytes of
// q (off 8 bytes: the scalar path), floats of sq.
void check_weight(const Plan& plan, const MoeRouteShape& s, int64_t width, uint64_t seed,
                  size_t shift_in = 0, size_t shift_out = 0) {
  INFO(describe(s, width) << " " << plan.name << " shift_in " << shift_in << " shift_out "
                          << shift_out);
  const int64_t rows = int64_t(assignments(s)), kbs = width / kFp8Group;
  std::vector<uint16_t> y_host(shift_in, 0x3f80);
  const std::vector<uint16_t> rows_host = rows_with_specials(rows, width, seed);
  y_host.insert(y_host.end(), rows_host.begin(), rows_host.end());
  const auto y = to_device<bf16>(y_host);
  const auto perm_src = to_device<int32_t>(plan.perm_src);
  const auto weights = to_device<float>(plan.weights);

  // want: moe_weight, then quantize_act_fp8 (K-major).
  DeviceBuffer<bf16> yw(size_t(rows * width));
  Guarded<fp8, uint8_t> want_q(size_t(rows * width), kPoison);
  Guarded<float> want_s(size_t(rows * kbs), kPoison);
  moe_weight(y.get() + shift_in, perm_src.get(), weights.get(), yw.get(), s, width, nullptr);
  quantize_act_fp8(yw.get(), want_q.get(), want_s.get(),
                   {rows, width, width, width, act_scales_k_major(kbs)}, nullptr);

  Guarded<fp8, uint8_t> got_q(size_t(rows * width), kPoison, shift_out);
  Guarded<float> got_s(size_t(rows * kbs), kPoison, shift_out);
  moe_weight_fp8(y.get() + shift_in, perm_src.get(), weights.get(), got_q.get(), got_s.get(), s,
                 width, nullptr);

  const Fp8Rows want{want_q.result("reference codes"), want_s.result("reference scales")};
  const Fp8Rows got{got_q.result("moe_weight_fp8 codes"), got_s.result("moe_weight_fp8 scales")};
  check_same(got, want, width, "moe_weight_fp8 == quantize_act_fp8(moe_weight)");
  check_dropped_rows(got, plan.perm_src, width, "moe_weight_fp8");
}

std::vector<int64_t> widths_for(int64_t tokens) {
  std::vector<int64_t> w{128, 256, 3072};
  if (tokens <= 37) w.push_back(3584);
  return w;
}

const MoeRouteShape kShapes[] = {
    {1, 8, 2}, {37, 8, 2}, {300, 8, 2}, {1, 224, 16}, {37, 224, 16}, {300, 224, 16},
};

}  // namespace

TEST_CASE("moe_permute_fp8 is quantize_act_fp8 then moe_permute's permutation, bit for bit") {
  for (const MoeRouteShape& s : kShapes) {
    const uint64_t seed = 11 + uint64_t(s.tokens) * 7 + uint64_t(s.top_k);
    const Plan plans[] = {router_plan(s, seed), hand_plan(s, seed + 100)};
    for (const Plan& plan : plans)
      for (int64_t width : widths_for(s.tokens))
        check_permute(plan, s, width, seed + uint64_t(width));
  }
}

TEST_CASE("moe_weight_fp8 is moe_weight then quantize_act_fp8, bit for bit") {
  for (const MoeRouteShape& s : kShapes) {
    const uint64_t seed = 23 + uint64_t(s.tokens) * 5 + uint64_t(s.top_k);
    const Plan plans[] = {router_plan(s, seed), hand_plan(s, seed + 100)};
    for (const Plan& plan : plans)
      for (int64_t width : widths_for(s.tokens))
        check_weight(plan, s, width, seed + uint64_t(width));
  }
}

TEST_CASE("moe fp8 row kernels: scalar paths, many rows (grid-stride)") {
  SUBCASE("unaligned codes and bf16 rows take the scalar paths, same results") {
    const MoeRouteShape s{37, 224, 16};
    const Plan plan = hand_plan(s, 5);
    for (int64_t width : {int64_t(128), int64_t(384)}) {
      check_permute(plan, s, width, 6, 1, 0);
      check_permute(plan, s, width, 6, 0, 3);
      check_permute(plan, s, width, 6, 8, 8);  // 8-byte aligned: still scalar for 16-byte chunks
      check_weight(plan, s, width, 7, 1, 0);   // y 2 bytes off
      check_weight(plan, s, width, 7, 4, 0);   // y 8 bytes off
      check_weight(plan, s, width, 7, 0, 4);   // q 4 bytes off
      check_weight(plan, s, width, 7, 0, 8);   // q 8-byte aligned, not 16: the vector path
    }
  }
  SUBCASE("65536 rows, more than one resident wave") {
    const MoeRouteShape s{4096, 224, 16};
    const Plan plan = hand_plan(s, 9);
    check_permute(plan, s, 128, 10);
    check_weight(plan, s, 256, 11);
    const Plan routed = router_plan(s, 12);
    check_permute(routed, s, 256, 13);
    check_weight(routed, s, 128, 14);
  }
}

TEST_CASE("moe fp8 row kernels check their contract") {
  const MoeRouteShape s{4, 8, 2}, empty{0, 8, 2}, bad_k{4, 8, 9};
  DeviceBuffer<fp8> codes(8 * 1024);
  DeviceBuffer<float> f(1024);
  DeviceBuffer<int32_t> perm(64);
  DeviceBuffer<bf16> h(8 * 256);
  fp8* xq = codes.get();                                // [4, 256]
  fp8* xpq = codes.get() + 2048;                        // [8, 256]
  float* sx = f.get();                                  // [4, 2]
  float* spq = f.get() + 64;                            // [8, 2]
  float* weights = f.get() + 128;                       // [4, 2]
  PB_CUDA(cudaMemset(perm.get(), 0xff, perm.bytes()));  // every row -1: nothing is read

  CHECK_NOTHROW(moe_permute_fp8(xq, sx, perm.get(), xpq, spq, s, 256, nullptr));
  CHECK_THROWS_WITH_AS(moe_permute_fp8(xq, sx, perm.get(), xpq, spq, s, 200, nullptr),
                       doctest::Contains("not a multiple of 128"), Error);
  CHECK_THROWS_WITH_AS(moe_permute_fp8(xq, sx, perm.get(), xpq, spq, s, -128, nullptr),
                       doctest::Contains("width < 0"), Error);
  CHECK_THROWS_WITH_AS(moe_permute_fp8(xq, nullptr, perm.get(), xpq, spq, s, 256, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(
      moe_permute_fp8(xq, sx, perm.get(), xpq, reinterpret_cast<float*>(codes.get() + 6002), s, 256,
                      nullptr),
      doctest::Contains("4-byte aligned"), Error);
  CHECK_THROWS_WITH_AS(moe_permute_fp8(xq, sx, perm.get(), xq + 512, spq, s, 256, nullptr),
                       doctest::Contains("overlaps an input"), Error);  // xpq over xq
  CHECK_THROWS_WITH_AS(moe_permute_fp8(xq, sx, perm.get(), xpq, sx + 4, s, 256, nullptr),
                       doctest::Contains("overlaps an input"), Error);  // spq over sx
  CHECK_THROWS_AS(moe_permute_fp8(xq, sx, perm.get(), xpq, spq, bad_k, 256, nullptr), Error);
  CHECK_NOTHROW(moe_permute_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, empty, 256, nullptr));
  CHECK_NOTHROW(moe_permute_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, s, 0, nullptr));

  CHECK_NOTHROW(moe_weight_fp8(h.get(), perm.get(), weights, xpq, spq, s, 256, nullptr));
  CHECK_THROWS_WITH_AS(moe_weight_fp8(h.get(), perm.get(), weights, xpq, spq, s, 64, nullptr),
                       doctest::Contains("not a multiple of 128"), Error);
  CHECK_THROWS_WITH_AS(moe_weight_fp8(h.get(), perm.get(), nullptr, xpq, spq, s, 256, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(
      moe_weight_fp8(h.get(), perm.get(), weights, xpq,
                     reinterpret_cast<float*>(codes.get() + 6001), s, 256, nullptr),
      doctest::Contains("4-byte aligned"), Error);
  CHECK_THROWS_WITH_AS(moe_weight_fp8(h.get(), perm.get(), weights,
                                      reinterpret_cast<fp8*>(h.get() + 512), spq, s, 256, nullptr),
                       doctest::Contains("overlaps an input"), Error);  // q over y
  CHECK_THROWS_WITH_AS(
      moe_weight_fp8(h.get(), perm.get(), weights, xpq, weights - 8, s, 256, nullptr),
      doctest::Contains("overlaps an input"), Error);  // sq over weights
  CHECK_THROWS_WITH_AS(moe_weight_fp8(h.get(), perm.get(), weights, xpq,
                                      reinterpret_cast<float*>(xpq + 1024), s, 256, nullptr),
                       doctest::Contains("outputs overlap"), Error);
  CHECK_NOTHROW(moe_weight_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, empty, 3072, nullptr));
  PB_CUDA(cudaDeviceSynchronize());
}
