// `prefill-bench kernels`: the cut kernels' benchmark, on rank 0's GPU.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "check.h"
#include "commands.h"
#include "run_info.h"

namespace pb {

int cmd_kernels(const Gang& gang, const KernelsBenchOptions& options) {
  if (!gang.is_root()) return 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "prefill-bench kernels: no CUDA device is visible on %s\n", gang.host().c_str());
    return 3;
  }
  const int device = gang.local_rank() % devices;
  PB_CUDA(cudaSetDevice(device));
  RunResult result;
  result.kind = "kernels";
  record_run_info(gang, options.command_line, result);
  record_devices(gang, device, result);
  const std::string path = output_path(options.output, "kernels", "bench");
  const int wrong_cases = run_kernels_bench(options, result);
  write_results(path, result, options.overwrite);
  std::printf("wrote %s\n", path.c_str());
  if (wrong_cases) {
    std::fprintf(stderr, "prefill-bench kernels: %d case(s) where baseline and cut outputs differ\n", wrong_cases);
    return 1;
  }
  return 0;
}

}  // namespace pb
