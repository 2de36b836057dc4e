// The float64 FMHA reference (ref::fmha) on cases small enough to check by
// hand: the bottom-right causal alignment (tq < tk and tq > tk), the rows that
// see no key, the natural-log LSE, the strides, and the heads kept apart.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "check.h"
#include "fmha.h"
#include "ref_math.h"

namespace pb {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<uint16_t> bf16_bits(const std::vector<float>& f) {
  std::vector<uint16_t> v(f.size());
  for (size_t i = 0; i < f.size(); ++i) v[i] = ref::f32_to_bf16_rn(f[i]);  // all exact in bf16
  return v;
}

// One head, d_qk = d_v = 2, dense [t, 1, 2] layouts.
struct Tiny {
  std::vector<uint16_t> q, k, v;
  std::vector<double> o, lse;
  void run(int64_t tq, int64_t tk, bool causal, float scale) {
    FmhaShape s;
    s.tq = tq;
    s.tk = tk;
    s.heads = 1;
    s.d_qk = 2;
    s.d_v = 2;
    s.causal = causal;
    s.scale = scale;
    o.assign(size_t(tq) * 2, 1234.0);
    lse.assign(size_t(tq), 1234.0);
    ref::fmha(q.data(), 2, 2, k.data(), 2, 2, v.data(), 2, 2, o.data(), lse.data(), s);
  }
};

TEST_CASE("ref::fmha: causal mask is bottom-right aligned (tq < tk), lse is ln sum exp") {
  Tiny t;
  t.q = bf16_bits({1, 0, 0, 1});              // q0 = (1, 0), q1 = (0, 1)
  t.k = bf16_bits({1, 0, 0, 1, 1, 1});        // k0 = (1, 0), k1 = (0, 1), k2 = (1, 1)
  t.v = bf16_bits({1, 0, 0, 1, 2, 2});        // v0 = (1, 0), v1 = (0, 1), v2 = (2, 2)
  const double e = std::exp(1.0);
  // tq = 2, tk = 3: query i sees keys j <= i + 1.
  t.run(2, 3, true, 1.0f);
  // q0 sees k0, k1: scores 1, 0.
  CHECK(t.lse[0] == doctest::Approx(std::log(e + 1)).epsilon(1e-14));
  CHECK(t.o[0] == doctest::Approx(e / (e + 1)).epsilon(1e-14));
  CHECK(t.o[1] == doctest::Approx(1 / (e + 1)).epsilon(1e-14));
  // q1 sees k0, k1, k2: scores 0, 1, 1.
  CHECK(t.lse[1] == doctest::Approx(std::log(1 + 2 * e)).epsilon(1e-14));
  CHECK(t.o[2] == doctest::Approx((1 + 2 * e) / (1 + 2 * e)).epsilon(1e-14));
  CHECK(t.o[3] == doctest::Approx(3 * e / (1 + 2 * e)).epsilon(1e-14));

  // Dense: both queries see all three keys.
  t.run(2, 3, false, 1.0f);
  CHECK(t.lse[0] == doctest::Approx(std::log(2 * e + 1)).epsilon(1e-14));  // scores 1, 0, 1
  CHECK(t.o[0] == doctest::Approx((e + 2 * e) / (2 * e + 1)).epsilon(1e-14));
  CHECK(t.o[1] == doctest::Approx((1 + 2 * e) / (2 * e + 1)).epsilon(1e-14));
  CHECK(t.lse[1] == doctest::Approx(std::log(1 + 2 * e)).epsilon(1e-14));

  // The scale multiplies the scores: scale 2 on q0 causal, scores 2, 0.
  t.run(2, 3, true, 2.0f);
  CHECK(t.lse[0] == doctest::Approx(std::log(e * e + 1)).epsilon(1e-14));
  CHECK(t.o[0] == doctest::Approx(e * e / (e * e + 1)).epsilon(1e-14));
}

TEST_CASE("ref::fmha: causal tq > tk leaves the first rows empty (o = 0, lse = -inf)") {
  Tiny t;
  t.q = bf16_bits({1, 0, 0, 1, 1, 1});  // three queries
  t.k = bf16_bits({0.5f, 0.25f});       // one key
  t.v = bf16_bits({3, -2});
  // tq = 3, tk = 1: query i sees keys j <= i - 2: rows 0 and 1 see nothing.
  t.run(3, 1, true, 1.0f);
  for (int i = 0; i < 2; ++i) {
    CHECK(t.lse[i] == -kInf);
    CHECK(t.o[2 * i] == 0.0);
    CHECK(t.o[2 * i + 1] == 0.0);
  }
  CHECK(t.lse[2] == doctest::Approx(0.75).epsilon(1e-14));  // one key: lse = its score
  CHECK(t.o[4] == 3.0);
  CHECK(t.o[5] == -2.0);
  // tk = 0, dense: every row is empty.
  t.run(3, 0, false, 1.0f);
  for (int i = 0; i < 3; ++i) CHECK(t.lse[i] == -kInf);
  for (double x : t.o) CHECK(x == 0.0);
}

TEST_CASE("ref::fmha: tq == tk causal is the usual lower triangle; heads and strides stay apart") {
  // Two heads, d_qk = 1, d_v = 1; q laid out head-major [2][3][1] (token stride
  // 1, head stride 3), k token-major with a gap [3][2 + 2] (token stride 4,
  // head stride 2), v dense [3][2][1].
  std::vector<float> q = {0, 0, 0, 1, 1, 1};        // head 0: zeros; head 1: ones
  std::vector<float> k = {1, 9, 2, 9,  2, 9, 0, 9,  3, 9, -1, 9};  // 9 = never read
  std::vector<float> v = {1, 4, 2, 5, 3, 6};        // v[j][h]
  const std::vector<uint16_t> qb = bf16_bits(q), kb = bf16_bits(k), vb = bf16_bits(v);
  FmhaShape s;
  s.tq = 3;
  s.tk = 3;
  s.heads = 2;
  s.d_qk = 1;
  s.d_v = 1;
  s.causal = true;
  s.scale = 1.0f;
  std::vector<double> o(6), lse(6);
  ref::fmha(qb.data(), 1, 3, kb.data(), 4, 2, vb.data(), 2, 1, o.data(), lse.data(), s);
  // Head 0: scores 0 everywhere; row i averages v[0..i][0] = 1, 2, 3.
  CHECK(o[0 * 2 + 0] == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(o[1 * 2 + 0] == doctest::Approx(1.5).epsilon(1e-14));
  CHECK(o[2 * 2 + 0] == doctest::Approx(2.0).epsilon(1e-14));
  CHECK(lse[0] == doctest::Approx(0.0));
  CHECK(lse[1] == doctest::Approx(std::log(2.0)).epsilon(1e-14));
  CHECK(lse[2] == doctest::Approx(std::log(3.0)).epsilon(1e-14));
  // Head 1: keys k[j][1] = 2, 0, -1; row 2 sees all three, v = 4, 5, 6.
  const double w0 = std::exp(2.0), w1 = 1.0, w2 = std::exp(-1.0);
  CHECK(o[0 * 2 + 1] == doctest::Approx(4.0).epsilon(1e-14));
  CHECK(lse[3 + 0] == doctest::Approx(2.0).epsilon(1e-14));
  CHECK(o[1 * 2 + 1] == doctest::Approx((4 * w0 + 5 * w1) / (w0 + w1)).epsilon(1e-14));
  CHECK(o[2 * 2 + 1] == doctest::Approx((4 * w0 + 5 * w1 + 6 * w2) / (w0 + w1 + w2)).epsilon(1e-14));
  CHECK(lse[3 + 2] == doctest::Approx(std::log(w0 + w1 + w2)).epsilon(1e-14));
}

}  // namespace
}  // namespace pb

TEST_CASE("the scenario's fmha engine names resolve; auto prefers cuDNN when built") {
  CHECK(pb::fmha_engine_from_name("native") == pb::FmhaEngine::native);
  CHECK(pb::fmha_engine_from_name("auto") ==
        (pb::fmha_cudnn_available() ? pb::FmhaEngine::cudnn : pb::FmhaEngine::native));
  CHECK_THROWS_WITH_AS(pb::fmha_engine_from_name("flash"), doctest::Contains("native, cudnn, auto"), pb::Error);
  if (pb::fmha_cudnn_available()) CHECK(pb::fmha_engine_from_name("cudnn") == pb::FmhaEngine::cudnn);
  else CHECK_THROWS_AS(pb::fmha_engine_from_name("cudnn"), pb::Error);
}
