// What every GPU command of the gang does first: check that the scenario's
// fabric can serve the gang and prepare the process for it (before CUDA
// starts), then pick this rank's device (local rank mod visible devices).
#pragma once

#include <string>
#include <vector>

#include "commands.h"
#include "fabric_plan.h"
#include "gang.h"
#include "results.h"
#include "scenario.h"

namespace pb {

// The fabric of the gang for `s` (fabric_plan.h): which pairs are CUDA IPC and
// which NCCL, from the ranks' hosts or the scenario's emulated hosts. Throws
// pb::Error naming the scenario file and key (e.g. fabric ipc across hosts,
// naming them). Sets this process's NCCL environment (NCCL_NVLS_ENABLE=0,
// NCCL_HOSTID for emulated hosts; CUDA_MODULE_LOADING=EAGER when unset and the
// ranks run concurrently), so call it before any CUDA call. Collective over the gang.
FabricPlan check_fabric(const Scenario& s, const Gang& gang, const char* command);

// The scenario of a device command (run, lane, verify), before CUDA starts:
// read on rank 0 and broadcast, the gang's size checked against it, its
// fabric checked and prepared (check_fabric).
struct GangScenario {
  Scenario scenario;
  FabricPlan fabric;
};
GangScenario load_gang_scenario(const Gang& gang, const ScenarioArgs& args, const char* command);

// The device selected (cudaSetDevice done, its per-thread stack limit set
// just above the project's kernels' largest frame), or -1 when none is visible: rank 0
// then has printed "prefill-bench <command>: no CUDA device is visible on
// <host>" followed by `more` (e.g. what to use instead), and the caller returns 3.
int select_gang_device(const Gang& gang, const char* command, const std::string& more = "");

// The fabric into the results' root attributes: fabric (the mode),
// fabric_pairs, fabric_hosts, emulated_hosts (0 for real hosts: an emulated
// run is marked as such).
void record_fabric(const FabricPlan& plan, RunResult& result);

}  // namespace pb
