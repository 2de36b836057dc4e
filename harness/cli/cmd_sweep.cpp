// `prefill-bench sweep`: every point of a scenario's sweep (config/sweep.h),
// each as its own `run` under `mpirun -np <cp>` (or `plan`, with --plan, or
// where the point does not fit the GPU or its precision is planned only), gathered into one sweep file
// (results/sweep_file.h). docs/sweep.md is the user's guide.
//
// The sweep runs as one process and starts a child per point, its output in
// <file>.points/<id>.log and its results file beside it. A point already
// measured or planned in the file is kept (the sweep resumes), except a point
// planned by --plan when the sweep now runs points; a failed one is run again.
// A point that fails is recorded with what its child said, and the sweep goes on. Exit: 0 when every point is measured or
// planned; 3 when every failed point found no CUDA device; else 1.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "check.h"
#include "child_process.h"
#include "commands.h"
#include "compare.h"
#include "device_memory.h"
#include "efficiency.h"
#include "precision.h"
#include "run_info.h"
#include "sweep.h"
#include "sweep_file.h"
#include "text.h"

namespace pb {

namespace {

constexpr int kNoDeviceExit = 3;  // the README's exit-code table

std::string self_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("prefill-bench") : path.string();
}

// The child's arguments after the command: the scenario and every override.
std::vector<std::string> scenario_arguments(const SweepArgs& args, const SweepPointSpec& point) {
  std::vector<std::string> out = {args.scenario.path};
  for (const std::string& set : args.scenario.sets) out.insert(out.end(), {"--set", set});
  for (const std::string& set : point.sets) out.insert(out.end(), {"--set", set});
  if (!args.scenario.cuts.empty()) out.insert(out.end(), {"--cuts", args.scenario.cuts});
  if (!args.scenario.variants.empty()) out.insert(out.end(), {"--variants", join(args.scenario.variants, ",")});
  return out;
}

std::vector<std::string> plan_command(const SweepArgs& args, const SweepPointSpec& point, const std::string& file) {
  std::vector<std::string> argv = {self_executable(), "plan"};
  for (const std::string& arg : scenario_arguments(args, point)) argv.push_back(arg);
  if (!args.scenario.profile.empty()) argv.insert(argv.end(), {"--profile", args.scenario.profile});
  if (!args.scenario.calibrate.empty()) argv.insert(argv.end(), {"--calibrate", join(args.scenario.calibrate, ",")});
  argv.insert(argv.end(), {"-o", file, "--overwrite"});
  return argv;
}

std::vector<std::string> run_command(const SweepArgs& args, const SweepPointSpec& point, const std::string& file) {
  const char* mpirun = std::getenv("PB_MPIRUN");
  std::vector<std::string> argv = {mpirun && *mpirun ? mpirun : "mpirun", "--oversubscribe", "-np",
                                   std::to_string(point.cp), self_executable(), "run"};
  for (const std::string& arg : scenario_arguments(args, point)) argv.push_back(arg);
  argv.insert(argv.end(), {"-o", file, "--overwrite"});
  return argv;
}

// The first line of the log holding one of `marks`, "" when none does.
std::string line_with(const std::string& path, const std::vector<std::string>& marks) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    for (const std::string& mark : marks)
      if (line.find(mark) != std::string::npos) return line;
  return "";
}

// What a failed child said: its error line ("[rank r on host] error: ...", or a
// command's own "prefill-bench run: ..."), else the log's first line of words
// (mpirun's own complaint), else its last line.
std::string child_message(const std::string& log) {
  const std::string said = line_with(log, {"] error: ", "prefill-bench "});
  if (!said.empty()) return said;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);)
    if (std::any_of(line.begin(), line.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); }))
      return line;
  return last_line(log);
}

// Each variant's TTFT as efficiency.h takes it (the headline's median; a
// plan's planned one); variants without one are left out.
std::map<std::string, double> point_ttfts(const RunResult& run) {
  std::map<std::string, double> ttft;
  for (const VariantResult& variant : run.variants)
    if (const double ms = efficiency_of(run, variant).ttft_ms; ms > 0) ttft[variant.name] = ms;
  return ttft;
}

// "<variant> <ms> ms, ...", in the file's variant order.
std::string point_summary(const RunResult& run, const std::map<std::string, double>& ttft) {
  std::string text;
  for (const VariantResult& variant : run.variants)
    if (ttft.count(variant.name))
      text += fmt::format("{}{} {:.5g} ms", text.empty() ? "" : ", ", variant.name, ttft.at(variant.name));
  return text;
}

// One line per point that has a parallel efficiency (sweep_file.h).
void print_efficiencies(const std::vector<SweepPointRecord>& points) {
  bool any = false;
  for (const SweepPointRecord& p : points) {
    if (p.efficiency.empty()) continue;
    if (!any) std::printf("parallel efficiency over cp at each context, T(c0) c0 / (T(cp) cp):\n");
    any = true;
    std::string each;
    for (const auto& [variant, e] : p.efficiency) each += fmt::format("  {} {:.1f}%", variant, 100 * e);
    std::printf("  %-26s%s\n", p.id.c_str(), each.c_str());
  }
}

// The deepest rank's families of each variant (sweep_file.h): measured, the
// median superstep (compare.h); a plan, the roofline, and its calibrated
// families where it was calibrated.
std::vector<SweepFamilyRow> point_families(const RunResult& run) {
  std::vector<SweepFamilyRow> rows;
  for (const VariantResult& variant : run.variants) {
    std::map<int32_t, std::map<std::string, double>> per_rank;
    for (const Span& span : variant.spans) per_rank.emplace(span.rank, std::map<std::string, double>{});
    for (auto& [rank, times] : per_rank) times = family_times_us(variant, rank);
    for (const auto& [family, us] : per_rank[deepest_rank(per_rank)]) {
      const auto calibrated = run.numbers.find("calibrated_ms." + variant.name + "." + family);
      rows.push_back({variant.name, family, us / 1e3,
                      calibrated == run.numbers.end() ? kNoValue : calibrated->second});
    }
  }
  return rows;
}

// The sweep file: a new one, or the one there when it holds this sweep.
std::vector<SweepPointRecord> open_sweep_file(const Gang& gang, const SweepArgs& args, const Scenario& base,
                                              const std::string& path) {
  if (std::filesystem::exists(path) && !args.scenario.overwrite) {
    const RunResult existing = read_results(path);
    const auto text = [&](const char* key) {
      const auto found = existing.text.find(key);
      return found == existing.text.end() ? std::string() : found->second;
    };
    PB_CHECK(existing.kind == "sweep" && text("scenario_yaml") == base.text &&
                 text("scenario_overrides") == base.overrides,
             fmt::format("'{}' exists and holds {}; a sweep resumes only its own file: --overwrite starts it anew, "
                         "or -o names another",
                         path, existing.kind == "sweep" ? "another sweep (scenario or overrides differ)"
                                                        : "a '" + existing.kind + "' file"));
    return read_sweep_points(path);
  }
  if (args.scenario.overwrite) check_results_path(path, /*overwrite=*/true);
  RunResult root;
  root.kind = "sweep";
  root.complete = false;
  record_run_info(gang, args.scenario.command_line, root);
  record_scenario(base, root);
  root.text["sweep_mode"] = args.plan_only ? "plan" : "run";
  root.numbers["sweep_gpus"] = args.gpus;
  write_results(path, root, args.scenario.overwrite);
  return {};
}

}  // namespace

int cmd_sweep(const Gang& gang, const SweepArgs& args) {
  PB_CHECK(gang.size() == 1, "sweep runs as one process and starts an mpirun per point; run it without mpirun");
  const Scenario base = load_scenario_on_gang(gang, args.scenario);
  const std::vector<SweepPointSpec> points = sweep_points(base, args.gpus);
  for (const SweepPointSpec& point : points) {  // every point parses before any runs
    ScenarioOverrides overrides{args.scenario.sets, args.scenario.cuts, args.scenario.variants};
    overrides.sets.insert(overrides.sets.end(), point.sets.begin(), point.sets.end());
    try {
      parse_scenario(base.text, base.source, overrides);
    } catch (const Error& error) {
      throw Error(fmt::format("sweep point {}: {}", point.id, error.what()));
    }
  }
  const std::string path = output_path(args.scenario.output, base.name, "sweep");
  const std::vector<SweepPointRecord> earlier = open_sweep_file(gang, args, base, path);
  const std::string folder = beside_results(path, ".points");
  std::filesystem::create_directories(folder);

  // Kept from the file: measured points, and planned ones unless this sweep
  // runs points and the plan was asked for (not forced by the GPU's memory).
  std::map<std::string, SweepPointRecord> done;
  for (const SweepPointRecord& record : earlier)
    if (record.status == "measured" || (record.status == "planned" && (args.plan_only || !record.error.empty())))
      done[record.id] = record;
  std::printf("sweep %s: %zu points (%s), %zu in the file already; each point's output in %s/\n", base.name.c_str(),
              points.size(), args.plan_only ? "planned" : "run, or planned where they do not fit", done.size(),
              folder.c_str());
  std::fflush(stdout);

  size_t failed = 0, failed_no_device = 0, ran = 0;
  double seconds_spent = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const SweepPointSpec& point = points[i];
    const std::string head = fmt::format("[{}/{}] {}", i + 1, points.size(), point.id);
    if (done.count(point.id)) {
      std::printf("%s: %s earlier, kept\n", head.c_str(), done[point.id].status.c_str());
      continue;
    }
    const std::string file = folder + "/" + point.id + ".h5", log = folder + "/" + point.id + ".log";
    std::filesystem::remove(log);
    const auto start = std::chrono::steady_clock::now();
    SweepPointRecord record{point.id, point.context, point.cp, point.precision, "failed", ""};
    int code = 0;
    if (args.plan_only) {
      code = run_child(plan_command(args, point, file), log);
      if (code == 0) record.status = "planned";
    } else {
      code = run_child(run_command(args, point, file), log, {"NCCL_NVLS_ENABLE=0"});
      if (code == 0) {
        record.status = "measured";
      } else if (const std::string fit = line_with(log, {kDoesNotFitMessage, kPlannedOnlyMessage}); !fit.empty()) {
        record.error = fit;
        code = run_child(plan_command(args, point, file), log);
        if (code == 0) record.status = "planned";
      }
    }
    if (record.status == "failed") {
      record.error = fmt::format("exit {}: {}", code, child_message(log));
      ++failed;
      if (code == kNoDeviceExit) ++failed_no_device;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds_spent += seconds;
    ++ran;
    done[point.id] = record;
    const bool complete = done.size() == points.size() && failed == 0;
    const bool kept = record.status != "failed";
    const RunResult point_run = kept ? read_results(file) : RunResult{};
    if (kept) record.ttft_ms = point_ttfts(point_run);
    add_sweep_point(path, record, kept ? file : "", kept ? point_families(point_run) : std::vector<SweepFamilyRow>{},
                    complete);
    size_t left = 0;
    for (size_t j = i + 1; j < points.size(); ++j) left += done.count(points[j].id) ? 0 : 1;
    const std::string outcome = record.status == "failed" ? "FAILED, " + record.error
                                                          : record.status + ": " + point_summary(point_run, record.ttft_ms);
    std::printf("%s: %s (%.0f s; %zu left, about %.0f s more)\n", head.c_str(), outcome.c_str(), seconds, left,
                left * seconds_spent / double(ran));
    std::fflush(stdout);
  }
  print_efficiencies(read_sweep_points(path));
  std::printf("wrote %s: %zu points, %zu failed\n", path.c_str(), points.size(), failed);
  if (failed == 0) return 0;
  return failed == failed_no_device ? kNoDeviceExit : 1;
}

}  // namespace pb
