// The plain C++ references of conv_silu_chunk (cut 2), lse_merge (cut 4) and
// o_finalize, on the host: chunked conv with carry == one call, the carry
// semantics, the merge against a double-precision softmax over the
// concatenation, and the ±inf edge cases.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "check.h"
#include "conv_silu_chunk.h"
#include "lse_merge.h"
#include "ref_math.h"

namespace pb {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_int_distribution<int> pick(0, 31);
  std::vector<float> v(n);
  for (auto& x : v) {
    switch (pick(rng)) {
      case 0: x = -0.0f; break;
      case 1: x = normal(rng) * 4096.0f; break;
      default: x = normal(rng);
    }
  }
  return v;
}

std::vector<uint16_t> random_bf16_bits(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  const std::vector<float> f = random_floats(n, seed, 1.0f);
  for (size_t i = 0; i < n; ++i) v[i] = ref::f32_to_bf16_rn(f[i]);
  return v;
}

struct ConvData {
  int64_t tokens, inner, ld;
  std::vector<float> p, cw;
  std::vector<uint16_t> carry;
};

ConvData make_conv(int64_t tokens, int64_t inner, int64_t ld, uint64_t seed) {
  return {tokens, inner, ld, random_floats(size_t(tokens * ld), seed, 1.0f),
          random_floats(size_t(4 * inner), seed + 1, 0.25f),
          random_bf16_bits(size_t(3 * inner), seed + 2)};
}

// One call over rows [begin, end) with commit_rows = commit - begin.
void conv_call(const ConvData& d, int64_t begin, int64_t end, int64_t commit,
               const std::vector<uint16_t>& carry, std::vector<uint16_t>& y,
               std::vector<uint16_t>* next) {
  const ConvShape s{end - begin, d.inner, d.ld, commit - begin};
  ref::HostMath math;
  ref::conv_silu_chunk(d.p.data() + begin * d.ld, d.cw.data(), carry.data(),
                       y.data() + begin * d.inner, next ? next->data() : nullptr, s, math);
}

TEST_CASE("ref::conv_silu_chunk: chunked calls threading next -> carry == one call") {
  const ConvData d = make_conv(45, 7, 9, 1);
  std::vector<uint16_t> y_one(size_t(d.tokens * d.inner)), next_one(size_t(3 * d.inner));
  conv_call(d, 0, d.tokens, d.tokens, d.carry, y_one, &next_one);

  // (end, commit) per call; the next call starts at commit (commit < end
  // recomputes the uncommitted rows, as speculative verification does).
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> schedules = {
      {{5, 5}, {6, 6}, {22, 22}, {45, 45}},
      {{1, 1}, {2, 2}, {3, 3}, {45, 45}},
      {{30, 17}, {33, 18}, {45, 45}},
  };
  for (const auto& schedule : schedules) {
    std::vector<uint16_t> y(y_one.size(), 0xffff), carry = d.carry, next(carry.size());
    int64_t begin = 0;
    for (const auto& [end, commit] : schedule) {
      conv_call(d, begin, end, commit, carry, y, &next);
      carry = next;
      begin = commit;
    }
    CHECK(y == y_one);
    CHECK(carry == next_one);
  }
}

TEST_CASE("ref::conv_silu_chunk: next is the commit row's successor window") {
  const ConvData d = make_conv(6, 5, 5, 2);
  std::vector<uint16_t> y(size_t(d.tokens * d.inner));
  auto landed = [&](int64_t t, int64_t c) { return ref::f32_to_bf16_rn(0.0f + d.p[t * d.ld + c]); };
  for (int64_t commit = 1; commit <= d.tokens; ++commit) {
    std::vector<uint16_t> next(size_t(3 * d.inner), 0xabcd);
    conv_call(d, 0, d.tokens, commit, d.carry, y, &next);
    for (int j = 0; j < 3; ++j) {
      const int64_t pos = commit - 3 + j;
      for (int64_t c = 0; c < d.inner; ++c) {
        const uint16_t want = pos < 0 ? d.carry[(pos + 3) * d.inner + c] : landed(pos, c);
        CHECK(next[j * d.inner + c] == want);
      }
    }
  }
  // commit_rows == 0: next is neither required nor written.
  std::vector<uint16_t> next(size_t(3 * d.inner), 0xabcd);
  conv_call(d, 0, d.tokens, 0, d.carry, y, &next);
  for (uint16_t v : next) CHECK(v == 0xabcd);
  conv_call(d, 0, d.tokens, 0, d.carry, y, nullptr);
}

TEST_CASE("ref::conv_silu_chunk: a -0 partial lands as +0; one tap is silu(bf16(x))") {
  const int64_t inner = 4;
  ConvData d{3, inner, inner, {}, {}, {}};
  d.p = {-0.0f, 1.5f, -2.25f, 3.0f, 0.1f, -7.0f, 100.0f, -0.0f, 0.0f, 0.3f, 20.0f, -90.0f};
  d.cw.assign(4 * inner, 0.0f);
  for (int64_t c = 0; c < inner; ++c) d.cw[3 * inner + c] = 1.0f;  // y = silu(bf16(x_t))
  d.carry.assign(3 * inner, 0x3f80);                                 // 1.0, ignored by the taps
  std::vector<uint16_t> y(size_t(3 * inner)), next(size_t(3 * inner));
  conv_call(d, 0, 3, 3, d.carry, y, &next);
  CHECK(next[0] == 0x0000);  // x_0 of channel 0 is -0 landed: +0
  CHECK(next[inner + 3] == 0x0000);  // x_1 of channel 3 likewise
  for (size_t i = 0; i < y.size(); ++i) {
    const double x = ref::bf16_to_f32(ref::f32_to_bf16_rn(d.p[i]));
    const double want = x / (1.0 + std::exp(-x));
    const double got = ref::bf16_to_f32(y[i]);
    CHECK(std::fabs(got - want) <= std::fabs(want) * (1.0 / 128) + 1e-30);  // within a bf16 ulp
  }
}

// Windows of lse in [-6, 6] (some -inf, never all) merged one by one vs
// o = sum_k exp(lse_k - L) o_k, L = log sum_k exp(lse_k), in double.
TEST_CASE("ref::lse_merge: sequential windows == one softmax over the concatenation") {
  constexpr int kD = kLseMergeHeadDim;
  const int64_t t_q = 7;
  const int heads = 3, windows = 5;
  const size_t rows = size_t(t_q) * heads;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> lse_dist(-6.0f, 6.0f);
  std::vector<std::vector<uint16_t>> o;
  std::vector<std::vector<float>> lse;
  for (int k = 0; k < windows; ++k) {
    o.push_back(random_bf16_bits(rows * kD, 50 + k));
    std::vector<float> l(rows);
    for (size_t r = 0; r < rows; ++r) l[r] = (k > 0 && (r + k) % 4 == 0) ? -kInf : lse_dist(rng);
    lse.push_back(l);
  }
  std::vector<float> acc(rows * kD), lse_acc(rows);
  ref::HostMath math;
  for (int k = 0; k < windows; ++k) {
    ref::lse_merge(o[k].data(), lse[k].data(), acc.data(), lse_acc.data(), t_q, heads, k == 0,
                   math);
  }
  for (int64_t q = 0; q < t_q; ++q) {
    for (int h = 0; h < heads; ++h) {
      const size_t li = size_t(h) * t_q + q, row = size_t(q) * heads + h;
      double m = -INFINITY, sum = 0.0;
      for (int k = 0; k < windows; ++k) m = std::fmax(m, double(lse[k][li]));
      for (int k = 0; k < windows; ++k) sum += std::exp(double(lse[k][li]) - m);
      const double L = m + std::log(sum);
      CHECK(std::fabs(lse_acc[li] - L) <= 1e-5 * std::fmax(1.0, std::fabs(L)));
      for (int i = 0; i < kD; ++i) {
        double want = 0.0, scale = 0.0;
        for (int k = 0; k < windows; ++k) {
          const double wk = std::exp(double(lse[k][li]) - L);
          const double ok = ref::bf16_to_f32(o[k][row * kD + i]);
          want += wk * ok;
          scale += wk * std::fabs(ok);
        }
        CHECK(std::fabs(acc[row * kD + i] - want) <= 1e-5 * scale + 1e-30);
      }
    }
  }
}

TEST_CASE("ref::lse_merge: reset, -inf on one side, -inf on both sides") {
  constexpr int kD = kLseMergeHeadDim;
  const int64_t t_q = 2;
  const int heads = 2;
  const size_t rows = 4;
  const std::vector<uint16_t> o = random_bf16_bits(rows * kD, 9);
  const std::vector<float> acc0 = random_floats(rows * kD, 10, 1.0f);
  ref::HostMath math;
  // reset: acc = f32(o), lse = lw whatever lw is.
  {
    std::vector<float> acc = acc0, lse_acc = {1.0f, 2.0f, 3.0f, 4.0f};
    const std::vector<float> lw = {-kInf, kInf, 0.5f, -3.0f};
    ref::lse_merge(o.data(), lw.data(), acc.data(), lse_acc.data(), t_q, heads, true, math);
    for (size_t i = 0; i < acc.size(); ++i) CHECK(acc[i] == ref::bf16_to_f32(o[i]));
    CHECK(std::memcmp(lse_acc.data(), lw.data(), 4 * rows) == 0);
  }
  // li 0: both -inf (untouched); li 1: acc side -inf (acc = o, lse = lw);
  // li 2: window side -inf (acc, lse unchanged in value); li 3: finite.
  std::vector<float> acc = acc0, lse_acc = {-kInf, -kInf, 1.25f, 0.0f};
  const std::vector<float> lw = {-kInf, 0.75f, -kInf, 0.0f};
  ref::lse_merge(o.data(), lw.data(), acc.data(), lse_acc.data(), t_q, heads, false, math);
  auto row_of = [&](size_t li) { return (li % t_q) * heads + li / t_q; };
  for (int i = 0; i < kD; ++i) {
    const size_t r0 = row_of(0) * kD + i, r1 = row_of(1) * kD + i, r2 = row_of(2) * kD + i,
                 r3 = row_of(3) * kD + i;
    CHECK(std::memcmp(&acc[r0], &acc0[r0], 4) == 0);
    CHECK(acc[r1] == ref::bf16_to_f32(o[r1]));
    CHECK(acc[r2] == acc0[r2]);
    // equal lse: weights exp(-log 2) each
    const float half = math.exp(0.0f - (0.0f + math.log(2.0f)));
    CHECK(acc[r3] == std::fma(ref::bf16_to_f32(o[r3]), half, acc0[r3] * half));
  }
  CHECK(lse_acc[0] == -kInf);
  CHECK(lse_acc[1] == 0.75f);
  CHECK(lse_acc[2] == 1.25f);
  CHECK(lse_acc[3] == 0.0f + math.log(2.0f));
}

// Rows [a, b) of a window: o [t, h, 128] -> [b - a, h, 128], lse [h, t] -> [h, b - a].
void window_rows(const std::vector<uint16_t>& o, const std::vector<float>& lse, int64_t t, int heads, int64_t a,
                 int64_t b, std::vector<uint16_t>* o_rows, std::vector<float>* lse_rows) {
  constexpr int kD = kLseMergeHeadDim;
  o_rows->assign(o.begin() + a * heads * kD, o.begin() + b * heads * kD);
  lse_rows->clear();
  for (int h = 0; h < heads; ++h)
    for (int64_t q = a; q < b; ++q) lse_rows->push_back(lse[size_t(h * t + q)]);
}

// A window merged in two row ranges, each at its own rows of the accumulator
// (schedule.h's balance: the kept half and the moved half), leaves the
// accumulator bit for bit as the whole window does; a range touches no other row.
TEST_CASE("ref::lse_merge over row ranges == the whole window, bit for bit; rows outside untouched") {
  constexpr int kD = kLseMergeHeadDim;
  ref::HostMath math;
  for (int64_t t : {1, 2, 7, 33}) {
    for (int heads : {1, 3}) {
      INFO("t " << t << " heads " << heads);
      const size_t rows = size_t(t) * heads;
      std::vector<std::vector<uint16_t>> o;
      std::vector<std::vector<float>> lse;
      for (int k = 0; k < 3; ++k) {
        o.push_back(random_bf16_bits(rows * kD, 70 + k + 3 * uint64_t(t)));
        std::vector<float> l = random_floats(rows, 80 + k + 3 * uint64_t(t), 4.0f);
        for (size_t r = k; r < rows; r += 5) l[r] = -kInf;  // some -inf rows, on either side
        lse.push_back(l);
      }
      std::vector<float> acc(rows * kD), lse_acc(rows);
      for (int k = 0; k < 2; ++k)
        ref::lse_merge(o[k].data(), lse[k].data(), acc.data(), lse_acc.data(), t, heads, k == 0, math);
      std::vector<float> whole = acc, whole_lse = lse_acc;
      ref::lse_merge(o[2].data(), lse[2].data(), whole.data(), whole_lse.data(), t, heads, false, math);
      const int64_t half = t / 2;
      std::vector<float> split = acc, split_lse = lse_acc;
      for (auto [a, b] : {std::pair<int64_t, int64_t>{0, half}, std::pair<int64_t, int64_t>{half, t}}) {
        std::vector<uint16_t> o_rows;
        std::vector<float> l_rows;
        window_rows(o[2], lse[2], t, heads, a, b, &o_rows, &l_rows);
        std::vector<float> before = split, before_lse = split_lse;
        ref::lse_merge(o_rows.data(), l_rows.data(), split.data(), split_lse.data(), MergeRows{b - a, a, t}, heads,
                       false, math);
        for (int64_t q = 0; q < t; ++q) {  // rows outside [a, b) keep their bits
          if (q >= a && q < b) continue;
          for (int h = 0; h < heads; ++h) {
            CHECK(std::memcmp(&split_lse[size_t(h * t + q)], &before_lse[size_t(h * t + q)], 4) == 0);
            CHECK(std::memcmp(&split[size_t((q * heads + h) * kD)], &before[size_t((q * heads + h) * kD)], kD * 4) ==
                  0);
          }
        }
      }
      CHECK(std::memcmp(split.data(), whole.data(), split.size() * 4) == 0);
      CHECK(std::memcmp(split_lse.data(), whole_lse.data(), split_lse.size() * 4) == 0);
    }
  }
  std::vector<uint16_t> o(2 * kD);
  std::vector<float> l(2), acc(4 * kD), la(4);
  CHECK_THROWS_AS(ref::lse_merge(o.data(), l.data(), acc.data(), la.data(), MergeRows{2, 3, 4}, 1, true, math),
                  pb::Error);
  CHECK_THROWS_AS(ref::lse_merge(o.data(), l.data(), acc.data(), la.data(), MergeRows{2, -1, 4}, 1, true, math),
                  pb::Error);
}

TEST_CASE("ref::o_finalize rounds to nearest even, NaN canonical, overflow to inf") {
  const std::vector<float> acc = {1.0f, 1.00390625f, 1.01171875f, -0.0f, 3.4028235e38f,
                                  std::numeric_limits<float>::quiet_NaN(), -kInf, 1e-40f};
  std::vector<uint16_t> o(acc.size());
  ref::o_finalize(acc.data(), o.data(), int64_t(acc.size()));
  const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0x8000, 0x7f80, 0x7fff, 0xff80,
                                      ref::f32_to_bf16_rn(1e-40f)};
  CHECK(o == want);
}

}  // namespace
}  // namespace pb
