// results_reader_probe: the reading paths of `prefill-bench compare`, `trace`,
// `slim` and `plan --calibrate/--measured`, built from the host libraries only
// (no MPI, no CUDA), so that test/scripts/test_fuzz_readers.py can run them on
// damaged files under AddressSanitizer and UndefinedBehaviorSanitizer.
//
//   results_reader_probe compare A.h5 [B.h5] [--baseline BASE.h5]
//   results_reader_probe trace FILE.h5 -o OUT.json [--variant V]
//   results_reader_probe slim FILE.h5 -o OUT.h5
//   results_reader_probe plan SCENARIO.yaml [--set k=v]... --calibrate A.h5[,B.h5] [--measured RUN.h5]
//
// Each calls the library functions its command calls, in the same order, and
// exits as the command does: 0, 1 (the gate: regressed), or 2 with one line
// "results_reader_probe: error: <what>" on stderr (outputs are overwritten).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "calibration.h"
#include "check.h"
#include "compare.h"
#include "profile.h"
#include "results.h"
#include "scenario.h"
#include "trace.h"

namespace {

struct Args {
  std::vector<std::string> positional;
  std::string output, baseline, variant, measured;
  std::vector<std::string> sets, calibrate;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 2; i < argc; ++i) {
    const std::string word = argv[i];
    const auto value = [&]() -> std::string {
      PB_CHECK(i + 1 < argc, word + " takes a value");
      return argv[++i];
    };
    if (word == "-o" || word == "--output") args.output = value();
    else if (word == "--baseline") args.baseline = value();
    else if (word == "--variant") args.variant = value();
    else if (word == "--measured") args.measured = value();
    else if (word == "--set") args.sets.push_back(value());
    else if (word == "--calibrate") args.calibrate = split_commas(value());
    else if (word == "--overwrite") continue;  // always
    else args.positional.push_back(word);
  }
  return args;
}

int compare(const Args& args) {
  PB_CHECK(!args.positional.empty() && args.positional.size() <= 2, "compare A.h5 [B.h5] [--baseline BASE.h5]");
  pb::CompareOptions options;
  options.file_a = args.positional[0];
  if (args.positional.size() > 1) options.file_b = args.positional[1];
  options.baseline_file = args.baseline;
  std::ostringstream out;  // printed, so that every line is formatted
  const int code = pb::run_compare(options, out);
  std::fwrite(out.str().data(), 1, out.str().size(), stdout);
  return code;
}

int trace(const Args& args) {
  PB_CHECK(args.positional.size() == 1 && !args.output.empty(), "trace FILE.h5 -o OUT.json");
  pb::TraceOptions options;
  options.variant = args.variant;
  const pb::RunResult result = pb::read_results(args.positional[0]);
  std::string json;
  try {
    json = pb::trace_json(result, options);
  } catch (const pb::Error& error) {  // as cmd_trace: name the file
    throw pb::Error("'" + args.positional[0] + "': " + error.what());
  }
  pb::write_trace(args.output, json, /*overwrite=*/true);
  std::printf("wrote %s\n", args.output.c_str());
  return 0;
}

int slim(const Args& args) {
  PB_CHECK(args.positional.size() == 1 && !args.output.empty(), "slim FILE.h5 -o OUT.h5");
  PB_CHECK(std::filesystem::weakly_canonical(args.output) != std::filesystem::weakly_canonical(args.positional[0]),
           "slim: the output is the input");
  pb::RunResult result = pb::read_results(args.positional[0]);
  pb::drop_projection_timelines(result);
  pb::write_results(args.output, result, /*overwrite=*/true);
  std::printf("wrote %s\n", args.output.c_str());
  return 0;
}

// cmd_plan's reading: the calibration files, the measured run, then each
// variant's calibrated ranks and its table.
int plan(const Args& args) {
  PB_CHECK(args.positional.size() == 1 && !args.calibrate.empty(), "plan SCENARIO.yaml --calibrate A.h5[,B.h5]");
  const pb::Scenario s = pb::load_scenario(args.positional[0], pb::ScenarioOverrides{args.sets, "", {}});
  const pb::GpuProfile profile = pb::at_gemm_ceiling(pb::gpu_profile(s.gpu_profile), "burst");
  const pb::LinkProfile link = pb::link_profile(profile.link);
  const pb::Calibration calibration = pb::load_calibration(args.calibrate);
  pb::RunResult measured;
  if (!args.measured.empty()) measured = pb::read_measured_run(args.measured, s);
  for (const auto& variant : s.variants) {
    std::vector<pb::RankCalibration> ranks;
    for (int r = 0; r < s.cp; ++r) ranks.push_back(pb::calibrate_rank(s, variant.cuts, r, calibration, profile, link));
    pb::MeasuredSuperstep m;
    const bool has_measured = !args.measured.empty() && measured.find_variant(variant.name) != nullptr;
    if (has_measured) {
      try {
        m = pb::measured_superstep(measured, variant.name);
      } catch (const pb::Error& error) {  // as cmd_plan: name the file
        throw pb::Error("'" + args.measured + "': " + error.what());
      }
    }
    std::printf("%s\n", pb::format_calibration_table(ranks, "calibrated " + variant.name, has_measured ? &m : nullptr)
                            .c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    const Args args = parse_args(argc, argv);
    if (command == "compare") return compare(args);
    if (command == "trace") return trace(args);
    if (command == "slim") return slim(args);
    if (command == "plan") return plan(args);
    std::fprintf(stderr, "usage: results_reader_probe compare|trace|slim|plan ...\n");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "results_reader_probe: error: %s\n", error.what());
  }
  return 2;
}
