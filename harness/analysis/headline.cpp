#include "headline.h"

#include <fmt/format.h>

#include "check.h"
#include "projection.h"

namespace pb {

const char* ttft_form_name(TtftForm form) { return form == TtftForm::projected ? "projected" : "measured"; }

const char* ttft_form_label(TtftForm form) { return form == TtftForm::projected ? "projected gang TTFT" : "TTFT"; }

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
  if (h.form == TtftForm::measured) {
    h.ms = variant.ttft_ms;
    return h;
  }
  if (const Projection* gang = measured_gang(variant))
    for (const ProjectedRep& rep : gang->reps) h.ms.push_back(rep.ttft_ms);
  return h;
}

}  // namespace pb
