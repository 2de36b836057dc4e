// `prefill-bench kernels`, `fmha`, `kda`, `moe` and `gemm`: single-process benchmarks
// on the first visible GPU, written to one results file each.

#include <cstdio>
#include <functional>

#include "check.h"
#include "commands.h"
#include "gang_device.h"
#include "run_info.h"

namespace pb {

namespace {

// Runs `bench` (which returns the number of cases that failed validation) on
// this process's GPU and writes its results; the common frame of both commands.
int run_bench_command(const Gang& gang, const char* kind, const std::string& command_line,
                      const std::string& output, bool overwrite, const char* failure_text,
                      const std::function<int(RunResult&)>& bench) {
  PB_CHECK(gang.size() == 1, std::string("prefill-bench ") + kind +
                                 " runs as one process on one GPU; start it without mpirun (or with -np 1)");
  const std::string path = output_path(output, kind, "bench");
  check_results_path(path, overwrite);  // before the long part
  const int device = select_gang_device(gang, kind);  // one process: it is rank 0
  if (device < 0) return 3;
  RunResult result;
  result.kind = kind;
  record_run_info(gang, command_line, result);
  record_devices(gang, device, result);
  const int failed_cases = bench(result);
  write_results(path, result, overwrite);
  std::printf("wrote %s\n", path.c_str());
  if (failed_cases) {
    std::fprintf(stderr, "prefill-bench %s: %d case(s) %s\n", kind, failed_cases, failure_text);
    return 1;
  }
  return 0;
}

}  // namespace

int cmd_kernels(const Gang& gang, const KernelsBenchOptions& options) {
  return run_bench_command(gang, "kernels", options.command_line, options.output, options.overwrite,
                           "where baseline and cut outputs differ",
                           [&](RunResult& result) { return run_kernels_bench(options, result); });
}

int cmd_fmha(const Gang& gang, const FmhaBenchOptions& options) {
  return run_bench_command(gang, "fmha", options.command_line, options.output, options.overwrite,
                           "with sampled rows outside the floors of fmha.h",
                           [&](RunResult& result) { return run_fmha_bench(options, result); });
}

int cmd_kda(const Gang& gang, const KdaBenchOptions& options) {
  return run_bench_command(gang, "kda", options.command_line, options.output, options.overwrite,
                           "outside the floors of kda.h",
                           [&](RunResult& result) { return run_kda_bench(options, result); });
}

int cmd_moe(const Gang& gang, const MoeBenchOptions& options) {
  return run_bench_command(gang, "moe", options.command_line, options.output, options.overwrite,
                           "failed validation (expert GEMM floor, cut bit identity, plan names or argmax)",
                           [&](RunResult& result) { return run_moe_bench(options, result); });
}

int cmd_gemm(const Gang& gang, const GemmBenchOptions& options) {
  return run_bench_command(gang, "gemm", options.command_line, options.output, options.overwrite,
                           "outside the fp8 GEMM's floor against bf16",
                           [&](RunResult& result) { return run_gemm_bench(options, result); });
}

}  // namespace pb
