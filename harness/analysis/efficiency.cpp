#include "efficiency.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "headline.h"
#include "profile.h"
#include "stats.h"

namespace pb {

namespace {

// The first rep of the spans (measured reps are >= 0; a plan's are -1).
int32_t first_rep(const VariantResult& variant) {
  int32_t first = -1;
  bool measured = false;
  for (const Span& span : variant.spans)
    if (span.rep >= 0 && (!measured || span.rep < first)) {
      first = span.rep;
      measured = true;
    }
  return first;
}

}  // namespace

Efficiency efficiency_of(const RunResult& run, const VariantResult& variant) {
  Efficiency e;
  const int32_t rep = first_rep(variant);
  std::set<int32_t> ranks;
  for (const Span& span : variant.spans) {
    ranks.insert(span.rank);
    if (span.rep == rep && std::isfinite(span.flops)) e.model_flops += span.flops;
  }
  e.gpus = int(ranks.size());
  const HeadlineTtft headline = headline_ttft(run, variant);
  if (!headline.ms.empty()) e.ttft_ms = median(headline.ms);
  const auto profile = run.text.find("gpu_profile");
  e.profile = profile != run.text.end() ? profile->second : profile_of_device(gpu_name(run));
  if (e.gpus == 0 || !(e.ttft_ms > 0) || !(e.model_flops > 0)) return e;
  const auto mfu = [&](double tflops) {
    return tflops > 0 ? e.model_flops / (e.ttft_ms * 1e-3 * e.gpus * tflops * 1e12) : kNoValue;
  };
  const auto precision = run.text.find("precision");
  // Some part block-scaled (Precision::describe() other than "bf16"): its MFU is also given against the fp8 peak.
  const bool fp8 = precision != run.text.end() && precision->second != "bf16";
  if (!e.profile.empty()) {
    const DatasheetPeak peak = datasheet_peak(e.profile);
    e.mfu_bf16_datasheet = mfu(peak.bf16_tflops);
    if (fp8) e.mfu_fp8_datasheet = mfu(peak.fp8_tflops);
  }
  if (run.kind != "plan" && !fp8) {  // the measured ceilings are bf16 GEMMs
    e.mfu_burst = mfu(positive_number(run, "gemm_tflops"));
    e.mfu_sustained = mfu(positive_number(run, "gemm_tflops_sustained"));
  }
  return e;
}

void record_efficiency(const Efficiency& e, const std::string& variant, RunResult& result) {
  result.numbers["model_flops." + variant] = e.model_flops;
  for (const auto& [key, value] : {std::pair{"mfu_bf16_datasheet.", e.mfu_bf16_datasheet},
                                   {"mfu_fp8_datasheet.", e.mfu_fp8_datasheet},
                                   {"mfu_burst.", e.mfu_burst},
                                   {"mfu_sustained.", e.mfu_sustained}})
    if (!std::isnan(value)) result.numbers[key + variant] = value;
}

std::string describe_efficiency(const Efficiency& e) {
  if (std::isnan(e.mfu_bf16_datasheet) && std::isnan(e.mfu_burst))
    return fmt::format("MFU: not known (model {:.2f} PFLOP per superstep, {} GPUs, TTFT {})", e.model_flops / 1e15,
                       e.gpus, std::isnan(e.ttft_ms) ? std::string("not recorded") : fmt::format("{:.1f} ms", e.ttft_ms));
  std::string text = "MFU";
  if (!std::isnan(e.mfu_bf16_datasheet)) {
    text += fmt::format(" {:.1f}% of the datasheet bf16 peak ({}, {} GPU{})", 100 * e.mfu_bf16_datasheet, e.profile,
                        e.gpus, e.gpus == 1 ? "" : "s");
    if (!std::isnan(e.mfu_fp8_datasheet)) text += fmt::format(", {:.1f}% of its fp8 peak", 100 * e.mfu_fp8_datasheet);
  }
  if (!std::isnan(e.mfu_burst))
    text += fmt::format("{} {:.1f}% of the bf16 GEMM burst measured", std::isnan(e.mfu_bf16_datasheet) ? "" : ";",
                        100 * e.mfu_burst);
  if (!std::isnan(e.mfu_sustained)) text += fmt::format(", {:.1f}% of the sustained", 100 * e.mfu_sustained);
  return text + fmt::format("; model {:.2f} PFLOP per superstep", e.model_flops / 1e15);
}

}  // namespace pb
