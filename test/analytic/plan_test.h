// Helpers of the plan's test suites (test_plan, test_plan_cp, test_calibration):
// K3 scenarios, cut sets and counts over a rank's planned launches or spans.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "plan.h"
#include "scenario.h"

namespace pb::plan_test {

// Every cut but overlap: the launch order the cases spell out (overlap has its
// own cases, which turn it on over these). CutSet::all() holds balance too.
inline CutSet all_but_overlap() { return CutSet::all().without(Cut::overlap); }

inline Scenario k3(int cp, int64_t context) {
  return parse_scenario("name: t\nmodel: {preset: k3}\ncp: " + std::to_string(cp) + "\ncontext: " +
                            std::to_string(context) + "\nbucket: 16896\n",
                        "t.yaml");
}

inline int count(const RankPlan& p, const std::string& kernel) {
  int n = 0;
  for (const auto& l : p.launches) n += l.kernel == kernel;
  return n;
}

inline int count_family(const RankPlan& p, const std::string& family) {
  int n = 0;
  for (const auto& l : p.launches) n += l.family == family;
  return n;
}

inline double family_flops(const RankPlan& p, const std::string& family) {
  double f = 0;
  for (const auto& l : p.launches)
    if (l.family == family) f += l.cost.flops;
  return f;
}

inline const Launch& first(const RankPlan& p, const std::string& kernel) {
  for (const auto& l : p.launches)
    if (l.kernel == kernel) return l;
  FAIL("no launch " << kernel);
  static Launch none;
  return none;
}

inline double family_ms(const std::vector<Span>& spans, const std::string& family) {
  double ms = 0;
  for (const auto& s : spans)
    if (s.family == family) ms += s.time_us / 1e3;
  return ms;
}

}  // namespace pb::plan_test
