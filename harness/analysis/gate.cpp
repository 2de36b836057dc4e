// The regression gate, `compare --baseline` (compare.h has the rule): whether
// two files can be judged against each other at all, which variants to judge,
// each judged by the report's comparison (compare.cpp), and the summary with
// the exit code.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "check.h"
#include "headline.h"
#include "links.h"
#include "plan.h"
#include "compare_detail.h"
#include "report.h"
#include "text.h"

namespace pb::compare_detail {

namespace {

// The gate's bookkeeping: what it judged, what it did not and why.
struct NotJudged {
  std::string variant;
  std::string why;
  bool blocks = true;  // counts as "cannot judge" (exit 2); false: listed only
};

struct GateReport {
  std::vector<std::string> file_problems;  // the files cannot be judged against each other
  std::vector<std::pair<std::string, RegressionVerdict>> judged;
  std::vector<NotJudged> not_judged;

  bool any_regressed() const;
  bool any_blocking() const;
  int exit_code() const;
};

// ---- the machines -----------------------------------------------------------

// What a file records of its machine and build (gemm_ceiling.h; NaN: not recorded).
struct Machine {
  std::string gpu;  // rank 0's GPU name
  double burst = kNoValue, sustained = kNoValue, sustained_mhz = kNoValue, sustained_w = kNoValue;
  std::vector<std::pair<std::string, std::string>> libraries;  // (name, version), "" where not recorded
  int launch_list = 1;                                         // plan.h recorded_launch_list_version
};

// The software a run's time depends on, as run_info.h records it: (name, root text).
const std::pair<const char*, const char*> kLibraries[] = {{"CUDA driver", "cuda_driver"},
                                                           {"CUDA runtime", "cuda_runtime"},
                                                           {"cuBLAS", "cublas_version"},
                                                           {"cuDNN", "cudnn_version"},
                                                           {"NCCL", "nccl_version"}};

Machine machine_of(const RunResult& run) {
  Machine m{gpu_name(run), positive_number(run, "gemm_tflops"), positive_number(run, "gemm_tflops_sustained"),
            positive_number(run, "gemm_sustained_sm_mhz"), positive_number(run, "gemm_sustained_power_w"), {},
            recorded_launch_list_version(run)};
  for (const auto& [name, key] : kLibraries) {
    const auto found = run.text.find(key);
    m.libraries.emplace_back(name, found == run.text.end() ? "" : found->second);
  }
  return m;
}

// What differs in the software behind the two files: "the libraries differ:
// cuDNN 9.14.0 | 9.19.0" for each library both record at different versions,
// and the launch lists' form (plan.h kLaunchListVersion) when it differs.
std::vector<std::string> software_changes(const Machine& base, const Machine& cand) {
  std::vector<std::string> out;
  for (size_t i = 0; i < base.libraries.size(); ++i) {
    const std::string &b = base.libraries[i].second, &c = cand.libraries[i].second;
    if (!b.empty() && !c.empty() && b != c)
      out.push_back("the libraries differ: " + base.libraries[i].first + " " + b + " | " + c);
  }
  if (base.launch_list != cand.launch_list)
    out.push_back(fmt::format("the launch lists differ: form {} | {} (harness/analytic/plan.h says what each form "
                              "launches; the families it moves differ by design)",
                              base.launch_list, cand.launch_list));
  return out;
}

std::string value_text(double value, const char* format_spec) {
  return std::isnan(value) ? std::string("-") : fmt::format(fmt::runtime(format_spec), value);
}

// "-2.8%" of candidate against baseline; "" when either is missing.
std::string change_text(double base, double cand) {
  return std::isnan(base) || std::isnan(cand) ? "" : fmt::format("  ({:+.1f}%)", 100 * (cand / base - 1));
}

// The machines side by side, and whether their sustained ceilings differ by
// more than the allowance (compare.h, "The gate sees the machine").
void print_machines(const Machine& base, const Machine& cand, const CompareOptions& options, std::ostream& out) {
  out << "machines (baseline | candidate):\n";
  const auto row = [&](const char* what, const std::string& b, const std::string& c, const std::string& change) {
    std::string line = fmt::format("  {:<31} {:>12} | {:<12}{}", what, b, c, change);
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  };
  row("GPU", base.gpu.empty() ? "-" : base.gpu, cand.gpu.empty() ? "-" : cand.gpu, "");
  row("bf16 GEMM burst, TFLOP/s", value_text(base.burst, "{:.1f}"), value_text(cand.burst, "{:.1f}"),
      change_text(base.burst, cand.burst));
  row("bf16 GEMM sustained, TFLOP/s", value_text(base.sustained, "{:.1f}"), value_text(cand.sustained, "{:.1f}"),
      change_text(base.sustained, cand.sustained));
  row("  at SM clock, MHz", value_text(base.sustained_mhz, "{:.0f}"), value_text(cand.sustained_mhz, "{:.0f}"),
      change_text(base.sustained_mhz, cand.sustained_mhz));
  row("  at power, W", value_text(base.sustained_w, "{:.0f}"), value_text(cand.sustained_w, "{:.0f}"), "");
  for (const std::string& change : software_changes(base, cand)) out << "  " << change << "\n";
  if (std::isnan(base.sustained) || std::isnan(cand.sustained)) {
    out << fmt::format("  the {} records no sustained GEMM ceiling: the gate cannot see a change of machine\n",
                       std::isnan(base.sustained) ? "baseline" : "candidate");
    return;
  }
  const double change = cand.sustained / base.sustained - 1;
  if (std::abs(change) > options.max_regression)
    out << fmt::format("  the machines differ by more than the allowance: the sustained ceilings differ by {:+.1f}% "
                       "(allowed {:.1f}%){}\n",
                       100 * change, 100 * options.max_regression,
                       options.normalize == "sustained" ? "" : "; --normalize sustained judges TTFT as if on the "
                                                               "baseline's machine");
  else
    out << fmt::format("  the sustained ceilings differ by {:+.1f}%, within the allowance\n", 100 * change);
}

// The factor the candidate's TTFT is judged at (1 without --normalize), or
// a problem when it cannot be normalized.
double candidate_scale(const Machine& base, const Machine& cand, const CompareOptions& options,
                       std::vector<std::string>* problems) {
  if (options.normalize == "none") return 1;
  for (const auto& [machine, file, role] :
       {std::tuple{&base, &options.baseline_file, "baseline"}, {&cand, &options.file_a, "candidate"}})
    if (std::isnan(machine->sustained))
      problems->push_back(fmt::format("--normalize sustained: the {} '{}' records no sustained GEMM ceiling (root "
                                      "number gemm_tflops_sustained)",
                                      role, *file));
  return problems->empty() ? cand.sustained / base.sustained : 1;
}

// ---- what can be judged ---------------------------------------------------

bool GateReport::any_regressed() const {
  return std::any_of(judged.begin(), judged.end(), [](const auto& entry) { return entry.second.regressed; });
}

bool GateReport::any_blocking() const {
  return !file_problems.empty() ||
         std::any_of(not_judged.begin(), not_judged.end(), [](const NotJudged& entry) { return entry.blocks; });
}

int GateReport::exit_code() const {
  if (any_regressed()) return kCompareRegressed;
  return any_blocking() ? kCompareCannotJudge : kComparePass;
}

// Measured samples: a plan's TTFT is not a measurement to judge.
bool has_ttft_samples(const RunResult& run) {
  return std::any_of(run.variants.begin(), run.variants.end(), [&](const VariantResult& variant) {
    const HeadlineTtft h = headline_ttft(run, variant);
    return h.form != TtftForm::planned && !h.ms.empty();
  });
}

template <typename T>
void note_difference(const std::string& key, const T& base, const T& cand, std::vector<std::string>* out) {
  if (!(base == cand)) out->push_back(fmt::format("{} {} vs {}", key, base, cand));
}

// "cp 1 vs 4; model.layers 93 vs 8": the identity keys that differ, baseline first.
std::string identity_difference(const Scenario& base, const Scenario& cand) {
  std::vector<std::string> differences;
  note_difference("name", base.name, cand.name, &differences);
  for (const ModelKey& key : model_keys())
    note_difference(std::string("model.") + key.name, base.model.*key.member, cand.model.*key.member, &differences);
  note_difference("cp", base.cp, cand.cp, &differences);
  note_difference("context", base.context, cand.context, &differences);
  note_difference("bucket", base.bucket, cand.bucket, &differences);
  std::string text;
  for (const std::string& difference : differences) text += (text.empty() ? "" : "; ") + difference;
  return text;
}

std::vector<std::string> file_problems(const RunResult& base, const RunResult& cand, const CompareOptions& options) {
  const std::string& base_file = options.baseline_file;
  const std::string& cand_file = options.file_a;
  std::vector<std::string> problems;
  if (base.kind != cand.kind)
    problems.push_back(fmt::format("the files hold different kinds: the baseline is a '{}' file, the candidate a "
                                   "'{}' file",
                                   base.kind, cand.kind));
  for (const auto& [run, file, role] : {std::tuple{&base, &base_file, "baseline"}, {&cand, &cand_file, "candidate"}}) {
    if (!run->complete)
      problems.push_back(fmt::format("the {} '{}' is marked incomplete (a run cut short)", role, *file));
    if (!has_ttft_samples(*run))
      problems.push_back(fmt::format("the {} '{}' holds no TTFT samples (a '{}' file; the gate judges 'run' files)",
                                     role, *file, run->kind));
  }
  Scenario base_scenario, cand_scenario;
  std::string problem;
  const bool base_read = recorded_scenario(base, base_file, &base_scenario, &problem);
  if (!base_read) problems.push_back(problem);
  const bool cand_read = recorded_scenario(cand, cand_file, &cand_scenario, &problem);
  if (!cand_read) problems.push_back(problem);
  if (base_read && cand_read) {
    const std::string difference = identity_difference(base_scenario, cand_scenario);
    if (!difference.empty()) problems.push_back("the scenarios differ (baseline vs candidate): " + difference);
  }
  return problems;
}

// The variants to judge, each in both files: the `only` list, else every
// baseline variant. The others go to report->not_judged, with why.
std::vector<std::string> variants_to_judge(const RunResult& base, const RunResult& cand,
                                           const CompareOptions& options, GateReport* report) {
  std::vector<std::string> wanted = options.only;
  if (wanted.empty())
    for (const VariantResult& variant : base.variants) wanted.push_back(variant.name);
  std::vector<std::string> names;
  for (const std::string& name : wanted) {
    const bool in_base = base.find_variant(name) != nullptr, in_cand = cand.find_variant(name) != nullptr;
    if (in_base && in_cand)
      names.push_back(name);
    else if (options.only.empty())
      report->not_judged.push_back({name, "missing from the candidate"});
    else
      report->not_judged.push_back({name, !in_base && !in_cand ? "named by --only, in neither file"
                                          : in_base            ? "named by --only, missing from the candidate"
                                                               : "named by --only, missing from the baseline"});
  }
  for (const VariantResult& variant : cand.variants) {
    if (std::find(wanted.begin(), wanted.end(), variant.name) != wanted.end()) continue;
    report->not_judged.push_back(
        {variant.name, options.only.empty() ? "not in the baseline (listed only)" : "not named by --only (listed only)",
         /*blocks=*/false});
  }
  return names;
}

// "" when both sides ran the same cuts (a cut one side does not name is off).
std::string cuts_difference(const VariantResult& base, const VariantResult& cand) {
  if (cut_names_on(base.cuts) == cut_names_on(cand.cuts)) return "";
  return fmt::format("the cuts differ: baseline '{}', candidate '{}'", base.cuts, cand.cuts);
}

void print_gate_summary(const GateReport& report, const Machine& base, const Machine& cand,
                        const CompareOptions& options, std::ostream& out) {
  out << fmt::format("\nregression check: candidate '{}' against baseline '{}' (allowed +{:.1f}%, alpha {})\n",
                     options.file_a, options.baseline_file, 100 * options.max_regression, options.alpha);
  print_machines(base, cand, options, out);
  if (!report.file_problems.empty()) {
    out << "  cannot judge the files against each other:\n";
    for (const std::string& problem : report.file_problems) out << "    " << problem << "\n";
    out << "result: cannot judge (exit 2): no variant judged\n";
    return;
  }
  size_t width = 8;
  for (const auto& [name, verdict] : report.judged) width = std::max(width, name.size());
  for (const NotJudged& entry : report.not_judged) width = std::max(width, entry.variant.size());
  out << fmt::format("  judged: {}\n", report.judged.size());
  std::vector<std::string> regressed;
  for (const auto& [name, verdict] : report.judged) {
    out << fmt::format("    {:<{}}  {:<9}  {}: {}\n", name, width, verdict.regressed ? "REGRESSED" : "ok",
                       verdict.quantity, verdict.reason);
    if (verdict.regressed) regressed.push_back(name);
  }
  out << fmt::format("  not judged: {}\n", report.not_judged.size());
  std::vector<std::string> blocking;
  for (const NotJudged& entry : report.not_judged) {
    out << fmt::format("    {:<{}}  {}\n", entry.variant, width, entry.why);
    if (entry.blocks) blocking.push_back(entry.variant);
  }
  if (!options.verbose && !report.judged.empty())
    out << "  (--verbose: each judged variant's whole comparison: families, waits, projections, outputs)\n";
  const std::string counts = fmt::format("{} of {} judged variants regressed", regressed.size(), report.judged.size());
  const std::string unjudged =
      fmt::format("{} variant(s) to judge could not be judged: {}{}", blocking.size(), join(blocking),
                  options.only.empty() ? " (--only a,b names the variants to judge)" : "");
  if (!regressed.empty())
    out << fmt::format("result: REGRESSED (exit 1): {}: {}{}\n", counts, join(regressed),
                       blocking.empty() ? "" : "; also, " + unjudged);
  else if (!blocking.empty())
    out << fmt::format("result: cannot judge (exit 2): {}; {}\n", unjudged, counts);
  else
    out << fmt::format("result: pass (exit 0): {}\n", counts);
}

// ---- the verdict for a pull request or a dashboard (--format) ----------------

const char* verdict_word(const RegressionVerdict& verdict) {
  return !verdict.judged ? "not judged" : verdict.regressed ? "REGRESSED" : "ok";
}

const char* result_word(int code) {
  return code == kCompareRegressed ? "REGRESSED" : code == kCompareCannotJudge ? "cannot judge" : "pass";
}

nlohmann::json number_or_null(double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); }

void write_gate_json(const GateReport& report, const Machine& base, const Machine& cand,
                     const CompareOptions& options, std::ostream& out) {
  using nlohmann::json;
  const auto machine = [](const Machine& m) {
    return json{{"gpu", m.gpu},
                {"gemm_tflops_burst", number_or_null(m.burst)},
                {"gemm_tflops_sustained", number_or_null(m.sustained)},
                {"sustained_sm_mhz", number_or_null(m.sustained_mhz)},
                {"sustained_power_w", number_or_null(m.sustained_w)},
                {"launch_list_version", m.launch_list},
                {"libraries", [&] {
                   json libraries = json::object();
                   for (const auto& [name, version] : m.libraries)
                     libraries[name] = version.empty() ? json(nullptr) : json(version);
                   return libraries;
                 }()}};
  };
  json doc = {{"baseline", options.baseline_file},
              {"candidate", options.file_a},
              {"max_regression", options.max_regression},
              {"alpha", options.alpha},
              {"normalize", options.normalize},
              {"machines", {{"baseline", machine(base)}, {"candidate", machine(cand)}}},
              {"file_problems", report.file_problems},
              {"judged", json::array()},
              {"not_judged", json::array()},
              {"result", result_word(report.exit_code())},
              {"exit", report.exit_code()}};
  for (const auto& [name, verdict] : report.judged)
    doc["judged"].push_back({{"variant", name},
                             {"verdict", verdict_word(verdict)},
                             {"quantity", verdict.quantity},
                             {"median_change", verdict.delta},
                             {"p_value", number_or_null(verdict.p_value)},
                             {"method", verdict.method},
                             {"reason", verdict.reason}});
  for (const NotJudged& entry : report.not_judged)
    doc["not_judged"].push_back({{"variant", entry.variant}, {"why", entry.why}, {"blocks", entry.blocks}});
  out << doc.dump(2) << "\n";
}

void write_gate_markdown(const GateReport& report, const Machine& base, const Machine& cand,
                         const CompareOptions& options, std::ostream& out) {
  out << fmt::format("**prefill-bench regression check** · candidate `{}` against baseline `{}` · allowed +{:.1f}%, "
                     "alpha {}{}\n\n",
                     options.file_a, options.baseline_file, 100 * options.max_regression, options.alpha,
                     options.normalize == "none" ? "" : ", normalized: " + options.normalize);
  out << "| machine | GPU | bf16 GEMM burst, TFLOP/s | sustained, TFLOP/s | at SM MHz |\n|---|---|---:|---:|---:|\n";
  for (const auto& [role, m] : {std::pair{"baseline", &base}, {"candidate", &cand}})
    out << fmt::format("| {} | {} | {} | {} | {} |\n", role, m->gpu.empty() ? "-" : m->gpu,
                       value_text(m->burst, "{:.1f}"), value_text(m->sustained, "{:.1f}"),
                       value_text(m->sustained_mhz, "{:.0f}"));
  out << "\n";
  std::vector<std::string> notes = software_changes(base, cand);
  for (const std::string& problem : report.file_problems) notes.push_back("cannot judge the files: " + problem);
  for (const std::string& note : notes) out << "- " << note << "\n";
  if (!notes.empty()) out << "\n";  // a list ends before a table starts
  if (!report.judged.empty() || !report.not_judged.empty()) {
    out << "| variant | verdict | median change | test | why |\n|---|---|---:|---|---|\n";
    for (const auto& [name, verdict] : report.judged)
      out << fmt::format("| {} | {} | {:+.2f}% | {} | {} |\n", name, verdict_word(verdict), 100 * verdict.delta,
                         verdict.method, verdict.reason);
    for (const NotJudged& entry : report.not_judged)
      out << fmt::format("| {} | not judged | | | {} |\n", entry.variant, entry.why);
    out << "\n";
  }
  out << fmt::format("**result: {} (exit {})**\n", result_word(report.exit_code()), report.exit_code());
}

void write_gate_csv(const GateReport& report, std::ostream& out) {
  const auto field = [](const std::string& text) {  // RFC 4180: quoted, quotes doubled
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  out << "variant,verdict,median_change,p_value,method,reason\n";
  for (const auto& [name, verdict] : report.judged)
    out << fmt::format("{},{},{},{},{},{}\n", field(name), verdict_word(verdict), verdict.delta,
                       std::isnan(verdict.p_value) ? std::string() : fmt::format("{}", verdict.p_value),
                       field(verdict.method), field(verdict.reason));
  for (const NotJudged& entry : report.not_judged)
    out << fmt::format("{},not judged,,,,{}\n", field(entry.variant), field(entry.why));
  for (const std::string& problem : report.file_problems) out << fmt::format(",cannot judge,,,,{}\n", field(problem));
}

}  // namespace

// The files' problems, else each variant to judge, candidate
// against baseline; then what was judged and what was not (compare.h).
int check_regressions(const CompareOptions& options, std::ostream& out) {
  PB_CHECK(options.file_b.empty(), "a regression check judges one candidate file against the baseline, not two");
  PB_CHECK(options.variant_a.empty() && options.variant_b.empty(),
           "a regression check names the variants to judge with --only a,b (each in both files), not --variants");
  const ReportFormat format = parse_report_format(options.format);
  const RunResult base = read_with_link_bytes(options.baseline_file);
  const RunResult cand = read_with_link_bytes(options.file_a);
  PB_CHECK(options.normalize == "none" || options.normalize == "sustained",
           fmt::format("--normalize '{}': give none or sustained", options.normalize));
  GateReport report;
  report.file_problems = file_problems(base, cand, options);
  const Machine base_machine = machine_of(base), cand_machine = machine_of(cand);
  const double scale = candidate_scale(base_machine, cand_machine, options, &report.file_problems);
  const std::string scale_note =
      scale == 1 ? "" : fmt::format("normalized to the baseline's sustained GEMM ceiling (B x {:.4f})", scale);
  if (report.file_problems.empty()) {
    for (const std::string& name : variants_to_judge(base, cand, options, &report)) {
      const VariantResult& a = require_variant(base, options.baseline_file, name);
      const VariantResult& b = require_variant(cand, options.file_a, name);
      const std::string cuts = cuts_difference(a, b);
      if (!cuts.empty()) {
        report.not_judged.push_back({name, cuts});
        continue;
      }
      std::ostringstream detail;  // printed with --verbose only, in text
      const RegressionVerdict verdict =
          print_comparison(Side{"A (baseline)", options.baseline_file, &base, &a},
                           Side{"B (candidate)", options.file_a, &cand, &b, scale, scale_note}, options,
                           options.verbose && format == ReportFormat::text ? out : detail);
      if (verdict.judged)
        report.judged.emplace_back(name, verdict);
      else
        report.not_judged.push_back({name, verdict.reason});
    }
  }
  if (format == ReportFormat::json)
    write_gate_json(report, base_machine, cand_machine, options, out);
  else if (format == ReportFormat::markdown)
    write_gate_markdown(report, base_machine, cand_machine, options, out);
  else if (format == ReportFormat::csv)
    write_gate_csv(report, out);
  else
    print_gate_summary(report, base_machine, cand_machine, options, out);
  return report.exit_code();
}

}  // namespace pb::compare_detail
