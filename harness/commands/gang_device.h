// What every GPU command of the gang does first: pick this rank's device
// (local rank mod visible devices) and check that the scenario's fabric can
// serve the gang (CUDA IPC: every rank on one node; NCCL is not built yet).
#pragma once

#include <string>

#include "gang.h"
#include "scenario.h"

namespace pb {

// The device selected (cudaSetDevice done), or -1 when none is visible: rank 0
// then has printed "prefill-bench <command>: no CUDA device is visible on
// <host>" followed by `more` (e.g. what to use instead), and the caller returns 3.
int select_gang_device(const Gang& gang, const char* command, const std::string& more = "");

// Throws pb::Error naming the scenario file and key when the gang needs a
// fabric this build cannot give it.
void check_fabric(const Scenario& s, const Gang& gang, const char* command);

}  // namespace pb
