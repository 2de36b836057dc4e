// Small statistics over timing samples (TTFT per rep, kernel times per rep).
//
//   quantile(v, q)                 linear interpolation between order statistics
//                                  (R type 7, numpy's default); median = quantile 0.5
//   summarize(v)                   count, min, median, max
//   mann_whitney_greater(a, b)     one-sided U test, H1: b tends to be larger than a
//   smallest_p_value(n_a, n_b)     the least p the exact one-sided test can give
#pragma once

#include <cstddef>
#include <vector>

namespace pb {

// q in [0, 1]; throws on an empty sample.
double quantile(std::vector<double> values, double q);
double median(std::vector<double> values);

struct Summary {
  size_t count = 0;
  double min = 0, median = 0, max = 0;   // 0 when count == 0
};
Summary summarize(const std::vector<double>& values);

// Largest sample sizes for which the U test uses the exact null distribution.
constexpr size_t kExactUTestMaxSize = 30;

struct UTest {
  double u = 0;          // pairs (a_i, b_j) with b_j > a_i, ties counting 1/2
  double p_value = 1;    // P(U >= u) under H0 "a and b come from one distribution"
  bool exact = false;    // exact distribution (no ties, both sizes <= kExactUTestMaxSize);
                         // else the normal approximation with tie and continuity corrections
};

// One-sided Mann-Whitney U test of "b is larger than a". Either sample empty:
// p = 1. All values tied: p = 1.
UTest mann_whitney_greater(const std::vector<double>& a, const std::vector<double>& b);

// 1 / C(n_a + n_b, n_a): reached only when every b exceeds every a. When it is
// not below alpha, no outcome of the test can be significant at alpha.
double smallest_p_value(size_t n_a, size_t n_b);

}  // namespace pb
