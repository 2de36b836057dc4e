// Cut quant_fuse's producers (docs/cuts.md): rmsnorm_fp8 (kernels/layers/rmsnorm.h),
// situ_fp8, mul_sigmoid_fp8 and o_norm_gate_fp8 (kernels/cuts/elementwise.h)
// against their bf16 producer followed by quantize_act_fp8 (kernels/fp8/quant.h),
// bit for bit: the codes, the scales, and the bf16 rows where the fused
// producer writes them too. Random bf16
// inputs with outliers (gpu_test.h), odd row counts, both scale layouts; a row
// of NaN and a row of zeros; outputs poisoned first, so an element the fused
// kernel forgot shows as the poison.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "elementwise.h"
#include "fp8.h"
#include "gpu_test.h"
#include "quant.h"
#include "quant_ref.h"
#include "rmsnorm.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;

struct Twin {
  DeviceBuffer<__nv_fp8_e4m3> codes;
  DeviceBuffer<float> scales;
  Twin(int64_t rows, int64_t k, const Fp8ScaleLayout& layout)
      : codes(size_t(rows * k)),
        scales(size_t(layout.s_row == 1 ? (k / kFp8Group) * layout.s_group : rows * layout.s_row)) {
    codes.poison();
    scales.poison();
  }
};

// Codes and scales of two twins equal (NaN codes and NaN scales compare equal).
void check_same(const Twin& got, const Twin& want, const std::string& what) {
  INFO(what);
  const std::vector<uint8_t> gc = got.codes.download<uint8_t>(), wc = want.codes.download<uint8_t>();
  int64_t bad = -1;
  for (size_t i = 0; i < gc.size() && bad < 0; ++i)
    if (gc[i] != wc[i] && !(ref::e4m3_is_nan(gc[i]) && ref::e4m3_is_nan(wc[i]))) bad = int64_t(i);
  CHECK_MESSAGE(bad < 0, "codes differ at " << bad);
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(got.scales.download(), want.scales.download(), &report) < 0, report);
}

// Random rows, the second all NaN and the third all zeros (when there are that many).
std::vector<uint16_t> rows_with_specials(int64_t rows, int64_t k, uint64_t seed) {
  std::vector<uint16_t> x = random_bf16(size_t(rows * k), seed, 1.5f);
  for (int64_t c = 0; c < k && rows > 2; ++c) {
    x[size_t(1 * k + c)] = 0x7fc0;  // NaN
    x[size_t(2 * k + c)] = 0;
  }
  return x;
}

std::vector<Fp8ScaleLayout> layouts(int64_t rows, int64_t k) {
  return {act_scales_mn_major(act_scale_ld(rows)), act_scales_k_major(k / kFp8Group)};
}

}  // namespace

TEST_CASE("rmsnorm_fp8 is rmsnorm then quantize_act_fp8, bit for bit") {
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{{37, 512}, {256, 7168}, {5, 1536}, {130, 128}}) {
    const int64_t rows = shape.first, k = shape.second;
    for (const Fp8ScaleLayout& layout : layouts(rows, k)) {
      for (bool gain : {false, true}) {
        INFO("rows " << rows << " k " << k << " s_row " << layout.s_row << " gain " << gain);
        DeviceBuffer<bf16> x{size_t(rows * k)}, normed{size_t(rows * k)}, fused_rows{size_t(rows * k)};
        x.upload(rows_with_specials(rows, k, 100 + uint64_t(rows)));
        DeviceBuffer<float> gamma{size_t(k)};
        gamma.upload(random_f32(size_t(k), 7, 1.0f));
        const float* g = gain ? gamma.get() : nullptr;
        Twin want(rows, k, layout), got(rows, k, layout), got_no_rows(rows, k, layout);
        rmsnorm(x.get(), g, normed.get(), {rows, k}, kRmsNormEps, nullptr);
        quantize_act_fp8(normed.get(), want.codes.get(), want.scales.get(), {rows, k, k, k, layout}, nullptr);
        fused_rows.poison();
        rmsnorm_fp8(x.get(), g, fused_rows.get(), got.codes.get(), got.scales.get(), layout, {rows, k}, kRmsNormEps,
                    nullptr);
        rmsnorm_fp8(x.get(), g, nullptr, got_no_rows.codes.get(), got_no_rows.scales.get(), layout, {rows, k},
                    kRmsNormEps, nullptr);
        PB_CUDA(cudaDeviceSynchronize());
        check_same(got, want, "with the bf16 rows");
        check_same(got_no_rows, want, "without the bf16 rows");
        std::string report;
        CHECK_MESSAGE(first_bit_mismatch(fused_rows.download<uint16_t>(), normed.download<uint16_t>(), &report) < 0,
                      report);
      }
    }
  }
}

TEST_CASE("situ_fp8 and mul_sigmoid_fp8 are the op then quantize_act_fp8, bit for bit") {
  using Bf16Op = void (*)(Variant, const bf16*, const bf16*, bf16*, int64_t, cudaStream_t);
  using Fp8Op = void (*)(const bf16*, const bf16*, bf16*, __nv_fp8_e4m3*, float*, Fp8ScaleLayout, int64_t, int64_t,
                         cudaStream_t);
  struct Op {
    const char* name;
    Bf16Op bf16_op;
    Fp8Op fp8_op;
    float b_range;  // situ's u spans its table's range; mul_sigmoid's a is any value
  };
  for (const Op& op : {Op{"situ", situ, situ_fp8, 8.0f}, Op{"mul_sigmoid", mul_sigmoid, mul_sigmoid_fp8, 1.5f}}) {
    for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{{33, 256}, {512, 6144}, {3, 128}, {9, 12288}}) {
      const int64_t rows = shape.first, k = shape.second;
      for (const Fp8ScaleLayout& layout : layouts(rows, k)) {
        INFO(op.name << " rows " << rows << " k " << k << " s_row " << layout.s_row);
        const int64_t n = rows * k;
        DeviceBuffer<bf16> first{size_t(n)}, second{size_t(n)}, act{size_t(n)}, fused_rows{size_t(n)};
        // The NaN and zero rows in the first operand; a NaN and an inf in the second, whose vectors leave
        // the tables for the plain forms.
        first.upload(rows_with_specials(rows, k, 200 + uint64_t(rows)));
        std::vector<uint16_t> b = random_bf16(size_t(n), 300 + uint64_t(rows), op.b_range);
        b[5] = 0x7fc0;
        b[size_t(n - 1)] = 0xff80;  // -inf
        second.upload(b);
        for (Variant v : {Variant::baseline, Variant::cut}) {
          INFO(op.name << " " << variant_name(v));
          Twin want(rows, k, layout), got(rows, k, layout);
          op.bf16_op(v, first.get(), second.get(), act.get(), n, nullptr);
          quantize_act_fp8(act.get(), want.codes.get(), want.scales.get(), {rows, k, k, k, layout}, nullptr);
          fused_rows.poison();
          op.fp8_op(first.get(), second.get(), fused_rows.get(), got.codes.get(), got.scales.get(), layout, rows, k,
                    nullptr);
          PB_CUDA(cudaDeviceSynchronize());
          check_same(got, want, "codes and scales");
          std::string report;
          CHECK_MESSAGE(first_bit_mismatch(fused_rows.download<uint16_t>(), act.download<uint16_t>(), &report) < 0,
                        report);
        }
      }
    }
  }
}

TEST_CASE("o_norm_gate_fp8 is o_norm_gate then quantize_act_fp8, bit for bit") {
  // (rows, heads): a tail of (row, head)s past the cut's 64 a block; K3's 96 heads
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{{37, 3}, {256, 96}, {5, 1}, {130, 2}}) {
    const int64_t rows = shape.first, heads = shape.second, k = heads * 128, n = rows * k;
    DeviceBuffer<bf16> x{size_t(n)}, g{size_t(n)}, gated{size_t(n)}, fused_rows{size_t(n)};
    x.upload(rows_with_specials(rows, k, 400 + uint64_t(rows)));
    g.upload(random_bf16(size_t(n), 500 + uint64_t(rows), 6.0f));
    DeviceBuffer<float> gamma{128};
    gamma.upload(random_f32(128, 9, 1.5f));
    for (const Fp8ScaleLayout& layout : layouts(rows, k)) {
      for (Variant v : {Variant::baseline, Variant::cut}) {
        INFO("rows " << rows << " heads " << heads << " s_row " << layout.s_row << " " << variant_name(v));
        Twin want(rows, k, layout), got(rows, k, layout), got_no_rows(rows, k, layout);
        o_norm_gate(v, x.get(), g.get(), gamma.get(), gated.get(), rows * heads, kRmsNormEps, nullptr);
        quantize_act_fp8(gated.get(), want.codes.get(), want.scales.get(), {rows, k, k, k, layout}, nullptr);
        fused_rows.poison();
        o_norm_gate_fp8(x.get(), g.get(), gamma.get(), fused_rows.get(), got.codes.get(), got.scales.get(), layout,
                        rows, heads, kRmsNormEps, nullptr);
        o_norm_gate_fp8(x.get(), g.get(), gamma.get(), nullptr, got_no_rows.codes.get(), got_no_rows.scales.get(),
                        layout, rows, heads, kRmsNormEps, nullptr);
        PB_CUDA(cudaDeviceSynchronize());
        check_same(got, want, "with the bf16 rows");
        check_same(got_no_rows, want, "without the bf16 rows");
        std::string report;
        CHECK_MESSAGE(first_bit_mismatch(fused_rows.download<uint16_t>(), gated.download<uint16_t>(), &report) < 0,
                      report);
      }
    }
  }
}

TEST_CASE("the fused producers refuse what they cannot take") {
  DeviceBuffer<bf16> x{size_t(4 * 200)};
  Twin t(4, 256, act_scales_mn_major(4));
  CHECK_THROWS_WITH_AS(rmsnorm_fp8(x.get(), nullptr, nullptr, t.codes.get(), t.scales.get(), act_scales_mn_major(4),
                                   {4, 200}, kRmsNormEps, nullptr),
                       doctest::Contains("not a multiple of 128"), Error);
  CHECK_THROWS_WITH_AS(situ_fp8(x.get(), x.get(), nullptr, t.codes.get(), t.scales.get(), act_scales_mn_major(2), 4,
                                128, nullptr),
                       doctest::Contains("neither MN-major"), Error);
  CHECK_THROWS_WITH_AS(mul_sigmoid_fp8(x.get(), x.get(), nullptr, t.codes.get(), t.scales.get(),
                                       act_scales_mn_major(4), 4, 200, nullptr),
                       doctest::Contains("not a multiple of 128"), Error);
  CHECK_THROWS_WITH_AS(o_norm_gate_fp8(x.get(), x.get(), nullptr, nullptr, t.codes.get(), t.scales.get(),
                                       act_scales_mn_major(4), 4, 1, kRmsNormEps, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(o_norm_gate_fp8(x.get(), x.get(), nullptr, nullptr, t.codes.get(), t.scales.get(),
                                       act_scales_mn_major(4), 4, 0, kRmsNormEps, nullptr),
                       doctest::Contains("heads must be >= 1"), Error);
}
