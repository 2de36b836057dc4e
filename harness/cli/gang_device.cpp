#include "gang_device.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "check.h"
#include "links.h"

namespace pb {

namespace {
constexpr size_t kStackBytes = 64;  // per thread: above the largest frame of the project's kernels
}  // namespace

FabricPlan check_fabric(const Scenario& s, const Gang& gang, const char* command) {
  FabricPlan plan = gang_fabric_plan(gang, s);
  prepare_nccl_environment(plan, gang.rank(), s.serialize_ranks);
  if (gang.is_root() && plan.any_nccl()) {
    const std::string hosts =
        plan.emulated_hosts > 0 ? " over " + std::to_string(plan.emulated_hosts) + " emulated hosts" : "";
    std::printf("prefill-bench %s: fabric %s%s: %s\n", command, plan.mode.c_str(), hosts.c_str(),
                plan.describe_pairs().c_str());
  }
  return plan;
}

GangScenario load_gang_scenario(const Gang& gang, const ScenarioArgs& args, const char* command) {
  GangScenario g{load_scenario_on_gang(gang, args), {}};
  const std::string problem = world_size_problem(g.scenario, gang.size(), /*plan=*/false);
  PB_CHECK(problem.empty(), problem);
  const std::string planned_only = precision_planned_only(g.scenario.precision);
  PB_CHECK(planned_only.empty(), g.scenario.source + ": " + planned_only);
  g.fabric = check_fabric(g.scenario, gang, command);
  return g;
}

int select_gang_device(const Gang& gang, const char* command, const std::string& more) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (gang.is_root())
      std::fprintf(stderr, "prefill-bench %s: no CUDA device is visible on %s%s\n", command, gang.host().c_str(),
                   more.c_str());
    return -1;
  }
  const int device = gang.local_rank() % devices;
  PB_CUDA(cudaSetDevice(device));
  // A context reserves every thread's stack for every thread the GPU can hold,
  // 1 KiB a thread by default, in each process. kStackBytes covers the
  // largest frame of the project's kernels (ptxas's figures: docs/design.md §8);
  // a launch that needs more grows it (the driver does, and never shrinks it).
  // A driver that refuses keeps its default; the run records the limit.
  if (cudaDeviceSetLimit(cudaLimitStackSize, kStackBytes) != cudaSuccess) (void)cudaGetLastError();
  return device;
}

void record_fabric(const FabricPlan& plan, RunResult& result) {
  result.text["fabric"] = plan.mode;
  result.text["fabric_pairs"] = plan.describe_pairs();
  result.text["fabric_hosts"] = plan.describe_hosts();
  result.numbers["emulated_hosts"] = plan.emulated_hosts;
  result.text[kFabricSpanBytesKey] = kFabricSpanBytesLink;  // the spans take plan.h span_bytes
}

}  // namespace pb
