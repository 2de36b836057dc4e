// What a run (or a plan, or a kernels benchmark) records, in memory and in
// HDF5. One file per run; only rank 0 writes it (the others gather to it).
//
// File layout (schema version kSchemaVersion; README "Results schema"):
//   /                      attributes: schema_version, kind, complete, and every
//                          entry of RunResult::text and RunResult::numbers
//   /variants/<name>/      attributes: cuts, complete (links in creation order)
//     spans                compound table, one row per launch (Span)
//     rank_reps            compound table, one row per (rep, rank) (RankRep)
//     ttft_ms              f64 [reps]
//     outputs/             checksums u64 [ranks, layers], hidden_samples f32
//                          [ranks, rows, cols], last_logits f32 [n];
//                          attribute first_token (i64, -1 when none)
//   /bench                 compound table (BenchRow), kernels benchmark only
//
// Types: string attributes are variable-length UTF-8; numbers f64;
// schema_version and complete i32 (complete: 0 or 1); first_token i64. Strings
// in the compound tables are fixed-length, NUL-padded, kNameBytes bytes (h5py
// reads them as bytes); a longer name is an error, never truncated. Tables and
// arrays may have zero rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pb {

constexpr int kSchemaVersion = 1;
constexpr int kNameBytes = 48;  // family/kernel/variant/shape fields of the tables

// One kernel launch of one superstep: measured (rep >= 0) or planned (rep = -1,
// time = roofline time on the plan's GPU profile).
struct Span {
  int32_t rep = -1;
  int32_t rank = 0;
  int32_t layer = -1;   // -1: outside the layer loop (embedding, first token)
  std::string family;   // "gemm", "land", "fmha", ... (plan.h lists them)
  std::string kernel;   // "land.q_band", "fmha.dense", ...
  double time_us = 0;
  double bytes = 0;     // each input read once, each output written once
  double flops = 0;
};

// Per rep and rank: the superstep's wall, the time spent waiting on the fabric
// (doorbells), the bytes moved over it, and the peak device memory; the
// fabric by transport (fabric.h): bytes over CUDA IPC and received over NCCL,
// the compute stream's waits on each, and the GPU time of this rank's NCCL
// transfers on its link streams (they overlap the compute).
struct RankRep {
  int32_t rep = 0;
  int32_t rank = 0;
  double wall_us = 0;
  double wait_us = 0;
  double fabric_bytes = 0;  // ipc_bytes + nccl_bytes
  double peak_mem_bytes = 0;
  double ipc_bytes = 0;
  double nccl_bytes = 0;
  double ipc_wait_us = 0;
  double nccl_wait_us = 0;
  double nccl_us = 0;
};

// Outputs for cross-run comparison.
struct Outputs {
  int32_t ranks = 0;
  int32_t layers = 0;
  std::vector<uint64_t> checksums;     // [ranks, layers], each layer's output per rank
  int32_t sample_rows = 0;
  int32_t sample_cols = 0;
  std::vector<float> hidden_samples;   // [ranks, sample_rows, sample_cols]
  std::vector<float> last_logits;      // last token of the last rank
  int64_t first_token = -1;
};

struct VariantResult {
  std::string name;                    // "baseline", "all", "land", ...
  std::string cuts;                    // "land=on conv=off ..."
  bool complete = true;
  std::vector<Span> spans;
  std::vector<RankRep> rank_reps;
  std::vector<double> ttft_ms;         // one per finished rep
  Outputs outputs;
};

// One row of the kernels benchmark: a family's variant at one shape.
struct BenchRow {
  std::string family;                  // "land", "conv", "lse_merge", "add2", ...
  std::string kernel;                  // the case tag, e.g. "land.n12288"
  std::string variant;                 // "baseline" | "cut" | "ceiling"
  std::string shape;                   // human-readable, e.g. "16896x12288 of 12288"
  double median_us = 0, min_us = 0, max_us = 0;
  double bytes = 0, flops = 0;
  double tbps = 0;                     // bytes / median
  double tflops = 0;                   // flops / median
  double fraction = 0;                 // of the ceiling that binds this row
  double speedup = 0;                  // baseline median / this median (1 for baselines)
  int32_t reps = 0;
};

struct RunResult {
  std::string kind = "run";            // "run" | "plan" | "kernels"
  bool complete = true;
  std::map<std::string, std::string> text;    // scenario_yaml, git_sha, command_line, ...
  std::map<std::string, double> numbers;      // copy_tbps, gemm_tflops, ...
  std::vector<VariantResult> variants;
  std::vector<BenchRow> bench;

  const VariantResult* find_variant(const std::string& name) const;
};

// Write to `path`. Refuses an existing file unless overwrite is true. The
// file is written to path + ".tmp" and renamed, so a reader (or a run cut
// short) never sees a half-written file.
void write_results(const std::string& path, const RunResult& result, bool overwrite);
// The same refusal, checked before a long run starts.
void check_results_path(const std::string& path, bool overwrite);
// Read a file written by write_results; throws pb::Error naming the file and
// what is missing or of the wrong schema.
RunResult read_results(const std::string& path);

}  // namespace pb
