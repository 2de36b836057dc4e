// Cut 5 (bf16 elementwise family) on the device: for add2, mul_sigmoid, situ
// and o_norm_gate, baseline == cut == reference bit for bit. The references
// run with the device's own expf / tanhf / rsqrtf (evaluate_with_device_math),
// so every other rounding of the contracts is checked exactly. Sizes cover the
// cut's vector path, its scalar tail, its grid-stride loop and the misaligned
// fallback; outputs are poisoned before each run and guarded on both sides.
// The cuts' fast forms (elementwise.cuh) are also compared with their plain
// forms on every bf16 input: situ's s(g) and t(u) each depend on one 16-bit
// input, so those two exhaustive checks prove the situ cut bit-identical for
// every input pair; the fast sigmoid likewise for mul_sigmoid and o_norm_gate.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <ios>
#include <string>
#include <vector>

#include "elementwise.cuh"
#include "elementwise.h"
#include "gpu_test.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;

constexpr uint16_t kPoison = 0xffff;  // DeviceBuffer::poison() in bf16
constexpr size_t kGuard = 64;         // poisoned elements after the output
constexpr float kEps = 1e-5f;

// A device copy of a host vector (element offsets are applied to the pointer).
template <class T, class H>
DeviceBuffer<T> to_device(const std::vector<H>& host) {
  DeviceBuffer<T> d(host.size());
  d.upload(host);
  return d;
}

// A poisoned output of n elements at element offset `shift`, with guards.
struct GuardedOutput {
  DeviceBuffer<bf16> buf;
  size_t shift, n;
  GuardedOutput(size_t shift_, size_t n_) : buf(shift_ + n_ + kGuard), shift(shift_), n(n_) {
    buf.poison();
  }
  bf16* get() const { return buf.get() + shift; }
  // Downloads the output after the kernel; flags any store outside it.
  std::vector<uint16_t> result(Variant v) const {
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> all = buf.download<uint16_t>();
    bool guards_intact = true;
    for (size_t i = 0; i < shift; ++i) guards_intact &= all[i] == kPoison;
    for (size_t i = shift + n; i < all.size(); ++i) guards_intact &= all[i] == kPoison;
    CHECK_MESSAGE(guards_intact, variant_name(v), ": store outside o");
    return std::vector<uint16_t>(all.begin() + shift, all.begin() + shift + n);
  }
};

void check_bits(const std::vector<uint16_t>& base, const std::vector<uint16_t>& cut,
                const std::vector<uint16_t>& want) {
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(base, want, &report) == -1, "baseline vs ref: ", report);
  CHECK_MESSAGE(first_bit_mismatch(cut, want, &report) == -1, "cut vs ref: ", report);
  CHECK_MESSAGE(first_bit_mismatch(cut, base, &report) == -1, "cut vs baseline: ", report);
}

// ---- the three flat two-operand ops ----

using BinaryLaunch = void (*)(Variant, const bf16*, const bf16*, bf16*, int64_t, cudaStream_t);
using BinaryRef = std::function<void(const uint16_t*, const uint16_t*, uint16_t*, int64_t,
                                     const ref::Transcendentals&)>;

struct BinaryOp {
  const char* name;
  BinaryLaunch launch;
  BinaryRef reference;
  float scale_first, scale_second;  // random_bf16 scales of the two operands
};

const BinaryOp kAdd2{"add2", add2,
                     [](const uint16_t* a, const uint16_t* b, uint16_t* o, int64_t n,
                        const ref::Transcendentals&) { ref::add2(a, b, o, n); },
                     1.0f, 1.0f};
const BinaryOp kMulSigmoid{"mul_sigmoid", mul_sigmoid, ref::mul_sigmoid, 1.0f, 4.0f};
const BinaryOp kSitu{"situ", situ, ref::situ, 4.0f, 30.0f};

struct Shifts {
  int first = 0, second = 0, out = 0;  // element offsets of the base pointers (1: misaligned)
};

// Baseline, cut and reference on the given operands (each sh.<operand> + n long).
void check_binary_data(const BinaryOp& op, int64_t n, Shifts sh, const std::vector<uint16_t>& first,
                       const std::vector<uint16_t>& second) {
  const DeviceBuffer<bf16> d_first = to_device<bf16>(first);
  const DeviceBuffer<bf16> d_second = to_device<bf16>(second);

  const std::vector<uint16_t> want = evaluate_with_device_math([&](const ref::Transcendentals& m) {
    std::vector<uint16_t> out(n);
    op.reference(first.data() + sh.first, second.data() + sh.second, out.data(), n, m);
    return out;
  });

  std::vector<uint16_t> got[2];
  for (Variant v : {Variant::baseline, Variant::cut}) {
    GuardedOutput o(sh.out, size_t(n));
    op.launch(v, d_first.get() + sh.first, d_second.get() + sh.second, o.get(), n, nullptr);
    got[int(v)] = o.result(v);
  }
  check_bits(got[0], got[1], want);
}

void check_binary_case(const BinaryOp& op, int64_t n, Shifts sh, uint64_t seed) {
  INFO(op.name, ": n ", n, " shifts ", sh.first, "/", sh.second, "/", sh.out, " seed ", seed);
  check_binary_data(op, n, sh, random_bf16(sh.first + n, seed, op.scale_first),
                    random_bf16(sh.second + n, seed + 1000, op.scale_second));
}

// Every bf16 pattern (NaNs, infinities, zeros, subnormals included) as the
// first or the second operand, the other random, at a size that takes the
// table path of the mul_sigmoid and situ cuts (n >= 2^20).
void check_binary_all_patterns(const BinaryOp& op) {
  const int64_t n = 16 * 65536 + 3;
  for (int which = 0; which < 2; ++which) {
    INFO(op.name, ": every bf16 pattern as operand ", which + 1, ", n ", n);
    std::vector<uint16_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = uint16_t(i * 40503);  // odd multiplier: a permutation per 65536
    const std::vector<uint16_t> other = random_bf16(n, 77 + which, which ? op.scale_first : op.scale_second);
    if (which == 0) check_binary_data(op, n, {}, all, other);
    else check_binary_data(op, n, {}, other, all);
  }
}

void check_binary_op(const BinaryOp& op) {
  // 1, 7: tail only; 8: one vector; 9, 8003: vectors + tail; 3000005: more
  // vectors than one resident wave (grid-stride) + tail. mul_sigmoid and situ
  // take their table path from n = 2^20 (3000005 and the all-pattern cases).
  for (int64_t n : {1, 7, 8, 9, 8 * 1000 + 3})
    for (uint64_t seed : {1u, 2u, 3u}) check_binary_case(op, n, {}, seed);
  check_binary_case(op, 3000005, {}, 4);
  check_binary_all_patterns(op);
  // misaligned pointers: the scalar fallback
  for (Shifts sh : {Shifts{1, 0, 0}, Shifts{0, 1, 0}, Shifts{0, 0, 1}, Shifts{1, 1, 1}})
    for (int64_t n : {1, 9, 8 * 1000 + 3}) check_binary_case(op, n, sh, 5);
}

// ---- o_norm_gate ----

struct NormShifts {
  int x = 0, g = 0, gamma = 0, out = 0;
};

void check_o_norm_gate_case(int64_t row_heads, NormShifts sh, uint64_t seed) {
  INFO("o_norm_gate: row_heads ", row_heads, " shifts ", sh.x, "/", sh.g, "/", sh.gamma, "/",
       sh.out, " seed ", seed);
  const int64_t n = row_heads * 128;
  const std::vector<uint16_t> x = random_bf16(sh.x + n, seed, 2.0f);
  const std::vector<uint16_t> g = random_bf16(sh.g + n, seed + 1000, 4.0f);
  const std::vector<float> gamma = random_f32(sh.gamma + 128, seed + 2000);
  const DeviceBuffer<bf16> d_x = to_device<bf16>(x);
  const DeviceBuffer<bf16> d_g = to_device<bf16>(g);
  const DeviceBuffer<float> d_gamma = to_device<float>(gamma);

  const std::vector<uint16_t> want = evaluate_with_device_math([&](const ref::Transcendentals& m) {
    std::vector<uint16_t> out(n);
    ref::o_norm_gate(x.data() + sh.x, g.data() + sh.g, gamma.data() + sh.gamma, out.data(),
                     row_heads, kEps, m);
    return out;
  });

  std::vector<uint16_t> got[2];
  for (Variant v : {Variant::baseline, Variant::cut}) {
    GuardedOutput o(sh.out, size_t(n));
    o_norm_gate(v, d_x.get() + sh.x, d_g.get() + sh.g, d_gamma.get() + sh.gamma, o.get(),
                row_heads, kEps, nullptr);
    got[int(v)] = o.result(v);
  }
  check_bits(got[0], got[1], want);
}

// ---- the fast forms, on every bf16 pattern ----

namespace ed = pb::elementwise_detail;

__device__ bool same_bits_or_both_nan(float a, float b) {
  return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b);
}

// mismatches[0]: s, [1]: t; first[0], first[1]: the smallest mismatching pattern.
__global__ void __launch_bounds__(1024)
    count_situ_factor_mismatches(unsigned long long* mismatches, uint32_t* first) {
  __shared__ float tab[ed::kSituTableFloats];
  ed::situ_fill_tables(tab, threadIdx.x, blockDim.x);
  __syncthreads();
  for (uint32_t h = threadIdx.x; h < 0x10000u; h += blockDim.x) {
    const float f = ed::bf16_bits_to_f32(h);
    if (!same_bits_or_both_nan(ed::situ_s_fast(tab, h), ed::situ_s(f))) {
      atomicAdd(&mismatches[0], 1ull);
      atomicMin(&first[0], h);
    }
    if (!same_bits_or_both_nan(ed::situ_t_fast(tab, h), ed::situ_t(f))) {
      atomicAdd(&mismatches[1], 1ull);
      atomicMin(&first[1], h);
    }
  }
}

// mul_sigmoid's gate table: gate_bits_fast(h) == bits of bf16(sigmoid_f32(h)).
__global__ void __launch_bounds__(1024) count_gate_mismatches(unsigned long long* mismatches, uint32_t* first) {
  __shared__ uint16_t tab[ed::kGateTableHalves];
  ed::gate_fill_table(tab, threadIdx.x, blockDim.x);
  __syncthreads();
  for (uint32_t h = threadIdx.x; h < 0x10000u; h += blockDim.x) {
    const uint32_t fast = ed::gate_bits_fast(tab, h), plain = ed::gate_bits_plain(h);
    const bool both_nan = (fast & 0x7fffu) > 0x7f80u && (plain & 0x7fffu) > 0x7f80u;
    if (fast != plain && !both_nan) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first, h);
    }
  }
}

// Every bf16 pattern through sigmoid_n in groups of kGroup consecutive patterns
// (a group with an out-of-range d takes the division path for all its members).
template <int kGroup>
__global__ void count_sigmoid_mismatches(unsigned long long* mismatches, uint32_t* first) {
  const uint32_t h0 = (blockIdx.x * blockDim.x + threadIdx.x) * kGroup;
  if (h0 >= 0x10000u) return;
  float x[kGroup];
#pragma unroll
  for (int k = 0; k < kGroup; ++k) x[k] = ed::bf16_bits_to_f32(h0 + k);
  ed::sigmoid_n(x);
#pragma unroll
  for (int k = 0; k < kGroup; ++k) {
    if (!same_bits_or_both_nan(x[k], ed::sigmoid_f32(ed::bf16_bits_to_f32(h0 + k)))) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first, h0 + k);
    }
  }
}

struct MismatchCounters {
  DeviceBuffer<unsigned long long> count{2};
  DeviceBuffer<uint32_t> first{2};
  MismatchCounters() {
    PB_CUDA(cudaMemset(count.get(), 0, 2 * sizeof(unsigned long long)));
    first.poison();  // 0xffffffff: atomicMin keeps the smallest mismatching pattern
  }
  void check(int i, const char* what) const {
    PB_CUDA(cudaDeviceSynchronize());
    const unsigned long long n = count.download()[i];
    const uint32_t h = first.download()[i];
    CHECK_MESSAGE(n == 0, what << ": " << n << " of 65536 bf16 patterns differ, first 0x" << std::hex
                                << h);
  }
};

}  // namespace

TEST_CASE("situ cut: s(g) and t(u) from the tables == the plain forms on every bf16 pattern") {
  MismatchCounters m;
  count_situ_factor_mismatches<<<1, 1024>>>(m.count.get(), m.first.get());
  PB_CUDA_LAUNCH();
  m.check(0, "s(g) = 4 tanhf(g / 4) (1 / (1 + expf(-g)))");
  m.check(1, "t(u) = 25 tanhf(u / 25)");
}

TEST_CASE("mul_sigmoid cut: the gate table == bf16(sigmoid_f32(g)) on every bf16 pattern") {
  MismatchCounters m;
  count_gate_mismatches<<<1, 1024>>>(m.count.get(), m.first.get());
  PB_CUDA_LAUNCH();
  m.check(0, "gate(g) = bf16(1 / (1 + expf(-g)))");
}

TEST_CASE("fast sigmoid == 1.0f / (1.0f + expf(-x)) on every bf16 pattern") {
  {
    MismatchCounters m;
    count_sigmoid_mismatches<1><<<0x10000 / 256, 256>>>(m.count.get(), m.first.get());
    PB_CUDA_LAUNCH();
    m.check(0, "groups of 1");
  }
  {
    MismatchCounters m;
    count_sigmoid_mismatches<8><<<0x10000 / 8 / 256, 256>>>(m.count.get(), m.first.get());
    PB_CUDA_LAUNCH();
    m.check(0, "groups of 8");
  }
}

TEST_CASE("add2: bit-identical") { check_binary_op(kAdd2); }
TEST_CASE("mul_sigmoid: bit-identical") { check_binary_op(kMulSigmoid); }
TEST_CASE("situ: bit-identical") { check_binary_op(kSitu); }

TEST_CASE("add2: in place (o == a)") {
  const int64_t n = 8 * 1000 + 3;
  const std::vector<uint16_t> a = random_bf16(n, 21), b = random_bf16(n, 22);
  std::vector<uint16_t> want(n);
  ref::add2(a.data(), b.data(), want.data(), n);
  const DeviceBuffer<bf16> d_b = to_device<bf16>(b);
  std::vector<uint16_t> got[2];
  for (Variant v : {Variant::baseline, Variant::cut}) {
    DeviceBuffer<bf16> d_a = to_device<bf16>(a);
    add2(v, d_a.get(), d_b.get(), d_a.get(), n, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    got[int(v)] = d_a.download<uint16_t>();
  }
  check_bits(got[0], got[1], want);
}

TEST_CASE("mul_sigmoid, situ: in place (o == first operand), table path") {
  const int64_t n = (int64_t(1) << 20) + 8 * 3 + 5;
  for (const BinaryOp* op : {&kMulSigmoid, &kSitu}) {
    INFO(op->name);
    const std::vector<uint16_t> a = random_bf16(n, 41, op->scale_first);
    const std::vector<uint16_t> b = random_bf16(n, 42, op->scale_second);
    const std::vector<uint16_t> want = evaluate_with_device_math([&](const ref::Transcendentals& m) {
      std::vector<uint16_t> out(n);
      op->reference(a.data(), b.data(), out.data(), n, m);
      return out;
    });
    const DeviceBuffer<bf16> d_b = to_device<bf16>(b);
    std::vector<uint16_t> got[2];
    for (Variant v : {Variant::baseline, Variant::cut}) {
      DeviceBuffer<bf16> d_a = to_device<bf16>(a);
      op->launch(v, d_a.get(), d_b.get(), d_a.get(), n, nullptr);
      PB_CUDA(cudaDeviceSynchronize());
      got[int(v)] = d_a.download<uint16_t>();
    }
    check_bits(got[0], got[1], want);
  }
}

TEST_CASE("o_norm_gate: bit-identical") {
  // 64 (row, head) per cut block iteration: 1, 3, 17, 100 leave a partial
  // block; 70001 needs more blocks than one resident wave (grid-stride).
  for (int64_t row_heads : {1, 3, 16, 17, 64, 100})
    for (uint64_t seed : {1u, 2u, 3u}) check_o_norm_gate_case(row_heads, {}, seed);
  check_o_norm_gate_case(70001, {}, 4);
  // misaligned pointers: the scalar fallback
  for (NormShifts sh : {NormShifts{1, 0, 0, 0}, NormShifts{0, 1, 0, 0}, NormShifts{0, 0, 1, 0},
                        NormShifts{0, 0, 0, 1}})
    for (int64_t row_heads : {1, 17}) check_o_norm_gate_case(row_heads, sh, 5);
}

TEST_CASE("o_norm_gate: in place (o == x)") {
  const int64_t row_heads = 100, n = row_heads * 128;
  const std::vector<uint16_t> x = random_bf16(n, 31, 2.0f), g = random_bf16(n, 32, 4.0f);
  const std::vector<float> gamma = random_f32(128, 33);
  const std::vector<uint16_t> want = evaluate_with_device_math([&](const ref::Transcendentals& m) {
    std::vector<uint16_t> out(n);
    ref::o_norm_gate(x.data(), g.data(), gamma.data(), out.data(), row_heads, kEps, m);
    return out;
  });
  const DeviceBuffer<bf16> d_g = to_device<bf16>(g);
  const DeviceBuffer<float> d_gamma = to_device<float>(gamma);
  std::vector<uint16_t> got[2];
  for (Variant v : {Variant::baseline, Variant::cut}) {
    DeviceBuffer<bf16> d_x = to_device<bf16>(x);
    o_norm_gate(v, d_x.get(), d_g.get(), d_gamma.get(), d_x.get(), row_heads, kEps, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    got[int(v)] = d_x.download<uint16_t>();
  }
  check_bits(got[0], got[1], want);
}

TEST_CASE("elementwise: the launchers check their contract") {
  DeviceBuffer<bf16> a(256), b(256);
  DeviceBuffer<float> gamma(128);
  for (Variant v : {Variant::baseline, Variant::cut}) {
    INFO(variant_name(v));
    CHECK_THROWS_AS(add2(v, a.get(), b.get(), a.get(), -1, nullptr), pb::Error);
    CHECK_THROWS_AS(add2(v, nullptr, b.get(), a.get(), 8, nullptr), pb::Error);
    CHECK_THROWS_AS(situ(v, a.get(), b.get(), a.get() + 1, 16, nullptr), pb::Error);  // overlap
    CHECK_THROWS_AS(o_norm_gate(v, a.get(), b.get(), gamma.get(), b.get() + 8, 1, kEps, nullptr),
                    pb::Error);  // row_heads 1 is 128 elements: o overlaps g partially
    CHECK_THROWS_AS(o_norm_gate(v, a.get(), b.get(), gamma.get(), a.get(), -1, kEps, nullptr),
                    pb::Error);
    // empty launches nothing, even on null pointers
    CHECK_NOTHROW(add2(v, nullptr, nullptr, nullptr, 0, nullptr));
    CHECK_NOTHROW(mul_sigmoid(v, nullptr, nullptr, nullptr, 0, nullptr));
    CHECK_NOTHROW(situ(v, nullptr, nullptr, nullptr, 0, nullptr));
    CHECK_NOTHROW(o_norm_gate(v, nullptr, nullptr, nullptr, nullptr, 0, kEps, nullptr));
  }
  PB_CUDA(cudaDeviceSynchronize());
}
