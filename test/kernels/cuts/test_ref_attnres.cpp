// The plain C++ reference of AttnRes on the host: the reduction order written
// out a second way (slot by slot, recursive tree) agrees bit for bit; scores
// and outputs agree with a double-precision formula within tolerance for
// nb = 1 .. 8; the softmax weights sum to 1; edge cases (zero candidates, eps).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "attnres.h"
#include "ref_math.h"

namespace pb {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kSlots = 256;

// bf16 bit patterns: N(0, scale), with -0, +0 and large magnitudes sprinkled in.
std::vector<uint16_t> random_bits(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<uint16_t> v(n);
  for (auto& h : v) {
    float x = normal(rng);
    switch (pick(rng)) {
      case 0: x = -0.0f; break;
      case 1: x = 0.0f; break;
      case 2: x *= 1048576.0f; break;
      case 3: x = -std::fabs(x) * 4096.0f; break;
      default: break;
    }
    h = ref::f32_to_bf16_rn(x);
  }
  return v;
}

// Score weights N(0, 1.5 / sqrt(hidden)): scores of a unit-RMS row spread ~1.5.
std::vector<float> random_sw(int64_t hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f / std::sqrt(float(hidden)));
  std::vector<float> w(static_cast<size_t>(hidden));
  for (auto& x : w) x = normal(rng);
  return w;
}

struct Inputs {
  AttnResShape shape;
  std::vector<uint16_t> snap, partial;
  std::vector<float> sw;
};

// Each snapshot block and the partial at its own scale (a mixture of scales).
Inputs make_inputs(int64_t rows, int64_t hidden, int nb, uint64_t seed) {
  static const float kScales[] = {1.0f, 0.001f, 30.0f, 4.0f, 0.05f, 1000.0f, 0.5f, 8.0f, 2.0f};
  Inputs in;
  in.shape = {rows, hidden, nb, 8};
  in.snap.resize(size_t(rows * 8 * hidden));
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < 8; ++b) {
      const auto block = random_bits(size_t(hidden), seed * 1000 + r * 8 + b, kScales[(b + seed) % 9]);
      std::memcpy(&in.snap[size_t((r * 8 + b) * hidden)], block.data(), block.size() * 2);
    }
  in.partial = random_bits(size_t(rows * hidden), seed * 1000 + 999, kScales[(8 + seed) % 9]);
  in.sw = random_sw(hidden, seed + 7);
  return in;
}

struct Outputs {
  std::vector<float> scores;
  std::vector<uint16_t> out;
};

Outputs run_ref(const Inputs& in, float eps, const ref::Transcendentals& m) {
  Outputs o;
  o.scores.assign(size_t(in.shape.rows * (in.shape.nb + 1)), NAN);
  o.out.assign(size_t(in.shape.rows * in.shape.hidden), 0xffff);
  ref::attnres(in.snap.data(), in.partial.data(), in.sw.data(), o.scores.data(), o.out.data(), in.shape,
               eps, m);
  return o;
}

const uint16_t* cand(const Inputs& in, int64_t row, int c) {
  const AttnResShape& s = in.shape;
  return c < s.nb ? &in.snap[size_t((row * s.snap_blocks + c) * s.hidden)] : &in.partial[size_t(row * s.hidden)];
}

// The tree as a recursion over halves: the same association as tree256.
float recursive_tree(const float* v, int n) {
  if (n == 1) return v[0];
  return recursive_tree(v, n / 2) + recursive_tree(v + n / 2, n / 2);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("ref::attnres_tree_sum: the balanced pairwise tree over 256 slots") {
  std::vector<float> v(kSlots, 1.0f);
  CHECK(ref::attnres_tree_sum(v.data()) == 256.0f);
  // Order matters here: a left-to-right sum gives 1, the tree (1e8 + 1) + (-1e8 + 1) gives 0.
  std::fill(v.begin(), v.end(), 0.0f);
  v[0] = 1e8f; v[1] = 1.0f; v[2] = -1e8f; v[3] = 1.0f;
  CHECK(ref::attnres_tree_sum(v.data()) == 0.0f);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 20; ++trial) {
    for (auto& x : v) x = normal(rng) * std::exp2(float(int(rng() % 40) - 20));
    CHECK(bits(ref::attnres_tree_sum(v.data())) == bits(recursive_tree(v.data(), kSlots)));
  }
}

TEST_CASE("ref::attnres_softmax: non-negative weights that sum to 1") {
  ref::HostMath m;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int n = 1; n <= 9; ++n) {
    for (int trial = 0; trial < 50; ++trial) {
      float s[9], p[9];
      for (int c = 0; c < n; ++c) s[c] = normal(rng);
      ref::attnres_softmax(s, n, p, m);
      double sum = 0;
      int argmax = 0;
      for (int c = 0; c < n; ++c) {
        CHECK(p[c] >= 0.0f);
        CHECK(p[c] <= 1.0f);
        sum += p[c];
        if (s[c] > s[argmax]) argmax = c;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
      CHECK(p[argmax] >= 1.0f / float(n));
    }
    float equal[9], p[9];
    for (int c = 0; c < n; ++c) equal[c] = -2.5f;
    ref::attnres_softmax(equal, n, p, m);
    for (int c = 0; c < n; ++c) CHECK(p[c] == 1.0f / float(n));
  }
}

TEST_CASE("ref::attnres: the documented reduction order, spelled slot by slot") {
  ref::HostMath m;
  for (int64_t hidden : {int64_t(8), int64_t(1024), int64_t(2056), int64_t(7168)}) {
    const Inputs in = make_inputs(2, hidden, 3, 11);
    const Outputs o = run_ref(in, kEps, m);
    const int64_t chunks = hidden / 8;
    for (int64_t row = 0; row < 2; ++row) {
      for (int c = 0; c < 4; ++c) {
        const uint16_t* x = cand(in, row, c);
        float ss[kSlots], dot[kSlots];
        for (int s = 0; s < kSlots; ++s) {
          ss[s] = 0.0f;
          dot[s] = 0.0f;
          for (int64_t j = s; j < chunks; j += kSlots)
            for (int64_t i = 8 * j; i < 8 * j + 8; ++i) {
              const float xf = ref::bf16_to_f32(x[i]);
              ss[s] = std::fma(xf, xf, ss[s]);
              dot[s] = std::fma(xf, in.sw[size_t(i)], dot[s]);
            }
        }
        const float want = recursive_tree(dot, kSlots) *
                           m.rsqrt(recursive_tree(ss, kSlots) / float(hidden) + kEps);
        INFO("hidden ", hidden, " row ", row, " candidate ", c);
        CHECK(bits(o.scores[size_t(row * 4 + c)]) == bits(want));
      }
    }
  }
}

TEST_CASE("ref::attnres: scores and output against a double-precision formula, nb = 1 .. 8") {
  ref::HostMath m;
  for (int64_t hidden : {int64_t(1024), int64_t(7168)}) {
    for (int nb = 1; nb <= 8; ++nb) {
      const int64_t rows = 3;
      const Inputs in = make_inputs(rows, hidden, nb, uint64_t(nb));
      const Outputs o = run_ref(in, kEps, m);
      const int cands = nb + 1;
      int spread_rows = 0;
      for (int64_t row = 0; row < rows; ++row) {
        INFO("hidden ", hidden, " nb ", nb, " row ", row);
        double s[9], tol[9], p[9];
        for (int c = 0; c < cands; ++c) {
          const uint16_t* x = cand(in, row, c);
          double ss = 0, dot = 0, dot_abs = 0;
          for (int64_t i = 0; i < hidden; ++i) {
            const double xd = ref::bf16_to_f32(x[i]);
            ss += xd * xd;
            dot += xd * in.sw[size_t(i)];
            dot_abs += std::fabs(xd * in.sw[size_t(i)]);
          }
          const double r = 1.0 / std::sqrt(ss / double(hidden) + double(kEps));
          s[c] = dot * r;
          // f32 sums of at most 32 + 8 rounding steps, the mean, rsqrt and the product
          tol[c] = 1e-5 * dot_abs * r + 1e-6 * std::fabs(s[c]) + 1e-30;
          CHECK(std::fabs(double(o.scores[size_t(row * cands + c)]) - s[c]) <= tol[c]);
        }
        double mx = s[0], sum = 0, tol_s = 0;
        for (int c = 0; c < cands; ++c) mx = std::max(mx, s[c]);
        for (int c = 0; c < cands; ++c) sum += (p[c] = std::exp(s[c] - mx));
        for (int c = 0; c < cands; ++c) {
          p[c] /= sum;
          tol_s = std::max(tol_s, tol[c]);
        }
        double pmax = 0;
        for (int c = 0; c < cands; ++c) pmax = std::max(pmax, p[c]);
        spread_rows += pmax < 0.95;

        float ps[9], ss_scores[9];
        for (int c = 0; c < cands; ++c) ss_scores[c] = o.scores[size_t(row * cands + c)];
        ref::attnres_softmax(ss_scores, cands, ps, m);
        double psum = 0;
        for (int c = 0; c < cands; ++c) psum += ps[c];
        CHECK(psum == doctest::Approx(1.0).epsilon(2e-6));

        int bad = 0;
        for (int64_t i = 0; i < hidden; ++i) {
          double want = 0, mag = 0;
          for (int c = 0; c < cands; ++c) {
            const double xd = ref::bf16_to_f32(cand(in, row, c)[i]);
            want += p[c] * xd;
            mag += p[c] * std::fabs(xd);
          }
          // bf16 rounding of the result, plus the weights' error (at most 2 p_c
          // times the largest score error) and the f32 FMA chain's
          const double tol = std::fabs(want) * std::exp2(-8.0) + (2.0 * tol_s + 1e-5) * mag + 1e-30;
          const double got = ref::bf16_to_f32(o.out[size_t(row * hidden + i)]);
          bad += !(std::fabs(got - want) <= tol);
        }
        CHECK(bad == 0);
      }
      if (nb >= 2) CHECK(spread_rows >= 1);  // the softmax is not one-hot everywhere
    }
  }
}

TEST_CASE("ref::attnres: zero candidates score 0 (eps keeps the norm finite)") {
  ref::HostMath m;
  Inputs in = make_inputs(2, 1024, 2, 4);
  std::fill(in.partial.begin(), in.partial.end(), uint16_t(0));                   // P = 0
  std::fill(in.snap.begin(), in.snap.begin() + 1024, uint16_t(0x8000));          // row 0, B_0 = -0
  const Outputs o = run_ref(in, kEps, m);
  CHECK(o.scores[0] == 0.0f);
  CHECK(o.scores[2] == 0.0f);
  CHECK(o.scores[5] == 0.0f);
  for (float s : o.scores) CHECK(std::isfinite(s));
  // Every candidate zero: p = 1/3 each and the output is +0.
  std::fill(in.snap.begin(), in.snap.end(), uint16_t(0));
  const Outputs z = run_ref(in, kEps, m);
  for (float s : z.scores) CHECK(s == 0.0f);
  for (uint16_t h : z.out) CHECK(h == 0);
}

TEST_CASE("ref::attnres: with eps = 0, power-of-two scaling of a candidate leaves its score's bits") {
  ref::HostMath m;
  Inputs in = make_inputs(1, 1024, 1, 6);
  // keep B_0 to moderate values so that x * 4 stays exact in bf16 and finite
  for (auto& h : in.snap) h = ref::f32_to_bf16_rn(std::fmod(ref::bf16_to_f32(h), 64.0f));
  const Outputs a = run_ref(in, 0.0f, m);
  for (int64_t i = 0; i < 1024; ++i) in.snap[size_t(i)] = ref::f32_to_bf16_rn(4.0f * ref::bf16_to_f32(in.snap[size_t(i)]));
  const Outputs b = run_ref(in, 0.0f, m);
  CHECK(bits(a.scores[0]) == bits(b.scores[0]));
  CHECK(bits(a.scores[1]) == bits(b.scores[1]));
}

TEST_CASE("ref::attnres: a snapshot stride other than 8 and a row count of 0") {
  ref::HostMath m;
  const Inputs in = make_inputs(3, 64, 3, 9);  // stride 8
  const Outputs o8 = run_ref(in, kEps, m);
  // the same candidates re-laid with stride 3
  Inputs tight = in;
  tight.shape.snap_blocks = 3;
  tight.snap.assign(size_t(3 * 3 * 64), 0);
  for (int64_t r = 0; r < 3; ++r)
    for (int b = 0; b < 3; ++b)
      std::memcpy(&tight.snap[size_t((r * 3 + b) * 64)], &in.snap[size_t((r * 8 + b) * 64)], 64 * 2);
  const Outputs o3 = run_ref(tight, kEps, m);
  CHECK(std::memcmp(o8.scores.data(), o3.scores.data(), o8.scores.size() * 4) == 0);
  CHECK(o8.out == o3.out);
  AttnResShape empty{0, 64, 3, 8};
  ref::attnres(nullptr, nullptr, nullptr, nullptr, nullptr, empty, kEps, m);
}

}  // namespace pb
