// Scenarios: what to run, as YAML (scenarios/*.yaml; README "Scenario keys").
//
//   name: cp4-64k
//   model: {preset: k3, layers: 93}        # preset + any model key (model.h)
//   cp: 4                                  # ranks in the CP gang = MPI world size
//   context: 65536                         # tokens, divisible by cp
//   bucket: 16896                          # seg_cap: rows buffers are sized by
//   split_k: 1
//   fabric: auto                           # ipc | nccl | auto (per pair: IPC inside a host, NCCL across)
//   emulate_hosts: 0                       # N > 0: rank r on emulated host r / (cp / N) (one machine)
//   fmha: auto                             # native | cudnn | auto
//   moe_gemm: grouped                      # grouped | loop | cutlass (the expert GEMMs' engine)
//   serialize_ranks: false                 # ranks of one GPU take turns
//   share_memory: vmm                      # vmm | ipc: how ranks of one GPU share weights and arena
//   turn_settle_ms: 0                      # a serialized turn starts after this much GPU idle
//   helped_in_place: false                 # cut 3's helped windows read/write the peer's slab in place
//   wait_timeout_s: 300                    # a doorbell wait past this fails the gang
//   nvtx: true                             # every span an NVTX range (nsys shows the superstep by name)
//   timing: events                         # events | cupti: how a span is timed (timeline.h)
//   ceiling_sustained_s: 8                 # run: the sustained GEMM ceiling's window, s (0: skip)
//   layout: contiguous                     # contiguous | zigzag (2·cp chunks; context divisible by 2·cp)
//   precision: bf16                        # bf16 | fp8 | {gemm: fp8, experts: fp8, fmha: bf16} (precision.h)
//   cuts: all                              # all | none | seed | [land, conv] | {land: on}
//   variants: each-cut                     # or [{name: a, cuts: none}, ...]
//   warmup: 1
//   warmup_layers: 0                       # run: the warm-up reps' depth (0: every layer; 4: one
//                                          # MLA period, every FMHA window shape)
//   reps: 5
//   seed: 1234
//   output: runs/cp4-64k.h5
//   gpu_profile: h200                      # the plan's roofline: h200 | h100 | gb300
//   debug: {delay_family: land, delay_us: 50}   # test-only: slow a family down
//   debug: {poison_arena: true}            # fill the shared turn-local arena with NaN after every turn
//
// Every error names the file, line and column, the key, and the allowed values.
// Command-line overrides (`--set key=value`, dotted keys for model.*,
// `--cuts a,b`, `--variants a,b`) are applied before validation; an error in an overridden value
// names the override instead of a line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuts.h"
#include "model.h"
#include "layout.h"
#include "precision.h"

namespace pb {

// The scenario key ceiling_sustained_s: the sustained GEMM ceiling's window
// (harness/analysis/gemm_ceiling.h), seconds; 0 skips it.
constexpr double kDefaultCeilingSustainedS = 8.0;
constexpr double kMaxCeilingSustainedS = 600.0;

// Buckets are multiples of this: the FMHA query tile (128 rows), two KDA chunks
// (64) and eight conv / merge row runs (16).
constexpr int64_t kBucketTile = 128;

struct VariantSpec {
  std::string name;
  CutSet cuts;
};

struct DebugKnobs {
  std::string delay_family;  // empty: none
  double delay_us = 0;       // added to every launch of that family
  bool poison_arena = false;  // every turn ends by filling the shared turn-local arena with 0xff (NaN)
};

// The scenario key `sweep` (prefill-bench sweep, docs/sweep.md): lists whose
// product is the sweep's points, each point the scenario with its context,
// cp and precision set. `segment` gives the tokens per rank instead of the
// context (context = segment x cp: a sweep over cp at a fixed load a rank).
// An empty list keeps the scenario's own value.
struct Sweep {
  std::vector<int64_t> context;
  std::vector<int64_t> segment;
  std::vector<int> cp;
  std::vector<std::string> precision;  // bf16, fp8
  bool empty() const { return context.empty() && segment.empty() && cp.empty() && precision.empty(); }
};

struct ScenarioOverrides {
  std::vector<std::string> sets;  // "key=value"
  std::string cuts;               // "land,conv", "all", "none"; empty: no override
  std::vector<std::string> variants;  // run only these of the scenario's variants, in this order; empty: all
};

struct Scenario {
  std::string source;   // the file it came from
  std::string text;     // the file verbatim
  std::string overrides;  // the command-line overrides applied, as typed
  std::string name;
  ModelShape model;
  int cp = 1;
  int64_t context = 0;
  int64_t bucket = 0;
  int split_k = 1;
  std::string fabric = "auto";
  int emulate_hosts = 0;  // 0: real hosts; N (divides cp): emulated hosts for the fabric (fabric_plan.h)
  std::string fmha = "auto";
  std::string moe_gemm = "auto";  // kernels/moe/moe_gemm.h's engines
  std::string gpu_profile = "h200";
  bool serialize_ranks = false;
  std::string share_memory = "vmm";  // platform/shared_region.h's modes: vmm | ipc
  int turn_settle_ms = 0;  // serialized turns (and the lane's pair) start after this much GPU idle
  bool helped_in_place = false;  // mla_block.h MlaLane::helped_in_place
  double wait_timeout_s = 0;     // a doorbell wait's deadline; 0: the command's default
  bool nvtx = true;              // timeline.h: every span an NVTX range
  std::string timing = "events";  // timeline.h: a span between two CUDA events, or its kernels' CUPTI records
  double ceiling_sustained_s = kDefaultCeilingSustainedS;  // 0: run skips the sustained ceiling
  Layout layout = Layout::contiguous;  // layout.h: where the tokens lie
  Precision precision;                 // precision.h: bf16 or fp8, per part
  std::vector<VariantSpec> variants;  // at least one
  int warmup = 1;
  // run: the layers a warm-up rep runs, from layer 0 (0: all). The first MLA
  // period meets every FMHA window shape (cuDNN builds a plan per shape on
  // first use), in a fraction of a superstep: the MLA layers repeat their windows.
  int64_t warmup_layers = 0;
  int reps = 5;
  uint64_t seed = 1234;
  std::string output;  // empty: the driver picks runs/<name>-<time>.h5
  DebugKnobs debug;
  Sweep sweep;  // read by `sweep` alone; run, plan and verify take the scenario as it is

  int64_t segment() const { return context / cp; }
  double wait_timeout_or(double command_default) const { return wait_timeout_s > 0 ? wait_timeout_s : command_default; }
};

Scenario parse_scenario(const std::string& text, const std::string& source,
                        const ScenarioOverrides& overrides = {});
// The overrides back from Scenario::overrides' text ("--set k=v --set k2=v2
// --cuts a,b --variants x,y", as parse_scenario writes it), so a results file's
// recorded scenario re-parses exactly (compare, the gate, calibration). Throws
// pb::Error naming an unexpected word.
ScenarioOverrides overrides_from_text(const std::string& text);
// Reads the file; an unreadable file is an error naming it.
Scenario load_scenario(const std::string& path, const ScenarioOverrides& overrides = {});

// "" when the scenario can run on world_size ranks; else the message. `plan`
// also accepts a single process computing every rank.
std::string world_size_problem(const Scenario& s, int world_size, bool plan);

// Whether any of the scenario's variants turns cut `c` on (the blocks size
// what a cut needs, such as overlap's held window, for the whole run).
bool any_variant_has(const Scenario& s, Cut c);

// Parses a cut list as the CLI spells it: "all", "none", "seed", "land,conv".
// Throws pb::Error naming the bad entry and the allowed names, a cut whose
// prerequisite is off, or a cut that does not apply to the precision.
CutSet parse_cut_list(const std::string& list, const std::string& where, const Precision& precision);

std::vector<std::string> fabric_names();
std::vector<std::string> fmha_engine_names();
std::vector<std::string> moe_gemm_engine_names();  // grouped, loop, cutlass (moe_gemm_engine_from_name)
std::vector<std::string> share_memory_names();     // vmm, ipc (share_mode_from_name)
std::vector<std::string> timing_names();           // events, cupti

}  // namespace pb
