// `prefill-bench run`: the measured superstep. Needs a CUDA device per rank.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "check.h"
#include "commands.h"

namespace pb {

namespace {

// The number of visible devices, 0 when none (or no driver).
int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace

int cmd_run(const Gang& gang, const ScenarioArgs& args) {
  const Scenario s = load_scenario_on_gang(gang, args);
  const std::string problem = world_size_problem(s, gang.size(), /*plan=*/false);
  PB_CHECK(problem.empty(), problem);
  const int devices = visible_devices();
  if (devices == 0) {
    if (gang.is_root())
      std::fprintf(stderr,
                   "prefill-bench run: no CUDA device is visible on %s, so the superstep cannot run here.\n"
                   "  `prefill-bench plan %s` computes the superstep's analytic plan (launches, bytes, FLOPs,\n"
                   "  roofline per rank) without a GPU.\n",
                   gang.host().c_str(), args.path.c_str());
    return 3;
  }
  const int device = gang.local_rank() % devices;
  PB_CUDA(cudaSetDevice(device));
  if (gang.is_root())
    std::fprintf(stderr,
                 "prefill-bench run: the measured superstep is not built yet (issue 9); "
                 "use `prefill-bench plan` and `prefill-bench kernels`.\n");
  return 4;
}

}  // namespace pb
