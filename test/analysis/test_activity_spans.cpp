// Span times from constructed CUPTI records (harness/analysis/activity_spans.h):
// correlation through the API calls, several kernels per span, spans without
// GPU work, records of other spans and of no span.
#include <doctest/doctest.h>

#include <vector>

#include "activity_spans.h"

using namespace pb;

TEST_CASE("a span runs from its first kernel's start to its last kernel's end") {
  // Spans 10 and 11: span 10 made calls 1 and 2 (two kernels), span 11 made call 3.
  const std::vector<ApiCorrelation> calls = {{10, 1}, {10, 2}, {11, 3}};
  const std::vector<GpuActivity> kernels = {
      {1, 1'000'000, 1'500'000}, {2, 1'600'000, 2'000'000}, {3, 2'100'000, 2'600'000}};
  const std::vector<SpanTime> t = span_times(10, 2, calls, kernels);
  REQUIRE(t.size() == 2);
  CHECK(t[0].ms == doctest::Approx(1.0));  // 1.0 .. 2.0 ms, the gap between its kernels included
  CHECK(t[0].start_ms == doctest::Approx(0.0));
  CHECK(t[0].activities == 2);
  CHECK(t[1].ms == doctest::Approx(0.5));
  CHECK(t[1].start_ms == doctest::Approx(1.1));
  CHECK(t[1].activities == 1);
}

TEST_CASE("the records may come in any order; one call may launch several kernels") {
  const std::vector<ApiCorrelation> calls = {{0, 7}, {1, 8}};
  const std::vector<GpuActivity> kernels = {{8, 5'000, 6'000}, {7, 3'000, 3'500}, {7, 1'000, 2'000}};
  const std::vector<SpanTime> t = span_times(0, 2, calls, kernels);
  CHECK(t[0].ms == doctest::Approx(0.0025));
  CHECK(t[0].activities == 2);
  CHECK(t[1].start_ms == doctest::Approx(0.004));
}

TEST_CASE("a span without GPU work: no time, placed at the previous span's end") {
  const std::vector<ApiCorrelation> calls = {{0, 1}, {2, 3}};  // span 1 made no call that reached the GPU
  const std::vector<GpuActivity> kernels = {{1, 0, 2'000'000}, {3, 3'000'000, 4'000'000}};
  const std::vector<SpanTime> t = span_times(0, 3, calls, kernels);
  CHECK(t[1].ms == 0);
  CHECK(t[1].activities == 0);
  CHECK(t[1].start_ms == doctest::Approx(2.0));
  CHECK(t[2].start_ms == doctest::Approx(3.0));
  // A first span without work starts at 0.
  CHECK(span_times(5, 1, {}, {}).at(0).start_ms == 0);
}

TEST_CASE("records of earlier spans and activities no span launched are left out") {
  const std::vector<ApiCorrelation> calls = {{3, 1}, {4, 2}, {5, 3}};
  const std::vector<GpuActivity> kernels = {
      {1, 0, 9'000'000},            // span 3: before this collect's spans
      {2, 10'000'000, 11'000'000},  // span 4
      {9, 10'500'000, 30'000'000},  // no span: e.g. a GEMM ceiling's kernel
      {3, 12'000'000, 12'500'000}};  // span 5
  const std::vector<SpanTime> t = span_times(4, 2, calls, kernels);
  CHECK(t[0].ms == doctest::Approx(1.0));
  CHECK(t[0].start_ms == 0);
  CHECK(t[1].ms == doctest::Approx(0.5));
  CHECK(t[1].start_ms == doctest::Approx(2.0));
}
