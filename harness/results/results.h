// What a run (or a plan, or a kernels benchmark) records, in memory and in
// HDF5. One file per run; only rank 0 writes it (the others gather to it).
//
// File layout (schema version kSchemaVersion; docs/results.md):
//   /                      attributes: schema_version, kind, complete, and every
//                          entry of RunResult::text and RunResult::numbers
//   /variants/<name>/      attributes: cuts, complete (links in creation order)
//     spans                compound table, one row per launch (Span)
//     bells                compound table, one row per doorbell operation (BellOp)
//     rank_reps            compound table, one row per (rep, rank) (RankRep)
//     ttft_ms              f64 [reps]
//     outputs/             checksums u64 [ranks, layers], hidden_samples f32
//                          [ranks, rows, cols], last_logits f32 [n];
//                          attribute first_token (i64, -1 when none)
//     projection/<link>/   the gang replayed from the spans (projection.h), one
//                          group per link; attributes link_source, rep, ttft_ms;
//                          tables reps, ranks, waits, path, timeline (Projection)
//   /bench                 compound table (BenchRow), the benchmarks only
//   /telemetry             compound table (TelemetrySample), run files
//   /cuts                  compound table (CutRecord): the cut table of the build that
//                          wrote the file (harness/config/cuts.h); run and plan files
//
// Version 1 files (no spans.stream, no bells, no projection) are read too:
// every span on stream 0, no bells, no projections. Before version 4, bench
// rows carry no verdict (wrong = -1, error and error_floor NaN) and no file
// has /cuts.
//
// Types: string attributes are fixed-length, NUL-padded UTF-8 (h5py reads them
// as bytes; variable-length ones, in older files, are read too); numbers f64;
// schema_version and complete i32 (complete: 0 or 1); first_token i64. Strings
// in the compound tables are fixed-length, NUL-padded, kNameBytes bytes (h5py
// reads them as bytes); a longer name is an error, never truncated. Tables and
// arrays may have zero rows.
//
// Written in the HDF5 1.8 file format or later: its metadata (superblock,
// object headers, B-trees, heaps) carries checksums, so a damaged header is a
// read error, never data misread. Nothing is variable-length, so nothing lives
// in HDF5's global heap, the one structure HDF5 1.10 reads unchecked.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace pb {

constexpr int kSchemaVersion = 4;
constexpr int kOldestReadableSchemaVersion = 1;
constexpr int kNameBytes = 48;
constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();  // a number the run did not measure  // family/kernel/variant/shape fields of the tables

// One kernel launch of one superstep: measured (rep >= 0) or planned (rep = -1,
// time = roofline time on the plan's GPU profile).
struct Span {
  int32_t rep = -1;
  int32_t rank = 0;
  int32_t layer = -1;   // -1: outside the layer loop (embedding, first token)
  std::string family;   // "gemm", "land", "fmha", ... (plan.h lists them)
  std::string kernel;   // "land.q_band", "fmha.dense", ...
  double time_us = 0;
  double bytes = 0;     // each input read once, each output written once; family
                        // "fabric": the bytes that cross the link for it
  double flops = 0;
  int32_t stream = 0;   // the rank's stream it ran on: 0 = the work stream
  double start_us = -1; // measured: when it started, after the rank's first span of the rep
                        // began (GPU events); -1 unknown (plans, files before schema 3)
};

// One doorbell operation of a measured span (harness/fabric/fabric.h,
// slab_layout.h). A ring stores `value` into doorbell `flag` of rank `peer`
// when its span ends; a wait holds its span's start until this rank's doorbell
// `flag` (stored by `peer`) holds a value >= `value`.
enum class BellOpKind : int8_t { wait = 0, ring = 1 };
const char* bell_op_name(BellOpKind op);  // "wait" | "ring"

struct BellOp {
  int32_t rep = 0;
  int32_t rank = 0;     // the rank that performs it
  int64_t span = 0;     // row of the span performing it in the variant's spans table
  BellOpKind op = BellOpKind::wait;
  int32_t peer = 0;     // ring: the receiving rank; wait: the sending rank
  int32_t flag = 0;     // index in the receiver's doorbell array: doorbell_index(cp, sender, kind)
  std::string kind;     // bell_name(): "window", "returned", "consumed", "released", "halo", ...
  uint64_t value = 0;   // doorbell_value(seq, window)
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
  // The rank's GPU during the rep (telemetry.h; NaN without telemetry and in
  // files before schema 3): median SM clock, highest power, and the fraction
  // of samples with the software power cap among the clock-event reasons.
  double sm_mhz = kNoValue;
  double power_w = kNoValue;
  double power_capped = kNoValue;
  double ipc_bytes = 0;
  double nccl_bytes = 0;
  double ipc_wait_us = 0;
  double nccl_wait_us = 0;
  double nccl_us = 0;
  // Where the wall went besides compute and waits (wall_split.h; NaN when the
  // spans have no starts): GPU idle between its first and last span, and the
  // host-side time outside them.
  double launch_gap_us = kNoValue;
  double host_us = kNoValue;
};

// One telemetry sample of a GPU (harness/observe/telemetry.h).
struct TelemetrySample {
  int32_t rank = 0;         // the rank that sampled (the first rank of its GPU)
  double t_ms = 0;          // since that rank's sampler started
  double sm_mhz = 0, mem_mhz = 0, power_w = 0, temp_c = 0;
  uint64_t reasons = 0;     // NVML clock-event (throttle) reason bits
};
constexpr uint64_t kClockEventSwPowerCap = 0x4;  // NVML's software power cap reason

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

// ---- the gang projected from a serialized run (projection.h, docs/design.md §9) ----

// One rep replayed.
struct ProjectedRep {
  int32_t rep = 0;
  double ttft_ms = 0;             // projected: the end of the last span of the gang
  double serialized_ttft_ms = 0;  // the run's own TTFT of this rep; NaN when not recorded
  double host_ms = 0;             // serialized_ttft_ms - the sum of every span of the rep: host-side
                                  // time of the serialized run (launches, turn hand-offs, read-back),
                                  // not part of the projection; NaN when not recorded
};

// One rank of the detailed rep. Its critical path is the chain of spans that
// ends with its last span; path_compute_us is the part on its own spans, the
// rest (per doorbell, in ProjectedWait::path_us) ran on other ranks.
struct RankProjection {
  int32_t rank = 0;
  double end_us = 0;           // its last span's end
  double busy_us = 0;          // time some span of the rank runs (union over its streams)
  double wait_us = 0;          // time its streams stalled on doorbells (sum over streams)
  double idle_us = 0;          // TTFT - busy_us: its waits and the tail after its end
  double path_compute_us = 0;  // its own spans on its critical path
};

// Per rank and doorbell waited on (sender `peer`, `kind`).
struct ProjectedWait {
  int32_t rank = 0;
  int32_t peer = 0;
  std::string kind;
  double stall_us = 0;  // time the rank's streams stalled on it
  double path_us = 0;   // time of the rank's critical path spent on other ranks, entered through it
};

// One span of the gang's critical path, in time order: it started when the
// previous step ended. peer >= 0: the step waited on doorbell `kind` of `peer`,
// which the previous step rang (waited_us: how long its stream stalled);
// peer = -1: the previous step is the span before it on its stream.
struct PathStep {
  int64_t span = 0;  // row of the variant's spans table
  int32_t rank = 0;
  int32_t stream = 0;
  int32_t layer = -1;
  std::string kernel;
  double start_us = 0;
  double end_us = 0;
  int32_t peer = -1;
  std::string kind;
  double waited_us = 0;
};

// Every span of the detailed rep, as projected (the gang's timeline).
struct ProjectedSpan {
  int64_t span = 0;  // row of the variant's spans table
  double start_us = 0;
  double end_us = 0;
};

struct Projection {
  std::string link;         // "measured" or a link profile name (profile.h)
  std::string link_source;  // where the link's figures come from
  int32_t rep = 0;          // the detailed rep: the lower median of reps' projected TTFT
  double ttft_ms = 0;       // its projected TTFT
  std::vector<ProjectedRep> reps;
  std::vector<RankProjection> ranks;
  std::vector<ProjectedWait> waits;
  std::vector<PathStep> path;
  std::vector<ProjectedSpan> timeline;  // empty in a slimmed file: project_rep(variant, rep, link) rebuilds it
};

struct VariantResult {
  std::string name;                    // "baseline", "all", "land", ...
  std::string cuts;                    // "land=on conv=off ..."
  bool complete = true;
  std::vector<Span> spans;
  std::vector<BellOp> bells;           // span: a row of `spans`
  std::vector<RankRep> rank_reps;
  std::vector<double> ttft_ms;         // one per finished rep
  Outputs outputs;
  std::vector<Projection> projections; // one per link, distinct links

  // The projection over `link`, else the first recorded; null when none is.
  const Projection* projection(const std::string& link) const;
};

// ---- each record's fields, written once ----
// visit_fields(record, f) calls f(name, field, since) for every field in
// order: its name in the results file, a reference to it, and the schema
// version it came with. The gang's packing (platform/gang.cpp) and the file's
// rows (results.cpp) both walk these lists; a new field is one line here.
template <class S, class F>
std::enable_if_t<std::is_same_v<std::remove_const_t<S>, Span>> visit_fields(S& s, F&& f) {
  f("rep", s.rep, 1);
  f("rank", s.rank, 1);
  f("layer", s.layer, 1);
  f("family", s.family, 1);
  f("kernel", s.kernel, 1);
  f("time_us", s.time_us, 1);
  f("bytes", s.bytes, 1);
  f("flops", s.flops, 1);
  f("stream", s.stream, 2);
  f("start_us", s.start_us, 3);
}

template <class S, class F>
std::enable_if_t<std::is_same_v<std::remove_const_t<S>, BellOp>> visit_fields(S& b, F&& f) {
  f("rep", b.rep, 2);
  f("rank", b.rank, 2);
  f("span", b.span, 2);
  f("op", b.op, 2);
  f("peer", b.peer, 2);
  f("flag", b.flag, 2);
  f("kind", b.kind, 2);
  f("value", b.value, 2);
}

template <class S, class F>
std::enable_if_t<std::is_same_v<std::remove_const_t<S>, RankRep>> visit_fields(S& r, F&& f) {
  f("rep", r.rep, 1);
  f("rank", r.rank, 1);
  f("wall_us", r.wall_us, 1);
  f("wait_us", r.wait_us, 1);
  f("fabric_bytes", r.fabric_bytes, 1);
  f("peak_mem_bytes", r.peak_mem_bytes, 1);
  f("sm_mhz", r.sm_mhz, 3);
  f("power_w", r.power_w, 3);
  f("power_capped", r.power_capped, 3);
  f("ipc_bytes", r.ipc_bytes, 3);
  f("nccl_bytes", r.nccl_bytes, 3);
  f("ipc_wait_us", r.ipc_wait_us, 3);
  f("nccl_wait_us", r.nccl_wait_us, 3);
  f("nccl_us", r.nccl_us, 3);
  f("launch_gap_us", r.launch_gap_us, 3);
  f("host_us", r.host_us, 3);
}

// Appends one rank's spans of one rep and their doorbell operations to
// `variant`, whose bells' span fields index `spans` (0 = spans[0]); they are
// shifted to rows of variant.spans.
void append_spans(VariantResult& variant, const std::vector<Span>& spans, const std::vector<BellOp>& bells);

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
  // The row's correctness, checked where it was timed: elements that differ from
  // what the row promises (bit for bit against the baseline or a reference; -1:
  // not counted), and a measured error against its floor (NaN: none measured).
  int64_t wrong = -1;
  double error = kNoValue;
  double error_floor = kNoValue;

  // Whether the row's own check failed (wrong > 0, or error above error_floor or NaN where a floor is set).
  bool failed() const;
};

// One cut of the cut table (harness/config/cuts.h's CutInfo), as a file records it.
struct CutRecord {
  std::string name, family;
  std::string prerequisite;  // "" when none
  std::string exactness;     // exactness_name()
  double floor = 0;
  int32_t seed = 0;          // 1: one of the seed PR's five
  int32_t needs_fp8 = 0;     // 1: applies only where some part runs fp8
  std::string bench_family;  // "" when none
};

struct RunResult {
  std::string kind = "run";            // "run" | "plan" | "kernels"
  bool complete = true;
  std::map<std::string, std::string> text;    // scenario_yaml, git_sha, command_line, ...
  std::map<std::string, double> numbers;      // copy_tbps, gemm_tflops, ...
  std::vector<VariantResult> variants;
  std::vector<BenchRow> bench;
  std::vector<TelemetrySample> telemetry;     // /telemetry (run files; schema 3)
  std::vector<CutRecord> cuts;                // /cuts (schema 4)

  const VariantResult* find_variant(const std::string& name) const;
};

// Rank 0's GPU as text["gpus"] records it ("rank 0: NVIDIA H200 GPU-<uuid> bus
// ..." -> "NVIDIA H200"); "" when the file records none.
std::string gpu_name(const RunResult& run);
// numbers[key] when it is recorded and positive, else kNoValue (a ceiling,
// clock or power the run did not measure).
double positive_number(const RunResult& run, const std::string& key);

// Write to `path`. Refuses an existing file unless overwrite is true. The
// file is written to path + ".tmp" and renamed, so a reader (or a run cut
// short) never sees a half-written file.
void write_results(const std::string& path, const RunResult& result, bool overwrite);
// The same refusal, a path that is not a regular file (a device, a FIFO, a
// directory: `-o /dev/null --overwrite` must never replace /dev/null), a
// symbolic link out of the path's folder, and a folder that cannot take a new
// file (missing, not a folder, read-only), checked before a long run starts.
void check_results_path(const std::string& path, bool overwrite);
// Drops every projection's per-span timeline, over half of a full-size run's
// file (the replay rebuilds it from the spans and doorbells the file keeps:
// `trace` does); the projections' TTFT, ranks, waits and critical path stay.
// Records what it dropped in text["slimmed"]. `prefill-bench slim`.
void drop_projection_timelines(RunResult& result);

// Read a file written by write_results; throws pb::Error naming the file and
// what is missing or of the wrong schema.
RunResult read_results(const std::string& path);

}  // namespace pb
