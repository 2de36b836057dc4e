#include "report.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "check.h"
#include "compare_detail.h"
#include "efficiency.h"
#include "headline.h"
#include "stats.h"

namespace pb {

namespace {

using json = nlohmann::json;

struct Source {
  std::string path;
  RunResult run;
};

// One variant of one file, against its reference (none for the reference itself).
struct Row {
  const Source* source = nullptr;
  const VariantResult* variant = nullptr;
  const Source* ref_source = nullptr;
  const VariantResult* reference = nullptr;
  HeadlineTtft ttft;
  double median_ms = std::nan("");
  double saving_ms = std::nan(""), saving_pct = std::nan("");
  std::string outputs = "-";  // against the reference
  std::string cold_start;     // compare_detail.h: why it may hold a cold start, "" none seen
  std::map<int32_t, std::map<std::string, double>> family_ms;  // rank -> family -> ms
};

double median_or_nan(const std::vector<double>& v) { return v.empty() ? std::nan("") : median(v); }

std::string outputs_text(const OutputsVerdict& v) {
  if (!v.recorded) return "not compared";
  if (v.bit_identical) return "bit-identical";
  return fmt::format("differ (hidden rel-L2 {:.3g}; first token {})", v.hidden_rel_l2,
                     v.token_a == v.token_b ? "agrees" : "differs");
}

Row make_row(const Source& source, const VariantResult& variant, const Source* ref_source,
             const VariantResult* reference) {
  Row row;
  row.source = &source;
  row.variant = &variant;
  row.ref_source = ref_source;
  row.reference = reference;
  row.ttft = headline_ttft(source.run, variant);
  row.median_ms = median_or_nan(row.ttft.ms);
  row.cold_start = compare_detail::cold_start_of(source.run, source.path, variant);
  std::set<int32_t> ranks;
  for (const Span& span : variant.spans) ranks.insert(span.rank);
  for (int32_t rank : ranks)
    for (const auto& [family, us] : family_times_us(variant, rank)) row.family_ms[rank][family] = us / 1e3;
  if (reference && reference != &variant) {
    const double base = median_or_nan(headline_ttft(ref_source->run, *reference).ms);
    row.saving_ms = base - row.median_ms;
    row.saving_pct = 100.0 * row.saving_ms / base;
    row.outputs = outputs_text(compare_outputs(reference->outputs, variant.outputs));
  }
  return row;
}

std::string text_or(const RunResult& run, const std::string& key, const std::string& otherwise) {
  const auto it = run.text.find(key);
  return it == run.text.end() || it->second.empty() ? otherwise : it->second;
}



struct Report {
  std::string mode;
  std::vector<const Source*> sources;
  std::vector<Row> rows;
};

Report build(const CompareOptions& options, std::vector<Source>& sources) {
  Report report;
  sources.push_back({options.file_a, compare_detail::read_comparable(options.file_a)});
  if (!options.file_b.empty()) sources.push_back({options.file_b, compare_detail::read_comparable(options.file_b)});
  for (const Source& s : sources) report.sources.push_back(&s);
  const Source& a = sources.front();
  using compare_detail::require_variant;
  if (options.file_b.empty() && options.variant_a.empty() && options.variant_b.empty()) {
    report.mode = "savings";
    const VariantResult& ref = require_variant(a.run, a.path, options.reference);
    for (const VariantResult& v : a.run.variants) report.rows.push_back(make_row(a, v, &a, &ref));
  } else if (options.file_b.empty()) {
    PB_CHECK(!options.variant_a.empty() && !options.variant_b.empty(),
             "comparing inside one file needs two variant names (or give a second file)");
    report.mode = "variants";
    const VariantResult& va = require_variant(a.run, a.path, options.variant_a);
    const VariantResult& vb = require_variant(a.run, a.path, options.variant_b);
    report.rows.push_back(make_row(a, va, nullptr, nullptr));
    report.rows.push_back(make_row(a, vb, &a, &va));
  } else {
    report.mode = "files";
    const Source& b = sources.back();
    for (const auto& [name_a, name_b] : compare_detail::pair_variants(a.run, b.run, options)) {
      const VariantResult& va = require_variant(a.run, a.path, name_a);
      const VariantResult& vb = require_variant(b.run, b.path, name_b);
      report.rows.push_back(make_row(a, va, nullptr, nullptr));
      report.rows.push_back(make_row(b, vb, &a, &va));
    }
  }
  return report;
}

// "land, conv" from "land=on conv=off ..."; "none" when no cut is on.
std::string cuts_on_text(const std::string& described) {
  std::string on;
  for (const std::string& name : cut_names_on(described)) on += (on.empty() ? "" : ", ") + name;
  return on.empty() ? "none" : on;
}

std::string ms_text(double ms) { return std::isnan(ms) ? "-" : fmt::format("{:.1f}", ms); }
std::string pct_text(double pct) { return std::isnan(pct) ? "-" : fmt::format("{:+.1f}%", -pct); }

std::string row_label(const Report& report, const Row& row) {
  return report.mode == "files" ? fmt::format("{} [{}]", row.source->path, row.variant->name) : row.variant->name;
}

void write_markdown(const Report& report, std::ostream& out) {
  out << "**prefill-bench compare**";
  for (const Source* s : report.sources)
    out << fmt::format(" · `{}` ({}, commit {})", s->path, device_of(s->run), commit_of(s->run));
  out << "\n\n";
  if (report.mode == "savings" && !report.rows.empty() && report.rows.front().reference)
    out << fmt::format("Savings against `{}`.\n\n", report.rows.front().reference->name);
  const TtftForm form = report.rows.empty() ? TtftForm::measured : report.rows.front().ttft.form;
  out << fmt::format("| variant | cuts | {} ms (median) | reps | saving ms | change | outputs |\n",
                     ttft_form_label(form));
  out << "|---|---|---:|---:|---:|---:|---|\n";
  std::string cold_notes;
  for (const Row& row : report.rows) {
    out << fmt::format("| {}{} | {} | {} | {} | {} | {} | {} |\n", row_label(report, row),
                       row.cold_start.empty() ? "" : " (cold)", cuts_on_text(row.variant->cuts),
                       ms_text(row.median_ms), row.ttft.ms.size(), ms_text(row.saving_ms), pct_text(row.saving_pct),
                       row.outputs);
    if (!row.cold_start.empty())
      cold_notes += fmt::format("\n(cold) `{}` may hold a cold start: it {}; savings against it include that.\n",
                                row.variant->name, row.cold_start);
  }
  out << cold_notes;
  if (report.rows.empty()) return;
  // Families of the deep rank of the first row, ms per superstep, one column per row.
  const int32_t rank = deepest_rank(report.rows.front().family_ms);
  std::map<std::string, double> order;
  for (const auto& [family, ms] : report.rows.front().family_ms.count(rank) ? report.rows.front().family_ms.at(rank)
                                                                            : std::map<std::string, double>{})
    order[family] = ms;
  for (const Row& row : report.rows)
    if (row.family_ms.count(rank))
      for (const auto& [family, ms] : row.family_ms.at(rank)) order.emplace(family, 0.0);
  std::vector<std::pair<std::string, double>> families(order.begin(), order.end());
  std::stable_sort(families.begin(), families.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  const bool planned = report.rows.front().ttft.form == TtftForm::planned;
  out << fmt::format("\nrank {} (the deepest of the first variant), {}ms per superstep by family:\n\n| family |", rank,
                     planned ? "the roofline's " : "");
  for (const Row& row : report.rows) out << " " << row_label(report, row) << " |";
  out << "\n|---|";
  for (size_t i = 0; i < report.rows.size(); ++i) out << "---:|";
  out << "\n";
  for (const auto& [family, first] : families) {
    out << "| " << family << " |";
    for (const Row& row : report.rows) {
      double ms = std::nan("");
      if (row.family_ms.count(rank) && row.family_ms.at(rank).count(family)) ms = row.family_ms.at(rank).at(family);
      out << " " << ms_text(ms) << " |";
    }
    out << "\n";
  }
}


std::string csv_number(double x) { return std::isnan(x) ? "" : fmt::format("{:.4f}", x); }

void write_csv(const Report& report, std::ostream& out) {
  out << "file,variant,cuts,ttft_form,ttft_ms,reps,saving_ms,saving_pct,outputs,commit,device,rank,family,ms\n";
  for (const Row& row : report.rows) {
    const std::string head =
        fmt::format("{},{},{},{},{},{},{},{},{},{},{}", csv_field(row.source->path), csv_field(row.variant->name),
                    csv_field(row.variant->cuts), ttft_form_name(row.ttft.form), csv_number(row.median_ms),
                    row.ttft.ms.size(), csv_number(row.saving_ms), csv_number(row.saving_pct),
                    csv_field(row.outputs), csv_field(commit_of(row.source->run)),
                    csv_field(device_of(row.source->run)));
    if (row.family_ms.empty()) out << head << ",,,\n";
    for (const auto& [rank, families] : row.family_ms)
      for (const auto& [family, ms] : families)
        out << head << "," << rank << "," << csv_field(family) << "," << csv_number(ms) << "\n";
  }
}

json number(double x) { return std::isnan(x) ? json(nullptr) : json(x); }

void write_json(const Report& report, std::ostream& out) {
  json doc;
  doc["mode"] = report.mode;
  doc["files"] = json::array();
  for (const Source* s : report.sources)
    doc["files"].push_back({{"path", s->path}, {"commit", commit_of(s->run)}, {"device", device_of(s->run)},
                            {"kind", s->run.kind}, {"complete", s->run.complete}});
  doc["variants"] = json::array();
  for (const Row& row : report.rows) {
    json v = {{"file", row.source->path},
              {"variant", row.variant->name},
              {"cuts", row.variant->cuts},
              {"ttft_form", ttft_form_name(row.ttft.form)},
              {"ttft_ms", number(row.median_ms)},
              {"ttft_samples_ms", row.ttft.ms},
              {"saving_ms", number(row.saving_ms)},
              {"saving_pct", number(row.saving_pct)},
              {"outputs", row.outputs},
              {"cold_start", row.cold_start.empty() ? json(nullptr) : json(row.cold_start)}};
    const Efficiency e = efficiency_of(row.source->run, *row.variant);
    v["model_flops"] = e.model_flops;
    v["mfu"] = {{"bf16_datasheet", number(e.mfu_bf16_datasheet)}, {"fp8_datasheet", number(e.mfu_fp8_datasheet)},
                {"burst", number(e.mfu_burst)}, {"sustained", number(e.mfu_sustained)}, {"profile", e.profile},
                {"gpus", e.gpus}};
    v["reference"] = row.reference ? json{{"file", row.ref_source->path}, {"variant", row.reference->name}}
                                   : json(nullptr);
    v["families"] = json::array();
    for (const auto& [rank, families] : row.family_ms)
      for (const auto& [family, ms] : families) v["families"].push_back({{"rank", rank}, {"family", family}, {"ms", ms}});
    doc["variants"].push_back(std::move(v));
  }
  out << doc.dump(2) << "\n";
}

}  // namespace

std::string commit_of(const RunResult& run) {
  std::string sha = text_or(run, "git_sha", "unknown");
  if (text_or(run, "git_dirty", "false") == "true") sha += " (dirty)";
  return sha;
}

std::string device_of(const RunResult& run) {
  const std::string name = gpu_name(run);
  if (!name.empty()) return name;
  const auto profile = run.text.find("gpu_profile");  // a plan: the profile it planned for
  return profile != run.text.end() ? "planned for the " + profile->second + " profile" : "unknown";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

ReportFormat parse_report_format(const std::string& text) {
  if (text == "text") return ReportFormat::text;
  if (text == "markdown") return ReportFormat::markdown;
  if (text == "csv") return ReportFormat::csv;
  if (text == "json") return ReportFormat::json;
  throw Error(fmt::format("--format '{}': allowed: text, markdown, csv, json", text));
}

void write_report(const CompareOptions& options, ReportFormat format, std::ostream& out) {
  PB_CHECK(format != ReportFormat::text, "write_report: the text report is run_compare's");
  PB_CHECK(options.baseline_file.empty(), "--format markdown, csv and json report comparisons; the regression gate "
                                          "(--baseline) prints text");
  std::vector<Source> sources;
  sources.reserve(2);
  const Report report = build(options, sources);
  if (format == ReportFormat::markdown) write_markdown(report, out);
  if (format == ReportFormat::csv) write_csv(report, out);
  if (format == ReportFormat::json) write_json(report, out);
}

}  // namespace pb
