// What compare.cpp (the report) and gate.cpp (the regression gate) share. Not
// an API: compare.h is.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "compare.h"
#include "results.h"
#include "scenario.h"

namespace pb::compare_detail {

// One side of a comparison: a variant of a run read from a file.
struct Side {
  Side(std::string label_, std::string file_, const RunResult* run_, const VariantResult* variant_,
       double ttft_scale_ = 1, std::string scale_note_ = "")
      : label(std::move(label_)), file(std::move(file_)), run(run_), variant(variant_), ttft_scale(ttft_scale_),
        scale_note(std::move(scale_note_)) {}
  std::string label;  // "A", "B (candidate)", ...
  std::string file;
  const RunResult* run;
  const VariantResult* variant;
  // The gate's machine normalization (compare.h): the factor this side's
  // TTFT samples are judged at, and the words the verdict line names it by.
  double ttft_scale;
  std::string scale_note;
};

// The report of one comparison (heading, family and wait tables, TTFT,
// projections, verdict, power state, outputs); returns the TTFT verdict.
RegressionVerdict print_comparison(const Side& a, const Side& b, const CompareOptions& options, std::ostream& out);
// Why the variant's TTFT samples may hold a cold start (headline.h), "" when
// none is seen: the file's root text "cold_start", else the rule over the
// recorded scenario's warmup (a file without one: its samples only).
std::string cold_start_of(const RunResult& run, const std::string& file, const VariantResult& variant);
// A file as compare reads it (links.h read_with_link_bytes); a sweep file,
// which holds points and no variants, is a pb::Error naming its tools.
RunResult read_comparable(const std::string& file);
// The named variant of a file, or a pb::Error naming the file's variants.
const VariantResult& require_variant(const RunResult& run, const std::string& file, const std::string& name);
// The scenario a file recorded, with its overrides; false, with the problem,
// when it has none or it no longer parses.
bool recorded_scenario(const RunResult& run, const std::string& file, Scenario* scenario, std::string* problem);
// The variants two files compare, A's name then B's: the names given; else
// every name both files hold; else the first variant of each.
std::vector<std::pair<std::string, std::string>> pair_variants(const RunResult& a, const RunResult& b,
                                                               const CompareOptions& options);
// The regression gate (compare --baseline): exit 0 pass, 1 regressed, 2 cannot judge.
int check_regressions(const CompareOptions& options, std::ostream& out);

}  // namespace pb::compare_detail
