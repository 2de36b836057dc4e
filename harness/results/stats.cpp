#include "stats.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "check.h"

namespace pb {

double quantile(std::vector<double> values, double q) {
  PB_CHECK(!values.empty(), "quantile of an empty sample");
  PB_CHECK(q >= 0 && q <= 1, fmt::format("quantile {} is outside [0, 1]", q));
  std::sort(values.begin(), values.end());
  const double position = q * double(values.size() - 1);
  const size_t below = size_t(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - double(below);
  return values[below] + fraction * (values[above] - values[below]);
}

double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

Summary summarize(const std::vector<double>& values) {
  Summary summary;
  summary.count = values.size();
  if (values.empty()) return summary;
  const auto [min, max] = std::minmax_element(values.begin(), values.end());
  summary.min = *min;
  summary.max = *max;
  summary.median = median(values);
  return summary;
}

double smallest_p_value(size_t n_a, size_t n_b) {
  double p = 1;  // 1 / C(n_a + n_b, n_a) = prod_i i / (n_b + i)
  for (size_t i = 1; i <= n_a; ++i) p *= double(i) / double(n_b + i);
  return p;
}

namespace {

// The pooled sample in midranks: U of b, and the tie term sum(t^3 - t) over
// groups of t equal values.
struct Ranking {
  double u_b = 0;
  double tie_term = 0;
};

Ranking rank_pooled(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<std::pair<double, bool>> pooled;  // (value, from b)
  for (double value : a) pooled.emplace_back(value, false);
  for (double value : b) pooled.emplace_back(value, true);
  std::sort(pooled.begin(), pooled.end());
  Ranking ranking;
  double rank_sum_b = 0;
  for (size_t start = 0; start < pooled.size();) {
    size_t end = start;
    while (end < pooled.size() && pooled[end].first == pooled[start].first) ++end;
    const double midrank = double(start + 1 + end) / 2;  // ranks start+1 .. end
    for (size_t i = start; i < end; ++i)
      if (pooled[i].second) rank_sum_b += midrank;
    const double tied = double(end - start);
    ranking.tie_term += tied * tied * tied - tied;
    start = end;
  }
  const double n_b = double(b.size());
  ranking.u_b = rank_sum_b - n_b * (n_b + 1) / 2;
  return ranking;
}

// P(U >= u) for U = #{b_j > a_i}, sizes (m, n), no ties. Dynamic programming
// on the largest pooled value: it is a b with probability n / (m + n) and then
// beats all m a's, else it is an a and adds nothing.
double exact_upper_tail(size_t m, size_t n, double u) {
  std::vector<std::vector<double>> previous(n + 1), current(n + 1);  // pmf of U for (i - 1, j), (i, j)
  for (size_t i = 0; i <= m; ++i) {
    for (size_t j = 0; j <= n; ++j) {
      if (i == 0 || j == 0) {
        current[j] = {1.0};
        continue;
      }
      const double b_largest = double(j) / double(i + j);
      const double a_largest = double(i) / double(i + j);
      current[j].assign(i * j + 1, 0.0);
      for (size_t k = 0; k < current[j - 1].size(); ++k) current[j][k + i] += b_largest * current[j - 1][k];
      for (size_t k = 0; k < previous[j].size(); ++k) current[j][k] += a_largest * previous[j][k];
    }
    std::swap(previous, current);
  }
  const std::vector<double>& pmf = previous[n];
  double tail = 0;
  for (size_t k = size_t(std::ceil(u - 1e-9)); k < pmf.size(); ++k) tail += pmf[k];
  return std::min(tail, 1.0);
}

double normal_upper_tail(size_t m, size_t n, const Ranking& ranking) {
  const double pairs = double(m) * double(n);
  const double total = double(m + n);
  const double variance = pairs / 12 * ((total + 1) - ranking.tie_term / (total * (total - 1)));
  if (variance <= 0) return 1;  // every value tied: no evidence either way
  const double z = (ranking.u_b - pairs / 2 - 0.5) / std::sqrt(variance);
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

}  // namespace

UTest mann_whitney_greater(const std::vector<double>& a, const std::vector<double>& b) {
  UTest test;
  if (a.empty() || b.empty()) return test;
  const Ranking ranking = rank_pooled(a, b);
  test.u = ranking.u_b;
  const bool ties = ranking.tie_term > 0;
  test.exact = !ties && a.size() <= kExactUTestMaxSize && b.size() <= kExactUTestMaxSize;
  test.p_value = test.exact ? exact_upper_tail(a.size(), b.size(), test.u)
                            : normal_upper_tail(a.size(), b.size(), ranking);
  return test;
}

}  // namespace pb
