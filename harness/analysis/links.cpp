#include "links.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "check.h"
#include "compare_detail.h"
#include "cuts.h"
#include "plan.h"
#include "projection.h"
#include "text.h"

namespace pb {

namespace {

bool records_a_gang(const RunResult& run) { return run.kind == "run" || run.kind == "lane"; }

// The planned link bytes of every fabric launch of the variant, per rank and
// (layer, kernel), in launch order.
using PlannedBytes = std::map<std::pair<int32_t, std::string>, std::deque<double>>;

std::vector<PlannedBytes> planned_link_bytes(const Scenario& s, const CutSet& cuts, int version) {
  std::vector<PlannedBytes> ranks(size_t(s.cp));
  for (int rank = 0; rank < s.cp; ++rank)
    for (const Launch& l : plan_rank(s, cuts, rank, version).launches)
      if (l.family == "fabric") ranks[size_t(rank)][{l.layer, l.kernel}].push_back(span_bytes(l));
  return ranks;
}

// The variant's fabric spans with their planned link bytes; "" when done, else why not. A run
// (whole_plan) records every planned launch of each rank and rep, a lane the MLA block's.
std::string restore_variant(const Scenario& s, bool whole_plan, int version, VariantResult& v,
                            std::vector<double>& bytes) {
  // The cuts as the variant recorded them: a name such as "all" meant other cuts to older builds; the
  // launches in the file's form.
  const std::vector<PlannedBytes> planned = planned_link_bytes(s, CutSet::from_description(v.cuts), version);
  std::map<std::pair<int32_t, int32_t>, PlannedBytes> left;  // (rep, rank): the launches not yet matched
  bytes.assign(v.spans.size(), 0);
  for (size_t i = 0; i < v.spans.size(); ++i) {
    const Span& span = v.spans[i];
    bytes[i] = span.bytes;
    if (span.family != "fabric") continue;
    if (span.rank < 0 || span.rank >= s.cp)
      return fmt::format("variant '{}' span row {}: rank {} at cp {}", v.name, i, span.rank, s.cp);
    auto [it, added] = left.try_emplace({span.rep, span.rank});
    if (added) it->second = planned[size_t(span.rank)];
    std::deque<double>& queue = it->second[{span.layer, span.kernel}];
    if (queue.empty())
      return fmt::format("variant '{}' span row {} ({}, layer {}, rank {}): no such launch left in the plan", v.name,
                         i, span.kernel, span.layer, span.rank);
    bytes[i] = queue.front();
    queue.pop_front();
  }
  if (whole_plan)  // a run's rank rep holds every launch of its plan
    for (const auto& [rep_rank, launches] : left)
      for (const auto& [launch, queue] : launches)
        if (!queue.empty())
          return fmt::format("variant '{}' rep {} rank {}: {} planned {} launches of layer {} were not recorded",
                             v.name, rep_rank.first, rep_rank.second, queue.size(), launch.second, launch.first);
  return "";
}

double fabric_bytes_of_deepest(const VariantResult& v, int32_t rep) {
  std::map<int32_t, double> per_rank;
  for (const Span& s : v.spans)
    if (s.rep == rep && s.family == "fabric") per_rank[s.rank] += s.bytes;
  double most = 0;
  for (const auto& [rank, bytes] : per_rank) most = std::max(most, bytes);
  return most;
}

std::string change_text(double change) { return fmt::format("{:+.2f}%", 100 * change); }

}  // namespace

std::string fabric_span_bytes(const RunResult& run) {
  const auto found = run.text.find(kFabricSpanBytesKey);
  if (found != run.text.end()) return found->second;
  if (!records_a_gang(run)) return kFabricSpanBytesLink;  // plans always recorded the link's bytes
  return "the plan's copy cost, as files before link bytes recorded it";
}

bool restore_link_bytes(RunResult& run, const std::string& file) {
  if (!records_a_gang(run) || run.text.count(kFabricSpanBytesKey)) return false;
  Scenario scenario;
  std::string problem;
  if (!compare_detail::recorded_scenario(run, file, &scenario, &problem)) {
    run.text[kFabricSpanBytesKey] = "the plan's copy cost (" + problem + ")";
    return false;
  }
  std::vector<std::vector<double>> restored(run.variants.size());
  for (size_t v = 0; v < run.variants.size(); ++v) {
    std::string why;
    try {
      why = restore_variant(scenario, run.kind == "run", recorded_launch_list_version(run), run.variants[v],
                            restored[v]);
    } catch (const Error& error) {
      why = "variant '" + run.variants[v].name + "': " + error.what();
    }
    if (!why.empty()) {
      run.text[kFabricSpanBytesKey] = "the plan's copy cost (" + why + ")";
      return false;
    }
  }
  for (size_t v = 0; v < run.variants.size(); ++v) {
    VariantResult& variant = run.variants[v];
    for (size_t i = 0; i < restored[v].size(); ++i) variant.spans[i].bytes = restored[v][i];
    for (Projection& p : variant.projections)  // a link profile's projection re-times the restored bytes
      if (p.link != kMeasuredLink) {
        const bool slimmed = p.timeline.empty();
        p = project_variant(variant, p.link);
        if (slimmed) p.timeline.clear();
      }
  }
  run.text[kFabricSpanBytesKey] = kFabricSpanBytesRestored;
  return true;
}

RunResult read_with_link_bytes(const std::string& path) {
  RunResult run = read_results(path);
  restore_link_bytes(run, path);
  return run;
}

std::vector<LinkRow> link_rows(const RunResult& run, const std::string& file) {
  std::vector<LinkRow> rows;
  for (const VariantResult& v : run.variants) {
    if (!can_project(v)) continue;
    const Projection measured = project_variant(v, kMeasuredLink);
    const double link_mb = fabric_bytes_of_deepest(v, measured.rep) / 1e6;
    for (const std::string& link : projection_link_names()) {
      const Projection p = link == kMeasuredLink ? measured : project_variant(v, link);
      rows.push_back({v.name, link, p.link_source, p.ttft_ms,
                      measured.ttft_ms > 0 ? p.ttft_ms / measured.ttft_ms - 1 : 0, link_mb});
    }
  }
  PB_CHECK(!rows.empty(), fmt::format("'{}': no variant can be projected (it needs measured spans, and doorbells "
                                      "when it has several ranks)",
                                      file));
  return rows;
}

std::string link_table(const RunResult& run, const std::string& file, ReportFormat format) {
  const std::vector<LinkRow> rows = link_rows(run, file);
  const std::vector<std::string> links = projection_link_names();
  std::vector<std::string> variants;
  for (const LinkRow& row : rows)
    if (variants.empty() || variants.back() != row.variant) variants.push_back(row.variant);
  const auto ttft = [&](const std::string& variant, const std::string& link) -> const LinkRow& {
    return *std::find_if(rows.begin(), rows.end(),
                         [&](const LinkRow& r) { return r.variant == variant && r.link == link; });
  };
  const auto link_mb = [&](const std::string& variant) { return ttft(variant, kMeasuredLink).link_mb; };
  const auto source = [&](const std::string& link) { return ttft(variants.front(), link).link_source; };
  const std::string bytes_note = fabric_span_bytes(run);
  std::ostringstream out;
  if (format == ReportFormat::csv) {
    out << "file,variant,link,ttft_ms,change_pct,link_mb_busiest_rank,fabric_span_bytes\n";
    for (const LinkRow& row : rows)
      out << fmt::format("{},{},{},{:.4f},{:.4f},{:.4f},{}\n", csv_field(file), csv_field(row.variant), row.link,
                         row.ttft_ms, 100 * row.change, row.link_mb, csv_field(bytes_note));
    return out.str();
  }
  if (format == ReportFormat::json) {
    nlohmann::json doc = {{"file", file},           {"commit", commit_of(run)},
                          {"device", device_of(run)}, {"fabric_span_bytes", bytes_note},
                          {"links", nlohmann::json::array()}, {"variants", nlohmann::json::array()}};
    for (const std::string& link : links)
      doc["links"].push_back({{"link", link}, {"source", source(link)}});
    for (const std::string& variant : variants) {
      nlohmann::json v = {{"variant", variant}, {"link_mb_busiest_rank", link_mb(variant)}, {"ttft_ms", {}}};
      for (const std::string& link : links) v["ttft_ms"][link] = ttft(variant, link).ttft_ms;
      doc["variants"].push_back(std::move(v));
    }
    out << doc.dump(2) << "\n";
    return out.str();
  }
  const bool md = format == ReportFormat::markdown;
  if (md) {
    out << fmt::format("Projected gang TTFT of `{}` over each link ({}, {}); fabric span bytes: {}.\n\n", file,
                       device_of(run), commit_of(run), bytes_note);
    out << "| variant | link MB, busiest rank |";
    for (const std::string& link : links) out << " " << link << " |";
    out << "\n|---|---:|";
    for (size_t i = 0; i < links.size(); ++i) out << "---:|";
    out << "\n";
    for (const std::string& variant : variants) {
      out << fmt::format("| {} | {:.1f} |", variant, link_mb(variant));
      for (const std::string& link : links) {
        const LinkRow& r = ttft(variant, link);
        out << (link == kMeasuredLink ? fmt::format(" {:.1f} ms |", r.ttft_ms)
                                      : fmt::format(" {:.1f} ms ({}) |", r.ttft_ms, change_text(r.change)));
      }
      out << "\n";
    }
    return out.str();
  }
  out << fmt::format("{}: projected gang TTFT over each link, ms (change against the fabric as measured)\n", file);
  out << fmt::format("  fabric span bytes: {}\n", bytes_note);
  out << fmt::format("{:<14}{:>10}", "variant", "link MB");
  for (const std::string& link : links) out << fmt::format("{:>20}", link);
  out << "\n";
  for (const std::string& variant : variants) {
    out << fmt::format("{:<14}{:>10.1f}", variant, link_mb(variant));
    for (const std::string& link : links) {
      const LinkRow& r = ttft(variant, link);
      out << (link == kMeasuredLink ? fmt::format("{:>20.1f}", r.ttft_ms)
                                    : fmt::format("{:>11.1f} {:>8}", r.ttft_ms, change_text(r.change)));
    }
    out << "\n";
  }
  for (const std::string& link : links)
    if (link != kMeasuredLink) out << fmt::format("  {}: {}\n", link, source(link));
  out << "  (link MB: the bytes that cross the link in one superstep, on the rank with the most)\n";
  return out.str();
}

}  // namespace pb
