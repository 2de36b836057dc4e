#include "sweep.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "check.h"

namespace pb {

namespace {

// Letters, digits, '.', '_' and '-' of text; any other character becomes '_'.
std::string id_word(const std::string& text) {
  std::string word;
  for (char c : text) word += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_';
  return word;
}

}  // namespace

std::vector<SweepPointSpec> sweep_points(const Scenario& s, int gpus) {
  PB_CHECK(!s.sweep.empty(), fmt::format("{}: the scenario has no sweep (the key sweep: with context, segment, cp "
                                         "or precision lists)",
                                         s.source));
  PB_CHECK(gpus >= 1, fmt::format("--gpus {}: give 1 or more", gpus));
  const std::vector<std::string> precisions =
      s.sweep.precision.empty() ? std::vector<std::string>{""} : s.sweep.precision;
  const std::vector<int> cps = s.sweep.cp.empty() ? std::vector<int>{s.cp} : s.sweep.cp;
  const bool by_segment = !s.sweep.segment.empty();
  const std::vector<int64_t> lengths =
      by_segment ? s.sweep.segment : s.sweep.context.empty() ? std::vector<int64_t>{s.context} : s.sweep.context;
  const double headroom = double(s.bucket) / double(s.segment());
  std::vector<SweepPointSpec> points;
  for (const std::string& precision : precisions)
    for (int cp : cps)
      for (int64_t length : lengths) {
        SweepPointSpec p;
        p.context = by_segment ? length * cp : length;
        p.cp = cp;
        PB_CHECK(p.context % cp == 0, fmt::format("{}: sweep point context {} is not divisible by cp {}", s.source,
                                                  p.context, cp));
        const int64_t segment = p.context / cp;
        const int64_t bucket = (int64_t(std::ceil(double(segment) * headroom - 1e-9)) + 127) / 128 * 128;
        p.precision = precision.empty() ? s.precision.describe() : precision;
        p.sets = {fmt::format("context={}", p.context), fmt::format("cp={}", cp), fmt::format("bucket={}", bucket)};
        if (!precision.empty()) p.sets.push_back("precision=" + precision);
        if (cp > gpus) p.sets.push_back("serialize_ranks=true");
        p.id = fmt::format("ctx{}-cp{}-{}", p.context, cp, id_word(p.precision));
        points.push_back(std::move(p));
      }
  return points;
}

}  // namespace pb
