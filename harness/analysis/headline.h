// The file's headline TTFT: the one number every tool calls "TTFT"
// (docs/results.md, "The headline TTFT").
//   - projected: the gang replayed over the measured links, one per rep
//     (the variant's "measured" projection), for a run whose ranks shared a
//     GPU and took turns: its wall clock is the sum of the ranks;
//   - measured: VariantResult::ttft_ms, for every other run;
//   - planned: a plan file's one value, the calibrated plan's deepest rank
//     (numbers["calibrated_ms.<variant>"]) where it was calibrated, else the
//     roofline's (the largest sum of a rank's spans). Nothing measured it: the
//     gate does not judge it, and no cold start is read from it.
// `run` records the form in text["ttft_headline"]; a run file without it is
// read as projected when numbers["memory_ranks_per_gpu"] > 1 and the variant
// holds a "measured" projection.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "results.h"

namespace pb {

enum class TtftForm { measured, projected, planned };

// "measured" | "projected" | "planned": the text of text["ttft_headline"] (a run records the first two).
const char* ttft_form_name(TtftForm form);
// "TTFT" | "projected gang TTFT" | "planned TTFT": how tables and verdicts name it.
const char* ttft_form_label(TtftForm form);
// What `run` records: projected for a serialized gang of several ranks.
TtftForm ttft_form_of_run(bool serialized, int cp);

// The form of the variant's headline. Throws pb::Error naming the key for a
// ttft_headline text that is neither form.
TtftForm ttft_form(const RunResult& run, const VariantResult& variant);

struct HeadlineTtft {
  TtftForm form = TtftForm::measured;
  std::vector<double> ms;  // one per rep; empty when none was recorded
};
HeadlineTtft headline_ttft(const RunResult& run, const VariantResult& variant);

// ---- cold starts (docs/results.md, "Cold starts") ----
// A variant's samples may hold a cold start (cuDNN building its plans, caches
// warming, while timed) when
//   - it ran first in a run with no warm-up rep (scenario warmup: 0): every
//     variant's rep r runs after the first variant's rep r; or
//   - its first rep's headline TTFT exceeds the median of its other reps by
//     more than kColdStartExcess.
// A saving computed against such a variant includes its cold start. `run`
// records the cold variants in the root text "cold_start", one line
// "<variant>: <why>" each; for a file without it the reader applies the rule.
constexpr double kColdStartExcess = 0.03;
// Why, or "" when neither holds.
std::string cold_start_reason(bool ran_first, int warmup, const std::vector<double>& headline_ms);
// The root text's lines, and back; parse throws pb::Error naming the line that is not "<variant>: <why>".
std::string format_cold_starts(const std::map<std::string, std::string>& reasons);
std::map<std::string, std::string> parse_cold_starts(const std::string& text);

}  // namespace pb
