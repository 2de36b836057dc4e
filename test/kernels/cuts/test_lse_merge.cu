// lse_merge (cut 4) and o_finalize on the device: the cut, the baseline and
// the C++ reference (fed the device's expf/logf) agree bit for bit window after
// window, ±inf / NaN lse included; the merged windows equal one softmax over
// their concatenation (computed in double) within f32 rounding; a window merged
// over row ranges of the accumulator equals the whole window's merge.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test.h"
#include "lse_merge.h"

namespace pb::test {
namespace {

constexpr int kD = kLseMergeHeadDim;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Windows {
  std::vector<std::vector<uint16_t>> o;  // per window [t_q, h, 128] bf16
  std::vector<std::vector<float>> lse;   // per window [h, t_q]
};

// Random windows; rows (q, head) follow a pattern of special lse values so
// every edge case appears whatever the shape:
//   0: finite everywhere        1: window 0 is -inf (the acc starts empty)
//   2: window 1 is -inf         3: -inf in every window (row stays as reset)
//   4: +inf in window 1         5: +inf in window 0
//   6: NaN in window 2          7: -inf in windows 0 and 1, +inf in window 3
Windows make_windows(int64_t t_q, int heads, int count, uint64_t seed) {
  Windows w;
  const size_t rows = size_t(t_q) * heads;
  for (int k = 0; k < count; ++k) {
    w.o.push_back(random_bf16(rows * kD, seed + 10 * k));
    w.lse.push_back(random_f32(rows, seed + 10 * k + 1, 4.0f));
  }
  for (int64_t q = 0; q < t_q; ++q) {
    for (int h = 0; h < heads; ++h) {
      const size_t li = size_t(h) * t_q + q;
      auto set = [&](int k, float v) {
        if (k < count) w.lse[k][li] = v;
      };
      switch ((q * heads + h) % 8) {
        case 1: set(0, -kInf); break;
        case 2: set(1, -kInf); break;
        case 3: for (int k = 0; k < count; ++k) set(k, -kInf); break;
        case 4: set(1, kInf); break;
        case 5: set(0, kInf); break;
        case 6: set(2, kNaN); break;
        case 7: set(0, -kInf); set(1, -kInf); set(3, kInf); break;
        default: break;
      }
    }
  }
  return w;
}

struct State {
  std::vector<float> acc, lse;
};

// Reference states after each window (window 0 resets).
std::vector<State> reference(const Windows& w, int64_t t_q, int heads) {
  return evaluate_with_device_math([&](const ref::Transcendentals& math) {
    std::vector<State> states;
    State s{std::vector<float>(size_t(t_q) * heads * kD), std::vector<float>(size_t(t_q) * heads)};
    for (size_t k = 0; k < w.o.size(); ++k) {
      ref::lse_merge(w.o[k].data(), w.lse[k].data(), s.acc.data(), s.lse.data(), t_q, heads,
                     k == 0, math);
      states.push_back(s);
    }
    return states;
  });
}

void check_state(const State& got_acc_lse, const State& want, const char* who, size_t window) {
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(got_acc_lse.acc, want.acc, &report) == -1,
                who << " o_acc after window " << window << ": " << report);
  CHECK_MESSAGE(first_bit_mismatch(got_acc_lse.lse, want.lse, &report) == -1,
                who << " lse_acc after window " << window << ": " << report);
}

TEST_CASE("lse_merge: cut == baseline == reference, bit for bit, window after window") {
  constexpr int kWindows = 4;
  for (int64_t t_q : {1, 15, 33, 70}) {  // the cut tiles 32 q: partial, full + partial
    for (int heads : {1, 3}) {
      for (uint64_t seed : {101u, 102u}) {
        INFO("t_q " << t_q << " heads " << heads << " seed " << seed);
        const Windows w = make_windows(t_q, heads, kWindows, seed);
        const std::vector<State> want = reference(w, t_q, heads);
        const size_t rows = size_t(t_q) * heads;
        DeviceBuffer<__nv_bfloat16> o_win(rows * kD);
        DeviceBuffer<float> lse_win(rows);
        DeviceBuffer<float> acc[2] = {DeviceBuffer<float>(rows * kD),
                                      DeviceBuffer<float>(rows * kD)};
        DeviceBuffer<float> lse[2] = {DeviceBuffer<float>(rows), DeviceBuffer<float>(rows)};
        const Variant variants[2] = {Variant::baseline, Variant::cut};
        for (int v = 0; v < 2; ++v) {  // the reset must overwrite everything
          acc[v].poison();
          lse[v].poison();
        }
        for (size_t k = 0; k < kWindows; ++k) {
          o_win.upload(w.o[k]);
          lse_win.upload(w.lse[k]);
          for (int v = 0; v < 2; ++v) {
            lse_merge(variants[v], o_win.get(), lse_win.get(), acc[v].get(), lse[v].get(), t_q,
                      heads, k == 0, nullptr);
          }
          PB_CUDA(cudaDeviceSynchronize());
          for (int v = 0; v < 2; ++v) {
            check_state({acc[v].download(), lse[v].download()}, want[k],
                        variant_name(variants[v]), k);
          }
        }
        // Rows with -inf in every window keep the reset's values exactly.
        const std::vector<float> final_acc = acc[1].download(), final_lse = lse[1].download();
        for (size_t r = 3; r < rows; r += 8) {
          const size_t q = r / heads, h = r % heads;
          CHECK(final_lse[h * t_q + q] == -kInf);
          for (int i = 0; i < kD; ++i) {
            const float o0 = ref::bf16_to_f32(w.o[0][r * kD + i]);
            CHECK(std::memcmp(&final_acc[r * kD + i], &o0, 4) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("lse_merge: reset false onto an existing accumulator; -inf on both sides untouched") {
  const int64_t t_q = 33;
  const int heads = 3;
  const size_t rows = size_t(t_q) * heads;
  const std::vector<uint16_t> o = random_bf16(rows * kD, 7);
  std::vector<float> lw = random_f32(rows, 8, 4.0f);
  const std::vector<float> acc0 = random_f32(rows * kD, 9);
  std::vector<float> la0 = random_f32(rows, 10, 4.0f);
  // lse index li = head * t_q + q of row q * heads + head. Both sides -inf on
  // every fourth li, one side -inf on some others.
  for (size_t li = 0; li < rows; li += 4) {
    la0[li] = -kInf;
    lw[li] = -kInf;
    if (li + 1 < rows) la0[li + 1] = -kInf;
    if (li + 2 < rows) lw[li + 2] = -kInf;
  }
  const State want = evaluate_with_device_math([&](const ref::Transcendentals& math) {
    State s{acc0, la0};
    ref::lse_merge(o.data(), lw.data(), s.acc.data(), s.lse.data(), t_q, heads, false, math);
    return s;
  });
  for (Variant v : {Variant::baseline, Variant::cut}) {
    DeviceBuffer<__nv_bfloat16> o_win(rows * kD);
    DeviceBuffer<float> lse_win(rows), acc(rows * kD), lse(rows);
    o_win.upload(o);
    lse_win.upload(lw);
    acc.upload(acc0);
    lse.upload(la0);
    lse_merge(v, o_win.get(), lse_win.get(), acc.get(), lse.get(), t_q, heads, false, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const State got{acc.download(), lse.download()};
    check_state(got, want, variant_name(v), 0);
    for (size_t li = 0; li < rows; li += 4) {  // untouched: the uploaded bits
      const size_t row = (li % t_q) * heads + li / t_q;
      CHECK(std::memcmp(&got.lse[li], &la0[li], 4) == 0);
      CHECK(std::memcmp(&got.acc[row * kD], &acc0[row * kD], kD * 4) == 0);
    }
  }
}

// Merging windows one by one equals one softmax-weighted combination over
// their concatenation: o = sum_k exp(lse_k - L) o_k, L = log sum_k exp(lse_k),
// in double. Finite lse in [-6, 6] (some windows -inf, never all), so the
// bound is f32 rounding: |acc - o| <= 1e-5 * sum_k w_k |o_k|.
TEST_CASE("lse_merge: sequential windows == one softmax over the concatenation (double)") {
  const int64_t t_q = 33;
  const int heads = 3;
  const int windows = 5;
  const size_t rows = size_t(t_q) * heads;
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<float> lse_dist(-6.0f, 6.0f);
  Windows w;
  for (int k = 0; k < windows; ++k) {
    w.o.push_back(random_bf16(rows * kD, 40 + k));
    std::vector<float> l(rows);
    for (size_t r = 0; r < rows; ++r) l[r] = (k > 0 && (r + k) % 5 == 0) ? -kInf : lse_dist(rng);
    w.lse.push_back(l);
  }
  for (Variant v : {Variant::baseline, Variant::cut}) {
    INFO(variant_name(v));
    DeviceBuffer<__nv_bfloat16> o_win(rows * kD);
    DeviceBuffer<float> lse_win(rows), acc(rows * kD), lse(rows);
    for (int k = 0; k < windows; ++k) {
      o_win.upload(w.o[k]);
      lse_win.upload(w.lse[k]);
      lse_merge(v, o_win.get(), lse_win.get(), acc.get(), lse.get(), t_q, heads, k == 0, nullptr);
    }
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got_acc = acc.download(), got_lse = lse.download();
    int64_t bad = 0;
    for (int64_t q = 0; q < t_q; ++q) {
      for (int h = 0; h < heads; ++h) {
        const size_t li = size_t(h) * t_q + q, row = size_t(q) * heads + h;
        double m = -INFINITY;
        for (int k = 0; k < windows; ++k) m = std::fmax(m, double(w.lse[k][li]));
        double sum = 0.0;
        for (int k = 0; k < windows; ++k) sum += std::exp(double(w.lse[k][li]) - m);
        const double L = m + std::log(sum);
        if (std::fabs(got_lse[li] - L) > 1e-5 * std::fmax(1.0, std::fabs(L))) ++bad;
        for (int i = 0; i < kD; ++i) {
          double o = 0.0, scale = 0.0;
          for (int k = 0; k < windows; ++k) {
            const double wk = std::exp(double(w.lse[k][li]) - L);
            const double ok = ref::bf16_to_f32(w.o[k][row * kD + i]);
            o += wk * ok;
            scale += wk * std::fabs(ok);
          }
          if (std::fabs(got_acc[row * kD + i] - o) > 1e-5 * scale + 1e-30) ++bad;
        }
      }
    }
    CHECK(bad == 0);
  }
}

// Rows [a, b) of window k: o [b - a, h, 128] and lse [h, b - a].
void window_rows(const Windows& w, size_t k, int64_t t_q, int heads, int64_t a, int64_t b,
                 std::vector<uint16_t>* o, std::vector<float>* lse) {
  o->assign(w.o[k].begin() + a * heads * kD, w.o[k].begin() + b * heads * kD);
  lse->clear();
  for (int h = 0; h < heads; ++h)
    for (int64_t q = a; q < b; ++q) lse->push_back(w.lse[k][size_t(h * t_q + q)]);
}

// schedule.h's balance merges a window in two row ranges, each from its own
// compact (o, lse): rows [0, t/2) and [t/2, t) of the accumulator.
TEST_CASE("lse_merge over row ranges: cut == baseline == reference, and the halves == the whole window, bit for bit") {
  for (int64_t t : {1, 2, 15, 33, 70, 97}) {  // halves below, at and across the cut's 32-row tiles
    for (int heads : {1, 3}) {
      INFO("t " << t << " heads " << heads);
      const Windows w = make_windows(t, heads, 3, 300 + uint64_t(t));
      const int64_t half = t / 2;
      const std::pair<int64_t, int64_t> ranges[2] = {{0, half}, {half, t}};
      const State want = evaluate_with_device_math([&](const ref::Transcendentals& math) {
        State s{std::vector<float>(size_t(t) * heads * kD), std::vector<float>(size_t(t) * heads)};
        for (size_t k = 0; k < 2; ++k)
          ref::lse_merge(w.o[k].data(), w.lse[k].data(), s.acc.data(), s.lse.data(), t, heads, k == 0, math);
        State whole = s;
        ref::lse_merge(w.o[2].data(), w.lse[2].data(), whole.acc.data(), whole.lse.data(), t, heads, false, math);
        for (auto [a, b] : ranges) {
          std::vector<uint16_t> o;
          std::vector<float> l;
          window_rows(w, 2, t, heads, a, b, &o, &l);
          ref::lse_merge(o.data(), l.data(), s.acc.data(), s.lse.data(), MergeRows{b - a, a, t}, heads, false, math);
        }
        check_state(s, whole, "reference halves vs whole", 2);
        return s;
      });
      for (Variant v : {Variant::baseline, Variant::cut}) {
        const size_t rows = size_t(t) * heads;
        DeviceBuffer<__nv_bfloat16> o_win(rows * kD);
        DeviceBuffer<float> lse_win(rows), acc(rows * kD), lse(rows);
        for (size_t k = 0; k < 2; ++k) {
          o_win.upload(w.o[k]);
          lse_win.upload(w.lse[k]);
          lse_merge(v, o_win.get(), lse_win.get(), acc.get(), lse.get(), t, heads, k == 0, nullptr);
        }
        for (auto [a, b] : ranges) {
          if (b == a) continue;
          std::vector<uint16_t> o;
          std::vector<float> l;
          window_rows(w, 2, t, heads, a, b, &o, &l);
          DeviceBuffer<__nv_bfloat16> o_part(o.size());
          DeviceBuffer<float> l_part(l.size());
          o_part.upload(o);
          l_part.upload(l);
          lse_merge(v, o_part.get(), l_part.get(), acc.get(), lse.get(), MergeRows{b - a, a, t}, heads, false,
                    nullptr);
          PB_CUDA(cudaDeviceSynchronize());
        }
        check_state({acc.download(), lse.download()}, want, variant_name(v), 2);
      }
    }
  }
}

TEST_CASE("lse_merge over a row range touches no row outside it (reset and merge, the tail included)") {
  const int64_t acc_rows = 70;
  const int heads = 3;
  for (const std::pair<int64_t, int64_t>& range : {std::pair<int64_t, int64_t>{0, 35}, {35, 35}, {5, 33}, {69, 1}}) {
    const int64_t row0 = range.first, n = range.second;
    INFO("row0 " << row0 << " n " << n);
    const Windows w = make_windows(n, heads, 2, 500 + uint64_t(row0));
    for (Variant v : {Variant::baseline, Variant::cut}) {
      DeviceBuffer<__nv_bfloat16> o_win(size_t(n) * heads * kD);
      DeviceBuffer<float> lse_win(size_t(n) * heads), acc(size_t(acc_rows) * heads * kD), lse(size_t(acc_rows) * heads);
      acc.poison();
      lse.poison();
      const std::vector<float> acc0 = acc.download(), lse0 = lse.download();
      for (size_t k = 0; k < 2; ++k) {
        o_win.upload(w.o[k]);
        lse_win.upload(w.lse[k]);
        lse_merge(v, o_win.get(), lse_win.get(), acc.get(), lse.get(), MergeRows{n, row0, acc_rows}, heads, k == 0,
                  nullptr);
      }
      PB_CUDA(cudaDeviceSynchronize());
      const std::vector<float> got_acc = acc.download(), got_lse = lse.download();
      // Inside: the whole-window merge of the same two windows on a compact accumulator.
      const State want = reference(w, n, heads)[1];
      int64_t outside_changed = 0, inside_wrong = 0;
      for (int64_t q = 0; q < acc_rows; ++q)
        for (int h = 0; h < heads; ++h) {
          const size_t li = size_t(h * acc_rows + q), row = size_t(q * heads + h);
          const bool inside = q >= row0 && q < row0 + n;
          const float* want_acc = inside ? &want.acc[size_t(((q - row0) * heads + h) * kD)] : &acc0[row * kD];
          const float* want_lse = inside ? &want.lse[size_t(h * n + q - row0)] : &lse0[li];
          const bool same = std::memcmp(&got_acc[row * kD], want_acc, kD * 4) == 0 &&
                            std::memcmp(&got_lse[li], want_lse, 4) == 0;
          if (!same) ++(inside ? inside_wrong : outside_changed);
        }
      CHECK_MESSAGE(inside_wrong == 0, variant_name(v) << ": rows of the range differ from the whole-window merge");
      CHECK_MESSAGE(outside_changed == 0, variant_name(v) << ": rows outside the range changed");
    }
  }
  DeviceBuffer<__nv_bfloat16> o_win(2 * kD);
  DeviceBuffer<float> lse_win(2), acc(4 * kD), lse(4);
  CHECK_THROWS_AS(lse_merge(Variant::cut, o_win.get(), lse_win.get(), acc.get(), lse.get(), MergeRows{2, 3, 4}, 1,
                            true, nullptr),
                  pb::Error);
  CHECK_THROWS_AS(lse_merge(Variant::baseline, o_win.get(), lse_win.get(), acc.get(), lse.get(), MergeRows{2, -1, 4},
                            1, true, nullptr),
                  pb::Error);
}

TEST_CASE("o_finalize == reference, bit for bit (vector, tail and unaligned paths)") {
  for (int64_t n : {int64_t(33) * 3 * kD, int64_t(1001), int64_t(7)}) {
    for (int64_t offset : {0, 1}) {  // offset 1 misaligns both pointers: scalar path
      INFO("n " << n << " offset " << offset);
      std::vector<float> acc = random_f32(size_t(n), 55 + n);
      const float specials[] = {kNaN, kInf, -kInf, -0.0f, 3.4028235e38f, 1.00390625f, 1.01171875f};
      for (size_t i = 0; i < acc.size(); i += 13) acc[i] = specials[(i / 13) % 7];
      std::vector<uint16_t> want(static_cast<size_t>(n));
      ref::o_finalize(acc.data(), want.data(), n);
      DeviceBuffer<float> d_acc(size_t(n + offset));
      DeviceBuffer<__nv_bfloat16> d_o(size_t(n + offset));
      PB_CUDA(cudaMemcpy(d_acc.get() + offset, acc.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
      d_o.poison();
      o_finalize(d_acc.get() + offset, d_o.get() + offset, n, nullptr);
      PB_CUDA(cudaDeviceSynchronize());
      std::vector<uint16_t> got = d_o.download<uint16_t>();
      got.erase(got.begin(), got.begin() + offset);
      std::string report;
      CHECK_MESSAGE(first_bit_mismatch(got, want, &report) == -1, report);
    }
  }
}

TEST_CASE("lse_merge: contract checks") {
  DeviceBuffer<__nv_bfloat16> o_win(2 * kD + 8);
  DeviceBuffer<float> lse_win(2), acc(2 * kD + 4), lse(2);
  // The cut needs 16-byte aligned o_win and o_acc.
  CHECK_THROWS_AS(lse_merge_cut(o_win.get() + 1, lse_win.get(), acc.get(), lse.get(), 2, 1, true,
                                nullptr),
                  pb::Error);
  CHECK_THROWS_AS(lse_merge_cut(o_win.get(), lse_win.get(), acc.get() + 1, lse.get(), 2, 1, true,
                                nullptr),
                  pb::Error);
  CHECK_THROWS_AS(lse_merge_baseline(nullptr, lse_win.get(), acc.get(), lse.get(), 2, 1, true,
                                     nullptr),
                  pb::Error);
  // Empty shapes launch nothing.
  CHECK_NOTHROW(lse_merge_cut(nullptr, nullptr, nullptr, nullptr, 0, 96, false, nullptr));
  CHECK_NOTHROW(o_finalize(nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace pb::test
