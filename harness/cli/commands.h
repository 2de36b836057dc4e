// The driver's subcommands. Each runs on every rank of the gang and returns
// the process exit code; errors are thrown (main turns them into a message
// naming the rank and an abort of the job).
#pragma once

#include <string>
#include <vector>

#include "compare.h"
#include "fmha_bench.h"
#include "gemm_bench.h"
#include "gang.h"
#include "kda_bench.h"
#include "kernels_bench.h"
#include "moe_bench.h"
#include "scenario.h"
#include "trace.h"

namespace pb {

// The options of the scenario commands; each command registers the ones it
// uses (main.cpp): plan, run, lane all; verify and ranks the scenario and --set.
struct ScenarioArgs {
  std::string path;
  std::vector<std::string> sets;  // --set key=value
  std::string cuts;               // --cuts a,b
  std::vector<std::string> variants;  // --variants a,b: some of the scenario's variants
  std::string output;             // --output
  bool overwrite = false;         // --overwrite
  std::string profile;            // --profile (plan)
  std::string ceiling = "burst";  // --ceiling (plan): the GEMM ceiling of the roofline, burst | sustained
  int ranks_per_gpu = 0;          // --ranks-per-gpu (plan's memory budget); 0: cp with serialize_ranks, else 1
  std::string link;               // --link (plan): the fabric's link profile; empty: the GPU profile's
  std::vector<std::string> calibrate;  // --calibrate (plan): benchmark files
  std::string measured;           // --measured (plan): a run to check the calibrated plan against
  double fmha_tolerance = 0.10;   // --fmha-tolerance (lane): a rank's FMHA off pairs x pair time by more exits 1
  std::string command_line;
};

// `prefill-bench sweep` (cmd_sweep.cpp): the scenario's options, and
struct SweepArgs {
  ScenarioArgs scenario;   // path, --set, --cuts, --variants, -o, --overwrite, --profile, --calibrate
  bool plan_only = false;  // --plan: plan every point, run none
  int gpus = 1;            // --gpus: the GPUs a point runs on; a point of more ranks runs serialized
};
int cmd_sweep(const Gang& gang, const SweepArgs& args);

// `prefill-bench --version`: the version, the git sha (and whether the tree
// was dirty), and the build options (cuDNN, CUTLASS, CUDA architectures and
// toolkit), one per line.
std::string version_text();

// Rank 0 reads the file, every rank parses the same text with the same overrides.
Scenario load_scenario_on_gang(const Gang& gang, const ScenarioArgs& args);

int cmd_plan(const Gang& gang, const ScenarioArgs& args);
int cmd_run(const Gang& gang, const ScenarioArgs& args);
int cmd_lane(const Gang& gang, const ScenarioArgs& args);
int cmd_verify(const Gang& gang, const ScenarioArgs& args);
int cmd_compare(const Gang& gang, const CompareOptions& options);

struct TraceArgs {
  std::string input, output;  // output empty: <input without .h5>.trace.json.gz
  TraceOptions options;
  bool overwrite = false;
};
int cmd_trace(const Gang& gang, const TraceArgs& args);

// The default name of a file made from a results file: `input` less a ".h5"
// ending, then `suffix` (trace: ".trace.json.gz", slim: "-slim.h5").
inline std::string beside_results(const std::string& input, const std::string& suffix) {
  const bool h5 = input.size() > 3 && input.compare(input.size() - 3, 3, ".h5") == 0;
  return (h5 ? input.substr(0, input.size() - 3) : input) + suffix;
}

struct SlimArgs {
  std::string input, output;  // output empty: <input without .h5>-slim.h5
  bool overwrite = false;
};
int cmd_slim(const Gang& gang, const SlimArgs& args);

int cmd_kernels(const Gang& gang, const KernelsBenchOptions& options);
int cmd_fmha(const Gang& gang, const FmhaBenchOptions& options);
int cmd_kda(const Gang& gang, const KdaBenchOptions& options);
int cmd_moe(const Gang& gang, const MoeBenchOptions& options);
int cmd_gemm(const Gang& gang, const GemmBenchOptions& options);

}  // namespace pb
