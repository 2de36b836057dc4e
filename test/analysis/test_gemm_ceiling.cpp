// The sustained GEMM ceiling's arithmetic (harness/analysis/gemm_ceiling.h) on
// constructed windows: which GEMMs count, the median, the window's length.
#include <doctest/doctest.h>

#include <vector>

#include "check.h"
#include "gemm_ceiling.h"

using namespace pb;

namespace {

// Back-to-back GEMMs of the given times, ms.
std::vector<WindowGemm> window(const std::vector<double>& times_ms) {
  std::vector<WindowGemm> w;
  double end = 0;
  for (double ms : times_ms) {
    end += ms;
    w.push_back({end, ms});
  }
  return w;
}

constexpr double kFlops = 2.0 * 8192.0 * 8192.0 * 8192.0;

}  // namespace

TEST_CASE("the burst at the window's start is left out: the median of the settled half") {
  // 4 fast GEMMs (a cool card), then 6 slower ones at the cap: the window is 4*1 + 6*2 = 16 ms.
  const std::vector<WindowGemm> w = window({1, 1, 1, 1, 2, 2, 2, 2, 2, 2});
  const SustainedGemm g = sustained_gemm(w, kFlops);
  CHECK(g.window_s == doctest::Approx(0.016));
  CHECK(g.settled_s == doctest::Approx(0.008));
  CHECK(g.gemms == 10);
  CHECK(g.counted == 4);  // those ending after 8 ms: at 10, 12, 14, 16
  CHECK(g.tflops == doctest::Approx(kFlops / 2e9));
  // Counting the whole window gives the median of all ten: the slower rate still, but from more GEMMs.
  const SustainedGemm all = sustained_gemm(w, kFlops, 0.0);
  CHECK(all.counted == 10);
  CHECK(all.settled_s == doctest::Approx(all.window_s));
}

TEST_CASE("the median, not the mean: one slow GEMM does not move it") {
  const SustainedGemm g = sustained_gemm(window({1.6, 1.6, 1.6, 1.6, 1.6, 9.0, 1.6}), kFlops, 0.0);
  CHECK(g.tflops == doctest::Approx(kFlops / 1.6e9));
}

TEST_CASE("a one-GEMM window counts that GEMM") {
  const SustainedGemm g = sustained_gemm(window({1.5}), kFlops);
  CHECK(g.counted == 1);
  CHECK(g.tflops == doctest::Approx(kFlops / 1.5e9));
}

TEST_CASE("an empty window, a GEMM of no time, a bad settle fraction are errors") {
  CHECK_THROWS_WITH_AS(sustained_gemm({}, kFlops), doctest::Contains("holds no GEMM"), Error);
  CHECK_THROWS_WITH_AS(sustained_gemm({{1.0, 0.0}}, kFlops), doctest::Contains("took no time"), Error);
  CHECK_THROWS_WITH_AS(sustained_gemm(window({1}), kFlops, 1.0), doctest::Contains("outside [0, 1)"), Error);
}

TEST_CASE("the description names the shape, the window and what the median counts") {
  const SustainedGemm g = sustained_gemm(window({1, 1, 1, 1}), kFlops);
  CHECK(describe_sustained(g, 8192) ==
        "cuBLAS bf16 GEMM 8192^3 back to back for 0.0 s, median of the last 0.0 s (2 of 4 GEMMs)");
}
