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

TtftForm ttft_form(const RunResult& run, const VariantResult& variant) {
  const auto key = run.text.find("ttft_headline");
  if (key != run.text.end()) {
    for (TtftForm form : {TtftForm::measured, TtftForm::projected})
      if (key->second == ttft_form_name(form)) return form;
    throw Error(fmt::format("root text 'ttft_headline' is '{}'; allowed: measured, projected", key->second));
  }
  const auto ranks = run.numbers.find("memory_ranks_per_gpu");
  const bool shared = ranks != run.numbers.end() && ranks->second > 1;
  const Projection* gang = variant.projection(kMeasuredLink);
  return shared && gang && gang->link == kMeasuredLink ? TtftForm::projected : TtftForm::measured;
}

HeadlineTtft headline_ttft(const RunResult& run, const VariantResult& variant) {
  HeadlineTtft h;
  h.form = ttft_form(run, variant);
  if (h.form == TtftForm::measured) {
    h.ms = variant.ttft_ms;
    return h;
  }
  const Projection* gang = variant.projection(kMeasuredLink);
  if (gang && gang->link == kMeasuredLink)
    for (const ProjectedRep& rep : gang->reps) h.ms.push_back(rep.ttft_ms);
  return h;
}

}  // namespace pb
