// What a results file records about where and how it was made (docs/design.md §6):
// git sha + dirty flag, command line, hosts, library versions, NCCL_* settings.
#pragma once

#include <memory>
#include <string>

#include "cupti_timing.h"
#include "device_memory.h"
#include "gang.h"
#include "telemetry.h"
#include "timeline.h"
#include "results.h"
#include "scenario.h"

namespace pb {

// Fills result.text / result.numbers on rank 0 (collective: every rank calls):
// git, command line, hosts, library versions, NCCL_* settings.
void record_run_info(const Gang& gang, const std::string& command_line, RunResult& result);
// The scenario verbatim, with its overrides; its precision, the cut table,
// and the form of the launch lists (plan.h kLaunchListVersion).
void record_scenario(const Scenario& s, RunResult& result);
// Each rank's GPU (name, UUID, PCI bus id), gathered to rank 0 (collective).
void record_devices(const Gang& gang, int device, RunResult& result);

// Where the superstep's memory lives (collective): numbers memory_weights_bytes,
// memory_arena_bytes (per GPU: once when shared), memory_rank_bytes (this
// GPU's ranks' own buffers), memory_ranks_per_gpu, memory_weights_shared and
// memory_arena_shared (0 / 1), memory_share_granularity_bytes (the shared
// regions' mapping granularity under vmm, else 0), and text memory_share
// (share_memory: vmm | ipc), memory_rank_bytes_each ("rank: bytes" per rank:
// what each rank's blocks took as their own, so call it after the Superstep is
// built) and memory (one line).
void record_memory(const Gang& gang, const GangMemory& memory, RunResult& result);
// What each rank holds beyond the planned budget, as far as it can tell: the
// stack limit its launches grew (gang_device.h) as device_stack_bytes_per_thread,
// and its cuDNN plans (fmha.h) as memory_fmha_plans_bytes (the most of any
// rank) and memory_fmha_plans_each. Collective; rank 0 records.
void record_unplanned_memory(const Gang& gang, RunResult& result);

// The raw telemetry of every GPU (the samples of each GPU's first rank) into
// result.telemetry, or text "telemetry" saying why there is none (collective).
void record_telemetry(const Gang& gang, int device, const GpuTelemetry& telemetry, RunResult& result);

// The scenario's span timing (key timing): under cupti, throws pb::Error
// naming what is missing when libcupti does not load. Call before the long part.
void check_span_timing(const Scenario& s);
// Times `tl`'s spans as the scenario says and records text "timing" ("events"
// or "cupti") in `result`. The returned recorder (null under events) must
// outlive the timeline's spans; one per process.
std::unique_ptr<KernelActivity> start_span_timing(const Scenario& s, Timeline& tl, RunResult& result);

// runs/<name>-<kind>-<UTC time>.h5 when `requested` is empty, else `requested`.
std::string output_path(const std::string& requested, const std::string& name, const std::string& kind);

}  // namespace pb
