#include "headline.h"

#include <fmt/format.h>

#include <algorithm>

#include "check.h"
#include "projection.h"
#include "stats.h"
#include "text.h"

namespace pb {

const char* ttft_form_name(TtftForm form) {
  return form == TtftForm::projected ? "projected" : form == TtftForm::planned ? "planned" : "measured";
}

const char* ttft_form_label(TtftForm form) {
  return form == TtftForm::projected ? "projected gang TTFT" : form == TtftForm::planned ? "planned TTFT" : "TTFT";
}

TtftForm ttft_form_of_run(bool serialized, int cp) {
  return serialized && cp > 1 ? TtftForm::projected : TtftForm::measured;
}

namespace {

// The variant's projection over the links as measured; null when it has none
// (VariantResult::projection falls back to another link).
const Projection* measured_gang(const VariantResult& variant) {
  const Projection* gang = variant.projection(kMeasuredLink);
  return gang && gang->link == kMeasuredLink ? gang : nullptr;
}

}  // namespace

TtftForm ttft_form(const RunResult& run, const VariantResult& variant) {
  if (run.kind == "plan") return TtftForm::planned;
  const auto key = run.text.find("ttft_headline");
  if (key != run.text.end()) {
    for (TtftForm form : {TtftForm::measured, TtftForm::projected})
      if (key->second == ttft_form_name(form)) return form;
    throw Error(fmt::format("root text 'ttft_headline' is '{}'; allowed: measured, projected", key->second));
  }
  const auto ranks = run.numbers.find("memory_ranks_per_gpu");
  const bool shared = ranks != run.numbers.end() && ranks->second > 1;
  return shared && measured_gang(variant) ? TtftForm::projected : TtftForm::measured;
}

HeadlineTtft headline_ttft(const RunResult& run, const VariantResult& variant) {
  HeadlineTtft h;
  h.form = ttft_form(run, variant);
  if (h.form == TtftForm::planned) {
    const auto calibrated = run.numbers.find("calibrated_ms." + variant.name);
    if (calibrated != run.numbers.end() && calibrated->second > 0) {
      h.ms = {calibrated->second};
      return h;
    }
    std::map<int32_t, double> rank_us;
    for (const Span& span : variant.spans) rank_us[span.rank] += span.time_us;
    double deepest = 0;
    for (const auto& [rank, us] : rank_us) deepest = std::max(deepest, us);
    if (deepest > 0) h.ms = {deepest / 1e3};
    return h;
  }
  if (h.form == TtftForm::measured) {
    h.ms = variant.ttft_ms;
    return h;
  }
  if (const Projection* gang = measured_gang(variant))
    for (const ProjectedRep& rep : gang->reps) h.ms.push_back(rep.ttft_ms);
  return h;
}

std::string cold_start_reason(bool ran_first, int warmup, const std::vector<double>& headline_ms) {
  if (ran_first && warmup == 0) return "ran first with no warm-up rep (warmup: 0)";
  if (headline_ms.size() < 2) return "";
  const double others = median(std::vector<double>(headline_ms.begin() + 1, headline_ms.end()));
  if (!(headline_ms.front() > others * (1 + kColdStartExcess))) return "";
  return fmt::format("ran its first rep {:.1f}% slower than the median of its other reps ({:.1f} vs {:.1f} ms)",
                     100 * (headline_ms.front() / others - 1), headline_ms.front(), others);
}

std::string format_cold_starts(const std::map<std::string, std::string>& reasons) {
  std::string text;
  for (const auto& [variant, why] : reasons) text += (text.empty() ? "" : "\n") + variant + ": " + why;
  return text;
}

std::map<std::string, std::string> parse_cold_starts(const std::string& text) {
  std::map<std::string, std::string> reasons;
  for (const std::string& line : split(text, '\n')) {
    const size_t colon = line.find(": ");
    PB_CHECK(colon != std::string::npos && colon > 0,
             fmt::format("root text 'cold_start': line '{}' is not '<variant>: <why>'", line));
    reasons[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return reasons;
}

}  // namespace pb
