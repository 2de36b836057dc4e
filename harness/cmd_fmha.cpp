// `prefill-bench fmha`: the FMHA engines' benchmark, on rank 0's GPU.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "check.h"
#include "commands.h"
#include "run_info.h"

namespace pb {

int cmd_fmha(const Gang& gang, const FmhaBenchOptions& options) {
  if (!gang.is_root()) return 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "prefill-bench fmha: no CUDA device is visible on %s\n", gang.host().c_str());
    return 3;
  }
  const int device = gang.local_rank() % devices;
  PB_CUDA(cudaSetDevice(device));
  RunResult result;
  result.kind = "fmha";
  record_run_info(gang, options.command_line, result);
  record_devices(gang, device, result);
  const std::string path = output_path(options.output, "fmha", "bench");
  const int wrong_cases = run_fmha_bench(options, result);
  write_results(path, result, options.overwrite);
  std::printf("wrote %s\n", path.c_str());
  if (wrong_cases) {
    std::fprintf(stderr, "prefill-bench fmha: %d case(s) with sampled rows outside the floors of fmha.h\n",
                 wrong_cases);
    return 1;
  }
  return 0;
}

}  // namespace pb
