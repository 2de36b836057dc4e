#include "calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "check.h"
#include "stats.h"

namespace pb {

namespace {

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

// What a row's variant says about the state it was measured in.
struct RowState {
  bool usable = false;
  int cut_on = -1;           // 0 off, 1 on, -1 either
  std::string engine;        // the family's engine the row times; empty: any
  std::string block_engine;  // a MoE block's expert-GEMM engine; empty: not a MoE block
  bool fp8 = false;          // its tensor work ran in e4m3 ("fp8", "<engine>_fp8"); else bf16
};

bool is_engine_name(const std::string& v) {
  for (const char* e : {"native", "cudnn", "grouped", "loop", "cutlass"})
    if (v == e) return true;
  return false;
}

RowState row_state(const std::string& variant) {
  RowState st;
  if (variant == "bf16" || variant == "fp8") {  // the gemm benchmark: a GEMM in each precision
    st.usable = true;
    st.fp8 = variant == "fp8";
    return st;
  }
  const std::string fp8_suffix = "_fp8";  // the moe benchmark's fp8 expert engine: "cutlass_fp8"
  if (variant.size() > fp8_suffix.size() &&
      variant.compare(variant.size() - fp8_suffix.size(), fp8_suffix.size(), fp8_suffix) == 0 &&
      is_engine_name(variant.substr(0, variant.size() - fp8_suffix.size()))) {
    st.usable = true;
    st.engine = variant.substr(0, variant.size() - fp8_suffix.size());
    st.fp8 = true;
    return st;
  }
  if (variant == "baseline" || variant == "cut") {
    st.usable = true;
    st.cut_on = variant == "cut";
    return st;
  }
  if (is_engine_name(variant)) {
    st.usable = true;
    st.engine = variant;
    return st;
  }
  const size_t dot = variant.rfind('.');
  if (dot == std::string::npos) return st;
  const std::string block = variant.substr(0, dot), state = variant.substr(dot + 1);
  if (state != "none" && state != "all") return st;
  st.usable = true;
  st.cut_on = state == "all";
  // moe bench: "moe_block" is the grouped engine's block, "moe_block_<engine>" another's.
  if (block == "moe_block") st.block_engine = "grouped";
  else if (block.rfind("moe_block_", 0) == 0) st.block_engine = block.substr(10);
  return st;
}

// The variant measured with the cut on beside a cut-off one ("baseline" -> "cut",
// "moe_block.none" -> "moe_block.all"); empty when it has no such partner.
std::string cut_partner(const std::string& variant) {
  if (variant == "baseline") return "cut";
  const std::string none = ".none";
  if (variant.size() > none.size() && variant.compare(variant.size() - none.size(), none.size(), none) == 0)
    return variant.substr(0, variant.size() - none.size()) + ".all";
  return "";
}

std::string first_part(const std::string& kernel) { return kernel.substr(0, kernel.find('.')); }

// The cut whose kernels the family runs and a benchmark family measures, if any
// (the cut table's bench_family; the FMHA schedules and overlap change no kernel).
bool family_cut(const std::string& family, Cut* out) {
  for (const CutInfo& info : cut_table())
    if (*info.bench_family && info.family == family) {
      *out = info.id;
      return true;
    }
  return false;
}

// The benchmark's name for a planned launch where the two differ.
std::string bench_kernel_name(const std::string& kernel) { return kernel == "kda.forward" ? "kda.state" : kernel; }

std::string resolved(const std::string& engine, const std::string& auto_pick) {
  return engine == "auto" ? auto_pick : engine;
}

struct Match {
  bool found = false;
  double fraction = 0;
  bool same_work = false;
  std::string source;  // "<file> <level>"
};

class Matcher {
 public:
  Matcher(const Scenario& s, const CutSet& cuts, int rank, const Calibration& cal, const GpuProfile& profile)
      : s_(s), cuts_(cuts), rank_(rank), cal_(cal), profile_(profile),
        fmha_engine_(resolved(s.fmha, "cudnn")), moe_engine_(resolved(s.moe_gemm, "cutlass")) {
    all_on_ = true;  // a cut that only reorders launches runs no kernel beside another: it does not count
    for (const CutInfo& info : cut_table())
      all_on_ = all_on_ && (cuts[info.id] || info.plan_effect == PlanEffect::launch_order ||
                            !cut_applies(info.id, s.precision));
    for (const auto& r : cal.rows) states_.push_back(row_state(r.row.variant));
  }

  // The launch's calibrated time in microseconds; `source` names the rows, empty when none matched.
  double time_us(const Launch& l, std::string* source) {
    const double roof = roofline_us(l.cost, profile_);
    const Match m = match(l, roof);
    if (!m.found) {
      source->clear();
      return roof;
    }
    *source = m.source;
    return roof * (m.same_work ? work_ratio(l.family) : 1.0) / m.fraction;
  }

 private:
  bool acceptable(size_t i, const Launch& l, bool cut_on) const {
    const CalibrationRow& r = cal_.rows[i];
    const RowState& st = states_[i];
    if (!st.usable || r.row.family != l.family || r.row.median_us <= 0) return false;
    if (st.cut_on >= 0 && st.cut_on != int(cut_on)) return false;
    if (!st.engine.empty() && st.engine != engine_for(l.family)) return false;
    if (!st.block_engine.empty() && st.block_engine != moe_engine_) return false;
    // tensor work in the launch's precision; memory-bound and f32 rows in either
    if ((l.cost.unit == Unit::tensor && st.fp8) || (l.cost.unit == Unit::tensor_fp8 && !st.fp8)) return false;
    if (l.cost.unit == Unit::tensor_fp4) return false;  // no bench measures fp4: the roofline stands
    return true;
  }

  std::string engine_for(const std::string& family) const {
    if (family == "fmha") return fmha_engine_;
    if (family == "moe_gemm") return moe_engine_;
    if (family == "kda") return "native";
    return "";
  }

  double row_roofline(const CalibrationRow& r, Unit unit) const {
    return roofline_us(Cost{r.row.bytes, r.row.flops, unit}, profile_);
  }

  Match pooled(const std::vector<const CalibrationRow*>& rows, Unit unit, const char* level) const {
    Match m;
    double roof = 0, measured = 0;
    std::set<std::string> files;
    for (const auto* r : rows) {
      roof += row_roofline(*r, unit);
      measured += r->row.median_us;
      m.same_work = m.same_work || r->same_work;
      files.insert(r->file);
    }
    if (roof <= 0 || measured <= 0) return m;
    m.found = true;
    m.fraction = roof / measured;
    for (const auto& f : files) m.source += (m.source.empty() ? "" : ", ") + f;
    m.source += std::string(" ") + level;
    return m;
  }

  Match match(const Launch& l, double launch_roofline) const {
    Cut cut = Cut::land;
    const bool cut_on = family_cut(l.family, &cut) ? cuts_[cut] : all_on_;
    const std::string name = bench_kernel_name(l.kernel), with_case = name + ".", op = first_part(name);
    std::vector<const CalibrationRow*> by_name, by_case, by_op;
    for (size_t i = 0; i < cal_.rows.size(); ++i) {
      if (!acceptable(i, l, cut_on)) continue;
      const CalibrationRow* r = &cal_.rows[i];
      const std::string& k = r->row.kernel;
      if (k == name) by_name.push_back(r);
      else if (k.rfind(with_case, 0) == 0) by_case.push_back(r);
      else if (first_part(k) == op) by_op.push_back(r);
    }
    if (!by_name.empty()) return pooled(by_name, l.cost.unit, "name");
    if (!by_case.empty()) {
      auto distance = [&](const CalibrationRow* r) {
        const double roof = row_roofline(*r, l.cost.unit);
        return roof > 0 && launch_roofline > 0 ? std::abs(std::log(roof / launch_roofline)) : 1e300;
      };
      const auto nearest = std::min_element(by_case.begin(), by_case.end(),
                                            [&](auto* a, auto* b) { return distance(a) < distance(b); });
      return pooled({*nearest}, l.cost.unit, "case");
    }
    if (!by_op.empty()) return pooled(by_op, l.cost.unit, "family");
    return {};
  }

  // The family's roofline on this rank with its cut on over that with it off.
  double work_ratio(const std::string& family) {
    auto hit = ratios_.find(family);
    if (hit != ratios_.end()) return hit->second;
    Cut cut = Cut::land;
    double ratio = 1;
    if (family_cut(family, &cut) && !cuts_[cut]) {
      CutSet on = cuts_;
      on.set(cut, true);
      const double off_us = family_roofline(cuts_, family), on_us = family_roofline(on, family);
      if (off_us > 0) ratio = on_us / off_us;
    }
    return ratios_[family] = ratio;
  }

  double family_roofline(const CutSet& cuts, const std::string& family) const {
    double us = 0;
    for (const auto& l : plan_rank(s_, cuts, rank_).launches)
      if (l.family == family) us += roofline_us(l.cost, profile_);
    return us;
  }

  const Scenario& s_;
  CutSet cuts_;
  int rank_;
  const Calibration& cal_;
  const GpuProfile& profile_;
  std::string fmha_engine_, moe_engine_;
  bool all_on_ = false;
  std::vector<RowState> states_;  // of cal_.rows
  std::map<std::string, double> ratios_;
};

std::string text_or(const RunResult& r, const std::string& key) {
  auto it = r.text.find(key);
  return it == r.text.end() ? "" : it->second;
}

}  // namespace

Calibration make_calibration(const std::vector<std::pair<std::string, RunResult>>& files) {
  Calibration cal;
  for (const auto& [name, result] : files) {
    PB_CHECK(!result.bench.empty(), "'" + name + "' (kind '" + result.kind +
                                        "') has no /bench rows; --calibrate takes the files of prefill-bench "
                                        "kernels, fmha, kda or moe");
    std::vector<CalibrationRow> rows;
    for (const auto& row : result.bench) {
      CalibrationRow r{row, file_name(name), false};
      const std::string partner = cut_partner(row.variant);
      for (const auto& other : result.bench)
        r.same_work = r.same_work || (!partner.empty() && other.variant == partner && other.family == row.family &&
                                      other.kernel == row.kernel && other.bytes == row.bytes);
      rows.push_back(r);
    }
    auto replaced = [&](const CalibrationRow& old) {
      for (const auto& r : rows)
        if (r.row.family == old.row.family && r.row.kernel == old.row.kernel && r.row.variant == old.row.variant)
          return true;
      return false;
    };
    cal.rows.erase(std::remove_if(cal.rows.begin(), cal.rows.end(), replaced), cal.rows.end());
    cal.rows.insert(cal.rows.end(), rows.begin(), rows.end());
    cal.files.push_back(name);
  }
  return cal;
}

Calibration load_calibration(const std::vector<std::string>& paths) {
  std::vector<std::pair<std::string, RunResult>> files;
  for (const auto& p : paths) {
    files.emplace_back(p, read_results(p));
    for (const BenchRow& row : files.back().second.bench)
      PB_CHECK(!row.failed(), "--calibrate: " + p + ": row " + row.kernel + " (" + row.variant +
                                  ") failed its own check (wrong " + std::to_string(row.wrong) + ", error " +
                                  std::to_string(row.error) + " against floor " + std::to_string(row.error_floor) +
                                  "): a benchmark that failed does not calibrate a plan");
  }
  return make_calibration(files);
}

RankCalibration calibrate_rank(const Scenario& s, const CutSet& cuts, int rank, const Calibration& cal,
                               const GpuProfile& profile, const LinkProfile& link) {
  const RankPlan plan = plan_rank(s, cuts, rank);
  const std::vector<Span> spans = plan_spans(plan, profile, link);
  Matcher matcher(s, cuts, rank, cal, profile);
  RankCalibration out;
  out.rank = rank;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Launch& l = plan.launches[i];
    Span span = spans[i];
    FamilyCalibration& fam = out.families[l.family];
    fam.roofline_ms += span.time_us / 1e3;
    ++fam.launches;
    if (l.family == "fabric") {
      fam.sources.insert("link " + link.name);
    } else {
      std::string source;
      span.time_us = matcher.time_us(l, &source);
      if (source.empty()) ++fam.uncalibrated;
      else fam.sources.insert(source);
    }
    fam.calibrated_ms += span.time_us / 1e3;
    out.roofline_ms += spans[i].time_us / 1e3;
    out.calibrated_ms += span.time_us / 1e3;
    out.spans.push_back(std::move(span));
  }
  return out;
}

RunResult read_measured_run(const std::string& path, const Scenario& s) {
  RunResult run = read_results(path);
  PB_CHECK(run.kind == "run", "'" + path + "' is a " + run.kind + " file; --measured takes a file of prefill-bench run");
  Scenario m;
  try {
    m = parse_scenario(text_or(run, "scenario_yaml"), path + ":scenario_yaml",
                       overrides_from_text(text_or(run, "scenario_overrides")));
  } catch (const Error& e) {
    throw_error(__FILE__, __LINE__, "'" + path + "': its scenario does not parse: " + e.what());
  }
  auto shape = [](const Scenario& x) {
    return fmt::format("'{}' cp {} context {} bucket {}", x.name, x.cp, x.context, x.bucket);
  };
  PB_CHECK(shape(m) == shape(s), "'" + path + "' measured scenario " + shape(m) + "; the plan is of " + shape(s));
  return run;
}

MeasuredSuperstep measured_superstep(const RunResult& run, const std::string& variant) {
  const VariantResult* v = run.find_variant(variant);
  if (!v) {
    std::string present;
    for (const auto& x : run.variants) present += (present.empty() ? "" : ", ") + x.name;
    throw_error(__FILE__, __LINE__, "the measured run has no variant '" + variant + "'; it has: " + present);
  }
  PB_CHECK(!v->ttft_ms.empty(), "the measured run's variant '" + variant + "' has no TTFT samples");
  MeasuredSuperstep m;
  m.reps = v->ttft_ms.size();
  m.ttft_ms = median(v->ttft_ms);
  m.projected_ms = std::nan("");
  if (const Projection* p = v->projection("measured")) m.projected_ms = p->ttft_ms, m.projected_link = p->link;
  std::map<int, std::map<int, double>> rank_ms;  // rank -> rep -> ms
  std::map<int, std::map<std::string, std::map<int, double>>> family_ms;  // rank -> family -> rep -> ms
  std::set<int> reps;
  for (const auto& sp : v->spans) {
    if (sp.rep < 0) continue;
    reps.insert(sp.rep);
    rank_ms[sp.rank][sp.rep] += sp.time_us / 1e3;
    family_ms[sp.rank][sp.family][sp.rep] += sp.time_us / 1e3;
  }
  PB_CHECK(!reps.empty(), "the measured run's variant '" + variant + "' has no measured spans");
  auto median_over_reps = [&](const std::map<int, double>& per_rep) {
    std::vector<double> values;
    for (int rep : reps) {
      auto it = per_rep.find(rep);
      values.push_back(it == per_rep.end() ? 0 : it->second);
    }
    return median(values);
  };
  for (const auto& [rank, per_rep] : rank_ms) {
    const double ms = median_over_reps(per_rep);
    if (ms > m.span_ms) m.span_ms = ms, m.deep_rank = rank;
  }
  for (const auto& [family, per_rep] : family_ms[m.deep_rank]) m.family_ms[family] = median_over_reps(per_rep);
  return m;
}

std::string format_calibration_table(const std::vector<RankCalibration>& ranks, const std::string& title,
                                     const MeasuredSuperstep* measured) {
  PB_CHECK(!ranks.empty(), "format_calibration_table: no ranks");
  const RankCalibration& deep = *std::max_element(
      ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.calibrated_ms < b.calibrated_ms; });
  std::map<std::string, FamilyCalibration> families = deep.families;
  if (measured)
    for (const auto& [family, ms] : measured->family_ms) families[family];  // measured only: shown with zeros
  std::vector<std::pair<std::string, FamilyCalibration>> rows(families.begin(), families.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.calibrated_ms > b.second.calibrated_ms; });

  auto error = [](double predicted, double actual) {
    return actual > 0 ? fmt::format("{:+.1f}%", 100 * (predicted / actual - 1)) : std::string("-");
  };
  auto measured_ms = [&](const std::string& family) {
    auto it = measured->family_ms.find(family);
    return it == measured->family_ms.end() ? 0.0 : it->second;
  };
  std::string out = fmt::format("{}\ncalibrated ms per superstep, rank {} (deepest calibrated): roofline / measured "
                                "fraction of the ceiling\n",
                                title, deep.rank);
  out += fmt::format("{:<14}{:>10}{:>10}{:>12}", "family", "roofline", "fraction", "calibrated");
  if (measured) out += fmt::format("{:>12}{:>9}", fmt::format("measured r{}", measured->deep_rank), "error");
  out += "  fraction from\n";
  std::string uncalibrated;
  for (const auto& [family, f] : rows) {
    const std::string fraction = f.calibrated_ms > 0 ? fmt::format("{:.3f}", f.roofline_ms / f.calibrated_ms) : "-";
    out += fmt::format("{:<14}{:>10.2f}{:>10}{:>12.2f}", family, f.roofline_ms, fraction, f.calibrated_ms);
    if (measured) out += fmt::format("{:>12.2f}{:>9}", measured_ms(family), error(f.calibrated_ms, measured_ms(family)));
    std::string from;
    for (const auto& src : f.sources) from += (from.empty() ? "" : "; ") + src;
    if (f.uncalibrated > 0)
      from += fmt::format("{}{} of {} launches uncalibrated", from.empty() ? "" : "; ", f.uncalibrated, f.launches);
    out += "  " + from + "\n";
    if (f.uncalibrated > 0) uncalibrated += (uncalibrated.empty() ? "" : ", ") + family;
  }
  out += fmt::format("{:<14}{:>10.2f}{:>10.3f}{:>12.2f}", "total", deep.roofline_ms,
                     deep.roofline_ms / deep.calibrated_ms, deep.calibrated_ms);
  if (measured) {
    out += fmt::format("{:>12.2f}{:>9}  span sum\n", measured->span_ms, error(deep.calibrated_ms, measured->span_ms));
    out += fmt::format("{:<46}{:>12.2f}{:>9}  TTFT, median of {} rep(s)\n", "superstep", measured->ttft_ms,
                       error(deep.calibrated_ms, measured->ttft_ms), measured->reps);
    if (!std::isnan(measured->projected_ms))
      out += fmt::format("{:<46}{:>12.2f}{:>9}  the gang's TTFT replayed from the spans (link {}): with ranks "
                         "taking turns, the one to read\n",
                         "gang, projected", measured->projected_ms, error(deep.calibrated_ms, measured->projected_ms),
                         measured->projected_link);
  } else {
    out += "\n";
  }
  if (ranks.size() > 1) {
    out += "calibrated ms per rank:";
    for (const auto& r : ranks) out += fmt::format(" {:.2f}", r.calibrated_ms);
    out += "\n";
  }
  if (!uncalibrated.empty()) out += "no benchmark row for some launches of: " + uncalibrated + " (their roofline kept)\n";
  return out;
}

}  // namespace pb
