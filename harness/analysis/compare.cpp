// Comparing results files (compare.h has the modes and the regression rule).
//
// Reading order: run_compare and its modes (the gate's own checks are in
// gate.cpp); print_comparison and the report sections it prints; then the
// pure pieces (judge_regression, family_times_us, compare_outputs,
// parse_max_regression) with their helpers.
#include "compare.h"
#include "compare_detail.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "check.h"
#include "efficiency.h"
#include "headline.h"
#include "model.h"
#include "links.h"
#include "power_state.h"
#include "projection.h"
#include "report.h"
#include "scenario.h"
#include "stats.h"
#include "text.h"
#include "wall_split.h"

namespace pb {

using compare_detail::cold_start_of;
using compare_detail::pair_variants;
using compare_detail::print_comparison;
using compare_detail::read_comparable;
using compare_detail::recorded_scenario;
using compare_detail::require_variant;
using compare_detail::Side;

namespace {

using VariantPairs = std::vector<std::pair<std::string, std::string>>;

// What one rep of a file's spans covers: a `lane` file holds one MLA layer
// (and no TTFT), every other kind the superstep.
bool holds_one_layer(const RunResult& run) { return run.kind == "lane"; }
std::string timed_scope(const RunResult& run) { return holds_one_layer(run) ? "MLA layer" : "superstep"; }

void compare_files(const CompareOptions& options, std::ostream& out);
void compare_within_file(const CompareOptions& options, std::ostream& out);

std::string variant_names(const RunResult& run);
void print_heading(const Side& a, const Side& b, std::ostream& out);
void print_family_tables(const Side& a, const Side& b, std::ostream& out);
void print_wait_tables(const Side& a, const Side& b, std::ostream& out);
void print_ttft(const Side& a, const Side& b, std::ostream& out);
void print_projections(const Side& a, const Side& b, std::ostream& out);
void print_verdict(const RegressionVerdict& verdict, std::ostream& out);
void print_outputs(const OutputsVerdict& verdict, const Outputs& a, const Outputs& b, std::ostream& out);

}  // namespace

int run_compare(const CompareOptions& options, std::ostream& out) {
  PB_CHECK(!options.file_a.empty(), "compare needs a results file");
  PB_CHECK(options.max_regression >= 0, fmt::format("max_regression {} is negative", options.max_regression));
  PB_CHECK(options.alpha > 0 && options.alpha < 1, fmt::format("alpha {} is outside (0, 1)", options.alpha));
  PB_CHECK(options.only.empty() || !options.baseline_file.empty(),
           "--only names the variants a regression check (--baseline) judges; to compare two variants give "
           "--variants A,B");
  PB_CHECK(options.normalize == "none" || !options.baseline_file.empty(),
           "--normalize judges a candidate against a baseline's machine; give --baseline");
  const ReportFormat format = parse_report_format(options.format);
  if (options.links) {
    PB_CHECK(options.file_b.empty() && options.baseline_file.empty() && options.variant_a.empty(),
             "--links projects one file's gang over each link; give one file, without --baseline or --variants");
    const RunResult run = read_comparable(options.file_a);
    out << link_table(run, options.file_a, format);
    return 0;
  }
  if (!options.baseline_file.empty()) return compare_detail::check_regressions(options, out);  // every format
  if (format != ReportFormat::text) {
    write_report(options, format, out);
    return 0;
  }
  if (options.file_b.empty())
    compare_within_file(options, out);
  else
    compare_files(options, out);
  return 0;
}

namespace {

// ---- the three modes ------------------------------------------------------------

// (a) Two files.
void compare_files(const CompareOptions& options, std::ostream& out) {
  const RunResult a = read_comparable(options.file_a);
  const RunResult b = read_comparable(options.file_b);
  for (const auto& [name_a, name_b] : pair_variants(a, b, options))
    print_comparison(Side{"A", options.file_a, &a, &require_variant(a, options.file_a, name_a)},
                     Side{"B", options.file_b, &b, &require_variant(b, options.file_b, name_b)}, options, out);
}

// The warning beside savings computed against a reference that ran cold.
void print_cold_reference(const RunResult& run, const std::string& file, const VariantResult& reference,
                          std::ostream& out) {
  const std::string why = cold_start_of(run, file, reference);
  if (why.empty()) return;
  out << fmt::format("warning: the reference '{}' in {} may hold a cold start: it {}; savings against it include "
                     "that (a warm reference: warmup >= 1 or warmup_layers, or another file's baseline)\n",
                     reference.name, file, why);
}

// (b) One file, no variant names, a "baseline" variant among several: each
// other variant's saving against it (the each-cut A/B), TTFT medians and the
// span total of the superstep (a lane file: of its MLA layer, no TTFT) on the
// deepest rank.
void print_savings(const RunResult& run, const std::string& file, const std::string& reference, std::ostream& out) {
  const VariantResult& base = require_variant(run, file, reference);
  const auto deep_total_ms = [](const VariantResult& v) {
    std::map<int32_t, std::map<int32_t, double>> per_rank_rep;  // rank -> rep -> us
    for (const Span& s : v.spans) per_rank_rep[s.rank][s.rep] += s.time_us;
    double deep = 0;
    for (const auto& [rank, reps] : per_rank_rep) {
      std::vector<double> totals;
      for (const auto& [rep, us] : reps) totals.push_back(us);
      deep = std::max(deep, median(totals) / 1e3);
    }
    return deep;
  };
  const auto ttft_median = [&](const VariantResult& v) {
    const HeadlineTtft h = headline_ttft(run, v);
    return h.ms.empty() ? std::nan("") : median(h.ms);
  };
  const auto wall_median = [](const VariantResult& v) { return v.ttft_ms.empty() ? std::nan("") : median(v.ttft_ms); };
  const double base_ttft = ttft_median(base), base_deep = deep_total_ms(base);
  if (holds_one_layer(run)) {
    out << fmt::format("savings against '{}' in {} (per MLA layer: the deep rank's spans, median over reps)\n",
                       reference, file);
    out << fmt::format("  {:<14} {:>12} {:>12} {:>8}\n", "variant", "layer ms", "saving ms", "%");
    for (const VariantResult& v : run.variants) {
      const double d = deep_total_ms(v);
      out << fmt::format("  {:<14} {:>12.3f} {:>12.3f} {:>7.1f}%\n", v.name, d, base_deep - d,
                         base_deep > 0 ? 100.0 * (base_deep - d) / base_deep : 0.0);
    }
    return;
  }
  const auto percent = [](double base, double x) { return base > 0 ? 100.0 * (base - x) / base : 0.0; };
  const TtftForm form = ttft_form(run, base);
  const bool projected = form == TtftForm::projected;
  const char* which = projected ? "the projected gang, replayed from the spans over the links as measured, as if "
                                  "each rank had its GPU, median over reps"
                      : form == TtftForm::planned ? "planned: the calibrated plan's deepest rank where it was "
                                                    "calibrated, else the roofline's"
                                                  : "measured, median over reps";
  out << fmt::format("savings against '{}' in {} (TTFT: {}; spans: the deep rank's superstep{})\n", reference, file,
                     which, projected ? "; serialized wall: the run's own wall clock, every rank's turns" : "");
  out << fmt::format("  {:<14} {:>12} {:>12} {:>8} {:>12} {:>12} {:>6}{}\n", "variant", "TTFT ms", "saving ms", "%",
                     "spans ms", "saving ms", "MFU", projected ? fmt::format(" {:>17}", "serialized wall") : "");
  for (const VariantResult& v : run.variants) {
    const double t = ttft_median(v), d = deep_total_ms(v);
    const double mfu = efficiency_of(run, v).mfu_bf16_datasheet;
    out << fmt::format("  {:<14} {:>12.1f} {:>12.1f} {:>7.1f}% {:>12.1f} {:>12.1f} {:>6}{}{}\n", v.name, t,
                       base_ttft - t, percent(base_ttft, t), d, base_deep - d,
                       std::isnan(mfu) ? std::string("-") : fmt::format("{:.1f}%", 100 * mfu),
                       projected ? fmt::format(" {:>17.1f}", wall_median(v)) : "",
                       cold_start_of(run, file, v).empty() ? "" : "  cold");
  }
  out << "  (MFU: model FLOPs / (TTFT x GPUs x the datasheet's dense bf16 peak); efficiency.h)\n";
  if (const VariantResult* all = run.find_variant("all")) {  // what "all" meant to the build that ran it
    const std::set<std::string> on = cut_names_on(all->cuts);
    out << fmt::format("  (all: {} cuts: {})\n", on.size(), join(std::vector<std::string>(on.begin(), on.end())));
  }
  print_cold_reference(run, file, base, out);
}

// (b) Two variants of one file.
void compare_within_file(const CompareOptions& options, std::ostream& out) {
  if (options.variant_a.empty() && options.variant_b.empty()) {
    const RunResult run = read_comparable(options.file_a);
    PB_CHECK(run.find_variant(options.reference) && run.variants.size() >= 2,
             fmt::format("comparing inside one file needs two variant names (--variants A,B), or a file with the "
                         "reference variant '{}' (--reference) and others (then each one's saving is printed); '{}' "
                         "has: {}",
                         options.reference, options.file_a, variant_names(run)));
    print_savings(run, options.file_a, options.reference, out);
    return;
  }
  PB_CHECK(!options.variant_a.empty() && !options.variant_b.empty(),
           "comparing inside one file needs two variant names (or give a second file)");
  const RunResult run = read_comparable(options.file_a);
  print_comparison(Side{"A", options.file_a, &run, &require_variant(run, options.file_a, options.variant_a)},
                   Side{"B", options.file_a, &run, &require_variant(run, options.file_a, options.variant_b)},
                   options, out);
}

std::string variant_names(const RunResult& run) {
  std::vector<std::string> names;
  for (const VariantResult& variant : run.variants) names.push_back(variant.name);
  return names.empty() ? "no variants" : join(names);
}


}  // namespace

namespace compare_detail {

VariantPairs pair_variants(const RunResult& a, const RunResult& b, const CompareOptions& options) {
  if (!options.variant_a.empty() || !options.variant_b.empty()) {
    const std::string& name_a = options.variant_a.empty() ? options.variant_b : options.variant_a;
    const std::string& name_b = options.variant_b.empty() ? options.variant_a : options.variant_b;
    return {{name_a, name_b}};
  }
  VariantPairs pairs;
  for (const VariantResult& variant : a.variants)
    if (b.find_variant(variant.name)) pairs.emplace_back(variant.name, variant.name);
  if (!pairs.empty()) return pairs;
  PB_CHECK(!a.variants.empty(), fmt::format("'{}' has no variants to compare", options.file_a));
  PB_CHECK(!b.variants.empty(), fmt::format("'{}' has no variants to compare", options.file_b));
  return {{a.variants.front().name, b.variants.front().name}};
}

RunResult read_comparable(const std::string& file) {
  RunResult run = read_with_link_bytes(file);
  PB_CHECK(run.kind != "sweep",
           fmt::format("'{}' is a sweep file: its points are tabulated by scripts/sweep_table.py (text, markdown, "
                       "csv, json) and drawn by scripts/plot_sweep.py; each point's own file beside it compares",
                       file));
  return run;
}

// The scenario a file recorded, with its overrides; false, with the problem,
// when it has none or it no longer parses.
bool recorded_scenario(const RunResult& run, const std::string& file, Scenario* scenario, std::string* problem) {
  const auto yaml = run.text.find("scenario_yaml");
  if (yaml == run.text.end()) {
    *problem = fmt::format("'{}' records no scenario (a '{}' file)", file, run.kind);
    return false;
  }
  const auto overrides = run.text.find("scenario_overrides");
  try {
    *scenario = parse_scenario(yaml->second, file + " (scenario_yaml)",
                               overrides_from_text(overrides == run.text.end() ? "" : overrides->second));
  } catch (const Error& error) {
    *problem = fmt::format("cannot read the scenario recorded in '{}': {}", file, error.what());
    return false;
  }
  return true;
}

std::string cold_start_of(const RunResult& run, const std::string& file, const VariantResult& variant) {
  const auto recorded = run.text.find("cold_start");
  if (recorded != run.text.end()) {
    const std::map<std::string, std::string> reasons = parse_cold_starts(recorded->second);
    const auto found = reasons.find(variant.name);
    return found == reasons.end() ? "" : found->second;
  }
  if (ttft_form(run, variant) == TtftForm::planned) return "";  // nothing ran
  Scenario scenario;
  std::string problem;
  const int warmup = recorded_scenario(run, file, &scenario, &problem) ? scenario.warmup : -1;
  const bool ran_first = !run.variants.empty() && run.variants.front().name == variant.name;
  return cold_start_reason(ran_first, warmup, headline_ttft(run, variant).ms);
}

const VariantResult& require_variant(const RunResult& run, const std::string& file, const std::string& name) {
  const VariantResult* variant = run.find_variant(name);
  PB_CHECK(variant, fmt::format("'{}' has no variant '{}' (it has: {})", file, name, variant_names(run)));
  return *variant;
}

RegressionVerdict print_comparison(const Side& a, const Side& b, const CompareOptions& options, std::ostream& out) {
  print_heading(a, b, out);
  print_family_tables(a, b, out);
  print_wait_tables(a, b, out);
  const bool one_layer = holds_one_layer(*a.run) || holds_one_layer(*b.run);
  if (one_layer)
    out << "\nno TTFT: a lane file holds one MLA layer\n";
  else
    print_ttft(a, b, out);
  print_projections(a, b, out);
  HeadlineTtft ha = headline_ttft(*a.run, *a.variant), hb = headline_ttft(*b.run, *b.variant);
  for (auto [headline, side] : {std::pair{&ha, &a}, {&hb, &b}})
    for (double& ms : headline->ms) ms *= side->ttft_scale;
  RegressionVerdict verdict = judge_regression(ha.ms, hb.ms, options.max_regression, options.alpha);
  if (ha.form != hb.form) {
    verdict = RegressionVerdict{};
    verdict.method = "not judged";
    verdict.reason = fmt::format("A's TTFT is {}, B's {}: not the same quantity", ttft_form_name(ha.form),
                                 ttft_form_name(hb.form));
  } else if (ha.form == TtftForm::planned) {
    verdict = RegressionVerdict{};
    verdict.method = "not judged";
    verdict.reason = "planned TTFTs, not measured: no noise to judge a change against";
  }
  verdict.quantity = ttft_form_label(ha.form);
  for (const Side* side : {&a, &b})
    if (!side->scale_note.empty()) verdict.quantity += ", " + side->scale_note;
  if (!one_layer) print_verdict(verdict, out);
  for (const Side* side : {&a, &b}) {
    const std::string notes = format_power_state(side->label, power_state_notes(*side->variant));
    if (!notes.empty()) out << "\n" << notes;
    Scenario scenario;
    std::string problem;
    const bool serialized = recorded_scenario(*side->run, side->file, &scenario, &problem) && scenario.serialize_ranks;
    const std::string split = format_wall_split(*side->variant, serialized);
    if (!split.empty()) out << "\n" << side->label << ": " << split;
  }
  print_outputs(compare_outputs(a.variant->outputs, b.variant->outputs), a.variant->outputs,
                b.variant->outputs, out);
  return verdict;
}

}  // namespace compare_detail

namespace {

// ---- one comparison: the report sections --------------------------------------------


void print_side(const Side& side, std::ostream& out) {
  const bool complete = side.run->complete && side.variant->complete;
  const std::string holds = holds_one_layer(*side.run)
                                ? std::string("one MLA layer")
                                : fmt::format("{} TTFT samples ({})", side.variant->ttft_ms.size(),
                                              ttft_form_label(ttft_form(*side.run, *side.variant)));
  out << fmt::format("{}: {} [{}]  kind {}, {}{}\n", side.label, side.file, side.variant->name, side.run->kind,
                     holds, complete ? "" : ", INCOMPLETE run");
  if (!side.variant->cuts.empty()) out << fmt::format("   cuts: {}\n", side.variant->cuts);
}

void print_heading(const Side& a, const Side& b, std::ostream& out) {
  out << fmt::format("\n=== {} vs {} ===\n", a.variant->name, b.variant->name);
  print_side(a, out);
  print_side(b, out);
}

// -- per-family time per superstep (per MLA layer in lane files), one table per rank --

std::set<int32_t> span_ranks(const VariantResult& a, const VariantResult& b) {
  std::set<int32_t> ranks;
  for (const Span& span : a.spans) ranks.insert(span.rank);
  for (const Span& span : b.spans) ranks.insert(span.rank);
  return ranks;
}

// "10 reps" for measured runs, "plan" for plans, "-" without spans.
std::string rep_description(const VariantResult& variant, int32_t rank) {
  std::set<int32_t> reps;
  for (const Span& span : variant.spans)
    if (span.rank == rank) reps.insert(span.rep);
  if (reps.empty()) return "-";
  const size_t measured = size_t(std::count_if(reps.begin(), reps.end(), [](int32_t rep) { return rep >= 0; }));
  return measured ? fmt::format("{} reps", measured) : "plan";
}

struct FamilyRow {
  std::string family;
  double a_us = 0, b_us = 0;
};

// Families of either side, slowest in A first.
std::vector<FamilyRow> family_rows(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  std::map<std::string, FamilyRow> merged;
  for (const auto& [family, us] : a) merged[family] = FamilyRow{family, us, 0};
  for (const auto& [family, us] : b) {
    merged[family].family = family;
    merged[family].b_us = us;
  }
  std::vector<FamilyRow> rows;
  for (const auto& [family, row] : merged) rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(), [](const FamilyRow& x, const FamilyRow& y) {
    return x.a_us != y.a_us ? x.a_us > y.a_us : x.b_us > y.b_us;
  });
  return rows;
}

struct TimeUnit {
  const char* name;
  double per_us;
  int decimals;
};

TimeUnit unit_for(double largest_us) {
  return largest_us >= 10000 ? TimeUnit{"ms", 1e-3, 3} : TimeUnit{"µs", 1, 1};
}

std::string ratio_text(double a, double b) { return a > 0 ? fmt::format("{:.3f}", b / a) : "-"; }

void print_family_row(const FamilyRow& row, size_t width, const TimeUnit& unit, std::ostream& out) {
  const int d = unit.decimals;
  out << fmt::format("  {:<{}}  {:>12.{}f}  {:>12.{}f}  {:>+12.{}f}  {:>7}\n", row.family, width,
                     row.a_us * unit.per_us, d, row.b_us * unit.per_us, d, (row.b_us - row.a_us) * unit.per_us, d,
                     ratio_text(row.a_us, row.b_us));
}

void print_family_table(int32_t rank, const VariantResult& a, const VariantResult& b, const std::string& scope,
                        std::ostream& out) {
  const std::vector<FamilyRow> rows = family_rows(family_times_us(a, rank), family_times_us(b, rank));
  FamilyRow total{"total"};
  size_t width = total.family.size();
  for (const FamilyRow& row : rows) {
    total.a_us += row.a_us;
    total.b_us += row.b_us;
    width = std::max(width, row.family.size());
  }
  const TimeUnit unit = unit_for(std::max(total.a_us, total.b_us));
  out << fmt::format("\nrank {}: time per {} by family (A: {}, B: {}; median over reps)\n", rank, scope,
                     rep_description(a, rank), rep_description(b, rank));
  out << fmt::format("  {:<{}}  {:>12}  {:>12}  {:>12}  {:>7}\n", "family", width, fmt::format("A ({})", unit.name),
                     fmt::format("B ({})", unit.name), fmt::format("B-A ({})", unit.name), "B/A");
  for (const FamilyRow& row : rows) print_family_row(row, width, unit, out);
  print_family_row(total, width, unit, out);
}

void print_family_tables(const Side& a, const Side& b, std::ostream& out) {
  const std::string scope_a = timed_scope(*a.run), scope_b = timed_scope(*b.run);
  const std::string scope = scope_a == scope_b ? scope_a : fmt::format("{} (A) / {} (B)", scope_a, scope_b);
  const std::set<int32_t> ranks = span_ranks(*a.variant, *b.variant);
  if (ranks.empty()) out << "\nno kernel spans recorded\n";
  for (int32_t rank : ranks) print_family_table(rank, *a.variant, *b.variant, scope, out);
}

// -- waiting vs compute --

std::string peer_label(int32_t peer) {
  return peer < 0 ? "  on several, or no bell recorded" : fmt::format("  on rank {}", peer);
}

void print_wait_table(int32_t rank, const VariantResult& a, const VariantResult& b, const std::string& scope,
                      std::ostream& out) {
  const WaitSplit wa = wait_split_us(a, rank), wb = wait_split_us(b, rank);
  std::vector<FamilyRow> rows = {{"waiting (fabric.wait*)", wa.wait_us, wb.wait_us}};
  std::set<int32_t> peers;
  for (const auto& [peer, us] : wa.wait_by_peer_us) peers.insert(peer);
  for (const auto& [peer, us] : wb.wait_by_peer_us) peers.insert(peer);
  for (int32_t peer : peers) {
    const auto in_a = wa.wait_by_peer_us.find(peer), in_b = wb.wait_by_peer_us.find(peer);
    rows.push_back({peer_label(peer), in_a == wa.wait_by_peer_us.end() ? 0.0 : in_a->second,
                    in_b == wb.wait_by_peer_us.end() ? 0.0 : in_b->second});
  }
  rows.push_back({"compute", wa.compute_us, wb.compute_us});
  size_t width = 0;
  for (const FamilyRow& row : rows) width = std::max(width, row.family.size());
  const TimeUnit unit = unit_for(std::max(wa.wait_us + wa.compute_us, wb.wait_us + wb.compute_us));
  out << fmt::format("\nrank {}: waiting vs compute per {} (median over reps)\n", rank, scope);
  out << fmt::format("  {:<{}}  {:>12}  {:>12}  {:>12}  {:>7}\n", "", width, fmt::format("A ({})", unit.name),
                     fmt::format("B ({})", unit.name), fmt::format("B-A ({})", unit.name), "B/A");
  for (const FamilyRow& row : rows) print_family_row(row, width, unit, out);
}

void print_wait_tables(const Side& a, const Side& b, std::ostream& out) {
  const std::string scope = timed_scope(*a.run) == timed_scope(*b.run) ? timed_scope(*a.run) : "superstep or MLA layer";
  for (int32_t rank : span_ranks(*a.variant, *b.variant)) print_wait_table(rank, *a.variant, *b.variant, scope, out);
}

// -- TTFT --

void print_ttft_row(const std::string& label, const std::vector<double>& ttft_ms, std::ostream& out) {
  const Summary s = summarize(ttft_ms);
  if (s.count == 0)
    out << fmt::format("  {:<14}  {:>5}  {:>10}  {:>10}  {:>10}\n", label, 0, "-", "-", "-");
  else
    out << fmt::format("  {:<14}  {:>5}  {:>10.3f}  {:>10.3f}  {:>10.3f}\n", label, s.count, s.min, s.median, s.max);
}

void print_ttft(const Side& a, const Side& b, std::ostream& out) {
  const HeadlineTtft ha = headline_ttft(*a.run, *a.variant), hb = headline_ttft(*b.run, *b.variant);
  if (ha.ms.empty() && hb.ms.empty() && a.variant->ttft_ms.empty() && b.variant->ttft_ms.empty()) {
    out << "\nTTFT: not recorded\n";
    return;
  }
  const std::string title =
      ha.form == hb.form ? fmt::format("{} (ms)", ttft_form_label(ha.form))
                         : fmt::format("TTFT (ms): A {}, B {}", ttft_form_label(ha.form), ttft_form_label(hb.form));
  out << fmt::format("\n  {:<14}  {:>5}  {:>10}  {:>10}  {:>10}\n", title, "reps", "min", "median", "max");
  print_ttft_row(a.label, ha.ms, out);
  print_ttft_row(b.label, hb.ms, out);
  if (ha.form == TtftForm::projected || hb.form == TtftForm::projected) {
    out << fmt::format("  {:<14}  (the run's own wall clock: every rank's turns)\n", "serialized wall");
    print_ttft_row(a.label, a.variant->ttft_ms, out);
    print_ttft_row(b.label, b.variant->ttft_ms, out);
  }
  for (const Side* side : {&a, &b})
    out << fmt::format("  {}: {}\n", side->label, describe_efficiency(efficiency_of(*side->run, *side->variant)));
  print_cold_reference(*a.run, a.file, *a.variant, out);
}

// -- the projected gang (projection.h) --

// The side's stored projections, else a replay with the fabric as measured
// when its spans carry doorbells; a replay that fails is reported, not fatal.
void print_projection_of(const Side& side, std::ostream& out) {
  const VariantResult& variant = *side.variant;
  std::vector<Projection> projections = variant.projections;
  try {
    if (projections.empty() && !variant.bells.empty()) projections.push_back(project_variant(variant, kMeasuredLink));
  } catch (const Error& error) {
    out << fmt::format("\n{}: no projected gang: {}\n", side.label, error.what());
  }
  out << format_projections(variant.name, projections, "\n" + side.label + ": ");
}

void print_projections(const Side& a, const Side& b, std::ostream& out) {
  print_projection_of(a, out);
  print_projection_of(b, out);
}

void print_verdict(const RegressionVerdict& verdict, std::ostream& out) {
  const char* word = !verdict.judged ? "not judged" : verdict.regressed ? "REGRESSED" : "ok";
  out << fmt::format("{} verdict: {}: {}\n", verdict.quantity, word, verdict.reason);
}

// -- outputs --

std::string rel_l2_text(double value) {
  return std::isnan(value) ? "n/a (missing, or the sizes differ)" : fmt::format("{:.3e}", value);
}

std::string token_text(int64_t token) { return token < 0 ? "none" : std::to_string(token); }

void print_rank_checksums(const RankChecksums& rank, std::ostream& out) {
  out << fmt::format("  rank {}: {} of {} layers bit-identical", rank.rank, rank.identical, rank.layers_compared);
  if (rank.first_differing_layer >= 0)
    out << fmt::format("; {} differ, first differing layer {}", rank.layers_compared - rank.identical,
                       rank.first_differing_layer);
  out << "\n";
}

void print_outputs(const OutputsVerdict& verdict, const Outputs& a, const Outputs& b, std::ostream& out) {
  if (!verdict.recorded) {
    out << fmt::format("outputs: not compared (checksums recorded: A {}, B {})\n",
                       a.checksums.empty() ? "no" : "yes", b.checksums.empty() ? "no" : "yes");
    return;
  }
  if (verdict.bit_identical) {
    out << fmt::format("outputs: bit-identical ({} ranks x {} layers); first token A {}, B {}\n", a.ranks, a.layers,
                       token_text(verdict.token_a), token_text(verdict.token_b));
    return;
  }
  out << "outputs: differ\n";
  if (!verdict.same_shape)
    out << fmt::format("  shapes differ: A {} ranks x {} layers, B {} x {}; comparing the common part\n", a.ranks,
                       a.layers, b.ranks, b.layers);
  for (const RankChecksums& rank : verdict.ranks) print_rank_checksums(rank, out);
  out << fmt::format("  hidden samples rel-L2 (B vs A): {}\n", rel_l2_text(verdict.hidden_rel_l2));
  out << fmt::format("  last logits rel-L2 (B vs A):    {}\n", rel_l2_text(verdict.logits_rel_l2));
  const bool agree = verdict.token_a == verdict.token_b;
  out << fmt::format("  first token (argmax): A {}, B {}: {}\n", token_text(verdict.token_a),
                     token_text(verdict.token_b), agree ? "agree" : "DIFFER");
}

// ---- helpers of the pure pieces ------------------------------------------------------

std::string percent(double fraction) { return fmt::format("{:+.2f}%", 100 * fraction); }

// Smallest n such that n + n reps let the exact test reach alpha (0: none up to 1000).
size_t balanced_reps_needed(double alpha) {
  for (size_t n = 1; n <= 1000; ++n)
    if (smallest_p_value(n, n) < alpha) return n;
  return 0;
}

std::vector<double> scaled(std::vector<double> values, double factor) {
  for (double& value : values) value *= factor;
  return values;
}

RegressionVerdict not_judged(const std::vector<double>& base, const std::vector<double>& cand) {
  RegressionVerdict verdict;
  verdict.method = "not judged";
  verdict.reason = base.empty() && cand.empty() ? "no TTFT samples on either side"
                   : base.empty()               ? "no TTFT samples in the baseline (A)"
                                                : "no TTFT samples in the candidate (B)";
  return verdict;
}

// "median +1.00% within the allowed +3.00%" or "median -4.00%: faster".
std::string within_allowance(const RegressionVerdict& verdict, double max_regression) {
  if (verdict.delta < 0) return fmt::format("median {}: faster", percent(verdict.delta));
  return fmt::format("median {} within the allowed {}", percent(verdict.delta), percent(max_regression));
}

// Below what the U test can resolve: regressed only on disjoint ranges.
void judge_by_ranges(const std::vector<double>& allowed, const std::vector<double>& cand, double max_regression,
                     double alpha, RegressionVerdict* verdict) {
  verdict->method = "too few reps for the U test";
  const size_t needed = balanced_reps_needed(alpha);
  const std::string why = fmt::format("too few reps for the U test: {} + {}, it needs e.g. {} + {} at alpha {}",
                                      allowed.size(), cand.size(), needed, needed, alpha);
  const double factor = 1 + max_regression;
  if (verdict->delta <= max_regression) {
    verdict->reason = fmt::format("{} ({})", within_allowance(*verdict, max_regression), why);
    return;
  }
  const bool disjoint =
      *std::min_element(cand.begin(), cand.end()) > *std::max_element(allowed.begin(), allowed.end());
  verdict->regressed = disjoint;
  verdict->reason =
      disjoint ? fmt::format("median {} > allowed {}, and every candidate rep is slower than every baseline rep "
                             "x {:.3f} ({})",
                             percent(verdict->delta), percent(max_regression), factor, why)
               : fmt::format("median {} > allowed {}, but the reps overlap baseline x {:.3f} ({}): rerun with more "
                             "reps to decide",
                             percent(verdict->delta), percent(max_regression), factor, why);
}

void judge_by_u_test(const std::vector<double>& allowed, const std::vector<double>& cand, double max_regression,
                     double alpha, RegressionVerdict* verdict) {
  const UTest test = mann_whitney_greater(allowed, cand);
  verdict->p_value = test.p_value;
  verdict->method = test.exact ? "exact U test" : "U test (normal approximation)";
  const double factor = 1 + max_regression;
  const std::string evidence =
      fmt::format("{} of B > A x {:.3f}: p = {:.2g} {} {}, {} + {} reps", verdict->method, factor, test.p_value,
                  test.p_value < alpha ? "<" : ">=", alpha, allowed.size(), cand.size());
  if (verdict->delta <= max_regression) {
    verdict->reason = fmt::format("{} ({})", within_allowance(*verdict, max_regression), evidence);
    return;
  }
  verdict->regressed = test.p_value < alpha;
  verdict->reason =
      verdict->regressed
          ? fmt::format("median {} > allowed {}, and slower than baseline x {:.3f} beyond the noise ({})",
                        percent(verdict->delta), percent(max_regression), factor, evidence)
          : fmt::format("median {} > allowed {}, but within the noise of baseline x {:.3f} ({}): rerun with more "
                        "reps to decide",
                        percent(verdict->delta), percent(max_regression), factor, evidence);
}

// Each layer's checksum on each rank both sides have.
std::vector<RankChecksums> compare_checksums(const Outputs& a, const Outputs& b) {
  const int32_t ranks = std::min(a.ranks, b.ranks);
  const int32_t layers = std::min(a.layers, b.layers);
  std::vector<RankChecksums> result;
  for (int32_t rank = 0; rank < ranks; ++rank) {
    RankChecksums row{rank, layers, 0, -1};
    for (int32_t layer = 0; layer < layers; ++layer) {
      const bool same = a.checksums[size_t(rank) * size_t(a.layers) + size_t(layer)] ==
                        b.checksums[size_t(rank) * size_t(b.layers) + size_t(layer)];
      if (same) ++row.identical;
      else if (row.first_differing_layer < 0) row.first_differing_layer = layer;
    }
    result.push_back(row);
  }
  return result;
}

// ||b - a|| / ||a|| in double; NaN when the sizes differ or both are empty.
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return std::numeric_limits<double>::quiet_NaN();
  double difference = 0, reference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(b[i]) - double(a[i]);
    difference += d * d;
    reference += double(a[i]) * double(a[i]);
  }
  if (reference == 0) return difference == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(difference / reference);
}

// The recorded first token, else the argmax of the last logits, else -1.
int64_t first_token_of(const Outputs& outputs) {
  if (outputs.first_token >= 0 || outputs.last_logits.empty()) return outputs.first_token;
  return int64_t(std::max_element(outputs.last_logits.begin(), outputs.last_logits.end()) -
                 outputs.last_logits.begin());
}

}  // namespace

// ---- the pure pieces ---------------------------------------------------------------------

RegressionVerdict judge_regression(const std::vector<double>& base, const std::vector<double>& cand,
                                   double max_regression, double alpha) {
  if (base.empty() || cand.empty()) return not_judged(base, cand);
  RegressionVerdict verdict;
  verdict.judged = true;
  verdict.delta = median(cand) / median(base) - 1;
  const std::vector<double> allowed = scaled(base, 1 + max_regression);
  if (smallest_p_value(base.size(), cand.size()) >= alpha)
    judge_by_ranges(allowed, cand, max_regression, alpha, &verdict);
  else
    judge_by_u_test(allowed, cand, max_regression, alpha, &verdict);
  return verdict;
}

namespace {

// The median over `reps` of a per-rep sum (0 in a rep without any).
double median_of_reps(const std::set<int32_t>& reps, const std::map<int32_t, double>& per_rep) {
  std::vector<double> samples;
  for (int32_t rep : reps) {
    const auto found = per_rep.find(rep);
    samples.push_back(found == per_rep.end() ? 0.0 : found->second);
  }
  return samples.empty() ? 0.0 : median(samples);
}

}  // namespace

std::map<std::string, double> family_times_us(const VariantResult& variant, int32_t rank) {
  const bool measured = std::any_of(variant.spans.begin(), variant.spans.end(),
                                    [&](const Span& span) { return span.rank == rank && span.rep >= 0; });
  std::set<int32_t> reps;
  std::map<std::string, std::map<int32_t, double>> per_family_per_rep;
  for (const Span& span : variant.spans) {
    if (span.rank != rank || (span.rep >= 0) != measured) continue;
    reps.insert(span.rep);
    per_family_per_rep[span.family][span.rep] += span.time_us;
  }
  std::map<std::string, double> times;
  for (const auto& [family, per_rep] : per_family_per_rep) times[family] = median_of_reps(reps, per_rep);
  return times;
}

int32_t deepest_rank(const std::map<int32_t, std::map<std::string, double>>& family_times) {
  int32_t deep = 0;
  double most = -1;
  for (const auto& [rank, families] : family_times) {
    double total = 0;
    for (const auto& [family, time] : families) total += time;
    if (total > most) most = total, deep = rank;
  }
  return deep;
}

namespace {

bool is_wait_span(const Span& span) { return span.kernel.rfind("fabric.wait", 0) == 0; }

// The peer a wait span waited on, from its recorded wait bells; -1 when they name several or none.
std::map<int64_t, int32_t> wait_span_peers(const VariantResult& variant) {
  std::map<int64_t, std::set<int32_t>> peers;
  for (const BellOp& bell : variant.bells)
    if (bell.op == BellOpKind::wait) peers[bell.span].insert(bell.peer);
  std::map<int64_t, int32_t> one;
  for (const auto& [span, set] : peers) one[span] = set.size() == 1 ? *set.begin() : -1;
  return one;
}

}  // namespace

WaitSplit wait_split_us(const VariantResult& variant, int32_t rank) {
  const bool measured = std::any_of(variant.spans.begin(), variant.spans.end(),
                                    [&](const Span& span) { return span.rank == rank && span.rep >= 0; });
  const std::map<int64_t, int32_t> peers = wait_span_peers(variant);
  std::set<int32_t> reps;
  std::map<int32_t, double> wait, compute;                    // per rep
  std::map<int32_t, std::map<int32_t, double>> by_peer;       // peer -> rep -> us
  for (size_t i = 0; i < variant.spans.size(); ++i) {
    const Span& span = variant.spans[i];
    if (span.rank != rank || (span.rep >= 0) != measured) continue;
    reps.insert(span.rep);
    if (!is_wait_span(span)) {
      compute[span.rep] += span.time_us;
      continue;
    }
    wait[span.rep] += span.time_us;
    const auto peer = peers.find(int64_t(i));
    by_peer[peer == peers.end() ? -1 : peer->second][span.rep] += span.time_us;
  }
  WaitSplit split;
  split.wait_us = median_of_reps(reps, wait);
  split.compute_us = median_of_reps(reps, compute);
  for (const auto& [peer, per_rep] : by_peer) split.wait_by_peer_us[peer] = median_of_reps(reps, per_rep);
  return split;
}

double parse_max_regression(const std::string& text) {
  const std::string grammar = fmt::format(
      "--max-regression '{}': give a percent in [0, 100) such as 3% or 2.5%, or a fraction in [0, 1) such as 0.03",
      text);
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  const size_t digits = size_t(std::count_if(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; }));
  const size_t points = size_t(std::count(number.begin(), number.end(), '.'));
  PB_CHECK(digits > 0 && points <= 1 && digits + points == number.size(), grammar);
  const double value = std::stod(number);
  PB_CHECK(value < (percent ? 100.0 : 1.0), grammar);
  return percent ? value / 100 : value;
}

OutputsVerdict compare_outputs(const Outputs& a, const Outputs& b) {
  OutputsVerdict verdict;
  verdict.recorded = !a.checksums.empty() && !b.checksums.empty();
  verdict.same_shape = a.ranks == b.ranks && a.layers == b.layers;
  if (verdict.recorded) verdict.ranks = compare_checksums(a, b);
  verdict.bit_identical =
      verdict.recorded && verdict.same_shape &&
      std::all_of(verdict.ranks.begin(), verdict.ranks.end(),
                  [](const RankChecksums& rank) { return rank.identical == rank.layers_compared; });
  const bool same_sample_shape = a.sample_rows == b.sample_rows && a.sample_cols == b.sample_cols;
  if (same_sample_shape) verdict.hidden_rel_l2 = relative_l2(a.hidden_samples, b.hidden_samples);
  verdict.logits_rel_l2 = relative_l2(a.last_logits, b.last_logits);
  verdict.token_a = first_token_of(a);
  verdict.token_b = first_token_of(b);
  return verdict;
}

}  // namespace pb
