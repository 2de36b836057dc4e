// What a results file records about where and how it was made (docs/design.md §6):
// git sha + dirty flag, command line, hosts, library versions, NCCL_* settings.
#pragma once

#include <string>

#include "device_memory.h"
#include "gang.h"
#include "results.h"
#include "scenario.h"

namespace pb {

// Fills result.text / result.numbers on rank 0 (collective: every rank calls):
// git, command line, hosts, library versions, NCCL_* settings.
void record_run_info(const Gang& gang, const std::string& command_line, RunResult& result);
// The scenario verbatim, with its overrides.
void record_scenario(const Scenario& s, RunResult& result);
// Each rank's GPU (name, UUID, PCI bus id), gathered to rank 0 (collective).
void record_devices(const Gang& gang, int device, RunResult& result);

// Where the superstep's memory lives (collective): numbers memory_weights_bytes,
// memory_arena_bytes (per GPU: once when shared), memory_rank_bytes (this
// GPU's ranks' own buffers), memory_ranks_per_gpu, memory_weights_shared and
// memory_arena_shared (0 / 1), and text memory_rank_bytes_each ("rank: bytes"
// per rank) and memory (one line).
void record_memory(const Gang& gang, const GangMemory& memory, RunResult& result);

// runs/<name>-<kind>-<UTC time>.h5 when `requested` is empty, else `requested`.
std::string output_path(const std::string& requested, const std::string& name, const std::string& kind);

}  // namespace pb
